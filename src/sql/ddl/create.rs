//! `CREATE DATABASE`, `CREATE SCHEMA`, `CREATE [OR REPLACE] TABLE [AS]`.

use datafusion::common::Constraint;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{CreateTable, CreateTableOptions, ObjectName};

use super::options::{expr_text, family_options, spec_from_schema, FamilyOptions};
use super::sql_error;
use crate::catalog::{CatalogError, ObjectKind};
use crate::error::{Error, Result};
use crate::sql::Session;

/// `CREATE DATABASE`: a project.
pub(crate) fn create_database(
    session: &Session,
    name: &ObjectName,
    if_not_exists: bool,
) -> Result<()> {
    let parts = session.name_parts(name)?;
    let [project] = parts.as_slice() else {
        return Err(sql_error(format!(
            "a database name has one part, '{name}' has {}",
            parts.len()
        )));
    };
    match session.db().create_project(project) {
        Err(e) if if_not_exists && e.kind() == crate::ErrorKind::AlreadyExists => Ok(()),
        other => other.map(|_| ()),
    }
}

/// `CREATE SCHEMA [project.]dataset`.
pub(crate) fn create_schema(
    session: &Session,
    name: &ObjectName,
    if_not_exists: bool,
) -> Result<()> {
    let (project, dataset) = session.resolve_dataset_name(name)?;
    match session
        .db()
        .open_project(&project)?
        .create_dataset(&dataset)
    {
        Err(e) if if_not_exists && e.kind() == crate::ErrorKind::AlreadyExists => Ok(()),
        other => other.map(|_| ()),
    }
}

/// `CREATE TABLE`, with or without `AS SELECT`. Returns the rows written.
pub(crate) async fn create_table(session: &Session, mut create: CreateTable) -> Result<u64> {
    let (project, dataset, table) = session.resolve_table_name(&create.name)?;
    if create.or_replace && create.if_not_exists {
        return Err(sql_error(
            "Execution error: 'IF NOT EXISTS' cannot coexist with 'REPLACE'",
        ));
    }
    let dataset_handle = session
        .db()
        .open_project(&project)?
        .open_dataset(&dataset)?;
    let replace = std::mem::take(&mut create.or_replace);
    let if_not_exists = std::mem::take(&mut create.if_not_exists);
    let taken = || {
        Error::from(CatalogError::AlreadyExists {
            kind: ObjectKind::Table,
            name: format!("{project}.{dataset}.{table}"),
        })
    };
    if !replace && dataset_handle.table(&table)?.is_some() {
        return if if_not_exists { Ok(0) } else { Err(taken()) };
    }
    let options = match std::mem::take(&mut create.table_options) {
        CreateTableOptions::None => FamilyOptions::new(),
        CreateTableOptions::With(o)
        | CreateTableOptions::Options(o)
        | CreateTableOptions::Plain(o) => family_options(&o)?,
        CreateTableOptions::TableProperties(o) => family_options(&o)?,
    };
    let plan = crate::sql::ddl::columns::plan_create_table(session, create).await?;
    let schema = plan.input.schema().as_arrow().clone();
    let primary_key: Vec<usize> = plan
        .constraints
        .iter()
        .find_map(|c| match c {
            Constraint::PrimaryKey(cols) => Some(cols.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let mut spec = spec_from_schema(&schema, &primary_key, &options)?;
    for (column, expr) in &plan.column_defaults {
        let sql = expr_text(expr)?;
        let declared = spec
            .families
            .iter_mut()
            .flat_map(|f| f.columns.iter_mut())
            .find(|c| &c.name == column);
        match declared {
            Some(c) => c.default = Some(sql),
            None => {
                return Err(sql_error(format!(
                    "column '{column}' cannot have a DEFAULT: it is a key or map column"
                )))
            }
        }
    }
    // The new table is built under a new id and becomes visible (or
    // replaces the old one) in one atomic catalog write once its rows
    // are in: a failure before leaves the old table as it was.
    let catalog = session.db().catalog();
    let staged = match catalog.stage_table(dataset_handle.id(), &table, spec, replace) {
        Err(e) if if_not_exists && e.kind() == crate::ErrorKind::AlreadyExists => return Ok(0),
        other => other?,
    };
    let written = if matches!(plan.input.as_ref(), LogicalPlan::EmptyRelation(_)) {
        Ok(0)
    } else {
        session
            .insert_plan(catalog.staged_store(&staged), (*plan.input).clone())
            .await
    };
    let written = match written {
        Ok(n) => n,
        Err(e) => {
            let _ = catalog.abandon_table(staged);
            return Err(e);
        }
    };
    match catalog.commit_table(staged, replace) {
        Ok(_) => Ok(written),
        Err(e) if if_not_exists && e.kind() == crate::ErrorKind::AlreadyExists => Ok(0),
        Err(e) => Err(e),
    }
}
