//! The read path's pieces: key ranges, column keys, the groups and cells
//! a filter needs, and what a row read keeps.

use super::*;
use crate::table::filter::QualifierFilter;
use crate::{Db, FamilySpec, RowMutation, TableSpec};

/// A table with family `a` in the default group and `b` in group `g`,
/// `a` keeping 2 versions; its store and the database that holds it.
fn two_groups() -> Result<(tempfile::TempDir, Db, TableStore)> {
    let dir = tempfile::tempdir().map_err(|e| crate::Error::File {
        target: "a temporary directory".into(),
        message: e.to_string(),
    })?;
    let db = Db::open(dir.path())?;
    let table = db.default_dataset()?.create_table(
        "t",
        TableSpec::new()
            .with_family(FamilySpec::new("a").with_max_versions(2))
            .with_family(FamilySpec::new("b").with_locality_group("g")),
    )?;
    let store = table.store()?;
    Ok((dir, db, store))
}

#[test]
fn row_sets_become_sorted_disjoint_key_ranges() {
    let prefix = b"P".to_vec();
    let row = |k: &[u8]| CellKey::row_prefix(&prefix, k);
    // Keys out of order, a key inside a range, overlapping ranges.
    let rows = RowSet::keys([b"m".as_slice(), b"b", b"d"])
        .with_range(RowRange {
            start: Bound::Included(b"c".to_vec()),
            end: Bound::Excluded(b"f".to_vec()),
        })
        .with_range(RowRange {
            start: Bound::Excluded(b"e".to_vec()),
            end: Bound::Included(b"g".to_vec()),
        });
    let ranges = key_ranges(&prefix, &rows);
    let bounds: Vec<(Vec<u8>, Option<Vec<u8>>)> = ranges
        .iter()
        .map(|r| (r.lo.clone(), r.hi.clone()))
        .collect();
    assert_eq!(
        bounds,
        vec![
            (row(b"b"), prefix_successor(&row(b"b"))),
            (row(b"c"), prefix_successor(&row(b"g"))),
            (row(b"m"), prefix_successor(&row(b"m"))),
        ]
    );
    // Everything is the table's prefix up to its end; an empty range
    // (start past its end) is dropped.
    let all = key_ranges(&prefix, &RowSet::all());
    assert_eq!(all.len(), 1);
    assert_eq!(
        (all[0].lo.clone(), all[0].hi.clone()),
        (prefix.clone(), prefix_successor(&prefix))
    );
    let empty = RowSet::range(RowRange {
        start: Bound::Included(b"z".to_vec()),
        end: Bound::Excluded(b"a".to_vec()),
    });
    assert!(key_ranges(&prefix, &empty).is_empty());
}

#[test]
fn versions_of_a_column_share_its_key_without_the_timestamp() {
    let key = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10];
    assert_eq!(column_part(&key), Some(&key[..2]));
    assert_eq!(column_part(&key[..8]), Some(&[][..]));
    assert_eq!(column_part(&key[..7]), None);
    // Long enough not to be stored inline: its slices share memory.
    let long = [b"row/".as_slice(), &[b'q'; 60]].concat();
    let stored = Bytes::from(long.clone());
    let shared = shared_part(&stored, Cow::Borrowed(&stored[4..]));
    assert_eq!(shared.as_ref(), &long[4..]);
    assert_eq!(
        shared.as_ptr(),
        stored[4..].as_ptr(),
        "a borrowed part is not copied"
    );
    let copied = shared_part(&stored, Cow::Owned(b"unescaped".to_vec()));
    assert_eq!(copied.as_ref(), b"unescaped");
}

#[test]
fn a_filter_reads_only_the_groups_and_cells_it_needs() -> Result<()> {
    let (_dir, _db, store) = two_groups()?;
    let layout = &store.layout;
    let group_of = |name: &str| {
        layout
            .families
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.group)
    };
    let (a, b) = (group_of("a"), group_of("b"));
    assert_ne!(a, b, "b has a locality group of its own");
    assert_eq!(groups_for(layout, &Filter::all()).len(), 2);
    let only_b = Filter::all().with_families(["b"]);
    assert_eq!(
        groups_for(layout, &only_b),
        b.into_iter().collect::<Vec<_>>()
    );
    // No pruning without a family or exact qualifier filter; none for
    // the empty qualifier either (it stands for a row marker).
    assert!(kept_cells(layout, &Filter::all()).is_none());
    assert!(kept_cells(layout, &only_b).is_some());
    let exact = |q: &[u8]| QualifierFilter::Exact([q.to_vec()].into());
    assert!(kept_cells(layout, &Filter::all().with_qualifiers(exact(b"x"))).is_some());
    assert!(kept_cells(layout, &Filter::all().with_qualifiers(exact(b""))).is_none());
    Ok(())
}

#[test]
fn a_row_read_keeps_what_gc_and_delete_markers_leave() -> Result<()> {
    let (_dir, db, store) = two_groups()?;
    let table = db.open_table("default", "public", "t")?;
    let row = RowMutation::new()
        .set_at("a", "q", 1, "v1")
        .set_at("a", "q", 2, "v2")
        .set_at("a", "q", 3, "v3")
        .set_at("b", "q", 1, "b1");
    table.mutate_row(b"k", &row)?;
    let values = |filter: &Filter| -> Result<Vec<(u16, i64, Vec<u8>)>> {
        Ok(store
            .read_locked(b"k", filter)?
            .into_iter()
            .map(|c| (c.family, c.timestamp, c.value.to_vec()))
            .collect())
    };
    let id = |name: &str| {
        let family = store.layout.families.iter().find(|f| f.name == name);
        family.map_or(u16::MAX, |f| f.id)
    };
    let (a, b) = (id("a"), id("b"));
    // `a` keeps its 2 newest versions, newest first; `b` comes after.
    assert_eq!(
        values(&Filter::all())?,
        vec![
            (a, 3, b"v3".to_vec()),
            (a, 2, b"v2".to_vec()),
            (b, 1, b"b1".to_vec())
        ]
    );
    assert_eq!(
        values(&Filter::all().with_latest_versions(1))?,
        vec![(a, 3, b"v3".to_vec()), (b, 1, b"b1".to_vec())]
    );
    // A delete marker of versions up to 3 hides them all; the row keeps b.
    table.mutate_row(
        b"k",
        &RowMutation::new().delete_column_versions("a", "q", 0..4),
    )?;
    assert_eq!(values(&Filter::all())?, vec![(b, 1, b"b1".to_vec())]);
    assert_eq!(values(&Filter::all().with_families(["a"]))?, vec![]);
    Ok(())
}
