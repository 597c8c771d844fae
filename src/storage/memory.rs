//! An in-memory backend that can inject faults, for tests of what the
//! layers above do when storage fails (the role of redb's fault-injecting
//! `StorageBackend`).
//!
//! Its state is shared by every clone of a [`MemoryBackend`], so a test can
//! "crash" a database (stop applying writes, or tear a batch in the middle)
//! and open a new database over what reached the store
//! ([`MemoryBackend::restart`]) or over what was flushed
//! ([`MemoryBackend::restart_from_flushed`], a power loss). Flushes can be
//! held back ([`MemoryBackend::hold_flushes`]) or failed
//! ([`Fault::FailFlush`]), for tests of group commit and of the watchdog.

use std::any::Any;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

use super::backend::{Backend, BackendError, BackendIter, BackendTree, TreeWrites, Write};
use super::Bytes;

type Map = BTreeMap<Vec<u8>, Bytes>;

/// What goes wrong, and when. Batches are counted from 1 across the whole
/// backend (meta writes are not batches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The N-th batch fails and changes nothing; later batches succeed.
    FailBatch(u64),
    /// The store dies at the N-th batch: it fails and changes nothing, and
    /// so does every write after it (reads go on), as after a crash.
    CrashAtBatch(u64),
    /// The store dies right after the N-th batch has landed: every later
    /// write fails (reads go on), as when a process dies between two steps.
    CrashAfterBatch(u64),
    /// The store dies in the middle of the N-th batch: only its first
    /// `writes` writes reach the store (a torn write, which sled never
    /// produces), then it behaves as after [`Fault::CrashAtBatch`].
    TearBatch {
        /// Which batch.
        batch: u64,
        /// How many of its writes land.
        writes: usize,
    },
    /// The N-th flush (counted from 1, like batches) fails and makes
    /// nothing durable; the data stays readable.
    FailFlush(u64),
}

/// A write that reached the store and is not flushed yet.
#[derive(Debug, Clone)]
enum Unflushed {
    Write(Vec<u8>, Write),
    DropTree(Vec<u8>),
}

#[derive(Debug, Default)]
struct State {
    trees: RwLock<BTreeMap<Vec<u8>, Arc<MemoryTree>>>,
    meta: RwLock<Map>,
    /// Serialises batches, so each is atomic for other batches.
    apply: Mutex<()>,
    batches: AtomicU64,
    dead: AtomicBool,
    fault: Mutex<Option<Fault>>,
    flushes: AtomicU64,
    /// Writes since the last flush, in the order they landed.
    unflushed: Mutex<Vec<Unflushed>>,
    /// What the flushes made durable, by tree.
    flushed: Mutex<BTreeMap<Vec<u8>, Map>>,
    /// How many [`FlushHold`]s are alive; flushes wait while any is.
    holds: Mutex<usize>,
    released: Condvar,
}

/// Holds every flush of a [`MemoryBackend`] back until dropped.
#[must_use = "flushes go on when the hold is dropped"]
#[derive(Debug)]
pub struct FlushHold {
    state: Arc<State>,
}

impl Drop for FlushHold {
    fn drop(&mut self) {
        let mut holds = self.state.holds.lock().unwrap_or_else(|p| p.into_inner());
        *holds = holds.saturating_sub(1);
        self.state.released.notify_all();
    }
}

/// An in-memory store; clones share the data.
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    state: Arc<State>,
}

#[derive(Debug)]
struct MemoryTree {
    name: Vec<u8>,
    map: Arc<RwLock<Map>>,
}

impl MemoryBackend {
    /// An empty store without faults.
    pub fn new() -> MemoryBackend {
        MemoryBackend::default()
    }

    /// Arms `fault` (replacing any armed before); batch numbers count from
    /// the batches applied so far.
    pub fn inject(&self, fault: Fault) {
        *self.state.fault.lock().unwrap_or_else(|p| p.into_inner()) = Some(fault);
    }

    /// Batches applied or attempted so far.
    pub fn batches(&self) -> u64 {
        self.state.batches.load(Ordering::SeqCst)
    }

    /// Flushes attempted so far.
    pub fn flushes(&self) -> u64 {
        self.state.flushes.load(Ordering::SeqCst)
    }

    /// Makes every flush wait (without failing) until the hold is dropped:
    /// a slow disk, or a flush stuck as in sled's deadlock.
    pub fn hold_flushes(&self) -> FlushHold {
        *self.state.holds.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        FlushHold {
            state: Arc::clone(&self.state),
        }
    }

    /// A new backend over what the flushes made durable (and the meta
    /// keys, which are written durably), alive and without faults: what a
    /// restart finds after the machine lost power.
    pub fn restart_from_flushed(&self) -> MemoryBackend {
        let flushed = self
            .state
            .flushed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        self.restarted_over(flushed)
    }

