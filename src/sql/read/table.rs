//! One widesql table as a DataFusion table: the latest view of each column.
//!
//! Scans push row-key predicates down as key ranges, read only the locality
//! groups of the projected columns, and stop early at a pushed LIMIT.
//! INSERT writes new cell versions through [`crate::sql::dml::sink::WideSink`].
//! DELETE and UPDATE are run by widesql's statement runner
//! ([`crate::sql::Session`]), which evaluates the WHERE clause with
//! DataFusion and then mutates the matching rows; DataFusion's own DML path
//! could hand this provider an empty filter list for a WHERE clause it
//! folded away, so it is refused here rather than taken as "every row".

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::{Session as DfSession, TableProvider};
use datafusion::common::{
    not_impl_err, plan_err, Constraint, Constraints, DFSchema, Result, ScalarValue,
};
use datafusion::datasource::sink::DataSinkExec;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::Tablet;
use crate::db::Db;
use crate::ids::TableId;
use crate::sql::dml::sink::WideSink;
use crate::sql::dml::write::{RowWriter, WriteSettings};
use crate::sql::error::to_df;
use crate::sql::read::pushdown::{push, KeySet};
use crate::sql::read::scan::{scans_of, ScanRequest, WideScanExec};
use crate::sql::read::shape::{Shape, Source};
use crate::sql::read::shipped::{self, ScanView};
use crate::sql::runtime::off_runtime;
use crate::table::KeptCells;
use crate::table::{Filter, TableStore};

/// A widesql table seen by DataFusion.
#[derive(Debug, Clone)]
pub struct WideTable {
    store: TableStore,
    shape: Arc<Shape>,
    /// The primary key (`_key` or the typed key columns), so DataFusion can
    /// use it (functional dependencies, unique lookups).
    constraints: Constraints,
    /// Read the table as it was at this time (µs); `None`: now.
    as_of: Option<i64>,
    /// The history view: every version (or the newest N) of each column.
    history: Option<Option<usize>>,
    /// Column DEFAULT expressions, parsed from the spec on first use.
    defaults: OnceLock<HashMap<String, Expr>>,
    /// Read every locality group whatever the projection (the `_rowid`
    /// view of DELETE and UPDATE), so that a statement finds exactly the
    /// rows `SELECT *` lists.
    all_groups: bool,
    /// The columns an INSERT into this table left to their DEFAULT (see
    /// [`RowWriter::with_defaulted`]).
    defaulted: Arc<[usize]>,
    /// Its tablets when it was opened, if it was split: `EXPLAIN` names
    /// them.
    tablets: Option<Arc<[Tablet]>>,
}

/// A session state used only to parse DEFAULT expressions.
fn expression_parser() -> &'static SessionState {
    static STATE: OnceLock<SessionState> = OnceLock::new();
    STATE.get_or_init(|| SessionStateBuilder::new().with_default_features().build())
}

impl WideTable {
    /// The table `id` as it is now; `with_rowid` adds the raw `_rowid`
    /// column (the view DELETE and UPDATE read).
    pub fn open(db: &Db, id: TableId, with_rowid: bool) -> Result<Option<WideTable>> {
        let Some(store) = db.catalog().store(id) else {
            return Ok(None);
        };
        let tablets = db.catalog().read().split_tablets(id).map(Arc::from);
        Ok(Some(Self::of_store(store, with_rowid, tablets)))
    }

    /// The table whose cells `store` reads; see [`WideTable::open`].
    pub(super) fn of_store(
        store: TableStore,
        with_rowid: bool,
        tablets: Option<Arc<[Tablet]>>,
    ) -> WideTable {
        let shape = Arc::new(Shape::new(&store.layout.spec, with_rowid));
        // With `_rowid` first, the primary key is that raw key alone.
        let mut key_columns = shape.key_columns();
        if with_rowid {
            key_columns.truncate(1);
        }
        let constraints = if key_columns.is_empty() {
            Constraints::default()
        } else {
            Constraints::new_unverified(vec![Constraint::PrimaryKey(key_columns)])
        };
        WideTable {
            store,
            shape,
            constraints,
            as_of: None,
            history: None,
            defaults: OnceLock::new(),
            all_groups: with_rowid,
            defaulted: Arc::from(Vec::new()),
            tablets,
        }
    }

