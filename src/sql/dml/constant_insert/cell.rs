//! The values of a VALUES row as the insert reads them ([`Cell`]), from
//! the plan or straight off the statement's literals, and a text column
//! built from them without copying each string twice.

use std::borrow::Cow;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, LargeStringArray, StringArray, StringViewArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{exec_err, ParamValues, Result, ScalarValue};
use datafusion::logical_expr::Expr;

use super::constant;
use super::map::map_literal;
use crate::sql::values::literal::{Literal, Numbers};

/// One value of a VALUES row.
#[derive(Debug)]
pub(crate) enum Cell<'a> {
    /// A constant of the plan: a literal, a parameter, a cast of one.
    Expr(&'a Expr),
    /// A quoted string of the statement (the planner's `Utf8`), borrowed
    /// until it is copied into its column.
    Text(Cow<'a, str>),
    /// Another literal of the statement.
    Value(ScalarValue),
    /// A number of the statement: its value as the planner reads it, and
    /// its digits and sign, which a DECIMAL column takes exactly (the
    /// planner's value of `12345678901234567.1234567891` is a DOUBLE, with
    /// other digits).
    Number {
        /// The planner's value.
        value: ScalarValue,
        /// The digits as written.
        digits: &'a str,
        /// Whether a minus sign came before them.
        negative: bool,
    },
    /// A `MAP {k: v, …}` literal.
    Map(Vec<(Cell<'a>, Cell<'a>)>),
}

impl Cell<'_> {
    /// The value as type `data_type` (not for a map).
    pub(super) fn value(
        &self,
        data_type: &DataType,
        params: Option<&ParamValues>,
    ) -> Result<ScalarValue> {
        match self {
            Cell::Expr(expr) => constant(expr, data_type, params),
            Cell::Text(text) => ScalarValue::Utf8(Some(text.to_string())).cast_to(data_type),
            Cell::Value(value) => value.cast_to(data_type),
            Cell::Number {
                value,
                digits,
                negative,
            } => match data_type {
                DataType::Decimal128(..) | DataType::Decimal256(..)
                    if !digits.contains(['e', 'E']) =>
                {
                    let sign = if *negative { "-" } else { "" };
                    ScalarValue::Utf8(Some(format!("{sign}{digits}"))).cast_to(data_type)
                }
                _ => value.cast_to(data_type),
            },
            Cell::Map(_) => exec_err!("a MAP literal where a value of type {data_type} belongs"),
        }
    }

    /// A cell of the plan: a map literal's parts, or the constant.
    pub(super) fn of_expr(expr: &Expr) -> Cell<'_> {
        match map_literal(expr) {
            Some((keys, values)) => Cell::Map(
                keys.iter()
                    .zip(values)
                    .map(|(k, v)| (Cell::Expr(k), Cell::Expr(v)))
                    .collect(),
            ),
            None => Cell::Expr(expr),
        }
    }
}

/// The cells of rows of literals; `None` when a value is not one the
/// planner would read as this path does.
pub(crate) fn literal_rows<'t>(
    rows: impl IntoIterator<Item = Vec<Literal<'t>>>,
    numbers: Numbers,
) -> Option<Vec<Vec<Cell<'t>>>> {
    rows.into_iter()
        .map(|row| {
            row.into_iter()
                .map(|literal| literal_cell(literal, numbers))
                .collect()
        })
        .collect()
}

/// The cell of a literal, or of a `MAP {…}` of them whose keys are of one
/// type and whose values are of one type (NULL aside). DataFusion first
/// brings a map's keys, and its values, to a common type (`make_array`):
/// a map that needs that is left to it.
pub(super) fn literal_cell(literal: Literal<'_>, numbers: Numbers) -> Option<Cell<'_>> {
    match literal {
        Literal::Str(text) => Some(Cell::Text(text)),
        Literal::Map(entries) => {
            let pairs = entries
                .into_iter()
                .map(|(k, v)| Some((literal_cell(k, numbers)?, literal_cell(v, numbers)?)))
                .collect::<Option<Vec<_>>>()?;
            let uniform = of_one_type(pairs.iter().map(|(k, _)| k))
                && of_one_type(pairs.iter().map(|(_, v)| v));
            uniform.then_some(Cell::Map(pairs))
        }
        Literal::Number { digits, negative } => Some(Cell::Number {
            value: Literal::Number { digits, negative }.scalar(numbers)?,
            digits,
            negative,
        }),
        other => other.scalar(numbers).map(Cell::Value),
    }
}

/// Whether the literal cells that are not NULL all have one type.
pub(super) fn of_one_type<'c, 'a: 'c>(cells: impl Iterator<Item = &'c Cell<'a>>) -> bool {
    let mut types = cells.filter_map(|cell| match cell {
        Cell::Text(_) => Some(DataType::Utf8),
        Cell::Value(value) | Cell::Number { value, .. } if !value.is_null() => {
            Some(value.data_type())
        }
        _ => None,
    });
    let first = types.next();
    types.all(|t| Some(t) == first)
}

/// The column of `cells` when `data_type` is a string type and each cell
/// is a string of the statement or NULL: each string is copied once, into
/// the array, where a `ScalarValue` and its cast would copy it twice more.
/// `None` for anything else.
pub(super) fn text_column(cells: &[&Cell<'_>], data_type: &DataType) -> Option<ArrayRef> {
    if !matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    ) {
        return None;
    }
    let texts = cells
        .iter()
        .map(|cell| match cell {
            Cell::Text(text) => Some(Some(text.as_ref())),
            Cell::Value(ScalarValue::Null) => Some(None),
            _ => None,
        })
        .collect::<Option<Vec<Option<&str>>>>()?;
    Some(match data_type {
        DataType::Utf8 => Arc::new(StringArray::from(texts)),
        DataType::LargeUtf8 => Arc::new(LargeStringArray::from(texts)),
        _ => Arc::new(StringViewArray::from(texts)),
    })
}
