//! Versions as SQL: table functions over a table's stored cell versions.
//!
//! - `cells('t')`: one row per stored cell version that GC keeps: the key
//!   column(s), `family`, `qualifier`, `_timestamp` (µs), `value` (bytes).
//!   Row-key predicates become key ranges and `_timestamp` predicates a
//!   time range, as in the latest view.
//! - `as_of('t', TIMESTAMP '…')`: the latest view of `t` as it was at that
//!   time (the newest version at or before it of every column).
//! - `history('t' [, n])`: every column holds a list of its versions,
//!   newest first (the newest `n`); maps hold a list per qualifier.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session as DfSession, TableFunctionImpl, TableProvider};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::logical_expr::{
    BinaryExpr, Expr, Operator, TableProviderFilterPushDown, TableType,
};
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::ObjectKind;
use crate::db::Db;
use crate::sql::error::{to_df, SqlError};
use crate::sql::read::pushdown::push;
use crate::sql::read::scan::{MakeBuilder, ScanRequest, WideScanExec};
use crate::sql::read::shape::{BatchBuilder, RowsToBatches, Shape};
use crate::sql::read::table::WideTable;
use crate::sql::runtime::off_runtime;
use crate::sql::session::names::name_parts_of_text;
use crate::sql::SessionOptions;
use crate::table::read::{RawCell, RawRow};
use crate::table::{Filter, TableStore};

/// The version table functions of one session (they resolve names in the
/// session's default project and dataset).
#[derive(Debug, Clone)]
pub struct VersionFunctions {
    db: Db,
    options: SessionOptions,
}

impl VersionFunctions {
    /// The functions over `db`.
    pub fn new(db: Db, options: SessionOptions) -> Self {
        Self { db, options }
    }

    /// `cells(table)`.
    pub fn cells(&self) -> CellsFunction {
        CellsFunction(self.clone())
    }

    /// `as_of(table, timestamp)`.
    pub fn as_of(&self) -> AsOfFunction {
        AsOfFunction(self.clone())
    }

    /// `history(table [, versions])`.
    pub fn history(&self) -> HistoryFunction {
        HistoryFunction(self.clone())
    }

    /// The table named by the first argument of a version function.
    fn table_arg(&self, function: &str, args: &[Expr]) -> Result<WideTable> {
        let name = match args.first() {
            Some(Expr::Literal(ScalarValue::Utf8(Some(name)), _)) => name.clone(),
            _ => {
                return plan_err!(
                    "{function}() takes a table name as its first argument, e.g. {function}('acme.web.t')"
                )
            }
        };
        let Some((project, dataset, table)) = self.options.resolve(&name_parts_of_text(&name))
        else {
            return Err(to_df(SqlError::BadName {
                name,
                expected: "a [[project.]dataset.]table name",
            }));
        };
        let handle = self
            .db
            .open_table(&project, &dataset, &table)
            .map_err(to_df)?;
        match WideTable::open(&self.db, handle.id(), false)? {
            Some(t) => Ok(t),
            None => Err(to_df(crate::catalog::not_found(ObjectKind::Table, name))),
        }
    }
}

/// Refuses a call of `function` with fewer than `least` or more than
/// `most` arguments; `usage` is how it is called.
fn arity(function: &str, args: &[Expr], least: usize, most: usize, usage: &str) -> Result<()> {
    if (least..=most).contains(&args.len()) {
        return Ok(());
    }
    let takes = match (least, most) {
        (1, 1) => "1 argument".to_string(),
        (l, m) if l == m => format!("{l} arguments"),
        (l, m) => format!("{l} or {m} arguments"),
    };
    plan_err!("{function}() takes {takes}, not {}: {usage}", args.len())
}

/// A timestamp argument in microseconds.
fn timestamp_arg(function: &str, arg: Option<&Expr>) -> Result<i64> {
    let Some(Expr::Literal(value, _)) = arg else {
        return plan_err!("{function}() takes a timestamp as its second argument");
    };
    let cast = value.cast_to(&DataType::Timestamp(TimeUnit::Microsecond, None));
    let Ok(cast) = cast else {
        return plan_err!(
            "{function}() takes a timestamp as its second argument; {value} is not one"
        );
    };
    match cast {
        ScalarValue::TimestampMicrosecond(Some(us), _) => Ok(us),
        _ => plan_err!("{function}() takes a non-NULL timestamp"),
    }
}

