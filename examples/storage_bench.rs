//! Storage benchmark: widesql's table layer against raw sled on the same
//! bytes. Prints rates and ratios; asserts nothing about time.
//!
//! `cargo run --release --example storage_bench -- [ROWS]` (default 100000).
//! After the storage figures it times SQL on the same table: the `SELECT 1`
//! floor, a point query, a ~100-row range query and a full-scan GROUP BY.
//!
//! Rows are webtable-shaped (~2.7 KB): a 2-byte language, a 16-byte
//! checksum, ~2 KB of contents in their own locality group, five anchors.

use std::time::Instant;

use widesql::{Db, DbOptions, FamilySpec, Filter, ReadOptions, RowMutation, RowSet, TableSpec};

fn row_key(i: usize) -> String {
    format!("com.site{:07}.www", (i * 7919) % 10_000_000)
}

fn cells(i: usize) -> Vec<(&'static str, String, Vec<u8>)> {
    let mut cells = vec![
        ("language", String::new(), b"EN".to_vec()),
        (
            "checksum",
            String::new(),
            (i as u128).to_be_bytes().to_vec(),
        ),
        (
            "contents",
            String::new(),
            format!("<html>{i}</html>").repeat(2048 / 16).into_bytes(),
        ),
    ];
    for a in 0..5 {
        cells.push((
            "anchor",
            format!("com.ref{a}.www/{i}"),
            format!("link {a}").into_bytes(),
        ));
    }
    cells
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir()?;
    let cache = 256 * 1024 * 1024;

    // widesql
    let db = Db::open_with(
        dir.path().join("widesql"),
        DbOptions::new()
            .with_cache_capacity(cache)
            .with_compaction_interval(None),
    )?;
    let table = db.default_dataset()?.create_table(
        "webtable",
        TableSpec::new()
            .with_family(FamilySpec::new("language"))
            .with_family(FamilySpec::new("checksum"))
            .with_family(
                FamilySpec::new("contents")
                    .with_locality_group("blobs")
                    .with_max_versions(3),
            )
            .with_family(FamilySpec::new("anchor")),
    )?;
    let start = Instant::now();
    table.bulk_mutate((0..rows).map(|i| {
        let m = cells(i)
            .into_iter()
            .fold(RowMutation::new(), |m, (f, q, v)| {
                m.set_at(f, q, 1_700_000_000_000_000, v)
            });
        (row_key(i), m)
    }))?;
    db.flush()?;
    let widesql_load = start.elapsed().as_secs_f64();
    let ncells = rows * 8;

    // raw sled: the same cells, keys row|family|qualifier|ts, one batch per 1000 rows
    let sled_db = sled::Config::new()
        .path(dir.path().join("sled"))
        .cache_capacity(cache)
        .open()?;
    let small = sled_db.open_tree("small")?;
    let blobs = sled_db.open_tree("blobs")?;
    let start = Instant::now();
    for chunk in (0..rows).collect::<Vec<_>>().chunks(1000) {
        let (mut bs, mut bb) = (sled::Batch::default(), sled::Batch::default());
        for &i in chunk {
            for (f, q, v) in cells(i) {
                let key = [row_key(i).as_bytes(), f.as_bytes(), q.as_bytes(), &[0; 8]].concat();
                if f == "contents" {
                    bb.insert(key, v)
                } else {
                    bs.insert(key, v)
                }
            }
        }
        small.apply_batch(bs)?;
        blobs.apply_batch(bb)?;
    }
    sled_db.flush()?;
    let sled_load = start.elapsed().as_secs_f64();

    println!("bulk load of {rows} rows ({ncells} cells):");
    println!(
        "  widesql  {:>9.0} rows/s {:>9.0} cells/s",
        rows as f64 / widesql_load,
        ncells as f64 / widesql_load
    );
    println!(
        "  raw sled {:>9.0} rows/s {:>9.0} cells/s   (widesql / raw sled = {:.2})",
        rows as f64 / sled_load,
        ncells as f64 / sled_load,
        sled_load / widesql_load
    );

    // point reads
    let n = 2000.min(rows);
    let start = Instant::now();
    for i in 0..n {
        let key = row_key((i * 31) % rows);
        assert!(table.read_row(key.as_bytes(), &Filter::all())?.is_some());
    }
    let point = start.elapsed().as_secs_f64() / n as f64;
    let start = Instant::now();
    for i in 0..n {
        let key = row_key((i * 31) % rows);
        assert!(
            small.scan_prefix(key.as_bytes()).count() > 0
                && blobs.scan_prefix(key.as_bytes()).count() > 0
        );
    }
    let raw_point = start.elapsed().as_secs_f64() / n as f64;
    println!(
        "point read of a row: widesql {:.1} µs, raw sled (2 prefix scans) {:.1} µs",
        point * 1e6,
        raw_point * 1e6
    );

    // ~100-row prefix scans
    let start = Instant::now();
    let mut scanned = 0;
    for p in 0..100 {
        let prefix = format!("com.site{:03}", p * 7 % 1000);
        scanned += table
            .read_rows(&RowSet::prefix(&prefix), ReadOptions::new())?
            .count();
    }
    println!(
        "prefix scan: {:.2} ms per scan of ~{} rows",
        start.elapsed().as_secs_f64() * 10.0,
        scanned / 100
    );

    // full scan of one locality group
    let start = Instant::now();
    let language =
        ReadOptions::new().with_filter(Filter::all().with_families(["language", "checksum"]));
    let count = table.read_rows(&RowSet::all(), language)?.count();
    let full = start.elapsed().as_secs_f64();
    println!(
        "full scan (language, checksum): {:.0} rows/s ({count} rows)",
        count as f64 / full
    );
    sql_figures(&db, rows)?;
    println!(
        "on disk: widesql {} MiB, raw sled {} MiB",
        db.size_on_disk()? >> 20,
        sled_db.size_on_disk()? >> 20
    );
    Ok(())
}

