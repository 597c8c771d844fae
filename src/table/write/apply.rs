//! Applying planned rows as storage batches: one row, a bulk chunk, a
//! statement (atomically or in bounded batches), several tables at once.

use std::collections::HashMap;
use std::ops::Bound;

use super::plan::RowPlan;
use super::statement::partly_applied;
use crate::error::Result;
use crate::keys::{prefix_successor, CellKey};
use crate::storage::{Durability, WriteBatch};
use crate::table::mutation::RowMutation;
use crate::table::{TableError, TableStore};

impl TableStore {
    /// Applies a mutation to one row atomically.
    pub fn mutate_row(&self, key: &[u8], mutation: &RowMutation) -> Result<()> {
        self.check_writable()?;
        let _locks = self.engine.locks.write_all([self.row_stripe(key)]);
        self.check_current(0)?;
        self.apply_locked(key, mutation)
    }

    /// Refuses a write whose layout the catalog replaced; called under the
    /// write's row locks. `written`: rows of the statement applied before.
    pub(super) fn check_current(&self, written: usize) -> Result<()> {
        if self.layout.is_superseded() {
            return Err(TableError::Changed {
                table: self.layout.name.clone(),
                written,
            }
            .into());
        }
        Ok(())
    }

    pub(super) fn server_timestamp(&self, mutation: &RowMutation) -> Result<i64> {
        if Self::needs_server_timestamp(mutation) {
            Ok(self.engine.clock.next(&self.engine.storage)?)
        } else {
            Ok(0)
        }
    }

    pub(super) fn apply_locked(&self, key: &[u8], mutation: &RowMutation) -> Result<()> {
        let mut plan = RowPlan::default();
        let ts = self.server_timestamp(mutation)?;
        self.plan_row(key, mutation, ts, &mut plan)?;
        self.check_not_null(key, &plan)?;
        let mut batch = WriteBatch::with_durability(self.durability);
        self.add_to_batch(key, &plan, None, &mut batch)?;
        Ok(self.engine.storage.apply(batch)?)
    }

    /// Applies up to [`BULK_CHUNK_ROWS`](super::BULK_CHUNK_ROWS) row mutations,
    /// each row atomic, as one batch (or several, past the batch bytes): an
    /// invalid row refuses the whole batch.
    pub fn apply_bulk_chunk<K: AsRef<[u8]>>(&self, chunk: &[(K, RowMutation)]) -> Result<usize> {
        self.check_writable()?;
        self.apply_atomically(chunk, 0)
    }

    /// Applies the row mutations of one statement: every row is checked before
    /// anything is written, then up to the database's statement batch
    /// ([`STATEMENT_ATOMIC_ROWS`](super::STATEMENT_ATOMIC_ROWS) by default) are
    /// applied as one atomic batch (all or nothing, for every reader and across
    /// a crash); a larger statement is applied in batches of that size. Returns
    /// how many rows were written.
    ///
    /// This holds the whole statement in memory;
    /// [`StatementWriter`](super::StatementWriter) takes the rows as they are
    /// produced.
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
    /// Every row is planned and checked before the first write. Writes past the
    /// database's batch bytes
    /// ([`STATEMENT_ATOMIC_BYTES`](super::STATEMENT_ATOMIC_BYTES) by default:
    /// large values, or small changes to large rows, whose chunks are rewritten
    /// whole) are applied in several storage batches, rows in their input order
    /// and never split: sled holds a batch in memory several times over. An
    /// error after the first of them says how many rows were written.
    pub(super) fn apply_atomically<K: AsRef<[u8]>>(
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
    /// the highest row key of `rows` (`None` for fewer than two rows). Rows
    /// loaded in key order past the table's end (a bulk load, an import) find
    /// nothing, and their writes skip reading each row's stored chunks: one
    /// seek per group for the batch instead of one per row and group. The
    /// caller holds the rows' locks, so none of them gains cells meanwhile.
    pub(super) fn groups_holding_rows<K: AsRef<[u8]>>(
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