    /// A new backend over the data that reached this one, alive and without
    /// faults: what a process that restarts after a crash finds.
    pub fn restart(&self) -> MemoryBackend {
        let reached = self
            .state
            .trees
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(name, tree)| {
                let map = tree.map.read().unwrap_or_else(|p| p.into_inner()).clone();
                (name.clone(), map)
            })
            .collect();
        self.restarted_over(reached)
    }

    /// A new backend holding `data` (all of it flushed) and this one's meta
    /// keys.
    fn restarted_over(&self, data: BTreeMap<Vec<u8>, Map>) -> MemoryBackend {
        let trees = data
            .iter()
            .map(|(name, map)| {
                let tree = MemoryTree {
                    name: name.clone(),
                    map: Arc::new(RwLock::new(map.clone())),
                };
                (name.clone(), Arc::new(tree))
            })
            .collect();
        let meta = self
            .state
            .meta
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        MemoryBackend {
            state: Arc::new(State {
                trees: RwLock::new(trees),
                meta: RwLock::new(meta),
                flushed: Mutex::new(data),
                ..State::default()
            }),
        }
    }

    fn check_alive(&self) -> Result<(), BackendError> {
        if self.state.dead.load(Ordering::SeqCst) {
            return Err("the store has crashed (injected fault)".into());
        }
        Ok(())
    }

    fn tree_of<'a>(&self, tree: &'a Arc<dyn BackendTree>) -> Result<&'a MemoryTree, BackendError> {
        tree.as_any()
            .downcast_ref::<MemoryTree>()
            .ok_or_else(|| "a batch names a tree of another backend".into())
    }
}

fn apply_write(map: &mut Map, write: &Write) {
    match write {
        Write::Put(key, value) => {
            map.insert(key.to_vec(), value.clone());
        }
        Write::Delete(key) => {
            map.remove(&key[..]);
        }
    }
}

impl Backend for MemoryBackend {
    fn open_tree(&self, name: &[u8]) -> Result<Arc<dyn BackendTree>, BackendError> {
        let mut trees = self.state.trees.write().unwrap_or_else(|p| p.into_inner());
        let tree = trees.entry(name.to_vec()).or_insert_with(|| {
            Arc::new(MemoryTree {
                name: name.to_vec(),
                map: Arc::new(RwLock::new(Map::new())),
            })
        });
        Ok(Arc::clone(tree) as Arc<dyn BackendTree>)
    }

