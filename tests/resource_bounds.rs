//! Resource bounds, counted in keys visited (each tree counts the keys its
//! reads and scans visit): a read touches what it needs, not what happens
//! to be next to it or what other tables are doing.
//!
//! Peak memory of a scan much larger than the cache is measured by the
//! benchmark (`widesql-bench`, W9), not here.

mod common;

use common::{query, query_in, run, run_in};
use widesql::{
    Db, DbOptions, Durability, FamilySpec, Filter, ReadOptions, RowMutation, RowSet, Table,
    TableSpec,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn open(dir: &std::path::Path) -> widesql::Result<Db> {
    Db::open_with(dir, DbOptions::new().with_compaction_interval(None))
}

fn keys_read(t: &Table) -> widesql::Result<u64> {
    Ok(t.keys_read_per_group()?.into_iter().map(|(_, n)| n).sum())
}

fn table(db: &Db, name: &str, family: FamilySpec) -> widesql::Result<Table> {
    Ok(db
        .default_dataset()?
        .create_table(name, TableSpec::new().with_family(family))?
        .with_durability(Durability::Eventual))
}

/// Keys a full scan of `t` visits while `between` runs after every row.
fn scan_cost(
    t: &Table,
    mut between: impl FnMut(usize) -> widesql::Result<()>,
) -> widesql::Result<u64> {
    let before = keys_read(t)?;
    for (i, row) in t.read_rows(&RowSet::all(), ReadOptions::new())?.enumerate() {
        row?;
        between(i)?;
    }
    Ok(keys_read(t)? - before)
}

#[test]
fn writes_to_one_table_do_not_make_scans_of_another_read_again() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let a = table(&db, "a", FamilySpec::new("f"))?;
    let b = table(&db, "b", FamilySpec::new("f"))?;
    a.bulk_mutate((0..300).map(|i| (format!("r{i:04}"), RowMutation::new().set("f", "q", "v"))))?;
    let quiet = scan_cost(&a, |_| Ok(()))?;
    assert_eq!(quiet, 300, "one key per row");
    let other_table_busy = scan_cost(&a, |i| {
        b.mutate_row(
            format!("x{i}").as_bytes(),
            &RowMutation::new().set("f", "q", "v"),
        )
    })?;
    assert_eq!(other_table_busy, quiet, "writes to b do not move a's scan");
    // The control: writes to a itself do make the scan re-read rows.
    let same_table_busy = scan_cost(&a, |i| {
        a.mutate_row(
            format!("r{i:04}").as_bytes(),
            &RowMutation::new().set("f", "q", "w"),
        )
    })?;
    assert!(same_table_busy > quiet, "{same_table_busy} > {quiet}");
    Ok(())
}

#[test]
fn the_latest_of_a_cell_with_100_000_versions_reads_a_few_of_them() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let t = table(&db, "t", FamilySpec::new("f"))?;
    const VERSIONS: i64 = 100_000;
    let mut m = RowMutation::new().set("f", "other", "x");
    for ts in 1..=VERSIONS {
        m = m.set_at("f", "q", ts, ts.to_be_bytes());
    }
    t.mutate_row(b"r", &m)?;
    let latest = Filter::all().with_latest_versions(1);
    let before = keys_read(&t)?;
    let row = t.read_row(b"r", &latest)?.expect("the row");
    let cost = keys_read(&t)? - before;
    assert_eq!(row.value("f", b"q"), Some(&VERSIONS.to_be_bytes()[..]));
    assert_eq!(
        row.value("f", b"other"),
        Some(&b"x"[..]),
        "the next column is read"
    );
    assert!(cost < 100, "read {cost} keys");

    // A delete marker over the newest versions: the newest one left.
    t.mutate_row(
        b"r",
        &RowMutation::new().delete_column_versions("f", "q", VERSIONS - 9..VERSIONS + 1),
    )?;
    let before = keys_read(&t)?;
    let row = t.read_row(b"r", &latest)?.expect("the row");
    let cost = keys_read(&t)? - before;
    assert_eq!(
        row.value("f", b"q"),
        Some(&(VERSIONS - 10).to_be_bytes()[..])
    );
    assert!(cost < 100, "read {cost} keys");

    // Every version, when the read asks for every version.
    let before = keys_read(&t)?;
    let row = t.read_row(b"r", &Filter::all())?.expect("the row");
    assert_eq!(row.cells.len() as i64, VERSIONS - 10 + 1);
    // About 20 bytes a version: some 2 MB in chunks of 1.25 to 2.5 KiB,
    // far fewer keys than versions.
    let cost = keys_read(&t)? - before;
    assert!((500..5000).contains(&cost), "read {cost} keys");

    // A family that keeps one version: reads stop after it, filter or not.
    let one = table(&db, "one", FamilySpec::new("f").with_max_versions(1))?;
    let mut m = RowMutation::new();
    for ts in 1..=10_000i64 {
        m = m.set_at("f", "q", ts, ts.to_be_bytes());
    }
    one.mutate_row(b"r", &m)?;
    let before = keys_read(&one)?;
    let row = one.read_row(b"r", &Filter::all())?.expect("the row");
    assert_eq!(row.cells.len(), 1);
    assert!(keys_read(&one)? - before < 100);
    Ok(())
}

