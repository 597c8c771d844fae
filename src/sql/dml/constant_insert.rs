//! `INSERT … VALUES` of constants, written without DataFusion's analyzer,
//! optimizer and executor.
//!
//! DataFusion plans every value of every row as an expression: it names
//! each one (formatting a 2 KB string literal to name it), coerces it, and
//! builds and evaluates a physical expression per value. For a 100-row
//! `INSERT` of webtable pages that was about 80% of the statement's time
//! (profile in `bench/RESULTS.md`). The SQL planner has already cast each
//! value to its column's type, so the rows can be read off its plan:
//! literals, casts of literals, parameters and `MAP {…}` literals become
//! the columns of one batch, which goes through the same
//! [`RowWriter`](crate::sql::dml::write::RowWriter) as any INSERT's rows.
//! A statement whose values are all literals is not even planned row by
//! row: the front door ([`crate::sql::front_door`]) plans it once per
//! shape and reads its rows off the text. Anything else (a function call, an expression, a
//! subquery, a default such as `now()`) is left to DataFusion.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, LargeStringArray, MapArray, RecordBatch, StringArray,
    StringViewArray, StructArray,
};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::compute::CastOptions;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::common::{exec_err, DataFusionError, ParamValues, Result, ScalarValue};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, LogicalPlan, Values, WriteOp};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

use crate::sql::dml::sink::WideSink;
use crate::sql::dml::write::WriteSettings;
use crate::sql::literal::{Literal, Numbers};
use crate::sql::table::WideTable;

