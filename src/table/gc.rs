//! Compaction: physically removes what reads already hide — versions beyond
//! a family's GC policy and cells of dropped families.
//!
//! Hidden cells stay hidden (newer writes and passing time only hide more;
//! loosening a policy first compacts under the old one), so compaction can
//! delete them without holding row locks.

use crate::error::Result;
use crate::keys::CellKey;
use crate::storage::WriteBatch;
use crate::table::read::gc_visible;
use crate::table::spec::GcPolicy;
use crate::table::TableStore;

/// Deletes per storage batch.
const COMPACTION_BATCH: usize = 1000;

impl TableStore {
    /// Removes every hidden version and every cell of a dropped family.
    /// Returns how many cells were removed.
    pub fn compact(&self) -> Result<u64> {
        self.compact_with(None)
    }

    /// Like [`TableStore::compact`], but judges family `family` by `policy`
    /// instead of its current one (used before a policy is loosened).
    pub(crate) fn compact_with(&self, override_policy: Option<(u16, GcPolicy)>) -> Result<u64> {
        let prefix = &self.layout.prefix;
        let now = crate::clock::wall_micros();
        let mut removed = 0;
        for group in &self.layout.groups {
            let tree = &group.tree;
            let mut column: Option<(u16, Vec<u8>, Vec<u8>)> = None;
            let mut index = 0;
            let mut batch = WriteBatch::new();
            for entry in tree.scan_prefix(prefix, false) {
                let (key, _) = entry?;
                let cell = CellKey::decode(&key, prefix.len())?;
                let same_column = column.as_ref().is_some_and(|(f, r, q)| {
                    *f == cell.family && *r == *cell.row && *q == *cell.qualifier
                });
                if !same_column {
                    column = Some((cell.family, cell.row.to_vec(), cell.qualifier.to_vec()));
                    index = 0;
                }
                index += 1;
                let policy = match (self.layout.family_by_id(cell.family), override_policy) {
                    (_, Some((id, policy))) if id == cell.family => Some(policy),
                    (Some(family), _) => Some(family.gc),
                    (None, _) => None,
                };
                let keep = policy.is_some_and(|gc| gc_visible(&gc, index, cell.timestamp, now));
                if !keep {
                    batch.delete(tree, key);
                    removed += 1;
                    if batch.len() >= COMPACTION_BATCH {
                        self.engine.storage.apply(std::mem::take(&mut batch))?;
                    }
                }
            }
            self.engine.storage.apply(batch)?;
        }
        Ok(removed)
    }
}
