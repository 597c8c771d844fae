//! Scans a cluster's workers run. A scan whose keys reach only tablets
//! that workers hold becomes one task per worker, each reading the
//! tablets its worker holds ([`worker_tasks`]). The master ships a task as
//! a description ([`ship_scan`]): the table as declared, the view read,
//! the output columns and the key ranges of its partitions. The worker
//! rebuilds the same scan over the trees it holds the tablets in
//! ([`held_scan`]), with the same pushdown (key ranges, locality groups,
//! decoded cells, versions), so filters, partial aggregates and
//! projections above it run there too. Splitting a plan into tasks and
//! sending them is datafusion-distributed's work, wired in by the server;
//! this module only knows scans.
//!
//! A scan that reaches a tablet this process serves, or that has a
//! `LIMIT`, stays here: it reads the workers' tablets through the storage
//! routes, as writes do.

use std::ops::Bound;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::physical_plan::ExecutionPlan;
use serde::{Deserialize, Serialize};

use crate::catalog::Tablet;
use crate::ids::TableId;
use crate::sql::read::pushdown::KeySet;
use crate::sql::read::scan::{ScanRequest, WideScanExec};
use crate::sql::read::table::WideTable;
use crate::table::spec::TableSpec;
use crate::table::RowSet;
use crate::Db;

/// Which view of a table a scan reads (the latest one when both are
/// `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanView {
    /// The history view, with at most this many versions per column
    /// (`Some(None)`: all of them).
    pub history: Option<Option<usize>>,
    /// The table as it was at this time (µs).
    pub as_of: Option<i64>,
}

/// [`ScanView`] as shipped: JSON has one `null` for both `None` and
/// `Some(None)`, which would turn the history of every version into the
/// latest view.
#[derive(Serialize, Deserialize)]
struct ShippedView {
    history: bool,
    versions: Option<usize>,
    as_of: Option<i64>,
}

impl From<ScanView> for ShippedView {
    fn from(view: ScanView) -> Self {
        ShippedView {
            history: view.history.is_some(),
            versions: view.history.flatten(),
            as_of: view.as_of,
        }
    }
}

impl From<ShippedView> for ScanView {
    fn from(view: ShippedView) -> Self {
        ScanView {
            history: view.history.then_some(view.versions),
            as_of: view.as_of,
        }
    }
}

/// One task of a scan that workers run.
pub struct WorkerTask {
    /// The table it reads, for messages.
    pub table: String,
    /// The worker that runs it; `None` for a task that reads nothing (a
    /// stage may have more tasks than the scan has workers).
    pub worker: Option<String>,
    /// The tablets it reads, for messages.
    pub tablets: Vec<String>,
    /// Its plan: the scan with the partitions of its worker's tablets, the
    /// others empty, so that every task has the scan's partitions.
    pub plan: Arc<dyn ExecutionPlan>,
}

/// One partition per tablet that `keys` reach, when all of them are on
/// workers: the partitions of a scan that workers can run.
pub(super) fn tablet_partitions(tablets: &[Tablet], keys: &KeySet) -> Option<Vec<RowSet>> {
    let reached = super::scan::reached(tablets, keys);
    if reached.is_empty() || reached.iter().any(|t| t.worker.is_none()) {
        return None;
    }
    Some(
        reached
            .iter()
            .map(|tablet| keys.intersect(&keys_of(tablet)).to_row_set())
            .collect(),
    )
}

