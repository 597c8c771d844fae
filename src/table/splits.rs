//! The partitions recent scans of a table were split into, kept while no
//! batch writes the table.
//!
//! A SQL scan of a large key range is split into partitions that run side
//! by side, and deciding the split reads the table: a sample of thousands
//! of rows (is the scan large enough?) and its first and last keys. Over
//! 100,000 pages that took 12 ms of a 134 ms `SELECT sum(rank)` (benchmark
//! W5), every time the statement ran. A split only decides how a scan's
//! rows are shared out (each split covers the scan's whole key set), so
//! one found before stays right; it is found again once a batch wrote the
//! table (its write epoch moved) and the table's size may have changed.
//! A table whose families hide versions by age is sampled every time: its
//! rows can age out with no batch written.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use super::{Filter, RowSet};

/// Splits kept per table: a table has few distinct large scans.
const KEPT_SPLITS: usize = 16;

/// The splits of one table's recent scans.
#[derive(Debug, Default)]
pub struct SplitMemo {
    /// Newest first.
    splits: Mutex<VecDeque<Split>>,
}

/// One scan's split, found when the table was at `epoch`.
#[derive(Debug)]
struct Split {
    rows: RowSet,
    filter: Filter,
    parts: usize,
    epoch: u64,
    partitions: Vec<RowSet>,
}

impl Split {
    /// Whether this is the split of the scan of `rows` under `filter` into
    /// at most `parts` partitions.
    fn is_of(&self, rows: &RowSet, filter: &Filter, parts: usize) -> bool {
        self.parts == parts && self.rows == *rows && self.filter == *filter
    }
}

impl SplitMemo {
    /// The partitions the scan of `rows` under `filter` into at most
    /// `parts` was split into at write epoch `epoch`, if it was.
    pub fn get(
        &self,
        rows: &RowSet,
        filter: &Filter,
        parts: usize,
        epoch: u64,
    ) -> Option<Vec<RowSet>> {
        let splits = self.splits.lock().unwrap_or_else(PoisonError::into_inner);
        splits
            .iter()
            .find(|s| {
                s.epoch == epoch && s.parts == parts && s.rows == *rows && s.filter == *filter
            })
            .map(|s| s.partitions.clone())
    }

    /// Keeps the split found at write epoch `epoch` (read before the rows
    /// it sampled), in place of any older one of the same scan.
    pub fn put(
        &self,
        rows: RowSet,
        filter: Filter,
        parts: usize,
        epoch: u64,
        partitions: Vec<RowSet>,
    ) {
        let mut splits = self.splits.lock().unwrap_or_else(PoisonError::into_inner);
        splits.retain(|s| !s.is_of(&rows, &filter, parts));
        splits.push_front(Split {
            rows,
            filter,
            parts,
            epoch,
            partitions,
        });
        splits.truncate(KEPT_SPLITS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_is_kept_for_its_scan_and_epoch_only() {
        let memo = SplitMemo::default();
        let (all, filter) = (RowSet::all(), Filter::all());
        let halves = vec![RowSet::prefix("a"), RowSet::prefix("b")];
        assert_eq!(memo.get(&all, &filter, 2, 7), None);
        memo.put(all.clone(), filter.clone(), 2, 7, halves.clone());
        assert_eq!(memo.get(&all, &filter, 2, 7), Some(halves.clone()));
        // Another epoch (a batch wrote the table), another number of
        // partitions, another filter, other rows: not this split.
        assert_eq!(memo.get(&all, &filter, 2, 8), None);
        assert_eq!(memo.get(&all, &filter, 4, 7), None);
        assert_eq!(
            memo.get(&all, &filter.clone().with_families(["f"]), 2, 7),
            None
        );
        assert_eq!(memo.get(&RowSet::prefix("a"), &filter, 2, 7), None);
        // Found again at a later epoch, it replaces the older one.
        memo.put(all.clone(), filter.clone(), 2, 8, vec![all.clone()]);
        assert_eq!(memo.get(&all, &filter, 2, 7), None);
        assert_eq!(memo.get(&all, &filter, 2, 8), Some(vec![all.clone()]));
        // Bounded: the oldest of more than it keeps is forgotten.
        for n in 0..KEPT_SPLITS {
            memo.put(
                RowSet::prefix(format!("{n}")),
                filter.clone(),
                2,
                8,
                Vec::new(),
            );
        }
        assert_eq!(memo.get(&all, &filter, 2, 8), None);
        assert!(memo.get(&RowSet::prefix("0"), &filter, 2, 8).is_some());
    }
}
