//! Where each tablet's rows are stored.
//!
//! A tablet the tablet map gives a worker is stored in that worker's
//! database, under the same tree and keys; the table's key spaces then
//! carry [`Routes`] that send each key range's reads and writes to its
//! home. A process reaches workers once it is a cluster's master: the
//! server hands the catalog a [`WorkerStores`]; until then, a read or
//! write of a tablet a worker holds fails, naming it.

use std::collections::HashMap;
use std::fmt::Debug;
use std::ops::Bound;
use std::sync::{Arc, Mutex, OnceLock};

use super::*;
use crate::storage::{
    Backend, BackendError, BackendIter, BackendTree, Bytes, Durability, Home, KeyRange, Routes,
    Tree, TreeWrites, WriteBatch,
};

/// How a cluster's master reaches the stores of its workers.
pub trait WorkerStores: Send + Sync + Debug {
    /// The store of the worker that serves at `worker` (`http://host:port`).
    fn store(&self, worker: &str) -> Result<Arc<dyn Backend>, BackendError>;
}

/// The workers' stores, once the process is a master.
pub(crate) type Reach = Arc<OnceLock<Arc<dyn WorkerStores>>>;

/// A worker's store, found when first used.
#[derive(Debug)]
struct WorkerStore {
    worker: String,
    reach: Reach,
    store: OnceLock<Arc<dyn Backend>>,
}

impl WorkerStore {
    fn get(&self) -> Result<&Arc<dyn Backend>, BackendError> {
        if let Some(store) = self.store.get() {
            return Ok(store);
        }
        let stores = self.reach.get().ok_or_else(|| {
            format!(
                "worker {} holds it, and only a cluster's master (widesql serve --master) \
                 reaches workers",
                self.worker
            )
        })?;
        let store = stores.store(&self.worker)?;
        Ok(self.store.get_or_init(|| store))
    }
}

/// [`WorkerStore`] as a backend: every call finds the store first.
#[derive(Debug, Clone)]
struct LazyStore(Arc<WorkerStore>);

impl Backend for LazyStore {
    fn open_tree(&self, name: &[u8]) -> Result<Arc<dyn BackendTree>, BackendError> {
        Ok(Arc::new(LazyTree {
            store: self.clone(),
            name: name.to_vec(),
        }))
    }
    fn drop_tree(&self, name: &[u8]) -> Result<bool, BackendError> {
        self.0.get()?.drop_tree(name)
    }
    fn tree_names(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }
    fn meta_get(&self, key: &[u8]) -> Result<Option<crate::storage::Bytes>, BackendError> {
        self.0.get()?.meta_get(key)
    }
    fn meta_put_durable(&self, key: &[u8], value: &[u8]) -> Result<(), BackendError> {
        self.0.get()?.meta_put_durable(key, value)
    }
    fn is_empty(&self) -> bool {
        false
    }
    fn apply(&self, batch: &[TreeWrites]) -> Result<(), BackendError> {
        self.apply_and_flush(batch, false)
    }
    fn flush(&self) -> Result<(), BackendError> {
        self.0.get()?.flush()
    }
    fn apply_and_flush(&self, batch: &[TreeWrites], durable: bool) -> Result<(), BackendError> {
        let store = self.0.get()?;
        // The batch's trees are this store's lazy ones: named again on the
        // worker's own store.
        let trees = batch
            .iter()
            .map(|(tree, writes)| Ok((store.open_tree(tree.name())?, writes.clone())))
            .collect::<Result<Vec<TreeWrites>, BackendError>>()?;
        store.apply_and_flush(&trees, durable)
    }
    fn size_on_disk(&self) -> Result<u64, BackendError> {
        Ok(0)
    }
    fn settle(&self) -> Result<(), BackendError> {
        self.0.get()?.settle()
    }
}

#[derive(Debug)]
struct LazyTree {
    store: LazyStore,
    name: Vec<u8>,
}

