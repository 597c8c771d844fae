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
//! row: the front door ([`crate::sql::session::front_door`]) plans it once per
//! shape and reads its rows off the text. Anything else (a function call, an expression, a
//! subquery, a default such as `now()`) is left to DataFusion.
//!
//! This file reads the plan; [`cell`] holds a row's values and the
//! literals read off a statement's text, [`map`] the `MAP {…}` values.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::CastOptions;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::common::{exec_err, DataFusionError, ParamValues, Result, ScalarValue};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, LogicalPlan, Values, WriteOp};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;

use crate::sql::dml::sink::WideSink;
use crate::sql::dml::write::WriteSettings;
use crate::sql::error::{from_df, to_df, SqlError};
use crate::sql::read::table::WideTable;

mod cell;
mod map;

use cell::text_column;
pub(crate) use cell::{literal_rows, Cell};
use map::{map_column, map_literal, text_map_column};

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
                    .map_err(|e| value_error(e, field.name()))?
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
                    to_df(SqlError::AtRow {
                        row: row as u64 + 1,
                        source: Box::new(from_df(value_error(e, name))),
                    })
                })
            })
            .collect::<Result<Vec<_>>>()?;
        ScalarValue::iter_to_array(scalars)
    }
}

/// Why a value of column `column` could not be made: ours as it is (a
/// parameter missing, say), DataFusion's (a cast that fails) as a value
/// that does not fit.
fn value_error(e: DataFusionError, column: &str) -> DataFusionError {
    match e {
        DataFusionError::External(_) => e,
        other => to_df(SqlError::DoesNotFit {
            column: column.to_string(),
            reason: other.message().into_owned(),
        }),
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
        return Err(to_df(SqlError::Invalid(format!(
            "parameter {id} holds {len} values of type {}, not one",
            value.data_type()
        ))));
    }
    Ok(value)
}

/// The value of a constant, of its own type.
fn value_of(expr: &Expr, params: Option<&ParamValues>) -> Result<ScalarValue> {
    match expr {
        Expr::Literal(value, _) => Ok(value.clone()),
        Expr::Placeholder(placeholder) => match params {
            Some(params) => {
                let value = params
                    .get_placeholders_with_values(&placeholder.id)
                    .map_err(|e| to_df(SqlError::Invalid(e.message().into_owned())))?
                    .value;
                one_value(&placeholder.id, value)
            }
            None => Err(to_df(SqlError::Invalid(format!(
                "no value given for parameter {}",
                placeholder.id
            )))),
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
    fn count(answer: Option<crate::sql::session::front_door::Answer>) -> Option<u64> {
        match answer {
            Some(crate::sql::session::front_door::Answer::Count(rows)) => Some(rows),
            _ => None,
        }
    }

    /// Which INSERTs take this path: constants do, anything computed
    /// (or any other source) is DataFusion's.
    #[tokio::test]
    async fn constant_rows_are_recognised_and_nothing_else() -> crate::Result<()> {
        let dir = tempfile::tempdir()
            .map_err(|e| crate::Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?;
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
