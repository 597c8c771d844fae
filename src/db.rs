//! The embedded API: [`Db`] and the handles of its projects, datasets and
//! tables.
//!
//! Handles hold ids, not names: a handle keeps working after its object was
//! renamed, and answers `NotFound` after it was dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::catalog::{self, Catalog, DropMode, ObjectKind};
use crate::error::Result;
use crate::ids::{DatasetId, ProjectId, TableId};
use crate::storage::{Storage, StorageOptions};
use crate::table::spec::{FamilySpec, GcPolicy, TableSpec};
use crate::table::{
    Cell, Engine, Filter, ReadModifyWriteRule, ReadOptions, ResumeToken, Row, RowIter, RowMutation,
    RowSet, TableStore,
};

/// How to open a database.
#[derive(Debug, Clone)]
pub struct DbOptions {
    storage: StorageOptions,
    compaction_interval: Option<Duration>,
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
    /// on [`Db::flush`] and close. Default: every 500 ms.
    pub fn with_flush_interval(mut self, every: Option<Duration>) -> Self {
        self.storage.flush_every_ms = every.map(|d| d.as_millis().max(1) as u64);
        self
    }

    /// How often background compaction removes hidden versions; `None`
    /// turns it off ([`Db::compact`] still works). Default: every 60 s.
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

struct DbInner {
    engine: Arc<Engine>,
    catalog: Catalog,
    path: PathBuf,
    /// Dropping it stops the background compaction thread.
    _stop_compaction: Option<mpsc::Sender<()>>,
}

impl std::fmt::Debug for DbInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.path).finish()
    }
}

/// Databases open in this process, so that opening a directory twice shares
/// one instance (sled allows one opener per directory).
fn open_databases() -> &'static Mutex<HashMap<PathBuf, Weak<DbInner>>> {
    static OPEN: OnceLock<Mutex<HashMap<PathBuf, Weak<DbInner>>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
}

