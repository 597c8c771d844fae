//! Prepared statements: a query or INSERT planned once and run many times
//! with parameters (`$1`, `$2`, …), from Rust ([`Session::prepare`]) or
//! from SQL (`PREPARE name AS …`, `EXECUTE name(…)`, `DEALLOCATE name`).
//!
//! Running one skips parsing and SQL planning; a key lookup
//! ([`crate::sql::key_lookup`]) skips DataFusion altogether. SQL's `PREPARE`
//! and `EXECUTE` are DataFusion's own, with the key lookup in front.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::logical_expr::{Deallocate, Expr, LogicalPlan, Statement as PlanStatement};

use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr as SqlExpr, Statement as SqlStatement, Value as SqlValue,
};

use crate::db::retrying_async;
use crate::error::{Error, Result};
use crate::sql::dispatch::has_into;
use crate::sql::dml::constant_insert::ConstantInsert;
use crate::sql::dml::count_batch;
use crate::sql::key_lookup::KeyLookup;
use crate::sql::literal::literal_value;
use crate::sql::session::{Planned, SqlPrepared};
use crate::sql::text_literals::select_shape;
use crate::sql::{from_df, Session};

/// A statement planned once, run with [`Prepared::query`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> widesql::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// use datafusion::common::ScalarValue;
/// let session = widesql::Db::open(dir.path())?.session();
/// session.run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)").await?;
/// let insert = session.prepare("INSERT INTO t VALUES ($1, $2)").await?;
/// for (key, n) in [("a", 1), ("b", 2)] {
///     insert.query(vec![ScalarValue::from(key), ScalarValue::from(n as i64)]).await?;
/// }
/// let get = session.prepare("SELECT n FROM t WHERE _key = $1").await?;
/// let batches = get.query(vec![ScalarValue::from("b")]).await?;
/// assert_eq!(batches[0].num_rows(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Prepared {
    session: Session,
    sql: String,
    /// The plan, replaced when DDL changed the catalog since it was made.
    planned: Arc<Mutex<Planned<PreparedPlan>>>,
}

/// The plan of a [`Prepared`] statement, and its key lookup if it is one.
#[derive(Debug, Clone)]
struct PreparedPlan {
    plan: LogicalPlan,
    lookup: Option<KeyLookup>,
}

impl Session {
    /// Plans one query or `INSERT` with parameters `$1`, `$2`, … for
    /// [`Prepared::query`]. Statements widesql runs itself (DDL, `DELETE`,
    /// `UPDATE`, `SET`) cannot be prepared.
    pub async fn prepare(&self, sql: &str) -> Result<Prepared> {
        let planned = self.plan_prepared(sql).await?;
        Ok(Prepared {
            session: self.clone(),
            sql: sql.to_string(),
            planned: Arc::new(Mutex::new(planned)),
        })
    }

    async fn plan_prepared(&self, sql: &str) -> Result<Planned<PreparedPlan>> {
        let generation = self.generation();
        let mut statements = self.parse(sql)?;
        let statement = match (statements.pop_front(), statements.is_empty()) {
            (Some(statement), true) => statement,
            (None, _) => return Err(Error::Sql("no statement to prepare".into())),
            (Some(_), false) => {
                return Err(Error::Sql(
                    "Session::prepare takes one statement; this text holds several".into(),
                ))
            }
        };
        if !self.is_datafusions(&statement) {
            return Err(Error::Sql(format!(
                "only queries and INSERT can be prepared, not: {statement}"
            )));
        }
        let plan = self.plan(statement).await?;
        if matches!(plan, LogicalPlan::Ddl(_) | LogicalPlan::Statement(_)) {
            return Err(Error::Sql(format!(
                "only queries and INSERT can be prepared, not: {sql}"
            )));
        }
        let lookup = KeyLookup::from_plan(&plan);
        Ok(Planned {
            generation,
            value: PreparedPlan { plan, lookup },
        })
    }

