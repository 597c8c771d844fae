//! How a table's cells are stored: one storage entry, a *chunk*, per row
//! and locality group, holding that row's cells of the group in key order.
//!
//! sled costs about a microsecond for every key it stores or visits, so a
//! key per cell made a page of eight cells cost eight keys to write and to
//! scan. A chunk makes it one per group (benchmark W1–W5 and the README's
//! design section have the figures).
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
//! in parts ([`entries`](crate::table::entries)).
//!
//! # Merging
//!
//! A write that takes the chunks it rewrites under [`CHUNK_MERGE_BYTES`]
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

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;
use crate::keys::KeyError;
use crate::storage::{Bytes, Tree, WriteBatch};
use crate::table::entries::{self, ChunkScan, StoredChunk};
use crate::table::layout::{Layout, MARK_FAMILY};

/// A chunk whose cells pass this many bytes is split: up to this size a
/// chunk is one storage entry (see [`entries`]).
pub const CHUNK_SPLIT_BYTES: usize = entries::ENTRY_BYTES;
/// The size of the chunks a split makes.
pub const CHUNK_TARGET_BYTES: usize = CHUNK_SPLIT_BYTES / 2;

/// A stored cell: its full cell key and its value.
pub type StoredCell = (Bytes, Bytes);

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
fn take_long_varint(bytes: &[u8], at: &mut usize) -> std::result::Result<usize, KeyError> {
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

/// The encoded size of one cell, framing included.
fn encoded_len(suffix_len: usize, value_len: usize) -> usize {
    suffix_len + value_len + 6
}

/// Encodes cells, given by full cell key (with a row part of `row_len`
/// bytes) and value in key order, into the bytes of one chunk. The cells
/// are walked twice: first to size the chunk, which is allocated once.
pub fn encode_chunk<'c, I>(row_len: usize, cells: I) -> Vec<u8>
where
    I: IntoIterator<Item = (&'c [u8], &'c [u8])>,
    I::IntoIter: Clone,
{
    let cells = cells.into_iter();
    let size = cells
        .clone()
        .map(|(key, value)| encoded_len(key.len().saturating_sub(row_len), value.len()))
        .sum();
    let mut out = Vec::with_capacity(size);
    let mut previous: &[u8] = &[];
    for (key, value) in cells {
        let suffix = &key[row_len..];
        let shared = suffix
            .iter()
            .zip(previous)
            .take_while(|(a, b)| a == b)
            .count();
        put_varint(&mut out, shared);
        put_varint(&mut out, suffix.len() - shared);
        out.extend_from_slice(&suffix[shared..]);
        put_varint(&mut out, value.len());
        out.extend_from_slice(value);
        previous = suffix;
    }
    out
}

/// One cell as [`ChunkReader`] reads it: its key suffix, and where its
/// value lies in the chunk.
pub type ChunkCell<'r> = (&'r [u8], std::ops::Range<usize>);

/// Reads the cells of a chunk in order.
pub struct ChunkReader<'c> {
    chunk: &'c [u8],
    at: usize,
    suffix: Vec<u8>,
}

impl<'c> ChunkReader<'c> {
    /// A reader of the chunk bytes `chunk`.
    pub fn new(chunk: &'c [u8]) -> Self {
        // Room for a family, a qualifier of a few dozen bytes and a
        // timestamp without growing.
        Self::reusing(chunk, Vec::with_capacity(64))
    }

    /// A reader of `chunk` that builds cell keys in `buffer` (its contents
    /// are dropped), for a caller reading many chunks: see
    /// [`ChunkReader::into_buffer`].
    pub fn reusing(chunk: &'c [u8], mut buffer: Vec<u8>) -> Self {
        buffer.clear();
        Self {
            chunk,
            at: 0,
            suffix: buffer,
        }
    }

    /// The buffer the reader built cell keys in, for the next reader.
    pub fn into_buffer(self) -> Vec<u8> {
        self.suffix
    }

    /// Moves past the cells after the last one read that are of its family
    /// (whose key suffixes share its first two bytes, the family id)
    /// without building their keys: skipping a family costs its cells'
    /// lengths only. The key suffix of the next cell read is right: it
    /// shares at most the first byte with the last one read.
    pub fn skip_family(&mut self) -> std::result::Result<(), KeyError> {
        // The length of the key suffix of the cell last passed over.
        let mut suffix_len = self.suffix.len();
        while self.at < self.chunk.len() {
            let cell = frame(self.chunk, self.at, suffix_len)?;
            if cell.shared < 2 {
                return Ok(());
            }
            suffix_len = cell.shared + cell.key.len();
            self.at = cell.value.end;
        }
        Ok(())
    }

