//! Integer arithmetic that fails instead of wrapping.
//!
//! DataFusion 55 evaluates `+`, `-`, `*` and unary `-` on integers with
//! wrapping arithmetic, both when it runs a plan and when it folds
//! constants, and its `sum` of integers wraps too: `SELECT v + 1` of the
//! largest BIGINT returned the smallest one, and a `sum` past the range a
//! negative total. SQL (PostgreSQL, SQLite's `sum`) says such a value is
//! out of range, and a wrong number must never be an answer.
//!
//! - [`CheckedIntegers`], an analyzer rule that runs after DataFusion's
//!   type coercion, turns every integer `+`, `-`, `*` and negation into a
//!   call of a checked function (`checked_add` …) that computes the same
//!   value with Arrow's overflow-checking kernels and names its column as
//!   the operator did. The functions are immutable, so constants still
//!   fold, through them: an overflowing constant fails when it runs.
//! - [`checked_sum`] (in `sum.rs`) takes the place of DataFusion's `sum`: integers are
//!   summed in 128 bits, and a total (or a partial total passed between
//!   aggregation stages) outside BIGINT or BIGINT UNSIGNED is an error.
//!   Other types are summed by DataFusion's own `sum`.
//!
//! Division and `%` need nothing: Arrow's integer division already fails
//! on overflow (`-9223372036854775808 / -1`) and on a zero divisor.

use std::fmt::Write;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::error::ArrowError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_err, DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::expr::{BinaryExpr, ScalarFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr_common::datum::apply;

mod sum;

pub(in crate::sql) use sum::checked_sum;

/// The checked operators as functions, for a state that decodes plans
/// that call them by name (a cluster's worker).
pub(in crate::sql) fn checked_operators() -> Vec<ScalarUDF> {
    [Operator::Plus, Operator::Minus, Operator::Multiply]
        .into_iter()
        .map(CheckedOperator::of)
        .chain([CheckedOperator::negation()])
        .map(ScalarUDF::new_from_impl)
        .collect()
}

/// The analyzer rule; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct CheckedIntegers;

impl AnalyzerRule for CheckedIntegers {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        Ok(plan.transform_up_with_subqueries(rewrite_node)?.data)
    }

    fn name(&self) -> &str {
        "widesql_checked_integers"
    }
}

/// Whether `expr` is an operator this rule may rewrite (before its types
/// are known).
fn is_arithmetic(expr: &Expr) -> bool {
    matches!(
        expr,
        Expr::Negative(_)
            | Expr::BinaryExpr(BinaryExpr {
                op: Operator::Plus | Operator::Minus | Operator::Multiply,
                ..
            })
    )
}

