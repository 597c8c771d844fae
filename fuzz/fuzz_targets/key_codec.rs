//! The key codec: every tuple round-trips, the byte order of encodings is
//! the tuple order, and no byte string makes a decoder panic.

#![no_main]

use std::cmp::Ordering;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use widesql::internals::{decode_tuple, encode_tuple, CellKey, Element, ElementKind};

#[derive(Arbitrary, Debug)]
enum Value {
    Bytes(Vec<u8>),
    Int(i64),
    Float(f64),
    Bool(bool),
    Timestamp(i64),
}

impl Value {
    fn element(&self) -> Element {
        match self {
            Value::Bytes(b) => Element::Bytes(b.clone()),
            Value::Int(v) => Element::Int(*v),
            Value::Float(v) => Element::Float(*v),
            Value::Bool(v) => Element::Bool(*v),
            Value::Timestamp(v) => Element::Timestamp(*v),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Input {
    /// Two tuples: each round-trips; when their kinds agree position by
    /// position, byte order equals tuple order.
    Tuples(Vec<Value>, Vec<Value>),
    /// Arbitrary bytes decoded as a tuple of the given kinds.
    Decode(Vec<u8>, Vec<u8>),
    /// A cell key round-trips, and arbitrary bytes decode or fail cleanly.
    Cell {
        prefix: Vec<u8>,
        row: Vec<u8>,
        family: u16,
        qualifier: Vec<u8>,
        timestamp: i64,
        junk: Vec<u8>,
    },
}

fn kinds(tuple: &[Element]) -> Vec<ElementKind> {
    tuple.iter().map(Element::kind).collect()
}

fn same(a: &Element, b: &Element) -> bool {
    a.key_cmp(b) == Some(Ordering::Equal)
}

/// Tuple order: element by element, a prefix first. `None` when the kinds
/// differ at a compared position.
fn tuple_cmp(a: &[Element], b: &[Element]) -> Option<Ordering> {
    for (x, y) in a.iter().zip(b) {
        match x.key_cmp(y)? {
            Ordering::Equal => continue,
            unequal => return Some(unequal),
        }
    }
    Some(a.len().cmp(&b.len()))
}

fn round_trip(tuple: &[Element]) -> Option<Vec<u8>> {
    // Only timestamps outside the encodable range may be refused.
    let bytes = match encode_tuple(tuple) {
        Ok(bytes) => bytes,
        Err(_) => {
            assert!(
                tuple
                    .iter()
                    .any(|e| matches!(e, Element::Timestamp(t) if *t < 0)),
                "refused {tuple:?}"
            );
            return None;
        }
    };
    let back = decode_tuple(&bytes, &kinds(tuple)).expect("an encoding decodes");
    assert_eq!(back.len(), tuple.len());
    assert!(
        back.iter().zip(tuple).all(|(a, b)| same(a, b)),
        "{tuple:?} came back as {back:?}"
    );
    Some(bytes)
}

const KINDS: [ElementKind; 5] = [
    ElementKind::Bytes,
    ElementKind::Int,
    ElementKind::Float,
    ElementKind::Bool,
    ElementKind::Timestamp,
];

fuzz_target!(|input: Input| {
    match input {
        Input::Tuples(a, b) => {
            let a: Vec<Element> = a.iter().map(Value::element).collect();
            let b: Vec<Element> = b.iter().map(Value::element).collect();
            let (Some(ea), Some(eb)) = (round_trip(&a), round_trip(&b)) else {
                return;
            };
            if let Some(order) = tuple_cmp(&a, &b) {
                assert_eq!(ea.cmp(&eb), order, "{a:?} vs {b:?}");
            }
        }
        Input::Decode(bytes, kind_bytes) => {
            let kinds: Vec<ElementKind> = kind_bytes
                .iter()
                .map(|k| KINDS[usize::from(*k) % KINDS.len()])
                .collect();
            if let Ok(tuple) = decode_tuple(&bytes, &kinds) {
                // What decodes encodes back to the same bytes.
                assert_eq!(encode_tuple(&tuple).expect("re-encodes"), bytes);
            }
        }
        Input::Cell {
            prefix,
            row,
            family,
            qualifier,
            timestamp,
            junk,
        } => {
            if let Ok(key) = CellKey::encode(&prefix, &row, family, &qualifier, timestamp) {
                let cell = CellKey::decode(&key, prefix.len()).expect("a cell key decodes");
                assert_eq!(
                    (
                        cell.row.as_ref(),
                        cell.family,
                        cell.qualifier.as_ref(),
                        cell.timestamp
                    ),
                    (&row[..], family, &qualifier[..], timestamp)
                );
                assert_eq!(
                    CellKey::encoded_row_len(&key, prefix.len()).expect("a row length"),
                    CellKey::row_prefix(&[], &row).len()
                );
            }
            let _ = CellKey::decode(&junk, 0);
            let _ = CellKey::encoded_row_len(&junk, 0);
        }
    }
});
