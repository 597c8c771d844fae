//! What a table declares: its row key, its column families with their
//! locality group and garbage-collection policy, and typed qualifiers.
//!
//! Specs are stored as JSON in the `_tables` system table.

use std::time::Duration;

use datafusion::arrow::datatypes::DataType;
use serde::{Deserialize, Serialize};

use crate::keys::ElementKind;

/// The locality group a family belongs to unless it names another.
pub const DEFAULT_LOCALITY_GROUP: &str = "default";

/// The type of a cell value, used by SQL to decode the stored bytes.
///
/// Integers, dates, timestamps and decimals are stored big-endian two's
/// complement of their width (an `Int64` cell is what Bigtable's increment
/// reads and writes), floats as big-endian IEEE bits, strings as UTF-8,
/// booleans as one byte. Every other Arrow type is [`ValueType::Arrow`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ValueType {
    /// Raw bytes.
    Bytes,
    /// UTF-8 text.
    Utf8,
    /// A boolean.
    Bool,
    /// 8-bit signed integer.
    Int8,
    /// 16-bit signed integer.
    Int16,
    /// 32-bit signed integer.
    Int32,
    /// 64-bit signed integer.
    Int64,
    /// 8-bit unsigned integer.
    UInt8,
    /// 16-bit unsigned integer.
    UInt16,
    /// 32-bit unsigned integer.
    UInt32,
    /// 64-bit unsigned integer.
    UInt64,
    /// 32-bit float.
    Float32,
    /// 64-bit float.
    Float64,
    /// Days since 1970-01-01.
    Date32,
    /// Microseconds since 1970-01-01 UTC.
    Timestamp,
    /// A decimal with the given precision and scale.
    Decimal128(u8, i8),
    /// A time of day since midnight, 32-bit (seconds or milliseconds).
    Time32(Unit),
    /// A time of day since midnight, 64-bit (micro- or nanoseconds).
    Time64(Unit),
    /// Milliseconds since 1970-01-01.
    Date64,
    /// A length of time.
    Duration(Unit),
    /// A timestamp in a unit other than microseconds (no time zone).
    TimestampIn(Unit),
    /// Any other Arrow type: lists, structs, unions, nested maps,
    /// fixed-size binary, intervals, `Decimal256`, timestamps with a time
    /// zone. A fixed-width value is stored as its Arrow bytes
    /// (little-endian, as in an Arrow buffer), any other as a one-row
    /// Arrow IPC stream, so whatever Arrow can hold, a cell can hold.
    Arrow(ArrowType),
}

/// An Arrow type in a [`ValueType::Arrow`], stored in the catalog by its
/// Arrow name (`List(Int64)`, `Timestamp(ns, "UTC")`), which Arrow parses
/// back. A type whose name Arrow does not parse back as the same type (a
/// struct field named `""`, or with a backslash or a line break in its
/// name) is stored as `ipc:` and the hex of an Arrow IPC schema
/// holding it, which keeps every name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArrowType(pub DataType);

/// The first bytes of an Arrow type stored as an IPC schema; no Arrow type
/// name starts with them.
const IPC_TYPE_TAG: &str = "ipc:";

impl Serialize for ArrowType {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let name = self.0.to_string();
        if name.parse::<DataType>().ok().as_ref() == Some(&self.0) {
            return serializer.serialize_str(&name);
        }
        use datafusion::arrow::datatypes::{Field, Schema};
        let schema = Schema::new(vec![Field::new("t", self.0.clone(), true)]);
        let mut dictionaries = datafusion::arrow::ipc::writer::DictionaryTracker::new(false);
        let fb = datafusion::arrow::ipc::convert::IpcSchemaEncoder::new()
            .with_dictionary_tracker(&mut dictionaries)
            .schema_to_fb(&schema);
        let hex: String = fb
            .finished_data()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        serializer.serialize_str(&format!("{IPC_TYPE_TAG}{hex}"))
    }
}

impl<'de> Deserialize<'de> for ArrowType {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        let parsed = match name.strip_prefix(IPC_TYPE_TAG) {
            None => name.parse::<DataType>().map_err(|e| e.to_string()),
            Some(hex) => type_of_ipc_schema(hex),
        };
        parsed
            .map(ArrowType)
            .map_err(|e| serde::de::Error::custom(format!("Arrow type '{name}': {e}")))
    }
}

