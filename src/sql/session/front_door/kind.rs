//! The kinds of plan a statement runs by, chosen from its logical plan
//! (step 3 of the module documentation), and running each.

use std::sync::Arc;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::FieldRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchemaRef, ParamValues, ScalarValue};
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{Expr, LogicalPlan, WriteOp};
use datafusion::physical_plan::{collect, ExecutionPlan};

use super::cache::estimated_bytes;
use super::eligibility::{
    exactly_as, plans_changing_functions, reads_only_widesql_tables, same_kind,
};
use super::generic::{generic, parameter_places};
use super::physical::{PhysicalMemo, Settings};
use crate::error::Result;
use crate::sql::dml::constant_insert::{Cell, ConstantInsert};
use crate::sql::read::key_lookup::KeyLookup;
use crate::sql::{from_df, Frame, Session};

/// How a statement shape was normalised, which decides the kinds of plan
/// it may run by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// A `SELECT` read off its text with every literal a parameter; kept
    /// only when those are the values a parsed query's normalisation lifts
    /// (a parameter in the select list would name its column `$1`).
    Text,
    /// A `SELECT` read off its text whose literals are not values to lift
    /// (`SELECT 1`, `SELECT 'x' AS a FROM t`), kept by its exact text.
    Exact,
    /// A parsed query with the values of its `WHERE` clauses lifted.
    Query,
    /// An `INSERT … VALUES` of literals with one row of parameters.
    Insert,
    /// A statement with parameters of its own (a prepared statement).
    Prepared,
}

/// What a statement shape runs by, in the order they are tried.
#[derive(Debug)]
pub(crate) enum PlanKind {
    /// 1. The rows a key predicate selects, read and built into one batch
    ///    without DataFusion ([`KeyLookup`]); `query` runs the values the
    ///    lookup does not take (a range too large for one batch, a value
    ///    that does not convert to the key's type exactly).
    KeyLookup {
        lookup: Box<KeyLookup>,
        query: Option<CachedQuery>,
    },
    /// 2. An `INSERT … VALUES` of constants: the plan of one row of
    ///    parameters, the rows filled in and written without DataFusion
    ///    ([`ConstantInsert`]).
    ConstantInsert(LogicalPlan),
    /// 3. Any other query: its optimised plan, parameters bound, physically
    ///    planned and run.
    Query(CachedQuery),
}

/// The optimised plan of a query shape, with its parameters' types.
#[derive(Debug)]
pub(crate) struct CachedQuery {
    plan: LogicalPlan,
    parameters: Vec<FieldRef>,
    /// Whether a value must be of its place's type exactly: a prepared
    /// statement's parameter may stand in arithmetic (`i * $1`), where a
    /// value narrowed to the type DataFusion gave its place would compute
    /// in that type. (A lifted literal is a comparison's operand, an `IN`
    /// item or a `BETWEEN` bound, where an exact conversion means the same.)
    exact_types: bool,
    /// How many times each parameter stands in `plan`, when a physical
    /// plan of it may be kept: none of its scans takes a parameter (the
    /// values would decide its key ranges).
    places: Option<Vec<usize>>,
    /// Its physical plan, kept by its first run, copied with each run's
    /// values.
    physical: PhysicalMemo,
}

impl CachedQuery {
    /// Its logical plan's estimate, twice when a physical plan of it may
    /// be kept too.
    fn estimated_bytes(&self) -> u64 {
        let bytes = estimated_bytes(&self.plan);
        match self.places {
            Some(_) => 2 * bytes,
            None => bytes,
        }
    }
}

/// A statement's own values: parameters, or an INSERT's rows of literals.
pub(super) enum Values<'t> {
    Params(Vec<ScalarValue>),
    Rows(Vec<Vec<Cell<'t>>>),
}

