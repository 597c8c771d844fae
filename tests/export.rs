//! Exports in every format, read back with the Arrow and Parquet readers.

mod common;

use std::fs::File;
use std::path::Path;

use common::{run, runtime};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::ipc::reader::{FileReader, StreamReader};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use widesql::export::ExportOptions;
use widesql::Db;
use widesql::FileFormat;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const ROWS: usize = 300;

fn fixture(dir: &Path) -> widesql::Result<Db> {
    let db = Db::open(dir.join("db"))?;
    run(
        &db,
        "CREATE TABLE t (k BIGINT PRIMARY KEY, name VARCHAR, price DECIMAL(10, 2), at TIMESTAMP,
                         tags MAP(VARCHAR, VARCHAR));
         INSERT INTO t (k, name, price, at) SELECT value, concat('n', CAST(value AS VARCHAR)),
             CAST(value AS DECIMAL(10, 2)) / 4, to_timestamp(value * 60)
             FROM generate_series(1, 300) AS s(value);
         UPDATE t SET tags = MAP {'color': 'red', 'size': CAST(k AS VARCHAR)} WHERE k % 2 = 0",
    )?;
    Ok(db)
}

fn export(db: &Db, path: &Path, format: FileFormat, plain: bool) -> widesql::Result<u64> {
    let session = db.session();
    let options = ExportOptions { plain_types: plain };
    let done = runtime().block_on(session.export(
        "SELECT k, name, price, at, tags FROM t ORDER BY k",
        path,
        format,
        options,
        |_| {},
    ))?;
    Ok(done.rows)
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

#[test]
fn every_format_reads_back() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = fixture(dir.path())?;
    for plain in [false, true] {
        for format in FileFormat::ALL {
            let path = dir.path().join(format!("out-{plain}.{}", format.name()));
            assert_eq!(
                export(&db, &path, format, plain)?,
                ROWS as u64,
                "{format:?}"
            );
            let text = || std::fs::read_to_string(&path);
            match format {
                FileFormat::Parquet => {
                    let reader =
                        ParquetRecordBatchReaderBuilder::try_new(File::open(&path)?)?.build()?;
                    let batches = reader.collect::<Result<Vec<_>, _>>()?;
                    assert_eq!(rows(&batches), ROWS);
                    let schema = batches[0].schema();
                    assert!(matches!(schema.field(4).data_type(), DataType::Map(..)));
                    assert!(matches!(
                        schema.field(2).data_type(),
                        DataType::Decimal128(10, 2)
                    ));
                }
                FileFormat::Arrow | FileFormat::ArrowStream => {
                    let batches = if format == FileFormat::Arrow {
                        FileReader::try_new(File::open(&path)?, None)?
                            .collect::<Result<Vec<_>, _>>()?
                    } else {
                        StreamReader::try_new(File::open(&path)?, None)?
                            .collect::<Result<Vec<_>, _>>()?
                    };
                    assert_eq!(rows(&batches), ROWS);
                    let schema = batches[0].schema();
                    let name_type = schema.field(1).data_type().clone();
                    let want = if plain {
                        DataType::Utf8
                    } else {
                        DataType::Utf8View
                    };
                    assert_eq!(name_type, want, "plain_types: {plain}");
                    assert!(matches!(
                        schema.field(3).data_type(),
                        DataType::Timestamp(..)
                    ));
                    assert!(matches!(schema.field(4).data_type(), DataType::Map(..)));
                }
                FileFormat::Csv => {
                    let text = text()?;
                    let lines: Vec<&str> = text.lines().collect();
                    assert_eq!(lines.len(), ROWS + 1);
                    assert_eq!(lines[0], "k,name,price,at,tags");
                    // Row 2 has a map, as JSON text in a quoted field.
                    assert!(lines[2].starts_with("2,n2,0.50,"), "{}", lines[2]);
                    assert!(
                        lines[2].contains(r#"{""color"":""red"",""size"":""2""}"#),
                        "{}",
                        lines[2]
                    );
                }
                FileFormat::Json => {
                    let value: serde_json::Value = serde_json::from_str(&text()?)?;
                    let array = value.as_array().ok_or("a JSON array")?;
                    assert_eq!(array.len(), ROWS);
                    assert_eq!(array[1]["tags"]["color"], "red");
                }
                FileFormat::NdJson => {
                    let text = text()?;
                    assert_eq!(text.lines().count(), ROWS);
                    let second: serde_json::Value =
                        serde_json::from_str(text.lines().nth(1).ok_or("a second line")?)?;
                    assert_eq!(second["name"], "n2");
                }
            }
        }
    }
    Ok(())
}

#[test]
fn a_failed_export_leaves_no_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = fixture(dir.path())?;
    let out = dir.path().join("out");
    std::fs::create_dir(&out)?;
    let path = out.join("bad.parquet");
    let session = db.session();
    common::run_in(&session, "SET datafusion.execution.batch_size = 16")?;
    let failed = runtime().block_on(session.export(
        "SELECT k, 10 / (250 - k) AS x FROM t",
        &path,
        FileFormat::Parquet,
        ExportOptions::default(),
        |_| {},
    ));
    let err = failed.err().ok_or("a division by zero")?;
    assert!(err.to_string().contains("Divide by zero"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&out)?.collect::<Result<_, _>>()?;
    assert!(left.is_empty(), "left behind: {left:?}");
    Ok(())
}

#[test]
fn a_query_reads_as_a_record_batch_reader() -> TestResult {
    use datafusion::arrow::record_batch::RecordBatchReader;
    let dir = tempfile::tempdir()?;
    let db = fixture(dir.path())?;
    let runtime = runtime();
    let session = db.session();
    let reader = session.query_reader("SELECT k, tags FROM t", runtime.handle())?;
    assert_eq!(reader.schema().field(1).name(), "tags");
    // Any Arrow writer takes it: here the IPC stream writer, read back.
    let mut bytes = Vec::new();
    let schema = reader.schema();
    let mut writer = datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut bytes, &schema)?;
    for batch in reader {
        writer.write(&batch?)?;
    }
    writer.finish()?;
    drop(writer);
    let back = StreamReader::try_new(&bytes[..], None)?.collect::<Result<Vec<_>, _>>()?;
    assert_eq!(rows(&back), ROWS);
    Ok(())
}

