//! Applying a row's cell changes to its chunks: which chunks are read
//! and rewritten, and when they are split or merged.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;
use crate::storage::{Tree, WriteBatch};
use crate::table::entries::{self, ChunkScan, StoredChunk};
use crate::table::layout::Layout;

use super::codec::{encode_chunk, encoded_len};
use super::cursor::{decode, DecodeBuffers};
use super::{StoredCell, CHUNK_SPLIT_BYTES, CHUNK_TARGET_BYTES};

/// A write that takes the chunks it rewrites from at least this many bytes
/// to fewer merges them with the row's neighbouring chunks where all fit
/// one chunk, and a chunk it leaves smaller than this joins the one before
/// it among those it rewrites where both fit: a row whose cells shrink or
/// go does not stay spread over the small chunks a split made. Half of
/// [`CHUNK_TARGET_BYTES`], so a chunk just split is not merged back by the
/// next small change.
pub const CHUNK_MERGE_BYTES: usize = CHUNK_TARGET_BYTES / 2;

/// A cell as borrowed key and value.
pub(super) type BorrowedCell<'c> = (&'c [u8], &'c [u8]);

/// A chunk about to be written: its key, cells and encoded size.
pub(super) type Piece<'c> = (Vec<u8>, Vec<BorrowedCell<'c>>, usize);

/// The changes to one row's cells in one group: full cell key, and the new
/// value or `None` to delete the cell.
pub type CellChanges<'v> = BTreeMap<&'v [u8], Option<&'v [u8]>>;

/// Adds to `batch` the chunk writes that apply `changes` to the row whose
/// row part is `row_part`. Only the chunks holding a changed cell are read,
/// and only those the changes alter are rewritten; when the write takes
/// them below [`CHUNK_MERGE_BYTES`], the row's neighbouring chunks are read
/// too and merged where all fit one. The caller holds the row's lock, and a batch
/// carries at most one call per row and group (two would each rewrite the
/// chunk as they read it, and the second would undo the first).
/// `stored: false` says the row has nothing stored in `tree`, which is then
/// not read.
pub fn write_changes(
    layout: &Arc<Layout>,
    tree: &Tree,
    row_part: &[u8],
    changes: &CellChanges<'_>,
    stored: bool,
    batch: &mut WriteBatch,
) -> Result<()> {
    let (Some(first), Some(last)) = (changes.keys().next(), changes.keys().next_back()) else {
        return Ok(());
    };
    // The chunks whose ranges hold a change: the one holding the first,
    // and every one after it starting at or before the last. One reverse
    // scan from the last finds them all (a new row: one seek, nothing).
    let mut chunks: Vec<StoredChunk> = Vec::new();
    if stored {
        let row_start = Bound::Included(row_part.to_vec());
        let mut scan = ChunkScan::new(tree, row_start, Bound::Included(last.to_vec()), true);
        while let Some(chunk) = scan.next_chunk(layout)? {
            let holds_first = chunk.key.as_ref() <= *first;
            chunks.push(chunk);
            if holds_first {
                break;
            }
        }
    }
    chunks.reverse();
    // Each chunk's key and cells; a new first chunk, under the row part,
    // when nothing is stored at or before the first change.
    let mut buffers = DecodeBuffers::default();
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(chunks.len() + 1);
    let mut decoded: Vec<Vec<StoredCell>> = Vec::with_capacity(chunks.len() + 1);
    if chunks
        .first()
        .is_none_or(|chunk| chunk.key.as_ref() > *first)
    {
        keys.push(row_part.to_vec());
        decoded.push(Vec::new());
    }
    for chunk in &chunks {
        let cells = all_cells(layout, chunk, &mut buffers)?;
        keys.push(chunk.key.to_vec());
        decoded.push(cells);
    }
    let row_len = row_part.len();
    // Each chunk's cells with its changes applied.
    let mut segments: Vec<Piece<'_>> = Vec::with_capacity(keys.len());
    for (at, cells) in decoded.iter().enumerate() {
        let lo = match at {
            0 => Bound::Unbounded,
            _ => Bound::Included(keys[at].as_slice()),
        };
        let hi = keys
            .get(at + 1)
            .map_or(Bound::Unbounded, |next| Bound::Excluded(next.as_slice()));
        let merged = merge_changes(cells, changes.range::<[u8], _>((lo, hi)));
        let len = encoded_size(row_len, merged.iter().copied());
        segments.push((keys[at].clone(), merged, len));
    }
    let old_size = encoded_size(row_len, decoded.iter().flat_map(|cells| as_borrowed(cells)));
    let new_size: usize = segments.iter().map(|(_, _, len)| len).sum();

    // The stored chunks the write replaces, with how many entries hold each.
    let mut replaced: BTreeMap<Vec<u8>, u32> = chunks
        .iter()
        .map(|chunk| (chunk.key.to_vec(), chunk.entries))
        .collect();
    let neighbours = if old_size >= CHUNK_MERGE_BYTES && new_size < CHUNK_MERGE_BYTES {
        neighbours_to_merge(layout, tree, row_part, &keys, new_size, &mut buffers)?
    } else {
        Neighbours::default()
    };
    let pieces: Vec<Piece<'_>> = if neighbours.previous.is_some() || neighbours.next.is_some() {
        // All fit one chunk, under the first one's key.
        let mut start = keys[0].clone();
        let mut cells = Vec::new();
        if let Some((chunk, previous)) = &neighbours.previous {
            start = chunk.key.to_vec();
            replaced.insert(start.clone(), chunk.entries);
            cells.extend(as_borrowed(previous));
        }
        cells.extend(segments.into_iter().flat_map(|(_, cells, _)| cells));
        if let Some((chunk, next)) = &neighbours.next {
            replaced.insert(chunk.key.to_vec(), chunk.entries);
            cells.extend(as_borrowed(next));
        }
        let len = encoded_size(row_len, cells.iter().copied());
        vec![(start, cells, len)]
    } else {
        pieces_of(segments, row_len)
    };
    for (key, cells, _) in pieces {
        let old_entries = replaced.remove(&key).unwrap_or(0);
        // A chunk the write leaves as it was (one between two changes, or
        // a large value a new cell after it is split from) is not
        // rewritten.
        let unchanged = old_entries > 0
            && keys.binary_search(&key).is_ok_and(|at| {
                decoded[at].len() == cells.len()
                    && as_borrowed(&decoded[at]).eq(cells.iter().copied())
            });
        if unchanged {
            continue;
        }
        let chunk = encode_chunk(row_len, cells);
        entries::put_chunk(batch, tree, key, chunk, old_entries);
    }
    for (key, old_entries) in replaced {
        entries::delete_chunk(batch, tree, key, old_entries);
    }
    Ok(())
}