/// An open widesql database: a sled directory with its catalog.
///
/// Cloning is cheap and shares the database. Opening the same directory
/// again in the same process returns the instance already open.
#[derive(Debug, Clone)]
pub struct Db {
    inner: Arc<DbInner>,
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
        let storage = Storage::with_backend(backend, &path)?;
        Ok(Db {
            inner: Db::start(storage, path, &options)?,
        })
    }

    /// Opens the catalog over `storage` and starts background compaction.
    fn start(storage: Storage, path: PathBuf, options: &DbOptions) -> Result<Arc<DbInner>> {
        let engine = Arc::new(Engine::new(storage)?);
        let catalog = Catalog::open(Arc::clone(&engine))?;
        let (stop, stopped) = mpsc::channel::<()>();
        let inner = Arc::new(DbInner {
            engine,
            catalog,
            path,
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

    /// The directory of this database.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub(crate) fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// Waits until every write is durable on disk.
    pub fn flush(&self) -> Result<()> {
        Ok(self.inner.engine.storage.flush()?)
    }

    /// The sled trees the database holds, for diagnostics: `catalog`, and
    /// `t:<table id>:<locality group>` for every group of every table.
    pub fn storage_trees(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .inner
            .engine
            .storage
            .tree_names()
            .iter()
            .map(
                |name| match crate::table::layout::parse_group_tree_name(name) {
                    Some((id, group)) => format!("t:{id}:{group}"),
                    None => String::from_utf8_lossy(name).into_owned(),
                },
            )
            .collect();
        names.sort();
        names
    }

    /// Bytes the database occupies on disk.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.inner.engine.storage.size_on_disk()?)
    }

    /// Removes hidden versions and dropped families' cells from every table
    /// now. Returns how many cells were removed.
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
        for id in ids {
            removed += self.catalog().compact_table(id)?;
        }
        Ok(removed)
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

    fn project_handle(&self, id: ProjectId) -> Project {
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

/// A project: a namespace of datasets.
#[derive(Debug, Clone)]
pub struct Project {
    db: Db,
    id: ProjectId,
}

impl Project {
    /// Its id.
    pub fn id(&self) -> ProjectId {
        self.id
    }

    fn entry(&self) -> Result<catalog::ProjectEntry> {
        self.db
            .catalog()
            .read()
            .project(self.id)
            .cloned()
            .ok_or_else(|| catalog::not_found(ObjectKind::Project, self.id))
    }

    /// Its current name.
    pub fn name(&self) -> Result<String> {
        Ok(self.entry()?.name)
    }

    /// Creates a dataset in this project.
    pub fn create_dataset(&self, name: &str) -> Result<Dataset> {
        let id = self.db.catalog().create_dataset(self.id, name)?;
        Ok(self.db.dataset_handle(id))
    }

    /// The dataset called `name`, if any.
    pub fn dataset(&self, name: &str) -> Result<Option<Dataset>> {
        self.entry()?;
        let id = self
            .db
            .catalog()
            .read()
            .dataset_by_name(self.id, name)
            .map(|d| d.id);
        Ok(id.map(|id| self.db.dataset_handle(id)))
    }

    /// The dataset called `name`, or a `NotFound` error.
    pub fn open_dataset(&self, name: &str) -> Result<Dataset> {
        let project = self.name()?;
        self.dataset(name)?
            .ok_or_else(|| catalog::not_found(ObjectKind::Dataset, format!("{project}.{name}")))
    }

    /// Its datasets, by name.
    pub fn datasets(&self) -> Result<Vec<Dataset>> {
        self.entry()?;
        let ids: Vec<DatasetId> = self
            .db
            .catalog()
            .read()
            .datasets_of(self.id)
            .iter()
            .map(|d| d.id)
            .collect();
        Ok(ids
            .into_iter()
            .map(|id| self.db.dataset_handle(id))
            .collect())
    }

    /// Drops the dataset called `name`.
    pub fn drop_dataset(&self, name: &str, mode: DropMode) -> Result<()> {
        self.open_dataset(name)?.drop(mode)
    }

    /// Renames the project.
    pub fn rename(&self, new_name: &str) -> Result<()> {
        self.db.catalog().rename_project(self.id, new_name)
    }

    /// Drops the project.
    pub fn drop(&self, mode: DropMode) -> Result<()> {
        self.db.catalog().drop_project(self.id, mode)
    }
}

/// A dataset: a namespace of tables within a project.
#[derive(Debug, Clone)]
pub struct Dataset {
    db: Db,
    id: DatasetId,
}

impl Dataset {
    /// Its id.
    pub fn id(&self) -> DatasetId {
        self.id
    }

    fn entry(&self) -> Result<catalog::DatasetEntry> {
        self.db
            .catalog()
            .read()
            .dataset(self.id)
            .cloned()
            .ok_or_else(|| catalog::not_found(ObjectKind::Dataset, self.id))
    }

    /// Its current name.
    pub fn name(&self) -> Result<String> {
        Ok(self.entry()?.name)
    }

    /// `project.dataset`.
    pub fn qualified_name(&self) -> Result<String> {
        self.entry()?;
        Ok(self.db.catalog().read().dataset_path(self.id))
    }

    /// Its project.
    pub fn project(&self) -> Result<Project> {
        Ok(self.db.project_handle(self.entry()?.project))
    }

    /// Creates a table.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, TableSpec};
    /// # use std::time::Duration;
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// let spec = TableSpec::new()
    ///     .with_family(FamilySpec::new("contents").with_locality_group("blobs").with_max_versions(3))
    ///     .with_family(FamilySpec::new("anchor").with_max_age(Duration::from_secs(86_400)));
    /// let table = db.default_dataset()?.create_table("webtable", spec)?;
    /// assert_eq!(table.spec()?.families.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn create_table(&self, name: &str, spec: TableSpec) -> Result<Table> {
        let id = self.db.catalog().create_table(self.id, name, spec)?;
        Ok(self.db.table_handle(id))
    }

    /// The table called `name`, if any.
    pub fn table(&self, name: &str) -> Result<Option<Table>> {
        self.entry()?;
        let id = self
            .db
            .catalog()
            .read()
            .table_by_name(self.id, name)
            .map(|t| t.id);
        Ok(id.map(|id| self.db.table_handle(id)))
    }

    /// The table called `name`, or a `NotFound` error.
    pub fn open_table(&self, name: &str) -> Result<Table> {
        let path = self.qualified_name()?;
        self.table(name)?
            .ok_or_else(|| catalog::not_found(ObjectKind::Table, format!("{path}.{name}")))
    }

    /// Its tables, by name.
    pub fn tables(&self) -> Result<Vec<Table>> {
        self.entry()?;
        let ids: Vec<TableId> = self
            .db
            .catalog()
            .read()
            .tables_of(self.id)
            .iter()
            .map(|t| t.id)
            .collect();
        Ok(ids.into_iter().map(|id| self.db.table_handle(id)).collect())
    }

    /// Drops the table called `name` and its data.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.open_table(name)?.drop()
    }

    /// Renames the table called `name` within this dataset.
    pub fn rename_table(&self, name: &str, new_name: &str) -> Result<()> {
        self.open_table(name)?.rename(new_name)
    }

    /// Renames the dataset.
    pub fn rename(&self, new_name: &str) -> Result<()> {
        self.db.catalog().rename_dataset(self.id, new_name)
    }

    /// Drops the dataset.
    pub fn drop(&self, mode: DropMode) -> Result<()> {
        self.db.catalog().drop_dataset(self.id, mode)
    }
}

/// A wide-column table: rows of cells in column families.
///
/// ```
/// # use widesql::{Db, FamilySpec, Filter, RowMutation, TableSpec};
/// # fn main() -> widesql::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Db::open(dir.path())?;
/// let table = db.default_dataset()?.create_table(
///     "webtable",
///     TableSpec::new().with_family(FamilySpec::new("anchor")),
/// )?;
/// table.mutate_row(b"com.cnn.www", &RowMutation::new().set("anchor", "cnnsi.com", "CNN"))?;
/// let row = table.read_row(b"com.cnn.www", &Filter::all())?.expect("row exists");
/// assert_eq!(row.value("anchor", b"cnnsi.com"), Some(&b"CNN"[..]));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Table {
    db: Db,
    id: TableId,
}

