//! sqllogictest: widesql as a `sqllogictest` engine, and a runner that
//! reports every record of a file.
//!
//! Statements go through [`Session::run`], the path the CLI uses. Results
//! follow DataFusion's sqllogictest conventions: `NULL`, `(empty)` for the
//! empty string, `true`/`false`, floats rounded to 12 decimals with trailing
//! zeros removed, `NaN`, `Infinity`, `-Infinity`; column types are `I`
//! (integers), `R` (floats, decimals), `T` (text, binary), `B` (booleans),
//! `D` (dates, times), `P` (timestamps) and `?` (anything else).

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float32Type, Float64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use sqllogictest::{AsyncDB, ColumnType, DBOutput, Record, Runner};

use crate::db::{Db, DbOptions};
use crate::error::{Error, Result};
use crate::sql::Session;

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
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => SltType::Float,
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => SltType::Text,
        DataType::Date32 | DataType::Date64 | DataType::Time32(_) | DataType::Time64(_) => {
            SltType::DateTime
        }
        DataType::Timestamp(..) => SltType::Timestamp,
        _ => SltType::Other,
    }
}

/// A float as DataFusion's sqllogictest prints it.
pub fn float_text(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let text = format!("{value:.12}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    match text {
        "-0" | "" => "0".into(),
        t => t.to_string(),
    }
}

/// The rows of batches as strings.
pub fn rows_as_text(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let mut columns: Vec<Vec<String>> = Vec::with_capacity(batch.num_columns());
        for array in batch.columns() {
            let formatter = ArrayFormatter::try_new(array.as_ref(), &options)?;
            let mut values = Vec::with_capacity(array.len());
            for row in 0..array.len() {
                let text = if array.is_null(row) {
                    "NULL".to_string()
                } else {
                    match array.data_type() {
                        DataType::Float64 => {
                            float_text(array.as_primitive::<Float64Type>().value(row))
                        }
                        DataType::Float32 => {
                            float_text(f64::from(array.as_primitive::<Float32Type>().value(row)))
                        }
                        _ => {
                            let text = formatter.value(row).to_string();
                            if text.is_empty() {
                                "(empty)".to_string()
                            } else {
                                text
                            }
                        }
                    }
                };
                values.push(text);
            }
            columns.push(values);
        }
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = columns.iter().map(|c| c[row].clone()).collect();
            push_row(&mut rows, cells);
        }
    }
    Ok(rows)
}

/// Adds a row; a row whose cells span lines (an `EXPLAIN` plan) becomes one
/// row per line, numbered, indentation shown as `-`, as DataFusion's
/// sqllogictest files write plans.
fn push_row(rows: &mut Vec<Vec<String>>, cells: Vec<String>) {
    if !cells.iter().any(|c| c.contains('\n')) {
        rows.push(cells);
        return;
    }
    for cell in cells {
        if !cell.contains('\n') {
            rows.push(vec![cell]);
            continue;
        }
        for (i, line) in cell.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            let indent = line.len() - line.trim_start().len();
            rows.push(vec![format!(
                "{:02}){}{}",
                i + 1,
                "-".repeat(indent),
                line.trim_start()
            )]);
        }
    }
}

/// widesql as a sqllogictest engine.
#[derive(Debug)]
pub struct Engine {
    session: Session,
}

impl Engine {
    /// An engine over `db`.
    pub fn new(db: &Db) -> Self {
        Self {
            session: db.session(),
        }
    }
}

#[async_trait]
impl AsyncDB for Engine {
    type Error = Error;
    type ColumnType = SltType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<SltType>> {
        let outputs = self.session.run(sql).await?;
        let Some(last) = outputs.last() else {
            return Ok(DBOutput::StatementComplete(0));
        };
        if last.schema.fields().is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows {
            types: last
                .schema
                .fields()
                .iter()
                .map(|f| slt_type(f.data_type()))
                .collect(),
            rows: rows_as_text(&last.batches)?,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        ENGINE_LABEL
    }
}

/// What running one file gave.
#[derive(Debug, Default, Clone)]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// Records (statements and queries) that passed.
    pub passed: usize,
    /// Records that failed, with file:line, expected and actual.
    pub failures: Vec<String>,
}

/// Runs every record of the file at `path` against `db`, going on after
/// failures (up to a `halt` record).
pub async fn run_file(path: &Path, db: &Db) -> Result<FileReport> {
    let records = sqllogictest::parse_file::<SltType>(path)
        .map_err(|e| Error::Sql(format!("{}: {e}", path.display())))?;
    let db = db.clone();
    let mut runner = Runner::new(move || {
        let db = db.clone();
        async move { Ok::<_, Error>(Engine::new(&db)) }
    });
    runner.add_label(ENGINE_LABEL);
    runner.with_column_validator(sqllogictest::strict_column_validator);
    let mut report = FileReport {
        path: path.to_path_buf(),
        ..FileReport::default()
    };
    for record in records {
        let counts = matches!(record, Record::Statement { .. } | Record::Query { .. });
        if matches!(record, Record::Halt { .. }) {
            break;
        }
        match runner.run_async(record).await {
            Ok(_) if counts => report.passed += 1,
            Ok(_) => {}
            Err(e) => report.failures.push(e.display(false).to_string()),
        }
    }
    Ok(report)
}

/// Runs a file in a new temporary database.
pub async fn run_file_isolated(path: &Path) -> Result<FileReport> {
    let dir = tempfile_dir()?;
    let db = Db::open_with(
        dir.join("db"),
        DbOptions::new()
            .with_temporary(true)
            .with_compaction_interval(None),
    )?;
    let report = run_file(path, &db).await;
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
    report
}

fn tempfile_dir() -> Result<PathBuf> {
    let base = std::env::temp_dir().join(format!(
        "widesql-slt-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    ));
    std::fs::create_dir_all(&base)
        .map_err(|e| Error::Sql(format!("cannot create '{}': {e}", base.display())))?;
    Ok(base)
}

/// The `.slt` and `.test` files at `path` (a file, or a directory searched
/// recursively), sorted.
pub fn collect_files(path: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    if path.is_file() {
        files.push(path.to_path_buf());
        return Ok(files);
    }
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
