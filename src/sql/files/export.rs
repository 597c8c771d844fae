//! Query results out to files: Parquet, Arrow IPC (file and stream), CSV,
//! JSON and newline-delimited JSON, written batch by batch as the query
//! streams, so an export holds one batch in memory, not the result; and a
//! query's result as a blocking [`RecordBatchReader`]
//! ([`QueryReader`]).
//!
//! - Parquet and Arrow IPC keep every Arrow type: MAP families, history
//!   lists, timestamps with their unit, decimals.
//! - CSV has no nested values: MAP, list, struct and binary columns become
//!   their JSON text (binary as hex), as the JSON formats write them.
//! - `plain_types` writes `Utf8`/`Binary` instead of `Utf8View`/`BinaryView`
//!   (also inside maps, lists and structs), for readers that do not know
//!   the view types.
//! - An export to a path writes a temporary file next to it and renames it
//!   at the end: a failed export leaves no file behind.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchReader, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::writer::{FileWriter, StreamWriter};
use datafusion::arrow::json::writer::{make_encoder, EncoderOptions};
use datafusion::arrow::json::{ArrayWriter, LineDelimitedWriter};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::parquet::arrow::ArrowWriter;
use futures::StreamExt;

use crate::error::{Error, Result};
use crate::sql::error::to_df;
use crate::sql::files::FileFormat;
use crate::sql::runtime::off_runtime;
use crate::sql::Session;
use crate::sql::SqlError;

/// About the most bytes of a Parquet row group an export writes (and so
/// holds in memory before it writes it).
const ROW_GROUP_BYTES: usize = 64 << 20;

/// How to write an export.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExportOptions {
    /// Write `Utf8`/`Binary` instead of the view types.
    pub plain_types: bool,
}

/// How far an export got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportProgress {
    /// Rows written.
    pub rows: u64,
    /// Bytes written (Parquet buffers a row group before it writes it).
    pub bytes: u64,
}

/// A `Write` that counts the bytes through it.
struct Counting<W> {
    inner: W,
    bytes: Arc<AtomicU64>,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

enum Sink<W: Write + Send> {
    Parquet(ArrowWriter<Counting<W>>),
    Arrow(FileWriter<Counting<W>>),
    ArrowStream(StreamWriter<Counting<W>>),
    Csv(datafusion::arrow::csv::Writer<Counting<W>>),
    Json(ArrayWriter<Counting<W>>),
    NdJson(LineDelimitedWriter<Counting<W>>),
}

/// Writes record batches in one format, batch by batch.
pub struct BatchWriter<W: Write + Send> {
    sink: Sink<W>,
    schema: SchemaRef,
    progress: ExportProgress,
    bytes: Arc<AtomicU64>,
}

impl<W: Write + Send> BatchWriter<W> {
    /// A writer of batches with `schema` into `out`.
    pub fn new(
        out: W,
        schema: &SchemaRef,
        format: FileFormat,
        options: ExportOptions,
    ) -> Result<Self> {
        let schema = export_schema(schema, format, options);
        let bytes = Arc::new(AtomicU64::new(0));
        let out = Counting {
            inner: out,
            bytes: Arc::clone(&bytes),
        };
        let sink = match format {
            FileFormat::Parquet => Sink::Parquet(
                ArrowWriter::try_new(out, Arc::clone(&schema), None).map_err(parquet_error)?,
            ),
            FileFormat::Arrow => Sink::Arrow(FileWriter::try_new(out, &schema)?),
            FileFormat::ArrowStream => Sink::ArrowStream(StreamWriter::try_new(out, &schema)?),
            FileFormat::Csv => Sink::Csv(datafusion::arrow::csv::Writer::new(out)),
            FileFormat::Json => Sink::Json(ArrayWriter::new(out)),
            FileFormat::NdJson => Sink::NdJson(LineDelimitedWriter::new(out)),
        };
        Ok(Self {
            sink,
            schema,
            progress: ExportProgress::default(),
            bytes,
        })
    }

    /// Writes one batch.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let batch = conform(batch, &self.schema)?;
        match &mut self.sink {
            Sink::Parquet(w) => {
                w.write(&batch).map_err(parquet_error)?;
                // The writer holds a row group until it ends: end one at
                // about ROW_GROUP_BYTES rather than at its default million
                // rows, which for large values was the whole file.
                if w.in_progress_size() >= ROW_GROUP_BYTES {
                    w.flush().map_err(parquet_error)?;
                }
            }
            Sink::Arrow(w) => w.write(&batch)?,
            Sink::ArrowStream(w) => w.write(&batch)?,
            Sink::Csv(w) => w.write(&batch)?,
            Sink::Json(w) => w.write(&batch)?,
            Sink::NdJson(w) => w.write(&batch)?,
        }
        self.progress.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Rows and bytes written so far.
    pub fn progress(&self) -> ExportProgress {
        ExportProgress {
            bytes: self.bytes.load(Ordering::Relaxed),
            ..self.progress
        }
    }