#[test]
fn copy_to_a_file_is_an_export() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = fixture(dir.path())?;
    let csv = dir.path().join("copy.csv");
    run(
        &db,
        &format!(
            "COPY (SELECT k, tags FROM t WHERE k <= 2 ORDER BY k) TO '{}'",
            csv.display()
        ),
    )?;
    // A MAP column is JSON text in CSV, where DataFusion's writer refuses it.
    assert_eq!(
        std::fs::read_to_string(&csv)?,
        "k,tags\n1,\n2,\"{\"\"color\"\":\"\"red\"\",\"\"size\"\":\"\"2\"\"}\"\n"
    );
    // A COPY that fails leaves no file.
    let bad = dir.path().join("bad.parquet");
    let failed = run(
        &db,
        &format!("COPY (SELECT 1 / (k - 3) FROM t) TO '{}'", bad.display()),
    );
    assert!(failed.is_err());
    assert!(!bad.exists());
    // A table, STORED AS: Parquet that the reader reads.
    let parquet = dir.path().join("t.out");
    run(
        &db,
        &format!("COPY t TO '{}' STORED AS PARQUET", parquet.display()),
    )?;
    let batches = ParquetRecordBatchReaderBuilder::try_new(File::open(&parquet)?)?
        .build()?
        .collect::<Result<Vec<_>, _>>()?;
    assert_eq!(rows(&batches), ROWS);
    Ok(())
}

#[test]
fn an_export_of_a_statement_that_writes_is_refused_and_writes_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    run(
        &db,
        "CREATE TABLE w (_key VARCHAR PRIMARY KEY, n INT); INSERT INTO w VALUES ('a', 1)",
    )?;
    let session = db.session();
    let out = dir.path().join("out.csv");
    for sql in [
        "INSERT INTO w VALUES ('b', 2)",
        "UPDATE w SET n = 5",
        "DELETE FROM w",
        "EXPLAIN ANALYZE INSERT INTO w VALUES ('c', 3)",
        "DROP TABLE w",
    ] {
        let error = runtime()
            .block_on(session.export(sql, &out, FileFormat::Csv, ExportOptions::default(), |_| {}))
            .expect_err(sql)
            .to_string();
        assert!(error.contains("is not a query"), "{sql}: {error}");
        assert!(!out.exists(), "{sql}: a file was written");
    }
    assert_eq!(
        common::query(&db, "SELECT _key, n FROM w").map_err(|e| e.to_string())?,
        vec![vec!["a".to_string(), "1".to_string()]]
    );
    // Queries of every kind that only read still export.
    for sql in [
        "SELECT * FROM w",
        "EXPLAIN SELECT * FROM w",
        "SHOW TABLES",
        "VALUES (1)",
    ] {
        runtime().block_on(session.export(
            sql,
            &out,
            FileFormat::Csv,
            ExportOptions::default(),
            |_| {},
        ))?;
        assert!(out.exists(), "{sql}");
        std::fs::remove_file(&out)?;
    }
    Ok(())
}
