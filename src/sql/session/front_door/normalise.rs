//! Normalisation of parsed statements: a query's value literals, or an
//! `INSERT`'s rows of literals, taken out as parameters (step 1 of the
//! module documentation of `front_door`).

use std::ops::ControlFlow;

use datafusion::common::ScalarValue;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, BinaryOperator, Expr as SqlExpr, Parens, Query,
    SetExpr, Statement as SqlStatement, Value as SqlValue, Values as SqlValues, Visit, Visitor,
};

/// An `INSERT … VALUES` statement's shape, with one row of parameters
/// `$1, …` for its rows, and its own rows, taken out of it: the caller
/// puts them back ([`put_back_rows`]). `None` when it is not one.
pub(super) fn insert_shape(
    statement: &mut DfStatement,
) -> Option<(DfStatement, Vec<Parens<Vec<SqlExpr>>>)> {
    let values = values_of(statement)?;
    let width = values.rows.first().map_or(0, |row| row.content.len());
    if width == 0 {
        return None;
    }
    let template = vec![Parens::with_empty_span(placeholders(width))];
    let own_rows = std::mem::replace(&mut values.rows, template);
    Some((statement.clone(), own_rows))
}

/// Gives an `INSERT … VALUES` statement its rows back.
pub(super) fn put_back_rows(statement: &mut DfStatement, rows: Vec<Parens<Vec<SqlExpr>>>) {
    if let Some(values) = values_of(statement) {
        values.rows = rows;
    }
}

/// The text of an INSERT's shape: `head` (the statement up to `VALUES`)
/// with one row of `width` parameters.
pub(super) fn insert_template(head: &str, width: usize) -> String {
    let params: Vec<String> = (1..=width).map(|n| format!("${n}")).collect();
    format!("{head}VALUES ({})", params.join(", "))
}

/// Whether `shape`, parsed from [`insert_template`], is an INSERT whose
/// one row of parameters, as appended, is its whole source (not, say, the
/// end of a UNION, or a row the scanner took for the end of a comment).
pub(super) fn is_insert_template(shape: &mut DfStatement, width: usize) -> bool {
    matches!(values_of(shape),
        Some(values) if values.rows.len() == 1 && values.rows[0].content == placeholders(width))
}

/// `$1, …, $width`.
fn placeholders(width: usize) -> Vec<SqlExpr> {
    (1..=width)
        .map(|n| SqlExpr::Value(SqlValue::Placeholder(format!("${n}")).with_empty_span()))
        .collect()
}

/// The VALUES of an `INSERT … VALUES` statement.
fn values_of(statement: &mut DfStatement) -> Option<&mut SqlValues> {
    let DfStatement::Statement(inner) = statement else {
        return None;
    };
    let SqlStatement::Insert(insert) = inner.as_mut() else {
        return None;
    };
    match insert.source.as_mut()?.body.as_mut() {
        SetExpr::Values(values) => Some(values),
        _ => None,
    }
}

/// Replaces the value literals in the `WHERE` clauses of `statement`
/// (see the module documentation) with `$1, $2, …` and returns their
/// values, as `value` reads them; a literal `value` cannot read stays.
/// Literals elsewhere name result columns (`SELECT n > 5`) and stay. A
/// statement with parameters of its own, or with a query inside, keeps all.
pub(super) fn lift_values(
    statement: &mut SqlStatement,
    value: impl Fn(&SqlValue) -> Option<ScalarValue>,
) -> Vec<ScalarValue> {
    let mut params = Vec::new();
    if has_subqueries(statement) || has_placeholders(statement) {
        return params;
    }
    let SqlStatement::Query(query) = statement else {
        return params;
    };
    let mut lift = |expr: &mut SqlExpr| {
        let SqlExpr::Value(literal) = expr else {
            return;
        };
        if !matches!(
            literal.value,
            SqlValue::Number(..) | SqlValue::SingleQuotedString(_)
        ) {
            return;
        }
        let Some(scalar) = value(&literal.value) else {
            return;
        };
        params.push(scalar);
        let placeholder = SqlValue::Placeholder(format!("${}", params.len()));
        *expr = SqlExpr::Value(placeholder.with_empty_span());
    };
    let is_literal = |e: &SqlExpr| matches!(e, SqlExpr::Value(_));
    for selection in where_clauses(&mut query.body) {
        let _ = visit_expressions_mut(selection, |expr| {
            match expr {
                SqlExpr::BinaryOp { left, op, right } if is_comparison(op) => {
                    match (is_literal(left), is_literal(right)) {
                        (false, true) => lift(right),
                        (true, false) => lift(left),
                        _ => {}
                    }
                }
                SqlExpr::InList { expr, list, .. } if !is_literal(expr) => {
                    list.iter_mut().for_each(&mut lift)
                }
                SqlExpr::Between {
                    expr, low, high, ..
                } if !is_literal(expr) => {
                    lift(low);
                    lift(high);
                }
                _ => {}
            }
            ControlFlow::<()>::Continue(())
        });
    }
    params
}