    /// Writes the format's footer and flushes; returns the final progress.
    pub fn finish(self) -> Result<ExportProgress> {
        let mut progress = self.progress;
        match self.sink {
            Sink::Parquet(w) => {
                w.close().map_err(parquet_error)?;
            }
            Sink::Arrow(mut w) => {
                w.finish()?;
                w.into_inner()?.flush().map_err(io_error)?;
            }
            Sink::ArrowStream(mut w) => {
                w.finish()?;
                w.into_inner()?.flush().map_err(io_error)?;
            }
            Sink::Csv(w) => w.into_inner().flush().map_err(io_error)?,
            Sink::Json(mut w) => {
                w.finish()?;
                w.into_inner().flush().map_err(io_error)?;
            }
            Sink::NdJson(mut w) => {
                w.finish()?;
                w.into_inner().flush().map_err(io_error)?;
            }
        }
        progress.bytes = self.bytes.load(Ordering::Relaxed);
        Ok(progress)
    }
}

fn parquet_error(e: datafusion::parquet::errors::ParquetError) -> Error {
    Error::DataFusion(Box::new(e.into()))
}

fn io_error(e: std::io::Error) -> Error {
    Error::File {
        target: "export".into(),
        message: e.to_string(),
    }
}

/// The schema an export of `schema` writes in `format`.
pub fn export_schema(schema: &SchemaRef, format: FileFormat, options: ExportOptions) -> SchemaRef {
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|f| {
            let mut to = f.data_type().clone();
            if format == FileFormat::Csv && !csv_writes(&to) {
                to = DataType::Utf8;
            } else if options.plain_types {
                to = plain(&to);
            }
            Arc::new(f.as_ref().clone().with_data_type(to))
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Whether Arrow's CSV writer writes this type as a value.
fn csv_writes(t: &DataType) -> bool {
    !matches!(
        t,
        DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::FixedSizeList(..)
            | DataType::Struct(_)
            | DataType::Map(..)
            | DataType::Union(..)
            | DataType::Dictionary(..)
            | DataType::RunEndEncoded(..)
    )
}

/// `t` with `Utf8`/`Binary` for the view types, at every depth.
pub(crate) fn plain(t: &DataType) -> DataType {
    let field = |f: &FieldRef| Arc::new(f.as_ref().clone().with_data_type(plain(f.data_type())));
    match t {
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        DataType::List(f) => DataType::List(field(f)),
        DataType::LargeList(f) => DataType::LargeList(field(f)),
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(field(f), *n),
        DataType::Struct(fs) => DataType::Struct(fs.iter().map(field).collect()),
        DataType::Map(f, sorted) => DataType::Map(field(f), *sorted),
        other => other.clone(),
    }
}

/// `batch` with the columns of `schema`: cast, or as JSON text for CSV.
fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch.clone());
    }
    let columns = batch
        .columns()
        .iter()
        .zip(batch.schema().fields())
        .zip(schema.fields())
        .map(|((array, from), to)| {
            if from.data_type() == to.data_type() {
                Ok(Arc::clone(array))
            } else if to.data_type() == &DataType::Utf8 && !csv_writes(from.data_type()) {
                json_text(array, from)
            } else {
                Ok(cast(array, to.data_type())?)
            }
        })
        .collect::<Result<Vec<ArrayRef>>>()?;
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// Each value of `array` as its JSON text; NULL stays NULL.
fn json_text(array: &ArrayRef, field: &FieldRef) -> Result<ArrayRef> {
    let options = EncoderOptions::default();
    let mut encoder = make_encoder(field, array.as_ref(), &options)?;
    let mut out = StringBuilder::with_capacity(array.len(), array.len() * 16);
    let mut buf = Vec::new();
    for i in 0..array.len() {
        if encoder.is_null(i) {
            out.append_null();
            continue;
        }
        buf.clear();
        encoder.encode(i, &mut buf);
        out.append_value(String::from_utf8_lossy(&buf));
    }
    Ok(Arc::new(out.finish()))
}

/// Writes every batch of `stream` through `writer`, calling `progress`
/// after each; storage and file work run off the async runtime.
pub async fn write_stream<W: Write + Send + 'static>(
    mut stream: SendableRecordBatchStream,
    mut writer: BatchWriter<W>,
    mut progress: impl FnMut(ExportProgress),
) -> Result<ExportProgress> {
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        writer = off_runtime(move || {
            writer.write(&batch).map_err(to_df)?;
            Ok(writer)
        })
        .await?;
        progress(writer.progress());
    }
    let done = off_runtime(move || writer.finish().map_err(to_df)).await?;
    progress(done);
    Ok(done)
}

/// A query's result as a blocking [`RecordBatchReader`], for code that is
/// not async (writers of other libraries, FFI): each batch is computed when
/// it is asked for, so the result is never held whole.
pub struct QueryReader {
    stream: SendableRecordBatchStream,
    runtime: tokio::runtime::Handle,
}

