//! SQL over widesql tables through Apache DataFusion.
//!
//! A [`Session`] is a DataFusion `SessionContext` whose catalog list is the
//! widesql catalog (project = catalog, dataset = schema). Statements that
//! change the catalog or rows (`CREATE`, `DROP`, `ALTER`, `SHOW`,
//! `DESCRIBE`, `DELETE`, `UPDATE`, `SET widesql.*`) are run by widesql;
//! everything else (queries, `INSERT`, `EXPLAIN`, `TRUNCATE`) is planned
//! and run by DataFusion over widesql's table providers.

mod access;
mod arrow_cells;
pub mod catalog;
mod checked;
mod ddl;
mod dispatch;
pub mod dml;
mod error;
mod frame;
mod front_door;
mod in_subquery;
mod key_lookup;
mod literal;
pub(crate) mod names;
mod nesting;
mod planned;
mod prepared;
pub mod pushdown;
pub mod scan;
mod session;
mod settings;
pub mod shape;
pub mod table;
mod types;
pub mod values;
pub mod versions;

pub use error::from_df;
pub use frame::Frame;
pub use front_door::PlanCacheStats;
pub use prepared::Prepared;
pub use session::{Session, SessionOptions, StatementOutput};