/// What a statement that went through the door gave.
pub(crate) enum Answer {
    /// Rows read already (a key lookup).
    Rows(RecordBatch),
    /// Rows written (an INSERT).
    Count(u64),
    /// A query's physical plan, ready to run.
    Ready {
        physical: Arc<dyn ExecutionPlan>,
        schema: DFSchemaRef,
    },
}

impl PlanKind {
    /// Whether DDL changed a table since this was planned (the catalog
    /// generation of the entry aside).
    pub(super) fn is_outdated(&self) -> bool {
        matches!(self, PlanKind::KeyLookup { lookup, .. } if lookup.is_outdated())
    }

    pub(super) fn estimated_bytes(&self) -> u64 {
        match self {
            PlanKind::KeyLookup { query, .. } => {
                1024 + query.as_ref().map_or(0, CachedQuery::estimated_bytes)
            }
            PlanKind::ConstantInsert(plan) => estimated_bytes(plan),
            PlanKind::Query(query) => query.estimated_bytes(),
        }
    }
}

impl Session {
    /// The kind of plan the shape planned as `plan` (before optimisation)
    /// runs by; `None` when it is to be planned as written. `values` are
    /// the shape's lifted values, when it has them.
    pub(super) fn choose(
        &self,
        plan: LogicalPlan,
        form: Form,
        values: &[ScalarValue],
    ) -> Option<PlanKind> {
        let inserts = ConstantInsert::of(&plan).is_some();
        match form {
            Form::Insert => return inserts.then_some(PlanKind::ConstantInsert(plan)),
            Form::Prepared if inserts => return Some(PlanKind::ConstantInsert(plan)),
            _ => {}
        }
        if let Some(lookup) = KeyLookup::from_plan(&plan) {
            let query = self.cached_query(plan, form, values);
            return Some(PlanKind::KeyLookup {
                lookup: Box::new(lookup),
                query,
            });
        }
        self.cached_query(plan, form, values).map(PlanKind::Query)
    }

    /// The optimised plan of a query shape with its parameters typed by
    /// their places, or `None` when it is not to be kept (see the module
    /// documentation).
    fn cached_query(
        &self,
        plan: LogicalPlan,
        form: Form,
        values: &[ScalarValue],
    ) -> Option<CachedQuery> {
        if !is_query(&plan) || !reads_only_widesql_tables(&plan) || plans_changing_functions(&plan)
        {
            return None;
        }
        let mut fields = plan.get_parameter_fields().ok()?;
        let count = match form {
            Form::Prepared => fields.len(),
            _ => values.len(),
        };
        let parameters = (1..=count)
            .map(|n| fields.remove(&format!("${n}"))?)
            .collect::<Option<Vec<_>>>()?;
        // Lifted values of another kind than their places are known now.
        let fits = values
            .iter()
            .zip(&parameters)
            .all(|(value, field)| same_kind(&value.data_type(), field.data_type()));
        if !fields.is_empty() || !fits {
            return None;
        }
        let optimized = self.ctx.state().optimize(&plan).ok()?;
        Some(CachedQuery {
            places: parameter_places(&optimized, parameters.len()),
            plan: optimized,
            parameters,
            exact_types: form == Form::Prepared,
            physical: PhysicalMemo::default(),
        })
    }

