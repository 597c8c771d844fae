//! Watches: the keys written to a key range while someone copies it.
//!
//! A tablet move copies its range while writes go on, then copies again,
//! under every row lock, only the keys written meanwhile. A [`Watch`] on a
//! key range of a key space notes each key that an applied batch wrote
//! there, whichever store holds it, so that the second copy knows what to
//! take. A batch holds the watch list shared from before it looks at the
//! watches until its keys are noted, after it was applied; a new watch
//! holds the list exclusively to join it. So a batch is either noted by a
//! watch, or applied before the watch began (and a copy that starts after
//! that sees it).

use std::collections::BTreeSet;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};

use super::{Bytes, Tree, Write, WriteBatch};

/// The watches of one store.
#[derive(Debug, Default)]
pub(super) struct Watches {
    watched: RwLock<Vec<Arc<Watched>>>,
}

/// A key range of a key space and the keys written to it.
#[derive(Debug)]
struct Watched {
    /// The backend tree's name: the same in every store that holds a part
    /// of the key space.
    tree: Vec<u8>,
    prefix: Arc<[u8]>,
    range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    /// The keys written, without the key space's prefix.
    written: Mutex<BTreeSet<Bytes>>,
    /// The keys of batches that failed: such a batch may still land
    /// (its store stalled, its worker did not answer), after its keys
    /// were taken, so they are kept apart until [`Watch::take_all`].
    doubtful: Mutex<BTreeSet<Bytes>>,
    /// The most keys it keeps, in both sets; past them it keeps none, and
    /// says so.
    limit: usize,
    overflowed: AtomicBool,
}

impl Watched {
    /// The key `stored` (as its backend tree stores it) without the key
    /// space's prefix, if it is in the watched range.
    fn key_of<'k>(&self, stored: &'k [u8]) -> Option<&'k [u8]> {
        let key = stored.strip_prefix(&*self.prefix)?;
        let (lo, hi) = &self.range;
        let range = (
            lo.as_ref().map(Vec::as_slice),
            hi.as_ref().map(Vec::as_slice),
        );
        RangeBounds::<[u8]>::contains(&range, key).then_some(key)
    }
}

/// A batch being applied: the watch list held shared, and the keys of the
/// batch that watches want.
pub(super) struct Noting<'a> {
    _watches: RwLockReadGuard<'a, Vec<Arc<Watched>>>,
    noted: Vec<(Arc<Watched>, Vec<Bytes>)>,
}

impl Noting<'_> {
    /// Hands each watch its keys: the batch was applied, or its
    /// application ended (`failed`: a part of it may have been applied, or
    /// may still be).
    pub(super) fn record(self, failed: bool) {
        for (watched, keys) in self.noted {
            if watched.overflowed.load(Ordering::SeqCst) {
                continue;
            }
            let mut written = watched
                .written
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let mut doubtful = watched
                .doubtful
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if failed {
                doubtful.extend(keys.iter().cloned());
            }
            written.extend(keys);
            // The limit bounds the memory of both sets: a key of a failed
            // batch counts twice until it is taken.
            if written.len() + doubtful.len() > watched.limit {
                watched.overflowed.store(true, Ordering::SeqCst);
                *written = BTreeSet::new();
                *doubtful = BTreeSet::new();
            }
        }
    }
}

impl Watches {
    /// Starts watching the keys of `tree` in `range` (keys without the key
    /// space's prefix), keeping up to `limit` of them. It waits for the
    /// batches being applied, which it does not see.
    pub(super) fn watch(
        self: &Arc<Self>,
        tree: &Tree,
        range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
        limit: usize,
    ) -> Watch {
        let watched = Arc::new(Watched {
            tree: tree.inner.name().to_vec(),
            prefix: Arc::clone(&tree.prefix),
            range,
            written: Mutex::default(),
            doubtful: Mutex::default(),
            limit,
            overflowed: AtomicBool::new(false),
        });
        self.watched
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&watched));
        Watch {
            watches: Arc::clone(self),
            watched,
        }
    }

    /// Holds the watch list shared while `batch` is applied, with the keys
    /// of it that watches want; none for a batch of copies
    /// ([`WriteBatch::copying`]).
    pub(super) fn note(&self, batch: &WriteBatch) -> Noting<'_> {
        let watched = self.watched.read().unwrap_or_else(PoisonError::into_inner);
        let mut noted: Vec<(Arc<Watched>, Vec<Bytes>)> = Vec::new();
        if !watched.is_empty() && !batch.copying {
            let trees = batch
                .trees
                .iter()
                .chain(batch.away.iter().flat_map(|part| part.trees.iter()));
            for (tree, writes) in trees {
                for watch in watched.iter().filter(|w| w.tree == tree.name()) {
                    let keys = keys_in(watch, writes);
                    if keys.is_empty() {
                        continue;
                    }
                    match noted.iter_mut().find(|(w, _)| Arc::ptr_eq(w, watch)) {
                        Some((_, all)) => all.extend(keys),
                        None => noted.push((Arc::clone(watch), keys)),
                    }
                }
            }
        }
        Noting {
            _watches: watched,
            noted,
        }
    }
}

