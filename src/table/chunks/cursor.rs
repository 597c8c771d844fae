//! Reading a locality group's cells chunk by chunk: decoding a stored
//! chunk, and the cursor over a key range.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;
use crate::storage::{Bytes, Tree};
use crate::table::entries::{self, ChunkScan, StoredChunk};
use crate::table::layout::{Layout, MARK_FAMILY};

use super::codec::ChunkReader;
use super::StoredCell;
use crate::table::kept::{Judged, KeptCells};

/// Decodes the chunk stored under `key`, whose row part is `row_len` bytes
/// long, into its cells, appended to `out` in key order; with `keep`, only
/// the cells it keeps. Values share the chunk's memory, or are copies
/// with `copy_values` (a chunk read ahead shares a buffer with the chunks
/// around it, which a kept value must not hold). `true` when `keep`
/// pruned cells that may make the row exist while keeping others (see
/// [`KeptCells::presence`]).
#[expect(
    clippy::too_many_arguments,
    reason = "one chunk, what to keep of it, and the memory to decode it in"
)]
pub(super) fn decode(
    layout: &Layout,
    key: &[u8],
    row_len: usize,
    chunk: &Bytes,
    keep: Option<&KeptCells>,
    copy_values: bool,
    out: &mut Vec<StoredCell>,
    buffers: &mut DecodeBuffers,
) -> Result<bool> {
    let row_part = &key[..row_len];
    // The cells' full keys, one after another in `keys` (storage copies
    // them anyway), and where each ends.
    let DecodeBuffers {
        keys, spans: cells, ..
    } = buffers;
    keys.clear();
    cells.clear();
    let presence = keep.is_some_and(|keep| keep.presence);
    let mut pruned = false;
    let mut kept = false;
    let mut prune = true;
    let mut reader = ChunkReader::reusing(chunk, std::mem::take(&mut buffers.suffix));
    loop {
        let Some((suffix, value)) = reader
            .next_cell()
            .map_err(|reason| layout.corrupt(key, reason))?
        else {
            if presence && pruned && !kept && prune {
                // Nothing kept, but the pruned cells may make the row
                // exist: the chunk is read whole.
                prune = false;
                reader = ChunkReader::reusing(chunk, reader.into_buffer());
                keys.clear();
                cells.clear();
                continue;
            }
            break;
        };
        match keep.map_or(Judged::Kept, |keep| keep.judge(suffix)) {
            Judged::Kept => kept |= !suffix.starts_with(&MARK_FAMILY.to_be_bytes()),
            Judged::Skipped => {
                // The whole family is: its cells are passed over unread.
                reader
                    .skip_family()
                    .map_err(|reason| layout.corrupt(key, reason))?;
                continue;
            }
            Judged::Pruned if prune => {
                pruned = true;
                continue;
            }
            Judged::PrunedFamily if prune => {
                pruned = true;
                reader
                    .skip_family()
                    .map_err(|reason| layout.corrupt(key, reason))?;
                continue;
            }
            Judged::Pruned | Judged::PrunedFamily => {}
        }
        keys.extend_from_slice(row_part);
        keys.extend_from_slice(suffix);
        cells.push((keys.len(), value));
    }
    buffers.suffix = reader.into_buffer();
    // One allocation holds every cell key of the chunk; each cell shares it.
    let keys = Bytes::from(&keys[..]);
    let mut start = 0;
    for (end, value) in cells.drain(..) {
        let value = if copy_values {
            Bytes::from(&chunk[value])
        } else {
            chunk.slice(value.start, value.len())
        };
        out.push((keys.slice(start, end - start), value));
        start = end;
    }
    Ok(presence && pruned && prune)
}

/// The memory [`decode`] works in, kept by its caller to reuse.
#[derive(Debug, Default)]
pub(super) struct DecodeBuffers {
    /// The kept cells' full keys, one after another.
    keys: Vec<u8>,
    /// Where each kept cell's key ends in `keys`, and its value in the chunk.
    spans: Vec<(usize, std::ops::Range<usize>)>,
    /// Where a [`ChunkReader`] builds each cell's key suffix.
    suffix: Vec<u8>,
}

