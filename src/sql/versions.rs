//! Versions as SQL: table functions over a table's stored cell versions.
//!
//! - `cells('t')`: one row per stored cell version that GC keeps: the key
//!   column(s), `family`, `qualifier`, `_timestamp` (µs), `value` (bytes).
//!   Row-key predicates become key ranges and `_timestamp` predicates a
//!   time range, as in the latest view.
//! - `as_of('t', TIMESTAMP '…')`: the latest view of `t` as it was at that
//!   time (the newest version at or before it of every column).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{Session as DfSession, TableFunctionImpl, TableProvider};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::{
    BinaryExpr, Expr, Operator, TableProviderFilterPushDown, TableType,
};
use datafusion::physical_plan::ExecutionPlan;

use crate::db::Db;
use crate::sql::ddl::name_parts_of_text;
use crate::sql::pushdown::{push, KeySet};
use crate::sql::scan::to_df;
use crate::sql::shape::{BatchBuilder, Shape, Source};
use crate::sql::table::WideTable;
use crate::table::read::{RawCell, RawRow};
use crate::table::{Filter, ReadOptions};

/// The table named by the first argument of a version function.
fn table_arg(db: &Db, function: &str, args: &[Expr]) -> Result<WideTable> {
    let name = match args.first() {
        Some(Expr::Literal(ScalarValue::Utf8(Some(name)), _)) => name.clone(),
        _ => {
            return plan_err!(
            "{function}() takes a table name as its first argument, e.g. {function}('acme.web.t')"
        )
        }
    };
    let parts = name_parts_of_text(&name);
    let (project, dataset, table) = match parts.as_slice() {
        [t] => (
            crate::catalog::DEFAULT_PROJECT.to_string(),
            crate::catalog::DEFAULT_DATASET.to_string(),
            t.clone(),
        ),
        [d, t] => (
            crate::catalog::DEFAULT_PROJECT.to_string(),
            d.clone(),
            t.clone(),
        ),
        [p, d, t] => (p.clone(), d.clone(), t.clone()),
        _ => return plan_err!("'{name}' is not a [[project.]dataset.]table name"),
    };
    let handle = db.open_table(&project, &dataset, &table).map_err(to_df)?;
    match WideTable::open(db, handle.id(), false)? {
        Some(t) => Ok(t),
        None => plan_err!("table '{name}' does not exist"),
    }
}

/// A timestamp argument in microseconds.
fn timestamp_arg(function: &str, arg: Option<&Expr>) -> Result<i64> {
    let Some(Expr::Literal(value, _)) = arg else {
        return plan_err!("{function}() takes a timestamp as its second argument");
    };
    match value.cast_to(&DataType::Timestamp(TimeUnit::Microsecond, None))? {
        ScalarValue::TimestampMicrosecond(Some(us), _) => Ok(us),
        _ => plan_err!("{function}() takes a non-NULL timestamp"),
    }
}

/// `cells(table)`.
#[derive(Debug)]
pub struct CellsFunction {
    db: Db,
}

impl CellsFunction {
    /// The function over `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

impl TableFunctionImpl for CellsFunction {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        let table = table_arg(&self.db, "cells", args)?;
        Ok(Arc::new(CellsView::new(table)))
    }
}

/// `as_of(table, timestamp)`.
#[derive(Debug)]
pub struct AsOfFunction {
    db: Db,
}

impl AsOfFunction {
    /// The function over `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

impl TableFunctionImpl for AsOfFunction {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        let table = table_arg(&self.db, "as_of", args)?;
        let at = timestamp_arg("as_of", args.get(1))?;
        Ok(Arc::new(table.as_of(at)))
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
    fn new(table: WideTable) -> Self {
        let shape = table.shape();
        let key_columns: Vec<usize> = shape
            .sources
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, Source::RowKey { .. } | Source::KeyPart { .. }))
            .map(|(i, _)| i)
            .collect();
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
        _state: &dyn DfSession,
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
        let batch = self.read(&keys, filter, limit)?;
        let batch = match projection {
            Some(p) => batch.project(p)?,
            None => batch,
        };
        let schema = batch.schema();
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            schema,
            None,
        )?)
    }
}

impl CellsView {
    /// Reads the versions into one batch.
    fn read(&self, keys: &KeySet, filter: Filter, limit: Option<usize>) -> Result<RecordBatch> {
        let store = self.table.store();
        let shape = Arc::new(Shape::clone(self.table.shape()));
        let mut keys_out = BatchBuilder::new(
            Arc::clone(&shape),
            self.key_columns.clone(),
            store.layout.name.clone(),
        )?;
        let mut family = StringBuilder::new();
        let mut qualifier = StringBuilder::new();
        let mut timestamp = TimestampMicrosecondBuilder::new();
        let mut value = BinaryBuilder::new();
        let mut rows = 0usize;
        for row in store.scan(&keys.to_row_set(), ReadOptions::new().with_filter(filter)) {
            let row = row.map_err(to_df)?;
            for cell in &row.cells {
                if limit.is_some_and(|l| rows >= l) {
                    break;
                }
                keys_out.push(&RawRow {
                    key: row.key.clone(),
                    cells: Vec::<RawCell>::new(),
                })?;
                let name = store
                    .layout
                    .family_by_id(cell.family)
                    .map_or("", |f| f.name.as_str());
                family.append_value(name);
                qualifier.append_value(String::from_utf8_lossy(&cell.qualifier));
                timestamp.append_value(cell.timestamp);
                value.append_value(&cell.value);
                rows += 1;
            }
        }
        let mut columns: Vec<ArrayRef> = keys_out.finish()?.columns().to_vec();
        columns.push(Arc::new(family.finish()));
        columns.push(Arc::new(qualifier.finish()));
        columns.push(Arc::new(timestamp.finish()));
        columns.push(Arc::new(value.finish()));
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}