/// The chunks written for `segments` (each chunk's cells, in key order, a
/// write's changes applied): one past [`CHUNK_SPLIT_BYTES`] is split into
/// chunks of about [`CHUNK_TARGET_BYTES`] (each after the first under its
/// first cell's key), an empty one goes, and one under
/// [`CHUNK_MERGE_BYTES`] joins the chunk before it when both fit one.
pub(super) fn pieces_of(segments: Vec<Piece<'_>>, row_len: usize) -> Vec<Piece<'_>> {
    let mut pieces: Vec<Piece<'_>> = Vec::with_capacity(segments.len());
    for (key, cells, len) in segments {
        if len <= CHUNK_SPLIT_BYTES {
            push_or_join(&mut pieces, (key, cells, len));
            continue;
        }
        let mut piece: Piece<'_> = (key, Vec::new(), 0);
        for (k, v) in cells {
            let cell_len = encoded_len(k.len() - row_len, v.len());
            if !piece.1.is_empty() && piece.2 + cell_len > CHUNK_TARGET_BYTES {
                let next = (k.to_vec(), Vec::new(), 0);
                push_or_join(&mut pieces, std::mem::replace(&mut piece, next));
            }
            piece.1.push((k, v));
            piece.2 += cell_len;
        }
        push_or_join(&mut pieces, piece);
    }
    pieces
}

/// Adds `piece` after `pieces`: nothing when it is empty, into the last
/// one when either is under [`CHUNK_MERGE_BYTES`] and both fit one chunk.
pub(super) fn push_or_join<'c>(pieces: &mut Vec<Piece<'c>>, piece: Piece<'c>) {
    let (key, cells, len) = piece;
    if cells.is_empty() {
        return;
    }
    match pieces.last_mut() {
        Some(before)
            if before.2 + len <= CHUNK_SPLIT_BYTES && before.2.min(len) < CHUNK_MERGE_BYTES =>
        {
            before.1.extend(cells);
            before.2 += len;
        }
        _ => pieces.push((key, cells, len)),
    }
}

/// The encoded size of `cells`, of a row part of `row_len` bytes.
pub(super) fn encoded_size<'c>(
    row_len: usize,
    cells: impl Iterator<Item = BorrowedCell<'c>>,
) -> usize {
    cells
        .map(|(k, v)| encoded_len(k.len() - row_len, v.len()))
        .sum()
}

/// Stored cells as borrowed ones.
pub(super) fn as_borrowed(cells: &[StoredCell]) -> impl Iterator<Item = BorrowedCell<'_>> {
    cells.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
}

