//! The write path: row mutations, bulk writes, read-modify-write and
//! check-and-mutate.
//!
//! A mutation is first *planned* into an overlay of puts and deletes (which
//! is where every input error is found), then applied as one storage batch
//! while the row's lock is held. Nothing is written when any part of a
//! mutation is invalid.
//!
//! The steps live in files of their own: [`plan`] (a row's mutations into
//! puts and deletes), [`apply`] (storage batches), [`statement`] (a
//! statement's rows in bounded batches) and [`rmw`] (read-modify-write,
//! check-and-mutate).

mod apply;
mod plan;
mod rmw;
mod statement;

pub(crate) use apply::mutate_rows_atomically;
pub(crate) use plan::RowPlan;
pub(crate) use statement::partly_applied;
pub use statement::StatementWriter;

/// The longest row key accepted (as Bigtable).
pub const MAX_ROW_KEY_LEN: usize = 4 * 1024;
/// The longest qualifier accepted (as Bigtable).
pub const MAX_QUALIFIER_LEN: usize = 16 * 1024;
/// The largest cell value accepted (as Bigtable).
pub const MAX_VALUE_LEN: usize = 100 * 1024 * 1024;
/// Rows per storage batch in bulk writes.
pub(crate) const BULK_CHUNK_ROWS: usize = 1000;
/// The most rows one SQL statement applies as one atomic storage batch,
/// unless [`crate::DbOptions::with_statement_batch_rows`] says otherwise.
///
/// sled holds an atomic batch in memory several times over, and more than
/// linearly in its size: an UPDATE of every row of a 60,000-row table took
/// 770 MiB above its start as one batch, nothing measurable in batches of
/// 10,000 (benchmark W9), and one of 160,000 rows in 100,000-row batches
/// passed 8 GiB.
pub const STATEMENT_ATOMIC_ROWS: usize = 10_000;
/// About the most bytes (keys and values written) one SQL statement or bulk
/// write applies as one atomic storage batch, unless
/// [`crate::DbOptions::with_statement_batch_bytes`] says otherwise. The row
/// count alone bounded nothing for large values: 2,000 rows of 200 KB, one
/// batch, took 1 GiB of memory to insert (benchmark W9, large values).
pub const STATEMENT_ATOMIC_BYTES: usize = 32 << 20;