/// The `WHERE` clauses of the selects of a query body, through set
/// operations, in order.
fn where_clauses(body: &mut SetExpr) -> Vec<&mut SqlExpr> {
    match body {
        SetExpr::Select(select) => select.selection.iter_mut().collect(),
        SetExpr::SetOperation { left, right, .. } => {
            let mut clauses = where_clauses(left);
            clauses.extend(where_clauses(right));
            clauses
        }
        _ => Vec::new(),
    }
}

/// Whether `statement` has parameters of its own (`$1`, `?`).
fn has_placeholders(statement: &SqlStatement) -> bool {
    visit_expressions(statement, |expr| match expr {
        SqlExpr::Value(v) if matches!(v.value, SqlValue::Placeholder(_)) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

/// Whether `statement` holds a query within its query (a subquery, a
/// derived table, a CTE). Their literals stay: DataFusion's decorrelation
/// evaluates some of a subquery's expressions while it plans (the value of
/// `HAVING count(*) = 0` for no rows), which a parameter would leave
/// unknown.
fn has_subqueries(statement: &SqlStatement) -> bool {
    struct Queries(usize);
    impl Visitor for Queries {
        type Break = ();
        fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            self.0 += 1;
            if self.0 > 1 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }
    }
    statement.visit(&mut Queries(0)).is_break()
}

fn is_comparison(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn normalised(sql: &str) -> (String, usize) {
        let mut statement = Parser::parse_sql(&GenericDialect {}, sql)
            .unwrap()
            .remove(0);
        let params = lift_values(&mut statement, |v| match v {
            SqlValue::Number(n, _) => n.parse::<i64>().ok().map(ScalarValue::from),
            SqlValue::SingleQuotedString(s) => Some(ScalarValue::from(s.as_str())),
            _ => None,
        });
        (statement.to_string(), params.len())
    }

    #[test]
    fn values_become_parameters() {
        assert_eq!(
            normalised(
                "SELECT a FROM t WHERE k = 'x' AND 5 < n AND m IN (1, 2) AND b BETWEEN 3 AND 4 \
                 UNION SELECT a FROM u WHERE c = 7"
            ),
            (
                "SELECT a FROM t WHERE k = $1 AND $2 < n AND m IN ($3, $4) AND b BETWEEN $5 AND $6 UNION SELECT a FROM u WHERE c = $7"
                    .to_string(),
                7
            )
        );
    }

    #[test]
    fn literals_that_shape_the_plan_stay() {
        for sql in [
            "SELECT 1",
            "SELECT a FROM t ORDER BY 1 LIMIT 10",
            "SELECT a, 'x' FROM t GROUP BY 1",
            "SELECT substr(a, 2) FROM t",
            "SELECT a FROM t WHERE 1 = 1",
            "SELECT a FROM t WHERE n = - 5",
            "SELECT a FROM t WHERE n = NULL",
            "SELECT a FROM t WHERE n IN (SELECT m FROM u WHERE m > 2)",
            "SELECT (SELECT count(*) FROM u WHERE u.m = t.n HAVING count(*) = 0) FROM t WHERE n = 1",
            "WITH c AS (SELECT 1 AS one) SELECT one FROM c WHERE one = 1",
            "SELECT n > 5, sum(CASE WHEN a = 1 THEN 1 END) FROM t GROUP BY n HAVING n > 2",
            "SELECT a FROM t WHERE k = $1 AND n > 10",
        ] {
            let (text, lifted) = normalised(sql);
            assert_eq!(lifted, 0, "{sql} became {text}");
        }
    }
}
