//! The catalog: projects → datasets → tables, stored as rows of the system
//! tables ([`system`](crate::catalog::system)) and mirrored in memory for lookups.
//!
//! Every change is validated in full, then written as one atomic storage
//! batch, then applied to the in-memory state, all while the DDL lock is
//! held: there is no half-created table, and of two sessions creating the
//! same name exactly one wins. Data trees of dropped tables are removed after
//! the catalog batch; a crash in between leaves trees that no table owns,
//! and opening the database removes them.

pub(crate) mod names;
pub mod system;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use crate::error::{ErrorKind, Result};
use crate::ids::{DatasetId, ProjectId, TableId};
use crate::keys::{decode_tuple, encode_tuple, Element, ElementKind};
use crate::table::layout::{parse_group_tree_name, Layout, Placement};
use crate::table::spec::{FamilySpec, GcPolicy, RowKeySpec, TableSpec};
use crate::table::{Engine, ReadOptions, Row, RowMutation, RowSet, TableError, TableStore};
use names::{check_name, check_user_name};
use system::SystemTable;

/// The project that plain, unqualified names resolve in.
pub const DEFAULT_PROJECT: &str = "default";
/// The dataset that plain, unqualified names resolve in.
pub const DEFAULT_DATASET: &str = "public";

/// What kind of catalog object an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjectKind {
    /// A project.
    Project,
    /// A dataset.
    Dataset,
    /// A table.
    Table,
    /// A column family.
    Family,
    /// A column.
    Column,
    /// A locality group.
    LocalityGroup,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Project => "project",
            ObjectKind::Dataset => "dataset",
            ObjectKind::Table => "table",
            ObjectKind::Family => "column family",
            ObjectKind::Column => "column",
            ObjectKind::LocalityGroup => "locality group",
        })
    }
}

/// Errors of the catalog.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// No object of that name.
    #[error("{kind} '{name}' does not exist")]
    NotFound {
        /// The kind of object.
        kind: ObjectKind,
        /// Its qualified name.
        name: String,
    },
    /// An object of that name exists already.
    #[error("{kind} '{name}' already exists")]
    AlreadyExists {
        /// The kind of object.
        kind: ObjectKind,
        /// Its qualified name.
        name: String,
    },
    /// The name breaks the naming rules.
    #[error("invalid {kind} name '{name}': {reason}")]
    InvalidName {
        /// The kind of object.
        kind: ObjectKind,
        /// The name given.
        name: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// The object belongs to the system.
    #[error("{kind} '{name}' belongs to the system and cannot be {action}")]
    Reserved {
        /// The kind of object.
        kind: ObjectKind,
        /// Its name.
        name: String,
        /// What was attempted ("dropped", "renamed", "changed").
        action: &'static str,
    },
    /// Dropping would remove children, and cascading was not asked for.
    #[error("{kind} '{name}' is not empty ({children} {child_kind}s); drop it with cascade")]
    NotEmpty {
        /// The kind of object.
        kind: ObjectKind,
        /// Its qualified name.
        name: String,
        /// How many children it has.
        children: usize,
        /// Their kind.
        child_kind: ObjectKind,
    },
    /// The table spec is inconsistent.
    #[error("invalid definition of table '{table}': {reason}")]
    InvalidSpec {
        /// The qualified table name.
        table: String,
        /// What is wrong.
        reason: String,
    },
    /// A system row could not be read back.
    #[error("the catalog is corrupt: {0}")]
    Corrupt(String),
}

impl CatalogError {
    /// The category.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CatalogError::NotFound { .. } => ErrorKind::NotFound,
            CatalogError::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            CatalogError::InvalidName { .. } | CatalogError::Reserved { .. } => {
                ErrorKind::InvalidName
            }
            CatalogError::NotEmpty { .. } => ErrorKind::NotEmpty,
            CatalogError::InvalidSpec { .. } => ErrorKind::InvalidArgument,
            CatalogError::Corrupt(_) => ErrorKind::Corruption,
        }
    }
}

/// The `NotFound` error of an object.
pub fn not_found(kind: ObjectKind, name: impl ToString) -> crate::Error {
    CatalogError::NotFound {
        kind,
        name: name.to_string(),
    }
    .into()
}

/// Whether dropping an object also drops its children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropMode {
    /// Refuse when the object has children.
    Restrict,
    /// Drop the children too.
    Cascade,
}

/// A project as the catalog knows it.
#[derive(Debug, Clone)]
pub struct ProjectEntry {
    /// Its id.
    pub id: ProjectId,
    /// Its name.
    pub name: String,
    /// Creation time, microseconds.
    pub created_at: i64,
}

/// A dataset as the catalog knows it.
#[derive(Debug, Clone)]
pub struct DatasetEntry {
    /// Its id.
    pub id: DatasetId,
    /// Its project.
    pub project: ProjectId,
    /// Its name.
    pub name: String,
    /// Creation time, microseconds.
    pub created_at: i64,
}

/// A table as the catalog knows it.
#[derive(Debug, Clone)]
pub struct TableEntry {
    /// Its id.
    pub id: TableId,
    /// Its dataset.
    pub dataset: DatasetId,
    /// Its name.
    pub name: String,
    /// Creation time, microseconds.
    pub created_at: i64,
    /// The next family id to hand out (ids are never reused).
    pub next_family_id: u16,
    /// Its resolved storage layout (holds the spec).
    pub layout: Arc<Layout>,
}

impl TableEntry {
    /// The table's spec.
    pub fn spec(&self) -> &TableSpec {
        &self.layout.spec
    }
}

/// The in-memory mirror of the system tables.
#[derive(Debug, Default)]
pub struct CatalogState {
    projects: BTreeMap<ProjectId, ProjectEntry>,
    datasets: BTreeMap<DatasetId, DatasetEntry>,
    tables: BTreeMap<TableId, TableEntry>,
    project_names: BTreeMap<String, ProjectId>,
    dataset_names: BTreeMap<(ProjectId, String), DatasetId>,
    table_names: BTreeMap<(DatasetId, String), TableId>,
}

