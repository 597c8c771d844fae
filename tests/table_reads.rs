//! Reads: key sets, ranges, prefixes, reverse order, limits, every filter,
//! and paging through a wide row with a resume token.

use std::ops::Bound;

use widesql::{
    Db, DbOptions, DeleteScope, ErrorKind, FamilySpec, Filter, QualifierFilter, ReadOptions,
    RowMutation, RowRange, RowSet, TableSpec, ValueFilter,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn table(dir: &std::path::Path) -> widesql::Result<widesql::Table> {
    let db = Db::open_with(dir, DbOptions::new().with_compaction_interval(None))?;
    let t = db.default_dataset()?.create_table(
        "t",
        TableSpec::new()
            .with_family(FamilySpec::new("a"))
            .with_family(FamilySpec::new("b").with_locality_group("g2")),
    )?;
    for key in ["apple", "apricot", "banana", "blueberry", "cherry"] {
        let mut m = RowMutation::new();
        for (i, q) in ["x1", "x2", "y1"].iter().enumerate() {
            for ts in [100, 200, 300] {
                m = m.set_at("a", q, ts + i as i64, format!("{key}-{q}-{ts}"));
            }
        }
        t.mutate_row(key.as_bytes(), &m.set_at("b", "z", 1, key))?;
    }
    Ok(t)
}

fn keys(t: &widesql::Table, rows: &RowSet, options: ReadOptions) -> widesql::Result<Vec<String>> {
    t.read_rows(rows, options)?
        .map(|r| r.map(|r| String::from_utf8_lossy(&r.key).into_owned()))
        .collect()
}

#[test]
fn reads_row_sets_forward_and_reverse() -> TestResult {
    let dir = tempfile::tempdir()?;
    let t = table(dir.path())?;
    let all = ReadOptions::new();
    assert_eq!(
        keys(&t, &RowSet::prefix("ap"), all.clone())?,
        ["apple", "apricot"]
    );
    assert_eq!(
        keys(&t, &RowSet::prefix("b"), all.clone().with_reverse(true))?,
        ["blueberry", "banana"]
    );
    let range = RowRange::new(b"apricot".to_vec()..b"cherry".to_vec());
    assert_eq!(
        keys(&t, &RowSet::range(range.clone()), all.clone())?,
        ["apricot", "banana", "blueberry"]
    );
    let excl = RowRange {
        start: Bound::Excluded(b"apricot".to_vec()),
        end: Bound::Included(b"cherry".to_vec()),
    };
    assert_eq!(
        keys(&t, &RowSet::range(excl), all.clone())?,
        ["banana", "blueberry", "cherry"]
    );
    let set =
        RowSet::keys(["cherry", "apple", "nope", "apple"]).with_range(RowRange::prefix("ban"));
    assert_eq!(keys(&t, &set, all.clone())?, ["apple", "banana", "cherry"]);
    assert_eq!(
        keys(&t, &set, all.clone().with_reverse(true))?,
        ["cherry", "banana", "apple"]
    );
    assert_eq!(
        keys(&t, &RowSet::all(), all.clone().with_row_limit(2))?,
        ["apple", "apricot"]
    );
    assert_eq!(
        keys(
            &t,
            &RowSet::all(),
            all.clone().with_reverse(true).with_row_limit(1)
        )?,
        ["cherry"]
    );
    assert!(
        keys(&t, &RowSet::default(), all)?.is_empty(),
        "an empty row set reads nothing"
    );
    Ok(())
}

#[test]
fn reads_apply_every_filter() -> TestResult {
    let dir = tempfile::tempdir()?;
    let t = table(dir.path())?;
    let cells = |f: Filter| -> widesql::Result<Vec<(String, String, i64)>> {
        Ok(t.read_row(b"banana", &f)?
            .map(|r| {
                r.cells
                    .into_iter()
                    .map(|c| {
                        (
                            c.family,
                            String::from_utf8_lossy(&c.qualifier).into_owned(),
                            c.timestamp,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    };
    assert_eq!(cells(Filter::all())?.len(), 10);
    assert_eq!(
        cells(Filter::all().with_families(["b"]))?,
        [("b".into(), "z".into(), 1)]
    );
    let prefix = Filter::all()
        .with_qualifiers(QualifierFilter::Prefix(b"x".to_vec()))
        .with_latest_versions(1);
    assert_eq!(
        cells(prefix)?,
        [
            ("a".into(), "x1".into(), 300),
            ("a".into(), "x2".into(), 301)
        ]
    );
    let range = Filter::all()
        .with_qualifiers(QualifierFilter::Range(
            Bound::Excluded(b"x1".to_vec()),
            Bound::Unbounded,
        ))
        .with_families(["a"])
        .with_latest_versions(1);
    assert_eq!(
        cells(range)?,
        [
            ("a".into(), "x2".into(), 301),
            ("a".into(), "y1".into(), 302)
        ]
    );
    let time = Filter::all().with_families(["a"]).with_time_range(150..250);
    assert_eq!(
        cells(time)?.iter().map(|c| c.2).collect::<Vec<_>>(),
        [200, 201, 202]
    );
    let latest2 = Filter::all()
        .with_families(["a"])
        .with_latest_versions(2)
        .with_time_range(0..250);
    assert_eq!(
        cells(latest2)?.len(),
        6,
        "latest N counts within the time range"
    );
    let value = Filter::all().with_value(ValueFilter::Equals(b"banana-x2-200".to_vec()));
    assert_eq!(cells(value)?, [("a".into(), "x2".into(), 201)]);
    let value_prefix = Filter::all().with_value(ValueFilter::Prefix(b"banana-y1".to_vec()));
    assert_eq!(cells(value_prefix)?.len(), 3);
    let page = Filter::all()
        .with_cells_per_row_offset(2)
        .with_cells_per_row_limit(3);
    assert_eq!(
        cells(page)?.iter().map(|c| c.2).collect::<Vec<_>>(),
        [100, 301, 201]
    );
    assert!(cells(Filter::all().with_value(ValueFilter::Equals(b"none".to_vec())))?.is_empty());
    let err = t
        .read_row(b"banana", &Filter::all().with_families(["nope"]))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let mut rows = t.read_rows(
        &RowSet::all(),
        ReadOptions::new().with_filter(Filter::all().with_families(["nope"])),
    )?;
    assert!(rows.next().expect("an error item").is_err());
    assert!(rows.next().is_none());
    Ok(())
}

#[test]
fn reads_page_through_a_wide_row() -> TestResult {
    let dir = tempfile::tempdir()?;
    let t = table(dir.path())?;
    let wide = (0..1000).map(|i| {
        (
            b"wide".to_vec(),
            RowMutation::new().set_at("a", format!("q{i:04}"), 5, "v"),
        )
    });
    t.bulk_mutate(wide)?;
    t.mutate_row(b"wide", &RowMutation::new().set_at("b", "tail", 1, "end"))?;
    let mut token = None;
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let (cells, next) = t.read_row_page(b"wide", &Filter::all(), 128, token.as_ref())?;
        pages += 1;
        seen.extend(cells.into_iter().map(|c| (c.family, c.qualifier)));
        match next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), 1001);
    assert_eq!(pages, 8);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 1001, "no cell twice, none skipped");
    assert_eq!(seen.last(), Some(&("b".to_string(), b"tail".to_vec())));
    assert!(t.read_row_page(b"wide", &Filter::all(), 0, None).is_err());
    Ok(())
}

#[test]
fn reads_bulk_writes_in_chunks() -> TestResult {
    let dir = tempfile::tempdir()?;
    let t = table(dir.path())?;
    let rows = (0..5000).map(|i| {
        (
            format!("k{i:05}"),
            RowMutation::new().set("a", "n", i.to_string()),
        )
    });
    assert_eq!(t.bulk_mutate(rows)?, 5000);
    assert_eq!(
        t.read_rows(&RowSet::prefix("k"), ReadOptions::new())?
            .count(),
        5000
    );
    // The same row twice in one bulk write: applied in order.
    let twice = vec![
        (b"dup".to_vec(), RowMutation::new().set("a", "q", "first")),
        (
            b"dup".to_vec(),
            RowMutation::new().delete_row().set("b", "q", "second"),
        ),
    ];
    t.bulk_mutate(twice)?;
    let row = t.read_row(b"dup", &Filter::all())?.expect("row");
    assert_eq!(row.cells.len(), 1);
    assert_eq!(row.value("b", b"q"), Some(&b"second"[..]));
    // One bad row refuses its whole batch.
    let bad = vec![
        (b"good".to_vec(), RowMutation::new().set("a", "q", "v")),
        (b"bad".to_vec(), RowMutation::new().set("zzz", "q", "v")),
    ];
    assert!(t.bulk_mutate(bad).is_err());
    assert!(t.read_row(b"good", &Filter::all())?.is_none());
    Ok(())
}

/// A cell with its row key: key, family, qualifier, timestamp, value.
type FlatCell = (Vec<u8>, String, Vec<u8>, i64, Vec<u8>);

/// A read of some families, or of some qualifiers, returns exactly what a
/// read of every cell returns for them: the other cells of their locality
/// group (skipped while chunks are decoded) change nothing, also where
/// deletes, version limits, time ranges, reverse order and paging are
/// involved.
#[test]
fn family_and_qualifier_filtered_reads_match_reads_of_every_cell() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    let t = db.default_dataset()?.create_table(
        "t",
        TableSpec::new()
            .with_family(FamilySpec::new("a"))
            .with_family(FamilySpec::new("b").with_locality_group("g2"))
            .with_family(FamilySpec::new("c")),
    )?;
    for (i, key) in ["k0", "k1", "k2", "k3", "k4", "k5"].iter().enumerate() {
        let mut m = RowMutation::new();
        for ts in [10, 20, 30] {
            if i != 1 {
                m = m.set_at("a", "q", ts, format!("{key}-a-{ts}"));
                m = m.set_at("a", "r", ts, format!("{key}-ar-{ts}"));
            }
            if i % 2 == 0 {
                m = m.set_at("b", "q", ts, format!("{key}-b-{ts}"));
            }
            m = m.set_at("c", format!("c{}", ts % 7), ts, format!("{key}-c-{ts}"));
        }
        t.mutate_row(key.as_bytes(), &m)?;
    }
    // A row wider than a chunk: its first chunk is not rewritten by the
    // deletes below, so only their delete markers hide its cells.
    let mut wide = RowMutation::new();
    for i in 0..40 {
        wide = wide.set_at("a", format!("w{i:02}"), 5, vec![b'x'; 2048]);
    }
    t.mutate_row(b"k5", &wide)?;
    // Delete markers (what SQL DELETE writes) hide cells that stay stored.
    let column = |f: &str, q: &str| DeleteScope::Column(f.into(), q.as_bytes().to_vec());
    let mark = |scope| RowMutation::new().mark_deleted(scope, None);
    t.mutate_row(b"k5", &mark(column("a", "q")))?;
    t.mutate_row(b"k5", &RowMutation::new().delete_column("a", "r"))?;
    t.mutate_row(b"k2", &mark(column("a", "q")))?;
    t.mutate_row(b"k3", &mark(DeleteScope::Family("c".into())))?;
    t.mutate_row(b"k0", &RowMutation::new().delete_family("c"))?;
    t.mutate_row(b"k4", &mark(DeleteScope::Row))?;
    t.mutate_row(b"k4", &RowMutation::new().set("c", "late", "v"))?;

    let flatten = |row: widesql::Row| -> Vec<FlatCell> {
        row.cells
            .into_iter()
            .map(|c| (row.key.clone(), c.family, c.qualifier, c.timestamp, c.value))
            .collect()
    };
    let filters = [
        Filter::all(),
        Filter::all().with_latest_versions(1),
        Filter::all()
            .with_latest_versions(2)
            .with_time_range(15..31),
    ];
    let family_sets: [&[&str]; 5] = [&["a"], &["c"], &["a", "b"], &["b", "c"], &["a", "c"]];
    let qualifier_sets: [Option<&[&str]>; 3] = [None, Some(&["q"]), Some(&["r", "w07", "c3"])];
    for base in &filters {
        for reverse in [false, true] {
            let every = ReadOptions::new()
                .with_filter(base.clone())
                .with_reverse(reverse);
            let all_cells: Vec<_> = t
                .read_rows(&RowSet::all(), every)?
                .map(|r| r.map(flatten))
                .collect::<widesql::Result<Vec<_>>>()?
                .concat();
            for (families, qualifiers) in family_sets
                .iter()
                .flat_map(|f| qualifier_sets.iter().map(move |q| (*f, *q)))
            {
                let mut filter = base.clone().with_families(families.iter().copied());
                if let Some(qualifiers) = qualifiers {
                    filter = filter.with_qualifiers(QualifierFilter::Exact(
                        qualifiers.iter().map(|q| q.as_bytes().to_vec()).collect(),
                    ));
                }
                let options = ReadOptions::new()
                    .with_filter(filter.clone())
                    .with_reverse(reverse);
                let got: Vec<_> = t
                    .read_rows(&RowSet::all(), options.clone())?
                    .map(|r| r.map(flatten))
                    .collect::<widesql::Result<Vec<_>>>()?
                    .concat();
                // Rows lent in place hold the same cells.
                let (mut lent, mut copied) = (Vec::new(), Vec::new());
                let mut rows = t.read_rows(&RowSet::all(), options)?;
                while let Some(row) = rows.next_ref() {
                    let row = row?;
                    lent.extend(row.cells().map(|c| {
                        let family = c.family.to_string();
                        let key = row.key().to_vec();
                        (
                            key,
                            family,
                            c.qualifier.to_vec(),
                            c.timestamp,
                            c.value.to_vec(),
                        )
                    }));
                    copied.extend(flatten(row.to_row()));
                }
                assert_eq!(lent, got, "lent rows: families {families:?}, {base:?}");
                assert_eq!(copied, got, "copied lent rows: families {families:?}");
                let want: Vec<_> = all_cells
                    .iter()
                    .filter(|c| families.contains(&c.1.as_str()))
                    .filter(|c| {
                        qualifiers.is_none_or(|q| q.contains(&&*String::from_utf8_lossy(&c.2)))
                    })
                    .cloned()
                    .collect();
                assert_eq!(
                    got, want,
                    "families {families:?}, qualifiers {qualifiers:?}, {base:?}, reverse {reverse}"
                );
                assert!(
                    qualifiers.is_some() || !got.is_empty(),
                    "families {families:?} read something"
                );
                if reverse {
                    continue; // single-row reads are forward only
                }
                for key in ["k0", "k2", "k3", "k4", "k5"] {
                    let one = t.read_row(key.as_bytes(), &filter)?.map(flatten);
                    let want_one: Vec<_> = want
                        .iter()
                        .filter(|c| c.0 == key.as_bytes())
                        .cloned()
                        .collect();
                    assert_eq!(one.unwrap_or_default(), want_one, "read_row {key}");
                    let (page, _) = t.read_row_page(key.as_bytes(), &filter, 100, None)?;
                    let paged: Vec<_> = page
                        .into_iter()
                        .map(|c| {
                            (
                                key.as_bytes().to_vec(),
                                c.family,
                                c.qualifier,
                                c.timestamp,
                                c.value,
                            )
                        })
                        .collect();
                    assert_eq!(paged, want_one, "read_row_page {key}");
                }
            }
        }
    }
    Ok(())
}

#[test]
fn a_lent_read_with_a_bad_filter_reports_it_once() -> TestResult {
    let dir = tempfile::tempdir()?;
    let t = table(dir.path())?;
    let filter = Filter::all().with_families(["nope"]);
    let mut rows = t.read_rows(&RowSet::all(), ReadOptions::new().with_filter(filter))?;
    let first = rows.next_ref().map(|r| r.map(|row| row.to_row()));
    let message = match first {
        Some(Err(e)) => e.to_string(),
        other => return Err(format!("expected an error, got {other:?}").into()),
    };
    assert!(message.contains("nope"), "{message}");
    assert!(rows.next_ref().is_none(), "the read ends after its error");
    Ok(())
}

#[test]
fn long_scans_read_the_same_with_and_without_read_ahead() -> TestResult {
    let dir = tempfile::tempdir()?;
    let t = table(dir.path())?;
    // Rows enough that a full scan reads ahead for most of them (after
    // 1,024 chunks), some wide enough to span several chunks, some deleted.
    t.bulk_mutate((0..3_000).map(|i| {
        let mut m = RowMutation::new()
            .set_at("a", "x1", 10, format!("r{i}"))
            .set_at("b", "z", 10, "blob".repeat(i % 7));
        if i % 250 == 0 {
            for q in 0..120 {
                m = m.set_at("a", format!("wide{q:03}"), 10, vec![b'w'; 400]);
            }
        }
        (format!("row{i:05}").into_bytes(), m)
    }))?;
    for i in (0..3_000).step_by(9) {
        t.mutate_row(
            format!("row{i:05}").as_bytes(),
            &RowMutation::new().delete_row(),
        )?;
    }
    let filters = [
        Filter::all(),
        Filter::all().with_families(["a"]),
        Filter::all()
            .with_families(["a"])
            .with_qualifiers(QualifierFilter::Exact([b"x1".to_vec()].into())),
        Filter::all().with_families(["b"]).with_latest_versions(1),
    ];
    let sets = [
        RowSet::all(),
        RowSet::range(RowRange::new(b"row00500".to_vec()..b"row02900".to_vec())),
    ];
    for filter in &filters {
        for rows in &sets {
            for reverse in [false, true] {
                for limit in [None, Some(2_000)] {
                    let mut options = ReadOptions::new()
                        .with_filter(filter.clone())
                        .with_reverse(reverse);
                    options.row_limit = limit;
                    let read = |read_ahead: bool| -> widesql::Result<(Vec<widesql::Row>, u64)> {
                        let before: u64 = t.keys_read_per_group()?.iter().map(|(_, n)| n).sum();
                        let rows: Vec<widesql::Row> = t
                            .read_rows(rows, options.clone().with_read_ahead(read_ahead))?
                            .collect::<widesql::Result<_>>()?;
                        let after: u64 = t.keys_read_per_group()?.iter().map(|(_, n)| n).sum();
                        Ok((rows, after - before))
                    };
                    let (direct, direct_keys) = read(false)?;
                    let (ahead, ahead_keys) = read(true)?;
                    let case = format!("{filter:?} {rows:?} reverse {reverse} limit {limit:?}");
                    assert!(direct.len() > 1_500, "{case}: {} rows", direct.len());
                    assert_eq!(ahead, direct, "{case}");
                    assert_eq!(ahead_keys, direct_keys, "keys counted as taken: {case}");
                }
            }
        }
    }
    Ok(())
}