    /// Runs `kind` with a statement's `values`; `None` when these values
    /// are not for it (the statement is planned as written then).
    pub(super) async fn run_kind(
        &self,
        kind: &PlanKind,
        values: Values<'_>,
    ) -> Result<Option<Answer>> {
        match (kind, values) {
            (PlanKind::KeyLookup { lookup, query }, Values::Params(params)) => {
                // (Its table changed since the lookup was found: the
                // statement is planned as written.)
                if lookup.is_outdated() {
                    return Ok(None);
                }
                let list = params
                    .iter()
                    .cloned()
                    .map(ScalarAndMetadata::from)
                    .collect();
                if let Some(batch) = lookup.run(Some(&ParamValues::List(list)))? {
                    return Ok(Some(Answer::Rows(batch)));
                }
                match query {
                    Some(query) => self.bind(query, params).await,
                    None => Ok(None),
                }
            }
            (PlanKind::Query(query), Values::Params(params)) => self.bind(query, params).await,
            (PlanKind::ConstantInsert(plan), values) => {
                let Some(insert) = ConstantInsert::of(plan) else {
                    return Ok(None);
                };
                let settings = self.write_settings();
                let rows = match values {
                    Values::Rows(rows) => match insert.with_rows(rows) {
                        Some(insert) => insert.write(settings, None).await?,
                        None => return Ok(None),
                    },
                    Values::Params(params) => {
                        let list = params.into_iter().map(ScalarAndMetadata::from).collect();
                        insert
                            .write(settings, Some(&ParamValues::List(list)))
                            .await?
                    }
                };
                Ok(Some(Answer::Count(rows)))
            }
            _ => Ok(None),
        }
    }

    /// `query` with `params` bound and physically planned, or its kept
    /// physical plan copied with them; `None` when a value is not of its
    /// place's kind or does not convert to its type exactly (`5.5` where
    /// an integer column is compared).
    async fn bind(&self, query: &CachedQuery, params: Vec<ScalarValue>) -> Result<Option<Answer>> {
        if params.len() != query.parameters.len() {
            return Ok(None);
        }
        let Some(values) = params
            .into_iter()
            .zip(&query.parameters)
            .map(|(value, field)| {
                let place = field.data_type();
                let fits = match query.exact_types {
                    true => value.data_type() == *place,
                    false => same_kind(&value.data_type(), place),
                };
                fits.then(|| exactly_as(value, place)).flatten()
            })
            .collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let (state, _) = self.planning_state();
        let settings = Settings::of(&state);
        let ready = |physical| {
            let schema = Arc::clone(query.plan.schema());
            Ok(Some(Answer::Ready { physical, schema }))
        };
        let Some(places) = query.places.as_deref() else {
            return self.plan_physically(&query.plan, values, &state).await;
        };
        if let Some(copy) = query.physical.copy(settings, &values) {
            return ready(copy);
        }
        if !query.physical.refused() {
            // A plan that fails to be made for values unknown is made for
            // the values, as one that is not kept is.
            let plan = generic(&query.plan, &query.parameters);
            let generic = match plan {
                Some(plan) => self.plan_physically(&plan, Vec::new(), &state).await,
                None => Ok(None),
            };
            if let Ok(Some(Answer::Ready { physical, .. })) = generic {
                if query.physical.keep(Arc::clone(&physical), settings, places) {
                    if let Some(copy) = query.physical.copy(settings, &values) {
                        return ready(copy);
                    }
                } else if values.is_empty() {
                    // Without parameters it is the statement's own plan.
                    return ready(physical);
                }
            }
        }
        self.plan_physically(&query.plan, values, &state).await
    }

    /// `plan` with `values` bound, physically planned; `None` when they do
    /// not bind.
    async fn plan_physically(
        &self,
        plan: &LogicalPlan,
        values: Vec<ScalarAndMetadata>,
        state: &SessionState,
    ) -> Result<Option<Answer>> {
        let plan = match values.is_empty() {
            true => plan.clone(),
            false => match plan.clone().with_param_values(ParamValues::List(values)) {
                Ok(plan) => plan,
                Err(_) => return Ok(None),
            },
        };
        let physical = state
            .query_planner()
            .create_physical_plan(&plan, state)
            .await
            .map_err(from_df)?;
        Ok(Some(Answer::Ready {
            physical,
            schema: Arc::clone(plan.schema()),
        }))
    }

    /// An answer as a statement's result.
    pub(crate) fn answer_frame(&self, answer: Answer) -> Result<Frame> {
        match answer {
            Answer::Rows(batch) => self.frame(batch),
            Answer::Count(rows) => self.count(rows),
            Answer::Ready { physical, schema } => {
                let (state, task) = self.planning_state();
                Ok(Frame::planned(physical, schema, state, task))
            }
        }
    }

