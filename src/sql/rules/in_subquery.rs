//! `x [NOT] IN (subquery)` under SQL's three-valued logic.
//!
//! `x NOT IN (SELECT y …)` is NULL, not TRUE, when `x` is NULL or when no
//! `y` equals `x` but some `y` is NULL. DataFusion 55 turns such a
//! predicate into a join that forgets this in several positions (inside
//! `OR`, under `NOT`, after a filter pushed into a correlated subquery, for
//! a nullable expression over NOT NULL columns), so a `DELETE … WHERE x NOT
//! IN (…) OR …` could remove rows it must keep.
//!
//! This analyzer rule runs before DataFusion's optimizer and rewrites every
//! `[NOT] IN (subquery)` of a filter (`WHERE`, `HAVING`, `QUALIFY`) into
//! `EXISTS` subqueries, which have no NULL case and which DataFusion
//! decorrelates correctly anywhere in a predicate. A filter keeps a row
//! only when its predicate is TRUE, so the form depends on the polarity of
//! the position, counted through `AND`, `OR` and `NOT`:
//!
//! | predicate | where TRUE must stay TRUE (positive) | where FALSE must stay FALSE (negative) |
//! |---|---|---|
//! | `x IN S` | left as it is (a semi join is right) | `match OR has_null OR (x IS NULL AND any)` |
//! | `x NOT IN S` | `NOT match AND NOT has_null AND (x IS NOT NULL OR NOT any)` | `NOT match` |
//!
//! with `match = EXISTS (S WHERE y = x)`, `has_null = EXISTS (S WHERE y IS
//! NULL)` and `any = EXISTS (S)`. Anywhere else in a filter (under `IS
//! NULL`, `CASE`, a comparison, a function) the predicate gets its full
//! three-valued value: `CASE WHEN match THEN TRUE WHEN has_null OR (x IS
//! NULL AND any) THEN NULL ELSE FALSE END`.
//!
//! Refused with an error naming the construct, where no rewrite is
//! provably right: a subquery predicate outside a filter (a select list,
//! a join condition, an aggregate), and a correlated subquery whose rows
//! are not a filter of its input (an aggregate without `GROUP BY`, which
//! yields a row even for no input, or a `LIMIT`), and a volatile `x`
//! (`random()`), which the rewrite would evaluate more than once.

use std::sync::Arc;

use crate::sql::error::{to_df, SqlError};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_err, Column, DFSchema, ExprSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{Case, Exists, InList, InSubquery};
use datafusion::logical_expr::{lit, Expr, Filter, LogicalPlan, LogicalPlanBuilder, Subquery};
use datafusion::optimizer::AnalyzerRule;
use std::ops::Not;

/// The analyzer rule; see the module documentation.
#[derive(Debug, Default)]
pub(in crate::sql) struct InSubqueryNulls;

impl AnalyzerRule for InSubqueryNulls {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        Ok(plan.transform_up_with_subqueries(rewrite_node)?.data)
    }

    fn name(&self) -> &str {
        "widesql_in_subquery_nulls"
    }
}

/// Where a predicate stands in a filter: what of its value decides the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Polarity {
    /// An even number of `NOT`s above it: the row is kept when it is TRUE.
    Positive,
    /// An odd number: the row is kept when it is FALSE.
    Negative,
    /// Under anything else: all three values matter.
    Full,
}

impl Polarity {
    fn flipped(self) -> Polarity {
        match self {
            Polarity::Positive => Polarity::Negative,
            Polarity::Negative => Polarity::Positive,
            Polarity::Full => Polarity::Full,
        }
    }
}

fn rewrite_node(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    match plan {
        LogicalPlan::Filter(filter) if has_in_subquery(&filter.predicate) => {
            let schema = Arc::clone(filter.input.schema());
            let predicate = rewrite(filter.predicate, Polarity::Positive, &schema)?;
            let filter = Filter::try_new(predicate, filter.input)?;
            Ok(Transformed::yes(LogicalPlan::Filter(filter)))
        }
        LogicalPlan::Filter(_) => Ok(Transformed::no(plan)),
        other => {
            let mut found = None;
            other.apply_expressions(|expr| {
                expr.apply(|e| {
                    Ok(match e {
                        Expr::InSubquery(InSubquery { negated, .. })
                        | Expr::InList(InList { negated, .. })
                            if is_in_subquery(e) =>
                        {
                            found = Some(*negated);
                            TreeNodeRecursion::Stop
                        }
                        _ => TreeNodeRecursion::Continue,
                    })
                })
            })?;
            match found {
                Some(negated) => Err(to_df(SqlError::Unsupported(format!(
                    "{} (subquery) is supported in WHERE, HAVING and QUALIFY only, not in {}",
                    if negated { "NOT IN" } else { "IN" },
                    place(&other)
                )))),
                None => Ok(Transformed::no(other)),
            }
        }
    }
}

