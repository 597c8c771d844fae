//! The storage layer's errors.

use std::time::Duration;

use super::BackendError;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The underlying store failed (I/O, or a bug it reported).
    #[error("storage error in '{path}': {source}")]
    Store {
        /// The database directory.
        path: String,
        /// What the backend reported.
        source: BackendError,
    },
    /// The database directory cannot be created.
    #[error("cannot create database directory '{path}': {source}")]
    CreateDir {
        /// The database directory.
        path: String,
        /// What the file system reported.
        source: std::io::Error,
    },
    /// The database directory is locked by another process.
    #[error("database '{path}' is in use by another process")]
    Locked {
        /// The database directory.
        path: String,
    },
    /// The directory holds data of an unknown format version.
    #[error("database '{path}' has format version {found}, this build reads version {supported}: export its tables with the build that wrote it and import them here")]
    UnsupportedFormat {
        /// The database directory.
        path: String,
        /// The version on disk.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A storage call has not returned within the stall limit (sled 0.34
    /// can deadlock, see *Hangs* in `docs/design.md`). The write that met it may
    /// or may not land; the database refuses writes until the call returns
    /// or the process restarts.
    #[error("database '{path}': {operation} has not returned after {:.1} s; whether this write lands is unknown, and the database refuses writes until that call returns or the process restarts", .waited.as_secs_f64())]
    Stalled {
        /// The database directory.
        path: String,
        /// The operation that is stuck.
        operation: String,
        /// How long it had run.
        waited: Duration,
    },
    /// The database refuses writes since a storage call stalled (until it
    /// returns) or a flush failed; restarting the process opens it again.
    #[error("database '{path}' refuses writes: {reason}")]
    ReadOnly {
        /// The database directory.
        path: String,
        /// What happened.
        reason: String,
    },
    /// Another store that holds some of a table's keys (a worker's) failed
    /// or could not be reached. This store applied nothing of the write;
    /// that one applied its part atomically or not at all, and when the
    /// call broke off, which of the two is unknown.
    #[error("{home}: {source}")]
    Away {
        /// The store, as its tablet and worker.
        home: String,
        /// What it reported.
        source: BackendError,
    },
    /// A write to keys that several stores hold was applied by some of
    /// them and not by the one named; the rest was not tried.
    #[error("the write was applied by {} but not by {failed}: {source}", .applied.join(", "))]
    PartlyApplied {
        /// The stores that applied their part.
        applied: Vec<String>,
        /// The store that failed.
        failed: String,
        /// What it reported.
        source: BackendError,
    },
    /// The directory holds something that is not a widesql database.
    #[error("'{path}' is not a widesql database: {reason}")]
    NotWidesql {
        /// The database directory.
        path: String,
        /// Why.
        reason: String,
    },
}
