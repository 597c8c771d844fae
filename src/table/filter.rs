//! What a read asks for: which rows ([`RowSet`]), which cells of them
//! ([`Filter`]), in which order and how many ([`ReadOptions`]).

use std::collections::BTreeSet;
use std::ops::{Bound, Range, RangeBounds};

/// Whether `x` lies between the bounds.
fn in_bounds(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>, x: &[u8]) -> bool {
    let above = match lo {
        Bound::Included(l) => x >= l.as_slice(),
        Bound::Excluded(l) => x > l.as_slice(),
        Bound::Unbounded => true,
    };
    let below = match hi {
        Bound::Included(h) => x <= h.as_slice(),
        Bound::Excluded(h) => x < h.as_slice(),
        Bound::Unbounded => true,
    };
    above && below
}

/// A range of row keys.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowRange {
    /// Where the range starts.
    pub start: Bound<Vec<u8>>,
    /// Where the range ends.
    pub end: Bound<Vec<u8>>,
}

impl RowRange {
    /// Every row.
    pub fn all() -> Self {
        Self {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }

    /// The rows whose key lies in `range` (`b"a".to_vec()..b"m".to_vec()`).
    pub fn new(range: impl RangeBounds<Vec<u8>>) -> Self {
        Self {
            start: range.start_bound().cloned(),
            end: range.end_bound().cloned(),
        }
    }

    /// The rows whose key starts with `prefix`.
    pub fn prefix(prefix: impl AsRef<[u8]>) -> Self {
        let prefix = prefix.as_ref().to_vec();
        let end = match crate::keys::prefix_successor(&prefix) {
            Some(end) => Bound::Excluded(end),
            None => Bound::Unbounded,
        };
        Self {
            start: Bound::Included(prefix),
            end,
        }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        in_bounds(&self.start, &self.end, key)
    }
}

/// A set of rows: single keys and key ranges. Overlaps are read once.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowSet {
    /// Single row keys.
    pub keys: Vec<Vec<u8>>,
    /// Key ranges.
    pub ranges: Vec<RowRange>,
}

impl RowSet {
    /// Every row of the table.
    pub fn all() -> Self {
        Self::range(RowRange::all())
    }

    /// One row.
    pub fn key(key: impl AsRef<[u8]>) -> Self {
        Self {
            keys: vec![key.as_ref().to_vec()],
            ranges: Vec::new(),
        }
    }

    /// Several rows by key.
    pub fn keys<K: AsRef<[u8]>>(keys: impl IntoIterator<Item = K>) -> Self {
        Self {
            keys: keys.into_iter().map(|k| k.as_ref().to_vec()).collect(),
            ranges: Vec::new(),
        }
    }

    /// One key range.
    pub fn range(range: RowRange) -> Self {
        Self {
            keys: Vec::new(),
            ranges: vec![range],
        }
    }

    /// The rows whose key starts with `prefix`.
    pub fn prefix(prefix: impl AsRef<[u8]>) -> Self {
        Self::range(RowRange::prefix(prefix))
    }

    /// Adds a key.
    pub fn with_key(mut self, key: impl AsRef<[u8]>) -> Self {
        self.keys.push(key.as_ref().to_vec());
        self
    }

    /// Adds a range.
    pub fn with_range(mut self, range: RowRange) -> Self {
        self.ranges.push(range);
        self
    }

    /// Whether the set holds no row at all.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.ranges.is_empty()
    }
}

/// Which qualifiers a read returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum QualifierFilter {
    /// Every qualifier.
    #[default]
    Any,
    /// Exactly these qualifiers.
    Exact(BTreeSet<Vec<u8>>),
    /// Qualifiers starting with these bytes.
    Prefix(Vec<u8>),
    /// Qualifiers in a range.
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>),
}

impl QualifierFilter {
    /// Whether `qualifier` passes.
    pub fn matches(&self, qualifier: &[u8]) -> bool {
        match self {
            QualifierFilter::Any => true,
            QualifierFilter::Exact(set) => set.contains(qualifier),
            QualifierFilter::Prefix(prefix) => qualifier.starts_with(prefix),
            QualifierFilter::Range(lo, hi) => in_bounds(lo, hi, qualifier),
        }
    }
}

/// A condition on cell values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueFilter {
    /// The value equals these bytes.
    Equals(Vec<u8>),
    /// The value starts with these bytes.
    Prefix(Vec<u8>),
    /// The value lies in a byte-wise range.
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>),
}

impl ValueFilter {
    /// Whether `value` passes.
    pub fn matches(&self, value: &[u8]) -> bool {
        match self {
            ValueFilter::Equals(v) => value == v.as_slice(),
            ValueFilter::Prefix(p) => value.starts_with(p),
            ValueFilter::Range(lo, hi) => in_bounds(lo, hi, value),
        }
    }
}

