//! The read path: merging the locality groups of a table into rows,
//! masking what garbage collection hides, and applying read filters.
//!
//! Cells of one row sit next to each other in every group's key space (the
//! row key is the first key component), so a scan merges one cursor per needed group by key
//! and cuts rows at row-key boundaries. A row's cells are collected while
//! the row's lock is held shared; if any write completed since the cursors
//! were positioned (the write epoch of one of its groups moved), the cursors are
//! re-positioned at the row first, so that no part of the row comes from a
//! page copy older than the lock. Of a very wide row only the first
//! entries are read under the lock; the rest is read without it and kept
//! only if no writer took the row's lock meanwhile.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::ops::Bound;

use crate::error::Result;
use crate::keys::{prefix_successor, CellKey, ColumnKey, KeyReader};
use std::sync::Arc;

use crate::storage::Bytes;
use crate::table::chunks::{CellCursor, KeptCells, StoredCell};
use crate::table::filter::{Filter, QualifierFilter, ReadOptions, ResumeToken, RowRange, RowSet};
use crate::table::layout::{Hidden, Layout, Marks, MARK_FAMILY};
use crate::table::spec::GcPolicy;
use crate::table::{Cell, Row, RowRef, TableError, TableStore};

/// A cell as the engine passes it around: family by id, value unconverted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawCell {
    /// The family id.
    pub family: u16,
    /// The qualifier (shares the memory of the keys of the chunk it was
    /// decoded from, which it keeps alive).
    pub qualifier: Bytes,
    /// Microseconds.
    pub timestamp: i64,
    /// The value.
    pub value: Bytes,
}

/// A row as the engine passes it around.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawRow {
    /// The row key.
    pub key: Vec<u8>,
    /// The cells, in family id, qualifier, newest-first order.
    pub cells: Vec<RawCell>,
}

impl RawRow {
    /// Bytes of its key, qualifiers and values.
    pub fn bytes(&self) -> usize {
        self.key.len()
            + self
                .cells
                .iter()
                .map(|c| c.qualifier.len() + c.value.len())
                .sum::<usize>()
    }
}

/// Whether the version at 1-based position `index` (newest first) with
/// timestamp `ts` survives `gc` at time `now`.
pub fn gc_visible(gc: &GcPolicy, index: usize, ts: i64, now: i64) -> bool {
    if gc.max_versions.is_some_and(|max| index > max as usize) {
        return false;
    }
    if gc
        .max_age_micros
        .is_some_and(|age| ts < now.saturating_sub(age))
    {
        return false;
    }
    true
}

/// Decides, cell by cell in stored order within one row, which cells a read
/// returns (steps 1–4 of [`Filter`]; offset and limit are the caller's).
pub struct Selector<'a> {
    layout: &'a Layout,
    filter: &'a Filter,
    now: i64,
    family: Option<u16>,
    /// Whether the filter's family set holds the family of the last cell
    /// offered (decided once per family, not per cell).
    family_wanted: bool,
    qualifier: Vec<u8>,
    stored: usize,
    kept: usize,
    /// The newest timestamp of a cell of a dropped column that the family
    /// filter would have read; see [`Layout::marker_family`].
    dropped_seen: Option<i64>,
}

impl<'a> Selector<'a> {
    /// A selector for reads of `layout` at time `now`.
    pub fn new(layout: &'a Layout, filter: &'a Filter, now: i64) -> Self {
        Self {
            layout,
            filter,
            now,
            family: None,
            family_wanted: false,
            qualifier: Vec::new(),
            stored: 0,
            kept: 0,
            dropped_seen: None,
        }
    }

    fn in_time_range(&self, ts: i64) -> bool {
        self.filter
            .time_range
            .as_ref()
            .is_none_or(|r| r.contains(&ts))
    }

