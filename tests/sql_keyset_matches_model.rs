//! The key sets that pushdown builds (unions and intersections of key
//! intervals) hold exactly the keys a brute-force model holds, for intervals
//! with every kind of bound, duplicates and equal bounds included (sorting
//! them once used a comparator that was not a total order).

use std::collections::BTreeSet;
use std::ops::Bound;

use proptest::prelude::*;
use widesql::internals::{Interval, KeySet};

/// Every key of the model's universe: 0–2 bytes drawn from 0..4.
fn universe() -> Vec<Vec<u8>> {
    let mut keys = vec![Vec::new()];
    for a in 0..4u8 {
        keys.push(vec![a]);
        for b in 0..4u8 {
            keys.push(vec![a, b]);
        }
    }
    keys
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    let key = prop::collection::vec(0..4u8, 0..3);
    prop_oneof![
        Just(Bound::Unbounded),
        key.clone().prop_map(Bound::Included),
        key.prop_map(Bound::Excluded),
    ]
}

fn intervals() -> impl Strategy<Value = Vec<Interval>> {
    prop::collection::vec((bound(), bound()), 0..8)
}

fn in_interval(key: &[u8], (lo, hi): &Interval) -> bool {
    let above = match lo {
        Bound::Unbounded => true,
        Bound::Included(x) => key >= x.as_slice(),
        Bound::Excluded(x) => key > x.as_slice(),
    };
    let below = match hi {
        Bound::Unbounded => true,
        Bound::Included(x) => key <= x.as_slice(),
        Bound::Excluded(x) => key < x.as_slice(),
    };
    above && below
}

fn model(intervals: &[Interval]) -> BTreeSet<Vec<u8>> {
    universe()
        .into_iter()
        .filter(|k| intervals.iter().any(|i| in_interval(k, i)))
        .collect()
}

fn members(set: &KeySet) -> BTreeSet<Vec<u8>> {
    model(set.intervals())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn union_and_intersection_match_the_model(a in intervals(), b in intervals()) {
        let (x, y) = (KeySet::from_intervals(a.clone()), KeySet::from_intervals(b.clone()));
        prop_assert_eq!(members(&x), model(&a));
        let union: BTreeSet<_> = model(&a).union(&model(&b)).cloned().collect();
        prop_assert_eq!(members(&x.clone().union(y.clone())), union);
        let both: BTreeSet<_> = model(&a).intersection(&model(&b)).cloned().collect();
        prop_assert_eq!(members(&x.intersect(&y)), both);
        // The intervals come out disjoint.
        let out = x.intervals();
        for pair in out.windows(2) {
            let overlap = universe().iter().any(|k| in_interval(k, &pair[0]) && in_interval(k, &pair[1]));
            prop_assert!(!overlap, "{:?}", out);
        }
    }
}
