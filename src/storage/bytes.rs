//! [`Bytes`]: a key or value as storage hands it out.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

/// The bytes of a key or value read from storage: cheap to clone (short
/// values inline, longer ones shared), and dereferences to `[u8]`.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub(super) sled::IVec);

impl Bytes {
    /// `len` bytes from `offset`, sharing this value's memory.
    ///
    /// # Panics
    /// When the range is out of bounds (callers check it first).
    pub fn slice(&self, offset: usize, len: usize) -> Bytes {
        Bytes(self.0.subslice(offset, len))
    }
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Borrow<[u8]> for Bytes {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl From<&[u8]> for Bytes {
    fn from(bytes: &[u8]) -> Self {
        Bytes(sled::IVec::from(bytes))
    }
}

impl<const N: usize> From<&[u8; N]> for Bytes {
    fn from(bytes: &[u8; N]) -> Self {
        Bytes(sled::IVec::from(&bytes[..]))
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(bytes: Vec<u8>) -> Self {
        Bytes(sled::IVec::from(bytes))
    }
}

impl From<&str> for Bytes {
    fn from(text: &str) -> Self {
        Bytes(sled::IVec::from(text.as_bytes()))
    }
}

impl From<String> for Bytes {
    fn from(text: String) -> Self {
        Bytes(sled::IVec::from(text.into_bytes()))
    }
}

impl From<Bytes> for Vec<u8> {
    fn from(bytes: Bytes) -> Self {
        bytes.0.to_vec()
    }
}

impl PartialEq<[u8]> for Bytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.0 == other
    }
}

impl PartialEq<&[u8]> for Bytes {
    fn eq(&self, other: &&[u8]) -> bool {
        self.0 == *other
    }
}

impl PartialEq<Vec<u8>> for Bytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.0 == other.as_slice()
    }
}
