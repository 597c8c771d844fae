//! DDL racing with writes and compaction loses nothing and resurrects
//! nothing: compaction never deletes under a layout older than the one in
//! force, and a loosened GC policy never shows a version the old policy
//! had hidden. A table dropped in the middle of a compaction pass fails
//! neither the drop nor the pass; a scan of a table dropped meanwhile
//! reports the drop.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

mod common;

use common::{query, run};
use widesql::{Db, DbOptions, FamilySpec, Filter, GcPolicy, RowMutation, TableSpec};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn db(dir: &std::path::Path) -> widesql::Result<Db> {
    Db::open_with(dir, DbOptions::new().with_compaction_interval(None))
}

/// Table `t` with family `f` that keeps one version per column.
fn keeping_one_version(db: &Db) -> widesql::Result<widesql::Table> {
    db.default_dataset()?.create_table(
        "t",
        TableSpec::new().with_family(FamilySpec::new("f").with_max_versions(1)),
    )
}

/// Rows with hidden versions ahead of `zz…` keys, so a compaction pass is
/// long enough for DDL to happen during it.
fn fill_with_hidden_versions(t: &widesql::Table, rows: usize) -> widesql::Result<()> {
    let mutations = (0..rows).map(|i| {
        let key = format!("a{i:08}");
        let m = RowMutation::new()
            .set_at("f", "q", 1, "old")
            .set_at("f", "q", 2, "new");
        (key.into_bytes(), m)
    });
    t.bulk_mutate(mutations)?;
    Ok(())
}

#[test]
fn compaction_keeps_cells_of_a_family_added_during_the_pass() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    let t = keeping_one_version(&db)?;
    for round in 0..12 {
        fill_with_hidden_versions(&t, 3000)?;
        let compactor = {
            let t = t.clone();
            std::thread::spawn(move || t.compact())
        };
        let family = format!("g{round}");
        t.add_family(FamilySpec::new(family.clone()))?;
        t.mutate_row(b"zz", &RowMutation::new().set(family.clone(), "q", "kept"))?;
        compactor.join().map_err(|_| "compaction panicked")??;
        t.compact()?;
        let row = t.read_row(b"zz", &Filter::all().with_families([family.clone()]))?;
        assert!(
            row.is_some_and(|r| r.value(&family, b"q") == Some(&b"kept"[..])),
            "round {round}: the cell of family {family} was deleted by compaction"
        );
    }
    Ok(())
}

#[test]
fn loosening_max_versions_under_writes_resurrects_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    let t = keeping_one_version(&db)?;
    // Other rows make the switch's compaction take a while.
    fill_with_hidden_versions(&t, 20_000)?;
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicI64::new(0));
    let writer = {
        let (t, stop, written) = (t.clone(), Arc::clone(&stop), Arc::clone(&written));
        std::thread::spawn(move || -> widesql::Result<()> {
            let mut ts = 10;
            while !stop.load(Ordering::SeqCst) {
                ts += 1;
                t.mutate_row(b"hot", &RowMutation::new().set_at("f", "q", ts, "v"))?;
                written.store(ts, Ordering::SeqCst);
            }
            Ok(())
        })
    };
    while written.load(Ordering::SeqCst) < 200 {
        std::thread::yield_now();
    }
    // Every version older than the newest one acknowledged now is hidden
    // now, and must stay hidden.
    let hidden_below = written.load(Ordering::SeqCst);
    t.set_gc_policy("f", GcPolicy::keep_all())?;
    let after = written.load(Ordering::SeqCst);
    while written.load(Ordering::SeqCst) < after + 50 {
        std::thread::yield_now();
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().map_err(|_| "writer panicked")??;
    let row = t.read_row(b"hot", &Filter::all())?.ok_or("row")?;
    let visible: Vec<i64> = row.cells.iter().map(|c| c.timestamp).collect();
    assert!(
        visible.iter().all(|ts| *ts >= hidden_below),
        "versions older than {hidden_below} were hidden and came back: {visible:?}"
    );
    // The versions written after the switch are all kept.
    assert!(visible.windows(2).all(|w| w[0] == w[1] + 1), "{visible:?}");
    Ok(())
}

