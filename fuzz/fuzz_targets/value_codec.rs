//! The cell value codec: any bytes read as any value type either decode or
//! give an error, never a panic; a decoded value encodes back to the same
//! bytes (booleans to their canonical byte); and a value usable in a row
//! key round-trips through the key element.

#![no_main]

use arbitrary::Arbitrary;
use datafusion::arrow::array::ArrayRef;
use libfuzzer_sys::fuzz_target;
use widesql::internals::{
    append_cell, append_element, builder, encode_cell, encode_element, Element,
};
use datafusion::arrow::datatypes::{DataType, IntervalUnit};
use widesql::{ArrowType, Unit, ValueType};

#[derive(Arbitrary, Debug)]
struct Input {
    type_index: u8,
    unit: u8,
    precision: u8,
    scale: i8,
    bytes: Vec<u8>,
}

fn value_type(input: &Input) -> ValueType {
    let unit = [
        Unit::Second,
        Unit::Millisecond,
        Unit::Microsecond,
        Unit::Nanosecond,
    ][usize::from(input.unit % 4)];
    match input.type_index % 25 {
        0 => ValueType::Bytes,
        1 => ValueType::Utf8,
        2 => ValueType::Bool,
        3 => ValueType::Int8,
        4 => ValueType::Int16,
        5 => ValueType::Int32,
        6 => ValueType::Int64,
        7 => ValueType::UInt8,
        8 => ValueType::UInt16,
        9 => ValueType::UInt32,
        10 => ValueType::UInt64,
        11 => ValueType::Float32,
        12 => ValueType::Float64,
        13 => ValueType::Date32,
        14 => ValueType::Timestamp,
        15 => ValueType::Decimal128(input.precision, input.scale),
        16 => ValueType::Time32(unit),
        17 => ValueType::Time64(unit),
        18 => ValueType::Date64,
        19 => ValueType::Duration(unit),
        20 => ValueType::TimestampIn(unit),
        // Arrow types without a codec of their own: fixed-width bytes and
        // one-row IPC streams.
        22 => ValueType::Arrow(ArrowType(DataType::Interval(IntervalUnit::MonthDayNano))),
        23 => ValueType::Arrow(ArrowType(DataType::Decimal256(
            (input.precision % 76).max(1),
            input.scale,
        ))),
        24 => ValueType::Arrow(ArrowType(DataType::new_list(DataType::Int32, true))),
        _ => ValueType::Decimal128(input.precision % 39, input.scale),
    }
}

fn decode(value_type: &ValueType, bytes: &[u8]) -> Option<ArrayRef> {
    let mut b = builder(value_type, 1);
    append_cell(b.as_mut(), value_type, Some(bytes)).ok()?;
    Some(b.finish())
}

fuzz_target!(|input: Input| {
    let value_type = value_type(&input);
    let Some(array) = decode(&value_type, &input.bytes) else {
        return;
    };
    assert_eq!(array.len(), 1);
    let encoded = encode_cell(&array, 0)
        .expect("a decoded value encodes")
        .expect("not NULL");
    if let ValueType::Arrow(ArrowType(t)) = &value_type {
        if t.is_nested() {
            // An IPC message may be written other than it was read
            // (padding, unused buffer bytes): the value is what must come
            // back.
            let again = decode(&value_type, &encoded).expect("an encoded value decodes");
            assert_eq!(again.as_ref(), array.as_ref(), "{value_type:?}");
            return;
        }
    }
    let canonical = match value_type {
        ValueType::Bool => vec![u8::from(input.bytes != [0])],
        _ => input.bytes.clone(),
    };
    assert_eq!(encoded, canonical, "{value_type:?}");

    // As a row-key element, when the type may be one.
    if let Ok(Some(element)) = encode_element(&array, 0, &value_type) {
        let mut b = builder(&value_type, 1);
        append_element(b.as_mut(), &value_type, &element)
            .unwrap_or_else(|e| panic!("{value_type:?} element {element:?} does not decode: {e}"));
        let again = encode_cell(&b.finish(), 0)
            .expect("encodes")
            .expect("not NULL");
        // A NaN key part comes back as the canonical NaN.
        let expected = match (&value_type, &element) {
            (ValueType::Float32, Element::Float(f)) if f.is_nan() => {
                f32::NAN.to_be_bytes().to_vec()
            }
            (ValueType::Float64, Element::Float(f)) if f.is_nan() => {
                f64::NAN.to_be_bytes().to_vec()
            }
            _ => canonical,
        };
        assert_eq!(again, expected, "{value_type:?} through {element:?}");
    }
});
