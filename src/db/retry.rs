//! The one retry policy of writes: a write that finds its table changed by
//! DDL while it waited for its row locks applied nothing
//! ([`Error::is_retryable`](crate::Error::is_retryable)), and runs again on the table as it is now, as a
//! write that had waited for the DDL's lock would.

use std::future::Future;

use crate::error::Result;

/// How many times a write runs before its last error is returned.
const WRITE_ATTEMPTS: usize = 100;

/// Runs `write` until it succeeds, fails for another reason, or has run
/// [`WRITE_ATTEMPTS`] times.
pub(crate) fn retrying<T>(mut write: impl FnMut() -> Result<T>) -> Result<T> {
    let mut attempts = 1;
    loop {
        match write() {
            Err(e) if e.is_retryable() && attempts < WRITE_ATTEMPTS => attempts += 1,
            done => return done,
        }
    }
}

/// [`retrying`] for a write that awaits.
pub(crate) async fn retrying_async<T, F>(mut write: impl FnMut() -> F) -> Result<T>
where
    F: Future<Output = Result<T>>,
{
    let mut attempts = 1;
    loop {
        match write().await {
            Err(e) if e.is_retryable() && attempts < WRITE_ATTEMPTS => attempts += 1,
            done => return done,
        }
    }
}
