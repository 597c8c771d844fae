//! SQL over widesql tables through Apache DataFusion, by stage:
//!
//! - [`session`](crate::sql::session): the front door. A [`Session`] is a DataFusion
//!   `SessionContext` whose catalog list is the widesql catalog (project =
//!   catalog, dataset = schema); every statement enters through it, is
//!   checked (depth, access), looked up in the plan cache, and dispatched:
//!   statements that change the catalog or rows (`CREATE`, `DROP`,
//!   `ALTER`, `SHOW`, `DESCRIBE`, `DELETE`, `UPDATE`, `SET widesql.*`,
//!   `COPY … TO` a file) are run by widesql, everything else (queries,
//!   `INSERT`, `EXPLAIN`, `TRUNCATE`) is planned and run by DataFusion.
//! - [`rules`](crate::sql::rules): what widesql adds to DataFusion's planning: the `MAP(K, V)`
//!   type, integers that fail instead of wrapping, `[NOT] IN (subquery)`
//!   under three-valued logic.
//! - [`read`](crate::sql::read): tables and catalogs as DataFusion providers, the scan plan,
//!   key pushdown, key lookups, version views, rows shaped into batches.
//! - [`dml`](crate::sql::dml): the one write path (`INSERT`, `UPDATE`, `DELETE`).
//! - [`ddl`](crate::sql::ddl): one file per kind of catalog statement.
//! - [`values`](crate::sql::values): cell bytes and Arrow values, both ways; literals.
//! - [`files`](crate::sql::files): exports and imports (`COPY … TO`, [`Session::export`],
//!   [`Session::import`]).
//!
//! [`Session`] and its methods are defined in `session/` alone; the other
//! stages are functions that take the session (`tests/layers.rs` checks).

pub mod ddl;
pub mod dml;
mod error;
pub mod files;
pub mod read;
pub mod rules;
pub(crate) mod runtime;
pub mod session;
pub mod values;

pub use error::{from_df, SqlError};
pub use session::frame::Frame;
pub use session::front_door::PlanCacheStats;
pub use session::prepared::Prepared;
pub use session::{Session, SessionOptions, StatementOutput};
