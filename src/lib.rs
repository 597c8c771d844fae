//! widesql: an embedded SQL engine over Bigtable-style wide-column tables
//! stored in sled.
//!
//! A table is a sparse, sorted map `(row key, family, qualifier, timestamp)
//! → value`. Rows are sorted by key and read or written atomically; families
//! are declared, qualifiers are free-form; every cell keeps timestamped
//! versions, garbage-collected per family; families read together share a
//! locality group (one sled tree). Tables live in datasets, datasets in
//! projects; the catalog itself is stored in system tables.
//!
//! ```
//! use widesql::{Db, FamilySpec, Filter, RowMutation, TableSpec};
//!
//! # fn main() -> widesql::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let db = Db::open(dir.path().join("db"))?;
//! let webtable = db
//!     .create_project("acme")?
//!     .create_dataset("web")?
//!     .create_table(
//!         "webtable",
//!         TableSpec::new()
//!             .with_family(FamilySpec::new("contents").with_locality_group("blobs").with_max_versions(3))
//!             .with_family(FamilySpec::new("anchor")),
//!     )?;
//!
//! webtable.mutate_row(
//!     b"com.cnn.www",
//!     &RowMutation::new()
//!         .set("contents", "", "<html>…")
//!         .set("anchor", "cnnsi.com", "CNN")
//!         .set("anchor", "my.look.ca", "CNN.com"),
//! )?;
//!
//! let anchors = Filter::all().with_families(["anchor"]);
//! let row = webtable.read_row(b"com.cnn.www", &anchors)?.expect("the row exists");
//! assert_eq!(row.cells.len(), 2);
//! assert_eq!(row.value("anchor", b"my.look.ca"), Some(&b"CNN.com"[..]));
//! # Ok(()) }
//! ```
//!
//! The public API is re-exported here; the modules are the crate's layers,
//! each depending only on those before it: `keys` (the byte layout of every
//! key) → `storage` (the only caller of sled, behind a backend trait) →
//! `clock` (server timestamps) → `table` (cells, mutations, reads, GC) →
//! `catalog` (projects, datasets, tables, users and grants, system tables)
//! → `access` (the rules of access checks) → `db` (the handles) → `sql`
//! (DataFusion, export and import); `tests/layers.rs` checks the order.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// Passwords and the rules of access checks.
pub(crate) mod access;
/// Projects, datasets, tables and the system tables.
pub(crate) mod catalog;
/// Server timestamps, strictly increasing across restarts.
pub(crate) mod clock;
/// The embedded API: `Db` and its handles.
pub(crate) mod db;
/// The crate error.
pub(crate) mod error;
/// Typed project, dataset and table ids.
pub(crate) mod ids;
/// The key codec: order-preserving tuple encoding, the on-disk key format.
pub(crate) mod keys;
/// SQL through DataFusion: catalog providers, scans, DDL and DML.
pub(crate) mod sql;
/// The storage layer: the only module that calls sled.
pub(crate) mod storage;
/// Wide-column tables: cells, mutations, reads, GC.
pub(crate) mod table;

pub use access::{AccessError, Privilege, Securable};
pub use catalog::{CatalogError, DropMode, ObjectKind, Tablet};
pub use clock::wall_micros;
pub use db::{
    Activity, ActivityEntry, Dataset, Db, DbOptions, Project, Running, Table, WorkerEntry, Workers,
};
pub use error::{panic_message, Error, ErrorKind, Result};
pub use ids::{DatasetId, ProjectId, TableId, TabletId};
pub use keys::KeyError;
/// Query results out to Parquet, Arrow IPC, CSV and JSON files.
pub use sql::files::export;
/// Parquet, Arrow IPC, CSV and JSON files into tables.
pub use sql::files::import;
pub use sql::files::FileFormat;
pub use sql::{
    Frame, PlanCacheStats, Prepared, Session, SessionOptions, SqlError, StatementOutput,
};
pub use storage::{Bytes, CommitStats, Durability, Health, StorageError};
pub use table::spec::{
    ArrowType, ColumnSpec, DroppedColumn, FamilySpec, GcPolicy, RowKeySpec, TableSpec, Unit,
    ValueType,
};
pub use table::{
    Cell, CellRef, DeleteScope, Filter, Mutation, QualifierFilter, ReadModifyWriteRule,
    ReadOptions, ResumeToken, Row, RowIter, RowMutation, RowRange, RowRef, RowSet, TableError,
    ValueFilter, MAX_QUALIFIER_LEN, MAX_ROW_KEY_LEN, MAX_VALUE_LEN, STATEMENT_ATOMIC_BYTES,
    STATEMENT_ATOMIC_ROWS,
};

/// Internals for widesql's own tests, fuzz targets and benchmarks: the key
/// codec, the cell value codec, the key-set algebra of pushdown, and the
/// storage backends (the in-memory one
/// injects faults). Not part of the supported API; it may change in any
/// release.
#[doc(hidden)]
pub mod internals {
    pub use crate::catalog::{
        crash_moves_at, hold_moves_at, limit_keys_noted, MoveHold, MoveStep, WorkerStores,
    };
    pub use crate::db::{
        apply_held, drop_held, dropped_tables, held_entries, held_keys_read, held_tables,
        settle_held, stored_entries,
    };
    pub use crate::keys::{
        decode_tuple, encode_tuple, prefix_successor, put_bytes, CellKey, Element, ElementKind,
        FORMAT_VERSION,
    };
    pub use crate::sql::read::pushdown::{Interval, KeySet};
    pub use crate::sql::read::shipped::{held_scan, ship_scan, worker_tasks, WorkerTask};
    pub use crate::sql::session::{extend_sessions, with_functions, SessionHook};
    pub use crate::sql::values::{
        append_cell, append_element, builder, encode_cell, encode_element,
    };

    /// Removes the master's copies of the tablets its workers hold now, as
    /// opening the database does: for tests, so that a read that reached
    /// this process instead of a tablet's worker would find no row. A
    /// query running meanwhile could miss rows of a tablet that moved.
    pub fn remove_moved_away(db: &crate::Db) -> crate::Result<()> {
        db.catalog().remove_moved_away()
    }

    /// Makes `db` reach the workers its tablet map names through `stores`
    /// (the server calls it on a cluster's master).
    pub fn reach_workers(db: &crate::Db, stores: std::sync::Arc<dyn WorkerStores>) {
        db.catalog().reach_workers(stores);
    }
    pub use crate::storage::{
        Backend, BackendError, BackendIter, BackendTree, Bytes, Fault, MemoryBackend, SledBackend,
        TreeWrites, Write,
    };
    pub use crate::table::chunks::{encode_chunk, ChunkReader};
    pub use crate::table::entries::ENTRY_BYTES;
    pub use crate::table::layout::table_tree_name;

    /// The row-lock stripe of the row `key` of `table`: rows on one stripe
    /// wait for each other's writers, which a test of queued writers must
    /// keep apart.
    pub fn lock_stripe(table: &crate::Table, key: &[u8]) -> crate::Result<usize> {
        Ok(table.store()?.row_stripe(key))
    }
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