/// The type of the one field of the Arrow IPC schema whose bytes are `hex`.
fn type_of_ipc_schema(hex: &str) -> Result<DataType, String> {
    let digits = hex.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return Err("odd number of hex digits".into());
    }
    let bytes = digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| "not hex".to_string())
        })
        .collect::<Result<Vec<u8>, String>>()?;
    let fb = datafusion::arrow::ipc::root_as_schema(&bytes).map_err(|e| e.to_string())?;
    let schema = datafusion::arrow::ipc::convert::fb_to_schema(fb);
    match schema.fields().first() {
        Some(field) if schema.fields().len() == 1 => Ok(field.data_type().clone()),
        _ => Err("not a schema of one field".into()),
    }
}

/// The unit of a time, duration or timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Unit {
    /// Seconds.
    Second,
    /// Milliseconds.
    Millisecond,
    /// Microseconds.
    Microsecond,
    /// Nanoseconds.
    Nanosecond,
}

/// Which versions of a family's cells stay visible. Every rule that is set
/// must allow a version for it to be visible (the rules intersect), and a
/// hidden version is hidden from every read at once, not only after
/// compaction removed it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcPolicy {
    /// Keep only the newest N versions of each column. `None`: all.
    pub max_versions: Option<u32>,
    /// Keep only versions whose timestamp is at most this many microseconds
    /// old. `None`: forever.
    pub max_age_micros: Option<i64>,
}

impl GcPolicy {
    /// Keep every version (the default).
    pub fn keep_all() -> Self {
        Self::default()
    }

    /// Keep the newest `n` versions of each column.
    pub fn with_max_versions(mut self, n: u32) -> Self {
        self.max_versions = Some(n);
        self
    }

    /// Keep versions younger than `age`.
    pub fn with_max_age(mut self, age: Duration) -> Self {
        self.max_age_micros = Some(i64::try_from(age.as_micros()).unwrap_or(i64::MAX));
        self
    }

    /// Whether no rule is set.
    pub fn keeps_all(&self) -> bool {
        self.max_versions.is_none() && self.max_age_micros.is_none()
    }
}

/// A typed qualifier of a family, shown by SQL as its own column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnSpec {
    /// The column name, which is also the qualifier.
    pub name: String,
    /// How the cell value is decoded.
    pub value_type: ValueType,
    /// Whether SQL may leave it NULL (no cell). Default: `true`.
    #[serde(default = "default_true")]
    pub nullable: bool,
    /// The SQL expression INSERT uses when the column is not given.
    /// Default: none (NULL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// The encoded value a row without a cell for this column reads as:
    /// the constant DEFAULT of a NOT NULL column added to a table that had
    /// rows (as PostgreSQL's "missing value"), so no row is ever NULL in
    /// it and no backfill is needed. Default: none (NULL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<Vec<u8>>,
}

fn default_true() -> bool {
    true
}

impl ColumnSpec {
    /// A nullable column.
    pub fn new(name: impl Into<String>, value_type: ValueType) -> Self {
        Self {
            name: name.into(),
            value_type,
            nullable: true,
            default: None,
            missing: None,
        }
    }

    /// Sets the SQL expression INSERT uses when the column is not given.
    pub fn with_default(mut self, sql: impl Into<String>) -> Self {
        self.default = Some(sql.into());
        self
    }

    /// Sets whether the column accepts NULL.
    pub fn with_nullable(mut self, nullable: bool) -> Self {
        self.nullable = nullable;
        self
    }
}

/// A column family: a named group of columns, stored in one locality group
/// and garbage-collected by one policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilySpec {
    /// The family's name.
    pub name: String,
    /// The numeric id written in keys; assigned by the catalog.
    #[serde(default)]
    pub id: u16,
    /// The locality group (one key range of the table's sled tree each).
    /// Default: `"default"`.
    pub locality_group: String,
    /// Which versions stay visible. Default: all.
    pub gc: GcPolicy,
    /// Declared typed qualifiers. Default: none.
    pub columns: Vec<ColumnSpec>,
    /// The type of free-form qualifiers, shown by SQL as one
    /// `MAP(VARCHAR, type)` column named like the family. `None`: the family
    /// has only declared columns in SQL. Default: `Some(Bytes)`.
    pub qualifier_type: Option<ValueType>,
    /// Columns dropped from the family: their cells written at or before
    /// the drop are hidden from every read at once and removed by
    /// compaction. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedColumn>,
    /// Versions older than this (µs) stay hidden: set when a TTL is
    /// loosened, so that what the old TTL hid never comes back. Default:
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_before: Option<i64>,
}

/// A column dropped from a family (see [`FamilySpec::dropped`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedColumn {
    /// The column's qualifier.
    pub qualifier: String,
    /// When it was dropped (µs): its cells at or before this are hidden.
    pub at: i64,
}

