//! `widesql export`: a query's result to a file or to stdout, with a
//! progress bar on a terminal.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use widesql::export::{ExportOptions, ExportProgress};
use widesql::Db;
use widesql::FileFormat;

use crate::error::CliError;

/// What `widesql export` was asked.
pub struct ExportArgs {
    /// The query.
    pub query: String,
    /// `None` or `-`: stdout.
    pub output: Option<PathBuf>,
    /// `None`: from the output's extension, else Parquet.
    pub format: Option<String>,
    /// Write `Utf8`/`Binary` instead of the view types.
    pub plain_types: bool,
    /// No progress bar.
    pub quiet: bool,
}

/// Runs the export; the summary goes to stderr unless `quiet`.
pub fn run(db: &Db, args: ExportArgs) -> Result<(), CliError> {
    let to_stdout = args.output.as_deref().is_none_or(|p| p == Path::new("-"));
    let format = match (&args.format, &args.output) {
        (Some(name), _) => FileFormat::from_name(name)?,
        (None, Some(path)) if !to_stdout => {
            FileFormat::from_path(path).unwrap_or(FileFormat::Parquet)
        }
        // A stream is what a pipe can read as it comes.
        (None, _) => FileFormat::ArrowStream,
    };
    let options = ExportOptions {
        plain_types: args.plain_types,
    };
    let bar = progress_bar(args.quiet);
    let show = |p: ExportProgress| {
        if let Some(bar) = &bar {
            bar.set_position(p.rows);
            bar.set_message(format!("{}", HumanBytes(p.bytes)));
        }
    };
    let session = db.session();
    let done = crate::runtime()?.block_on(async {
        match &args.output {
            Some(path) if !to_stdout => {
                session
                    .export(&args.query, path, format, options, show)
                    .await
            }
            _ => {
                session
                    .export_to(&args.query, std::io::stdout(), format, options, show)
                    .await
            }
        }
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let done = done?;
    if !args.quiet {
        let target = match &args.output {
            Some(path) if !to_stdout => path.display().to_string(),
            _ => "stdout".to_string(),
        };
        eprintln!(
            "exported {} rows ({}) as {} to {target}",
            done.rows,
            HumanBytes(done.bytes),
            format.name()
        );
    }
    Ok(())
}

/// A bar on stderr when it is a terminal and not `quiet`.
fn progress_bar(quiet: bool) -> Option<ProgressBar> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new_spinner();
    let style = ProgressStyle::with_template("{spinner} {pos} rows, {msg}, {elapsed} ({per_sec})")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(200));
    Some(bar)
}
