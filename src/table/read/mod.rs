//! The read path: deciding which stored cells a read returns (garbage
//! collection, delete markers and the read filter, [`Selector`]),
//! collecting one row's cells from the cursors of its groups, point reads
//! and row pages, and the public row iterator. The scan over many rows is
//! in [`scanner`](crate::table::scanner).

use std::borrow::Cow;
use std::ops::Bound;

use crate::error::Result;
use crate::keys::{prefix_successor, CellKey};
use std::sync::Arc;

use crate::storage::Bytes;
use crate::table::chunks::{CellCursor, StoredCell};
use crate::table::filter::{Filter, QualifierFilter, ResumeToken, RowRange, RowSet};
use crate::table::kept::KeptCells;
use crate::table::layout::{Layout, Marks, MARK_FAMILY};
use crate::table::selector::{marks_until, Selector};
use crate::table::{Cell, Row, RowRef, TableError, TableStore};

pub use crate::table::cell::{RawCell, RawRow};

/// A key range `[lo, hi)` of a tree.
#[derive(Debug, Clone)]
pub(super) struct KeyRange {
    pub(super) lo: Vec<u8>,
    pub(super) hi: Option<Vec<u8>>,
}

/// Turns a row set into sorted, disjoint key ranges.
pub(super) fn key_ranges(prefix: &[u8], rows: &RowSet) -> Vec<KeyRange> {
    let end_of_prefix = prefix_successor(prefix);
    let row_start = |key: &[u8]| CellKey::row_prefix(prefix, key);
    let after_row = |key: &[u8]| prefix_successor(&row_start(key));
    let mut ranges: Vec<KeyRange> = rows
        .keys
        .iter()
        .map(|k| KeyRange {
            lo: row_start(k),
            hi: after_row(k),
        })
        .collect();
    for RowRange { start, end } in &rows.ranges {
        let lo = match start {
            Bound::Included(k) => row_start(k),
            Bound::Excluded(k) => after_row(k).unwrap_or_else(|| row_start(k)),
            Bound::Unbounded => prefix.to_vec(),
        };
        let hi = match end {
            Bound::Included(k) => after_row(k),
            Bound::Excluded(k) => Some(row_start(k)),
            Bound::Unbounded => end_of_prefix.clone(),
        };
        ranges.push(KeyRange { lo, hi });
    }
    ranges.retain(|r| r.hi.as_ref().is_none_or(|hi| r.lo < *hi));
    ranges.sort_by(|a, b| a.lo.cmp(&b.lo));
    let mut merged: Vec<KeyRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if last.hi.as_ref().is_none_or(|hi| range.lo <= *hi) => {
                last.hi = match (&last.hi, range.hi) {
                    (None, _) | (_, None) => None,
                    (Some(a), Some(b)) => Some(if *a > b { a.clone() } else { b }),
                };
            }
            _ => merged.push(range),
        }
    }
    merged
}

impl KeyRange {
    /// A cursor over this range of group `group`, returning the cells of
    /// the families `keep` keeps.
    pub(super) fn cursor(
        &self,
        layout: &Arc<Layout>,
        group: usize,
        reverse: bool,
        keep: &Option<KeptCells>,
    ) -> Result<CellCursor> {
        let tree = &layout.groups[group].tree;
        let (lo, hi) = (self.lo.clone(), self.hi.clone());
        CellCursor::open_keeping(layout, tree, lo, hi, reverse, keep.clone())
    }
}

/// Versions of one column buffered before a forward read checks whether
/// the rest of the column can be skipped: reading a row's delete markers
/// costs a seek, worth it only for a column with many versions.
const SKIP_CHECK_VERSIONS: usize = 32;

/// A stored cell key without its timestamp: every version of one column
/// shares it. `None` for a key too short to be a cell key.
fn column_part(key: &[u8]) -> Option<&[u8]> {
    key.len().checked_sub(8).map(|end| &key[..end])
}

/// `part` (decoded from `key`) as bytes sharing `key`'s memory when it is
/// stored verbatim, or a copy when decoding unescaped it.
fn shared_part(key: &Bytes, part: Cow<'_, [u8]>) -> Bytes {
    match part {
        Cow::Borrowed(slice) => {
            let offset = slice.as_ptr() as usize - key.as_ptr() as usize;
            key.slice(offset, slice.len())
        }
        Cow::Owned(copy) => Bytes::from(copy),
    }
}

/// The cursor with the next key in scan order.
pub(super) fn next_cursor(cursors: &[CellCursor], reverse: bool) -> Option<usize> {
    let mut best: Option<(usize, &[u8])> = None;
    for (at, cursor) in cursors.iter().enumerate() {
        if let Some((key, _)) = &cursor.head {
            let better = match best {
                None => true,
                Some((_, b)) => (key.as_ref() < b) != reverse,
            };
            if better {
                best = Some((at, key.as_ref()));
            }
        }
    }
    best.map(|(at, _)| at)
}

