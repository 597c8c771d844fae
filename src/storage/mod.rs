//! The storage layer: the only module that calls a key-value store.
//!
//! It offers a narrow key-value interface — named trees with `get`, ordered
//! `range` scans in both directions, atomic [`WriteBatch`](crate::storage::WriteBatch)es that may span
//! several trees, and `flush` — over a [`Backend`](crate::storage::Backend): sled by default
//! ([`SledBackend`](crate::storage::SledBackend)), or the in-memory [`MemoryBackend`](crate::storage::MemoryBackend) that tests inject
//! faults with. A distributed KV store would be one more backend; nothing
//! above this module names sled.
//!
//! A [`Tree`](crate::storage::Tree) is a whole backend tree, or a *key space* of one
//! ([`Storage::key_space`](crate::storage::Storage::key_space)): the keys under a prefix, which the handle adds
//! on writes and strips from what scans return. A batch that writes several
//! key spaces of one backend tree is one single-tree batch in the backend;
//! sled applies those far more cheaply than a transaction across trees
//! (see *One tree per table* in `docs/design.md`).
//!
//! Every tree counts the keys its scans and reads visit ([`Tree::keys_read`](crate::storage::Tree::keys_read)):
//! tests use the counters to prove that a scan touched only what it had to.
//!
//! The default tree holds a few meta keys: the format version (checked on
//! open, see [`crate::keys::FORMAT_VERSION`]) and the timestamp lease of the
//! [`crate::clock`].

mod backend;
mod batch;
mod bytes;
mod commit;
mod error;
mod memory;
mod range;
mod read_ahead;
mod routes;
mod sled_backend;
mod tree;
mod watch;

use std::collections::HashMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::keys::{prefix_successor, FORMAT_VERSION, READS_AS_CURRENT};

pub use backend::{Backend, BackendError, BackendIter, BackendTree, TreeWrites, Write};
pub use batch::{Durability, WriteBatch};
pub use bytes::Bytes;
pub use commit::{CommitStats, Health};
pub use error::StorageError;
pub use memory::{Fault, MemoryBackend};
pub use range::RangeIter;
pub use routes::{Home, KeyRange, Routes};
pub use sled_backend::SledBackend;
pub use tree::Tree;
pub use watch::Watch;

const META_FORMAT: &[u8] = b"widesql/format";

/// How long a storage call may run before it counts as stalled: far past
/// any flush seen here (the slowest, of a 64 MiB batch, takes about a
/// second), far short of the 20 minutes a deadlocked writer was left.
pub const DEFAULT_STALL_LIMIT: Duration = Duration::from_secs(60);

/// How to open the storage.
#[derive(Debug, Clone)]
pub struct StorageOptions {
    /// Bytes of page cache. Default: 64 MiB.
    pub cache_capacity: u64,
    /// Background flush interval in milliseconds; `None` flushes only on
    /// [`Storage::flush`] and close. Default: 500 ms (sled's default).
    pub flush_every_ms: Option<u64>,
    /// Remove the directory when the database is closed. Default: `false`.
    pub temporary: bool,
    /// How long a storage write or flush may run before it counts as
    /// stalled. Default: 60 s.
    pub stall_limit: Duration,
}

impl Default for StorageOptions {
    fn default() -> Self {
        Self {
            cache_capacity: 64 * 1024 * 1024,
            flush_every_ms: Some(500),
            temporary: false,
            stall_limit: DEFAULT_STALL_LIMIT,
        }
    }
}

/// An open store: a backend, the trees opened on it, and the commit
/// pipeline every write goes through.
#[derive(Debug)]
pub struct Storage {
    /// Declared first: dropping it ends the commit thread before the
    /// backend's last handle goes.
    commit: commit::Pipeline,
    backend: Arc<dyn Backend>,
    path: PathBuf,
    /// Open trees and key spaces by backend tree name and key prefix.
    trees: RwLock<HashMap<KeySpaceId, Tree>>,
    watches: Arc<watch::Watches>,
}

/// A backend tree's name and a key prefix in it.
type KeySpaceId = (Vec<u8>, Vec<u8>);

impl Storage {
    /// Opens (creating if needed) the sled store in `path`.
    pub fn open(path: &Path, options: &StorageOptions) -> Result<Storage, StorageError> {
        let backend = SledBackend::open(path, options)?;
        Storage::with_backend(Arc::new(backend), path, options.stall_limit)
    }

