//! Regressions found by the fuzz targets in `fuzz/` (their inputs are kept
//! in `fuzz/regressions/<target>/`; `cargo fuzz run <target>
//! fuzz/regressions/<target>/*` replays them).

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

/// The nested types of the value_codec target: its type bytes 24 and 25.
fn list_and_struct_types() -> [ValueType; 2] {
    use datafusion::arrow::datatypes::{DataType, Field, Fields};
    use widesql::ArrowType;
    [
        ValueType::Arrow(ArrowType(DataType::new_list(DataType::Int32, true))),
        ValueType::Arrow(ArrowType(DataType::Struct(Fields::from(vec![
            Field::new("x", DataType::Float64, true),
            Field::new("label", DataType::Utf8, true),
        ])))),
    ]
}

/// value_codec crash-89b20aab (a buffer offset past the message's body) and
/// crash-3874e3c0 (a column longer than its null bitmap): Arrow's IPC
/// reader trusts both and panicked, ending the query that read the cell.
/// Both are the cell's error now.
#[test]
fn corrupt_nested_cells_are_errors_not_panics() {
    use widesql::internals::append_cell;
    let crashes: [(&[u8], usize); 2] = [
        (
            include_bytes!(
                "../fuzz/regressions/value_codec/crash-89b20aab1b87f9fe16d4122d18d7c7b4fec6f1cb"
            ),
            1,
        ),
        (
            include_bytes!(
                "../fuzz/regressions/value_codec/crash-3874e3c014a8e31ca1efaaa585166148aa14c7a5"
            ),
            0,
        ),
    ];
    let types = list_and_struct_types();
    for (input, type_at) in crashes {
        let value_type = &types[type_at];
        let mut b = builder(value_type, 1);
        // The target's first four bytes choose the type; the rest is the cell.
        let e = append_cell(b.as_mut(), value_type, Some(&input[4..]))
            .expect_err("corrupt bytes decoded");
        assert!(e.to_string().contains("is not a"), "{e}");
    }
}

/// value_codec crash-7f8f83bd: a struct message whose one value is NULL
/// decoded as NULL, a value no cell holds (a NULL is no cell), so it did not
/// encode back. It is the cell's error now.
#[test]
fn a_nested_cell_holding_a_null_is_corrupt() {
    use widesql::internals::append_cell;
    let input = include_bytes!(
        "../fuzz/regressions/value_codec/crash-7f8f83bdfd20f4be1c4b2d8efcabecacb667e842"
    );
    let value_type = &list_and_struct_types()[1];
    let mut b = builder(value_type, 1);
    let e = append_cell(b.as_mut(), value_type, Some(&input[4..])).expect_err("a NULL decoded");
    assert!(e.to_string().contains("holds a NULL"), "{e}");
}

/// The same bytes written into a STRUCT column's cell with the embedded API
/// (which stores any bytes): a query reading the column fails naming it,
/// and the table's other rows and columns still read.
#[test]
fn a_corrupt_struct_cell_fails_the_query_that_reads_it() -> Result<(), common::BoxError> {
    use widesql::RowMutation;
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    common::run(
        &db,
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n INT, pos STRUCT<x DOUBLE, label VARCHAR>);
         INSERT INTO t VALUES ('a', 1, {x: 1.5, label: 'ok'}), ('b', 2, NULL)",
    )?;
    let family = common::query(
        &db,
        "SELECT DISTINCT family FROM cells('t') WHERE qualifier = 'n'",
    )?;
    let corrupt = &include_bytes!(
        "../fuzz/regressions/value_codec/crash-89b20aab1b87f9fe16d4122d18d7c7b4fec6f1cb"
    )[4..];
    db.open_table("default", "public", "t")?.mutate_row(
        b"b",
        &RowMutation::new().set(family[0][0].as_str(), "pos", corrupt),
    )?;
    let e = common::query(&db, "SELECT pos FROM t")
        .err()
        .ok_or("the corrupt cell was read")?;
    assert!(e.to_string().contains("pos"), "{e}");
    assert_eq!(
        common::query(&db, "SELECT _key, n, pos['label'] FROM t WHERE _key = 'a'")?,
        vec![vec!["a".to_string(), "1".into(), "ok".into()]]
    );
    assert_eq!(
        common::query(&db, "SELECT _key, n FROM t ORDER BY _key")?.len(),
        2
    );
    Ok(())
}

/// A nested cell says how many values it holds, and a `LIST<NULL>` cell of
/// two billion NULLs takes a few bytes. Two of them in one batch pass the
/// 32-bit offsets of an Arrow list: the second is the cell's error, not a
/// panic when the batch is built.
#[test]
fn nested_cells_past_arrows_offsets_are_errors_not_panics() {
    use datafusion::arrow::array::{Array, ListArray, NullArray};
    use datafusion::arrow::buffer::OffsetBuffer;
    use datafusion::arrow::datatypes::{DataType, Field};
    use widesql::internals::append_cell;
    use widesql::ArrowType;
    let most = i32::MAX as usize;
    let huge: ArrayRef = Arc::new(ListArray::new(
        Arc::new(Field::new_list_field(DataType::Null, true)),
        OffsetBuffer::from_lengths([most]),
        Arc::new(NullArray::new(most)),
        None,
    ));
    let cell = encode_cell(&huge, 0).expect("encodes").expect("not NULL");
    assert!(cell.len() < 1024, "{} bytes", cell.len());
    let value_type = ValueType::Arrow(ArrowType(huge.data_type().clone()));
    let mut b = builder(&value_type, 2);
    append_cell(b.as_mut(), &value_type, Some(&cell)).expect("one fits");
    let e = append_cell(b.as_mut(), &value_type, Some(&cell)).expect_err("two do not fit");
    assert!(e.to_string().contains("2 GiB"), "{e}");
    let built = b.finish();
    assert_eq!(built.len(), 1);
    assert_eq!(
        built
            .as_any()
            .downcast_ref::<ListArray>()
            .expect("a list")
            .value_length(0),
        most as i32
    );
}