/// `cells(table)`.
#[derive(Debug)]
pub struct CellsFunction(VersionFunctions);

impl TableFunctionImpl for CellsFunction {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        arity("cells", args, 1, 1, "cells('table')")?;
        let table = self.0.table_arg("cells", args)?;
        let shape = table.shape();
        let taken = shape
            .key_columns()
            .into_iter()
            .map(|i| shape.schema.field(i).name())
            .find(|name| [FAMILY, QUALIFIER, TIMESTAMP, VALUE].contains(&name.as_str()));
        if let Some(name) = taken {
            return plan_err!(
                "cells('{}') has columns {FAMILY}, {QUALIFIER}, {TIMESTAMP} and {VALUE} of its own, so it cannot also show the key column '{name}'; a copy of the table with that key column named otherwise can be read",
                table.store().layout.name
            );
        }
        Ok(Arc::new(CellsView::new(table)))
    }
}

/// `as_of(table, timestamp)`.
#[derive(Debug)]
pub struct AsOfFunction(VersionFunctions);

impl TableFunctionImpl for AsOfFunction {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        arity("as_of", args, 2, 2, "as_of('table', TIMESTAMP '…')")?;
        let table = self.0.table_arg("as_of", args)?;
        let at = timestamp_arg("as_of", args.get(1))?;
        Ok(Arc::new(table.at_time(at)))
    }
}

/// `history(table [, versions])`.
#[derive(Debug)]
pub struct HistoryFunction(VersionFunctions);

impl TableFunctionImpl for HistoryFunction {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        arity("history", args, 1, 2, "history('table' [, versions])")?;
        let table = self.0.table_arg("history", args)?;
        let versions = match args.get(1) {
            None => None,
            Some(Expr::Literal(v, _)) => match v.cast_to(&DataType::UInt64)? {
                ScalarValue::UInt64(Some(n)) if n > 0 => Some(n as usize),
                _ => return plan_err!("history() takes a positive number of versions"),
            },
            Some(_) => return plan_err!("history() takes a positive number of versions"),
        };
        Ok(Arc::new(table.history(versions)))
    }
}

/// One row per stored cell version.
#[derive(Debug)]
pub struct CellsView {
    table: WideTable,
    /// The key columns of the table's shape (indexes).
    key_columns: Vec<usize>,
    schema: SchemaRef,
}

const FAMILY: &str = "family";
const QUALIFIER: &str = "qualifier";
const TIMESTAMP: &str = "_timestamp";
const VALUE: &str = "value";

impl CellsView {
    /// The table whose cells it lists.
    pub(crate) fn table(&self) -> &WideTable {
        &self.table
    }

    fn new(table: WideTable) -> Self {
        let shape = table.shape();
        let key_columns = shape.key_columns();
        let mut fields: Vec<Field> = key_columns
            .iter()
            .map(|&i| shape.schema.field(i).clone())
            .collect();
        fields.push(Field::new(FAMILY, DataType::Utf8, false));
        fields.push(Field::new(QUALIFIER, DataType::Utf8, false));
        fields.push(Field::new(
            TIMESTAMP,
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ));
        fields.push(Field::new(VALUE, DataType::Binary, false));
        Self {
            table,
            key_columns,
            schema: Arc::new(Schema::new(fields)),
        }
    }

    /// The time range `_timestamp` predicates allow (`start..end`).
    fn time_bound(filter: &Expr) -> Option<std::ops::Range<i64>> {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = filter else {
            return None;
        };
        let (op, value) = match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), Expr::Literal(v, _)) if c.name == TIMESTAMP => (*op, v),
            (Expr::Literal(v, _), Expr::Column(c)) if c.name == TIMESTAMP => (op.swap()?, v),
            _ => return None,
        };
        let ScalarValue::TimestampMicrosecond(Some(us), _) = value
            .cast_to(&DataType::Timestamp(TimeUnit::Microsecond, None))
            .ok()?
        else {
            return None;
        };
        Some(match op {
            Operator::Eq => us..us.saturating_add(1),
            Operator::Lt => 0..us,
            Operator::LtEq => 0..us.saturating_add(1),
            Operator::Gt => us.saturating_add(1)..i64::MAX,
            Operator::GtEq => us..i64::MAX,
            _ => return None,
        })
    }
}

