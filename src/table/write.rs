//! The write path: row mutations, bulk writes, read-modify-write and
//! check-and-mutate.
//!
//! A mutation is first *planned* into an overlay of puts and deletes (which
//! is where every input error is found), then applied as one storage batch
//! while the row's lock is held. Nothing is written when any part of a
//! mutation is invalid.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, Range};

use crate::error::{Error, Result};
use crate::keys::{prefix_successor, CellKey, KeyReader};
use crate::storage::{Durability, WriteBatch};
use crate::table::chunks::{self, CellChanges};
use crate::table::filter::Filter;
use crate::table::layout::FamilyLayout;
use crate::table::layout::Hidden;
use crate::table::layout::{mark_qualifier, Marks, MARK_FAMILY};
use crate::table::mutation::{DeleteScope, Mutation, ReadModifyWriteRule, RowMutation};
use crate::table::{Cell, Row, TableError, TableStore};

/// The longest row key accepted (as Bigtable).
pub const MAX_ROW_KEY_LEN: usize = 4 * 1024;
/// The longest qualifier accepted (as Bigtable).
pub const MAX_QUALIFIER_LEN: usize = 16 * 1024;
/// The largest cell value accepted (as Bigtable).
pub const MAX_VALUE_LEN: usize = 100 * 1024 * 1024;
/// Rows per storage batch in bulk writes.
pub(crate) const BULK_CHUNK_ROWS: usize = 1000;
/// The most rows one SQL statement applies as one atomic storage batch,
/// unless [`crate::DbOptions::with_statement_batch_rows`] says otherwise.
///
/// sled holds an atomic batch in memory several times over, and more than
/// linearly in its size: an UPDATE of every row of a 60,000-row table took
/// 770 MiB above its start as one batch, nothing measurable in batches of
/// 10,000 (benchmark W9), and one of 160,000 rows in 100,000-row batches
/// passed 8 GiB.
pub const STATEMENT_ATOMIC_ROWS: usize = 10_000;
/// About the most bytes (keys and values written) one SQL statement or bulk
/// write applies as one atomic storage batch, unless
/// [`crate::DbOptions::with_statement_batch_bytes`] says otherwise. The row
/// count alone bounded nothing for large values: 2,000 rows of 200 KB, one
/// batch, took 1 GiB of memory to insert (benchmark W9, large values).
pub const STATEMENT_ATOMIC_BYTES: usize = 32 << 20;

/// The planned effect of one row's mutations: cell keys to write and to
/// delete, each with its group index. Values written are borrowed from the
/// mutations where they can be (a statement's 2 KB values are not copied
/// to plan them).
#[derive(Debug, Default)]
pub(crate) struct RowPlan<'m> {
    pub(crate) puts: BTreeMap<Vec<u8>, (usize, Cow<'m, [u8]>)>,
    /// Delete markers to write: group and cell key (a row's marker goes
    /// into every group under the same key).
    pub(crate) marks: std::collections::BTreeSet<(usize, Vec<u8>)>,
    /// Stored cells to delete: group and cell key (a row's markers have
    /// the same key in every group).
    pub(crate) deletes: std::collections::BTreeSet<(usize, Vec<u8>)>,
}

/// Applies the rows of one statement as they are produced, in bounded
/// memory, with the atomicity of [`TableStore::apply_statement`]: a
/// statement of up to [`STATEMENT_ATOMIC_ROWS`] rows and
/// [`STATEMENT_ATOMIC_BYTES`] is checked whole and applied as one atomic
/// batch when it finishes; a larger one is applied in atomic batches of
/// that size as they fill, and an error after the first batch says how
/// many rows were written ([`Error::PartlyApplied`]).
#[derive(Debug)]
pub struct StatementWriter {
    store: TableStore,
    pending: Vec<(Vec<u8>, RowMutation)>,
    /// Bytes of the pending rows' keys and mutations.
    pending_bytes: usize,
    written: usize,
}

