//! A chunk's bytes: encoding cells into one, and reading them back in
//! order (the format is in the parent module's docs).

use crate::keys::KeyError;

use crate::table::varint::{bad, put_varint, take_varint};

/// The encoded size of one cell, framing included.
pub(super) fn encoded_len(suffix_len: usize, value_len: usize) -> usize {
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
pub(super) struct Frame {
    /// Key bytes it shares with the cell before it.
    shared: usize,
    /// The rest of its key suffix.
    key: std::ops::Range<usize>,
    /// Its value; the next cell starts at its end.
    value: std::ops::Range<usize>,
}

/// Reads the framing of the cell at `at` in `chunk`, whose predecessor's key
/// suffix is `previous_len` bytes long, checking it stays inside the chunk.
pub(super) fn frame(
    chunk: &[u8],
    mut at: usize,
    previous_len: usize,
) -> std::result::Result<Frame, KeyError> {
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
