//! The physical plan of a query shape, kept with its cached plan and
//! copied for each run by DataFusion's [`reset_plan_states`]. A repeated
//! `SELECT 1`, `SELECT count(*) FROM t` or `SELECT … WHERE n = 5` then
//! skips physical planning and its optimiser (`EnsureRequirements`, the
//! projection's properties, filter pushdown): over half of a cached
//! `SELECT 1`'s time before (`bench/RESULTS.md`).
//!
//! A plan is kept only when a reset copy of it runs as a new plan would:
//! - every operator is one of [`REUSABLE`]: DataFusion's operators whose
//!   reset leaves nothing of an earlier run (their metrics and per-run
//!   state are made new), and widesql's scan, which reads the store when
//!   it runs;
//! - no dynamic filter: a TopK sort's, a min/max aggregate's or a join's
//!   filter holds the bounds of the run that filled it, which would filter
//!   the rows of the next (DataFusion's own limit for this reuse);
//! - joins, subqueries evaluated while running and recursive queries are
//!   not on the list.
//!
//! A shape with parameters keeps a generic plan ([`generic`](super::generic)),
//! whose copies take each run's values.
//!
//! The plan belongs to the cache entry, so DDL (a new catalog generation)
//! drops it with the logical plan. It is planned again, and kept in place
//! of the old one, once a batch wrote a table it scans: its scans' split
//! into partitions was found for the table's size then, and a plan kept
//! while the table was empty would read a large one in one partition. A
//! session whose settings for physical planning differ from the kept
//! plan's (its own `target_partitions`) plans its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::execution::SessionState;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::ExecutionPlan;

use super::generic::{go_on_while, values_only_in_filters, with_values};
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
pub(super) struct PhysicalMemo {
    kept: Mutex<Option<Kept>>,
    /// Whether the shape's generic plan was found not to be kept: what
    /// decides it (its operators, where its values stand) is the same for
    /// every plan of the shape.
    refused: AtomicBool,
}

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
    /// A fresh copy of the kept plan with `values` for its parameters, for
    /// a run with `settings`; `None` when there is none, it was planned
    /// with other settings, a table it reads was written since, or a value
    /// is not of its parameter's type.
    pub(super) fn copy(
        &self,
        settings: Settings,
        values: &[ScalarAndMetadata],
    ) -> Option<Arc<dyn ExecutionPlan>> {
        let plan = {
            let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            let kept = kept.as_ref()?;
            if kept.settings != settings || !kept.is_current() {
                return None;
            }
            Arc::clone(&kept.plan)
        };
        if values.is_empty() {
            return reset_plan_states(plan).ok();
        }
        plan.transform_up(|node| {
            let rebuilt = match node.downcast_ref::<FilterExec>() {
                Some(filter) => with_values(filter.predicate(), values, &filter.input().schema())?
                    .map(|predicate| {
                        FilterExecBuilder::from(filter)
                            .with_predicate(predicate)
                            .build()
                    })
                    .transpose()?,
                None => None,
            };
            let node = match rebuilt {
                Some(filter) => Arc::new(filter),
                None => node,
            };
            Ok(Transformed::yes(node.reset_state()?))
        })
        .map(|t| t.data)
        .ok()
    }

    /// Whether the shape's generic plan was found not to be kept.
    pub(super) fn refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    /// Keeps `plan`, the generic plan ([`generic`](super::generic::generic)) of a shape whose
    /// parameters stand in its logical plan as often as `places` says,
    /// planned with `settings`, when it may run again from a copy; true
    /// when it is kept, or a current plan was kept already.
    pub(super) fn keep(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        settings: Settings,
        places: &[usize],
    ) -> bool {
        let scans = match reusable(&plan) {
            Some(scans) if values_only_in_filters(&plan, places) => scans,
            _ => {
                self.refused.store(true, Ordering::Relaxed);
                return false;
            }
        };
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if !kept.as_ref().is_some_and(Kept::is_current) {
            *kept = Some(Kept {
                plan,
                scans,
                settings,
            });
        }
        true
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
        Ok(go_on_while(fits))
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
        Ok(go_on_while(!found))
    });
    found
}

