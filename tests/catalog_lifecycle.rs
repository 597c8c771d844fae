//! Catalog scenarios: create, look up, rename, drop at every level, names
//! unique per parent, no prefix aliasing, persistence across reopen.

mod common;

use widesql::{Db, DbOptions, DropMode, ErrorKind, FamilySpec, Filter, RowMutation, TableSpec};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn spec() -> TableSpec {
    TableSpec::new()
        .with_family(FamilySpec::new("f"))
        .with_family(FamilySpec::new("blob").with_locality_group("blobs"))
}

fn open(dir: &std::path::Path) -> widesql::Result<Db> {
    Db::open_with(dir, DbOptions::new().with_compaction_interval(None))
}

#[test]
fn catalog_fluent_create_and_lookup() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let table = db
        .create_project("acme")?
        .create_dataset("web")?
        .create_table("webtable", spec())?;
    assert_eq!(table.qualified_name()?, "acme.web.webtable");
    assert_eq!(db.open_table("acme", "web", "webtable")?.id(), table.id());
    let names: Vec<String> = db
        .projects()?
        .iter()
        .map(|p| p.name())
        .collect::<Result<_, _>>()?;
    assert_eq!(names, ["_system", "acme", "default"]);
    assert!(db.project("nope")?.is_none());
    let err = db.open_table("acme", "web", "nope").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.to_string(), "table 'acme.web.nope' does not exist");
    let err = db.open_table("acme", "nope", "t").unwrap_err();
    assert_eq!(err.to_string(), "dataset 'acme.nope' does not exist");
    Ok(())
}

#[test]
fn catalog_names_are_unique_per_parent_and_never_match_by_prefix() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let acme = db.create_project("acme")?;
    let web = acme.create_dataset("web")?;
    let logs = acme.create_dataset("logs")?;
    let a = web.create_table("events", spec())?;
    let b = logs.create_table("events", spec())?;
    assert_ne!(a.id(), b.id());
    a.mutate_row(b"k", &RowMutation::new().set("f", "q", "in web"))?;
    assert!(
        b.read_row(b"k", &Filter::all())?.is_none(),
        "tables with one name share no data"
    );
    let err = web.create_table("events", spec()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    assert_eq!(err.to_string(), "table 'acme.web.events' already exists");
    assert!(web.table("ev")?.is_none());
    assert!(web.table("events2")?.is_none());
    assert!(acme.dataset("we")?.is_none());
    assert!(db.project("acm")?.is_none());
    Ok(())
}

#[test]
fn catalog_create_race_has_exactly_one_winner() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let dataset = db.default_dataset()?;
    for round in 0..20 {
        let name = format!("t{round}");
        let barrier = std::sync::Barrier::new(2);
        let results: Vec<widesql::Result<widesql::Table>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        dataset.create_table(&name, spec())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect()
        });
        let ok = results.iter().filter(|r| r.is_ok()).count();
        let exists = results
            .iter()
            .filter(|r| matches!(r, Err(e) if e.kind() == ErrorKind::AlreadyExists))
            .count();
        assert_eq!((ok, exists), (1, 1), "round {round}");
        // Also for projects.
        let results: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|_| s.spawn(|| db.create_project(&format!("p{round}")).is_ok()))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect()
        });
        assert_eq!(results.iter().filter(|ok| **ok).count(), 1);
    }
    assert_eq!(dataset.tables()?.len(), 20);
    Ok(())
}

