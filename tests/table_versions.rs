//! Cell versions: newest first, server timestamps strictly increasing,
//! time-range deletes, family and row deletes, mutations applied in order.

use widesql::{Db, DbOptions, FamilySpec, Filter, RowMutation, Table, TableSpec};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn table(dir: &std::path::Path) -> widesql::Result<(Db, Table)> {
    let db = Db::open_with(dir, DbOptions::new().with_compaction_interval(None))?;
    let spec = TableSpec::new()
        .with_family(FamilySpec::new("f"))
        .with_family(FamilySpec::new("g").with_locality_group("other"));
    let table = db.default_dataset()?.create_table("t", spec)?;
    Ok((db, table))
}

fn timestamps(table: &Table, key: &[u8]) -> widesql::Result<Vec<(String, i64)>> {
    Ok(table
        .read_row(key, &Filter::all())?
        .map(|r| {
            r.cells
                .into_iter()
                .map(|c| (c.family, c.timestamp))
                .collect()
        })
        .unwrap_or_default())
}

#[test]
fn versions_are_newest_first_and_server_timestamps_increase() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (_db, t) = table(dir.path())?;
    for v in ["one", "two", "three"] {
        t.mutate_row(b"r", &RowMutation::new().set("f", "q", v))?;
    }
    t.mutate_row(b"r", &RowMutation::new().set_at("f", "q", 5, "backfill"))?;
    let row = t.read_row(b"r", &Filter::all())?.expect("row");
    let values: Vec<&[u8]> = row
        .versions("f", b"q")
        .map(|c| c.value.as_slice())
        .collect();
    assert_eq!(values, [&b"three"[..], b"two", b"one", b"backfill"]);
    let ts: Vec<i64> = row.cells.iter().map(|c| c.timestamp).collect();
    assert!(
        ts.windows(2).all(|w| w[0] > w[1]),
        "strictly decreasing: {ts:?}"
    );
    assert_eq!(ts[3], 5);
    let now = widesql::wall_micros();
    assert!(
        (now - ts[0]).abs() < 60_000_000,
        "server timestamps are microseconds since 1970"
    );
    // Writing the same (column, timestamp) again replaces that version.
    t.mutate_row(b"r", &RowMutation::new().set_at("f", "q", 5, "fixed"))?;
    let row = t.read_row(b"r", &Filter::all())?.expect("row");
    assert_eq!(row.cells.len(), 4);
    assert_eq!(row.cells[3].value, b"fixed");
    Ok(())
}

#[test]
fn versions_time_range_delete_removes_only_that_range() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (_db, t) = table(dir.path())?;
    let mut m = RowMutation::new();
    for ts in [10, 20, 30, 40] {
        m = m
            .set_at("f", "q", ts, ts.to_string())
            .set_at("f", "other", ts, "x");
    }
    t.mutate_row(b"r", &m)?;
    t.mutate_row(
        b"r",
        &RowMutation::new().delete_column_versions("f", "q", 20..40),
    )?;
    let row = t.read_row(b"r", &Filter::all())?.expect("row");
    let q: Vec<i64> = row.versions("f", b"q").map(|c| c.timestamp).collect();
    assert_eq!(q, [40, 10], "start inclusive, end exclusive");
    assert_eq!(
        row.versions("f", b"other").count(),
        4,
        "other columns untouched"
    );
    t.mutate_row(b"r", &RowMutation::new().delete_column("f", "q"))?;
    let row = t.read_row(b"r", &Filter::all())?.expect("row");
    assert_eq!(row.versions("f", b"q").count(), 0);
    let err = t
        .mutate_row(
            b"r",
            &RowMutation::new().delete_column_versions(
                "f",
                "other",
                std::ops::Range { start: 9, end: 3 },
            ),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "table 'default.public.t': time range 9..3 ends before it starts"
    );
    Ok(())
}

#[test]
fn versions_family_and_row_deletes_span_locality_groups() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (_db, t) = table(dir.path())?;
    for key in [&b"a"[..], b"b"] {
        t.mutate_row(
            key,
            &RowMutation::new().set("f", "q", "1").set("g", "q", "2"),
        )?;
    }
    t.mutate_row(b"a", &RowMutation::new().delete_family("g"))?;
    assert_eq!(
        timestamps(&t, b"a")?
            .iter()
            .map(|(f, _)| f.as_str())
            .collect::<Vec<_>>(),
        ["f"]
    );
    t.mutate_row(b"a", &RowMutation::new().delete_row())?;
    assert!(t.read_row(b"a", &Filter::all())?.is_none());
    assert_eq!(timestamps(&t, b"b")?.len(), 2, "other rows untouched");
    Ok(())
}

