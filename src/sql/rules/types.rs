//! SQL types DataFusion's planner does not know, planned through its
//! `TypePlanner` hook: `MAP(K, V)` becomes Arrow's map of `K` to `V`.
//!
//! The key and value types are planned by DataFusion itself, so every
//! scalar type name DataFusion accepts (`VARCHAR`, `DECIMAL(10, 2)`,
//! `TIMESTAMP(3)`, …) means the same inside a MAP as it does anywhere else.
//! Whether a table can store the map is decided later, by the table spec
//! (a MAP column is a family: `MAP(VARCHAR, T)`), with an error naming
//! the column.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{plan_err, Result as DfResult, TableReference};
use datafusion::logical_expr::planner::{ContextProvider, TypePlanner};
use datafusion::logical_expr::{AggregateUDF, HigherOrderUDF, ScalarUDF, TableSource, WindowUDF};
use datafusion::sql::planner::SqlToRel;
use datafusion::sql::sqlparser::ast::{ColumnDef, DataType as SqlDataType, Ident};

use crate::sql::read::shape::map_of;

/// The session's type planner.
#[derive(Debug, Default)]
pub(crate) struct WidesqlTypes {
    /// Settings for planning the parts of a MAP type (no tables, no
    /// functions: a type has neither).
    options: ConfigOptions,
}

impl TypePlanner for WidesqlTypes {
    fn plan_type_field(&self, sql_type: &SqlDataType) -> DfResult<Option<FieldRef>> {
        let SqlDataType::Map(key, value) = sql_type else {
            return Ok(None);
        };
        // Text is `Utf8` in maps, as in DataFusion's map literals
        // (`MAP {'k': 'v'}`), whose lookups compare keys of that type.
        let as_map_text = |t: DataType| match t {
            DataType::Utf8View => DataType::Utf8,
            other => other,
        };
        let key = as_map_text(self.plan_part(key)?);
        let value = as_map_text(self.plan_part(value)?);
        if key.is_nested() {
            return plan_err!("the key of {sql_type} must be a scalar type, not {key}");
        }
        Ok(Some(Arc::new(Field::new("", map_of(key, value), true))))
    }
}

impl WidesqlTypes {
    /// The Arrow type DataFusion gives `sql_type`, planned as the type of a
    /// one-column table.
    fn plan_part(&self, sql_type: &SqlDataType) -> DfResult<DataType> {
        let column = ColumnDef {
            name: Ident::new("part"),
            data_type: sql_type.clone(),
            options: Vec::new(),
        };
        let schema = SqlToRel::new(self).build_schema(vec![column])?;
        Ok(schema.field(0).data_type().clone())
    }
}

/// What planning a type needs: options, and this planner for nested MAPs.
impl ContextProvider for WidesqlTypes {
    fn get_table_source(&self, name: TableReference) -> DfResult<Arc<dyn TableSource>> {
        plan_err!("a type cannot name the table '{name}'")
    }

    fn get_type_planner(&self) -> Option<Arc<dyn TypePlanner>> {
        Some(Arc::new(WidesqlTypes::default()))
    }

    fn get_function_meta(&self, _name: &str) -> Option<Arc<ScalarUDF>> {
        None
    }

    fn get_higher_order_meta(&self, _name: &str) -> Option<Arc<HigherOrderUDF>> {
        None
    }

    fn get_aggregate_meta(&self, _name: &str) -> Option<Arc<AggregateUDF>> {
        None
    }

    fn get_window_meta(&self, _name: &str) -> Option<Arc<WindowUDF>> {
        None
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        &self.options
    }

    fn udf_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn udaf_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn udwf_names(&self) -> Vec<String> {
        Vec::new()
    }
}
