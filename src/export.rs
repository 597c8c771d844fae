//! Writing query results out: the text formats the CLI prints (an aligned
//! table, CSV with a header, a JSON array, newline-delimited JSON).

use std::str::FromStr;

use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};

/// A text format for query results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// An aligned table with borders.
    #[default]
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON array of objects.
    Json,
    /// One JSON object per line.
    Ndjson,
}

impl FromStr for Format {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "table" => Format::Table,
            "csv" => Format::Csv,
            "json" => Format::Json,
            "ndjson" | "jsonl" => Format::Ndjson,
            other => {
                return Err(Error::Sql(format!(
                    "unknown format '{other}': use table, csv, json or ndjson"
                )))
            }
        })
    }
}

/// Renders batches in `format`.
pub fn render(batches: &[RecordBatch], format: Format) -> Result<String> {
    let mut out: Vec<u8> = Vec::new();
    match format {
        Format::Table => return crate::sql::pretty(batches),
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
    String::from_utf8(out).map_err(|e| Error::Sql(e.to_string()))
}
