//! Changes to one row, applied atomically as a whole.

use std::ops::Range;

/// One change within a [`RowMutation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Writes one cell version. `timestamp: None` lets the database assign
    /// one (the same for every such cell of the mutation).
    SetCell {
        /// The family name.
        family: String,
        /// The qualifier.
        qualifier: Vec<u8>,
        /// Microseconds; `None` for a server timestamp.
        timestamp: Option<i64>,
        /// The value.
        value: Vec<u8>,
    },
    /// Deletes the versions of one column whose timestamp lies in `range`
    /// (every version when `None`).
    DeleteColumn {
        /// The family name.
        family: String,
        /// The qualifier.
        qualifier: Vec<u8>,
        /// The timestamps to delete, `start..end` in microseconds.
        range: Option<Range<i64>>,
    },
    /// Deletes every cell of one family of the row.
    DeleteFamily {
        /// The family name.
        family: String,
    },
    /// Deletes every cell of the row.
    DeleteRow,
    /// Writes a delete marker: from its timestamp on, the versions of the
    /// row, family or column that are older than it are hidden, while reads
    /// of the past (`as_of` a time before the marker) still see them. GC
    /// counts and removes the hidden versions like any other.
    MarkDeleted {
        /// What the marker hides.
        scope: DeleteScope,
        /// Microseconds; `None` for a server timestamp.
        timestamp: Option<i64>,
    },
}

/// What a delete marker ([`Mutation::MarkDeleted`]) hides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteScope {
    /// The whole row.
    Row,
    /// Every cell of one family.
    Family(String),
    /// One column: family and qualifier.
    Column(String, Vec<u8>),
}

/// Changes to one row that are applied in order and atomically: after a
/// crash and for every reader, either all of them happened or none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowMutation {
    /// The changes, applied in this order.
    pub mutations: Vec<Mutation>,
}

impl RowMutation {
    /// An empty mutation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of the names, qualifiers and values it carries: about what it
    /// holds in memory.
    pub fn payload_bytes(&self) -> usize {
        self.mutations
            .iter()
            .map(|m| match m {
                Mutation::SetCell {
                    family,
                    qualifier,
                    value,
                    ..
                } => family.len() + qualifier.len() + value.len(),
                Mutation::DeleteColumn {
                    family, qualifier, ..
                }
                | Mutation::MarkDeleted {
                    scope: DeleteScope::Column(family, qualifier),
                    ..
                } => family.len() + qualifier.len(),
                Mutation::DeleteFamily { family }
                | Mutation::MarkDeleted {
                    scope: DeleteScope::Family(family),
                    ..
                } => family.len(),
                Mutation::DeleteRow
                | Mutation::MarkDeleted {
                    scope: DeleteScope::Row,
                    ..
                } => 0,
            })
            .sum()
    }

    /// Writes a cell at a timestamp the database assigns.
    pub fn set(
        mut self,
        family: impl Into<String>,
        qualifier: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Self {
        self.mutations.push(Mutation::SetCell {
            family: family.into(),
            qualifier: qualifier.as_ref().to_vec(),
            timestamp: None,
            value: value.as_ref().to_vec(),
        });
        self
    }

    /// Writes a cell at an explicit timestamp (microseconds), e.g. for a
    /// backfill.
    pub fn set_at(
        mut self,
        family: impl Into<String>,
        qualifier: impl AsRef<[u8]>,
        timestamp: i64,
        value: impl AsRef<[u8]>,
    ) -> Self {
        self.mutations.push(Mutation::SetCell {
            family: family.into(),
            qualifier: qualifier.as_ref().to_vec(),
            timestamp: Some(timestamp),
            value: value.as_ref().to_vec(),
        });
        self
    }

    /// Deletes every version of a column.
    pub fn delete_column(mut self, family: impl Into<String>, qualifier: impl AsRef<[u8]>) -> Self {
        self.mutations.push(Mutation::DeleteColumn {
            family: family.into(),
            qualifier: qualifier.as_ref().to_vec(),
            range: None,
        });
        self
    }

    /// Deletes the versions of a column with timestamps in `range`.
    pub fn delete_column_versions(
        mut self,
        family: impl Into<String>,
        qualifier: impl AsRef<[u8]>,
        range: Range<i64>,
    ) -> Self {
        self.mutations.push(Mutation::DeleteColumn {
            family: family.into(),
            qualifier: qualifier.as_ref().to_vec(),
            range: Some(range),
        });
        self
    }

    /// Deletes every cell of a family.
    pub fn delete_family(mut self, family: impl Into<String>) -> Self {
        self.mutations.push(Mutation::DeleteFamily {
            family: family.into(),
        });
        self
    }

    /// Writes a delete marker (see [`Mutation::MarkDeleted`]) at a server
    /// timestamp, or at `timestamp` when given.
    pub fn mark_deleted(mut self, scope: DeleteScope, timestamp: Option<i64>) -> Self {
        self.mutations
            .push(Mutation::MarkDeleted { scope, timestamp });
        self
    }

    /// Deletes the whole row.
    pub fn delete_row(mut self) -> Self {
        self.mutations.push(Mutation::DeleteRow);
        self
    }

    /// Whether the mutation changes nothing.
    pub fn is_empty(&self) -> bool {
        self.mutations.is_empty()
    }
}

/// How [`crate::Table::read_modify_write`] changes a cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadModifyWriteRule {
    /// Appends bytes to the latest value (missing cell: empty).
    Append {
        /// The family name.
        family: String,
        /// The qualifier.
        qualifier: Vec<u8>,
        /// The bytes to append.
        bytes: Vec<u8>,
    },
    /// Adds to the latest value read as a 64-bit big-endian signed integer
    /// (missing cell: 0).
    Increment {
        /// The family name.
        family: String,
        /// The qualifier.
        qualifier: Vec<u8>,
        /// The amount to add.
        delta: i64,
    },
}

impl ReadModifyWriteRule {
    /// An append rule.
    pub fn append(
        family: impl Into<String>,
        qualifier: impl AsRef<[u8]>,
        bytes: impl AsRef<[u8]>,
    ) -> Self {
        Self::Append {
            family: family.into(),
            qualifier: qualifier.as_ref().to_vec(),
            bytes: bytes.as_ref().to_vec(),
        }
    }

    /// An increment rule.
    pub fn increment(family: impl Into<String>, qualifier: impl AsRef<[u8]>, delta: i64) -> Self {
        Self::Increment {
            family: family.into(),
            qualifier: qualifier.as_ref().to_vec(),
            delta,
        }
    }
}
