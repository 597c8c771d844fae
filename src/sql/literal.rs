//! The literals of a statement's text, read as DataFusion's SQL planner
//! reads them (`datafusion_sql::expr::value`): a quoted string is `Utf8`,
//! a whole number `Int64` (or `UInt64` above it), any other number
//! `Float64`, `X'…'` `Binary`. What the fast paths (ad hoc point reads,
//! INSERT of literals) take off a statement's text must mean exactly what
//! the planner would have made of it; anything else is left to it.

use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, UnaryOperator, Value as SqlValue};

/// How numbers with a fraction or exponent read: as `Float64`, or (with
/// `datafusion.sql_parser.parse_float_as_decimal`) not at all here.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Numbers {
    pub(crate) floats: bool,
}

/// The value of a literal, or `None` when the planner should read it.
pub(crate) fn literal_value(value: &SqlValue, numbers: Numbers) -> Option<ScalarValue> {
    match value {
        SqlValue::SingleQuotedString(text) => Some(ScalarValue::from(text.as_str())),
        SqlValue::Boolean(b) => Some(ScalarValue::Boolean(Some(*b))),
        SqlValue::Null => Some(ScalarValue::Null),
        SqlValue::Number(text, false) => number(text, false, numbers),
        SqlValue::HexStringLiteral(hex) => decode_hex(hex).map(|b| ScalarValue::Binary(Some(b))),
        _ => None,
    }
}

/// The value of a literal expression: a literal, or a negated number.
pub(crate) fn literal_expr(expr: &SqlExpr, numbers: Numbers) -> Option<ScalarValue> {
    match expr {
        SqlExpr::Value(value) => literal_value(&value.value, numbers),
        SqlExpr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            SqlExpr::Value(value) => match &value.value {
                SqlValue::Number(text, false) => number(text, true, numbers),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

fn number(text: &str, negative: bool, numbers: Numbers) -> Option<ScalarValue> {
    if text.contains('_') {
        return None;
    }
    let signed = if negative {
        format!("-{text}")
    } else {
        text.to_string()
    };
    if let Ok(n) = signed.parse::<i64>() {
        return Some(ScalarValue::Int64(Some(n)));
    }
    if !negative {
        if let Ok(n) = text.parse::<u64>() {
            return Some(ScalarValue::UInt64(Some(n)));
        }
    }
    if !numbers.floats {
        return None;
    }
    signed
        .parse::<f64>()
        .ok()
        .map(|f| ScalarValue::Float64(Some(f)))
}

/// `X'…'` as the planner decodes it: an odd first digit is a byte alone.
fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    let digits = hex
        .bytes()
        .map(|c| (c as char).to_digit(16).map(|d| d as u8))
        .collect::<Option<Vec<u8>>>()?;
    let (first, pairs) = digits.split_at(digits.len() % 2);
    Some(
        first
            .iter()
            .copied()
            .chain(pairs.chunks(2).map(|p| (p[0] << 4) | p[1]))
            .collect(),
    )
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
