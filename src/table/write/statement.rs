//! Applying a statement's rows as they come, in atomic batches of a
//! bounded size ([`StatementWriter`]).

use crate::error::{Error, Result};
use crate::table::mutation::RowMutation;
use crate::table::{TableError, TableStore};

/// Applies the rows of one statement as they are produced, in bounded
/// memory, with the atomicity of [`TableStore::apply_statement`]: a
/// statement of up to
/// [`STATEMENT_ATOMIC_ROWS`](super::STATEMENT_ATOMIC_ROWS) rows and
/// [`STATEMENT_ATOMIC_BYTES`](super::STATEMENT_ATOMIC_BYTES) is checked
/// whole and applied as one atomic batch when it finishes; a larger one is
/// applied in atomic batches of that size as they fill, and an error after
/// the first batch says how many rows were written
/// ([`Error::PartlyApplied`]).
#[derive(Debug)]
pub struct StatementWriter {
    store: TableStore,
    pending: Vec<(Vec<u8>, RowMutation)>,
    /// Bytes of the pending rows' keys and mutations.
    pending_bytes: usize,
    written: usize,
}

impl StatementWriter {
    /// A writer of one statement into `store`.
    pub fn new(store: TableStore) -> Result<Self> {
        store.check_writable()?;
        Ok(Self {
            store,
            pending: Vec::new(),
            pending_bytes: 0,
            written: 0,
        })
    }

    /// Adds a row; writes a full batch first when this row is one more.
    pub fn push(&mut self, key: Vec<u8>, mutation: RowMutation) -> Result<()> {
        let engine = &self.store.engine;
        if self.pending.len() >= engine.statement_batch_rows
            || self.pending_bytes >= engine.statement_batch_bytes
        {
            self.write_pending()?;
        }
        self.pending_bytes += key.len() + mutation.payload_bytes();
        self.pending.push((key, mutation));
        Ok(())
    }

    /// Writes the rows not yet written; returns the statement's row count.
    pub fn finish(mut self) -> Result<usize> {
        self.write_pending()?;
        Ok(self.written)
    }

    /// `e`, which stopped the statement, saying how many of its rows were
    /// written before.
    pub fn stopped(&self, e: Error) -> Error {
        partly_applied(e, self.written)
    }

    fn write_pending(&mut self) -> Result<()> {
        let rows = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let store = &self.store;
        let applied = rows
            .iter()
            .try_for_each(|(key, mutation)| store.check_row(key, mutation))
            .and_then(|()| store.apply_atomically(&rows, self.written));
        self.written += applied.map_err(|e| partly_applied(e, self.written))?;
        Ok(())
    }
}

/// `e`, for a statement that had written `written` rows before it: those
/// stay written (a [`TableError::Changed`] says so itself).
pub(crate) fn partly_applied(e: Error, written: usize) -> Error {
    match e {
        e if written == 0 => e,
        e @ Error::Table(TableError::Changed { .. }) => e,
        e @ Error::PartlyApplied { .. } => e,
        e => Error::PartlyApplied {
            written,
            source: Box::new(e),
        },
    }
}
