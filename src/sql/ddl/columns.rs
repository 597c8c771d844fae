//! Column definitions planned by DataFusion: their Arrow type and DEFAULT.

use datafusion::arrow::datatypes::Field;
use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::{CreateMemoryTable, DdlStatement, Expr, LogicalPlan};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::helpers::stmt_create_table::CreateTableBuilder;
use datafusion::sql::sqlparser::ast::{CreateTable, Ident, ObjectName, Statement};

use crate::error::Result;
use crate::sql::Session;

use super::options::expr_text;
use super::sql_error;

/// The Arrow field and the DEFAULT (as SQL DataFusion wrote it back) of
/// a column definition, planned as the only column of a table. The
/// definition goes into the statement as a syntax tree, never printed
/// and parsed again.
pub(super) async fn plan_column(
    session: &Session,
    column: &datafusion::sql::sqlparser::ast::ColumnDef,
) -> Result<(Field, Option<String>)> {
    let create = CreateTableBuilder::new(ObjectName::from(vec![Ident::new("column")]))
        .columns(vec![column.clone()])
        .build();
    let plan = plan_create_table(session, create).await?;
    let default = plan
        .column_defaults
        .first()
        .map(|(_, expr)| expr_text(expr))
        .transpose()?;
    Ok((plan.input.schema().as_arrow().field(0).clone(), default))
}

/// A CREATE TABLE as DataFusion plans it: column types, constraints,
/// defaults and the query of CREATE TABLE AS, which the session's user
/// must be allowed to read (see [`crate::sql::session::access`]). A DEFAULT may
/// not hold a subquery (as in PostgreSQL): it would read tables every
/// time a row is written, unseen by the statement that writes it.
pub(super) async fn plan_create_table(
    session: &Session,
    create: CreateTable,
) -> Result<CreateMemoryTable> {
    let statement = DfStatement::Statement(Box::new(Statement::CreateTable(create)));
    let plan = session.plan(statement).await?;
    if let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) = &plan {
        for (column, default) in &create.column_defaults {
            let reads = default
                .exists(|e| {
                    Ok(matches!(
                        e,
                        Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
                    ))
                })
                .unwrap_or(true);
            if reads {
                return Err(sql_error(format!(
                    "the DEFAULT of column '{column}' holds a subquery, which a DEFAULT cannot"
                )));
            }
        }
    }
    match plan {
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(plan)) => Ok(plan),
        _ => Err(sql_error("CREATE TABLE did not plan as a table")),
    }
}
