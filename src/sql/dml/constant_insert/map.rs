//! `MAP {…}` values of an insert: read off the plan, built into a
//! `MapArray` column, and read back for tests.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, Array, ArrayRef, MapArray, StructArray};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{exec_err, DataFusionError, ParamValues, Result, ScalarValue};
use datafusion::logical_expr::Expr;

use super::cell::{text_column, Cell};
use super::is_constant;

/// The keys and values of a `MAP {k: v, …}` literal, as the SQL planner
/// writes it: `map(make_array(k, …), make_array(v, …))` of constants.
pub(super) fn map_literal(expr: &Expr) -> Option<(&[Expr], &[Expr])> {
    let Expr::ScalarFunction(map) = expr else {
        return None;
    };
    if map.name() != "map" {
        return None;
    }
    let [Expr::ScalarFunction(keys), Expr::ScalarFunction(values)] = map.args.as_slice() else {
        return None;
    };
    let arrays = keys.name() == "make_array" && values.name() == "make_array";
    let constants = keys.args.iter().chain(&values.args).all(is_constant);
    (arrays && constants && keys.args.len() == values.args.len())
        .then_some((keys.args.as_slice(), values.args.as_slice()))
}

/// A map column of `MAP {…}` literals, map values or NULLs, with
/// DataFusion's checks: keys are neither NULL nor repeated.
pub(super) fn map_column(
    cells: &[&Cell<'_>],
    map_type: &DataType,
    entries: &FieldRef,
    sorted: bool,
    params: Option<&ParamValues>,
) -> Result<ArrayRef> {
    let Some([key_field, value_field]) = entry_fields(entries) else {
        return exec_err!("map entries of type {}", entries.data_type());
    };
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    let mut lengths = Vec::new();
    let mut valid = Vec::new();
    for &cell in cells {
        // A map literal's entries, or those of a map value (a parameter).
        let entries: Vec<(ScalarValue, ScalarValue)> = match cell {
            Cell::Map(pairs) => pairs
                .iter()
                .map(|(k, v)| {
                    Ok((
                        k.value(key_field.data_type(), params)?,
                        v.value(value_field.data_type(), params)?,
                    ))
                })
                .collect::<Result<_>>()?,
            other => match other.value(map_type, params)? {
                ScalarValue::Map(map) if map.len() == 1 && map.is_valid(0) => map_entries(&map)?,
                value if value.is_null() => {
                    lengths.push(0);
                    valid.push(false);
                    continue;
                }
                value => return exec_err!("not a map: {value}"),
            },
        };
        let mut seen = HashSet::new();
        for (key, _) in &entries {
            if key.is_null() {
                return exec_err!("map key cannot be null");
            }
            if !seen.insert(key) {
                return exec_err!("map key must be unique, duplicate key found: {key}");
            }
        }
        lengths.push(entries.len());
        valid.push(true);
        for (key, value) in entries {
            keys.push(key);
            values.push(value);
        }
    }
    let array = |scalars: Vec<ScalarValue>, field: &FieldRef| -> Result<ArrayRef> {
        if scalars.is_empty() || scalars.iter().all(ScalarValue::is_null) {
            Ok(new_null_array(field.data_type(), scalars.len()))
        } else {
            ScalarValue::iter_to_array(scalars)
        }
    };
    let (keys, values) = (array(keys, key_field)?, array(values, value_field)?);
    map_array(entries, [keys, values], lengths, valid, sorted)
}

/// The key and value fields of a map's entries.
pub(super) fn entry_fields(entries: &FieldRef) -> Option<[&FieldRef; 2]> {
    match entries.data_type() {
        DataType::Struct(parts) => match parts.iter().collect::<Vec<_>>()[..] {
            [key, value] => Some([key, value]),
            _ => None,
        },
        _ => None,
    }
}

/// The map column of `entries` (keys and values) cut into maps of
/// `lengths`, NULL where not `valid`.
pub(super) fn map_array(
    entries: &FieldRef,
    [keys, values]: [ArrayRef; 2],
    lengths: Vec<usize>,
    valid: Vec<bool>,
    sorted: bool,
) -> Result<ArrayRef> {
    let DataType::Struct(parts) = entries.data_type() else {
        return exec_err!("map entries of type {}", entries.data_type());
    };
    let entries_array = StructArray::try_new(parts.clone(), vec![keys, values], None)?;
    let nulls = valid.iter().any(|v| !v).then(|| NullBuffer::from(valid));
    let map = MapArray::try_new(
        Arc::clone(entries),
        OffsetBuffer::from_lengths(lengths),
        entries_array,
        nulls,
        sorted,
    )
    .map_err(DataFusionError::from)?;
    Ok(Arc::new(map))
}

/// The map column of `cells` when each is a `MAP {…}` of strings (values
/// may be NULL) or a NULL, for a map of string keys and values, with
/// DataFusion's check that no key repeats. `None` for anything else.
pub(super) fn text_map_column(
    cells: &[&Cell<'_>],
    entries: &FieldRef,
    sorted: bool,
) -> Option<Result<ArrayRef>> {
    let [key_field, value_field] = entry_fields(entries)?;
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    let mut lengths = Vec::with_capacity(cells.len());
    let mut valid = Vec::with_capacity(cells.len());
    for &cell in cells {
        match cell {
            Cell::Map(pairs) => {
                let mut seen = HashSet::with_capacity(pairs.len());
                for (key, value) in pairs {
                    let Cell::Text(text) = key else {
                        return None;
                    };
                    if !seen.insert(text) {
                        return Some(exec_err!(
                            "map key must be unique, duplicate key found: {text}"
                        ));
                    }
                    keys.push(key);
                    values.push(value);
                }
                lengths.push(pairs.len());
                valid.push(true);
            }
            Cell::Value(ScalarValue::Null) => {
                lengths.push(0);
                valid.push(false);
            }
            _ => return None,
        }
    }
    let keys = text_column(&keys, key_field.data_type())?;
    let values = text_column(&values, value_field.data_type())?;
    Some(map_array(entries, [keys, values], lengths, valid, sorted))
}

/// The entries of the one map of `map`.
pub(super) fn map_entries(map: &MapArray) -> Result<Vec<(ScalarValue, ScalarValue)>> {
    let (keys, values) = (map.keys(), map.values());
    let range = map.value_offsets()[0] as usize..map.value_offsets()[1] as usize;
    range
        .map(|at| {
            Ok((
                ScalarValue::try_from_array(keys, at)?,
                ScalarValue::try_from_array(values, at)?,
            ))
        })
        .collect()
}