/// The key to start a forward chunk scan from so that it meets the cell
/// `at` (a position inside a row): the key of the chunk that holds it, or
/// `at` itself when the row has no chunk at or before it.
pub(super) fn chunk_holding(layout: &Layout, tree: &Tree, at: &[u8]) -> Result<Vec<u8>> {
    let row_len = layout.row_len(at)?;
    if row_len == at.len() {
        return Ok(at.to_vec());
    }
    let before = tree
        .range(
            Bound::Included(at[..row_len].to_vec()),
            Bound::Included(at.to_vec()),
            true,
        )
        .next()
        .transpose()?;
    Ok(before.map_or_else(
        || at.to_vec(),
        |(key, value)| entries::chunk_key_of(&key, &value).to_vec(),
    ))
}

/// Iterates the cells of a key range of one locality group, chunk by chunk, in
/// key order or reversed; `head` is the next cell.
pub struct CellCursor {
    layout: Arc<Layout>,
    tree: Tree,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    chunks: ChunkScan,
    /// The decoded cells of the current chunk not yet taken, in scan order.
    cells: VecDeque<StoredCell>,
    /// Where a chunk's cells and their keys are decoded (kept to reuse
    /// their memory).
    decoded: Vec<StoredCell>,
    buffers: DecodeBuffers,
    /// Cells below this key are skipped (a forward scan that started
    /// inside a chunk).
    skip_below: Option<Vec<u8>>,
    /// Only these cells are returned (all when `None`).
    keep: Option<KeptCells>,
    /// The keys of the chunks decoded but not yet asked about whose rows
    /// had cells pruned (see [`KeptCells::presence`]), in scan order.
    pruned: VecDeque<Bytes>,
    /// Chunks a range of this cursor reads before the rest of it is read
    /// ahead on a thread of its own (see [`CellCursor::read_ahead_after`]).
    read_ahead_after: Option<usize>,
    /// Chunks still to read before that.
    read_ahead_in: Option<usize>,
    /// The length of the row part of the keys of the cells in `cells`
    /// (they are of one chunk), and of `head`'s.
    chunk_row_len: usize,
    head_row_len: usize,
    /// The next cell.
    pub head: Option<StoredCell>,
}

impl CellCursor {
    /// The cells with keys in `[lo, hi)` (`hi`: `None` for no end), where
    /// `lo` and `hi` are row boundaries: a row part, or the table's prefix
    /// and its end.
    pub fn open(
        layout: &Arc<Layout>,
        tree: &Tree,
        lo: Vec<u8>,
        hi: Option<Vec<u8>>,
        reverse: bool,
    ) -> Result<CellCursor> {
        Self::open_keeping(layout, tree, lo, hi, reverse, None)
    }

    /// [`CellCursor::open`] returning only the cells `keep` keeps (all
    /// when `None`).
    pub fn open_keeping(
        layout: &Arc<Layout>,
        tree: &Tree,
        lo: Vec<u8>,
        hi: Option<Vec<u8>>,
        reverse: bool,
        keep: Option<KeptCells>,
    ) -> Result<CellCursor> {
        let hi = hi.map_or(Bound::Unbounded, Bound::Excluded);
        let chunks = ChunkScan::new(tree, Bound::Included(lo), hi.clone(), reverse);
        let mut cursor = CellCursor {
            layout: Arc::clone(layout),
            tree: tree.clone(),
            hi,
            reverse,
            chunks,
            cells: VecDeque::new(),
            decoded: Vec::new(),
            buffers: DecodeBuffers::default(),
            skip_below: None,
            keep,
            pruned: VecDeque::new(),
            read_ahead_after: None,
            read_ahead_in: None,
            chunk_row_len: 0,
            head_row_len: 0,
            head: None,
        };
        cursor.advance()?;
        Ok(cursor)
    }

    /// The cells from `from` (a position inside a row: a family or column
    /// prefix, or a cell key) up to `hi`, forward.
    pub fn open_inside_row(
        layout: &Arc<Layout>,
        tree: &Tree,
        from: &[u8],
        hi: Option<Vec<u8>>,
        keep: Option<KeptCells>,
    ) -> Result<CellCursor> {
        let start = chunk_holding(layout, tree, from)?;
        let mut cursor = Self::open_keeping(layout, tree, start, hi, false, keep)?;
        cursor.skip_to(from)?;
        Ok(cursor)
    }

    /// Reads the chunks after the next `chunks` on a thread of its own: a
    /// scan that has gone that far is long enough to pay for the thread,
    /// and a short one never starts it.
    pub fn read_ahead_after(&mut self, chunks: usize) {
        self.read_ahead_after = Some(chunks);
        self.read_ahead_in = Some(chunks);
    }