    /// The view this table reads, when a worker can read it too: not the
    /// `_rowid` view of DELETE and UPDATE, which run on the master.
    pub(super) fn view(&self) -> Option<ScanView> {
        (!self.all_groups).then_some(ScanView {
            history: self.history,
            as_of: self.as_of,
        })
    }

    /// This table read as `view` says.
    pub(super) fn with_view(self, view: ScanView) -> WideTable {
        let table = match view.history {
            Some(versions) => self.history(versions),
            None => self,
        };
        match view.as_of {
            Some(micros) => table.at_time(micros),
            None => table,
        }
    }

    /// The history view of this table: each column holds its versions,
    /// newest first (at most `versions` of them). Writes are refused.
    pub fn history(self, versions: Option<usize>) -> WideTable {
        let shape = Arc::new(Shape::clone(&self.shape).into_history());
        WideTable {
            shape,
            history: Some(versions),
            ..self
        }
    }

    /// The same table read as it was at `micros`: the newest version at or
    /// before that time of every column. Writes are refused.
    pub fn at_time(self, micros: i64) -> WideTable {
        WideTable {
            as_of: Some(micros),
            ..self
        }
    }

    /// Whether this is the latest view (or a past one) with one output
    /// row per table row: not the history view, not the `_rowid` view.
    pub fn is_latest_view(&self) -> bool {
        self.history.is_none() && !self.all_groups
    }

    /// The writer of rows appended to this table; an error when it cannot
    /// be written (a system table, a past version).
    pub(crate) fn append_writer(&self, settings: WriteSettings) -> Result<RowWriter> {
        if self.store.layout.read_only {
            return Err(to_df(crate::table::TableError::ReadOnly {
                table: self.store.layout.name.clone(),
            }));
        }
        if self.as_of.is_some() {
            return plan_err!(
                "a past version of table '{}' cannot be written",
                self.store.layout.name
            );
        }
        Ok(
            RowWriter::new(self.store.clone(), Arc::clone(&self.shape), settings)
                .with_defaulted(Arc::clone(&self.defaulted)),
        )
    }

    /// The table as the target of an INSERT that left the columns
    /// `defaulted` (shape positions) to their DEFAULT.
    pub(crate) fn with_defaulted(mut self, defaulted: Vec<usize>) -> Self {
        self.defaulted = defaulted.into();
        self
    }

    /// The table's store.
    pub fn store(&self) -> &TableStore {
        &self.store
    }

    /// The table's SQL shape.
    pub fn shape(&self) -> &Arc<Shape> {
        &self.shape
    }

    /// Its tablets when it was opened, if it was split.
    pub fn tablets(&self) -> Option<Arc<[Tablet]>> {
        self.tablets.clone()
    }

    /// The families a read of the output columns `projection` reads: every
    /// family of the locality groups their families live in (the same key
    /// ranges, so no extra I/O, and every row of those groups is found),
    /// and of the group of the row markers, where every row is found.
    /// Empty when no family column is read.
    fn families_read(&self, projection: &[usize]) -> Vec<u16> {
        let layout = &self.store.layout;
        let mut groups: Vec<usize> = self
            .shape
            .families_of(projection)
            .iter()
            .filter_map(|id| layout.family_by_id(*id).map(|f| f.group))
            .collect();
        if groups.is_empty() {
            return Vec::new();
        }
        // Every row has a cell in the group of the row markers (a row with
        // cells in other groups has a marker there), so reading it too
        // finds the rows whose cells are all in groups not read.
        if let Some(marker) = layout.marker_family.and_then(|id| layout.family_by_id(id)) {
            groups.push(marker.group);
        }
        layout
            .families
            .iter()
            .filter(|f| self.all_groups || groups.contains(&f.group))
            .map(|f| f.id)
            .collect()
    }