    /// `EXECUTE` of a statement of SQL `PREPARE`. When DDL changed the
    /// catalog since it was prepared, it is prepared again first, so its
    /// names resolve as they do now (DataFusion's stored plan would read
    /// the tables they named then). A key lookup is answered here; `None`
    /// when it is not one (DataFusion runs it then).
    pub(super) async fn execute_prepared(&self, plan: &LogicalPlan) -> Result<Option<RecordBatch>> {
        let LogicalPlan::Statement(PlanStatement::Execute(execute)) = plan else {
            return Ok(None);
        };
        let Some(mut prepared) = self.sql_prepared().get(&execute.name).cloned() else {
            return Ok(None);
        };
        let outdated = prepared
            .value
            .lookup
            .as_ref()
            .is_some_and(|(p, _)| p.is_outdated());
        if outdated || !self.is_current(prepared.generation) {
            prepared = self.prepare_again(prepared.value.statement).await?;
        }
        let Some((lookup, fields)) = prepared.value.lookup else {
            return Ok(None);
        };
        let mut params = Vec::with_capacity(execute.parameters.len());
        for (at, parameter) in execute.parameters.iter().enumerate() {
            let Expr::Literal(value, metadata) = parameter else {
                return Ok(None);
            };
            let mut value = ScalarAndMetadata::new(value.clone(), metadata.clone());
            if let Some(field) = fields.get(at) {
                match value.cast_storage_to(field.data_type()) {
                    Ok(cast) => value = cast,
                    Err(_) => return Ok(None),
                }
            }
            params.push(value);
        }
        if !fields.is_empty() && fields.len() != params.len() {
            return Ok(None);
        }
        lookup.run(Some(&ParamValues::List(params)))
    }

    /// Plans a `PREPARE` statement again and replaces DataFusion's stored
    /// plan with it. When it no longer plans (its table was dropped), the
    /// error is returned and the old statement stays as it was.
    async fn prepare_again(&self, statement: DfStatement) -> Result<Planned<SqlPrepared>> {
        let generation = self.generation();
        let plan = self.plan(statement.clone()).await?;
        let LogicalPlan::Statement(PlanStatement::Prepare(prepare)) = &plan else {
            return Err(Error::Sql(format!("'{statement}' is not a PREPARE")));
        };
        let name = prepare.name.clone();
        let deallocate = PlanStatement::Deallocate(Deallocate { name: name.clone() });
        self.ctx
            .execute_logical_plan(LogicalPlan::Statement(deallocate))
            .await?;
        self.ctx.execute_logical_plan(plan.clone()).await?;
        self.remember_prepared(&plan, generation, Some(statement));
        self.sql_prepared()
            .get(&name)
            .cloned()
            .ok_or_else(|| Error::Sql(format!("prepared statement '{name}' vanished")))
    }

    /// Keeps or forgets a `PREPARE` (its `statement`) or `DEALLOCATE`
    /// that DataFusion has run; `generation` is the catalog's before it
    /// was planned.
    pub(super) fn remember_prepared(
        &self,
        plan: &LogicalPlan,
        generation: u64,
        statement: Option<DfStatement>,
    ) {
        match (plan, statement) {
            (LogicalPlan::Statement(PlanStatement::Prepare(prepare)), Some(statement)) => {
                let lookup = KeyLookup::from_plan(&prepare.input)
                    .map(|lookup| (lookup, prepare.fields.clone()));
                let value = SqlPrepared { statement, lookup };
                self.sql_prepared()
                    .insert(prepare.name.clone(), Planned { generation, value });
            }
            (LogicalPlan::Statement(PlanStatement::Deallocate(deallocate)), _) => {
                self.sql_prepared().remove(&deallocate.name);
            }
            _ => {}
        }
    }
}

impl Session {
    /// [`Session::key_lookup_of`] straight from the text: its literals are
    /// taken out without the parser ([`select_shape`]), and a shape seen
    /// before runs without parsing at all. `None` when the text is not a
    /// key lookup (or the scanner is unsure of it): parse it then.
    pub(super) async fn key_lookup_text(&self, text: &str) -> Result<Option<RecordBatch>> {
        if !self.parses_generic_sql() {
            return Ok(None);
        }
        let Some(shape) = select_shape(text) else {
            return Ok(None);
        };
        let numbers = self.numbers();
        let Some(params) = shape
            .literals
            .iter()
            .map(|literal| literal_value(literal, numbers).map(ScalarAndMetadata::from))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let parsed = || {
            let mut statements = self.parse(&shape.template).ok()?;
            let statement = statements.pop_front().filter(|_| statements.is_empty())?;
            is_query(&statement).then_some(statement)
        };
        self.key_lookup_of_shape(shape.template.clone(), parsed, params)
            .await
    }

    /// An ad hoc query that is a key lookup, answered without planning it:
    /// its literals become parameters, and the key lookup of that shape is
    /// planned once per session (like a prepared statement nobody had to
    /// prepare). `None` when the query is not one.
    pub(super) async fn key_lookup_of(
        &self,
        statement: &DfStatement,
    ) -> Result<Option<RecordBatch>> {
        let DfStatement::Statement(inner) = statement else {
            return Ok(None);
        };
        if !is_query(statement) {
            return Ok(None);
        }
        let numbers = self.numbers();
        let mut shape = inner.as_ref().clone();
        let mut params: Vec<ScalarAndMetadata> = Vec::new();
        let _ = visit_expressions_mut(&mut shape, |expr| {
            if let SqlExpr::Value(value) = expr {
                if let Some(param) = literal_value(&value.value, numbers) {
                    params.push(ScalarAndMetadata::from(param));
                    let placeholder = SqlValue::Placeholder(format!("${}", params.len()));
                    *expr = SqlExpr::Value(placeholder.with_empty_span());
                }
            }
            ControlFlow::<()>::Continue(())
        });
        if params.is_empty() {
            return Ok(None);
        }
        let text = shape.to_string();
        let parsed = || Some(DfStatement::Statement(Box::new(shape)));
        self.key_lookup_of_shape(text, parsed, params).await
    }

