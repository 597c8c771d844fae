//! Cell values and Arrow: which Arrow type a [`ValueType`] is, how cell bytes
//! decode into Arrow builders, and how Arrow values encode into cell bytes
//! and row-key elements.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayBuilder, ArrayRef, AsArray, BinaryBuilder, BooleanBuilder, Date32Builder,
    Decimal128Builder, Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder,
    Int8Builder, StringBuilder, StringViewBuilder, TimestampMicrosecondBuilder, UInt16Builder,
    UInt32Builder, UInt64Builder, UInt8Builder,
};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, FieldRef, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType, UInt16Type, UInt32Type, UInt64Type,
    UInt8Type,
};

use super::arrow_cells::{self, ArrowCellBuilder};
use crate::keys::Element;
use crate::table::spec::{ArrowType, Unit, ValueType};

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

fn fixed<const N: usize>(bytes: &[u8], value_type: &ValueType) -> Result<[u8; N], DecodeError> {
    <[u8; N]>::try_from(bytes).map_err(|_| {
        format!(
            "holds {} bytes, a {} value has {N}",
            bytes.len(),
            sql_type_name(value_type)
        )
    })
}

macro_rules! append_fixed {
    ($builder:expr, $ty:ty, $bytes:expr, $vt:expr, $n:literal, $conv:expr) => {{
        let b = $builder
            .as_any_mut()
            .downcast_mut::<$ty>()
            .ok_or_else(|| "builder mismatch".to_string())?;
        match $bytes {
            None => b.append_null(),
            Some(bytes) => b.append_value($conv(fixed::<$n>(bytes, $vt)?)),
        }
    }};
}

/// Appends cell bytes (or NULL) decoded as `value_type`.
pub fn append_cell(
    builder: &mut dyn ArrayBuilder,
    value_type: &ValueType,
    bytes: Option<&[u8]>,
) -> Result<(), DecodeError> {
    match value_type {
        ValueType::Bytes => {
            let b = builder
                .as_any_mut()
                .downcast_mut::<BinaryBuilder>()
                .ok_or_else(|| "builder mismatch".to_string())?;
            match bytes {
                None => b.append_null(),
                Some(v) => b.append_value(v),
            }
        }
        ValueType::Utf8 => {
            let text = bytes
                .map(|v| std::str::from_utf8(v).map_err(|_| "is not valid UTF-8".to_string()))
                .transpose()?;
            let any = builder.as_any_mut();
            if let Some(b) = any.downcast_mut::<StringViewBuilder>() {
                b.append_option(text);
            } else if let Some(b) = any.downcast_mut::<StringBuilder>() {
                b.append_option(text);
            } else {
                return Err("builder mismatch".to_string());
            }
        }
        ValueType::Bool => append_fixed!(
            builder,
            BooleanBuilder,
            bytes,
            value_type,
            1,
            |b: [u8; 1]| b[0] != 0
        ),
        ValueType::Int8 => append_fixed!(
            builder,
            Int8Builder,
            bytes,
            value_type,
            1,
            i8::from_be_bytes
        ),
        ValueType::Int16 => append_fixed!(
            builder,
            Int16Builder,
            bytes,
            value_type,
            2,
            i16::from_be_bytes
        ),
        ValueType::Int32 => append_fixed!(
            builder,
            Int32Builder,
            bytes,
            value_type,
            4,
            i32::from_be_bytes
        ),
        ValueType::Int64 => append_fixed!(
            builder,
            Int64Builder,
            bytes,
            value_type,
            8,
            i64::from_be_bytes
        ),
        ValueType::UInt8 => append_fixed!(
            builder,
            UInt8Builder,
            bytes,
            value_type,
            1,
            u8::from_be_bytes
        ),
        ValueType::UInt16 => append_fixed!(
            builder,
            UInt16Builder,
            bytes,
            value_type,
            2,
            u16::from_be_bytes
        ),
        ValueType::UInt32 => append_fixed!(
            builder,
            UInt32Builder,
            bytes,
            value_type,
            4,
            u32::from_be_bytes
        ),
        ValueType::UInt64 => append_fixed!(
            builder,
            UInt64Builder,
            bytes,
            value_type,
            8,
            u64::from_be_bytes
        ),
        ValueType::Float32 => append_fixed!(
            builder,
            Float32Builder,
            bytes,
            value_type,
            4,
            f32::from_be_bytes
        ),
        ValueType::Float64 => append_fixed!(
            builder,
            Float64Builder,
            bytes,
            value_type,
            8,
            f64::from_be_bytes
        ),
        ValueType::Date32 => append_fixed!(
            builder,
            Date32Builder,
            bytes,
            value_type,
            4,
            i32::from_be_bytes
        ),
        ValueType::Timestamp => append_fixed!(
            builder,
            TimestampMicrosecondBuilder,
            bytes,
            value_type,
            8,
            i64::from_be_bytes
        ),
        ValueType::Decimal128(..) => append_fixed!(
            builder,
            Decimal128Builder,
            bytes,
            value_type,
            16,
            i128::from_be_bytes
        ),
        ValueType::Time32(_) => {
            append_fixed!(
                builder,
                Int32Builder,
                bytes,
                value_type,
                4,
                i32::from_be_bytes
            )
        }
        ValueType::Time64(_)
        | ValueType::Date64
        | ValueType::Duration(_)
        | ValueType::TimestampIn(_) => {
            append_fixed!(
                builder,
                Int64Builder,
                bytes,
                value_type,
                8,
                i64::from_be_bytes
            )
        }
        ValueType::Arrow(_) => builder
            .as_any_mut()
            .downcast_mut::<ArrowCellBuilder>()
            .ok_or_else(|| "builder mismatch".to_string())?
            .append(bytes)?,
    }
    Ok(())
}

