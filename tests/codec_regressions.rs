//! Regressions found by the fuzz targets in `fuzz/` (their inputs are kept
//! in `fuzz/regressions/<target>/`; `cargo fuzz run <target>
//! fuzz/regressions/<target>/*` replays them).

#![allow(
    clippy::expect_used,
    reason = "a test: a failed expectation is the test failing"
)]

mod common;

use datafusion::arrow::array::{ArrayRef, UInt64Array};
use std::sync::Arc;
use widesql::internals::{
    append_element, builder, decode_tuple, encode_cell, encode_element, encode_tuple, Element,
    ElementKind,
};
use widesql::{Db, ValueType};

/// key_codec crash-80a97160: a boolean key byte other than 0 or 1 decoded
/// as `true`, so two stored keys read as one tuple. It is corrupt now.
#[test]
fn a_boolean_key_byte_other_than_0_and_1_is_corrupt() {
    for byte in [0x02u8, 0x24, 0xFF] {
        let e = decode_tuple(&[byte], &[ElementKind::Bool]).expect_err("not a boolean");
        assert!(e.to_string().contains("not a boolean"), "{e}");
    }
    for value in [false, true] {
        let bytes = encode_tuple(&[Element::Bool(value)]).expect("encodes");
        let back = decode_tuple(&bytes, &[ElementKind::Bool]).expect("decodes");
        assert_eq!(back, vec![Element::Bool(value)]);
    }
}

/// value_codec crash-5355031a: a BIGINT UNSIGNED row-key part was stored as
/// its bit pattern in an i64 (values from 2^63 sorted first) and could not
/// be read back at all. Parts up to i64::MAX round-trip; larger ones are
/// refused with the limit.
#[test]
fn unsigned_bigint_key_parts_round_trip_or_are_refused() {
    let array: ArrayRef = Arc::new(UInt64Array::from(vec![0, 5, i64::MAX as u64, u64::MAX]));
    for row in 0..3 {
        let element = encode_element(&array, row, &ValueType::UInt64)
            .expect("fits")
            .expect("not NULL");
        let mut b = builder(&ValueType::UInt64, 1);
        append_element(b.as_mut(), &ValueType::UInt64, &element).expect("decodes");
        assert_eq!(
            encode_cell(&b.finish(), 0).expect("encodes"),
            encode_cell(&array, row).expect("encodes")
        );
    }
    let e = encode_element(&array, 3, &ValueType::UInt64).expect_err("too large");
    assert!(e.contains("at most 9223372036854775807"), "{e}");
    // SQL refuses the type in a composite key when the table is made.
    let dir = tempfile::tempdir().expect("a directory");
    let db = Db::open(dir.path()).expect("a database");
    let e = common::run(
        &db,
        "CREATE TABLE u (a BIGINT UNSIGNED, b INT, PRIMARY KEY (a, b))",
    )
    .expect_err("not a key type");
    assert!(e.to_string().contains("'a'"), "{e}");
}

/// value_codec crash (Float32 through Float(NaN)): a REAL key part holding
/// a NaN with payload bits came back with other bits. Every NaN key part
/// is the canonical NaN now, in REAL and DOUBLE alike.
#[test]
fn nan_key_parts_are_the_canonical_nan() {
    use datafusion::arrow::array::{Float32Array, Float64Array};
    let payload32 = f32::from_bits(0xFF9D_E700);
    let payload64 = f64::from_bits(0x7FF0_0000_0000_0001);
    let arrays: [(ArrayRef, ValueType, Vec<u8>); 2] = [
        (
            Arc::new(Float32Array::from(vec![payload32])),
            ValueType::Float32,
            f32::NAN.to_be_bytes().to_vec(),
        ),
        (
            Arc::new(Float64Array::from(vec![payload64])),
            ValueType::Float64,
            f64::NAN.to_be_bytes().to_vec(),
        ),
    ];
    for (array, value_type, canonical) in arrays {
        let element = encode_element(&array, 0, &value_type)
            .expect("a key part")
            .expect("not NULL");
        let mut b = builder(&value_type, 1);
        append_element(b.as_mut(), &value_type, &element).expect("decodes");
        assert_eq!(
            encode_cell(&b.finish(), 0).expect("encodes"),
            Some(canonical)
        );
    }
}
