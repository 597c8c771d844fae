//! Tablets: a table's row keys cut into contiguous ranges, each with an id
//! and the process that serves it, as Bigtable's METADATA table maps them.
//!
//! They are rows of `_tablets`, keyed by table and start key. A table with
//! no rows there is one tablet, with the table's own id, served by this
//! process, so tables made before `_tablets` existed need nothing written.
//! A split is a catalog change only: the rows stay where they are.

use std::ops::Bound;

use super::rows::{text_key, SystemWrite};
use super::*;
use crate::ids::TabletId;
use crate::keys::KeyReader;
use crate::table::spec::key_element_kind;

/// One tablet of a table: the row keys from `start` (inclusive) to `end`
/// (exclusive), compared as their stored encodings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tablet {
    /// Its id.
    pub id: TabletId,
    /// The encoding of its first row key; empty for a table's first tablet.
    pub start: Vec<u8>,
    /// Where the next tablet starts; `None` for the last.
    pub end: Option<Vec<u8>>,
    /// The worker that serves it; `None`: this process.
    pub worker: Option<String>,
}

impl Tablet {
    /// Whether the row key `key` (encoded) lies in this tablet.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && self.end.as_deref().is_none_or(|end| key < end)
    }

    /// Whether keys between `low` and `high` may lie in this tablet (no
    /// key may, when this answers false).
    pub fn overlaps(&self, low: Bound<&[u8]>, high: Bound<&[u8]>) -> bool {
        let starts_before_high = match high {
            Bound::Unbounded => true,
            Bound::Included(high) => self.start.as_slice() <= high,
            Bound::Excluded(high) => self.start.as_slice() < high,
        };
        let ends_after_low = match (&self.end, low) {
            (None, _) | (_, Bound::Unbounded) => true,
            (Some(end), Bound::Included(low) | Bound::Excluded(low)) => low < end.as_slice(),
        };
        starts_before_high && ends_after_low
    }
}

/// A tablet as `_tablets` stores it (its start is the map's key).
#[derive(Debug, Clone)]
pub(crate) struct StoredTablet {
    pub(super) id: TabletId,
    pub(super) worker: Option<String>,
}

/// A key to split a table at: its encoding, and how it is shown in
/// errors.
#[derive(Debug, Clone)]
pub struct SplitPoint {
    /// The encoded row key (or key prefix) the new tablet starts at.
    pub key: Vec<u8>,
    /// The key as SQL shows it.
    pub shown: String,
}

impl SplitPoint {
    /// The point at the stored row key `key` of a table with row key
    /// `spec`, shown from its values: text quoted, other bytes as `X'…'`.
    pub fn stored(spec: &RowKeySpec, key: &[u8]) -> std::result::Result<SplitPoint, String> {
        let shown: Vec<String> = key_elements(spec, key)?
            .iter()
            .map(|element| match element {
                Element::Bytes(b) => match std::str::from_utf8(b) {
                    Ok(text) => format!("'{}'", text.replace('\'', "''")),
                    Err(_) => bytes_literal(b),
                },
                Element::Int(n) | Element::Timestamp(n) => n.to_string(),
                Element::Float(f) => f.to_string(),
                Element::Bool(b) => b.to_string(),
            })
            .collect();
        Ok(SplitPoint {
            key: key.to_vec(),
            shown: key_literal(shown),
        })
    }
}

/// Bytes as a SQL literal, `X'00FF'`: how a key that is not text is shown.
pub fn bytes_literal(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
    format!("X'{hex}'")
}

/// A key's values as SQL writes it: one value as itself, several as a
/// tuple.
pub fn key_literal(mut values: Vec<String>) -> String {
    match values.len() {
        1 => values.remove(0),
        _ => format!("({})", values.join(", ")),
    }
}

/// Why a table without a primary key has no split key.
pub const NO_PRIMARY_KEY: &str =
    "it has no primary key: its rows are keyed in the order they were written";