    /// Runs a statement planned as written (its values in the plan) when
    /// it is of a kind that needs no DataFusion optimiser: a key lookup, an
    /// INSERT of constants, or an `INSERT … VALUES` of expressions. The
    /// plan is given back otherwise.
    pub(crate) async fn as_written(
        &self,
        plan: LogicalPlan,
    ) -> Result<std::result::Result<Frame, LogicalPlan>> {
        if let Some(lookup) = KeyLookup::from_plan(&plan) {
            if let Some(batch) = lookup.run(None)? {
                return self.frame(batch).map(Ok);
            }
        }
        if let Some(insert) = ConstantInsert::of(&plan) {
            let rows = insert.write(self.write_settings(), None).await?;
            return self.count(rows).map(Ok);
        }
        if inserts_values(&plan) {
            return self.insert_values(plan).await.map(Ok);
        }
        Ok(Err(plan))
    }

    /// Runs an `INSERT … VALUES` of plain values without DataFusion's
    /// optimizer, which here only rewrites: it simplifies each value of
    /// each row, the largest part of a 100-row `INSERT`'s time (profile in
    /// `bench/RESULTS.md`). The analyzer, which coerces the values to the
    /// table's types, still runs, and the rows go through the one write
    /// path as any INSERT's.
    async fn insert_values(&self, plan: LogicalPlan) -> Result<Frame> {
        let state = SessionStateBuilder::new_from_existing(self.ctx.state())
            .with_optimizer_rules(Vec::new())
            .build();
        let physical = state.create_physical_plan(&plan).await?;
        let schema = physical.schema();
        let batches = collect(physical, state.task_ctx()).await?;
        Ok(self
            .frame(concat_batches(&schema, &batches)?)?
            .that_changed())
    }
}

/// Whether `plan` is a query: not DML, DDL, a statement or an EXPLAIN.
fn is_query(plan: &LogicalPlan) -> bool {
    !matches!(
        plan,
        LogicalPlan::Dml(_)
            | LogicalPlan::Ddl(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::Explain(_)
            | LogicalPlan::Analyze(_)
            | LogicalPlan::DescribeTable(_)
    )
}

/// Whether `plan` is an `INSERT … VALUES`: rows of expressions, with
/// nothing but projections (the casts to the table's types) between them
/// and the table.
fn inserts_values(plan: &LogicalPlan) -> bool {
    let LogicalPlan::Dml(dml) = plan else {
        return false;
    };
    if !matches!(dml.op, WriteOp::Insert(_)) {
        return false;
    }
    let mut input = dml.input.as_ref();
    loop {
        match input {
            LogicalPlan::Projection(projection) if projection.expr.iter().all(needs_no_rewrite) => {
                input = projection.input.as_ref()
            }
            LogicalPlan::Values(values) => {
                return values.values.iter().flatten().all(needs_no_rewrite)
            }
            _ => return false,
        }
    }
}

/// Whether `expr` runs as planned: literals, casts, columns and the
/// functions that build nested values (`MAP {…}`, `[…]`, structs). Other
/// functions may need the optimizer: it replaces `now()` with the
/// statement's time and `arrow_cast` with a cast, and they fail if run
/// unrewritten.
fn needs_no_rewrite(expr: &Expr) -> bool {
    const BUILDERS: [&str; 5] = ["map", "make_map", "make_array", "named_struct", "struct"];
    !expr
        .exists(|e| {
            Ok(match e {
                Expr::Literal(..)
                | Expr::Column(_)
                | Expr::Cast(_)
                | Expr::TryCast(_)
                | Expr::Alias(_)
                | Expr::Negative(_) => false,
                Expr::ScalarFunction(f) => !BUILDERS.contains(&f.name()),
                _ => true,
            })
        })
        .unwrap_or(true)
}
