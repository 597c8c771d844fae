//! DDL: CREATE / DROP / ALTER / SHOW / DESCRIBE on the widesql catalog.
//!
//! `CREATE TABLE` is planned by DataFusion (types, constraints, the query of
//! `CREATE TABLE … AS SELECT`) after widesql's own options are taken out
//! of its `WITH (…)` clause; the resulting schema becomes a table spec:
//!
//! - a column `_key` (VARCHAR or BYTEA) is the row key itself; otherwise a
//!   `PRIMARY KEY` makes typed key columns; otherwise keys are generated;
//! - a `MAP(VARCHAR, T)` column is a family of that name with free
//!   qualifiers;
//! - every other column is a declared qualifier of family `cf`, unless an
//!   option `'<family>.columns' = 'a, b'` places it elsewhere;
//! - `'<family>.max_versions' = 'N'`, `'<family>.ttl' = '7d'` (s, m, h, d;
//!   plain numbers are seconds) and `'<family>.locality_group' = 'g'` set
//!   a family's GC policy and locality group.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Constraint;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    AlterTableOperation, CreateTable, CreateTableOptions, DataType as SqlDataType, Expr as SqlExpr,
    Ident, ObjectName, ObjectType, RenameTableNameKind, SqlOption, Statement, Value,
};

use crate::catalog::{CatalogError, DropMode, ObjectKind};
use crate::error::{Error, Result};
use crate::sql::shape::KEY_COLUMN;
use crate::sql::values::{sql_type_name, value_type_of};
use crate::sql::Session;
use crate::table::spec::{ColumnSpec, FamilySpec, RowKeySpec, TableSpec, ValueType};

/// The family that holds declared columns no option places elsewhere.
pub const DEFAULT_FAMILY: &str = "cf";

fn sql_error(message: impl Into<String>) -> Error {
    Error::Sql(message.into())
}

