//! Read-modify-write and check-and-mutate: a row read and written under
//! its lock.

use std::collections::BTreeMap;

use super::plan::RowPlan;
use crate::error::Result;
use crate::storage::WriteBatch;
use crate::table::filter::Filter;
use crate::table::mutation::{ReadModifyWriteRule, RowMutation};
use crate::table::{Cell, Row, TableStore};

impl TableStore {
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
