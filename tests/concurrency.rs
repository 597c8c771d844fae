//! Concurrency: writers, readers, DDL and compaction at the same time.
//!
//! - Writers apply multi-cell mutations across two locality groups (through
//!   the embedded API and through SQL `UPDATE`) while readers read rows,
//!   scan ranges and run SQL: no reader ever sees a torn row.
//! - Full scans long enough to read ahead on a second thread, forward and
//!   reverse, while a writer rewrites rows (some wide, in several chunks):
//!   every row once, in order, never torn.
//! - Concurrent `CREATE TABLE` of one name in SQL, without `IF NOT EXISTS`,
//!   gives one table, one success and `already exists` for the others.
//! - DDL (`ADD COLUMN … DEFAULT`, `DROP COLUMN`, new families, looser GC,
//!   renames, other tables created and dropped) and compaction passes run
//!   during writes: every acknowledged write is there afterwards and the
//!   added column has its default in every row.
//! - Two writers load the same new rows in batches at once, each its own
//!   column, during compaction: no row loses a column.
//!
//! Read-modify-write increments and check-and-mutate under concurrency are
//! in `table_atomic_rmw.rs`; `CREATE TABLE IF NOT EXISTS` races in
//! `table_ddl_races.rs`.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};

use common::{query, query_in, run, run_in, BoxError};
use widesql::{
    Db, DbOptions, ErrorKind, FamilySpec, Filter, GcPolicy, ReadOptions, RowMutation, RowRange,
    RowSet,
};

type TestResult = Result<(), BoxError>;

/// Rows the torn-row test writes to.
const KEYS: usize = 16;

