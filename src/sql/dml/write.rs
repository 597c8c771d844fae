//! The one write path of SQL: every statement that changes rows (INSERT …
//! VALUES, INSERT … SELECT, CREATE TABLE … AS, UPDATE, DELETE, TRUNCATE)
//! turns record batches into row mutations here ([`RowWriter`]) and applies
//! them with [`apply`](super::apply).
//!
//! - Values are cast to the column type as DataFusion casts in expressions:
//!   a value that does not fit is an error, never a NULL.
//! - NOT NULL columns refuse NULL on INSERT and UPDATE.
//! - A statement of up to [`crate::table::STATEMENT_ATOMIC_ROWS`] rows is
//!   built, and so validated, whole before its first write, and applied as
//!   one atomic batch. A larger one is applied in atomic batches of that
//!   many rows as its input streams ([`apply_input`](super::apply::apply_input)),
//!   in bounded memory; an
//!   error after the first batch says how many rows were written.
//! - A statement sees the table as of its start: when its input reads the
//!   table it writes other than through its own target scan (a subquery, a
//!   self-join, `INSERT INTO t SELECT … FROM t`, `DELETE … USING`), the
//!   input is read to its end before the first write.
//!
//! A row exists while it has a cell. A row whose every column is NULL gets
//! a *row marker* instead: an empty cell under the empty qualifier of the
//! first family that has only declared columns (`cf` in tables made by
//! SQL). No SQL column reads that qualifier, so the marker only keeps the
//! row. So does a row written with a cell in another locality group than
//! the marker's: every scan reads the markers' group too, and finds it.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::FormatOptions;
use datafusion::common::{exec_err, DataFusionError, Result};
use datafusion::execution::config::SessionConfig;

use super::apply::apply;
use crate::keys::{encode_tuple, Element};
use crate::sql::error::{from_df, to_df, SqlError};
use crate::sql::read::shape::{Shape, Source};
use crate::sql::values;
use crate::storage::Durability;
use crate::table::{DeleteScope, Filter, Mutation, RowMutation, TableStore};

/// Per-session write settings, kept as a DataFusion config extension.
#[derive(Debug, Clone, Default)]
pub struct WriteSettings {
    /// Write cells at this timestamp (µs) instead of a server timestamp.
    pub timestamp: Option<i64>,
    /// The durability of the session's data writes; `None`: the database's.
    pub durability: Option<Durability>,
}

impl WriteSettings {
    /// The settings of the session `config` belongs to.
    pub fn of(config: &SessionConfig) -> WriteSettings {
        config
            .get_extension::<WriteSettings>()
            .map(|s| s.as_ref().clone())
            .unwrap_or_default()
    }

    /// `store`, writing with the session's durability.
    pub fn bind(&self, store: TableStore) -> TableStore {
        match self.durability {
            Some(durability) => store.with_durability(durability),
            None => store,
        }
    }
}

/// The row mutations of one statement, keyed by raw row key.
pub type RowChanges = Vec<(Vec<u8>, RowMutation)>;

/// Casts `array` to `to` as DataFusion casts in expressions: an error that
/// names the column, never a NULL, when a value does not fit.
pub fn strict_cast(array: &ArrayRef, to: &DataType, column: &str) -> Result<ArrayRef> {
    if array.data_type() == to {
        return Ok(Arc::clone(array));
    }
    let options = CastOptions {
        safe: false,
        format_options: FormatOptions::default(),
    };
    cast_with_options(array, to, &options).map_err(|e| {
        to_df(SqlError::DoesNotFit {
            column: column.to_string(),
            reason: format!("a value does not fit type {to}: {e}"),
        })
    })
}

