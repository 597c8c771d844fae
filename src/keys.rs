//! The key codec: the only place where widesql lays out bytes in a sled key.
//!
//! # On-disk format, version 3
//!
//! Keys are tuples of elements written one after another without type tags;
//! the reader knows the schema (which element kind comes next). Every
//! encoding is *order preserving*: comparing two encoded tuples of the same
//! schema byte-wise gives the same answer as comparing the tuples element by
//! element.
//!
//! | element | encoding | example |
//! |---|---|---|
//! | byte string | each `0x00` written as `0x00 0xFF`, then the terminator `0x00 0x01` | `b"a\0b"` → `61 00 FF 62 00 01` |
//! | `i64` | big-endian with the sign bit flipped | `-1` → `7F FF FF FF FF FF FF FF`, `1` → `80 00 00 00 00 00 00 01` |
//! | `u16` (family id) | big-endian | `3` → `00 03` |
//! | `f64` | IEEE bits, all bits flipped when negative, else the sign bit set | `1.0` → `BF F0 00 00 00 00 00 00` |
//! | `bool` | one byte | `false` → `00`, `true` → `01` |
//! | timestamp (µs, `0..=i64::MAX`) | `!ts` as big-endian `u64`, so newer sorts first | `1` → `FF FF FF FF FF FF FF FE` |
//!
//! The terminator is two bytes, not a single `0x00` as in FoundationDB's
//! tuple layer. FoundationDB can use one byte because every element there
//! starts with a type code, never `0xFF`. Here elements are untagged, and an
//! inverted timestamp always starts with `0xFF`, so after a lone `0x00`
//! terminator a reader could not tell "end of string, timestamp follows"
//! from "escaped `0x00` inside the string". `0x00 0x01` sorts below `0x00
//! 0xFF` (an embedded zero) and below any other byte, so `"a"` < `"a\0"` <
//! `"ab"` holds whatever follows.
//!
//! A cell of a wide-column table has the key
//! `row ‖ family id ‖ qualifier ‖ timestamp`, see [`CellKey`](crate::keys::CellKey).
//! Cells are stored in chunks, one storage entry per row and locality
//! group (more for a very wide row), see [`crate::table::chunks`]; version 1
//! stored one entry per cell. Each user table is one tree, and a chunk's
//! key starts with its locality group's name as a byte string
//! ([`crate::table::layout::group_key_prefix`]); version 2 had a tree per
//! locality group. Version 3 stored every chunk as one entry, however large
//! (see [`crate::table::entries`]).
//!
//! The format version is persisted by the storage layer and checked on open.

use std::borrow::Cow;
use std::cmp::Ordering;

/// Version of the key and value layout written by this build.
pub const FORMAT_VERSION: u32 = 4;

/// Older versions whose databases this build reads as they are: it marks
/// them [`FORMAT_VERSION`] on open. Version 3 stored every chunk as one
/// entry, which version 4 still reads; version 4 stores a chunk larger than
/// an entry holds in parts, which version 3 would misread.
pub const READS_AS_CURRENT: &[u32] = &[3];

/// Bytes that end an encoded byte string.
const TERMINATOR: [u8; 2] = [0x00, 0x01];
/// The escape that follows an embedded `0x00`.
const ESCAPE: u8 = 0xFF;

/// A key could not be decoded: the bytes on disk are not what this format
/// writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key ended in the middle of an element.
    #[error("corrupt key: it ends inside a {element}")]
    Truncated {
        /// Which element kind was being read.
        element: &'static str,
    },
    /// A byte sequence that this format never writes.
    #[error("corrupt key: invalid byte 0x{byte:02x} after 0x00 in a byte string")]
    BadEscape {
        /// The byte found after `0x00`.
        byte: u8,
    },
    /// A boolean byte other than `0x00` and `0x01`.
    #[error("corrupt key: byte 0x{byte:02x} is not a boolean")]
    BadBool {
        /// The byte found.
        byte: u8,
    },
    /// Bytes were left after the last element of the schema.
    #[error("corrupt key: {extra} unexpected trailing bytes")]
    Trailing {
        /// How many bytes were left.
        extra: usize,
    },
    /// A stored chunk of cells whose framing this format never writes.
    #[error("corrupt chunk: {reason}")]
    BadChunk {
        /// What was wrong.
        reason: &'static str,
    },
    /// A timestamp outside `0..=i64::MAX` microseconds.
    #[error("timestamp {0} is out of range: timestamps are microseconds in 0..=i64::MAX")]
    TimestampRange(i64),
}

