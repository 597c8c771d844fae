//! Cell values and Arrow: which Arrow type a [`ValueType`] is, how cell bytes
//! decode into Arrow builders, and how Arrow values encode into cell bytes
//! and row-key elements.

pub(crate) mod arrow_cells;
pub(crate) mod literal;

mod decode;
mod encode;

pub use decode::{append_cell, append_element};
pub use encode::{encode_cell, encode_element};

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayBuilder, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder,
    Float64Builder, Int16Builder, Int32Builder, Int64Builder, Int8Builder, StringBuilder,
    StringViewBuilder, TimestampMicrosecondBuilder, UInt16Builder, UInt32Builder, UInt64Builder,
    UInt8Builder,
};
use datafusion::arrow::datatypes::{DataType, FieldRef, TimeUnit};

use crate::table::spec::{ArrowType, Unit, ValueType};
use arrow_cells::ArrowCellBuilder;

/// The Arrow type SQL shows for a column of a value type. Text is
/// `Utf8View`, as DataFusion 55 types VARCHAR.
pub fn arrow_type(value_type: &ValueType) -> DataType {
    match value_type {
        ValueType::Utf8 => DataType::Utf8View,
        other => map_value_type(other),
    }
}

/// The Arrow type of map values of a value type: text is `Utf8`, as in
/// DataFusion's map literals (`MAP {'k': 'v'}`).
pub fn map_value_type(value_type: &ValueType) -> DataType {
    match value_type {
        ValueType::Bytes => DataType::Binary,
        ValueType::Utf8 => DataType::Utf8,
        ValueType::Bool => DataType::Boolean,
        ValueType::Int8 => DataType::Int8,
        ValueType::Int16 => DataType::Int16,
        ValueType::Int32 => DataType::Int32,
        ValueType::Int64 => DataType::Int64,
        ValueType::UInt8 => DataType::UInt8,
        ValueType::UInt16 => DataType::UInt16,
        ValueType::UInt32 => DataType::UInt32,
        ValueType::UInt64 => DataType::UInt64,
        ValueType::Float32 => DataType::Float32,
        ValueType::Float64 => DataType::Float64,
        ValueType::Date32 => DataType::Date32,
        ValueType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
        ValueType::Decimal128(p, s) => DataType::Decimal128(*p, *s),
        ValueType::Time32(u) => DataType::Time32(arrow_unit(*u)),
        ValueType::Time64(u) => DataType::Time64(arrow_unit(*u)),
        ValueType::Date64 => DataType::Date64,
        ValueType::Duration(u) => DataType::Duration(arrow_unit(*u)),
        ValueType::TimestampIn(u) => DataType::Timestamp(arrow_unit(*u), None),
        ValueType::Arrow(ArrowType(data_type)) => data_type.clone(),
    }
}

fn arrow_unit(unit: Unit) -> TimeUnit {
    match unit {
        Unit::Second => TimeUnit::Second,
        Unit::Millisecond => TimeUnit::Millisecond,
        Unit::Microsecond => TimeUnit::Microsecond,
        Unit::Nanosecond => TimeUnit::Nanosecond,
    }
}

fn our_unit(unit: &TimeUnit) -> Unit {
    match unit {
        TimeUnit::Second => Unit::Second,
        TimeUnit::Millisecond => Unit::Millisecond,
        TimeUnit::Microsecond => Unit::Microsecond,
        TimeUnit::Nanosecond => Unit::Nanosecond,
    }
}

/// The value type that stores an Arrow type, if any.
pub fn value_type_of(data_type: &DataType) -> Option<ValueType> {
    Some(match data_type {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => ValueType::Bytes,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => ValueType::Utf8,
        DataType::Boolean => ValueType::Bool,
        DataType::Int8 => ValueType::Int8,
        DataType::Int16 => ValueType::Int16,
        DataType::Int32 => ValueType::Int32,
        DataType::Int64 => ValueType::Int64,
        DataType::UInt8 => ValueType::UInt8,
        DataType::UInt16 => ValueType::UInt16,
        DataType::UInt32 => ValueType::UInt32,
        DataType::UInt64 => ValueType::UInt64,
        DataType::Float16 | DataType::Float32 => ValueType::Float32,
        DataType::Float64 => ValueType::Float64,
        DataType::Date32 => ValueType::Date32,
        DataType::Timestamp(TimeUnit::Microsecond, None) => ValueType::Timestamp,
        DataType::Timestamp(unit, None) => ValueType::TimestampIn(our_unit(unit)),
        DataType::Time32(unit) => ValueType::Time32(our_unit(unit)),
        DataType::Time64(unit) => ValueType::Time64(our_unit(unit)),
        DataType::Date64 => ValueType::Date64,
        DataType::Duration(unit) => ValueType::Duration(our_unit(unit)),
        DataType::Decimal128(p, s) => ValueType::Decimal128(*p, *s),
        // A dictionary is an encoding: the values are stored.
        DataType::Dictionary(_, value) => return value_type_of(value),
        // Arrow IPC, which stores the other types, cannot write views of
        // lists.
        DataType::ListView(_) | DataType::LargeListView(_) => return None,
        other => ValueType::Arrow(ArrowType(without_dictionaries(other))),
    })
}