impl CatalogState {
    /// The project called `name`.
    pub fn project_by_name(&self, name: &str) -> Option<&ProjectEntry> {
        self.project_names
            .get(name)
            .and_then(|id| self.projects.get(id))
    }

    /// The dataset `name` of project `project`.
    pub fn dataset_by_name(&self, project: ProjectId, name: &str) -> Option<&DatasetEntry> {
        self.dataset_names
            .get(&(project, name.to_string()))
            .and_then(|id| self.datasets.get(id))
    }

    /// The table `name` of dataset `dataset`.
    pub fn table_by_name(&self, dataset: DatasetId, name: &str) -> Option<&TableEntry> {
        self.table_names
            .get(&(dataset, name.to_string()))
            .and_then(|id| self.tables.get(id))
    }

    /// The project with id `id`.
    pub fn project(&self, id: ProjectId) -> Option<&ProjectEntry> {
        self.projects.get(&id)
    }

    /// The dataset with id `id`.
    pub fn dataset(&self, id: DatasetId) -> Option<&DatasetEntry> {
        self.datasets.get(&id)
    }

    /// The table with id `id`.
    pub fn table(&self, id: TableId) -> Option<&TableEntry> {
        self.tables.get(&id)
    }

    /// Every project, by name.
    pub fn projects(&self) -> Vec<&ProjectEntry> {
        self.project_names
            .values()
            .filter_map(|id| self.projects.get(id))
            .collect()
    }

    /// The datasets of a project, by name.
    pub fn datasets_of(&self, project: ProjectId) -> Vec<&DatasetEntry> {
        self.dataset_names
            .range((project, String::new())..)
            .take_while(|((p, _), _)| *p == project)
            .filter_map(|(_, id)| self.datasets.get(id))
            .collect()
    }

    /// The tables of a dataset, by name.
    pub fn tables_of(&self, dataset: DatasetId) -> Vec<&TableEntry> {
        self.table_names
            .range((dataset, String::new())..)
            .take_while(|((d, _), _)| *d == dataset)
            .filter_map(|(_, id)| self.tables.get(id))
            .collect()
    }

    /// `project.dataset` of a dataset.
    pub fn dataset_path(&self, id: DatasetId) -> String {
        match self.datasets.get(&id) {
            Some(d) => {
                let project = self
                    .projects
                    .get(&d.project)
                    .map_or("?", |p| p.name.as_str());
                format!("{project}.{}", d.name)
            }
            None => format!("{id}"),
        }
    }

    /// `project.dataset.table` of a table.
    pub fn table_path(&self, dataset: DatasetId, name: &str) -> String {
        format!("{}.{name}", self.dataset_path(dataset))
    }

    fn insert_project(&mut self, entry: ProjectEntry) {
        self.project_names.insert(entry.name.clone(), entry.id);
        self.projects.insert(entry.id, entry);
    }

    fn insert_dataset(&mut self, entry: DatasetEntry) {
        self.dataset_names
            .insert((entry.project, entry.name.clone()), entry.id);
        self.datasets.insert(entry.id, entry);
    }

    fn insert_table(&mut self, entry: TableEntry) {
        self.table_names
            .insert((entry.dataset, entry.name.clone()), entry.id);
        self.tables.insert(entry.id, entry);
    }

    fn remove_project(&mut self, id: ProjectId) {
        if let Some(p) = self.projects.remove(&id) {
            self.project_names.remove(&p.name);
        }
    }

    fn remove_dataset(&mut self, id: DatasetId) {
        if let Some(d) = self.datasets.remove(&id) {
            self.dataset_names.remove(&(d.project, d.name));
        }
    }

    fn remove_table(&mut self, id: TableId) -> Option<TableEntry> {
        let t = self.tables.remove(&id)?;
        self.table_names.remove(&(t.dataset, t.name.clone()));
        Some(t)
    }
}

/// One row write to a system table, part of an atomic catalog change.
struct SystemWrite {
    table: SystemTable,
    key: Vec<u8>,
    mutation: RowMutation,
}

fn text_key(parts: &[&str]) -> Result<Vec<u8>> {
    let tuple: Vec<Element> = parts
        .iter()
        .map(|p| Element::Bytes(p.as_bytes().to_vec()))
        .collect();
    Ok(encode_tuple(&tuple)?)
}

/// The catalog of one database.
#[derive(Debug)]
pub struct Catalog {
    engine: Arc<Engine>,
    state: RwLock<CatalogState>,
    ddl: Mutex<()>,
    system_stores: Vec<(TableId, TableStore)>,
    /// Tables being built ([`Catalog::stage_table`]): their trees exist but
    /// no catalog row names them yet, so orphan removal must spare them.
    staged: Mutex<std::collections::HashSet<TableId>>,
}

/// A table whose trees exist and can be written, but that no catalog row
/// names yet: what `CREATE TABLE … AS` and `CREATE OR REPLACE` fill before
/// [`Catalog::commit_table`] makes it visible in one atomic batch. If the
/// process dies first, the trees are orphans and go at the next open.
#[derive(Debug)]
pub struct StagedTable {
    dataset: DatasetId,
    name: String,
    next_family_id: u16,
    layout: Arc<Layout>,
}

impl StagedTable {
    /// The staged table's layout, to build a store that writes into it.
    pub fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }
}

impl Catalog {
    /// Loads the catalog, bootstrapping the system tables and the default
    /// project and dataset in a new database, and removes trees no table
    /// owns.
    pub fn open(engine: Arc<Engine>) -> Result<Catalog> {
        let mut system_stores = Vec::new();
        for table in system::ALL {
            let layout = Layout::new(
                &engine.storage,
                table.id,
                format!(
                    "{}.{}.{}",
                    system::SYSTEM_PROJECT_NAME,
                    system::CATALOG_DATASET_NAME,
                    table.name
                ),
                Self::assign_family_ids(table.spec()),
                &table.placement(),
                true,
            )?;
            system_stores.push((
                table.id,
                TableStore::new(Arc::clone(&engine), Arc::new(layout)),
            ));
        }
        let catalog = Catalog {
            engine,
            state: RwLock::new(CatalogState::default()),
            ddl: Mutex::new(()),
            system_stores,
            staged: Mutex::new(std::collections::HashSet::new()),
        };
        catalog.load()?;
        if catalog.read().project(system::SYSTEM_PROJECT).is_none() {
            catalog.bootstrap()?;
        }
        catalog.remove_orphan_trees()?;
        Ok(catalog)
    }

