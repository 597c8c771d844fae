//! Planning a row's mutations into the puts and deletes they make, where
//! every input error is found ([`RowPlan`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

use super::{MAX_QUALIFIER_LEN, MAX_ROW_KEY_LEN, MAX_VALUE_LEN};
use crate::error::Result;
use crate::keys::{CellKey, KeyReader};
use crate::storage::WriteBatch;
use crate::table::chunks::{self, CellChanges};
use crate::table::layout::FamilyLayout;
use crate::table::layout::Hidden;
use crate::table::layout::{mark_qualifier, Marks, MARK_FAMILY};
use crate::table::mutation::{DeleteScope, Mutation, RowMutation};
use crate::table::{TableError, TableStore};

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

/// The timestamp at the end of a cell key.
pub(super) fn key_timestamp(key: &[u8]) -> Result<i64> {
    let at = key.len().saturating_sub(8);
    Ok(KeyReader::new(&key[at..]).timestamp()?)
}

impl TableStore {
    pub(super) fn invalid(&self, message: String) -> TableError {
        TableError::InvalidArgument {
            table: self.layout.name.clone(),
            message,
        }
    }

    pub(super) fn check_writable(&self) -> Result<()> {
        if self.layout.read_only {
            return Err(TableError::ReadOnly {
                table: self.layout.name.clone(),
            }
            .into());
        }
        Ok(())
    }

    pub(super) fn check_row_key(&self, key: &[u8]) -> Result<()> {
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

    pub(super) fn needs_server_timestamp(mutation: &RowMutation) -> bool {
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
    pub(super) fn plan_delete_stored<'m>(
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
    pub(super) fn check_row(&self, key: &[u8], mutation: &RowMutation) -> Result<()> {
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
    pub(super) fn plan_row<'m>(
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
    pub(super) fn check_not_null(&self, key: &[u8], plan: &RowPlan<'_>) -> Result<()> {
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
        Err(TableError::NotNull {
            table: self.layout.name.clone(),
            column: String::from_utf8_lossy(missing).into_owned(),
            row: String::from_utf8_lossy(key).escape_debug().to_string(),
        }
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
}