/// Appends an escaped, terminated byte string.
pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 2);
    for chunk in bytes.split_inclusive(|&b| b == 0) {
        out.extend_from_slice(chunk);
        if chunk.last() == Some(&0) {
            out.push(ESCAPE);
        }
    }
    out.extend_from_slice(&TERMINATOR);
}

/// Appends a sign-flipped big-endian `i64`.
pub fn put_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(&((value as u64) ^ (1 << 63)).to_be_bytes());
}

/// Appends a big-endian `u16`.
pub fn put_u16(out: &mut Vec<u8>, value: u16) {
    out.extend_from_slice(&value.to_be_bytes());
}

/// Appends an order-preserving `f64` (`-inf < -0.0 < 0.0 < inf < NaN`).
pub fn put_f64(out: &mut Vec<u8>, value: f64) {
    let bits = value.to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    out.extend_from_slice(&ordered.to_be_bytes());
}

/// Appends a `bool` as one byte.
pub fn put_bool(out: &mut Vec<u8>, value: bool) {
    out.push(u8::from(value));
}

/// Appends an inverted timestamp so that newer timestamps sort first.
pub fn put_timestamp(out: &mut Vec<u8>, micros: i64) -> Result<(), KeyError> {
    if micros < 0 {
        return Err(KeyError::TimestampRange(micros));
    }
    out.extend_from_slice(&(!(micros as u64)).to_be_bytes());
    Ok(())
}

/// Reads elements back from an encoded key, in schema order.
#[derive(Debug, Clone)]
pub struct KeyReader<'a> {
    rest: &'a [u8],
}

impl<'a> KeyReader<'a> {
    /// Starts reading at the beginning of `key`.
    pub fn new(key: &'a [u8]) -> Self {
        Self { rest: key }
    }

    /// The bytes not read yet.
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }

    /// Fails unless every byte was read.
    pub fn finish(self) -> Result<(), KeyError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(KeyError::Trailing {
                extra: self.rest.len(),
            })
        }
    }

    /// Reads a byte string; borrows when it contained no `0x00`.
    pub fn bytes(&mut self) -> Result<Cow<'a, [u8]>, KeyError> {
        let (len, escaped) = self.encoded_bytes_len()?;
        let encoded = &self.rest[..len];
        self.rest = &self.rest[len..];
        let body = &encoded[..len - TERMINATOR.len()];
        if !escaped {
            return Ok(Cow::Borrowed(body));
        }
        let mut out = Vec::with_capacity(body.len());
        let mut iter = body.iter();
        while let Some(&b) = iter.next() {
            out.push(b);
            if b == 0 {
                iter.next(); // the escape byte, checked by `encoded_bytes_len`
            }
        }
        Ok(Cow::Owned(out))
    }

    /// Skips a byte string and returns its encoded form (escapes and
    /// terminator included).
    pub fn encoded_bytes(&mut self) -> Result<&'a [u8], KeyError> {
        let (len, _) = self.encoded_bytes_len()?;
        let (encoded, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(encoded)
    }

    /// The length of the byte string at the start of what is left (escapes
    /// and terminator included) and whether it holds an escape.
    fn encoded_bytes_len(&self) -> Result<(usize, bool), KeyError> {
        let mut at = 0;
        loop {
            let Some(offset) = memchr::memchr(0, &self.rest[at..]) else {
                return Err(KeyError::Truncated {
                    element: "byte string",
                });
            };
            let zero = at + offset;
            match self.rest.get(zero + 1) {
                Some(&ESCAPE) => at = zero + 2,
                Some(&1) => return Ok((zero + 2, at > 0)),
                Some(&byte) => return Err(KeyError::BadEscape { byte }),
                None => {
                    return Err(KeyError::Truncated {
                        element: "byte string",
                    })
                }
            }
        }
    }

    fn fixed<const N: usize>(&mut self, element: &'static str) -> Result<[u8; N], KeyError> {
        let Some((head, rest)) = self.rest.split_first_chunk::<N>() else {
            return Err(KeyError::Truncated { element });
        };
        self.rest = rest;
        Ok(*head)
    }

    /// Reads a sign-flipped `i64`.
    pub fn i64(&mut self) -> Result<i64, KeyError> {
        Ok((u64::from_be_bytes(self.fixed("i64")?) ^ (1 << 63)) as i64)
    }

    /// Reads a big-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, KeyError> {
        Ok(u16::from_be_bytes(self.fixed("u16")?))
    }

    /// Reads an order-preserving `f64`.
    pub fn f64(&mut self) -> Result<f64, KeyError> {
        let ordered = u64::from_be_bytes(self.fixed("f64")?);
        let bits = if ordered >> 63 == 1 {
            ordered & !(1 << 63)
        } else {
            !ordered
        };
        Ok(f64::from_bits(bits))
    }

    /// Reads a `bool`: `0x00` or `0x01`, nothing else.
    pub fn bool(&mut self) -> Result<bool, KeyError> {
        match self.fixed::<1>("bool")? {
            [0] => Ok(false),
            [1] => Ok(true),
            [byte] => Err(KeyError::BadBool { byte }),
        }
    }

    /// Reads an inverted timestamp.
    pub fn timestamp(&mut self) -> Result<i64, KeyError> {
        let micros = !u64::from_be_bytes(self.fixed("timestamp")?);
        i64::try_from(micros).map_err(|_| KeyError::TimestampRange(micros as i64))
    }
}