    fn assign_family_ids(mut spec: TableSpec) -> TableSpec {
        for (id, family) in spec.families.iter_mut().enumerate() {
            family.id = id as u16;
        }
        spec
    }

    /// The current state, for lookups.
    pub fn read(&self) -> RwLockReadGuard<'_, CatalogState> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, CatalogState> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    fn ddl_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.ddl.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new server timestamp (µs), later than every one handed out before.
    pub fn timestamp(&self) -> Result<i64> {
        Ok(self.engine.clock.next(&self.engine.storage)?)
    }

    /// The store of a system table.
    pub fn system_store(&self, id: TableId) -> Option<TableStore> {
        self.system_stores
            .iter()
            .find(|(t, _)| *t == id)
            .map(|(_, s)| s.clone())
    }

    /// The store of any table, system tables included.
    pub fn store(&self, id: TableId) -> Option<TableStore> {
        if id.is_reserved() {
            return self.system_store(id);
        }
        let state = self.read();
        let entry = state.table(id)?;
        Some(TableStore::new(
            Arc::clone(&self.engine),
            Arc::clone(&entry.layout),
        ))
    }

    fn sys(&self, table: SystemTable) -> Result<&TableStore> {
        self.system_stores
            .iter()
            .find(|(id, _)| *id == table.id)
            .map(|(_, s)| s)
            .ok_or_else(|| CatalogError::Corrupt(format!("no store for {}", table.name)).into())
    }

    // ----- loading -------------------------------------------------------

    fn rows_of(&self, table: SystemTable) -> Result<Vec<(Vec<String>, Row)>> {
        let store = self.sys(table)?;
        let kinds = vec![ElementKind::Bytes; table.key.len()];
        let mut rows = Vec::new();
        for row in store.read_rows(&RowSet::all(), ReadOptions::new()) {
            let row = row?;
            let key = decode_tuple(&row.key, &kinds)?
                .into_iter()
                .map(|e| match e {
                    Element::Bytes(b) => String::from_utf8(b).map_err(|_| {
                        CatalogError::Corrupt(format!("a key of {} is not UTF-8", table.name))
                    }),
                    _ => Err(CatalogError::Corrupt(format!(
                        "a key of {} is not text",
                        table.name
                    ))),
                })
                .collect::<Result<Vec<String>, CatalogError>>()?;
            rows.push((key, row));
        }
        Ok(rows)
    }

    fn text(table: SystemTable, row: &Row, column: &str) -> Result<String, CatalogError> {
        row.value(system::FAMILY, column.as_bytes())
            .and_then(|v| String::from_utf8(v.to_vec()).ok())
            .ok_or_else(|| {
                CatalogError::Corrupt(format!("a row of {} has no text '{column}'", table.name))
            })
    }

    fn int(table: SystemTable, row: &Row, column: &str) -> Result<i64, CatalogError> {
        row.value(system::FAMILY, column.as_bytes())
            .and_then(|v| <[u8; 8]>::try_from(v).ok())
            .map(i64::from_be_bytes)
            .ok_or_else(|| {
                CatalogError::Corrupt(format!("a row of {} has no integer '{column}'", table.name))
            })
    }

