//! sqllogictest: widesql as a `sqllogictest` engine, and a runner that
//! reports every record of a file.
//!
//! Statements go through [`Session::run`], the path the CLI uses. Results
//! follow DataFusion's sqllogictest conventions exactly, so that
//! DataFusion's own `.slt` files run unchanged: `NULL`, `(empty)` for the
//! empty string, `true`/`false`, floats and decimals rounded to 12 decimals
//! with trailing zeros removed (via their shortest decimal form), `NaN`,
//! `Infinity`; column types `I` (integers), `R` (floats, decimals), `T`
//! (text), `B` (booleans), `D` (dates, times), `P` (timestamps), `?`
//! (anything else); an empty result is "statement complete"; a multi-line
//! last cell (an `EXPLAIN` plan) becomes numbered rows.
//!
//! The same runner drives plain in-memory DataFusion ([`Backend::Memory`](crate::slt::Backend::Memory)),
//! the baseline widesql's pass counts are compared with.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use async_trait::async_trait;
use bigdecimal::BigDecimal;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Decimal256Type, DecimalType, Float16Type, Float32Type, Float64Type,
};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::execution::context::SessionContext;
use datafusion::prelude::SessionConfig;
use sqllogictest::{AsyncDB, ColumnType, DBOutput, Record, Runner};

use crate::db::{Db, DbOptions};
use crate::error::{Error, Result};
use crate::sql::{Session, SessionOptions};

/// The label `skipif` / `onlyif` records match.
pub const ENGINE_LABEL: &str = "widesql";

/// A result column type, as DataFusion's sqllogictest files spell them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SltType {
    /// `B`
    Boolean,
    /// `D`
    DateTime,
    /// `I`
    Integer,
    /// `R`
    Float,
    /// `T`
    Text,
    /// `P`
    Timestamp,
    /// `?`
    Other,
}

impl ColumnType for SltType {
    fn from_char(value: char) -> Option<Self> {
        Some(match value {
            'B' => SltType::Boolean,
            'D' => SltType::DateTime,
            'I' => SltType::Integer,
            'R' => SltType::Float,
            'T' => SltType::Text,
            'P' => SltType::Timestamp,
            _ => SltType::Other,
        })
    }

    fn to_char(&self) -> char {
        match self {
            SltType::Boolean => 'B',
            SltType::DateTime => 'D',
            SltType::Integer => 'I',
            SltType::Float => 'R',
            SltType::Text => 'T',
            SltType::Timestamp => 'P',
            SltType::Other => '?',
        }
    }
}

fn slt_type(data_type: &DataType) -> SltType {
    match data_type {
        DataType::Boolean => SltType::Boolean,
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => SltType::Integer,
        DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => SltType::Float,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => SltType::Text,
        DataType::Date32 | DataType::Date64 | DataType::Time32(_) | DataType::Time64(_) => {
            SltType::DateTime
        }
        DataType::Timestamp(..) => SltType::Timestamp,
        DataType::Dictionary(key, value)
            if key.is_integer()
                && matches!(
                    **value,
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                ) =>
        {
            SltType::Text
        }
        _ => SltType::Other,
    }
}

/// A decimal string rounded to `digits` decimals, trailing zeros removed.
fn decimal_text(text: &str, digits: i64) -> String {
    match BigDecimal::from_str(text) {
        Ok(d) => d.round(digits).normalized().to_plain_string(),
        Err(_) => text.to_string(),
    }
}

/// A float as DataFusion's sqllogictest prints it.
pub fn float_text(value: f64, shortest: &str) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        decimal_text(shortest, 12)
    }
}

fn text_value(value: &str) -> String {
    if value.is_empty() {
        "(empty)".to_string()
    } else {
        value.trim_end_matches('\n').replace('\u{0000}', "\\0")
    }
}

/// One cell as text.
fn cell_text(array: &dyn Array, row: usize, formatter: &ArrayFormatter<'_>) -> String {
    if array.is_null(row) {
        return "NULL".to_string();
    }
    match array.data_type() {
        DataType::Float64 => {
            let v = array.as_primitive::<Float64Type>().value(row);
            float_text(v, &v.to_string())
        }
        DataType::Float32 => {
            let v = array.as_primitive::<Float32Type>().value(row);
            float_text(f64::from(v), &v.to_string())
        }
        DataType::Float16 => {
            let v = array.as_primitive::<Float16Type>().value(row);
            float_text(f64::from(v), &v.to_string())
        }
        DataType::Decimal128(_, scale) => decimal_text(
            &Decimal128Type::format_decimal(
                array.as_primitive::<Decimal128Type>().value(row),
                u8::MAX,
                *scale,
            ),
            i64::from(*scale),
        ),
        DataType::Decimal256(_, scale) => decimal_text(
            &Decimal256Type::format_decimal(
                array.as_primitive::<Decimal256Type>().value(row),
                u8::MAX,
                *scale,
            ),
            i64::from(*scale),
        ),
        DataType::Utf8 => text_value(array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => text_value(array.as_string::<i64>().value(row)),
        DataType::Utf8View => text_value(array.as_string_view().value(row)),
        DataType::Dictionary(..) => {
            let dict = array.as_any_dictionary();
            let key = dict.normalized_keys()[row];
            let values = dict.values();
            match ArrayFormatter::try_new(values.as_ref(), &format_options()) {
                Ok(f) => cell_text(values.as_ref(), key, &f),
                Err(_) => formatter.value(row).to_string(),
            }
        }
        _ => formatter.value(row).to_string(),
    }
}

fn format_options() -> FormatOptions<'static> {
    FormatOptions::default().with_null("NULL")
}

