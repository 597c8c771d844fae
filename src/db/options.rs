//! How a database is opened: [`DbOptions`].

use std::time::Duration;

use crate::storage::StorageOptions;

/// How to open a database.
#[derive(Debug, Clone)]
pub struct DbOptions {
    pub(super) storage: StorageOptions,
    pub(super) compaction_interval: Option<Duration>,
}

impl Default for DbOptions {
    fn default() -> Self {
        Self {
            storage: StorageOptions::default(),
            compaction_interval: Some(Duration::from_secs(60)),
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

    /// How often writes are flushed to disk in the background; `None`: only
    /// on [`Db::flush`](super::Db::flush) and close. Default: every 500 ms.
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

    /// Deletes the directory when the database is closed. Default: `false`.
    pub fn with_temporary(mut self, temporary: bool) -> Self {
        self.storage.temporary = temporary;
        self
    }
}