impl Iterator for QueryReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.runtime
            .block_on(self.stream.next())
            .map(|batch| batch.map_err(|e| ArrowError::ExternalError(Box::new(e))))
    }
}

impl RecordBatchReader for QueryReader {
    fn schema(&self) -> SchemaRef {
        self.stream.schema()
    }
}

/// The result of the query `sql`, which must read, not write: an
/// export, or a reader, of a statement that writes would apply it.
async fn query_frame(session: &Session, sql: &str) -> Result<crate::sql::Frame> {
    use datafusion::sql::parser::Statement as DfStatement;
    use datafusion::sql::sqlparser::ast::Statement;
    let statement = session.parse_one(sql)?;
    let reads = match &statement {
        DfStatement::Statement(statement) => matches!(
            statement.as_ref(),
            Statement::Query(_)
                | Statement::Explain { analyze: false, .. }
                | Statement::ExplainTable { .. }
                | Statement::ShowTables { .. }
                | Statement::ShowColumns { .. }
                | Statement::ShowVariable { .. }
                | Statement::ShowSchemas { .. }
                | Statement::ShowDatabases { .. }
                | Statement::ShowFunctions { .. }
        ),
        DfStatement::Explain(explain) => !explain.options.analyze,
        _ => false,
    };
    if !reads {
        let text = statement.to_string();
        let head = text
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        return Err(Error::Sql(SqlError::Invalid(format!(
            "an export reads a query's result, and '{head} …' is not a query (it would write): run it on its own"
        ))));
    }
    session.frame_of(statement).await
}

/// The work of [`Session::query_reader`].
pub(crate) fn query_reader(
    session: &Session,
    sql: &str,
    runtime: &tokio::runtime::Handle,
) -> Result<QueryReader> {
    let stream = runtime.block_on(async {
        let frame = query_frame(session, sql).await?;
        frame.execute_stream().await
    })?;
    Ok(QueryReader {
        stream,
        runtime: runtime.clone(),
    })
}

/// The work of [`Session::export_to`].
pub(crate) async fn export_to<W: Write + Send + 'static>(
    session: &Session,
    sql: &str,
    out: W,
    format: FileFormat,
    options: ExportOptions,
    progress: impl FnMut(ExportProgress),
) -> Result<ExportProgress> {
    let frame = query_frame(session, sql).await?;
    let schema: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
    let stream = frame.execute_stream().await?;
    let writer = BatchWriter::new(out, &schema, format, options)?;
    write_stream(stream, writer, progress).await
}

/// The work of [`Session::export`].
pub(crate) async fn export(
    session: &Session,
    sql: &str,
    path: &Path,
    format: FileFormat,
    options: ExportOptions,
    progress: impl FnMut(ExportProgress),
) -> Result<ExportProgress> {
    let file_error = |e: std::io::Error| Error::File {
        target: path.display().to_string(),
        message: e.to_string(),
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // As DataFusion's COPY does, a missing directory is made.
    std::fs::create_dir_all(dir).map_err(file_error)?;
    let partial = tempfile::Builder::new()
        .prefix(".widesql-export-")
        .tempfile_in(dir)
        .map_err(file_error)?;
    let file: File = partial.reopen().map_err(file_error)?;
    let done = session
        .export_to(sql, BufWriter::new(file), format, options, progress)
        .await
        .map_err(|e| match e {
            // The writer does not know the path: name it here.
            Error::File { message, .. } => Error::File {
                target: path.display().to_string(),
                message,
            },
            other => other,
        })?;
    partial.persist(path).map_err(|e| file_error(e.error))?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;

    /// `MAP(key, value)` as Arrow spells it.
    fn map_of(key: DataType, value: DataType) -> DataType {
        let entries = vec![
            Field::new("key", key, false),
            Field::new("value", value, true),
        ];
        DataType::Map(
            Arc::new(Field::new(
                "entries",
                DataType::Struct(entries.into()),
                false,
            )),
            false,
        )
    }

    #[test]
    fn plain_types_replace_views_at_every_depth() {
        let map = map_of(DataType::Utf8View, DataType::BinaryView);
        let want = map_of(DataType::Utf8, DataType::Binary);
        assert_eq!(plain(&map), want);
        assert_eq!(plain(&DataType::Int64), DataType::Int64);
    }

    #[test]
    fn formats_are_found_by_name_and_extension() -> Result<()> {
        for format in FileFormat::ALL {
            assert_eq!(FileFormat::from_name(format.name())?, format);
        }
        assert_eq!(
            FileFormat::from_path(Path::new("x/y.PARQUET")),
            Some(FileFormat::Parquet)
        );
        assert!(
            matches!(FileFormat::from_name("xlsx"), Err(e) if e.to_string().contains("'xlsx'"))
        );
        Ok(())
    }
}