#[async_trait]
impl TableProvider for CellsView {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Pushed filters narrow the read; DataFusion still applies them.
        Ok(filters
            .iter()
            .map(|f| {
                if push(self.table.shape(), f).is_some() || Self::time_bound(f).is_some() {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
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
        let keys = self.table.keys_for(filters);
        let mut filter = Filter::all();
        for f in filters {
            if let Some(range) = Self::time_bound(f) {
                let current = filter.time_range.clone().unwrap_or(0..i64::MAX);
                filter.time_range =
                    Some(current.start.max(range.start)..current.end.min(range.end));
            }
        }
        let projection = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let request = ScanRequest {
            projection: projection.clone(),
            keys,
            filter,
            keep: None,
            limit,
            row_per_row: false,
            now: None,
        };
        let shape = Arc::clone(self.table.shape());
        let key_columns = self.key_columns.clone();
        let schema = Arc::clone(&self.schema);
        let store = self.table.store().clone();
        let make_builder: MakeBuilder = Arc::new(move || {
            Ok(Box::new(CellsBuilder::new(
                store.clone(),
                Arc::clone(&shape),
                key_columns.clone(),
                Arc::clone(&schema),
                projection.clone(),
            )?) as Box<dyn RowsToBatches>)
        });
        let store = self.table.store().clone();
        let partitions = state.config().target_partitions();
        let tablets = self.table.tablets();
        off_runtime(move || {
            let scan =
                WideScanExec::with_builder(store, request, make_builder, "cells", partitions)?
                    .with_tablets(tablets);
            Ok(Arc::new(scan) as Arc<dyn ExecutionPlan>)
        })
        .await
    }
}

/// One output row per cell version.
struct CellsBuilder {
    store: TableStore,
    keys: BatchBuilder,
    family: StringBuilder,
    qualifier: StringBuilder,
    timestamp: TimestampMicrosecondBuilder,
    value: BinaryBuilder,
    schema: SchemaRef,
    projection: Vec<usize>,
    rows: usize,
}

impl CellsBuilder {
    fn new(
        store: TableStore,
        shape: Arc<Shape>,
        key_columns: Vec<usize>,
        schema: SchemaRef,
        projection: Vec<usize>,
    ) -> Result<Self> {
        let table = store.layout.name.clone();
        Ok(Self {
            keys: BatchBuilder::new(shape, key_columns, table)?,
            store,
            family: StringBuilder::new(),
            qualifier: StringBuilder::new(),
            timestamp: TimestampMicrosecondBuilder::new(),
            value: BinaryBuilder::new(),
            schema,
            projection,
            rows: 0,
        })
    }
}

impl RowsToBatches for CellsBuilder {
    fn schema(&self) -> SchemaRef {
        Arc::new(
            self.schema
                .project(&self.projection)
                .unwrap_or_else(|_| Schema::empty()),
        )
    }

    fn push(&mut self, row: &RawRow) -> Result<usize> {
        let key_only = RawRow {
            key: row.key.clone(),
            cells: Vec::<RawCell>::new(),
        };
        for cell in &row.cells {
            self.keys.push(&key_only)?;
            let name = self
                .store
                .layout
                .family_by_id(cell.family)
                .map_or("", |f| f.name.as_str());
            self.family.append_value(name);
            self.qualifier
                .append_value(String::from_utf8_lossy(&cell.qualifier));
            self.timestamp.append_value(cell.timestamp);
            self.value.append_value(&cell.value);
        }
        self.rows += row.cells.len();
        Ok(row.cells.len())
    }

    fn len(&self) -> usize {
        self.rows
    }

    fn finish(&mut self) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = self.keys.finish()?.columns().to_vec();
        columns.push(Arc::new(self.family.finish()));
        columns.push(Arc::new(self.qualifier.finish()));
        columns.push(Arc::new(self.timestamp.finish()));
        columns.push(Arc::new(self.value.finish()));
        self.rows = 0;
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?.project(&self.projection)?)
    }
}
