//! DELETE, UPDATE and TRUNCATE.
//!
//! The WHERE clause is evaluated by DataFusion as a query over the table's
//! internal `_rowid` view (joined with the tables of `DELETE … USING` or
//! `UPDATE … FROM`), and the rows it returns are then changed through the
//! one write path ([`crate::sql::dml::write`]). The statement sees the
//! table as of its start: when the query reads only the target's own scan,
//! which passes each row before it is written, rows are changed as they
//! stream (in bounded memory); otherwise the query runs to its end first.
//!
//! Running the whole WHERE clause as a query is what makes folded or
//! rewritten predicates safe: `WHERE false`, `WHERE 1 = 0`, `IN (SELECT …)`
//! and `EXISTS (…)` select exactly the rows they match. A missing WHERE
//! clause is the only thing that means "every row". Joins in the target
//! (`DELETE FROM t1 JOIN t2 …`, MySQL's `DELETE t2 FROM …`) are refused,
//! never ignored.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{TableFunctionImpl, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Partitioning, PlanProperties, ReplaceChildrenOptions,
};

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, Delete, Expr as SqlExpr, FromTable, Ident, SelectItem, SetExpr, Statement,
    TableFactor, TableWithJoins, Update, UpdateTableFromKind,
};

use crate::catalog::ObjectKind;
use crate::db::{Db, Table};
use crate::error::Error;
use crate::ids::TableId;
use crate::sql::dml::apply::{apply_input, collect_rows};
use crate::sql::dml::write::RowWriter;
use crate::sql::error::to_df;
use crate::sql::read::scan::{leaf_plan_methods, scans_of};
use crate::sql::read::shape::{Source, ROWID_COLUMN};
use crate::sql::read::table::WideTable;
use crate::sql::runtime::off_runtime;
use crate::sql::Session;
use crate::sql::SqlError;
use crate::table::{Filter, ReadOptions, RowMutation, RowSet, StatementWriter, TableStore};

/// The name of the internal table function that exposes `_rowid`.
pub const ROWS_FUNCTION: &str = "__widesql_rows";

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
            let count = off_runtime(move || action().map_err(to_df)).await?;
            count_batch(count)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            stream,
        )))
    }
}

/// The keys of the rows of a table, in key order (at most `limit`).
pub fn row_keys(
    store: &TableStore,
    limit: Option<usize>,
) -> crate::Result<impl Iterator<Item = crate::Result<Vec<u8>>>> {
    let mut options = ReadOptions::new().with_filter(Filter::all().with_cells_per_row_limit(1));
    if let Some(limit) = limit {
        options = options.with_row_limit(limit);
    }
    Ok(store
        .scan(&RowSet::all(), options)
        .map(|row| row.map(|row| row.key)))
}

/// Deletes every row of a table as one statement, as the keys are read;
/// returns how many.
pub fn delete_all(store: &TableStore) -> crate::Result<u64> {
    let mut writer = StatementWriter::new(store.clone())?;
    for key in row_keys(store, None)? {
        let key = key.map_err(|e| writer.stopped(e))?;
        writer.push(key, RowWriter::delete_row())?;
    }
    Ok(writer.finish()? as u64)
}