impl StatementWriter {
    /// A writer of one statement into `store`.
    pub fn new(store: TableStore) -> Result<Self> {
        store.check_writable()?;
        Ok(Self {
            store,
            pending: Vec::new(),
            pending_bytes: 0,
            written: 0,
        })
    }

    /// Adds a row; writes a full batch first when this row is one more.
    pub fn push(&mut self, key: Vec<u8>, mutation: RowMutation) -> Result<()> {
        let engine = &self.store.engine;
        if self.pending.len() >= engine.statement_batch_rows
            || self.pending_bytes >= engine.statement_batch_bytes
        {
            self.write_pending()?;
        }
        self.pending_bytes += key.len() + mutation.payload_bytes();
        self.pending.push((key, mutation));
        Ok(())
    }

    /// Writes the rows not yet written; returns the statement's row count.
    pub fn finish(mut self) -> Result<usize> {
        self.write_pending()?;
        Ok(self.written)
    }

    /// `e`, which stopped the statement, saying how many of its rows were
    /// written before.
    pub fn stopped(&self, e: Error) -> Error {
        partly_applied(e, self.written)
    }

    fn write_pending(&mut self) -> Result<()> {
        let rows = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let store = &self.store;
        let applied = rows
            .iter()
            .try_for_each(|(key, mutation)| store.check_row(key, mutation))
            .and_then(|()| store.apply_atomically(&rows, self.written));
        self.written += applied.map_err(|e| partly_applied(e, self.written))?;
        Ok(())
    }
}

/// `e`, for a statement that had written `written` rows before it: those
/// stay written (a [`TableError::Changed`] says so itself).
pub(crate) fn partly_applied(e: Error, written: usize) -> Error {
    match e {
        e if written == 0 => e,
        e @ Error::Table(TableError::Changed { .. }) => e,
        e @ Error::PartlyApplied { .. } => e,
        e => Error::PartlyApplied {
            written,
            source: Box::new(e),
        },
    }
}

/// The timestamp at the end of a cell key.
fn key_timestamp(key: &[u8]) -> Result<i64> {
    let at = key.len().saturating_sub(8);
    Ok(KeyReader::new(&key[at..]).timestamp()?)
}

impl TableStore {
    fn invalid(&self, message: String) -> TableError {
        TableError::InvalidArgument {
            table: self.layout.name.clone(),
            message,
        }
    }

    fn check_writable(&self) -> Result<()> {
        if self.layout.read_only {
            return Err(TableError::ReadOnly {
                table: self.layout.name.clone(),
            }
            .into());
        }
        Ok(())
    }

