//! Filter pushdown: predicates on the row key become key intervals that the
//! scan reads instead of the whole table.
//!
//! Recognised on `_key` and on the first primary-key column: `=`, `<`,
//! `<=`, `>`, `>=`, `BETWEEN`, `IN (...)`, `LIKE 'prefix%'`,
//! `starts_with(col, 'prefix')`, and `AND` / `OR` of those. A predicate on
//! the first key column `c` maps to intervals of encoded keys: `c = v` is
//! every key that starts with the encoding of `v`, so composite keys work
//! too.

use std::ops::Bound;

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{expr::InList, expr::Like, Between, BinaryExpr, Expr, Operator};

use crate::keys::{prefix_successor, Element};
use crate::sql::read::shape::{Shape, Source};
use crate::sql::values;
use crate::table::spec::ValueType;
use crate::table::{RowRange, RowSet};

/// One interval of row keys.
pub type Interval = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// A union of disjoint, sorted row-key intervals.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeySet {
    intervals: Vec<Interval>,
}

/// The order of lower bounds: unbounded first, then by key, and at the same
/// key an inclusive bound before an exclusive one. A total order, as
/// sorting requires.
fn lower_cmp(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> std::cmp::Ordering {
    let exclusive = |bound: &Bound<Vec<u8>>| matches!(bound, Bound::Excluded(_));
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => std::cmp::Ordering::Equal,
        (Bound::Unbounded, _) => std::cmp::Ordering::Less,
        (_, Bound::Unbounded) => std::cmp::Ordering::Greater,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            x.cmp(y).then(exclusive(a).cmp(&exclusive(b)))
        }
    }
}

/// Whether lower bound a starts at or before lower bound b.
fn lower_le(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> bool {
    lower_cmp(a, b) != std::cmp::Ordering::Greater
}

fn upper_le(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> bool {
    // Whether upper bound a ends at or before upper bound b.
    match (a, b) {
        (_, Bound::Unbounded) => true,
        (Bound::Unbounded, _) => false,
        (Bound::Included(x), Bound::Included(y)) | (Bound::Excluded(x), Bound::Excluded(y)) => {
            x <= y
        }
        (Bound::Excluded(x), Bound::Included(y)) => x <= y,
        (Bound::Included(x), Bound::Excluded(y)) => x < y,
    }
}

/// Whether an interval contains no key.
fn is_empty(i: &Interval) -> bool {
    match (&i.0, &i.1) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
        _ => false,
    }
}

/// Whether interval `a` (sorted before `b`) reaches or touches `b`.
fn touches(a: &Interval, b: &Interval) -> bool {
    match (&a.1, &b.0) {
        (Bound::Unbounded, _) | (_, Bound::Unbounded) => true,
        (Bound::Included(x), Bound::Included(y))
        | (Bound::Included(x), Bound::Excluded(y))
        | (Bound::Excluded(x), Bound::Included(y)) => x >= y,
        (Bound::Excluded(x), Bound::Excluded(y)) => x > y,
    }
}

impl KeySet {
    /// Every key.
    pub fn all() -> Self {
        Self {
            intervals: vec![(Bound::Unbounded, Bound::Unbounded)],
        }
    }

    /// No key.
    pub fn none() -> Self {
        Self {
            intervals: Vec::new(),
        }
    }

    /// The keys in any of `intervals`, as sorted, disjoint intervals.
    pub fn from_intervals(mut intervals: Vec<Interval>) -> Self {
        intervals.retain(|i| !is_empty(i));
        intervals.sort_by(|a, b| lower_cmp(&a.0, &b.0));
        let mut merged: Vec<Interval> = Vec::with_capacity(intervals.len());
        for i in intervals {
            match merged.last_mut() {
                Some(last) if touches(last, &i) => {
                    if upper_le(&last.1, &i.1) {
                        last.1 = i.1;
                    }
                }
                _ => merged.push(i),
            }
        }
        Self { intervals: merged }
    }

    /// Keys in either set.
    pub fn union(self, other: KeySet) -> KeySet {
        let mut all = self.intervals;
        all.extend(other.intervals);
        Self::from_intervals(all)
    }

    /// Keys in both sets.
    pub fn intersect(&self, other: &KeySet) -> KeySet {
        let mut out = Vec::new();
        for a in &self.intervals {
            for b in &other.intervals {
                let lo = if lower_le(&a.0, &b.0) {
                    b.0.clone()
                } else {
                    a.0.clone()
                };
                let hi = if upper_le(&a.1, &b.1) {
                    a.1.clone()
                } else {
                    b.1.clone()
                };
                out.push((lo, hi));
            }
        }
        Self::from_intervals(out)
    }

    /// Whether the set is every key.
    pub fn is_all(&self) -> bool {
        matches!(
            self.intervals.as_slice(),
            [(Bound::Unbounded, Bound::Unbounded)]
        )
    }

    /// The intervals.
    pub fn intervals(&self) -> &[Interval] {
        &self.intervals
    }

    /// The row set the table layer reads.
    pub fn to_row_set(&self) -> RowSet {
        RowSet {
            keys: Vec::new(),
            ranges: self
                .intervals
                .iter()
                .map(|(s, e)| RowRange {
                    start: s.clone(),
                    end: e.clone(),
                })
                .collect(),
        }
    }
}

/// How a predicate on the key was understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The keys the predicate allows.
    pub keys: KeySet,
    /// Whether exactly those rows pass (else the predicate must still be
    /// evaluated on the rows read).
    pub exact: bool,
}

