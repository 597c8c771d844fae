//! Writing query results out: the text formats the CLI prints (an aligned
//! table, CSV with a header, a JSON array, newline-delimited JSON, a line
//! per value).

use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;

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

/// Renders batches in `format`.
pub fn render(batches: &[RecordBatch], format: Format) -> Result<String, ArrowError> {
    let mut out: Vec<u8> = Vec::new();
    match format {
        Format::Table => {
            return Ok(datafusion::arrow::util::pretty::pretty_format_batches(batches)?.to_string())
        }
        Format::Csv => {
            let mut writer = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            for batch in batches {
                writer.write(batch)?;
            }
        }
        Format::Json => {
            let mut writer = datafusion::arrow::json::ArrayWriter::new(&mut out);
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
        Format::Line => return lines(batches),
        Format::Ndjson => {
            let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(&mut out);
            for batch in batches {
                writer.write(batch)?;
            }
            writer.finish()?;
        }
    }
    // The arrow writers write UTF-8 only.
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