/// The smallest byte string greater than every string that starts with
/// `prefix`, or `None` when there is none (`prefix` is empty or all `0xFF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut out = prefix.to_vec();
    while let Some(last) = out.pop() {
        if last < 0xFF {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
}

/// One element of a tuple, used where the schema is data (composite
/// primary keys) rather than code.
#[derive(Debug, Clone, PartialEq)]
pub enum Element {
    /// A byte or UTF-8 string.
    Bytes(Vec<u8>),
    /// A signed integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A timestamp in microseconds, newest first.
    Timestamp(i64),
}

/// The kind of an [`Element`], the schema a reader needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementKind {
    /// [`Element::Bytes`].
    Bytes,
    /// [`Element::Int`].
    Int,
    /// [`Element::Float`].
    Float,
    /// [`Element::Bool`].
    Bool,
    /// [`Element::Timestamp`].
    Timestamp,
}

impl Element {
    /// The kind of this element.
    pub fn kind(&self) -> ElementKind {
        match self {
            Element::Bytes(_) => ElementKind::Bytes,
            Element::Int(_) => ElementKind::Int,
            Element::Float(_) => ElementKind::Float,
            Element::Bool(_) => ElementKind::Bool,
            Element::Timestamp(_) => ElementKind::Timestamp,
        }
    }

    /// Appends the encoding of this element.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), KeyError> {
        match self {
            Element::Bytes(b) => put_bytes(out, b),
            Element::Int(v) => put_i64(out, *v),
            Element::Float(v) => put_f64(out, *v),
            Element::Bool(v) => put_bool(out, *v),
            Element::Timestamp(v) => put_timestamp(out, *v)?,
        }
        Ok(())
    }

    /// Reads one element of `kind`.
    pub fn decode(reader: &mut KeyReader<'_>, kind: ElementKind) -> Result<Element, KeyError> {
        Ok(match kind {
            ElementKind::Bytes => Element::Bytes(reader.bytes()?.into_owned()),
            ElementKind::Int => Element::Int(reader.i64()?),
            ElementKind::Float => Element::Float(reader.f64()?),
            ElementKind::Bool => Element::Bool(reader.bool()?),
            ElementKind::Timestamp => Element::Timestamp(reader.timestamp()?),
        })
    }

    /// The order the encoding preserves: timestamps newest first, floats by
    /// their total order.
    pub fn key_cmp(&self, other: &Element) -> Option<Ordering> {
        match (self, other) {
            (Element::Bytes(a), Element::Bytes(b)) => Some(a.cmp(b)),
            (Element::Int(a), Element::Int(b)) => Some(a.cmp(b)),
            (Element::Float(a), Element::Float(b)) => Some(float_key_order(*a, *b)),
            (Element::Bool(a), Element::Bool(b)) => Some(a.cmp(b)),
            (Element::Timestamp(a), Element::Timestamp(b)) => Some(b.cmp(a)),
            _ => None,
        }
    }
}