#[test]
fn loosening_a_ttl_while_versions_expire_resurrects_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    let ttl_us: i64 = 10_000_000;
    let t = db.default_dataset()?.create_table(
        "t",
        TableSpec::new().with_family(
            FamilySpec::new("f").with_max_age(std::time::Duration::from_micros(ttl_us as u64)),
        ),
    )?;
    // Rows with hidden versions, so that compacting during the switch
    // would take a while; and one column whose versions expire one every
    // 100 µs over the next seconds.
    fill_with_hidden_versions(&t, 60_000)?;
    let start = widesql::wall_micros() - ttl_us;
    let mut m = RowMutation::new();
    for i in 0..40_000 {
        m = m.set_at("f", "q", start + i * 100, "v");
    }
    t.mutate_row(b"hot", &m)?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    t.set_gc_policy("f", GcPolicy::keep_all())?;
    let returned = widesql::wall_micros();
    let row = t.read_row(b"hot", &Filter::all())?.ok_or("row")?;
    let oldest = row
        .cells
        .iter()
        .map(|c| c.timestamp)
        .min()
        .ok_or("no cell")?;
    // Everything older than (switch time - TTL) had expired before the
    // switch; the switch ends before `returned`, with room for a slow
    // machine.
    let slack = 500_000;
    assert!(
        oldest >= returned - ttl_us - slack,
        "a version {} ms past its TTL at the switch is visible again",
        (returned - ttl_us - oldest) / 1000
    );
    Ok(())
}

#[test]
fn loosening_a_ttl_keeps_what_it_hid_hidden() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    let hour = std::time::Duration::from_secs(3600);
    let t = db.default_dataset()?.create_table(
        "t",
        TableSpec::new().with_family(FamilySpec::new("f").with_max_age(hour)),
    )?;
    let now = widesql::wall_micros();
    let hour_us = 3_600_000_000;
    t.mutate_row(
        b"r",
        &RowMutation::new()
            .set_at("f", "expired", now - hour_us - 1_000_000, "x")
            .set_at("f", "live", now, "y"),
    )?;
    t.set_gc_policy("f", GcPolicy::keep_all().with_max_age(hour * 48))?;
    let row = t.read_row(b"r", &Filter::all())?.ok_or("row")?;
    let qualifiers: Vec<&[u8]> = row.cells.iter().map(|c| c.qualifier.as_slice()).collect();
    assert_eq!(qualifiers, [&b"live"[..]]);
    t.set_gc_policy("f", GcPolicy::keep_all())?;
    assert_eq!(
        t.read_row(b"r", &Filter::all())?.ok_or("row")?.cells.len(),
        1
    );
    Ok(())
}

#[test]
fn not_null_holds_for_embedded_writes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    let session = db.session();
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    runtime
        .block_on(session.run("CREATE TABLE t (id BIGINT PRIMARY KEY, a INT NOT NULL, b INT)"))?;
    let t = db.open_table("default", "public", "t")?;
    // A new row without the NOT NULL column is refused.
    let err = t
        .mutate_row(
            b"\x01k",
            &RowMutation::new().set("cf", "b", 1i32.to_be_bytes()),
        )
        .err()
        .ok_or("a row without column a was accepted")?;
    assert!(err.to_string().contains("NOT NULL"), "{err}");
    // With it, fine; deleting it alone is refused; deleting the row is fine.
    t.mutate_row(
        b"\x01k",
        &RowMutation::new()
            .set("cf", "a", 1i32.to_be_bytes())
            .set("cf", "b", 2i32.to_be_bytes()),
    )?;
    assert!(t
        .mutate_row(b"\x01k", &RowMutation::new().delete_column("cf", "a"))
        .is_err());
    t.mutate_row(b"\x01k", &RowMutation::new().delete_row())?;
    assert!(t.read_row(b"\x01k", &Filter::all())?.is_none());
    Ok(())
}

