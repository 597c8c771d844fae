//! Locality groups: a read of one group never touches another group's tree,
//! and a row mutation spanning groups is atomic for every reader.

use std::sync::atomic::{AtomicBool, Ordering};

use widesql::{Db, DbOptions, FamilySpec, Filter, ReadOptions, RowMutation, RowSet, TableSpec};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn webtable(db: &Db) -> widesql::Result<widesql::Table> {
    db.default_dataset()?.create_table(
        "webtable",
        TableSpec::new()
            .with_family(FamilySpec::new("language"))
            .with_family(FamilySpec::new("anchor"))
            .with_family(
                FamilySpec::new("contents")
                    .with_locality_group("blobs")
                    .with_max_versions(3),
            ),
    )
}

fn keys_read(t: &widesql::Table, group: &str) -> widesql::Result<u64> {
    Ok(t.keys_read_per_group()?
        .into_iter()
        .find(|(g, _)| g == group)
        .map_or(0, |(_, n)| n))
}

#[test]
fn locality_group_reads_skip_other_groups() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    let t = webtable(&db)?;
    let rows = (0..200).map(|i| {
        (
            format!("com.site{i:03}.www"),
            RowMutation::new()
                .set("language", "", "EN")
                .set("anchor", "a.com", "A")
                .set("contents", "", "<html>".repeat(50)),
        )
    });
    t.bulk_mutate(rows)?;
    let blobs_before = keys_read(&t, "blobs")?;
    let default_before = keys_read(&t, "default")?;

    let language = Filter::all().with_families(["language"]);
    let n = t
        .read_rows(
            &RowSet::all(),
            ReadOptions::new().with_filter(language.clone()),
        )?
        .count();
    assert_eq!(n, 200);
    let row = t.read_row(b"com.site007.www", &language)?.expect("row");
    assert_eq!(row.cells.len(), 1);
    assert_eq!(
        keys_read(&t, "blobs")?,
        blobs_before,
        "the blobs tree was not read"
    );
    // One key per row: the row's language and anchor share a chunk.
    assert_eq!(keys_read(&t, "default")?, default_before + 201);

    let contents = Filter::all().with_families(["contents"]);
    let before = keys_read(&t, "default")?;
    assert_eq!(
        t.read_rows(&RowSet::all(), ReadOptions::new().with_filter(contents))?
            .count(),
        200
    );
    assert_eq!(
        keys_read(&t, "default")?,
        before,
        "the default tree was not read"
    );
    assert_eq!(keys_read(&t, "blobs")?, blobs_before + 200);
    Ok(())
}

#[test]
fn locality_group_row_mutations_are_atomic_for_readers() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    let t = webtable(&db)?;
    let keys: Vec<String> = (0..8).map(|i| format!("row{i}")).collect();
    let stop = AtomicBool::new(false);
    let torn = std::thread::scope(|s| -> widesql::Result<usize> {
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let (t, keys, stop) = (&t, &keys, &stop);
                s.spawn(move || -> widesql::Result<()> {
                    for n in 0..400u32 {
                        let value = format!("{w}-{n}");
                        let key = &keys[(n as usize * 3 + w) % keys.len()];
                        t.mutate_row(
                            key.as_bytes(),
                            &RowMutation::new()
                                .delete_row()
                                .set("language", "", &value)
                                .set("contents", "", &value),
                        )?;
                    }
                    stop.store(true, Ordering::SeqCst);
                    Ok(())
                })
            })
            .collect();
        let mut torn = 0;
        let mut reads = 0;
        while !stop.load(Ordering::SeqCst) || reads < 50 {
            reads += 1;
            let latest = Filter::all().with_latest_versions(1);
            for row in t.read_rows(
                &RowSet::all(),
                ReadOptions::new().with_filter(latest.clone()),
            )? {
                let row = row?;
                if row.value("language", b"") != row.value("contents", b"") {
                    torn += 1;
                }
            }
            let row = t.read_row(keys[reads % keys.len()].as_bytes(), &latest)?;
            if let Some(row) = row {
                if row.value("language", b"") != row.value("contents", b"") {
                    torn += 1;
                }
            }
        }
        for w in writers {
            w.join().expect("writer panicked")?;
        }
        Ok(torn)
    })?;
    assert_eq!(
        torn, 0,
        "every read saw both groups of a row at the same mutation"
    );
    Ok(())
}