/// An `INSERT … VALUES` whose rows are constants, read off its plan.
pub(crate) struct ConstantInsert<'a> {
    table: WideTable,
    /// The table's columns (the DML input): each a column of the VALUES
    /// or a constant (a column's default, or NULL).
    columns: Vec<Output<'a>>,
    /// The VALUES columns' types, as the planner cast the values to.
    values: &'a Values,
    /// The rows: the plan's own, or rows read off a statement's text for
    /// a plan made from one row of parameters ([`ConstantInsert::with_rows`]).
    rows: Vec<Vec<Cell<'a>>>,
}

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
    fn value(&self, data_type: &DataType, params: Option<&ParamValues>) -> Result<ScalarValue> {
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
    fn of_expr(expr: &Expr) -> Cell<'_> {
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

/// One column of the rows to insert.
enum Output<'a> {
    /// Column `n` of the VALUES rows.
    Values(usize),
    /// The same value in every row.
    Constant(&'a Expr),
}

impl<'a> ConstantInsert<'a> {
    /// The insert of `plan`, if it is an `INSERT INTO` a widesql table of
    /// constant rows: `Dml` over a projection of columns and constants
    /// over `Values`.
    pub(crate) fn of(plan: &'a LogicalPlan) -> Option<Self> {
        let LogicalPlan::Dml(dml) = plan else {
            return None;
        };
        if dml.op != WriteOp::Insert(InsertOp::Append) {
            return None;
        }
        let provider = source_as_provider(&dml.target).ok()?;
        let table = provider.downcast_ref::<WideTable>()?.clone();
        let LogicalPlan::Projection(projection) = dml.input.as_ref() else {
            return None;
        };
        let LogicalPlan::Values(values) = projection.input.as_ref() else {
            return None;
        };
        let columns = projection
            .expr
            .iter()
            .map(|expr| match strip_alias(expr) {
                Expr::Column(column) => values
                    .schema
                    .index_of_column(column)
                    .ok()
                    .map(Output::Values),
                other => is_constant(other).then_some(Output::Constant(other)),
            })
            .collect::<Option<Vec<_>>>()?;
        let fields = values.schema.fields();
        let constant_rows = values.values.iter().all(|row| {
            row.len() == fields.len()
                && row.iter().zip(fields.iter()).all(|(e, field)| {
                    is_constant(e)
                        || matches!(field.data_type(), DataType::Map(..))
                            && map_literal(e).is_some()
                })
        });
        if !constant_rows || columns.len() != table.shape().schema.fields().len() {
            return None;
        }
        let rows = values
            .values
            .iter()
            .map(|row| row.iter().map(Cell::of_expr).collect())
            .collect();
        Some(ConstantInsert {
            table,
            columns,
            values,
            rows,
        })
    }

    /// The same insert with other rows (each as wide as the plan's).
    pub(crate) fn with_rows(mut self, rows: Vec<Vec<Cell<'a>>>) -> Option<Self> {
        let width = self.values.schema.fields().len();
        rows.iter().all(|row| row.len() == width).then(|| {
            self.rows = rows;
            self
        })
    }

    /// Builds the rows, with `params` for `$1`, `$2`, …, and writes them as
    /// one statement; the number of rows.
    pub(crate) async fn write(
        &self,
        settings: WriteSettings,
        params: Option<&ParamValues>,
    ) -> Result<u64> {
        let sink = WideSink::new(self.table.append_writer(settings)?, false);
        let batch = self.batch(params)?;
        let schema = batch.schema();
        let input = futures::stream::iter([Ok(batch)]);
        sink.write_stream(Box::pin(RecordBatchStreamAdapter::new(schema, input)))
            .await
    }

    /// The rows as one batch: the table's columns, of the types the
    /// planner cast the values to (the writer converts them as it does
    /// any INSERT's).
    fn batch(&self, params: Option<&ParamValues>) -> Result<RecordBatch> {
        let rows = self.rows.len();
        let table_schema = &self.table.shape().schema;
        let value_fields = self.values.schema.fields();
        let mut columns = Vec::with_capacity(self.columns.len());
        let mut fields = Vec::with_capacity(self.columns.len());
        for (at, output) in self.columns.iter().enumerate() {
            let field = table_schema.field(at);
            let column = match output {
                Output::Values(n) => {
                    self.values_column(*n, &value_fields[*n], field.name(), params)?
                }
                Output::Constant(expr) => constant(expr, field.data_type(), params)
                    .map_err(|e| {
                        DataFusionError::Execution(format!(
                            "column '{}': {}",
                            field.name(),
                            e.message()
                        ))
                    })?
                    .to_array_of_size(rows)?,
            };
            fields.push(Field::new(field.name(), column.data_type().clone(), true));
            columns.push(column);
        }
        let schema = Schema::new_with_metadata(fields, table_schema.metadata().clone());
        Ok(RecordBatch::try_new(Arc::new(schema), columns)?)
    }

    /// Column `n` of the VALUES rows, of the type the planner gave it; an
    /// error names the row and the table's column `name`.
    fn values_column(
        &self,
        n: usize,
        field: &FieldRef,
        name: &str,
        params: Option<&ParamValues>,
    ) -> Result<ArrayRef> {
        let cells: Vec<&Cell<'_>> = self.rows.iter().map(|row| &row[n]).collect();
        if let DataType::Map(entries, sorted) = field.data_type() {
            if let Some(map) = text_map_column(&cells, entries, *sorted) {
                return map;
            }
            return map_column(&cells, field.data_type(), entries, *sorted, params);
        }
        if let Some(column) = text_column(&cells, field.data_type()) {
            return Ok(column);
        }
        let scalars = cells
            .iter()
            .enumerate()
            .map(|(row, cell)| {
                cell.value(field.data_type(), params).map_err(|e| {
                    DataFusionError::Execution(format!(
                        "row {}: column '{name}': {}",
                        row + 1,
                        e.message()
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        ScalarValue::iter_to_array(scalars)
    }
}

fn strip_alias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(alias) => strip_alias(&alias.expr),
        other => other,
    }
}

/// Whether `expr` is a value written in the statement: a literal, a
/// parameter, or a cast of one.
fn is_constant(expr: &Expr) -> bool {
    match expr {
        Expr::Literal(..) | Expr::Placeholder(_) => true,
        Expr::Cast(cast) => is_constant(&cast.expr),
        Expr::TryCast(cast) => is_constant(&cast.expr),
        _ => false,
    }
}

/// The value of a constant as type `data_type`, converted as DataFusion
/// converts it (`CAST` fails on a value that does not convert, `TRY_CAST`
/// gives NULL).
fn constant(
    expr: &Expr,
    data_type: &DataType,
    params: Option<&ParamValues>,
) -> Result<ScalarValue> {
    value_of(expr, params)?.cast_to(data_type)
}

/// A parameter's value, refused when it is a nested value holding other
/// than one value (a `ScalarValue::Map` of an empty array): DataFusion's
/// casts index its first one.
fn one_value(id: &str, value: ScalarValue) -> Result<ScalarValue> {
    let len = match &value {
        ScalarValue::Map(a) => a.len(),
        ScalarValue::List(a) => a.len(),
        ScalarValue::LargeList(a) => a.len(),
        ScalarValue::FixedSizeList(a) => a.len(),
        ScalarValue::Struct(a) => a.len(),
        _ => 1,
    };
    if len != 1 {
        return exec_err!(
            "parameter {id} holds {len} values of type {}, not one",
            value.data_type()
        );
    }
    Ok(value)
}

/// The value of a constant, of its own type.
fn value_of(expr: &Expr, params: Option<&ParamValues>) -> Result<ScalarValue> {
    match expr {
        Expr::Literal(value, _) => Ok(value.clone()),
        Expr::Placeholder(placeholder) => match params {
            Some(params) => {
                let value = params.get_placeholders_with_values(&placeholder.id)?.value;
                one_value(&placeholder.id, value)
            }
            None => exec_err!("no value given for parameter {}", placeholder.id),
        },
        Expr::Cast(cast) => value_of(&cast.expr, params)?.cast_to(cast.field.data_type()),
        Expr::TryCast(cast) => {
            let options = CastOptions {
                safe: true,
                ..Default::default()
            };
            value_of(&cast.expr, params)?.cast_to_with_options(cast.field.data_type(), &options)
        }
        other => exec_err!("not a constant: {other}"),
    }
}

/// The keys and values of a `MAP {k: v, …}` literal, as the SQL planner
/// writes it: `map(make_array(k, …), make_array(v, …))` of constants.
fn map_literal(expr: &Expr) -> Option<(&[Expr], &[Expr])> {
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
fn map_column(
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
fn entry_fields(entries: &FieldRef) -> Option<[&FieldRef; 2]> {
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
fn map_array(
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

/// The column of `cells` when `data_type` is a string type and each cell
/// is a string of the statement or NULL: each string is copied once, into
/// the array, where a `ScalarValue` and its cast would copy it twice more.
/// `None` for anything else.
fn text_column(cells: &[&Cell<'_>], data_type: &DataType) -> Option<ArrayRef> {
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

/// The map column of `cells` when each is a `MAP {…}` of strings (values
/// may be NULL) or a NULL, for a map of string keys and values, with
/// DataFusion's check that no key repeats. `None` for anything else.
fn text_map_column(
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
fn literal_cell(literal: Literal<'_>, numbers: Numbers) -> Option<Cell<'_>> {
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
fn of_one_type<'c, 'a: 'c>(cells: impl Iterator<Item = &'c Cell<'a>>) -> bool {
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

/// The entries of the one map of `map`.
fn map_entries(map: &MapArray) -> Result<Vec<(ScalarValue, ScalarValue)>> {
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

#[cfg(test)]
mod tests {
    use super::{text_column, text_map_column, Cell, ConstantInsert};
    use crate::Db;
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{DataType, Field, Fields};
    use datafusion::common::ScalarValue;
    use std::sync::Arc;

    /// Strings of the text go straight into string columns and maps of
    /// strings; anything else is left to the cast of each value.
    #[test]
    fn strings_are_copied_straight_into_their_columns() {
        let text = |s: &'static str| Cell::Text(s.into());
        let null = || Cell::Value(ScalarValue::Null);
        let cells = [
            text("a"),
            null(),
            text("a long string past a view's inline bytes"),
        ];
        let refs: Vec<&Cell<'_>> = cells.iter().collect();
        let column = text_column(&refs, &DataType::Utf8View).expect("strings");
        let column = column.as_string_view();
        assert_eq!((column.value(0), column.is_null(1)), ("a", true));
        assert_eq!(column.value(2), "a long string past a view's inline bytes");
        assert!(text_column(&refs, &DataType::Int64).is_none());
        let number = Cell::Value(ScalarValue::Int64(Some(1)));
        assert!(text_column(&[&cells[0], &number], &DataType::Utf8).is_none());

        let entries = Arc::new(Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Utf8, true),
            ])),
            false,
        ));
        let maps = [
            Cell::Map(vec![(text("k"), text("v")), (text("n"), null())]),
            null(),
            Cell::Map(vec![]),
        ];
        let refs: Vec<&Cell<'_>> = maps.iter().collect();
        let column = text_map_column(&refs, &entries, false)
            .expect("maps of strings")
            .expect("valid maps");
        let column = column.as_map();
        assert_eq!((column.value_length(0), column.is_null(1)), (2, true));
        assert_eq!((column.value_length(2), column.is_valid(2)), (0, true));
        let repeated = [Cell::Map(vec![
            (text("k"), text("v")),
            (text("k"), text("w")),
        ])];
        let error = text_map_column(&[&repeated[0]], &entries, false)
            .expect("maps of strings")
            .expect_err("a repeated key");
        assert!(
            error.to_string().contains("duplicate key found: k"),
            "{error}"
        );
        let numbers = [Cell::Map(vec![(text("k"), number)])];
        assert!(text_map_column(&[&numbers[0]], &entries, false).is_none());
    }

    /// The rows an answer of the front door wrote.
    fn count(answer: Option<crate::sql::front_door::Answer>) -> Option<u64> {
        match answer {
            Some(crate::sql::front_door::Answer::Count(rows)) => Some(rows),
            _ => None,
        }
    }

    /// Which INSERTs take this path: constants do, anything computed
    /// (or any other source) is DataFusion's.
    #[tokio::test]
    async fn constant_rows_are_recognised_and_nothing_else() -> crate::Result<()> {
        let dir = tempfile::tempdir().map_err(|e| crate::Error::Sql(e.to_string()))?;
        let session = Db::open(dir.path())?.session();
        session
            .run(
                "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT DEFAULT 7, \
                 m MAP(VARCHAR, BIGINT), at TIMESTAMP DEFAULT now())",
            )
            .await?;
        for (sql, constant) in [
            (
                "INSERT INTO t VALUES ('a', 1, MAP {'x': 1}, '2024-01-01')",
                true,
            ),
            (
                "INSERT INTO t (_key, n) VALUES ('a', 2), ('b', NULL)",
                false,
            ),
            (
                "INSERT INTO t (_key, n, at) VALUES ('a', CAST('2' AS BIGINT), NULL)",
                true,
            ),
            ("INSERT INTO t (_key, n, at) VALUES ('a', $1, NULL)", true),
            ("INSERT INTO t VALUES ('a', 1 + 1, NULL, NULL)", false),
            ("INSERT INTO t VALUES ('a', abs(-1), NULL, NULL)", false),
            ("INSERT INTO t SELECT * FROM t", false),
        ] {
            let statement = session.parse(sql)?.pop_front().expect("one statement");
            let plan = session.plan(statement).await?;
            assert_eq!(ConstantInsert::of(&plan).is_some(), constant, "{sql}");
        }
        // Statements of literals are written off their text; the
        // statement is left as it was when it is not one.
        for (sql, written) in [
            ("INSERT INTO t VALUES ('a', -1, MAP {'x': 1}, '2024-01-01')", Some(1)),
            ("INSERT INTO t (_key, n, m) VALUES ('b', 2, NULL), ('c', 3, MAP {})", None),
            ("INSERT INTO t (_key, n, m, at) VALUES ('b', 2, NULL, NULL), ('c', 3, MAP {}, NULL)", Some(2)),
            ("INSERT INTO t VALUES ('d', 1 + 1, NULL, NULL)", None),
            ("INSERT INTO t VALUES ('d', CAST(1 AS BIGINT), NULL, NULL)", None),
            ("INSERT INTO t VALUES ('d', 1, MAP {'x': 1, 'y': 2.5}, NULL)", None),
        ] {
            let mut statement = session.parse(sql)?.pop_front().expect("one statement");
            let before = statement.to_string();
            assert_eq!(count(session.door(&mut statement).await?), written, "{sql}");
            assert_eq!(statement.to_string(), before);
            // Read off the text without parsing its rows: the same outcome.
            let key = sql.split('\'').nth(1).expect("a key");
            session.run(&format!("DELETE FROM t WHERE _key = '{key}'")).await?;
            assert_eq!(count(session.door_text(sql).await?), written, "text: {sql}");
        }
        // Heads that do not make the row of parameters the whole source,
        // and other dialects, are left to the parser.
        for sql in [
            "INSERT INTO t SELECT * FROM t UNION ALL VALUES ('e', 1, NULL, NULL)",
            "INSERT INTO nowhere VALUES ('e', 1, NULL, NULL)",
            "INSERT INTO t (_key, nope) VALUES ('e', 1)",
        ] {
            assert_eq!(count(session.door_text(sql).await?), None, "{sql}");
        }
        session
            .run("SET datafusion.sql_parser.dialect = 'PostgreSQL'")
            .await?;
        let sql = "INSERT INTO t (_key, n, m, at) VALUES ('e', 1, NULL, NULL)";
        assert_eq!(count(session.door_text(sql).await?), None, "{sql}");
        let count = session
            .run("SELECT count(*) FROM t WHERE _key = 'e'")
            .await?;
        let n = count[0].batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
            .map(|a| a.value(0));
        assert_eq!(n, Some(0), "nothing of the refused statements was written");
        Ok(())
    }
}