/// Builds the row mutations of INSERT, UPDATE and DELETE for one table.
#[derive(Debug, Clone)]
pub struct RowWriter {
    store: TableStore,
    shape: Arc<Shape>,
    settings: WriteSettings,
    marker: Option<String>,
    /// The families outside the locality group of the row markers: a row
    /// written with a cell in one gets a marker too, so that a scan of the
    /// markers' group alone finds it.
    elsewhere: Arc<[String]>,
    /// Columns (shape positions) the INSERT did not name, filled with
    /// their DEFAULT: written only into rows the INSERT creates.
    defaulted: Arc<[usize]>,
    /// Per map family that also holds declared columns (only a family made
    /// outside SQL can), their qualifiers: the map's entries must neither
    /// replace nor delete them.
    declared_in_maps: HashMap<u16, Vec<Vec<u8>>>,
}

impl RowWriter {
    /// A writer into `store`, whose SQL columns are `shape`.
    pub fn new(store: TableStore, shape: Arc<Shape>, settings: WriteSettings) -> Self {
        let marker = marker_family(&store);
        let mut declared_in_maps: HashMap<u16, Vec<Vec<u8>>> = HashMap::new();
        for source in &shape.sources {
            let Source::Map { family, .. } = source else {
                continue;
            };
            let declared: Vec<Vec<u8>> = shape
                .sources
                .iter()
                .filter_map(|s| match s {
                    Source::Column {
                        family: f,
                        qualifier,
                        ..
                    } if f == family => Some(qualifier.clone()),
                    _ => None,
                })
                .collect();
            if !declared.is_empty() {
                declared_in_maps.insert(*family, declared);
            }
        }
        let layout = &store.layout;
        let marker_group = marker
            .as_deref()
            .and_then(|name| layout.families.iter().find(|f| f.name == name))
            .map(|f| f.group);
        let elsewhere: Vec<String> = match marker_group {
            Some(group) => layout
                .families
                .iter()
                .filter(|f| f.group != group)
                .map(|f| f.name.clone())
                .collect(),
            None => Vec::new(),
        };
        Self {
            store: settings.bind(store),
            shape,
            settings,
            marker,
            elsewhere: Arc::from(elsewhere),
            defaulted: Arc::from(Vec::new()),
            declared_in_maps,
        }
    }

    /// The same writer for an INSERT that left the columns `defaulted`
    /// (shape positions) to their DEFAULT. A DEFAULT fills a row the INSERT
    /// creates; a row already stored keeps the values it has there, as an
    /// INSERT of an existing key writes only the columns it gives. Whether
    /// the row is stored is read before its write, outside the row's lock:
    /// a row another statement creates in between can still get the
    /// DEFAULTs.
    pub fn with_defaulted(mut self, defaulted: Arc<[usize]>) -> Self {
        self.defaulted = defaulted;
        self
    }

    /// The table's store.
    pub fn store(&self) -> &TableStore {
        &self.store
    }

    /// The table's SQL columns.
    pub fn shape(&self) -> &Arc<Shape> {
        &self.shape
    }

    fn family_name(&self, id: u16) -> Result<String> {
        self.store
            .layout
            .family_by_id(id)
            .map(|f| f.name.clone())
            .ok_or_else(|| DataFusionError::Internal(format!("family id {id} vanished")))
    }

    /// `m` with a cell written at the session's write timestamp, if any.
    /// The mutation takes the encoded bytes as they are (no copy).
    fn set(
        &self,
        mut m: RowMutation,
        family: String,
        qualifier: Vec<u8>,
        value: Vec<u8>,
    ) -> RowMutation {
        m.mutations.push(Mutation::SetCell {
            family,
            qualifier,
            timestamp: self.settings.timestamp,
            value,
        });
        m
    }

    /// Whether a row written with `m` needs a row marker: it writes no
    /// cell, or a cell outside the markers' locality group.
    fn needs_marker(&self, m: &RowMutation) -> bool {
        m.is_empty()
            || m.mutations.iter().any(|x| {
                matches!(x, Mutation::SetCell { family, .. } if self.elsewhere.contains(family))
            })
    }

