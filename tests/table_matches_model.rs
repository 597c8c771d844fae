//! The table layer against a model: random mutations on a table with three
//! families in two locality groups, compared after every step with a
//! `BTreeMap` of cells that applies the same GC rules. Values run up to
//! 18 KB, so rows pass the chunk size and are split, rewritten and merged.
//! Some steps write several rows in one `bulk_mutate`.

use std::collections::BTreeMap;
use std::ops::Bound;

use proptest::prelude::*;
use widesql::{
    Db, DbOptions, FamilySpec, Filter, ReadOptions, RowMutation, RowRange, RowSet, TableSpec,
};

/// (name, max versions) in family-id order.
const FAMILIES: [(&str, Option<usize>); 3] = [("a", Some(2)), ("b", None), ("c", Some(1))];

#[derive(Debug, Clone)]
enum Op {
    Set {
        row: Vec<u8>,
        family: usize,
        qualifier: Vec<u8>,
        ts: i64,
        value: u8,
    },
    DeleteColumn {
        row: Vec<u8>,
        family: usize,
        qualifier: Vec<u8>,
        range: Option<(i64, i64)>,
    },
    DeleteFamily {
        row: Vec<u8>,
        family: usize,
    },
    DeleteRow {
        row: Vec<u8>,
    },
    /// Sets of several rows in one `bulk_mutate`: rows new to the table
    /// and rows it holds take different write paths.
    Bulk(Vec<Op>),
    Scan {
        lo: Option<Vec<u8>>,
        hi: Option<Vec<u8>>,
        reverse: bool,
    },
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![Just(0u8), Just(b'a'), Just(b'b'), Just(0xFF)],
        1..3,
    )
}

fn qualifier() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop_oneof![Just(0u8), Just(b'x'), Just(0xFF)], 0..2)
}

fn set() -> impl Strategy<Value = Op> {
    (key(), 0..3usize, qualifier(), 0..6i64, any::<u8>()).prop_map(
        |(row, family, qualifier, ts, value)| Op::Set {
            row,
            family,
            qualifier,
            ts,
            value,
        },
    )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => set(),
        2 => prop::collection::vec(set(), 2..6).prop_map(Op::Bulk),
        1 => (key(), 0..3usize, qualifier(), prop::option::of((0..6i64, 0..7i64)))
            .prop_map(|(row, family, qualifier, range)| Op::DeleteColumn { row, family, qualifier, range }),
        1 => (key(), 0..3usize).prop_map(|(row, family)| Op::DeleteFamily { row, family }),
        1 => key().prop_map(|row| Op::DeleteRow { row }),
        2 => (prop::option::of(key()), prop::option::of(key()), any::<bool>())
            .prop_map(|(lo, hi, reverse)| Op::Scan { lo, hi, reverse }),
    ]
}

/// The value a cell holds for `seed`: 1 to 18,001 bytes.
fn value_bytes(seed: u8) -> Vec<u8> {
    vec![seed; usize::from(seed % 4) * 6000 + 1]
}

/// (row, family id, qualifier, Reverse(ts)) -> value: the stored cells.
type Model = BTreeMap<(Vec<u8>, usize, Vec<u8>, std::cmp::Reverse<i64>), u8>;

/// (family, qualifier, timestamp, value) as a read returns it.
type FlatCell = (String, Vec<u8>, i64, Vec<u8>);

/// The visible cells of the model, per row, in read order.
fn visible(model: &Model) -> BTreeMap<Vec<u8>, Vec<FlatCell>> {
    let mut rows: BTreeMap<Vec<u8>, Vec<_>> = BTreeMap::new();
    let mut column: Option<(Vec<u8>, usize, Vec<u8>)> = None;
    let mut index = 0;
    for ((row, family, qualifier, ts), value) in model {
        let this = (row.clone(), *family, qualifier.clone());
        if column.as_ref() != Some(&this) {
            column = Some(this);
            index = 0;
        }
        index += 1;
        if FAMILIES[*family].1.is_some_and(|max| index > max) {
            continue;
        }
        rows.entry(row.clone()).or_default().push((
            FAMILIES[*family].0.to_string(),
            qualifier.clone(),
            ts.0,
            value_bytes(*value),
        ));
    }
    rows
}

