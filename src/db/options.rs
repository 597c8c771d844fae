//! How a database is opened: [`DbOptions`].

use std::time::Duration;

use crate::storage::{Durability, StorageOptions};
use crate::table::{STATEMENT_ATOMIC_BYTES, STATEMENT_ATOMIC_ROWS};

/// How to open a database.
#[derive(Debug, Clone)]
pub struct DbOptions {
    pub(super) storage: StorageOptions,
    pub(super) compaction_interval: Option<Duration>,
    pub(super) durability: Durability,
    pub(super) statement_batch_rows: usize,
    pub(super) statement_batch_bytes: usize,
}

impl Default for DbOptions {
    fn default() -> Self {
        Self {
            storage: StorageOptions::default(),
            compaction_interval: Some(Duration::from_secs(60)),
            durability: Durability::Immediate,
            statement_batch_rows: STATEMENT_ATOMIC_ROWS,
            statement_batch_bytes: STATEMENT_ATOMIC_BYTES,
        }
    }
}

impl DbOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of page cache. Default: 64 MiB.
    pub fn with_cache_capacity(mut self, bytes: u64) -> Self {
        self.storage.cache_capacity = bytes;
        self
    }

    /// When data writes reach the disk, unless a table handle
    /// ([`Table::with_durability`](super::Table::with_durability)) or a SQL
    /// session (`SET widesql.durability`) says otherwise. Default:
    /// [`Durability::Immediate`], a write that returned survives a crash.
    /// DDL is always immediate.
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// How often [`Durability::Eventual`] writes are flushed to disk in the
    /// background; `None`: only at the next immediate write,
    /// [`Db::flush`](super::Db::flush) and close. Default: every 500 ms.
    pub fn with_flush_interval(mut self, every: Option<Duration>) -> Self {
        self.storage.flush_every_ms = every.map(|d| d.as_millis().max(1) as u64);
        self
    }

    /// How often background compaction removes hidden versions; `None`
    /// turns it off ([`Db::compact`](super::Db::compact) still works). Default: every 60 s.
    pub fn with_compaction_interval(mut self, every: Option<Duration>) -> Self {
        self.compaction_interval = every;
        self
    }

    /// The most rows a SQL statement applies as one atomic batch, and so
    /// about the most it holds in memory: a larger statement is applied in
    /// atomic batches of this many rows as its input streams. Default:
    /// [`STATEMENT_ATOMIC_ROWS`]; at least 1.
    pub fn with_statement_batch_rows(mut self, rows: usize) -> Self {
        self.statement_batch_rows = rows.max(1);
        self
    }

    /// About the most bytes (keys and values written) a SQL statement or a
    /// [`bulk_mutate`](super::Table::bulk_mutate) applies as one atomic
    /// batch: a statement of large values, or one that rewrites large rows,
    /// is applied in atomic batches of about this size, so its memory stays
    /// bounded. One row's writes are never split. Default:
    /// [`STATEMENT_ATOMIC_BYTES`]; at least 1.
    pub fn with_statement_batch_bytes(mut self, bytes: usize) -> Self {
        self.statement_batch_bytes = bytes.max(1);
        self
    }

    /// How long one storage write or flush may run before it counts as
    /// stalled: its writer gets an error naming the operation, and the
    /// database refuses writes until the call returns or the process
    /// restarts (see [`Db::health`](super::Db::health)). Default: 60 s; at
    /// least 1 ms.
    pub fn with_stall_limit(mut self, limit: Duration) -> Self {
        self.storage.stall_limit = limit.max(Duration::from_millis(1));
        self
    }

    /// Deletes the directory when the database is closed. Default: `false`.
    pub fn with_temporary(mut self, temporary: bool) -> Self {
        self.storage.temporary = temporary;
        self
    }
}