/// Appends a row-key element decoded as `value_type`.
pub fn append_element(
    builder: &mut dyn ArrayBuilder,
    value_type: &ValueType,
    element: &Element,
) -> Result<(), DecodeError> {
    let mismatch = || {
        format!(
            "row key element {element:?} is not a {}",
            sql_type_name(value_type)
        )
    };
    let bytes: Vec<u8> = match (value_type, element) {
        (ValueType::Bytes | ValueType::Utf8, Element::Bytes(b)) => b.clone(),
        (ValueType::Bool, Element::Bool(v)) => vec![u8::from(*v)],
        (ValueType::Int8, Element::Int(v)) => i8::try_from(*v)
            .map_err(|_| mismatch())?
            .to_be_bytes()
            .to_vec(),
        (ValueType::Int16, Element::Int(v)) => i16::try_from(*v)
            .map_err(|_| mismatch())?
            .to_be_bytes()
            .to_vec(),
        (ValueType::Int32 | ValueType::Date32, Element::Int(v)) => i32::try_from(*v)
            .map_err(|_| mismatch())?
            .to_be_bytes()
            .to_vec(),
        (ValueType::UInt8, Element::Int(v)) => u8::try_from(*v)
            .map_err(|_| mismatch())?
            .to_be_bytes()
            .to_vec(),
        (ValueType::UInt16, Element::Int(v)) => u16::try_from(*v)
            .map_err(|_| mismatch())?
            .to_be_bytes()
            .to_vec(),
        (ValueType::UInt32, Element::Int(v)) => u32::try_from(*v)
            .map_err(|_| mismatch())?
            .to_be_bytes()
            .to_vec(),
        (ValueType::UInt64, Element::Int(v)) => u64::try_from(*v)
            .map_err(|_| mismatch())?
            .to_be_bytes()
            .to_vec(),
        (ValueType::Time32(_), Element::Int(v)) => i32::try_from(*v)
            .map_err(|_| mismatch())?
            .to_be_bytes()
            .to_vec(),
        (
            ValueType::Int64
            | ValueType::Timestamp
            | ValueType::Time64(_)
            | ValueType::Date64
            | ValueType::Duration(_)
            | ValueType::TimestampIn(_),
            Element::Int(v),
        ) => v.to_be_bytes().to_vec(),
        (ValueType::Float32, Element::Float(v)) => (*v as f32).to_be_bytes().to_vec(),
        (ValueType::Float64, Element::Float(v)) => v.to_be_bytes().to_vec(),
        _ => return Err(mismatch()),
    };
    append_cell(builder, value_type, Some(&bytes))
}