/// The values of a split key `key` of a table with row key `spec`: the
/// `_key` itself, or each key column's element for as many columns as it
/// holds (a prefix of a composite key). An error says why it is no key.
pub fn key_elements(spec: &RowKeySpec, key: &[u8]) -> std::result::Result<Vec<Element>, String> {
    let kinds: Vec<ElementKind> = match spec {
        RowKeySpec::Key { utf8 } => {
            if *utf8 && std::str::from_utf8(key).is_err() {
                return Err(format!("{key:02x?} is not a VARCHAR key: it is not UTF-8"));
            }
            return Ok(vec![Element::Bytes(key.to_vec())]);
        }
        // Decoded as a scan decodes them (see `Shape::key_kinds`).
        RowKeySpec::Columns(columns) => columns
            .iter()
            .map(|c| key_element_kind(&c.value_type).unwrap_or(ElementKind::Bytes))
            .collect(),
        RowKeySpec::Generated => return Err(NO_PRIMARY_KEY.into()),
    };
    let mut reader = KeyReader::new(key);
    let mut elements = Vec::new();
    for kind in kinds {
        if reader.remaining().is_empty() {
            break;
        }
        let element = Element::decode(&mut reader, kind)
            .map_err(|e| format!("{key:02x?} is not a key of its columns: {e}"))?;
        elements.push(element);
    }
    if !reader.remaining().is_empty() {
        return Err(format!(
            "{key:02x?} is not a key of its columns: bytes are left after the last"
        ));
    }
    Ok(elements)
}

impl CatalogState {
    /// The tablets of table `id`, in key order: its stored ones, or the one
    /// tablet of a table never split.
    pub fn tablets_of(&self, id: TableId) -> Vec<Tablet> {
        self.split_tablets(id).unwrap_or_else(|| {
            vec![Tablet {
                id: TabletId::from_bytes(*id.as_bytes()),
                start: Vec::new(),
                end: None,
                worker: None,
            }]
        })
    }

    /// The tablets of table `id` when it was split; `None` (nothing
    /// allocated, as every table opened for planning asks) otherwise.
    pub fn split_tablets(&self, id: TableId) -> Option<Vec<Tablet>> {
        let stored = self.tablets.get(&id)?;
        let starts: Vec<&Vec<u8>> = stored.keys().collect();
        let tablets = stored
            .iter()
            .enumerate()
            .map(|(i, (start, tablet))| Tablet {
                id: tablet.id,
                start: start.clone(),
                end: starts.get(i + 1).map(|next| (*next).clone()),
                worker: tablet.worker.clone(),
            })
            .collect();
        Some(tablets)
    }

    /// Whether a `_tablets` key (`table_id`, `start`) is of a table that
    /// exists.
    pub(super) fn has_tablet_row(&self, key: &[String]) -> bool {
        match key {
            [table, _] => TableId::parse(table).is_some_and(|id| self.table(id).is_some()),
            _ => true,
        }
    }
}

impl Catalog {
    /// Reads `_tablets` into `state`; rows of tables that no longer exist
    /// are left out (and removed by [`Catalog::remove_orphan_rows`]).
    pub(super) fn load_tablets(&self, state: &mut CatalogState) -> Result<()> {
        let t = system::TABLETS;
        for (key, row) in self.rows_of(t)? {
            let [table, start] = <[String; 2]>::try_from(key).map_err(|_| {
                CatalogError::Corrupt("a _tablets key is not (table_id, start)".into())
            })?;
            let table = TableId::parse(&table)
                .ok_or_else(|| CatalogError::Corrupt(format!("'{table}' is not a table id")))?;
            if state.table(table).is_none() {
                continue;
            }
            let start = from_hex(&start).ok_or_else(|| {
                CatalogError::Corrupt(format!("'{start}' in _tablets is not a hex key"))
            })?;
            let worker = Self::text(t, &row, "worker")?;
            let tablet = StoredTablet {
                id: Self::id(t, &row, "id", TabletId::parse)?,
                worker: (!worker.is_empty()).then_some(worker),
            };
            state
                .tablets
                .entry(table)
                .or_default()
                .insert(start, tablet);
        }
        // A table's first tablet starts at the first key: without it, some
        // keys would belong to no tablet.
        if let Some((table, _)) = state
            .tablets
            .iter()
            .find(|(_, tablets)| !tablets.contains_key(&Vec::new()))
        {
            return Err(CatalogError::Corrupt(format!(
                "table {table} has no tablet for its first keys"
            ))
            .into());
        }
        Ok(())
    }

