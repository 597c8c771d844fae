//! Read-ahead: a long scan's keys read from the store on a thread of its
//! own, a few batches ahead of the reader.
//!
//! A full scan spends about a third of its time inside the store's
//! iterator (walking leaves, rebuilding prefix-compressed keys) and the
//! rest decoding what it returns; the two overlap on two cores when the
//! iteration runs on another thread (benchmark W5). The thread ends when
//! the scan does, or when the reader drops it; it holds at most
//! [`QUEUED_BATCHES`] batches of [`BATCH_ENTRIES`] entries or
//! [`BATCH_BYTES`] bytes besides the one the reader is taking entries
//! from, so a scan of any size stays within a few MiB.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};

use super::{BackendError, BackendIter, Bytes};

/// Entries sent to the reader at a time: enough that a batch costs the
/// channel once per few hundred entries.
const BATCH_ENTRIES: usize = 256;
/// Key and value bytes a batch stops at, whatever its entries.
const BATCH_BYTES: usize = 256 * 1024;
/// Batches the thread may read before the reader takes them.
const QUEUED_BATCHES: usize = 2;

type Entry = Result<(Bytes, Bytes), BackendError>;

/// `scan` read on a thread of its own; `scan` itself, read by the caller,
/// when no thread can be started.
pub fn read_ahead(scan: BackendIter) -> BackendIter {
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
            loop {
                let (batch, last) = next_batch(&mut scan);
                // An error from `send`: the reader dropped the scan.
                if sender.send(batch).is_err() || last {
                    return;
                }
            }
        });
    if started.is_err() {
        if let Some(scan) = slot.lock().ok().and_then(|mut s| s.take()) {
            return scan;
        }
    }
    Box::new(ReadAhead {
        receiver,
        batch: Vec::new().into_iter(),
    })
}

/// The next batch of `scan` and whether it is the last one: the scan
/// ended or failed (an error is the batch's last entry).
fn next_batch(scan: &mut BackendIter) -> (Vec<Entry>, bool) {
    let mut batch = Vec::with_capacity(BATCH_ENTRIES);
    let mut bytes = 0;
    while batch.len() < BATCH_ENTRIES && bytes < BATCH_BYTES {
        match scan.next() {
            None => return (batch, true),
            Some(Err(e)) => {
                batch.push(Err(e));
                return (batch, true);
            }
            Some(Ok((key, value))) => {
                bytes += key.len() + value.len();
                batch.push(Ok((key, value)));
            }
        }
    }
    (batch, false)
}

/// The reader's end: entries in scan order, batch by batch.
struct ReadAhead {
    receiver: Receiver<Vec<Entry>>,
    batch: std::vec::IntoIter<Entry>,
}

impl Iterator for ReadAhead {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        loop {
            if let Some(entry) = self.batch.next() {
                return Some(entry);
            }
            // Disconnected: the thread sent the last batch and ended.
            self.batch = self.receiver.recv().ok()?.into_iter();
        }
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
            let ahead = keys(read_ahead(Box::new(entries(n).into_iter())));
            assert_eq!(ahead, direct, "{n} entries");
            assert_eq!(ahead.len(), n);
        }
    }

    #[test]
    fn big_values_end_a_batch_early_and_nothing_is_lost() {
        let value = Bytes::from(vec![7u8; BATCH_BYTES / 3]);
        let scan = (0..10).map(move |i: u8| Ok((Bytes::from(vec![i]), value.clone())));
        let read: Vec<u8> = read_ahead(Box::new(scan))
            .map(|e| e.unwrap().0[0])
            .collect();
        assert_eq!(read, (0..10).collect::<Vec<u8>>());
    }

    #[test]
    fn an_error_is_returned_in_place_and_ends_the_scan() {
        let mut list = entries(600);
        list[300] = Err("disk on fire".into());
        let read: Vec<Entry> = read_ahead(Box::new(list.into_iter())).collect();
        assert_eq!(read.len(), 301);
        assert!(read[..300].iter().all(Result::is_ok));
        assert_eq!(read[300].as_ref().unwrap_err().to_string(), "disk on fire");
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
        let mut scan = read_ahead(Box::new(Endless(dropped)));
        assert!(scan.next().is_some());
        drop(scan);
        seen.recv_timeout(std::time::Duration::from_secs(30))
            .expect("the thread dropped the scan");
    }
}