    fn with_marker(&self, m: RowMutation) -> RowMutation {
        match (&self.marker, self.settings.timestamp) {
            (Some(f), Some(ts)) => m.set_at(f.clone(), b"", ts, b""),
            (Some(f), None) => m.set(f.clone(), b"", b""),
            (None, _) => m,
        }
    }

    /// Deletes a column or family: a delete marker at server time, so that
    /// `as_of` still shows the old value. At an explicit write timestamp
    /// (a backfill) a marker could not be ordered against writes at that
    /// same time, so the versions are removed instead.
    fn delete_scope(&self, m: RowMutation, scope: DeleteScope) -> RowMutation {
        match (self.settings.timestamp, scope) {
            (None, scope) => m.mark_deleted(scope, None),
            // Versions up to the write time go; newer ones stay, as a write
            // at that time would not override them either.
            (Some(ts), DeleteScope::Column(family, qualifier)) => {
                m.delete_column_versions(family, qualifier, i64::MIN..ts.saturating_add(1))
            }
            (Some(_), DeleteScope::Family(family)) => m.delete_family(family),
            (Some(_), DeleteScope::Row) => m.delete_row(),
        }
    }

    fn not_null(&self, column: &str) -> DataFusionError {
        to_df(SqlError::NotNull {
            table: self.store.layout.name.clone(),
            column: column.to_string(),
        })
    }

    /// The column `c` of `batch` cast to the type of shape column `target`.
    fn column_as(&self, batch: &RecordBatch, c: usize, target: usize) -> Result<ArrayRef> {
        let field = self.shape.schema.field(target);
        strict_cast(batch.column(c), field.data_type(), field.name())
    }

    /// Writes `array[row]` as the new value of shape column `c` into `m`:
    /// a declared column gets a new version (NULL: deleted when `null_deletes`,
    /// else left alone), a map is replaced (`null_deletes`) or extended.
    fn write_value(
        &self,
        mut m: RowMutation,
        c: usize,
        array: &ArrayRef,
        row: usize,
        null_deletes: bool,
    ) -> Result<RowMutation> {
        let field = self.shape.schema.field(c);
        let name = field.name();
        let bad = |reason: String| {
            to_df(SqlError::DoesNotFit {
                column: name.to_string(),
                reason,
            })
        };
        match &self.shape.sources[c] {
            Source::Column {
                family, qualifier, ..
            } => match values::encode_cell(array, row).map_err(bad)? {
                Some(value) => Ok(self.set(m, self.family_name(*family)?, qualifier.clone(), value)),
                None if !field.is_nullable() => Err(self.not_null(name)),
                None if null_deletes => {
                    let family = self.family_name(*family)?;
                    Ok(self.delete_scope(m, DeleteScope::Column(family, qualifier.clone())))
                }
                None => Ok(m),
            },
            Source::Map {
                family: family_id, ..
            } => {
                let family = self.family_name(*family_id)?;
                let declared = self
                    .declared_in_maps
                    .get(family_id)
                    .map_or(&[][..], Vec::as_slice);
                if null_deletes {
                    if !declared.is_empty() {
                        return exec_err!(
                            "map column '{name}' shares family '{family}' with declared columns: its entries cannot be replaced as a whole, which would delete them; set entries, or delete the family's cells through the embedded API"
                        );
                    }
                    m = self.delete_scope(m, DeleteScope::Family(family.clone()));
                }
                if array.is_null(row) {
                    return Ok(m);
                }
                // The row's entries, read in place (no slice of the map).
                let map = array.as_map();
                let (keys, vals) = (map.keys(), map.values());
                let offsets = map.value_offsets();
                for i in offsets[row] as usize..offsets[row + 1] as usize {
                    let Some(qualifier) = values::encode_cell(keys, i).map_err(bad)? else {
                        return exec_err!("column '{name}': a map key must not be NULL");
                    };
                    if declared.contains(&qualifier) {
                        let column = String::from_utf8_lossy(&qualifier);
                        return exec_err!(
                            "column '{name}': map key '{column}' is the declared column '{column}' of the same family; set that column instead"
                        );
                    }
                    if let Some(value) = values::encode_cell(vals, i).map_err(bad)? {
                        m = self.set(m, family.clone(), qualifier, value);
                    }
                }
                Ok(m)
            }
            Source::RowKey { .. } | Source::KeyPart { .. } => exec_err!(
                "column '{name}' of table '{}' is part of the row key and cannot be changed: DELETE the row and INSERT it again",
                self.store.layout.name
            ),
        }
    }

