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
    /// Seeds the stripe hash, so that which rows share a stripe differs
    /// between databases and runs.
    seed: u64,
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

/// Mixes `bytes` into `h`, eight at a time, multiplying as FxHash does,
/// then mixes every bit into every other with MurmurHash3's finalizer (a
/// product's low bits, which pick the stripe, depend only on the low bits
/// of its factors). It only spreads rows over stripes, so it is chosen for
/// speed (every read and write of a row takes its stripe) over SipHash's
/// resistance to chosen keys.
fn stripe_hash(mut h: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    h = (h.rotate_left(5) ^ u64::from_le_bytes(tail) ^ bytes.len() as u64).wrapping_mul(K);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

impl Default for RowLocks {
    fn default() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| RwLock::new(0)).collect(),
            seed: std::hash::RandomState::new().build_hasher().finish(),
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
        let h = stripe_hash(stripe_hash(self.seed, tree_salt), encoded_row);
        (h as usize) % STRIPES
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

#[cfg(test)]
mod tests {
    use super::{stripe_hash, STRIPES};

    fn stripe(seed: u64, salt: &[u8], row: &str) -> usize {
        (stripe_hash(stripe_hash(seed, salt), row.as_bytes()) as usize) % STRIPES
    }

    /// Rows whose keys differ in a few bytes and share long prefixes
    /// spread over the stripes about as evenly as random placement would,
    /// whatever the seed.
    #[test]
    fn rows_spread_over_the_stripes() {
        for seed in [0, 1, 0x9e37_79b9, u64::MAX] {
            let mut counts = vec![0usize; STRIPES];
            for i in 0..20 * STRIPES {
                let key = format!("com.example.www/section/page-{i:08}");
                counts[stripe(seed, b"t:table", &key)] += 1;
            }
            // Twenty rows per stripe on average: random placement leaves
            // a stripe empty or puts more than 55 rows on one with a chance
            // of about one in 100,000 (Poisson, 4,096 stripes).
            let (min, max) = (counts.iter().min(), counts.iter().max());
            assert!(min.is_some_and(|&n| n > 0), "seed {seed}: an empty stripe");
            assert!(
                max.is_some_and(|&n| n <= 55),
                "seed {seed}: {max:?} rows on a stripe"
            );
            // The same row of two tables is not tied to one stripe.
            let apart = (0..1000)
                .filter(|i| {
                    let key = format!("row{i}");
                    stripe(seed, b"t:a", &key) != stripe(seed, b"t:b", &key)
                })
                .count();
            assert!(apart > 990, "seed {seed}: {apart} of 1000 rows apart");
            // Keys that differ in their last byte only, at every length
            // around a word boundary: 256 keys take about 248 stripes when
            // placed at random.
            for len in 1..=33 {
                let stripes: std::collections::HashSet<usize> = (0..=255u8)
                    .map(|last| {
                        let mut key = vec![b'k'; len];
                        key[len - 1] = last;
                        (stripe_hash(stripe_hash(seed, b"t:a"), &key) as usize) % STRIPES
                    })
                    .collect();
                assert!(
                    stripes.len() >= 230,
                    "seed {seed}, length {len}: {} stripes",
                    stripes.len()
                );
            }
        }
    }
}
