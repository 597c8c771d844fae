//! `ALTER TABLE`: rename, ADD / DROP COLUMN, and family options;
//! `ALTER SCHEMA … RENAME TO`.

use datafusion::arrow::datatypes::Schema;
use datafusion::sql::sqlparser::ast::{
    AlterSchema, AlterSchemaOperation, AlterTableOperation, ObjectName, RenameTableNameKind,
};

use crate::error::{Error, ErrorKind, Result};
use crate::sql::read::shape::KEY_COLUMN;
use crate::sql::Session;
use crate::sql::SqlError;
use crate::storage::Durability;

use super::options::{apply_settings, family_options, spec_from_schema, FamilyOptions};
use super::sql_error;
use crate::table::spec::TableSpec;

/// `ALTER SCHEMA [IF EXISTS] [project.]dataset RENAME TO new`: a
/// dataset keeps its project, tables and grants under its new name.
pub(crate) fn alter_schema(session: &Session, alter: &AlterSchema) -> Result<()> {
    let [AlterSchemaOperation::Rename { name: new_name }] = alter.operations.as_slice() else {
        return Err(Error::Sql(SqlError::Unsupported(format!(
            "ALTER SCHEMA takes RENAME TO only: '{alter}' is not supported"
        ))));
    };
    let (project, dataset) = session.resolve_dataset_name(&alter.name)?;
    let new_name = match session.name_parts(new_name)?.as_slice() {
        [new] => new.clone(),
        [in_project, new] if *in_project == project => new.clone(),
        _ => {
            return Err(Error::Sql(SqlError::Invalid(format!(
                "ALTER SCHEMA {project}.{dataset} RENAME TO takes the dataset's new name, \
                 not '{new_name}': a dataset stays in its project"
            ))))
        }
    };
    match session
        .db()
        .open_project(&project)
        .and_then(|p| p.open_dataset(&dataset))
    {
        Ok(found) => found.rename(&new_name),
        Err(e) if alter.if_exists && e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// `ALTER TABLE`.
pub(crate) async fn alter_table(
    session: &Session,
    name: &ObjectName,
    operations: Vec<AlterTableOperation>,
) -> Result<()> {
    let table = session.open_table(name)?;
    for op in operations {
        match op {
            AlterTableOperation::RenameTable { table_name } => {
                let new_name = match table_name {
                    RenameTableNameKind::To(n) | RenameTableNameKind::As(n) => n,
                };
                let parts = session.name_parts(&new_name)?;
                match parts.as_slice() {
                    [only] => table.rename(only)?,
                    _ => {
                        let (project, dataset, new_table) =
                            session.resolve_table_name(&new_name)?;
                        let target = session
                            .db()
                            .open_project(&project)?
                            .open_dataset(&dataset)?;
                        session
                            .db()
                            .catalog()
                            .rename_table(table.id(), target.id(), &new_table)?;
                    }
                }
            }
            AlterTableOperation::AddColumn {
                column_def,
                if_not_exists,
                ..
            } => add_column(session, &table, &column_def, if_not_exists).await?,
            AlterTableOperation::DropColumn {
                column_names,
                if_exists,
                ..
            } => {
                for column in column_names {
                    drop_column(session, &table, &session.normalize(&column), if_exists)?;
                }
            }
            AlterTableOperation::SetOptionsParens { options } => {
                let options = family_options(&options)?;
                let qualified = table.qualified_name()?;
                session.db().catalog().alter_table(table.id(), |spec| {
                    let mut spec = spec.clone();
                    for (family, settings) in &options {
                        let Some(f) = spec.families.iter_mut().find(|f| &f.name == family) else {
                            return Err(crate::table::TableError::UnknownFamily {
                                table: qualified.clone(),
                                family: family.clone(),
                            }
                            .into());
                        };
                        if settings.get("locality_group").is_some_and(|g| *g != f.locality_group) {
                            return Err(sql_error(format!(
                                "family '{family}' of table '{qualified}' cannot move to another locality group"
                            )));
                        }
                        if settings.contains_key("columns") {
                            return Err(sql_error("'<family>.columns' can only be set by CREATE TABLE"));
                        }
                        *f = apply_settings(f.clone(), settings)?;
                    }
                    Ok(spec)
                })?;
            }
            other => return Err(sql_error(format!("ALTER TABLE {other} is not supported"))),
        }
    }
    Ok(())
}

/// `ALTER TABLE t ADD COLUMN`: a declared column of family `cf`, or a
/// MAP column (a new family). A DEFAULT is kept for later INSERTs and
/// written into every existing row, as PostgreSQL does; NOT NULL on a
/// table with rows needs a DEFAULT.
///
/// Existing rows: a NOT NULL column reads its DEFAULT wherever a row has
/// no cell (PostgreSQL's "missing value"); a nullable column with a
/// DEFAULT gets it written into every existing row, row by row, before
/// it becomes visible (a row inserted while that runs may stay NULL).
pub(super) async fn add_column(
    session: &Session,
    table: &crate::db::Table,
    column_def: &datafusion::sql::sqlparser::ast::ColumnDef,
    if_not_exists: bool,
) -> Result<()> {
    let (field, default) = crate::sql::ddl::columns::plan_column(session, column_def).await?;
    let name = field.name().clone();
    let qualified = table.qualified_name()?;
    let spec = table.spec()?;
    crate::catalog::names::check_name(crate::catalog::ObjectKind::Column, &name)?;
    let is_key = match &spec.key {
        crate::table::spec::RowKeySpec::Key { .. } => name == KEY_COLUMN,
        crate::table::spec::RowKeySpec::Columns(columns) => columns.iter().any(|c| c.name == name),
        crate::table::spec::RowKeySpec::Generated => false,
    };
    let exists = is_key
        || spec
            .family(&name)
            .is_some_and(|f| f.qualifier_type.is_some())
        || spec.families.iter().any(|f| f.column(&name).is_some());
    if exists {
        if if_not_exists {
            return Ok(());
        }
        return Err(sql_error(format!(
            "table '{qualified}' already has a column '{name}'"
        )));
    }
    let added = spec_from_schema(
        &Schema::new(vec![field.clone()]),
        &[],
        &FamilyOptions::new(),
    )?;
    let Some(mut new_family) = added
        .families
        .into_iter()
        .find(|f| f.name == name || !f.columns.is_empty())
    else {
        return Err(sql_error(format!(
            "column '{name}' did not plan as a column"
        )));
    };
    let is_map = new_family.qualifier_type.is_some();
    if is_map && (default.is_some() || !field.is_nullable()) {
        return Err(sql_error(format!(
            "map column '{name}' cannot have a DEFAULT or be NOT NULL"
        )));
    }
    if let Some(column) = new_family.columns.first_mut() {
        column.default = default.clone();
    }
    // The value every existing row gets.
    let fill = match &default {
        Some(sql) => {
            let batches = session
                .ctx
                .sql(&format!("SELECT {sql}"))
                .await?
                .collect()
                .await?;
            let value = batches
                .first()
                .map(|b| crate::sql::dml::write::strict_cast(b.column(0), field.data_type(), &name))
                .transpose()?
                .map(|a| crate::sql::values::encode_cell(&a, 0))
                .transpose()
                .map_err(|e| sql_error(format!("DEFAULT of column '{name}': {e}")))?
                .flatten();
            if value.is_none() && !field.is_nullable() {
                return Err(sql_error(format!(
                    "column '{name}' is NOT NULL but its DEFAULT is NULL"
                )));
            }
            value
        }
        None => None,
    };
    let store = table.store()?;
    let has_rows = crate::sql::dml::row_keys(&store, Some(1))?.next().is_some();
    if has_rows && !field.is_nullable() && fill.is_none() {
        return Err(sql_error(format!(
            "column '{name}' of table '{qualified}' is NOT NULL: a table with rows needs a DEFAULT for it"
        )));
    }
    let family = new_family.name.clone();
    // Existing rows: a NOT NULL column reads its DEFAULT where a row has
    // no cell (no backfill can then leave a NULL behind); a nullable one
    // gets the value written into every row before it becomes visible.
    let mut fill_rows = None;
    match (&fill, field.is_nullable()) {
        // Set even on an empty table: a row inserted before the column
        // is visible must not read NULL.
        (Some(value), false) => {
            if let Some(column) = new_family.columns.first_mut() {
                column.missing = Some(value.clone());
            }
        }
        // Written into every row while writes wait, together with the
        // catalog change; an INSERT planned before runs again after.
        (Some(value), true) => fill_rows = Some(value.clone()),
        _ => {}
    }
    let fill = |store: &crate::table::TableStore| -> crate::Result<()> {
        if let Some(value) = &fill_rows {
            crate::sql::dml::fill_column(store, &family, &name, value)?;
        }
        Ok(())
    };
    session.db().catalog().alter_table_filling(
        table.id(),
        |spec| {
            let mut spec = spec.clone();
            match spec.families.iter_mut().find(|f| f.name == family) {
                // A map's entries would overwrite the column's cells.
                Some(existing) if !is_map && existing.qualifier_type.is_some() => {
                    return Err(sql_error(format!(
                        "column '{name}' would go into family '{family}', which is the map column '{family}' of table '{qualified}'; its entries would overwrite the column"
                    )))
                }
                Some(existing) if !is_map => {
                    existing.columns.extend(new_family.columns.clone());
                }
                Some(_) => {
                    return Err(crate::table::TableError::FamilyExists {
                        table: qualified.clone(),
                        family: family.clone(),
                    }
                    .into())
                }
                None => spec.families.push(new_family.clone()),
            }
            if !spec.column_order.is_empty() {
                spec.column_order.push(name.clone());
            }
            Ok(spec)
        },
        fill,
    )?;
    Ok(())
}

/// `ALTER TABLE t DROP COLUMN`: one catalog change. A declared column's
/// cells are hidden at once (they read as a row marker, so no row
/// vanishes) and compaction removes them; a MAP column's family goes
/// the same way.
pub(super) fn drop_column(
    session: &Session,
    table: &crate::db::Table,
    column: &str,
    if_exists: bool,
) -> Result<()> {
    let spec = table.spec()?;
    let is_map = spec
        .family(column)
        .is_some_and(|f| f.qualifier_type.is_some() && f.columns.is_empty());
    let declared = spec.families.iter().any(|f| f.column(column).is_some());
    let is_key = match &spec.key {
        crate::table::spec::RowKeySpec::Key { .. } => column == KEY_COLUMN,
        crate::table::spec::RowKeySpec::Columns(columns) => {
            columns.iter().any(|c| c.name == column)
        }
        crate::table::spec::RowKeySpec::Generated => false,
    };
    if is_key {
        return Err(sql_error(format!(
            "column '{column}' of table '{}' is part of the row key, which cannot be dropped",
            table.qualified_name()?
        )));
    }
    if !is_map && !declared {
        if if_exists {
            return Ok(());
        }
        return Err(SqlError::UnknownColumn {
            table: table.qualified_name()?,
            column: column.to_string(),
        }
        .into());
    }
    if is_map {
        keep_rows_of_family(table, &spec, column)?;
    }
    let at = session.db().catalog().timestamp()?;
    session.db().catalog().alter_table(table.id(), |spec| {
        let mut spec = spec.clone();
        if is_map {
            spec.families.retain(|f| f.name != column);
        }
        for f in &mut spec.families {
            if f.column(column).is_some() {
                f.columns.retain(|c| c.name != column);
                f.dropped.retain(|d| d.qualifier != column);
                f.dropped.push(crate::table::spec::DroppedColumn {
                    qualifier: column.to_string(),
                    at,
                });
            }
        }
        spec.column_order.retain(|c| c != column);
        Ok(spec)
    })
}

/// Before family `family` goes, every row with a visible cell in it gets
/// a row marker, so that rows whose only cells were there do not vanish.
/// Each row is checked and marked atomically, so a row deleted meanwhile
/// stays deleted, and expired cells keep no row.
pub(super) fn keep_rows_of_family(
    table: &crate::db::Table,
    spec: &TableSpec,
    family: &str,
) -> Result<()> {
    let Some(marker) = spec.families.iter().find(|f| f.qualifier_type.is_none()) else {
        return Ok(());
    };
    // Row by row before the catalog change, which is on disk when it
    // returns and takes these writes with it (the store's log is
    // ordered): one flush for the statement, not one per row.
    let store = table.with_durability(Durability::Eventual).store()?;
    let visible = crate::table::Filter::all()
        .with_families([family])
        .with_cells_per_row_limit(1);
    let keys = store
        .scan(
            &crate::table::RowSet::all(),
            crate::table::ReadOptions::new().with_filter(visible.clone()),
        )
        .map(|row| row.map(|row| row.key))
        .collect::<Result<Vec<_>>>()?;
    let mark = crate::table::RowMutation::new().set(marker.name.clone(), b"", b"");
    for key in keys {
        store.check_and_mutate(&key, &visible, &mark, &crate::table::RowMutation::new())?;
    }
    Ok(())
}