/// The key column a predicate may constrain: the whole key, or the first
/// part of a typed key.
enum KeyColumn {
    Whole { utf8: bool },
    FirstPart(ValueType),
}

fn key_column(shape: &Shape, expr: &Expr) -> Option<KeyColumn> {
    let Expr::Column(column) = expr else {
        return None;
    };
    key_column_at(shape, shape.schema.index_of(&column.name).ok()?)
}

fn key_column_at(shape: &Shape, index: usize) -> Option<KeyColumn> {
    match shape.sources.get(index)? {
        Source::RowKey { utf8 } => Some(KeyColumn::Whole { utf8: *utf8 }),
        Source::KeyPart {
            index: 0,
            value_type,
        } => Some(KeyColumn::FirstPart(value_type.clone())),
        _ => None,
    }
}

/// The encoded key bytes of a literal compared with the key column.
fn literal_bytes(column: &KeyColumn, value: &ScalarValue) -> Option<Vec<u8>> {
    if value.is_null() {
        return None;
    }
    let value_type = match column {
        KeyColumn::Whole { utf8: true } => ValueType::Utf8,
        KeyColumn::Whole { utf8: false } => ValueType::Bytes,
        KeyColumn::FirstPart(vt) => vt.clone(),
    };
    let cast = value.cast_to(&values::arrow_type(&value_type)).ok()?;
    // The cast must not change the value (e.g. 1.5 -> 1).
    if cast.cast_to(&value.data_type()).ok()? != *value {
        return None;
    }
    let array = cast.to_array().ok()?;
    match column {
        KeyColumn::Whole { .. } => values::encode_cell(&array, 0).ok().flatten(),
        KeyColumn::FirstPart(vt) => {
            let element: Element = values::encode_element(&array, 0, vt).ok().flatten()?;
            let mut out = Vec::new();
            element.encode_into(&mut out).ok()?;
            Some(out)
        }
    }
}

/// Whether comparisons on this column are exact on encoded bytes
/// (floats are not: -0.0 = 0.0 in SQL, but they encode differently).
fn exact_for(column: &KeyColumn) -> bool {
    !matches!(
        column,
        KeyColumn::FirstPart(ValueType::Float32 | ValueType::Float64)
    )
}