impl BackendTree for LazyTree {
    fn name(&self) -> &[u8] {
        &self.name
    }
    fn get(&self, key: &[u8]) -> Result<Option<crate::storage::Bytes>, BackendError> {
        self.store.0.get()?.open_tree(&self.name)?.get(key)
    }
    fn range(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, reverse: bool) -> BackendIter {
        match self
            .store
            .0
            .get()
            .and_then(|store| store.open_tree(&self.name))
        {
            Ok(tree) => tree.range(lo, hi, reverse),
            Err(e) => Box::new(std::iter::once(Err(e))),
        }
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The stores of the workers named in the tablet map, by address.
#[derive(Debug, Default)]
pub(crate) struct Workers {
    pub(crate) reach: Reach,
    stores: Mutex<HashMap<String, Arc<WorkerStore>>>,
}

impl Workers {
    /// The workers whose stores this process has made.
    fn reached(&self) -> std::collections::BTreeSet<String> {
        let stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        stores.keys().cloned().collect()
    }

    fn store(&self, worker: &str) -> Arc<dyn Backend> {
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        let store = stores.entry(worker.to_string()).or_insert_with(|| {
            Arc::new(WorkerStore {
                worker: worker.to_string(),
                reach: Arc::clone(&self.reach),
                store: OnceLock::new(),
            })
        });
        Arc::new(LazyStore(Arc::clone(store)))
    }
}

/// The home of a tablet for messages: `tablet … on worker …`.
pub(super) fn home(workers: &Workers, tablet: &StoredTablet) -> Home {
    match &tablet.worker {
        None => Home::Here,
        Some(worker) => Home::Away {
            store: workers.store(worker),
            name: Arc::from(format!("tablet {} on worker {worker}", tablet.id)),
        },
    }
}

/// Routes that send every key to `home`.
pub(super) fn all_to(home: Home) -> Routes {
    Routes::new(vec![(Vec::new(), home)])
        .unwrap_or_else(|| unreachable!("one range from the first key"))
}

/// The meta key that records that the table `id`, whose tablets workers
/// may hold, was dropped. Kept for good: a worker may call again after
/// any time away.
fn dropped_key(id: TableId) -> Vec<u8> {
    let mut key = b"widesql/dropped_table/".to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

/// Entries a move copies or deletes per batch at most.
pub(super) const MOVE_BATCH_ENTRIES: usize = 1024;
/// Bytes a move copies per batch at most.
pub(super) const MOVE_BATCH_BYTES: usize = 4 << 20;
impl Catalog {
    /// Makes this process reach the workers the tablet map names through
    /// `stores` (the server calls it on a cluster's master).
    pub fn reach_workers(&self, stores: Arc<dyn WorkerStores>) {
        let _ = self.workers.reach.set(stores);
    }

    /// The routes of table `id`'s key spaces, when a worker holds one of
    /// its tablets.
    pub(super) fn routes_of(&self, state: &CatalogState, id: TableId) -> Option<Routes> {
        self.routes_from(state.tablets.get(&id)?)
    }

    /// The routes of a table whose stored tablets are `tablets`, when a
    /// worker holds one of them.
    pub(super) fn routes_from(&self, tablets: &BTreeMap<Vec<u8>, StoredTablet>) -> Option<Routes> {
        if tablets.values().all(|t| t.worker.is_none()) {
            return None;
        }
        Routes::new(
            tablets
                .iter()
                .map(|(start, tablet)| (stored_start(start), home(&self.workers, tablet)))
                .collect(),
        )
    }

    /// `layout`, its key spaces routed as table `id`'s tablets are stored.
    pub(super) fn routed(
        &self,
        state: &CatalogState,
        id: TableId,
        layout: Layout,
    ) -> Result<Layout> {
        match self.routes_of(state, id) {
            Some(routes) => Ok(layout.with_routes(&routes)?),
            None => Ok(layout),
        }
    }

    /// Routes the layouts of the tables a worker holds tablets of (at
    /// open, once the tablet map is loaded).
    pub(super) fn route_layouts(&self, state: &mut CatalogState) -> Result<()> {
        let routed: Vec<TableId> = state.tablets.keys().copied().collect();
        for id in routed {
            // Tables split but served here keep their layout as loaded.
            let (Some(entry), Some(routes)) = (state.table(id), self.routes_of(state, id)) else {
                continue;
            };
            let mut entry = entry.clone();
            entry.layout = Arc::new(entry.layout.with_routes(&routes)?);
            state.insert_table(entry);
        }
        Ok(())
    }

    /// Removes from this process's store the rows of tablets a worker
    /// holds: the copy a move that stopped after its catalog change left,
    /// or that a move keeps for the queries that began before it.
    pub(crate) fn remove_moved_away(&self) -> Result<()> {
        let moved: Vec<(TableId, Vec<KeyRange>)> = {
            let state = self.read();
            state
                .tablets
                .keys()
                .map(|id| {
                    let ranges = state
                        .tablets_of(*id)
                        .iter()
                        .filter(|tablet| tablet.worker.is_some())
                        .map(bounds)
                        .collect();
                    (*id, ranges)
                })
                .collect()
        };
        for (id, ranges) in moved.into_iter().filter(|(_, ranges)| !ranges.is_empty()) {
            for tree in self.local_key_spaces(id)? {
                for (lo, hi) in &ranges {
                    self.delete_range(&tree, lo, hi)?;
                }
            }
        }
        Ok(())
    }

    /// Whether the table `id` was dropped while workers may have held
    /// tablets of it ([`Catalog::drop_on_workers`] recorded it): a worker
    /// that missed the drop removes its copy when it next calls the
    /// master.
    pub(crate) fn dropped_from_workers(&self, id: TableId) -> Result<bool> {
        Ok(self.engine.storage.meta_get(&dropped_key(id))?.is_some())
    }

    /// Records that the tables whose `_tablets` rows outlived them were
    /// dropped: a drop writes its record after the catalog change, and a
    /// process that died in between leaves only those rows (which the
    /// next open then removes) to show it.
    pub(super) fn record_dropped_tablets(&self) -> Result<()> {
        let mut dropped = std::collections::BTreeSet::new();
        {
            let state = self.read();
            for (key, _) in self.rows_of(system::TABLETS)? {
                let id = key.first().and_then(|table| TableId::parse(table));
                if let Some(id) = id.filter(|id| state.table(*id).is_none()) {
                    dropped.insert(id);
                }
            }
        }
        for id in dropped {
            if !self.dropped_from_workers(id)? {
                self.engine
                    .storage
                    .meta_put_durable(&dropped_key(id), &[])?;
            }
        }
        Ok(())
    }

    /// Removes the copies of the dropped table `id` (its tree `name`)
    /// from the workers that may hold one: those its tablet map names and
    /// every other this process has reached (a tablet moved away from a
    /// worker leaves its old copy there). The table is gone from the
    /// catalog already, so nothing reads a copy again: the calls run on a
    /// thread of their own, after the drop. A worker that cannot be
    /// reached removes its copy when it next calls the master, which
    /// answers from the record of the drop made here.
    pub(super) fn drop_on_workers(&self, id: TableId, name: &[u8]) {
        // A table never split or moved has no tablet row: no worker ever
        // held any of it.
        let Some(placed) = self.read().tablets.get(&id).cloned() else {
            return;
        };
        // Recorded after the drop, so that it never names a table that
        // exists. If it is lost (the process died first, or the write
        // failed), the next open records it from the table's `_tablets`
        // rows, which outlive it until then.
        let _ = self.engine.storage.meta_put_durable(&dropped_key(id), &[]);
        if self.workers.reach.get().is_none() {
            return; // Only a master reaches workers.
        }
        let mut workers: std::collections::BTreeSet<String> = self.workers.reached();
        workers.extend(placed.into_values().filter_map(|t| t.worker));
        let stores: Vec<Arc<dyn Backend>> = workers.iter().map(|w| self.workers.store(w)).collect();
        if stores.is_empty() {
            return;
        }
        let name = name.to_vec();
        let dropping = std::thread::Builder::new()
            .name("widesql-drop-on-workers".into())
            .spawn(move || {
                for store in stores {
                    let _ = store.drop_tree(&name);
                }
            });
        // No thread: the workers remove their copies at their next call,
        // as one that is down does.
        drop(dropping);
    }

    /// Flushes every worker that holds a tablet of a table, so that the
    /// writes it was sent are on its disk; nothing in a process that is
    /// not a master (it reaches no worker, so it sent them nothing). Each
    /// is tried; the first error, naming its worker, is returned.
    pub(crate) fn flush_workers(&self) -> Result<()> {
        if self.workers.reach.get().is_none() {
            return Ok(());
        }
        let workers: std::collections::BTreeSet<String> = {
            let state = self.read();
            state
                .tablets
                .iter()
                .filter(|(id, _)| state.table(**id).is_some())
                .flat_map(|(_, tablets)| tablets.values().filter_map(|t| t.worker.clone()))
                .collect()
        };
        let mut first = None;
        for worker in workers {
            if let Err(source) = self.workers.store(&worker).flush() {
                first.get_or_insert(crate::storage::StorageError::Away {
                    home: format!("worker {worker}"),
                    source,
                });
            }
        }
        first.map_or(Ok(()), |e| Err(e.into()))
    }

    /// The key spaces of table `id` in this process's store, unrouted.
    pub(super) fn local_key_spaces(&self, id: TableId) -> Result<Vec<Tree>> {
        let Some(entry) = self.read().table(id).cloned() else {
            return Ok(Vec::new());
        };
        let name = crate::table::layout::table_tree_name(id);
        Ok(entry
            .layout
            .groups
            .iter()
            .map(|g| {
                self.engine
                    .storage
                    .key_space(&name, &crate::table::layout::group_key_prefix(&g.name))
            })
            .collect::<Result<_, _>>()?)
    }

    /// Deletes the entries of `tree` in `(lo, hi)`, batch by batch.
    pub(super) fn delete_range(
        &self,
        tree: &Tree,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
    ) -> Result<()> {
        loop {
            let keys = tree
                .range(lo.clone(), hi.clone(), false)
                .take(MOVE_BATCH_ENTRIES)
                .map(|entry| entry.map(|(key, _)| (key, None)))
                .collect::<Vec<_>>();
            if keys.is_empty() {
                return Ok(());
            }
            self.write_copies(tree, keys)?;
        }
    }

    /// Writes `entries` to `to` (a value, or `None` to delete the key) in
    /// batches of copies, which watches do not note.
    pub(super) fn write_copies<E>(
        &self,
        to: &Tree,
        entries: impl IntoIterator<Item = Result<(Bytes, Option<Bytes>), E>>,
    ) -> Result<()>
    where
        crate::Error: From<E>,
    {
        let mut batch = WriteBatch::copying(Durability::Eventual);
        let mut count = 0;
        for entry in entries {
            match entry? {
                (key, Some(value)) => batch.put(to, key, value),
                (key, None) => batch.delete(to, key),
            }
            count += 1;
            if count >= MOVE_BATCH_ENTRIES || batch.bytes() >= MOVE_BATCH_BYTES {
                let full = std::mem::replace(&mut batch, WriteBatch::copying(Durability::Eventual));
                self.engine.storage.apply(full)?;
                count = 0;
            }
        }
        self.engine.storage.apply(batch).map_err(Into::into)
    }
}

/// Where the stored keys of the rows from `start` on begin: a cell's key
/// starts with its row key as an escaped, terminated byte string, which
/// sorts as the row keys do.
pub(super) fn stored_start(start: &[u8]) -> Vec<u8> {
    if start.is_empty() {
        return Vec::new();
    }
    let mut stored = Vec::with_capacity(start.len() + 2);
    crate::keys::put_bytes(&mut stored, start);
    stored
}

/// The range of a tablet's stored keys.
pub(super) fn bounds(tablet: &Tablet) -> KeyRange {
    let hi = match &tablet.end {
        Some(end) => Bound::Excluded(stored_start(end)),
        None => Bound::Unbounded,
    };
    (Bound::Included(stored_start(&tablet.start)), hi)
}
