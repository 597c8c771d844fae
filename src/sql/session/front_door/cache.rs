//! The plan cache: what each statement shape plans to, shared by the
//! sessions of a database, bounded and least recently used first out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use datafusion::arrow::array::UInt64Array;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::context::SessionState;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::LogicalPlan;

use super::kind::PlanKind;
use crate::error::Result;
use crate::sql::Session;

/// What the plan cache of a database did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanCacheStats {
    /// Queries run from a cached plan.
    pub hits: u64,
    /// Queries looked up and not found (planned, and cached if they can be).
    pub misses: u64,
    /// Plans held now.
    pub entries: u64,
    /// The estimated bytes of the plans held now.
    pub bytes: u64,
    /// Plans dropped to stay within the bounds.
    pub evictions: u64,
}

/// The plans of one database, held by its sessions ([`PlanCache::of`]).
/// The plans hold the database's tables, so the database cannot hold its
/// cache: it would never close.
#[derive(Debug)]
pub(crate) struct PlanCache {
    state: Mutex<CacheState>,
    max_entries: AtomicU64,
    max_bytes: AtomicU64,
}

impl Default for PlanCache {
    fn default() -> Self {
        PlanCache {
            state: Mutex::default(),
            max_entries: AtomicU64::new(PlanCache::MAX_ENTRIES),
            max_bytes: AtomicU64::new(PlanCache::MAX_BYTES),
        }
    }
}

#[derive(Debug, Default)]
struct CacheState {
    entries: HashMap<String, Entry>,
    bytes: u64,
    /// Counts lookups, to order entries by their last use.
    clock: u64,
    stats: PlanCacheStats,
}

#[derive(Debug)]
struct Entry {
    generation: u64,
    /// `None`: the shape is planned as written (see the module
    /// documentation).
    plan: Option<Arc<PlanKind>>,
    bytes: u64,
    used: u64,
}

impl PlanCache {
    /// The cache of `db`, shared by its sessions: made when the first
    /// session opens, dropped with the last.
    pub(crate) fn of(db: &crate::Db) -> Arc<PlanCache> {
        static CACHES: OnceLock<Mutex<HashMap<usize, Weak<PlanCache>>>> = OnceLock::new();
        let mut caches = CACHES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(cache) = caches.get(&db.instance()).and_then(Weak::upgrade) {
            return cache;
        }
        caches.retain(|_, cache| cache.strong_count() > 0);
        let cache = Arc::new(PlanCache::default());
        caches.insert(db.instance(), Arc::downgrade(&cache));
        cache
    }

    /// Plans held at most, by default.
    pub const MAX_ENTRIES: u64 = 1024;
    /// Estimated bytes held at most, by default.
    pub const MAX_BYTES: u64 = 64 << 20;

