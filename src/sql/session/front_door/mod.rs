//! The front door: every statement that can run from a plan made before
//! comes in here, from [`Session::run`], [`Session::sql`], prepared
//! statements ([`Session::prepare`], SQL `PREPARE`/`EXECUTE`), the CLI and
//! exports. Planning a statement (turning its syntax into a logical plan,
//! analysing and optimising that plan) costs more than running a short
//! one, so a statement *shape* is planned once and run with each
//! statement's values:
//!
//! 1. **Normalise** ([`normalise`], [`text_literals`]). Value literals
//!    become parameters `$1, $2, …`, as SQL Server's simple
//!    parameterisation does:
//!    - a `SELECT` read off its text (no parser): every string and number
//!      literal, when these are the values a parsed query's normalisation
//!      lifts; a query without `WHERE`, where it lifts none (`SELECT 1`),
//!      as it is;
//!    - a parsed query: the literals of its `WHERE` clauses that are values
//!      (an operand of a comparison whose other side is no literal, an
//!      item of an `IN` list, a bound of `BETWEEN`). Literals anywhere else
//!      (the select list, where they name columns; `ORDER BY 1`; `LIMIT
//!      10`; a function's argument) stay, and so do all literals of a
//!      query with a subquery (DataFusion evaluates some of a subquery's
//!      expressions while it plans) or with parameters of its own;
//!    - an `INSERT … VALUES` of literals, read off its text or parsed: its
//!      rows become one row of parameters;
//!    - a prepared statement keeps the parameters it has.
//! 2. **Look up** the shape's text, the types of its lifted literals and
//!    the names the session resolves in (its default project and dataset)
//!    in the database's plan cache ([`cache`]). An entry planned before the
//!    last DDL (catalog generation) is stale.
//! 3. **Plan on a miss** and choose the kind of plan ([`kind`]); each
//!    parameter is typed as its place in the plan (the column it is
//!    compared with), so that the plan is the one the literal would get:
//!    key ranges are pushed down and casts land on the value, not the
//!    column. The kinds, in the order they are tried:
//!    1. **key lookup**: a query reading plain columns of one table whose
//!       predicate only compares key columns with values; the rows are
//!       read and built into one batch without DataFusion;
//!    2. **constant insert**: an `INSERT … VALUES` of constants; its rows
//!       are filled into the plan's one row and written without
//!       DataFusion;
//!    3. **query**: any other query, kept optimised. A physical plan made
//!       for values unknown (a generic plan) is kept with it where a copy
//!       with each run's values put into its filters runs as a plan made
//!       for those values would ([`physical`]); otherwise a run binds the
//!       values and plans it physically.
//! 4. **Run** the kind with this statement's values, each converted to its
//!    place's type. A value of another kind than its place (a number
//!    compared with text, which DataFusion may compare as numbers), or one
//!    that does not convert there and back unchanged (`5.5` where an
//!    integer column is compared), plans the statement as written instead.
//!
//! Planned as written, as without the cache: statements other than those
//! above (DDL, `DELETE`, `UPDATE`, `SET`, `EXPLAIN`); queries that call a
//! function whose value can change within a statement or between
//! statements (`now()`, `random()`, also inside a view), since the
//! optimiser folds some of them into constants; queries that read anything
//! but widesql tables (a view, a registered file or table: what they hold
//! is not seen by the catalog generation); shapes that do not plan. A
//! statement planned as written still runs as a key lookup or a constant
//! insert when its plan is one ([`Session::as_written`]). A session whose
//! settings changed (`SET`, DataFusion DDL such as `CREATE VIEW`, or its
//! [`SessionContext`] handed out) keeps its plans apart from other
//! sessions'.
//!
//! The cache is bounded in entries and in an estimate of bytes, evicting
//! the least recently used plan; `SHOW widesql.plan_cache` and
//! [`Session::plan_cache_stats`] report it (every shape looked up counts a
//! hit or a miss), and `SET widesql.plan_cache = off` turns the door off
//! for a session.
//!
//! [`SessionContext`]: datafusion::execution::context::SessionContext

use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, PoisonError};

use datafusion::common::ScalarValue;
use datafusion::logical_expr::Volatility;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, Expr as SqlExpr, Statement as SqlStatement,
    Value as SqlValue,
};

