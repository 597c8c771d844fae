//! Object names: statement table references resolved as DataFusion resolves
//! them, and widesql's one-to-three-part names with the session defaults.

use datafusion::common::TableReference;
use datafusion::sql::sqlparser::ast::ObjectName;

use crate::db::Table;
use crate::error::{Error, Result};
use crate::sql::ddl::name_parts;
use crate::sql::Session;

impl Session {
    /// Whether `name` is a widesql table, or nothing at all (then widesql
    /// reports it missing); false for providers registered on the context.
    pub(super) fn is_widesql_table_or_missing(&self, name: &ObjectName) -> bool {
        match self.open_table(name) {
            Ok(_) => true,
            Err(_) => {
                let reference = name.to_string();
                !self.ctx.table_exist(reference.as_str()).unwrap_or(false)
            }
        }
    }

    /// The first of `references` that no catalog of the session holds, as
    /// widesql's error naming the part that is missing (`project 'p' does
    /// not exist`, …); `None` when every table exists.
    pub(super) fn missing_table(&self, references: &[TableReference]) -> Option<Error> {
        let state = self.ctx.state();
        let defaults = &state.config_options().catalog;
        references.iter().find_map(|reference| {
            let table_function = matches!(reference, TableReference::Bare { table }
                if state.table_functions().contains_key(table.as_ref()));
            if table_function || self.ctx.table_exist(reference.clone()).unwrap_or(false) {
                return None;
            }
            let name = reference
                .clone()
                .resolve(&defaults.default_catalog, &defaults.default_schema);
            let missing = self
                .db
                .open_project(&name.catalog)
                .and_then(|p| p.open_dataset(&name.schema))
                .and_then(|d| d.open_table(&name.table));
            missing.err()
        })
    }

    /// `(project, dataset)` of a one- or two-part dataset name.
    pub(super) fn resolve_dataset_name(&self, name: &ObjectName) -> Result<(String, String)> {
        let parts = name_parts(name)?;
        match parts.as_slice() {
            [dataset] => Ok((self.options.default_project.clone(), dataset.clone())),
            [project, dataset] => Ok((project.clone(), dataset.clone())),
            _ => Err(Error::Sql(format!(
                "'{name}' is not a [project.]dataset name"
            ))),
        }
    }

    /// `(project, dataset, table)` of a one- to three-part table name.
    pub(super) fn resolve_table_name(&self, name: &ObjectName) -> Result<(String, String, String)> {
        let parts = name_parts(name)?;
        self.options
            .resolve(&parts)
            .ok_or_else(|| Error::Sql(format!("'{name}' is not a [[project.]dataset.]table name")))
    }

    pub(super) fn open_table(&self, name: &ObjectName) -> Result<Table> {
        let (project, dataset, table) = self.resolve_table_name(name)?;
        self.db.open_table(&project, &dataset, &table)
    }
}
