//! Server timestamps: microseconds since 1970, strictly increasing within a
//! database, also across restarts and when the wall clock steps back.
//!
//! Before handing out a timestamp beyond its persisted *lease*, the clock
//! durably stores a new lease a few seconds ahead; on open it starts after
//! the stored lease. A restart therefore never reuses a timestamp, and the
//! durable write happens once per lease period, not per timestamp. On
//! close the lease comes back to the last timestamp handed out: otherwise
//! every process that writes would start a lease ahead of the one before,
//! and twenty short ones put new cells minutes in the future (where `as_of`
//! now misses them and a TTL does not expire them). After a crash the next
//! process starts at most one lease ahead.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::storage::{Storage, StorageError};

const META_LEASE: &[u8] = b"widesql/timestamp_lease";
const LEASE_MICROS: i64 = 10_000_000;

/// Hands out strictly increasing timestamps.
#[derive(Debug)]
pub struct Clock {
    last: AtomicI64,
    lease_end: Mutex<i64>,
}

/// The wall clock in microseconds since 1970-01-01 UTC.
pub fn wall_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Clock {
    /// Starts after the lease stored in `storage`.
    pub fn open(storage: &Storage) -> Result<Clock, StorageError> {
        let lease = storage
            .meta_get(META_LEASE)?
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map(i64::from_be_bytes)
            .unwrap_or(0);
        Ok(Clock {
            last: AtomicI64::new(lease),
            lease_end: Mutex::new(lease),
        })
    }

    /// A timestamp greater than every one handed out before.
    pub fn next(&self, storage: &Storage) -> Result<i64, StorageError> {
        let now = wall_micros();
        let mut last = self.last.load(Ordering::SeqCst);
        let ts = loop {
            let candidate = now.max(last + 1);
            match self
                .last
                .compare_exchange(last, candidate, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break candidate,
                Err(seen) => last = seen,
            }
        };
        let mut lease_end = self.lease_end.lock().unwrap_or_else(|p| p.into_inner());
        if ts >= *lease_end {
            let new_end = ts.saturating_add(LEASE_MICROS);
            storage.meta_put_durable(META_LEASE, &new_end.to_be_bytes())?;
            *lease_end = new_end;
        }
        Ok(ts)
    }

    /// Brings the stored lease back to the last timestamp handed out, as
    /// the clock closes (see the module).
    pub fn close(&self, storage: &Storage) -> Result<(), StorageError> {
        let mut lease_end = self.lease_end.lock().unwrap_or_else(|p| p.into_inner());
        let last = self.last.load(Ordering::SeqCst);
        if last < *lease_end {
            storage.meta_put_durable(META_LEASE, &last.to_be_bytes())?;
            *lease_end = last;
        }
        Ok(())
    }
}