    /// Splits table `id` at each of `points`: the tablet that holds a point
    /// ends there, and a new tablet starts there. All of them in one atomic
    /// catalog change; the table's rows do not move. Returns the new tablets' ids, in key order.
    pub fn split_table(&self, id: TableId, mut points: Vec<SplitPoint>) -> Result<Vec<TabletId>> {
        let _ddl = self.ddl_lock();
        let entry = self.existing_table(id)?;
        Self::refuse_system_table(&entry, "split")?;
        for point in &points {
            key_elements(&entry.spec().key, &point.key).map_err(|reason| {
                CatalogError::CannotSplit {
                    table: entry.layout.name.clone(),
                    reason,
                }
            })?;
        }
        points.sort_by(|a, b| a.key.cmp(&b.key));
        let current = self.read().tablets_of(id);
        let exists = |at: &SplitPoint| CatalogError::TabletExists {
            table: entry.layout.name.clone(),
            at: at.shown.clone(),
        };
        for (i, point) in points.iter().enumerate() {
            let repeated = i > 0 && points[i - 1].key == point.key;
            if repeated || current.iter().any(|t| t.start == point.key) {
                return Err(exists(point).into());
            }
        }
        let now = self.timestamp()?;
        let mut writes = Vec::new();
        let mut stored: BTreeMap<Vec<u8>, StoredTablet> = current
            .iter()
            .map(|t| {
                let tablet = StoredTablet {
                    id: t.id,
                    worker: t.worker.clone(),
                };
                (t.start.clone(), tablet)
            })
            .collect();
        if !self.read().tablets.contains_key(&id) {
            // The table's one implicit tablet becomes a row of its own.
            let first = &current[0];
            writes.push(Self::tablet_row(id, &first.start, first.id, None, now)?);
        }
        let mut made = Vec::with_capacity(points.len());
        for point in points {
            let holder = current.iter().find(|t| t.contains(&point.key));
            let worker = holder.and_then(|t| t.worker.clone());
            let tablet = TabletId::generate();
            writes.push(Self::tablet_row(
                id,
                &point.key,
                tablet,
                worker.as_deref(),
                now,
            )?);
            stored.insert(point.key, StoredTablet { id: tablet, worker });
            made.push(tablet);
        }
        self.apply(writes)?;
        self.write_state().tablets.insert(id, stored);
        Ok(made)
    }

    pub(super) fn tablet_row(
        table: TableId,
        start: &[u8],
        id: TabletId,
        worker: Option<&str>,
        created_at: i64,
    ) -> Result<SystemWrite> {
        Ok(SystemWrite {
            table: system::TABLETS,
            key: text_key(&[&table.to_string(), &to_hex(start)])?,
            mutation: RowMutation::new()
                .set(system::FAMILY, "id", id.to_string())
                .set(system::FAMILY, "worker", worker.unwrap_or_default())
                .set(system::FAMILY, "created_at", created_at.to_be_bytes()),
        })
    }
}

/// Lowercase hex: it sorts as the bytes it spells do.
fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    let lower_hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
    if !text.len().is_multiple_of(2) || !text.chars().all(lower_hex) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_keys_read_back_and_sort_as_their_bytes() {
        let keys: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0, 255], vec![1], vec![16, 2]];
        for key in &keys {
            assert_eq!(from_hex(&to_hex(key)).as_ref(), Some(key));
        }
        let mut hexed: Vec<String> = keys.iter().map(|k| to_hex(k)).collect();
        hexed.reverse();
        hexed.sort();
        let back: Vec<Vec<u8>> = hexed.iter().filter_map(|h| from_hex(h)).collect();
        assert_eq!(back, keys);
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex("+f"), None);
        assert_eq!(from_hex("AB"), None);
    }

    #[test]
    fn a_tablet_holds_the_keys_from_its_start_to_the_next() {
        let tablet = Tablet {
            id: TabletId::generate(),
            start: b"g".to_vec(),
            end: Some(b"p".to_vec()),
            worker: None,
        };
        assert!(tablet.contains(b"g") && tablet.contains(b"ozz"));
        assert!(!tablet.contains(b"f") && !tablet.contains(b"p"));
        let (a, p, z): (&[u8], &[u8], &[u8]) = (b"a", b"p", b"z");
        assert!(tablet.overlaps(Bound::Unbounded, Bound::Included(b"g")));
        assert!(!tablet.overlaps(Bound::Unbounded, Bound::Excluded(b"g")));
        assert!(tablet.overlaps(Bound::Included(a), Bound::Unbounded));
        assert!(!tablet.overlaps(Bound::Included(p), Bound::Included(z)));
        assert!(!tablet.overlaps(Bound::Excluded(p), Bound::Unbounded));
    }
}
