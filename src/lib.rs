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
//! Layers, each depending only on those above it in this list:

#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// Projects, datasets, tables and the system tables.
pub mod catalog;
/// Server timestamps, strictly increasing across restarts.
pub mod clock;
/// The embedded API: `Db` and its handles.
pub mod db;
/// The crate error.
pub mod error;
/// Typed project, dataset and table ids.
pub mod ids;
/// The key codec: order-preserving tuple encoding, the on-disk key format.
pub mod keys;
/// SQL through DataFusion: catalog providers, scans, DDL and DML.
pub mod sql;
/// The storage layer: the only module that calls sled.
pub mod storage;
/// Wide-column tables: cells, mutations, reads, GC.
pub mod table;

pub use catalog::{DropMode, ObjectKind};
pub use db::{Dataset, Db, DbOptions, Project, Table};
pub use error::{Error, ErrorKind, Result};
pub use ids::{DatasetId, ProjectId, TableId};
pub use sql::{Session, SessionOptions, StatementOutput};
pub use table::spec::{
    ColumnSpec, DroppedColumn, FamilySpec, GcPolicy, RowKeySpec, TableSpec, ValueType,
};
pub use table::{
    Cell, DeleteScope, Filter, Mutation, QualifierFilter, ReadModifyWriteRule, ReadOptions,
    ResumeToken, Row, RowIter, RowMutation, RowRange, RowSet, ValueFilter, STATEMENT_ATOMIC_ROWS,
};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