#[test]
fn concurrent_create_table_if_not_exists_gives_one_table_and_no_error() -> TestResult {
    for round in 0..20 {
        let dir = tempfile::tempdir()?;
        let db = db(dir.path())?;
        let sessions: Vec<_> = (0..4)
            .map(|_| {
                let session = db.session();
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
                    runtime
                        .block_on(
                            session.run("CREATE TABLE IF NOT EXISTS t (id BIGINT PRIMARY KEY)"),
                        )
                        .map(|_| ())
                        .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
                })
            })
            .collect();
        for s in sessions {
            s.join()
                .map_err(|_| "session panicked")?
                .map_err(|e| format!("round {round}: {e}"))?;
        }
        assert_eq!(db.default_dataset()?.tables()?.len(), 1);
    }
    Ok(())
}

fn count(db: &Db, table: &str) -> Result<i64, Box<dyn std::error::Error>> {
    let rows =
        query(db, &format!("SELECT count(*) AS n FROM {table}")).map_err(|e| e.to_string())?;
    Ok(rows
        .first()
        .and_then(|r| r.first())
        .ok_or("no count")?
        .parse()?)
}

#[test]
fn compaction_after_delete_and_drop_column_keeps_the_row_deleted() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    run(
        &db,
        "CREATE TABLE t (id BIGINT PRIMARY KEY, a INT, d INT);
         INSERT INTO t VALUES (1, NULL, 5), (2, 2, 6);
         DELETE FROM t WHERE id = 1;
         ALTER TABLE t DROP COLUMN d;",
    )?;
    assert_eq!(count(&db, "t")?, 1);
    db.compact()?;
    db.compact()?;
    assert_eq!(count(&db, "t")?, 1, "the deleted row came back");
    Ok(())
}

#[test]
fn not_null_holds_after_sql_deletes_and_for_delete_markers() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    run(
        &db,
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, a INT NOT NULL, b INT);
         INSERT INTO t VALUES ('k', 1, 2), ('j', 1, 2);
         DELETE FROM t WHERE _key = 'k';",
    )?;
    let t = db.open_table("default", "public", "t")?;
    // The deleted row cannot come back without its NOT NULL column.
    let revived = t.mutate_row(b"k", &RowMutation::new().set("cf", "b", 3i32.to_be_bytes()));
    assert!(revived.is_err(), "a deleted row came back without column a");
    // A delete marker on the NOT NULL column alone is refused...
    let marked = t.mutate_row(
        b"j",
        &RowMutation::new().mark_deleted(
            widesql::DeleteScope::Column("cf".into(), b"a".to_vec()),
            None,
        ),
    );
    assert!(marked.is_err(), "a marker hid NOT NULL column a");
    // ...and deleting the row is fine.
    run(&db, "DELETE FROM t")?;
    assert_eq!(count(&db, "t")?, 0);
    Ok(())
}

#[test]
fn dropping_a_table_during_a_compaction_pass_fails_neither() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    for round in 0..12u64 {
        let t = keeping_one_version(&db)?;
        fill_with_hidden_versions(&t, 3_000)?;
        let compacted = std::thread::scope(|s| -> Result<_, Box<dyn std::error::Error>> {
            let pass = s.spawn(|| db.compact());
            // At different points of the pass, or before or after it.
            std::thread::sleep(std::time::Duration::from_millis(round * 3));
            t.drop()?;
            Ok(pass.join().map_err(|_| "the compaction panicked")?)
        })?;
        // The dropped table has nothing left to compact: no error.
        compacted.map_err(|e| format!("round {round}: {e}"))?;
        assert!(db.default_dataset()?.table("t")?.is_none());
    }
    Ok(())
}

#[test]
fn a_scan_of_a_table_dropped_meanwhile_reports_the_drop() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    let t = keeping_one_version(&db)?;
    fill_with_hidden_versions(&t, 3_000)?;
    // Read ahead off: the rows after the drop come from sled, not from a
    // buffer filled before it.
    let options = widesql::ReadOptions::new().with_read_ahead(false);
    let mut rows = t.read_rows(&widesql::RowSet::all(), options)?;
    for _ in 0..10 {
        rows.next().ok_or("the table has rows")??;
    }
    t.drop()?;
    let error = match rows.find_map(Result::err) {
        Some(error) => error,
        None => return Err("a scan of a dropped table read on to the end".into()),
    };
    assert_eq!(error.kind(), widesql::ErrorKind::NotFound, "{error}");
    assert_eq!(
        error.to_string(),
        "table 'default.public.t' was dropped while it was read"
    );
    Ok(())
}