fn rewrite_node(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    // Most nodes hold no arithmetic: they are passed by without building
    // their inputs' schema.
    let mut any = false;
    plan.apply_expressions(|expr| {
        any = expr.exists(|e| Ok(is_arithmetic(e)))?;
        Ok(if any {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    if !any {
        return Ok(Transformed::no(plan));
    }
    let mut schema = merge_schema(&plan.inputs());
    if let LogicalPlan::TableScan(scan) = &plan {
        let source =
            DFSchema::try_from_qualified_schema(scan.table_name.clone(), &scan.source.schema())?;
        schema.merge(&source);
    }
    // Names are kept as they were: a name made from an expression's text
    // (an aggregate's FILTER) would otherwise change with it.
    let names = NamePreserver::new(&plan);
    plan.map_expressions(|expr| {
        let name = names.save(&expr);
        let rewritten = expr.transform_up(|e| rewrite_expr(e, &schema))?;
        Ok(if rewritten.transformed {
            rewritten.update_data(|e| name.restore(e))
        } else {
            rewritten
        })
    })
}

fn rewrite_expr(expr: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(op, Operator::Plus | Operator::Minus | Operator::Multiply) =>
        {
            // Types that cannot be computed (an untyped parameter) are left
            // to DataFusion, which types them later or refuses them.
            let integers = match (type_of(&left, schema), type_of(&right, schema)) {
                (Ok(l), Ok(r)) => l == r && l.is_integer(),
                _ => false,
            };
            // With a NULL operand the value is NULL, which DataFusion folds
            // (`nth_value(x, x * NULL)` needs that literal when planned).
            if !integers || is_null_literal(&left) || is_null_literal(&right) {
                return Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr {
                    left,
                    op,
                    right,
                })));
            }
            let function = CheckedOperator::of(op);
            Ok(Transformed::yes(Expr::ScalarFunction(
                ScalarFunction::new_udf(
                    Arc::new(ScalarUDF::new_from_impl(function)),
                    vec![*left, *right],
                ),
            )))
        }
        Expr::Negative(inner) => match *inner {
            // A negated literal is folded here: some functions need their
            // arguments to be literals when they are planned
            // (`nth_value(x, -1)`).
            Expr::Literal(value, metadata) if value.data_type().is_signed_integer() => {
                let negated = value.arithmetic_negate().map_err(|_| {
                    DataFusionError::Plan(format!(
                        "{} out of range: - {value}",
                        sql_name(&value.data_type())
                    ))
                })?;
                Ok(Transformed::yes(Expr::Literal(negated, metadata)))
            }
            inner if type_of(&inner, schema).is_ok_and(|t| t.is_signed_integer()) => Ok(
                Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
                    Arc::new(ScalarUDF::new_from_impl(CheckedOperator::negation())),
                    vec![inner],
                ))),
            ),
            inner => Ok(Transformed::no(Expr::Negative(Box::new(inner)))),
        },
        other => Ok(Transformed::no(other)),
    }
}

/// The type of `expr`. A checked call has its first argument's, found
/// here without DataFusion's `get_type`, which names every call below it:
/// asked at each level of a chain of n operators, that took time in n³.
fn type_of(expr: &Expr, schema: &DFSchema) -> Result<DataType> {
    let mut expr = expr;
    while let Some((_, args)) = checked_call(expr) {
        match args.first() {
            Some(first) => expr = first,
            None => break,
        }
    }
    expr.get_type(schema)
}

/// The checked operator `expr` calls, and its arguments.
fn checked_call(expr: &Expr) -> Option<(&CheckedOperator, &[Expr])> {
    match expr {
        Expr::ScalarFunction(call) => call
            .func
            .inner()
            .downcast_ref::<CheckedOperator>()
            .map(|op| (op, call.args.as_slice())),
        _ => None,
    }
}

fn is_null_literal(expr: &Expr) -> bool {
    match expr {
        Expr::Literal(value, _) => value.is_null(),
        Expr::Cast(cast) => is_null_literal(&cast.expr),
        Expr::TryCast(cast) => is_null_literal(&cast.expr),
        _ => false,
    }
}

/// One checked integer operator as a function; its column is named as the
/// operator's (`v + Int64(1)`), so rewriting changes no result's names.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedOperator {
    /// `None`: unary minus.
    op: Option<Operator>,
    name: &'static str,
    signature: Signature,
}