    /// INSERT: one row mutation per row of `batch`, whose columns are the
    /// table's. Each non-NULL column gets a new version; a NULL writes
    /// nothing, so INSERT of an existing key updates the columns it gives.
    /// `first_row`: the input's number (from 0) of the batch's first row,
    /// which an error about a row names.
    pub fn insert(&self, batch: &RecordBatch, first_row: u64) -> Result<RowChanges> {
        if batch.num_columns() != self.shape.sources.len() {
            return exec_err!(
                "table '{}' has {} columns but the rows to insert have {}",
                self.store.layout.name,
                self.shape.sources.len(),
                batch.num_columns()
            );
        }
        let columns = (0..self.shape.sources.len())
            .map(|c| self.column_as(batch, c, c))
            .collect::<Result<Vec<_>>>()?;
        let at_row = |row: usize| {
            move |e: DataFusionError| {
                let source = match e {
                    DataFusionError::External(_) => from_df(e),
                    other => SqlError::Invalid(other.message().into_owned()).into(),
                };
                to_df(SqlError::AtRow {
                    row: first_row + row as u64 + 1,
                    source: Box::new(source),
                })
            }
        };
        let mut rows = Vec::with_capacity(batch.num_rows());
        let mut defaulted = Vec::new();
        for row in 0..batch.num_rows() {
            let (key, mutation, defaults) = self.insert_row(&columns, row).map_err(at_row(row))?;
            if !defaults.is_empty() {
                defaulted.push((rows.len(), row, defaults));
            }
            rows.push((key, mutation));
        }
        // DEFAULTs go into the rows that are not stored: all of them when
        // nothing is stored between the batch's lowest and highest key (a
        // load), else as each row's read says.
        let keys = || defaulted.iter().map(|(at, ..)| rows[*at].0.as_slice());
        let all_new = match (keys().min(), keys().max()) {
            (Some(first), Some(last)) => !self
                .store
                .groups_holding_keys_between(first, last)
                .map_err(to_df)?
                .contains(&true),
            _ => true,
        };
        for (at, row, defaults) in defaulted {
            let (key, mutation) = &mut rows[at];
            let mut m = std::mem::take(mutation);
            if all_new || !self.is_stored(key)? {
                for c in defaults {
                    m = self
                        .write_value(m, c, &columns[c], row, false)
                        .map_err(at_row(row))?;
                }
            }
            *mutation = if self.needs_marker(&m) {
                self.with_marker(m)
            } else {
                m
            };
        }
        Ok(rows)
    }

