//! Tables of large values: the batches widesql makes are bounded in bytes
//! as well as rows. A scan's record batches, an import's batches read from
//! the file and the row groups of a Parquet export each hold about a fixed
//! number of bytes, so 1 MiB values do not make batches of thousands of
//! them. (Peak memory itself is measured by the benchmark, W9.)

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
        // 72 MiB in fewer rows than a split needs: split by the storage
        // entries read all the same, so that DataFusion does not spread one
        // partition over the cores with a repartition that buffers batches.
        let plan = session
            .sql("EXPLAIN SELECT sum(length(blob)) FROM t")
            .await?;
        let plan = datafusion::arrow::util::pretty::pretty_format_batches(&plan.collect().await?)?
            .to_string();
        assert!(plan.contains("partitions=2"), "{plan}");
        assert!(!plan.contains("RepartitionExec"), "{plan}");
        // Small values still fill the session's batch size.
        session
            .run("CREATE TABLE small AS SELECT value AS k FROM generate_series(1, 3000)")
            .await?;
        let rows = batch_rows(&session, "SELECT k FROM small").await?;
        assert!(rows.iter().any(|&n| n > 1000), "{rows:?}");
        // and stay one partition in fewer rows than a split needs.
        let plan = session.sql("EXPLAIN SELECT sum(k) FROM small").await?;
        let plan = datafusion::arrow::util::pretty::pretty_format_batches(&plan.collect().await?)?
            .to_string();
        assert!(plan.contains("partitions=1"), "{plan}");
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

/// Values of `size` bytes whose bytes depend on `seed` and their place, so
/// a value put together in the wrong order or from the wrong parts differs.
fn patterned(seed: usize, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i * 31 + seed * 7 + i / 251) as u8)
        .collect()
}

/// A stored entry: its tree's name, its key and its value.
type RawEntry = (Vec<u8>, Vec<u8>, Vec<u8>);

/// Every entry of every tree of the database in `dir`.
fn raw_entries(dir: &std::path::Path) -> Result<Vec<RawEntry>, common::BoxError> {
    let raw = common::open_raw_sled(dir)?;
    let mut entries = Vec::new();
    for name in raw.tree_names() {
        for entry in raw.open_tree(&name)?.iter() {
            let (key, value) = entry?;
            entries.push((name.to_vec(), key.to_vec(), value.to_vec()));
        }
    }
    Ok(entries)
}

/// Whether `name` is a user table's tree (`t:` ‖ table id).
fn is_table_tree(name: &[u8]) -> bool {
    name.len() == 18 && name.starts_with(b"t:")
}