    /// How a read of the output columns `projection` reads cells: the
    /// filter, which reads the families of [`WideTable::families_read`],
    /// newest version only, and the cells it decodes of them (`None`: all):
    /// the qualifiers of the pivoted columns read and every qualifier of a
    /// MAP family read. The other cells of those families only show that a
    /// row exists. With no family column, every family is read, one cell
    /// per row, to find the rows.
    pub fn cells_for(&self, projection: &[usize]) -> (Filter, Option<KeptCells>) {
        let mut latest = match self.history {
            Some(Some(n)) => Filter::all().with_latest_versions(n),
            Some(None) => Filter::all(),
            None => Filter::all().with_latest_versions(1),
        };
        if let Some(at) = self.as_of {
            latest = latest.with_as_of(at);
        }
        let ids = self.families_read(projection);
        if ids.is_empty() {
            // Key columns only: one cell of any family finds the row.
            return (latest.with_cells_per_row_limit(1), None);
        }
        let names: Vec<String> = ids
            .iter()
            .filter_map(|id| self.store.layout.family_by_id(*id).map(|f| f.name.clone()))
            .collect();
        let families = ids.into_iter().map(|id| {
            let mut qualifiers = Some(Vec::new());
            for &c in projection {
                match &self.shape.sources[c] {
                    Source::Map { family, .. } if *family == id => qualifiers = None,
                    Source::Column {
                        family, qualifier, ..
                    } if *family == id => {
                        if let Some(q) = &mut qualifiers {
                            q.push(qualifier.clone());
                        }
                    }
                    _ => {}
                }
            }
            (id, qualifiers)
        });
        let keep = KeptCells::columns(families, true);
        (latest.with_families(names), Some(keep))
    }

    /// The keys the filters allow (intersection of every pushable one).
    pub fn keys_for(&self, filters: &[Expr]) -> KeySet {
        filters
            .iter()
            .filter_map(|f| push(&self.shape, f))
            .fold(KeySet::all(), |keys, pushed| keys.intersect(&pushed.keys))
    }

    /// Plans a scan of `projection` over `keys`; the storage reads that
    /// split it into partitions run off the async runtime.
    pub async fn scan_plan(
        &self,
        projection: Vec<usize>,
        keys: KeySet,
        limit: Option<usize>,
        target_partitions: usize,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (filter, keep) = self.cells_for(&projection);
        let request = ScanRequest {
            filter,
            keep,
            projection,
            keys,
            limit,
            row_per_row: true,
            now: None,
        };
        // A scan of tablets that workers hold reads one partition per
        // tablet (a task per worker reads its own): sampling its keys to
        // split it would call the workers while planning.
        let per_tablet = match (&self.tablets, limit) {
            (Some(tablets), None) => shipped::tablet_partitions(tablets, &request.keys),
            _ => None,
        };
        let target_partitions = if per_tablet.is_some() {
            1
        } else {
            target_partitions
        };
        let (store, shape) = (self.store.clone(), Arc::clone(&self.shape));
        let tablets = self.tablets.clone();
        let view = self.view();
        off_runtime(move || {
            let mut scan = WideScanExec::try_new(store, shape, request, target_partitions)?
                .with_tablets(tablets);
            if let Some(partitions) = per_tablet {
                scan = scan.with_partitions(partitions);
            }
            scan.shippable = view;
            Ok(Arc::new(scan) as Arc<dyn ExecutionPlan>)
        })
        .await
    }
}

#[async_trait]
impl TableProvider for WideTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.shape.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn constraints(&self) -> Option<&Constraints> {
        Some(&self.constraints)
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults
            .get_or_init(|| {
                let Ok(schema) = DFSchema::try_from(self.shape.schema.as_ref().clone()) else {
                    return HashMap::new();
                };
                self.store
                    .layout
                    .spec
                    .families
                    .iter()
                    .flat_map(|f| &f.columns)
                    .filter_map(|c| {
                        let sql = c.default.as_ref()?;
                        let expr = expression_parser().create_logical_expr(sql, &schema).ok()?;
                        Some((c.name.clone(), expr))
                    })
                    .collect()
            })
            .get(column)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| match push(&self.shape, f) {
                Some(p) if p.exact => TableProviderFilterPushDown::Exact,
                Some(_) => TableProviderFilterPushDown::Inexact,
                // A cached plan's parameters (`_key = $1`): the scan sees
                // their values when the plan runs. Exact when any value of
                // each parameter's type converts to a key as a literal
                // would (it has its column's type).
                None => match with_sample_values(f).and_then(|g| push(&self.shape, &g)) {
                    Some(p) if p.exact && parameters_have_column_types(&self.shape.schema, f) => {
                        TableProviderFilterPushDown::Exact
                    }
                    Some(_) => TableProviderFilterPushDown::Inexact,
                    None => TableProviderFilterPushDown::Unsupported,
                },
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn DfSession,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let projection = projection
            .cloned()
            .unwrap_or_else(|| (0..self.shape.schema.fields().len()).collect());
        let keys = self.keys_for(filters);
        self.scan_plan(projection, keys, limit, state.config().target_partitions())
            .await
    }

