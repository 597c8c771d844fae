//! How a chunk is stored: as one storage entry of at most [`ENTRY_BYTES`],
//! or as a *head* entry and *parts* of at most [`PIECE_BYTES`] each.
//!
//! sled applies cache accesses in batches: each of its 256 cache shards
//! queues 64 accesses before it counts them and evicts. Until then the
//! pages they touched stay in memory, so a scan keeps some thousands of
//! leaf pages resident whatever the cache capacity, and a leaf holds up to
//! 16 entries: the size of an entry bounds a scan's memory. Scanning 1.2 GiB
//! of sled alone (one tree, 16 MiB cache) peaked at 148 MiB with entries of
//! 1 KiB, 219 MiB with 2 KiB, 409 MiB with 4 KiB, 810 MiB with 8 KiB and
//! 1,296 MiB with 256 KiB, which was the whole tree. So a chunk larger than
//! an entry (a row's large value) is cut into pieces of 2 KiB.
//!
//! # Entries
//!
//! The first byte of an entry's value says what it is:
//! - `0x00`: a whole chunk (its bytes as [`crate::table::chunks`] describes
//!   them; their first byte, the first cell's shared length, is always 0);
//! - `0x01`: the head of a chunk stored in `n` entries: `0x01 ‖ n ‖ chunk
//!   length ‖ CRC-32 of the chunk ‖ the chunk's first bytes` (the two
//!   numbers LEB128 varints, the CRC big-endian);
//! - `0x02`: a part: `0x02 ‖ the chunk's next bytes`.
//!
//! A write replaces a chunk's entries in one atomic batch, but a read
//! without the row's lock meets them one at a time, and a write can land in
//! between: the head's CRC tells a chunk put together from two versions
//! from a whole one, and such a chunk is read again (corruption is what
//! stays inconsistent). Readers without the lock judge the rows they read
//! by the write epoch, as with a chunk of one entry.
//!
//! Part `i` (from 1) of the chunk under key `K` is stored under
//! `K ‖ 00 00 00 00 ‖ i` (`i` a big-endian `u32`). It sorts after `K` and
//! before every other key: a chunk's key is a row part, which no other
//! stored key extends with four zero bytes (a cell key continues it with a
//! family id and a qualifier, and an encoded qualifier never begins with
//! two zero bytes), or a cell key, which no other cell key extends.
//!
//! Format 3 wrote whole chunks only, so its databases read as they are.

use std::ops::Bound;

use crate::error::Result;
use crate::storage::{Bytes, RangeIter, Tree, WriteBatch};
use crate::table::layout::Layout;
use crate::table::varint::{bad, put_varint, take_varint};

/// The most bytes a whole chunk's entry holds: a webtable page's 2 KB of
/// contents is one entry.
pub const ENTRY_BYTES: usize = 2560;

/// The most bytes a head or a part holds.
pub const PIECE_BYTES: usize = 2048;

/// The first byte of a whole chunk.
const WHOLE: u8 = 0x00;
/// The first byte of the head of a chunk stored in parts.
const HEAD: u8 = 0x01;
/// The first byte of a part.
const PART: u8 = 0x02;
/// What a part's key adds to its chunk's key before the part's number.
const PART_MARK: [u8; 4] = [0; 4];
/// The bytes a part's key adds to its chunk's key.
const PART_SUFFIX_LEN: usize = PART_MARK.len() + 4;
/// A head's chunk bytes: room is left for the tag, two varints and the CRC.
const HEAD_BYTES: usize = PIECE_BYTES - 1 - 2 * 10 - 4;
/// A part's chunk bytes.
const PART_BYTES: usize = PIECE_BYTES - 1;
/// How many times a chunk that a concurrent write tore is read again
/// before it is reported as corrupt.
const REREADS: u32 = 100;

