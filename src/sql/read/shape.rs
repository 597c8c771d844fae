//! How a wide-column table looks to SQL, and how its rows become Arrow
//! record batches (shared by scans and export).
//!
//! Columns, in order: the row key (`_key`, or the typed primary-key
//! columns; none for generated keys), then per family its declared columns
//! and, if it takes free qualifiers, one `MAP(VARCHAR, T)` column named like
//! the family holding the latest version of every other qualifier.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayBuilder, ArrayRef, ListBuilder, MapBuilder, MapFieldNames, StringBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::{DataFusionError, HashMap, HashSet, Result};

use crate::keys::{decode_tuple, ElementKind};
use crate::sql::values;
use crate::table::read::RawRow;
use crate::table::spec::{key_element_kind, RowKeySpec, TableSpec, ValueType};

pub use crate::catalog::{KEY_COLUMN, ROWID_COLUMN};

/// Where a SQL column's values come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// The row key itself, as text or bytes.
    RowKey {
        /// VARCHAR rather than BYTEA.
        utf8: bool,
    },
    /// One element of a typed primary key.
    KeyPart {
        /// Position in the key tuple.
        index: usize,
        /// Its type.
        value_type: ValueType,
    },
    /// A declared qualifier.
    Column {
        /// Family id.
        family: u16,
        /// The qualifier.
        qualifier: Vec<u8>,
        /// Its type.
        value_type: ValueType,
        /// What a row without a cell reads as (see `ColumnSpec::missing`).
        missing: Option<Vec<u8>>,
    },
    /// Every undeclared qualifier of a family, as a map.
    Map {
        /// Family id.
        family: u16,
        /// Type of the map values.
        value_type: ValueType,
    },
}

/// A table's SQL columns.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The Arrow schema.
    pub schema: SchemaRef,
    /// Per column, where its values come from.
    pub sources: Vec<Source>,
    /// The key tuple schema of typed primary keys (empty otherwise).
    pub key_kinds: Vec<ElementKind>,
    /// Whether column values are lists of every version, newest first
    /// (the history view), rather than the newest version.
    pub history: bool,
}

/// The Arrow type of a `MAP(VARCHAR, value_type)` column, with the field
/// names of DataFusion's map literals (`MAP {'k': v}`).
pub fn map_type(value_type: &ValueType) -> DataType {
    map_of(DataType::Utf8, values::map_value_type(value_type))
}

/// Arrow's map of `key` to `value`, with the field names Arrow's own map
/// builder uses.
pub(crate) fn map_of(key: DataType, value: DataType) -> DataType {
    let entries = Fields::from(vec![
        Field::new("key", key, false),
        Field::new("value", value, true),
    ]);
    DataType::Map(
        Arc::new(Field::new("entries", DataType::Struct(entries), false)),
        false,
    )
}

fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(item, true)))
}

fn map_field_names() -> MapFieldNames {
    MapFieldNames {
        entry: "entries".into(),
        key: "key".into(),
        value: "value".into(),
    }
}

impl Shape {
    /// The SQL shape of a spec; `with_rowid` prepends the raw row key as
    /// `_rowid` (the internal view used by DELETE and UPDATE).
    pub fn new(spec: &TableSpec, with_rowid: bool) -> Shape {
        let mut fields = Vec::new();
        let mut sources = Vec::new();
        let mut key_kinds = Vec::new();
        if with_rowid {
            fields.push(Field::new(ROWID_COLUMN, DataType::Binary, false));
            sources.push(Source::RowKey { utf8: false });
        }
        match &spec.key {
            RowKeySpec::Key { utf8 } => {
                let ty = if *utf8 {
                    DataType::Utf8View
                } else {
                    DataType::Binary
                };
                fields.push(Field::new(KEY_COLUMN, ty, false));
                sources.push(Source::RowKey { utf8: *utf8 });
            }
            RowKeySpec::Columns(columns) => {
                for (index, c) in columns.iter().enumerate() {
                    fields.push(Field::new(
                        &c.name,
                        values::arrow_type(&c.value_type),
                        false,
                    ));
                    sources.push(Source::KeyPart {
                        index,
                        value_type: c.value_type.clone(),
                    });
                    key_kinds.push(key_element_kind(&c.value_type).unwrap_or(ElementKind::Bytes));
                }
            }
            RowKeySpec::Generated => {}
        }
        for family in &spec.families {
            for c in &family.columns {
                fields.push(Field::new(
                    &c.name,
                    values::arrow_type(&c.value_type),
                    c.nullable,
                ));
                sources.push(Source::Column {
                    family: family.id,
                    qualifier: c.name.as_bytes().to_vec(),
                    value_type: c.value_type.clone(),
                    missing: c.missing.clone(),
                });
            }
            if let Some(value_type) = family.qualifier_type.clone() {
                fields.push(Field::new(&family.name, map_type(&value_type), true));
                sources.push(Source::Map {
                    family: family.id,
                    value_type,
                });
            }
        }
        // SQL column order is declaration order (`_rowid` stays first).
        if !spec.column_order.is_empty() {
            let rank = |name: &str| {
                if name == ROWID_COLUMN && with_rowid {
                    return 0;
                }
                spec.column_order
                    .iter()
                    .position(|c| c == name)
                    .map_or(usize::MAX, |p| p + 1)
            };
            let mut order: Vec<usize> = (0..fields.len()).collect();
            order.sort_by_key(|&i| rank(fields[i].name()));
            fields = order.iter().map(|&i| fields[i].clone()).collect();
            sources = order.iter().map(|&i| sources[i].clone()).collect();
        }
        Shape {
            schema: Arc::new(Schema::new(fields)),
            sources,
            key_kinds,
            history: false,
        }
    }