/// `-inf < … < -0.0 < 0.0 < … < inf < NaN` (negative NaNs first).
fn float_key_order(a: f64, b: f64) -> Ordering {
    let mut ka = Vec::with_capacity(8);
    let mut kb = Vec::with_capacity(8);
    put_f64(&mut ka, a);
    put_f64(&mut kb, b);
    ka.cmp(&kb)
}

/// A tuple of elements: the encoding of a composite primary key.
pub type Tuple = Vec<Element>;

/// Encodes a tuple.
pub fn encode_tuple(tuple: &[Element]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::new();
    for element in tuple {
        element.encode_into(&mut out)?;
    }
    Ok(out)
}

/// Decodes a tuple of the given schema; every byte must be used.
pub fn decode_tuple(bytes: &[u8], kinds: &[ElementKind]) -> Result<Tuple, KeyError> {
    let mut reader = KeyReader::new(bytes);
    let tuple = kinds
        .iter()
        .map(|&kind| Element::decode(&mut reader, kind))
        .collect::<Result<Tuple, _>>()?;
    reader.finish()?;
    Ok(tuple)
}

/// The key of one cell version: `prefix ‖ row ‖ family id ‖ qualifier ‖
/// timestamp`. The prefix is empty in user tables and the system table id in
/// the catalog tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellKey<'a> {
    /// The row key.
    pub row: Cow<'a, [u8]>,
    /// The column family's numeric id.
    pub family: u16,
    /// The column qualifier.
    pub qualifier: Cow<'a, [u8]>,
    /// The version timestamp in microseconds.
    pub timestamp: i64,
}

impl<'a> CellKey<'a> {
    /// Encodes the cell key after `prefix`.
    pub fn encode(
        prefix: &[u8],
        row: &[u8],
        family: u16,
        qualifier: &[u8],
        timestamp: i64,
    ) -> Result<Vec<u8>, KeyError> {
        let mut out = Self::column_prefix(prefix, row, family, qualifier);
        put_timestamp(&mut out, timestamp)?;
        Ok(out)
    }

    /// Decodes a cell key stored after a prefix of `prefix_len` bytes.
    pub fn decode(key: &'a [u8], prefix_len: usize) -> Result<Self, KeyError> {
        let Some(rest) = key.get(prefix_len..) else {
            return Err(KeyError::Truncated {
                element: "key prefix",
            });
        };
        let mut reader = KeyReader::new(rest);
        let row = reader.bytes()?;
        let ColumnKey {
            family,
            qualifier,
            timestamp,
        } = ColumnKey::decode(reader.remaining())?;
        Ok(CellKey {
            row,
            family,
            qualifier,
            timestamp,
        })
    }

    /// The prefix shared by every cell of a row.
    pub fn row_prefix(prefix: &[u8], row: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(prefix.len() + row.len() + 2);
        out.extend_from_slice(prefix);
        put_bytes(&mut out, row);
        out
    }

    /// The prefix shared by every cell of one family of a row.
    pub fn family_prefix(prefix: &[u8], row: &[u8], family: u16) -> Vec<u8> {
        let mut out = Self::row_prefix(prefix, row);
        put_u16(&mut out, family);
        out
    }

    /// The prefix shared by every version of one column of a row.
    pub fn column_prefix(prefix: &[u8], row: &[u8], family: u16, qualifier: &[u8]) -> Vec<u8> {
        // Room for the escapes' terminators, the family and a timestamp
        // ([`CellKey::encode`]): one allocation per cell key.
        let mut out = Vec::with_capacity(prefix.len() + row.len() + qualifier.len() + 14);
        out.extend_from_slice(prefix);
        put_bytes(&mut out, row);
        put_u16(&mut out, family);
        put_bytes(&mut out, qualifier);
        out
    }

    /// The length of the encoded row key at the start of `key` (after the
    /// prefix), used to find row boundaries without decoding.
    pub fn encoded_row_len(key: &[u8], prefix_len: usize) -> Result<usize, KeyError> {
        let rest = key.get(prefix_len..).ok_or(KeyError::Truncated {
            element: "key prefix",
        })?;
        Ok(KeyReader::new(rest).encoded_bytes()?.len())
    }
}

