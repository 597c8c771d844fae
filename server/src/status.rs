//! widesql's errors as gRPC statuses: the code says what kind of failure it
//! was, the message is widesql's own.

use arrow_flight::error::FlightError;
use datafusion::error::DataFusionError;
use tonic::{Code, Status};
use widesql::{Error, ErrorKind, TableError};

/// The status of a failed call. One that applied part of itself never
/// has a code that invites running it again (see [`not_to_retry`]).
pub(crate) fn status(error: Error) -> Status {
    let status = status_of_kind(&error);
    match applied_part(&error) {
        true => not_to_retry(status),
        false => status,
    }
}

/// Whether a failed statement left part of its writes applied.
fn applied_part(error: &Error) -> bool {
    match error {
        Error::PartlyApplied { written, source } => *written > 0 || applied_part(source),
        Error::Import { source, .. } => applied_part(source),
        Error::Table(TableError::Changed { written, .. }) => *written > 0,
        _ => false,
    }
}

/// `status` for a call whose writes stay in part: the codes that say the
/// request itself is wrong are kept; the others (a conflict, a limit, a
/// deadline, the server stopping) could invite running the whole call
/// again, and become `FAILED_PRECONDITION`.
pub(crate) fn not_to_retry(status: Status) -> Status {
    let code = match status.code() {
        code @ (Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::OutOfRange
        | Code::Unimplemented) => code,
        _ => Code::FailedPrecondition,
    };
    Status::new(code, status.message())
}

/// The status of `error` by its kind and cause.
fn status_of_kind(error: &Error) -> Status {
    let message = error.to_string();
    if let Error::DataFusion(e) = cause(error) {
        match e.find_root() {
            DataFusionError::ResourcesExhausted(_) => return Status::resource_exhausted(message),
            // What stopped the client's own stream of rows (an ingest that
            // stalled, or that the shutdown ended) keeps the code chosen
            // for it.
            DataFusionError::External(inner) => {
                if let Some(FlightError::Tonic(stopped)) = inner.downcast_ref::<FlightError>() {
                    return Status::new(stopped.code(), message);
                }
            }
            _ => {}
        }
    }
    match error.kind() {
        ErrorKind::NotFound => Status::not_found(message),
        ErrorKind::AlreadyExists => Status::already_exists(message),
        ErrorKind::InvalidName
        | ErrorKind::InvalidArgument
        | ErrorKind::ConstraintViolation
        | ErrorKind::Sql => Status::invalid_argument(message),
        ErrorKind::Unsupported => Status::unimplemented(message),
        ErrorKind::LimitExceeded => Status::resource_exhausted(message),
        ErrorKind::NotEmpty => Status::failed_precondition(message),
        ErrorKind::PermissionDenied => Status::permission_denied(message),
        ErrorKind::Unauthenticated => Status::unauthenticated(message),
        // Nothing was applied; the client may run it again.
        ErrorKind::Conflict if error.is_retryable() => Status::aborted(message),
        // Part of it was (the message says how much): running it again
        // would write that part twice.
        ErrorKind::Conflict => Status::failed_precondition(message),
        ErrorKind::Storage | ErrorKind::Corruption => Status::internal(message),
        _ => Status::unknown(message),
    }
}

/// What stopped a statement: the error itself, or for one that applied
/// part of itself or an import, what stopped it.
fn cause(error: &Error) -> &Error {
    match error {
        Error::PartlyApplied { source, .. } | Error::Import { source, .. } => cause(source),
        error => error,
    }
}

/// The status of an error DataFusion raised while a query ran.
pub(crate) fn status_of_df(error: DataFusionError) -> Status {
    status(Error::from(error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use widesql::SqlError;

    #[test]
    fn each_kind_of_error_has_its_code() {
        let cases = [
            (
                Error::Sql(SqlError::Invalid("no such table".into())),
                Code::InvalidArgument,
            ),
            (
                Error::Sql(SqlError::Unsupported("ALTER SCHEMA … SET".into())),
                Code::Unimplemented,
            ),
            (
                Error::Sql(SqlError::NotNull {
                    table: "t".into(),
                    column: "c".into(),
                }),
                Code::InvalidArgument,
            ),
            (
                Error::Sql(SqlError::TooComplex("too deep".into())),
                Code::ResourceExhausted,
            ),
            (
                Error::from(DataFusionError::ResourcesExhausted("memory".into())),
                Code::ResourceExhausted,
            ),
            // A write that lost a race and applied nothing may run again;
            // one that applied part of itself must not.
            (
                Error::Table(TableError::Changed {
                    table: "p.d.t".into(),
                    written: 0,
                }),
                Code::Aborted,
            ),
            (
                Error::Table(TableError::Changed {
                    table: "p.d.t".into(),
                    written: 10_000,
                }),
                Code::FailedPrecondition,
            ),
            (
                Error::PartlyApplied {
                    written: 10_000,
                    source: Box::new(Error::Table(TableError::Changed {
                        table: "p.d.t".into(),
                        written: 0,
                    })),
                },
                Code::FailedPrecondition,
            ),
            // A limit or a stalled client that stopped a statement part-way
            // does not invite a retry either; a wrong request stays one.
            (
                Error::PartlyApplied {
                    written: 10_000,
                    source: Box::new(Error::from(DataFusionError::ResourcesExhausted(
                        "memory".into(),
                    ))),
                },
                Code::FailedPrecondition,
            ),
            (
                Error::PartlyApplied {
                    written: 10_000,
                    source: Box::new(Error::from(DataFusionError::External(Box::new(
                        FlightError::Tonic(Box::new(Status::deadline_exceeded("stalled"))),
                    )))),
                },
                Code::FailedPrecondition,
            ),
            (
                Error::PartlyApplied {
                    written: 10_000,
                    source: Box::new(Error::Sql(SqlError::NotNull {
                        table: "t".into(),
                        column: "c".into(),
                    })),
                },
                Code::InvalidArgument,
            ),
        ];
        for (error, code) in cases {
            let message = error.to_string();
            let got = status(error);
            assert_eq!(got.code(), code, "{message}");
            assert_eq!(got.message(), message);
        }
    }
}
