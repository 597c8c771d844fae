//! The plan cache: queries planned once per shape, shared by the sessions
//! of a database.
//!
//! Planning a query (turning its syntax into a logical plan, analysing and
//! optimising that plan) costs more than running a short one. The cache
//! keeps the optimised plan of each query *shape* it saw:
//!
//! 1. **Normalise.** A string or number literal in a `WHERE` clause that
//!    is a value (an operand of a comparison whose other side is no
//!    literal, an item of an `IN` list, a bound of `BETWEEN`) becomes a
//!    parameter `$1, $2, …`, as SQL Server's simple parameterisation does.
//!    Literals anywhere else (the select list, where they name columns;
//!    `ORDER BY 1`; `LIMIT 10`; a function's argument) stay in the text,
//!    and so do all literals of a query with a subquery (DataFusion
//!    evaluates some of a subquery's expressions while it plans) or with
//!    parameters of its own.
//! 2. **Look up** the normalised text, the types of its literals and the
//!    names the session resolves in (its default project and dataset).
//!    An entry planned before the last DDL (catalog generation) is stale.
//! 3. **Plan on a miss**: the normalised statement is planned, each
//!    parameter typed as its place in the plan (the column it is compared
//!    with), so that the plan is the one the literal would get: key
//!    ranges are pushed down and casts land on the value, not the column.
//!    A literal of another kind than its place (a number compared with
//!    text, which DataFusion may compare as numbers) is not cached.
//! 4. **Run** the plan with this statement's values converted to their
//!    places' types: only physical planning and execution remain. A value
//!    that does not convert there and back unchanged (`5.5` where an
//!    integer column is compared) plans the statement as written instead.
//!
//! Not cached (planned every time, as without the cache): statements other
//! than queries; queries that call a function whose value can change
//! within a statement or between statements (`now()`, `random()`, also
//! inside a view), since the optimiser folds some of them into constants;
//! queries that read anything but widesql tables (a view, a registered
//! file or table: what they hold is not seen by the catalog generation);
//! queries whose normalised form does not plan. A session whose settings
//! changed (`SET`, DataFusion DDL such as `CREATE VIEW`, or its
//! [`SessionContext`] handed out) keeps its plans apart from other
//! sessions'.
//!
//! Key lookups and `INSERT`s of literals are answered before the cache
//! looks (`key_lookup`, `dml::constant_insert`). The cache is bounded in
//! entries and in an estimate of bytes, evicting the least recently used
//! plan; `SHOW widesql.plan_cache` and [`Session::plan_cache_stats`]
//! report it, and `SET widesql.plan_cache = off` turns it off for a session.
//!
//! [`SessionContext`]: datafusion::execution::context::SessionContext

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use datafusion::arrow::array::UInt64Array;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DFSchemaRef, ParamValues, ScalarValue};
use datafusion::execution::context::SessionState;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{LogicalPlan, Volatility};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    visit_expressions, Expr as SqlExpr, Statement as SqlStatement,
};

mod eligibility;
mod normalise;

use eligibility::{exactly_as, plans_changing_functions, reads_only_widesql_tables, same_kind};
use normalise::lift_values;

use crate::error::Result;
use crate::sql::dispatch::has_into;
use crate::sql::literal::literal_value;
use crate::sql::{from_df, Session};

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
    /// `None`: the shape is not cached (see the module documentation).
    plan: Option<Arc<CachedQuery>>,
    bytes: u64,
    used: u64,
}

/// The optimised plan of a query shape, with its parameters' types.
#[derive(Debug)]
pub(crate) struct CachedQuery {
    plan: LogicalPlan,
    parameters: Vec<FieldRef>,
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
    /// known not to be cached); counts a hit or a miss.
    fn get(&self, key: &str, generation: u64) -> Option<Option<Arc<CachedQuery>>> {
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
        match &found {
            Some(Some(_)) => state.stats.hits += 1,
            _ => state.stats.misses += 1,
        }
        found
    }