/// The tasks of `plan` when it is a scan that workers can run: one per
/// worker the scan's keys reach (in the workers' order), then empty ones
/// up to `task_count`. `None` when `plan` is not such a scan.
pub fn worker_tasks(plan: &Arc<dyn ExecutionPlan>, task_count: usize) -> Option<Vec<WorkerTask>> {
    let scan = plan.downcast_ref::<WideScanExec>()?;
    scan.shippable?;
    let (store, request, partitions, tablets) = scan.parts();
    if request.limit.is_some() || scan.task.is_some() {
        return None;
    }
    // Only a scan planned with a partition per tablet: a task's
    // partitions must be the scan's, for the plan above it.
    let per_tablet = tablet_partitions(tablets?, &request.keys)?;
    if per_tablet != partitions {
        return None;
    }
    let reached = scan.reached()?;
    let mut workers: Vec<&str> = reached.iter().filter_map(|t| t.worker.as_deref()).collect();
    workers.sort_unstable();
    workers.dedup();
    let table = store.layout.name.clone();
    let task = |worker: Option<&str>| {
        let mut ids = Vec::new();
        let partitions = per_tablet
            .iter()
            .zip(&reached)
            .map(|(rows, tablet)| match worker {
                Some(w) if tablet.worker.as_deref() == Some(w) => {
                    ids.push(tablet.id.to_string());
                    rows.clone()
                }
                _ => RowSet::default(),
            })
            .collect();
        let mut variant = scan.clone().with_partitions(partitions);
        variant.worker = worker.map(str::to_string);
        variant.task = Some(match worker {
            Some(worker) => format!("tablets {} on {worker}", ids.join(", ")),
            None => "no tablets".to_string(),
        });
        WorkerTask {
            table: table.clone(),
            worker: worker.map(str::to_string),
            tablets: ids,
            plan: Arc::new(variant),
        }
    };
    let mut tasks: Vec<WorkerTask> = workers.iter().map(|w| task(Some(w))).collect();
    while tasks.len() < task_count {
        tasks.push(task(None));
    }
    Some(tasks)
}

/// The row keys of `tablet`.
fn keys_of(tablet: &Tablet) -> KeySet {
    let end = match &tablet.end {
        Some(end) => Bound::Excluded(end.clone()),
        None => Bound::Unbounded,
    };
    KeySet::from_intervals(vec![(Bound::Included(tablet.start.clone()), end)])
}

/// What a worker needs to run one task of a scan.
#[derive(Serialize, Deserialize)]
struct ShippedScan {
    table: TableId,
    name: String,
    spec: TableSpec,
    view: ShippedView,
    projection: Vec<usize>,
    keys: KeySet,
    partitions: Vec<RowSet>,
    task: String,
    /// The worker that must run it: a task sent elsewhere would read
    /// tablets that worker does not hold.
    worker: Option<String>,
    /// The output schema as the master planned it, which the worker's
    /// scan must have.
    schema: String,
    /// The master's clock (µs) when it sent the task: the worker judges
    /// `max_age` by it, not by its own clock (by its own only for a task
    /// of a master that sends none).
    #[serde(default)]
    now: Option<i64>,
}

/// The description of `plan` a worker runs it from ([`held_scan`]);
/// `None` when `plan` is not one of the tasks [`worker_tasks`] made (any
/// other scan reads tablets a worker does not hold).
pub fn ship_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<Result<Vec<u8>>> {
    let scan = plan.downcast_ref::<WideScanExec>()?;
    let view = scan.shippable?;
    let task = scan.task.clone()?;
    let (store, request, partitions, _) = scan.parts();
    let layout = &store.layout;
    let worker = scan.worker.clone();
    let shipped = ShippedScan {
        table: layout.id,
        name: layout.name.clone(),
        spec: layout.spec.clone(),
        view: view.into(),
        projection: request.projection.clone(),
        keys: request.keys.clone(),
        partitions: partitions.to_vec(),
        task,
        worker,
        schema: format!("{:?}", scan.schema()),
        now: Some(request.now.unwrap_or_else(crate::clock::wall_micros)),
    };
    Some(serde_json::to_vec(&shipped).map_err(|e| DataFusionError::External(Box::new(e))))
}

