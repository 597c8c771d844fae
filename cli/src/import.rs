//! `widesql import`: files into a table, with a progress bar on a terminal.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use widesql::import::{expand_paths, ImportOptions, ImportProgress};
use widesql::{Db, FileFormat};

use crate::error::CliError;

/// What `widesql import` was asked.
pub struct ImportArgs {
    /// The table, one to three parts.
    pub table: String,
    /// The files (directories: their files, in name order).
    pub files: Vec<PathBuf>,
    /// `None`: from each file's extension.
    pub format: Option<String>,
    /// Create the table from the first file's columns.
    pub create: bool,
    /// No progress bar and no summary.
    pub quiet: bool,
}

/// Imports the files in order, each as its own import; the first error
/// stops, and the files before it stay imported (the summary says which).
pub fn run(db: &Db, args: ImportArgs) -> Result<(), CliError> {
    let format = args
        .format
        .as_deref()
        .map(FileFormat::from_name)
        .transpose()?;
    let files = expand_paths(&args.files)?;
    let session = db.session();
    let runtime = crate::runtime()?;
    let mut total = 0;
    for (i, file) in files.iter().enumerate() {
        let options = ImportOptions {
            format,
            create: args.create && i == 0,
            ..ImportOptions::default()
        };
        let bar = progress_bar(args.quiet, file);
        let show = {
            let bar = bar.clone();
            move |p: ImportProgress| {
                if let Some(bar) = &bar {
                    bar.set_length(p.total_bytes);
                    bar.set_position(p.bytes);
                    bar.set_message(format!("{} rows", p.rows));
                }
            }
        };
        let done = runtime.block_on(session.import(&args.table, file, options, show));
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
        let rows = match done {
            Ok(rows) => rows,
            Err(e) => {
                if i > 0 && !args.quiet {
                    eprintln!(
                        "{i} file(s) before '{}' were imported ({total} rows) and stay",
                        file.display()
                    );
                }
                return Err(e.into());
            }
        };
        total += rows;
        if !args.quiet {
            eprintln!(
                "imported {rows} rows from {} into {}",
                file.display(),
                args.table
            );
        }
    }
    Ok(())
}

/// A bar on stderr when it is a terminal and not `quiet`.
fn progress_bar(quiet: bool, file: &std::path::Path) -> Option<ProgressBar> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template(
        "{prefix} [{bar:30}] {bytes}/{total_bytes}, {msg}, {elapsed} ({bytes_per_sec})",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(file.display().to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    Some(bar)
}
