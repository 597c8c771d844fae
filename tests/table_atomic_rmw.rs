//! Read-modify-write and check-and-mutate: atomic per row, also under
//! concurrency; invalid input refused with nothing applied.

use widesql::{
    Db, DbOptions, ErrorKind, FamilySpec, Filter, QualifierFilter, ReadModifyWriteRule as Rule,
    RowMutation, TableSpec, ValueFilter,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn table(dir: &std::path::Path) -> widesql::Result<widesql::Table> {
    let db = Db::open_with(dir, DbOptions::new().with_compaction_interval(None))?;
    db.default_dataset()?.create_table(
        "t",
        TableSpec::new()
            .with_family(FamilySpec::new("stats").with_max_versions(1))
            .with_family(FamilySpec::new("log").with_locality_group("logs")),
    )
}

#[test]
fn rmw_increment_and_append() -> TestResult {
    let dir = tempfile::tempdir()?;
    let t = table(dir.path())?;
    let row = t.read_modify_write(
        b"r",
        &[
            Rule::increment("stats", "n", 3),
            Rule::increment("stats", "n", 4),
        ],
    )?;
    assert_eq!(
        row.value("stats", b"n"),
        Some(&7i64.to_be_bytes()[..]),
        "missing cell counts as 0"
    );
    let row = t.read_modify_write(
        b"r",
        &[
            Rule::increment("stats", "n", -10),
            Rule::append("log", "l", "ab"),
        ],
    )?;
    assert_eq!(row.value("stats", b"n"), Some(&(-3i64).to_be_bytes()[..]));
    assert_eq!(row.value("log", b"l"), Some(&b"ab"[..]));
    t.read_modify_write(b"r", &[Rule::append("log", "l", "cd")])?;
    let stored = t
        .read_row(b"r", &Filter::all().with_latest_versions(1))?
        .expect("row");
    assert_eq!(stored.value("log", b"l"), Some(&b"abcd"[..]));
    assert_eq!(
        stored.value("stats", b"n"),
        Some(&(-3i64).to_be_bytes()[..])
    );
    // The new version is the newest even if a future timestamp was written.
    t.mutate_row(
        b"f",
        &RowMutation::new().set_at("stats", "n", i64::MAX / 2, 1i64.to_be_bytes()),
    )?;
    let row = t.read_modify_write(b"f", &[Rule::increment("stats", "n", 1)])?;
    assert!(row.cells[0].timestamp > i64::MAX / 2);
    assert_eq!(
        t.read_row(b"f", &Filter::all())?.expect("row").cells[0].value,
        2i64.to_be_bytes()
    );
    Ok(())
}

#[test]
fn rmw_refuses_bad_input_and_applies_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let t = table(dir.path())?;
    t.mutate_row(b"r", &RowMutation::new().set("stats", "short", "abc"))?;
    let err = t
        .read_modify_write(
            b"r",
            &[
                Rule::append("log", "x", "y"),
                Rule::increment("stats", "short", 1),
            ],
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.to_string().contains("cell stats:short holds 3 bytes"),
        "{err}"
    );
    assert!(
        t.read_row(b"r", &Filter::all().with_families(["log"]))?
            .is_none(),
        "append not applied"
    );
    t.mutate_row(
        b"m",
        &RowMutation::new().set("stats", "n", i64::MAX.to_be_bytes()),
    )?;
    assert!(t
        .read_modify_write(b"m", &[Rule::increment("stats", "n", 1)])
        .unwrap_err()
        .to_string()
        .contains("overflows"));
    assert_eq!(
        t.read_modify_write(b"r", &[Rule::increment("nope", "n", 1)])
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    Ok(())
}

#[test]
fn rmw_concurrent_increments_are_not_lost() -> TestResult {
    let dir = tempfile::tempdir()?;
    let t = table(dir.path())?;
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..250 {
                    t.read_modify_write(b"counter", &[Rule::increment("stats", "hits", 1)])
                        .expect("increment");
                }
            });
        }
    });
    let row = t.read_row(b"counter", &Filter::all())?.expect("row");
    assert_eq!(
        row.value("stats", b"hits"),
        Some(&1000i64.to_be_bytes()[..])
    );
    Ok(())
}

#[test]
fn check_and_mutate_picks_the_branch_by_the_row() -> TestResult {
    let dir = tempfile::tempdir()?;
    let t = table(dir.path())?;
    let has_owner = Filter::all()
        .with_families(["stats"])
        .with_qualifiers(QualifierFilter::Exact([b"owner".to_vec()].into()));
    let claim = RowMutation::new().set("stats", "owner", "me");
    let note = RowMutation::new().set("log", "lost", "someone else");
    assert!(!t.check_and_mutate(b"lock", &has_owner, &note, &claim)?);
    assert!(t.check_and_mutate(b"lock", &has_owner, &note, &claim)?);
    let row = t.read_row(b"lock", &Filter::all())?.expect("row");
    assert_eq!(row.value("stats", b"owner"), Some(&b"me"[..]));
    assert_eq!(row.value("log", b"lost"), Some(&b"someone else"[..]));

    // Exactly one of many concurrent claimers wins.
    let free = Filter::all()
        .with_latest_versions(1)
        .with_value(ValueFilter::Equals(b"free".to_vec()));
    t.mutate_row(b"slot", &RowMutation::new().set("stats", "state", "free"))?;
    let wins: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let (t, free) = (&t, &free);
                s.spawn(move || {
                    let take = RowMutation::new().set("stats", "state", format!("taken by {i}"));
                    usize::from(
                        t.check_and_mutate(b"slot", free, &take, &RowMutation::new())
                            .expect("cam"),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .sum()
    });
    assert_eq!(wins, 1);

    // An invalid branch is refused even when the other branch is chosen.
    let bad = RowMutation::new().set("nope", "q", "v");
    assert!(t
        .check_and_mutate(b"slot", &free, &bad, &RowMutation::new())
        .is_err());
    assert!(t
        .check_and_mutate(
            b"slot",
            &Filter::all().with_families(["nope"]),
            &claim,
            &claim
        )
        .is_err());
    Ok(())
}
