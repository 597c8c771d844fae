//! DataFusion errors and ours: ours cross DataFusion as `External` and are
//! unwrapped again; DataFusion's stay whole, as the source.

use datafusion::common::DataFusionError;

use crate::error::{Error, ErrorKind};

/// Why widesql refused or stopped a SQL statement. The same violation has
/// the same variant (and [`kind`](SqlError::kind)) whichever way the
/// statement came in: `Session::run`, `Session::sql`, a prepared
/// statement, an import, the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlError {
    /// A statement, clause or option widesql does not run.
    #[error("{0}")]
    Unsupported(String),
    /// A name that is not of the form the statement needs.
    #[error("'{name}' is not {expected}")]
    BadName {
        /// The name as written.
        name: String,
        /// What it should have been, e.g. "a [[project.]dataset.]table name".
        expected: &'static str,
    },
    /// A column the table does not have.
    #[error("table '{table}' has no column '{column}'")]
    UnknownColumn {
        /// The table, qualified.
        table: String,
        /// The column.
        column: String,
    },
    /// A NULL for a NOT NULL column.
    #[error("column '{column}' of table '{table}' is NOT NULL: it cannot be set to NULL")]
    NotNull {
        /// The table.
        table: String,
        /// The column.
        column: String,
    },
    /// A value that does not fit its column's type.
    #[error("column '{column}': {reason}")]
    DoesNotFit {
        /// The column.
        column: String,
        /// Which value, and why.
        reason: String,
    },
    /// A statement past one of the limits of a statement's size (nesting
    /// depth, tables joined).
    #[error("{0}")]
    TooComplex(String),
    /// A statement that is wrong for another reason; the message says why.
    #[error("{0}")]
    Invalid(String),
    /// What went wrong with one row of a statement's input (counted from
    /// 1); its kind is that of the cause.
    #[error("row {row}: {source}")]
    AtRow {
        /// The row.
        row: u64,
        /// What went wrong.
        source: Box<Error>,
    },
}

impl SqlError {
    /// The category of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SqlError::Unsupported(_) => ErrorKind::Unsupported,
            SqlError::BadName { .. } => ErrorKind::InvalidName,
            SqlError::UnknownColumn { .. } => ErrorKind::NotFound,
            SqlError::NotNull { .. } => ErrorKind::ConstraintViolation,
            SqlError::DoesNotFit { .. } => ErrorKind::InvalidArgument,
            SqlError::TooComplex(_) => ErrorKind::LimitExceeded,
            SqlError::Invalid(_) => ErrorKind::Sql,
            SqlError::AtRow { source, .. } => source.kind(),
        }
    }
}

/// `error` as DataFusion carries errors, to be unwrapped again by
/// [`from_df`] when it comes out.
pub fn to_df(error: impl Into<Error>) -> DataFusionError {
    DataFusionError::External(Box::new(error.into()))
}

/// Turns a DataFusion error back into ours when it wraps one (our errors
/// cross DataFusion as `External`); a feature DataFusion does not have is
/// [`SqlError::Unsupported`]; any other stays DataFusion's, kept whole as
/// the source. A table DataFusion did not find is named by the planner's
/// caller, which looks the statement's tables up itself
/// (`Session::plan`), not read from DataFusion's message.
pub fn from_df(e: DataFusionError) -> Error {
    match e {
        DataFusionError::External(inner) => match inner.downcast::<Error>() {
            Ok(ours) => *ours,
            Err(other) => Error::DataFusion(Box::new(DataFusionError::External(other))),
        },
        DataFusionError::Context(_, inner) => from_df(*inner),
        e @ DataFusionError::NotImplemented(_) => Error::Sql(SqlError::Unsupported(e.to_string())),
        other => Error::DataFusion(Box::new(other)),
    }
}

impl From<DataFusionError> for Error {
    fn from(e: DataFusionError) -> Self {
        from_df(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_come_back_out_of_datafusion_and_theirs_stay_whole() {
        let ours = to_df(SqlError::NotNull {
            table: "t".into(),
            column: "c".into(),
        });
        let back = from_df(DataFusionError::Context("writing".into(), Box::new(ours)));
        assert!(
            matches!(back, Error::Sql(SqlError::NotNull { .. })),
            "{back}"
        );
        assert_eq!(back.kind(), ErrorKind::ConstraintViolation);
        let theirs = from_df(DataFusionError::Plan("table 'w' not found".into()));
        assert!(matches!(theirs, Error::DataFusion(_)), "{theirs}");
        assert_eq!(theirs.kind(), ErrorKind::Sql);
        let missing = from_df(DataFusionError::NotImplemented("LATERAL".into()));
        assert_eq!(missing.kind(), ErrorKind::Unsupported);
        assert!(missing.to_string().contains("LATERAL"), "{missing}");
    }
}
