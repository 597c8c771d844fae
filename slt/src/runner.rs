//! Runs sqllogictest files and reports every record.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use datafusion::execution::context::SessionContext;
use datafusion::prelude::SessionConfig;
use sqllogictest::{ColumnType, Record, Runner};
use widesql::{Db, DbOptions, Session, SessionOptions};

use crate::engine::{Backend, Engine, ENGINE_LABEL};
use crate::format::SltType;
use crate::SltError;

type Result<T, E = SltError> = std::result::Result<T, E>;

/// How to run sqllogictest files.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Session settings of widesql backends.
    pub session: SessionOptions,
    /// Check column types strictly. Default: true.
    pub strict_types: bool,
    /// Lines of records to skip (they count as skipped, not run).
    pub skip_lines: BTreeSet<usize>,
    /// Show a progress bar on standard error. Default: false.
    pub progress: bool,
    /// Labels that `skipif` / `onlyif` records match, besides
    /// [`ENGINE_LABEL`].
    pub labels: Vec<String>,
    /// What runs after each statement or query (a failure fails that
    /// record).
    pub after_each: Option<AfterEach>,
}

/// A step run after each record, such as moving a cluster's new tablets
/// to its workers. It runs on a thread that may block.
#[derive(Clone)]
pub struct AfterEach(pub std::sync::Arc<dyn Fn() -> std::result::Result<(), String> + Send + Sync>);

impl std::fmt::Debug for AfterEach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AfterEach")
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            session: SessionOptions::default(),
            strict_types: true,
            skip_lines: BTreeSet::new(),
            progress: false,
            labels: Vec::new(),
            after_each: None,
        }
    }
}

/// One record that failed.
#[derive(Debug, Clone)]
pub struct RecordFailure {
    /// The record's line (`None` for records that are not statements or
    /// queries, such as a failed `include`).
    pub line: Option<usize>,
    /// file:line, the SQL, expected and actual.
    pub message: String,
}

/// What running one file gave.
#[derive(Debug, Default, Clone)]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// Records (statements and queries) that passed.
    pub passed: usize,
    /// Records skipped by the skip list.
    pub skipped: usize,
    /// The records that failed.
    pub failures: Vec<RecordFailure>,
}

impl FileReport {
    /// Records that failed.
    pub fn failed(&self) -> usize {
        self.failures.len()
    }

    /// The lines of the records that failed.
    pub fn failed_lines(&self) -> BTreeSet<usize> {
        self.failures.iter().filter_map(|f| f.line).collect()
    }

    /// A test's verdict on the file: every record failure, or a file that
    /// ran no record at all.
    pub fn verdict(&self) -> std::result::Result<(), String> {
        if !self.failures.is_empty() {
            let messages: Vec<&str> = self.failures.iter().map(|f| f.message.as_str()).collect();
            return Err(format!(
                "{} of {} records failed:\n{}",
                self.failures.len(),
                self.failures.len() + self.passed,
                messages.join("\n")
            ));
        }
        if self.passed == 0 {
            return Err("the file has no statement or query".into());
        }
        Ok(())
    }
}

/// Trailing white space does not count. The signature is sqllogictest's
/// `Normalizer`.
#[expect(clippy::ptr_arg, reason = "sqllogictest's Normalizer takes &String")]
fn value_normalizer(s: &String) -> String {
    s.trim_end().to_string()
}

fn record_line<T: ColumnType>(record: &Record<T>) -> Option<usize> {
    match record {
        Record::Statement { loc, .. } | Record::Query { loc, .. } => Some(loc.line() as usize),
        _ => None,
    }
}