    fn drop_tree(&self, name: &[u8]) -> Result<bool, BackendError> {
        self.check_alive()?;
        let _serial = self.state.apply.lock().unwrap_or_else(|p| p.into_inner());
        let mut trees = self.state.trees.write().unwrap_or_else(|p| p.into_inner());
        self.state
            .unflushed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Unflushed::DropTree(name.to_vec()));
        Ok(trees.remove(name).is_some())
    }

    fn tree_names(&self) -> Vec<Vec<u8>> {
        let trees = self.state.trees.read().unwrap_or_else(|p| p.into_inner());
        trees.keys().cloned().collect()
    }

    fn meta_get(&self, key: &[u8]) -> Result<Option<Bytes>, BackendError> {
        let meta = self.state.meta.read().unwrap_or_else(|p| p.into_inner());
        Ok(meta.get(key).cloned())
    }

    fn meta_put_durable(&self, key: &[u8], value: &[u8]) -> Result<(), BackendError> {
        self.check_alive()?;
        let mut meta = self.state.meta.write().unwrap_or_else(|p| p.into_inner());
        meta.insert(key.to_vec(), Bytes::from(value));
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.tree_names().is_empty()
            && self
                .state
                .meta
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
    }

    fn apply(&self, batch: &[TreeWrites]) -> Result<(), BackendError> {
        let _serial = self.state.apply.lock().unwrap_or_else(|p| p.into_inner());
        self.check_alive()?;
        let number = self.state.batches.fetch_add(1, Ordering::SeqCst) + 1;
        let fault = *self.state.fault.lock().unwrap_or_else(|p| p.into_inner());
        let mut budget = usize::MAX;
        match fault {
            Some(Fault::FailBatch(n)) if n == number => {
                return Err(format!("batch {number} failed (injected fault)").into());
            }
            Some(Fault::CrashAtBatch(n)) if n == number => {
                self.state.dead.store(true, Ordering::SeqCst);
                return Err(format!("the store crashed at batch {number} (injected fault)").into());
            }
            Some(Fault::TearBatch { batch: n, writes }) if n == number => budget = writes,
            _ => {}
        }
        let crash_after = fault == Some(Fault::CrashAfterBatch(number));
        // Every tree of the batch (a batch names each tree once) is locked,
        // in name order, before the first write, so that no reader sees a
        // part of it.
        let trees = batch
            .iter()
            .map(|(tree, _)| self.tree_of(tree))
            .collect::<Result<Vec<_>, _>>()?;
        let mut order: Vec<&MemoryTree> = trees.clone();
        order.sort_by(|a, b| a.name.cmp(&b.name));
        let mut guards: BTreeMap<&[u8], std::sync::RwLockWriteGuard<'_, Map>> = order
            .into_iter()
            .map(|t| {
                (
                    &t.name[..],
                    t.map.write().unwrap_or_else(|p| p.into_inner()),
                )
            })
            .collect();
        let mut unflushed = self
            .state
            .unflushed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (tree, (_, writes)) in trees.iter().zip(batch) {
            let Some(map) = guards.get_mut(&tree.name[..]) else {
                continue;
            };
            for write in writes {
                if budget == 0 {
                    self.state.dead.store(true, Ordering::SeqCst);
                    return Err(format!("batch {number} was torn (injected fault)").into());
                }
                budget -= 1;
                apply_write(map, write);
                unflushed.push(Unflushed::Write(tree.name.clone(), write.clone()));
            }
        }
        if crash_after {
            self.state.dead.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), BackendError> {
        let number = self.state.flushes.fetch_add(1, Ordering::SeqCst) + 1;
        let mut holds = self.state.holds.lock().unwrap_or_else(|p| p.into_inner());
        while *holds > 0 {
            holds = self
                .state
                .released
                .wait(holds)
                .unwrap_or_else(|p| p.into_inner());
        }
        drop(holds);
        self.check_alive()?;
        let fault = *self.state.fault.lock().unwrap_or_else(|p| p.into_inner());
        if fault == Some(Fault::FailFlush(number)) {
            return Err(format!("flush {number} failed (injected fault)").into());
        }
        // Under the apply lock, so the flush covers a prefix of the batches.
        let _serial = self.state.apply.lock().unwrap_or_else(|p| p.into_inner());
        let writes = std::mem::take(
            &mut *self
                .state
                .unflushed
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        let mut flushed = self.state.flushed.lock().unwrap_or_else(|p| p.into_inner());
        for write in writes {
            match write {
                Unflushed::Write(tree, write) => {
                    apply_write(flushed.entry(tree).or_default(), &write)
                }
                Unflushed::DropTree(tree) => {
                    flushed.remove(&tree);
                }
            }
        }
        Ok(())
    }

    fn size_on_disk(&self) -> Result<u64, BackendError> {
        let trees = self.state.trees.read().unwrap_or_else(|p| p.into_inner());
        Ok(trees
            .values()
            .map(|t| {
                let map = t.map.read().unwrap_or_else(|p| p.into_inner());
                map.iter()
                    .map(|(k, v)| (k.len() + v.len()) as u64)
                    .sum::<u64>()
            })
            .sum())
    }
}

/// Entries are read in chunks, each under the tree's lock, so a scan never
/// holds the lock between calls (as sled's iterators do not).
const CHUNK: usize = 256;

struct MemoryIter {
    map: Arc<RwLock<Map>>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
    buffer: VecDeque<(Bytes, Bytes)>,
    done: bool,
}

impl MemoryIter {
    fn refill(&mut self) {
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        let range = map.range::<Vec<u8>, _>((self.lo.clone(), self.hi.clone()));
        let chunk: Vec<(Bytes, Bytes)> = if self.reverse {
            range
                .rev()
                .take(CHUNK)
                .map(|(k, v)| (Bytes::from(&k[..]), v.clone()))
                .collect()
        } else {
            range
                .take(CHUNK)
                .map(|(k, v)| (Bytes::from(&k[..]), v.clone()))
                .collect()
        };
        self.done = chunk.len() < CHUNK;
        if let Some((last, _)) = chunk.last() {
            if self.reverse {
                self.hi = Bound::Excluded(last.to_vec());
            } else {
                self.lo = Bound::Excluded(last.to_vec());
            }
        }
        self.buffer.extend(chunk);
    }
}

impl Iterator for MemoryIter {
    type Item = Result<(Bytes, Bytes), BackendError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buffer.is_empty() && !self.done {
            self.refill();
        }
        self.buffer.pop_front().map(Ok)
    }
}

impl BackendTree for MemoryTree {
    fn name(&self) -> &[u8] {
        &self.name
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, BackendError> {
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        Ok(map.get(key).cloned())
    }

    fn range(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, reverse: bool) -> BackendIter {
        Box::new(MemoryIter {
            map: Arc::clone(&self.map),
            lo,
            hi,
            reverse,
            buffer: VecDeque::new(),
            done: false,
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