fn apply(model: &mut Model, op: &Op) {
    match op {
        Op::Set {
            row,
            family,
            qualifier,
            ts,
            value,
        } => {
            model.insert(
                (
                    row.clone(),
                    *family,
                    qualifier.clone(),
                    std::cmp::Reverse(*ts),
                ),
                *value,
            );
        }
        Op::DeleteColumn {
            row,
            family,
            qualifier,
            range,
        } => {
            // The versions in range go, and so do those GC already hides.
            let max = FAMILIES[*family].1;
            let mut index = 0;
            model.retain(|(r, f, q, ts), _| {
                if r != row || f != family || q != qualifier {
                    return true;
                }
                index += 1;
                let in_range = range.is_none_or(|(s, e)| (s..e).contains(&ts.0));
                let hidden = max.is_some_and(|m| index > m);
                !(in_range || hidden)
            });
        }
        Op::DeleteFamily { row, family } => {
            model.retain(|(r, f, _, _), _| !(r == row && f == family))
        }
        Op::DeleteRow { row } => model.retain(|(r, _, _, _), _| r != row),
        Op::Bulk(ops) => ops.iter().for_each(|op| apply(model, op)),
        Op::Scan { .. } => {}
    }
}

fn mutation(op: &Op) -> Option<(Vec<u8>, RowMutation)> {
    Some(match op {
        Op::Set {
            row,
            family,
            qualifier,
            ts,
            value,
        } => (
            row.clone(),
            RowMutation::new().set_at(FAMILIES[*family].0, qualifier, *ts, value_bytes(*value)),
        ),
        Op::DeleteColumn {
            row,
            family,
            qualifier,
            range: None,
        } => (
            row.clone(),
            RowMutation::new().delete_column(FAMILIES[*family].0, qualifier),
        ),
        Op::DeleteColumn {
            row,
            family,
            qualifier,
            range: Some((s, e)),
        } => (
            row.clone(),
            RowMutation::new().delete_column_versions(
                FAMILIES[*family].0,
                qualifier,
                *s..(*e).max(*s),
            ),
        ),
        Op::DeleteFamily { row, family } => (
            row.clone(),
            RowMutation::new().delete_family(FAMILIES[*family].0),
        ),
        Op::DeleteRow { row } => (row.clone(), RowMutation::new().delete_row()),
        Op::Bulk(_) | Op::Scan { .. } => return None,
    })
}

fn flatten(row: widesql::Row) -> (Vec<u8>, Vec<FlatCell>) {
    (
        row.key,
        row.cells
            .into_iter()
            .map(|c| (c.family, c.qualifier, c.timestamp, c.value))
            .collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn table_matches_btreemap_model(ops in prop::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None)).unwrap();
        let spec = TableSpec::new()
            .with_family(FamilySpec::new("a").with_locality_group("g1").with_max_versions(2))
            .with_family(FamilySpec::new("b").with_locality_group("g2"))
            .with_family(FamilySpec::new("c").with_locality_group("g1").with_max_versions(1));
        let table = db.default_dataset().unwrap().create_table("t", spec).unwrap();
        let mut model = Model::new();
        for op in &ops {
            // Normalise empty ranges the same way for both sides.
            let op = match op {
                Op::DeleteColumn { row, family, qualifier, range: Some((s, e)) } => Op::DeleteColumn {
                    row: row.clone(), family: *family, qualifier: qualifier.clone(), range: Some((*s, (*e).max(*s))),
                },
                other => other.clone(),
            };
            if let Some((row, m)) = mutation(&op) {
                table.mutate_row(&row, &m).unwrap();
                apply(&mut model, &op);
            }
            if let Op::Bulk(ops) = &op {
                table.bulk_mutate(ops.iter().filter_map(mutation)).unwrap();
                apply(&mut model, &op);
            }
            if let Op::Scan { lo, hi, reverse } = &op {
                let range = RowRange {
                    start: lo.clone().map_or(Bound::Unbounded, Bound::Included),
                    end: hi.clone().map_or(Bound::Unbounded, Bound::Excluded),
                };
                let got: Vec<_> = table
                    .read_rows(&RowSet::range(range.clone()), ReadOptions::new().with_reverse(*reverse))
                    .unwrap()
                    .map(|r| flatten(r.unwrap()))
                    .collect();
                let mut want: Vec<_> = visible(&model).into_iter().filter(|(k, _)| range.contains(k)).collect();
                if *reverse {
                    want.reverse();
                }
                prop_assert_eq!(got, want);
            }
            // Point reads of every row the model knows.
            for (key, cells) in visible(&model) {
                let got = table.read_row(&key, &Filter::all()).unwrap().map(flatten);
                prop_assert_eq!(got, Some((key.clone(), cells)));
            }
        }
        // Compaction removes exactly what was hidden: reads do not change.
        let before = visible(&model);
        table.compact().unwrap();
        let after: BTreeMap<_, _> = table
            .read_rows(&RowSet::all(), ReadOptions::new())
            .unwrap()
            .map(|r| flatten(r.unwrap()))
            .collect();
        prop_assert_eq!(after, before);
    }
}
