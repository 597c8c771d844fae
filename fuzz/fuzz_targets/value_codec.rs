//! The cell value codec: any bytes read as any value type either decode or
//! give an error, never a panic; a decoded value encodes back to the same
//! bytes (booleans to their canonical byte); and a value usable in a row
//! key round-trips through the key element.
//!
//! An input is four bytes that choose the type (type, unit, precision,
//! scale), then the cell's bytes as stored. The cell's bytes are the input's
//! own, not an `Arbitrary` `Vec`, which interleaves them with continuation
//! flags: a stored value (an Arrow IPC message, say) can then be given as a
//! seed and mutated in place.

#![no_main]

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{DataType, Field, Fields, IntervalUnit};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;
use widesql::internals::{
    append_cell, append_element, builder, encode_cell, encode_element, Element,
};
use widesql::{ArrowType, Unit, ValueType};

#[derive(Debug)]
struct Input {
    type_index: u8,
    unit: u8,
    precision: u8,
    scale: i8,
    bytes: Vec<u8>,
}

impl Input {
    fn parse(data: &[u8]) -> Option<Self> {
        let ([type_index, unit, precision, scale], bytes) = data.split_first_chunk::<4>()?;
        Some(Input {
            type_index: *type_index,
            unit: *unit,
            precision: *precision,
            scale: i8::from_ne_bytes([*scale]),
            bytes: bytes.to_vec(),
        })
    }
}

fn value_type(input: &Input) -> ValueType {
    let unit = [
        Unit::Second,
        Unit::Millisecond,
        Unit::Microsecond,
        Unit::Nanosecond,
    ][usize::from(input.unit % 4)];
    match input.type_index % 27 {
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
        25 => ValueType::Arrow(ArrowType(DataType::Struct(Fields::from(vec![
            Field::new("x", DataType::Float64, true),
            Field::new("label", DataType::Utf8, true),
        ])))),
        26 => ValueType::Arrow(ArrowType(DataType::Map(
            Arc::new(Field::new(
                "entries",
                DataType::Struct(Fields::from(vec![
                    Field::new("key", DataType::Utf8, false),
                    Field::new("value", DataType::Int64, true),
                ])),
                false,
            )),
            false,
        ))),
        _ => ValueType::Decimal128(input.precision % 39, input.scale),
    }
}

fn decode(value_type: &ValueType, bytes: &[u8]) -> Option<ArrayRef> {
    let mut b = builder(value_type, 1);
    append_cell(b.as_mut(), value_type, Some(bytes)).ok()?;
    Some(b.finish())
}

/// libfuzzer-sys's panic hook aborts on every panic, also one that is
/// caught. widesql catches the panics of Arrow's IPC reader on a corrupt
/// message and makes them the cell's error, so this hook lets panics in
/// Arrow's crates unwind, silently; a panic anywhere else aborts through
/// libfuzzer-sys's hook, with its message. An Arrow panic that nothing in
/// widesql catches still ends the run: libfuzzer-sys catches it and aborts,
/// though without printing it (replay the input in a test to see it).
fn let_arrow_panics_unwind() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let aborting = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_arrow = info
                .location()
                .is_some_and(|l| l.file().contains("/arrow-"));
            if !in_arrow {
                aborting(info);
            }
        }));
    });
}

fuzz_target!(|data: &[u8]| {
    let_arrow_panics_unwind();
    let Some(input) = Input::parse(data) else {
        return;
    };
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
