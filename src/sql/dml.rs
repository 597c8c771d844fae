//! DELETE and UPDATE: the WHERE clause is evaluated by DataFusion as a query
//! over the table's internal `_rowid` view, and the rows it returns are
//! then mutated, each atomically.
//!
//! Running the whole WHERE clause as a query is what makes folded or
//! rewritten predicates safe: `WHERE false`, `WHERE 1 = 0`, `IN (SELECT …)`
//! and `EXISTS (…)` select exactly the rows they match. A missing WHERE
//! clause is the only thing that means "every row".

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, UInt64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{TableFunctionImpl, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{plan_err, DataFusionError, Result, ScalarValue};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Partitioning, PlanProperties, ReplaceChildrenOptions,
};

use crate::db::Db;
use crate::ids::TableId;
use crate::sql::scan::{leaf_plan_methods, to_df};
use crate::sql::shape::Source;
use crate::sql::table::WideTable;
use crate::sql::values;
use crate::table::{Filter, ReadOptions, RowMutation, RowSet, TableStore};

/// The name of the internal table function that exposes `_rowid`.
pub const ROWS_FUNCTION: &str = "__widesql_rows";

/// Rows mutated per storage batch.
const CHUNK: usize = 1000;

/// The schema of a DML result: one `count` column.
pub fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]))
}

/// A one-row batch holding `count`.
pub fn count_batch(count: u64) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        count_schema(),
        vec![Arc::new(UInt64Array::from(vec![count])) as ArrayRef],
    )?)
}

/// A change to a table that runs when its plan executes and returns the
/// rows it affected.
pub type DmlAction = Arc<dyn Fn() -> crate::Result<u64> + Send + Sync>;

/// A plan that applies a change when executed, never when planned, so that
/// `EXPLAIN` shows it without doing it; yields one row with the count.
pub struct DmlExec {
    name: &'static str,
    table: String,
    action: DmlAction,
    properties: Arc<PlanProperties>,
}

impl DmlExec {
    /// `name` (for EXPLAIN) of `table`, done by `action`.
    pub fn new(name: &'static str, table: String, action: DmlAction) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        Self {
            name,
            table,
            action,
            properties,
        }
    }
}

impl std::fmt::Debug for DmlExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.name, self.table)
    }
}

impl DisplayAs for DmlExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}: table={}", self.name, self.table)
    }
}

impl ExecutionPlan for DmlExec {
    fn name(&self) -> &'static str {
        self.name
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    leaf_plan_methods!();

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let action = Arc::clone(&self.action);
        let stream = futures::stream::once(async move {
            let count = tokio::task::spawn_blocking(move || action())
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?
                .map_err(to_df)?;
            count_batch(count)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            stream,
        )))
    }
}

/// Deletes every row of a table; returns how many.
pub fn delete_all(store: &TableStore) -> crate::Result<u64> {
    let options = ReadOptions::new().with_filter(Filter::all().with_cells_per_row_limit(1));
    let mut deleted = 0u64;
    let mut chunk = Vec::with_capacity(CHUNK);
    for row in store.scan(&RowSet::all(), options) {
        chunk.push((row?.key, RowMutation::new().delete_row()));
        if chunk.len() == CHUNK {
            deleted += store.bulk_mutate(std::mem::take(&mut chunk))? as u64;
        }
    }
    deleted += store.bulk_mutate(chunk)? as u64;
    Ok(deleted)
}

/// `__widesql_rows('<table id>')`: the table with its raw row key as
/// `_rowid`, read by DELETE and UPDATE.
#[derive(Debug)]
pub struct RowsFunction {
    db: Db,
}

