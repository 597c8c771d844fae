//! Tablets in SQL (see [`crate::catalog::Tablet`]):
//!
//! ```text
//! ALTER TABLE t SPLIT AT (key [, …])
//! ALTER TABLE t MOVE TABLET [AT (key)] TO { 'worker' | LOCAL }
//! SHOW TABLETS { FROM | IN } t
//! SHOW WORKERS
//! ```
//!
//! A split key is a constant of the row key's type: a `_key` value, or for
//! a table with a composite primary key a tuple of its first key columns'
//! values (`SPLIT AT (('eu', 42))`; a single value is the first column's).
//! The tablet that holds a key ends there and a new one starts there, in
//! one catalog change; no row moves. Splitting takes the `CREATE`
//! privilege on the table, as `ALTER TABLE` does; listing takes `SELECT`,
//! as `DESCRIBE` does. Moving the tablet that holds a key to a worker
//! that is up (or back to this process, `LOCAL`) takes an admin: where
//! rows live is the cluster's business ([`crate::catalog::Catalog::move_tablet`]).
//! Without `AT`, the table must have one tablet (as a table without a
//! primary key always has), and that one moves.
//! `SHOW WORKERS` lists the workers that joined a
//! cluster's master ([`crate::Workers`]) and takes an admin, as `SHOW
//! USERS` does: their addresses are the cluster's.

use std::fmt;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{visit_expressions, Expr, ObjectName};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::access::{Privilege, Securable};
use crate::catalog::{
    bytes_literal, key_elements, key_literal, CatalogError, SplitPoint, Tablet, NO_PRIMARY_KEY,
};
use crate::error::Result;
use crate::keys::Element;
use crate::sql::{from_df, Frame, Session};
use crate::table::spec::{RowKeySpec, ValueType};

use super::sql_error;
use super::users::{is_word, utc_time_type, utc_times};
use crate::sql::values;

/// A statement about tablets.
#[derive(Debug, Clone)]
pub(crate) enum TabletStatement {
    /// `ALTER TABLE t SPLIT AT (key, …)`.
    Split { table: ObjectName, keys: Vec<Expr> },
    /// `ALTER TABLE t MOVE TABLET [AT (key)] TO 'worker'`; `to` is `None`
    /// for `LOCAL`, `key` for a table's only tablet.
    Move {
        table: ObjectName,
        key: Option<Box<Expr>>,
        to: Option<String>,
    },
    /// `SHOW TABLETS FROM t`.
    Show { table: ObjectName },
    /// `SHOW WORKERS`.
    ShowWorkers,
}

impl fmt::Display for TabletStatement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TabletStatement::Split { table, keys } => {
                let keys: Vec<String> = keys.iter().map(Expr::to_string).collect();
                write!(f, "ALTER TABLE {table} SPLIT AT ({})", keys.join(", "))
            }
            TabletStatement::Move { table, key, to } => {
                write!(f, "ALTER TABLE {table} MOVE TABLET ")?;
                if let Some(key) = key {
                    write!(f, "AT ({key}) ")?;
                }
                write!(f, "TO ")?;
                match to {
                    Some(worker) => write!(f, "'{}'", worker.replace('\'', "''")),
                    None => write!(f, "LOCAL"),
                }
            }
            TabletStatement::Show { table } => write!(f, "SHOW TABLETS FROM {table}"),
            TabletStatement::ShowWorkers => write!(f, "SHOW WORKERS"),
        }
    }
}