#[test]
fn versions_mutations_apply_in_order() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (_db, t) = table(dir.path())?;
    t.mutate_row(b"r", &RowMutation::new().set("f", "old", "x"))?;
    // Delete then set: the new cell stays, the old one is gone.
    t.mutate_row(b"r", &RowMutation::new().delete_row().set("g", "new", "y"))?;
    let row = t.read_row(b"r", &Filter::all())?.expect("row");
    assert_eq!(row.cells.len(), 1);
    assert_eq!(row.value("g", b"new"), Some(&b"y"[..]));
    // Set then delete: nothing stays.
    t.mutate_row(b"r", &RowMutation::new().set("f", "q", "z").delete_row())?;
    assert!(t.read_row(b"r", &Filter::all())?.is_none());
    // Nothing of an invalid mutation is applied.
    let err = t
        .mutate_row(
            b"r",
            &RowMutation::new()
                .set("f", "q", "kept?")
                .set("nope", "q", "v"),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "table 'default.public.t' has no column family 'nope'"
    );
    assert!(t.read_row(b"r", &Filter::all())?.is_none());
    assert!(t
        .mutate_row(b"", &RowMutation::new().set("f", "q", "v"))
        .is_err());
    assert!(t
        .mutate_row(&[7; 4097], &RowMutation::new().set("f", "q", "v"))
        .is_err());
    assert!(t
        .mutate_row(b"r", &RowMutation::new().set_at("f", "q", -1, "v"))
        .is_err());
    Ok(())
}

#[test]
fn versions_server_timestamps_increase_across_reopen() -> TestResult {
    let dir = tempfile::tempdir()?;
    let first = {
        let (db, t) = table(dir.path())?;
        t.mutate_row(b"r", &RowMutation::new().set("f", "q", "1"))?;
        db.flush()?;
        timestamps(&t, b"r")?[0].1
    };
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    let t = db.default_dataset()?.open_table("t")?;
    t.mutate_row(b"r", &RowMutation::new().set("f", "q", "2"))?;
    let ts = timestamps(&t, b"r")?;
    assert_eq!(ts.len(), 2);
    assert!(ts[0].1 > first);
    Ok(())
}

#[test]
fn versions_the_latest_view_skips_old_versions_without_losing_the_next_column() -> TestResult {
    // A read of the newest versions stops reading a column once it has
    // buffered 32 of them (and 64, 128, …) and skips the rest: whatever the
    // count, the next column's newest version is the one read.
    let dir = tempfile::tempdir()?;
    let (_db, t) = table(dir.path())?;
    let latest = Filter::all().with_latest_versions(1);
    for n in 1..=140i64 {
        let v = n.to_be_bytes();
        t.mutate_row(
            b"r",
            &RowMutation::new()
                .set("f", "a", v)
                .set("f", "b", v)
                .set("g", "c", v),
        )?;
        let row = t.read_row(b"r", &latest)?.ok_or("the row")?;
        let values: Vec<(&str, &[u8], &[u8])> = row
            .cells
            .iter()
            .map(|c| {
                (
                    c.family.as_str(),
                    c.qualifier.as_slice(),
                    c.value.as_slice(),
                )
            })
            .collect();
        assert_eq!(
            values,
            [
                ("f", &b"a"[..], &v[..]),
                ("f", b"b", &v[..]),
                ("g", b"c", &v[..])
            ],
            "after {n} writes"
        );
        let all = t.read_row(b"r", &Filter::all())?.ok_or("the row")?;
        assert_eq!(all.cells.len() as i64, 3 * n);
    }
    Ok(())
}

#[test]
fn versions_a_physical_row_delete_removes_its_delete_markers_in_every_group() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (_db, t) = table(dir.path())?;
    // A row delete marker at 100 hides older versions in both groups.
    t.mutate_row(
        b"r",
        &RowMutation::new()
            .set_at("f", "a", 50, "old")
            .set_at("g", "c", 50, "old")
            .mark_deleted(widesql::DeleteScope::Row, Some(100)),
    )?;
    assert!(t.read_row(b"r", &Filter::all())?.is_none());
    // Deleting the row removes everything stored, markers included, so
    // writes dated before the old marker are visible in both groups.
    t.mutate_row(b"r", &RowMutation::new().delete_row())?;
    t.mutate_row(
        b"r",
        &RowMutation::new()
            .set_at("f", "a", 60, "new")
            .set_at("g", "c", 60, "new"),
    )?;
    assert_eq!(
        timestamps(&t, b"r")?,
        [("f".to_string(), 60), ("g".to_string(), 60)]
    );
    Ok(())
}

#[test]
fn server_timestamps_stay_at_the_wall_clock_across_reopens() -> TestResult {
    let dir = tempfile::tempdir()?;
    let wall = || -> Result<i64, Box<dyn std::error::Error>> {
        Ok(i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_micros(),
        )?)
    };
    let mut written = Vec::new();
    for i in 0..5 {
        let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
        let dataset = db.default_dataset()?;
        let table = match i {
            0 => dataset.create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?,
            _ => dataset.table("t")?.ok_or("no table t")?,
        };
        let key = format!("k{i}");
        table.mutate_row(key.as_bytes(), &RowMutation::new().set("f", "q", "v"))?;
        written.push(timestamps(&table, key.as_bytes())?[0].1);
    }
    // Each process starts after the last timestamp of the one before, not a
    // lease (10 s) ahead of it: five of them stay at the wall clock.
    assert!(written.windows(2).all(|w| w[0] < w[1]), "{written:?}");
    let ahead = written[4] - wall()?;
    assert!(ahead < 2_000_000, "{ahead} µs in the future: {written:?}");
    Ok(())
}