    /// The key and mutation of row `row` of the insert's `columns`, and
    /// the columns left to their DEFAULT, not yet written (see
    /// [`RowWriter::with_defaulted`]).
    fn insert_row(
        &self,
        columns: &[ArrayRef],
        row: usize,
    ) -> Result<(Vec<u8>, RowMutation, Vec<usize>)> {
        let mut key: Option<Vec<u8>> = None;
        let mut parts: Vec<(usize, Element)> = Vec::new();
        let mut mutation = RowMutation::new();
        let mut defaults = Vec::new();
        for (c, source) in self.shape.sources.iter().enumerate() {
            let array = &columns[c];
            let name = self.shape.schema.field(c).name();
            let bad = |reason: String| {
                to_df(SqlError::DoesNotFit {
                    column: name.to_string(),
                    reason,
                })
            };
            match source {
                Source::Column { .. } | Source::Map { .. } if self.defaulted.contains(&c) => {
                    defaults.push(c);
                }
                Source::RowKey { .. } => match values::encode_cell(array, row).map_err(bad)? {
                    Some(bytes) => key = Some(bytes),
                    None => return Err(self.not_null(name)),
                },
                Source::KeyPart { index, value_type } => {
                    match values::encode_element(array, row, value_type).map_err(bad)? {
                        Some(element) => parts.push((*index, element)),
                        None => return Err(self.not_null(name)),
                    }
                }
                Source::Column { .. } | Source::Map { .. } => {
                    mutation = self.write_value(mutation, c, array, row, false)?;
                }
            }
        }
        let key = match key {
            Some(key) => key,
            None if !parts.is_empty() => {
                parts.sort_by_key(|(i, _)| *i);
                let tuple: Vec<Element> = parts.into_iter().map(|(_, e)| e).collect();
                encode_tuple(&tuple).map_err(|e| DataFusionError::Execution(e.to_string()))?
            }
            None => uuid::Uuid::now_v7().as_bytes().to_vec(),
        };
        // (A row with columns left to their DEFAULT gets its marker, if it
        // needs one, once they are decided.)
        if defaults.is_empty() && self.needs_marker(&mutation) {
            mutation = self.with_marker(mutation);
        }
        Ok((key, mutation, defaults))
    }

    /// Whether the row `key` has a visible cell.
    fn is_stored(&self, key: &[u8]) -> Result<bool> {
        let any_cell = Filter::all().with_cells_per_row_limit(1);
        self.store
            .read_row(key, &any_cell)
            .map(|row| row.is_some())
            .map_err(to_df)
    }

    /// UPDATE: `batch` holds the raw row key (`_rowid`) and then the new
    /// value of each shape column in `columns`. NULL deletes a column; the
    /// row marker keeps a row whose last cell that was.
    pub fn update(&self, columns: &[usize], batch: &RecordBatch) -> Result<RowChanges> {
        let keys = batch.column(0).as_binary::<i32>();
        let new_values = columns
            .iter()
            .enumerate()
            .map(|(i, &c)| self.column_as(batch, i + 1, c))
            .collect::<Result<Vec<_>>>()?;
        let mut rows = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            if keys.is_null(row) {
                continue;
            }
            let mut m = RowMutation::new();
            for (i, &c) in columns.iter().enumerate() {
                m = self.write_value(m, c, &new_values[i], row, true)?;
            }
            let deletes = m.mutations.iter().any(|x| {
                matches!(
                    x,
                    Mutation::MarkDeleted { .. }
                        | Mutation::DeleteColumn { .. }
                        | Mutation::DeleteFamily { .. }
                )
            });
            if deletes || self.needs_marker(&m) {
                m = self.with_marker(m);
            }
            rows.push((keys.value(row).to_vec(), m));
        }
        Ok(rows)
    }

    /// DELETE: the rows whose raw keys are the first column of `batch`.
    pub fn delete(&self, batch: &RecordBatch) -> RowChanges {
        batch
            .column(0)
            .as_binary::<i32>()
            .iter()
            .flatten()
            .map(|k| {
                (
                    k.to_vec(),
                    self.delete_scope(RowMutation::new(), DeleteScope::Row),
                )
            })
            .collect()
    }

    /// The mutation that deletes a row: a delete marker, so that reads of
    /// the past still see it.
    pub fn delete_row() -> RowMutation {
        RowMutation::new().mark_deleted(DeleteScope::Row, None)
    }

    /// Applies a statement's row changes; see [`apply`].
    pub async fn apply(&self, rows: RowChanges) -> Result<u64> {
        apply(self.store.clone(), rows).await
    }
}

/// The family that holds row markers in `store`, if any: the first with
/// declared columns only.
pub fn marker_family(store: &TableStore) -> Option<String> {
    store
        .layout
        .spec
        .families
        .iter()
        .find(|f| f.qualifier_type.is_none())
        .map(|f| f.name.clone())
}
