//! Values as text, exactly as DataFusion's sqllogictest files write them:
//! `NULL`, `(empty)` for the empty string, `true`/`false`, floats and
//! decimals rounded to 12 decimals with trailing zeros removed (via their
//! shortest decimal form), `NaN`, `Infinity`; column types `I` (integers),
//! `R` (floats, decimals), `T` (text), `B` (booleans), `D` (dates, times),
//! `P` (timestamps), `?` (anything else); a multi-line last cell (an
//! `EXPLAIN` plan) becomes numbered rows.

use std::str::FromStr;

use bigdecimal::BigDecimal;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Decimal256Type, DecimalType, Float16Type, Float32Type, Float64Type,
};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use sqllogictest::ColumnType;

/// A result column type, as DataFusion's sqllogictest files spell them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SltType {
    /// `B`
    Boolean,
    /// `D`
    DateTime,
    /// `I`
    Integer,
    /// `R`
    Float,
    /// `T`
    Text,
    /// `P`
    Timestamp,
    /// `?`
    Other,
}

impl ColumnType for SltType {
    fn from_char(value: char) -> Option<Self> {
        Some(match value {
            'B' => SltType::Boolean,
            'D' => SltType::DateTime,
            'I' => SltType::Integer,
            'R' => SltType::Float,
            'T' => SltType::Text,
            'P' => SltType::Timestamp,
            _ => SltType::Other,
        })
    }

    fn to_char(&self) -> char {
        match self {
            SltType::Boolean => 'B',
            SltType::DateTime => 'D',
            SltType::Integer => 'I',
            SltType::Float => 'R',
            SltType::Text => 'T',
            SltType::Timestamp => 'P',
            SltType::Other => '?',
        }
    }
}

pub(crate) fn slt_type(data_type: &DataType) -> SltType {
    match data_type {
        DataType::Boolean => SltType::Boolean,
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => SltType::Integer,
        DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => SltType::Float,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => SltType::Text,
        DataType::Date32 | DataType::Date64 | DataType::Time32(_) | DataType::Time64(_) => {
            SltType::DateTime
        }
        DataType::Timestamp(..) => SltType::Timestamp,
        DataType::Dictionary(key, value)
            if key.is_integer()
                && matches!(
                    **value,
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                ) =>
        {
            SltType::Text
        }
        _ => SltType::Other,
    }
}

/// A decimal string rounded to `digits` decimals, trailing zeros removed.
fn decimal_text(text: &str, digits: i64) -> String {
    match BigDecimal::from_str(text) {
        Ok(d) => d.round(digits).normalized().to_plain_string(),
        Err(_) => text.to_string(),
    }
}

/// A float as DataFusion's sqllogictest prints it.
pub fn float_text(value: f64, shortest: &str) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        decimal_text(shortest, 12)
    }
}

fn text_value(value: &str) -> String {
    if value.is_empty() {
        "(empty)".to_string()
    } else {
        value.trim_end_matches('\n').replace('\u{0000}', "\\0")
    }
}

/// One cell as text.
fn cell_text(array: &dyn Array, row: usize, formatter: &ArrayFormatter<'_>) -> String {
    if array.is_null(row) {
        return "NULL".to_string();
    }
    match array.data_type() {
        DataType::Float64 => {
            let v = array.as_primitive::<Float64Type>().value(row);
            float_text(v, &v.to_string())
        }
        DataType::Float32 => {
            let v = array.as_primitive::<Float32Type>().value(row);
            float_text(f64::from(v), &v.to_string())
        }
        DataType::Float16 => {
            let v = array.as_primitive::<Float16Type>().value(row);
            float_text(f64::from(v), &v.to_string())
        }
        DataType::Decimal128(_, scale) => decimal_text(
            &Decimal128Type::format_decimal(
                array.as_primitive::<Decimal128Type>().value(row),
                u8::MAX,
                *scale,
            ),
            i64::from(*scale),
        ),
        DataType::Decimal256(_, scale) => decimal_text(
            &Decimal256Type::format_decimal(
                array.as_primitive::<Decimal256Type>().value(row),
                u8::MAX,
                *scale,
            ),
            i64::from(*scale),
        ),
        DataType::Utf8 => text_value(array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => text_value(array.as_string::<i64>().value(row)),
        DataType::Utf8View => text_value(array.as_string_view().value(row)),
        DataType::Dictionary(..) => {
            let dict = array.as_any_dictionary();
            let key = dict.normalized_keys()[row];
            let values = dict.values();
            match ArrayFormatter::try_new(values.as_ref(), &format_options()) {
                Ok(f) => cell_text(values.as_ref(), key, &f),
                Err(_) => formatter.value(row).to_string(),
            }
        }
        _ => formatter.value(row).to_string(),
    }
}

fn format_options() -> FormatOptions<'static> {
    FormatOptions::default().with_null("NULL")
}

/// The rows of batches as strings.
pub fn rows_as_text(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, ArrowError> {
    let options = format_options();
    let mut rows = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|a| ArrayFormatter::try_new(a.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = batch
                .columns()
                .iter()
                .zip(&formatters)
                .map(|(a, f)| cell_text(a.as_ref(), row, f))
                .collect();
            push_row(&mut rows, cells);
        }
    }
    Ok(rows)
}

/// Adds a row; a multi-line last cell (an `EXPLAIN` plan) becomes one row
/// per line, numbered, indentation shown as `-`, as DataFusion's
/// sqllogictest files write plans.
fn push_row(rows: &mut Vec<Vec<String>>, mut cells: Vec<String>) {
    let Some(last) = cells.pop() else {
        rows.push(cells);
        return;
    };
    let lines: Vec<&str> = last.split('\n').collect();
    if lines.len() < 2 {
        cells.push(last);
        rows.push(cells);
        return;
    }
    rows.push(cells);
    for (i, line) in lines.iter().enumerate() {
        let content = line.trim_start();
        let indent = line.len() - content.len();
        rows.push(vec![format!(
            "{:02}){}{content}",
            i + 1,
            "-".repeat(indent)
        )]);
    }
}