    /// A store over `backend`; `path` names it in errors. A write or flush
    /// that runs past `stall_limit` fails and stops writes.
    pub fn with_backend(
        backend: Arc<dyn Backend>,
        path: &Path,
        stall_limit: Duration,
    ) -> Result<Storage, StorageError> {
        let commit = commit::Pipeline::start(
            Arc::clone(&backend),
            path.display().to_string(),
            stall_limit,
        )
        .map_err(|source| StorageError::Store {
            path: path.display().to_string(),
            source: format!("cannot start the commit thread: {source}").into(),
        })?;
        let storage = Storage {
            commit,
            backend,
            path: path.to_path_buf(),
            trees: RwLock::new(HashMap::new()),
            watches: Arc::default(),
        };
        storage.check_format()?;
        Ok(storage)
    }

    fn check_format(&self) -> Result<(), StorageError> {
        match self
            .backend
            .meta_get(META_FORMAT)
            .map_err(|e| self.err(e))?
        {
            Some(bytes) => {
                let found = <[u8; 4]>::try_from(&bytes[..])
                    .map(u32::from_be_bytes)
                    .map_err(|_| StorageError::NotWidesql {
                        path: self.path_str(),
                        reason: "the format version key is malformed".into(),
                    })?;
                if READS_AS_CURRENT.contains(&found) {
                    // Nothing to rewrite; from now on the database may hold
                    // what only this format reads.
                    self.meta_put_durable(META_FORMAT, &FORMAT_VERSION.to_be_bytes())?;
                } else if found != FORMAT_VERSION {
                    return Err(StorageError::UnsupportedFormat {
                        path: self.path_str(),
                        found,
                        supported: FORMAT_VERSION,
                    });
                }
            }
            None => {
                if !self.backend.is_empty() {
                    return Err(StorageError::NotWidesql {
                        path: self.path_str(),
                        reason: "it has data but no format version".into(),
                    });
                }
                self.meta_put_durable(META_FORMAT, &FORMAT_VERSION.to_be_bytes())?;
            }
        }
        Ok(())
    }

    fn path_str(&self) -> String {
        self.path.display().to_string()
    }

    fn err(&self, source: BackendError) -> StorageError {
        StorageError::Store {
            path: self.path_str(),
            source,
        }
    }

    /// Opens (creating if needed) the tree called `name`.
    pub fn tree(&self, name: &[u8]) -> Result<Tree, StorageError> {
        self.key_space(name, &[])
    }

    /// Opens (creating if needed) the key space `prefix` of the tree called
    /// `name`: the keys of that tree that start with `prefix`, seen without
    /// it. Key spaces of one tree must not nest: no prefix may start with
    /// another. The whole tree ([`Storage::tree`]) may be opened beside
    /// its key spaces to scan them all; a write through it does not move
    /// their write epochs, so the table layer only scans it.
    pub fn key_space(&self, name: &[u8], prefix: &[u8]) -> Result<Tree, StorageError> {
        let id = (name.to_vec(), prefix.to_vec());
        if let Some(tree) = self
            .trees
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
        {
            return Ok(tree.clone());
        }
        let mut trees = self.trees.write().unwrap_or_else(|p| p.into_inner());
        if let Some(tree) = trees.get(&id) {
            return Ok(tree.clone());
        }
        // Each key space has its own handle on the backend tree (the
        // backend hands out the same tree by name; a batch groups writes
        // by tree name), so opening one costs no search of the others.
        let tree = Tree {
            inner: self.backend.open_tree(name).map_err(|e| self.err(e))?,
            prefix: Arc::from(prefix),
            keys_read: Arc::new(AtomicU64::new(0)),
            write_epoch: Arc::new(AtomicU64::new(0)),
            path: Arc::from(self.path_str()),
            routed: None,
        };
        trees.insert(id, tree.clone());
        Ok(tree)
    }