impl Table {
    /// Its id.
    pub fn id(&self) -> TableId {
        self.id
    }

    fn entry(&self) -> Result<catalog::TableEntry> {
        self.db
            .catalog()
            .read()
            .table(self.id)
            .cloned()
            .ok_or_else(|| catalog::not_found(ObjectKind::Table, self.id))
    }

    pub(crate) fn store(&self) -> Result<TableStore> {
        self.db
            .catalog()
            .store(self.id)
            .ok_or_else(|| catalog::not_found(ObjectKind::Table, self.id))
    }

    /// Its current name.
    pub fn name(&self) -> Result<String> {
        Ok(self.entry()?.name)
    }

    /// `project.dataset.table`.
    pub fn qualified_name(&self) -> Result<String> {
        Ok(self.store()?.layout.name.clone())
    }

    /// Its current spec (with family ids assigned).
    pub fn spec(&self) -> Result<TableSpec> {
        Ok(self.store()?.layout.spec.clone())
    }

    /// Its dataset.
    pub fn dataset(&self) -> Result<Dataset> {
        Ok(self.db.dataset_handle(self.entry()?.dataset))
    }

    /// Renames the table within its dataset; no data is moved.
    pub fn rename(&self, new_name: &str) -> Result<()> {
        let dataset = self.entry()?.dataset;
        self.db.catalog().rename_table(self.id, dataset, new_name)
    }

    /// Drops the table and its data.
    pub fn drop(&self) -> Result<()> {
        self.db.catalog().drop_table(self.id)
    }

    /// Adds a column family.
    pub fn add_family(&self, family: FamilySpec) -> Result<()> {
        let name = self.qualified_name()?;
        self.db
            .catalog()
            .alter_table(self.id, |spec| catalog::with_family(spec, family, &name))
    }

    /// Drops a column family; its cells are removed.
    pub fn drop_family(&self, family: &str) -> Result<()> {
        let name = self.qualified_name()?;
        self.db
            .catalog()
            .alter_table(self.id, |spec| catalog::without_family(spec, family, &name))
    }

    /// Changes a family's GC policy. It applies to every read at once; when
    /// it keeps more than before, versions hidden by the old policy do not
    /// come back.
    pub fn set_gc_policy(&self, family: &str, gc: GcPolicy) -> Result<()> {
        let name = self.qualified_name()?;
        self.db
            .catalog()
            .alter_table(self.id, |spec| catalog::with_gc(spec, family, gc, &name))
    }

    /// Applies a mutation to one row atomically.
    pub fn mutate_row(&self, key: &[u8], mutation: &RowMutation) -> Result<()> {
        self.store()?.mutate_row(key, mutation)
    }

    /// Applies many row mutations, each row atomic, 1000 rows per batch.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, RowMutation, RowSet, ReadOptions, TableSpec};
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// # let table = db.default_dataset()?.create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?;
    /// let rows = (0..2500).map(|i| (format!("row{i:05}"), RowMutation::new().set("f", "n", i.to_string())));
    /// assert_eq!(table.bulk_mutate(rows)?, 2500);
    /// assert_eq!(table.read_rows(&RowSet::prefix("row01"), ReadOptions::new())?.count(), 1000);
    /// # Ok(()) }
    /// ```
    pub fn bulk_mutate<K, I>(&self, rows: I) -> Result<usize>
    where
        K: AsRef<[u8]>,
        I: IntoIterator<Item = (K, RowMutation)>,
    {
        self.store()?.bulk_mutate(rows)
    }

