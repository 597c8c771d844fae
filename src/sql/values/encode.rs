//! Arrow values encoded into cell bytes and row-key elements.

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType, UInt16Type, UInt32Type, UInt64Type,
    UInt8Type,
};

use super::{arrow_cells, sql_type_name, DecodeError};
use crate::keys::Element;
use crate::table::spec::ValueType;

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
