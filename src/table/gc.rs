//! Compaction: physically removes what reads already hide — versions beyond
//! a family's GC policy, cells of dropped columns and of dropped families —
//! and delete markers that have nothing older left to hide. Versions a
//! delete marker hides stay (reads of the past see them) until GC removes
//! them.
//!
//! A pass reads each group without locks to find the rows with something
//! to remove, then rewrites those rows' chunks in batches, each row judged
//! again from its current cells under its lock: a chunk holds visible cells
//! too, so a rewrite must not undo a write made since the row was read.
//! Two more things need care:
//!
//! - The layout it judges by must still be the table's when it deletes: a
//!   family added or a policy loosened during the pass would otherwise lose
//!   cells. Each batch is applied through a [`LayoutCheck`], which holds DDL
//!   off and confirms the layout is current (the catalog's, below).
//! - Removing the last cells of a row that were of a dropped column would
//!   make the row vanish, so the same batch writes a row marker for it,
//!   unless a delete marker hides the cell (a DELETE must not be undone).

use std::borrow::Cow;
use std::sync::Arc;

use crate::error::Result;
use crate::keys::{prefix_successor, CellKey};
use crate::storage::{Durability, WriteBatch};
use crate::table::chunks::{CellCursor, StoredCell};
use crate::table::layout::{Hidden, Layout, Marks, MARK_FAMILY};
use crate::table::spec::GcPolicy;
use crate::table::write::RowPlan;
use crate::table::TableStore;

/// Cells removed per storage batch (about).
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