/// Average seconds of `n` runs of `sql`, and the rows of the last run.
async fn time_sql(
    session: &widesql::Session,
    sql: &str,
    n: usize,
) -> Result<(f64, usize), Box<dyn std::error::Error>> {
    let mut rows = 0;
    let start = Instant::now();
    for _ in 0..n {
        let batches = session.sql(sql).await?.collect().await?;
        rows = batches.iter().map(|b| b.num_rows()).sum();
    }
    Ok((start.elapsed().as_secs_f64() / n as f64, rows))
}

fn sql_figures(db: &Db, rows: usize) -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Runtime::new()?;
    let session = db.session();
    runtime.block_on(async {
        let (floor, _) = time_sql(&session, "SELECT 1", 200).await?;
        let key = row_key(rows / 2);
        let point = format!("SELECT language, checksum FROM webtable WHERE _key = '{key}'");
        let (point_s, n) = time_sql(&session, &point, 200).await?;
        assert_eq!(n, 1);
        let range = "SELECT _key, language FROM webtable WHERE _key >= 'com.site500' AND _key < 'com.site501'";
        let (range_s, range_rows) = time_sql(&session, range, 50).await?;
        let full = "SELECT language, count(*) FROM webtable GROUP BY language";
        let (full_s, _) = time_sql(&session, full, 3).await?;
        println!("SQL: SELECT 1 {:.3} ms (the floor of any query)", floor * 1e3);
        println!("SQL: point query {:.3} ms ({:.1}x the floor)", point_s * 1e3, point_s / floor);
        println!("SQL: range query of {range_rows} rows {:.3} ms", range_s * 1e3);
        println!(
            "SQL: GROUP BY language over all rows {:.0} ms, {:.0} rows/s",
            full_s * 1e3,
            rows as f64 / full_s
        );
        Ok(())
    })
}
