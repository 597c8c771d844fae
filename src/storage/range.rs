//! Ordered scans of one tree, counting the keys they visit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{read_ahead, BackendIter, Bytes, StorageError};

/// An ordered scan of one tree that counts the keys it visits.
pub struct RangeIter {
    inner: BackendIter,
    /// The key space's prefix length, stripped from every key.
    prefix_len: usize,
    keys_read: Arc<AtomicU64>,
    /// Keys visited and not yet added to `keys_read`: a shared counter
    /// bumped for every key was 2.6% of a full scan's time (perf), so it
    /// is bumped every [`COUNT_EVERY`] keys and when the scan ends.
    uncounted: u64,
    path: Arc<str>,
}

/// How many keys a scan visits between two additions to its tree's count.
const COUNT_EVERY: u64 = 64;

impl Drop for RangeIter {
    fn drop(&mut self) {
        self.keys_read.fetch_add(self.uncounted, Ordering::Relaxed);
    }
}

impl RangeIter {
    /// A scan over `inner`, whose keys start with a key space prefix of
    /// `prefix_len` bytes, counted into `keys_read`.
    pub(super) fn new(
        inner: BackendIter,
        prefix_len: usize,
        keys_read: Arc<AtomicU64>,
        path: Arc<str>,
    ) -> Self {
        RangeIter {
            inner,
            prefix_len,
            keys_read,
            uncounted: 0,
            path,
        }
    }

    /// A scan that finds nothing: of a tree that does not exist.
    pub(crate) fn empty() -> Self {
        RangeIter::new(
            Box::new(std::iter::empty()),
            0,
            Arc::default(),
            Arc::from(""),
        )
    }

    /// Reads the rest of the scan on a thread of its own, a few batches
    /// ahead of the caller: for scans long enough to pay for a thread.
    /// Entries come in the same order, and keys are counted as the caller
    /// takes them.
    pub fn read_ahead(&mut self) {
        let scan = std::mem::replace(&mut self.inner, Box::new(std::iter::empty()));
        match read_ahead::read_ahead(scan, self.prefix_len) {
            // The thread takes the prefix off as it copies the keys.
            Ok(ahead) => {
                self.inner = ahead;
                self.prefix_len = 0;
            }
            // No thread: the scan is read here, as before.
            Err(scan) => self.inner = scan,
        }
    }
}

impl Iterator for RangeIter {
    type Item = Result<(Bytes, Bytes), StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.next();
        if item.is_some() {
            self.uncounted += 1;
            if self.uncounted == COUNT_EVERY {
                self.keys_read.fetch_add(COUNT_EVERY, Ordering::Relaxed);
                self.uncounted = 0;
            }
        }
        let prefix_len = self.prefix_len;
        item.map(|r| {
            r.map(|(key, value)| match prefix_len {
                0 => (key, value),
                n => (key.slice(n, key.len() - n), value),
            })
            .map_err(|source| StorageError::Store {
                path: self.path.to_string(),
                source,
            })
        })
    }
}
