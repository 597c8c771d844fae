//! Writing query results out: the text formats the CLI prints (an aligned
//! table, CSV with a header, a JSON array, newline-delimited JSON, a line
//! per value).

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;
use widesql::export::{BatchWriter, ExportOptions};
use widesql::FileFormat;

use crate::error::CliError;

/// A text format for query results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// An aligned table with borders.
    #[default]
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON array of objects.
    Json,
    /// One JSON object per line.
    #[value(alias = "jsonl")]
    Ndjson,
    /// One `column = value` line per value, a blank line between rows (as
    /// sqlite3's `.mode line`): for wide rows.
    Line,
}

/// Renders batches in `format`. CSV, JSON and NDJSON are written as
/// `export` writes them (so CSV holds nested values as their JSON text).
pub fn render(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    format: Format,
) -> Result<String, CliError> {
    let file_format = match format {
        Format::Table => {
            return Ok(datafusion::arrow::util::pretty::pretty_format_batches(batches)?.to_string())
        }
        Format::Line => return Ok(lines(batches)?),
        Format::Csv => FileFormat::Csv,
        Format::Json => FileFormat::Json,
        Format::Ndjson => FileFormat::NdJson,
    };
    let mut out: Vec<u8> = Vec::new();
    let mut writer = BatchWriter::new(&mut out, schema, file_format, ExportOptions::default())?;
    for batch in batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    // The writers write UTF-8 only.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `batches` as a `name = value` line per value, the names aligned right,
/// a blank line between rows.
fn lines(batches: &[RecordBatch]) -> Result<String, ArrowError> {
    use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
    use std::fmt::Write;
    let options = FormatOptions::default().with_null("NULL");
    let mut out = String::new();
    for batch in batches {
        let schema = batch.schema();
        let width = schema
            .fields()
            .iter()
            .map(|f| f.name().chars().count())
            .max()
            .unwrap_or(0);
        let values = batch
            .columns()
            .iter()
            .map(|column| ArrayFormatter::try_new(column.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            if !out.is_empty() {
                out.push('\n');
            }
            for (field, value) in schema.fields().iter().zip(&values) {
                let _ = writeln!(out, "{:>width$} = {}", field.name(), value.value(row));
            }
        }
    }
    Ok(out.trim_end_matches('\n').to_string())
}
