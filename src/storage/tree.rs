//! [`Tree`]: a handle on one backend tree, or one key space of it.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::*;

/// One named tree, or one key space of it: an ordered map of byte keys to
/// byte values.
#[derive(Debug, Clone)]
pub struct Tree {
    pub(super) inner: Arc<dyn BackendTree>,
    /// What every key of this tree starts with in the backend tree; empty
    /// for a whole tree.
    pub(super) prefix: Arc<[u8]>,
    pub(super) keys_read: Arc<AtomicU64>,
    /// Incremented after every applied batch that wrote this tree; see
    /// [`Tree::write_epoch`].
    pub(super) write_epoch: Arc<AtomicU64>,
    pub(super) path: Arc<str>,
    /// The ranges of this key space that other stores hold, with each
    /// range's tree (this one's for a range held here).
    pub(super) routed: Option<Arc<routes::Routed>>,
}

impl Tree {
    /// `(lo, hi)` of this key space as bounds of its backend tree.
    pub(super) fn stored_bounds(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
    ) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        if self.prefix.is_empty() {
            return (lo, hi);
        }
        let within = |bound: Bound<Vec<u8>>| match bound {
            Bound::Included(key) => Bound::Included(self.stored_key(&key)),
            Bound::Excluded(key) => Bound::Excluded(self.stored_key(&key)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let lo = match within(lo) {
            Bound::Unbounded => Bound::Included(self.prefix.to_vec()),
            bound => bound,
        };
        let hi = match within(hi) {
            Bound::Unbounded => match prefix_successor(&self.prefix) {
                Some(end) => Bound::Excluded(end),
                None => Bound::Unbounded,
            },
            bound => bound,
        };
        (lo, hi)
    }

    /// The entries with keys in `(lo, hi)`, in key order or reversed.
    pub fn range(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, reverse: bool) -> RangeIter {
        let inner = match self.routed.as_deref() {
            None => {
                let (lo, hi) = self.stored_bounds(lo, hi);
                self.inner.range(lo, hi, reverse)
            }
            Some(routed) => {
                let pieces = routed
                    .routes
                    .pieces(&lo, &hi)
                    .into_iter()
                    .map(|(index, (lo, hi))| {
                        (Arc::clone(&routed.trees[index]), self.stored_bounds(lo, hi))
                    })
                    .collect();
                routes::routed_scan(pieces, reverse)
            }
        };
        RangeIter::new(
            inner,
            self.prefix.len(),
            Arc::clone(&self.keys_read),
            Arc::clone(&self.path),
        )
    }

    /// `key` as the backend tree stores it.
    pub(super) fn stored_key(&self, key: &[u8]) -> Vec<u8> {
        let mut stored = Vec::with_capacity(self.prefix.len() + key.len());
        stored.extend_from_slice(&self.prefix);
        stored.extend_from_slice(key);
        stored
    }

    /// A counter that grows after every applied batch that wrote this tree.
    /// A reader that saw the same value before and after a read knows no
    /// batch of this tree completed between; writes to other trees (other
    /// tables) do not move it.
    pub fn write_epoch(&self) -> u64 {
        self.write_epoch.load(Ordering::SeqCst)
    }

    /// Keys visited by reads of this tree since it was opened (a scan still
    /// running adds its last keys when it ends).
    pub fn keys_read(&self) -> u64 {
        self.keys_read.load(Ordering::Relaxed)
    }
}
