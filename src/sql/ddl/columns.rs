//! Column definitions planned by DataFusion: their Arrow type and DEFAULT.

use datafusion::arrow::datatypes::Field;
use datafusion::logical_expr::{CreateMemoryTable, DdlStatement, LogicalPlan};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{CreateTable, DataType as SqlDataType, Statement};

use crate::error::Result;
use crate::sql::values::value_type_of;
use crate::sql::Session;

use super::options::expr_text;
use super::sql_error;
use crate::table::spec::ValueType;

impl Session {
    /// The Arrow type DataFusion gives a column definition.
    pub(super) async fn column_type(
        &self,
        column: &datafusion::sql::sqlparser::ast::ColumnDef,
    ) -> Result<Field> {
        if let SqlDataType::Map(key, value) = &column.data_type {
            let name = self.normalize(&column.name);
            let probe = |ty: &SqlDataType| {
                let mut c = column.clone();
                c.data_type = ty.clone();
                c.options.clear();
                c
            };
            let key = Box::pin(self.column_type(&probe(key))).await?;
            let value = Box::pin(self.column_type(&probe(value))).await?;
            let value = match (
                value_type_of(key.data_type()),
                value_type_of(value.data_type()),
            ) {
                (Some(ValueType::Utf8), Some(v)) => v,
                _ => {
                    return Err(sql_error(format!(
                        "map column '{name}' must be MAP(VARCHAR, T) with T a scalar type"
                    )))
                }
            };
            return Ok(Field::new(name, crate::sql::shape::map_type(value), true));
        }
        Ok(self.plan_column(column).await?.0)
    }

    /// The Arrow field and the DEFAULT (as SQL DataFusion wrote it back) of
    /// a column definition, planned as the only column of a table. The
    /// definition goes into the statement as a syntax tree, never printed
    /// and parsed again.
    pub(super) async fn plan_column(
        &self,
        column: &datafusion::sql::sqlparser::ast::ColumnDef,
    ) -> Result<(Field, Option<String>)> {
        let template = self
            .parse("CREATE TABLE __widesql_probe (x INT)")?
            .pop_front();
        let Some(DfStatement::Statement(statement)) = template else {
            return Err(sql_error("the column probe did not parse"));
        };
        let Statement::CreateTable(mut create) = *statement else {
            return Err(sql_error("the column probe did not parse as CREATE TABLE"));
        };
        create.columns = vec![column.clone()];
        let plan = self.plan_create_table(create).await?;
        let default = plan
            .column_defaults
            .first()
            .map(|(_, expr)| expr_text(expr))
            .transpose()?;
        Ok((plan.input.schema().as_arrow().field(0).clone(), default))
    }

    /// A CREATE TABLE as DataFusion plans it: column types, constraints,
    /// defaults and the query of CREATE TABLE AS.
    pub(super) async fn plan_create_table(&self, create: CreateTable) -> Result<CreateMemoryTable> {
        let statement = DfStatement::Statement(Box::new(Statement::CreateTable(create)));
        let plan = self
            .context()
            .state()
            .statement_to_plan(statement)
            .await
            .map_err(crate::sql::from_df)?;
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(plan)) => Ok(plan),
            _ => Err(sql_error("CREATE TABLE did not plan as a table")),
        }
    }
}