    fn id<T>(
        table: SystemTable,
        row: &Row,
        column: &str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<T, CatalogError> {
        let text = Self::text(table, row, column)?;
        parse(&text).ok_or_else(|| {
            CatalogError::Corrupt(format!("'{text}' in {} is not an id", table.name))
        })
    }

    fn load(&self) -> Result<()> {
        let mut state = CatalogState::default();
        for (key, row) in self.rows_of(system::PROJECTS)? {
            let t = system::PROJECTS;
            state.insert_project(ProjectEntry {
                id: Self::id(t, &row, "id", ProjectId::parse)?,
                name: key.into_iter().next().unwrap_or_default(),
                created_at: Self::int(t, &row, "created_at")?,
            });
        }
        for (key, row) in self.rows_of(system::DATASETS)? {
            let t = system::DATASETS;
            let [project, name] = <[String; 2]>::try_from(key).map_err(|_| {
                CatalogError::Corrupt("a _datasets key is not (project_id, name)".into())
            })?;
            state.insert_dataset(DatasetEntry {
                id: Self::id(t, &row, "id", DatasetId::parse)?,
                project: ProjectId::parse(&project).ok_or_else(|| {
                    CatalogError::Corrupt(format!("'{project}' is not a project id"))
                })?,
                name,
                created_at: Self::int(t, &row, "created_at")?,
            });
        }
        for (key, row) in self.rows_of(system::TABLES)? {
            let t = system::TABLES;
            let [dataset, name] = <[String; 2]>::try_from(key).map_err(|_| {
                CatalogError::Corrupt("a _tables key is not (dataset_id, name)".into())
            })?;
            let id = Self::id(t, &row, "id", TableId::parse)?;
            if id.is_reserved() {
                continue; // system tables are described by code, not by their rows
            }
            let dataset = DatasetId::parse(&dataset)
                .ok_or_else(|| CatalogError::Corrupt(format!("'{dataset}' is not a dataset id")))?;
            let spec: TableSpec =
                serde_json::from_str(&Self::text(t, &row, "spec")?).map_err(|e| {
                    CatalogError::Corrupt(format!("the spec of table {id} is unreadable: {e}"))
                })?;
            let path = state.table_path(dataset, &name);
            let layout = Layout::new(
                &self.engine.storage,
                id,
                path,
                spec,
                &Placement::OwnTrees,
                false,
            )?;
            state.insert_table(TableEntry {
                id,
                dataset,
                name,
                created_at: Self::int(t, &row, "created_at")?,
                next_family_id: u16::try_from(Self::int(t, &row, "next_family_id")?)
                    .unwrap_or(u16::MAX),
                layout: Arc::new(layout),
            });
        }
        // The system tables themselves, as the catalog lists them.
        for table in system::ALL {
            if let Some(store) = self.system_store(table.id) {
                state.insert_table(TableEntry {
                    id: table.id,
                    dataset: system::CATALOG_DATASET,
                    name: table.name.to_string(),
                    created_at: 0,
                    next_family_id: 1,
                    layout: Arc::clone(&store.layout),
                });
            }
        }
        *self.write_state() = state;
        Ok(())
    }

    fn bootstrap(&self) -> Result<()> {
        let _ddl = self.ddl_lock();
        let now = self.engine.clock.next(&self.engine.storage)?;
        let mut writes = vec![
            Self::project_row(system::SYSTEM_PROJECT, system::SYSTEM_PROJECT_NAME, now)?,
            Self::dataset_row(
                system::CATALOG_DATASET,
                system::SYSTEM_PROJECT,
                system::CATALOG_DATASET_NAME,
                now,
            )?,
        ];
        for table in system::ALL {
            writes.push(Self::table_row(
                table.id,
                system::CATALOG_DATASET,
                table.name,
                now,
                &table.spec(),
                1,
            )?);
        }
        let default_project = ProjectId::generate();
        let default_dataset = DatasetId::generate();
        writes.push(Self::project_row(default_project, DEFAULT_PROJECT, now)?);
        writes.push(Self::dataset_row(
            default_dataset,
            default_project,
            DEFAULT_DATASET,
            now,
        )?);
        self.apply(writes)?;
        self.load()
    }

    /// Removes trees that belong to no table or to a locality group that
    /// no family of the table uses any more.
    fn remove_orphan_trees(&self) -> Result<()> {
        let orphans: Vec<Vec<u8>> = {
            let staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
            let state = self.read();
            self.engine
                .storage
                .tree_names()
                .into_iter()
                .filter(|name| match parse_group_tree_name(name) {
                    Some((table, _)) if staged.contains(&table) => false,
                    Some((table, group)) => state
                        .table(table)
                        .is_none_or(|t| !t.spec().locality_groups().contains(&group.as_str())),
                    None => false,
                })
                .collect()
        };
        for name in orphans {
            self.engine.storage.drop_tree(&name)?;
        }
        Ok(())
    }

    // ----- system rows ---------------------------------------------------

    fn project_row(id: ProjectId, name: &str, created_at: i64) -> Result<SystemWrite> {
        Ok(SystemWrite {
            table: system::PROJECTS,
            key: text_key(&[name])?,
            mutation: RowMutation::new()
                .set(system::FAMILY, "id", id.to_string())
                .set(system::FAMILY, "created_at", created_at.to_be_bytes()),
        })
    }

    fn dataset_row(
        id: DatasetId,
        project: ProjectId,
        name: &str,
        created_at: i64,
    ) -> Result<SystemWrite> {
        Ok(SystemWrite {
            table: system::DATASETS,
            key: text_key(&[&project.to_string(), name])?,
            mutation: RowMutation::new()
                .set(system::FAMILY, "id", id.to_string())
                .set(system::FAMILY, "created_at", created_at.to_be_bytes()),
        })
    }

    fn table_row(
        id: TableId,
        dataset: DatasetId,
        name: &str,
        created_at: i64,
        spec: &TableSpec,
        next_family_id: u16,
    ) -> Result<SystemWrite> {
        let json = serde_json::to_string(spec).map_err(|e| {
            CatalogError::Corrupt(format!("cannot serialise the spec of {name}: {e}"))
        })?;
        Ok(SystemWrite {
            table: system::TABLES,
            key: text_key(&[&dataset.to_string(), name])?,
            mutation: RowMutation::new()
                .set(system::FAMILY, "id", id.to_string())
                .set(system::FAMILY, "created_at", created_at.to_be_bytes())
                .set(system::FAMILY, "spec", json)
                .set(
                    system::FAMILY,
                    "next_family_id",
                    i64::from(next_family_id).to_be_bytes(),
                ),
        })
    }

    fn delete_row(table: SystemTable, parts: &[&str]) -> Result<SystemWrite> {
        Ok(SystemWrite {
            table,
            key: text_key(parts)?,
            mutation: RowMutation::new().delete_row(),
        })
    }

    /// Applies system-row writes as one atomic batch.
    fn apply(&self, writes: Vec<SystemWrite>) -> Result<()> {
        let mut rows: Vec<(&TableStore, &[u8], &RowMutation)> = Vec::with_capacity(writes.len());
        for w in &writes {
            rows.push((self.sys(w.table)?, &w.key, &w.mutation));
        }
        crate::table::mutate_rows_atomically(&self.engine, &rows, true)
    }

    /// [`Catalog::apply`] for a caller that holds every row lock.
    fn apply_holding_row_locks(&self, writes: Vec<SystemWrite>) -> Result<()> {
        let mut rows: Vec<(&TableStore, &[u8], &RowMutation)> = Vec::with_capacity(writes.len());
        for w in &writes {
            rows.push((self.sys(w.table)?, &w.key, &w.mutation));
        }
        crate::table::mutate_rows_atomically(&self.engine, &rows, false)
    }

    // ----- projects ------------------------------------------------------

    fn refuse_system_project(id: ProjectId, name: &str, action: &'static str) -> Result<()> {
        if id == system::SYSTEM_PROJECT {
            return Err(CatalogError::Reserved {
                kind: ObjectKind::Project,
                name: name.to_string(),
                action,
            }
            .into());
        }
        Ok(())
    }

    /// Creates a project.
    pub fn create_project(&self, name: &str) -> Result<ProjectId> {
        check_user_name(ObjectKind::Project, name)?;
        let _ddl = self.ddl_lock();
        if self.read().project_by_name(name).is_some() {
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Project,
                name: name.to_string(),
            }
            .into());
        }
        let id = ProjectId::generate();
        let now = self.engine.clock.next(&self.engine.storage)?;
        self.apply(vec![Self::project_row(id, name, now)?])?;
        self.write_state().insert_project(ProjectEntry {
            id,
            name: name.to_string(),
            created_at: now,
        });
        Ok(id)
    }

    /// Renames a project; only catalog rows change.
    pub fn rename_project(&self, id: ProjectId, new_name: &str) -> Result<()> {
        check_user_name(ObjectKind::Project, new_name)?;
        let _ddl = self.ddl_lock();
        let entry = self.existing_project(id)?;
        Self::refuse_system_project(id, &entry.name, "renamed")?;
        if entry.name == new_name {
            return Ok(());
        }
        if self.read().project_by_name(new_name).is_some() {
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Project,
                name: new_name.to_string(),
            }
            .into());
        }
        self.apply(vec![
            Self::delete_row(system::PROJECTS, &[&entry.name])?,
            Self::project_row(id, new_name, entry.created_at)?,
        ])?;
        let mut state = self.write_state();
        state.remove_project(id);
        state.insert_project(ProjectEntry {
            name: new_name.to_string(),
            ..entry
        });
        self.refresh_layouts(&mut state)
    }

    fn existing_project(&self, id: ProjectId) -> Result<ProjectEntry> {
        self.read()
            .project(id)
            .cloned()
            .ok_or_else(|| not_found(ObjectKind::Project, id))
    }

    /// Drops a project, and with [`DropMode::Cascade`] its datasets and
    /// tables.
    pub fn drop_project(&self, id: ProjectId, mode: DropMode) -> Result<()> {
        let _ddl = self.ddl_lock();
        let entry = self.existing_project(id)?;
        Self::refuse_system_project(id, &entry.name, "dropped")?;
        let (datasets, tables): (Vec<DatasetEntry>, Vec<TableEntry>) = {
            let state = self.read();
            let datasets: Vec<DatasetEntry> = state.datasets_of(id).into_iter().cloned().collect();
            let tables = datasets
                .iter()
                .flat_map(|d| state.tables_of(d.id))
                .cloned()
                .collect();
            (datasets, tables)
        };
        if mode == DropMode::Restrict && !datasets.is_empty() {
            return Err(CatalogError::NotEmpty {
                kind: ObjectKind::Project,
                name: entry.name,
                children: datasets.len(),
                child_kind: ObjectKind::Dataset,
            }
            .into());
        }
        let project_text = id.to_string();
        let mut writes = vec![Self::delete_row(system::PROJECTS, &[&entry.name])?];
        for d in &datasets {
            writes.push(Self::delete_row(
                system::DATASETS,
                &[&project_text, &d.name],
            )?);
        }
        for t in &tables {
            writes.push(Self::delete_row(
                system::TABLES,
                &[&t.dataset.to_string(), &t.name],
            )?);
        }
        self.apply(writes)?;
        {
            let mut state = self.write_state();
            for t in &tables {
                state.remove_table(t.id);
            }
            for d in &datasets {
                state.remove_dataset(d.id);
            }
            state.remove_project(id);
        }
        self.drop_table_trees(&tables)
    }

    // ----- datasets ------------------------------------------------------

    fn existing_dataset(&self, id: DatasetId) -> Result<DatasetEntry> {
        self.read()
            .dataset(id)
            .cloned()
            .ok_or_else(|| not_found(ObjectKind::Dataset, id))
    }

    fn refuse_system_dataset(
        &self,
        project: ProjectId,
        what: &str,
        action: &'static str,
    ) -> Result<()> {
        if project == system::SYSTEM_PROJECT {
            return Err(CatalogError::Reserved {
                kind: ObjectKind::Project,
                name: format!("{}: {what}", system::SYSTEM_PROJECT_NAME),
                action,
            }
            .into());
        }
        Ok(())
    }

    /// Creates a dataset in a project.
    pub fn create_dataset(&self, project: ProjectId, name: &str) -> Result<DatasetId> {
        check_user_name(ObjectKind::Dataset, name)?;
        let _ddl = self.ddl_lock();
        let p = self.existing_project(project)?;
        self.refuse_system_dataset(project, name, "changed")?;
        if self.read().dataset_by_name(project, name).is_some() {
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Dataset,
                name: format!("{}.{name}", p.name),
            }
            .into());
        }
        let id = DatasetId::generate();
        let now = self.engine.clock.next(&self.engine.storage)?;
        self.apply(vec![Self::dataset_row(id, project, name, now)?])?;
        self.write_state().insert_dataset(DatasetEntry {
            id,
            project,
            name: name.to_string(),
            created_at: now,
        });
        Ok(id)
    }

    /// Renames a dataset; only catalog rows change.
    pub fn rename_dataset(&self, id: DatasetId, new_name: &str) -> Result<()> {
        check_user_name(ObjectKind::Dataset, new_name)?;
        let _ddl = self.ddl_lock();
        let entry = self.existing_dataset(id)?;
        self.refuse_system_dataset(entry.project, &entry.name, "renamed")?;
        if entry.name == new_name {
            return Ok(());
        }
        if self
            .read()
            .dataset_by_name(entry.project, new_name)
            .is_some()
        {
            let path = self.read().dataset_path(id);
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Dataset,
                name: format!(
                    "{}.{new_name}",
                    path.rsplit_once('.').map_or("", |(p, _)| p)
                ),
            }
            .into());
        }
        let project_text = entry.project.to_string();
        self.apply(vec![
            Self::delete_row(system::DATASETS, &[&project_text, &entry.name])?,
            Self::dataset_row(id, entry.project, new_name, entry.created_at)?,
        ])?;
        let mut state = self.write_state();
        state.remove_dataset(id);
        state.insert_dataset(DatasetEntry {
            name: new_name.to_string(),
            ..entry
        });
        self.refresh_layouts(&mut state)
    }

    /// Drops a dataset, and with [`DropMode::Cascade`] its tables.
    pub fn drop_dataset(&self, id: DatasetId, mode: DropMode) -> Result<()> {
        let _ddl = self.ddl_lock();
        let entry = self.existing_dataset(id)?;
        self.refuse_system_dataset(entry.project, &entry.name, "dropped")?;
        let tables: Vec<TableEntry> = self.read().tables_of(id).into_iter().cloned().collect();
        if mode == DropMode::Restrict && !tables.is_empty() {
            return Err(CatalogError::NotEmpty {
                kind: ObjectKind::Dataset,
                name: self.read().dataset_path(id),
                children: tables.len(),
                child_kind: ObjectKind::Table,
            }
            .into());
        }
        let dataset_text = id.to_string();
        let mut writes = vec![Self::delete_row(
            system::DATASETS,
            &[&entry.project.to_string(), &entry.name],
        )?];
        for t in &tables {
            writes.push(Self::delete_row(system::TABLES, &[&dataset_text, &t.name])?);
        }
        self.apply(writes)?;
        {
            let mut state = self.write_state();
            for t in &tables {
                state.remove_table(t.id);
            }
            state.remove_dataset(id);
        }
        self.drop_table_trees(&tables)
    }

    // ----- tables --------------------------------------------------------

    fn existing_table(&self, id: TableId) -> Result<TableEntry> {
        self.read()
            .table(id)
            .cloned()
            .ok_or_else(|| not_found(ObjectKind::Table, id))
    }

    fn refuse_system_table(entry: &TableEntry, action: &'static str) -> Result<()> {
        if entry.id.is_reserved() {
            return Err(CatalogError::Reserved {
                kind: ObjectKind::Table,
                name: entry.layout.name.clone(),
                action,
            }
            .into());
        }
        Ok(())
    }

    /// Checks a spec and assigns family ids from `next_family_id` to families
    /// that have none yet (those not in `existing`). Returns the next id.
    fn prepare_spec(
        path: &str,
        mut spec: TableSpec,
        existing: Option<&TableSpec>,
        mut next_family_id: u16,
    ) -> Result<(TableSpec, u16)> {
        let invalid = |reason: String| CatalogError::InvalidSpec {
            table: path.to_string(),
            reason,
        };
        let mut column_names: Vec<&str> = Vec::new();
        match &spec.key {
            RowKeySpec::Key { .. } => column_names.push("_key"),
            RowKeySpec::Generated => {}
            RowKeySpec::Columns(columns) => {
                if columns.is_empty() {
                    return Err(invalid("a primary key needs at least one column".into()).into());
                }
                for c in columns {
                    check_name(ObjectKind::Column, &c.name)?;
                    if crate::table::spec::key_element_kind(c.value_type).is_none() {
                        return Err(invalid(format!(
                            "primary key column '{}' has type {:?}, which cannot be part of a row key",
                            c.name, c.value_type
                        ))
                        .into());
                    }
                    column_names.push(&c.name);
                }
            }
        }
        let mut family_names: Vec<&str> = Vec::new();
        for family in &spec.families {
            check_name(ObjectKind::Family, &family.name)?;
            check_name(ObjectKind::LocalityGroup, &family.locality_group)?;
            if family_names.contains(&family.name.as_str()) {
                return Err(
                    invalid(format!("column family '{}' is declared twice", family.name)).into(),
                );
            }
            family_names.push(&family.name);
            check_gc(path, &family.name, &family.gc)?;
            if let (Some(_), Some(c)) = (
                family.gc.max_age_micros,
                family.columns.iter().find(|c| !c.nullable),
            ) {
                return Err(invalid(format!(
                    "column family '{}' has a TTL, so its NOT NULL column '{}' could expire; declare the column nullable or put it in a family without a TTL",
                    family.name, c.name
                ))
                .into());
            }
            if family.qualifier_type.is_some() {
                column_names.push(&family.name);
            }
            for c in &family.columns {
                check_name(ObjectKind::Column, &c.name)?;
            }
            column_names.extend(family.columns.iter().map(|c| c.name.as_str()));
        }
        let mut sorted = column_names.clone();
        sorted.sort_unstable();
        if let Some(dup) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(invalid(format!("column '{}' is defined twice", dup[0])).into());
        }
        for family in &mut spec.families {
            match existing.and_then(|e| e.family(&family.name)) {
                Some(old) => family.id = old.id,
                None => {
                    // The last id is the delete markers'.
                    if next_family_id == crate::table::layout::MARK_FAMILY {
                        return Err(
                            invalid("the table has used up its 65535 family ids".into()).into()
                        );
                    }
                    family.id = next_family_id;
                    next_family_id += 1;
                }
            }
        }
        Ok((spec, next_family_id))
    }

    /// Creates a table in a dataset.
    pub fn create_table(&self, dataset: DatasetId, name: &str, spec: TableSpec) -> Result<TableId> {
        let staged = self.stage_table(dataset, name, spec, false)?;
        self.commit_table(staged, false)
    }

    /// Checks a new table (name, spec, and that the name is free unless
    /// `replace`) and creates its trees, without a catalog row yet.
    pub fn stage_table(
        &self,
        dataset: DatasetId,
        name: &str,
        spec: TableSpec,
        replace: bool,
    ) -> Result<StagedTable> {
        check_user_name(ObjectKind::Table, name)?;
        let _ddl = self.ddl_lock();
        let d = self.existing_dataset(dataset)?;
        self.refuse_system_dataset(d.project, name, "changed")?;
        let path = self.read().table_path(dataset, name);
        if !replace {
            self.refuse_taken_table_name(dataset, name)?;
        }
        let (spec, next_family_id) = Self::prepare_spec(&path, spec, None, 0)?;
        let id = TableId::generate();
        self.staged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id);
        let layout = Layout::new(
            &self.engine.storage,
            id,
            path,
            spec,
            &Placement::OwnTrees,
            false,
        );
        let layout = match layout {
            Ok(layout) => Arc::new(layout),
            Err(e) => {
                self.unstage(id);
                return Err(e.into());
            }
        };
        Ok(StagedTable {
            dataset,
            name: name.to_string(),
            next_family_id,
            layout,
        })
    }

    fn refuse_taken_table_name(&self, dataset: DatasetId, name: &str) -> Result<()> {
        if self.read().table_by_name(dataset, name).is_some() {
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Table,
                name: self.read().table_path(dataset, name),
            }
            .into());
        }
        Ok(())
    }

    fn unstage(&self, id: TableId) {
        self.staged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Makes a staged table visible under its name in one atomic catalog
    /// write. With `replace`, a table of that name is replaced by it (its
    /// catalog row is overwritten in the same write, its trees dropped
    /// after); without, a table of that name makes this fail. On failure
    /// the staged table is abandoned.
    pub fn commit_table(&self, staged: StagedTable, replace: bool) -> Result<TableId> {
        let result = self.commit_staged(&staged, replace);
        self.unstage(staged.layout.id);
        match result {
            Ok((id, replaced)) => {
                // The new table is committed: only the old one's trees go
                // now (if that fails, the next open removes them).
                if let Some(old) = replaced {
                    self.drop_table_trees(&[old])?;
                }
                Ok(id)
            }
            Err(e) => {
                let _ = self.drop_table_trees_of(&staged.layout);
                Err(e)
            }
        }
    }

    /// Writes the catalog row of a staged table; returns its id and the
    /// table it replaced.
    fn commit_staged(
        &self,
        staged: &StagedTable,
        replace: bool,
    ) -> Result<(TableId, Option<TableEntry>)> {
        let _ddl = self.ddl_lock();
        let StagedTable {
            dataset,
            name,
            next_family_id,
            layout,
        } = staged;
        let d = self.existing_dataset(*dataset)?;
        self.refuse_system_dataset(d.project, name, "changed")?;
        let old = self.read().table_by_name(*dataset, name).cloned();
        if old.is_some() && !replace {
            self.refuse_taken_table_name(*dataset, name)?;
        }
        let id = layout.id;
        let now = self.engine.clock.next(&self.engine.storage)?;
        // The row of the old table, if any, has the same key: this write
        // replaces it whole (`id`, `spec`, … are all set anew).
        self.apply(vec![Self::table_row(
            id,
            *dataset,
            name,
            now,
            &layout.spec,
            *next_family_id,
        )?])?;
        {
            let mut state = self.write_state();
            if let Some(old) = &old {
                state.remove_table(old.id);
            }
            state.insert_table(TableEntry {
                id,
                dataset: *dataset,
                name: name.clone(),
                created_at: now,
                next_family_id: *next_family_id,
                layout: Arc::clone(layout),
            });
        }
        Ok((id, old))
    }

    /// A store that writes into a staged table.
    pub fn staged_store(&self, staged: &StagedTable) -> TableStore {
        TableStore::new(Arc::clone(&self.engine), Arc::clone(&staged.layout))
    }

    /// Drops the trees of a staged table that will not be committed.
    pub fn abandon_table(&self, staged: StagedTable) -> Result<()> {
        self.unstage(staged.layout.id);
        self.drop_table_trees_of(&staged.layout)
    }

    /// Renames a table (also moves it to `new_dataset`); only catalog rows
    /// change.
    pub fn rename_table(&self, id: TableId, new_dataset: DatasetId, new_name: &str) -> Result<()> {
        check_user_name(ObjectKind::Table, new_name)?;
        let _ddl = self.ddl_lock();
        let entry = self.existing_table(id)?;
        Self::refuse_system_table(&entry, "renamed")?;
        let target = self.existing_dataset(new_dataset)?;
        self.refuse_system_dataset(target.project, new_name, "changed")?;
        if entry.dataset == new_dataset && entry.name == new_name {
            return Ok(());
        }
        if self.read().table_by_name(new_dataset, new_name).is_some() {
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Table,
                name: self.read().table_path(new_dataset, new_name),
            }
            .into());
        }
        self.apply(vec![
            Self::delete_row(system::TABLES, &[&entry.dataset.to_string(), &entry.name])?,
            Self::table_row(
                id,
                new_dataset,
                new_name,
                entry.created_at,
                entry.spec(),
                entry.next_family_id,
            )?,
        ])?;
        let mut state = self.write_state();
        state.remove_table(id);
        state.insert_table(TableEntry {
            dataset: new_dataset,
            name: new_name.to_string(),
            ..entry
        });
        self.refresh_layouts(&mut state)
    }

    /// Drops a table and its data.
    pub fn drop_table(&self, id: TableId) -> Result<()> {
        let _ddl = self.ddl_lock();
        let entry = self.existing_table(id)?;
        Self::refuse_system_table(&entry, "dropped")?;
        self.apply(vec![Self::delete_row(
            system::TABLES,
            &[&entry.dataset.to_string(), &entry.name],
        )?])?;
        self.write_state().remove_table(id);
        self.drop_table_trees(&[entry])
    }

    /// Replaces a table's spec by `change(old spec)`, keeping family ids.
    ///
    /// A GC policy that gets looser must not bring back what the old one
    /// hid. Writes wait while it takes over: versions beyond the old
    /// `max_versions` are compacted away, and a loosened TTL leaves a floor
    /// (`hidden_before`) below which versions stay hidden. Cells of dropped
    /// families are removed after the change.
    pub fn alter_table(
        &self,
        id: TableId,
        change: impl FnOnce(&TableSpec) -> Result<TableSpec>,
    ) -> Result<()> {
        let _ddl = self.ddl_lock();
        let entry = self.existing_table(id)?;
        Self::refuse_system_table(&entry, "changed")?;
        let old = entry.spec().clone();
        let path = entry.layout.name.clone();
        let (mut spec, next_family_id) =
            Self::prepare_spec(&path, change(&old)?, Some(&old), entry.next_family_id)?;
        let looser =
            |old: Option<u64>, new: Option<u64>| old.is_some_and(|o| new.is_none_or(|n| n > o));
        let mut more_versions = Vec::new();
        let mut longer_ttl = Vec::new();
        for family in &spec.families {
            let Some(before) = old.family(&family.name) else {
                continue;
            };
            if looser(
                before.gc.max_versions.map(u64::from),
                family.gc.max_versions.map(u64::from),
            ) {
                more_versions.push((before.id, before.gc));
            }
            let age = |gc: &GcPolicy| gc.max_age_micros.map(|a| a.max(0) as u64);
            if let (true, Some(old_age)) = (
                looser(age(&before.gc), age(&family.gc)),
                before.gc.max_age_micros,
            ) {
                longer_ttl.push((family.name.clone(), old_age));
            }
        }
        let _writes_wait = (!more_versions.is_empty() || !longer_ttl.is_empty())
            .then(|| self.engine.locks.write_every());
        let store = TableStore::new(Arc::clone(&self.engine), Arc::clone(&entry.layout));
        for policy in more_versions {
            store.compact_checked(&crate::table::unchecked, Some(policy), false)?;
        }
        let now = crate::clock::wall_micros();
        for (name, old_age) in longer_ttl {
            if let Some(family) = spec.families.iter_mut().find(|f| f.name == name) {
                family.hidden_before = family.hidden_before.max(Some(now.saturating_sub(old_age)));
            }
        }
        let layout = Arc::new(Layout::new(
            &self.engine.storage,
            id,
            path,
            spec.clone(),
            &Placement::OwnTrees,
            false,
        )?);
        let row = Self::table_row(
            id,
            entry.dataset,
            &entry.name,
            entry.created_at,
            &spec,
            next_family_id,
        )?;
        match &_writes_wait {
            Some(_) => self.apply_holding_row_locks(vec![row])?,
            None => self.apply(vec![row])?,
        }
        self.write_state().insert_table(TableEntry {
            next_family_id,
            layout: Arc::clone(&layout),
            ..entry
        });
        drop(_writes_wait);
        let dropped_family = old.families.iter().any(|f| spec.family(&f.name).is_none());
        if dropped_family {
            TableStore::new(Arc::clone(&self.engine), layout).compact()?;
            self.remove_orphan_trees()?;
        }
        Ok(())
    }

    /// Compacts table `id`; each batch is applied only while the layout it
    /// was judged by is still the table's, under the DDL lock.
    pub fn compact_table(&self, id: TableId) -> Result<u64> {
        let Some(store) = self.store(id) else {
            return Ok(0);
        };
        let check = |layout: &Arc<Layout>, apply: &mut dyn FnMut() -> Result<()>| {
            let _ddl = self.ddl_lock();
            let current = self
                .read()
                .table(id)
                .is_some_and(|t| Arc::ptr_eq(&t.layout, layout));
            if current {
                apply()?;
            }
            Ok(current)
        };
        store.compact_checked(&check, None, true)
    }

    fn drop_table_trees(&self, tables: &[TableEntry]) -> Result<()> {
        for t in tables {
            self.drop_table_trees_of(&t.layout)?;
        }
        Ok(())
    }

    fn drop_table_trees_of(&self, layout: &Layout) -> Result<()> {
        for group in &layout.groups {
            self.engine
                .storage
                .drop_tree(&crate::table::layout::group_tree_name(
                    layout.id,
                    &group.name,
                ))?;
        }
        Ok(())
    }

    /// Rebuilds every table layout, so qualified names in messages follow a
    /// rename.
    fn refresh_layouts(&self, state: &mut CatalogState) -> Result<()> {
        let ids: Vec<TableId> = state
            .tables
            .keys()
            .copied()
            .filter(|id| !id.is_reserved())
            .collect();
        for id in ids {
            let Some(entry) = state.tables.get(&id) else {
                continue;
            };
            let path = state.table_path(entry.dataset, &entry.name);
            if path == entry.layout.name {
                continue;
            }
            let layout = Layout::new(
                &self.engine.storage,
                id,
                path,
                entry.spec().clone(),
                &Placement::OwnTrees,
                false,
            )?;
            if let Some(entry) = state.tables.get_mut(&id) {
                entry.layout = Arc::new(layout);
            }
        }
        Ok(())
    }
}