#[test]
fn catalog_rename_keeps_data_and_handles() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let acme = db.create_project("acme")?;
    let web = acme.create_dataset("web")?;
    let table = web.create_table("webtable", spec())?;
    table.mutate_row(b"com.cnn.www", &RowMutation::new().set("f", "q", "v"))?;

    table.rename("pages")?;
    assert!(web.table("webtable")?.is_none());
    assert_eq!(web.open_table("pages")?.id(), table.id());
    assert_eq!(table.qualified_name()?, "acme.web.pages");

    web.rename("site")?;
    acme.rename("globex")?;
    assert_eq!(table.qualified_name()?, "globex.site.pages");
    let reopened = db.open_table("globex", "site", "pages")?;
    let row = reopened
        .read_row(b"com.cnn.www", &Filter::all())?
        .expect("data survives renames");
    assert_eq!(row.value("f", b"q"), Some(&b"v"[..]));

    // A rename onto an existing name is refused and changes nothing.
    let other = db
        .open_project("globex")?
        .open_dataset("site")?
        .create_table("other", spec())?;
    assert_eq!(
        other.rename("pages").unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    assert_eq!(other.name()?, "other");
    db.create_project("initech")?;
    assert_eq!(
        db.rename_project("globex", "initech").unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    Ok(())
}

#[test]
fn catalog_drop_restrict_cascade_and_no_orphans() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let trees_before = db.storage_trees();
    let acme = db.create_project("acme")?;
    let web = acme.create_dataset("web")?;
    let table = web.create_table("webtable", spec())?;
    table.mutate_row(
        b"r",
        &RowMutation::new().set("f", "q", "v").set("blob", "", "x"),
    )?;
    assert_eq!(
        db.storage_trees().len(),
        trees_before.len() + 1,
        "one tree per table"
    );
    let id = table.id().to_string();
    assert_eq!(
        db.storage_key_spaces()?,
        vec![format!("t:{id}:blobs"), format!("t:{id}:default")],
        "a key space per locality group"
    );

    let err = db.drop_project("acme", DropMode::Restrict).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotEmpty);
    assert_eq!(
        err.to_string(),
        "project 'acme' is not empty (1 dataset); drop it with cascade"
    );
    let err = acme.drop_dataset("web", DropMode::Restrict).unwrap_err();
    assert_eq!(
        err.to_string(),
        "dataset 'acme.web' is not empty (1 table); drop it with cascade"
    );
    assert!(
        db.open_table("acme", "web", "webtable").is_ok(),
        "a refused drop changes nothing"
    );

    db.drop_project("acme", DropMode::Cascade)?;
    assert!(db.project("acme")?.is_none());
    assert_eq!(
        db.storage_trees(),
        trees_before,
        "the table's trees are gone"
    );
    assert_eq!(
        table.read_row(b"r", &Filter::all()).unwrap_err().kind(),
        ErrorKind::NotFound
    );

    // Re-creating the names gives new, empty objects.
    let table = db
        .create_project("acme")?
        .create_dataset("web")?
        .create_table("webtable", spec())?;
    assert!(table.read_row(b"r", &Filter::all())?.is_none());
    table.drop()?;
    assert_eq!(db.storage_trees(), trees_before);
    Ok(())
}

#[test]
fn dropping_the_last_family_of_a_locality_group_removes_its_keys() -> TestResult {
    let dir = tempfile::tempdir()?;
    let id = {
        let db = open(dir.path())?;
        let table = db.default_dataset()?.create_table(
            "pages",
            spec().with_family(FamilySpec::new("thumb").with_locality_group("images")),
        )?;
        for i in 0..2500u32 {
            let key = format!("r{i:05}");
            table.mutate_row(
                key.as_bytes(),
                &RowMutation::new()
                    .set("f", "q", "v")
                    .set("blob", "", "x")
                    .set("thumb", "", "y"),
            )?;
        }
        let id = table.id().to_string();
        assert_eq!(
            db.storage_key_spaces()?,
            vec![
                format!("t:{id}:blobs"),
                format!("t:{id}:default"),
                format!("t:{id}:images"),
            ]
        );
        // More keys than one clearing batch.
        table.drop_family("blob")?;
        assert_eq!(
            db.storage_key_spaces()?,
            vec![format!("t:{id}:default"), format!("t:{id}:images")],
            "the group no family uses is emptied"
        );
        let row = table
            .read_row(b"r00042", &Filter::all())?
            .ok_or("row lost")?;
        assert_eq!(row.value("f", b"q"), Some(&b"v"[..]));
        assert_eq!(row.value("thumb", b""), Some(&b"y"[..]));
        id
    };
    // A group left behind (as by a crash before the clearing), and keys of
    // no group, are emptied on open.
    {
        let raw = common::open_raw_sled(dir.path())?;
        let tree_name = raw
            .tree_names()
            .into_iter()
            .find(|n| n.starts_with(b"t:") && n.len() == 18)
            .ok_or("no table tree")?;
        let tree = raw.open_tree(tree_name)?;
        tree.insert(b"stale\x00\x01row\x00\x01", b"chunk".as_slice())?;
        // A prefix that is no group name at all (not UTF-8).
        tree.insert(b"\xFF\xFE\x00\x01row\x00\x01", b"chunk".as_slice())?;
        raw.flush()?;
    }
    let db = open(dir.path())?;
    assert_eq!(
        db.storage_key_spaces()?,
        vec![format!("t:{id}:default"), format!("t:{id}:images")]
    );
    let table = db.open_table("default", "public", "pages")?;
    let rows = table
        .read_rows(&widesql::RowSet::all(), widesql::ReadOptions::new())?
        .collect::<widesql::Result<Vec<_>>>()?;
    assert_eq!(rows.len(), 2500);
    Ok(())
}