    /// Whether every older version of the column last offered is hidden
    /// whatever it holds: the filter's newest N are taken, or the family's
    /// GC keeps no more versions.
    pub fn rest_of_column_hidden(&self) -> bool {
        let Some(family) = self.family.and_then(|id| self.layout.family_by_id(id)) else {
            return false;
        };
        self.filter.latest_versions.is_some_and(|n| self.kept >= n)
            || family
                .gc
                .max_versions
                .is_some_and(|n| self.stored >= n as usize)
    }

    /// Whether the cell is returned; `deleted`: a delete marker hides it
    /// (it still counts as a stored version for GC).
    pub fn offer(&mut self, key: &ColumnKey<'_>, value: &[u8], deleted: bool) -> bool {
        let Some(family) = self.layout.family_by_id(key.family) else {
            // A dropped family whose cells are not purged yet: hidden. Its
            // policy went with it, so its cells keep no row alive; dropping
            // a family gives its visible rows a marker first.
            return false;
        };
        let new_family = self.family != Some(key.family);
        if new_family {
            self.family_wanted = self
                .filter
                .families
                .as_ref()
                .is_none_or(|set| set.contains(&family.name));
            self.family = Some(key.family);
        }
        if new_family || self.qualifier != *key.qualifier {
            self.qualifier.clear();
            self.qualifier.extend_from_slice(&key.qualifier);
            self.stored = 0;
            self.kept = 0;
        }
        self.stored += 1;
        if deleted {
            return false;
        }
        let filter = self.filter;
        let family_wanted = self.family_wanted;
        match family.hidden(&key.qualifier, self.stored, key.timestamp, self.now) {
            Hidden::No => {}
            Hidden::ByGc => return false,
            Hidden::Dropped => {
                if family_wanted && self.in_time_range(key.timestamp) {
                    self.dropped_seen = self.dropped_seen.max(Some(key.timestamp));
                }
                return false;
            }
        }
        if !family_wanted
            || !filter.qualifiers.matches(&key.qualifier)
            || filter
                .time_range
                .as_ref()
                .is_some_and(|r| !r.contains(&key.timestamp))
        {
            return false;
        }
        self.kept += 1;
        if filter.latest_versions.is_some_and(|n| self.kept > n) {
            return false;
        }
        filter.value.as_ref().is_none_or(|v| v.matches(value))
    }
}

/// The time from which a read no longer sees delete markers: a read of the
/// past ignores later deletes.
fn marks_until(filter: &Filter) -> Option<i64> {
    filter.as_of.map(|at| at.saturating_add(1))
}

/// A key range `[lo, hi)` of a tree.
#[derive(Debug, Clone)]
struct KeyRange {
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
}

