//! The scan plan: reads key ranges of a table's needed locality groups and
//! streams record batches.
//!
//! Each partition is one set of key ranges, read on a blocking thread (sled
//! iteration must not stall the async executor) and handed over through a
//! channel of two batches, so memory stays bounded whatever the table size.
//! Large range scans are split into key ranges by interpolating between the
//! first and last key: the same ranges a distributed executor could
//! schedule.

use std::fmt;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    ReplaceChildrenOptions,
};

use crate::catalog::Tablet;
use crate::sql::error::to_df;
use crate::sql::read::pushdown::{describe, Interval, KeySet};
use crate::sql::read::shape::{BatchBuilder, RowsToBatches, Shape};
use crate::sql::read::shipped::ScanView;
use crate::table::KeptCells;
use crate::table::{Filter, ReadOptions, RowRange, RowSet, Scanner, TableStore};

/// Makes the row→batch builder of each partition.
pub type MakeBuilder = Arc<dyn Fn() -> Result<Box<dyn RowsToBatches>> + Send + Sync>;

/// What a scan reads, decided at planning time.
#[derive(Debug, Clone)]
pub struct ScanRequest {
    /// The output columns (indexes into the shape).
    pub projection: Vec<usize>,
    /// The keys to read.
    pub keys: KeySet,
    /// The cell filter (families of the projection, latest version).
    pub filter: Filter,
    /// The cells decoded of the families the filter reads (all when
    /// `None`); see [`WideTable::cells_for`](crate::sql::read::table::WideTable::cells_for).
    pub keep: Option<KeptCells>,
    /// At most this many output rows.
    pub limit: Option<usize>,
    /// Whether an output row is a table row (the limit then also stops the
    /// table scan); false when a table row makes several (the cells view).
    pub row_per_row: bool,
    /// The time (µs) a family's `max_age` is judged at: on a worker, the
    /// clock of the master that sent the task, so that a version one
    /// process hides is hidden on every worker; `None`: this process's
    /// clock when the scan starts.
    pub now: Option<i64>,
}

/// The methods of an execution plan without children.
macro_rules! leaf_plan_methods {
    () => {
        fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
            Vec::new()
        }

        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
        ) -> Result<TreeNodeRecursion> {
            Ok(TreeNodeRecursion::Continue)
        }

        fn replace_children(
            self: Arc<Self>,
            _children: Vec<Arc<dyn ExecutionPlan>>,
            _options: ReplaceChildrenOptions,
        ) -> Result<Arc<dyn ExecutionPlan>> {
            Ok(self)
        }

        fn with_new_children(
            self: Arc<Self>,
            _children: Vec<Arc<dyn ExecutionPlan>>,
        ) -> Result<Arc<dyn ExecutionPlan>> {
            Ok(self)
        }
    };
}
pub(crate) use leaf_plan_methods;

/// About the most bytes of values one record batch that widesql makes (a
/// scan's, an import's) holds: the session's batch size counts rows, and
/// 8,192 rows of 200 KB values made batches of 1.6 GB.
pub const RECORD_BATCH_BYTES: usize = 16 << 20;

/// Scans a widesql table.
#[derive(Clone)]
pub struct WideScanExec {
    store: TableStore,
    request: ScanRequest,
    partitions: Vec<RowSet>,
    schema: SchemaRef,
    make_builder: MakeBuilder,
    view: &'static str,
    properties: Arc<PlanProperties>,
    /// The tablets of a table that was split, which `EXPLAIN` names.
    tablets: Option<Arc<[Tablet]>>,
    /// The view of the table it reads, when a worker can run it on the
    /// tablets it holds (see [`crate::sql::read::shipped`]).
    pub(super) shippable: Option<ScanView>,
    /// What `EXPLAIN` says of the tablets a worker's task reads.
    pub(super) task: Option<String>,
    /// The worker that runs this task.
    pub(super) worker: Option<String>,
}

