//! sled with nothing on top: the keys and values widesql's layout writes (a
//! chunk per row and locality group, encoded by widesql's own
//! `encode_chunk`, in two trees for two locality groups), loaded in batches
//! of 1,000 rows. The physical limit of widesql's storage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use widesql::internals::{encode_chunk, put_bytes, CellKey, ChunkReader};

use super::System;
use crate::data::Page;
use crate::Res;

/// The family ids, as the SQL table of the benchmark numbers them.
const CF: u16 = 0;
const ANCHOR: u16 = 1;
const PAGE: u16 = 2;
/// All cells carry one timestamp.
const TS: i64 = 1_700_000_000_000_000;

/// sled trees holding the benchmark pages.
pub struct RawSled {
    db: sled::Db,
    small: sled::Tree,
    blobs: sled::Tree,
    path: PathBuf,
}

impl RawSled {
    /// A new store in `path`.
    pub fn open(path: &Path, cache_bytes: u64) -> Res<Self> {
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache_bytes)
            .open()?;
        Ok(RawSled {
            small: db.open_tree("small")?,
            blobs: db.open_tree("blobs")?,
            db,
            path: path.to_path_buf(),
        })
    }

    /// The sled database (for the workloads that write single keys).
    pub fn db(&self) -> &sled::Db {
        &self.db
    }

    /// Visits the value of column `name` of family `cf` of every page,
    /// from the default group, in place.
    fn for_each_value(&self, name: &[u8], mut visit: impl FnMut(&[u8]) -> Res<()>) -> Res<()> {
        let wanted = suffix(CF, name)?;
        for item in self.small.iter() {
            let (_, chunk) = item?;
            if let Some(value) = find(&chunk, &wanted)? {
                visit(value)?;
            }
        }
        Ok(())
    }
}

/// The key of one cell.
pub fn cell_key(row: &str, family: u16, qualifier: &[u8]) -> Res<Vec<u8>> {
    Ok(CellKey::encode(&[], row.as_bytes(), family, qualifier, TS)?)
}

/// The row part of a row's cell keys: a chunk's key.
fn row_part(row: &str) -> Vec<u8> {
    let mut out = Vec::new();
    put_bytes(&mut out, row.as_bytes());
    out
}

/// A cell key without its row part.
fn suffix(family: u16, qualifier: &[u8]) -> Res<Vec<u8>> {
    // The empty row's part is its two-byte terminator.
    Ok(CellKey::encode(&[], b"", family, qualifier, TS)?[2..].to_vec())
}

/// The value of the cell with key suffix `wanted` in a chunk.
fn find<'c>(chunk: &'c [u8], wanted: &[u8]) -> Res<Option<&'c [u8]>> {
    let mut reader = ChunkReader::new(chunk);
    while let Some((suffix, value)) = reader.next_cell()? {
        if suffix == wanted {
            return Ok(Some(&chunk[value]));
        }
    }
    Ok(None)
}

/// Encodes one row's cells (key, value; any order) as one chunk.
fn chunk(row: &str, mut cells: Vec<(Vec<u8>, &[u8])>) -> Vec<u8> {
    cells.sort();
    encode_chunk(
        row_part(row).len(),
        cells.iter().map(|(k, v)| (k.as_slice(), *v)),
    )
}

impl System for RawSled {
    fn name(&self) -> String {
        "raw sled".into()
    }

    fn load(&mut self, pages: &[Page]) -> Res<()> {
        for batch in pages.chunks(1000) {
            let (mut small, mut blobs) = (sled::Batch::default(), sled::Batch::default());
            for p in batch {
                let rank = p.rank.to_be_bytes();
                let mut cells = vec![
                    (cell_key(&p.key, CF, b"language")?, p.language.as_bytes()),
                    (cell_key(&p.key, CF, b"checksum")?, &p.checksum[..]),
                    (cell_key(&p.key, CF, b"rank")?, &rank[..]),
                ];
                for (from, text) in &p.anchors {
                    cells.push((cell_key(&p.key, ANCHOR, from.as_bytes())?, text.as_bytes()));
                }
                small.insert(row_part(&p.key), chunk(&p.key, cells));
                let contents = cell_key(&p.key, PAGE, b"contents")?;
                blobs.insert(
                    row_part(&p.key),
                    chunk(&p.key, vec![(contents, p.contents.as_bytes())]),
                );
            }
            self.small.apply_batch(small)?;
            self.blobs.apply_batch(blobs)?;
        }
        self.db.flush()?;
        Ok(())
    }

    fn point(&mut self, key: &str) -> Res<bool> {
        let mut cells = 0;
        for tree in [&self.small, &self.blobs] {
            if let Some(chunk) = tree.get(row_part(key))? {
                let mut reader = ChunkReader::new(&chunk);
                while let Some((_, value)) = reader.next_cell()? {
                    cells += usize::from(!value.is_empty());
                }
            }
        }
        Ok(cells > 0)
    }

    fn range(&mut self, prefix: &str) -> Res<usize> {
        // Domain prefixes hold no zero byte: their escaped form is the
        // prefix itself. A page is a chunk with a language.
        let language = suffix(CF, b"language")?;
        let mut pages = 0;
        for item in self.small.scan_prefix(prefix.as_bytes()) {
            let (_, chunk) = item?;
            pages += usize::from(find(&chunk, &language)?.is_some());
        }
        Ok(pages)
    }

    fn per_language(&mut self) -> Res<Vec<(String, i64)>> {
        let mut counts = BTreeMap::new();
        self.for_each_value(b"language", |value| {
            super::count(&mut counts, value);
            Ok(())
        })?;
        Ok(counts.into_iter().collect())
    }

    fn sum_rank(&mut self) -> Res<i64> {
        let mut sum = 0i64;
        self.for_each_value(b"rank", |value| {
            sum += i64::from_be_bytes(value.try_into()?);
            Ok(())
        })?;
        Ok(sum)
    }

    fn bytes_on_disk(&self) -> Res<Option<u64>> {
        Ok(Some(super::dir_size(&self.path)?))
    }
}
