//! sled with nothing on top: the keys and values widesql's current layout
//! writes (a key per cell: row, family id, qualifier, timestamp; two trees
//! for two locality groups), loaded in batches of 1,000 rows. The physical
//! limit of widesql's storage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use widesql::internals::{put_bytes, CellKey};

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

    /// Sums the 8-byte values of qualifier `name` in family `cf` over the
    /// default group, or counts each distinct value when `count` is set.
    fn scan_column(&self, name: &[u8]) -> Res<Vec<(Vec<u8>, sled::IVec)>> {
        let mut out = Vec::new();
        for item in self.small.iter() {
            let (key, value) = item?;
            let cell = CellKey::decode(&key, 0)?;
            if cell.family == CF && cell.qualifier.as_ref() == name {
                out.push((cell.row.into_owned(), value));
            }
        }
        Ok(out)
    }
}

/// The key of one cell.
pub fn cell_key(row: &str, family: u16, qualifier: &[u8]) -> Res<Vec<u8>> {
    Ok(CellKey::encode(&[], row.as_bytes(), family, qualifier, TS)?)
}

impl System for RawSled {
    fn name(&self) -> String {
        "raw sled".into()
    }

    fn load(&mut self, pages: &[Page]) -> Res<()> {
        for chunk in pages.chunks(1000) {
            let (mut small, mut blobs) = (sled::Batch::default(), sled::Batch::default());
            for p in chunk {
                small.insert(cell_key(&p.key, CF, b"language")?, p.language.as_bytes());
                small.insert(cell_key(&p.key, CF, b"checksum")?, &p.checksum[..]);
                small.insert(cell_key(&p.key, CF, b"rank")?, &p.rank.to_be_bytes()[..]);
                for (from, text) in &p.anchors {
                    small.insert(cell_key(&p.key, ANCHOR, from.as_bytes())?, text.as_bytes());
                }
                blobs.insert(cell_key(&p.key, PAGE, b"contents")?, p.contents.as_bytes());
            }
            self.small.apply_batch(small)?;
            self.blobs.apply_batch(blobs)?;
        }
        self.db.flush()?;
        Ok(())
    }

    fn point(&mut self, key: &str) -> Res<bool> {
        let mut prefix = Vec::new();
        put_bytes(&mut prefix, key.as_bytes());
        let mut cells = 0;
        for tree in [&self.small, &self.blobs] {
            for item in tree.scan_prefix(&prefix) {
                let (_, value) = item?;
                cells += usize::from(!value.is_empty());
            }
        }
        Ok(cells > 0)
    }

    fn range(&mut self, prefix: &str) -> Res<usize> {
        // Domain prefixes hold no zero byte: their escaped form is the
        // prefix itself.
        let mut pages = 0;
        for item in self.small.scan_prefix(prefix.as_bytes()) {
            let (key, _) = item?;
            let cell = CellKey::decode(&key, 0)?;
            pages += usize::from(cell.family == CF && cell.qualifier.as_ref() == b"language");
        }
        Ok(pages)
    }

    fn per_language(&mut self) -> Res<Vec<(String, i64)>> {
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        for (_, value) in self.scan_column(b"language")? {
            *counts
                .entry(String::from_utf8_lossy(&value).into_owned())
                .or_default() += 1;
        }
        Ok(counts.into_iter().collect())
    }

    fn sum_rank(&mut self) -> Res<i64> {
        let mut sum = 0i64;
        for (_, value) in self.scan_column(b"rank")? {
            let bytes: [u8; 8] = value.as_ref().try_into()?;
            sum += i64::from_be_bytes(bytes);
        }
        Ok(sum)
    }

    fn bytes_on_disk(&self) -> Res<Option<u64>> {
        Ok(Some(super::dir_size(&self.path)?))
    }
}