#[test]
fn catalog_survives_reopen() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (table_id, spec_before) = {
        let db = open(dir.path())?;
        let table = db
            .create_project("acme")?
            .create_dataset("web")?
            .create_table("webtable", spec())?;
        table.mutate_row(
            b"com.cnn.www",
            &RowMutation::new().set_at("f", "q", 42, "v"),
        )?;
        table.add_family(FamilySpec::new("late").with_max_versions(2))?;
        db.flush()?;
        (table.id(), table.spec()?)
    };
    let db = open(dir.path())?;
    let table = db.open_table("acme", "web", "webtable")?;
    assert_eq!(table.id(), table_id);
    assert_eq!(table.spec()?, spec_before);
    let row = table
        .read_row(b"com.cnn.www", &Filter::all())?
        .expect("row persisted");
    assert_eq!(row.cells[0].timestamp, 42);
    assert!(db.default_dataset().is_ok());
    // Family ids are never reused: a re-added family gets a fresh id.
    table.drop_family("late")?;
    table.add_family(FamilySpec::new("late"))?;
    let ids: Vec<u16> = table.spec()?.families.iter().map(|f| f.id).collect();
    assert_eq!(ids, [0, 1, 3]);
    Ok(())
}

#[test]
fn catalog_reserved_and_invalid_names_are_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    for bad in ["", "_mine", "tab\tle", "new\nline", &"x".repeat(256)] {
        let err = db.create_project(bad).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidName, "{bad:?}");
        assert!(err.to_string().starts_with("invalid project name"), "{err}");
    }
    assert!(db.create_project(&"x".repeat(255)).is_ok());
    let err = db.drop_project("_system", DropMode::Cascade).unwrap_err();
    assert_eq!(
        err.to_string(),
        "project '_system' belongs to the system and cannot be dropped"
    );
    assert_eq!(
        db.rename_project("_system", "mine").unwrap_err().kind(),
        ErrorKind::InvalidName
    );
    let system = db.open_project("_system")?;
    assert!(system.create_dataset("mine").is_err());
    let catalog = system.open_dataset("_catalog")?;
    assert!(catalog.create_table("mine", spec()).is_err());
    let tables = catalog.open_table("_tables")?;
    assert_eq!(tables.drop().unwrap_err().kind(), ErrorKind::InvalidName);
    assert_eq!(
        tables.rename("x").unwrap_err().kind(),
        ErrorKind::InvalidName
    );
    let err = tables
        .mutate_row(b"k", &RowMutation::new().set("c", "id", "x"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "table '_system._catalog._tables' is a read-only system table"
    );
    // Invalid specs name the table and the problem.
    let dataset = db.default_dataset()?;
    let err = dataset
        .create_table(
            "t",
            TableSpec::new()
                .with_family(FamilySpec::new("f"))
                .with_family(FamilySpec::new("f")),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid definition of table 'default.public.t': column family 'f' is declared twice"
    );
    let err = dataset
        .create_table(
            "t",
            TableSpec::new().with_family(FamilySpec::new("f").with_max_versions(0)),
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(dataset.table("t")?.is_none(), "nothing half-created");
    Ok(())
}

#[test]
fn catalog_system_tables_hold_the_catalog_as_rows() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    db.create_project("acme")?
        .create_dataset("web")?
        .create_table("webtable", spec())?;
    let tables = db.open_table("_system", "_catalog", "_tables")?;
    assert_eq!(
        tables.id().to_string(),
        "ffffffff-ffff-0000-0000-000000000005"
    );
    let rows: Vec<widesql::Row> = tables
        .read_rows(&widesql::RowSet::all(), widesql::ReadOptions::new())?
        .collect::<Result<_, _>>()?;
    let specs: Vec<String> = rows
        .iter()
        .filter_map(|r| r.value("c", b"spec"))
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    assert_eq!(specs.len(), 7, "six system tables and webtable");
    assert!(specs.iter().any(|s| s.contains("\"blobs\"")));
    let projects = db.open_table("_system", "_catalog", "_projects")?;
    let count = projects
        .read_rows(&widesql::RowSet::all(), widesql::ReadOptions::new())?
        .count();
    assert_eq!(count, 3);
    Ok(())
}

