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
//!   it runs (its key ranges and split into partitions are fixed by the
//!   plan, which has no values to change them);
//! - no dynamic filter: a TopK sort's, a min/max aggregate's or a join's
//!   filter holds the bounds of the run that filled it, which would filter
//!   the rows of the next (DataFusion's own limit for this reuse);
//! - joins, subqueries evaluated while running and recursive queries are
//!   not on the list.
//!
//! The copy belongs to the cache entry, so DDL (a new catalog generation)
//! drops it with the logical plan; a table whose layout was superseded
//! meanwhile has the shape planned again.

use std::sync::{Arc, OnceLock};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
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

/// A kept physical plan, set by the shape's first run (`None` in it: the
/// plan is not to be kept).
#[derive(Debug, Default)]
pub(super) struct PhysicalMemo(OnceLock<Option<Kept>>);

#[derive(Debug)]
struct Kept {
    plan: Arc<dyn ExecutionPlan>,
    /// The stores its scans read, whose layouts must still be current.
    stores: Vec<TableStore>,
}

impl PhysicalMemo {
    /// A fresh copy of the kept plan; `None` when there is none (not run
    /// yet, not to be kept, or a table it reads changed since).
    pub(super) fn copy(&self) -> Option<Arc<dyn ExecutionPlan>> {
        let kept = self.0.get()?.as_ref()?;
        if kept.stores.iter().any(|s| s.layout.is_superseded()) {
            return None;
        }
        reset_plan_states(Arc::clone(&kept.plan)).ok()
    }

    /// Keeps `plan` when it may run again from a reset copy; the first
    /// plan given is kept (a shape planned by two runs at once keeps one).
    /// Returns the plan to run now: a copy, so that the kept plan never
    /// runs itself.
    pub(super) fn keep(&self, plan: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        let kept = reusable(&plan).map(|stores| Kept {
            plan: Arc::clone(&plan),
            stores,
        });
        let _ = self.0.set(kept);
        self.copy().unwrap_or(plan)
    }
}

/// The stores `plan`'s scans read, when it may run again from a reset copy
/// (see the module documentation); `None` otherwise.
fn reusable(plan: &Arc<dyn ExecutionPlan>) -> Option<Vec<TableStore>> {
    let mut stores = Vec::new();
    let mut fits = true;
    let _ = plan.apply(|node| {
        fits = REUSABLE.contains(&node.name()) && !has_dynamic_filter(node);
        if let Some(scan) = node.downcast_ref::<WideScanExec>() {
            stores.push(scan.parts().0.clone());
        }
        Ok(match fits {
            true => TreeNodeRecursion::Continue,
            false => TreeNodeRecursion::Stop,
        })
    });
    fits.then_some(stores)
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
    use crate::{Db, Error};

    /// Which plans are kept: those of scans, filters, aggregates, unions
    /// and full sorts; not a TopK (it makes a dynamic filter), a join or a
    /// subquery (made a join).
    #[tokio::test]
    async fn plans_with_state_between_runs_are_not_kept() -> crate::Result<()> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?;
        let db = Db::open(dir.path())?;
        let session = db.session();
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
}
