//! The table layer: wide-column cells on top of storage — row mutations,
//! reads with filters, garbage collection and compaction.
//!
//! A [`TableStore`](crate::table::TableStore) pairs a table's resolved layout with the
//! database [`Engine`](crate::table::Engine); the public handle [`crate::Table`] builds one per
//! call from the catalog's current layout.

mod cell;
pub(crate) mod chunks;
pub(crate) mod entries;
mod filter;
mod gc;
mod kept;
pub(crate) mod layout;
mod locks;
mod mutation;
pub(crate) mod read;
mod scanner;
mod selector;
pub mod spec;
pub(crate) mod splits;
mod varint;
mod write;

use std::sync::Arc;

pub use cell::{Cell, CellRef, Row, RowRef};
pub use filter::{
    Filter, QualifierFilter, ReadOptions, ResumeToken, RowRange, RowSet, ValueFilter,
};
pub(crate) use gc::unchecked;
pub(crate) use kept::KeptCells;
pub use mutation::{DeleteScope, Mutation, ReadModifyWriteRule, RowMutation};
pub use scanner::RowIter;
pub(crate) use scanner::Scanner;
pub(crate) use write::{mutate_rows_atomically, partly_applied, BULK_CHUNK_ROWS};
pub use write::{
    StatementWriter, MAX_QUALIFIER_LEN, MAX_ROW_KEY_LEN, MAX_VALUE_LEN, STATEMENT_ATOMIC_BYTES,
    STATEMENT_ATOMIC_ROWS,
};

use crate::clock::Clock;
use crate::error::ErrorKind;
use crate::storage::{Durability, Storage};
use layout::Layout;
use locks::RowLocks;

/// Errors of the table layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The family is not declared in the table.
    #[error("table '{table}' has no column family '{family}'")]
    UnknownFamily {
        /// The qualified table name.
        table: String,
        /// The family asked for.
        family: String,
    },
    /// The family is declared already.
    #[error("table '{table}' already has a column family '{family}'")]
    FamilyExists {
        /// The qualified table name.
        table: String,
        /// The family.
        family: String,
    },
    /// The table refuses writes (a system table).
    #[error("table '{table}' is a read-only system table")]
    ReadOnly {
        /// The qualified table name.
        table: String,
    },
    /// An argument is out of range or contradicts the spec.
    #[error("table '{table}': {message}")]
    InvalidArgument {
        /// The qualified table name.
        table: String,
        /// What is wrong.
        message: String,
    },
    /// A row would be left with visible cells but without a NOT NULL
    /// column.
    #[error(
        "table '{table}': column '{column}' is NOT NULL: row '{row}' would be left without it"
    )]
    NotNull {
        /// The qualified table name.
        table: String,
        /// The column (its qualifier).
        column: String,
        /// The row key, escaped for display.
        row: String,
    },
    /// Bytes in the table's tree that this format never writes.
    #[error("table '{table}' is corrupt at key [{key}]: {reason}")]
    Corrupt {
        /// The qualified table name.
        table: String,
        /// The stored key, as hex bytes (the first 64).
        key: String,
        /// What is wrong with it.
        reason: crate::keys::KeyError,
    },
    /// The table was altered or dropped while a write waited for its row
    /// locks; the write was planned for the old table and is refused.
    #[error(
        "table '{table}' was altered or dropped while the write waited; {}",
        changed_outcome(.written)
    )]
    Changed {
        /// The qualified table name.
        table: String,
        /// Rows of the statement applied before (statements larger than
        /// one atomic batch).
        written: usize,
    },
    /// The table was dropped while a read of it ran: its storage is gone,
    /// so the read cannot go on.
    #[error("table '{table}' was dropped while it was read")]
    DroppedDuringRead {
        /// The qualified table name.
        table: String,
    },
}

fn changed_outcome(written: &usize) -> String {
    match written {
        0 => "nothing was written; run it again".to_string(),
        n => format!("{n} rows of the statement were written before, the rest were not"),
    }
}

impl TableError {
    /// The category.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TableError::UnknownFamily { .. } | TableError::DroppedDuringRead { .. } => {
                ErrorKind::NotFound
            }
            TableError::FamilyExists { .. } => ErrorKind::AlreadyExists,
            TableError::ReadOnly { .. } | TableError::InvalidArgument { .. } => {
                ErrorKind::InvalidArgument
            }
            TableError::NotNull { .. } => ErrorKind::ConstraintViolation,
            TableError::Changed { .. } => ErrorKind::Conflict,
            TableError::Corrupt { .. } => ErrorKind::Corruption,
        }
    }
}

/// What every table of one database shares: storage, row locks, clock.
#[derive(Debug)]
pub struct Engine {
    /// The store.
    pub storage: Storage,
    /// The row locks.
    pub locks: RowLocks,
    /// The server timestamp clock.
    pub clock: Clock,
    /// The durability of data writes unless a handle or session says
    /// otherwise.
    pub durability: Durability,
    /// The most rows one statement applies as one atomic batch.
    pub statement_batch_rows: usize,
    /// About the most bytes one storage batch of a statement or a bulk
    /// write holds (one row's writes are never split).
    pub statement_batch_bytes: usize,
}

impl Engine {
    /// Wraps an open store; data writes have `durability` by default.
    pub fn new(storage: Storage, durability: Durability) -> crate::Result<Engine> {
        let clock = Clock::open(&storage)?;
        Ok(Engine {
            storage,
            locks: RowLocks::default(),
            clock,
            durability,
            statement_batch_rows: STATEMENT_ATOMIC_ROWS,
            statement_batch_bytes: STATEMENT_ATOMIC_BYTES,
        })
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Best effort: a store that fails now leaves the lease as it was,
        // which is still above every timestamp handed out.
        let _ = self.clock.close(&self.storage);
    }
}

/// A table's layout bound to its engine: what the data operations run on.
#[derive(Debug, Clone)]
pub struct TableStore {
    pub(crate) engine: Arc<Engine>,
    pub(crate) layout: Arc<Layout>,
    /// The durability of this store's data writes.
    pub(crate) durability: Durability,
}

impl TableStore {
    /// Binds a layout to an engine; writes have the engine's durability.
    pub(crate) fn new(engine: Arc<Engine>, layout: Arc<Layout>) -> Self {
        let durability = engine.durability;
        Self {
            engine,
            layout,
            durability,
        }
    }

    /// The same store, writing with `durability`.
    pub(crate) fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Keys visited by reads and scans of each locality group since open,
    /// by group name.
    pub fn keys_read_per_group(&self) -> Vec<(String, u64)> {
        self.layout
            .groups
            .iter()
            .map(|g| (g.name.clone(), g.tree.keys_read()))
            .collect()
    }

    /// Checks that a filter names only declared families.
    pub(crate) fn check_filter(&self, filter: &Filter) -> crate::Result<()> {
        for family in filter.families.iter().flatten() {
            self.family_named(family)?;
        }
        Ok(())
    }
}