/// The keys `column op value` allows.
fn compare(column: &KeyColumn, op: Operator, value: &[u8]) -> Option<KeySet> {
    let v = value.to_vec();
    let after = || prefix_successor(value).map_or(Bound::Unbounded, Bound::Excluded);
    let at_or_after_next =
        || prefix_successor(value).map_or(Bound::Excluded(v.clone()), Bound::Included);
    let interval: Interval = match (column, op) {
        (KeyColumn::Whole { .. }, Operator::Eq) => (Bound::Included(v.clone()), Bound::Included(v)),
        (KeyColumn::Whole { .. }, Operator::Lt) => (Bound::Unbounded, Bound::Excluded(v)),
        (KeyColumn::Whole { .. }, Operator::LtEq) => (Bound::Unbounded, Bound::Included(v)),
        (KeyColumn::Whole { .. }, Operator::Gt) => (Bound::Excluded(v), Bound::Unbounded),
        (KeyColumn::Whole { .. }, Operator::GtEq) => (Bound::Included(v), Bound::Unbounded),
        // A key part: every key that starts with the encoded value.
        (KeyColumn::FirstPart(_), Operator::Eq) => (Bound::Included(v), after()),
        (KeyColumn::FirstPart(_), Operator::Lt) => (Bound::Unbounded, Bound::Excluded(v)),
        (KeyColumn::FirstPart(_), Operator::LtEq) => (Bound::Unbounded, after()),
        (KeyColumn::FirstPart(_), Operator::Gt) => (at_or_after_next(), Bound::Unbounded),
        (KeyColumn::FirstPart(_), Operator::GtEq) => (Bound::Included(v), Bound::Unbounded),
        _ => return None,
    };
    Some(KeySet::from_intervals(vec![interval]))
}

/// The operator with its sides swapped (`1 < c` is `c > 1`).
pub(crate) fn flip(op: Operator) -> Option<Operator> {
    Some(match op {
        Operator::Eq => Operator::Eq,
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        _ => return None,
    })
}

fn literal(expr: &Expr) -> Option<&ScalarValue> {
    match expr {
        Expr::Literal(value, _) => Some(value),
        _ => None,
    }
}

/// The text prefix of a `LIKE` pattern of the form `prefix%`.
fn like_prefix(pattern: &str) -> Option<&str> {
    let prefix = pattern.strip_suffix('%')?;
    if prefix.contains(['%', '_', '\\']) {
        return None;
    }
    Some(prefix)
}

fn prefix_set(prefix: &[u8]) -> KeySet {
    let end = prefix_successor(prefix).map_or(Bound::Unbounded, Bound::Excluded);
    KeySet::from_intervals(vec![(Bound::Included(prefix.to_vec()), end)])
}

/// The keys `column op value` allows.
fn comparison(column: &KeyColumn, op: Operator, value: &ScalarValue) -> Option<Pushed> {
    let bytes = literal_bytes(column, value)?;
    Some(Pushed {
        keys: compare(column, op, &bytes)?,
        exact: exact_for(column),
    })
}

/// Whether column `index` is one a comparison bounds to key intervals:
/// the whole key, or the first part of a typed key.
pub(crate) fn bounds_keys(shape: &Shape, index: usize) -> bool {
    key_column_at(shape, index).is_some()
}

/// The keys `column op value` allows for column `index` of `shape`
/// ([`bounds_keys`]); `None` when the value does not convert to the
/// column's type exactly or `op` is no comparison.
pub(crate) fn compare_column(
    shape: &Shape,
    index: usize,
    op: Operator,
    value: &ScalarValue,
) -> Option<Pushed> {
    comparison(&key_column_at(shape, index)?, op, value)
}