/// Turns a row set into sorted, disjoint key ranges.
fn key_ranges(prefix: &[u8], rows: &RowSet) -> Vec<KeyRange> {
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
    fn cursor(
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

/// Chunks a scan's cursor reads itself before it reads the rest of its
/// range on a thread of its own ([`ReadOptions::read_ahead`]): a thousand
/// chunks take about a millisecond, against tens of microseconds to start
/// a thread.
const READ_AHEAD_AFTER_CHUNKS: usize = 1024;

/// Versions of one column buffered before a forward read checks whether
/// the rest of the column can be skipped: reading a row's delete markers
/// costs a seek, worth it only for a column with many versions.
const SKIP_CHECK_VERSIONS: usize = 32;

/// Entries of a row a scan reads while holding the row's lock; the rest of
/// a wider row is read without it and checked afterwards
/// ([`Scanner::rest_of_wide_row`]).
const LOCKED_ROW_ENTRIES: usize = 4096;

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
fn next_cursor(cursors: &[CellCursor], reverse: bool) -> Option<usize> {
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
fn groups_for(layout: &Layout, filter: &Filter) -> Vec<usize> {
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
fn kept_cells(layout: &Layout, filter: &Filter) -> Option<KeptCells> {
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

/// A scan over a row set, yielding rows in key order (or reversed).
pub struct Scanner {
    store: TableStore,
    options: ReadOptions,
    now: i64,
    ranges: VecDeque<KeyRange>,
    position: Position,
    rows_left: Option<usize>,
    /// The last row's encoded key and stored cells: buffers kept to reuse
    /// their memory.
    row_enc: Vec<u8>,
    raw: Vec<(Bytes, Bytes)>,
    /// The last row read, lent by [`Scanner::next_raw`]; its buffers are
    /// reused for the next.
    row: RawRow,
    /// Asked before each row that the filter leaves empty: `true` ends the
    /// scan (its consumer went away), so a scan that skips rows does not
    /// run on to the end of the table unread.
    stop: Option<Box<dyn Fn() -> bool + Send>>,
}

/// Where a scan is: its cursors, one per group it reads, over the key
/// range it is in. Kept apart from the [`TableStore`] so that the scan's
/// per-row loop borrows the store instead of cloning its `Arc`s for every
/// row (their shared counts were a twentieth of a full scan's time).
struct Position {
    groups: Vec<usize>,
    keep: Option<KeptCells>,
    current: Option<KeyRange>,
    cursors: Vec<CellCursor>,
    /// The groups' write epoch when the cursors were positioned.
    epoch: u64,
}

impl Position {
    /// The write epochs of the locality groups this scan reads, summed: it
    /// changes when a batch wrote one of them.
    fn write_epoch(&self, store: &TableStore) -> u64 {
        self.groups
            .iter()
            .map(|&g| store.layout.groups[g].tree.write_epoch())
            .fold(0, u64::wrapping_add)
    }

    fn open(&mut self, store: &TableStore, options: &ReadOptions, range: KeyRange) -> Result<()> {
        self.cursors.clear();
        for &g in &self.groups {
            let mut cursor = range.cursor(&store.layout, g, options.reverse, &self.keep)?;
            if options.read_ahead {
                cursor.read_ahead_after(READ_AHEAD_AFTER_CHUNKS);
            }
            self.cursors.push(cursor);
        }
        self.current = Some(range);
        Ok(())
    }

    /// Opens fresh cursors at the row `row_enc` within the current range;
    /// `false` when the row is gone.
    fn reposition_at(
        &mut self,
        store: &TableStore,
        options: &ReadOptions,
        row_enc: &[u8],
    ) -> Result<bool> {
        let Some(current) = self.current.clone() else {
            return Ok(false);
        };
        let narrowed = if options.reverse {
            KeyRange {
                lo: current.lo,
                hi: prefix_successor(row_enc),
            }
        } else {
            KeyRange {
                lo: row_enc.to_vec(),
                hi: current.hi,
            }
        };
        self.open(store, options, narrowed)?;
        Ok(next_cursor(&self.cursors, options.reverse)
            .and_then(|at| self.cursors[at].head.as_ref())
            .is_some_and(|(k, _)| k.starts_with(row_enc)))
    }

    /// Appends up to `budget` more entries of the row `row_enc` from the
    /// cursors to `raw`; `true` when the row ended.
    fn collect(
        &mut self,
        store: &TableStore,
        options: &ReadOptions,
        now: i64,
        row_enc: &[u8],
        raw: &mut Vec<(Bytes, Bytes)>,
        budget: usize,
    ) -> Result<bool> {
        let (reverse, filter) = (options.reverse, &options.filter);
        store.collect_row(
            &mut self.cursors,
            row_enc,
            reverse,
            filter,
            now,
            raw,
            budget,
        )
    }
}

impl Scanner {
    /// The same scan, decoding only the cells `keep` keeps of the groups it
    /// reads (the filter still decides which cells it returns).
    pub(crate) fn keeping(mut self, keep: KeptCells) -> Self {
        self.position.keep = Some(keep);
        self
    }

    /// The same scan, ending early once `stop` returns `true`.
    pub(crate) fn with_stop(mut self, stop: impl Fn() -> bool + Send + 'static) -> Self {
        self.stop = Some(Box::new(stop));
        self
    }

    pub(crate) fn new(store: TableStore, rows: &RowSet, options: ReadOptions, now: i64) -> Self {
        let layout = &store.layout;
        let mut ranges: VecDeque<KeyRange> = key_ranges(&layout.prefix, rows).into();
        if options.reverse {
            ranges = ranges.into_iter().rev().collect();
        }
        let position = Position {
            groups: groups_for(layout, &options.filter),
            keep: kept_cells(layout, &options.filter),
            current: None,
            cursors: Vec::new(),
            epoch: 0,
        };
        let rows_left = options.row_limit;
        Scanner {
            store,
            options,
            now,
            ranges,
            position,
            rows_left,
            row_enc: Vec::new(),
            raw: Vec::new(),
            row: RawRow::default(),
            stop: None,
        }
    }

    /// The next row with at least one selected cell.
    pub fn next_row(&mut self) -> Result<Option<RawRow>> {
        if self.next_raw()?.is_none() {
            return Ok(None);
        }
        Ok(Some(std::mem::take(&mut self.row)))
    }

    /// The next row with at least one selected cell, lent until the next
    /// call: a scan that reads each row once reuses one row's memory
    /// instead of allocating a key and a cell list per row.
    pub fn next_raw(&mut self) -> Result<Option<&RawRow>> {
        match self.advance() {
            Ok(true) => Ok(Some(&self.row)),
            Ok(false) => Ok(None),
            Err(e) => Err(self.store.read_error(e)),
        }
    }

    /// Reads the next row into `self.row`; `false` at the end.
    fn advance(&mut self) -> Result<bool> {
        let Scanner {
            store,
            options,
            now,
            ranges,
            position,
            rows_left,
            row_enc: row_buffer,
            raw: raw_buffer,
            row,
            stop,
        } = self;
        let (now, reverse) = (*now, options.reverse);
        let prefix_len = store.layout.prefix.len();
        loop {
            if *rows_left == Some(0) {
                return Ok(false);
            }
            if position.current.is_none() {
                let Some(range) = ranges.pop_front() else {
                    return Ok(false);
                };
                // Read before the cursors open: a batch that completes in
                // between moves it, and the row is read again.
                position.epoch = position.write_epoch(store);
                position.open(store, options, range)?;
            }
            let Some(at) = next_cursor(&position.cursors, reverse) else {
                position.current = None;
                continue;
            };
            let Some((first_key, _)) = &position.cursors[at].head else {
                continue;
            };
            let row_len = store.layout.row_len(first_key)?;
            // The buffers of the last row, reused.
            let mut row_enc = std::mem::take(row_buffer);
            row_enc.clear();
            row_enc.extend_from_slice(&first_key[..row_len]);
            let mut raw = std::mem::take(raw_buffer);
            raw.clear();

            let stripe = store
                .engine
                .locks
                .stripe(store.layout.lock_salt(), &row_enc[prefix_len..]);
            let guard = store.engine.locks.read(stripe);
            let epoch = position.write_epoch(store);
            if epoch != position.epoch {
                // A write completed since the cursors were positioned: read
                // this row from fresh cursors, positioned under its lock.
                position.epoch = epoch;
                if !position.reposition_at(store, options, &row_enc)? {
                    *row_buffer = row_enc;
                    continue;
                }
            }
            let whole =
                position.collect(store, options, now, &row_enc, &mut raw, LOCKED_ROW_ENTRIES)?;
            let writers = guard.as_deref().copied();
            drop(guard);
            if !whole
                && !rest_of_wide_row(
                    store, options, now, position, &row_enc, stripe, writers, &mut raw,
                )?
            {
                *row_buffer = row_enc;
                continue;
            }
            if reverse {
                raw.reverse();
            }
            row.cells.clear();
            store.select(&raw, row_enc.len(), &options.filter, now, &mut row.cells)?;
            let pruned = position
                .cursors
                .iter_mut()
                .fold(false, |took, c| c.took_pruned(&row_enc) | took);
            if row.cells.is_empty() && pruned {
                // None of the cells kept is visible; the pruned ones decide
                // whether the row exists: the row as it is now, read again
                // with no cell pruned under its lock (a write may have
                // changed it since the first read).
                let _guard = store.engine.locks.read(stripe);
                row.cells = store.read_row_locked(&row_enc, &options.filter, now)?;
            }
            raw.clear();
            *raw_buffer = raw;
            if row.cells.is_empty() {
                *row_buffer = row_enc;
                if stop.as_ref().is_some_and(|stop| stop()) {
                    return Ok(false);
                }
                continue;
            }
            let key = KeyReader::new(&row_enc[prefix_len..]).bytes()?;
            row.key.clear();
            row.key.extend_from_slice(&key);
            *row_buffer = row_enc;
            if let Some(left) = rows_left {
                *left -= 1;
            }
            return Ok(true);
        }
    }
}

/// Reads the rest of a row wider than [`LOCKED_ROW_ENTRIES`] without its
/// lock, so its writers do not wait for the whole read, then takes the
/// lock again: if no writer took the row's stripe meanwhile (`writers`:
/// the stripe's count when the first part was read), the row is whole.
/// Otherwise it is read again from its start; the third time entirely
/// under the lock. `false` when the row is gone.
#[expect(
    clippy::too_many_arguments,
    reason = "the state of one row read, passed down from the scanner"
)]
fn rest_of_wide_row(
    store: &TableStore,
    options: &ReadOptions,
    now: i64,
    position: &mut Position,
    row_enc: &[u8],
    stripe: usize,
    mut writers: Option<u64>,
    raw: &mut Vec<(Bytes, Bytes)>,
) -> Result<bool> {
    let mut attempts = 0;
    loop {
        position.collect(store, options, now, row_enc, raw, usize::MAX)?;
        // `None`: this thread holds every row lock, so nothing wrote.
        let Some(before) = writers else {
            return Ok(true);
        };
        let guard = store.engine.locks.read(stripe);
        writers = guard.as_deref().copied();
        if writers == Some(before) {
            return Ok(true);
        }
        raw.clear();
        position.epoch = position.write_epoch(store);
        if !position.reposition_at(store, options, row_enc)? {
            return Ok(false);
        }
        attempts += 1;
        let budget = if attempts == 3 {
            usize::MAX
        } else {
            LOCKED_ROW_ENTRIES
        };
        if position.collect(store, options, now, row_enc, raw, budget)? {
            return Ok(true);
        }
    }
}

impl Iterator for Scanner {
    type Item = Result<RawRow>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_row().transpose()
    }
}

/// Rows of a read, with family names resolved.
pub struct RowIter {
    scanner: Scanner,
    error: Option<crate::Error>,
}

impl Iterator for RowIter {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.take_error() {
            return Some(Err(error));
        }
        let raw = self.scanner.next_row().transpose()?;
        Some(raw.map(|raw| self.scanner.store.to_row(raw)))
    }
}

impl RowIter {
    /// The next row, lent until the next call instead of returned: its
    /// cells are read in place, so a scan of many rows copies no key or
    /// cell (`next` copies each into a [`Row`]).
    ///
    /// ```
    /// # use widesql::*;
    /// # fn main() -> Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// # let table = db.default_dataset()?.create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?;
    /// for (key, n) in [("a", 1i64), ("b", 2), ("c", 3)] {
    ///     table.mutate_row(key.as_bytes(), &RowMutation::new().set("f", "n", n.to_be_bytes()))?;
    /// }
    /// let mut rows = table.read_rows(&RowSet::all(), ReadOptions::new())?;
    /// let mut sum = 0;
    /// while let Some(row) = rows.next_ref() {
    ///     if let Some(n) = row?.value("f", b"n") {
    ///         sum += i64::from_be_bytes(n.try_into().unwrap());
    ///     }
    /// }
    /// assert_eq!(sum, 6);
    /// # Ok(()) }
    /// ```
    pub fn next_ref(&mut self) -> Option<Result<RowRef<'_>>> {
        if let Some(error) = self.take_error() {
            return Some(Err(error));
        }
        match self.scanner.next_raw() {
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        }
        let scanner = &self.scanner;
        Some(Ok(RowRef::new(&scanner.store.layout, &scanner.row)))
    }

    /// The error found before the read began, once; the read then ends.
    fn take_error(&mut self) -> Option<crate::Error> {
        let error = self.error.take()?;
        self.scanner.rows_left = Some(0);
        Some(error)
    }
}

