//! The catalog: projects → datasets → tables, and the users and grants
//! that say who may use them, stored as rows of the system
//! tables ([`system`](crate::catalog::system)) and mirrored in memory for lookups.
//!
//! Every change is validated in full, then written as one atomic storage
//! batch, then applied to the in-memory state, all while the DDL lock is
//! held: there is no half-created table, and of two sessions creating the
//! same name exactly one wins. The data tree of a dropped table is removed after
//! the catalog batch; a crash in between leaves a tree that no table owns,
//! and opening the database removes it.

mod dataset;
mod error;
mod move_steps;
mod moves;
pub(crate) mod names;
mod privileges;
mod project;
mod routing;
mod rows;
mod spec;
mod state;
pub mod system;
mod table;
mod tablets;
mod users;

pub use error::{not_found, CatalogError, ObjectKind};
pub use move_steps::{crash_moves_at, hold_moves_at, limit_keys_noted, MoveHold, MoveStep};
pub use privileges::{Privilege, Securable};
pub use routing::WorkerStores;
pub use spec::{with_family, with_gc, without_family, KEY_COLUMN, ROWID_COLUMN};
pub use state::{CatalogState, DatasetEntry, ProjectEntry, TableEntry};
use tablets::StoredTablet;
pub use tablets::{bytes_literal, key_elements, key_literal, SplitPoint, Tablet, NO_PRIMARY_KEY};
pub use users::UserEntry;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use crate::error::{ErrorKind, Result};
use crate::ids::{DatasetId, ProjectId, TableId};
use crate::keys::{decode_tuple, encode_tuple, Element, ElementKind};
use crate::table::layout::{parse_table_tree_name, Layout, Placement};
use crate::table::spec::{FamilySpec, GcPolicy, RowKeySpec, TableSpec};
use crate::table::{Engine, ReadOptions, Row, RowMutation, RowSet, TableError, TableStore};
use names::{check_name, check_user_name};
use system::SystemTable;

/// The project that plain, unqualified names resolve in.
pub const DEFAULT_PROJECT: &str = "default";
/// The dataset that plain, unqualified names resolve in.
pub const DEFAULT_DATASET: &str = "public";

/// Whether dropping an object also drops its children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropMode {
    /// Refuse when the object has children.
    Restrict,
    /// Drop the children too.
    Cascade,
}

/// The catalog of one database.
#[derive(Debug)]
pub struct Catalog {
    engine: Arc<Engine>,
    state: RwLock<CatalogState>,
    ddl: Mutex<()>,
    system_stores: Vec<(TableId, TableStore)>,
    /// Tables being built ([`Catalog::stage_table`]): their tree exists but
    /// no catalog row names them yet, so orphan removal must spare them.
    staged: Mutex<std::collections::HashSet<TableId>>,
    /// Counts changes to the in-memory state: what a name resolves to can
    /// only have changed when this moved (see [`Catalog::generation`]).
    generation: AtomicU64,
    /// The stores of the workers the tablet map names.
    workers: routing::Workers,
}

/// A table whose tree exists and can be written, but that no catalog row
/// names yet: what `CREATE TABLE … AS` and `CREATE OR REPLACE` fill before
/// [`Catalog::commit_table`] makes it visible in one atomic batch. If the
/// process dies first, the tree is an orphan and goes at the next open.
#[derive(Debug)]
pub struct StagedTable {
    dataset: DatasetId,
    name: String,
    next_family_id: u16,
    layout: Arc<Layout>,
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
            generation: AtomicU64::new(0),
            workers: routing::Workers::default(),
        };
        catalog.load()?;
        if catalog.read().project(system::SYSTEM_PROJECT).is_none() {
            catalog.bootstrap()?;
        }
        catalog.remove_orphan_trees()?;
        catalog.remove_orphan_rows(system::GRANTS, CatalogState::holds_grant)?;
        catalog.record_dropped_tablets()?;
        catalog.remove_orphan_rows(system::TABLETS, CatalogState::has_tablet_row)?;
        catalog.remove_moved_away()?;
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
        let state = self.state.write().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        state
    }

    /// A number that changes whenever the catalog does (DDL of any
    /// object, a rename included). Read it before resolving names: a plan
    /// made from those names is current while the number is unchanged.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Held by every DDL change; readers of the storage layout hold it so
    /// that no table is dropped under them.
    pub(crate) fn ddl_lock(&self) -> std::sync::MutexGuard<'_, ()> {
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
}