/// Runs every record of the file at `path` on engines made by `make`,
/// going on after failures (up to a `halt` record).
pub async fn run_file_with(
    path: &Path,
    make: impl Fn() -> Backend + Send + Sync + 'static,
    options: &RunOptions,
) -> Result<FileReport> {
    let records = sqllogictest::parse_file::<SltType>(path).map_err(|source| SltError::Parse {
        path: path.to_path_buf(),
        source: Box::new(source),
    })?;
    let make = std::sync::Arc::new(make);
    let mut runner = Runner::new(move || {
        let make = std::sync::Arc::clone(&make);
        async move { Ok::<_, SltError>(Engine::new(make())) }
    });
    runner.add_label(ENGINE_LABEL);
    for label in &options.labels {
        runner.add_label(label);
    }
    runner.with_normalizer(value_normalizer);
    if options.strict_types {
        runner.with_column_validator(sqllogictest::strict_column_validator);
    }
    let mut report = FileReport {
        path: path.to_path_buf(),
        ..FileReport::default()
    };
    let counted = records.iter().filter(|r| record_line(r).is_some()).count();
    let bar = options.progress.then(|| {
        let bar = indicatif::ProgressBar::new(counted as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} records")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(path.display().to_string());
        bar
    });
    for record in records {
        if matches!(record, Record::Halt { .. }) {
            break;
        }
        let line = record_line(&record);
        if let Some(line) = line {
            if let Some(bar) = &bar {
                bar.inc(1);
            }
            if options.skip_lines.contains(&line) {
                report.skipped += 1;
                continue;
            }
        }
        let ran = runner
            .run_async(record)
            .await
            .map_err(|e| e.display(false).to_string());
        let ran = match (ran, &options.after_each) {
            (Ok(_), Some(after)) if line.is_some() => {
                let after = after.0.clone();
                tokio::task::spawn_blocking(move || after())
                    .await
                    .unwrap_or_else(|e| Err(e.to_string()))
                    .map_err(|e| {
                        format!(
                            "{}:{}: after the record: {e}",
                            path.display(),
                            line.unwrap_or(0)
                        )
                    })
            }
            (ran, _) => ran.map(|_| ()),
        };
        match ran {
            Ok(()) if line.is_some() => report.passed += 1,
            Ok(()) => {}
            Err(message) => report.failures.push(RecordFailure { line, message }),
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(report)
}

/// Runs every record of a file against `db` through widesql.
pub async fn run_file(path: &Path, db: &Db, options: &RunOptions) -> Result<FileReport> {
    let db = db.clone();
    let session = options.session.clone();
    run_file_with(
        path,
        move || Backend::Widesql(Session::with_options(db.clone(), session.clone())),
        options,
    )
    .await
}

/// A new temporary database that lives as long as the returned guard.
pub fn temporary_db(options: &SessionOptions) -> Result<(Db, tempfile::TempDir)> {
    let dir = tempfile::Builder::new()
        .prefix("widesql-slt-")
        .tempdir()
        .map_err(|source| SltError::Io {
            path: std::env::temp_dir(),
            source,
        })?;
    let db = Db::open_with(
        dir.path().join("db"),
        DbOptions::new()
            .with_temporary(true)
            .with_compaction_interval(None),
    )?;
    with_default_dataset(&db, options)?;
    Ok((db, dir))
}

/// Creates the default project and dataset of sessions with `options` in
/// `db` when they do not exist: every file starts in them.
pub fn with_default_dataset(db: &Db, options: &SessionOptions) -> Result<()> {
    let project = match db.project(&options.default_project)? {
        Some(p) => p,
        None => db.create_project(&options.default_project)?,
    };
    if project.dataset(&options.default_dataset)?.is_none() {
        project.create_dataset(&options.default_dataset)?;
    }
    Ok(())
}

/// Runs a file in a new temporary database.
pub async fn run_file_isolated(path: &Path, options: &RunOptions) -> Result<FileReport> {
    let (db, _dir) = temporary_db(&options.session)?;
    run_file(path, &db, options).await
}

/// Runs a file on plain in-memory DataFusion (the baseline).
pub async fn run_file_in_memory(path: &Path, options: &RunOptions) -> Result<FileReport> {
    let partitions = options.session.target_partitions;
    run_file_with(
        path,
        move || {
            let mut config = SessionConfig::new();
            if let Some(n) = partitions {
                config = config.with_target_partitions(n);
            }
            Backend::Memory(SessionContext::new_with_config(config))
        },
        options,
    )
    .await
}

/// Rewrites the expected results of every record of `path` with what
/// widesql returns, for people authoring new files.
pub async fn complete_file(path: &Path, options: &RunOptions) -> Result<()> {
    let (db, _dir) = temporary_db(&options.session)?;
    let session = options.session.clone();
    let mut runner = Runner::new(move || {
        let db = db.clone();
        let session = session.clone();
        async move {
            Ok::<_, SltError>(Engine::new(Backend::Widesql(Session::with_options(
                db, session,
            ))))
        }
    });
    runner.add_label(ENGINE_LABEL);
    runner
        .update_test_file(
            path,
            " ",
            sqllogictest::default_validator,
            value_normalizer,
            sqllogictest::strict_column_validator,
        )
        .await
        .map_err(|e| SltError::Complete {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// [`collect_files`] at `root`, each with its path from `root` (`writes/not_null.slt`),
/// the name a test of it goes by.
pub fn collect_named_files(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    Ok(collect_files(root)?
        .into_iter()
        .map(|path| {
            let name = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            (name, path)
        })
        .collect())
}

/// The `.slt` and `.test` files at `path` (a file, or a directory searched
/// recursively), sorted.
pub fn collect_files(path: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(path).sort_by_file_name() {
        let entry = entry.map_err(|e| SltError::Io {
            path: e.path().unwrap_or(path).to_path_buf(),
            source: e.into(),
        })?;
        let is_test = entry
            .path()
            .extension()
            .is_some_and(|e| e == "slt" || e == "test");
        // A file named on the command line runs whatever its extension.
        if entry.file_type().is_file() && (is_test || entry.depth() == 0) {
            files.push(entry.into_path());
        }
    }
    files.sort();
    Ok(files)
}
