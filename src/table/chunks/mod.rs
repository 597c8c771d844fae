//! How a table's cells are stored: one storage entry, a *chunk*, per row
//! and locality group, holding that row's cells of the group in key order.
//!
//! sled costs about a microsecond for every key it stores or visits, so a
//! key per cell made a page of eight cells cost eight keys to write and to
//! scan. A chunk makes it one per group (benchmark W1–W5 and *Chunks* in
//! `docs/design.md` have the figures).
//!
//! # Keys
//!
//! A row's first chunk in a group is stored under the *row part* of its
//! cells' keys (`prefix ‖ row`, see [`CellKey`](crate::keys::CellKey));
//! every further chunk under the full cell key of the cell it started
//! with. The chunk stored under key `K` holds the row's cells from `K` up to
//! the next chunk's key: the cell with key `C` lives in the last chunk whose
//! key is at most `C`. Keys of different rows never interleave, because the
//! row part ends with a terminator.
//!
//! # Splitting
//!
//! Once a chunk's cells pass [`CHUNK_SPLIT_BYTES`] they are split at cell
//! boundaries into chunks of about [`CHUNK_TARGET_BYTES`], so a write
//! rewrites, and a read decodes, a bounded part of a wide or very versioned
//! row. When a split happens, a value larger than the target ends up in a
//! chunk of its own, and writing the other cells of its row no longer
//! copies it. The split size is the most a storage entry holds, so a chunk
//! is one entry unless it holds a single large value: that chunk is stored
//! in parts ([`entries`]).
//!
//! # Merging
//!
//! A write that takes the chunks it rewrites under
//! [`CHUNK_MERGE_BYTES`](rewrite::CHUNK_MERGE_BYTES)
//! takes in the row's neighbouring chunks where all fit one entry, and of
//! the chunks it rewrites, one left under that size joins the one before
//! it where both fit: deleting or shrinking cells does not leave a row
//! spread over the small chunks a split made.
//!
//! # Chunk bytes
//!
//! The cells in key order, each as
//! `shared ‖ unshared ‖ suffix[shared..] ‖ value length ‖ value`, where the
//! *suffix* is the cell key after the row part (family id, qualifier and
//! timestamp), `shared` is how many leading bytes it has in common with the
//! previous cell's suffix, and the three lengths are LEB128 varints. The
//! versions of one column cost their timestamp, their value and four bytes.

use crate::storage::Bytes;
use crate::table::entries;

/// A chunk whose cells pass this many bytes is split: up to this size a
/// chunk is one storage entry (see [`entries`]).
pub const CHUNK_SPLIT_BYTES: usize = entries::ENTRY_BYTES;
/// The size of the chunks a split makes.
pub const CHUNK_TARGET_BYTES: usize = CHUNK_SPLIT_BYTES / 2;

/// A stored cell: its full cell key and its value.
pub type StoredCell = (Bytes, Bytes);

mod codec;
mod cursor;
mod rewrite;
#[cfg(test)]
mod tests;

pub use codec::{encode_chunk, ChunkReader};
pub use cursor::{cells_with_prefix, CellCursor};
pub use rewrite::{write_changes, CellChanges};
