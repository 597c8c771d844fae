//! [`Db`]: opening a database, its catalog, background compaction.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Weak};

use super::{open_databases, Activity, Dataset, DbInner, DbOptions, Project, Table, Workers};

use crate::catalog::{self, Catalog, DropMode, ObjectKind};
use crate::error::Result;
use crate::ids::{DatasetId, ProjectId, TableId};
use crate::storage::Storage;
use crate::table::Engine;

/// An open widesql database: a sled directory with its catalog.
///
/// Cloning is cheap and shares the database. Opening the same directory
/// again in the same process returns the instance already open.
#[derive(Debug, Clone)]
pub struct Db {
    pub(super) inner: Arc<DbInner>,
}

impl Db {
    /// Opens the database in `path`, creating the directory and an empty
    /// database (system tables, project `default`, dataset `public`) if
    /// needed.
    ///
    /// ```
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = widesql::Db::open(dir.path().join("db"))?;
    /// assert!(db.project("default")?.is_some());
    /// # Ok(()) }
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Db> {
        Self::open_with(path, DbOptions::default())
    }

    /// Opens the database in `path` with `options` (ignored when the
    /// directory is already open in this process).
    pub fn open_with(path: impl AsRef<Path>, options: DbOptions) -> Result<Db> {
        let path = path.as_ref();
        std::fs::create_dir_all(path).map_err(|source| {
            crate::storage::StorageError::CreateDir {
                path: path.display().to_string(),
                source,
            }
        })?;
        let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let mut open = open_databases().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(inner) = open.get(&key).and_then(Weak::upgrade) {
            return Ok(Db { inner });
        }
        let storage = Storage::open(path, &options.storage)?;
        let inner = Db::start(storage, key.clone(), &options)?;
        open.retain(|_, weak| weak.strong_count() > 0);
        open.insert(key, Arc::downgrade(&inner));
        Ok(Db { inner })
    }

    /// Opens a database on another storage backend (the in-memory one that
    /// injects faults, in widesql's tests). `name` stands for the path in
    /// messages. Not registered: every call opens a new database.
    #[doc(hidden)]
    pub fn open_on_backend(
        name: &str,
        backend: Arc<dyn crate::storage::Backend>,
        options: DbOptions,
    ) -> Result<Db> {
        let path = PathBuf::from(name);
        let storage = Storage::with_backend(backend, &path, options.storage.stall_limit)?;
        Ok(Db {
            inner: Db::start(storage, path, &options)?,
        })
    }

    /// Opens the catalog over `storage` and starts background compaction.
    pub(super) fn start(
        storage: Storage,
        path: PathBuf,
        options: &DbOptions,
    ) -> Result<Arc<DbInner>> {
        let mut engine = Engine::new(storage, options.durability)?;
        engine.statement_batch_rows = options.statement_batch_rows;
        engine.statement_batch_bytes = options.statement_batch_bytes;
        let engine = Arc::new(engine);
        let catalog = Catalog::open(Arc::clone(&engine))?;
        let (stop, stopped) = mpsc::channel::<()>();
        let inner = Arc::new(DbInner {
            engine,
            catalog,
            path,
            activity: super::Activity::default(),
            workers: Arc::default(),
            extension: std::sync::OnceLock::new(),
            _stop_compaction: options.compaction_interval.map(|_| stop),
        });
        if let Some(every) = options.compaction_interval {
            let weak = Arc::downgrade(&inner);
            std::thread::Builder::new()
                .name("widesql-compaction".into())
                .spawn(move || loop {
                    match stopped.recv_timeout(every) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    let Some(inner) = weak.upgrade() else { return };
                    // A failed background pass is retried at the next tick;
                    // reads hide what it could not remove.
                    let _ = Db { inner }.compact();
                })
                .map_err(|source| crate::Error::Thread {
                    what: "compaction",
                    source,
                })?;
        }
        Ok(inner)
    }