/// The groups a filter needs to read.
pub(super) fn groups_for(layout: &Layout, filter: &Filter) -> Vec<usize> {
    let mut groups: Vec<usize> = layout
        .families
        .iter()
        .filter(|f| filter.families.as_ref().is_none_or(|s| s.contains(&f.name)))
        .map(|f| f.group)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// The cells a read with `filter` looks at (`None`: all): those of the
/// families it asks for and, for an exact qualifier filter, of those
/// qualifiers. Other cells cannot change what it returns, so its cursors
/// skip them.
pub(super) fn kept_cells(layout: &Layout, filter: &Filter) -> Option<KeptCells> {
    // Only exact qualifiers are pruned while decoding. Not when the empty
    // qualifier is asked for: a row whose only cells are of dropped columns
    // reads as a row marker under it, whatever their qualifiers.
    let qualifiers = match &filter.qualifiers {
        QualifierFilter::Exact(set) if !set.contains(&b""[..]) => Some(set),
        _ => None,
    };
    if filter.families.is_none() && qualifiers.is_none() {
        return None;
    }
    let families = layout
        .families
        .iter()
        .filter(|f| filter.families.as_ref().is_none_or(|w| w.contains(&f.name)))
        .map(|f| (f.id, qualifiers.map(|set| set.iter().cloned().collect())));
    Some(KeptCells::columns(families, false))
}

impl TableStore {
    /// A read's error as the reader can act on it: a read of a table that
    /// another session dropped meanwhile fails in storage (the table's
    /// tree is gone), which is reported as the drop.
    pub(super) fn read_error(&self, error: crate::Error) -> crate::Error {
        let dropped = matches!(error, crate::Error::Storage(_))
            && self.layout.is_superseded()
            && self
                .layout
                .groups
                .first()
                .is_some_and(|g| !self.engine.storage.contains_tree(&g.tree));
        if dropped {
            TableError::DroppedDuringRead {
                table: self.layout.name.clone(),
            }
            .into()
        } else {
            error
        }
    }

    /// Takes the stored entries of the row whose keys start with `row_enc`
    /// from the cursors, in scan order. Reading forward, once a column has
    /// [`SKIP_CHECK_VERSIONS`] versions buffered and the filter or the GC
    /// policy hides every older one (only the newest N are read, or kept),
    /// the cursor seeks past the rest of the column: the latest view of a
    /// cell with a million versions reads a few of them.
    ///
    /// Appends to `raw` and stops after `budget` entries: `true` when the
    /// row ended.
    #[expect(
        clippy::too_many_arguments,
        reason = "the state of one row read, passed down from the scanner"
    )]
    pub(super) fn collect_row(
        &self,
        cursors: &mut [CellCursor],
        row_enc: &[u8],
        reverse: bool,
        filter: &Filter,
        now: i64,
        raw: &mut Vec<(Bytes, Bytes)>,
        budget: usize,
    ) -> Result<bool> {
        let mut taken = 0usize;
        // The column of the last entry and how many of its versions are
        // buffered; the row's delete markers once they were needed.
        let mut run = 0usize;
        let mut marks: Option<Marks> = None;
        while let Some(at) = next_cursor(cursors, reverse) {
            let cursor = &mut cursors[at];
            match &cursor.head {
                Some((key, _)) if key.starts_with(row_enc) => {}
                _ => break,
            }
            if taken == budget {
                return Ok(false);
            }
            taken += 1;
            let Some(entry) = cursor.head.take() else {
                break;
            };
            let same_column = raw
                .last()
                .is_some_and(|(last, _)| column_part(last) == column_part(&entry.0));
            run = if same_column { run + 1 } else { 1 };
            raw.push(entry);
            cursor.advance()?;
            // Checked at 32, 64, 128, … versions: linear work in all.
            if reverse || run < SKIP_CHECK_VERSIONS || !run.is_power_of_two() {
                continue;
            }
            let column = &raw[raw.len() - run..];
            let Some(column_prefix) = column_part(&column[0].0) else {
                continue;
            };
            let row_len = row_enc.len();
            let first = self.layout.decode_column(&column[0].0, row_len)?;
            if first.family == MARK_FAMILY {
                continue;
            }
            if marks.is_none() {
                marks = Some(self.row_marks(row_enc, filter)?);
            }
            let Some(marks) = &marks else {
                continue;
            };
            let mut selector = Selector::new(&self.layout, filter, now);
            for (key, value) in column {
                let cell = self.layout.decode_column(key, row_len)?;
                let deleted = marks.covers(cell.family, &cell.qualifier, cell.timestamp);
                selector.offer(&cell, value, deleted);
            }
            if selector.rest_of_column_hidden() {
                if let Some(next) = prefix_successor(column_prefix) {
                    cursors[at].seek(next)?;
                }
            }
        }
        Ok(true)
    }

    /// The delete markers of the row `row_enc` (prefix included) that a
    /// read with `filter` sees.
    fn row_marks(&self, row_enc: &[u8], filter: &Filter) -> Result<Marks> {
        let mut marks = Marks::default();
        let mut marks_prefix = row_enc.to_vec();
        crate::keys::put_u16(&mut marks_prefix, MARK_FAMILY);
        for g in groups_for(&self.layout, filter) {
            for (k, _) in self.cells_with_prefix(g, &marks_prefix)? {
                let cell = self.layout.decode_column(&k, row_enc.len())?;
                marks.add(&cell.qualifier, cell.timestamp, marks_until(filter));
            }
        }
        Ok(marks)
    }

    /// Every stored cell of one row in group `group` whose key starts with
    /// `scope` (the row part, or a family or column prefix in it).
    pub(crate) fn cells_with_prefix(&self, group: usize, scope: &[u8]) -> Result<Vec<StoredCell>> {
        let tree = &self.layout.groups[group].tree;
        crate::table::chunks::cells_with_prefix(&self.layout, tree, scope)
    }

    /// Applies the selector, then the per-row offset and limit, to the
    /// stored cells of one row (in stored order; `row_len`: the length of
    /// their keys' row part), appending the cells selected to `cells`
    /// (empty when called). The stored cells are taken out of `raw`, so
    /// that the values selected move instead of being shared again;
    /// `qualifier` is memory a reader of many rows keeps for the selector.
    pub(crate) fn select(
        &self,
        raw: &mut Vec<(Bytes, Bytes)>,
        row_len: usize,
        filter: &Filter,
        now: i64,
        cells: &mut Vec<RawCell>,
        qualifier: &mut Vec<u8>,
    ) -> Result<()> {
        let buffer = std::mem::take(qualifier);
        let mut selector = Selector::reusing(&self.layout, filter, now, buffer);
        let mut skip = filter.cells_per_row_offset;
        let limit = filter.cells_per_row_limit.unwrap_or(usize::MAX);
        // A row's delete markers sort after its cells: gather them first.
        let mut marks = Marks::default();
        let mark_family = MARK_FAMILY.to_be_bytes();
        for (key, _) in raw.iter().rev() {
            if key.get(row_len..row_len + 2) != Some(&mark_family[..]) {
                break;
            }
            let cell = self.layout.decode_column(key, row_len)?;
            marks.add(&cell.qualifier, cell.timestamp, marks_until(filter));
        }
        for (key, value) in raw.drain(..) {
            if cells.len() >= limit {
                break;
            }
            let cell = self.layout.decode_column(&key, row_len)?;
            if cell.family == MARK_FAMILY {
                continue;
            }
            let deleted = marks.covers(cell.family, &cell.qualifier, cell.timestamp);
            if !selector.offer(&cell, &value, deleted) {
                continue;
            }
            if skip > 0 {
                skip -= 1;
                continue;
            }
            cells.push(RawCell {
                family: cell.family,
                qualifier: shared_part(&key, cell.qualifier),
                timestamp: cell.timestamp,
                value,
            });
        }
        if cells.is_empty() {
            if let Some(marker) = self.virtual_marker(&selector) {
                cells.push(marker);
            }
        }
        *qualifier = selector.into_buffer();
        Ok(())
    }

    /// A row whose only cells are of dropped columns keeps existing: it
    /// reads as having a row marker (an empty cell under the empty
    /// qualifier of the marker family) until compaction writes a real one.
    fn virtual_marker(&self, selector: &Selector<'_>) -> Option<RawCell> {
        let timestamp = selector.dropped_seen()?;
        let family = self.layout.family_by_id(self.layout.marker_family?)?;
        let filter = selector.filter();
        let wanted = filter
            .families
            .as_ref()
            .is_none_or(|set| set.contains(&family.name))
            && filter.qualifiers.matches(b"")
            && filter
                .time_range
                .as_ref()
                .is_none_or(|r| r.contains(&timestamp))
            && filter.value.as_ref().is_none_or(|v| v.matches(b""));
        wanted.then(|| RawCell {
            family: family.id,
            qualifier: Bytes::default(),
            timestamp,
            value: Bytes::from(&b""[..]),
        })
    }

    /// Converts family ids to names.
    pub(crate) fn to_row(&self, raw: RawRow) -> Row {
        let cells = RowRef::new(&self.layout, &raw)
            .cells()
            .map(|c| c.to_cell())
            .collect();
        Row {
            key: raw.key,
            cells,
        }
    }

    /// The stored cells of one row, read from fresh cursors. The caller
    /// holds the row's lock.
    pub(crate) fn read_locked(&self, key: &[u8], filter: &Filter) -> Result<Vec<RawCell>> {
        let row_enc = CellKey::row_prefix(&self.layout.prefix, key);
        self.read_row_locked(&row_enc, filter, crate::clock::wall_micros())
    }

    /// The cells `filter` selects at time `now` of the row `row_enc` (its
    /// row part, prefix included), read from fresh cursors that skip the
    /// versions the filter hides. The caller holds the row's lock.
    pub(super) fn read_row_locked(
        &self,
        row_enc: &[u8],
        filter: &Filter,
        now: i64,
    ) -> Result<Vec<RawCell>> {
        let range = KeyRange {
            hi: prefix_successor(row_enc),
            lo: row_enc.to_vec(),
        };
        let keep = kept_cells(&self.layout, filter);
        let mut cursors = groups_for(&self.layout, filter)
            .into_iter()
            .map(|g| range.cursor(&self.layout, g, false, &keep))
            .collect::<Result<Vec<_>>>()?;
        let mut raw = Vec::new();
        self.collect_row(
            &mut cursors,
            row_enc,
            false,
            filter,
            now,
            &mut raw,
            usize::MAX,
        )?;
        let mut cells = Vec::new();
        self.select(
            &mut raw,
            row_enc.len(),
            filter,
            now,
            &mut cells,
            &mut Vec::new(),
        )?;
        Ok(cells)
    }

    /// Reads up to `page_size` cells of one row after `resume`, for rows too
    /// wide for one read. Returns the cells and, if the page is full, a token
    /// for the next page. The filter's per-row offset and limit do not apply.
    pub fn read_row_page(
        &self,
        key: &[u8],
        filter: &Filter,
        page_size: usize,
        resume: Option<&ResumeToken>,
    ) -> Result<(Vec<Cell>, Option<ResumeToken>)> {
        // Storage errors of a table dropped meanwhile are reported as that.
        let read = || -> Result<(Vec<Cell>, Option<ResumeToken>)> {
            self.check_filter(filter)?;
            if page_size == 0 {
                return Err(crate::table::TableError::InvalidArgument {
                    table: self.layout.name.clone(),
                    message: "a page holds at least one cell".into(),
                }
                .into());
            }
            let prefix = &self.layout.prefix;
            let row_enc = CellKey::row_prefix(prefix, key);
            let lo = match resume {
                Some(token) => CellKey::column_prefix(prefix, key, token.family, &token.qualifier),
                None => row_enc.clone(),
            };
            let hi = prefix_successor(&row_enc);
            let stripe = self
                .engine
                .locks
                .stripe(self.layout.lock_salt(), &row_enc[prefix.len()..]);
            let _guard = self.engine.locks.read(stripe);
            let keep = kept_cells(&self.layout, filter);
            let mut cursors = groups_for(&self.layout, filter)
                .into_iter()
                .map(|g| {
                    let tree = &self.layout.groups[g].tree;
                    CellCursor::open_inside_row(&self.layout, tree, &lo, hi.clone(), keep.clone())
                })
                .collect::<Result<Vec<_>>>()?;
            let marks = self.row_marks(&row_enc, filter)?;
            let mut selector = Selector::new(&self.layout, filter, crate::clock::wall_micros());
            let mut page = Vec::new();
            while let Some(at) = next_cursor(&cursors, false) {
                let Some((k, value)) = cursors[at].head.take() else {
                    break;
                };
                cursors[at].advance()?;
                let cell = self.layout.decode_column(&k, row_enc.len())?;
                if cell.family == MARK_FAMILY {
                    continue;
                }
                let deleted = marks.covers(cell.family, &cell.qualifier, cell.timestamp);
                if !selector.offer(&cell, &value, deleted) {
                    continue;
                }
                let at_or_before_token = resume.is_some_and(|t| {
                    (cell.family, cell.qualifier.as_ref()) == (t.family, t.qualifier.as_slice())
                        && cell.timestamp >= t.timestamp
                });
                if at_or_before_token {
                    continue;
                }
                if page.len() == page_size {
                    let last: &RawCell = &page[page_size - 1];
                    let token = ResumeToken {
                        family: last.family,
                        qualifier: last.qualifier.to_vec(),
                        timestamp: last.timestamp,
                    };
                    let row = self.to_row(RawRow {
                        key: key.to_vec(),
                        cells: page,
                    });
                    return Ok((row.cells, Some(token)));
                }
                page.push(RawCell {
                    family: cell.family,
                    qualifier: shared_part(&k, cell.qualifier),
                    timestamp: cell.timestamp,
                    value,
                });
            }
            let row = self.to_row(RawRow {
                key: key.to_vec(),
                cells: page,
            });
            Ok((row.cells, None))
        };
        read().map_err(|e| self.read_error(e))
    }
}

#[cfg(test)]
mod tests;
