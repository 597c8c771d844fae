//! Atomic write batches and their durability: what a writer hands to
//! [`Storage::apply`](super::Storage::apply).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::{Backend, Bytes, Tree, TreeWrites, Write};

/// When a write reaches the disk.
///
/// The default is [`Durability::Immediate`]: a write that returned survives
/// a crash of the process or the machine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// The write is flushed to disk before the call returns. Readers of its
    /// rows wait for the flush, so nobody acts on a write a crash could
    /// still take back.
    #[default]
    Immediate,
    /// The write is visible when the call returns and reaches the disk with
    /// the next background flush (every 500 ms by default, see
    /// `DbOptions::with_flush_interval`), or at the next immediate write,
    /// `Db::flush` or close. A crash may lose the writes of that interval,
    /// never a part of one atomic batch.
    Eventual,
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "immediate" => Ok(Durability::Immediate),
            "eventual" => Ok(Durability::Eventual),
            _ => Err(format!(
                "'{text}' is not a durability: use 'immediate' or 'eventual'"
            )),
        }
    }
}

/// Writes to one or more trees that are applied atomically by
/// [`Storage::apply`](crate::storage::Storage::apply), and made durable as the batch's [`Durability`] says.
#[derive(Debug, Default)]
pub struct WriteBatch {
    /// The writes of each backend tree, keys with their key space's prefix.
    pub(super) trees: Vec<TreeWrites>,
    /// The write epochs of the trees and key spaces written.
    pub(super) epochs: Vec<Arc<AtomicU64>>,
    pub(super) durability: Durability,
    /// Bytes of the keys and values written, which the store holds in
    /// memory, several times over, until the batch is applied.
    bytes: usize,
    /// The writes to keys other stores hold, by store.
    pub(super) away: Vec<AwayWrites>,
    /// Whether the batch copies data that is already stored elsewhere,
    /// which watches do not note ([`WriteBatch::copying`]).
    pub(super) copying: bool,
}

/// The writes of a batch to one other store.
#[derive(Debug)]
pub(super) struct AwayWrites {
    pub(super) store: Arc<dyn Backend>,
    pub(super) name: Arc<str>,
    pub(super) trees: Vec<TreeWrites>,
}

impl WriteBatch {
    /// An empty batch with the given durability.
    pub fn with_durability(durability: Durability) -> Self {
        Self {
            durability,
            ..Self::default()
        }
    }

    /// An empty batch of copies, such as a tablet move writes to the
    /// tablet's new home: [`Storage::watch`](crate::storage::Storage::watch)es
    /// do not note its keys, so that a move notes only what others wrote.
    pub fn copying(durability: Durability) -> Self {
        Self {
            copying: true,
            ..Self::with_durability(durability)
        }
    }

    /// The writes of `tree`'s backend tree. A batch writes one to three
    /// trees or key spaces, so a linear search is cheaper than a map.
    fn writes_for(&mut self, tree: &Tree) -> &mut Vec<Write> {
        if !self
            .epochs
            .iter()
            .any(|e| Arc::ptr_eq(e, &tree.write_epoch))
        {
            self.epochs.push(Arc::clone(&tree.write_epoch));
        }
        let at = match self
            .trees
            .iter()
            .position(|(t, _)| Arc::ptr_eq(t, &tree.inner) || t.name() == tree.inner.name())
        {
            Some(at) => at,
            None => {
                self.trees.push((Arc::clone(&tree.inner), Vec::new()));
                self.trees.len() - 1
            }
        };
        &mut self.trees[at].1
    }

    /// The writes of `key` of `tree`: this store's, or those of the other
    /// store that holds the key.
    fn writes_of_key(&mut self, tree: &Tree, key: &[u8]) -> &mut Vec<Write> {
        let Some(super::routes::AwayHome {
            store,
            name,
            tree: away_tree,
        }) = tree.away_home(key)
        else {
            return self.writes_for(tree);
        };
        if !self
            .epochs
            .iter()
            .any(|e| Arc::ptr_eq(e, &tree.write_epoch))
        {
            self.epochs.push(Arc::clone(&tree.write_epoch));
        }
        let part = match self
            .away
            .iter()
            .position(|part| std::ptr::addr_eq(Arc::as_ptr(&part.store), Arc::as_ptr(store)))
        {
            Some(at) => at,
            None => {
                self.away.push(AwayWrites {
                    store: Arc::clone(store),
                    name: Arc::clone(name),
                    trees: Vec::new(),
                });
                self.away.len() - 1
            }
        };
        let trees = &mut self.away[part].trees;
        let at = match trees.iter().position(|(t, _)| t.name() == away_tree.name()) {
            Some(at) => at,
            None => {
                trees.push((Arc::clone(away_tree), Vec::new()));
                trees.len() - 1
            }
        };
        &mut trees[at].1
    }

    /// Sets `key` to `value` in `tree`.
    pub fn put(&mut self, tree: &Tree, key: impl Into<Bytes>, value: impl Into<Bytes>) {
        let key = key.into();
        let value = value.into();
        self.bytes += tree.prefix.len() + key.len() + value.len();
        // The key's home is found first, so that the key itself moves
        // into the write, uncopied.
        let writes = self.writes_of_key(tree, &key);
        writes.push(Write::Put(stored(tree, key), value));
    }

    /// Removes `key` from `tree`.
    pub fn delete(&mut self, tree: &Tree, key: impl Into<Bytes>) {
        let key = key.into();
        self.bytes += tree.prefix.len() + key.len();
        let writes = self.writes_of_key(tree, &key);
        writes.push(Write::Delete(stored(tree, key)));
    }

    /// Bytes of the keys and values written so far.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// `key` of `tree` as its backend tree stores it.
fn stored(tree: &Tree, key: Bytes) -> Bytes {
    if tree.prefix.is_empty() {
        key
    } else {
        Bytes::from(tree.stored_key(&key))
    }
}