#[cfg(test)]
mod tests {
    use super::super::eligibility::exactly_as;
    use super::super::generic::{generic, parameter_places};
    use super::*;
    use crate::{Db, Error, Session};
    use datafusion::arrow::datatypes::FieldRef;
    use datafusion::common::{ParamValues, ScalarValue};
    use datafusion::logical_expr::LogicalPlan;

    /// The error of a test that did not get `what`.
    fn missing(what: &str) -> Error {
        Error::Sql(crate::sql::SqlError::Invalid(format!("no {what}")))
    }

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
        assert!(memo.copy(settings, &[]).is_none(), "nothing kept yet");
        let first = plan().await?;
        assert!(memo.keep(Arc::clone(&first), settings, &[]));
        let copy = memo.copy(settings, &[]).ok_or_else(|| missing("a copy"))?;
        assert!(
            !Arc::ptr_eq(&copy, &first),
            "the kept plan never runs itself"
        );
        let other = Settings {
            target_partitions: settings.target_partitions + 1,
            ..settings
        };
        assert!(
            memo.copy(other, &[]).is_none(),
            "other settings plan their own"
        );

        session.run("INSERT INTO t VALUES ('a', 1)").await?;
        assert!(memo.copy(settings, &[]).is_none(), "the table was written");
        let second = plan().await?;
        memo.keep(Arc::clone(&second), settings, &[]);
        let kept = memo.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = kept.as_ref().map(|k| Arc::clone(&k.plan));
        assert!(kept.is_some_and(|k| Arc::ptr_eq(&k, &second)), "kept anew");
        Ok(())
    }

    /// The optimised plan of `sql` (with parameters) and its parameters.
    async fn optimised(
        session: &Session,
        sql: &str,
    ) -> crate::Result<(LogicalPlan, Vec<FieldRef>)> {
        let state = session.ctx.state();
        let logical = state.optimize(&state.create_logical_plan(sql).await?)?;
        let mut fields = logical.get_parameter_fields()?;
        let parameters = (1..=fields.len())
            .map(|n| fields.remove(&format!("${n}")).flatten())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| missing("a parameter's type"))?;
        Ok((logical, parameters))
    }

    /// `plan`'s physical plan as the front door makes it: the optimised
    /// plan is not optimised again (which would fold `1 + 2`).
    async fn physical(
        session: &Session,
        plan: &LogicalPlan,
    ) -> crate::Result<Arc<dyn ExecutionPlan>> {
        let state = session.ctx.state();
        Ok(state
            .query_planner()
            .create_physical_plan(plan, &state)
            .await?)
    }

    /// The keys a plan's run returns, in its order.
    async fn keys_of(
        session: &Session,
        plan: Arc<dyn ExecutionPlan>,
    ) -> crate::Result<Vec<String>> {
        use datafusion::arrow::util::display::array_value_to_string;
        let batches = datafusion::physical_plan::collect(plan, session.ctx.task_ctx()).await?;
        let mut keys = Vec::new();
        for batch in &batches {
            for row in 0..batch.num_rows() {
                keys.push(array_value_to_string(batch.column(0), row)?);
            }
        }
        Ok(keys)
    }

    /// A shape with values keeps its generic plan when its values stand
    /// only in filters, and a copy with values answers as a plan made for
    /// them: an `IN` list's set of values included, and where values a
    /// plan was made for would have let the optimiser drop a sort (equal
    /// bounds make a column constant) or a limit (contradictory values
    /// leave no row).
    #[tokio::test]
    async fn a_generic_plan_answers_for_each_value() -> crate::Result<()> {
        let (_dir, _db, session) = open()?;
        session
            .run(
                "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT);
                 INSERT INTO t VALUES ('a', 5), ('b', 1), ('c', 3), ('d', 4), ('e', 2),
                                      ('f', 4), ('g', 4)",
            )
            .await?;
        let settings = Settings::of(&session.ctx.state());
        // (statement, whether its plan is kept, the values of its runs)
        let cases: [(&str, bool, &[&[i64]]); 13] = [
            (
                "SELECT _key FROM t WHERE n = $1 ORDER BY _key",
                true,
                &[&[1], &[4]],
            ),
            (
                "SELECT _key FROM t WHERE n IN ($1, $2) ORDER BY _key",
                true,
                &[&[1, 2], &[3, 4]],
            ),
            (
                "SELECT _key FROM t WHERE n NOT IN ($1, $2) ORDER BY _key",
                true,
                &[&[1, 2], &[3, 4]],
            ),
            // Longer lists stay lists, with a set of their values.
            (
                "SELECT _key FROM t WHERE n IN ($1, $2, $3, $4) ORDER BY _key",
                true,
                &[&[1, 2, 3, 4], &[3, 4, 5, 6]],
            ),
            (
                "SELECT _key FROM t WHERE n * 2 > $1 OR n < $2 ORDER BY _key",
                true,
                &[&[8, 2], &[4, 3]],
            ),
            (
                "SELECT _key FROM t WHERE n > $1 OR n * 3 = $1 ORDER BY _key",
                true,
                &[&[3], &[6]],
            ),
            (
                "SELECT _key FROM t WHERE _key > 'a' AND n IN ($1, $2) ORDER BY _key",
                true,
                &[&[1, 2], &[4, 5]],
            ),
            (
                "SELECT _key FROM t WHERE n BETWEEN $1 AND $2 ORDER BY n, _key",
                true,
                &[&[3, 3], &[1, 5]],
            ),
            (
                "SELECT _key, n FROM t WHERE n = $1 UNION ALL
                 SELECT _key, n FROM t WHERE n = $2 ORDER BY n",
                true,
                &[&[3, 3], &[3, 1]],
            ),
            (
                "SELECT _key FROM t WHERE n = $1 AND n = $2 LIMIT 1",
                true,
                &[&[1, 2], &[4, 4]],
            ),
            (
                "SELECT _key FROM t WHERE _key > 'a' AND n - 1 < $1 ORDER BY _key",
                true,
                &[&[1], &[3]],
            ),
            // A value in the select list.
            (
                "SELECT _key, n + $1 FROM t WHERE n < $2 ORDER BY _key",
                false,
                &[&[1, 2]],
            ),
            // A key bound: the scan takes the value.
            (
                "SELECT _key FROM t WHERE _key > $1 ORDER BY _key",
                false,
                &[],
            ),
        ];
        for (sql, kept, runs) in cases {
            let (logical, parameters) = optimised(&session, sql).await?;
            let memo = PhysicalMemo::default();
            let places = parameter_places(&logical, parameters.len());
            let Some(places) = places else {
                assert!(!kept, "{sql}: a scan takes a parameter");
                continue;
            };
            assert_eq!(
                places.iter().sum::<usize>(),
                sql.matches('$').count(),
                "{sql}"
            );
            let plan = generic(&logical, &parameters).ok_or_else(|| missing("a generic plan"))?;
            assert_eq!(
                memo.keep(physical(&session, &plan).await?, settings, &places),
                kept,
                "{sql}"
            );
            assert_eq!(memo.refused(), !kept, "{sql}");
            for values in runs {
                // Each value of its place's type, as the front door binds.
                let values = values
                    .iter()
                    .zip(&parameters)
                    .map(|(v, field)| exactly_as(ScalarValue::Int64(Some(*v)), field.data_type()))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| missing("a value of its place's type"))?;
                let copy = memo.copy(settings, &values);
                assert_eq!(copy.is_some(), kept, "{sql}");
                let Some(copy) = copy else { continue };
                let bound = logical
                    .clone()
                    .with_param_values(ParamValues::List(values))?;
                let expected = keys_of(&session, physical(&session, &bound).await?).await?;
                let keys = keys_of(&session, copy).await?;
                match sql.contains("LIMIT") {
                    // Which row a limit keeps is not fixed.
                    true => assert_eq!(keys.len(), expected.len(), "{sql}"),
                    false => assert_eq!(keys, expected, "{sql}"),
                }
            }
        }
        Ok(())
    }
}