/// Values from empty to 256 KiB, around the most an entry holds, in two
/// locality groups: each reads back whole by every kind of read, no entry
/// passes `ENTRY_BYTES` (a scan keeps thousands of sled's leaf pages
/// resident, so the size of an entry bounds its memory), replacing a value
/// with a shorter one leaves no parts behind, and deleting the rows leaves
/// the table's tree empty.
#[test]
fn values_of_every_size_are_stored_in_entries_that_fit_the_cache() -> TestResult {
    use widesql::internals::ENTRY_BYTES;
    use widesql::{
        FamilySpec, Filter, QualifierFilter, ReadOptions, RowMutation, RowSet, TableSpec,
    };

    let sizes = [
        0,
        1,
        ENTRY_BYTES - 64,
        ENTRY_BYTES,
        ENTRY_BYTES + 1,
        3 * ENTRY_BYTES + 5,
        256 * 1024 + 7,
    ];
    let dir = tempfile::tempdir()?;
    let options = || DbOptions::new().with_compaction_interval(None);
    let key = |row: usize| format!("r{row}").into_bytes();
    let expected = |row: usize, size: usize| {
        vec![
            ("f".to_string(), b"a".to_vec(), b"first".to_vec()),
            ("f".to_string(), b"big".to_vec(), patterned(row, size)),
            ("f".to_string(), b"z".to_vec(), b"last".to_vec()),
            ("g".to_string(), b"big".to_vec(), patterned(row + 100, size)),
        ]
    };
    let cells = |row: widesql::Row| -> Vec<(String, Vec<u8>, Vec<u8>)> {
        row.cells
            .into_iter()
            .map(|c| (c.family, c.qualifier, c.value))
            .collect()
    };
    {
        let db = Db::open_with(dir.path(), options())?;
        let spec = TableSpec::new()
            .with_family(
                FamilySpec::new("f")
                    .with_locality_group("g1")
                    .with_max_versions(1),
            )
            .with_family(
                FamilySpec::new("g")
                    .with_locality_group("g2")
                    .with_max_versions(1),
            );
        let table = db.default_dataset()?.create_table("t", spec)?;
        for (row, size) in sizes.iter().enumerate() {
            let mutation = RowMutation::new()
                .set("f", "a", b"first")
                .set("f", "big", patterned(row, *size))
                .set("f", "z", b"last")
                .set("g", "big", patterned(row + 100, *size));
            table.mutate_row(&key(row), &mutation)?;
        }
        for reverse in [false, true] {
            let read: Vec<_> = table
                .read_rows(&RowSet::all(), ReadOptions::new().with_reverse(reverse))?
                .map(|row| row.map(cells))
                .collect::<widesql::Result<_>>()?;
            let mut want: Vec<_> = sizes
                .iter()
                .enumerate()
                .map(|(r, s)| expected(r, *s))
                .collect();
            if reverse {
                want.reverse();
            }
            assert_eq!(read.len(), want.len(), "reverse: {reverse}");
            assert!(read == want, "rows read back differ (reverse: {reverse})");
        }
        for (row, size) in sizes.iter().enumerate() {
            // A read of one column after the large value seeks past it.
            let last = Filter::all()
                .with_families(["f"])
                .with_qualifiers(QualifierFilter::Exact([b"z".to_vec()].into()));
            let got = table.read_row(&key(row), &last)?.map(cells);
            assert_eq!(
                got,
                Some(vec![expected(row, *size)[2].clone()]),
                "row {row}"
            );
            let big = Filter::all()
                .with_families(["g"])
                .with_qualifiers(QualifierFilter::Exact([b"big".to_vec()].into()));
            let got = table.read_row(&key(row), &big)?.map(cells);
            assert!(
                got == Some(vec![expected(row, *size)[3].clone()]),
                "row {row}"
            );
        }
    }
    let entries = raw_entries(dir.path())?;
    let largest = entries.iter().map(|(_, _, v)| v.len()).max().unwrap_or(0);
    assert!(largest <= ENTRY_BYTES, "an entry of {largest} bytes");
    let table_entries = entries.iter().filter(|(t, _, _)| is_table_tree(t)).count();
    // Two chunks per row if every value fitted one entry; 256 KiB takes 43.
    assert!(
        table_entries > 2 * sizes.len() + 80,
        "{table_entries} entries"
    );

    // Shorter values replace the large ones; the old versions' parts go.
    {
        let db = Db::open_with(dir.path(), options())?;
        let table = db.default_dataset()?.table("t")?.ok_or("no table t")?;
        for row in 0..sizes.len() {
            let mutation = RowMutation::new()
                .set("f", "big", b"small")
                .set("g", "big", b"small");
            table.mutate_row(&key(row), &mutation)?;
        }
        table.compact()?;
        for row in 0..sizes.len() {
            let got = table.read_row(&key(row), &Filter::all())?.map(cells);
            let small = |f: &str| (f.to_string(), b"big".to_vec(), b"small".to_vec());
            let want = vec![
                ("f".to_string(), b"a".to_vec(), b"first".to_vec()),
                small("f"),
                ("f".to_string(), b"z".to_vec(), b"last".to_vec()),
                small("g"),
            ];
            assert_eq!(got, Some(want), "row {row}");
        }
    }
    // A whole chunk's first byte is 0; a head's is 1 and a part's 2 (see
    // src/table/entries.rs). The chunks a large value was split from are
    // merged back: one per row and group.
    let table_entries: Vec<_> = raw_entries(dir.path())?
        .into_iter()
        .filter(|(t, _, _)| is_table_tree(t))
        .collect();
    let in_parts = table_entries
        .iter()
        .filter(|(_, _, v)| v.first() != Some(&0))
        .count();
    assert_eq!(
        in_parts, 0,
        "heads or parts left after the large values went"
    );
    assert_eq!(
        table_entries.len(),
        2 * sizes.len(),
        "entries left for {} rows in two groups",
        sizes.len()
    );

    {
        let db = Db::open_with(dir.path(), options())?;
        let table = db.default_dataset()?.table("t")?.ok_or("no table t")?;
        for row in 0..sizes.len() {
            table.mutate_row(
                &key(row),
                &RowMutation::new().set("g", "big", patterned(row, 50_000)),
            )?;
        }
        table
            .bulk_mutate((0..sizes.len()).map(|row| (key(row), RowMutation::new().delete_row())))?;
        assert_eq!(
            table.read_rows(&RowSet::all(), ReadOptions::new())?.count(),
            0
        );
    }
    let left: Vec<_> = raw_entries(dir.path())?
        .into_iter()
        .filter(|(t, _, _)| is_table_tree(t))
        .collect();
    assert!(
        left.is_empty(),
        "{} entries left after every row was deleted",
        left.len()
    );
    Ok(())
}

