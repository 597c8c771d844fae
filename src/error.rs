//! The crate error: one variant per layer, each wrapping that layer's enum.
//!
//! Callers that only care about the category match on [`Error::kind`].

use crate::access::AccessError;
use crate::catalog::CatalogError;
use crate::keys::KeyError;
use crate::sql::SqlError;
use crate::storage::StorageError;
use crate::table::TableError;

/// Any error widesql returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A catalog object was missing, duplicated, misnamed or reserved.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// Authentication failed, or a user lacks a privilege.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// A table operation was refused or found corrupt data.
    #[error(transparent)]
    Table(#[from] TableError),
    /// The storage layer failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A key read from disk could not be decoded.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// widesql refused or stopped a SQL statement.
    #[error(transparent)]
    Sql(#[from] SqlError),
    /// DataFusion failed to parse, plan or run a statement.
    #[error(transparent)]
    DataFusion(Box<datafusion::error::DataFusionError>),
    /// Arrow failed to convert or compute values.
    #[error(transparent)]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    /// A statement larger than one atomic batch stopped after some of its
    /// batches were written: those rows stay written, the rest were not.
    #[error(
        "{source} ({written} rows of the statement were written before it stopped: a statement larger than one atomic batch is applied batch by batch)"
    )]
    PartlyApplied {
        /// Rows written before the error.
        written: usize,
        /// What stopped the statement.
        source: Box<Error>,
    },
    /// A file could not be read or written.
    #[error("{target}: {message}")]
    File {
        /// The file.
        target: String,
        /// What the system said.
        message: String,
    },
    /// Importing a file stopped; the cause says whether rows of it were
    /// written.
    #[error("importing '{file}': {source}")]
    Import {
        /// The file.
        file: String,
        /// What stopped the import.
        source: Box<Error>,
    },
    /// A background thread could not be started.
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        /// What the thread was for.
        what: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
}

/// The category of an [`Error`], for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The named object does not exist.
    NotFound,
    /// An object with that name exists already.
    AlreadyExists,
    /// A name is empty, too long, has control characters or is reserved.
    InvalidName,
    /// An argument is out of range or contradicts the table's spec.
    InvalidArgument,
    /// The object cannot be dropped while it has children.
    NotEmpty,
    /// I/O or the store failed.
    Storage,
    /// Bytes on disk are not what widesql writes.
    Corruption,
    /// A SQL statement failed.
    Sql,
    /// A concurrent change (DDL) made the operation out of date; nothing
    /// was applied and it may be run again.
    Conflict,
    /// The session's user lacks a privilege the statement needs.
    PermissionDenied,
    /// A user name and password did not match, or the session's user is
    /// gone.
    Unauthenticated,
    /// A statement, clause or option widesql does not run.
    Unsupported,
    /// A write would leave a NOT NULL column without a value.
    ConstraintViolation,
    /// A statement is past a limit of its size (nesting depth, tables
    /// joined).
    LimitExceeded,
}

impl Error {
    /// Whether running the operation again may succeed and nothing of it
    /// was applied: the table changed while it waited for its row locks.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Table(TableError::Changed { written: 0, .. }))
    }

    /// The category of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Catalog(e) => e.kind(),
            Error::Access(e) => e.kind(),
            Error::Table(e) => e.kind(),
            Error::Storage(StorageError::UnsupportedFormat { .. })
            | Error::Storage(StorageError::NotWidesql { .. }) => ErrorKind::Corruption,
            Error::Storage(_) => ErrorKind::Storage,
            Error::Key(KeyError::TimestampRange(_)) => ErrorKind::InvalidArgument,
            Error::Key(_) => ErrorKind::Corruption,
            Error::Sql(e) => e.kind(),
            Error::DataFusion(_) | Error::Arrow(_) => ErrorKind::Sql,
            Error::Thread { .. } | Error::File { .. } => ErrorKind::Storage,
            Error::PartlyApplied { source, .. } | Error::Import { source, .. } => source.kind(),
        }
    }
}

/// `Result` with widesql's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The message a panic carried (`panic!` with a literal or a format), for
/// a thread's panic reported as an error.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

/// The error text of a statement that a panic stopped.
pub(crate) fn stopped_by_panic(panic: &(dyn std::any::Any + Send)) -> String {
    format!(
        "the statement stopped on an internal error: {}",
        panic_message(panic)
    )
}