    /// Removes the tree called `name` and all its data, its key spaces
    /// included; `false` if there was none.
    pub fn drop_tree(&self, name: &[u8]) -> Result<bool, StorageError> {
        let forget = || {
            self.trees
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|(n, _), _| n.as_slice() != name);
        };
        forget();
        let dropped = self.commit(commit::Work::DropTree(name.to_vec()), true);
        // A key space opened while the tree was dropped holds the dropped
        // tree, whose every call fails: it is forgotten too, so that the
        // next open makes the tree anew.
        forget();
        dropped
    }

    /// Deletes every key of `tree`, in atomic batches of up to `batch_keys`
    /// keys: an interrupted clear leaves a part of the keys, never a part
    /// of a batch. For data nothing reads any more (a locality group no
    /// family uses).
    pub fn clear(&self, tree: &Tree, batch_keys: usize) -> Result<u64, StorageError> {
        let mut removed = 0;
        loop {
            let keys = tree
                .range(Bound::Unbounded, Bound::Unbounded, false)
                .take(batch_keys.max(1))
                .map(|item| item.map(|(key, _)| key))
                .collect::<Result<Vec<Bytes>, _>>()?;
            if keys.is_empty() {
                return Ok(removed);
            }
            removed += keys.len() as u64;
            let mut batch = WriteBatch::with_durability(Durability::Eventual);
            for key in keys {
                batch.delete(tree, key);
            }
            self.apply(batch)?;
        }
    }

    /// The names of all trees (the default tree excluded).
    pub fn tree_names(&self) -> Vec<Vec<u8>> {
        self.backend.tree_names()
    }

    /// Whether the backend tree that `tree` is (or is a key space of)
    /// still exists: `false` once [`Storage::drop_tree`] removed it.
    pub fn contains_tree(&self, tree: &Tree) -> bool {
        self.has_tree(tree.inner.name())
    }

    /// Whether a tree called `name` exists, without making one as
    /// [`Storage::tree`] would.
    pub fn has_tree(&self, name: &[u8]) -> bool {
        self.backend
            .tree_names()
            .iter()
            .any(|n| n.as_slice() == name)
    }

    /// Reads a meta value of the default tree.
    pub fn meta_get(&self, key: &[u8]) -> Result<Option<Bytes>, StorageError> {
        self.backend.meta_get(key).map_err(|e| self.err(e))
    }

    /// Writes a meta value of the default tree and waits until it is durable.
    pub fn meta_put_durable(&self, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        let work = commit::Work::PutMeta {
            key: key.to_vec(),
            value: value.to_vec(),
        };
        self.commit(work, false).map(|_| ())
    }

    /// Applies every write of `batch` atomically: after a crash either all of
    /// them or none are on disk, and no reader sees a part of them. An
    /// [`Durability::Immediate`] batch is on disk when this returns: it
    /// waits for the flush of its group (see [`commit`]).
    ///
    /// A batch that writes keys other stores hold ([`Routes`]) is applied
    /// home by home, this store's part first: each part atomically, the
    /// whole not. A part that fails stops the rest, and the error names
    /// the homes whose parts were applied.
    pub fn apply(&self, batch: WriteBatch) -> Result<(), StorageError> {
        let noting = self.watches.note(&batch);
        let applied = self.apply_noted(batch);
        noting.record(applied.is_err());
        applied
    }

    /// Starts noting the keys of `tree` in `range` (keys of the key
    /// space) that batches write, whichever store holds them, up to
    /// `limit` keys, until the watch is dropped; batches of copies
    /// ([`WriteBatch::copying`]) are not noted. It waits for the batches
    /// being applied: a batch it does not note was applied before it began.
    pub fn watch(
        &self,
        tree: &Tree,
        range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
        limit: usize,
    ) -> Watch {
        self.watches.watch(tree, range, limit)
    }

    /// [`Storage::apply`], after the watches noted the batch's keys.
    fn apply_noted(&self, batch: WriteBatch) -> Result<(), StorageError> {
        let durable = batch.durability == Durability::Immediate;
        if batch.away.is_empty() {
            if batch.trees.is_empty() {
                return Ok(());
            }
            let work = commit::Work::Apply {
                writes: batch.trees,
                epochs: batch.epochs,
            };
            return self.commit(work, durable).map(|_| ());
        }
        let mut applied: Vec<String> = Vec::new();
        if !batch.trees.is_empty() {
            let work = commit::Work::Apply {
                writes: batch.trees,
                epochs: Vec::new(),
            };
            self.commit(work, durable)?;
            applied.push("this process".into());
        }
        let mut failed = None;
        for part in &batch.away {
            if let Err(source) = part.store.apply_and_flush(&part.trees, durable) {
                failed = Some((part.name.to_string(), source));
                break;
            }
            applied.push(part.name.to_string());
        }
        // Readers compare epochs to notice a batch that changed the trees:
        // a part that was applied did, and a call that broke off may have.
        for epoch in &batch.epochs {
            epoch.fetch_add(1, Ordering::SeqCst);
        }
        match failed {
            None => Ok(()),
            Some((home, source)) if applied.is_empty() => Err(StorageError::Away { home, source }),
            Some((failed, source)) => Err(StorageError::PartlyApplied {
                applied,
                failed,
                source,
            }),
        }
    }

    /// Waits until every applied write is durable on disk.
    pub fn flush(&self) -> Result<(), StorageError> {
        self.commit(commit::Work::Flush, true).map(|_| ())
    }

    /// Waits until every write handed to the store before this call was
    /// applied or refused, also those whose writers stopped waiting (a
    /// stall): when it returns, none of them can still land. It makes
    /// nothing durable, and it answers while the store refuses writes;
    /// behind a call that is stuck it fails as stalled, as writes do.
    pub fn settle(&self) -> Result<(), StorageError> {
        self.commit(commit::Work::Barrier, false).map(|_| ())
    }

    /// Hands `work` to the commit pipeline and waits for it.
    fn commit(&self, work: commit::Work, durable: bool) -> Result<bool, StorageError> {
        self.commit
            .submit(work, durable)
            .map_err(|error| match error {
                commit::CommitError::Backend(source) => self.err(source),
                commit::CommitError::Stalled { operation, waited } => StorageError::Stalled {
                    path: self.path_str(),
                    operation,
                    waited,
                },
                commit::CommitError::ReadOnly { reason } => StorageError::ReadOnly {
                    path: self.path_str(),
                    reason,
                },
            })
    }

    /// Whether the store serves writes: a stalled call (until it returns)
    /// or a failed flush makes it refuse them.
    pub fn health(&self) -> Health {
        self.commit.health()
    }

    /// The commit pipeline's counters.
    pub fn commit_stats(&self) -> CommitStats {
        self.commit.stats()
    }

    /// Bytes the store occupies on disk.
    pub fn size_on_disk(&self) -> Result<u64, StorageError> {
        self.backend.size_on_disk().map_err(|e| self.err(e))
    }
}