/// Which cells of each row a read returns. The steps apply in this order:
///
/// 1. the family's GC policy (hidden versions are never seen),
/// 2. families, qualifiers and the timestamp range,
/// 3. the newest N versions per column (of those left),
/// 4. the value predicate,
/// 5. the per-row offset, then the per-row limit.
///
/// Rows with no cell left are not returned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only these families. Default: all.
    pub families: Option<BTreeSet<String>>,
    /// Which qualifiers. Default: all.
    pub qualifiers: QualifierFilter,
    /// Only versions with timestamps in `start..end`. Default: all.
    pub time_range: Option<Range<i64>>,
    /// Only the newest N versions of each column. Default: all.
    pub latest_versions: Option<usize>,
    /// Only cells whose value passes. Default: all.
    pub value: Option<ValueFilter>,
    /// Skip this many cells of each row. Default: 0.
    pub cells_per_row_offset: usize,
    /// Return at most this many cells of each row. Default: all.
    pub cells_per_row_limit: Option<usize>,
    /// Read the table as it was at this time (µs): only versions written at
    /// or before it, and only the delete markers written at or before it.
    /// Default: now.
    pub as_of: Option<i64>,
}

impl Filter {
    /// Every visible cell.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only the named families.
    pub fn with_families<S: Into<String>>(mut self, families: impl IntoIterator<Item = S>) -> Self {
        self.families = Some(families.into_iter().map(Into::into).collect());
        self
    }

    /// Only these qualifiers.
    pub fn with_qualifiers(mut self, qualifiers: QualifierFilter) -> Self {
        self.qualifiers = qualifiers;
        self
    }

    /// The table as it was at `micros`: versions and delete markers written
    /// at or before it (see [`Filter::as_of`]).
    pub fn with_as_of(mut self, micros: i64) -> Self {
        let end = micros.saturating_add(1);
        self.time_range = Some(match self.time_range.take() {
            Some(r) => r.start..r.end.min(end),
            None => i64::MIN..end,
        });
        self.as_of = Some(micros);
        self
    }

    /// Only versions with timestamps in `range`.
    pub fn with_time_range(mut self, range: Range<i64>) -> Self {
        self.time_range = Some(range);
        self
    }

    /// Only the newest `n` versions of each column.
    pub fn with_latest_versions(mut self, n: usize) -> Self {
        self.latest_versions = Some(n);
        self
    }

    /// Only cells whose value passes `value`.
    pub fn with_value(mut self, value: ValueFilter) -> Self {
        self.value = Some(value);
        self
    }

    /// Skip the first `n` cells of each row.
    pub fn with_cells_per_row_offset(mut self, n: usize) -> Self {
        self.cells_per_row_offset = n;
        self
    }

    /// At most `n` cells of each row.
    pub fn with_cells_per_row_limit(mut self, n: usize) -> Self {
        self.cells_per_row_limit = Some(n);
        self
    }
}

/// A read of several rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Which cells of each row. Default: all visible.
    pub filter: Filter,
    /// At most this many rows. Default: all.
    pub row_limit: Option<usize>,
    /// Descending row-key order. Default: ascending.
    pub reverse: bool,
    /// Whether a long scan reads storage on a thread of its own per
    /// locality group read, ahead of the rows it returns, so that reading
    /// and decoding overlap. It starts after the first 1,024 stored chunks
    /// of a range, holds about 1 MiB per group (or four values, when
    /// values are larger than 256 KiB), and ends with the scan. Default:
    /// `true`.
    pub read_ahead: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            filter: Filter::default(),
            row_limit: None,
            reverse: false,
            read_ahead: true,
        }
    }
}

impl ReadOptions {
    /// All visible cells of every row, ascending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the cell filter.
    pub fn with_filter(mut self, filter: Filter) -> Self {
        self.filter = filter;
        self
    }

    /// At most `n` rows.
    pub fn with_row_limit(mut self, n: usize) -> Self {
        self.row_limit = Some(n);
        self
    }

    /// Descending row-key order.
    pub fn with_reverse(mut self, reverse: bool) -> Self {
        self.reverse = reverse;
        self
    }

    /// Whether a long scan reads ahead on a second thread (see
    /// [`ReadOptions::read_ahead`]).
    pub fn with_read_ahead(mut self, read_ahead: bool) -> Self {
        self.read_ahead = read_ahead;
        self
    }
}

/// Where a paged read of a wide row stopped; pass it back to continue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeToken {
    pub(crate) family: u16,
    pub(crate) qualifier: Vec<u8>,
    pub(crate) timestamp: i64,
}
