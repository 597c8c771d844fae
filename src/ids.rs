//! Typed identifiers: a project, dataset or table id cannot be mistaken for
//! another kind. IDs are UUIDv7 (time ordered); the range
//! `ffffffff-ffff-0000-0000-…` is reserved for the system.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A new time-ordered id.
            pub(crate) fn generate() -> Self {
                Self(Uuid::now_v7())
            }

            /// The reserved system id ending in `n`.
            #[allow(dead_code)] // not every kind of id has reserved ones
            pub(crate) const fn reserved(n: u16) -> Self {
                Self(Uuid::from_u128(RESERVED_BASE | n as u128))
            }

            /// Whether the id lies in the system's reserved range.
            pub fn is_reserved(&self) -> bool {
                self.0.as_u128() & RESERVED_MASK == RESERVED_BASE
            }

            /// The 16 bytes of the id.
            pub fn as_bytes(&self) -> &[u8; 16] {
                self.0.as_bytes()
            }

            /// Parses the hyphenated text form.
            pub fn parse(text: &str) -> Option<Self> {
                Uuid::parse_str(text).ok().map(Self)
            }

            /// Reads the id from its 16 bytes.
            pub fn from_bytes(bytes: [u8; 16]) -> Self {
                Self(Uuid::from_bytes(bytes))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.hyphenated().fmt(f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0.hyphenated())
            }
        }
    };
}

/// `ffffffff-ffff-0000-0000-000000000000`: the first reserved id.
const RESERVED_BASE: u128 = 0xffff_ffff_ffff_0000_0000_0000_0000_0000;
/// The bits that every reserved id shares with [`RESERVED_BASE`].
const RESERVED_MASK: u128 = 0xffff_ffff_ffff_ffff_ffff_0000_0000_0000;

id_type!(
    /// Identifies a project (a SQL catalog).
    ProjectId
);
id_type!(
    /// Identifies a dataset (a SQL schema) within a project.
    DatasetId
);
id_type!(
    /// Identifies a table within a dataset.
    TableId
);
id_type!(
    /// Identifies a tablet: a contiguous range of a table's row keys.
    TabletId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ids_are_recognised() {
        let id = TableId::reserved(3);
        assert_eq!(id.to_string(), "ffffffff-ffff-0000-0000-000000000003");
        assert!(id.is_reserved());
        assert!(!TableId::generate().is_reserved());
        assert_eq!(TableId::parse(&id.to_string()), Some(id));
    }
}