/// The scan `shipped` describes ([`ship_scan`]), over the tablets `db`
/// holds for its master; `worker` is the name of this worker.
pub fn held_scan(db: &Db, shipped: &[u8], worker: &str) -> Result<Arc<dyn ExecutionPlan>> {
    let shipped: ShippedScan =
        serde_json::from_slice(shipped).map_err(|e| DataFusionError::External(Box::new(e)))?;
    if shipped.worker.as_deref().is_some_and(|w| w != worker) {
        return Err(DataFusionError::Execution(format!(
            "a task of the scan of {} ({}) was sent to worker {worker}",
            shipped.name, shipped.task
        )));
    }
    let store = crate::db::held_store(db, shipped.table, shipped.name.clone(), shipped.spec)
        .map_err(crate::sql::error::to_df)?;
    let table = WideTable::of_store(store, false, None).with_view(shipped.view.into());
    let (filter, keep) = table.cells_for(&shipped.projection);
    let request = ScanRequest {
        projection: shipped.projection,
        keys: shipped.keys,
        filter,
        keep,
        limit: None,
        row_per_row: true,
        now: shipped.now,
    };
    let mut scan =
        WideScanExec::try_new(table.store().clone(), Arc::clone(table.shape()), request, 1)?
            .with_partitions(shipped.partitions);
    let schema = format!("{:?}", scan.schema());
    if schema != shipped.schema {
        return Err(DataFusionError::Execution(format!(
            "the scan of {} reads {schema} here, but its master planned {}",
            shipped.name, shipped.schema
        )));
    }
    scan.task = Some(shipped.task);
    Ok(Arc::new(scan))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::catalog::TableProvider;
    use datafusion::execution::TaskContext;
    use datafusion::physical_plan::{collect, ExecutionPlan};

    use super::{held_scan, ship_scan, ScanView};
    use crate::ids::TableId;
    use crate::sql::read::pushdown::KeySet;
    use crate::sql::read::scan::{ScanRequest, WideScanExec};
    use crate::sql::read::table::WideTable;
    use crate::Db;

    /// Copies every row of table `t` into the tree a worker holds it in
    /// (the database plays master and worker); the table's id.
    fn hold_all(db: &Db) -> TableId {
        let id = db.open_table("default", "public", "t").unwrap().id();
        crate::db::hold_own_rows(db, id).unwrap();
        id
    }

    /// The rows of `t` a worker returns for a whole-table task that its
    /// master shipped with the scan's `now`.
    async fn rows_seen(db: &Db, id: TableId, now: Option<i64>) -> usize {
        let spec = db
            .open_table("default", "public", "t")
            .unwrap()
            .spec()
            .unwrap();
        let store = crate::db::held_store(db, id, "t".into(), spec).unwrap();
        let table = WideTable::of_store(store, false, None);
        let projection: Vec<usize> = (0..table.schema().fields().len()).collect();
        let (filter, keep) = table.cells_for(&projection);
        let request = ScanRequest {
            projection,
            keys: KeySet::all(),
            filter,
            keep,
            limit: None,
            row_per_row: true,
            now,
        };
        let mut scan =
            WideScanExec::try_new(table.store().clone(), Arc::clone(table.shape()), request, 1)
                .unwrap();
        scan.shippable = Some(ScanView {
            history: None,
            as_of: None,
        });
        scan.task = Some("task 0".into());
        let sent: Arc<dyn ExecutionPlan> = Arc::new(scan);
        let before = crate::clock::wall_micros();
        let shipped = ship_scan(&sent).unwrap().unwrap();
        let after = crate::clock::wall_micros();
        // It carries the time it was given, or the master's clock.
        let carried = serde_json::from_slice::<super::ShippedScan>(&shipped)
            .unwrap()
            .now
            .expect("a time");
        match now {
            Some(now) => assert_eq!(carried, now),
            None => assert!((before..=after).contains(&carried), "{carried}"),
        }
        let plan = held_scan(db, &shipped, "w1").unwrap();
        let batches = collect(plan, Arc::new(TaskContext::default()))
            .await
            .unwrap();
        batches.iter().map(|b| b.num_rows()).sum()
    }

    #[tokio::test]
    async fn a_worker_judges_max_age_by_the_clock_of_the_master_that_sent_the_task() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        db.session()
            .run(
                "CREATE TABLE t (_key VARCHAR PRIMARY KEY, v BIGINT) WITH ('cf.ttl' = '1h'); \
                 INSERT INTO t VALUES ('a', 1), ('b', 2)",
            )
            .await
            .unwrap();
        let id = hold_all(&db);
        let now = crate::clock::wall_micros();
        assert_eq!(rows_seen(&db, id, Some(now)).await, 2);
        // A master whose clock is two hours ahead of this worker's: the
        // rows are past their hour there, so they are here too.
        let hours = 3_600_000_000;
        assert_eq!(rows_seen(&db, id, Some(now + 2 * hours)).await, 0);
        // A scan planned without a time ships the master's clock.
        assert_eq!(rows_seen(&db, id, None).await, 2);
    }
}
