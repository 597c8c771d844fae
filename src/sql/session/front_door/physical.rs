//! The physical plan of a query shape without parameters, kept with its
//! cached plan and copied for each run by DataFusion's
//! [`reset_plan_states`]. A repeated `SELECT 1` or `SELECT count(*) FROM t`
//! then skips physical planning and its optimiser (`EnsureRequirements`,
//! the projection's properties, filter pushdown): over half of a cached
//! `SELECT 1`'s time before (`bench/RESULTS.md`). A shape with parameters
//! is planned physically with each run's values, since they decide the key
//! ranges a scan reads.
//!
//! A plan is kept only when a reset copy of it runs as a new plan would:
//! - every operator is one of [`REUSABLE`]: DataFusion's operators whose
//!   reset leaves nothing of an earlier run (their metrics and per-run
//!   state are made new), and widesql's scan, which reads the store when
//!   it runs (its key ranges are fixed by the plan, which has no values to
//!   change them);
//! - no dynamic filter: a TopK sort's, a min/max aggregate's or a join's
//!   filter holds the bounds of the run that filled it, which would filter
//!   the rows of the next (DataFusion's own limit for this reuse);
//! - joins, subqueries evaluated while running and recursive queries are
//!   not on the list.
//!
//! The plan belongs to the cache entry, so DDL (a new catalog generation)
//! drops it with the logical plan. It is planned again, and kept in place
//! of the old one, once a batch wrote a table it scans: its scans' split
//! into partitions was found for the table's size then, and a plan kept
//! while the table was empty would read a large one in one partition. A
//! session whose settings for physical planning differ from the kept
//! plan's (its own `target_partitions`) plans its own.

use std::sync::{Arc, Mutex, PoisonError};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::SessionState;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::ExecutionPlan;

use crate::sql::read::scan::WideScanExec;
use crate::table::TableStore;

/// The operators a kept plan may hold (by [`ExecutionPlan::name`]).
const REUSABLE: [&str; 15] = [
    "AggregateExec",
    "CoalesceBatchesExec",
    "CoalescePartitionsExec",
    "CooperativeExec",
    "EmptyExec",
    "FilterExec",
    "GlobalLimitExec",
    "LocalLimitExec",
    "PlaceholderRowExec",
    "ProjectionExec",
    "RepartitionExec",
    "SortExec",
    "SortPreservingMergeExec",
    "UnionExec",
    "WideScanExec",
];

/// The kept physical plan of a shape, if any.
#[derive(Debug, Default)]
pub(super) struct PhysicalMemo(Mutex<Option<Kept>>);

#[derive(Debug)]
struct Kept {
    plan: Arc<dyn ExecutionPlan>,
    /// The stores its scans read, each with its table's write epoch when
    /// the plan was kept.
    scans: Vec<(TableStore, u64)>,
    /// The settings it was planned with.
    settings: Settings,
}

/// The settings of a session that physical planning reads and a session
/// may have of its own without planning apart (`target_partitions` is a
/// session option), or change while its plan is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Settings {
    target_partitions: usize,
    batch_size: usize,
}

impl Settings {
    pub(super) fn of(state: &SessionState) -> Settings {
        let config = state.config();
        Settings {
            target_partitions: config.target_partitions(),
            batch_size: config.batch_size(),
        }
    }
}

impl Kept {
    /// Whether its scans' split into partitions is still the one a new
    /// plan would find: no DDL and no batch wrote their tables since (the
    /// rule of the tables' own split memo, [`crate::table::splits::SplitMemo`]).
    fn is_current(&self) -> bool {
        self.scans.iter().all(|(store, epoch)| {
            !store.layout.is_superseded() && store.layout.write_epoch() == *epoch
        })
    }
}

impl PhysicalMemo {
    /// A fresh copy of the kept plan, for a run with `settings`; `None`
    /// when there is none, it was planned with other settings, or a table
    /// it reads was written since.
    pub(super) fn copy(&self, settings: Settings) -> Option<Arc<dyn ExecutionPlan>> {
        let plan = {
            let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            let kept = kept.as_ref()?;
            if kept.settings != settings || !kept.is_current() {
                return None;
            }
            Arc::clone(&kept.plan)
        };
        reset_plan_states(plan).ok()
    }

    /// Keeps `plan`, planned with `settings`, when it may run again from a
    /// reset copy and no current plan is kept. Returns the plan to run now:
    /// a copy of a plan kept, so that the kept plan never runs itself.
    pub(super) fn keep(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        settings: Settings,
    ) -> Arc<dyn ExecutionPlan> {
        let Some(scans) = reusable(&plan) else {
            return plan;
        };
        {
            let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if kept.as_ref().is_some_and(Kept::is_current) {
                return plan;
            }
            *kept = Some(Kept {
                plan: Arc::clone(&plan),
                scans,
                settings,
            });
        }
        reset_plan_states(Arc::clone(&plan)).unwrap_or(plan)
    }
}