mod cache;
mod eligibility;
mod generic;
mod kind;
mod normalise;
mod physical;
pub(crate) mod text_literals;

pub use cache::PlanCacheStats;
pub(crate) use cache::{CacheSwitches, PlanCache};
pub(crate) use kind::Answer;

use kind::{Form, PlanKind, Values};
use normalise::{insert_shape, insert_template, is_insert_template, lift_values, put_back_rows};
use text_literals::{scan_insert_values, select_shape, SelectShape};

use crate::error::Result;
use crate::sql::dml::constant_insert::{literal_rows, Cell};
use crate::sql::session::dispatch::has_into;
use crate::sql::session::Stamp;
use crate::sql::values::literal::{literal_value, Literal};
use crate::sql::Session;

/// The plan kind of a prepared statement, as found in the cache at a
/// [`Stamp`]: while no DDL and no change of the session's settings came
/// since, a run takes it from here, without building the cache key and
/// taking the cache's lock.
#[derive(Debug, Default)]
pub(crate) struct PreparedMemo(Mutex<Option<(Stamp, Option<Arc<PlanKind>>)>>);

impl PreparedMemo {
    /// The kind remembered at `stamp` (`Some(None)`: planned as written).
    fn get(&self, stamp: Stamp) -> Option<Option<Arc<PlanKind>>> {
        let memo = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match memo.as_ref() {
            Some((at, kind)) if *at == stamp && !kind.as_ref().is_some_and(|k| k.is_outdated()) => {
                Some(kind.clone())
            }
            _ => None,
        }
    }

    fn set(&self, stamp: Stamp, kind: Option<Arc<PlanKind>>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((stamp, kind));
    }
}

impl Session {
    /// A statement straight from its text, when the scanner reads it (one
    /// `INSERT … VALUES` of literals, or one `SELECT` whose literals are
    /// all values of its `WHERE` clauses); `None` when the text is to be
    /// parsed.
    pub(crate) async fn door_text(&self, text: &str) -> Result<Option<Answer>> {
        if !self.cache.is_enabled() || !self.parses_generic_sql() {
            return Ok(None);
        }
        let numbers = self.numbers();
        if let Some(scanned) = scan_insert_values(text) {
            let Some(rows) = literal_rows(scanned.rows, numbers) else {
                return Ok(None);
            };
            let width = rows.first().map_or(0, Vec::len);
            let template = insert_template(scanned.head, width);
            // Parsed only when the cache has no plan for it: an INSERT of
            // one row runs without a parse.
            let shape = || {
                let mut shape = self.parse_one(&template).ok()?;
                is_insert_template(&mut shape, width).then_some(shape)
            };
            return self.insert_rows(&template, shape, rows, false).await;
        }
        let Some(shape) = select_shape(text) else {
            return Ok(None);
        };
        let Some(params) = shape
            .literals
            .iter()
            .map(|literal| literal_value(literal, numbers))
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let (kind, hit) = self
            .shape_kind(Form::Text, &shape.template, &params, || {
                self.text_shape(&shape)
            })
            .await;
        // Only a query without `WHERE` is kept by its text: one with a
        // value there is parsed, so that each value does not make a shape.
        let has_where = text
            .as_bytes()
            .windows(5)
            .any(|word| word.eq_ignore_ascii_case(b"where"));
        if kind.is_some() || has_where {
            return self
                .answer_counted(kind, hit, Values::Params(params), false)
                .await;
        }
        let text = text.trim();
        let (kind, hit) = self
            .shape_kind(Form::Exact, text, &[], || self.exact_shape(text))
            .await;
        self.answer_counted(kind, hit, Values::Params(Vec::new()), false)
            .await
    }

    /// A `SELECT` read off its text, parsed, when a parsed query's
    /// normalisation lifts none of its literals: it is then its own shape,
    /// kept by its text without parsing it again. `None` otherwise: the
    /// text is parsed, and its values lifted.
    fn exact_shape(&self, text: &str) -> Option<DfStatement> {
        let statement = self.parse_one(text).ok()?;
        let DfStatement::Statement(query) = &statement else {
            return None;
        };
        let numbers = self.numbers();
        let lifted = lift_values(&mut query.as_ref().clone(), |value| {
            literal_value(value, numbers)
        });
        (is_query(&statement) && lifted.is_empty()).then_some(statement)
    }