    /// Remembers what `key` planned to at `generation`, evicting the least
    /// recently used entries beyond the bounds.
    fn insert(&self, key: String, generation: u64, plan: Option<Arc<CachedQuery>>) {
        let bytes = key.len() as u64 + plan.as_ref().map_or(0, |p| estimated_bytes(&p.plan));
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
fn estimated_bytes(plan: &LogicalPlan) -> u64 {
    2 * plan.display_indent_schema().to_string().len() as u64
}

/// A session's switches for the cache: shared by the clones of a session.
#[derive(Debug)]
pub(crate) struct CacheSwitches {
    /// `SET widesql.plan_cache = on | off`.
    enabled: AtomicBool,
    /// Bumped when the session's settings may have changed; 0 while it
    /// runs with the settings it was made with.
    settings_epoch: AtomicU64,
    /// Tells sessions apart once their settings changed.
    session: u64,
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
}

/// A query ready to run: its physical plan and logical schema.
pub(crate) struct ReadyQuery {
    pub(crate) physical: Arc<dyn ExecutionPlan>,
    pub(crate) schema: DFSchemaRef,
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
    pub(super) fn plan_cache_batch(&self) -> Result<RecordBatch> {
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

    /// `statement` planned from the cache (planned and cached on a miss)
    /// with its values bound, ready to run; `None` when it is not a query
    /// the cache holds.
    pub(super) async fn cached_query(&self, statement: &DfStatement) -> Result<Option<ReadyQuery>> {
        if !self.cache.enabled.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let DfStatement::Statement(inner) = statement else {
            return Ok(None);
        };
        if !matches!(inner.as_ref(), SqlStatement::Query(query) if !has_into(query)) {
            return Ok(None);
        }
        let numbers = self.numbers();
        let mut shape = inner.as_ref().clone();
        let params = lift_values(&mut shape, |value| literal_value(value, numbers));
        let key = self.cache_key(&shape, &params);
        let cache = &self.plan_cache;
        let generation = self.generation();
        let cached = match cache.get(&key, generation) {
            Some(cached) => cached,
            None => {
                let planned = self.plan_shape(shape, &params).await;
                cache.insert(key, generation, planned.clone());
                planned
            }
        };
        let Some(cached) = cached else {
            return Ok(None);
        };
        // Each value as the type its place in the plan has; a value that
        // does not convert exactly (5.5 where an integer column is
        // compared) is planned as written instead.
        let Some(values) = params
            .into_iter()
            .zip(&cached.parameters)
            .map(|(value, field)| exactly_as(value, field.data_type()))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let Ok(plan) = cached
            .plan
            .clone()
            .with_param_values(ParamValues::List(values))
        else {
            return Ok(None);
        };
        let (state, _) = self.planning_state();
        let physical = state
            .query_planner()
            .create_physical_plan(&plan, state.as_ref())
            .await
            .map_err(from_df)?;
        Ok(Some(ReadyQuery {
            physical,
            schema: Arc::clone(plan.schema()),
        }))
    }

    /// The session's state and a task context for it, cloned once per
    /// state version.
    pub(super) fn planning_state(&self) -> (Arc<SessionState>, Arc<TaskContext>) {
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

    /// The cache key of a normalised statement: the names it resolves in
    /// (or the session and its settings, once they changed), the types
    /// of its parameters, and its text.
    fn cache_key(&self, shape: &SqlStatement, params: &[ScalarValue]) -> String {
        use std::fmt::Write as _;
        let epoch = self.cache.settings_epoch.load(Ordering::Relaxed);
        let mut key = if epoch == 0 {
            self.shape_key(String::new())
        } else {
            format!("session {} settings {epoch} ", self.cache.session)
        };
        for param in params {
            let _ = write!(key, "{} ", param.data_type());
        }
        let _ = write!(key, "| {shape}");
        key
    }

    /// The optimised plan of a normalised query, or `None` when it is not
    /// to be cached (see the module documentation).
    async fn plan_shape(
        &self,
        shape: SqlStatement,
        params: &[ScalarValue],
    ) -> Option<Arc<CachedQuery>> {
        if self.calls_changing_functions(&shape) {
            return None;
        }
        let plan = self
            .plan(DfStatement::Statement(Box::new(shape)))
            .await
            .ok()?;
        if !reads_only_widesql_tables(&plan) || plans_changing_functions(&plan) {
            return None;
        }
        let mut fields = plan.get_parameter_fields().ok()?;
        let parameters = params
            .iter()
            .enumerate()
            .map(|(at, value)| {
                let field = fields.remove(&format!("${}", at + 1))??;
                same_kind(&value.data_type(), field.data_type()).then_some(field)
            })
            .collect::<Option<Vec<_>>>()?;
        let optimized = self.ctx.state().optimize(&plan).ok()?;
        Some(Arc::new(CachedQuery {
            plan: optimized,
            parameters,
        }))
    }

    /// Whether `statement` calls a function that is not immutable, in a
    /// table function's arguments too (evaluated while planning, so the
    /// plan does not show them).
    fn calls_changing_functions(&self, statement: &SqlStatement) -> bool {
        let state = self.ctx.state_ref();
        let state = state.read();
        let functions = state.scalar_functions();
        visit_expressions(statement, |expr| match expr {
            SqlExpr::Function(function) => {
                let name = function.name.to_string().to_lowercase();
                match functions.get(&name) {
                    Some(f) if f.signature().volatility != Volatility::Immutable => {
                        ControlFlow::Break(())
                    }
                    _ => ControlFlow::Continue(()),
                }
            }
            _ => ControlFlow::Continue(()),
        })
        .is_break()
    }
}
