//! Row locks: a fixed array of reader-writer locks, a row mapped to one by
//! the hash of its encoded key.
//!
//! Writers of a row hold its lock exclusively while they read what they
//! need and apply their batch; readers hold it shared while they collect the
//! row's cells from every locality group. That makes every read and write of
//! one row atomic, across trees too. Locks are always taken in stripe order,
//! so writers of many rows cannot deadlock.

use std::hash::{BuildHasher, Hasher};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

const STRIPES: usize = 4096;

/// The lock stripes of one database.
#[derive(Debug)]
pub struct RowLocks {
    stripes: Box<[RwLock<()>]>,
    hasher: std::hash::RandomState,
}

impl Default for RowLocks {
    fn default() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            hasher: std::hash::RandomState::new(),
        }
    }
}

impl RowLocks {
    /// The stripe of a row, given its full encoded row prefix (which starts
    /// with the table's tree or key prefix, so tables do not share stripes
    /// systematically).
    pub fn stripe(&self, tree_salt: &[u8], encoded_row: &[u8]) -> usize {
        let mut h = self.hasher.build_hasher();
        h.write(tree_salt);
        h.write(encoded_row);
        (h.finish() as usize) % STRIPES
    }

    /// Holds one stripe shared.
    pub fn read(&self, stripe: usize) -> RwLockReadGuard<'_, ()> {
        self.stripes[stripe % STRIPES]
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Holds every stripe exclusively: no row of any table can be written
    /// meanwhile (used while a looser GC policy takes over).
    pub fn write_every(&self) -> Vec<RwLockWriteGuard<'_, ()>> {
        self.write_all(0..STRIPES)
    }

    /// Holds the given stripes exclusively, in stripe order.
    pub fn write_all(
        &self,
        stripes: impl IntoIterator<Item = usize>,
    ) -> Vec<RwLockWriteGuard<'_, ()>> {
        let mut stripes: Vec<usize> = stripes.into_iter().map(|s| s % STRIPES).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .map(|s| self.stripes[s].write().unwrap_or_else(|p| p.into_inner()))
            .collect()
    }
}
