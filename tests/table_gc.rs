//! Garbage collection: max versions and TTL hide versions from every read at
//! once, policy changes apply at once, loosening never resurrects, and
//! compaction (explicit or in the background) removes hidden cells.

use std::time::Duration;

use widesql::{Db, DbOptions, FamilySpec, Filter, GcPolicy, RowMutation, TableSpec};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn versions(t: &widesql::Table, key: &[u8]) -> widesql::Result<Vec<i64>> {
    Ok(t.read_row(key, &Filter::all())?
        .map(|r| r.cells.iter().map(|c| c.timestamp).collect())
        .unwrap_or_default())
}

fn db(dir: &std::path::Path) -> widesql::Result<Db> {
    Db::open_with(dir, DbOptions::new().with_compaction_interval(None))
}

#[test]
fn gc_max_versions_is_strict_and_compaction_removes_hidden_cells() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    let t = db.default_dataset()?.create_table(
        "t",
        TableSpec::new().with_family(FamilySpec::new("f").with_max_versions(2)),
    )?;
    for ts in 1..=5 {
        t.mutate_row(b"r", &RowMutation::new().set_at("f", "q", ts, "v"))?;
    }
    assert_eq!(versions(&t, b"r")?, [5, 4], "hidden before any compaction");
    assert_eq!(t.compact()?, 3);
    assert_eq!(t.compact()?, 0);
    assert_eq!(versions(&t, b"r")?, [5, 4]);
    Ok(())
}

#[test]
fn gc_ttl_hides_old_versions_immediately() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    let family = FamilySpec::new("f").with_max_age(Duration::from_secs(3600));
    let t = db
        .default_dataset()?
        .create_table("t", TableSpec::new().with_family(family))?;
    let now = widesql::wall_micros();
    let two_hours_ago = now - 7_200_000_000;
    t.mutate_row(
        b"r",
        &RowMutation::new()
            .set_at("f", "old", two_hours_ago, "x")
            .set("f", "new", "y"),
    )?;
    let row = t.read_row(b"r", &Filter::all())?.expect("row");
    assert_eq!(row.cells.len(), 1);
    assert_eq!(row.cells[0].qualifier, b"new");
    assert_eq!(t.compact()?, 1);
    Ok(())
}

#[test]
fn gc_policy_change_applies_at_once_and_loosening_does_not_resurrect() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    let t = db
        .default_dataset()?
        .create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?;
    for ts in 1..=4 {
        t.mutate_row(b"r", &RowMutation::new().set_at("f", "q", ts, "v"))?;
    }
    assert_eq!(versions(&t, b"r")?, [4, 3, 2, 1]);
    t.set_gc_policy("f", GcPolicy::keep_all().with_max_versions(1))?;
    assert_eq!(
        versions(&t, b"r")?,
        [4],
        "tightening applies to the next read"
    );
    t.set_gc_policy("f", GcPolicy::keep_all().with_max_versions(3))?;
    assert_eq!(
        versions(&t, b"r")?,
        [4],
        "hidden versions stay gone when loosening"
    );
    t.mutate_row(b"r", &RowMutation::new().set_at("f", "q", 5, "v"))?;
    assert_eq!(versions(&t, b"r")?, [5, 4]);
    assert!(t.set_gc_policy("nope", GcPolicy::keep_all()).is_err());
    Ok(())
}

#[test]
fn gc_delete_of_newest_version_does_not_resurrect_hidden_ones() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = db(dir.path())?;
    let t = db.default_dataset()?.create_table(
        "t",
        TableSpec::new().with_family(FamilySpec::new("f").with_max_versions(1)),
    )?;
    for ts in 1..=3 {
        t.mutate_row(b"r", &RowMutation::new().set_at("f", "q", ts, "v"))?;
    }
    t.mutate_row(
        b"r",
        &RowMutation::new().delete_column_versions("f", "q", 3..4),
    )?;
    assert!(t.read_row(b"r", &Filter::all())?.is_none());
    Ok(())
}

#[test]
fn gc_background_compaction_runs_while_open() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(
        dir.path(),
        DbOptions::new().with_compaction_interval(Some(Duration::from_millis(20))),
    )?;
    let t = db.default_dataset()?.create_table(
        "t",
        TableSpec::new().with_family(FamilySpec::new("f").with_max_versions(1)),
    )?;
    // One atomic mutation of 50 versions into an empty tree: the write
    // visits no stored key, so only the background pass reads the tree.
    let m = (1..=50).fold(RowMutation::new(), |m, ts| m.set_at("f", "q", ts, "v"));
    t.mutate_row(b"r", &m)?;
    // A pass reads the row's one chunk to find what it hides (1 key), then,
    // holding the row's lock, reads it again and finds the chunk to rewrite
    // (3 keys). Once 4 keys are read, the pass holds the lock: the
    // `compact()` below waits for it and then finds nothing left.
    let mut waited = 0;
    while t.keys_read_per_group()?[0].1 < 4 {
        assert!(waited < 10_000, "no background compaction within 10 s");
        std::thread::sleep(Duration::from_millis(5));
        waited += 5;
    }
    assert_eq!(
        t.compact()?,
        0,
        "the background pass removed the hidden versions"
    );
    assert_eq!(versions(&t, b"r")?, [50]);
    Ok(())
}