/// Every cell of a chunk read on its own (its values share its memory).
fn all_cells(
    layout: &Layout,
    chunk: &StoredChunk,
    buffers: &mut DecodeBuffers,
) -> Result<Vec<StoredCell>> {
    let mut cells = Vec::new();
    decode(
        layout,
        &chunk.key,
        layout.row_len(&chunk.key)?,
        &chunk.bytes,
        None,
        false,
        &mut cells,
        buffers,
    )?;
    Ok(cells)
}

/// A neighbouring chunk to merge, with its cells.
pub(super) type Neighbour = Option<(StoredChunk, Vec<StoredCell>)>;

/// The row's chunks before and after the ones a write rewrites that all
/// fit one chunk with the `new_size` bytes it leaves.
#[derive(Default)]
pub(super) struct Neighbours {
    previous: Neighbour,
    next: Neighbour,
}

/// The row's chunks just before and just after the chunks under `keys`
/// (a write's, in key order) to merge with the `new_size` bytes the write
/// leaves of them: only chunks stored whole, only where all fit one
/// chunk, and when nothing is left, only both together.
pub(super) fn neighbours_to_merge(
    layout: &Layout,
    tree: &Tree,
    row_part: &[u8],
    keys: &[Vec<u8>],
    new_size: usize,
    buffers: &mut DecodeBuffers,
) -> Result<Neighbours> {
    let (Some(start), Some(end)) = (keys.first(), keys.last()) else {
        return Ok(Neighbours::default());
    };
    let mut read = |lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, reverse: bool| -> Result<Neighbour> {
        let Some(chunk) = entries::whole_chunk_next_to(tree, lo, hi, reverse)? else {
            return Ok(None);
        };
        let cells = all_cells(layout, &chunk, buffers)?;
        Ok(Some((chunk, cells)))
    };
    let previous = if start.as_slice() == row_part {
        None
    } else {
        let row_start = Bound::Included(row_part.to_vec());
        read(row_start, Bound::Excluded(start.clone()), true)?
    };
    // With nothing left, only both neighbours together make fewer chunks.
    let next = if new_size == 0 && previous.is_none() {
        None
    } else {
        let row_end = crate::keys::prefix_successor(row_part);
        let hi = row_end.map_or(Bound::Unbounded, Bound::Excluded);
        read(entries::past_chunk(end), hi, false)?
    };
    let size = |neighbour: &Neighbour| {
        neighbour
            .as_ref()
            .map(|(_, cells)| encoded_size(row_part.len(), as_borrowed(cells)))
    };
    let (previous_size, next_size) = (size(&previous), size(&next));
    let (take_previous, take_next) = if new_size == 0 {
        let both = previous_size
            .zip(next_size)
            .is_some_and(|(p, n)| p + n <= CHUNK_SPLIT_BYTES);
        (both, both)
    } else {
        let with_previous = previous_size
            .map(|p| new_size + p)
            .filter(|total| *total <= CHUNK_SPLIT_BYTES);
        let total = with_previous.unwrap_or(new_size);
        let with_next = next_size.is_some_and(|n| total + n <= CHUNK_SPLIT_BYTES);
        (with_previous.is_some(), with_next)
    };
    Ok(Neighbours {
        previous: previous.filter(|_| take_previous),
        next: next.filter(|_| take_next),
    })
}

/// `stored` (in key order) with `changes` (in key order, none before the
/// first stored cell's chunk) applied: a changed cell takes its new value,
/// or goes.
pub(super) fn merge_changes<'c>(
    stored: &'c [StoredCell],
    changes: impl Iterator<Item = (&'c &'c [u8], &'c Option<&'c [u8]>)>,
) -> Vec<BorrowedCell<'c>> {
    let mut merged = Vec::with_capacity(stored.len() + 1);
    let mut stored = stored.iter().peekable();
    let mut changes = changes.peekable();
    loop {
        match (stored.peek(), changes.peek()) {
            (None, None) => break,
            (Some((k, v)), None) => {
                merged.push((k.as_ref(), v.as_ref()));
                stored.next();
            }
            (Some((k, v)), Some((ck, _))) if k.as_ref() < **ck => {
                merged.push((k.as_ref(), v.as_ref()));
                stored.next();
            }
            (stored_cell, Some((ck, cv))) => {
                if stored_cell.is_some_and(|(k, _)| k.as_ref() == **ck) {
                    stored.next();
                }
                if let Some(value) = cv {
                    merged.push((*ck, *value));
                }
                changes.next();
            }
        }
    }
    merged
}
