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
pub(crate) mod tablets;
pub(crate) mod users;

use std::fmt;

use datafusion::sql::sqlparser::parser::{Parser, ParserError};

use crate::error::{Error, Result};
use crate::sql::{Frame, Session, SqlError};
use tablets::TabletStatement;
use users::AccessStatement;

/// A statement widesql's parser reads and DataFusion's does not, at the
/// same position of a script as DataFusion's parser would, so that a
/// script mixes them with other statements.
#[derive(Debug, Clone)]
pub(crate) enum OwnStatement {
    /// About users, grants and running statements (see [`users`]).
    Access(AccessStatement),
    /// About tablets (see [`tablets`]).
    Tablets(TabletStatement),
}

impl OwnStatement {
    /// The statement at the parser's position; `None`, with nothing
    /// consumed, when the statement there is DataFusion's.
    pub(crate) fn parse(parser: &mut Parser<'_>) -> Option<std::result::Result<Self, ParserError>> {
        if let Some(access) = users::parse_access(parser) {
            return Some(access.map(OwnStatement::Access));
        }
        tablets::parse_tablets(parser).map(|parsed| parsed.map(OwnStatement::Tablets))
    }

    /// Runs it.
    pub(crate) async fn run(self, session: &Session) -> Result<Frame> {
        match self {
            OwnStatement::Access(statement) => users::run_access(session, statement),
            OwnStatement::Tablets(statement) => tablets::run_tablets(session, statement).await,
        }
    }
}

impl fmt::Display for OwnStatement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OwnStatement::Access(statement) => statement.fmt(f),
            OwnStatement::Tablets(statement) => statement.fmt(f),
        }
    }
}

/// The family that holds declared columns no option places elsewhere.
pub const DEFAULT_FAMILY: &str = "cf";

pub(super) fn sql_error(message: impl Into<String>) -> Error {
    Error::Sql(SqlError::Invalid(message.into()))
}