/// The tablet statement at the parser's position; `None`, with nothing
/// consumed, when the statement there is of another kind.
pub(crate) fn parse_tablets(
    parser: &mut Parser<'_>,
) -> Option<std::result::Result<TabletStatement, ParserError>> {
    if is_word(parser, 0, "SHOW") && is_word(parser, 1, "WORKERS") {
        parser.advance_token();
        parser.advance_token();
        return Some(Ok(TabletStatement::ShowWorkers));
    }
    if is_word(parser, 0, "SHOW") && is_word(parser, 1, "TABLETS") {
        parser.advance_token();
        parser.advance_token();
        let parsed = parser
            .expect_one_of_keywords(&[Keyword::FROM, Keyword::IN])
            .and_then(|_| parser.parse_object_name(false))
            .map(|table| TabletStatement::Show { table });
        return Some(parsed);
    }
    if !(is_word(parser, 0, "ALTER") && is_word(parser, 1, "TABLE")) {
        return None;
    }
    // ALTER TABLE name[.name…] SPLIT: the name's words and dots, then SPLIT.
    let mut n = 2;
    loop {
        match &parser.peek_nth_token(n).token {
            Token::Word(_) => n += 1,
            _ => return None,
        }
        match &parser.peek_nth_token(n).token {
            Token::Period => n += 1,
            _ => break,
        }
    }
    let moving = is_word(parser, n, "MOVE") && is_word(parser, n + 1, "TABLET");
    if !moving && !is_word(parser, n, "SPLIT") {
        return None;
    }
    parser.advance_token();
    parser.advance_token();
    Some(if moving {
        parse_move(parser)
    } else {
        parse_split(parser)
    })
}

fn parse_move(parser: &mut Parser<'_>) -> std::result::Result<TabletStatement, ParserError> {
    let table = parser.parse_object_name(false)?;
    parser.advance_token(); // MOVE
    parser.advance_token(); // TABLET
    let key = if parser.parse_keyword(Keyword::AT) {
        parser.expect_token(&Token::LParen)?;
        let key = Box::new(parser.parse_expr()?);
        parser.expect_token(&Token::RParen)?;
        Some(key)
    } else {
        None
    };
    parser.expect_keyword_is(Keyword::TO)?;
    let to = if is_word(parser, 0, "LOCAL") {
        parser.advance_token();
        None
    } else {
        Some(parser.parse_literal_string()?)
    };
    Ok(TabletStatement::Move { table, key, to })
}

fn parse_split(parser: &mut Parser<'_>) -> std::result::Result<TabletStatement, ParserError> {
    let table = parser.parse_object_name(false)?;
    parser.advance_token(); // SPLIT
    parser.expect_keyword_is(Keyword::AT)?;
    parser.expect_token(&Token::LParen)?;
    let keys = parser.parse_comma_separated(Parser::parse_expr)?;
    parser.expect_token(&Token::RParen)?;
    Ok(TabletStatement::Split { table, keys })
}

/// Runs a tablet statement.
pub(crate) async fn run_tablets(session: &Session, statement: TabletStatement) -> Result<Frame> {
    match statement {
        TabletStatement::Split { table: name, keys } => {
            // Opened once: the privilege is checked on the table split.
            let table = session.open_table(&name)?;
            session.require(Privilege::Create, Securable::Table(table.id()))?;
            let key = KeyType::of(&table.spec()?.key, &table.qualified_name()?);
            let mut points = Vec::with_capacity(keys.len());
            for expr in &keys {
                points.push(key.split_point(session, expr).await?);
            }
            let made = session.db().catalog().split_table(table.id(), points)?;
            // The new tablets, as `SHOW TABLETS` lists them, as the
            // result of a statement that changed something.
            let mut tablets = session.db().catalog().read().tablets_of(table.id());
            tablets.retain(|tablet| made.contains(&tablet.id));
            Ok(session.frame(key.listing(&tablets)?)?.that_changed())
        }
        TabletStatement::Move {
            table: name,
            key: expr,
            to,
        } => {
            session.require_admin("move tablets")?;
            let table = session.open_table(&name)?;
            let qualified = table.qualified_name()?;
            let key = KeyType::of(&table.spec()?.key, &qualified);
            let at = match &expr {
                Some(_) if key.key == RowKeySpec::Generated => {
                    return Err(CatalogError::CannotMove {
                        table: qualified,
                        reason: format!("{NO_PRIMARY_KEY}; move its one tablet without AT"),
                    }
                    .into())
                }
                Some(expr) => key.split_point(session, expr).await?.key,
                None => only_tablet(&table)?,
            };
            // The rows are copied on a thread that may wait for the disk
            // and for the workers.
            let moving = table.clone();
            let moved = tokio::task::spawn_blocking(move || moving.move_tablet(&at, to.as_deref()))
                .await
                .map_err(|e| sql_error(format!("the move stopped: {e}")))??;
            let id = table.id();
            let mut tablets = session.db().catalog().read().tablets_of(id);
            tablets.retain(|tablet| tablet.id == moved);
            Ok(session.frame(key.listing(&tablets)?)?.that_changed())
        }
        TabletStatement::Show { table: name } => {
            let table = session.open_table(&name)?;
            // Its keys are values of its rows: listed to who may read them.
            session.require(Privilege::Select, Securable::Table(table.id()))?;
            let key = KeyType::of(&table.spec()?.key, &table.qualified_name()?);
            let tablets = session.db().catalog().read().tablets_of(table.id());
            session.frame(key.listing(&tablets)?)
        }
        TabletStatement::ShowWorkers => {
            session.require_admin("list workers")?;
            session.frame(workers_batch(&session.db().workers().list())?)
        }
    }
}