    /// The template of a `SELECT` read off its text, parsed, when its
    /// parameters are exactly the values a parsed query's normalisation
    /// lifts (all of them in `WHERE` clauses, in the same order): it is
    /// then that query's shape. `None` otherwise: the text is parsed.
    fn text_shape(&self, shape: &SelectShape) -> Option<DfStatement> {
        let statement = self.parse_one(&shape.template).ok()?;
        if !is_query(&statement) {
            return None;
        }
        let DfStatement::Statement(template) = &statement else {
            return None;
        };
        let mut original = template.as_ref().clone();
        let _ = visit_expressions_mut(&mut original, |expr| {
            if let SqlExpr::Value(value) = expr {
                let literal = match &value.value {
                    SqlValue::Placeholder(p) => p
                        .strip_prefix('$')
                        .and_then(|n| n.parse::<usize>().ok())
                        .and_then(|n| shape.literals.get(n.checked_sub(1)?)),
                    _ => None,
                };
                if let Some(literal) = literal {
                    *expr = SqlExpr::Value(literal.clone().with_empty_span());
                }
            }
            ControlFlow::<()>::Continue(())
        });
        let numbers = self.numbers();
        let lifted = lift_values(&mut original, |value| literal_value(value, numbers));
        (lifted.len() == shape.literals.len() && original.to_string() == template.to_string())
            .then_some(statement)
    }

    /// A parsed statement, when it is a query or an `INSERT … VALUES` of
    /// literals; `None` when it is to be planned as written. The statement
    /// is left as it was.
    pub(crate) async fn door(&self, statement: &mut DfStatement) -> Result<Option<Answer>> {
        if !self.cache.is_enabled() {
            return Ok(None);
        }
        if let Some((shape, own_rows)) = insert_shape(statement) {
            let numbers = self.numbers();
            let rows = own_rows
                .iter()
                .map(|row| row.content.iter().map(Literal::of_expr).collect())
                .collect::<Option<Vec<_>>>()
                .and_then(|rows| literal_rows(rows, numbers));
            let answer = match rows {
                Some(rows) => {
                    let text = shape.to_string();
                    self.insert_rows(&text, || Some(shape), rows, true).await
                }
                None => Ok(None),
            };
            put_back_rows(statement, own_rows);
            return answer;
        }
        if !is_query(statement) {
            return Ok(None);
        }
        let DfStatement::Statement(inner) = statement else {
            return Ok(None);
        };
        let numbers = self.numbers();
        let mut shape = inner.as_ref().clone();
        let params = lift_values(&mut shape, |value| literal_value(value, numbers));
        let text = shape.to_string();
        let planned = || Some(DfStatement::Statement(Box::new(shape)));
        let (kind, hit) = self.shape_kind(Form::Query, &text, &params, planned).await;
        self.answer_counted(kind, hit, Values::Params(params), true)
            .await
    }

    /// A prepared statement (`text` parsed as `statement`, a query or an
    /// INSERT) run with `params`; `None` when it is to be planned as
    /// written with them. With a `memo`, the plan kind found last time is
    /// used again while nothing changed since (see [`PreparedMemo`]).
    pub(crate) async fn door_prepared(
        &self,
        text: &str,
        statement: &DfStatement,
        params: Vec<ScalarValue>,
        memo: Option<&PreparedMemo>,
    ) -> Result<Option<Answer>> {
        if !self.cache.is_enabled() || !self.is_datafusions(statement) {
            return Ok(None);
        }
        let stamp = self.stamp();
        let (kind, hit) = match memo.and_then(|memo| memo.get(stamp)) {
            Some(kind) => (kind, true),
            None => {
                let planned = || Some(statement.clone());
                let (kind, hit) = self.shape_kind(Form::Prepared, text, &[], planned).await;
                if let Some(memo) = memo {
                    memo.set(stamp, kind.clone());
                }
                (kind, hit)
            }
        };
        self.answer_counted(kind, hit, Values::Params(params), true)
            .await
    }