    async fn insert_into(
        &self,
        state: &dyn DfSession,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return not_impl_err!(
                "{insert_op} is not supported on widesql tables: INSERT writes new versions of the given columns"
            );
        }
        let writer = self.append_writer(WriteSettings::of(state.config()))?;
        let reads_target = scans_of(&input, self.store.layout.id) > 0;
        Ok(Arc::new(DataSinkExec::new(
            input,
            Arc::new(WideSink::new(writer, reads_target)),
            None,
        )))
    }

    async fn delete_from(
        &self,
        _state: &dyn DfSession,
        _filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan_err!(
            "DELETE on table '{}' must run through widesql's SQL session (Db::session), which evaluates the whole WHERE clause",
            self.store.layout.name
        )
    }

    async fn update(
        &self,
        _state: &dyn DfSession,
        _assignments: Vec<(String, Expr)>,
        _filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan_err!(
            "UPDATE on table '{}' must run through widesql's SQL session (Db::session), which evaluates the whole WHERE clause",
            self.store.layout.name
        )
    }

    async fn truncate(&self, state: &dyn DfSession) -> Result<Arc<dyn ExecutionPlan>> {
        if self.store.layout.read_only {
            return Err(to_df(crate::table::TableError::ReadOnly {
                table: self.store.layout.name.clone(),
            }));
        }
        let store = WriteSettings::of(state.config()).bind(self.store.clone());
        Ok(Arc::new(crate::sql::dml::DmlExec::new(
            "TruncateExec",
            self.store.layout.name.clone(),
            Arc::new(move || crate::sql::dml::delete_all(&store)),
        )))
    }
}

/// `filter` with each typed parameter replaced by a value of its type, to
/// ask whether the filter can bound keys once its parameters are bound;
/// `None` when it has no parameters or one without a type.
fn with_sample_values(filter: &Expr) -> Option<Expr> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::logical_expr::expr::Placeholder;
    if !filter
        .exists(|e| Ok(matches!(e, Expr::Placeholder(_))))
        .ok()?
    {
        return None;
    }
    filter
        .clone()
        .transform(|e| match e {
            Expr::Placeholder(Placeholder {
                field: Some(field), ..
            }) => {
                let value = ScalarValue::new_default(field.data_type())?;
                Ok(Transformed::yes(Expr::Literal(value, None)))
            }
            Expr::Placeholder(_) => plan_err!("an untyped parameter"),
            other => Ok(Transformed::no(other)),
        })
        .ok()
        .map(|t| t.data)
}

/// Whether each parameter of `filter` is compared straight with a column
/// of `schema` of the parameter's own type, one whose every value is a
/// key.
fn parameters_have_column_types(schema: &SchemaRef, filter: &Expr) -> bool {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::expr::{Between, InList, Placeholder};
    use datafusion::logical_expr::BinaryExpr;
    let column_type = |e: &Expr| match e {
        Expr::Column(c) => schema
            .field_with_name(&c.name)
            .ok()
            .map(|f| f.data_type().clone()),
        _ => None,
    };
    // Types every value of which is a key: signed integers and text (an
    // unsigned value past i64::MAX is no key, and the scan would then
    // read every key with no filter left above it).
    let always_a_key = |t: &DataType| {
        t.is_signed_integer()
            || matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
    };
    let fits = |column: &Expr, value: &Expr| match (column_type(column), value) {
        (Some(t), Expr::Placeholder(Placeholder { field: Some(f), .. })) => {
            *f.data_type() == t && always_a_key(&t)
        }
        _ => false,
    };
    let (mut all, mut fitting) = (0, 0);
    let _ = filter.apply(|e| {
        match e {
            Expr::Placeholder(_) => all += 1,
            Expr::BinaryExpr(BinaryExpr { left, right, .. }) => {
                fitting += usize::from(fits(left, right)) + usize::from(fits(right, left));
            }
            Expr::InList(InList { expr, list, .. }) => {
                fitting += list.iter().filter(|v| fits(expr, v)).count();
            }
            Expr::Between(Between {
                expr, low, high, ..
            }) => {
                fitting += usize::from(fits(expr, low)) + usize::from(fits(expr, high));
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    all == fitting
}