/// The clause a plan node comes from, for errors.
fn place(plan: &LogicalPlan) -> &'static str {
    match plan {
        LogicalPlan::Projection(_) => "a select list",
        LogicalPlan::Join(_) => "a join condition",
        LogicalPlan::Aggregate(_) => "GROUP BY or an aggregate",
        LogicalPlan::Window(_) => "a window function",
        LogicalPlan::Sort(_) => "ORDER BY",
        _ => "this position",
    }
}

fn has_in_subquery(expr: &Expr) -> bool {
    expr.exists(|e| Ok(is_in_subquery(e))).unwrap_or(true)
}

/// Whether `expr` is `x [NOT] IN (subquery)`, or `x [NOT] IN ((subquery))`,
/// which DataFusion's simplifier turns into the former.
fn is_in_subquery(expr: &Expr) -> bool {
    match expr {
        Expr::InSubquery(_) => true,
        Expr::InList(list) => {
            list.list.len() == 1 && matches!(list.list[0], Expr::ScalarSubquery(_))
        }
        _ => false,
    }
}

/// `expr` with each `[NOT] IN (subquery)` in it rewritten for the
/// polarity it stands in.
fn rewrite(expr: Expr, polarity: Polarity, schema: &DFSchema) -> Result<Expr> {
    if !has_in_subquery(&expr) {
        return Ok(expr);
    }
    use datafusion::logical_expr::{BinaryExpr, Operator};
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::And | Operator::Or) =>
        {
            let left = rewrite(*left, polarity, schema)?;
            let right = rewrite(*right, polarity, schema)?;
            Ok(Expr::BinaryExpr(BinaryExpr::new(
                Box::new(left),
                op,
                Box::new(right),
            )))
        }
        Expr::Not(inner) => Ok(Expr::Not(Box::new(rewrite(
            *inner,
            polarity.flipped(),
            schema,
        )?))),
        Expr::InSubquery(in_subquery) => rewrite_in(in_subquery, polarity, schema),
        Expr::InList(InList {
            expr,
            mut list,
            negated,
        }) if list.len() == 1 && matches!(list[0], Expr::ScalarSubquery(_)) => {
            let Some(Expr::ScalarSubquery(subquery)) = list.pop() else {
                unreachable!("matched above")
            };
            rewrite_in(InSubquery::new(expr, subquery, negated), polarity, schema)
        }
        other => Ok(other
            .map_children(|child| rewrite(child, Polarity::Full, schema).map(Transformed::yes))?
            .data),
    }
}

fn rewrite_in(in_subquery: InSubquery, polarity: Polarity, schema: &DFSchema) -> Result<Expr> {
    let InSubquery {
        expr,
        subquery,
        negated,
    } = in_subquery;
    if !negated && polarity == Polarity::Positive {
        // Named apart for the reason `with_own_column_name` gives.
        let subquery = Subquery {
            subquery: Arc::new(with_own_column_name(subquery.subquery.as_ref().clone())?),
            ..subquery
        };
        return Ok(Expr::InSubquery(InSubquery::new(expr, subquery, negated)));
    }
    if expr.is_volatile() {
        return Err(to_df(SqlError::Unsupported(format!(
            "{} (subquery) of a volatile expression (such as random()) is not supported: \
             it would be evaluated more than once",
            if negated { "NOT IN" } else { "IN" }
        ))));
    }
    let probes = Probes::new(*expr, subquery, schema)?;
    let rewritten = match (negated, polarity) {
        (true, Polarity::Negative) => probes.matches()?.not(),
        (true, Polarity::Positive) => {
            let unknown = probes.unknown()?;
            probes.matches()?.not().and(unknown.not())
        }
        (false, Polarity::Negative) => probes.matches()?.or(probes.unknown()?),
        (_, Polarity::Full) => {
            let value = Expr::Case(Case {
                expr: None,
                when_then_expr: vec![
                    (Box::new(probes.matches()?), Box::new(lit(true))),
                    (
                        Box::new(probes.unknown()?),
                        Box::new(Expr::Literal(ScalarValue::Boolean(None), None)),
                    ),
                ],
                else_expr: Some(Box::new(lit(false))),
            });
            if negated {
                value.not()
            } else {
                value
            }
        }
        (false, Polarity::Positive) => unreachable!("returned above"),
    };
    Ok(rewritten)
}

/// The `EXISTS` questions that decide `x IN S`.
struct Probes {
    /// `x`, in the filter.
    value: Expr,
    /// `x` inside the probes: its columns as references to the outer query.
    outer: Expr,
    /// Whether `x` can be NULL.
    outer_nullable: bool,
    subquery: Subquery,
    /// `S`'s one column.
    column: Expr,
    /// Whether `S`'s column can be NULL.
    column_nullable: bool,
    /// Whether `S` reads the outer query (no `LIMIT 1` on its probes then).
    correlated: bool,
}

