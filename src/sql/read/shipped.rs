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

use std::collections::BTreeMap;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanView {
    /// The history view, with at most this many versions per column.
    pub history: Option<Option<usize>>,
    /// The table as it was at this time (µs).
    pub as_of: Option<i64>,
}

/// One task of a scan that workers run.
pub struct WorkerTask {
    /// The worker that runs it; `None` for a task that reads nothing (a
    /// stage may have more tasks than the scan has workers).
    pub worker: Option<String>,
    /// The tablets it reads, for messages.
    pub tablets: Vec<String>,
    /// Its plan: the scan reading those tablets only, one partition per
    /// tablet (padded with empty ones, so that every task has as many).
    pub plan: Arc<dyn ExecutionPlan>,
}

/// The tasks of `plan` when it is a scan that workers can run: one per
/// worker the scan's keys reach (in the workers' order), then empty ones
/// up to `task_count`. `None` when `plan` is not such a scan.
pub fn worker_tasks(plan: &Arc<dyn ExecutionPlan>, task_count: usize) -> Option<Vec<WorkerTask>> {
    let scan = plan.downcast_ref::<WideScanExec>()?;
    scan.shippable?;
    let (_, request, _, _) = scan.parts();
    if request.limit.is_some() {
        return None;
    }
    let reached = scan.reached()?;
    let mut by_worker: BTreeMap<&str, Vec<&Tablet>> = BTreeMap::new();
    for tablet in reached {
        by_worker
            .entry(tablet.worker.as_deref()?)
            .or_default()
            .push(tablet);
    }
    let width = by_worker.values().map(Vec::len).max()?;
    let task = |worker: Option<&str>, tablets: &[&Tablet]| {
        let mut partitions: Vec<RowSet> = tablets
            .iter()
            .map(|tablet| request.keys.intersect(&keys_of(tablet)).to_row_set())
            .collect();
        partitions.resize(width, RowSet::default());
        let ids: Vec<String> = tablets.iter().map(|t| t.id.to_string()).collect();
        let mut variant = scan.clone().with_partitions(partitions);
        variant.task = Some(match worker {
            Some(worker) => format!("tablets {} on {worker}", ids.join(", ")),
            None => "no tablets".to_string(),
        });
        WorkerTask {
            worker: worker.map(str::to_string),
            tablets: ids,
            plan: Arc::new(variant),
        }
    };
    let mut tasks: Vec<WorkerTask> = by_worker
        .iter()
        .map(|(worker, tablets)| task(Some(worker), tablets))
        .collect();
    while tasks.len() < task_count {
        tasks.push(task(None, &[]));
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
    view: ScanView,
    projection: Vec<usize>,
    keys: KeySet,
    partitions: Vec<RowSet>,
    task: Option<String>,
}

/// The description of `plan` a worker runs it from ([`held_scan`]);
/// `None` when `plan` is not one of the tasks [`worker_tasks`] made (any
/// other scan reads tablets a worker does not hold).
pub fn ship_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<Result<Vec<u8>>> {
    let scan = plan.downcast_ref::<WideScanExec>()?;
    let view = scan.shippable?;
    scan.task.as_ref()?;
    let (store, request, partitions, _) = scan.parts();
    let layout = &store.layout;
    let shipped = ShippedScan {
        table: layout.id,
        name: layout.name.clone(),
        spec: layout.spec.clone(),
        view,
        projection: request.projection.clone(),
        keys: request.keys.clone(),
        partitions: partitions.to_vec(),
        task: scan.task.clone(),
    };
    Some(serde_json::to_vec(&shipped).map_err(|e| DataFusionError::External(Box::new(e))))
}

/// The scan `shipped` describes ([`ship_scan`]), over the tablets `db`
/// holds for its master.
pub fn held_scan(db: &Db, shipped: &[u8]) -> Result<Arc<dyn ExecutionPlan>> {
    let shipped: ShippedScan =
        serde_json::from_slice(shipped).map_err(|e| DataFusionError::External(Box::new(e)))?;
    let store = crate::db::held_store(db, shipped.table, shipped.name, shipped.spec)
        .map_err(crate::sql::error::to_df)?;
    let table = WideTable::of_store(store, false, None).with_view(shipped.view);
    let (filter, keep) = table.cells_for(&shipped.projection);
    let request = ScanRequest {
        projection: shipped.projection,
        keys: shipped.keys,
        filter,
        keep,
        limit: None,
        row_per_row: true,
    };
    let mut scan =
        WideScanExec::try_new(table.store().clone(), Arc::clone(table.shape()), request, 1)?
            .with_partitions(shipped.partitions);
    scan.task = shipped.task;
    Ok(Arc::new(scan))
}