impl fmt::Debug for WideScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WideScanExec")
            .field("table", &self.store.layout.name)
            .field("request", &self.request)
            .field("partitions", &self.partitions.len())
            .finish()
    }
}

/// How many scans in `plan` read the table `id`: a statement whose input
/// reads the table it writes only through its own target scan may write
/// while it reads (see [`crate::sql::dml::apply::apply_input`]). A
/// distributed leaf (a cluster's scan split into the tasks of its
/// workers) keeps its scans out of the plan's children, so it counts as
/// reading every table.
pub fn scans_of(plan: &Arc<dyn ExecutionPlan>, id: crate::ids::TableId) -> usize {
    let mut scans = 0;
    let visited = plan.apply(|node| {
        if let Some(scan) = node.downcast_ref::<WideScanExec>() {
            scans += usize::from(scan.store.layout.id == id);
        } else if node.name() == "DistributedLeafExec" {
            scans = usize::MAX;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    // The visitor never fails; if the walk did, assume every reader.
    visited.map_or(usize::MAX, |_| scans)
}

impl WideScanExec {
    /// Plans a scan of the latest (or history) view of `shape`, split into
    /// at most `target_partitions` key ranges.
    pub fn try_new(
        store: TableStore,
        shape: Arc<Shape>,
        request: ScanRequest,
        target_partitions: usize,
    ) -> Result<Self> {
        let projection = request.projection.clone();
        let table = store.layout.name.clone();
        let view = if shape.history { "history" } else { "latest" };
        let make_builder: MakeBuilder = Arc::new(move || {
            Ok(Box::new(BatchBuilder::new(
                Arc::clone(&shape),
                projection.clone(),
                table.clone(),
            )?) as Box<dyn RowsToBatches>)
        });
        Self::with_builder(store, request, make_builder, view, target_partitions)
    }

    /// Plans a scan whose rows `make_builder` turns into batches.
    pub fn with_builder(
        store: TableStore,
        request: ScanRequest,
        make_builder: MakeBuilder,
        view: &'static str,
        target_partitions: usize,
    ) -> Result<Self> {
        let schema = make_builder()?.schema();
        let partitions = if request.limit.is_some() || target_partitions < 2 {
            vec![request.keys.to_row_set()]
        } else {
            split(&store, &request.keys, &request.filter, target_partitions)?
        };
        let properties = Arc::new(
            PlanProperties::new(
                EquivalenceProperties::new(Arc::clone(&schema)),
                Partitioning::UnknownPartitioning(partitions.len()),
                EmissionType::Incremental,
                Boundedness::Bounded,
            )
            // The stream is a tokio channel, which yields to the scheduler.
            .with_scheduling_type(SchedulingType::Cooperative),
        );
        Ok(Self {
            store,
            request,
            partitions,
            schema,
            make_builder,
            view,
            properties,
            tablets: None,
            shippable: None,
            task: None,
            worker: None,
        })
    }

    /// The same scan reading `partitions`, one per output partition.
    pub(super) fn with_partitions(mut self, partitions: Vec<RowSet>) -> Self {
        let properties = PlanProperties::clone(&self.properties)
            .with_partitioning(Partitioning::UnknownPartitioning(partitions.len()));
        self.properties = Arc::new(properties);
        self.partitions = partitions;
        self
    }

    /// The scan's store, request, view, tablets and partitions.
    pub(crate) fn parts(&self) -> (&TableStore, &ScanRequest, &[RowSet], Option<&[Tablet]>) {
        (
            &self.store,
            &self.request,
            &self.partitions,
            self.tablets.as_deref(),
        )
    }

    /// The scan of a table split into `tablets` (`None`: one tablet).
    pub fn with_tablets(mut self, tablets: Option<Arc<[Tablet]>>) -> Self {
        self.tablets = tablets;
        self
    }

    /// `tablets=2 of 3 (local)`: the tablets the scan's keys reach and who
    /// serves them, for a table that was split; `None` otherwise.
    fn tablets_reached(&self) -> Option<String> {
        let tablets = self.tablets.as_deref()?;
        let reached = self.reached()?;
        let servers: std::collections::BTreeSet<&str> = reached
            .iter()
            .map(|t| t.worker.as_deref().unwrap_or("local"))
            .collect();
        Some(format!(
            "tablets={} of {} ({})",
            reached.len(),
            tablets.len(),
            servers.into_iter().collect::<Vec<_>>().join(", ")
        ))
    }

    /// The tablets the scan's keys reach, for a table that was split.
    pub(super) fn reached(&self) -> Option<Vec<&Tablet>> {
        Some(reached(self.tablets.as_deref()?, &self.request.keys))
    }

    /// The locality groups the scan reads.
    fn group_names(&self) -> Vec<String> {
        let layout = &self.store.layout;
        let mut names: Vec<String> = layout
            .families
            .iter()
            .filter(|f| {
                self.request
                    .filter
                    .families
                    .as_ref()
                    .is_none_or(|set| set.contains(&f.name))
            })
            .map(|f| layout.groups[f.group].name.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// The tablets of `tablets` that keys of `keys` may lie in.
pub(super) fn reached<'t>(tablets: &'t [Tablet], keys: &KeySet) -> Vec<&'t Tablet> {
    tablets
        .iter()
        .filter(|tablet| {
            keys.intervals().iter().any(|(low, high)| {
                tablet.overlaps(
                    low.as_ref().map(Vec::as_slice),
                    high.as_ref().map(Vec::as_slice),
                )
            })
        })
        .collect()
}

/// Scans of fewer rows are not split, unless they read
/// [`SPLIT_MIN_ENTRIES`].
const SPLIT_MIN_ROWS: usize = 4096;

/// Scans whose sample of [`SPLIT_MIN_ROWS`] rows reads fewer storage
/// entries are not split either; a large value takes an entry per 2 KiB, so
/// this is about 32 MiB of them. A scan left as one partition is spread
/// over the session's cores by DataFusion's round-robin repartition, which
/// holds batches while its consumers lag: 3,750 rows of 256 KiB peaked at
/// 1.6 GiB resident in one partition and at 0.6 GiB in two (benchmark W9).
/// Entries, not the sample's bytes: the sample reads one cell of each row,
/// and reading whole rows made planning W4's scan cost 25 ms more.
const SPLIT_MIN_ENTRIES: u64 = 16_384;

/// A scan run while planning, on the async path: it gives up after
/// [`SPLIT_MIN_ROWS`] rows that its filter skips (a read of the past before
/// the rows existed skips them all), so planning never reads a whole table.
/// A scan that gave up plans one partition.
fn planning_scan(store: &TableStore, rows: &RowSet, options: ReadOptions) -> Scanner {
    let skipped = AtomicUsize::new(0);
    store
        .scan(rows, options)
        .with_stop(move || skipped.fetch_add(1, Ordering::Relaxed) >= SPLIT_MIN_ROWS)
}

/// Splits the key set into up to `n` partitions of similar key-space width.
/// The first and last keys are found with the scan's own filter, so only
/// the locality groups the scan reads are touched. A split found before
/// is used again while no batch wrote the table
/// ([`SplitMemo`](crate::table::splits::SplitMemo)), unless the table hides
/// versions by age.
fn split(store: &TableStore, keys: &KeySet, filter: &Filter, n: usize) -> Result<Vec<RowSet>> {
    let single_keys = keys
        .intervals()
        .iter()
        .all(|(lo, hi)| matches!((lo, hi), (Bound::Included(a), Bound::Included(b)) if a == b));
    // Only scans open on one side may be large enough to split; a bounded
    // key range is usually selective, and sampling it would read it twice.
    let open_ended = keys
        .intervals()
        .first()
        .is_some_and(|(lo, hi)| matches!(lo, Bound::Unbounded) || matches!(hi, Bound::Unbounded));
    if single_keys || keys.intervals().len() != 1 || !open_ended {
        return Ok(vec![keys.to_row_set()]);
    }
    let row_set = keys.to_row_set();
    // Rows that age out leave no batch behind: a table that hides versions
    // by age is sampled every time.
    if store.layout.hides_by_age() {
        return sample_split(store, keys, row_set, filter, n);
    }
    // Read before the sample: a batch that writes meanwhile moves it, and
    // the next scan samples again.
    let epoch = store.layout.write_epoch();
    let splits = &store.layout.splits;
    if let Some(partitions) = splits.get(&row_set, filter, n, epoch) {
        return Ok(partitions);
    }
    let partitions = sample_split(store, keys, row_set.clone(), filter, n)?;
    splits.put(row_set, filter.clone(), n, epoch, partitions.clone());
    Ok(partitions)
}

/// [`split`] of an open-ended key range, found by reading the table: a
/// sample of its rows, and its first and last keys.
fn sample_split(
    store: &TableStore,
    keys: &KeySet,
    row_set: RowSet,
    filter: &Filter,
    n: usize,
) -> Result<Vec<RowSet>> {
    let edge = |reverse: bool| -> Result<Option<Vec<u8>>> {
        let options = ReadOptions::new()
            .with_filter(filter.clone())
            .with_row_limit(1)
            .with_reverse(reverse);
        Ok(planning_scan(store, &row_set, options)
            .next_row()
            .map_err(to_df)?
            .map(|r| r.key))
    };
    // A small scan stays one partition: splitting gains nothing there, and
    // one partition returns rows in key order (insertion order for
    // generated keys), which scripts written for in-memory tables expect.
    let options = ReadOptions::new()
        .with_filter(filter.clone().with_cells_per_row_limit(1))
        .with_row_limit(SPLIT_MIN_ROWS);
    let entries_read = || -> u64 { store.layout.groups.iter().map(|g| g.tree.keys_read()).sum() };
    let before = entries_read();
    let mut sample = planning_scan(store, &row_set, options);
    let mut rows = 0;
    while sample.next_raw().map_err(to_df)?.is_some() {
        rows += 1;
        if entries_read().saturating_sub(before) >= SPLIT_MIN_ENTRIES {
            break;
        }
    }
    let entries = entries_read().saturating_sub(before);
    if rows < SPLIT_MIN_ROWS && entries < SPLIT_MIN_ENTRIES {
        return Ok(vec![row_set]);
    }
    let (Some(first), Some(last)) = (edge(false)?, edge(true)?) else {
        return Ok(vec![row_set]);
    };
    let points = split_points(&first, &last, n);
    if points.is_empty() {
        return Ok(vec![row_set]);
    }
    let mut bounds: Vec<Interval> = Vec::with_capacity(points.len() + 1);
    let (lo, hi) = keys.intervals()[0].clone();
    let mut start = lo;
    for p in points {
        bounds.push((start, Bound::Excluded(p.clone())));
        start = Bound::Included(p);
    }
    bounds.push((start, hi));
    Ok(bounds
        .into_iter()
        .map(|(start, end)| RowSet::range(RowRange { start, end }))
        .collect())
}

/// `n - 1` keys between `first` and `last`, spread evenly over the 8 bytes
/// after their common prefix.
fn split_points(first: &[u8], last: &[u8], n: usize) -> Vec<Vec<u8>> {
    let common = first.iter().zip(last).take_while(|(a, b)| a == b).count();
    let number = |k: &[u8]| -> u64 {
        let mut bytes = [0u8; 8];
        for (i, b) in k.iter().skip(common).take(8).enumerate() {
            bytes[i] = *b;
        }
        u64::from_be_bytes(bytes)
    };
    let (a, b) = (number(first), number(last));
    if b <= a {
        return Vec::new();
    }
    let step = (b - a) / n as u64;
    if step == 0 {
        return Vec::new();
    }
    (1..n as u64)
        .map(|i| {
            let mut key = first[..common].to_vec();
            key.extend_from_slice(&(a + step * i).to_be_bytes());
            while key.len() > common + 1 && key.last() == Some(&0) {
                key.pop();
            }
            key
        })
        .collect()
}

impl DisplayAs for WideScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let view = match self.view {
            "latest" => String::new(),
            other => format!(" ({other})"),
        };
        write!(
            f,
            "WideScanExec: table={}{view}, keys={}, groups=[{}]",
            self.store.layout.name,
            if self.request.keys.is_all() {
                "all".to_string()
            } else {
                describe(&self.request.keys)
            },
            self.group_names().join(", ")
        )?;
        if let Some(limit) = self.request.limit {
            write!(f, ", limit={limit}")?;
        }
        write!(f, ", partitions={}", self.partitions.len())?;
        if let Some(task) = &self.task {
            return write!(f, ", {task}");
        }
        match self.tablets_reached() {
            Some(tablets) => write!(f, ", {tablets}"),
            None => Ok(()),
        }
    }
}

impl ExecutionPlan for WideScanExec {
    fn name(&self) -> &'static str {
        "WideScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    leaf_plan_methods!();

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let rows = self.partitions.get(partition).cloned().ok_or_else(|| {
            DataFusionError::Internal(format!("WideScanExec has no partition {partition}"))
        })?;
        let batch_size = context.session_config().batch_size().max(1);
        let mut batch_bytes = 0;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(2);
        let store = self.store.clone();
        let mut builder = (self.make_builder)()?;
        // Partitions already keep every core busy; a second thread per
        // partition only pays when there is one (benchmark W5).
        let mut options = ReadOptions::new()
            .with_filter(self.request.filter.clone())
            .with_read_ahead(self.partitions.len() == 1);
        let keep = self.request.keep.clone();
        if self.request.row_per_row {
            options.row_limit = self.request.limit;
        }
        let mut left = self.request.limit.unwrap_or(usize::MAX);
        let now = self.request.now;
        tokio::task::spawn_blocking(move || {
            let send = |batch: Result<RecordBatch>| tx.blocking_send(batch).is_ok();
            // A dropped stream (a cancelled query, a satisfied LIMIT above)
            // ends the scan at the next row, also among rows it skips.
            let consumer = tx.clone();
            let mut scanner = store
                .scan_at(&rows, options, now)
                .with_stop(move || consumer.is_closed());
            if let Some(keep) = keep {
                scanner = scanner.keeping(keep);
            }
            while left > 0 {
                if tx.is_closed() {
                    return;
                }
                match scanner.next_raw() {
                    Ok(Some(row)) => {
                        match builder.push(row) {
                            Ok(made) => left = left.saturating_sub(made),
                            Err(e) => {
                                send(Err(e));
                                return;
                            }
                        }
                        batch_bytes += row.bytes();
                        let full = builder.len() >= batch_size
                            || (batch_bytes >= RECORD_BATCH_BYTES && !builder.is_empty());
                        if full {
                            batch_bytes = 0;
                            if !send(builder.finish()) {
                                return; // the consumer went away (LIMIT satisfied)
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        send(Err(to_df(e)));
                        return;
                    }
                }
            }
            if !builder.is_empty() {
                send(builder.finish());
            }
        });
        let stream =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::split_points;

    #[test]
    fn split_points_are_ordered_and_between() {
        let points = split_points(b"com.a", b"com.z", 4);
        assert_eq!(points.len(), 3);
        assert!(points.windows(2).all(|w| w[0] < w[1]));
        assert!(
            points[0].as_slice() > b"com.a".as_slice()
                && points[2].as_slice() < b"com.z".as_slice()
        );
        assert!(split_points(b"same", b"same", 4).is_empty());
    }
}