fn check_gc(table: &str, family: &str, gc: &GcPolicy) -> Result<(), CatalogError> {
    let reason = if gc.max_versions == Some(0) {
        "max_versions must be at least 1"
    } else if gc.max_age_micros.is_some_and(|age| age <= 0) {
        "the maximum age must be positive"
    } else {
        return Ok(());
    };
    Err(CatalogError::InvalidSpec {
        table: table.to_string(),
        reason: format!("column family '{family}': {reason}"),
    })
}

/// A family spec with the GC policy replaced.
pub fn with_gc(spec: &TableSpec, family: &str, gc: GcPolicy, table: &str) -> Result<TableSpec> {
    let mut spec = spec.clone();
    let f = spec
        .families
        .iter_mut()
        .find(|f| f.name == family)
        .ok_or_else(|| TableError::UnknownFamily {
            table: table.to_string(),
            family: family.to_string(),
        })?;
    f.gc = gc;
    Ok(spec)
}

/// A spec with one more family.
pub fn with_family(spec: &TableSpec, family: FamilySpec, table: &str) -> Result<TableSpec> {
    if spec.family(&family.name).is_some() {
        return Err(TableError::FamilyExists {
            table: table.to_string(),
            family: family.name,
        }
        .into());
    }
    Ok(spec.clone().with_family(family))
}

/// A spec without the family `family`.
pub fn without_family(spec: &TableSpec, family: &str, table: &str) -> Result<TableSpec> {
    if spec.family(family).is_none() {
        return Err(TableError::UnknownFamily {
            table: table.to_string(),
            family: family.to_string(),
        }
        .into());
    }
    let mut spec = spec.clone();
    spec.families.retain(|f| f.name != family);
    Ok(spec)
}