    fn lock(&self) -> MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry of `key` if it was planned at `generation` (`Some(None)`:
    /// planned as written).
    pub(super) fn get(&self, key: &str, generation: u64) -> Option<Option<Arc<PlanKind>>> {
        let mut state = self.lock();
        state.clock += 1;
        let now = state.clock;
        let found = state
            .entries
            .get_mut(key)
            .filter(|entry| entry.generation == generation)
            .map(|entry| {
                entry.used = now;
                entry.plan.clone()
            });
        found
    }

    /// Counts a statement that ran from a plan found here (`hit`), or one
    /// that was planned.
    pub(super) fn count(&self, hit: bool) {
        let mut state = self.lock();
        match hit {
            true => state.stats.hits += 1,
            false => state.stats.misses += 1,
        }
    }

    /// Remembers what `key` planned to at `generation`, evicting the least
    /// recently used entries beyond the bounds.
    pub(super) fn insert(&self, key: String, generation: u64, plan: Option<Arc<PlanKind>>) {
        let bytes = key.len() as u64 + plan.as_ref().map_or(0, |kind| kind.estimated_bytes());
        let mut state = self.lock();
        state.clock += 1;
        let used = state.clock;
        if let Some(old) = state.entries.insert(
            key,
            Entry {
                generation,
                plan,
                bytes,
                used,
            },
        ) {
            state.bytes -= old.bytes;
        }
        state.bytes += bytes;
        self.evict(&mut state);
    }

    /// Drops the least recently used entries beyond the bounds.
    fn evict(&self, state: &mut CacheState) {
        let (max_entries, max_bytes) = self.limits();
        while state.entries.len() as u64 > max_entries || state.bytes > max_bytes {
            let Some(oldest) = state
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(entry) = state.entries.remove(&oldest) {
                state.bytes -= entry.bytes;
                state.stats.evictions += 1;
            }
        }
    }

    fn limits(&self) -> (u64, u64) {
        (
            self.max_entries.load(Ordering::Relaxed),
            self.max_bytes.load(Ordering::Relaxed),
        )
    }

    fn stats(&self) -> PlanCacheStats {
        let state = self.lock();
        PlanCacheStats {
            entries: state.entries.len() as u64,
            bytes: state.bytes,
            ..state.stats
        }
    }
}

/// An estimate of the memory a plan holds: its text with schemas, twice.
pub(super) fn estimated_bytes(plan: &LogicalPlan) -> u64 {
    2 * plan.display_indent_schema().to_string().len() as u64
}

/// A session's switches for the cache: shared by the clones of a session.
#[derive(Debug)]
pub(crate) struct CacheSwitches {
    /// `SET widesql.plan_cache = on | off`.
    enabled: AtomicBool,
    /// Bumped when the session's settings may have changed; 0 while it
    /// runs with the settings it was made with.
    pub(super) settings_epoch: AtomicU64,
    /// Tells sessions apart once their settings changed.
    pub(super) session: u64,
    /// Bumped whenever the session's state may have changed (any `SET`
    /// too), to refresh [`CacheSwitches::snapshot`].
    state_version: AtomicU64,
    /// The session's state and a task context made from it, as of a
    /// state version: cloning DataFusion's state (its registries of
    /// functions) for each statement cost more than planning `SELECT 1`.
    snapshot: Mutex<Option<Snapshot>>,
}

/// A state version, the session's state then, and a task context of it.
type Snapshot = (u64, Arc<SessionState>, Arc<TaskContext>);

impl Default for CacheSwitches {
    fn default() -> Self {
        static SESSIONS: AtomicU64 = AtomicU64::new(1);
        CacheSwitches {
            enabled: AtomicBool::new(true),
            settings_epoch: AtomicU64::new(0),
            session: SESSIONS.fetch_add(1, Ordering::Relaxed),
            state_version: AtomicU64::new(0),
            snapshot: Mutex::new(None),
        }
    }
}

impl CacheSwitches {
    /// Notes that the session's settings may have changed.
    pub(crate) fn settings_changed(&self) {
        self.settings_epoch.fetch_add(1, Ordering::Relaxed);
        self.state_changed();
    }

    /// Notes that the session's state changed in a way that plans do not
    /// depend on (`SET widesql.*`).
    pub(crate) fn state_changed(&self) {
        self.state_version.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed)
    }

    /// How many times the session's settings may have changed.
    pub(crate) fn settings_epoch(&self) -> u64 {
        self.settings_epoch.load(Ordering::Relaxed)
    }

    /// Whether statements go through the cache (`SET widesql.plan_cache`).
    pub(super) fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }
}

impl Session {
    /// What the plan cache of this session's database did so far.
    pub fn plan_cache_stats(&self) -> PlanCacheStats {
        self.plan_cache.stats()
    }

    /// Bounds the plan cache of this session's database: at most
    /// `entries` plans and an estimated `bytes` (by default 1,024 plans
    /// and 64 MiB). Plans beyond them are evicted, least recently used
    /// first.
    pub fn set_plan_cache_limits(&self, entries: u64, bytes: u64) {
        let cache = &self.plan_cache;
        cache.max_entries.store(entries, Ordering::Relaxed);
        cache.max_bytes.store(bytes, Ordering::Relaxed);
        let mut state = cache.lock();
        cache.evict(&mut state);
    }

    /// `SHOW widesql.plan_cache`: one row of [`PlanCacheStats`].
    pub(crate) fn plan_cache_batch(&self) -> Result<RecordBatch> {
        let stats = self.plan_cache_stats();
        let names = ["hits", "misses", "entries", "bytes", "evictions"];
        let values = [
            stats.hits,
            stats.misses,
            stats.entries,
            stats.bytes,
            stats.evictions,
        ];
        let schema = Schema::new(
            names
                .iter()
                .map(|n| Field::new(*n, DataType::UInt64, false))
                .collect::<Vec<_>>(),
        );
        let columns = values
            .iter()
            .map(|v| Arc::new(UInt64Array::from(vec![*v])) as _)
            .collect();
        Ok(RecordBatch::try_new(Arc::new(schema), columns)?)
    }

    /// The session's state and a task context for it, cloned once per
    /// state version.
    pub(crate) fn planning_state(&self) -> (Arc<SessionState>, Arc<TaskContext>) {
        let version = self.cache.state_version.load(Ordering::Relaxed);
        let mut snapshot = self
            .cache
            .snapshot
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match snapshot.as_ref() {
            Some((v, state, task)) if *v == version => (Arc::clone(state), Arc::clone(task)),
            _ => {
                let state = Arc::new(self.ctx.state());
                let task = Arc::new(TaskContext::from(state.as_ref()));
                *snapshot = Some((version, Arc::clone(&state), Arc::clone(&task)));
                (state, task)
            }
        }
    }
}
