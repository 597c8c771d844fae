//! Prepared statements: a query or INSERT planned once and run many times
//! with parameters (`$1`, `$2`, …), from Rust ([`Session::prepare`]) or
//! from SQL (`PREPARE name AS …`, `EXECUTE name(…)`, `DEALLOCATE name`).
//!
//! Running one skips parsing and SQL planning; a point read
//! ([`crate::sql::point_get`]) skips DataFusion altogether. SQL's `PREPARE`
//! and `EXECUTE` are DataFusion's own, with the point read in front.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::logical_expr::{Expr, LogicalPlan, Statement as PlanStatement};

use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr as SqlExpr, Statement as SqlStatement, Value as SqlValue,
};

use crate::error::{Error, Result};
use crate::sql::dispatch::has_into;
use crate::sql::point_get::PointGet;
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
    plan: LogicalPlan,
    point: Option<PointGet>,
}

impl Session {
    /// Plans one query or `INSERT` with parameters `$1`, `$2`, … for
    /// [`Prepared::query`]. Statements widesql runs itself (DDL, `DELETE`,
    /// `UPDATE`, `SET`) cannot be prepared.
    pub async fn prepare(&self, sql: &str) -> Result<Prepared> {
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
        Ok(Prepared {
            session: self.clone(),
            sql: sql.to_string(),
            point: PointGet::from_plan(&plan),
            plan,
        })
    }

    /// `EXECUTE` of a prepared point read, answered without DataFusion;
    /// `None` when it is not one (DataFusion runs it then).
    pub(super) fn execute_point(&self, plan: &LogicalPlan) -> Result<Option<RecordBatch>> {
        let LogicalPlan::Statement(PlanStatement::Execute(execute)) = plan else {
            return Ok(None);
        };
        let Some((point, fields)) = self.points().get(&execute.name).cloned() else {
            return Ok(None);
        };
        if point.is_outdated() {
            return Ok(None);
        }
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
        point.run(Some(&ParamValues::List(params)))
    }

    /// Keeps or forgets the point read of a `PREPARE` or `DEALLOCATE`
    /// that DataFusion has run.
    pub(super) fn remember_prepared(&self, plan: &LogicalPlan) {
        match plan {
            LogicalPlan::Statement(PlanStatement::Prepare(prepare)) => {
                if let Some(point) = PointGet::from_plan(&prepare.input) {
                    self.points()
                        .insert(prepare.name.clone(), (point, prepare.fields.clone()));
                }
            }
            LogicalPlan::Statement(PlanStatement::Deallocate(deallocate)) => {
                self.points().remove(&deallocate.name);
            }
            _ => {}
        }
    }
}

/// Shapes remembered per session; beyond this many the memory starts over.
const MAX_SHAPES: usize = 1024;

/// The parameter a literal of a statement becomes, if it is one DataFusion
/// would read as this value.
fn parameter_of(value: &SqlValue) -> Option<ScalarValue> {
    match value {
        SqlValue::SingleQuotedString(text) => Some(ScalarValue::from(text.as_str())),
        SqlValue::Boolean(b) => Some(ScalarValue::Boolean(Some(*b))),
        SqlValue::Number(text, false) => match text.parse::<i64>() {
            Ok(n) => Some(ScalarValue::Int64(Some(n))),
            Err(_) => text
                .parse::<f64>()
                .ok()
                .map(|f| ScalarValue::Float64(Some(f))),
        },
        _ => None,
    }
}

impl Session {
    /// An ad hoc query that is a point read, answered without planning it:
    /// its literals become parameters, and the point read of that shape is
    /// planned once per session (like a prepared statement nobody had to
    /// prepare). `None` when the query is not one.
    pub(super) async fn point_read_of(
        &self,
        statement: &DfStatement,
    ) -> Result<Option<RecordBatch>> {
        let DfStatement::Statement(inner) = statement else {
            return Ok(None);
        };
        if !matches!(inner.as_ref(), SqlStatement::Query(query) if !has_into(query)) {
            return Ok(None);
        }
        let mut shape = inner.as_ref().clone();
        let mut params: Vec<ScalarAndMetadata> = Vec::new();
        let _ = visit_expressions_mut(&mut shape, |expr| {
            if let SqlExpr::Value(value) = expr {
                if let Some(param) = parameter_of(&value.value) {
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
        let key = shape.to_string();
        let known = self.shapes().get(&key).cloned();
        let point = match known {
            Some(None) => return Ok(None),
            Some(Some(point)) if !point.is_outdated() => point,
            _ => {
                let statement = DfStatement::Statement(Box::new(shape));
                let point = match self.plan(statement).await {
                    Ok(plan) => PointGet::from_plan(&plan),
                    Err(_) => None,
                };
                let mut shapes = self.shapes();
                if shapes.len() >= MAX_SHAPES {
                    shapes.clear();
                }
                shapes.insert(key, point.clone());
                match point {
                    Some(point) => point,
                    None => return Ok(None),
                }
            }
        };
        point.run(Some(&ParamValues::List(params)))
    }
}

impl Prepared {
    /// Runs the statement with `params` as `$1`, `$2`, … and returns its
    /// rows (for an `INSERT`, the count). When DDL changed a table since it
    /// was prepared, the statement is planned again from its text.
    pub async fn query(&self, params: Vec<ScalarValue>) -> Result<Vec<RecordBatch>> {
        let params = ParamValues::List(params.into_iter().map(ScalarAndMetadata::from).collect());
        if self.point.as_ref().is_some_and(PointGet::is_outdated) {
            // DDL changed the table: plan the text again. (A point read run
            // on a replaced layout is refused: it falls to DataFusion.)
            let again = Box::pin(self.session.prepare(&self.sql)).await?;
            return Box::pin(again.run(params)).await;
        }
        self.run(params).await
    }

    async fn run(&self, params: ParamValues) -> Result<Vec<RecordBatch>> {
        if let Some(Some(batch)) = self
            .point
            .as_ref()
            .map(|p| p.run(Some(&params)))
            .transpose()?
        {
            return Ok(vec![batch]);
        }
        let plan = self
            .plan
            .clone()
            .with_param_values(params.clone())
            .map_err(from_df)?;
        let result = async {
            let frame = self.session.ctx.execute_logical_plan(plan).await?;
            frame.collect().await.map_err(from_df)
        }
        .await;
        match result {
            // DDL changed the table after planning: nothing was written.
            Err(e) if e.is_retryable() => {
                let again = Box::pin(self.session.prepare(&self.sql)).await?;
                let plan = again.plan.with_param_values(params).map_err(from_df)?;
                let frame = self.session.ctx.execute_logical_plan(plan).await?;
                frame.collect().await.map_err(from_df)
            }
            other => other,
        }
    }

    /// The schema of the rows [`Prepared::query`] returns.
    pub fn schema(&self) -> SchemaRef {
        std::sync::Arc::new(self.plan.schema().as_arrow().clone())
    }

    /// Whether it runs as a point read, without DataFusion's optimizer
    /// and executor.
    pub fn is_point_read(&self) -> bool {
        self.point.is_some()
    }
}