    fn check_row_key(&self, key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(self.invalid("a row key must not be empty".into()).into());
        }
        if key.len() > MAX_ROW_KEY_LEN {
            return Err(self
                .invalid(format!(
                    "a row key is {} bytes, the limit is {MAX_ROW_KEY_LEN}",
                    key.len()
                ))
                .into());
        }
        Ok(())
    }

    pub(crate) fn family_named(&self, name: &str) -> Result<&FamilyLayout> {
        self.layout.family(name).ok_or_else(|| {
            TableError::UnknownFamily {
                table: self.layout.name.clone(),
                family: name.to_string(),
            }
            .into()
        })
    }

    pub(crate) fn row_stripe(&self, key: &[u8]) -> usize {
        let mut encoded = Vec::with_capacity(key.len() + 2);
        crate::keys::put_bytes(&mut encoded, key);
        self.engine.locks.stripe(self.layout.lock_salt(), &encoded)
    }

    fn needs_server_timestamp(mutation: &RowMutation) -> bool {
        mutation.mutations.iter().any(|m| {
            matches!(
                m,
                Mutation::SetCell {
                    timestamp: None,
                    ..
                } | Mutation::MarkDeleted {
                    timestamp: None,
                    ..
                }
            )
        })
    }

    /// Deletes (into `plan`) the stored versions under `prefix` whose
    /// timestamp is in `range`, and the versions GC already hides: those
    /// must not come back into view once newer ones are gone.
    fn plan_delete_stored<'m>(
        &self,
        family: &FamilyLayout,
        prefix: &[u8],
        range: Option<&Range<i64>>,
        plan: &mut RowPlan<'m>,
        now: i64,
    ) -> Result<()> {
        let mut column: Option<Vec<u8>> = None;
        let mut index = 0;
        for (key, _) in self.cells_with_prefix(family.group, prefix)? {
            let cell = self.layout.decode_key(&key)?;
            if column.as_deref() != Some(cell.qualifier.as_ref()) {
                column = Some(cell.qualifier.to_vec());
                index = 0;
            }
            index += 1;
            let in_range = range.is_none_or(|r| r.contains(&cell.timestamp));
            let hidden = family.hidden(&cell.qualifier, index, cell.timestamp, now) != Hidden::No;
            if in_range || hidden {
                plan.deletes.insert((family.group, key.to_vec()));
            }
        }
        plan.puts.retain(|key, _| {
            !(key.starts_with(prefix)
                && range.is_none_or(|r| key_timestamp(key).is_ok_and(|ts| r.contains(&ts))))
        });
        Ok(())
    }

    /// Checks everything about a row mutation that does not depend on the
    /// stored data: the key, the families, the sizes and the time ranges.
    fn check_row(&self, key: &[u8], mutation: &RowMutation) -> Result<()> {
        self.check_row_key(key)?;
        for m in &mutation.mutations {
            match m {
                Mutation::SetCell {
                    family,
                    qualifier,
                    value,
                    ..
                } => {
                    let family = self.family_named(family)?;
                    if qualifier.len() > MAX_QUALIFIER_LEN {
                        return Err(self
                            .invalid(format!(
                                "qualifier of {} bytes in family '{}', the limit is {MAX_QUALIFIER_LEN}",
                                qualifier.len(),
                                family.name
                            ))
                            .into());
                    }
                    if value.len() > MAX_VALUE_LEN {
                        return Err(self
                            .invalid(format!(
                                "value of {} bytes in family '{}', the limit is {MAX_VALUE_LEN}",
                                value.len(),
                                family.name
                            ))
                            .into());
                    }
                }
                Mutation::DeleteColumn { family, range, .. } => {
                    self.family_named(family)?;
                    if let Some(r) = range {
                        if r.start > r.end {
                            return Err(self
                                .invalid(format!(
                                    "time range {}..{} ends before it starts",
                                    r.start, r.end
                                ))
                                .into());
                        }
                    }
                }
                Mutation::DeleteFamily { family } => {
                    self.family_named(family)?;
                }
                Mutation::MarkDeleted { scope, .. } => match scope {
                    DeleteScope::Row => {}
                    DeleteScope::Family(family) | DeleteScope::Column(family, _) => {
                        self.family_named(family)?;
                    }
                },
                Mutation::DeleteRow => {}
            }
        }
        Ok(())
    }

    /// Plans `mutation` of row `key` into `plan`.
    fn plan_row<'m>(
        &self,
        key: &[u8],
        mutation: &'m RowMutation,
        server_ts: i64,
        plan: &mut RowPlan<'m>,
    ) -> Result<()> {
        self.check_row(key, mutation)?;
        let prefix = &self.layout.prefix;
        let now = crate::clock::wall_micros();
        for m in &mutation.mutations {
            match m {
                Mutation::SetCell {
                    family,
                    qualifier,
                    timestamp,
                    value,
                } => {
                    let family = self.family_named(family)?;
                    let ts = timestamp.unwrap_or(server_ts);
                    let cell = CellKey::encode(prefix, key, family.id, qualifier, ts)?;
                    plan.deletes.remove(&(family.group, cell.clone()));
                    plan.puts.insert(cell, (family.group, Cow::Borrowed(value)));
                }
                Mutation::DeleteColumn {
                    family,
                    qualifier,
                    range,
                } => {
                    let family = self.family_named(family)?;
                    let column = CellKey::column_prefix(prefix, key, family.id, qualifier);
                    self.plan_delete_stored(family, &column, range.as_ref(), plan, now)?;
                }
                Mutation::DeleteFamily { family } => {
                    let family = self.family_named(family)?;
                    let fam = CellKey::family_prefix(prefix, key, family.id);
                    self.plan_delete_stored(family, &fam, None, plan, now)?;
                }
                Mutation::MarkDeleted { scope, timestamp } => {
                    let (groups, qualifier, scope_prefix) = match scope {
                        DeleteScope::Row => (
                            // In every group, so that a read of any group sees it.
                            (0..self.layout.groups.len()).collect::<Vec<_>>(),
                            mark_qualifier(None, None),
                            CellKey::row_prefix(prefix, key),
                        ),
                        DeleteScope::Family(family) => {
                            let family = self.family_named(family)?;
                            (
                                vec![family.group],
                                mark_qualifier(Some(family.id), None),
                                CellKey::family_prefix(prefix, key, family.id),
                            )
                        }
                        DeleteScope::Column(family, qualifier) => {
                            let family = self.family_named(family)?;
                            (
                                vec![family.group],
                                mark_qualifier(Some(family.id), Some(qualifier)),
                                CellKey::column_prefix(prefix, key, family.id, qualifier),
                            )
                        }
                    };
                    // A marker hides versions older than it. At a server
                    // timestamp, versions written with explicit later
                    // timestamps (future-dated) are removed outright, so that
                    // the delete is complete and later writes stay visible.
                    let ts = match timestamp {
                        Some(ts) => *ts,
                        None => {
                            for &g in &groups {
                                for (k, _) in self.cells_with_prefix(g, &scope_prefix)? {
                                    let cell = self.layout.decode_key(&k)?;
                                    if cell.family != MARK_FAMILY && cell.timestamp >= server_ts {
                                        plan.deletes.insert((g, k.to_vec()));
                                    }
                                }
                            }
                            plan.puts.retain(|k, _| {
                                !(k.starts_with(&scope_prefix)
                                    && key_timestamp(k).is_ok_and(|t| t >= server_ts))
                            });
                            server_ts
                        }
                    };
                    let cell = CellKey::encode(prefix, key, MARK_FAMILY, &qualifier, ts)?;
                    for group in groups {
                        plan.marks.insert((group, cell.clone()));
                    }
                }
                Mutation::DeleteRow => {
                    let row = CellKey::row_prefix(prefix, key);
                    for group in 0..self.layout.groups.len() {
                        for (k, _) in self.cells_with_prefix(group, &row)? {
                            plan.deletes.insert((group, k.to_vec()));
                        }
                    }
                    plan.puts.retain(|k, _| !k.starts_with(&row));
                    plan.marks.retain(|(_, k)| !k.starts_with(&row));
                }
            }
        }
        Ok(())
    }

    /// Refuses a planned row that keeps visible cells but lacks a NOT NULL
    /// column. Cells count when they survive the plan and no delete marker
    /// (stored or planned) hides them.
    fn check_not_null(&self, key: &[u8], plan: &RowPlan<'_>) -> Result<()> {
        if self.layout.not_null.is_empty() {
            return Ok(());
        }
        let prefix = &self.layout.prefix;
        let mut marks = Marks::default();
        let marks_prefix = CellKey::family_prefix(prefix, key, MARK_FAMILY);
        for group in 0..self.layout.groups.len() {
            for (k, _) in self.cells_with_prefix(group, &marks_prefix)? {
                if !plan.deletes.contains(&(group, k.to_vec())) {
                    let cell = self.layout.decode_key(&k)?;
                    marks.add(&cell.qualifier, cell.timestamp, None);
                }
            }
        }
        for (_, k) in &plan.marks {
            let cell = self.layout.decode_key(k)?;
            marks.add(&cell.qualifier, cell.timestamp, None);
        }
        let visible = |k: &[u8]| -> Result<bool> {
            let cell = self.layout.decode_key(k)?;
            Ok(cell.family != MARK_FAMILY
                && !marks.covers(cell.family, &cell.qualifier, cell.timestamp))
        };
        // Whether any planned or surviving stored cell under `scope` is visible.
        let any_visible = |scope: &[u8], groups: &[usize]| -> Result<bool> {
            for k in plan.puts.keys().filter(|k| k.starts_with(scope)) {
                if visible(k)? {
                    return Ok(true);
                }
            }
            for &g in groups {
                for (k, _) in self.cells_with_prefix(g, scope)? {
                    if !plan.deletes.contains(&(g, k.to_vec())) && visible(&k)? {
                        return Ok(true);
                    }
                }
            }
            Ok(false)
        };
        let mut missing = None;
        for (family, qualifier) in &self.layout.not_null {
            let Some(layout) = self.layout.family_by_id(*family) else {
                continue;
            };
            let column = CellKey::column_prefix(prefix, key, *family, qualifier);
            if !any_visible(&column, &[layout.group])? {
                missing = Some(qualifier);
                break;
            }
        }
        let Some(missing) = missing else {
            return Ok(());
        };
        // A row left without any visible cell is a deleted row: allowed.
        let all_groups: Vec<usize> = (0..self.layout.groups.len()).collect();
        if !any_visible(&CellKey::row_prefix(prefix, key), &all_groups)? {
            return Ok(());
        }
        Err(self
            .invalid(format!(
                "column '{}' is NOT NULL: row '{}' would be left without it",
                String::from_utf8_lossy(missing),
                String::from_utf8_lossy(key).escape_debug()
            ))
            .into())
    }

    /// Adds the chunk writes of row `key`'s plan to `batch`; a batch
    /// carries at most one plan per row (see [`chunks::write_changes`]).
    ///
    /// `stored`, when known, says per locality group whether the row may
    /// have stored chunks there; `false` skips reading them.
    pub(crate) fn add_to_batch(
        &self,
        key: &[u8],
        plan: &RowPlan<'_>,
        stored: Option<&[bool]>,
        batch: &mut WriteBatch,
    ) -> Result<()> {
        let mut changes: Vec<CellChanges<'_>> = vec![CellChanges::new(); self.layout.groups.len()];
        for (group, cell) in &plan.deletes {
            changes[*group].insert(cell, None);
        }
        for (cell, (group, value)) in &plan.puts {
            changes[*group].insert(cell, Some(value.as_ref()));
        }
        for (group, cell) in &plan.marks {
            changes[*group].insert(cell, Some(&[]));
        }
        let row_part = CellKey::row_prefix(&self.layout.prefix, key);
        for (group, changes) in changes.iter().enumerate() {
            let tree = &self.layout.groups[group].tree;
            let stored = stored.is_none_or(|stored| stored[group]);
            chunks::write_changes(&self.layout, tree, &row_part, changes, stored, batch)?;
        }
        Ok(())
    }

    /// Applies a mutation to one row atomically.
    pub fn mutate_row(&self, key: &[u8], mutation: &RowMutation) -> Result<()> {
        self.check_writable()?;
        let _locks = self.engine.locks.write_all([self.row_stripe(key)]);
        self.check_current(0)?;
        self.apply_locked(key, mutation)
    }

    /// Refuses a write whose layout the catalog replaced; called under the
    /// write's row locks. `written`: rows of the statement applied before.
    fn check_current(&self, written: usize) -> Result<()> {
        if self.layout.is_superseded() {
            return Err(TableError::Changed {
                table: self.layout.name.clone(),
                written,
            }
            .into());
        }
        Ok(())
    }

    fn server_timestamp(&self, mutation: &RowMutation) -> Result<i64> {
        if Self::needs_server_timestamp(mutation) {
            Ok(self.engine.clock.next(&self.engine.storage)?)
        } else {
            Ok(0)
        }
    }

    fn apply_locked(&self, key: &[u8], mutation: &RowMutation) -> Result<()> {
        let mut plan = RowPlan::default();
        let ts = self.server_timestamp(mutation)?;
        self.plan_row(key, mutation, ts, &mut plan)?;
        self.check_not_null(key, &plan)?;
        let mut batch = WriteBatch::with_durability(self.durability);
        self.add_to_batch(key, &plan, None, &mut batch)?;
        Ok(self.engine.storage.apply(batch)?)
    }

    /// Applies up to [`BULK_CHUNK_ROWS`] row mutations, each row atomic, as
    /// one batch (or several, past the batch bytes): an invalid row refuses
    /// the whole batch.
    pub fn apply_bulk_chunk<K: AsRef<[u8]>>(&self, chunk: &[(K, RowMutation)]) -> Result<usize> {
        self.check_writable()?;
        self.apply_atomically(chunk, 0)
    }

    /// Applies the row mutations of one statement: every row is checked
    /// before anything is written, then up to the database's statement batch
    /// ([`STATEMENT_ATOMIC_ROWS`] by default) are applied as one atomic
    /// batch (all or nothing, for every reader and across a crash); a
    /// larger statement is applied in batches of that size. Returns how
    /// many rows were written.
    ///
    /// This holds the whole statement in memory; [`StatementWriter`] takes
    /// the rows as they are produced.
    pub fn apply_statement<K: AsRef<[u8]>>(&self, rows: &[(K, RowMutation)]) -> Result<usize> {
        self.check_writable()?;
        for (key, mutation) in rows {
            self.check_row(key.as_ref(), mutation)?;
        }
        let mut written = 0;
        for chunk in rows.chunks(self.engine.statement_batch_rows) {
            written += self
                .apply_atomically(chunk, written)
                .map_err(|e| partly_applied(e, written))?;
        }
        Ok(written)
    }

    /// Applies the mutations of several rows as one storage batch, under
    /// their row locks, with one server timestamp. `written`: rows applied
    /// before, by earlier batches.
    ///
    /// Every row is planned and checked before the first write. Writes past
    /// the database's batch bytes ([`STATEMENT_ATOMIC_BYTES`] by default:
    /// large values, or small changes to large rows, whose chunks are
    /// rewritten whole) are applied in several storage batches, rows in
    /// their input order and never split: sled holds a batch in memory
    /// several times over. An error after the first of them says how many
    /// rows were written.
    fn apply_atomically<K: AsRef<[u8]>>(
        &self,
        chunk: &[(K, RowMutation)],
        written: usize,
    ) -> Result<usize> {
        let stripes: Vec<usize> = chunk
            .iter()
            .map(|(k, _)| self.row_stripe(k.as_ref()))
            .collect();
        let _locks = self.engine.locks.write_all(stripes);
        self.check_current(written)?;
        let ts = if chunk.iter().any(|(_, m)| Self::needs_server_timestamp(m)) {
            self.engine.clock.next(&self.engine.storage)?
        } else {
            0
        };
        // Each key's plan and how many of the chunk's rows it merges, in the
        // order the keys first appear.
        let mut plans: Vec<(&[u8], RowPlan, usize)> = Vec::with_capacity(chunk.len());
        let mut position: HashMap<&[u8], usize> = HashMap::with_capacity(chunk.len());
        for (key, mutation) in chunk {
            let key = key.as_ref();
            let at = *position.entry(key).or_insert_with(|| {
                plans.push((key, RowPlan::default(), 0));
                plans.len() - 1
            });
            let (_, plan, rows) = &mut plans[at];
            self.plan_row(key, mutation, ts, plan)?;
            *rows += 1;
        }
        for (key, plan, _) in &plans {
            self.check_not_null(key, plan)?;
        }
        let stored = self.groups_holding_rows(chunk)?;
        let mut applied = 0;
        let mut batch = WriteBatch::with_durability(self.durability);
        let mut batch_rows = 0;
        for (key, plan, rows) in &plans {
            if batch_rows > 0 && batch.bytes() >= self.engine.statement_batch_bytes {
                let full =
                    std::mem::replace(&mut batch, WriteBatch::with_durability(self.durability));
                self.engine
                    .storage
                    .apply(full)
                    .map_err(|e| partly_applied(e.into(), written + applied))?;
                applied += std::mem::take(&mut batch_rows);
            }
            self.add_to_batch(key, plan, stored.as_deref(), &mut batch)
                .map_err(|e| partly_applied(e, written + applied))?;
            batch_rows += rows;
        }
        self.engine
            .storage
            .apply(batch)
            .map_err(|e| partly_applied(e.into(), written + applied))?;
        Ok(applied + batch_rows)
    }

    /// Per locality group, whether anything is stored between the lowest and
    /// the highest row key of `rows` (`None` for fewer than two rows). Rows loaded
    /// in key order past the table's end (a bulk load, an import) find
    /// nothing, and their writes skip reading each row's stored chunks: one
    /// seek per group for the batch instead of one per row and group. The
    /// caller holds the rows' locks, so none of them gains cells meanwhile.
    fn groups_holding_rows<K: AsRef<[u8]>>(
        &self,
        rows: &[(K, RowMutation)],
    ) -> Result<Option<Vec<bool>>> {
        if rows.len() < 2 {
            return Ok(None);
        }
        let keys = || rows.iter().map(|(key, _)| key.as_ref());
        let (Some(first), Some(last)) = (keys().min(), keys().max()) else {
            return Ok(None);
        };
        self.groups_holding_keys_between(first, last).map(Some)
    }

    /// Per locality group, whether anything is stored from row `first` to
    /// row `last` (both included): one seek per group.
    pub(crate) fn groups_holding_keys_between(
        &self,
        first: &[u8],
        last: &[u8],
    ) -> Result<Vec<bool>> {
        let prefix = &self.layout.prefix;
        let lo = Bound::Included(CellKey::row_prefix(prefix, first));
        let hi = match prefix_successor(&CellKey::row_prefix(prefix, last)) {
            Some(end) => Bound::Excluded(end),
            None => Bound::Unbounded,
        };
        let mut stored = Vec::with_capacity(self.layout.groups.len());
        for group in &self.layout.groups {
            let entry = group.tree.range(lo.clone(), hi.clone(), false).next();
            stored.push(entry.transpose()?.is_some());
        }
        Ok(stored)
    }

    /// Atomically appends to or increments cells of one row and returns the
    /// new cells. Rules on the same column apply one after the other.
    pub fn read_modify_write(&self, key: &[u8], rules: &[ReadModifyWriteRule]) -> Result<Row> {
        self.check_writable()?;
        self.check_row_key(key)?;
        let _locks = self.engine.locks.write_all([self.row_stripe(key)]);
        self.check_current(0)?;
        // (family id, qualifier) -> (family name, new value)
        let mut values: BTreeMap<(u16, Vec<u8>), (String, Vec<u8>)> = BTreeMap::new();
        let mut newest = 0;
        for rule in rules {
            let (family, qualifier) = match rule {
                ReadModifyWriteRule::Append {
                    family, qualifier, ..
                }
                | ReadModifyWriteRule::Increment {
                    family, qualifier, ..
                } => (self.family_named(family)?, qualifier),
            };
            let slot = (family.id, qualifier.clone());
            if !values.contains_key(&slot) {
                let filter = Filter::all()
                    .with_families([family.name.clone()])
                    .with_qualifiers(crate::table::filter::QualifierFilter::Exact(
                        [qualifier.clone()].into(),
                    ))
                    .with_latest_versions(1);
                let current = self.read_locked(key, &filter)?;
                let (value, ts) = current
                    .first()
                    .map(|c| (c.value.to_vec(), c.timestamp))
                    .unwrap_or_default();
                newest = newest.max(ts);
                values.insert(slot.clone(), (family.name.clone(), value));
            }
            let Some((_, value)) = values.get_mut(&slot) else {
                continue;
            };
            match rule {
                ReadModifyWriteRule::Append { bytes, .. } => value.extend_from_slice(bytes),
                ReadModifyWriteRule::Increment { delta, .. } => {
                    let current = match value.len() {
                        0 => 0,
                        8 => i64::from_be_bytes(value.as_slice().try_into().unwrap_or([0; 8])),
                        n => {
                            return Err(self
                                .invalid(format!(
                                    "cell {}:{} holds {n} bytes; increment needs an 8-byte big-endian integer",
                                    family.name,
                                    String::from_utf8_lossy(qualifier)
                                ))
                                .into())
                        }
                    };
                    let next = current.checked_add(*delta).ok_or_else(|| {
                        self.invalid(format!(
                            "incrementing cell {}:{} by {delta} overflows a 64-bit integer",
                            family.name,
                            String::from_utf8_lossy(qualifier)
                        ))
                    })?;
                    *value = next.to_be_bytes().to_vec();
                }
            }
        }
        let ts = self
            .engine
            .clock
            .next(&self.engine.storage)?
            .max(newest.saturating_add(1));
        let mut mutation = RowMutation::new();
        let mut cells = Vec::with_capacity(values.len());
        for ((_, qualifier), (family, value)) in values {
            mutation = mutation.set_at(family.clone(), &qualifier, ts, &value);
            cells.push(Cell {
                family,
                qualifier,
                timestamp: ts,
                value,
            });
        }
        self.apply_locked(key, &mutation)?;
        Ok(Row {
            key: key.to_vec(),
            cells,
        })
    }

    /// Atomically applies `on_match` if `predicate` selects at least one cell
    /// of the row, else `on_miss`. Returns whether it matched.
    pub fn check_and_mutate(
        &self,
        key: &[u8],
        predicate: &Filter,
        on_match: &RowMutation,
        on_miss: &RowMutation,
    ) -> Result<bool> {
        self.check_writable()?;
        self.check_row_key(key)?;
        self.check_filter(predicate)?;
        let _locks = self.engine.locks.write_all([self.row_stripe(key)]);
        self.check_current(0)?;
        // Plan both branches, so that an invalid one is refused whichever
        // branch the row's state selects.
        let ts = self.server_timestamp(&RowMutation {
            mutations: [on_match.mutations.as_slice(), on_miss.mutations.as_slice()].concat(),
        })?;
        let mut match_plan = RowPlan::default();
        self.plan_row(key, on_match, ts, &mut match_plan)?;
        let mut miss_plan = RowPlan::default();
        self.plan_row(key, on_miss, ts, &mut miss_plan)?;
        let matched = !self.read_locked(key, predicate)?.is_empty();
        let plan = if matched { match_plan } else { miss_plan };
        self.check_not_null(key, &plan)?;
        let mut batch = WriteBatch::with_durability(self.durability);
        self.add_to_batch(key, &plan, None, &mut batch)?;
        self.engine.storage.apply(batch)?;
        Ok(matched)
    }
}

