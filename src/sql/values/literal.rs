//! The literals of a statement's text, read as DataFusion's SQL planner
//! reads them (`datafusion_sql::expr::value`): a quoted string is `Utf8`,
//! a whole number `Int64` (or `UInt64` above it), any other number
//! `Float64`, `X'…'` `Binary`. What the fast paths (ad hoc point reads,
//! INSERT of literals) take off a statement's text must mean exactly what
//! the planner would have made of it; anything else is left to it.

use std::borrow::Cow;

use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, UnaryOperator, Value as SqlValue};

/// How numbers with a fraction or exponent read: as `Float64`, or (with
/// `datafusion.sql_parser.parse_float_as_decimal`) not at all here.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Numbers {
    pub(crate) floats: bool,
}

/// A literal as written, borrowing the statement's text or its parsed
/// form: an `INSERT … VALUES` of 2 KB strings copies each string once,
/// into the column it goes to, instead of through a token, a
/// `ScalarValue` and a one-row array.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Literal<'t> {
    /// `'…'`, its doubled quotes undone.
    Str(Cow<'t, str>),
    /// Digits with an optional fraction and exponent, and a leading minus.
    Number {
        digits: &'t str,
        negative: bool,
    },
    /// The digits of `X'…'`.
    Hex(&'t str),
    Null,
    Bool(bool),
    /// `MAP {k: v, …}` of literals.
    Map(Vec<(Literal<'t>, Literal<'t>)>),
}

impl<'t> Literal<'t> {
    /// The literal of a parsed value; `None` for anything else.
    pub(crate) fn of_value(value: &'t SqlValue) -> Option<Self> {
        Some(match value {
            SqlValue::SingleQuotedString(text) => Literal::Str(Cow::Borrowed(text)),
            SqlValue::Boolean(b) => Literal::Bool(*b),
            SqlValue::Null => Literal::Null,
            SqlValue::Number(digits, false) => Literal::Number {
                digits,
                negative: false,
            },
            SqlValue::HexStringLiteral(hex) => Literal::Hex(hex),
            _ => return None,
        })
    }

    /// The literal of a parsed expression: a literal, a negated number,
    /// or a `MAP {…}` of those; `None` for anything else.
    pub(crate) fn of_expr(expr: &'t SqlExpr) -> Option<Self> {
        match expr {
            SqlExpr::Value(value) => Literal::of_value(&value.value),
            SqlExpr::UnaryOp {
                op: UnaryOperator::Minus,
                expr,
            } => match expr.as_ref() {
                SqlExpr::Value(value) => match &value.value {
                    SqlValue::Number(digits, false) => Some(Literal::Number {
                        digits,
                        negative: true,
                    }),
                    _ => None,
                },
                _ => None,
            },
            SqlExpr::Map(map) => map
                .entries
                .iter()
                .map(|entry| {
                    let key = Literal::of_expr(&entry.key)?;
                    let value = Literal::of_expr(&entry.value)?;
                    let nested = matches!(key, Literal::Map(_)) || matches!(value, Literal::Map(_));
                    (!nested).then_some((key, value))
                })
                .collect::<Option<Vec<_>>>()
                .map(Literal::Map),
            _ => None,
        }
    }

    /// The value the planner makes of the literal; `None` when it should
    /// read it itself (and for a map).
    pub(crate) fn scalar(&self, numbers: Numbers) -> Option<ScalarValue> {
        match self {
            Literal::Str(text) => Some(ScalarValue::Utf8(Some(text.to_string()))),
            Literal::Bool(b) => Some(ScalarValue::Boolean(Some(*b))),
            Literal::Null => Some(ScalarValue::Null),
            Literal::Number { digits, negative } => number(digits, *negative, numbers),
            Literal::Hex(hex) => decode_hex(hex).map(|b| ScalarValue::Binary(Some(b))),
            Literal::Map(_) => None,
        }
    }
}

/// The value of a literal, or `None` when the planner should read it.
pub(crate) fn literal_value(value: &SqlValue, numbers: Numbers) -> Option<ScalarValue> {
    Literal::of_value(value)?.scalar(numbers)
}

/// A number's digits with its sign as `Int64`, when they are a whole
/// number that fits.
fn whole(digits: &str, negative: bool) -> Option<i64> {
    let n: i128 = digits.parse().ok()?;
    i64::try_from(if negative { -n } else { n }).ok()
}

fn number(digits: &str, negative: bool, numbers: Numbers) -> Option<ScalarValue> {
    if digits.contains('_') {
        return None;
    }
    if let Some(n) = whole(digits, negative) {
        return Some(ScalarValue::Int64(Some(n)));
    }
    if !negative {
        if let Ok(n) = digits.parse::<u64>() {
            return Some(ScalarValue::UInt64(Some(n)));
        }
    }
    if !numbers.floats {
        return None;
    }
    let f: f64 = digits.parse().ok()?;
    Some(ScalarValue::Float64(Some(if negative { -f } else { f })))
}

/// `X'…'` as the planner decodes it: an odd first digit is a byte alone.
fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let bytes = hex.as_bytes();
    let (first, pairs) = bytes.split_at(bytes.len() % 2);
    let mut out = Vec::with_capacity(bytes.len().div_ceil(2));
    if let Some(&c) = first.first() {
        out.push(digit(c)?);
    }
    for pair in pairs.chunks(2) {
        out.push((digit(pair[0])? << 4) | digit(pair[1])?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_literals_decode_as_the_planner_decodes_them() {
        assert_eq!(decode_hex("00ff"), Some(vec![0, 255]));
        assert_eq!(decode_hex("abc"), Some(vec![0xa, 0xbc]));
        assert_eq!(decode_hex(""), Some(vec![]));
        assert_eq!(decode_hex("0g"), None);
    }

    #[test]
    fn numbers_read_as_the_planner_reads_them() {
        let floats = Numbers { floats: true };
        assert_eq!(
            number("5", true, floats),
            Some(ScalarValue::Int64(Some(-5)))
        );
        assert_eq!(
            number("18446744073709551615", false, floats),
            Some(ScalarValue::UInt64(Some(u64::MAX)))
        );
        assert_eq!(
            number("2.5", false, floats),
            Some(ScalarValue::Float64(Some(2.5)))
        );
        assert_eq!(number("2.5", false, Numbers { floats: false }), None);
        assert_eq!(number("1_000", false, floats), None);
    }
}
