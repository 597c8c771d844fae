//! Tables of large values: the batches widesql makes are bounded in bytes
//! as well as rows. A scan's record batches, an import's batches read from
//! the file and the row groups of a Parquet export each hold about a fixed
//! number of bytes, so 1 MiB values do not make batches of thousands of
//! them. (Peak memory itself is measured by the benchmark, W9.)

#![allow(
    clippy::expect_used,
    reason = "a test: a failed expectation is the test failing"
)]

mod common;

use std::sync::{Arc, Mutex};

use common::runtime;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use widesql::export::ExportOptions;
use widesql::import::ImportOptions;
use widesql::internals::MemoryBackend;
use widesql::{Db, DbOptions, FileFormat, Session};

type TestResult = Result<(), common::BoxError>;

/// Rows of [`VALUE_BYTES`]: more than one batch and one row group hold.
const ROWS: i64 = 72;
const VALUE_BYTES: usize = 1 << 20;
/// widesql's record batches hold about 16 MiB: 17 rows of 1 MiB at most.
const MOST_ROWS_PER_BATCH: usize = 17;

fn open() -> widesql::Result<Db> {
    Db::open_on_backend(
        "memory:large",
        Arc::new(MemoryBackend::new()),
        DbOptions::new().with_compaction_interval(None),
    )
}

/// `t (k, blob)` with [`ROWS`] distinct values of [`VALUE_BYTES`].
async fn large_table(session: &Session) -> widesql::Result<()> {
    session
        .run(&format!(
            "CREATE TABLE t (k BIGINT PRIMARY KEY, blob VARCHAR);
             INSERT INTO t SELECT value, concat(lpad(CAST(value AS VARCHAR), 4, '0'),
                 repeat('x', {})) FROM generate_series(1, {ROWS})",
            VALUE_BYTES - 4
        ))
        .await
        .map(drop)
}

/// Rows per record batch of `sql`.
async fn batch_rows(session: &Session, sql: &str) -> Result<Vec<usize>, common::BoxError> {
    let batches = session.sql(sql).await?.collect().await?;
    Ok(batches.iter().map(|b| b.num_rows()).collect())
}

/// Whether `a` and `b` hold the same keys and values.
async fn same_rows(session: &Session, a: &str, b: &str) -> Result<bool, common::BoxError> {
    let rows = batch_rows(
        session,
        &format!(
            "SELECT 1 FROM {a} JOIN {b} ON {a}.k = {b}.k AND {a}.blob = {b}.blob \
             UNION ALL SELECT 1 FROM {b}"
        ),
    )
    .await?;
    Ok(rows.iter().sum::<usize>() == 2 * ROWS as usize)
}

#[test]
fn a_scan_of_large_values_makes_batches_of_bounded_bytes() -> TestResult {
    runtime().block_on(async {
        let db = open()?;
        let session = db.session();
        large_table(&session).await?;
        for sql in ["SELECT k, blob FROM t", "SELECT blob FROM t WHERE k > 0"] {
            let rows = batch_rows(&session, sql).await?;
            assert_eq!(rows.iter().sum::<usize>(), ROWS as usize, "{sql}");
            assert!(
                rows.iter().all(|&n| n <= MOST_ROWS_PER_BATCH),
                "{sql}: {rows:?}"
            );
        }
        // Small values still fill the session's batch size.
        session
            .run("CREATE TABLE small AS SELECT value AS k FROM generate_series(1, 5000)")
            .await?;
        let rows = batch_rows(&session, "SELECT k FROM small").await?;
        assert!(rows.iter().any(|&n| n > 1000), "{rows:?}");
        Ok(())
    })
}

#[test]
fn large_values_export_in_row_groups_and_import_in_batches_of_bounded_bytes() -> TestResult {
    runtime().block_on(async {
        let dir = tempfile::tempdir()?;
        let db = open()?;
        let session = db.session();
        large_table(&session).await?;

        let parquet = dir.path().join("t.parquet");
        session
            .export(
                "SELECT k, blob FROM t",
                &parquet,
                FileFormat::Parquet,
                ExportOptions::default(),
                |_| {},
            )
            .await?;
        let file = std::fs::File::open(&parquet)?;
        let groups = ParquetRecordBatchReaderBuilder::try_new(file)?
            .metadata()
            .num_row_groups();
        assert!(groups >= 2, "{groups} row group(s) for 72 MiB");

        for format in [FileFormat::Parquet, FileFormat::Csv, FileFormat::NdJson] {
            let path = dir.path().join(format!("t.{}", format.name()));
            if format != FileFormat::Parquet {
                session
                    .export(
                        "SELECT k, blob FROM t",
                        &path,
                        format,
                        ExportOptions::default(),
                        |_| {},
                    )
                    .await?;
            }
            // Progress is heard after every batch read from the file.
            let seen = Arc::new(Mutex::new(Vec::new()));
            let heard = Arc::clone(&seen);
            let copy = format!("copy_{}", format.name());
            let options = ImportOptions {
                create: true,
                ..Default::default()
            };
            let imported = session
                .import(&copy, &path, options, move |p| {
                    heard.lock().expect("progress").push(p.rows)
                })
                .await?;
            assert_eq!(imported, ROWS as u64, "{format:?}");
            let totals = seen.lock().expect("progress").clone();
            let steps: Vec<u64> = totals
                .iter()
                .scan(0, |last, &n| Some(n - std::mem::replace(last, n)))
                .collect();
            assert!(
                steps.len() >= 4 && steps.iter().all(|&n| n as usize <= MOST_ROWS_PER_BATCH),
                "{format:?}: batches of {steps:?} rows"
            );
            assert!(same_rows(&session, "t", &copy).await?, "{format:?}");
        }
        Ok(())
    })
}