#[test]
fn a_row_with_100_000_qualifiers_is_read_page_by_page() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let t = table(&db, "t", FamilySpec::new("f"))?;
    let mut m = RowMutation::new();
    for i in 0..100_000u32 {
        m = m.set("f", format!("q{i:06}"), i.to_be_bytes());
    }
    t.mutate_row(b"wide", &m)?;
    let mut token = None;
    let mut cells = 0;
    let mut pages = 0;
    loop {
        let before = keys_read(&t)?;
        let (page, next) = t.read_row_page(b"wide", &Filter::all(), 1000, token.as_ref())?;
        let cost = keys_read(&t)? - before;
        assert!(cost <= 1004, "page {pages} read {cost} keys");
        cells += page.len();
        pages += 1;
        match next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    assert_eq!((cells, pages), (100_000, 100));
    Ok(())
}

#[test]
fn compaction_skips_tables_nothing_was_written_to() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let busy = table(&db, "busy", FamilySpec::new("f").with_max_versions(1))?;
    let idle = table(&db, "idle", FamilySpec::new("f").with_max_versions(1))?;
    for t in [&busy, &idle] {
        t.bulk_mutate((0..200).map(|i| {
            let m = RowMutation::new()
                .set_at("f", "q", 1, "old")
                .set_at("f", "q", 2, "new");
            (format!("r{i:03}"), m)
        }))?;
    }
    assert_eq!(db.compact()?, 400, "the hidden versions go");
    db.compact()?; // its own deletes were writes: one more pass to settle
    let (busy_before, idle_before) = (keys_read(&busy)?, keys_read(&idle)?);
    assert_eq!(db.compact()?, 0);
    assert_eq!(keys_read(&busy)?, busy_before, "nothing written: skipped");
    assert_eq!(keys_read(&idle)?, idle_before);
    busy.mutate_row(b"r000", &RowMutation::new().set_at("f", "q", 3, "newer"))?;
    assert_eq!(db.compact()?, 1);
    assert!(
        keys_read(&busy)? > busy_before,
        "the written table is compacted"
    );
    assert_eq!(keys_read(&idle)?, idle_before, "the other one is not");
    // A family with a TTL is compacted whenever: time hides its versions.
    let ttl = table(
        &db,
        "ttl",
        FamilySpec::new("f").with_max_age(std::time::Duration::from_secs(3600)),
    )?;
    ttl.mutate_row(b"r", &RowMutation::new().set("f", "q", "v"))?;
    db.compact()?;
    db.compact()?;
    let before = keys_read(&ttl)?;
    db.compact()?;
    assert!(keys_read(&ttl)? > before);
    Ok(())
}