/// Writes `value` into column `family:qualifier` of every row that exists
/// when its turn comes: each row is checked and written atomically, so a row
/// deleted meanwhile stays deleted. Returns how many rows were written.
pub fn fill_column(
    store: &TableStore,
    family: &str,
    qualifier: &str,
    value: &[u8],
) -> crate::Result<u64> {
    let exists = Filter::all().with_cells_per_row_limit(1);
    let set = RowMutation::new().set(family, qualifier, value);
    let mut written = 0;
    for key in row_keys(store, None)? {
        let key = key?;
        if store.check_and_mutate(&key, &exists, &set, &RowMutation::new())? {
            written += 1;
        }
    }
    Ok(written)
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

/// The table a DML statement targets, refusing joins in the target, and
/// the alias its other clauses use for it.
fn dml_target(
    session: &Session,
    target: &TableWithJoins,
    statement: &str,
) -> crate::Result<(Table, Ident)> {
    if !target.joins.is_empty() {
        return Err(Error::Sql(SqlError::Unsupported(format!(
            "{statement} does not take a JOIN in its target table; {}",
            if statement == "DELETE" {
                "use DELETE FROM t USING other WHERE … or WHERE … IN (SELECT …)"
            } else {
                "use UPDATE t SET … FROM other WHERE …"
            }
        ))));
    }
    let TableFactor::Table { name, alias, .. } = &target.relation else {
        return Err(Error::Sql(SqlError::Invalid(format!(
            "{statement} takes a table name"
        ))));
    };
    let table = session.open_table(name)?;
    if let Some(privilege) = crate::access::Privilege::parse(statement) {
        session.require(privilege, crate::access::Securable::Table(table.id()))?;
    }
    let alias = match alias {
        Some(a) => a.name.clone(),
        None => name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .cloned()
            .ok_or_else(|| {
                Error::Sql(SqlError::BadName {
                    name: name.to_string(),
                    expected: "a plain table name",
                })
            })?,
    };
    Ok((table, alias))
}

/// The internal `_rowid` view of `table`, writable (not a system table).
fn writable_view(session: &Session, table: &Table) -> crate::Result<WideTable> {
    let view = WideTable::open(session.db(), table.id(), true)?
        .ok_or_else(|| crate::catalog::not_found(ObjectKind::Table, table.id()))?;
    if view.store().layout.read_only {
        return Err(crate::table::TableError::ReadOnly {
            table: view.store().layout.name.clone(),
        }
        .into());
    }
    Ok(view)
}

/// The writer of a DELETE's or UPDATE's rows into `view`, with the
/// session's write settings.
fn row_writer(session: &Session, view: &WideTable) -> RowWriter {
    RowWriter::new(
        view.store().clone(),
        Arc::clone(view.shape()),
        session.write_settings(),
    )
}

/// Starts `SELECT columns FROM <rows of table> AS alias [, others]
/// [WHERE selection]`, and says whether the statement may write while
/// it reads: no other table and no other scan of `table` is in it. The
/// statement's own expressions are put into the query as syntax trees,
/// never printed and parsed again.
async fn select_rows(
    session: &Session,
    table: &Table,
    alias: &Ident,
    columns: Vec<SelectItem>,
    others: &[TableWithJoins],
    selection: Option<&SqlExpr>,
) -> crate::Result<(SendableRecordBatchStream, bool)> {
    let template = format!("SELECT 1 FROM {ROWS_FUNCTION}('{}') AS {alias}", table.id());
    let mut query = match session.parse(&template)?.pop_front() {
        Some(DfStatement::Statement(statement)) => match *statement {
            Statement::Query(query) => query,
            _ => {
                return Err(Error::Sql(SqlError::Invalid(
                    "the row query did not parse as a query".into(),
                )))
            }
        },
        _ => {
            return Err(Error::Sql(SqlError::Invalid(
                "the row query did not parse".into(),
            )))
        }
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return Err(Error::Sql(SqlError::Invalid(
            "the row query did not parse as a SELECT".into(),
        )));
    };
    select.projection = columns;
    select.from.extend(others.iter().cloned());
    select.selection = selection.cloned();
    let statement = DfStatement::Statement(Box::new(Statement::Query(query)));
    let plan = session.plan(statement).await?;
    let physical = session
        .ctx
        .execute_logical_plan(plan)
        .await?
        .create_physical_plan()
        .await?;
    let streamed = others.is_empty() && scans_of(&physical, table.id()) == 1;
    let rows = execute_stream(physical, session.ctx.task_ctx())?;
    Ok((rows, streamed))
}

/// `alias._rowid`.
fn rowid_of(alias: &Ident) -> SelectItem {
    SelectItem::UnnamedExpr(SqlExpr::CompoundIdentifier(vec![
        alias.clone(),
        Ident::new(ROWID_COLUMN),
    ]))
}

/// `DELETE FROM t [USING …] [WHERE …]`; returns how many rows went.
pub(crate) async fn delete(session: &Session, delete: Delete) -> crate::Result<u64> {
    let from = match &delete.from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    if !delete.tables.is_empty() {
        return Err(Error::Sql(SqlError::Invalid(
            "DELETE names its target once, after FROM: DELETE FROM t [USING other] WHERE …".into(),
        )));
    }
    let [target] = from.as_slice() else {
        return Err(Error::Sql(SqlError::Invalid(
            "DELETE takes exactly one table; name the others in USING".into(),
        )));
    };
    if delete.returning.is_some()
        || delete.output.is_some()
        || delete.limit.is_some()
        || !delete.order_by.is_empty()
    {
        return Err(Error::Sql(SqlError::Unsupported(
            "DELETE supports FROM <table> [USING …] [WHERE …] only (no RETURNING, ORDER BY or LIMIT)"
                .into(),
        )));
    }
    let (table, alias) = dml_target(session, target, "DELETE")?;
    let view = writable_view(session, &table)?;
    let using = delete.using.as_deref().unwrap_or_default();
    let (input, streamed) = select_rows(
        session,
        &table,
        &alias,
        vec![rowid_of(&alias)],
        using,
        delete.selection.as_ref(),
    )
    .await?;
    let writer = row_writer(session, &view);
    let deleter = writer.clone();
    let build = move |batch: &RecordBatch, _| Ok(deleter.delete(batch));
    if streamed {
        return Ok(apply_input(writer.store().clone(), input, true, build).await?);
    }
    // USING may match a row more than once; it is deleted once.
    let mut rows = collect_rows(input, build).await?;
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows.dedup_by(|a, b| a.0 == b.0);
    Ok(writer.apply(rows).await?)
}

/// `UPDATE t SET … [FROM …] [WHERE …]`; returns how many rows changed.
/// A row that the FROM tables match more than once is an error.
pub(crate) async fn update(session: &Session, update: Update) -> crate::Result<u64> {
    if update.returning.is_some()
        || update.output.is_some()
        || update.limit.is_some()
        || update.or.is_some()
        || !update.order_by.is_empty()
    {
        return Err(Error::Sql(SqlError::Unsupported(
            "UPDATE supports <table> SET … [FROM …] [WHERE …] only (no RETURNING, ORDER BY or LIMIT)"
                .into(),
        )));
    }
    let (table, alias) = dml_target(session, &update.table, "UPDATE")?;
    let view = writable_view(session, &table)?;
    let qualified = view.store().layout.name.clone();
    let mut select = vec![rowid_of(&alias)];
    let mut columns = Vec::new();
    for assignment in &update.assignments {
        let AssignmentTarget::ColumnName(target) = &assignment.target else {
            return Err(Error::Sql(SqlError::Invalid(
                "UPDATE assigns one column at a time: SET a = …, b = …".into(),
            )));
        };
        let parts = session.name_parts(target)?;
        let name = parts.last().cloned().unwrap_or_default();
        let Ok(index) = view.shape().schema.index_of(&name) else {
            return Err(Error::Sql(SqlError::UnknownColumn {
                table: qualified.to_string(),
                column: name,
            }));
        };
        if matches!(
            view.shape().sources[index],
            Source::RowKey { .. } | Source::KeyPart { .. }
        ) {
            return Err(Error::Sql(SqlError::Invalid(format!(
                "UPDATE cannot change key column '{name}' of table '{qualified}': DELETE the row and INSERT it again"
            ))));
        }
        if columns.contains(&index) {
            return Err(Error::Sql(SqlError::Invalid(format!(
                "UPDATE assigns column '{name}' of table '{qualified}' twice"
            ))));
        }
        columns.push(index);
        select.push(SelectItem::ExprWithAlias {
            expr: assignment.value.clone(),
            alias: Ident::with_quote('"', format!("__v{}", columns.len())),
        });
    }
    let from = match &update.from {
        Some(UpdateTableFromKind::BeforeSet(t) | UpdateTableFromKind::AfterSet(t)) => t.as_slice(),
        None => &[],
    };
    let (input, streamed) = select_rows(
        session,
        &table,
        &alias,
        select,
        from,
        update.selection.as_ref(),
    )
    .await?;
    let writer = row_writer(session, &view);
    let updater = writer.clone();
    let build = move |batch: &RecordBatch, _| updater.update(&columns, batch);
    if streamed {
        return Ok(apply_input(writer.store().clone(), input, true, build).await?);
    }
    let rows = collect_rows(input, build).await?;
    if !from.is_empty() {
        let mut keys: Vec<&[u8]> = rows.iter().map(|(k, _)| k.as_slice()).collect();
        keys.sort_unstable();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::Sql(SqlError::Invalid(format!(
                "UPDATE … FROM matches a row of table '{qualified}' more than once; make the join match each row at most once"
            ))));
        }
    }
    Ok(writer.apply(rows).await?)
}