/// The key of part `index` (from 1) of the chunk stored under `chunk_key`.
fn part_key(chunk_key: &[u8], index: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(chunk_key.len() + PART_SUFFIX_LEN);
    key.extend_from_slice(chunk_key);
    key.extend_from_slice(&PART_MARK);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// The key of the chunk a stored entry belongs to: its own, or for a part
/// its head's.
pub fn chunk_key_of<'k>(key: &'k [u8], value: &[u8]) -> &'k [u8] {
    if value.first() == Some(&PART) && key.len() >= PART_SUFFIX_LEN {
        &key[..key.len() - PART_SUFFIX_LEN]
    } else {
        key
    }
}

/// Adds to `batch` the writes that store `chunk` under `key`, replacing
/// the chunk stored there in `old_entries` entries (0 for none): its parts
/// past the new chunk's are deleted. Returns how many entries hold it.
pub fn put_chunk(
    batch: &mut WriteBatch,
    tree: &Tree,
    key: Vec<u8>,
    chunk: Vec<u8>,
    old_entries: u32,
) -> u32 {
    if chunk.len() <= ENTRY_BYTES {
        debug_assert!(chunk.first().is_none_or(|b| *b == WHOLE));
        delete_parts(batch, tree, &key, 1, old_entries);
        batch.put(tree, key, chunk);
        return 1;
    }
    let rest = chunk.len() - HEAD_BYTES;
    // A chunk holds at most one value of 100 MiB besides small cells: about
    // 17,000 parts.
    let entries = u32::try_from(1 + rest.div_ceil(PART_BYTES)).unwrap_or(u32::MAX);
    let mut head = Vec::with_capacity(PIECE_BYTES);
    head.push(HEAD);
    put_varint(&mut head, entries as usize);
    put_varint(&mut head, chunk.len());
    head.extend_from_slice(&crc32fast::hash(&chunk).to_be_bytes());
    head.extend_from_slice(&chunk[..HEAD_BYTES]);
    for (index, bytes) in (1..).zip(chunk[HEAD_BYTES..].chunks(PART_BYTES)) {
        let mut part = Vec::with_capacity(bytes.len() + 1);
        part.push(PART);
        part.extend_from_slice(bytes);
        batch.put(tree, part_key(&key, index), part);
    }
    delete_parts(batch, tree, &key, entries, old_entries);
    batch.put(tree, key, head);
    entries
}

/// Adds to `batch` the deletes of the chunk stored under `key` in
/// `entries` entries.
pub fn delete_chunk(batch: &mut WriteBatch, tree: &Tree, key: Vec<u8>, entries: u32) {
    delete_parts(batch, tree, &key, 1, entries);
    batch.delete(tree, key);
}

/// Deletes parts `from..entries` of the chunk under `key`.
fn delete_parts(batch: &mut WriteBatch, tree: &Tree, key: &[u8], from: u32, entries: u32) {
    for index in from.max(1)..entries {
        batch.delete(tree, part_key(key, index));
    }
}

/// The first bound past the chunk stored under `key` and its parts.
pub fn past_chunk(key: &[u8]) -> Bound<Vec<u8>> {
    Bound::Excluded(part_key(key, u32::MAX))
}

/// The chunk nearest the start of the range `lo..hi` (its end when
/// `reverse`), when it is stored whole; `None` when the range holds no
/// entry or its nearest chunk is stored in parts (a large value, which
/// is never worth rewriting to save an entry). A range's bounds are chunk
/// boundaries: a row part, a chunk's key, or [`past_chunk`].
pub fn whole_chunk_next_to(
    tree: &Tree,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
) -> Result<Option<StoredChunk>> {
    let nearest = tree.range(lo, hi, reverse).next().transpose()?;
    // A format-3 chunk is whole at any size: one larger than an entry
    // holds a large value, and is left as it is, like a head.
    Ok(nearest
        .filter(|(_, value)| value.first() == Some(&WHOLE) && value.len() <= ENTRY_BYTES)
        .map(|(key, bytes)| StoredChunk {
            key,
            bytes,
            entries: 1,
        }))
}

/// A chunk as read from storage.
#[derive(Debug)]
pub struct StoredChunk {
    /// The key it is stored under.
    pub key: Bytes,
    /// Its bytes, put together from its parts.
    pub bytes: Bytes,
    /// How many entries hold it: 1, or its head and parts.
    pub entries: u32,
}