    /// The history view of this shape: each declared column becomes
    /// `LIST(T)` of its versions, newest first, and each map
    /// `MAP(VARCHAR, LIST(T))`; key columns stay as they are.
    pub fn into_history(self) -> Shape {
        let fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .zip(&self.sources)
            .map(|(f, source)| match source {
                Source::Column { value_type, .. } => {
                    Field::new(f.name(), list_of(values::arrow_type(value_type)), true)
                }
                Source::Map { value_type, .. } => Field::new(
                    f.name(),
                    map_of(DataType::Utf8, list_of(values::map_value_type(value_type))),
                    true,
                ),
                _ => f.as_ref().clone(),
            })
            .collect();
        Shape {
            schema: Arc::new(Schema::new(fields)),
            history: true,
            ..self
        }
    }

    /// The positions of the key columns (`_rowid`, `_key` or the typed
    /// primary key).
    pub fn key_columns(&self) -> Vec<usize> {
        self.sources
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, Source::RowKey { .. } | Source::KeyPart { .. }))
            .map(|(i, _)| i)
            .collect()
    }

    /// The families the given columns read (`None`: key columns only).
    pub fn families_of(&self, columns: &[usize]) -> Vec<u16> {
        let mut families: Vec<u16> = columns
            .iter()
            .filter_map(|&c| match self.sources.get(c) {
                Some(Source::Column { family, .. }) | Some(Source::Map { family, .. }) => {
                    Some(*family)
                }
                _ => None,
            })
            .collect();
        families.sort_unstable();
        families.dedup();
        families
    }
}

/// One output column under construction.
enum ColumnBuilder {
    Plain(Box<dyn ArrayBuilder>),
    Map(Box<MapBuilder<StringBuilder, Box<dyn ArrayBuilder>>>),
    List(ListBuilder<Box<dyn ArrayBuilder>>),
    MapOfLists(Box<MapBuilder<StringBuilder, ListBuilder<Box<dyn ArrayBuilder>>>>),
}

/// Where the cells of one family go: declared qualifier -> output position,
/// and the output position of the family's map column.
#[derive(Default)]
struct FamilyOutputs {
    declared: HashMap<Vec<u8>, usize>,
    map: Option<usize>,
}

/// A map entry under construction: a qualifier and its versions.
type MapEntry<'a> = (&'a [u8], Vec<&'a [u8]>);

/// Turns table rows into record batches: the latest and history views
/// ([`BatchBuilder`]) and the cells view each have one.
pub trait RowsToBatches: Send {
    /// The schema of the batches.
    fn schema(&self) -> SchemaRef;
    /// Adds one table row; returns how many output rows it made.
    fn push(&mut self, row: &RawRow) -> Result<usize>;
    /// Output rows added since the last batch.
    fn len(&self) -> usize;
    /// Whether no output row was added since the last batch.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The rows added so far as a batch; the builder starts over.
    fn finish(&mut self) -> Result<RecordBatch>;
}

impl RowsToBatches for BatchBuilder {
    fn schema(&self) -> SchemaRef {
        BatchBuilder::schema(self)
    }

