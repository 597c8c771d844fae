//! Read-ahead: a long scan's keys read from the store on a thread of its
//! own, a few batches ahead of the reader.
//!
//! A full scan spends about a third of its time inside the store's
//! iterator (walking leaves, rebuilding prefix-compressed keys) and the
//! rest decoding what it returns; the two overlap on two cores when the
//! iteration runs on another thread (benchmark W5). At most four batches
//! exist at a time (one being read, [`QUEUED_BATCHES`] queued, one being
//! filled), each of [`BATCH_ENTRIES`] entries and [`BATCH_BYTES`] bytes at
//! most, or of one larger entry: about 1 MiB per scan of small values.
//! Each batch's keys, and its values up to [`SHARED_VALUE_BYTES`], are
//! copied into one buffer each on the thread (see [`share_memory`]).
//! The reader's drop ends the thread and waits for it, so nothing of the
//! store stays in use after the scan; a panic on the thread reaches the
//! reader as an error in place of the entries it did not read.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::{BackendError, BackendIter, Bytes};

/// Entries sent to the reader at a time: enough that a batch costs the
/// channel once per few hundred entries.
const BATCH_ENTRIES: usize = 256;
/// Key and value bytes a batch holds at most, unless one entry alone is
/// larger (it then goes alone).
const BATCH_BYTES: usize = 256 * 1024;
/// Batches the thread may read before the reader takes them.
const QUEUED_BATCHES: usize = 2;
/// Values up to this size are copied into their batch's buffer; a larger
/// one keeps its own memory (copying it gains nothing: it is read in
/// order anyway).
pub const SHARED_VALUE_BYTES: usize = 4096;

type Entry = Result<(Bytes, Bytes), BackendError>;

/// `scan` read on a thread of its own, its keys without their first
/// `prefix_len` bytes (the key space's prefix: taking it off as the keys
/// are copied spares the reader a new reference per key, 2–5% of a full
/// scan, benchmark W5); `Err` with `scan` untouched when no thread can be
/// started, for the caller to read itself.
pub fn read_ahead(scan: BackendIter, prefix_len: usize) -> Result<BackendIter, BackendIter> {
    let (sender, receiver) = sync_channel::<Vec<Entry>>(QUEUED_BATCHES);
    // The scan goes to the thread through a slot, so that it comes back if
    // the thread cannot start.
    let slot = Arc::new(Mutex::new(Some(scan)));
    let thread_slot = Arc::clone(&slot);
    let started = std::thread::Builder::new()
        .name("widesql-read-ahead".into())
        .spawn(move || {
            let taken = thread_slot.lock().map(|mut s| s.take());
            let Ok(Some(mut scan)) = taken else {
                return;
            };
            let mut carried = None;
            loop {
                let (batch, last) = next_batch(&mut scan, &mut carried, prefix_len);
                // An error from `send`: the reader dropped the scan.
                if sender.send(batch).is_err() || last {
                    return;
                }
            }
        });
    match started {
        Ok(thread) => Ok(Box::new(ReadAhead {
            receiver: Some(receiver),
            thread: Some(thread),
            batch: Vec::new().into_iter(),
        })),
        Err(_) => match slot.lock().ok().and_then(|mut s| s.take()) {
            Some(scan) => Err(scan),
            None => Ok(Box::new(std::iter::once(Err(
                "cannot start a read-ahead thread".into(),
            )))),
        },
    }
}

/// The next batch of `scan` and whether it is the last one: the scan
/// ended or failed (an error is the batch's last entry). `carried` is an
/// entry read but left for this batch because the last one was full.
fn next_batch(
    scan: &mut BackendIter,
    carried: &mut Option<Entry>,
    prefix_len: usize,
) -> (Vec<Entry>, bool) {
    let mut batch = Vec::with_capacity(BATCH_ENTRIES);
    let last = fill_batch(scan, carried, &mut batch);
    share_memory(&mut batch, prefix_len);
    (batch, last)
}

/// Moves entries of `scan` into `batch` until it is full; `true` when the
/// scan ended or failed.
fn fill_batch(scan: &mut BackendIter, carried: &mut Option<Entry>, batch: &mut Vec<Entry>) -> bool {
    let mut bytes = 0;
    while batch.len() < BATCH_ENTRIES {
        let entry = match carried.take().or_else(|| scan.next()) {
            None => return true,
            Some(Err(e)) => {
                batch.push(Err(e));
                return true;
            }
            Some(Ok(entry)) => entry,
        };
        let size = entry.0.len() + entry.1.len();
        if !batch.is_empty() && bytes + size > BATCH_BYTES {
            *carried = Some(Ok(entry));
            return false;
        }
        bytes += size;
        batch.push(Ok(entry));
    }
    false
}

