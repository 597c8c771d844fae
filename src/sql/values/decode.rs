//! Cell bytes and row-key elements decoded into Arrow builders.

use datafusion::arrow::array::{
    ArrayBuilder, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder,
    Float64Builder, Int16Builder, Int32Builder, Int64Builder, Int8Builder, StringBuilder,
    StringViewBuilder, TimestampMicrosecondBuilder, UInt16Builder, UInt32Builder, UInt64Builder,
    UInt8Builder,
};

use super::arrow_cells::ArrowCellBuilder;
use super::{sql_type_name, DecodeError};
use crate::keys::Element;
use crate::table::spec::ValueType;

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
