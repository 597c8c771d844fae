//! DDL: CREATE / DROP / ALTER / SHOW / DESCRIBE on the widesql catalog.
//!
//! `CREATE TABLE` is planned by DataFusion (types, constraints, the query of
//! `CREATE TABLE … AS SELECT`) after widesql's own options are taken out
//! of its `WITH (…)` clause; the resulting schema becomes a table spec:
//!
//! - a column `_key` (VARCHAR or BYTEA) is the row key itself; otherwise a
//!   `PRIMARY KEY` makes typed key columns; otherwise keys are generated;
//! - a `MAP(VARCHAR, T)` column is a family of that name with free
//!   qualifiers;
//! - every other column is a declared qualifier of family `cf`, unless an
//!   option `'<family>.columns' = 'a, b'` places it elsewhere;
//! - `'<family>.max_versions' = 'N'`, `'<family>.ttl' = '7d'` (a duration;
//!   plain numbers are seconds) and `'<family>.locality_group' = 'g'` set
//!   a family's GC policy and locality group.

pub(crate) mod alter;
pub(crate) mod columns;
pub(crate) mod create;
pub(crate) mod drop;
mod options;
pub(crate) mod show;
pub(crate) mod users;

use crate::error::Error;
use crate::sql::SqlError;

/// The family that holds declared columns no option places elsewhere.
pub const DEFAULT_FAMILY: &str = "cf";

pub(super) fn sql_error(message: impl Into<String>) -> Error {
    Error::Sql(SqlError::Invalid(message.into()))
}