/// A store in memory, for tests.
#[cfg(test)]
pub(crate) fn in_memory() -> Storage {
    Storage::with_backend(
        Arc::new(MemoryBackend::new()),
        Path::new("here"),
        DEFAULT_STALL_LIMIT,
    )
    .expect("a store in memory opens")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(tree: &Tree, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, reverse: bool) -> Vec<Vec<u8>> {
        tree.range(lo, hi, reverse)
            .map(|item| item.map(|(k, _)| k.to_vec()))
            .collect::<Result<_, _>>()
            .expect("scan")
    }

    #[test]
    fn key_spaces_share_a_tree_without_seeing_each_other() {
        let storage = in_memory();
        let a = storage.key_space(b"t", b"a\x00\x01").expect("a");
        let b = storage.key_space(b"t", b"b\x00\x01").expect("b");
        // A prefix with no successor: its space runs to the end of the tree.
        let last = storage.key_space(b"t", b"\xFF\xFF").expect("last");
        let whole = storage.tree(b"t").expect("whole");

        let mut batch = WriteBatch::with_durability(Durability::Eventual);
        for key in [&b"1"[..], b"2", b"3"] {
            batch.put(&a, key, "a");
            batch.put(&b, key, "b");
        }
        batch.put(&last, "z", "last");
        storage.apply(batch).expect("apply");
        assert_eq!(a.write_epoch(), 1);
        assert_eq!(b.write_epoch(), 1);

        let all = |t: &Tree, reverse| keys(t, Bound::Unbounded, Bound::Unbounded, reverse);
        assert_eq!(all(&a, false), [b"1", b"2", b"3"]);
        assert_eq!(all(&b, true), [b"3", b"2", b"1"]);
        assert_eq!(all(&last, false), [b"z"]);
        assert_eq!(
            keys(
                &a,
                Bound::Excluded(b"1".to_vec()),
                Bound::Included(b"3".to_vec()),
                false
            ),
            [b"2", b"3"]
        );
        assert_eq!(
            keys(&b, Bound::Unbounded, Bound::Excluded(b"3".to_vec()), true),
            [b"2", b"1"]
        );
        assert_eq!(all(&whole, false).len(), 7, "the backend tree holds both");
        let value = a
            .range(Bound::Included(b"2".to_vec()), Bound::Unbounded, false)
            .next()
            .expect("a key")
            .expect("read")
            .1;
        assert_eq!(&value[..], b"a");

        // A batch of one space moves that space's epoch only.
        let mut batch = WriteBatch::with_durability(Durability::Eventual);
        batch.delete(&a, "2");
        storage.apply(batch).expect("apply");
        assert_eq!((a.write_epoch(), b.write_epoch()), (2, 1));
        assert_eq!(all(&a, false), [b"1", b"3"]);
        assert_eq!(all(&b, false), [b"1", b"2", b"3"]);

        // Clearing a space in small batches leaves the others.
        assert_eq!(storage.clear(&b, 2).expect("clear"), 3);
        assert!(all(&b, false).is_empty());
        assert_eq!(all(&a, false), [b"1", b"3"]);
        assert_eq!(all(&last, false), [b"z"]);

        // Dropping the tree drops its spaces; reopening finds them empty.
        assert!(storage.drop_tree(b"t").expect("drop"));
        let a = storage.key_space(b"t", b"a\x00\x01").expect("a again");
        assert!(all(&a, false).is_empty());
    }
}
