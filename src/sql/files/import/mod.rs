//! Files into tables: Parquet, Arrow IPC (file and stream), CSV, and JSON
//! (newline-delimited, or one array of objects), read batch by batch and
//! written through SQL's one write path (`INSERT … SELECT`, or `CREATE
//! TABLE … AS SELECT` for a new table), so an import holds a few batches
//! in memory, not the file.
//!
//! - Columns are matched by name. A column of the file the table does not
//!   have is an error; a column of the table the file does not have gets
//!   its DEFAULT in the rows the import creates (or NULL). Values are cast
//!   to the column types as INSERT casts them: a value that does not fit
//!   is an error, never a NULL.
//! - CSV and JSON text is parsed with the table's column types (so a code
//!   like `007` stays text in a VARCHAR column; a CSV field of a MAP, list,
//!   struct or binary column is the JSON text an export writes); a new
//!   table (`create`) takes the types Arrow infers from the first 1,000
//!   rows. Parquet and Arrow files bring their own types, nested ones
//!   included.
//! - A stream of record batches (Flight SQL's bulk ingest) is imported
//!   the same way ([`Session::import_stream`]).
//! - Atomicity: a new table appears only when the whole file is in (an
//!   error leaves no table); a table replaced (`replace`) is swapped for
//!   the new one in one step once the whole file is in. Into an existing table, a file is written in
//!   atomic batches of the statement batch size
//!   ([`DbOptions::with_statement_batch_rows`](crate::DbOptions::with_statement_batch_rows));
//!   a file of up to one batch is written whole or not at all, and an error
//!   in a larger one says how many of its rows were written. Errors name
//!   the file and the row (CSV: the line).

mod json_array;
mod json_text;
mod target;

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::RecordBatchReader;
use datafusion::arrow::csv::reader::Format as CsvFormat;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::reader::{FileReader, StreamReader};
use datafusion::common::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;

use crate::error::{Error, Result};
use crate::sql::files::FileFormat;
use crate::sql::read::scan::RECORD_BATCH_BYTES;
use crate::sql::runtime::off_runtime;
use crate::sql::SqlError;
use crate::sql::{from_df, Session};
use json_array::ArrayAsLines;
use json_text::JsonTextColumns;
use target::StreamSource;

/// Rows read to infer the column types of a CSV or JSON file.
const INFER_ROWS: usize = 1000;
/// The most rows of a batch read from a file (Arrow's readers' default).
const BATCH_ROWS: usize = 1024;

/// Rows per batch read from a file whose rows take about `row_bytes`:
/// [`BATCH_ROWS`], fewer for large rows so a batch stays near
/// [`RECORD_BATCH_BYTES`] (1,024 rows of 200 KB were a 200 MB batch).
fn batch_rows(row_bytes: u64) -> usize {
    let rows = RECORD_BATCH_BYTES as u64 / row_bytes.max(1);
    rows.clamp(1, BATCH_ROWS as u64) as usize
}

/// How to import a file.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions {
    /// The file's format; `None`: from its extension.
    pub format: Option<FileFormat>,
    /// Create the table from the file's columns; it must not exist. A
    /// column named `_key` becomes the row key, else rows get generated
    /// keys.
    pub create: bool,
    /// With `create`: when the table exists, append to it instead.
    pub append: bool,
    /// With `create`: when the table exists, replace it (its definition
    /// and rows) with the new one, in one step once the whole file is in.
    pub replace: bool,
}

/// How far an import of one file got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportProgress {
    /// Rows read from the file (written once the import returns).
    pub rows: u64,
    /// Bytes of the file read (Parquet: estimated from its row groups).
    pub bytes: u64,
    /// The file's size.
    pub total_bytes: u64,
}

/// Hears an import's progress after every batch read.
pub type ProgressFn = Arc<dyn Fn(ImportProgress) + Send + Sync>;

/// The work of [`Session::import`].
pub(crate) async fn import(
    session: &Session,
    table: &str,
    path: &Path,
    options: ImportOptions,
    progress: impl Fn(ImportProgress) + Send + Sync + 'static,
) -> Result<u64> {
    import_file(session, table, path, options, Arc::new(progress))
        .await
        .map_err(|e| Error::Import {
            file: path.display().to_string(),
            source: Box::new(e),
        })
}

