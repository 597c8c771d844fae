//! A shape with parameters keeps a *generic* plan, as PostgreSQL's
//! generic plans are: one planned for values unknown, each parameter a
//! call of a function that stands for it ([`generic`]), so that nothing
//! in it was decided by one run's values (a sort dropped because equal
//! bounds made a column constant, a limit dropped because contradictory
//! values made a filter's row count exactly 0). It is kept only when the
//! values can be put in without planning:
//! - no scan takes a parameter (its key ranges are found from the values;
//!   [`parameter_places`] reads the logical plan);
//! - each parameter stands in the physical plan as often as in the
//!   logical one, each time as an operand of an operator, an item of an
//!   `IN` list or a cast's input inside a [`FilterExec`]'s predicate.
//!   (Anywhere else, such as a function's argument or the select list, a
//!   value may decide a type or a result's name.)
//!
//! A run's copy puts its values into those predicates as literals and
//! builds the filters (an `IN` list's set of values is made again) and the
//! operators above them anew, so their properties are found for these
//! values, as the physical planner finds them. A shape whose plan is not
//! kept is planned with its values every run.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef, Schema};
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_err, plan_err, Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::physical_expr::expressions::{
    in_list, BinaryExpr, CastExpr, InListExpr, Literal, TryCastExpr,
};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::ExecutionPlan;

/// The function a generic plan calls in place of a parameter:
/// `widesql_parameter(n, NULL of the parameter's type)`, `n` counted from
/// 0. It is never run: a copy of the plan has the values in its place.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ParameterFunction {
    signature: Signature,
}

/// The name of [`ParameterFunction`], which no session registers.
const PARAMETER_FUNCTION: &str = "widesql_parameter";

impl ScalarUDFImpl for ParameterFunction {
    fn name(&self) -> &str {
        PARAMETER_FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types {
            [_, data_type] => Ok(data_type.clone()),
            _ => plan_err!("{PARAMETER_FUNCTION} takes a number and a type"),
        }
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        exec_err!("a generic plan ran without its values")
    }
}

/// `plan` (optimised, with parameters `$1, …` typed as `parameters`)
/// with each parameter a call of [`ParameterFunction`]: a plan for values
/// unknown. Volatile, the call is folded into no constant and tells the
/// physical optimiser nothing of a value. `None` when a parameter has no
/// type.
pub(super) fn generic(plan: &LogicalPlan, parameters: &[FieldRef]) -> Option<LogicalPlan> {
    let function = Arc::new(ScalarUDF::new_from_impl(ParameterFunction {
        signature: Signature::any(2, Volatility::Volatile),
    }));
    let call = |n: usize| -> DfResult<Expr> {
        let Some(field) = parameters.get(n) else {
            return plan_err!("no parameter ${}", n + 1);
        };
        let args = vec![
            Expr::Literal(ScalarValue::Int64(Some(n as i64)), None),
            Expr::Literal(ScalarValue::try_from(field.data_type())?, None),
        ];
        Ok(Expr::ScalarFunction(ScalarFunction::new_udf(
            Arc::clone(&function),
            args,
        )))
    };
    plan.clone()
        .transform_up_with_subqueries(|node| {
            node.map_expressions(|expr| {
                expr.transform(|e| match e {
                    Expr::Placeholder(placeholder) => {
                        let n = placeholder
                            .id
                            .strip_prefix('$')
                            .and_then(|n| n.parse().ok());
                        match n.and_then(|n: usize| n.checked_sub(1)) {
                            Some(n) => Ok(Transformed::yes(call(n)?)),
                            None => plan_err!("a parameter named {}", placeholder.id),
                        }
                    }
                    other => Ok(Transformed::no(other)),
                })
            })
        })
        .ok()
        .map(|t| t.data)
}

