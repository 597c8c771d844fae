//! Row locks: a fixed array of reader-writer locks, a row mapped to one by
//! the hash of its encoded key.
//!
//! Writers of a row hold its lock exclusively while they read what they
//! need and apply their batch; readers hold it shared while they collect the
//! row's cells from every locality group. That makes every read and write of
//! one row atomic, across trees too. Locks are always taken in stripe order,
//! so writers of many rows cannot deadlock.
//!
//! Each stripe counts the writers that took it. A reader of a very wide row
//! reads the rest of it without the lock and takes the lock again at the
//! end: an unchanged count means no writer touched the row meanwhile, as
//! in a seqlock.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::ThreadId;

const STRIPES: usize = 4096;

/// A stripe held shared; it derefs to the stripe's writer count.
pub type StripeReadGuard<'a> = RwLockReadGuard<'a, u64>;

/// The lock stripes of one database.
#[derive(Debug)]
pub struct RowLocks {
    /// Each stripe holds how many writers took it (wrapping).
    stripes: Box<[RwLock<u64>]>,
    hasher: std::hash::RandomState,
    /// Whether some thread holds every stripe ([`RowLocks::write_every`]).
    every_held: AtomicBool,
    /// That thread: it is the only writer, so its own reads and writes
    /// take no further lock (they would wait for itself).
    every_holder: Mutex<Option<ThreadId>>,
}

/// Every stripe, held exclusively by one thread until dropped.
#[must_use = "the stripes are released when the guard is dropped"]
pub struct EveryRowLock<'a> {
    locks: &'a RowLocks,
    /// Empty in a nested guard, which leaves the outer one in charge.
    stripes: Vec<RwLockWriteGuard<'a, u64>>,
}

impl EveryRowLock<'_> {
    /// Marks `layout` replaced: writes that wait for their row locks find
    /// out when they get them.
    pub fn supersede(&self, layout: &crate::table::layout::Layout) {
        layout.supersede();
    }
}

impl Drop for EveryRowLock<'_> {
    fn drop(&mut self) {
        if self.stripes.is_empty() {
            return;
        }
        *self
            .locks
            .every_holder
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        self.locks.every_held.store(false, Ordering::SeqCst);
    }
}

impl Default for RowLocks {
    fn default() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| RwLock::new(0)).collect(),
            hasher: std::hash::RandomState::new(),
            every_held: AtomicBool::new(false),
            every_holder: Mutex::new(None),
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

    /// Holds one stripe shared (nothing when this thread holds every
    /// stripe).
    pub fn read(&self, stripe: usize) -> Option<StripeReadGuard<'_>> {
        if self.held_by_this_thread() {
            return None;
        }
        Some(
            self.stripes[stripe % STRIPES]
                .read()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    /// Holds every stripe exclusively: no row of any table can be written
    /// meanwhile (used while DDL changes a table's layout). Reads and writes
    /// of this thread go on without locks until the guard is dropped.
    pub fn write_every(&self) -> EveryRowLock<'_> {
        if self.held_by_this_thread() {
            return EveryRowLock {
                locks: self,
                stripes: Vec::new(),
            };
        }
        let stripes = self.write_all(0..STRIPES);
        *self.every_holder.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(std::thread::current().id());
        self.every_held.store(true, Ordering::SeqCst);
        EveryRowLock {
            locks: self,
            stripes,
        }
    }

    fn held_by_this_thread(&self) -> bool {
        self.every_held.load(Ordering::SeqCst)
            && *self.every_holder.lock().unwrap_or_else(|p| p.into_inner())
                == Some(std::thread::current().id())
    }

    /// Holds the given stripes exclusively, in stripe order, and counts a
    /// writer in each (nothing when this thread holds every stripe).
    pub fn write_all(
        &self,
        stripes: impl IntoIterator<Item = usize>,
    ) -> Vec<RwLockWriteGuard<'_, u64>> {
        if self.held_by_this_thread() {
            return Vec::new();
        }
        let mut stripes: Vec<usize> = stripes.into_iter().map(|s| s % STRIPES).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .map(|s| {
                let mut guard = self.stripes[s].write().unwrap_or_else(|p| p.into_inner());
                *guard = guard.wrapping_add(1);
                guard
            })
            .collect()
    }
}
