//! The LEB128 varints of the lengths in chunks and in stored entries.

use crate::keys::KeyError;

pub(crate) fn put_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A [`KeyError::BadChunk`]: stored bytes this format never writes.
pub(crate) fn bad(reason: &'static str) -> KeyError {
    KeyError::BadChunk { reason }
}

/// Reads the varint at `at` and moves past it. Lengths under 128, one
/// byte, are nearly all of them: they skip the loop.
#[inline]
pub(crate) fn take_varint(bytes: &[u8], at: &mut usize) -> std::result::Result<usize, KeyError> {
    match bytes.get(*at) {
        Some(&byte) if byte < 0x80 => {
            *at += 1;
            Ok(usize::from(byte))
        }
        _ => take_long_varint(bytes, at),
    }
}

/// [`take_varint`] of a length of two bytes or more (a value of 128
/// bytes or more, say), or of a length cut short.
pub(super) fn take_long_varint(
    bytes: &[u8],
    at: &mut usize,
) -> std::result::Result<usize, KeyError> {
    let mut n: usize = 0;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at).ok_or(bad("it ends inside a length"))?;
        *at += 1;
        n |= usize::from(byte & 0x7F)
            .checked_shl(shift)
            .ok_or(bad("a length overflows"))?;
        if byte & 0x80 == 0 {
            return Ok(n);
        }
    }
    Err(bad("a length overflows"))
}
