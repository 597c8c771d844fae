//! The interface a key-value store implements to hold widesql's data.
//!
//! It is deliberately small — named ordered trees, point reads, ordered
//! range scans in both directions, and atomic batches across trees — so
//! that sled can be swapped for another store (a distributed one, or the
//! in-memory one tests inject faults with) without touching the layers
//! above. [`Storage`](super::Storage) adds what every backend shares: the
//! format check, tree caching, key counters and the write epoch.

use std::any::Any;
use std::fmt::Debug;
use std::ops::Bound;
use std::sync::Arc;

use super::Bytes;

/// What a backend reports when an operation fails.
pub type BackendError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// One write of a batch.
#[derive(Debug, Clone)]
pub enum Write {
    /// Set a key to a value.
    Put(Bytes, Bytes),
    /// Remove a key.
    Delete(Bytes),
}

/// The writes of a batch that go to one tree, in order.
pub type TreeWrites = (Arc<dyn BackendTree>, Vec<Write>);

/// An ordered scan a backend returns.
pub type BackendIter = Box<dyn Iterator<Item = Result<(Bytes, Bytes), BackendError>> + Send>;

/// A key-value store: named ordered trees and a default tree for meta keys.
pub trait Backend: Send + Sync + Debug {
    /// Opens (creating if needed) the tree called `name`.
    fn open_tree(&self, name: &[u8]) -> Result<Arc<dyn BackendTree>, BackendError>;
    /// Removes the tree called `name` with its data; `false` if there was none.
    fn drop_tree(&self, name: &[u8]) -> Result<bool, BackendError>;
    /// The names of all trees, the default tree excluded.
    fn tree_names(&self) -> Vec<Vec<u8>>;
    /// Reads a key of the default tree.
    fn meta_get(&self, key: &[u8]) -> Result<Option<Bytes>, BackendError>;
    /// Writes a key of the default tree and waits until it is durable.
    fn meta_put_durable(&self, key: &[u8], value: &[u8]) -> Result<(), BackendError>;
    /// Whether the store holds nothing at all (no tree, no meta key).
    fn is_empty(&self) -> bool;
    /// Applies every write atomically: readers and a crash see all of them
    /// or none.
    fn apply(&self, batch: &[TreeWrites]) -> Result<(), BackendError>;
    /// Waits until every applied write is durable.
    fn flush(&self) -> Result<(), BackendError>;
    /// Applies `batch` as [`Backend::apply`] does and, when `durable`,
    /// waits until it is durable: one call where a store's calls cross a
    /// network.
    fn apply_and_flush(&self, batch: &[TreeWrites], durable: bool) -> Result<(), BackendError> {
        self.apply(batch)?;
        if durable {
            self.flush()?;
        }
        Ok(())
    }
    /// Bytes the store occupies on disk (or in memory).
    fn size_on_disk(&self) -> Result<u64, BackendError>;
    /// Settles the writes this process handed the store and gave up
    /// waiting for: when it returns, each of them has landed or never
    /// will. A store whose calls always answer has none.
    fn settle(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

/// One tree of a [`Backend`].
pub trait BackendTree: Send + Sync + Debug {
    /// The tree's name.
    fn name(&self) -> &[u8];
    /// The value stored under `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, BackendError>;
    /// The entries with keys in `(lo, hi)`, in key order or reversed.
    fn range(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, reverse: bool) -> BackendIter;
    /// The tree as `Any`, so that a backend finds its own trees in a batch.
    fn as_any(&self) -> &dyn Any;
}