    /// Runs the key lookup of the shape `text` (a query whose literals are
    /// `$1, …`) with `params`, planning the shape (`parsed`) once per
    /// catalog generation and settings; `None` when it is not a key lookup
    /// or has no parameters.
    async fn key_lookup_of_shape(
        &self,
        text: String,
        parsed: impl FnOnce() -> Option<DfStatement>,
        params: Vec<ScalarAndMetadata>,
    ) -> Result<Option<RecordBatch>> {
        if params.is_empty() {
            return Ok(None);
        }
        let key = self.shape_key(text);
        let lookup = match self.lookup_shapes.get(&key, self.generation()) {
            Some(None) => return Ok(None),
            Some(Some(lookup)) if !lookup.is_outdated() => lookup,
            _ => {
                let generation = self.generation();
                let lookup = match parsed() {
                    Some(statement) => match self.plan(statement).await {
                        Ok(plan) => KeyLookup::from_plan(&plan),
                        Err(_) => None,
                    },
                    None => None,
                };
                self.lookup_shapes.insert(key, generation, lookup.clone());
                match lookup {
                    Some(lookup) => lookup,
                    None => return Ok(None),
                }
            }
        };
        lookup.run(Some(&ParamValues::List(params)))
    }
}

/// Whether `statement` is a query that returns rows (no `SELECT … INTO`).
fn is_query(statement: &DfStatement) -> bool {
    matches!(statement, DfStatement::Statement(inner)
        if matches!(inner.as_ref(), SqlStatement::Query(query) if !has_into(query)))
}

impl Prepared {
    /// Runs the statement with `params` as `$1`, `$2`, … and returns its
    /// rows (for an `INSERT`, the count). When DDL changed the catalog
    /// since it was planned (a table altered, dropped or renamed), the
    /// statement is planned again from its text first, so its names
    /// resolve as they do now.
    pub async fn query(&self, params: Vec<ScalarValue>) -> Result<Vec<RecordBatch>> {
        let params = ParamValues::List(params.into_iter().map(ScalarAndMetadata::from).collect());
        let planned = self.current().await?;
        if let Some(Some(batch)) = planned
            .lookup
            .as_ref()
            .map(|p| p.run(Some(&params)))
            .transpose()?
        {
            return Ok(vec![batch]);
        }
        let mut first = Some(planned);
        retrying_async(|| {
            let (params, first) = (params.clone(), first.take());
            async move {
                // After the first attempt, DDL changed the table after
                // planning (nothing was written): the statement is planned
                // again.
                let planned = match first {
                    Some(planned) => planned,
                    None => self.current().await?,
                };
                match ConstantInsert::of(&planned.plan) {
                    Some(insert) => {
                        let settings = self.session.write_settings();
                        let rows = insert.write(settings, Some(&params)).await;
                        rows.and_then(count_batch)
                            .map(|batch| vec![batch])
                            .map_err(from_df)
                    }
                    None => {
                        let plan = planned.plan.with_param_values(params).map_err(from_df)?;
                        let frame = self.session.ctx.execute_logical_plan(plan).await?;
                        frame.collect().await.map_err(from_df)
                    }
                }
            }
        })
        .await
    }

    /// The plan, made again if the catalog changed since it was made.
    async fn current(&self) -> Result<PreparedPlan> {
        let planned = self.planned().clone();
        let outdated = planned
            .value
            .lookup
            .as_ref()
            .is_some_and(KeyLookup::is_outdated);
        if !outdated && self.session.is_current(planned.generation) {
            return Ok(planned.value);
        }
        let again = self.session.plan_prepared(&self.sql).await?;
        let plan = again.value.clone();
        *self.planned() = again;
        Ok(plan)
    }

    fn planned(&self) -> MutexGuard<'_, Planned<PreparedPlan>> {
        self.planned.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The schema of the rows [`Prepared::query`] returns.
    pub fn schema(&self) -> SchemaRef {
        Arc::new(self.planned().value.plan.schema().as_arrow().clone())
    }

    /// Whether it runs as a key lookup, without DataFusion's optimizer
    /// and executor.
    pub fn is_key_lookup(&self) -> bool {
        self.planned().value.lookup.is_some()
    }
}