impl RowsFunction {
    /// The function over `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

impl TableFunctionImpl for RowsFunction {
    fn call(&self, args: &[Expr]) -> Result<Arc<dyn TableProvider>> {
        let id = match args {
            [Expr::Literal(ScalarValue::Utf8(Some(id)), _)] => TableId::parse(id),
            _ => None,
        };
        let Some(id) = id else {
            return plan_err!("{ROWS_FUNCTION} takes one table id");
        };
        match WideTable::open(&self.db, id, true)? {
            Some(table) => Ok(Arc::new(table)),
            None => plan_err!("table {id} does not exist"),
        }
    }
}

/// Deletes the rows whose keys are in the first column of `batches`.
pub fn delete_rows(store: &TableStore, batches: &[RecordBatch]) -> Result<u64> {
    let mut deleted = 0u64;
    for batch in batches {
        let keys = batch.column(0).as_binary::<i32>();
        let rows: Vec<(Vec<u8>, RowMutation)> = keys
            .iter()
            .flatten()
            .map(|k| (k.to_vec(), RowMutation::new().delete_row()))
            .collect();
        deleted += store.bulk_mutate(rows).map_err(to_df)? as u64;
    }
    Ok(deleted)
}

/// Writes new values: `batches` hold `_rowid` then one column per entry of
/// `columns` (indexes into the table's shape). NULL deletes the column.
pub fn update_rows(table: &WideTable, columns: &[usize], batches: &[RecordBatch]) -> Result<u64> {
    let shape = table.shape();
    let store = table.store();
    let family_name = |id: u16| {
        store
            .layout
            .family_by_id(id)
            .map(|f| f.name.clone())
            .ok_or_else(|| DataFusionError::Internal(format!("family id {id} vanished")))
    };
    // A column set to NULL is deleted; the row marker keeps the row if that
    // was its last cell.
    let marker = crate::sql::sink::marker_family(store);
    let mut updated = 0u64;
    for batch in batches {
        let keys = batch.column(0).as_binary::<i32>();
        // Cast each new value column to the column's type.
        let mut new_values: Vec<ArrayRef> = Vec::with_capacity(columns.len());
        for (i, &c) in columns.iter().enumerate() {
            let target = shape.schema.field(c).data_type();
            new_values.push(cast(batch.column(i + 1), target)?);
        }
        let mut rows = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let Some(key) = keys.is_valid(row).then(|| keys.value(row)) else {
                continue;
            };
            let mut m = RowMutation::new();
            for (i, &c) in columns.iter().enumerate() {
                let name = shape.schema.field(c).name();
                let bad = |e: String| DataFusionError::Execution(format!("column '{name}': {e}"));
                match &shape.sources[c] {
                    Source::Column {
                        family, qualifier, ..
                    } => {
                        let family = family_name(*family)?;
                        m = match values::encode_cell(&new_values[i], row).map_err(bad)? {
                            Some(v) => m.set(family, qualifier, v),
                            None => m.delete_column(family, qualifier),
                        };
                    }
                    Source::Map { family, .. } => {
                        // The map is replaced: the old qualifiers go, the new ones are written.
                        let family = family_name(*family)?;
                        m = m.delete_family(family.clone());
                        if new_values[i].is_valid(row) {
                            let entries = new_values[i].as_map().value(row);
                            for e in 0..entries.len() {
                                let q = values::encode_cell(entries.column(0), e).map_err(bad)?;
                                let v = values::encode_cell(entries.column(1), e).map_err(bad)?;
                                if let (Some(q), Some(v)) = (q, v) {
                                    m = m.set(family.clone(), q, v);
                                }
                            }
                        }
                    }
                    Source::RowKey { .. } | Source::KeyPart { .. } => {
                        return plan_err!(
                            "UPDATE cannot change key column '{name}' of table '{}': DELETE the row and INSERT it again",
                            store.layout.name
                        );
                    }
                }
            }
            let deletes = m.mutations.iter().any(|x| {
                matches!(
                    x,
                    crate::table::Mutation::DeleteColumn { .. }
                        | crate::table::Mutation::DeleteFamily { .. }
                )
            });
            if deletes {
                m = crate::sql::sink::with_marker(m, &marker, None);
            }
            rows.push((key.to_vec(), m));
        }
        updated += store.bulk_mutate(rows).map_err(to_df)? as u64;
    }
    Ok(updated)
}

/// Deletes every version of one column in every row (after `DROP COLUMN`).
pub fn purge_column(store: &TableStore, family: &str, qualifier: &[u8]) -> crate::Result<u64> {
    let filter = Filter::all()
        .with_families([family])
        .with_qualifiers(crate::table::QualifierFilter::Exact(
            [qualifier.to_vec()].into(),
        ))
        .with_cells_per_row_limit(1);
    let mut purged = 0u64;
    let mut chunk = Vec::with_capacity(CHUNK);
    for row in store.scan(&RowSet::all(), ReadOptions::new().with_filter(filter)) {
        chunk.push((
            row?.key,
            RowMutation::new().delete_column(family, qualifier),
        ));
        if chunk.len() == CHUNK {
            purged += store.bulk_mutate(std::mem::take(&mut chunk))? as u64;
        }
    }
    purged += store.bulk_mutate(chunk)? as u64;
    Ok(purged)
}