/// Where the only tablet of `table` starts; an error naming the table
/// when it has more than one (a move without `AT` names no tablet).
fn only_tablet(table: &crate::Table) -> Result<Vec<u8>> {
    let tablets = table.tablets()?;
    match tablets.as_slice() {
        [only] => Ok(only.start.clone()),
        _ => Err(CatalogError::CannotMove {
            table: table.qualified_name()?,
            reason: format!(
                "it has {} tablets: name the one to move with AT (key)",
                tablets.len()
            ),
        }
        .into()),
    }
}

/// `SHOW WORKERS`: each worker's address, whether it is up, when it
/// joined and when it was last heard from.
fn workers_batch(workers: &[crate::WorkerEntry]) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("worker", DataType::Utf8, false),
            Field::new("state", DataType::Utf8, false),
            Field::new("joined", utc_time_type(), false),
            Field::new("last_heard", utc_time_type(), false),
        ])),
        vec![
            Arc::new(StringArray::from_iter_values(
                workers.iter().map(|w| w.address.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(workers.iter().map(|w| {
                if w.up {
                    "up"
                } else {
                    "down"
                }
            }))),
            utc_times(workers.iter().map(|w| w.joined)),
            utc_times(workers.iter().map(|w| w.last_heard)),
        ],
    )?)
}

/// A table's row key, as split keys are read and shown.
struct KeyType {
    /// The table's qualified name.
    table: String,
    key: RowKeySpec,
}

impl KeyType {
    fn of(key: &RowKeySpec, table: &str) -> KeyType {
        KeyType {
            table: table.to_string(),
            key: key.clone(),
        }
    }

    fn refuse_generated(&self) -> Result<()> {
        match self.key {
            RowKeySpec::Generated => Err(CatalogError::CannotSplit {
                table: self.table.clone(),
                reason: NO_PRIMARY_KEY.into(),
            }
            .into()),
            _ => Ok(()),
        }
    }

    /// The key columns: name and type.
    fn columns(&self) -> Vec<(&str, ValueType)> {
        match &self.key {
            RowKeySpec::Key { utf8: true } => vec![("_key", ValueType::Utf8)],
            RowKeySpec::Key { utf8: false } => vec![("_key", ValueType::Bytes)],
            RowKeySpec::Columns(columns) => columns
                .iter()
                .map(|c| (c.name.as_str(), c.value_type.clone()))
                .collect(),
            RowKeySpec::Generated => Vec::new(),
        }
    }