/// The keys of `writes` (one tree's) that `watch` wants.
fn keys_in(watch: &Watched, writes: &[Write]) -> Vec<Bytes> {
    writes
        .iter()
        .filter_map(|write| {
            let (Write::Put(stored, _) | Write::Delete(stored)) = write;
            watch.key_of(stored).map(Bytes::from)
        })
        .collect()
}

/// A watch on a key range: the keys written to it since it began, or since
/// they were last taken. It ends when dropped.
#[must_use = "a watch ends when it is dropped"]
#[derive(Debug)]
pub struct Watch {
    watches: Arc<Watches>,
    watched: Arc<Watched>,
}

impl Watch {
    /// Whether more keys were written than it keeps: it then keeps none,
    /// and what was written must be found by reading the whole range.
    pub fn overflowed(&self) -> bool {
        self.watched.overflowed.load(Ordering::SeqCst)
    }

    /// How many keys were written since the last [`Watch::take`].
    pub fn written(&self) -> usize {
        self.watched
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The keys written since the last `take` or [`Watch::take_all`] (or
    /// since the watch began), in key order, without the key space's
    /// prefix.
    pub fn take(&self) -> Vec<Bytes> {
        self.take_written().into_iter().collect()
    }

    fn take_written(&self) -> BTreeSet<Bytes> {
        std::mem::take(
            &mut *self
                .watched
                .written
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// The keys [`Watch::take`] gives, with every key of a batch that
    /// failed since the watch began, taken or not: for the last copy,
    /// once such batches have landed or never will.
    pub fn take_all(&self) -> Vec<Bytes> {
        let mut taken = self.take_written();
        taken.append(
            &mut self
                .watched
                .doubtful
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        taken.into_iter().collect()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.watches
            .watched
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|w| !Arc::ptr_eq(w, &self.watched));
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::storage::{
        Backend, Durability, Home, MemoryBackend, Routes, Storage, DEFAULT_STALL_LIMIT,
    };

    fn shown(keys: Vec<Bytes>) -> Vec<String> {
        keys.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    #[test]
    fn a_watch_notes_the_keys_written_to_its_range_in_every_home_until_it_ends() {
        let here = crate::storage::in_memory();
        let away = Arc::new(MemoryBackend::new()) as Arc<dyn Backend>;
        let routes = Routes::new(vec![
            (Vec::new(), Home::Here),
            (
                b"m".to_vec(),
                Home::Away {
                    store: away,
                    name: Arc::from("worker w"),
                },
            ),
        ])
        .expect("ordered");
        let space = here.key_space(b"t", b"g1").expect("key space");
        let routed = space.with_routes(routes).expect("routed");
        let other_space = here.key_space(b"t", b"g2").expect("key space");
        let watch = here.watch(
            &space,
            (
                Bound::Included(b"c".to_vec()),
                Bound::Excluded(b"p".to_vec()),
            ),
            5,
        );
        let mut batch = WriteBatch::with_durability(Durability::Immediate);
        for key in ["a", "c", "k", "n", "p"] {
            batch.put(&routed, key, "v");
        }
        batch.delete(&routed, "d");
        // The same keys in another key space of the tree are not watched.
        batch.put(&other_space, "k", "v");
        here.apply(batch).expect("applied");
        assert_eq!(watch.written(), 4);
        // Here (c, d, k) and away (n), deletes too, in key order.
        assert_eq!(shown(watch.take()), ["c", "d", "k", "n"]);
        assert_eq!(watch.written(), 0, "taken keys are gone");
        // A batch of copies is not noted.
        let mut copies = WriteBatch::copying(Durability::Eventual);
        copies.put(&routed, "e", "v");
        here.apply(copies).expect("applied");
        assert_eq!(watch.written(), 0);
        let mut batch = WriteBatch::with_durability(Durability::Eventual);
        batch.put(&space, "e", "v");
        here.apply(batch).expect("applied");
        assert_eq!(shown(watch.take()), ["e"]);
        // Past its limit it keeps no key, and says so.
        assert!(!watch.overflowed());
        let mut batch = WriteBatch::with_durability(Durability::Eventual);
        for key in ["c1", "c2", "c3", "c4", "c5", "c6"] {
            batch.put(&space, key, "v");
        }
        here.apply(batch).expect("applied");
        assert!(watch.overflowed());
        assert_eq!(watch.written(), 0);
        // A dropped watch leaves the list.
        drop(watch);
        assert!(here.watches.watched.read().expect("lock").is_empty());
    }

    #[test]
    fn a_watch_keeps_the_keys_of_a_failed_batch_until_it_takes_all() {
        let here = crate::storage::in_memory();
        let away = Arc::new(MemoryBackend::new());
        away.inject(crate::storage::Fault::FailBatch(1));
        let routes = Routes::new(vec![(
            Vec::new(),
            Home::Away {
                store: Arc::clone(&away) as Arc<dyn Backend>,
                name: Arc::from("worker w"),
            },
        )])
        .expect("ordered");
        let space = here.key_space(b"t", b"g1").expect("key space");
        let routed = space.with_routes(routes).expect("routed");
        let watch = here.watch(&space, (Bound::Unbounded, Bound::Unbounded), 3);
        // A batch that fails at its worker may land there later.
        let mut batch = WriteBatch::with_durability(Durability::Eventual);
        batch.put(&routed, "f", "v");
        here.apply(batch).expect_err("the injected failure");
        let mut batch = WriteBatch::with_durability(Durability::Eventual);
        batch.put(&routed, "g", "v");
        here.apply(batch).expect("applied");
        assert_eq!(shown(watch.take()), ["f", "g"]);
        assert_eq!(shown(watch.take()), Vec::<String>::new());
        // The last copy takes its keys again, and only once.
        assert_eq!(shown(watch.take_all()), ["f"]);
        assert_eq!(shown(watch.take_all()), Vec::<String>::new());
        // Its keys count toward the limit: twice, as written and as kept.
        away.inject(crate::storage::Fault::FailBatch(3));
        let mut failing = WriteBatch::with_durability(Durability::Eventual);
        failing.put(&routed, "i", "v");
        failing.put(&routed, "j", "v");
        here.apply(failing).expect_err("the injected failure");
        assert!(watch.overflowed());
        assert_eq!(watch.take_all().len(), 0);
    }

    /// A store whose batches wait, once they have begun, until let go.
    #[derive(Debug)]
    struct Held {
        store: MemoryBackend,
        begun: Mutex<std::sync::mpsc::Sender<()>>,
        go: Mutex<std::sync::mpsc::Receiver<()>>,
    }

    impl Backend for Held {
        fn open_tree(
            &self,
            name: &[u8],
        ) -> Result<Arc<dyn crate::storage::BackendTree>, crate::storage::BackendError> {
            self.store.open_tree(name)
        }
        fn drop_tree(&self, name: &[u8]) -> Result<bool, crate::storage::BackendError> {
            self.store.drop_tree(name)
        }
        fn tree_names(&self) -> Vec<Vec<u8>> {
            self.store.tree_names()
        }
        fn meta_get(&self, key: &[u8]) -> Result<Option<Bytes>, crate::storage::BackendError> {
            self.store.meta_get(key)
        }
        fn meta_put_durable(
            &self,
            key: &[u8],
            value: &[u8],
        ) -> Result<(), crate::storage::BackendError> {
            self.store.meta_put_durable(key, value)
        }
        fn is_empty(&self) -> bool {
            self.store.is_empty()
        }
        fn apply(
            &self,
            batch: &[crate::storage::TreeWrites],
        ) -> Result<(), crate::storage::BackendError> {
            let _ = self.begun.lock().expect("lock").send(());
            let _ = self.go.lock().expect("lock").recv();
            self.store.apply(batch)
        }
        fn flush(&self) -> Result<(), crate::storage::BackendError> {
            self.store.flush()
        }
        fn size_on_disk(&self) -> Result<u64, crate::storage::BackendError> {
            self.store.size_on_disk()
        }
    }

    #[test]
    fn a_batch_being_applied_as_a_watch_begins_is_noted_or_seen_by_a_copy_after_it() {
        let here = Arc::new(
            Storage::with_backend(
                Arc::new(MemoryBackend::new()),
                Path::new("here"),
                DEFAULT_STALL_LIMIT,
            )
            .expect("open"),
        );
        let (begun, has_begun) = std::sync::mpsc::channel();
        let (let_go, go) = std::sync::mpsc::channel();
        let away = Arc::new(Held {
            store: MemoryBackend::new(),
            begun: Mutex::new(begun),
            go: Mutex::new(go),
        });
        let routes = Routes::new(vec![(
            Vec::new(),
            Home::Away {
                store: away as Arc<dyn Backend>,
                name: Arc::from("worker w"),
            },
        )])
        .expect("ordered");
        let space = here.key_space(b"t", b"g1").expect("key space");
        let routed = space.with_routes(routes).expect("routed");
        let writer = {
            let (here, routed) = (Arc::clone(&here), routed.clone());
            std::thread::spawn(move || {
                let mut batch = WriteBatch::with_durability(Durability::Eventual);
                batch.put(&routed, "k", "v");
                here.apply(batch)
            })
        };
        has_begun.recv().expect("the batch began");
        // The watch begins while the batch is in the store's hands.
        let watcher = {
            let (here, space, routed) = (Arc::clone(&here), space.clone(), routed.clone());
            std::thread::spawn(move || {
                let watch = here.watch(&space, (Bound::Unbounded, Bound::Unbounded), 10);
                let seen = routed
                    .range(Bound::Unbounded, Bound::Unbounded, false)
                    .count();
                (watch, seen)
            })
        };
        // Time for the watch to wait, if it waits (not needed to pass).
        std::thread::sleep(std::time::Duration::from_millis(100));
        let_go.send(()).expect("let go");
        writer.join().expect("writer").expect("applied");
        let (watch, seen) = watcher.join().expect("watcher");
        assert!(
            seen == 1 || watch.written() == 1,
            "a copy that began after the watch would miss the batch's key"
        );
    }
}