    /// Moves to the next cell.
    pub fn advance(&mut self) -> Result<()> {
        loop {
            while let Some(cell) = self.cells.pop_front() {
                if let Some(lo) = &self.skip_below {
                    if cell.0.as_ref() < lo.as_slice() {
                        continue;
                    }
                    self.skip_below = None;
                }
                self.head = Some(cell);
                self.head_row_len = self.chunk_row_len;
                return Ok(());
            }
            match &mut self.read_ahead_in {
                Some(0) => {
                    self.chunks.read_ahead();
                    self.read_ahead_in = None;
                }
                Some(left) => *left -= 1,
                None => {}
            }
            let Some(StoredChunk {
                key, bytes: chunk, ..
            }) = self.chunks.next_chunk(&self.layout)?
            else {
                self.head = None;
                return Ok(());
            };
            let row_len = self.layout.row_len(&key)?;
            self.chunk_row_len = row_len;
            let cells = &mut self.decoded;
            let (keep, buffers) = (self.keep.as_ref(), &mut self.buffers);
            // Once reading ahead, chunks share their batch's buffer.
            let copy = self.read_ahead_after.is_some() && self.read_ahead_in.is_none();
            let layout = &self.layout;
            if decode(layout, &key, row_len, &chunk, keep, copy, cells, buffers)? {
                self.pruned.push_back(key);
            }
            if self.reverse {
                self.cells.extend(cells.drain(..).rev());
            } else {
                self.cells.extend(cells.drain(..));
            }
        }
    }

    /// The length of the row part of `head`'s key, known from its chunk:
    /// a reader need not parse the key again to find it.
    pub fn head_row_len(&self) -> usize {
        self.head_row_len
    }

    /// Whether the row `row_enc` (prefix included), which the reader has
    /// just read, had cells pruned; forgets the rows up to it.
    pub fn took_pruned(&mut self, row_enc: &[u8]) -> bool {
        let mut took = false;
        while let Some(key) = self.pruned.front() {
            let of_row = key.starts_with(row_enc);
            let before = (key.as_ref() < row_enc) != self.reverse;
            if !of_row && !before {
                break;
            }
            took |= of_row;
            self.pruned.pop_front();
        }
        took
    }

    /// Skips the buffered cells below `lo` (forward only).
    fn skip_to(&mut self, lo: &[u8]) -> Result<()> {
        if self.head.as_ref().is_some_and(|(k, _)| k.as_ref() < lo) {
            self.skip_below = Some(lo.to_vec());
            self.advance()?;
        }
        Ok(())
    }

    /// Moves a forward cursor to the first cell at or after `lo`, a
    /// position inside the current row, reading no chunk in between.
    pub fn seek(&mut self, lo: Vec<u8>) -> Result<()> {
        debug_assert!(!self.reverse, "only forward cursors seek");
        if self
            .head
            .as_ref()
            .is_none_or(|(k, _)| k.as_ref() >= lo.as_slice())
        {
            return Ok(());
        }
        let buffered = self
            .cells
            .back()
            .is_some_and(|(k, _)| k.as_ref() >= lo.as_slice());
        if !buffered {
            let start = chunk_holding(&self.layout, &self.tree, &lo)?;
            self.chunks =
                ChunkScan::new(&self.tree, Bound::Included(start), self.hi.clone(), false);
            self.cells.clear();
            // The new range reads ahead as the old one did, after as many
            // chunks of its own.
            self.read_ahead_in = self.read_ahead_after;
        }
        self.skip_below = Some(lo);
        self.advance()
    }
}

/// Every stored cell of one row in one group whose key starts with `scope`
/// (the row part, or a family or column prefix inside it), in key order.
pub fn cells_with_prefix(
    layout: &Arc<Layout>,
    tree: &Tree,
    scope: &[u8],
) -> Result<Vec<StoredCell>> {
    let row_len = layout.row_len(scope)?;
    let end = crate::keys::prefix_successor(&scope[..row_len]);
    let mut cursor = if row_len == scope.len() {
        CellCursor::open(layout, tree, scope.to_vec(), end, false)?
    } else {
        CellCursor::open_inside_row(layout, tree, scope, end, None)?
    };
    let mut cells = Vec::new();
    while let Some(cell) = cursor.head.take() {
        if !cell.0.starts_with(scope) {
            break;
        }
        cells.push(cell);
        cursor.advance()?;
    }
    Ok(cells)
}