    /// Tells open databases apart within the process: the same number for
    /// every handle of one open database, while any handle lives.
    pub(crate) fn instance(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// The directory of this database.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub(crate) fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// The statements running now, as their callers registered them (the
    /// server registers each call); `SHOW ACTIVITY` lists them and `CANCEL`
    /// stops one.
    pub fn activity(&self) -> &Activity {
        &self.inner.activity
    }

    /// The workers that joined this database's process, when it is a
    /// cluster's master; `SHOW WORKERS` lists them.
    pub fn workers(&self) -> &Arc<Workers> {
        &self.inner.workers
    }

    /// What a layer above keeps for this database ([`Db::set_extension`]).
    pub(crate) fn extension(&self) -> Option<&Arc<dyn std::any::Any + Send + Sync>> {
        self.inner.extension.get()
    }

    /// Keeps `extension` for a layer above; `false` when one was kept
    /// already (it is set once).
    pub(crate) fn set_extension(&self, extension: Arc<dyn std::any::Any + Send + Sync>) -> bool {
        self.inner.extension.set(extension).is_ok()
    }

    /// Waits until every write is durable on disk: this process's and,
    /// on a cluster's master, those sent to the workers that hold its
    /// tablets. Every worker is tried; an error names one that could not
    /// flush (this process's writes are durable by then).
    pub fn flush(&self) -> Result<()> {
        self.inner.engine.storage.flush()?;
        self.catalog().flush_workers()
    }

    /// Whether the database serves writes. It refuses them
    /// ([`Health::ReadOnly`](crate::Health::ReadOnly)) while a storage
    /// write or flush has run past the stall limit
    /// ([`DbOptions::with_stall_limit`]), until that call returns, and for
    /// good (until the process restarts) after a failed flush; reads go
    /// on. A server reports this in its health check.
    ///
    /// ```
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = widesql::Db::open(dir.path().join("db"))?;
    /// assert_eq!(db.health(), widesql::Health::Healthy);
    /// # Ok(()) }
    /// ```
    pub fn health(&self) -> crate::Health {
        self.inner.engine.storage.health()
    }

    /// Counters of the commit pipeline: how many writes it answered, how
    /// many flushes they cost, the largest group one flush acknowledged.
    ///
    /// ```
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = widesql::Db::open(dir.path().join("db"))?;
    /// let before = db.commit_stats();
    /// db.flush()?;
    /// assert_eq!(db.commit_stats().flushes, before.flushes + 1);
    /// # Ok(()) }
    /// ```
    pub fn commit_stats(&self) -> crate::CommitStats {
        self.inner.engine.storage.commit_stats()
    }

    /// The sled trees the database holds, for diagnostics: `catalog`, and
    /// `t:<table id>` for every table (its locality groups are key spaces
    /// of that tree, see [`Db::storage_key_spaces`]).
    pub fn storage_trees(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .inner
            .engine
            .storage
            .tree_names()
            .iter()
            .map(
                |name| match crate::table::layout::parse_table_tree_name(name) {
                    Some(id) => format!("t:{id}"),
                    None => String::from_utf8_lossy(name).into_owned(),
                },
            )
            .collect();
        names.sort();
        names
    }

    /// The locality groups that hold data, for diagnostics:
    /// `t:<table id>:<locality group>` for every group of every table tree
    /// that has at least one key.
    pub fn storage_key_spaces(&self) -> Result<Vec<String>> {
        use crate::table::layout::{group_of_prefix, parse_table_tree_name, stored_group_prefixes};
        let storage = &self.inner.engine.storage;
        // Under the DDL lock, so that no table is dropped between listing
        // its tree and opening it (which would make it again).
        let _ddl = self.catalog().ddl_lock();
        let mut names = Vec::new();
        for name in storage.tree_names() {
            let Some(id) = parse_table_tree_name(&name) else {
                continue;
            };
            for prefix in stored_group_prefixes(&storage.tree(&name)?)? {
                names.push(format!("t:{id}:{}", group_of_prefix(&prefix)));
            }
        }
        names.sort();
        Ok(names)
    }

    /// Bytes the database occupies on disk.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.inner.engine.storage.size_on_disk()?)
    }