    /// The split point `expr` stands for: a constant of the key's type, or
    /// a tuple of the first key columns' values.
    async fn split_point(&self, session: &Session, expr: &Expr) -> Result<SplitPoint> {
        self.refuse_generated()?;
        let table = &self.table;
        let parts: Vec<&Expr> = match expr {
            Expr::Tuple(parts) => parts.iter().collect(),
            Expr::Nested(inner) => vec![inner.as_ref()],
            other => vec![other],
        };
        let columns = self.columns();
        if parts.len() > columns.len() {
            return Err(sql_error(format!(
                "the split key {expr} has {} values, but the row key of table '{table}' has \
                 {} column{}",
                parts.len(),
                columns.len(),
                if columns.len() == 1 { "" } else { "s" }
            )));
        }
        let values = constants(session, &parts).await?;
        let mut key = Vec::new();
        let mut shown = Vec::with_capacity(values.len());
        for (value, (column, value_type)) in values.iter().zip(&columns) {
            let array = key_value(value, value_type).ok_or_else(|| {
                sql_error(format!(
                    "the split key {expr} holds {value} for column {column} of table \
                     '{table}', which is {}: write a {} value",
                    values::sql_type_name(value_type),
                    values::sql_type_name(value_type)
                ))
            })?;
            if matches!(self.key, RowKeySpec::Key { .. }) {
                key = values::encode_cell(&array, 0)
                    .map_err(sql_error)?
                    .ok_or_else(|| sql_error("a split key is NULL"))?;
            } else {
                let element = values::encode_element(&array, 0, value_type)
                    .map_err(|e| sql_error(format!("the split key {expr}: {e}")))?
                    .ok_or_else(|| sql_error(format!("the split key {expr} is NULL")))?;
                element.encode_into(&mut key)?;
            }
            shown.push(literal(&array)?);
        }
        if key.is_empty() {
            return Err(sql_error(format!(
                "the split key {expr} is the first of all keys, where the first tablet of \
                 table '{table}' starts"
            )));
        }
        Ok(SplitPoint {
            key,
            shown: key_literal(shown),
        })
    }

    /// `SHOW TABLETS`: each tablet's id, first key, the key it ends before
    /// (NULL for the first and last) and who serves it.
    fn listing(&self, tablets: &[Tablet]) -> Result<RecordBatch> {
        let mut ids = Vec::with_capacity(tablets.len());
        let mut starts = Vec::with_capacity(tablets.len());
        let mut ends = Vec::with_capacity(tablets.len());
        let mut workers = Vec::with_capacity(tablets.len());
        for tablet in tablets {
            ids.push(tablet.id.to_string());
            starts.push(match tablet.start.is_empty() {
                true => None,
                false => Some(self.show(&tablet.start)?),
            });
            ends.push(
                tablet
                    .end
                    .as_deref()
                    .map(|end| self.show(end))
                    .transpose()?,
            );
            workers.push(tablet.worker.clone().unwrap_or_else(|| "local".into()));
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new("tablet", DataType::Utf8, false),
            Field::new("start_key", DataType::Utf8, true),
            Field::new("end_key", DataType::Utf8, true),
            Field::new("served_by", DataType::Utf8, false),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(ids)),
            Arc::new(StringArray::from(starts)),
            Arc::new(StringArray::from(ends)),
            Arc::new(StringArray::from(workers)),
        ];
        Ok(RecordBatch::try_new(schema, columns)?)
    }

    /// An encoded split key as SQL writes it.
    fn show(&self, key: &[u8]) -> Result<String> {
        let unreadable = |reason: String| {
            sql_error(format!(
                "a tablet of table '{}' starts at no key: {reason}",
                self.table
            ))
        };
        let shown = key_elements(&self.key, key)
            .map_err(unreadable)?
            .iter()
            .zip(self.columns())
            .map(|(element, (_, value_type))| decoded(&value_type, element).map_err(unreadable))
            .collect::<Result<Vec<String>>>()?;
        Ok(key_literal(shown))
    }
}