/// How one compaction pass judges cells.
#[derive(Clone, Copy)]
struct Judge {
    override_policy: Option<(u16, GcPolicy)>,
    now: i64,
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
        let judge = Judge {
            override_policy,
            now: crate::clock::wall_micros(),
        };
        let mut removed = 0;
        for group in 0..self.layout.groups.len() {
            let tree = &self.layout.groups[group].tree;
            let mut cursor = CellCursor::open(
                &self.layout,
                tree,
                prefix.clone(),
                prefix_successor(prefix),
                false,
            )?;
            // Rows to rewrite (row parts), and how many cells they drop.
            let mut rows: Vec<Vec<u8>> = Vec::new();
            let mut expected = 0;
            let mut cells: Vec<StoredCell> = Vec::new();
            while let Some((first, _)) = &cursor.head {
                let row_part = first[..self.layout.row_len(first)?].to_vec();
                cells.clear();
                while let Some(cell) = cursor.head.take() {
                    if !cell.0.starts_with(&row_part) {
                        cursor.head = Some(cell);
                        break;
                    }
                    cells.push(cell);
                    cursor.advance()?;
                }
                let plan = self.compaction_plan(group, &row_part, &cells, judge)?;
                if plan.removed > 0 {
                    rows.push(row_part);
                    expected += plan.removed;
                }
                if expected >= COMPACTION_BATCH {
                    let Some(n) =
                        self.apply_compaction(group, &std::mem::take(&mut rows), judge, check)?
                    else {
                        return Ok(removed);
                    };
                    removed += n;
                    expected = 0;
                }
            }
            match self.apply_compaction(group, &rows, judge, check)? {
                Some(n) => removed += n,
                None => return Ok(removed),
            }
        }
        Ok(removed)
    }

    /// What compaction removes from one row's cells of group `group`
    /// (`cells`, in key order), and the row markers that keep the row
    /// alive where it removes the last cells of a dropped column.
    fn compaction_plan(
        &self,
        group: usize,
        row_part: &[u8],
        cells: &[StoredCell],
        judge: Judge,
    ) -> Result<RowCompaction> {
        let mut out = RowCompaction::default();
        // A row's delete markers sort after its cells.
        let mut marks = Marks::default();
        for (key, _) in cells.iter().rev() {
            let cell = self.layout.decode_key(key)?;
            if cell.family != MARK_FAMILY {
                break;
            }
            marks.add(&cell.qualifier, cell.timestamp, None);
        }
        let marker = self
            .layout
            .marker_family
            .and_then(|id| self.layout.family_by_id(id));
        let mut column: Option<(u16, Vec<u8>)> = None;
        let mut index = 0;
        // The oldest cell of the row that stays: a delete marker goes once
        // nothing older than it is left to hide.
        let mut oldest_kept: Option<i64> = None;
        for (key, _) in cells {
            let cell = self.layout.decode_key(key)?;
            if cell.family == MARK_FAMILY {
                if oldest_kept.is_none_or(|oldest| oldest >= cell.timestamp) {
                    out.plan.deletes.insert((group, key.to_vec()));
                    out.removed += 1;
                }
                continue;
            }
            let same_column = column
                .as_ref()
                .is_some_and(|(f, q)| *f == cell.family && q.as_slice() == &*cell.qualifier);
            if !same_column {
                column = Some((cell.family, cell.qualifier.to_vec()));
                index = 0;
            }
            index += 1;
            let hidden = match self.layout.family_by_id(cell.family) {
                None => Hidden::ByGc,
                Some(family) => {
                    let gc = match judge.override_policy {
                        Some((id, policy)) if id == cell.family => policy,
                        _ => family.gc,
                    };
                    family.hidden_by(&gc, &cell.qualifier, index, cell.timestamp, judge.now)
                }
            };
            if hidden == Hidden::No {
                oldest_kept = Some(oldest_kept.map_or(cell.timestamp, |t| t.min(cell.timestamp)));
                continue;
            }
            out.plan.deletes.insert((group, key.to_vec()));
            out.removed += 1;
            let keep_alive = hidden == Hidden::Dropped
                && !marks.covers(cell.family, &cell.qualifier, cell.timestamp);
            if let Some(marker) = marker.filter(|_| keep_alive) {
                let row = &row_part[self.layout.prefix.len()..];
                let row = crate::keys::KeyReader::new(row).bytes()?;
                let marker_key =
                    CellKey::encode(&self.layout.prefix, &row, marker.id, b"", cell.timestamp)?;
                out.plan
                    .puts
                    .insert(marker_key, (marker.group, Cow::Borrowed(&[])));
            }
        }
        Ok(out)
    }

    /// Rewrites the chunks of `rows` (row parts) of group `group` through
    /// `check`, each row judged again under its lock. Returns the cells
    /// removed, or `None` when the check ended the pass.
    fn apply_compaction(
        &self,
        group: usize,
        rows: &[Vec<u8>],
        judge: Judge,
        check: LayoutCheck<'_>,
    ) -> Result<Option<u64>> {
        if rows.is_empty() {
            return Ok(Some(0));
        }
        let prefix_len = self.layout.prefix.len();
        let mut removed = 0;
        let applied = check(&self.layout, &mut || {
            let salt = self.layout.lock_salt();
            let _locks = self.engine.locks.write_all(
                rows.iter()
                    .map(|row| self.engine.locks.stripe(salt, &row[prefix_len..])),
            );
            // Compaction removes only what reads hide already, so a crash
            // that loses a pass loses nothing a reader could see: its
            // batches reach the disk with the next flush.
            let mut batch = WriteBatch::with_durability(Durability::Eventual);
            removed = 0;
            for row_part in rows {
                let cells = self.cells_with_prefix(group, row_part)?;
                let row = self.compaction_plan(group, row_part, &cells, judge)?;
                removed += row.removed;
                let key = crate::keys::KeyReader::new(&row_part[prefix_len..]).bytes()?;
                self.add_to_batch(&key, &row.plan, None, &mut batch)?;
            }
            Ok(self.engine.storage.apply(batch)?)
        })?;
        Ok(applied.then_some(removed as u64))
    }
}

/// What compaction does to one row.
#[derive(Default)]
struct RowCompaction {
    plan: RowPlan<'static>,
    removed: usize,
}