/// Moves the keys of `batch` into one allocation that each key shares,
/// and its values of up to [`SHARED_VALUE_BYTES`] into another, on the
/// thread that read them. Each key loses its first `prefix_len` bytes on
/// the way.
///
/// The store allocates each key it returns (it rebuilds them from
/// prefix-compressed leaves); freed by the reader on another core, they
/// cost it a cache miss and a cross-thread free per entry, 15–20% of its
/// time in a full scan (perf, benchmark W5). Each value sits in memory of
/// its own, which the thread has just written (its shared count) and the
/// reader then meets cold, one miss per entry at scattered addresses; in
/// one buffer read in order the reader's core fetches them ahead (an
/// embedded full scan of 100,000 pages: 64–70 ms before, 56–59 ms after,
/// benchmark W5). Values a reader keeps are copied out of the buffer
/// (`decode` in `table::chunks`), so that no kept value holds a batch.
fn share_memory(batch: &mut [Entry], prefix_len: usize) {
    let mut keys = Vec::new();
    let mut values = Vec::new();
    for (key, value) in batch.iter().flatten() {
        keys.extend_from_slice(&key[prefix_len.min(key.len())..]);
        if value.len() <= SHARED_VALUE_BYTES {
            values.extend_from_slice(value);
        }
    }
    let (keys, values) = (Bytes::from(keys), Bytes::from(values));
    let (mut key_at, mut value_at) = (0, 0);
    for (key, value) in batch.iter_mut().flatten() {
        let len = key.len() - prefix_len.min(key.len());
        *key = keys.slice(key_at, len);
        key_at += len;
        if value.len() <= SHARED_VALUE_BYTES {
            let len = value.len();
            *value = values.slice(value_at, len);
            value_at += len;
        }
    }
}

/// The reader's end: entries in scan order, batch by batch.
struct ReadAhead {
    /// `None` once the thread ended.
    receiver: Option<Receiver<Vec<Entry>>>,
    thread: Option<JoinHandle<()>>,
    batch: std::vec::IntoIter<Entry>,
}

impl ReadAhead {
    /// Waits for the thread to end: a panic becomes an error.
    fn join(&mut self) -> Option<Entry> {
        let panic = self.thread.take()?.join().err()?;
        let what = crate::error::panic_message(panic.as_ref());
        Some(Err(format!(
            "the scan's read-ahead thread panicked: {what}"
        )
        .into()))
    }
}

impl Iterator for ReadAhead {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        loop {
            if let Some(entry) = self.batch.next() {
                return Some(entry);
            }
            match self.receiver.as_ref()?.recv() {
                Ok(batch) => self.batch = batch.into_iter(),
                // The thread ended: after its last batch, or in a panic.
                Err(_) => {
                    self.receiver = None;
                    return self.join();
                }
            }
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // The thread finds the channel closed at its next batch and ends.
        self.receiver = None;
        let _ = self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(n: usize) -> Vec<Entry> {
        (0..n)
            .map(|i| {
                let key = Bytes::from(format!("{i:08}"));
                Ok((key.clone(), key))
            })
            .collect()
    }

    /// `scan` read ahead on a thread of its own.
    fn started(scan: BackendIter, prefix_len: usize) -> BackendIter {
        read_ahead(scan, prefix_len).unwrap_or_else(|_| panic!("no read-ahead thread started"))
    }