    /// Removes hidden versions and dropped families' cells from every table
    /// now. Returns how many cells were removed. A table that cannot be
    /// compacted (a worker that holds one of its tablets is down) does not
    /// stop the others: every table is tried, then the first error is
    /// returned.
    pub fn compact(&self) -> Result<u64> {
        let ids: Vec<TableId> = {
            let state = self.catalog().read();
            state
                .projects()
                .iter()
                .flat_map(|p| state.datasets_of(p.id))
                .flat_map(|d| state.tables_of(d.id))
                .map(|t| t.id)
                .collect()
        };
        let mut removed = 0;
        let mut failed = None;
        for id in ids {
            match self.catalog().compact_table(id) {
                Ok(cells) => removed += cells,
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }

    /// Creates a project.
    ///
    /// ```
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = widesql::Db::open(dir.path())?;
    /// let acme = db.create_project("acme")?;
    /// assert_eq!(acme.name()?, "acme");
    /// assert!(db.create_project("acme").is_err());
    /// # Ok(()) }
    /// ```
    pub fn create_project(&self, name: &str) -> Result<Project> {
        let id = self.catalog().create_project(name)?;
        Ok(self.project_handle(id))
    }

    pub(super) fn project_handle(&self, id: ProjectId) -> Project {
        Project {
            db: self.clone(),
            id,
        }
    }

    /// The project called `name`, if any.
    pub fn project(&self, name: &str) -> Result<Option<Project>> {
        let id = self.catalog().read().project_by_name(name).map(|p| p.id);
        Ok(id.map(|id| self.project_handle(id)))
    }

    /// The project called `name`, or a `NotFound` error.
    pub fn open_project(&self, name: &str) -> Result<Project> {
        self.project(name)?
            .ok_or_else(|| catalog::not_found(ObjectKind::Project, name))
    }

    /// Every project (the `_system` project included), by name.
    pub fn projects(&self) -> Result<Vec<Project>> {
        let ids: Vec<ProjectId> = self
            .catalog()
            .read()
            .projects()
            .iter()
            .map(|p| p.id)
            .collect();
        Ok(ids.into_iter().map(|id| self.project_handle(id)).collect())
    }

    /// Drops the project called `name`; with [`DropMode::Cascade`] also its
    /// datasets and tables, else it must be empty.
    pub fn drop_project(&self, name: &str, mode: DropMode) -> Result<()> {
        self.open_project(name)?.drop(mode)
    }

    /// Renames a project.
    pub fn rename_project(&self, name: &str, new_name: &str) -> Result<()> {
        self.open_project(name)?.rename(new_name)
    }

    /// The dataset that unqualified table names resolve in
    /// (`default.public`).
    pub fn default_dataset(&self) -> Result<Dataset> {
        self.open_project(catalog::DEFAULT_PROJECT)?
            .open_dataset(catalog::DEFAULT_DATASET)
    }

    /// The table `project.dataset.table`, or a `NotFound` error naming the
    /// first missing part.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, TableSpec};
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// db.create_project("acme")?
    ///     .create_dataset("web")?
    ///     .create_table("webtable", TableSpec::new().with_family(FamilySpec::new("anchor")))?;
    /// let table = db.open_table("acme", "web", "webtable")?;
    /// assert_eq!(table.qualified_name()?, "acme.web.webtable");
    /// # Ok(()) }
    /// ```
    pub fn open_table(&self, project: &str, dataset: &str, table: &str) -> Result<Table> {
        self.open_project(project)?
            .open_dataset(dataset)?
            .open_table(table)
    }

    /// A handle on the table with id `id`.
    pub(crate) fn table_handle(&self, id: TableId) -> Table {
        Table {
            db: self.clone(),
            id,
            durability: None,
        }
    }

    /// A handle on the dataset with id `id`.
    pub(crate) fn dataset_handle(&self, id: DatasetId) -> Dataset {
        Dataset {
            db: self.clone(),
            id,
        }
    }
}