/// `data_type` with every dictionary inside it replaced by its value type:
/// a dictionary is an encoding, and a cell holds one value.
fn without_dictionaries(data_type: &DataType) -> DataType {
    let field = |f: &FieldRef| -> FieldRef {
        Arc::new(
            f.as_ref()
                .clone()
                .with_data_type(without_dictionaries(f.data_type())),
        )
    };
    match data_type {
        DataType::Dictionary(_, value) => without_dictionaries(value),
        DataType::List(f) => DataType::List(field(f)),
        DataType::LargeList(f) => DataType::LargeList(field(f)),
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(field(f), *n),
        DataType::Map(f, sorted) => DataType::Map(field(f), *sorted),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(field).collect()),
        other => other.clone(),
    }
}

/// A builder for a column of values of `value_type` (see `arrow_type`).
pub fn builder(value_type: &ValueType, capacity: usize) -> Box<dyn ArrayBuilder> {
    match value_type {
        ValueType::Utf8 => Box::new(StringViewBuilder::with_capacity(capacity)),
        other => map_value_builder(other, capacity),
    }
}

/// A builder for map values of `value_type` ([`map_value_type`]).
pub fn map_value_builder(value_type: &ValueType, capacity: usize) -> Box<dyn ArrayBuilder> {
    match value_type {
        ValueType::Bytes => Box::new(BinaryBuilder::with_capacity(capacity, capacity * 8)),
        ValueType::Utf8 => Box::new(StringBuilder::with_capacity(capacity, capacity * 8)),
        ValueType::Bool => Box::new(BooleanBuilder::with_capacity(capacity)),
        ValueType::Int8 => Box::new(Int8Builder::with_capacity(capacity)),
        ValueType::Int16 => Box::new(Int16Builder::with_capacity(capacity)),
        ValueType::Int32 => Box::new(Int32Builder::with_capacity(capacity)),
        ValueType::Int64 => Box::new(Int64Builder::with_capacity(capacity)),
        ValueType::UInt8 => Box::new(UInt8Builder::with_capacity(capacity)),
        ValueType::UInt16 => Box::new(UInt16Builder::with_capacity(capacity)),
        ValueType::UInt32 => Box::new(UInt32Builder::with_capacity(capacity)),
        ValueType::UInt64 => Box::new(UInt64Builder::with_capacity(capacity)),
        ValueType::Float32 => Box::new(Float32Builder::with_capacity(capacity)),
        ValueType::Float64 => Box::new(Float64Builder::with_capacity(capacity)),
        ValueType::Date32 => Box::new(Date32Builder::with_capacity(capacity)),
        ValueType::Timestamp => Box::new(TimestampMicrosecondBuilder::with_capacity(capacity)),
        ValueType::Decimal128(p, s) => Box::new(
            Decimal128Builder::with_capacity(capacity).with_data_type(DataType::Decimal128(*p, *s)),
        ),
        // Built as their physical integers; the batch is cast to the
        // column's type when it is finished.
        ValueType::Time32(_) => Box::new(Int32Builder::with_capacity(capacity)),
        ValueType::Time64(_)
        | ValueType::Date64
        | ValueType::Duration(_)
        | ValueType::TimestampIn(_) => Box::new(Int64Builder::with_capacity(capacity)),
        ValueType::Arrow(ArrowType(data_type)) => {
            Box::new(ArrowCellBuilder::new(data_type.clone(), capacity))
        }
    }
}

/// Why bytes could not be read as a value.
pub type DecodeError = String;

/// The SQL name of a value type, for messages and `DESCRIBE`.
pub fn sql_type_name(value_type: &ValueType) -> String {
    match value_type {
        ValueType::Bytes => "BYTEA".into(),
        ValueType::Utf8 => "VARCHAR".into(),
        ValueType::Bool => "BOOLEAN".into(),
        ValueType::Int8 => "TINYINT".into(),
        ValueType::Int16 => "SMALLINT".into(),
        ValueType::Int32 => "INT".into(),
        ValueType::Int64 => "BIGINT".into(),
        ValueType::UInt8 => "TINYINT UNSIGNED".into(),
        ValueType::UInt16 => "SMALLINT UNSIGNED".into(),
        ValueType::UInt32 => "INT UNSIGNED".into(),
        ValueType::UInt64 => "BIGINT UNSIGNED".into(),
        ValueType::Float32 => "REAL".into(),
        ValueType::Float64 => "DOUBLE".into(),
        ValueType::Date32 => "DATE".into(),
        ValueType::Timestamp => "TIMESTAMP".into(),
        ValueType::Decimal128(p, s) => format!("DECIMAL({p},{s})"),
        ValueType::Time32(u) | ValueType::Time64(u) => format!("TIME({})", unit_name(*u)),
        ValueType::Date64 => "DATE64".into(),
        ValueType::Duration(u) => format!("DURATION({})", unit_name(*u)),
        ValueType::TimestampIn(u) => format!("TIMESTAMP({})", unit_name(*u)),
        ValueType::Arrow(ArrowType(data_type)) => data_type.to_string(),
    }
}

fn unit_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Second => "s",
        Unit::Millisecond => "ms",
        Unit::Microsecond => "us",
        Unit::Nanosecond => "ns",
    }
}
