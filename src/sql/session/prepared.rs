//! Prepared statements: a query or INSERT planned once and run many times
//! with parameters (`$1`, `$2`, …), from Rust ([`Session::prepare`]) or
//! from SQL (`PREPARE name AS …`, `EXECUTE name(…)`, `DEALLOCATE name`).
//!
//! Both run through the front door ([`crate::sql::session::front_door`]) as shapes
//! with parameters of their own: a key lookup skips DataFusion altogether,
//! a query runs its cached optimised plan. SQL's `PREPARE` and `EXECUTE`
//! are DataFusion's own, with the front door in front.

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::logical_expr::{Deallocate, Expr, LogicalPlan, Statement as PlanStatement};

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;

use crate::db::retrying_async;
use crate::error::{Error, Result};
use crate::sql::read::key_lookup::KeyLookup;
use crate::sql::session::dispatch::has_into;
use crate::sql::session::front_door::{Answer, PreparedMemo};
use crate::sql::session::{Parsed, Planned, SqlPrepared, Stamp};
use crate::sql::SqlError;
use crate::sql::{from_df, Frame, Session};

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
    /// The statement and its plan as written, made again when DDL or a
    /// change of the session's settings came since they were made: the
    /// statement's schema, and how it runs with values the front door does
    /// not take.
    planned: Arc<Mutex<Planned<Arc<PreparedPlan>>>>,
    /// Its plan kind in the front door, as found last.
    memo: Arc<PreparedMemo>,
}