/// The stores `plan`'s scans read, with their tables' write epochs, when
/// it may run again from a reset copy (see the module documentation);
/// `None` otherwise.
fn reusable(plan: &Arc<dyn ExecutionPlan>) -> Option<Vec<(TableStore, u64)>> {
    let mut scans = Vec::new();
    let mut fits = true;
    let _ = plan.apply(|node| {
        fits = REUSABLE.contains(&node.name()) && !has_dynamic_filter(node);
        if let Some(scan) = node.downcast_ref::<WideScanExec>() {
            let store = scan.parts().0;
            // Rows that age out move no epoch: such a table's scans are
            // split anew every time.
            fits &= !store.layout.hides_by_age();
            scans.push((store.clone(), store.layout.write_epoch()));
        }
        Ok(match fits {
            true => TreeNodeRecursion::Continue,
            false => TreeNodeRecursion::Stop,
        })
    });
    fits.then_some(scans)
}

/// Whether `node` makes or reads a dynamic filter (a sort with a limit
/// is a TopK, which makes one once reset).
fn has_dynamic_filter(node: &Arc<dyn ExecutionPlan>) -> bool {
    if node
        .downcast_ref::<SortExec>()
        .is_some_and(|s| s.fetch().is_some())
        || !node.dynamic_expressions_produced().is_empty()
    {
        return true;
    }
    let mut found = false;
    let _ = node.apply_expressions(&mut |expr| {
        found = expr
            .exists(|e| Ok(e.is::<DynamicFilterPhysicalExpr>()))
            .unwrap_or(true);
        Ok(match found {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Db, Error, Session};

    /// A new database in a temporary directory, and a session of it.
    fn open() -> crate::Result<(tempfile::TempDir, Db, Session)> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?;
        let db = Db::open(dir.path())?;
        let session = db.session();
        Ok((dir, db, session))
    }

    /// Which plans are kept: those of scans, filters, aggregates, unions
    /// and full sorts; not a TopK (it makes a dynamic filter), a join or a
    /// subquery (made a join).
    #[tokio::test]
    async fn plans_with_state_between_runs_are_not_kept() -> crate::Result<()> {
        let (_dir, _db, session) = open()?;
        session
            .run(
                "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT);
                 CREATE TABLE u (_key VARCHAR PRIMARY KEY, m BIGINT)",
            )
            .await?;
        for (sql, kept) in [
            ("SELECT 1", true),
            ("SELECT count(*), sum(n) FROM t", true),
            ("SELECT n, count(*) FROM t GROUP BY n ORDER BY n", true),
            ("SELECT * FROM t WHERE n > 3 ORDER BY _key", true),
            ("SELECT _key FROM t UNION ALL SELECT _key FROM u", true),
            ("SELECT _key FROM t ORDER BY n DESC LIMIT 2", false),
            // (Its aggregate would make a dynamic filter only for a scan
            // that takes one, which widesql's does not.)
            ("SELECT min(n), max(n) FROM t", true),
            ("SELECT * FROM t JOIN u ON t.n = u.m", false),
            ("SELECT * FROM t WHERE n > (SELECT max(m) FROM u)", false),
        ] {
            let state = session.ctx.state();
            let logical = state.create_logical_plan(sql).await?;
            let physical = state.create_physical_plan(&logical).await?;
            let stores = reusable(&physical);
            assert_eq!(stores.is_some(), kept, "{sql}");
            let scans = sql.matches(" FROM ").count();
            assert_eq!(stores.map_or(scans, |s| s.len()), scans, "{sql}");
        }
        Ok(())
    }

    /// A kept plan is copied while nothing wrote the table and the
    /// settings are its own; after a write it is planned again and the new
    /// plan kept in its place.
    #[tokio::test]
    async fn a_kept_plan_gives_way_after_writes_and_to_other_settings() -> crate::Result<()> {
        let (_dir, _db, session) = open()?;
        session
            .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)")
            .await?;
        let state = session.ctx.state();
        let settings = Settings::of(&state);
        let plan = || async {
            let logical = state.create_logical_plan("SELECT count(*) FROM t").await?;
            state.create_physical_plan(&logical).await
        };
        let memo = PhysicalMemo::default();
        assert!(memo.copy(settings).is_none(), "nothing kept yet");
        let first = plan().await?;
        let run = memo.keep(Arc::clone(&first), settings);
        assert!(
            !Arc::ptr_eq(&run, &first),
            "the kept plan never runs itself"
        );
        assert!(memo.copy(settings).is_some());
        let other = Settings {
            target_partitions: settings.target_partitions + 1,
            ..settings
        };
        assert!(memo.copy(other).is_none(), "other settings plan their own");

        session.run("INSERT INTO t VALUES ('a', 1)").await?;
        assert!(memo.copy(settings).is_none(), "the table was written");
        let second = plan().await?;
        memo.keep(Arc::clone(&second), settings);
        let kept = memo.0.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = kept.as_ref().map(|k| Arc::clone(&k.plan));
        assert!(kept.is_some_and(|k| Arc::ptr_eq(&k, &second)), "kept anew");
        Ok(())
    }
}
