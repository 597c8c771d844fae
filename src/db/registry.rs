//! The databases open in this process, shared per directory.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{self};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::catalog::Catalog;
use crate::table::Engine;

pub(super) struct DbInner {
    pub(super) engine: Arc<Engine>,
    pub(super) catalog: Catalog,
    pub(super) path: PathBuf,
    /// What runs now (`SHOW ACTIVITY`).
    pub(super) activity: super::Activity,
    pub(super) workers: Arc<super::Workers>,
    /// What a layer above keeps for this database, set once (the SQL
    /// layer's extension of every session on a cluster's master).
    pub(super) extension: OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
    /// Dropping it stops the background compaction thread.
    pub(super) _stop_compaction: Option<mpsc::Sender<()>>,
}

impl std::fmt::Debug for DbInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.path).finish()
    }
}

/// Databases open in this process, so that opening a directory twice shares
/// one instance (sled allows one opener per directory).
pub(super) fn open_databases() -> &'static Mutex<HashMap<PathBuf, Weak<DbInner>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<DbInner>>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
}