#[derive(Debug, Clone)]
struct PreparedPlan {
    statement: DfStatement,
    plan: LogicalPlan,
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
            memo: Arc::default(),
        })
    }

    /// Whether `sql` holds a query (`SELECT`, `VALUES`, `WITH …`,
    /// `EXPLAIN`): a statement that returns rows rather than changes
    /// something; an error when it does not parse. One statement that
    /// begins with `INSERT`, `UPDATE` or `DELETE` is not a query whether or
    /// not it parses, and is not parsed here: running it parses it, if its
    /// plan is not cached (a parse costs an INSERT of one row more than a
    /// tenth of its time).
    pub fn is_query(&self, sql: &str) -> Result<bool> {
        if changes_rows_alone(sql) {
            return Ok(false);
        }
        let statements = self.parse_script(sql)?;
        Ok(statements.iter().any(|s| match s {
            Parsed::Sql(DfStatement::Explain(_)) => true,
            Parsed::Sql(DfStatement::Statement(inner)) => match inner.as_ref() {
                SqlStatement::Query(query) => !has_into(query),
                SqlStatement::Explain { .. } => true,
                _ => false,
            },
            _ => false,
        }))
    }

    /// Whether `sql` is one statement that can be prepared: a query or an
    /// `INSERT`.
    pub fn can_prepare(&self, sql: &str) -> Result<bool> {
        let statements = self.parse_script(sql)?;
        Ok(statements.len() == 1
            && statements
                .iter()
                .all(|s| matches!(s, Parsed::Sql(s) if self.is_datafusions(s))))
    }

    async fn plan_prepared(&self, sql: &str) -> Result<Planned<Arc<PreparedPlan>>> {
        let stamp = self.stamp();
        let mut statements = self.parse(sql)?;
        let statement = match (statements.pop_front(), statements.is_empty()) {
            (Some(statement), true) => statement,
            (None, _) => {
                return Err(Error::Sql(SqlError::Invalid(
                    "no statement to prepare".into(),
                )))
            }
            (Some(_), false) => {
                return Err(Error::Sql(SqlError::Invalid(
                    "Session::prepare takes one statement; this text holds several".into(),
                )))
            }
        };
        if !self.is_datafusions(&statement) {
            return Err(Error::Sql(SqlError::Unsupported(format!(
                "only queries and INSERT can be prepared, not: {statement}"
            ))));
        }
        let plan = self.plan(statement.clone()).await?;
        if matches!(plan, LogicalPlan::Ddl(_) | LogicalPlan::Statement(_)) {
            return Err(Error::Sql(SqlError::Unsupported(format!(
                "only queries and INSERT can be prepared, not: {sql}"
            ))));
        }
        Ok(Planned {
            stamp,
            value: Arc::new(PreparedPlan { statement, plan }),
        })
    }

    /// `EXECUTE` of a statement of SQL `PREPARE`, through the front door.
    /// `None` when it does not take it: DataFusion runs it then, prepared
    /// again first when DDL changed the catalog since it was prepared, so
    /// its names resolve as they do now (DataFusion's stored plan would read
    /// the tables they named then).
    pub(in crate::sql) async fn execute_prepared(
        &self,
        plan: &LogicalPlan,
    ) -> Result<Option<Answer>> {
        let LogicalPlan::Statement(PlanStatement::Execute(execute)) = plan else {
            return Ok(None);
        };
        let Some(mut prepared) = self.sql_prepared().get(&execute.name).cloned() else {
            return Ok(None);
        };
        if !self.is_current(prepared.stamp) {
            prepared = self.prepare_again(prepared.value.statement).await?;
        }
        let fields = &prepared.value.fields;
        // Each value as its declared type, as DataFusion's EXECUTE takes it.
        let values = execute
            .parameters
            .iter()
            .enumerate()
            .map(|(at, parameter)| {
                let Expr::Literal(value, metadata) = parameter else {
                    return None;
                };
                let value = ScalarAndMetadata::new(value.clone(), metadata.clone());
                match fields.get(at) {
                    Some(field) => value.cast_storage_to(field.data_type()).ok(),
                    None => Some(value),
                }
                .map(|value| value.value)
            })
            .collect::<Option<Vec<_>>>()
            .filter(|values| fields.is_empty() || fields.len() == values.len());
        let Some(values) = values else {
            return Ok(None);
        };
        let inner = &prepared.value.inner;
        self.door_prepared(&inner.to_string(), inner, values, None)
            .await
    }

    /// Plans a `PREPARE` statement again and replaces DataFusion's stored
    /// plan with it. When it no longer plans (its table was dropped), the
    /// error is returned and the old statement stays as it was.
    async fn prepare_again(&self, statement: DfStatement) -> Result<Planned<SqlPrepared>> {
        let stamp = self.stamp();
        let plan = self.plan(statement.clone()).await?;
        let LogicalPlan::Statement(PlanStatement::Prepare(prepare)) = &plan else {
            return Err(Error::Sql(SqlError::Invalid(format!(
                "'{statement}' is not a PREPARE"
            ))));
        };
        let name = prepare.name.clone();
        let deallocate = PlanStatement::Deallocate(Deallocate { name: name.clone() });
        self.ctx
            .execute_logical_plan(LogicalPlan::Statement(deallocate))
            .await?;
        self.ctx.execute_logical_plan(plan.clone()).await?;
        self.remember_prepared(&plan, stamp, Some(statement));
        self.sql_prepared().get(&name).cloned().ok_or_else(|| {
            Error::Sql(SqlError::Invalid(format!(
                "prepared statement '{name}' vanished"
            )))
        })
    }

    /// Keeps or forgets a `PREPARE` (its `statement`) or `DEALLOCATE`
    /// that DataFusion has run; `stamp` is the session's before it was
    /// planned.
    pub(in crate::sql) fn remember_prepared(
        &self,
        plan: &LogicalPlan,
        stamp: Stamp,
        statement: Option<DfStatement>,
    ) {
        match (plan, statement) {
            (LogicalPlan::Statement(PlanStatement::Prepare(prepare)), Some(statement)) => {
                let DfStatement::Statement(outer) = &statement else {
                    return;
                };
                let SqlStatement::Prepare {
                    statement: inner,
                    data_types,
                    ..
                } = outer.as_ref()
                else {
                    return;
                };
                // Only declared types: DataFusion infers the others from
                // the tables as they were when it was prepared.
                let fields = match data_types.is_empty() {
                    true => Vec::new(),
                    false => prepare.fields.clone(),
                };
                let value = SqlPrepared {
                    inner: DfStatement::Statement(inner.clone()),
                    statement,
                    fields,
                };
                self.sql_prepared()
                    .insert(prepare.name.clone(), Planned { stamp, value });
            }
            (LogicalPlan::Statement(PlanStatement::Deallocate(deallocate)), _) => {
                self.sql_prepared().remove(&deallocate.name);
            }
            _ => {}
        }
    }
}

impl Prepared {
    /// Runs the statement with `params` as `$1`, `$2`, … and returns its
    /// rows (for an `INSERT`, the count). When DDL changed the catalog
    /// since it was planned (a table altered, dropped or renamed), the
    /// statement is planned again from its text first, so its names
    /// resolve as they do now.
    pub async fn query(&self, params: Vec<ScalarValue>) -> Result<Vec<RecordBatch>> {
        // Run again when DDL changed the table after planning (nothing was
        // written then): the statement is planned again.
        retrying_async(|| async { self.execute(params.clone()).await?.collect().await }).await
    }