/// The work of [`Session::import_stream`].
pub(crate) async fn import_stream(
    session: &Session,
    table: &str,
    input: SendableRecordBatchStream,
    options: ImportOptions,
) -> Result<u64> {
    let target = target::import_target(session, table, options).await?;
    let rows = Arc::new(AtomicU64::new(0));
    let source = StreamSource {
        schema: input.schema(),
        stream: Mutex::new(Some(input)),
        rows: Arc::clone(&rows),
    };
    target.write(Arc::new(source)).await?;
    Ok(rows.load(Ordering::Relaxed))
}

async fn import_file(
    session: &Session,
    table: &str,
    path: &Path,
    options: ImportOptions,
    progress: ProgressFn,
) -> Result<u64> {
    let format = match options.format {
        Some(format) => format,
        None => FileFormat::from_path(path).ok_or_else(|| {
            Error::Sql(SqlError::Invalid(
                "its extension names no format: give one (parquet, arrow, arrows, csv, json, ndjson)"
                    .into(),
            ))
        })?,
    };
    let target = target::import_target(session, table, options).await?;
    let path_buf = path.to_path_buf();
    let source = {
        let columns = target.columns.clone();
        off_runtime(move || {
            open_file(&path_buf, format, columns.as_ref(), progress)
                .map_err(|e| DataFusionError::External(Box::new(e)))
        })
        .await
        .map_err(from_df)?
    };
    let rows = Arc::clone(&source.rows);
    target.write(Arc::new(source)).await?;
    Ok(rows.load(Ordering::Relaxed))
}

/// A file as the one partition of a table, read once on a thread of its
/// own.
struct FileSource {
    schema: SchemaRef,
    reader: Mutex<Option<Box<dyn RecordBatchReader + Send>>>,
    rows: Arc<AtomicU64>,
}

impl std::fmt::Debug for FileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSource")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PartitionStream for FileSource {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (sender, receiver) = tokio::sync::mpsc::channel(2);
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take();
        let started = match reader {
            None => Err("the file was read already".to_string()),
            Some(reader) => std::thread::Builder::new()
                .name("widesql-import".into())
                .spawn(move || {
                    let mut reader = reader;
                    loop {
                        // A panic in a reader (Arrow's decoders have a few
                        // for input they do not expect) must not end the
                        // stream as the file's end would: the import would
                        // report success without the rest of the file.
                        let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            reader.next()
                        }));
                        let batch = match next {
                            Ok(None) => break,
                            Ok(Some(batch)) => {
                                batch.map_err(|e| DataFusionError::ArrowError(Box::new(e), None))
                            }
                            Err(panic) => Err(DataFusionError::Execution(format!(
                                "reading the file failed: {}",
                                crate::error::panic_message(panic.as_ref())
                            ))),
                        };
                        let failed = batch.is_err();
                        if sender.blocking_send(batch).is_err() || failed {
                            break;
                        }
                    }
                })
                .map(drop)
                .map_err(|e| format!("cannot start the import thread: {e}")),
        };
        let failed = started.err().map(DataFusionError::Execution);
        let stream =
            futures::stream::unfold((receiver, failed), |(mut receiver, failed)| async move {
                if let Some(e) = failed {
                    return Some((Err(e), (receiver, None)));
                }
                receiver.recv().await.map(|batch| (batch, (receiver, None)))
            });
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        ))
    }
}

/// A `Read` that counts the bytes through it.
struct Counting<R> {
    inner: R,
    bytes: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Reports progress after every batch of `inner`.
struct Reporting {
    inner: Box<dyn RecordBatchReader + Send>,
    rows: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    total_bytes: u64,
    /// Parquet: the file's rows, from which bytes read are estimated.
    total_rows: Option<u64>,
    progress: ProgressFn,
}

impl Iterator for Reporting {
    type Item = Result<datafusion::arrow::array::RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = self.inner.next()?;
        if let Ok(batch) = &batch {
            let rows = self
                .rows
                .fetch_add(batch.num_rows() as u64, Ordering::Relaxed)
                + batch.num_rows() as u64;
            let bytes = match self.total_rows {
                Some(total) if total > 0 => {
                    (self.total_bytes as u128 * u128::from(rows) / u128::from(total)) as u64
                }
                _ => self.bytes.load(Ordering::Relaxed),
            };
            (self.progress)(ImportProgress {
                rows,
                bytes: bytes.min(self.total_bytes),
                total_bytes: self.total_bytes,
            });
        }
        Some(batch)
    }
}

