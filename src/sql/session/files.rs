//! The session's exports and imports: each a method here, its work in
//! [`files`](crate::sql::files).

use std::io::Write;
use std::path::Path;

use datafusion::execution::SendableRecordBatchStream;

use super::Session;
use crate::error::Result;
use crate::sql::files::export::{ExportOptions, ExportProgress, QueryReader};
use crate::sql::files::import::{ImportOptions, ImportProgress};
use crate::sql::files::FileFormat;

impl Session {
    /// Runs the query `sql` on `runtime` and returns its result as a
    /// blocking [`RecordBatchReader`](datafusion::arrow::array::RecordBatchReader). Call it, and read the reader, from
    /// outside the runtime's async tasks (tokio refuses to block inside
    /// them).
    pub fn query_reader(&self, sql: &str, runtime: &tokio::runtime::Handle) -> Result<QueryReader> {
        crate::sql::files::export::query_reader(self, sql, runtime)
    }

    /// Runs the query `sql` and writes its result to `out` in `format`,
    /// batch by batch; `progress` hears after every batch.
    pub async fn export_to<W: Write + Send + 'static>(
        &self,
        sql: &str,
        out: W,
        format: FileFormat,
        options: ExportOptions,
        progress: impl FnMut(ExportProgress),
    ) -> Result<ExportProgress> {
        crate::sql::files::export::export_to(self, sql, out, format, options, progress).await
    }

    /// Runs the query `sql` and writes its result to the file `path` in
    /// `format`. The file appears, whole, only when the export succeeded:
    /// it is written under a temporary name in the same directory first (a
    /// missing directory is made).
    pub async fn export(
        &self,
        sql: &str,
        path: &Path,
        format: FileFormat,
        options: ExportOptions,
        progress: impl FnMut(ExportProgress),
    ) -> Result<ExportProgress> {
        crate::sql::files::export::export(self, sql, path, format, options, progress).await
    }

    /// Imports the file `path` into the table named `table` (one to three
    /// parts, as in SQL) and returns the rows written; `progress` hears
    /// after every batch read. See [the module](crate::sql::files::import) for what is
    /// matched, cast and atomic.
    pub async fn import(
        &self,
        table: &str,
        path: &Path,
        options: ImportOptions,
        progress: impl Fn(ImportProgress) + Send + Sync + 'static,
    ) -> Result<u64> {
        crate::sql::files::import::import(self, table, path, options, progress).await
    }

    /// Imports a stream of record batches into the table named `table`,
    /// as [`Session::import`] imports a file's (Flight SQL's bulk ingest
    /// comes here); returns the rows written.
    pub async fn import_stream(
        &self,
        table: &str,
        input: SendableRecordBatchStream,
        options: ImportOptions,
    ) -> Result<u64> {
        crate::sql::files::import::import_stream(self, table, input, options).await
    }
}