    /// Writes `rows` as the `INSERT … VALUES` statement `text` (one row of
    /// parameters, parsed by `shape` when its plan is not cached) would;
    /// `None` (nothing written) when the shape is not a constant insert,
    /// or DDL changed its table while it waited to write (the statement is
    /// planned again as written then).
    async fn insert_rows(
        &self,
        text: &str,
        shape: impl FnOnce() -> Option<DfStatement>,
        rows: Vec<Vec<Cell<'_>>>,
        parsed: bool,
    ) -> Result<Option<Answer>> {
        let (kind, hit) = self.shape_kind(Form::Insert, text, &[], shape).await;
        match self
            .answer_counted(kind, hit, Values::Rows(rows), parsed)
            .await
        {
            Err(e) if e.is_retryable() => Ok(None),
            done => done,
        }
    }

    /// Runs `kind` (`None`: planned as written) with `values`, and counts
    /// the statement: a hit when a plan found in the cache answered it,
    /// otherwise a miss, unless it was read off its text and is parsed
    /// next (it is counted there).
    async fn answer_counted(
        &self,
        kind: Option<Arc<PlanKind>>,
        hit: bool,
        values: Values<'_>,
        parsed: bool,
    ) -> Result<Option<Answer>> {
        let answer = match kind {
            Some(kind) => self.run_kind(&kind, values).await,
            None => Ok(None),
        };
        let answered = answer.as_ref().is_ok_and(Option::is_some);
        if answered || parsed {
            self.plan_cache.count(hit && answered);
        }
        answer
    }

    /// The kind of plan of a shape (`text`, parsed by `statement`), from
    /// the cache or planned and cached (`None`: it is planned as written),
    /// and whether it was found in the cache.
    async fn shape_kind(
        &self,
        form: Form,
        text: &str,
        values: &[ScalarValue],
        statement: impl FnOnce() -> Option<DfStatement>,
    ) -> (Option<Arc<PlanKind>>, bool) {
        let key = self.cache_key(form, text, values);
        let generation = self.generation();
        match self.plan_cache.get(&key, generation) {
            Some(Some(kind)) if !kind.is_outdated() => return (Some(kind), true),
            Some(None) => return (None, false),
            _ => {}
        }
        let kind = self
            .plan_kind(form, statement(), values)
            .await
            .map(Arc::new);
        self.plan_cache.insert(key, generation, kind.clone());
        (kind, false)
    }

    async fn plan_kind(
        &self,
        form: Form,
        statement: Option<DfStatement>,
        values: &[ScalarValue],
    ) -> Option<PlanKind> {
        let statement = statement?;
        if matches!(&statement, DfStatement::Statement(s) if self.calls_changing_functions(s)) {
            return None;
        }
        let plan = self.plan(statement).await.ok()?;
        self.choose(plan, form, values)
    }

    /// The cache key of a shape: the names it resolves in (or the session
    /// and its settings, once they changed), its form, the types of its
    /// lifted values, and its text.
    fn cache_key(&self, form: Form, text: &str, values: &[ScalarValue]) -> String {
        use std::fmt::Write as _;
        let epoch = self
            .cache
            .settings_epoch
            .load(std::sync::atomic::Ordering::Relaxed);
        let mut key = if epoch == 0 {
            self.shape_key(String::new())
        } else {
            format!("session {} settings {epoch} ", self.cache.session)
        };
        let _ = write!(key, "{form:?} ");
        for value in values {
            let _ = write!(key, "{} ", value.data_type());
        }
        let _ = write!(key, "| {text}");
        key
    }

    /// Whether `statement` calls a function that is not immutable, in a
    /// table function's arguments too (evaluated while planning, so the
    /// plan does not show them).
    fn calls_changing_functions(&self, statement: &SqlStatement) -> bool {
        let state = self.ctx.state_ref();
        let state = state.read();
        let functions = state.scalar_functions();
        visit_expressions(statement, |expr| match expr {
            SqlExpr::Function(function) => {
                let name = function.name.to_string().to_lowercase();
                match functions.get(&name) {
                    Some(f) if f.signature().volatility != Volatility::Immutable => {
                        ControlFlow::Break(())
                    }
                    _ => ControlFlow::Continue(()),
                }
            }
            _ => ControlFlow::Continue(()),
        })
        .is_break()
    }
}

/// Whether `statement` is a query that returns rows (no `SELECT … INTO`).
fn is_query(statement: &DfStatement) -> bool {
    matches!(statement, DfStatement::Statement(inner)
        if matches!(inner.as_ref(), SqlStatement::Query(query) if !has_into(query)))
}