    /// The next cell: its key suffix (the cell key after the row part) and
    /// where its value lies in the chunk; `None` after the last one.
    pub fn next_cell(&mut self) -> std::result::Result<Option<ChunkCell<'_>>, KeyError> {
        if self.at >= self.chunk.len() {
            return Ok(None);
        }
        let cell = frame(self.chunk, self.at, self.suffix.len())?;
        self.suffix.truncate(cell.shared);
        self.suffix.extend_from_slice(&self.chunk[cell.key]);
        self.at = cell.value.end;
        Ok(Some((&self.suffix, cell.value)))
    }
}

/// Where the parts of one stored cell lie in its chunk.
struct Frame {
    /// Key bytes it shares with the cell before it.
    shared: usize,
    /// The rest of its key suffix.
    key: std::ops::Range<usize>,
    /// Its value; the next cell starts at its end.
    value: std::ops::Range<usize>,
}

/// Reads the framing of the cell at `at` in `chunk`, whose predecessor's key
/// suffix is `previous_len` bytes long, checking it stays inside the chunk.
fn frame(chunk: &[u8], mut at: usize, previous_len: usize) -> std::result::Result<Frame, KeyError> {
    let shared = take_varint(chunk, &mut at)?;
    let unshared = take_varint(chunk, &mut at)?;
    if shared > previous_len {
        return Err(bad("a cell shares more bytes than the previous one has"));
    }
    let key_end = at
        .checked_add(unshared)
        .filter(|end| *end <= chunk.len())
        .ok_or(bad("it ends inside a cell key"))?;
    let key = at..key_end;
    at = key_end;
    let value_len = take_varint(chunk, &mut at)?;
    let value_end = at
        .checked_add(value_len)
        .filter(|end| *end <= chunk.len())
        .ok_or(bad("it ends inside a value"))?;
    Ok(Frame {
        shared,
        key,
        value: at..value_end,
    })
}

/// The cells a read decodes: a cursor skips the others while it decodes a
/// chunk, before it builds their keys, so a read of one column of a group
/// pays for that column only. Delete markers are always kept.
#[derive(Debug, Clone)]
pub struct KeptCells {
    /// The kept families.
    families: Arc<[KeptFamily]>,
    /// Whether the cells of kept families whose qualifiers are left out
    /// still make their row exist, as in SQL, where a row whose read
    /// columns are all NULL is a row. A chunk that keeps none of its cells
    /// (delete markers aside) then yields them all; one that keeps some
    /// records its row as *pruned*, for the reader to check when none of
    /// the kept cells is visible ([`CellCursor::took_pruned`]).
    presence: bool,
}

/// A kept family's id and the qualifiers kept (in their stored form:
/// escaped and terminated), `None` for all of them.
type KeptFamily = (u16, Option<Vec<Vec<u8>>>);

/// What a read does with one cell of a chunk.
enum Judged {
    Kept,
    /// Of a family the read does not ask for.
    Skipped,
    /// Of a kept family, under a qualifier the read does not ask for.
    Pruned,
}

impl KeptCells {
    /// Keeps the given qualifiers (`None`: all) of each family listed; see
    /// [`KeptCells::presence`] for `presence`.
    pub fn columns(
        families: impl IntoIterator<Item = (u16, Option<Vec<Vec<u8>>>)>,
        presence: bool,
    ) -> Self {
        let encode = |qualifier: Vec<u8>| {
            let mut stored = Vec::with_capacity(qualifier.len() + 2);
            crate::keys::put_bytes(&mut stored, &qualifier);
            stored
        };
        let families = families
            .into_iter()
            .map(|(id, qualifiers)| (id, qualifiers.map(|q| q.into_iter().map(encode).collect())))
            .collect();
        Self { families, presence }
    }

    /// How the cell whose key suffix (after the row part) is `suffix` is
    /// read. A suffix too short to name a family is kept, so that decoding
    /// it reports the corruption.
    fn judge(&self, suffix: &[u8]) -> Judged {
        let [a, b, rest @ ..] = suffix else {
            return Judged::Kept;
        };
        let id = u16::from_be_bytes([*a, *b]);
        if id == MARK_FAMILY {
            return Judged::Kept;
        }
        match self.families.iter().find(|(f, _)| *f == id) {
            None => Judged::Skipped,
            Some((_, None)) => Judged::Kept,
            // The first byte first: most qualifiers differ there, and it
            // saves a call to compare the rest.
            Some((_, Some(qualifiers)))
                if qualifiers
                    .iter()
                    .any(|q| q.first() == rest.first() && rest.starts_with(q)) =>
            {
                Judged::Kept
            }
            Some(_) => Judged::Pruned,
        }
    }
}

