//! `widesql test`: runs sqllogictest files and prints a report.

use std::path::PathBuf;

use widesql::Db;
use widesql_slt::{
    collect_files, complete_file, run_file, run_file_in_memory, run_file_isolated, RunOptions,
};

use crate::error::CliError;

/// The `test` command's flags.
pub struct TestOptions {
    /// A database to run every file in, instead of a new one per file.
    pub db: Option<PathBuf>,
    /// Rewrite expected results.
    pub complete: bool,
    /// Run on in-memory DataFusion.
    pub memory: bool,
    /// Ignore column type letters.
    pub loose_types: bool,
}

/// Runs every file; prints failures and `N passed, N failed` (records).
/// Returns whether everything passed.
pub fn run(paths: &[PathBuf], options: &TestOptions) -> Result<bool, CliError> {
    let mut files = Vec::new();
    for path in paths {
        if !path.exists() {
            return Err(CliError::NoSuchPath(path.clone()));
        }
        files.extend(collect_files(path)?);
    }
    let run_options = RunOptions {
        strict_types: !options.loose_types,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        ..Default::default()
    };
    let shared_db = options.db.as_ref().map(Db::open).transpose()?;
    let runtime = crate::runtime()?;
    let (mut passed, mut failed, mut skipped, mut failed_files) = (0, 0, 0, 0);
    for file in &files {
        if options.complete {
            runtime.block_on(complete_file(file, &run_options))?;
            println!("completed {}", file.display());
            continue;
        }
        let report = runtime.block_on(async {
            match (&shared_db, options.memory) {
                (_, true) => run_file_in_memory(file, &run_options).await,
                (Some(db), false) => run_file(file, db, &run_options).await,
                (None, false) => run_file_isolated(file, &run_options).await,
            }
        })?;
        for failure in &report.failures {
            println!("{}\n", failure.message);
        }
        let status = if report.failures.is_empty() {
            "ok"
        } else {
            "FAILED"
        };
        println!(
            "{status} {} ({} passed, {} failed{})",
            file.display(),
            report.passed,
            report.failed(),
            if report.skipped > 0 {
                format!(", {} skipped", report.skipped)
            } else {
                String::new()
            }
        );
        passed += report.passed;
        failed += report.failed();
        skipped += report.skipped;
        failed_files += usize::from(!report.failures.is_empty());
    }
    if options.complete {
        return Ok(true);
    }
    println!(
        "{} files, {failed_files} with failures; records:",
        files.len()
    );
    if skipped > 0 {
        println!("{passed} passed, {failed} failed, {skipped} skipped");
    } else {
        println!("{passed} passed, {failed} failed");
    }
    Ok(failed == 0)
}