    fn push(&mut self, row: &RawRow) -> Result<usize> {
        BatchBuilder::push(self, row).map(|()| 1)
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn finish(&mut self) -> Result<RecordBatch> {
        BatchBuilder::finish(self)
    }
}

/// Turns rows into record batches of a projection of a shape.
pub struct BatchBuilder {
    shape: Arc<Shape>,
    schema: SchemaRef,
    projection: Vec<usize>,
    builders: Vec<ColumnBuilder>,
    /// family -> (qualifier -> output position of its declared column, output
    /// position of its map column)
    by_family: HashMap<u16, FamilyOutputs>,
    /// family -> every declared qualifier (they never appear in the map)
    declared: HashMap<u16, HashSet<Vec<u8>>>,
    /// Per output column, the indexes of the row's cells that hold its
    /// versions (newest first): kept between rows to reuse its memory.
    versions: Vec<Vec<usize>>,
    needs_key_parts: bool,
    rows: usize,
    table: String,
}

impl BatchBuilder {
    /// A builder for the columns `projection` of `shape`.
    pub fn new(shape: Arc<Shape>, projection: Vec<usize>, table: String) -> Result<Self> {
        let schema = Arc::new(shape.schema.project(&projection)?);
        let projection_len = projection.len();
        let mut by_family: HashMap<u16, FamilyOutputs> = HashMap::default();
        let mut needs_key_parts = false;
        for (out, &c) in projection.iter().enumerate() {
            match &shape.sources[c] {
                Source::Column {
                    family, qualifier, ..
                } => {
                    by_family
                        .entry(*family)
                        .or_default()
                        .declared
                        .insert(qualifier.clone(), out);
                }
                Source::Map { family, .. } => by_family.entry(*family).or_default().map = Some(out),
                Source::KeyPart { .. } => needs_key_parts = true,
                Source::RowKey { .. } => {}
            }
        }
        let mut declared: HashMap<u16, HashSet<Vec<u8>>> = HashMap::default();
        for source in &shape.sources {
            if let Source::Column {
                family, qualifier, ..
            } = source
            {
                declared
                    .entry(*family)
                    .or_default()
                    .insert(qualifier.clone());
            }
        }
        let mut this = BatchBuilder {
            shape,
            schema,
            projection,
            builders: Vec::new(),
            by_family,
            declared,
            versions: vec![Vec::new(); projection_len],
            needs_key_parts,
            rows: 0,
            table,
        };
        this.builders = this.new_builders();
        Ok(this)
    }

    fn new_builders(&self) -> Vec<ColumnBuilder> {
        let history = self.shape.history;
        self.projection
            .iter()
            .map(|&c| match &self.shape.sources[c] {
                Source::RowKey { utf8: true } => {
                    ColumnBuilder::Plain(values::builder(&ValueType::Utf8, 1024))
                }
                Source::RowKey { utf8: false } => {
                    ColumnBuilder::Plain(values::builder(&ValueType::Bytes, 1024))
                }
                Source::Column { value_type, .. } if history => {
                    ColumnBuilder::List(ListBuilder::new(values::builder(value_type, 1024)))
                }
                Source::Map { value_type, .. } if history => {
                    ColumnBuilder::MapOfLists(Box::new(MapBuilder::new(
                        Some(map_field_names()),
                        StringBuilder::new(),
                        ListBuilder::new(values::map_value_builder(value_type, 1024)),
                    )))
                }
                Source::KeyPart { value_type, .. } | Source::Column { value_type, .. } => {
                    ColumnBuilder::Plain(values::builder(value_type, 1024))
                }
                Source::Map { value_type, .. } => ColumnBuilder::Map(Box::new(MapBuilder::new(
                    Some(map_field_names()),
                    StringBuilder::new(),
                    values::map_value_builder(value_type, 1024),
                ))),
            })
            .collect()
    }

    /// The schema of the batches.
    pub fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn corrupt(&self, row: &RawRow, what: &str, message: String) -> DataFusionError {
        DataFusionError::Execution(format!(
            "table '{}', row '{}': {what} {message}",
            self.table,
            String::from_utf8_lossy(&row.key).escape_debug()
        ))
    }