/// Decodes the chunk stored under `key` into its cells, appended to `out`
/// in key order; with `keep`, only the cells it keeps. Values share the
/// chunk's memory. `true` when `keep` pruned cells that may make the row
/// exist while keeping others (see [`KeptCells::presence`]).
fn decode(
    layout: &Layout,
    key: &[u8],
    chunk: &Bytes,
    keep: Option<&KeptCells>,
    out: &mut Vec<StoredCell>,
    buffers: &mut DecodeBuffers,
) -> Result<bool> {
    let row_len = layout.row_len(key)?;
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
            Judged::Pruned => {}
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
        out.push((
            keys.slice(start, end - start),
            chunk.slice(value.start, value.len()),
        ));
        start = end;
    }
    Ok(presence && pruned && prune)
}

/// The memory [`decode`] works in, kept by its caller to reuse.
#[derive(Debug, Default)]
struct DecodeBuffers {
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
fn chunk_holding(layout: &Layout, tree: &Tree, at: &[u8]) -> Result<Vec<u8>> {
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
            let cells = &mut self.decoded;
            let (keep, buffers) = (self.keep.as_ref(), &mut self.buffers);
            if decode(&self.layout, &key, &chunk, keep, cells, buffers)? {
                self.pruned.push_back(key);
            }
            if self.reverse {
                self.cells.extend(cells.drain(..).rev());
            } else {
                self.cells.extend(cells.drain(..));
            }
        }
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

/// A write that takes the chunks it rewrites from at least this many bytes
/// to fewer merges them with the row's neighbouring chunks where all fit
/// one chunk, and a chunk it leaves smaller than this joins the one before
/// it among those it rewrites where both fit: a row whose cells shrink or
/// go does not stay spread over the small chunks a split made. Half of
/// [`CHUNK_TARGET_BYTES`], so a chunk just split is not merged back by the
/// next small change.
pub const CHUNK_MERGE_BYTES: usize = CHUNK_TARGET_BYTES / 2;

/// A cell as borrowed key and value.
type BorrowedCell<'c> = (&'c [u8], &'c [u8]);

/// A chunk about to be written: its key, cells and encoded size.
type Piece<'c> = (Vec<u8>, Vec<BorrowedCell<'c>>, usize);

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
        let mut cells = Vec::new();
        decode(
            layout,
            &chunk.key,
            &chunk.bytes,
            None,
            &mut cells,
            &mut buffers,
        )?;
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
fn pieces_of(segments: Vec<Piece<'_>>, row_len: usize) -> Vec<Piece<'_>> {
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
fn push_or_join<'c>(pieces: &mut Vec<Piece<'c>>, piece: Piece<'c>) {
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
fn encoded_size<'c>(row_len: usize, cells: impl Iterator<Item = BorrowedCell<'c>>) -> usize {
    cells
        .map(|(k, v)| encoded_len(k.len() - row_len, v.len()))
        .sum()
}

/// Stored cells as borrowed ones.
fn as_borrowed(cells: &[StoredCell]) -> impl Iterator<Item = BorrowedCell<'_>> {
    cells.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
}

/// A neighbouring chunk to merge, with its cells.
type Neighbour = Option<(StoredChunk, Vec<StoredCell>)>;

/// The row's chunks before and after the ones a write rewrites that all
/// fit one chunk with the `new_size` bytes it leaves.
#[derive(Default)]
struct Neighbours {
    previous: Neighbour,
    next: Neighbour,
}