/// Understands a predicate as a set of keys, if it constrains only the key.
pub fn push(shape: &Shape, expr: &Expr) -> Option<Pushed> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => {
                let (l, r) = (push(shape, left), push(shape, right));
                match (l, r) {
                    (Some(l), Some(r)) => Some(Pushed {
                        keys: l.keys.intersect(&r.keys),
                        exact: l.exact && r.exact,
                    }),
                    (Some(one), None) | (None, Some(one)) => Some(Pushed {
                        keys: one.keys,
                        exact: false,
                    }),
                    (None, None) => None,
                }
            }
            Operator::Or => {
                let (l, r) = (push(shape, left)?, push(shape, right)?);
                Some(Pushed {
                    keys: l.keys.union(r.keys),
                    exact: l.exact && r.exact,
                })
            }
            _ => {
                let (column, op, value) = match (key_column(shape, left), literal(right)) {
                    (Some(c), Some(v)) => (c, *op, v),
                    _ => match (literal(left), key_column(shape, right)) {
                        (Some(v), Some(c)) => (c, flip(*op)?, v),
                        _ => return None,
                    },
                };
                comparison(&column, op, value)
            }
        },
        Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) => {
            let column = key_column(shape, expr)?;
            let mut keys = KeySet::none();
            for item in list {
                let bytes = literal_bytes(&column, literal(item)?)?;
                keys = keys.union(compare(&column, Operator::Eq, &bytes)?);
            }
            Some(Pushed {
                keys,
                exact: exact_for(&column),
            })
        }
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => {
            let column = key_column(shape, expr)?;
            let lo = literal_bytes(&column, literal(low)?)?;
            let hi = literal_bytes(&column, literal(high)?)?;
            let keys = compare(&column, Operator::GtEq, &lo)?.intersect(&compare(
                &column,
                Operator::LtEq,
                &hi,
            )?);
            Some(Pushed {
                keys,
                exact: exact_for(&column),
            })
        }
        Expr::Like(Like {
            negated: false,
            expr,
            pattern,
            escape_char: None,
            case_insensitive: false,
        }) => {
            let KeyColumn::Whole { utf8: true } = key_column(shape, expr)? else {
                return None;
            };
            let pattern = match literal(pattern)? {
                ScalarValue::Utf8(Some(p))
                | ScalarValue::LargeUtf8(Some(p))
                | ScalarValue::Utf8View(Some(p)) => p,
                _ => return None,
            };
            let prefix = like_prefix(pattern)?;
            Some(Pushed {
                keys: prefix_set(prefix.as_bytes()),
                exact: true,
            })
        }
        Expr::ScalarFunction(f) if f.name() == "starts_with" && f.args.len() == 2 => {
            let KeyColumn::Whole { .. } = key_column(shape, &f.args[0])? else {
                return None;
            };
            let prefix = match literal(&f.args[1])? {
                ScalarValue::Utf8(Some(p))
                | ScalarValue::LargeUtf8(Some(p))
                | ScalarValue::Utf8View(Some(p)) => p.as_bytes().to_vec(),
                _ => return None,
            };
            Some(Pushed {
                keys: prefix_set(&prefix),
                exact: true,
            })
        }
        _ => None,
    }
}

/// Renders intervals for `EXPLAIN`: `['a']` for one key, `['a', 'c')` for
/// a range, several joined by ` | `; a key that is not UTF-8 (a number's or
/// a time's encoding) as its bytes, `X'8000…'`.
pub fn describe(keys: &KeySet) -> String {
    fn show(b: &[u8]) -> String {
        match std::str::from_utf8(b) {
            Ok(text) => format!("'{}'", text.escape_debug()),
            Err(_) => crate::catalog::bytes_literal(b),
        }
    }
    let parts: Vec<String> = keys
        .intervals()
        .iter()
        .map(|(lo, hi)| match (lo, hi) {
            (Bound::Included(a), Bound::Included(b)) if a == b => show(a),
            _ => {
                let l = match lo {
                    Bound::Included(a) => format!("[{}", show(a)),
                    Bound::Excluded(a) => format!("({}", show(a)),
                    Bound::Unbounded => "(-inf".to_string(),
                };
                let h = match hi {
                    Bound::Included(b) => format!("{}]", show(b)),
                    Bound::Excluded(b) => format!("{})", show(b)),
                    Bound::Unbounded => "+inf)".to_string(),
                };
                format!("{l}, {h}")
            }
        })
        .collect();
    format!("[{}]", parts.join(" | "))
}