impl RecordBatchReader for Reporting {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

/// Opens `path` as a reader of record batches in `format`. `columns`: the
/// target table's columns, whose types parse CSV and JSON text; `None`:
/// the types are inferred.
fn open_file(
    path: &Path,
    format: FileFormat,
    columns: Option<&SchemaRef>,
    progress: ProgressFn,
) -> Result<FileSource> {
    let file_error = |e: std::io::Error| Error::File {
        target: path.display().to_string(),
        message: e.to_string(),
    };
    let open = || File::open(path).map_err(file_error);
    let total_bytes = open()?.metadata().map_err(file_error)?.len();
    let bytes = Arc::new(AtomicU64::new(0));
    let counted_into = |bytes: &Arc<AtomicU64>| -> Result<BufReader<Counting<File>>> {
        Ok(BufReader::new(Counting {
            inner: open()?,
            bytes: Arc::clone(bytes),
        }))
    };
    let counted = || counted_into(&bytes);
    // The bytes the type inference read, for the average row's size.
    let sampled = Arc::new(AtomicU64::new(0));
    let sample_row_bytes = |rows: usize| sampled.load(Ordering::Relaxed) / (rows as u64).max(1);
    let mut total_rows = None;
    let inner: Box<dyn RecordBatchReader + Send> = match format {
        FileFormat::Parquet => {
            let builder = ParquetRecordBatchReaderBuilder::try_new(open()?)
                .map_err(|e| Error::Sql(SqlError::Invalid(format!("not a Parquet file: {e}"))))?;
            total_rows = u64::try_from(builder.metadata().file_metadata().num_rows()).ok();
            let row_bytes = builder
                .metadata()
                .row_groups()
                .iter()
                .filter(|g| g.num_rows() > 0)
                .map(|g| g.total_byte_size().max(0) as u64 / g.num_rows() as u64)
                .max()
                .unwrap_or(0);
            Box::new(
                builder
                    .with_batch_size(batch_rows(row_bytes))
                    .build()
                    .map_err(|e| {
                        Error::Sql(SqlError::Invalid(format!("not a Parquet file: {e}")))
                    })?,
            )
        }
        FileFormat::Arrow => {
            Box::new(FileReader::try_new(open()?, None).map_err(|e| {
                Error::Sql(SqlError::Invalid(format!("not an Arrow IPC file: {e}")))
            })?)
        }
        FileFormat::ArrowStream => {
            Box::new(StreamReader::try_new(counted()?, None).map_err(|e| {
                Error::Sql(SqlError::Invalid(format!("not an Arrow IPC stream: {e}")))
            })?)
        }
        FileFormat::Csv => {
            let csv = CsvFormat::default().with_header(true);
            let (inferred, sample_rows) = csv
                .infer_schema(
                    skip_bom(counted_into(&sampled)?).map_err(file_error)?,
                    Some(INFER_ROWS),
                )
                .map_err(|e| {
                    Error::Sql(SqlError::Invalid(format!(
                        "not a CSV file with a header row: {e}"
                    )))
                })?;
            let schema = parse_schema(&inferred, columns, csv_parses);
            // Columns of the table's MAP, list, struct and binary types.
            let decoded: Vec<(usize, FieldRef)> = schema
                .fields()
                .iter()
                .enumerate()
                .filter_map(|(at, f)| {
                    let wanted = columns?.field_with_name(f.name()).ok()?;
                    let wanted = crate::sql::files::export::plain(wanted.data_type());
                    json_text::decodes(&wanted)
                        .then(|| (at, Arc::new(Field::new(f.name(), wanted, true))))
                })
                .collect();
            let text = datafusion::arrow::csv::ReaderBuilder::new(schema)
                .with_format(csv)
                .with_batch_size(batch_rows(sample_row_bytes(sample_rows)))
                .build(skip_bom(counted()?).map_err(file_error)?)?;
            match decoded.is_empty() {
                true => Box::new(text),
                false => Box::new(JsonTextColumns::new(Box::new(text), decoded)),
            }
        }
        FileFormat::Json | FileFormat::NdJson => {
            let mut text = skip_bom(counted()?).map_err(file_error)?;
            // One JSON array (what `.json` exports hold) reads as lines.
            let array = starts_with_array(&mut text).map_err(file_error)?;
            let as_lines = |text: Box<dyn BufRead + Send>| -> Box<dyn BufRead + Send> {
                match array {
                    true => Box::new(BufReader::new(ArrayAsLines::new(text))),
                    false => text,
                }
            };
            let sample = skip_bom(counted_into(&sampled)?).map_err(file_error)?;
            let mut sample = as_lines(Box::new(sample));
            let (inferred, sample_rows) =
                datafusion::arrow::json::reader::infer_json_schema(&mut sample, Some(INFER_ROWS))
                    .map_err(|e| {
                    Error::Sql(SqlError::Invalid(format!(
                        "not newline-delimited JSON or a JSON array: {e}"
                    )))
                })?;
            let schema = parse_schema(&inferred, columns, |_| true);
            Box::new(
                datafusion::arrow::json::ReaderBuilder::new(schema)
                    .with_batch_size(batch_rows(sample_row_bytes(sample_rows)))
                    .build(as_lines(Box::new(text)))?,
            )
        }
    };
    let schema = inner.schema();
    let rows = Arc::new(AtomicU64::new(0));
    let reporting = Reporting {
        inner,
        rows: Arc::clone(&rows),
        bytes,
        total_bytes,
        total_rows,
        progress,
    };
    Ok(FileSource {
        schema,
        reader: Mutex::new(Some(Box::new(reporting))),
        rows,
    })
}

/// The text after its UTF-8 byte-order mark, if it has one (Excel's
/// "CSV UTF-8" and some Windows tools write one): otherwise it would be
/// read as part of the first column's name or value.
fn skip_bom<R: BufRead>(mut text: R) -> std::io::Result<R> {
    if text.fill_buf()?.starts_with(b"\xEF\xBB\xBF") {
        text.consume(3);
    }
    Ok(text)
}

/// Whether the text starts, after white space, with `[`. Consumes only
/// white space: the first other byte stays in the reader's buffer.
fn starts_with_array<R: Read>(text: &mut BufReader<R>) -> std::io::Result<bool> {
    loop {
        let buffer = text.fill_buf()?;
        let Some(first) = buffer.iter().position(|b| !b.is_ascii_whitespace()) else {
            if buffer.is_empty() {
                return Ok(false);
            }
            let n = buffer.len();
            text.consume(n);
            continue;
        };
        return Ok(buffer[first] == b'[');
    }
}

/// The schema to parse a text file with: each column of `inferred` with
/// the type of the table's column of that name where the parser `parses`
/// it (views as their plain types), else as text for the cast to convert.
fn parse_schema(
    inferred: &Schema,
    columns: Option<&SchemaRef>,
    parses: impl Fn(&DataType) -> bool,
) -> SchemaRef {
    let fields: Vec<Field> = inferred
        .fields()
        .iter()
        .map(|f| {
            let wanted = columns
                .and_then(|c| c.field_with_name(f.name()).ok())
                .map(|c| crate::sql::files::export::plain(c.data_type()));
            let data_type = match wanted {
                Some(t) if parses(&t) => t,
                Some(_) => DataType::Utf8,
                None => f.data_type().clone(),
            };
            Field::new(f.name(), data_type, true)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// Whether Arrow's CSV reader parses this type.
fn csv_parses(t: &DataType) -> bool {
    t.is_primitive()
        || matches!(
            t,
            DataType::Boolean | DataType::Utf8 | DataType::LargeUtf8 | DataType::Null
        )
}

/// The files of `paths` in order, directories expanded to their files.
pub fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut inside: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| Error::File {
                    target: path.display().to_string(),
                    message: e.to_string(),
                })?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            inside.sort();
            files.extend(inside);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_array_is_told_from_lines() -> std::io::Result<()> {
        for (text, array) in [
            ("  \n [{\"a\": 1}]", true),
            ("{\"a\": 1}\n{\"a\": 2}\n", false),
            ("", false),
        ] {
            let mut reader = BufReader::new(text.as_bytes());
            assert_eq!(starts_with_array(&mut reader)?, array, "{text:?}");
        }
        Ok(())
    }
}
