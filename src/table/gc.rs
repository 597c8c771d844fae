//! Compaction: physically removes what reads already hide — versions beyond
//! a family's GC policy, cells of dropped columns and of dropped families —
//! and delete markers that have nothing older left to hide. Versions a
//! delete marker hides stay (reads of the past see them) until GC removes
//! them.
//!
//! Hidden cells stay hidden (newer writes and passing time only hide more;
//! loosening a policy is done so that nothing hidden comes back), so
//! compaction can delete them without holding row locks. Two things need
//! more care:
//!
//! - The layout it judges by must still be the table's when it deletes: a
//!   family added or a policy loosened during the pass would otherwise lose
//!   cells. Each batch is applied through a [`LayoutCheck`], which holds DDL
//!   off and confirms the layout is current (the catalog's, below).
//! - Removing the last cells of a row that were of a dropped column would
//!   make the row vanish, so the same batch writes a row marker for it,
//!   under the row's lock and only if the cell is still there (a concurrent
//!   DELETE must not be undone).

use std::sync::Arc;

use crate::error::Result;
use crate::keys::CellKey;
use crate::storage::{Durability, WriteBatch};
use crate::table::layout::{Hidden, Layout, Marks, MARK_FAMILY};
use crate::table::spec::GcPolicy;
use crate::table::TableStore;

/// Deletes per storage batch.
const COMPACTION_BATCH: usize = 1000;

/// Applies a compaction batch only while `layout` is still the table's
/// current layout, holding layout changes off meanwhile. Returns whether
/// the batch was applied; `false` ends the pass (the next one starts over
/// with the new layout).
pub type LayoutCheck<'a> = &'a dyn Fn(&Arc<Layout>, &mut dyn FnMut() -> Result<()>) -> Result<bool>;

/// Runs the batch without a check: the caller holds DDL off itself.
pub(crate) fn unchecked(_: &Arc<Layout>, apply: &mut dyn FnMut() -> Result<()>) -> Result<bool> {
    apply().map(|()| true)
}

/// One compaction batch: the deletes, and the rows whose dropped-column
/// cells are deleted (row key, the cell's key in the tree, its timestamp).
struct Pending {
    batch: WriteBatch,
    dropped: Vec<(Vec<u8>, usize, Vec<u8>, i64)>,
}

impl Default for Pending {
    /// Compaction removes only what reads hide already, so a crash that
    /// loses a pass loses nothing a reader could see: its batches reach the
    /// disk with the next flush ([`Durability::Eventual`]).
    fn default() -> Self {
        Self {
            batch: WriteBatch::with_durability(Durability::Eventual),
            dropped: Vec::new(),
        }
    }
}

impl TableStore {
    /// Removes every hidden version and every cell of a dropped column or
    /// family. Returns how many cells were removed.
    pub fn compact(&self) -> Result<u64> {
        self.compact_checked(&unchecked, None)
    }

    /// Compaction whose batches go through `check`; `override_policy`
    /// judges one family by another policy (used before a policy is
    /// loosened). A caller that holds every row lock takes none again.
    pub(crate) fn compact_checked(
        &self,
        check: LayoutCheck<'_>,
        override_policy: Option<(u16, GcPolicy)>,
    ) -> Result<u64> {
        let prefix = &self.layout.prefix;
        let now = crate::clock::wall_micros();
        let mut removed = 0;
        for (group_index, group) in self.layout.groups.iter().enumerate() {
            let tree = &group.tree;
            let mut column: Option<(u16, Vec<u8>, Vec<u8>)> = None;
            let mut index = 0;
            let mut pending = Pending::default();
            // The oldest cell of the current row that stays: a delete marker
            // goes once nothing older than it is left to hide.
            let mut row: Vec<u8> = Vec::new();
            let mut oldest_kept: Option<i64> = None;
            for entry in tree.scan_prefix(prefix, false) {
                let (key, _) = entry?;
                let cell = self.layout.decode_key(&key)?;
                if *cell.row != *row {
                    row = cell.row.to_vec();
                    oldest_kept = None;
                }
                if cell.family == MARK_FAMILY {
                    if oldest_kept.is_none_or(|oldest| oldest >= cell.timestamp) {
                        pending.batch.delete(tree, key);
                        removed += 1;
                    }
                    continue;
                }
                let same_column = column.as_ref().is_some_and(|(f, r, q)| {
                    *f == cell.family && *r == *cell.row && *q == *cell.qualifier
                });
                if !same_column {
                    column = Some((cell.family, cell.row.to_vec(), cell.qualifier.to_vec()));
                    index = 0;
                }
                index += 1;
                let hidden = match self.layout.family_by_id(cell.family) {
                    None => Hidden::ByGc,
                    Some(family) => {
                        let gc = match override_policy {
                            Some((id, policy)) if id == cell.family => policy,
                            _ => family.gc,
                        };
                        family.hidden_by(&gc, &cell.qualifier, index, cell.timestamp, now)
                    }
                };
                if hidden == Hidden::No {
                    oldest_kept =
                        Some(oldest_kept.map_or(cell.timestamp, |t| t.min(cell.timestamp)));
                    continue;
                }
                if hidden == Hidden::Dropped {
                    pending.dropped.push((
                        cell.row.to_vec(),
                        group_index,
                        key.to_vec(),
                        cell.timestamp,
                    ));
                } else {
                    pending.batch.delete(tree, key);
                }
                removed += 1;
                if pending.batch.len() + pending.dropped.len() >= COMPACTION_BATCH
                    && !self.apply_compaction(std::mem::take(&mut pending), check)?
                {
                    return Ok(removed);
                }
            }
            if !self.apply_compaction(pending, check)? {
                return Ok(removed);
            }
        }
        Ok(removed)
    }

    /// Applies one batch through `check`: cells of dropped columns are
    /// deleted under their row locks, each with a row marker in its place.
    fn apply_compaction(&self, mut pending: Pending, check: LayoutCheck<'_>) -> Result<bool> {
        if pending.batch.is_empty() && pending.dropped.is_empty() {
            return Ok(true);
        }
        let marker = self
            .layout
            .marker_family
            .and_then(|id| self.layout.family_by_id(id));
        check(&self.layout, &mut || {
            let _locks = self
                .engine
                .locks
                .write_all(pending.dropped.iter().map(|(row, ..)| self.row_stripe(row)));
            let mut batch = std::mem::take(&mut pending.batch);
            for (row, group, key, ts) in &pending.dropped {
                let tree = &self.layout.groups[*group].tree;
                if tree.get(key)?.is_none() {
                    continue; // deleted meanwhile: nothing to keep alive
                }
                batch.delete(tree, key.clone());
                // A row deleted by a marker stays deleted.
                let cell = self.layout.decode_key(key)?;
                let mut marks = Marks::default();
                let marks_prefix = CellKey::family_prefix(&self.layout.prefix, row, MARK_FAMILY);
                for entry in tree.scan_prefix(&marks_prefix, false) {
                    let (k, _) = entry?;
                    let mark = self.layout.decode_key(&k)?;
                    marks.add(&mark.qualifier, mark.timestamp, None);
                }
                if marks.covers(cell.family, &cell.qualifier, cell.timestamp) {
                    continue;
                }
                if let Some(marker) = marker {
                    let marker_key =
                        CellKey::encode(&self.layout.prefix, row, marker.id, b"", *ts)?;
                    batch.put(&self.layout.groups[marker.group].tree, marker_key, &b""[..]);
                }
            }
            Ok(self.engine.storage.apply(batch)?)
        })
    }
}