/// A head entry's fields.
struct Head<'h> {
    /// How many entries hold the chunk: at least 2.
    entries: u32,
    /// The chunk's length.
    len: usize,
    /// The chunk's CRC-32, big-endian.
    crc: &'h [u8],
    /// The chunk's first bytes.
    first: &'h [u8],
}

/// The fields of the head entry `head`; `None` when it does not read as
/// one.
fn read_head(head: &[u8]) -> Option<Head<'_>> {
    if head.first() != Some(&HEAD) {
        return None;
    }
    let mut at = 1;
    let entries = u32::try_from(take_varint(head, &mut at).ok()?)
        .ok()
        .filter(|n| *n >= 2)?;
    let len = take_varint(head, &mut at).ok()?;
    Some(Head {
        entries,
        len,
        crc: head.get(at..at + 4)?,
        first: head.get(at + 4..)?,
    })
}

/// The chunk under `key` whose head is `head`, put together from `parts`
/// (in order); `None` when they are not all of one version of it.
fn join(key: Bytes, head: &[u8], parts: &[(Bytes, Bytes)]) -> Option<StoredChunk> {
    let Head {
        entries,
        len,
        crc,
        first,
    } = read_head(head)?;
    let whole = parts.len() + 1 == entries as usize
        && len <= entries as usize * PIECE_BYTES
        && (1..)
            .zip(parts)
            .all(|(index, (k, v))| v.first() == Some(&PART) && **k == *part_key(&key, index));
    if !whole {
        return None;
    }
    let mut bytes = Vec::with_capacity(len);
    bytes.extend_from_slice(first);
    for (_, part) in parts {
        bytes.extend_from_slice(&part[1..]);
    }
    if bytes.len() != len || crc32fast::hash(&bytes).to_be_bytes() != crc {
        return None;
    }
    Some(StoredChunk {
        key,
        bytes: Bytes::from(bytes),
        entries,
    })
}

/// The chunks of a key range in key order or reversed, each put together
/// from its entries.
pub struct ChunkScan {
    tree: Tree,
    entries: RangeIter,
    reverse: bool,
    /// An entry read ahead while looking for a chunk's parts.
    next: Option<(Bytes, Bytes)>,
    /// Parts met before their head (a reverse scan), last part first.
    parts: Vec<(Bytes, Bytes)>,
    /// The key of the chunk returned last: parts of it met after it
    /// (forward) are of a version written since, and are passed over.
    last: Option<Bytes>,
}

impl ChunkScan {
    /// The chunks with keys from `lo` to `hi`. A range's bounds are row
    /// boundaries or chunk keys; a chunk whose key is in it is read whole,
    /// parts past `hi` included.
    pub fn new(tree: &Tree, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, reverse: bool) -> Self {
        ChunkScan {
            tree: tree.clone(),
            entries: tree.range(lo, hi, reverse),
            reverse,
            next: None,
            parts: Vec::new(),
            last: None,
        }
    }

    /// Reads the rest of the scan ahead on a thread of its own (see
    /// [`RangeIter::read_ahead`]).
    pub fn read_ahead(&mut self) {
        self.entries.read_ahead();
    }

    fn next_entry(&mut self) -> Option<Result<(Bytes, Bytes)>> {
        self.next
            .take()
            .map(Ok)
            .or_else(|| self.entries.next().map(|e| e.map_err(Into::into)))
    }