impl Probes {
    fn new(outer: Expr, subquery: Subquery, schema: &DFSchema) -> Result<Probes> {
        let inner = subquery.subquery.as_ref();
        let correlated = !inner.all_out_ref_exprs().is_empty();
        if correlated {
            if let Some(what) = not_a_filter(inner) {
                return Err(to_df(SqlError::Unsupported(format!(
                    "[NOT] IN over a correlated subquery with {what} is not supported: \
                     its NULLs cannot be checked; write it with [NOT] EXISTS"
                ))));
            }
        }
        if inner.schema().fields().len() != 1 {
            return plan_err!(
                "the subquery of [NOT] IN must return one column, not {}",
                inner.schema().fields().len()
            );
        }
        let subquery = Subquery {
            subquery: Arc::new(with_own_column_name(inner.clone())?),
            ..subquery
        };
        let fields = subquery.subquery.schema();
        let (qualifier, field) = fields.qualified_field(0);
        let column_nullable = field.is_nullable();
        let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
        // Only a plain column's nullability is trusted: DataFusion may call
        // an expression over NOT NULL columns (NULLIF, say) not nullable.
        let outer_nullable = match &outer {
            Expr::Column(c) => schema
                .field_from_column(c)
                .map_or(true, |f| f.is_nullable()),
            _ => true,
        };
        let value = outer.clone();
        let outer = outer
            .transform_up(|e| match e {
                Expr::Column(c) => {
                    let field = Arc::clone(schema.field_from_column(&c)?);
                    Ok(Transformed::yes(Expr::OuterReferenceColumn(field, c)))
                }
                other => Ok(Transformed::no(other)),
            })?
            .data;
        Ok(Probes {
            value,
            outer,
            outer_nullable,
            subquery,
            column,
            column_nullable,
            correlated,
        })
    }

    /// `EXISTS (S WHERE y = x)`: some `y` equals `x`.
    fn matches(&self) -> Result<Expr> {
        self.exists(Some(self.column.clone().eq(self.outer.clone())))
    }

    /// TRUE when `x IN S` is NULL unless it is TRUE: some `y` is NULL, or
    /// `x` is NULL and `S` has rows. FALSE in the fewer cases where the
    /// columns cannot be NULL.
    fn unknown(&self) -> Result<Expr> {
        let has_null = if self.column_nullable {
            self.exists(Some(self.column.clone().is_null()))?
        } else {
            lit(false)
        };
        if !self.outer_nullable {
            return Ok(has_null);
        }
        Ok(has_null.or(self.value.clone().is_null().and(self.exists(None)?)))
    }

    /// `EXISTS (S [WHERE filter])`, at most one row read when `S` is not
    /// correlated.
    fn exists(&self, filter: Option<Expr>) -> Result<Expr> {
        let mut plan = LogicalPlanBuilder::from(self.subquery.subquery.as_ref().clone());
        if let Some(filter) = filter {
            plan = plan.filter(filter)?;
        }
        if !self.correlated {
            plan = plan.limit(0, Some(1))?;
        }
        let plan = plan.build()?;
        let outer_ref_columns = plan.all_out_ref_exprs();
        Ok(Expr::Exists(Exists::new(
            Subquery {
                subquery: Arc::new(plan),
                outer_ref_columns,
                spans: self.subquery.spans.clone(),
            },
            false,
        )))
    }
}

/// `plan` (of one column) with its column named apart when it is a cast:
/// a cast keeps the name of the column it casts (`CAST(q.c AS BIGINT)` is `q.c`), and
/// decorrelating a subquery whose correlated filter reads `q.c` too would
/// then project two columns of one name (DataFusion 55 fails the
/// statement).
fn with_own_column_name(plan: LogicalPlan) -> Result<LogicalPlan> {
    const NAME: &str = "__widesql_in_value";
    match plan {
        LogicalPlan::Projection(projection)
            if projection.expr.len() == 1
                && matches!(
                    projection.expr[0].clone().unalias(),
                    Expr::Cast(_) | Expr::TryCast(_)
                ) =>
        {
            let expr = projection.expr.into_iter().map(|e| e.unalias().alias(NAME));
            LogicalPlanBuilder::from(Arc::unwrap_or_clone(projection.input))
                .project(expr)?
                .build()
        }
        other => Ok(other),
    }
}

/// What makes a correlated subquery's rows other than a filter of its
/// input, if anything: DataFusion decorrelates such a subquery into a join
/// that loses rows it yields for no input.
fn not_a_filter(plan: &LogicalPlan) -> Option<&'static str> {
    let mut found = None;
    let _ = plan.apply(|node| {
        found = match node {
            LogicalPlan::Aggregate(a) if a.group_expr.is_empty() => {
                Some("an aggregate without GROUP BY")
            }
            LogicalPlan::Limit(_) => Some("LIMIT"),
            _ => None,
        };
        Ok(if found.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}