/// The values of constant expressions, as DataFusion computes them; an
/// expression that reads a table is refused (a split key is a constant).
async fn constants(session: &Session, parts: &[&Expr]) -> Result<Vec<ScalarValue>> {
    let text: Vec<String> = parts.iter().map(|e| e.to_string()).collect();
    // Only a subquery reads a table in a scalar expression (no scalar
    // function reads one). It is refused before planning, which would
    // resolve the names of the tables it reads.
    let subquery = parts.iter().any(|part| {
        visit_expressions(*part, |e| match e {
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => {
                ControlFlow::Break(())
            }
            _ => ControlFlow::Continue(()),
        })
        .is_break()
    });
    if subquery {
        return Err(sql_error(format!(
            "a split key is a constant: ({}) reads a table",
            text.join(", ")
        )));
    }
    let context = session.own_context();
    let plan = context
        .state()
        .create_logical_plan(&format!("SELECT {}", text.join(", ")))
        .await
        .map_err(from_df)?;
    let batches = context
        .execute_logical_plan(plan)
        .await
        .map_err(from_df)?
        .collect()
        .await
        .map_err(from_df)?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let batch = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .filter(|_| rows == 1)
        .ok_or_else(|| {
            sql_error(format!(
                "a split key is one constant: ({}) makes {rows} rows",
                text.join(", ")
            ))
        })?;
    batch
        .columns()
        .iter()
        .map(|column| Ok(ScalarValue::try_from_array(column, 0)?))
        .collect()
}

/// `value` as a one-row array of `value_type`, when it is a value of that
/// type: not NULL, text for a text column (`('eu', 42)` is no key of two
/// text columns), converted exactly from another number (1.5 is no BIGINT
/// key), or parsed from text for any other type (`'2024-05-01'`).
fn key_value(value: &ScalarValue, value_type: &ValueType) -> Option<ArrayRef> {
    let is_text = matches!(
        value.data_type(),
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8
    );
    let is_bytes = matches!(
        value.data_type(),
        DataType::Binary | DataType::BinaryView | DataType::LargeBinary
    );
    let exact = match value_type {
        ValueType::Utf8 => is_text,
        ValueType::Bytes => is_text || is_bytes,
        _ => !is_bytes,
    };
    let cast = value.cast_to(&values::arrow_type(value_type)).ok()?;
    let round_trips = is_text || cast.cast_to(&value.data_type()).ok()? == *value;
    if !exact || cast.is_null() || !round_trips {
        return None;
    }
    cast.to_array().ok()
}

/// A stored key value (a `_key`'s bytes, or a key column's element) as a
/// SQL literal.
fn decoded(value_type: &ValueType, element: &Element) -> std::result::Result<String, String> {
    let mut builder = values::builder(value_type, 1);
    values::append_element(builder.as_mut(), value_type, element)?;
    // A builder may make the column's storage type (an integer for a
    // time): cast to the type SQL shows.
    let array =
        cast(&builder.finish(), &values::arrow_type(value_type)).map_err(|e| e.to_string())?;
    literal(&array).map_err(|e| e.to_string())
}

/// The value of a one-row array as a SQL literal: text quoted, bytes as
/// `X'…'`, times as `TIMESTAMP '…'` or `DATE '…'`.
fn literal(array: &ArrayRef) -> Result<String> {
    let shown = array_value_to_string(array, 0)?;
    Ok(match array.data_type() {
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => {
            format!("'{}'", shown.replace('\'', "''"))
        }
        // A BYTEA key's values are made as `Binary` (see `values::arrow_type`).
        DataType::Binary => bytes_literal(array.as_binary::<i32>().value(0)),
        DataType::Timestamp(..) => format!("TIMESTAMP '{shown}'"),
        DataType::Date32 | DataType::Date64 => format!("DATE '{shown}'"),
        DataType::Time32(_) | DataType::Time64(_) => format!("TIME '{shown}'"),
        _ => shown,
    })
}
