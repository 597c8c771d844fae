//! The systems measured, each behind one interface so that every workload
//! runs the same operations on each and checks that they agree.

pub mod datafusion_mem;
pub mod gluesql;
pub mod raw_sled;
pub mod sqlite;
pub mod widesql;

use crate::data::Page;
use crate::Res;

/// The operations of workloads W1–W5 on one system.
pub trait System {
    /// The name printed in the tables.
    fn name(&self) -> String;
    /// Stores `pages` (W1). Durable at return for every system: each ends
    /// with its own flush or commit.
    fn load(&mut self, pages: &[Page]) -> Res<()>;
    /// Reads every value of the page at `key` (W2); false when it is missing.
    fn point(&mut self, key: &str) -> Res<bool>;
    /// Reads key and language of the pages under `prefix` (W3); the number
    /// of pages.
    fn range(&mut self, prefix: &str) -> Res<usize>;
    /// Pages per language over the whole table (W4), sorted by language.
    fn per_language(&mut self) -> Res<Vec<(String, i64)>>;
    /// The sum of `rank` over the whole table (W5).
    fn sum_rank(&mut self) -> Res<i64>;
    /// Bytes the system's files take, `None` for a system in memory.
    fn bytes_on_disk(&self) -> Res<Option<u64>>;
}

/// Counts one more page of language `value` (UTF-8; others counted under
/// their lossy text), allocating only for a language not seen before.
pub fn count(counts: &mut std::collections::BTreeMap<String, i64>, value: &[u8]) {
    let language = String::from_utf8_lossy(value);
    match counts.get_mut(language.as_ref()) {
        Some(n) => *n += 1,
        None => {
            counts.insert(language.into_owned(), 1);
        }
    }
}

/// The bytes of the files under `path`.
pub fn dir_size(path: &std::path::Path) -> Res<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// Drops the files under `path` from the operating system's page cache,
/// so that the next reads of them go to the disk: `fsync`, then
/// `posix_fadvise(DONTNEED)`, which drops a file's clean cached pages and
/// needs no privilege (unlike `/proc/sys/vm/drop_caches`).
pub fn evict_from_page_cache(path: &std::path::Path) -> Res<()> {
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        if entry.metadata()?.is_dir() {
            evict_from_page_cache(&entry.path())?;
            continue;
        }
        let file = std::fs::File::open(entry.path())?;
        file.sync_all()?;
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed)
            .map_err(|e| format!("cannot evict {}: {e}", entry.path().display()))?;
    }
    Ok(())
}

/// `[start, end)` of the keys under `prefix`: a range every system
/// understands, equal to a prefix scan.
pub fn prefix_bounds(prefix: &str) -> (String, String) {
    let mut end = prefix.to_string();
    // Keys are ASCII: the last byte of a prefix is never 0x7f.
    let last = end.pop().map_or('\u{1}', |c| char::from(c as u8 + 1));
    end.push(last);
    (prefix.to_string(), end)
}