/// The cell bytes of `array[row]`, or `None` when it is NULL.
pub fn encode_cell(array: &ArrayRef, row: usize) -> Result<Option<Vec<u8>>, DecodeError> {
    if array.is_null(row) {
        return Ok(None);
    }
    Ok(Some(match array.data_type() {
        DataType::Binary => array.as_binary::<i32>().value(row).to_vec(),
        DataType::LargeBinary => array.as_binary::<i64>().value(row).to_vec(),
        DataType::BinaryView => array.as_binary_view().value(row).to_vec(),
        DataType::Utf8 => array.as_string::<i32>().value(row).as_bytes().to_vec(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).as_bytes().to_vec(),
        DataType::Utf8View => array.as_string_view().value(row).as_bytes().to_vec(),
        DataType::Boolean => vec![u8::from(array.as_boolean().value(row))],
        DataType::Int8 => array
            .as_primitive::<Int8Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::Int16 => array
            .as_primitive::<Int16Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::Int32 => array
            .as_primitive::<Int32Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::Int64 => array
            .as_primitive::<Int64Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::UInt8 => array
            .as_primitive::<UInt8Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::UInt16 => array
            .as_primitive::<UInt16Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::UInt32 => array
            .as_primitive::<UInt32Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::UInt64 => array
            .as_primitive::<UInt64Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::Float32 => array
            .as_primitive::<Float32Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::Float64 => array
            .as_primitive::<Float64Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::Date32 => array
            .as_primitive::<Date32Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::Timestamp(TimeUnit::Microsecond, None) => array
            .as_primitive::<TimestampMicrosecondType>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::Decimal128(..) => array
            .as_primitive::<Decimal128Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::Time32(_) => physical(array, DataType::Int32)?
            .as_primitive::<Int32Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        DataType::Time64(_)
        | DataType::Date64
        | DataType::Duration(_)
        | DataType::Timestamp(_, None) => physical(array, DataType::Int64)?
            .as_primitive::<Int64Type>()
            .value(row)
            .to_be_bytes()
            .to_vec(),
        _ => return arrow_cells::encode(array, row).map(Some),
    }))
}

/// The same values seen as their physical integers (same layout).
fn physical(array: &ArrayRef, as_type: DataType) -> Result<ArrayRef, DecodeError> {
    let data = array
        .to_data()
        .into_builder()
        .data_type(as_type)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(datafusion::arrow::array::make_array(data))
}

/// The row-key element of `array[row]`, or `None` when it is NULL.
pub fn encode_element(
    array: &ArrayRef,
    row: usize,
    value_type: &ValueType,
) -> Result<Option<Element>, DecodeError> {
    let Some(bytes) = encode_cell(array, row)? else {
        return Ok(None);
    };
    let bad = || match value_type {
        ValueType::UInt64 => format!(
            "a {} in a row key is at most {}",
            sql_type_name(value_type),
            i64::MAX
        ),
        _ => format!(
            "cannot use a {} value in a row key",
            sql_type_name(value_type)
        ),
    };
    let int = |n: usize| -> Option<i64> {
        let b = bytes.get(..n)?;
        Some(match (value_type, n) {
            (ValueType::Int8, 1) => i64::from(b[0] as i8),
            (ValueType::UInt8, 1) => i64::from(b[0]),
            (ValueType::Int16, 2) => i64::from(i16::from_be_bytes([b[0], b[1]])),
            (ValueType::UInt16, 2) => i64::from(u16::from_be_bytes([b[0], b[1]])),
            (ValueType::Int32 | ValueType::Date32, 4) => {
                i64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            }
            (ValueType::UInt32, 4) => i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
            // Row keys hold BIGINT UNSIGNED up to i64::MAX, in order.
            (ValueType::UInt64, 8) => {
                i64::try_from(u64::from_be_bytes(<[u8; 8]>::try_from(b).ok()?)).ok()?
            }
            (_, 8) => i64::from_be_bytes(<[u8; 8]>::try_from(b).ok()?),
            _ => return None,
        })
    };
    Ok(Some(match value_type {
        ValueType::Bytes | ValueType::Utf8 => Element::Bytes(bytes),
        ValueType::Bool => Element::Bool(bytes.first().is_some_and(|b| *b != 0)),
        // A NaN key part is stored as the one canonical NaN: payload bits
        // do not survive f32 -> f64 -> f32, and one NaN key is one row.
        ValueType::Float32 => Element::Float(canonical_nan(f64::from(f32::from_be_bytes(
            <[u8; 4]>::try_from(bytes.as_slice()).map_err(|_| bad())?,
        )))),
        ValueType::Float64 => Element::Float(canonical_nan(f64::from_be_bytes(
            <[u8; 8]>::try_from(bytes.as_slice()).map_err(|_| bad())?,
        ))),
        _ => Element::Int(int(bytes.len()).ok_or_else(bad)?),
    }))
}

/// `f64::NAN` for every NaN, the value itself otherwise.
fn canonical_nan(v: f64) -> f64 {
    if v.is_nan() {
        f64::NAN
    } else {
        v
    }
}

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