impl TableStore {
    /// A read's error as the reader can act on it: a read of a table that
    /// another session dropped meanwhile fails in storage (the table's
    /// tree is gone), which is reported as the drop.
    fn read_error(&self, error: crate::Error) -> crate::Error {
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
    #[allow(
        clippy::too_many_arguments,
        reason = "the state of one row read, passed down from the scanner"
    )]
    fn collect_row(
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
    /// (empty when called).
    pub(crate) fn select(
        &self,
        raw: &[(Bytes, Bytes)],
        row_len: usize,
        filter: &Filter,
        now: i64,
        cells: &mut Vec<RawCell>,
    ) -> Result<()> {
        let mut selector = Selector::new(&self.layout, filter, now);
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
        for (key, value) in raw {
            if cells.len() >= limit {
                break;
            }
            let cell = self.layout.decode_column(key, row_len)?;
            if cell.family == MARK_FAMILY {
                continue;
            }
            let deleted = marks.covers(cell.family, &cell.qualifier, cell.timestamp);
            if !selector.offer(&cell, value, deleted) {
                continue;
            }
            if skip > 0 {
                skip -= 1;
                continue;
            }
            cells.push(RawCell {
                family: cell.family,
                qualifier: shared_part(key, cell.qualifier),
                timestamp: cell.timestamp,
                value: value.clone(),
            });
        }
        if cells.is_empty() {
            if let Some(marker) = self.virtual_marker(&selector) {
                cells.push(marker);
            }
        }
        Ok(())
    }

    /// A row whose only cells are of dropped columns keeps existing: it
    /// reads as having a row marker (an empty cell under the empty
    /// qualifier of the marker family) until compaction writes a real one.
    fn virtual_marker(&self, selector: &Selector<'_>) -> Option<RawCell> {
        let timestamp = selector.dropped_seen?;
        let family = self.layout.family_by_id(self.layout.marker_family?)?;
        let filter = selector.filter;
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

    /// A scan over `rows` (engine form).
    pub(crate) fn scan(&self, rows: &RowSet, options: ReadOptions) -> Scanner {
        Scanner::new(self.clone(), rows, options, crate::clock::wall_micros())
    }

    /// Reads the rows of `rows`.
    pub fn read_rows(&self, rows: &RowSet, options: ReadOptions) -> RowIter {
        let error = self.check_filter(&options.filter).err();
        RowIter {
            scanner: self.scan(rows, options),
            error,
        }
    }

    /// Reads one row; `None` when no cell passes the filter.
    pub fn read_row(&self, key: &[u8], filter: &Filter) -> Result<Option<Row>> {
        self.check_filter(filter)?;
        let options = ReadOptions::new().with_filter(filter.clone());
        let raw = self.scan(&RowSet::key(key), options).next_row()?;
        Ok(raw.map(|raw| self.to_row(raw)))
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
    fn read_row_locked(&self, row_enc: &[u8], filter: &Filter, now: i64) -> Result<Vec<RawCell>> {
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
        self.select(&raw, row_enc.len(), filter, now, &mut cells)?;
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