/// How many times longer than in `cargo test` the writers run:
/// `WIDESQL_CONCURRENCY_SCALE=50 cargo test --test concurrency`.
fn scale() -> u64 {
    std::env::var("WIDESQL_CONCURRENCY_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

fn open(dir: &std::path::Path) -> widesql::Result<Db> {
    Db::open_with(dir, DbOptions::new().with_compaction_interval(None))
}

/// The stored row key of a `_key VARCHAR` row: its bytes.
fn row_key(name: &str) -> Vec<u8> {
    name.as_bytes().to_vec()
}

/// The latest values of every cell of a row that a writer sets together.
/// A row is whole when they are all equal.
fn cell_values(row: &widesql::Row) -> Vec<Vec<u8>> {
    row.cells
        .iter()
        // Not the row marker SQL writes (family `cf`, no qualifier).
        .filter(|c| matches!(c.family.as_str(), "cf" | "page" | "m") && !c.qualifier.is_empty())
        .map(|c| c.value.clone())
        .collect()
}

fn whole(values: &[Vec<u8>]) -> bool {
    values.len() == 3 && values.iter().all(|v| v == &values[0])
}

/// A database in a new directory with the table `c` of the torn-row
/// tests: `a` in the default group, `b` in `blobs`, a map `m`.
fn torn_row_table() -> Result<(tempfile::TempDir, Db), BoxError> {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    run(
        &db,
        "CREATE TABLE c (_key VARCHAR PRIMARY KEY, a BIGINT, b BIGINT, m MAP(VARCHAR, BIGINT)) \
         WITH ('page.columns' = 'b', 'page.locality_group' = 'blobs')",
    )?;
    Ok((dir, db))
}

#[test]
fn readers_never_see_a_torn_row() -> TestResult {
    let (_dir, db) = torn_row_table()?;
    let rows: Vec<String> = (0..KEYS).map(|i| format!("k{i:02}")).collect();
    let values: Vec<String> = rows
        .iter()
        .map(|k| format!("('{k}', 0, 0, MAP {{'x': 0}})"))
        .collect();
    run(&db, &format!("INSERT INTO c VALUES {}", values.join(", ")))?;
    let t = db.default_dataset()?.open_table("c")?;
    let latest = Filter::all().with_latest_versions(1);
    // The embedded writers write the same cells SQL does: check that the
    // key and the cells are found where SQL put them.
    let first = t.read_row(&row_key(&rows[0]), &latest)?.ok_or("row k00")?;
    assert!(whole(&cell_values(&first)), "{first:?}");
    let map_qualifier = first
        .cells
        .iter()
        .find(|c| c.family == "m")
        .map(|c| c.qualifier.clone())
        .ok_or("the map cell")?;
    // (A row with a cell in `blobs` has a row marker in `cf` too.)
    let a_cell = first
        .cells
        .iter()
        .find(|c| c.family == "cf" && !c.qualifier.is_empty())
        .ok_or("the a cell")?;
    assert_eq!(a_cell.value, 0i64.to_be_bytes());

    let done = AtomicU64::new(0);
    let writers = 3;
    let torn = Mutex::new(Vec::<String>::new());
    let reads = AtomicU64::new(0);
    std::thread::scope(|s| -> TestResult {
        let mut handles = Vec::new();
        for w in 0..2u64 {
            let (t, rows, done, map_qualifier) = (&t, &rows, &done, &map_qualifier);
            handles.push(s.spawn(move || -> TestResult {
                for n in 1..=300 * scale() {
                    let v = ((w + 1) * 1_000_000 + n) as i64;
                    let key = row_key(&rows[(n as usize * 7 + w as usize) % KEYS]);
                    t.mutate_row(
                        &key,
                        &RowMutation::new()
                            .set("cf", "a", v.to_be_bytes())
                            .set("page", "b", v.to_be_bytes())
                            .set("m", map_qualifier, v.to_be_bytes()),
                    )?;
                }
                done.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }));
        }
        {
            let (db, rows, done) = (&db, &rows, &done);
            handles.push(s.spawn(move || -> TestResult {
                let session = db.session();
                for n in 1..=40 * scale() {
                    let v = 3_000_000 + n;
                    let a = &rows[(n as usize * 5) % KEYS];
                    let b = &rows[(n as usize * 5 + 1) % KEYS];
                    run_in(
                        &session,
                        &format!(
                            "UPDATE c SET a = {v}, b = {v}, m = MAP {{'x': {v}}} \
                             WHERE _key IN ('{a}', '{b}')"
                        ),
                    )?;
                }
                done.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }));
        }
        // Readers: single rows, range scans and SQL.
        for r in 0..3usize {
            let (db, t, rows, done, torn, reads, latest) =
                (&db, &t, &rows, &done, &torn, &reads, &latest);
            handles.push(s.spawn(move || -> TestResult {
                let session = db.session();
                let mut n = 0usize;
                while done.load(Ordering::SeqCst) < writers || n < 20 {
                    n += 1;
                    reads.fetch_add(1, Ordering::Relaxed);
                    let mut seen: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
                    match r {
                        0 => {
                            let key = &rows[n % KEYS];
                            let row = t.read_row(&row_key(key), latest)?.ok_or("a row vanished")?;
                            seen.push((key.clone(), cell_values(&row)));
                        }
                        1 => {
                            let range = RowRange::new(row_key(&rows[2])..row_key(&rows[12]));
                            let options = ReadOptions::new().with_filter(latest.clone());
                            let mut count = 0;
                            for row in t.read_rows(&RowSet::range(range), options)? {
                                let row = row?;
                                count += 1;
                                seen.push((format!("{:?}", row.key), cell_values(&row)));
                            }
                            assert_eq!(count, 10, "the range holds ten rows");
                        }
                        _ => {
                            let answer = query_in(
                                &session,
                                "SELECT _key, a, b, m['x'] FROM c ORDER BY _key",
                            )?;
                            assert_eq!(answer.len(), KEYS);
                            for row in answer {
                                let values = row[1..].iter().map(|v| v.as_bytes().to_vec());
                                seen.push((row[0].clone(), values.collect()));
                            }
                        }
                    }
                    for (key, values) in seen {
                        if !whole(&values) {
                            torn.lock()
                                .expect("lock")
                                .push(format!("{key}: {values:?}"));
                        }
                    }
                }
                Ok(())
            }));
        }
        for h in handles {
            h.join().map_err(|_| "a thread panicked")??;
        }
        Ok(())
    })?;
    let torn = torn.into_inner().expect("lock");
    assert!(torn.is_empty(), "torn rows seen: {torn:?}");
    assert!(reads.load(Ordering::Relaxed) >= 60);
    // The last write of each row is what every reader agrees on now.
    for row in query(&db, "SELECT a, b, m['x'] FROM c")? {
        assert!(row[0] == row[1] && row[1] == row[2], "{row:?}");
    }
    Ok(())
}

#[test]
fn concurrent_create_table_has_one_winner_and_already_exists_for_the_rest() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    for round in 0..10 * scale() {
        let barrier = Barrier::new(4);
        let results: Vec<widesql::Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|i| {
                    let (db, barrier) = (&db, &barrier);
                    s.spawn(move || {
                        let session = db.session();
                        barrier.wait();
                        run_in(
                            &session,
                            &format!("CREATE TABLE t{round} (id BIGINT PRIMARY KEY, who INT)"),
                        )?;
                        run_in(&session, &format!("INSERT INTO t{round} VALUES ({i}, {i})"))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect()
        });
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "round {round}: {results:?}");
        for e in results.iter().filter_map(|r| r.as_ref().err()) {
            assert_eq!(e.kind(), ErrorKind::AlreadyExists, "round {round}: {e}");
            assert!(e.to_string().contains(&format!("t{round}")), "{e}");
        }
        assert_eq!(
            query(&db, &format!("SELECT count(*) FROM t{round}"))?,
            [["1"]]
        );
    }
    assert_eq!(db.default_dataset()?.tables()?.len() as u64, 10 * scale());
    // CREATE OR REPLACE racing with itself: every statement succeeds and
    // one whole table is left.
    let results: Vec<widesql::Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let db = &db;
                s.spawn(move || {
                    run(
                        db,
                        &format!("CREATE OR REPLACE TABLE r AS SELECT {i} AS who, v FROM (VALUES (1), (2), (3)) AS s(v)"),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let rows = query(&db, "SELECT count(*), count(DISTINCT who) FROM r")?;
    assert_eq!(rows, [["3", "1"]]);
    Ok(())
}

#[test]
fn ddl_and_compaction_during_writes_lose_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    run(
        &db,
        "CREATE TABLE w (id BIGINT PRIMARY KEY, writer INT, n BIGINT, gone VARCHAR)",
    )?;
    let sql_table = db.default_dataset()?.open_table("w")?;
    let wide = db.default_dataset()?.create_table(
        "wide",
        widesql::TableSpec::new()
            .with_family(FamilySpec::new("f").with_max_versions(1))
            .with_family(FamilySpec::new("g").with_locality_group("other")),
    )?;
    let stop = AtomicBool::new(false);
    let acknowledged: Mutex<BTreeMap<i64, i64>> = Mutex::new(BTreeMap::new());
    let embedded: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
    let compactions = AtomicU64::new(0);
    std::thread::scope(|s| -> TestResult {
        let mut writers = Vec::new();
        for w in 0..2i64 {
            let (db, acknowledged) = (&db, &acknowledged);
            writers.push(s.spawn(move || -> TestResult {
                let session = db.session();
                for n in 0..150 * scale() as i64 {
                    let id = w * 1_000_000 + n;
                    // The table is renamed back and forth: write to whichever
                    // name it has; a statement that raced the rename fails
                    // whole and is retried.
                    let mut tries = 0;
                    loop {
                        let name = if tries % 2 == 0 { "w" } else { "w2" };
                        let sql =
                            format!("INSERT INTO {name} (id, writer, n) VALUES ({id}, {w}, {n})");
                        match run_in(&session, &sql) {
                            Ok(()) => break,
                            // Also when DataFusion's planner no longer
                            // finds a name the session resolved a moment
                            // before, the table "does not exist".
                            Err(e) if e.to_string().contains("does not exist") => {
                                tries += 1;
                                assert!(tries < 1000, "table never found: {e}");
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                    acknowledged.lock().expect("lock").insert(id, n);
                }
                Ok(())
            }));
        }
        {
            let (wide, embedded) = (&wide, &embedded);
            writers.push(s.spawn(move || -> TestResult {
                for n in 0..400 * scale() {
                    let key = format!("r{:03}", n % 97);
                    wide.mutate_row(
                        key.as_bytes(),
                        &RowMutation::new()
                            .set("f", "n", n.to_be_bytes())
                            .set("g", "n", n.to_be_bytes())
                            .set("h", "n", n.to_be_bytes()),
                    )
                    .or_else(|e| {
                        // Family `h` appears partway through.
                        if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::InvalidArgument
                        {
                            wide.mutate_row(
                                key.as_bytes(),
                                &RowMutation::new().set("f", "n", n.to_be_bytes()).set(
                                    "g",
                                    "n",
                                    n.to_be_bytes(),
                                ),
                            )
                        } else {
                            Err(e)
                        }
                    })?;
                    embedded.lock().expect("lock").insert(key, n);
                }
                Ok(())
            }));
        }
        let compactor = {
            let (db, stop, compactions) = (&db, &stop, &compactions);
            s.spawn(move || -> TestResult {
                while !stop.load(Ordering::SeqCst) {
                    db.compact()?;
                    compactions.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        };
        let ddl = {
            let (db, wide, sql_table) = (&db, &wide, &sql_table);
            s.spawn(move || -> TestResult {
                let session = db.session();
                for step in 0..6 {
                    run_in(
                        &session,
                        &format!("CREATE TABLE other{step} (k INT PRIMARY KEY)"),
                    )?;
                    sql_table.rename("w2")?;
                    sql_table.rename("w")?;
                    match step {
                        1 => run_in(&session, "ALTER TABLE w ADD COLUMN d BIGINT DEFAULT 7")?,
                        2 => run_in(&session, "ALTER TABLE w DROP COLUMN gone")?,
                        3 => wide.add_family(FamilySpec::new("h").with_locality_group("other"))?,
                        4 => wide.set_gc_policy("f", GcPolicy::keep_all().with_max_versions(3))?,
                        _ => {}
                    }
                    run_in(&session, &format!("DROP TABLE other{step}"))?;
                }
                Ok(())
            })
        };
        // Every thread is joined and the compactor stopped before any
        // failure is reported, so a failure never leaves it running.
        let writers: Vec<_> = writers.into_iter().map(|h| h.join()).collect();
        let ddl = ddl.join();
        stop.store(true, Ordering::SeqCst);
        let compactor = compactor.join();
        for writer in writers {
            writer.map_err(|_| "a writer panicked")??;
        }
        ddl.map_err(|_| "the DDL thread panicked")??;
        compactor.map_err(|_| "the compactor panicked")??;
        Ok(())
    })?;
    assert!(compactions.load(Ordering::Relaxed) > 0);
    db.compact()?;

    let acknowledged = acknowledged.into_inner().expect("lock");
    let stored: BTreeMap<i64, i64> = query(&db, "SELECT id, n FROM w")?
        .into_iter()
        .map(|r| (r[0].parse().expect("id"), r[1].parse().expect("n")))
        .collect();
    assert_eq!(
        stored, acknowledged,
        "every acknowledged INSERT, nothing else"
    );
    assert_eq!(
        query(&db, "SELECT count(*) FROM w WHERE d IS NULL OR d <> 7")?,
        [["0"]],
        "ADD COLUMN … DEFAULT covers rows inserted while it ran"
    );

    let embedded = embedded.into_inner().expect("lock");
    let latest = Filter::all().with_latest_versions(1);
    for (key, n) in &embedded {
        let row = wide
            .read_row(key.as_bytes(), &latest)?
            .ok_or("a row is missing")?;
        for family in ["f", "g"] {
            assert_eq!(
                row.value(family, b"n"),
                Some(&n.to_be_bytes()[..]),
                "{key} {family}"
            );
        }
    }
    assert_eq!(db.default_dataset()?.tables()?.len(), 2);
    Ok(())
}

/// Rows of the read-ahead test: enough that every full scan reads most of
/// its chunks on a read-ahead thread (which starts after 1,024).
const LONG_SCAN_ROWS: usize = 2_500;

#[test]
fn long_scans_reading_ahead_never_see_a_torn_row() -> TestResult {
    let (_dir, db) = torn_row_table()?;
    let t = db.default_dataset()?.open_table("c")?;
    let keys: Vec<Vec<u8>> = (0..LONG_SCAN_ROWS)
        .map(|i| row_key(&format!("k{i:05}")))
        .collect();
    let padding = vec![b'p'; 512];
    let mutation = |v: i64, wide: bool| {
        let mut m = RowMutation::new()
            .set("cf", "a", v.to_be_bytes())
            .set("page", "b", v.to_be_bytes())
            .set("m", "x", v.to_be_bytes());
        if wide {
            // Every 100th row is wide: its map cells span several chunks.
            for q in 0..200 {
                m = m.set("m", format!("pad{q:03}"), &padding);
            }
        }
        m
    };
    t.bulk_mutate(
        keys.iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), mutation(0, i % 100 == 0))),
    )?;
    let latest = Filter::all().with_latest_versions(1);
    // The three cells a writer sets together, and how many cells the row has.
    let shape = |row: &widesql::Row| {
        let values: Vec<Vec<u8>> = row
            .cells
            .iter()
            .filter(|c| {
                matches!(
                    (c.family.as_str(), c.qualifier.as_slice()),
                    ("cf", b"a") | ("page", b"b") | ("m", b"x")
                )
            })
            .map(|c| c.value.clone())
            .collect();
        (values, row.cells.len())
    };
    let done = AtomicBool::new(false);
    let torn = Mutex::new(Vec::<String>::new());
    let scans = AtomicU64::new(0);
    std::thread::scope(|s| -> TestResult {
        let writer = s.spawn(|| -> TestResult {
            for n in 1..=400 * scale() {
                let i = (n as usize * 37) % LONG_SCAN_ROWS;
                t.mutate_row(&keys[i], &mutation(n as i64, i.is_multiple_of(100)))?;
                // Writes in bursts: a write makes a scan reopen its
                // cursors, and between bursts the scans go far enough to
                // read ahead, so that the next burst meets them doing so.
                if n % 20 == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(40));
                }
            }
            done.store(true, Ordering::SeqCst);
            Ok(())
        });
        let mut readers = Vec::new();
        for reverse in [false, true] {
            let (t, torn, scans, done, latest) = (&t, &torn, &scans, &done, &latest);
            readers.push(s.spawn(move || -> TestResult {
                let mut n = 0;
                while !done.load(Ordering::SeqCst) || n < 2 {
                    n += 1;
                    let options = ReadOptions::new()
                        .with_filter(latest.clone())
                        .with_reverse(reverse);
                    let mut count = 0;
                    let mut last: Option<Vec<u8>> = None;
                    for row in t.read_rows(&RowSet::all(), options)? {
                        let row = row?;
                        count += 1;
                        if let Some(last) = &last {
                            assert!((last < &row.key) != reverse, "rows out of order");
                        }
                        let (values, cells) = shape(&row);
                        let i: usize = String::from_utf8_lossy(&row.key[1..]).parse()?;
                        let wide = i.is_multiple_of(100);
                        let expected_cells = if wide { 203 } else { 3 };
                        if !whole(&values) || cells != expected_cells {
                            torn.lock().expect("lock").push(format!(
                                "{}: {values:?}, {cells} cells",
                                String::from_utf8_lossy(&row.key)
                            ));
                        }
                        last = Some(row.key);
                    }
                    assert_eq!(count, LONG_SCAN_ROWS, "every row once");
                    scans.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }));
        }
        writer.join().map_err(|_| "the writer panicked")??;
        for r in readers {
            r.join().map_err(|_| "a reader panicked")??;
        }
        Ok(())
    })?;
    let torn = torn.into_inner().expect("lock");
    assert!(torn.is_empty(), "torn rows seen: {torn:?}");
    assert!(scans.load(Ordering::Relaxed) >= 4);
    Ok(())
}

/// Two writers load the same new rows in batches at once, each its own
/// column in both locality groups, while compaction passes run: a batch
/// that found its rows' range empty writes them without reading, so it
/// must hold their locks from that look until its write (else one writer
/// would overwrite the other's chunk and lose its column).
#[test]
fn bulk_writers_of_the_same_new_rows_lose_no_column() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let t = db.default_dataset()?.create_table(
        "t",
        widesql::TableSpec::new()
            .with_family(FamilySpec::new("f"))
            .with_family(FamilySpec::new("g").with_locality_group("other")),
    )?;
    let rounds = 20 * scale();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> TestResult {
        let compactor = s.spawn(|| -> TestResult {
            while !stop.load(Ordering::SeqCst) {
                db.compact()?;
            }
            Ok(())
        });
        let writers: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|column| {
                let t = &t;
                s.spawn(move || -> TestResult {
                    for round in 0..rounds {
                        // Ten batches of 20 new rows, so that the two
                        // writers' batches interleave.
                        for batch in 0..10 {
                            t.bulk_mutate((0..20).map(|i| {
                                let key = format!("r{round:03}-{batch}{i:02}");
                                let m =
                                    RowMutation::new()
                                        .set("f", column, [1])
                                        .set("g", column, [2]);
                                (key.into_bytes(), m)
                            }))?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        let writers: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        stop.store(true, Ordering::SeqCst);
        let compactor = compactor.join();
        for writer in writers {
            writer.map_err(|_| "a writer panicked")??;
        }
        compactor.map_err(|_| "the compactor panicked")??;
        Ok(())
    })?;
    let mut rows = 0;
    for row in t.read_rows(&RowSet::all(), ReadOptions::new())? {
        let row = row?;
        let mut cells: Vec<(String, Vec<u8>)> = row
            .cells
            .iter()
            .map(|c| (c.family.clone(), c.qualifier.clone()))
            .collect();
        cells.sort();
        let want: Vec<(String, Vec<u8>)> = [("f", "a"), ("f", "b"), ("g", "a"), ("g", "b")]
            .iter()
            .map(|(f, q)| (f.to_string(), q.as_bytes().to_vec()))
            .collect();
        assert_eq!(cells, want, "row {}", String::from_utf8_lossy(&row.key));
        rows += 1;
    }
    assert_eq!(rows, 200 * rounds);
    Ok(())
}

/// The bytes of version `version` of a large value of `len` bytes: its
/// first byte names the version, and every byte depends on it.
fn large_value(version: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| version.wrapping_add((i % 251) as u8).wrapping_mul(3))
        .collect()
}

/// A value stored in parts (a head entry and parts of 2 KiB) is read while
/// a writer rewrites it with values of other lengths, so other numbers of
/// parts: point reads and scans both ways always return one whole version,
/// never a mix of two and never a false corruption error.
#[test]
fn readers_never_see_a_large_value_torn_between_its_parts() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let spec = widesql::TableSpec::new().with_family(FamilySpec::new("f").with_max_versions(1));
    let t = db
        .default_dataset()?
        .create_table("big", spec)?
        .with_durability(widesql::Durability::Eventual);
    let keys = [b"a".to_vec(), b"b".to_vec()];
    for key in &keys {
        t.mutate_row(
            key,
            &RowMutation::new().set("f", "v", large_value(0, 9_000)),
        )?;
    }
    // The version each value's bytes say it is, checked against the whole
    // value; `None` for bytes no version has.
    let version_of = |value: &[u8]| -> Option<u8> {
        let first = value.first()?;
        // (v * 3) mod 256 has one solution: 171 is 3's inverse.
        let version = first.wrapping_mul(171);
        (large_value(version, value.len()) == value).then_some(version)
    };
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    std::thread::scope(|s| -> TestResult {
        let writer = s.spawn(|| -> TestResult {
            for n in 1..=200 * scale() {
                let version = (n % 250) as u8;
                let len = 3_000 + (n as usize % 9) * 4_000;
                let key = &keys[n as usize % 2];
                t.mutate_row(
                    key,
                    &RowMutation::new().set("f", "v", large_value(version, len)),
                )?;
            }
            stop.store(true, Ordering::SeqCst);
            Ok(())
        });
        let mut readers = Vec::new();
        for reader in 0..2 {
            let (t, keys, stop, reads) = (&t, &keys, &stop, &reads);
            readers.push(s.spawn(move || -> TestResult {
                while !stop.load(Ordering::SeqCst) {
                    let rows: Vec<widesql::Row> = if reader == 0 {
                        let key = &keys[reads.load(Ordering::Relaxed) as usize % 2];
                        t.read_row(key, &Filter::all())?.into_iter().collect()
                    } else {
                        let reverse = reads.load(Ordering::Relaxed) % 2 == 1;
                        t.read_rows(&RowSet::all(), ReadOptions::new().with_reverse(reverse))?
                            .collect::<widesql::Result<_>>()?
                    };
                    for row in rows {
                        assert_eq!(row.cells.len(), 1, "{:?}", row.key);
                        let value = &row.cells[0].value;
                        assert!(
                            version_of(value).is_some(),
                            "row {:?}: {} bytes of no one version",
                            row.key,
                            value.len()
                        );
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }));
        }
        writer.join().expect("the writer")?;
        for reader in readers {
            reader.join().expect("a reader")?;
        }
        Ok(())
    })?;
    assert!(reads.load(Ordering::Relaxed) > 10, "the readers barely ran");
    Ok(())
}