/// An identifier as DataFusion normalises it: unquoted ones lower-cased.
pub fn normalize(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

/// The parts of an object name, normalised.
pub fn name_parts(name: &ObjectName) -> Result<Vec<String>> {
    name.0
        .iter()
        .map(|part| {
            part.as_ident()
                .map(normalize)
                .ok_or_else(|| sql_error(format!("'{name}' is not a plain name")))
        })
        .collect()
}

/// The parts of a dotted name given as text (`'acme.web."Pages"'`):
/// quoted parts keep their case, others are lower-cased.
pub fn name_parts_of_text(name: &str) -> Vec<String> {
    name.split('.')
        .map(str::trim)
        .map(
            |part| match part.strip_prefix('"').and_then(|p| p.strip_suffix('"')) {
                Some(quoted) => quoted.to_string(),
                None => part.to_lowercase(),
            },
        )
        .collect()
}

/// SQL text that parses back to `expr` (kept for column DEFAULTs).
/// sqlparser prints `-(-5)` as `--5`, which is a comment, so the operand
/// of every unary minus is parenthesised.
fn expr_text(expr: &datafusion::logical_expr::Expr) -> Result<String> {
    use datafusion::sql::sqlparser::ast::{visit_expressions_mut, UnaryOperator};
    let mut ast = datafusion::sql::unparser::expr_to_sql(expr).map_err(crate::sql::from_df)?;
    let _ = visit_expressions_mut(&mut ast, |e| {
        if let SqlExpr::UnaryOp {
            op: UnaryOperator::Minus,
            expr: operand,
        } = e
        {
            if !matches!(**operand, SqlExpr::Nested(_)) {
                **operand = SqlExpr::Nested(operand.clone());
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    Ok(ast.to_string())
}

/// The value of an option as text.
fn option_text(value: &SqlExpr) -> Result<String> {
    match value {
        SqlExpr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Ok(s.clone()),
            Value::Number(n, _) => Ok(n.clone()),
            Value::Boolean(b) => Ok(b.to_string()),
            other => Err(sql_error(format!(
                "option value {other} is not a string or number"
            ))),
        },
        SqlExpr::Identifier(i) => Ok(i.value.clone()),
        other => Err(sql_error(format!(
            "option value {other} is not a string or number"
        ))),
    }
}

/// Family options: family -> setting -> value.
type FamilyOptions = BTreeMap<String, BTreeMap<String, String>>;

const SETTINGS: [&str; 4] = ["max_versions", "ttl", "locality_group", "columns"];

fn family_options(options: &[SqlOption]) -> Result<FamilyOptions> {
    let mut out = FamilyOptions::new();
    for option in options {
        let SqlOption::KeyValue { key, value } = option else {
            return Err(sql_error(format!("unsupported table option {option}")));
        };
        let key_text = key.value.clone();
        let Some((family, setting)) = key_text.rsplit_once('.') else {
            return Err(sql_error(format!(
                "unknown table option '{key_text}': options are '<family>.<setting>' with setting one of {}",
                SETTINGS.join(", ")
            )));
        };
        if !SETTINGS.contains(&setting) {
            return Err(sql_error(format!(
                "unknown table option '{key_text}': the setting must be one of {}",
                SETTINGS.join(", ")
            )));
        }
        out.entry(family.to_string())
            .or_default()
            .insert(setting.to_string(), option_text(value)?);
    }
    Ok(out)
}

/// Parses a TTL: `90` (seconds), or a duration as humantime reads it
/// (`90s`, `15m`, `12h`, `7d`, `2w`, `1h 30m`).
fn parse_ttl(text: &str) -> Result<Duration> {
    let text = text.trim();
    // The age is kept in microseconds as an i64: refuse what does not fit
    // rather than wrap around to a short TTL that would delete data.
    const MAX_SECONDS: u64 = (i64::MAX / 1_000_000) as u64;
    let too_long = || {
        sql_error(format!(
            "ttl '{text}' is too long: the longest is {MAX_SECONDS}s (about 292,000 years)"
        ))
    };
    let duration = if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
        Duration::from_secs(text.parse().map_err(|_| too_long())?)
    } else {
        humantime::parse_duration(text).map_err(|e| match e {
            humantime::DurationError::NumberOverflow => too_long(),
            other => sql_error(format!(
                "ttl '{text}' is not a number with a unit such as 90s, 15m, 12h or 7d ({other})"
            )),
        })?
    };
    if duration.as_secs() > MAX_SECONDS {
        return Err(too_long());
    }
    Ok(duration)
}

/// Applies GC and locality settings to a family.
fn apply_settings(
    mut family: FamilySpec,
    settings: &BTreeMap<String, String>,
) -> Result<FamilySpec> {
    if let Some(n) = settings.get("max_versions") {
        let n: u32 = n.parse().map_err(|_| {
            sql_error(format!(
                "max_versions '{n}' of family '{}' is not a number",
                family.name
            ))
        })?;
        family = family.with_max_versions(n);
    }
    if let Some(ttl) = settings.get("ttl") {
        family = family.with_max_age(parse_ttl(ttl)?);
    }
    if let Some(group) = settings.get("locality_group") {
        family = family.with_locality_group(group.clone());
    }
    Ok(family)
}

/// Builds a spec from DataFusion's view of a CREATE TABLE.
fn spec_from_schema(
    schema: &Schema,
    primary_key: &[usize],
    options: &FamilyOptions,
) -> Result<TableSpec> {
    let mut placement: BTreeMap<String, String> = BTreeMap::new();
    for (family, settings) in options {
        if let Some(columns) = settings.get("columns") {
            for column in columns.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                if schema.field_with_name(column).is_err() {
                    return Err(sql_error(format!(
                        "option '{family}.columns' names column '{column}', which the table does not have"
                    )));
                }
                placement.insert(column.to_string(), family.clone());
            }
        }
    }
    let key_field = schema.fields().iter().position(|f| f.name() == KEY_COLUMN);
    let key = match (key_field, primary_key) {
        (Some(k), pk) if pk.is_empty() || pk == [k] => {
            let utf8 = match value_type_of(schema.field(k).data_type()) {
                Some(ValueType::Utf8) => true,
                Some(ValueType::Bytes) => false,
                _ => return Err(sql_error(format!("column '{KEY_COLUMN}' must be VARCHAR or BYTEA"))),
            };
            RowKeySpec::Key { utf8 }
        }
        (Some(_), _) => {
            return Err(sql_error(format!(
                "a table with a '{KEY_COLUMN}' column cannot have another primary key"
            )))
        }
        (None, []) => RowKeySpec::Generated,
        (None, pk) => RowKeySpec::Columns(
            pk.iter()
                .map(|&i| {
                    let f = schema.field(i);
                    let vt = value_type_of(f.data_type())
                        .filter(|vt| crate::table::spec::key_element_kind(*vt).is_some())
                        .ok_or_else(|| {
                            sql_error(format!(
                                "primary key column '{}' has type {}, which cannot be part of a row key",
                                f.name(),
                                f.data_type()
                            ))
                        })?;
                    Ok(ColumnSpec::new(f.name(), vt).with_nullable(false))
                })
                .collect::<Result<_>>()?,
        ),
    };
    let mut families: Vec<FamilySpec> = Vec::new();
    let family_at = |name: &str, families: &mut Vec<FamilySpec>| -> usize {
        match families.iter().position(|f| f.name == name) {
            Some(at) => at,
            None => {
                families.push(FamilySpec::new(name).with_qualifier_type(None));
                families.len() - 1
            }
        }
    };
    for (i, field) in schema.fields().iter().enumerate() {
        if Some(i) == key_field || primary_key.contains(&i) {
            continue;
        }
        if let DataType::Map(entries, _) = field.data_type() {
            let value = match entries.data_type() {
                DataType::Struct(kv)
                    if kv.len() == 2
                        && value_type_of(kv[0].data_type()) == Some(ValueType::Utf8) =>
                {
                    value_type_of(kv[1].data_type())
                }
                _ => None,
            }
            .ok_or_else(|| {
                sql_error(format!(
                    "map column '{}' must be MAP(VARCHAR, T) with T a scalar type",
                    field.name()
                ))
            })?;
            let at = family_at(field.name(), &mut families);
            families[at].qualifier_type = Some(value);
            continue;
        }
        let vt = value_type_of(field.data_type()).ok_or_else(|| {
            sql_error(format!(
                "column '{}' has type {}, which widesql cannot store",
                field.name(),
                field.data_type()
            ))
        })?;
        let family = placement
            .get(field.name())
            .map_or(DEFAULT_FAMILY, String::as_str);
        let at = family_at(family, &mut families);
        families[at]
            .columns
            .push(ColumnSpec::new(field.name(), vt).with_nullable(field.is_nullable()));
    }
    // Every SQL table has the family cf: it holds the row marker of rows
    // whose every column is NULL (see `crate::sql::write`).
    if !families.iter().any(|f| f.name == DEFAULT_FAMILY) {
        families.insert(0, FamilySpec::new(DEFAULT_FAMILY).with_qualifier_type(None));
    }
    for (name, settings) in options {
        let at = family_at(name, &mut families);
        families[at] = apply_settings(families[at].clone(), settings)?;
    }
    Ok(TableSpec {
        key,
        families,
        column_order: schema.fields().iter().map(|f| f.name().clone()).collect(),
    })
}

impl Session {
    /// `CREATE DATABASE`: a project.
    pub(crate) fn create_database(&self, name: &ObjectName, if_not_exists: bool) -> Result<()> {
        let parts = name_parts(name)?;
        let [project] = parts.as_slice() else {
            return Err(sql_error(format!(
                "a database name has one part, '{name}' has {}",
                parts.len()
            )));
        };
        match self.db().create_project(project) {
            Err(e) if if_not_exists && e.kind() == crate::ErrorKind::AlreadyExists => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// `CREATE SCHEMA [project.]dataset`.
    pub(crate) fn create_schema(&self, name: &ObjectName, if_not_exists: bool) -> Result<()> {
        let (project, dataset) = self.resolve_dataset_name(name)?;
        match self.db().open_project(&project)?.create_dataset(&dataset) {
            Err(e) if if_not_exists && e.kind() == crate::ErrorKind::AlreadyExists => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// `CREATE TABLE`, with or without `AS SELECT`. Returns the rows written.
    pub(crate) async fn create_table(&self, mut create: CreateTable) -> Result<u64> {
        let (project, dataset, table) = self.resolve_table_name(&create.name)?;
        if create.or_replace && create.if_not_exists {
            return Err(sql_error(
                "Execution error: 'IF NOT EXISTS' cannot coexist with 'REPLACE'",
            ));
        }
        let dataset_handle = self.db().open_project(&project)?.open_dataset(&dataset)?;
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
        // DataFusion cannot plan MAP column types: take them out, plan the
        // rest, and put them back with their value type resolved.
        let mut maps: Vec<(usize, Field)> = Vec::new();
        let mut kept = Vec::with_capacity(create.columns.len());
        for (position, column) in std::mem::take(&mut create.columns).into_iter().enumerate() {
            if matches!(column.data_type, SqlDataType::Map(..)) {
                maps.push((position, self.column_type(&column).await?));
            } else {
                kept.push(column);
            }
        }
        create.columns = kept;
        let statement = DfStatement::Statement(Box::new(Statement::CreateTable(create)));
        let plan = self
            .context()
            .state()
            .statement_to_plan(statement)
            .await
            .map_err(crate::sql::from_df)?;
        let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(plan)) = plan else {
            return Err(sql_error("CREATE TABLE did not plan as a table"));
        };
        let mut fields: Vec<Field> = plan
            .input
            .schema()
            .as_arrow()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let mut primary_key: Vec<usize> = plan
            .constraints
            .iter()
            .find_map(|c| match c {
                Constraint::PrimaryKey(cols) => Some(cols.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for (position, field) in maps {
            let at = position.min(fields.len());
            for k in primary_key.iter_mut().filter(|k| **k >= at) {
                *k += 1;
            }
            fields.insert(at, field);
        }
        let schema = Schema::new(fields);
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
        let catalog = self.db().catalog();
        let staged = match catalog.stage_table(dataset_handle.id(), &table, spec, replace) {
            Err(e) if if_not_exists && e.kind() == crate::ErrorKind::AlreadyExists => return Ok(0),
            other => other?,
        };
        let written = if matches!(plan.input.as_ref(), LogicalPlan::EmptyRelation(_)) {
            Ok(0)
        } else {
            self.insert_plan(catalog.staged_store(&staged), (*plan.input).clone())
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

    /// `DROP DATABASE | SCHEMA | TABLE`.
    pub(crate) fn drop_objects(
        &self,
        object_type: ObjectType,
        names: &[ObjectName],
        if_exists: bool,
        cascade: bool,
    ) -> Result<()> {
        let mode = DropMode::cascade_if(cascade);
        for name in names {
            let result = match object_type {
                ObjectType::Table => self.open_table(name).and_then(|t| t.drop()),
                ObjectType::Schema => {
                    let (project, dataset) = self.resolve_dataset_name(name)?;
                    self.db()
                        .open_project(&project)
                        .and_then(|p| p.open_dataset(&dataset))
                        .and_then(|d| d.drop(mode))
                }
                ObjectType::Database => {
                    let parts = name_parts(name)?;
                    self.db().drop_project(&parts.join("."), mode)
                }
                other => return Err(sql_error(format!("DROP {other} is not supported"))),
            };
            match result {
                Err(e) if if_exists && e.kind() == crate::ErrorKind::NotFound => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// The Arrow type DataFusion gives a column definition.
    async fn column_type(
        &self,
        column: &datafusion::sql::sqlparser::ast::ColumnDef,
    ) -> Result<Field> {
        if let SqlDataType::Map(key, value) = &column.data_type {
            let name = normalize(&column.name);
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
    async fn plan_column(
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
        let statement = DfStatement::Statement(Box::new(Statement::CreateTable(create)));
        let plan = self
            .context()
            .state()
            .statement_to_plan(statement)
            .await
            .map_err(crate::sql::from_df)?;
        let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(plan)) = plan else {
            return Err(sql_error("column definition did not plan"));
        };
        let default = plan
            .column_defaults
            .first()
            .map(|(_, expr)| expr_text(expr))
            .transpose()?;
        Ok((plan.input.schema().as_arrow().field(0).clone(), default))
    }

    /// `ALTER TABLE`.
    pub(crate) async fn alter_table(
        &self,
        name: &ObjectName,
        operations: Vec<AlterTableOperation>,
    ) -> Result<()> {
        let table = self.open_table(name)?;
        for op in operations {
            match op {
                AlterTableOperation::RenameTable { table_name } => {
                    let new_name = match table_name {
                        RenameTableNameKind::To(n) | RenameTableNameKind::As(n) => n,
                    };
                    let parts = name_parts(&new_name)?;
                    match parts.as_slice() {
                        [only] => table.rename(only)?,
                        _ => {
                            let (project, dataset, new_table) =
                                self.resolve_table_name(&new_name)?;
                            let target =
                                self.db().open_project(&project)?.open_dataset(&dataset)?;
                            self.db().catalog().rename_table(
                                table.id(),
                                target.id(),
                                &new_table,
                            )?;
                        }
                    }
                }
                AlterTableOperation::AddColumn {
                    column_def,
                    if_not_exists,
                    ..
                } => self.add_column(&table, &column_def, if_not_exists).await?,
                AlterTableOperation::DropColumn {
                    column_names,
                    if_exists,
                    ..
                } => {
                    for column in column_names {
                        self.drop_column(&table, &normalize(&column), if_exists)?;
                    }
                }
                AlterTableOperation::SetOptionsParens { options } => {
                    let options = family_options(&options)?;
                    let qualified = table.qualified_name()?;
                    self.db().catalog().alter_table(table.id(), |spec| {
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
    async fn add_column(
        &self,
        table: &crate::db::Table,
        column_def: &datafusion::sql::sqlparser::ast::ColumnDef,
        if_not_exists: bool,
    ) -> Result<()> {
        let (field, default) = match column_def.data_type {
            SqlDataType::Map(..) => (self.column_type(column_def).await?, None),
            _ => self.plan_column(column_def).await?,
        };
        let name = field.name().clone();
        let qualified = table.qualified_name()?;
        let spec = table.spec()?;
        crate::catalog::names::check_name(crate::catalog::ObjectKind::Column, &name)?;
        let is_key = match &spec.key {
            crate::table::spec::RowKeySpec::Key { .. } => name == KEY_COLUMN,
            crate::table::spec::RowKeySpec::Columns(columns) => {
                columns.iter().any(|c| c.name == name)
            }
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
                let batches = self
                    .context()
                    .sql(&format!("SELECT {sql}"))
                    .await?
                    .collect()
                    .await?;
                let value = batches
                    .first()
                    .map(|b| crate::sql::write::strict_cast(b.column(0), field.data_type(), &name))
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
        match (&fill, field.is_nullable()) {
            // Set even on an empty table: a row inserted before the column
            // is visible must not read NULL.
            (Some(value), false) => {
                if let Some(column) = new_family.columns.first_mut() {
                    column.missing = Some(value.clone());
                }
            }
            (Some(value), true) if has_rows => {
                crate::sql::dml::fill_column(&store, &family, &name, value)?;
            }
            _ => {}
        }
        self.db().catalog().alter_table(table.id(), |spec| {
            let mut spec = spec.clone();
            match spec.families.iter_mut().find(|f| f.name == family) {
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
        })?;
        Ok(())
    }

    /// `ALTER TABLE t DROP COLUMN`: one catalog change. A declared column's
    /// cells are hidden at once (they read as a row marker, so no row
    /// vanishes) and compaction removes them; a MAP column's family goes
    /// the same way.
    fn drop_column(&self, table: &crate::db::Table, column: &str, if_exists: bool) -> Result<()> {
        let spec = table.spec()?;
        let is_map = spec
            .family(column)
            .is_some_and(|f| f.qualifier_type.is_some() && f.columns.is_empty());
        let declared = spec.families.iter().any(|f| f.column(column).is_some());
        if !is_map && !declared {
            if if_exists {
                return Ok(());
            }
            return Err(sql_error(format!(
                "table '{}' has no column '{column}'",
                table.qualified_name()?
            )));
        }
        if is_map {
            self.keep_rows_of_family(table, &spec, column)?;
        }
        let at = self.db().catalog().timestamp()?;
        self.db().catalog().alter_table(table.id(), |spec| {
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
    fn keep_rows_of_family(
        &self,
        table: &crate::db::Table,
        spec: &TableSpec,
        family: &str,
    ) -> Result<()> {
        let Some(marker) = spec.families.iter().find(|f| f.qualifier_type.is_none()) else {
            return Ok(());
        };
        let store = table.store()?;
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

    /// `SHOW DATABASES`.
    pub(crate) fn show_databases(&self) -> Result<RecordBatch> {
        let names: Vec<String> = self
            .db()
            .projects()?
            .iter()
            .map(|p| p.name())
            .collect::<Result<_>>()?;
        one_column("database_name", names)
    }

    /// `SHOW SCHEMAS [FROM project]`.
    pub(crate) fn show_schemas(&self, project: Option<&str>) -> Result<RecordBatch> {
        let project = project.unwrap_or(&self.options().default_project);
        let names: Vec<String> = self
            .db()
            .open_project(project)?
            .datasets()?
            .iter()
            .map(|d| d.name())
            .collect::<Result<_>>()?;
        one_column("schema_name", names)
    }

    /// `SHOW TABLES [FROM [project.]dataset]`.
    pub(crate) fn show_tables(&self, dataset: Option<&ObjectName>) -> Result<RecordBatch> {
        let (project, dataset) = match dataset {
            Some(name) => self.resolve_dataset_name(name)?,
            None => (
                self.options().default_project.clone(),
                self.options().default_dataset.clone(),
            ),
        };
        let names: Vec<String> = self
            .db()
            .open_project(&project)?
            .open_dataset(&dataset)?
            .tables()?
            .iter()
            .map(|t| t.name())
            .collect::<Result<_>>()?;
        one_column("table_name", names)
    }

    /// `DESCRIBE t` / `SHOW COLUMNS FROM t`: the SQL columns in order, with
    /// their family, locality group and GC policy.
    pub(crate) fn describe(&self, name: &ObjectName) -> Result<RecordBatch> {
        let table = self.open_table(name)?;
        let spec = table.spec()?;
        let shape = crate::sql::shape::Shape::new(&spec, false);
        let family_of = |id: u16| spec.families.iter().find(|f| f.id == id);
        let mut rows: Vec<[Option<String>; 7]> = Vec::new();
        for (field, source) in shape.schema.fields().iter().zip(&shape.sources) {
            use crate::sql::shape::Source;
            let (data_type, family) = match source {
                Source::RowKey { utf8 } => {
                    (if *utf8 { "VARCHAR" } else { "BYTEA" }.to_string(), None)
                }
                Source::KeyPart { value_type, .. } => (sql_type_name(*value_type), None),
                Source::Column {
                    family, value_type, ..
                } => (sql_type_name(*value_type), family_of(*family)),
                Source::Map { family, value_type } => (
                    format!("MAP(VARCHAR, {})", sql_type_name(*value_type)),
                    family_of(*family),
                ),
            };
            let nullable = if field.is_nullable() { "YES" } else { "NO" };
            rows.push(match family {
                None => [
                    Some(field.name().clone()),
                    Some(data_type),
                    Some(nullable.into()),
                    Some("PRIMARY KEY".into()),
                    None,
                    None,
                    None,
                ],
                Some(f) => [
                    Some(field.name().clone()),
                    Some(data_type),
                    Some(nullable.into()),
                    Some(f.name.clone()),
                    Some(f.locality_group.clone()),
                    f.gc.max_versions.map(|n| n.to_string()),
                    f.gc.max_age_micros.map(|us| format!("{}s", us / 1_000_000)),
                ],
            });
        }
        let names = [
            "column_name",
            "data_type",
            "is_nullable",
            "family",
            "locality_group",
            "max_versions",
            "ttl",
        ];
        let schema = Arc::new(Schema::new(
            names
                .iter()
                .map(|n| Field::new(*n, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let columns: Vec<ArrayRef> = (0..names.len())
            .map(|i| {
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r[i].clone()).collect::<Vec<_>>(),
                )) as ArrayRef
            })
            .collect();
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

fn one_column(name: &str, values: Vec<String>) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]));
    Ok(RecordBatch::try_new(
        schema,
        vec![Arc::new(StringArray::from(values)) as ArrayRef],
    )?)
}