/// A wide row split into many chunks goes back to few as its cells are
/// deleted or shrink, and reads the same at every step: the chunks a
/// write leaves small are merged with their neighbours.
#[test]
fn a_row_whose_cells_shrink_is_merged_back_into_few_chunks() -> TestResult {
    use widesql::{FamilySpec, Filter, RowMutation, TableSpec};

    let dir = tempfile::tempdir()?;
    let qualifier = |i: usize| format!("q{i:03}");
    let mut model: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
    let chunk_count = |dir: &std::path::Path| -> Result<usize, common::BoxError> {
        Ok(raw_entries(dir)?
            .into_iter()
            .filter(|(t, _, _)| is_table_tree(t))
            .count())
    };
    let check = |table: &widesql::Table,
                 model: &std::collections::BTreeMap<String, Vec<u8>>,
                 step: &str|
     -> TestResult {
        let got: Vec<(String, Vec<u8>)> = table
            .read_row(b"wide", &Filter::all())?
            .map(|row| {
                row.cells
                    .into_iter()
                    .map(|c| (String::from_utf8_lossy(&c.qualifier).into_owned(), c.value))
                    .collect()
            })
            .unwrap_or_default();
        let want: Vec<(String, Vec<u8>)> =
            model.iter().map(|(q, v)| (q.clone(), v.clone())).collect();
        assert!(got == want, "the row read back differs after {step}");
        Ok(())
    };
    let spec = TableSpec::new().with_family(FamilySpec::new("f").with_max_versions(1));
    let options = || DbOptions::new().with_compaction_interval(None);
    {
        let db = Db::open_with(dir.path(), options())?;
        let table = db.default_dataset()?.create_table("t", spec)?;
        // 200 cells of 100 bytes: about 20 KiB, split into chunks of half
        // an entry.
        let mut mutation = RowMutation::new();
        for i in 0..200 {
            let value = patterned(i, 100);
            mutation = mutation.set_at("f", qualifier(i), 1, value.clone());
            model.insert(qualifier(i), value);
        }
        table.mutate_row(b"wide", &mutation)?;
        check(&table, &model, "the load")?;
    }
    let loaded = chunk_count(dir.path())?;
    assert!(loaded >= 10, "20 KiB in {loaded} chunks");
    {
        let db = Db::open_with(dir.path(), options())?;
        let table = db.default_dataset()?.table("t")?.ok_or("no table t")?;
        // Every other cell goes, one write each, from the last.
        for i in (0..200).rev().step_by(2) {
            table.mutate_row(
                b"wide",
                &RowMutation::new().delete_column("f", qualifier(i)),
            )?;
            model.remove(&qualifier(i));
        }
        check(&table, &model, "deleting half the cells")?;
        // The rest shrink to 4 bytes in place (the same version), one
        // write each, from the first.
        for i in (0..200).step_by(2) {
            table.mutate_row(
                b"wide",
                &RowMutation::new().set_at("f", qualifier(i), 1, b"tiny"),
            )?;
            model.insert(qualifier(i), b"tiny".to_vec());
        }
        check(&table, &model, "shrinking the rest")?;
    }
    // 100 cells of about 16 bytes fit 2 chunks (no compaction ran).
    let left = chunk_count(dir.path())?;
    assert!(left <= 2, "{left} chunks left of {loaded}");
    Ok(())
}

/// A part of a large value lost from disk is reported as corruption naming
/// the table, not read as a shorter value.
#[test]
fn a_missing_part_of_a_large_value_is_corruption() -> TestResult {
    use widesql::{ErrorKind, FamilySpec, Filter, RowMutation, TableSpec};

    let dir = tempfile::tempdir()?;
    {
        let db = Db::open(dir.path())?;
        let spec = TableSpec::new().with_family(FamilySpec::new("f"));
        let table = db.default_dataset()?.create_table("pages", spec)?;
        table.mutate_row(
            b"r",
            &RowMutation::new().set("f", "q", patterned(1, 100_000)),
        )?;
    }
    {
        let raw = common::open_raw_sled(dir.path())?;
        let name = raw
            .tree_names()
            .into_iter()
            .find(|n| is_table_tree(n))
            .ok_or("no table tree")?;
        let tree = raw.open_tree(name)?;
        let keys: Vec<_> = tree.iter().keys().collect::<Result<_, _>>()?;
        assert!(
            keys.len() > 2,
            "the value was stored in {} entries",
            keys.len()
        );
        // The middle entry is a part: the head sorts first.
        tree.remove(&keys[keys.len() / 2])?;
        raw.flush()?;
    }
    let db = Db::open(dir.path())?;
    let table = db.default_dataset()?.table("pages")?.ok_or("no table")?;
    let err = table
        .read_row(b"r", &Filter::all())
        .err()
        .ok_or("a value with a part missing was read")?;
    assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
    assert!(err.to_string().contains("pages"), "{err}");
    Ok(())
}
