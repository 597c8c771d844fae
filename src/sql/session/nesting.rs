//! How deep a statement may nest.
//!
//! Planning, checking and running a statement recurse once per level of
//! its trees, a few KiB of stack each, and a thread that runs out of stack
//! aborts the whole process: a server and every client of it. The parser
//! builds chains of operators (`a + b + …`, `x = 1 OR x = 2 OR …`) and of
//! set operations (`… UNION ALL …`), lists of tables and array types
//! (`INT[][]…`) in loops, one level each, so its bound on nesting (which
//! counts parentheses and subqueries) does not bound them. So a statement
//! long enough to nest deeper than the thread allows is parsed on a stack
//! of its own sized for its text, and refused, with an error naming the
//! limit, when it nests deeper than the stack left to the thread that will
//! plan it allows ([`deepest_allowed`]). PostgreSQL refuses such a
//! statement the same way (`max_stack_depth`); SQLite at a fixed depth of
//! 1,000.
//!
//! The parser also recurses once for each `EXPLAIN` of a chain, beyond its
//! recursion limit, so chains are counted on the tokens before parsing.
//! And one `SELECT` joins at most [`MAX_JOINED_TABLES`] tables, since
//! planning more takes time that no limit interrupts.

use std::ops::ControlFlow;

use datafusion::sql::parser::{CopyToSource, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{
    ArrayElemTypeDef, ColumnDef, DataType, Expr as SqlExpr, Query, SetExpr,
    Statement as SqlStatement, Visit, Visitor,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::{Error, Result};
use crate::sql::SqlError;

/// Stack one level of expression nesting may take from parsing to
/// running, with room to spare. Measured through DataFusion's planner and
/// optimiser in a release build: ~2.5 KiB a level of a sum, and 6.3
/// (`AT TIME ZONE`) to 8.3 KiB (`::` casts, `LIKE`, `IN (…)`) a level of
/// a chain of postfix operators (from the chains that overflowed threads
/// of 4 and 8 MiB); in a debug build, ~7 KiB a level of a sum.
const STACK_PER_LEVEL: usize = if cfg!(debug_assertions) {
    16 << 10
} else {
    12 << 10
};

/// Stack dropping or walking one level of a parsed tree may take at most
/// (a level is at least two bytes of text: `+1`).
const STACK_PER_BYTE: usize = 128;

/// The stack a thread is assumed to have when its own is not known.
const ASSUMED_STACK: usize = 2 << 20;

/// The most tables one `SELECT` may read and join (its `FROM` list and
/// its `JOIN`s), as in SQLite (64) and MySQL (61). DataFusion's optimiser
/// takes time in the cube of their number (measured, release build: 100
/// tables plan in 0.07 s, 400 in 3.4 s, 1,600 in 247 s), time no query
/// limit bounds, since planning is never interrupted.
pub(crate) const MAX_JOINED_TABLES: usize = 64;

/// The deepest nesting the current thread's stack allows.
pub(crate) fn deepest_allowed() -> usize {
    stacker::remaining_stack().unwrap_or(ASSUMED_STACK) / STACK_PER_LEVEL
}

/// Runs `parse` on `sql`, and refuses the statements it gives that nest
/// deeper than the current thread allows, or that join more tables in one
/// `SELECT` than [`MAX_JOINED_TABLES`]. A statement too short to nest that
/// deep is parsed as it is; a longer one is parsed, measured and (when
/// refused) dropped on a stack sized for its text.
pub(crate) fn parse_bounded<T>(
    sql: &str,
    parse: impl FnOnce() -> Result<T>,
    statements: impl Fn(&T) -> Vec<&DfStatement>,
) -> Result<T> {
    let deepest = deepest_allowed();
    // Each level of a chain, and each table but the first, takes at least
    // two bytes of text.
    let check = |parsed: T| -> Result<T> {
        for statement in statements(&parsed) {
            refusal(statement, deepest)?;
        }
        Ok(parsed)
    };
    if sql.len() < deepest.saturating_mul(2) {
        let parsed = parse()?;
        if sql.len() <= MAX_JOINED_TABLES * 2 {
            return Ok(parsed);
        }
        return check(parsed);
    }
    if longest_explain_chain(sql) > deepest {
        return Err(too_deep(deepest));
    }
    // Room for dropping the parsed trees, and for walking `deepest` levels
    // (which a level's share of the planner's stack holds).
    let stack = sql
        .len()
        .saturating_mul(STACK_PER_BYTE)
        .max(deepest.saturating_mul(STACK_PER_LEVEL))
        .max(8 << 20);
    stacker::grow(stack, || check(parse()?))
}

/// Why a statement is refused, if it is: it nests more than `deepest`
/// levels, or one of its `SELECT`s joins too many tables.
fn refusal(statement: &DfStatement, deepest: usize) -> Result<()> {
    let mut depth = Depth {
        now: 0,
        deepest,
        widest: None,
    };
    match (walk(statement, &mut depth), depth.widest) {
        (ControlFlow::Continue(()), _) => Ok(()),
        (ControlFlow::Break(()), None) => Err(too_deep(deepest)),
        (ControlFlow::Break(()), Some(tables)) => Err(Error::Sql(SqlError::TooComplex(format!(
            "a SELECT of the statement reads and joins {tables} tables, more than the \
             {MAX_JOINED_TABLES} one SELECT may join (planning time grows with the cube of \
             their number): split the statement"
        )))),
    }
}

fn too_deep(deepest: usize) -> Error {
    Error::Sql(SqlError::TooComplex(format!(
        "the statement nests more than {deepest} levels deep, the most this \
         thread's stack allows; each operator of a chain (a + b + …, x = 1 OR x = 2 \
         OR …), each set operation (… UNION ALL …), each table a SELECT joins, each \
         EXPLAIN and each array level of a type is a level: write a long OR of \
         equalities as IN (…), or split the statement"
    )))
}

/// The longest chain of `EXPLAIN`s in `sql` (`EXPLAIN EXPLAIN …`, each
/// with its options). DataFusion's parser recurses once for each, outside
/// the bound its recursion limit puts on subqueries and expressions, so a
/// chain is measured on the tokens (read in a loop) before it is parsed.
fn longest_explain_chain(sql: &str) -> usize {
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        // The parser refuses the text too.
        return 0;
    };
    let (mut longest, mut chain, mut format_name) = (0usize, 0usize, false);
    for token in tokens {
        let keyword = match &token {
            Token::Whitespace(_) => continue,
            Token::Word(word) if word.quote_style.is_none() => Some(word.keyword),
            _ => None,
        };
        match keyword {
            Some(_) if std::mem::take(&mut format_name) => {}
            Some(Keyword::EXPLAIN) => {
                chain += 1;
                longest = longest.max(chain);
            }
            Some(Keyword::ANALYZE | Keyword::VERBOSE) if chain > 0 => {}
            Some(Keyword::FORMAT) if chain > 0 => format_name = true,
            _ => chain = 0,
        }
    }
    longest
}

/// Walks `statement` with `depth`, and stops where it nests more than
/// `depth.deepest` levels or a `SELECT` joins too many tables. An
/// `EXPLAIN` is a level of its own.
fn walk(statement: &DfStatement, depth: &mut Depth) -> ControlFlow<()> {
    match statement {
        DfStatement::Statement(inner) => inner.visit(depth),
        DfStatement::CopyTo(copy) => match &copy.source {
            CopyToSource::Query(query) => query.visit(depth),
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
        },
        DfStatement::Explain(explain) => {
            depth.now += 1;
            match depth.now > depth.deepest {
                true => ControlFlow::Break(()),
                false => walk(&explain.statement, depth),
            }
        }
        // Its columns' defaults and checks, constraints and orderings.
        DfStatement::CreateExternalTable(table) => {
            depth.columns(&table.columns)?;
            table.columns.visit(depth)?;
            table.constraints.visit(depth)?;
            table.order_exprs.visit(depth)
        }
        DfStatement::Reset(_) => ControlFlow::Continue(()),
    }
}

impl Depth {
    /// Refuses columns whose types nest too deep.
    fn columns(&self, columns: &[ColumnDef]) -> ControlFlow<()> {
        match columns
            .iter()
            .any(|column| self.now.saturating_add(type_levels(&column.data_type)) > self.deepest)
        {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        }
    }
}

/// How deep an array type nests (`INT[][]…`, which the parser builds in a
/// loop, or `ARRAY<ARRAY<…>>`).
fn type_levels(data_type: &DataType) -> usize {
    let mut levels = 0usize;
    let mut data_type = data_type;
    while let DataType::Array(
        ArrayElemTypeDef::AngleBracket(inner)
        | ArrayElemTypeDef::SquareBracket(inner, _)
        | ArrayElemTypeDef::Parenthesis(inner),
    ) = data_type
    {
        levels += 1;
        data_type = inner;
    }
    levels
}

/// The tables a `SELECT` reads and joins.
fn tables_of(body: &SetExpr) -> usize {
    match body {
        SetExpr::Select(select) => select.from.iter().map(|table| 1 + table.joins.len()).sum(),
        _ => 0,
    }
}

/// Counts the nesting of a statement while it is walked. (The walk's
/// break carries nothing: a bigger one grows every frame of the recursive
/// walk, and with them the stack each level takes.)
struct Depth {
    now: usize,
    deepest: usize,
    /// The tables of a `SELECT` that joins too many, once one is found.
    widest: Option<usize>,
}

impl Visitor for Depth {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &SqlExpr) -> ControlFlow<()> {
        self.now += 1;
        let levels = match expr {
            SqlExpr::Cast { data_type, .. } => type_levels(data_type),
            _ => 0,
        };
        if self.now.saturating_add(levels) > self.deepest {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_statement(&mut self, statement: &SqlStatement) -> ControlFlow<()> {
        match statement {
            SqlStatement::CreateTable(table) => self.columns(&table.columns),
            _ => ControlFlow::Continue(()),
        }
    }

    /// A chain of set operations (`… UNION ALL …`), and the tables a
    /// `SELECT` reads and joins, are levels too: the parser builds them in
    /// loops, and the walk and the planner recurse once for each.
    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        let mut levels = 0usize;
        let mut widest = 0usize;
        let mut body = query.body.as_ref();
        while let SetExpr::SetOperation { left, right, .. } = body {
            let tables = tables_of(right);
            widest = widest.max(tables);
            levels = levels.saturating_add(1 + tables);
            body = left;
        }
        let tables = tables_of(body);
        widest = widest.max(tables);
        levels = levels.saturating_add(tables);
        if self.now.saturating_add(levels) > self.deepest {
            return ControlFlow::Break(());
        }
        if widest > MAX_JOINED_TABLES {
            self.widest = Some(widest);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _: &SqlExpr) -> ControlFlow<()> {
        self.now -= 1;
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Db, Error};

    async fn one_value(session: &crate::Session, sql: &str) -> crate::Result<String> {
        first_value(session.sql(sql).await?).await
    }

    /// The first value of `frame`'s rows, as a table prints it.
    async fn first_value(frame: crate::Frame) -> crate::Result<String> {
        let batches = frame.collect().await?;
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .map_err(|e| Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?
            .to_string();
        Ok(text.lines().nth(3).unwrap_or_default().to_string())
    }

    /// A session of a new database (in `dir`) with a table `t` of one row,
    /// whose `c` is 1.
    async fn one_row_table(dir: &tempfile::TempDir) -> crate::Result<crate::Session> {
        let session = Db::open(dir.path())?.session();
        session
            .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, c BIGINT); INSERT INTO t VALUES ('a', 1)")
            .await?;
        Ok(session)
    }

    /// A chain far deeper than any stack allows is refused with an error
    /// (it used to abort the process), and the session goes on; one within
    /// the limit runs.
    #[tokio::test]
    async fn a_chain_deeper_than_the_stack_allows_is_refused() -> crate::Result<()> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?;
        let session = one_row_table(&dir).await?;
        let deepest = super::deepest_allowed();
        for (what, sql) in [
            (
                "a sum",
                format!("SELECT {} FROM t", vec!["c"; 100_000].join(" + ")),
            ),
            (
                "an OR of equalities",
                format!(
                    "SELECT _key FROM t WHERE {}",
                    vec!["c = 2"; 50_000].join(" OR ")
                ),
            ),
            (
                "an IS NULL chain",
                format!("SELECT c{} FROM t", " IS NULL".repeat(100_000)),
            ),
            (
                "a chain of UNION ALL",
                format!(
                    "SELECT count(*) FROM (SELECT 1 AS a{})",
                    " UNION ALL SELECT 1".repeat(20_000)
                ),
            ),
            (
                "an array type",
                format!("SELECT CAST(NULL AS INT{})", "[]".repeat(100_000)),
            ),
            (
                "a chain of casts",
                format!("SELECT c{} FROM t", "::BIGINT".repeat(100_000)),
            ),
            (
                "a LIKE chain",
                format!("SELECT _key{} FROM t", " LIKE 'a'".repeat(100_000)),
            ),
            (
                "a column's array type",
                format!(
                    "CREATE TABLE deep (_key VARCHAR PRIMARY KEY, a INT{})",
                    "[]".repeat(100_000)
                ),
            ),
            (
                "an EXPLAIN chain",
                format!("{}SELECT 1", "EXPLAIN ".repeat(100_000)),
            ),
            (
                "an EXPLAIN chain with formats",
                format!("{}SELECT 1", "EXPLAIN FORMAT indent ".repeat(100_000)),
            ),
            (
                "a list of tables",
                format!("SELECT count(*) FROM t{}", ", t".repeat(20_000)),
            ),
            (
                "an external table's column default",
                format!(
                    "CREATE EXTERNAL TABLE x (a BIGINT DEFAULT {}) STORED AS CSV LOCATION 'x.csv'",
                    vec!["1"; 100_000].join(" + ")
                ),
            ),
        ] {
            let error = session.sql(&sql).await.err().map(|e| e.to_string());
            let error = error.unwrap_or_else(|| format!("{what} was planned"));
            assert!(
                error.contains("levels deep, the most this thread's stack allows"),
                "{what}: {error}"
            );
        }
        let within = deepest / 2;
        let sum = format!("SELECT {} FROM t", vec!["c"; within].join(" + "));
        assert_eq!(
            one_value(&session, &sum)
                .await?
                .trim_matches(|c| c == '|' || c == ' '),
            within.to_string()
        );
        Ok(())
    }

    /// A statement at the limit is accepted, and is planned, run and
    /// dropped on the stack of the thread that runs it: for each kind of
    /// chain, the longest one accepted (its text long enough to be parsed
    /// on a stack of its own) runs to its answer.
    #[tokio::test]
    async fn the_deepest_statement_accepted_runs_on_the_callers_stack() -> crate::Result<()> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?;
        let session = one_row_table(&dir).await?;
        let deepest = super::deepest_allowed();
        type Chain = fn(usize) -> (String, String);
        let chains: [(&str, Chain); 6] = [
            ("a sum", |n| {
                (
                    format!("SELECT {} FROM t", vec!["c"; n].join(" + ")),
                    n.to_string(),
                )
            }),
            ("an OR of equalities", |n| {
                let mut terms = vec!["c = 2"; n];
                terms.push("c = 1");
                (
                    format!("SELECT count(*) FROM t WHERE {}", terms.join(" OR ")),
                    "1".into(),
                )
            }),
            ("an IS NULL chain", |n| {
                (
                    format!("SELECT c{} FROM t", " IS NULL".repeat(n)),
                    "false".into(),
                )
            }),
            ("a chain of UNION ALL", |n| {
                let sql = format!(
                    "SELECT count(*) FROM (SELECT 1 AS a{})",
                    " UNION ALL SELECT 1".repeat(n)
                );
                (sql, (n + 1).to_string())
            }),
            ("an array type", |n| {
                (
                    format!("SELECT CAST(NULL AS INT{}) IS NULL", "[]".repeat(n)),
                    "true".into(),
                )
            }),
            // The kind that takes the most stack a level of those measured.
            ("a chain of casts", |n| {
                (
                    format!("SELECT c{} FROM t", "::BIGINT".repeat(n)),
                    "1".into(),
                )
            }),
        ];
        for (what, chain) in chains {
            let mut accepted = None;
            for n in (1..=deepest + 2).rev() {
                let (sql, answer) = chain(n);
                match session.sql(&sql).await {
                    Ok(frame) => {
                        accepted = Some((n, sql, answer, frame));
                        break;
                    }
                    Err(e) => assert!(e.to_string().contains("levels deep"), "{what} of {n}: {e}"),
                }
            }
            let Some((n, sql, answer, frame)) = accepted else {
                panic!("no {what} was accepted");
            };
            // Refused above it, and accepted near the limit.
            assert!(n < deepest + 2, "{what}: none was refused");
            assert!(n + 16 >= deepest, "{what}: {n} accepted of {deepest}");
            assert!(
                sql.len() >= deepest * 2,
                "{what} was not parsed on a stack of its own"
            );
            let value = first_value(frame).await?;
            assert_eq!(
                value.trim_matches(|c| c == '|' || c == ' '),
                answer,
                "{what}"
            );
        }
        Ok(())
    }

    /// A SELECT may join 64 tables; one of 65, wherever it stands (alone,
    /// in a set operation, in a subquery), is refused before planning.
    #[tokio::test]
    async fn a_select_joins_at_most_64_tables() -> crate::Result<()> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?;
        let db = Db::open(dir.path())?;
        let session = db.session();
        session
            .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY); INSERT INTO t VALUES ('a')")
            .await?;
        let from = |n: usize| {
            (0..n)
                .map(|i| format!("t a{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let widest = format!("SELECT count(*) FROM {}", from(super::MAX_JOINED_TABLES));
        assert_eq!(
            one_value(&session, &widest)
                .await?
                .trim_matches(|c| c == '|' || c == ' '),
            "1"
        );
        let joined = (1..66)
            .map(|i| format!("JOIN t b{i} ON b{i}._key = b0._key"))
            .collect::<Vec<_>>()
            .join(" ");
        for (what, sql) in [
            ("a FROM list", format!("SELECT count(*) FROM {}", from(65))),
            ("JOINs", format!("SELECT count(*) FROM t b0 {joined}")),
            (
                "a set operation's side",
                format!("SELECT 1 UNION ALL SELECT 1 FROM {}", from(65)),
            ),
            (
                "a subquery",
                format!("SELECT * FROM t WHERE EXISTS (SELECT 1 FROM {})", from(65)),
            ),
        ] {
            let error = session.sql(&sql).await.err().map(|e| e.to_string());
            let error = error.unwrap_or_else(|| format!("{what} was planned"));
            let tables = if what == "JOINs" { 66 } else { 65 };
            assert!(
                error.contains(&format!(
                    "reads and joins {tables} tables, more than the 64 one SELECT may join"
                )),
                "{what}: {error}"
            );
        }
        Ok(())
    }

    /// A thread with a bigger stack may nest deeper.
    #[test]
    fn a_bigger_stack_allows_deeper_nesting() -> crate::Result<()> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?;
        let db = Db::open(dir.path())?;
        let on_small = super::deepest_allowed();
        let thread = std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(move || -> crate::Result<(usize, String)> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .map_err(|e| Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?;
                runtime.block_on(async {
                    let session = db.session();
                    let terms = on_small * 2;
                    let sum = format!("SELECT {}", vec!["1"; terms].join(" + "));
                    Ok((terms, one_value(&session, &sum).await?))
                })
            })
            .map_err(|e| Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?;
        let (terms, value) = thread.join().map_err(|_| {
            Error::Sql(crate::sql::SqlError::Invalid("the thread panicked".into()))
        })??;
        assert_eq!(
            value.trim_matches(|c| c == '|' || c == ' '),
            terms.to_string()
        );
        Ok(())
    }
}
