//! The examples run, and show what they say they show.

#[allow(dead_code, reason = "the example's own main is not called here")]
#[path = "../examples/catalog_admin.rs"]
mod catalog_admin;

#[test]
fn catalog_admin_creates_lists_renames_and_drops() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = widesql::Db::open(dir.path().join("db"))?;
    let shown = catalog_admin::run(&db)?;
    for expected in [
        "created acme.metrics.events",
        "created acme.logs.lines with 2 rows",
        "    table events  cf [default], raw [blobs]",
        "| lines ",
        "now acme.telemetry.events_v2",
        "DROP without CASCADE refused:",
        "_projects",
        "ffffffff-ffff-0000-0000-00000000000",
    ] {
        assert!(shown.contains(expected), "'{expected}' not in:\n{shown}");
    }
    let projects: Vec<String> = db
        .projects()?
        .iter()
        .map(|p| p.name())
        .collect::<Result<_, _>>()?;
    assert!(!projects.contains(&"acme".to_string()), "{projects:?}");
    Ok(())
}
