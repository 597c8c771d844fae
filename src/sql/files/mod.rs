//! Files in and out, the stage between a session and the file system: an
//! export ([`export`]) takes a query's text, runs it through the session
//! and writes its batches to a file or a stream in a [`FileFormat`]; an
//! import ([`import`]) takes files or a stream of batches and writes their
//! rows through the one write path ([`dml`](crate::sql::dml)), in atomic
//! batches. This module names the formats.

pub mod export;
pub mod import;

use std::path::Path;

use crate::error::{Error, Result};
#[cfg(doc)]
use crate::sql::Session;
use crate::sql::SqlError;

/// A file format widesql writes ([`Session::export`]) and reads
/// ([`Session::import`](crate::sql::Session::import)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// Apache Parquet.
    Parquet,
    /// Arrow IPC file (`.arrow`, Feather v2).
    Arrow,
    /// Arrow IPC stream (`.arrows`), readable while it is written.
    ArrowStream,
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON array of objects.
    Json,
    /// One JSON object per line.
    NdJson,
}

impl FileFormat {
    /// Every format, by its name.
    pub const ALL: [FileFormat; 6] = [
        FileFormat::Parquet,
        FileFormat::Arrow,
        FileFormat::ArrowStream,
        FileFormat::Csv,
        FileFormat::Json,
        FileFormat::NdJson,
    ];

    /// The name, also the usual file extension.
    pub fn name(self) -> &'static str {
        match self {
            FileFormat::Parquet => "parquet",
            FileFormat::Arrow => "arrow",
            FileFormat::ArrowStream => "arrows",
            FileFormat::Csv => "csv",
            FileFormat::Json => "json",
            FileFormat::NdJson => "ndjson",
        }
    }

    /// The format called `name` (`parquet`, `arrow`, `arrows`, `csv`,
    /// `json`, `ndjson`; `feather`, `ipc` and `jsonl` too).
    pub fn from_name(name: &str) -> Result<FileFormat> {
        let lower = name.to_ascii_lowercase();
        let by_alias = match lower.as_str() {
            "feather" | "ipc" => Some(FileFormat::Arrow),
            "jsonl" => Some(FileFormat::NdJson),
            _ => None,
        };
        by_alias
            .or_else(|| Self::ALL.into_iter().find(|f| f.name() == lower))
            .ok_or_else(|| {
                Error::Sql(SqlError::Invalid(format!(
                    "unknown file format '{name}': use one of parquet, arrow, arrows, csv, json, ndjson"
                )))
            })
    }

    /// The format a file name's extension names, if any.
    pub fn from_path(path: &Path) -> Option<FileFormat> {
        Self::from_name(path.extension()?.to_str()?).ok()
    }
}