    /// The next chunk, `None` after the last one.
    pub fn next_chunk(&mut self, layout: &Layout) -> Result<Option<StoredChunk>> {
        loop {
            let chunk = match self.next_entry().transpose()? {
                // A reverse scan met parts, then what is not their head.
                entry if !self.parts.is_empty() && !self.of_parts(entry.as_ref()) => {
                    let key = Bytes::from(self.parts_owner());
                    self.parts.clear();
                    // An older version of the same chunk is passed over.
                    if entry.as_ref().is_none_or(|(k, _)| *k != key) {
                        self.next = entry;
                    }
                    self.reread(layout, key)?
                }
                None => return Ok(None),
                Some((key, value)) => match value.first() {
                    Some(&PART) if self.reverse => {
                        self.parts.push((key, value));
                        continue;
                    }
                    Some(&PART) => {
                        let owner = Bytes::from(chunk_key_of(&key, &value));
                        if self.last.as_ref() == Some(&owner) {
                            continue;
                        }
                        // A part whose head this forward scan never met.
                        match self.reread(layout, owner)? {
                            Some(chunk) => Some(chunk),
                            None => {
                                return Err(layout.corrupt(&key, bad("a part has no head")).into())
                            }
                        }
                    }
                    Some(&HEAD) => {
                        let mut parts = std::mem::take(&mut self.parts);
                        if self.reverse {
                            parts.reverse();
                        } else {
                            self.take_parts(&key, &value, &mut parts)?;
                        }
                        match join(key.clone(), &value, &parts) {
                            Some(chunk) => Some(chunk),
                            // Parts past the range's end, or of another
                            // version: the chunk is read on its own.
                            None => self.reread(layout, key)?,
                        }
                    }
                    _ => Some(StoredChunk {
                        key,
                        bytes: value,
                        entries: 1,
                    }),
                },
            };
            if let Some(chunk) = chunk {
                self.last = Some(chunk.key.clone());
                return Ok(Some(chunk));
            }
        }
    }

    /// The key of the chunk the parts a reverse scan holds belong to.
    fn parts_owner(&self) -> &[u8] {
        self.parts
            .last()
            .map_or(&[], |(key, value)| chunk_key_of(key, value))
    }

    /// Whether `entry` is another part, or the head, of the chunk whose
    /// parts a reverse scan holds.
    fn of_parts(&self, entry: Option<&(Bytes, Bytes)>) -> bool {
        let owner = self.parts_owner();
        entry.is_some_and(|(key, value)| match value.first() {
            Some(&HEAD) => **key == *owner,
            Some(&PART) => chunk_key_of(key, value) == owner,
            _ => false,
        })
    }

    /// Moves the parts that follow the head `head` under `key` in a forward
    /// scan into `parts`, up to the first entry that is not one of them.
    fn take_parts(
        &mut self,
        key: &[u8],
        head: &[u8],
        parts: &mut Vec<(Bytes, Bytes)>,
    ) -> Result<()> {
        let entries = read_head(head).map_or(0, |head| head.entries);
        for index in 1..entries {
            match self.next_entry().transpose()? {
                Some((k, v)) if *k == *part_key(key, index) && v.first() == Some(&PART) => {
                    parts.push((k, v));
                }
                other => {
                    self.next = other;
                    break;
                }
            }
        }
        Ok(())
    }

    /// The chunk under `key` as it is stored now, read on its own until its
    /// entries agree (a write may land between reads of them); `None` when
    /// there is none.
    fn reread(&self, layout: &Layout, key: Bytes) -> Result<Option<StoredChunk>> {
        for attempt in 0..REREADS {
            // A write lands whole between two reads: give the writer time,
            // more after the first tries (about 90 ms in all).
            match attempt {
                0 => {}
                1..10 => std::thread::yield_now(),
                _ => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
            let stored = self
                .tree
                .range(
                    Bound::Included(key.to_vec()),
                    Bound::Included(key.to_vec()),
                    false,
                )
                .next()
                .transpose()?;
            let Some((_, value)) = stored else {
                return Ok(None);
            };
            if value.first() != Some(&HEAD) {
                return Ok(Some(StoredChunk {
                    key,
                    bytes: value,
                    entries: 1,
                }));
            }
            let Some(last) = read_head(&value).map(|head| head.entries) else {
                break;
            };
            let parts: Vec<(Bytes, Bytes)> = self
                .tree
                .range(
                    Bound::Included(part_key(&key, 1)),
                    Bound::Included(part_key(&key, last - 1)),
                    false,
                )
                .collect::<std::result::Result<_, _>>()?;
            if let Some(chunk) = join(key.clone(), &value, &parts) {
                return Ok(Some(chunk));
            }
        }
        Err(layout
            .corrupt(
                &key,
                bad("a chunk's parts are missing or do not match its head"),
            )
            .into())
    }
}