    /// Reads one row; `None` when no cell passes the filter.
    pub fn read_row(&self, key: &[u8], filter: &Filter) -> Result<Option<Row>> {
        self.store()?.read_row(key, filter)
    }

    /// Reads rows: keys, ranges or prefixes, forward or reverse.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, RowMutation, RowSet, RowRange, ReadOptions, TableSpec};
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// # let table = db.default_dataset()?.create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?;
    /// for key in ["a", "b", "c", "d"] {
    ///     table.mutate_row(key.as_bytes(), &RowMutation::new().set("f", "q", key))?;
    /// }
    /// let rows = RowSet::range(RowRange::new(b"b".to_vec()..=b"d".to_vec()));
    /// let keys: Vec<Vec<u8>> = table
    ///     .read_rows(&rows, ReadOptions::new().with_reverse(true).with_row_limit(2))?
    ///     .map(|row| row.map(|r| r.key))
    ///     .collect::<widesql::Result<_>>()?;
    /// assert_eq!(keys, [b"d".to_vec(), b"c".to_vec()]);
    /// # Ok(()) }
    /// ```
    pub fn read_rows(&self, rows: &RowSet, options: ReadOptions) -> Result<RowIter> {
        Ok(self.store()?.read_rows(rows, options))
    }

    /// Reads up to `page_size` cells of a row after `resume`; returns a
    /// token when there may be more.
    pub fn read_row_page(
        &self,
        key: &[u8],
        filter: &Filter,
        page_size: usize,
        resume: Option<&ResumeToken>,
    ) -> Result<(Vec<Cell>, Option<ResumeToken>)> {
        self.store()?.read_row_page(key, filter, page_size, resume)
    }

    /// Atomically appends to or increments cells; returns the new cells.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, ReadModifyWriteRule, TableSpec};
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// # let table = db.default_dataset()?.create_table("t", TableSpec::new().with_family(FamilySpec::new("stats")))?;
    /// table.read_modify_write(b"page", &[ReadModifyWriteRule::increment("stats", "views", 5)])?;
    /// let row = table.read_modify_write(b"page", &[ReadModifyWriteRule::increment("stats", "views", 2)])?;
    /// assert_eq!(row.value("stats", b"views"), Some(&7i64.to_be_bytes()[..]));
    /// # Ok(()) }
    /// ```
    pub fn read_modify_write(&self, key: &[u8], rules: &[ReadModifyWriteRule]) -> Result<Row> {
        self.store()?.read_modify_write(key, rules)
    }

    /// Atomically applies `on_match` when `predicate` selects a cell of the
    /// row, else `on_miss`; returns whether it matched.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, Filter, RowMutation, TableSpec, ValueFilter};
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// # let table = db.default_dataset()?.create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?;
    /// table.mutate_row(b"job", &RowMutation::new().set("f", "state", "queued"))?;
    /// let queued = Filter::all().with_latest_versions(1).with_value(ValueFilter::Equals(b"queued".to_vec()));
    /// let claim = RowMutation::new().set("f", "state", "running");
    /// assert!(table.check_and_mutate(b"job", &queued, &claim, &RowMutation::new())?);
    /// assert!(!table.check_and_mutate(b"job", &queued, &claim, &RowMutation::new())?);
    /// # Ok(()) }
    /// ```
    pub fn check_and_mutate(
        &self,
        key: &[u8],
        predicate: &Filter,
        on_match: &RowMutation,
        on_miss: &RowMutation,
    ) -> Result<bool> {
        self.store()?
            .check_and_mutate(key, predicate, on_match, on_miss)
    }

    /// Removes hidden versions now; returns how many cells were removed.
    pub fn compact(&self) -> Result<u64> {
        self.entry()?;
        self.db.catalog().compact_table(self.id)
    }

    /// Keys that reads of each locality group have visited since the
    /// database was opened, by group name.
    pub fn keys_read_per_group(&self) -> Result<Vec<(String, u64)>> {
        Ok(self.store()?.keys_read_per_group())
    }
}

impl DropMode {
    /// `Cascade` when `cascade`, else `Restrict`.
    pub fn cascade_if(cascade: bool) -> Self {
        if cascade {
            DropMode::Cascade
        } else {
            DropMode::Restrict
        }
    }
}