/// How many times each of the `parameters` stands in `plan` (optimised,
/// with parameters `$1, …`), or `None` when a scan takes one (its key
/// ranges then depend on the values, and a plan of it is not kept for
/// other values).
pub(super) fn parameter_places(plan: &LogicalPlan, parameters: usize) -> Option<Vec<usize>> {
    let mut places = vec![0; parameters];
    let mut fits = true;
    let _ = plan.apply_with_subqueries(|node| {
        let scan = matches!(node, LogicalPlan::TableScan(_));
        let _ = node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::Placeholder(placeholder) = e {
                    let n = placeholder
                        .id
                        .strip_prefix('$')
                        .and_then(|n| n.parse().ok());
                    match n.and_then(|n: usize| places.get_mut(n.checked_sub(1)?)) {
                        Some(count) if !scan => *count += 1,
                        _ => fits = false,
                    }
                }
                Ok(go_on_while(fits))
            })
        });
        Ok(go_on_while(fits))
    });
    fits.then_some(places)
}

/// The parameter a call in a generic plan stands for, from 0.
fn parameter_of(expr: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    let call = expr.downcast_ref::<ScalarFunctionExpr>()?;
    if call.fun().name() != PARAMETER_FUNCTION {
        return None;
    }
    match call.args().first()?.downcast_ref::<Literal>()?.value() {
        ScalarValue::Int64(Some(n)) => usize::try_from(*n).ok(),
        _ => None,
    }
}

/// Whether each parameter's value stands in `plan` as many times as
/// `places` says, and only where [`PhysicalMemo::copy`](super::physical::PhysicalMemo::copy) puts other
/// values: in a filter's predicate, as an operand of an operator, an `IN`
/// list's item or a cast's input.
pub(super) fn values_only_in_filters(plan: &Arc<dyn ExecutionPlan>, places: &[usize]) -> bool {
    let mut seen = vec![0; places.len()];
    let mut fits = true;
    let _ = plan.apply(|node| {
        let in_filter = node.downcast_ref::<FilterExec>().is_some();
        let _ = node.apply_expressions(&mut |expr| {
            fits &= parameter_of(expr).is_none() && values_fit(expr, in_filter, &mut seen);
            Ok(go_on_while(fits))
        });
        Ok(go_on_while(fits))
    });
    fits && seen == places
}

/// Whether the parameters under `expr` stand where a copy puts values
/// (see [`values_only_in_filters`]); counts those seen.
fn values_fit(expr: &Arc<dyn PhysicalExpr>, in_filter: bool, seen: &mut [usize]) -> bool {
    let holds_values = in_filter
        && (expr.is::<BinaryExpr>()
            || expr.is::<InListExpr>()
            || expr.is::<CastExpr>()
            || expr.is::<TryCastExpr>());
    expr.children()
        .into_iter()
        .all(|child| match parameter_of(child) {
            Some(n) if holds_values && n < seen.len() => {
                seen[n] += 1;
                true
            }
            Some(_) => false,
            None => values_fit(child, in_filter, seen),
        })
}

/// `expr` with each parameter's call replaced by its value in `values`,
/// evaluated over `schema`; `None` when it has none.
pub(super) fn with_values(
    expr: &Arc<dyn PhysicalExpr>,
    values: &[ScalarAndMetadata],
    schema: &Schema,
) -> DfResult<Option<Arc<dyn PhysicalExpr>>> {
    if let Some(n) = parameter_of(expr) {
        let Some(value) = values.get(n) else {
            return plan_err!("no value for parameter {n}");
        };
        if *expr.return_field(schema)?.data_type() != value.value.data_type() {
            return plan_err!("a value of another type for parameter {n}");
        }
        return Ok(Some(Arc::new(Literal::new(value.value.clone()))));
    }
    let children = expr.children();
    let mut changed = false;
    let mut new_children = Vec::with_capacity(children.len());
    for child in children {
        match with_values(child, values, schema)? {
            Some(new) => {
                changed = true;
                new_children.push(new);
            }
            None => new_children.push(Arc::clone(child)),
        }
    }
    if !changed {
        return Ok(None);
    }
    // An `IN` list keeps a set of its values, which rebuilding its
    // children would carry over unchanged.
    if let Some(list) = expr.downcast_ref::<InListExpr>() {
        let item = new_children.remove(0);
        return in_list(item, new_children, &list.negated(), schema).map(Some);
    }
    Arc::clone(expr).with_new_children(new_children).map(Some)
}

/// Visits on while `go_on`, else stops.
pub(super) fn go_on_while(go_on: bool) -> TreeNodeRecursion {
    match go_on {
        true => TreeNodeRecursion::Continue,
        false => TreeNodeRecursion::Stop,
    }
}
