//! sqllogictest for widesql: widesql as a `sqllogictest` engine, values
//! formatted exactly as DataFusion's own engine formats them (so that
//! DataFusion's `.slt` files run unchanged), and a runner that reports every
//! record of a file.
//!
//! Statements go through [`widesql::Session::run`], the path the command
//! line uses. The same runner drives plain in-memory DataFusion
//! ([`Backend::Memory`]), the baseline widesql's pass counts are compared
//! with.

#![forbid(unsafe_code)]

mod engine;
mod format;
mod runner;

use std::path::PathBuf;

pub use engine::{Backend, Engine, ENGINE_LABEL};
pub use format::{float_text, rows_as_text, SltType};
pub use runner::{
    collect_files, collect_named_files, complete_file, run_file, run_file_in_memory,
    run_file_isolated, run_file_with, temporary_db, with_default_dataset, AfterEach, FileReport,
    RecordFailure, RunOptions,
};

/// What running sqllogictest files can fail with (a failing record is a
/// [`RecordFailure`] in the report, not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SltError {
    /// widesql refused a statement or an operation.
    #[error(transparent)]
    Widesql(#[from] widesql::Error),
    /// The in-memory baseline refused a statement.
    #[error(transparent)]
    DataFusion(#[from] datafusion::error::DataFusionError),
    /// A value could not be formatted.
    #[error(transparent)]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    /// A file is not valid sqllogictest.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        source: Box<sqllogictest::ParseError>,
    },
    /// A file or directory could not be read or created.
    #[error("'{}': {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// `--complete` could not rewrite a file.
    #[error("cannot complete {}: {message}", path.display())]
    Complete {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}