    /// Adds one row (its cells hold the latest version of each column).
    pub fn push(&mut self, row: &RawRow) -> Result<()> {
        let key_parts = if self.needs_key_parts {
            decode_tuple(&row.key, &self.shape.key_kinds)
                .map_err(|e| self.corrupt(row, "key", e.to_string()))?
        } else {
            Vec::new()
        };
        // The versions (newest first) of each plain output column, and the
        // entries of each map; the latest view uses the first version only.
        let plain = &mut self.versions;
        plain.iter_mut().for_each(Vec::clear);
        let mut maps: Vec<Vec<MapEntry<'_>>> = Vec::new();
        let mut last: Option<(u16, &[u8])> = None;
        for (index, cell) in row.cells.iter().enumerate() {
            let qualifier: &[u8] = &cell.qualifier;
            let same_column = last == Some((cell.family, qualifier));
            if same_column && !self.shape.history {
                continue;
            }
            last = Some((cell.family, qualifier));
            let Some(outputs) = self.by_family.get(&cell.family) else {
                continue;
            };
            if let Some(&out) = outputs.declared.get(qualifier) {
                plain[out].push(index);
            } else if let Some(out) = &outputs.map {
                let is_declared = self
                    .declared
                    .get(&cell.family)
                    .is_some_and(|d| d.contains(qualifier));
                if is_declared {
                    continue;
                }
                if maps.is_empty() {
                    maps.resize_with(self.projection.len(), Vec::new);
                }
                match maps[*out].last_mut() {
                    Some((q, versions)) if same_column && *q == qualifier => {
                        versions.push(cell.value.as_ref())
                    }
                    _ => maps[*out].push((qualifier, vec![cell.value.as_ref()])),
                }
            }
        }
        let value_of = |index: usize| row.cells[index].value.as_ref();
        for (out, &c) in self.projection.iter().enumerate() {
            let result = match (&self.shape.sources[c], &mut self.builders[out]) {
                (Source::RowKey { utf8 }, ColumnBuilder::Plain(b)) => {
                    let ty = if *utf8 {
                        ValueType::Utf8
                    } else {
                        ValueType::Bytes
                    };
                    values::append_cell(b.as_mut(), &ty, Some(&row.key))
                }
                (Source::KeyPart { index, value_type }, ColumnBuilder::Plain(b)) => {
                    match key_parts.get(*index) {
                        Some(element) => values::append_element(b.as_mut(), value_type, element),
                        None => Err("has too few key parts".to_string()),
                    }
                }
                (
                    Source::Column {
                        value_type,
                        missing,
                        ..
                    },
                    ColumnBuilder::Plain(b),
                ) => {
                    let value = plain[out].first().map(|&i| value_of(i));
                    let value = value.or(missing.as_deref());
                    values::append_cell(b.as_mut(), value_type, value)
                }
                (
                    Source::Column {
                        value_type,
                        missing,
                        ..
                    },
                    ColumnBuilder::List(b),
                ) => {
                    let mut versions: Vec<&[u8]> =
                        plain[out].iter().map(|&i| value_of(i)).collect();
                    // A row without a cell reads as the column's missing
                    // value here too, as in the latest view.
                    if versions.is_empty() {
                        versions.extend(missing.as_deref());
                    }
                    append_versions(b, value_type, &versions)
                        .map(|()| b.append(!versions.is_empty()))
                }
                (Source::Map { value_type, .. }, ColumnBuilder::Map(b)) => {
                    let mut result = Ok(());
                    let entries = maps.get(out).map_or(&[][..], Vec::as_slice);
                    for (q, versions) in entries {
                        b.keys().append_value(String::from_utf8_lossy(q));
                        let newest = versions.first().copied();
                        if let Err(e) = values::append_cell(b.values().as_mut(), value_type, newest)
                        {
                            result = Err(e);
                        }
                    }
                    result.and_then(|()| b.append(!entries.is_empty()).map_err(|e| e.to_string()))
                }
                (Source::Map { value_type, .. }, ColumnBuilder::MapOfLists(b)) => {
                    let mut result = Ok(());
                    let entries = maps.get(out).map_or(&[][..], Vec::as_slice);
                    for (q, versions) in entries {
                        b.keys().append_value(String::from_utf8_lossy(q));
                        let list = b.values();
                        result = result.and(append_versions(list, value_type, versions));
                        list.append(true);
                    }
                    result.and_then(|()| b.append(!entries.is_empty()).map_err(|e| e.to_string()))
                }
                _ => Err("internal: column builder mismatch".to_string()),
            };
            if let Err(message) = result {
                let column = self.schema.field(out).name().clone();
                return Err(self.corrupt(row, &format!("column '{column}'"), message));
            }
        }
        self.rows += 1;
        Ok(())
    }

    /// The rows added so far as a batch; the builder starts over.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        let fresh = self.new_builders();
        let builders = std::mem::replace(&mut self.builders, fresh);
        let columns: Vec<ArrayRef> = builders
            .into_iter()
            .map(|b| match b {
                ColumnBuilder::Plain(mut b) => b.finish(),
                ColumnBuilder::Map(mut b) => Arc::new(b.finish()) as ArrayRef,
                ColumnBuilder::List(mut b) => Arc::new(b.finish()) as ArrayRef,
                ColumnBuilder::MapOfLists(mut b) => Arc::new(b.finish()) as ArrayRef,
            })
            .zip(self.schema.fields())
            // Times, durations and timestamps in other units are built as
            // their physical integers: cast them to the column's type.
            .map(|(array, field)| {
                if array.data_type() == field.data_type() {
                    Ok(array)
                } else {
                    cast(&array, field.data_type())
                }
            })
            .collect::<Result<_, _>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(self.rows));
        self.rows = 0;
        Ok(RecordBatch::try_new_with_options(
            self.schema(),
            columns,
            &options,
        )?)
    }
}

/// Appends every version of a column to a list's values.
fn append_versions(
    list: &mut ListBuilder<Box<dyn ArrayBuilder>>,
    value_type: &ValueType,
    versions: &[&[u8]],
) -> Result<(), String> {
    for v in versions {
        values::append_cell(list.values().as_mut(), value_type, Some(v))?;
    }
    Ok(())
}