    fn keys(scan: BackendIter) -> Vec<String> {
        scan.map(|e| String::from_utf8(e.unwrap().0.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn returns_every_entry_in_order_across_batches() {
        for n in [
            0,
            1,
            BATCH_ENTRIES - 1,
            BATCH_ENTRIES,
            3 * BATCH_ENTRIES + 7,
        ] {
            let direct = keys(Box::new(entries(n).into_iter()));
            let ahead = keys(started(Box::new(entries(n).into_iter()), 0));
            assert_eq!(ahead, direct, "{n} entries");
            assert_eq!(ahead.len(), n);
            // With a prefix of three bytes, each key comes without it.
            let cut = keys(started(Box::new(entries(n).into_iter()), 3));
            let direct_cut: Vec<String> = direct.iter().map(|k| k[3..].to_string()).collect();
            assert_eq!(cut, direct_cut, "{n} entries, prefix cut");
        }
    }

    #[test]
    fn a_batch_shares_one_buffer_for_its_keys_and_one_for_its_small_values() {
        // Keys and values longer than a value stored inline, each in its
        // own memory, keys behind a prefix of four bytes that the batch
        // takes off; every sixteenth value too long to share.
        let long = |i: usize| Bytes::from(format!("{i:040}"));
        let stored = |i: usize| Bytes::from(format!("pfx:{i:040}"));
        let value = |i: usize| match i % 16 {
            0 => Bytes::from(vec![i as u8; SHARED_VALUE_BYTES + 1]),
            _ => Bytes::from(format!("value {i:040}")),
        };
        let scan = (0..BATCH_ENTRIES + 3).map(move |i| Ok((stored(i), value(i))));
        let mut carried = None;
        let mut scan: BackendIter = Box::new(scan);
        let (batch, last) = next_batch(&mut scan, &mut carried, 4);
        assert!(!last);
        let read: Vec<(Bytes, Bytes)> = batch.into_iter().map(Result::unwrap).collect();
        assert_eq!(read.len(), BATCH_ENTRIES);
        let follows = |a: &Bytes, b: &Bytes| a.as_ptr().wrapping_add(a.len()) == b.as_ptr();
        for (i, pair) in read.windows(2).enumerate() {
            let (this, next) = (&pair[0], &pair[1]);
            assert_eq!(this.0.as_ref(), long(i).as_ref());
            assert_eq!(this.1.as_ref(), value(i).as_ref());
            // The next key starts where this one ends, in one buffer.
            assert!(follows(&this.0, &next.0), "key {i}");
        }
        // A shared value starts where the shared one before it ends; the
        // long ones are left in memory of their own.
        let (shared, own): (Vec<&Bytes>, Vec<&Bytes>) = read
            .iter()
            .map(|(_, v)| v)
            .partition(|v| v.len() <= SHARED_VALUE_BYTES);
        assert_eq!(own.len(), BATCH_ENTRIES / 16);
        assert!(shared.windows(2).all(|pair| follows(pair[0], pair[1])));
        assert!(own.iter().all(|v| !shared.iter().any(|s| follows(v, s))));
    }

    #[test]
    fn big_values_end_a_batch_early_and_nothing_is_lost() {
        let value = Bytes::from(vec![7u8; BATCH_BYTES / 3]);
        let scan = (0..10).map(move |i: u8| Ok((Bytes::from(vec![i]), value.clone())));
        let read: Vec<u8> = started(Box::new(scan), 0)
            .map(|e| e.unwrap().0[0])
            .collect();
        assert_eq!(read, (0..10).collect::<Vec<u8>>());
    }

    #[test]
    fn a_batch_keeps_within_its_bytes_unless_one_entry_is_larger() {
        let sizes = [
            BATCH_BYTES / 3,
            BATCH_BYTES / 3,
            BATCH_BYTES / 3,
            2 * BATCH_BYTES,
            10,
        ];
        let list: Vec<Entry> = sizes
            .iter()
            .map(|&n| Ok((Bytes::from(""), Bytes::from(vec![0u8; n]))))
            .collect();
        let mut scan: BackendIter = Box::new(list.into_iter());
        let mut carried = None;
        let mut lengths = Vec::new();
        loop {
            let (batch, last) = next_batch(&mut scan, &mut carried, 0);
            let bytes: usize = batch
                .iter()
                .map(|e| e.as_ref().map_or(0, |(_, v)| v.len()))
                .sum();
            assert!(
                bytes <= BATCH_BYTES || batch.len() == 1,
                "{bytes} bytes in {}",
                batch.len()
            );
            lengths.push(batch.len());
            if last {
                break;
            }
        }
        // Three thirds fill a batch, the big one goes alone (neither the
        // thirds before it nor the small value after join it), nothing is
        // dropped.
        assert_eq!(lengths, [3, 1, 1]);
    }

    #[test]
    fn an_error_is_returned_in_place_and_ends_the_scan() {
        let mut list = entries(600);
        list[300] = Err("disk on fire".into());
        let read: Vec<Entry> = started(Box::new(list.into_iter()), 0).collect();
        assert_eq!(read.len(), 301);
        assert!(read[..300].iter().all(Result::is_ok));
        assert_eq!(read[300].as_ref().unwrap_err().to_string(), "disk on fire");
    }

    #[test]
    fn a_panic_on_the_thread_is_an_error_not_the_end_of_the_scan() {
        let scan = entries(1_000).into_iter().enumerate().map(|(i, e)| {
            if i == 700 {
                panic!("lost leaf")
            } else {
                e
            }
        });
        let read: Vec<Entry> = started(Box::new(scan), 0).collect();
        assert!(read.len() <= 701, "{} entries", read.len());
        assert!(read[..read.len() - 1].iter().all(Result::is_ok));
        let last = read
            .last()
            .expect("entries")
            .as_ref()
            .expect_err("an error last");
        assert!(last.to_string().contains("lost leaf"), "{last}");
    }

    #[test]
    fn a_dropped_reader_ends_the_thread() {
        // An endless scan: only the reader's drop can end the thread.
        let (dropped, seen) = sync_channel::<()>(1);
        struct Endless(std::sync::mpsc::SyncSender<()>);
        impl Iterator for Endless {
            type Item = Entry;
            fn next(&mut self) -> Option<Entry> {
                Some(Ok((Bytes::from("k"), Bytes::from("v"))))
            }
        }
        impl Drop for Endless {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let mut scan = started(Box::new(Endless(dropped)), 0);
        assert!(scan.next().is_some());
        drop(scan);
        // The drop waited for the thread, which had dropped the scan.
        seen.try_recv().expect("the thread dropped the scan");
    }
}
