//! Property tests of the key codec: encodings round-trip, and their byte
//! order equals tuple order, for strings full of 0x00 / 0xFF and timestamps
//! whose bytes contain 0x00.

#![expect(
    clippy::expect_used,
    reason = "a test harness: a failed expectation is the test failing"
)]

use std::cmp::Ordering;

use proptest::prelude::*;
use widesql::internals::{decode_tuple, encode_tuple, CellKey, Element, ElementKind};

/// Bytes drawn mostly from the troublesome values.
fn tricky_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            Just(0x00u8),
            Just(0x01),
            Just(0xFF),
            Just(0xFE),
            any::<u8>()
        ],
        0..8,
    )
}

fn timestamp() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        Just(i64::MAX),
        // Bytes with 0x00 in the middle.
        (0u8..=0x7F, any::<u16>()).prop_map(|(hi, lo)| (i64::from(hi) << 56) | i64::from(lo)),
        0..=i64::MAX,
    ]
}

fn element(kind: ElementKind) -> BoxedStrategy<Element> {
    match kind {
        ElementKind::Bytes => tricky_bytes().prop_map(Element::Bytes).boxed(),
        ElementKind::Int => prop_oneof![
            Just(i64::MIN),
            Just(-1i64),
            Just(0),
            Just(i64::MAX),
            any::<i64>()
        ]
        .prop_map(Element::Int)
        .boxed(),
        ElementKind::Float => prop_oneof![
            Just(f64::NEG_INFINITY),
            Just(-0.0f64),
            Just(0.0),
            Just(f64::INFINITY),
            any::<f64>().prop_filter("NaN has no tuple order", |f| !f.is_nan())
        ]
        .prop_map(Element::Float)
        .boxed(),
        ElementKind::Bool => any::<bool>().prop_map(Element::Bool).boxed(),
        ElementKind::Timestamp => timestamp().prop_map(Element::Timestamp).boxed(),
    }
}

fn kind() -> impl Strategy<Value = ElementKind> {
    prop_oneof![
        Just(ElementKind::Bytes),
        Just(ElementKind::Int),
        Just(ElementKind::Float),
        Just(ElementKind::Bool),
        Just(ElementKind::Timestamp),
    ]
}

/// A schema and two tuples of it.
fn two_tuples() -> impl Strategy<Value = (Vec<ElementKind>, Vec<Element>, Vec<Element>)> {
    prop::collection::vec(kind(), 1..5).prop_flat_map(|kinds| {
        let a: Vec<BoxedStrategy<Element>> = kinds.iter().map(|k| element(*k)).collect();
        let b: Vec<BoxedStrategy<Element>> = kinds.iter().map(|k| element(*k)).collect();
        (Just(kinds), a, b)
    })
}

fn tuple_cmp(a: &[Element], b: &[Element]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        match x.key_cmp(y).expect("same schema") {
            Ordering::Equal => continue,
            other => return other,
        }
    }
    Ordering::Equal
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn tuples_round_trip((kinds, a, _b) in two_tuples()) {
        let encoded = encode_tuple(&a).unwrap();
        let decoded = decode_tuple(&encoded, &kinds).unwrap();
        // -0.0 == 0.0 under PartialEq; compare bit patterns through the encoding.
        prop_assert_eq!(encode_tuple(&decoded).unwrap(), encoded);
    }

    #[test]
    fn byte_order_is_tuple_order((_kinds, a, b) in two_tuples()) {
        let ea = encode_tuple(&a).unwrap();
        let eb = encode_tuple(&b).unwrap();
        prop_assert_eq!(ea.cmp(&eb), tuple_cmp(&a, &b));
    }

    #[test]
    fn cell_keys_round_trip_and_sort(
        r1 in tricky_bytes(), q1 in tricky_bytes(), f1 in any::<u16>(), t1 in timestamp(),
        r2 in tricky_bytes(), q2 in tricky_bytes(), f2 in any::<u16>(), t2 in timestamp(),
    ) {
        let k1 = CellKey::encode(b"pfx", &r1, f1, &q1, t1).unwrap();
        let k2 = CellKey::encode(b"pfx", &r2, f2, &q2, t2).unwrap();
        let d1 = CellKey::decode(&k1, 3).unwrap();
        prop_assert_eq!(&*d1.row, r1.as_slice());
        prop_assert_eq!(d1.family, f1);
        prop_assert_eq!(&*d1.qualifier, q1.as_slice());
        prop_assert_eq!(d1.timestamp, t1);
        // Rows, then families, then qualifiers ascending; timestamps newest first.
        let expected = (&r1, f1, &q1, std::cmp::Reverse(t1)).cmp(&(&r2, f2, &q2, std::cmp::Reverse(t2)));
        prop_assert_eq!(k1.cmp(&k2), expected);
        // A row's prefix covers exactly its own cells.
        let p1 = CellKey::row_prefix(b"pfx", &r1);
        prop_assert_eq!(k2.starts_with(&p1), r1 == r2);
    }

    #[test]
    fn decoding_garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
        let _ = CellKey::decode(&bytes, 0);
        let _ = decode_tuple(&bytes, &[ElementKind::Bytes, ElementKind::Int, ElementKind::Timestamp]);
    }
}