#[test]
fn a_dropped_query_stream_stops_its_scan() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let session = db.session();
    runtime.block_on(
        session.run("CREATE TABLE s (_key VARCHAR PRIMARY KEY, v BIGINT, m MAP(VARCHAR, BIGINT))"),
    )?;
    let t = db
        .default_dataset()?
        .open_table("s")?
        .with_durability(Durability::Eventual);
    const ROWS: u64 = 100_000;
    t.bulk_mutate((0..ROWS).map(|i| {
        let m = RowMutation::new().set("cf", "v", (i as i64).to_be_bytes());
        (format!("k{i:06}"), m)
    }))?;
    // The last reads the table as it was before any row existed: the scan
    // skips every row and never sends a batch, so only the stop it checks
    // before each skipped row can end it.
    for sql in [
        "SELECT m FROM s",
        "SELECT v FROM s",
        "SELECT v FROM as_of('s', TIMESTAMP '2000-01-01T00:00:00')",
    ] {
        let before = keys_read(&t)?;
        runtime.block_on(async {
            let stream = session.sql(sql).await?.execute_stream().await?;
            drop(stream);
            // Let the runtime run the tasks the drop aborted, so that they
            // drop the scan's receiver (a server's runtime keeps running).
            for _ in 0..20 {
                tokio::task::yield_now().await;
            }
            Ok::<_, widesql::Error>(())
        })?;
        // The scan runs on a blocking thread: wait until it stands still
        // (it would stand still at the end of the table if nothing stopped
        // it).
        let mut last = u64::MAX;
        while keys_read(&t)? != last {
            last = keys_read(&t)?;
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let read = last - before;
        assert!(
            read < ROWS / 2,
            "{sql}: {read} keys read after the stream was dropped"
        );
    }
    // The control: read to the end, the scan visits every row.
    let before = keys_read(&t)?;
    runtime.block_on(async {
        session
            .sql("SELECT count(v) FROM s")
            .await?
            .collect()
            .await?;
        Ok::<_, widesql::Error>(())
    })?;
    assert!(keys_read(&t)? - before >= ROWS);
    Ok(())
}

/// A database whose statements are atomic up to 100 rows, holding 1,000
/// rows `(k, n, s)` where `s` is `n` as text.
fn small_batches(dir: &std::path::Path) -> Result<Db, Box<dyn std::error::Error>> {
    let db = Db::open_with(
        dir,
        DbOptions::new()
            .with_compaction_interval(None)
            .with_statement_batch_rows(100),
    )?;
    run(
        &db,
        "CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT, s VARCHAR);
         INSERT INTO t SELECT value AS k, value AS n, CAST(value AS VARCHAR) AS s FROM generate_series(0, 999)",
    )?;
    Ok(db)
}

fn count(db: &Db, sql: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let rows = query(db, sql).map_err(|e| e.to_string())?;
    Ok(rows[0][0].parse()?)
}

#[test]
fn large_deletes_and_updates_write_batch_by_batch_as_they_read() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = small_batches(dir.path())?;
    assert_eq!(count(&db, "SELECT count(*) FROM t")?, 1000);

    // A bad value in the middle: the batches before it were written while
    // the query still read, and the error says how many rows they hold.
    run(&db, "UPDATE t SET s = 'x' WHERE k = 550")?;
    let session = db.session();
    run_in(&session, "SET datafusion.execution.batch_size = 50")?;
    let err = run_in(&session, "UPDATE t SET n = CAST(s AS BIGINT) + 1")
        .expect_err("'x' is not a number");
    let message = err.to_string();
    let written: u64 = message
        .split(" rows of the statement were written before it stopped")
        .next()
        .and_then(|head| head.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("no written count in: {message}"))?;
    assert!(
        written > 0 && written < 1000 && written.is_multiple_of(100),
        "{message}"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM t WHERE n = k + 1")?,
        written
    );

    // The same statement reading the table a second time (a subquery) reads
    // to its end before it writes: the error leaves every row alone.
    run(&db, "UPDATE t SET n = k")?;
    let err = run_in(
        &session,
        "UPDATE t SET n = CAST(s AS BIGINT) + 1 WHERE k IN (SELECT k FROM t)",
    )
    .expect_err("'x' is not a number");
    assert!(!err.to_string().contains("written before"), "{err}");
    assert_eq!(count(&db, "SELECT count(*) FROM t WHERE n = k")?, 1000);

    // Streamed statements change exactly the rows they match.
    run_in(&session, "UPDATE t SET n = n * 2 WHERE k % 3 = 0")?;
    assert_eq!(
        count(&db, "SELECT count(*) FROM t WHERE n = k * 2 AND k > 0")?,
        333
    );
    run_in(&session, "DELETE FROM t WHERE k % 2 = 0")?;
    assert_eq!(count(&db, "SELECT count(*) FROM t")?, 500);
    assert_eq!(count(&db, "SELECT count(*) FROM t WHERE k % 2 = 0")?, 0);

    // INSERT … SELECT from the table it writes reads it whole first: the
    // new rows are not read again.
    run_in(&session, "INSERT INTO t SELECT k + 1000, n, s FROM t")?;
    assert_eq!(count(&db, "SELECT count(*) FROM t")?, 1000);

    let deleted = query_in(&session, "DELETE FROM t").map_err(|e| e.to_string())?;
    assert_eq!(deleted, vec![vec!["1000".to_string()]]);
    assert_eq!(count(&db, "SELECT count(*) FROM t")?, 0);
    Ok(())
}