/// Applies mutations of several rows, possibly of several tables of one
/// database, as one atomic batch with one server timestamp (a caller that
/// holds every row lock takes none again, see [`RowLocks::write_every`](crate::table::locks::RowLocks::write_every)). The batch carries
/// catalog changes (DDL), so it is always on disk when this returns.
pub(crate) fn mutate_rows_atomically(
    engine: &crate::table::Engine,
    rows: &[(&TableStore, &[u8], &RowMutation)],
) -> Result<()> {
    let _locks = engine
        .locks
        .write_all(rows.iter().map(|(s, k, _)| s.row_stripe(k)));
    let ts = engine.clock.next(&engine.storage)?;
    // One plan per row: a row's chunks are rewritten once per batch.
    let mut plans: Vec<(&TableStore, &[u8], RowPlan)> = Vec::new();
    for (store, key, mutation) in rows {
        let at = plans
            .iter()
            .position(|(s, k, _)| s.layout.id == store.layout.id && k == key);
        let at = at.unwrap_or_else(|| {
            plans.push((store, key, RowPlan::default()));
            plans.len() - 1
        });
        let (_, _, plan) = &mut plans[at];
        store.plan_row(key, mutation, ts, plan)?;
    }
    let mut batch = WriteBatch::with_durability(Durability::Immediate);
    for (store, key, plan) in &plans {
        store.add_to_batch(key, plan, None, &mut batch)?;
    }
    Ok(engine.storage.apply(batch)?)
}