/// A cell key without its row part: one version of one column of a row
/// the reader already knows, so the row key is not decoded again per cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnKey<'a> {
    /// The column family's numeric id.
    pub family: u16,
    /// The column qualifier.
    pub qualifier: Cow<'a, [u8]>,
    /// The version timestamp in microseconds.
    pub timestamp: i64,
}

impl<'a> ColumnKey<'a> {
    /// Decodes the part of a cell key after its row part.
    pub fn decode(suffix: &'a [u8]) -> Result<Self, KeyError> {
        let mut reader = KeyReader::new(suffix);
        let family = reader.u16()?;
        let qualifier = reader.bytes()?;
        let timestamp = reader.timestamp()?;
        reader.finish()?;
        Ok(ColumnKey {
            family,
            qualifier,
            timestamp,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc_bytes(b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_bytes(&mut out, b);
        out
    }

    #[test]
    fn test_vectors() {
        assert_eq!(enc_bytes(b"a\0b"), [0x61, 0, 0xFF, 0x62, 0, 1]);
        assert_eq!(enc_bytes(b""), [0, 1]);
        let mut out = Vec::new();
        put_i64(&mut out, -1);
        put_i64(&mut out, 1);
        assert_eq!(
            out,
            [0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1]
        );
        let mut out = Vec::new();
        put_f64(&mut out, 1.0);
        assert_eq!(out, [0xBF, 0xF0, 0, 0, 0, 0, 0, 0]);
        let mut out = Vec::new();
        put_timestamp(&mut out, 1).unwrap();
        assert_eq!(out, [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE]);
        let mut out = Vec::new();
        put_u16(&mut out, 3);
        put_bool(&mut out, true);
        assert_eq!(out, [0, 3, 1]);
    }

    #[test]
    fn cell_key_round_trip_with_zero_bytes_everywhere() {
        // A timestamp whose bytes contain 0x00 right after a qualifier that
        // ends in 0x00: the case a naive separator split gets wrong.
        let ts = 0x00FF_0000_0000_0100;
        let key = CellKey::encode(b"p", b"r\0w", 7, b"q\0", ts).unwrap();
        let decoded = CellKey::decode(&key, 1).unwrap();
        assert_eq!(&*decoded.row, b"r\0w");
        assert_eq!(decoded.family, 7);
        assert_eq!(&*decoded.qualifier, b"q\0");
        assert_eq!(decoded.timestamp, ts);
        assert_eq!(CellKey::encoded_row_len(&key, 1).unwrap(), 6);
    }

    #[test]
    fn row_prefixes_do_not_alias() {
        // Every cell of row "a" sorts before every cell of row "a\0" and "ab".
        let a = CellKey::encode(b"", b"a", u16::MAX, b"\xFF\xFF", 0).unwrap();
        let a0 = CellKey::encode(b"", b"a\0", 0, b"", i64::MAX).unwrap();
        let ab = CellKey::encode(b"", b"ab", 0, b"", i64::MAX).unwrap();
        assert!(a < a0 && a0 < ab);
        assert!(!a0.starts_with(&CellKey::row_prefix(b"", b"a")));
    }

    #[test]
    fn corrupt_keys_are_errors() {
        assert!(matches!(
            KeyReader::new(&[0x61, 0x00]).bytes(),
            Err(KeyError::Truncated { .. })
        ));
        assert!(matches!(
            KeyReader::new(&[0x61, 0x00, 0x05]).bytes(),
            Err(KeyError::BadEscape { byte: 5 })
        ));
        assert!(matches!(
            decode_tuple(&[0x80, 0, 0, 0, 0, 0, 0, 1, 9], &[ElementKind::Int]),
            Err(KeyError::Trailing { extra: 1 })
        ));
        assert!(matches!(
            put_timestamp(&mut Vec::new(), -5),
            Err(KeyError::TimestampRange(-5))
        ));
        // A stored timestamp above i64::MAX cannot come from this format.
        assert!(KeyReader::new(&[0x7F, 0, 0, 0, 0, 0, 0, 0])
            .timestamp()
            .is_err());
    }

    #[test]
    fn prefix_successor_skips_ff() {
        assert_eq!(prefix_successor(b"a\xFF"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xFF\xFF"), None);
        assert_eq!(prefix_successor(b""), None);
    }
}
