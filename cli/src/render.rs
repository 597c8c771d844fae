//! Writing query results out: the text formats the CLI prints (an aligned
//! table, CSV with a header, a JSON array, newline-delimited JSON).

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
