//! A scan over a row set: merging the locality groups of a table into rows
//! under their row locks.
//!
//! Cells of one row sit next to each other in every group's key space (the
//! row key is the first key component), so a scan merges one cursor per
//! needed group by key and cuts rows at row-key boundaries. A row's cells
//! are collected while the row's lock is held shared; if any write
//! completed since the cursors were positioned (the write epoch of one of
//! its groups moved), the cursors are re-positioned at the row first, so
//! that no part of the row comes from a page copy older than the lock. Of a
//! very wide row only the first entries are read under the lock; the rest
//! is read without it and kept only if no writer took the row's lock
//! meanwhile.

use std::collections::VecDeque;

use crate::error::Result;
use crate::keys::{prefix_successor, KeyReader};
use crate::storage::Bytes;
use crate::table::chunks::CellCursor;
use crate::table::filter::{Filter, ReadOptions, RowSet};
use crate::table::kept::KeptCells;
use crate::table::read::{groups_for, kept_cells, key_ranges, next_cursor, KeyRange, RawRow};
use crate::table::{Row, RowRef, TableStore};

/// Chunks a scan's cursor reads itself before it reads the rest of its
/// range on a thread of its own ([`ReadOptions::read_ahead`]): a thousand
/// chunks take about a millisecond, against tens of microseconds to start
/// a thread.
const READ_AHEAD_AFTER_CHUNKS: usize = 1024;

/// Entries of a row a scan reads while holding the row's lock; the rest of
/// a wider row is read without it and checked afterwards
/// ([`rest_of_wide_row`]).
const LOCKED_ROW_ENTRIES: usize = 4096;

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
    /// The selector's qualifier, kept between rows (see
    /// [`Selector::reusing`](crate::table::selector::Selector::reusing)).
    qualifier: Vec<u8>,
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
            qualifier: Vec::new(),
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
            qualifier,
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
            let cursor = &position.cursors[at];
            let Some((first_key, _)) = &cursor.head else {
                continue;
            };
            let row_len = cursor.head_row_len();
            debug_assert_eq!(store.layout.row_len(first_key).ok(), Some(row_len));
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
            store.select(
                &mut raw,
                row_enc.len(),
                &options.filter,
                now,
                &mut row.cells,
                qualifier,
            )?;
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
    /// A scan over `rows` (engine form).
    pub(crate) fn scan(&self, rows: &RowSet, options: ReadOptions) -> Scanner {
        self.scan_at(rows, options, None)
    }

    /// A scan over `rows` that judges `max_age` at `now` (µs), or by this
    /// process's clock when `None`.
    pub(crate) fn scan_at(&self, rows: &RowSet, options: ReadOptions, now: Option<i64>) -> Scanner {
        let now = now.unwrap_or_else(crate::clock::wall_micros);
        Scanner::new(self.clone(), rows, options, now)
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
}