impl CheckedOperator {
    fn of(op: Operator) -> Self {
        let name = match op {
            Operator::Plus => "checked_add",
            Operator::Minus => "checked_subtract",
            _ => "checked_multiply",
        };
        Self {
            op: Some(op),
            name,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }

    fn arity(&self) -> usize {
        if self.op.is_some() {
            2
        } else {
            1
        }
    }

    /// Writes the name of this operator applied to `args` to `name`, with
    /// the checked calls among them written into the same string: were
    /// each named by its own `schema_name`, every level of a chain would
    /// copy the whole chain below it.
    fn write_name(&self, args: &[Expr], name: &mut String) -> Result<()> {
        let write_arg = |arg: &Expr, name: &mut String| match checked_call(arg) {
            Some((op, args)) => op.write_name(args, name),
            None => {
                let _ = write!(name, "{}", arg.schema_name());
                Ok(())
            }
        };
        match (self.op, args) {
            (Some(op), [left, right]) => {
                write_arg(left, name)?;
                let _ = write!(name, " {op} ");
                write_arg(right, name)
            }
            (_, [inner]) => {
                name.push_str("(- ");
                write_arg(inner, name)?;
                name.push(')');
                Ok(())
            }
            _ => exec_err!("{} takes {} arguments", self.name, self.arity()),
        }
    }

    fn negation() -> Self {
        Self {
            op: None,
            name: "checked_negate",
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

/// The SQL name of an integer type, for messages.
fn sql_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 => "TINYINT UNSIGNED".into(),
        DataType::UInt16 => "SMALLINT UNSIGNED".into(),
        DataType::UInt32 => "INT UNSIGNED".into(),
        DataType::UInt64 => "BIGINT UNSIGNED".into(),
        other => other.to_string(),
    }
}

/// An overflow as an error that says what went out of range.
fn out_of_range(data_type: &DataType, error: ArrowError) -> DataFusionError {
    match error {
        ArrowError::ArithmeticOverflow(what) => DataFusionError::Execution(format!(
            "{} out of range: {}",
            sql_name(data_type),
            what.trim_start_matches("Overflow happened on: ")
        )),
        other => DataFusionError::ArrowError(Box::new(other), None),
    }
}

impl ScalarUDFImpl for CheckedOperator {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types[0].clone())
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        let mut name = String::new();
        self.write_name(args, &mut name)?;
        Ok(name)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let data_type = args.return_field.data_type().clone();
        let checked = |result: std::result::Result<ArrayRef, ArrowError>| {
            result.map_err(|e| out_of_range(&data_type, e))
        };
        match (self.op, args.args.as_slice()) {
            (Some(op), [left, right]) => {
                let kernel = match op {
                    Operator::Plus => numeric::add,
                    Operator::Minus => numeric::sub,
                    _ => numeric::mul,
                };
                // `apply` returns the kernel's error as it came.
                apply(left, right, |l, r| kernel(l, r)).map_err(|e| match e {
                    DataFusionError::ArrowError(error, _) => out_of_range(&data_type, *error),
                    other => other,
                })
            }
            (None, [value]) => match value {
                ColumnarValue::Array(array) => {
                    Ok(ColumnarValue::Array(checked(numeric::neg(array))?))
                }
                ColumnarValue::Scalar(scalar) => {
                    let array = checked(numeric::neg(&scalar.to_array()?))?;
                    Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                        &array, 0,
                    )?))
                }
            },
            _ => exec_err!("{} takes {} arguments", self.name, self.arity()),
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::Int64Type;

    use crate::{Db, Error};

    /// A long chain keeps the operators' names and values, and still
    /// fails when it overflows. (Planning it once took time in the cube of
    /// its length; the benchmark's W11 times it. 60 terms stay within a
    /// test thread's stack in a debug build.)
    #[tokio::test]
    async fn a_long_chain_is_named_as_its_operators_and_checked() -> crate::Result<()> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?;
        let db = Db::open(dir.path())?;
        let session = db.session();
        session
            .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, c BIGINT); INSERT INTO t VALUES ('a', 3)")
            .await?;
        let terms = 60;
        let chain = vec!["c"; terms].join(" + ") + " * 2 - -c";
        let batches = session
            .sql(&format!("SELECT {chain} FROM t"))
            .await?
            .collect()
            .await?;
        let expected_name = vec!["t.c"; terms].join(" + ") + " * Int64(2) - (- t.c)";
        assert_eq!(batches[0].schema().field(0).name(), &expected_name);
        let values: &Int64Array = batches[0].column(0).as_primitive::<Int64Type>();
        assert_eq!(values.value(0), 3 * (terms as i64 - 1) + 6 + 3);

        let overflowing = vec!["c"; terms].join(" * ");
        let error = session
            .sql(&format!("SELECT {overflowing} FROM t"))
            .await?
            .collect()
            .await
            .err()
            .map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("BIGINT out of range")),
            "{error:?}"
        );
        Ok(())
    }
}
