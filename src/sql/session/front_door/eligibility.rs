//! Which plans the cache keeps, and which values a kept plan takes.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::metadata::ScalarAndMetadata;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{LogicalPlan, Volatility};

use crate::sql::read::table::WideTable;
use crate::sql::read::versions::CellsView;

/// Whether a value of type `value` where a value of type `place` stands
/// is coerced to `place` by DataFusion, so that the value converted to
/// `place` (exactly, see [`exactly_as`]) means what it meant: the same
/// type, integers where numbers stand, fractions where fractions stand,
/// text where text or a date or time stands. Anything else (a number
/// compared with a text column, which DataFusion may compare as numbers)
/// is planned as written.
pub(super) fn same_kind(value: &DataType, place: &DataType) -> bool {
    let text =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8);
    value == place
        || (value.is_integer() && (place.is_integer() || place.is_floating()))
        || (value.is_floating() && place.is_floating())
        || (text(value) && (text(place) || place.is_temporal()))
}

/// `value` as a value of `data_type`, when it converts there and back
/// unchanged.
pub(super) fn exactly_as(value: ScalarValue, data_type: &DataType) -> Option<ScalarAndMetadata> {
    let converted = value.cast_to(data_type).ok()?;
    if converted.is_null() || converted.cast_to(&value.data_type()).ok()? != value {
        return None;
    }
    Some(converted.into())
}

/// Whether `plan` calls a function that is not immutable (a view's
/// `now()` included, which the statement's text does not show).
pub(super) fn plans_changing_functions(plan: &LogicalPlan) -> bool {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::Expr;
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Expr::ScalarFunction(f) = e {
                    if f.func.signature().volatility != Volatility::Immutable {
                        found = true;
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    found
}

/// Whether every table `plan` reads is a widesql table or version view:
/// what a view, a registered file or an in-memory table holds (a view
/// calling `now()`, a table registered again under its name) is not seen
/// by the catalog generation.
pub(super) fn reads_only_widesql_tables(plan: &LogicalPlan) -> bool {
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::datasource::source_as_provider;
    let mut only = true;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let widesql = source_as_provider(&scan.source).is_ok_and(|provider| {
                provider.downcast_ref::<WideTable>().is_some()
                    || provider.downcast_ref::<CellsView>().is_some()
            });
            if !widesql {
                only = false;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    only
}