/// The rows of batches as strings.
pub fn rows_as_text(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>> {
    let options = format_options();
    let mut rows = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|a| ArrayFormatter::try_new(a.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = batch
                .columns()
                .iter()
                .zip(&formatters)
                .map(|(a, f)| cell_text(a.as_ref(), row, f))
                .collect();
            push_row(&mut rows, cells);
        }
    }
    Ok(rows)
}

/// Adds a row; a multi-line last cell (an `EXPLAIN` plan) becomes one row
/// per line, numbered, indentation shown as `-`, as DataFusion's
/// sqllogictest files write plans.
fn push_row(rows: &mut Vec<Vec<String>>, mut cells: Vec<String>) {
    let Some(last) = cells.pop() else {
        rows.push(cells);
        return;
    };
    let lines: Vec<&str> = last.split('\n').collect();
    if lines.len() < 2 {
        cells.push(last);
        rows.push(cells);
        return;
    }
    rows.push(cells);
    for (i, line) in lines.iter().enumerate() {
        let content = line.trim_start();
        let indent = line.len() - content.len();
        rows.push(vec![format!(
            "{:02}){}{content}",
            i + 1,
            "-".repeat(indent)
        )]);
    }
}

/// What a sqllogictest engine runs statements on.
#[derive(Clone)]
pub enum Backend {
    /// A widesql session (sled-backed tables).
    Widesql(Session),
    /// Plain DataFusion with in-memory tables: the baseline.
    Memory(SessionContext),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Widesql(session) => session.fmt(f),
            Backend::Memory(_) => f.write_str("Memory"),
        }
    }
}

/// A sqllogictest engine.
#[derive(Debug)]
pub struct Engine {
    backend: Backend,
}

impl Engine {
    /// An engine over `backend`.
    pub fn new(backend: Backend) -> Self {
        Self { backend }
    }
}

#[async_trait]
impl AsyncDB for Engine {
    type Error = Error;
    type ColumnType = SltType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<SltType>> {
        let (schema, batches) = match &self.backend {
            Backend::Widesql(session) => {
                let outputs = session.run(sql).await?;
                match outputs.into_iter().last() {
                    Some(last) => (last.schema, last.batches),
                    None => return Ok(DBOutput::StatementComplete(0)),
                }
            }
            Backend::Memory(ctx) => {
                let frame = ctx.sql(sql).await?;
                let schema = std::sync::Arc::new(frame.schema().as_arrow().clone());
                (schema, frame.collect().await?)
            }
        };
        if batches.is_empty() || schema.fields().is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows {
            types: schema
                .fields()
                .iter()
                .map(|f| slt_type(f.data_type()))
                .collect(),
            rows: rows_as_text(&batches)?,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        match self.backend {
            Backend::Widesql(_) => ENGINE_LABEL,
            Backend::Memory(_) => "datafusion-memory",
        }
    }
}

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
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            session: SessionOptions::default(),
            strict_types: true,
            skip_lines: BTreeSet::new(),
            progress: false,
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
    let records = sqllogictest::parse_file::<SltType>(path)
        .map_err(|e| Error::Sql(format!("{}: {e}", path.display())))?;
    let make = std::sync::Arc::new(make);
    let mut runner = Runner::new(move || {
        let make = std::sync::Arc::clone(&make);
        async move { Ok::<_, Error>(Engine::new(make())) }
    });
    runner.add_label(ENGINE_LABEL);
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
        match runner.run_async(record).await {
            Ok(_) if line.is_some() => report.passed += 1,
            Ok(_) => {}
            Err(e) => report.failures.push(RecordFailure {
                line,
                message: e.display(false).to_string(),
            }),
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
pub fn temporary_db(options: &SessionOptions) -> Result<(Db, TempDir)> {
    let dir = TempDir::new()?;
    let db = Db::open_with(
        dir.path.join("db"),
        DbOptions::new()
            .with_temporary(true)
            .with_compaction_interval(None),
    )?;
    // The session's default project and dataset must exist.
    let project = match db.project(&options.default_project)? {
        Some(p) => p,
        None => db.create_project(&options.default_project)?,
    };
    if project.dataset(&options.default_dataset)?.is_none() {
        project.create_dataset(&options.default_dataset)?;
    }
    Ok((db, dir))
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
            Ok::<_, Error>(Engine::new(Backend::Widesql(Session::with_options(
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
        .map_err(|e| Error::Sql(format!("{}: {e}", path.display())))
}

/// A directory removed when dropped.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new() -> Result<TempDir> {
        let path = std::env::temp_dir().join(format!(
            "widesql-slt-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&path)
            .map_err(|e| Error::Sql(format!("cannot create '{}': {e}", path.display())))?;
        Ok(TempDir { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The `.slt` and `.test` files at `path` (a file, or a directory searched
/// recursively), sorted.
pub fn collect_files(path: &Path) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let entries = std::fs::read_dir(path)
        .map_err(|e| Error::Sql(format!("cannot read '{}': {e}", path.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::Sql(e.to_string()))?;
        let p = entry.path();
        if p.is_dir() {
            files.extend(collect_files(&p)?);
        } else if p.extension().is_some_and(|e| e == "slt" || e == "test") {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}