impl FamilySpec {
    /// A family in the default locality group that keeps every version and
    /// takes free-form qualifiers of bytes.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            id: 0,
            locality_group: DEFAULT_LOCALITY_GROUP.to_string(),
            gc: GcPolicy::default(),
            columns: Vec::new(),
            qualifier_type: Some(ValueType::Bytes),
            dropped: Vec::new(),
            hidden_before: None,
        }
    }

    /// Stores the family in locality group `group`.
    pub fn with_locality_group(mut self, group: impl Into<String>) -> Self {
        self.locality_group = group.into();
        self
    }

    /// Sets the garbage-collection policy.
    pub fn with_gc(mut self, gc: GcPolicy) -> Self {
        self.gc = gc;
        self
    }

    /// Keeps only the newest `n` versions of each column.
    pub fn with_max_versions(mut self, n: u32) -> Self {
        self.gc.max_versions = Some(n);
        self
    }

    /// Keeps only versions younger than `age`.
    pub fn with_max_age(mut self, age: Duration) -> Self {
        self.gc = self.gc.with_max_age(age);
        self
    }

    /// Declares a typed qualifier.
    pub fn with_column(mut self, column: ColumnSpec) -> Self {
        self.columns.push(column);
        self
    }

    /// Sets the type of free-form qualifiers (`None`: declared columns only).
    pub fn with_qualifier_type(mut self, value_type: Option<ValueType>) -> Self {
        self.qualifier_type = value_type;
        self
    }

    /// The declared column called `name`.
    pub fn column(&self, name: &str) -> Option<&ColumnSpec> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// How SQL sees the row key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RowKeySpec {
    /// One column `_key` holding the row key itself, as text (`utf8`) or
    /// bytes.
    Key {
        /// Whether SQL shows the key as VARCHAR (else BYTEA).
        utf8: bool,
    },
    /// Typed primary-key columns whose order-preserving tuple encoding is
    /// the row key.
    Columns(Vec<ColumnSpec>),
    /// Keys generated by widesql (ordered by insertion), hidden from
    /// `SELECT *`.
    Generated,
}

/// The full declaration of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSpec {
    /// How SQL sees the row key. Default: a VARCHAR `_key`.
    pub key: RowKeySpec,
    /// The column families, in declaration order.
    pub families: Vec<FamilySpec>,
    /// The order of the SQL columns (key columns, declared columns, map
    /// families) by name, as declared; columns not listed follow, grouped
    /// by family. Default: empty (family order).
    #[serde(default)]
    pub column_order: Vec<String>,
}

impl Default for TableSpec {
    fn default() -> Self {
        Self {
            key: RowKeySpec::Key { utf8: true },
            families: Vec::new(),
            column_order: Vec::new(),
        }
    }
}

impl TableSpec {
    /// A table with a VARCHAR `_key` and no family yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a family.
    pub fn with_family(mut self, family: FamilySpec) -> Self {
        self.families.push(family);
        self
    }

    /// Sets how SQL sees the row key.
    pub fn with_key(mut self, key: RowKeySpec) -> Self {
        self.key = key;
        self
    }

    /// The family called `name`.
    pub fn family(&self, name: &str) -> Option<&FamilySpec> {
        self.families.iter().find(|f| f.name == name)
    }

    /// The distinct locality groups, in first-use order.
    pub fn locality_groups(&self) -> Vec<&str> {
        let mut groups: Vec<&str> = Vec::new();
        for family in &self.families {
            if !groups.contains(&family.locality_group.as_str()) {
                groups.push(&family.locality_group);
            }
        }
        groups
    }
}

/// The key element that encodes a primary-key column of `value_type`, or
/// `None` when the type cannot be part of a row key.
pub fn key_element_kind(value_type: &ValueType) -> Option<ElementKind> {
    use ValueType::*;
    Some(match value_type {
        Bytes | Utf8 => ElementKind::Bytes,
        Bool => ElementKind::Bool,
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | Date32 | Timestamp | Time32(_)
        | Time64(_) | Date64 | Duration(_) | TimestampIn(_) => ElementKind::Int,
        Float32 | Float64 => ElementKind::Float,
        UInt64 | Decimal128(..) | Arrow(_) => return None,
    })
}

/// Whether the version at 1-based position `index` (newest first) with
/// timestamp `ts` survives `gc` at time `now`.
pub fn gc_visible(gc: &GcPolicy, index: usize, ts: i64, now: i64) -> bool {
    if gc.max_versions.is_some_and(|max| index > max as usize) {
        return false;
    }
    if gc
        .max_age_micros
        .is_some_and(|age| ts < now.saturating_sub(age))
    {
        return false;
    }
    true
}
