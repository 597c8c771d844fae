//! Which stored cells of one row a read returns: versions garbage
//! collection hides, cells delete markers cover, and the read filter's
//! families, qualifiers, time range, newest-N and value conditions, decided
//! cell by cell in stored order.

use crate::keys::ColumnKey;
use crate::table::filter::Filter;
use crate::table::layout::{Hidden, Layout};

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
        Self::reusing(layout, filter, now, Vec::new())
    }

    /// [`Selector::new`] keeping the qualifier it counts versions of in
    /// `buffer` (its contents are dropped), for a reader of many rows: see
    /// [`Selector::into_buffer`]. A scan then allocates no qualifier per
    /// row.
    pub fn reusing(layout: &'a Layout, filter: &'a Filter, now: i64, mut buffer: Vec<u8>) -> Self {
        buffer.clear();
        Self {
            layout,
            filter,
            now,
            family: None,
            family_wanted: false,
            qualifier: buffer,
            stored: 0,
            kept: 0,
            dropped_seen: None,
        }
    }

    /// The buffer it kept a qualifier in, for the next selector.
    pub fn into_buffer(self) -> Vec<u8> {
        self.qualifier
    }

    /// The filter it applies.
    pub(super) fn filter(&self) -> &'a Filter {
        self.filter
    }

    /// The newest timestamp of a cell of a dropped column the family
    /// filter would have read, among the cells offered so far.
    pub(super) fn dropped_seen(&self) -> Option<i64> {
        self.dropped_seen
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
pub(super) fn marks_until(filter: &Filter) -> Option<i64> {
    filter.as_of.map(|at| at.saturating_add(1))
}