#[test]
fn a_large_insert_that_fails_midway_says_what_it_wrote() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = small_batches(dir.path())?;
    let session = db.session();
    run_in(&session, "SET datafusion.execution.batch_size = 50")?;
    // The input fails at value 700 (a division by zero) after batches of
    // 100 rows were written.
    let err = run_in(
        &session,
        "INSERT INTO t SELECT value + 5000, 10 / (700 - value), 'i' FROM generate_series(0, 999)",
    )
    .expect_err("division by zero");
    let message = err.to_string();
    assert!(message.contains("Divide by zero"), "{message}");
    assert!(
        message.contains("rows of the statement were written before"),
        "{message}"
    );
    let written = count(&db, "SELECT count(*) FROM t WHERE k >= 5000")?;
    assert!(
        written > 0 && written % 100 == 0 && written <= 700,
        "{written}"
    );
    assert!(message.contains(&format!("({written} rows")), "{message}");

    // A statement within one batch is all or nothing.
    let err = run_in(
        &session,
        "INSERT INTO t SELECT value + 9000, 10 / (70 - value), 'i' FROM generate_series(0, 99)",
    )
    .expect_err("division by zero");
    assert!(!err.to_string().contains("written before"), "{err}");
    assert_eq!(count(&db, "SELECT count(*) FROM t WHERE k >= 9000")?, 0);
    Ok(())
}

#[test]
fn a_wide_row_read_while_it_is_written_is_never_torn() -> TestResult {
    // A scan reads the first 4,096 entries of a row under the row's lock
    // and the rest without it, then checks that no writer took the lock
    // meanwhile. A writer changes the first and the last cell of a 20,000
    // cell row together; every read must see both from the same write.
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let t = table(&db, "t", FamilySpec::new("f"))?;
    let mut m = RowMutation::new().set("f", "a", "0").set("f", "z", "0");
    for i in 0..20_000u32 {
        m = m.set("f", format!("m{i:05}"), i.to_be_bytes());
    }
    t.mutate_row(b"wide", &m)?;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let writes = std::thread::scope(|scope| -> Result<u64, String> {
        let writer = scope.spawn(|| -> widesql::Result<u64> {
            let mut g = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                g += 1;
                let v = g.to_string();
                t.mutate_row(
                    b"wide",
                    &RowMutation::new()
                        .set("f", "a", v.as_str())
                        .set("f", "z", v.as_str()),
                )?;
            }
            Ok(g)
        });
        // No assertion here: a panic would leave the writer running.
        let read = (|| -> Result<(), String> {
            for read in 0..10 {
                let latest = ReadOptions::new().with_filter(Filter::all().with_latest_versions(1));
                let rows = t.read_rows(&RowSet::all(), latest);
                for row in rows.map_err(|e| e.to_string())? {
                    let row = row.map_err(|e| e.to_string())?;
                    let (a, z) = (row.value("f", b"a"), row.value("f", b"z"));
                    if a != z || row.cells.len() != 20_002 {
                        return Err(format!(
                            "read {read}: a torn row: a = {a:?}, z = {z:?}, {} cells",
                            row.cells.len()
                        ));
                    }
                }
            }
            Ok(())
        })();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let writes = writer.join().map_err(|_| "the writer panicked")?;
        read?;
        writes.map_err(|e| e.to_string())
    })?;
    assert!(writes > 0, "the writer wrote");
    Ok(())
}
