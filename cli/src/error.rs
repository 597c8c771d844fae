//! What a command can fail with; the message is what the user sees.

use std::path::PathBuf;

/// A command's failure.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// widesql refused a statement or an operation.
    #[error(transparent)]
    Widesql(#[from] widesql::Error),
    /// Running sqllogictest files failed (not a failing record).
    #[error(transparent)]
    Slt(#[from] widesql_slt::SltError),
    /// A result could not be rendered.
    #[error("cannot render the result: {0}")]
    Render(#[from] datafusion::arrow::error::ArrowError),
    /// The async runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The terminal could not be used for the shell.
    #[error("cannot use the terminal: {0}")]
    Terminal(#[source] rustyline::error::ReadlineError),
    /// A path given on the command line does not exist.
    #[error("'{}' does not exist", .0.display())]
    NoSuchPath(PathBuf),
    /// A result could not be written to standard output.
    #[error("cannot write the result: {0}")]
    Output(#[source] std::io::Error),
    /// A file named on the command line could not be read.
    #[error("cannot read '{}': {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The server did not start, or did not stop cleanly.
    #[error(transparent)]
    Serve(#[from] widesql_server::ServeError),
}