#[test]
fn catalog_open_twice_in_one_process_shares_the_database() -> TestResult {
    let dir = tempfile::tempdir()?;
    let a = open(dir.path())?;
    let b = open(dir.path())?;
    a.create_project("acme")?;
    assert!(b.project("acme")?.is_some());
    Ok(())
}

#[test]
fn a_database_of_another_format_version_is_refused_by_name(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    drop(widesql::Db::open(dir.path())?);
    // Format 2 had a tree per locality group; this build keeps a table's
    // groups in one tree (format 4).
    {
        let raw = common::open_raw_sled(dir.path())?;
        raw.insert(b"widesql/format", &2u32.to_be_bytes())?;
        raw.flush()?;
    }
    let err = widesql::Db::open(dir.path())
        .err()
        .ok_or("format 2 was opened")?;
    let text = err.to_string();
    assert!(
        text.contains("format version 2") && text.contains("reads version 4"),
        "{text}"
    );
    assert!(text.contains("export"), "{text}");
    Ok(())
}

#[test]
fn a_database_of_format_3_opens_as_it_is_and_becomes_format_4() -> TestResult {
    let dir = tempfile::tempdir()?;
    {
        let db = Db::open(dir.path())?;
        let table = db
            .default_dataset()?
            .create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?;
        // A chunk of one entry: format 3 stored every chunk like this.
        table.mutate_row(b"r", &RowMutation::new().set("f", "q", b"v"))?;
    }
    {
        let raw = common::open_raw_sled(dir.path())?;
        raw.insert(b"widesql/format", &3u32.to_be_bytes())?;
        raw.flush()?;
    }
    {
        let db = Db::open(dir.path())?;
        let table = db
            .default_dataset()?
            .table("t")?
            .ok_or("the table is gone")?;
        let row = table
            .read_row(b"r", &Filter::all())?
            .ok_or("the row is gone")?;
        assert_eq!(row.cells[0].value, b"v");
        // Parts are a format-4 thing: a value that needs them is written.
        table.mutate_row(
            b"r",
            &RowMutation::new().set("f", "big", vec![7u8; 100_000]),
        )?;
    }
    let raw = common::open_raw_sled(dir.path())?;
    let version = raw.get(b"widesql/format")?.ok_or("no format version")?;
    assert_eq!(version.as_ref(), 4u32.to_be_bytes());
    Ok(())
}

#[test]
fn a_closed_database_opens_again_at_once_in_the_same_process() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    db.default_dataset()?
        .create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?;
    // sled's threads release the file lock a moment after the last handle
    // goes; an open in between waits for it instead of calling the
    // database in use by another process.
    drop(db);
    for _ in 0..5 {
        let db = Db::open(dir.path())?;
        assert!(db.default_dataset()?.open_table("t").is_ok());
    }
    Ok(())
}