    /// Runs the statement with `params` as `$1`, `$2`, … and returns its
    /// result unread, so that a query's rows can be streamed
    /// ([`Frame::execute_stream`]). Unlike [`Prepared::query`], a write
    /// that finds its table changed by DDL meanwhile is not run again.
    pub async fn execute(&self, params: Vec<ScalarValue>) -> Result<Frame> {
        let session = &self.session;
        let planned = self.current().await?;
        let answer = session
            .door_prepared(
                &self.sql,
                &planned.statement,
                params.clone(),
                Some(&self.memo),
            )
            .await?;
        if let Some(answer) = answer {
            return session.answer_frame(answer);
        }
        let list = params.into_iter().map(ScalarAndMetadata::from).collect();
        let plan = planned
            .plan
            .clone()
            .with_param_values(ParamValues::List(list))
            .map_err(from_df)?;
        Ok(match session.as_written(plan).await? {
            Ok(frame) => frame,
            Err(plan) => session.ctx.execute_logical_plan(plan).await?.into(),
        })
    }

    /// The types of its parameters `$1`, `$2`, … in order; `None` where
    /// the statement leaves one open.
    pub fn parameter_types(&self) -> Result<Vec<Option<DataType>>> {
        let named = self
            .planned()
            .value
            .plan
            .get_parameter_types()
            .map_err(from_df)?;
        let mut numbered: Vec<(usize, Option<DataType>)> = named
            .into_iter()
            .filter_map(|(name, data_type)| {
                let n: usize = name.strip_prefix('$')?.parse().ok()?;
                (n >= 1).then_some((n, data_type))
            })
            .collect();
        numbered.sort_by_key(|(n, _)| *n);
        let mut types = vec![None; numbered.last().map_or(0, |(n, _)| *n)];
        for (n, data_type) in numbered {
            types[n - 1] = data_type;
        }
        Ok(types)
    }

    /// The statement and its plan, parsed and made again if the catalog
    /// or the session's settings changed since they were made.
    async fn current(&self) -> Result<Arc<PreparedPlan>> {
        let planned = self.planned().clone();
        if self.session.is_current(planned.stamp) {
            return Ok(planned.value);
        }
        let again = self.session.plan_prepared(&self.sql).await?;
        let value = Arc::clone(&again.value);
        *self.planned() = again;
        Ok(value)
    }

    fn planned(&self) -> MutexGuard<'_, Planned<Arc<PreparedPlan>>> {
        self.planned.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The schema of the rows [`Prepared::query`] returns.
    pub fn schema(&self) -> SchemaRef {
        Arc::new(self.planned().value.plan.schema().as_arrow().clone())
    }

    /// Whether it runs as a key lookup, without DataFusion's optimizer
    /// and executor.
    pub fn is_key_lookup(&self) -> bool {
        KeyLookup::from_plan(&self.planned().value.plan).is_some()
    }

    /// Whether it writes (an `INSERT`) rather than returns rows.
    pub fn writes(&self) -> bool {
        matches!(self.planned().value.plan, LogicalPlan::Dml(_))
    }

    /// The session it runs in.
    pub fn session(&self) -> &Session {
        &self.session
    }
}

/// Whether `sql` is one statement that begins with `INSERT`, `UPDATE` or
/// `DELETE`: the text holds no `;` but at its end, so no second statement
/// (one with a `;` inside a string literal is not recognised, and is
/// parsed instead).
fn changes_rows_alone(sql: &str) -> bool {
    let text = sql.trim_start();
    let word_len = text
        .bytes()
        .position(|b| !b.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let word = &text[..word_len];
    let rest = text.trim_end().strip_suffix(';').unwrap_or(text);
    ["INSERT", "UPDATE", "DELETE"]
        .iter()
        .any(|w| word.eq_ignore_ascii_case(w))
        && !rest.contains(';')
}

#[cfg(test)]
mod tests {
    use super::changes_rows_alone;

    #[test]
    fn one_insert_update_or_delete_is_known_from_its_text() {
        for sql in [
            "INSERT INTO t VALUES (1)",
            "  insert into t values (1);  ",
            "UPDATE t SET a = 1",
            "delete from t",
            "INSERT INTO t VALUES ('no query here')",
        ] {
            assert!(changes_rows_alone(sql), "{sql}");
        }
        for sql in [
            "SELECT 1",
            "INSERT INTO t VALUES (1); SELECT 1",
            "INSERT INTO t VALUES ('a;b')",
            "INSERTED",
            "WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x",
            "EXPLAIN INSERT INTO t VALUES (1)",
            "-- INSERT\nSELECT 1",
            "",
        ] {
            assert!(!changes_rows_alone(sql), "{sql}");
        }
    }
}