/// The row's chunks just before and just after the chunks under `keys`
/// (a write's, in key order) to merge with the `new_size` bytes the write
/// leaves of them: only chunks stored whole, only where all fit one
/// chunk, and when nothing is left, only both together.
fn neighbours_to_merge(
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
        let mut cells = Vec::new();
        decode(layout, &chunk.key, &chunk.bytes, None, &mut cells, buffers)?;
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
fn merge_changes<'c>(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `cells` (key suffix, value) sorted and deduplicated by suffix, and
    /// the chunk encoding them as cells of one row.
    fn chunk_of(cells: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Vec<u8> {
        let row = b"row\x00\x01".to_vec();
        cells.sort();
        cells.dedup_by(|a, b| a.0 == b.0);
        let keys: Vec<Vec<u8>> = cells
            .iter()
            .map(|(s, _)| [row.clone(), s.clone()].concat())
            .collect();
        encode_chunk(
            row.len(),
            keys.iter()
                .zip(cells.iter())
                .map(|(k, (_, v))| (k.as_slice(), v.as_slice())),
        )
    }

    #[test]
    fn varints_round_trip() {
        for n in [0, 1, 127, 128, 300, 16_383, 16_384, usize::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, n);
            let mut at = 0;
            assert_eq!(take_varint(&out, &mut at), Ok(n));
            assert_eq!(at, out.len());
        }
        assert!(take_varint(&[0x80], &mut 0).is_err());
        assert!(take_varint(&[0xFF; 11], &mut 0).is_err());
    }

    proptest::proptest! {
        /// Whatever the bytes, reading a chunk ends in cells or an error.
        #[test]
        fn any_bytes_read_as_cells_or_an_error(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let mut reader = ChunkReader::new(&bytes);
            for _ in 0..=bytes.len() {
                match reader.next_cell() {
                    Ok(Some((_, value))) => proptest::prop_assert!(value.end <= bytes.len()),
                    Ok(None) | Err(_) => break,
                }
            }
        }

        /// Cells written in key order read back as written.
        #[test]
        fn cells_round_trip(mut cells in proptest::collection::vec(
            (proptest::collection::vec(0u8..4, 1..12), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)),
            0..30,
        )) {
            let chunk = chunk_of(&mut cells);
            let mut reader = ChunkReader::new(&chunk);
            let mut read = Vec::new();
            while let Some((suffix, value)) = reader.next_cell().map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))? {
                read.push((suffix.to_vec(), chunk[value].to_vec()));
            }
            proptest::prop_assert_eq!(read, cells);
        }

        /// Skipping the rest of each family after its first cell reads the
        /// first cell of each family (key suffixes' first two bytes), keys
        /// and values intact.
        #[test]
        fn skipping_families_reads_the_first_cell_of_each(mut cells in proptest::collection::vec(
            (proptest::collection::vec(0u8..3, 2..10), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20)),
            0..40,
        )) {
            let chunk = chunk_of(&mut cells);
            let mut expected = cells.clone();
            expected.dedup_by(|a, b| a.0[..2] == b.0[..2]);
            let mut reader = ChunkReader::new(&chunk);
            let mut read = Vec::new();
            let fail = |e: KeyError| proptest::test_runner::TestCaseError::fail(e.to_string());
            while let Some((suffix, value)) = reader.next_cell().map_err(fail)? {
                read.push((suffix.to_vec(), chunk[value].to_vec()));
                reader.skip_family().map_err(fail)?;
            }
            proptest::prop_assert_eq!(read, expected);
        }
    }

    #[test]
    fn versions_of_one_column_share_their_key() {
        let row = b"row\x00\x01".to_vec();
        let key = |ts: u8| {
            [
                row.clone(),
                b"\x00\x01q\x00\x01".to_vec(),
                vec![0xFF; 7],
                vec![ts],
            ]
            .concat()
        };
        let cells: Vec<(Vec<u8>, Vec<u8>)> = (0..10).map(|ts| (key(ts), vec![ts])).collect();
        let chunk = encode_chunk(
            row.len(),
            cells.iter().map(|(k, v)| (k.as_slice(), v.as_slice())),
        );
        // The first cell is whole: two lengths, a 13-byte suffix (family,
        // qualifier, timestamp), a length and the value. Each other one
        // shares 12 bytes of its suffix and costs 5.
        assert_eq!(chunk.len(), 17 + 9 * 5);
    }

    /// Chunks a write leaves full keep their keys and are not merged;
    /// one left small joins the one before it; an empty one goes; one
    /// past the split size is split, each piece after the first under
    /// its first cell's key.
    #[test]
    fn pieces_keep_full_chunks_and_merge_small_ones() {
        let row = b"row\x00\x01".to_vec();
        let key = |q: u8| [row.clone(), vec![0, 1, q]].concat();
        let keys: Vec<Vec<u8>> = (0..8).map(key).collect();
        // Cells of 1,279 encoded bytes: two do not fit one chunk with a third.
        let value = vec![7u8; CHUNK_TARGET_BYTES - 10];
        let small = vec![7u8; 10];
        fn segment<'a>(
            row: &[u8],
            keys: &'a [Vec<u8>],
            cells: &[(usize, &'a Vec<u8>)],
        ) -> Piece<'a> {
            let cells: Vec<BorrowedCell<'a>> = cells
                .iter()
                .map(|(q, v)| (keys[*q].as_slice(), v.as_slice()))
                .collect();
            let first = cells.first().map_or(row.to_vec(), |(k, _)| k.to_vec());
            let len = encoded_size(row.len(), cells.iter().copied());
            (first, cells, len)
        }
        let keys_of = |pieces: &[Piece<'_>]| -> Vec<Vec<u8>> {
            pieces.iter().map(|(k, _, _)| k.clone()).collect()
        };
        // Two chunks of about the target size stay two.
        let full = pieces_of(
            vec![
                segment(&row, &keys, &[(0, &value)]),
                segment(&row, &keys, &[(1, &value)]),
            ],
            row.len(),
        );
        assert_eq!(keys_of(&full), vec![keys[0].clone(), keys[1].clone()]);
        // A small one after a full one joins it; an empty one goes.
        let merged = pieces_of(
            vec![
                segment(&row, &keys, &[(0, &value)]),
                segment(&row, &keys, &[]),
                segment(&row, &keys, &[(2, &small), (3, &small)]),
            ],
            row.len(),
        );
        assert_eq!(keys_of(&merged), vec![keys[0].clone()]);
        assert_eq!(merged[0].1.len(), 3);
        // Past the split size: pieces of about the target, a small last
        // one joining the one before it.
        let wide = pieces_of(
            vec![segment(
                &row,
                &keys,
                &[(4, &value), (5, &value), (6, &small)],
            )],
            row.len(),
        );
        assert_eq!(keys_of(&wide), vec![keys[4].clone(), keys[5].clone()]);
        assert_eq!(wide[1].1.len(), 2);
        assert!(wide.iter().all(|(_, _, len)| *len <= CHUNK_SPLIT_BYTES));
    }

    /// Adding a cell after a large value splits it off into a chunk of
    /// its own without rewriting the value's parts; the row reads back
    /// whole.
    #[test]
    fn a_large_value_is_not_rewritten_when_a_cell_is_added_after_it() {
        use crate::ids::TableId;
        use crate::keys::CellKey;
        use crate::storage::{Durability, MemoryBackend, Storage};
        use crate::table::layout::Placement;
        use crate::table::spec::{FamilySpec, TableSpec};

        let storage = Storage::with_backend(
            Arc::new(MemoryBackend::new()),
            "mem".as_ref(),
            crate::storage::DEFAULT_STALL_LIMIT,
        )
        .expect("storage");
        let spec = TableSpec::new().with_family(FamilySpec::new("f"));
        let layout = Layout::new(
            &storage,
            TableId::generate(),
            "t".into(),
            spec,
            &Placement::OwnTree,
            false,
        )
        .expect("layout");
        let layout = Arc::new(layout);
        let tree = &layout.groups[0].tree;
        let family = layout.family("f").expect("family f").id;
        let key = |q: &str| CellKey::encode(&[], b"r", family, q.as_bytes(), 1).expect("key");
        let row_part = key("a")[..layout.row_len(&key("a")).expect("row")].to_vec();
        let large = vec![9u8; 100_000];
        // Writes `cells` to the row and returns the bytes the write put.
        let write = |cells: &[(&str, &[u8])], stored: bool| -> usize {
            let keys: Vec<Vec<u8>> = cells.iter().map(|(q, _)| key(q)).collect();
            let changes: CellChanges<'_> = keys
                .iter()
                .zip(cells)
                .map(|(k, (_, v))| (k.as_slice(), Some(*v)))
                .collect();
            let mut batch = WriteBatch::with_durability(Durability::Eventual);
            write_changes(&layout, tree, &row_part, &changes, stored, &mut batch).expect("write");
            let bytes = batch.bytes();
            storage.apply(batch).expect("apply");
            bytes
        };
        let loaded = write(&[("a", b"first"), ("b", &large)], false);
        assert!(loaded > large.len(), "the load wrote {loaded} bytes");
        let added = write(&[("c", b"after")], true);
        assert!(added < 1_000, "adding a small cell wrote {added} bytes");
        let cells = cells_with_prefix(&layout, tree, &row_part).expect("read");
        let read: Vec<(Vec<u8>, Vec<u8>)> = cells
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        let want = vec![
            (key("a"), b"first".to_vec()),
            (key("b"), large.clone()),
            (key("c"), b"after".to_vec()),
        ];
        assert!(read == want, "the row reads back differently");
    }
}
