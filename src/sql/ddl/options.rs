//! Table options: widesql's `WITH ('<family>.<setting>' = …)` clause, TTLs,
//! and the table spec built from a planned schema.

use std::collections::BTreeMap;
use std::time::Duration;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, SqlOption, Value};

use crate::error::Result;
use crate::sql::read::shape::KEY_COLUMN;
use crate::sql::values::value_type_of;

use super::{sql_error, DEFAULT_FAMILY};
use crate::table::spec::{ColumnSpec, FamilySpec, RowKeySpec, TableSpec, ValueType};

/// SQL text that parses back to `expr` (kept for column DEFAULTs).
/// sqlparser prints `-(-5)` as `--5`, which is a comment, so the operand
/// of every unary minus is parenthesised.
pub(super) fn expr_text(expr: &datafusion::logical_expr::Expr) -> Result<String> {
    use datafusion::sql::sqlparser::ast::{visit_expressions_mut, UnaryOperator};
    let mut ast = datafusion::sql::unparser::expr_to_sql(expr).map_err(crate::sql::from_df)?;
    let _ = visit_expressions_mut(&mut ast, |e| {
        if let SqlExpr::UnaryOp {
            op: UnaryOperator::Minus,
            expr: operand,
        } = e
        {
            if !matches!(**operand, SqlExpr::Nested(_)) {
                **operand = SqlExpr::Nested(operand.clone());
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    Ok(ast.to_string())
}

/// The value of an option as text.
pub(super) fn option_text(value: &SqlExpr) -> Result<String> {
    match value {
        SqlExpr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Ok(s.clone()),
            Value::Number(n, _) => Ok(n.clone()),
            Value::Boolean(b) => Ok(b.to_string()),
            other => Err(sql_error(format!(
                "option value {other} is not a string or number"
            ))),
        },
        SqlExpr::Identifier(i) => Ok(i.value.clone()),
        other => Err(sql_error(format!(
            "option value {other} is not a string or number"
        ))),
    }
}

/// Family options: family -> setting -> value.
pub(super) type FamilyOptions = BTreeMap<String, BTreeMap<String, String>>;

pub(super) const SETTINGS: [&str; 4] = ["max_versions", "ttl", "locality_group", "columns"];

pub(super) fn family_options(options: &[SqlOption]) -> Result<FamilyOptions> {
    let mut out = FamilyOptions::new();
    for option in options {
        let SqlOption::KeyValue { key, value } = option else {
            return Err(sql_error(format!("unsupported table option {option}")));
        };
        let key_text = key.value.clone();
        let Some((family, setting)) = key_text.rsplit_once('.') else {
            return Err(sql_error(format!(
                "unknown table option '{key_text}': options are '<family>.<setting>' with setting one of {}",
                SETTINGS.join(", ")
            )));
        };
        if !SETTINGS.contains(&setting) {
            return Err(sql_error(format!(
                "unknown table option '{key_text}': the setting must be one of {}",
                SETTINGS.join(", ")
            )));
        }
        out.entry(family.to_string())
            .or_default()
            .insert(setting.to_string(), option_text(value)?);
    }
    Ok(out)
}

/// Parses a TTL: `90` (seconds), or a duration as humantime reads it
/// (`90s`, `15m`, `12h`, `7d`, `2w`, `1h 30m`).
pub(super) fn parse_ttl(text: &str) -> Result<Duration> {
    let text = text.trim();
    // The age is kept in microseconds as an i64: refuse what does not fit
    // rather than wrap around to a short TTL that would delete data.
    const MAX_SECONDS: u64 = (i64::MAX / 1_000_000) as u64;
    let too_long = || {
        sql_error(format!(
            "ttl '{text}' is too long: the longest is {MAX_SECONDS}s (about 292,000 years)"
        ))
    };
    let duration = if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
        Duration::from_secs(text.parse().map_err(|_| too_long())?)
    } else {
        humantime::parse_duration(text).map_err(|e| match e {
            humantime::DurationError::NumberOverflow => too_long(),
            other => sql_error(format!(
                "ttl '{text}' is not a number with a unit such as 90s, 15m, 12h or 7d ({other})"
            )),
        })?
    };
    if duration.as_secs() > MAX_SECONDS {
        return Err(too_long());
    }
    Ok(duration)
}

/// Applies GC and locality settings to a family.
pub(super) fn apply_settings(
    mut family: FamilySpec,
    settings: &BTreeMap<String, String>,
) -> Result<FamilySpec> {
    if let Some(n) = settings.get("max_versions") {
        let n: u32 = n.parse().map_err(|_| {
            sql_error(format!(
                "max_versions '{n}' of family '{}' is not a number",
                family.name
            ))
        })?;
        family = family.with_max_versions(n);
    }
    if let Some(ttl) = settings.get("ttl") {
        family = family.with_max_age(parse_ttl(ttl)?);
    }
    if let Some(group) = settings.get("locality_group") {
        family = family.with_locality_group(group.clone());
    }
    Ok(family)
}

/// Builds a spec from DataFusion's view of a CREATE TABLE.
pub(super) fn spec_from_schema(
    schema: &Schema,
    primary_key: &[usize],
    options: &FamilyOptions,
) -> Result<TableSpec> {
    let mut placement: BTreeMap<String, String> = BTreeMap::new();
    for (family, settings) in options {
        if let Some(columns) = settings.get("columns") {
            for column in columns.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                if schema.field_with_name(column).is_err() {
                    return Err(sql_error(format!(
                        "option '{family}.columns' names column '{column}', which the table does not have"
                    )));
                }
                if let Some(other) = placement.insert(column.to_string(), family.clone()) {
                    return Err(sql_error(format!(
                        "column '{column}' is named by both '{other}.columns' and '{family}.columns'; a column lives in one family"
                    )));
                }
            }
        }
    }
    let key_field = schema.fields().iter().position(|f| f.name() == KEY_COLUMN);
    let key = match (key_field, primary_key) {
        (Some(k), pk) if pk.is_empty() || pk == [k] => {
            let utf8 = match value_type_of(schema.field(k).data_type()) {
                Some(ValueType::Utf8) => true,
                Some(ValueType::Bytes) => false,
                _ => return Err(sql_error(format!("column '{KEY_COLUMN}' must be VARCHAR or BYTEA"))),
            };
            RowKeySpec::Key { utf8 }
        }
        (Some(_), _) => {
            return Err(sql_error(format!(
                "a table with a '{KEY_COLUMN}' column cannot have another primary key"
            )))
        }
        (None, []) => RowKeySpec::Generated,
        (None, pk) => RowKeySpec::Columns(
            pk.iter()
                .map(|&i| {
                    let f = schema.field(i);
                    let vt = value_type_of(f.data_type())
                        .filter(|vt| crate::table::spec::key_element_kind(vt).is_some())
                        .ok_or_else(|| {
                            sql_error(format!(
                                "primary key column '{}' has type {}, which cannot be part of a row key",
                                f.name(),
                                f.data_type()
                            ))
                        })?;
                    Ok(ColumnSpec::new(f.name(), vt).with_nullable(false))
                })
                .collect::<Result<_>>()?,
        ),
    };
    for (i, field) in schema.fields().iter().enumerate() {
        let is_key = Some(i) == key_field || primary_key.contains(&i);
        if let (true, Some(family)) = (is_key, placement.get(field.name())) {
            return Err(sql_error(format!(
                "option '{family}.columns' names column '{}', which is the row key, not stored in a family",
                field.name()
            )));
        }
    }
    let mut families: Vec<FamilySpec> = Vec::new();
    let family_at = |name: &str, families: &mut Vec<FamilySpec>| -> usize {
        match families.iter().position(|f| f.name == name) {
            Some(at) => at,
            None => {
                families.push(FamilySpec::new(name).with_qualifier_type(None));
                families.len() - 1
            }
        }
    };
    for (i, field) in schema.fields().iter().enumerate() {
        if Some(i) == key_field || primary_key.contains(&i) {
            continue;
        }
        if let DataType::Map(entries, _) = field.data_type() {
            let value = match entries.data_type() {
                DataType::Struct(kv)
                    if kv.len() == 2
                        && value_type_of(kv[0].data_type()) == Some(ValueType::Utf8) =>
                {
                    value_type_of(kv[1].data_type())
                }
                _ => None,
            }
            .ok_or_else(|| {
                sql_error(format!(
                    "map column '{}' must be MAP(VARCHAR, T): a MAP column is a column family, its keys are the qualifiers",
                    field.name()
                ))
            })?;
            // A MAP column is a family of its own: sharing one with declared
            // columns would let its entries overwrite and delete them.
            if field.name() == DEFAULT_FAMILY {
                return Err(sql_error(format!(
                    "map column '{DEFAULT_FAMILY}' would share the default column family '{DEFAULT_FAMILY}' with the declared columns: give the map another name"
                )));
            }
            if placement.values().any(|f| f == field.name()) {
                return Err(sql_error(format!(
                    "map column '{0}' is a column family of its own, but option '{0}.columns' puts declared columns into it: give the map another name",
                    field.name()
                )));
            }
            let at = family_at(field.name(), &mut families);
            families[at].qualifier_type = Some(value);
            continue;
        }
        let vt = value_type_of(field.data_type()).ok_or_else(|| {
            sql_error(format!(
                "column '{}' has type {}, which widesql cannot store",
                field.name(),
                field.data_type()
            ))
        })?;
        let family = placement
            .get(field.name())
            .map_or(DEFAULT_FAMILY, String::as_str);
        let at = family_at(family, &mut families);
        families[at]
            .columns
            .push(ColumnSpec::new(field.name(), vt).with_nullable(field.is_nullable()));
    }
    // Every SQL table has the family cf: it holds the row marker of rows
    // whose every column is NULL (see `crate::sql::dml::write`).
    if !families.iter().any(|f| f.name == DEFAULT_FAMILY) {
        families.insert(0, FamilySpec::new(DEFAULT_FAMILY).with_qualifier_type(None));
    }
    for (name, settings) in options {
        let at = family_at(name, &mut families);
        families[at] = apply_settings(families[at].clone(), settings)?;
    }
    Ok(TableSpec {
        key,
        families,
        column_order: schema.fields().iter().map(|f| f.name().clone()).collect(),
    })
}
