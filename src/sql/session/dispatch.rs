//! Which statements widesql runs itself (DDL, DELETE, UPDATE, `SET
//! widesql.*`, `COPY … TO` a file) and which go to DataFusion.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::collections::HashSet;

use datafusion::common::{DataFusionError, TableReference};
use datafusion::sql::parser::{CopyToSource, CopyToStatement, Statement as DfStatement};
use datafusion::sql::planner::object_name_to_table_reference;
use datafusion::sql::sqlparser::ast::helpers::stmt_create_table::CreateTableBuilder;
use datafusion::sql::sqlparser::ast::{
    ObjectName, ObjectType, SchemaName, Set, ShowStatementIn, Statement,
};
use datafusion::sql::sqlparser::ast::{Query, Select, SetExpr};

use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::{LogicalPlan, Statement as PlanStatement, WriteOp};

use crate::error::{Error, Result};
use crate::sql::files::FileFormat;
use crate::sql::read::table::WideTable;
use crate::sql::SqlError;
use crate::sql::{from_df, Frame, Session};

impl Session {
    /// Runs one parsed statement.
    pub(in crate::sql) async fn execute(&self, statement: DfStatement) -> Result<Frame> {
        if !self.options.host_files {
            if let Some(what) = host_file_statement(&statement) {
                return Err(Error::Sql(SqlError::Invalid(format!(
                    "{what} uses the host's files or resources, which this session may not do"
                ))));
            }
        }
        self.check_statement(&statement)?;
        if let DfStatement::CopyTo(copy) = &statement {
            if let Some((query, path, format)) = file_copy(copy) {
                let options = crate::sql::files::export::ExportOptions::default();
                // Boxed: the export runs the query through `execute` again.
                let done = Box::pin(crate::sql::files::export::export(
                    self,
                    &query,
                    &path,
                    format,
                    options,
                    |_| {},
                ))
                .await?;
                return self.count(done.rows);
            }
        }
        let DfStatement::Statement(inner) = statement else {
            return self.datafusion(statement).await;
        };
        match *inner {
            Statement::CreateDatabase {
                db_name,
                if_not_exists,
                ..
            } => {
                crate::sql::ddl::create::create_database(self, &db_name, if_not_exists)?;
                self.done()
            }
            Statement::CreateSchema {
                schema_name,
                if_not_exists,
                ..
            } => {
                let name = match &schema_name {
                    SchemaName::Simple(name) => name,
                    other => {
                        return Err(Error::Sql(SqlError::Unsupported(format!(
                            "CREATE SCHEMA {other} is not supported"
                        ))))
                    }
                };
                crate::sql::ddl::create::create_schema(self, name, if_not_exists)?;
                self.done()
            }
            Statement::CreateTable(create) => {
                crate::sql::ddl::create::create_table(self, create).await?;
                self.done()
            }
            // Rows are found by their key; secondary indexes are accepted
            // and ignored, so scripts written for other engines run.
            Statement::CreateIndex(index) => {
                self.open_table(&index.table_name)?;
                self.done()
            }
            Statement::Drop {
                object_type: ObjectType::Index,
                ..
            } => self.done(),
            // Views and tables registered on the context (external tables,
            // providers) are DataFusion's to drop.
            Statement::Drop {
                object_type: ObjectType::View,
                ..
            } => self.datafusion(statement_back(*inner)).await,
            Statement::Drop {
                object_type: ObjectType::Table,
                ref names,
                ..
            } if !names.iter().all(|n| self.is_widesql_table_or_missing(n)) => {
                self.datafusion(statement_back(*inner)).await
            }
            Statement::Drop {
                object_type,
                if_exists,
                names,
                cascade,
                ..
            } => {
                crate::sql::ddl::drop::drop_objects(self, object_type, &names, if_exists, cascade)?;
                self.done()
            }
            // SELECT … INTO t is CREATE TABLE t AS SELECT ….
            Statement::Query(mut query) if has_into(&query) => {
                let Some(into) = select_into(&mut query).and_then(|s| s.into.take()) else {
                    return Err(Error::Sql(SqlError::Invalid(
                        "SELECT INTO lost its target".into(),
                    )));
                };
                let create = CreateTableBuilder::new(into.name)
                    .query(Some(query))
                    .build();
                crate::sql::ddl::create::create_table(self, create).await?;
                self.done()
            }
            Statement::AlterTable(alter) => {
                crate::sql::ddl::alter::alter_table(self, &alter.name, alter.operations).await?;
                self.done()
            }
            Statement::AlterSchema(alter) => {
                crate::sql::ddl::alter::alter_schema(self, &alter)?;
                self.done()
            }
            Statement::ShowDatabases { .. } => {
                self.frame(crate::sql::ddl::show::show_databases(self)?)
            }
            Statement::ShowSchemas { show_options, .. } => {
                let project = match &show_options.show_in {
                    Some(ShowStatementIn {
                        parent_name: Some(name),
                        ..
                    }) => Some(self.name_parts(name)?.join(".")),
                    _ => None,
                };
                self.frame(crate::sql::ddl::show::show_schemas(
                    self,
                    project.as_deref(),
                )?)
            }
            Statement::ShowTables { show_options, .. } => {
                let dataset = match &show_options.show_in {
                    Some(ShowStatementIn {
                        parent_name: Some(name),
                        ..
                    }) => Some(name.clone()),
                    _ => None,
                };
                self.frame(crate::sql::ddl::show::show_tables(self, dataset.as_ref())?)
            }
            Statement::ShowColumns { show_options, .. } => match &show_options.show_in {
                Some(ShowStatementIn {
                    parent_name: Some(name),
                    ..
                }) => self.frame(crate::sql::ddl::show::describe(self, name)?),
                _ => Err(Error::Sql(SqlError::Invalid(
                    "SHOW COLUMNS needs FROM <table>".into(),
                ))),
            },
            Statement::ExplainTable { ref table_name, .. }
                if !self.is_widesql_table_or_missing(table_name) =>
            {
                self.datafusion(statement_back(*inner)).await
            }
            Statement::ExplainTable { table_name, .. } => {
                self.frame(crate::sql::ddl::show::describe(self, &table_name)?)
            }
            Statement::Delete(delete) => {
                let n = crate::sql::dml::delete_update::delete(self, delete).await?;
                self.count(n)
            }
            Statement::Update(update) => {
                let n = crate::sql::dml::delete_update::update(self, update).await?;
                self.count(n)
            }
            Statement::ShowVariable { variable }
                if ObjectName::from(variable.clone())
                    .to_string()
                    .eq_ignore_ascii_case("widesql.plan_cache") =>
            {
                self.frame(self.plan_cache_batch()?)
            }
            Statement::Set(Set::SingleAssignment {
                variable, values, ..
            }) if variable.to_string().to_lowercase().starts_with("widesql.") => {
                self.set_widesql(&variable, &values)?;
                self.done()
            }
            other => {
                self.datafusion(DfStatement::Statement(Box::new(other)))
                    .await
            }
        }
    }

    /// Runs a statement through DataFusion; the `EXECUTE` of a prepared
    /// statement goes through the front door, and a statement of a kind
    /// that needs no optimiser runs without it ([`Session::as_written`]).
    pub(in crate::sql) async fn datafusion(&self, statement: DfStatement) -> Result<Frame> {
        let stamp = self.stamp();
        // Kept to plan it again after DDL (see `execute_prepared`).
        let prepare = matches!(&statement, DfStatement::Statement(s) if matches!(s.as_ref(), Statement::Prepare { .. }))
            .then(|| statement.clone());
        let plan = self.plan(statement).await?;
        if let Some(answer) = self.execute_prepared(&plan).await? {
            return self.answer_frame(answer);
        }
        let plan = match self.as_written(plan).await? {
            Ok(frame) => return Ok(frame),
            Err(plan) => plan,
        };
        // DataFusion's DDL (views, external tables) and settings change
        // what the session's queries plan to.
        let changes_planning = matches!(
            plan,
            LogicalPlan::Ddl(_)
                | LogicalPlan::Statement(
                    PlanStatement::SetVariable(_) | PlanStatement::ResetVariable(_)
                )
        );
        if changes_planning {
            self.cache.settings_changed();
        }
        let prepares = matches!(
            plan,
            LogicalPlan::Statement(PlanStatement::Prepare(_) | PlanStatement::Deallocate(_))
        );
        let remembered = prepares.then(|| plan.clone());
        let sets = matches!(
            plan,
            LogicalPlan::Statement(PlanStatement::SetVariable(_) | PlanStatement::ResetVariable(_))
        );
        let frame = self.ctx.execute_logical_plan(plan).await;
        if sets {
            // Even after a failed SET, which may have changed a setting.
            if let Some(hook) = super::session_hook(&self.db) {
                let told = hook.settings_changed(&mut self.ctx.state_ref().write());
                // A state planned before the hook changed it is not kept.
                self.cache.state_changed();
                if frame.is_ok() {
                    told?;
                }
            }
        }
        let frame = frame?;
        if let Some(plan) = remembered {
            self.remember_prepared(&plan, stamp, prepare);
        }
        // These DataFusion runs as it plans them.
        let frame = Frame::from(frame);
        Ok(match changes_planning || prepares {
            true => frame.that_changed(),
            false => frame,
        })
    }

    /// Whether DataFusion plans `statement` (a query or an `INSERT`): the
    /// statements that can be prepared.
    pub(in crate::sql) fn is_datafusions(&self, statement: &DfStatement) -> bool {
        match statement {
            DfStatement::Statement(inner) => match inner.as_ref() {
                Statement::Query(query) => !has_into(query),
                Statement::Insert(_) => true,
                _ => false,
            },
            _ => false,
        }
    }

    /// DataFusion's logical plan of `statement`, before optimization (an
    /// INSERT's target marked with the columns it leaves to their DEFAULT);
    /// a missing table is widesql's error naming what is missing.
    pub(in crate::sql) async fn plan(&self, statement: DfStatement) -> Result<LogicalPlan> {
        let mut state = self.ctx.state();
        // The statement's table references, as DataFusion resolves them
        // (identifier normalisation, quoted names with dots, CTEs left out),
        // but a CREATE TABLE's own name (it is new) and the table functions
        // it calls (`FROM cells('t')`), which DataFusion lists among them.
        let mut references = state.resolve_table_references(&statement)?;
        if let DfStatement::Statement(inner) = &statement {
            if let Statement::CreateTable(create) = inner.as_ref() {
                let normalise = state.config_options().sql_parser.enable_ident_normalization;
                let target = object_name_to_table_reference(create.name.clone(), normalise)?;
                references.retain(|reference| *reference != target);
            }
        }
        let called = table_functions_called(&statement);
        references.retain(|reference| {
            !matches!(reference, TableReference::Bare { table } if called.contains(table.as_ref()))
        });
        // Planned again when it failed on a name while DDL ran (a table
        // renamed away and back, dropped and made again) and every table
        // exists now: against the catalog as it is, at most a few times.
        let mut attempts = 0;
        let plan = loop {
            let generation = self.generation();
            match state.statement_to_plan(statement.clone()).await {
                Ok(plan) => break plan,
                // A missing table is a planning error; other errors (a
                // feature DataFusion lacks, say) come first and stay
                // DataFusion's.
                Err(e) if matches!(e.find_root(), DataFusionError::Plan(_)) => {
                    if let Some(missing) = self.missing_table(&references) {
                        return Err(missing);
                    }
                    attempts += 1;
                    if self.generation() == generation || attempts == PLAN_ATTEMPTS {
                        return Err(from_df(e));
                    }
                    state = self.ctx.state();
                }
                Err(e) => return Err(from_df(e)),
            }
        };
        self.check_plan(&plan)?;
        with_defaults_marked(plan)
    }
}

/// How many times a statement is planned while DDL keeps changing the
/// tables it names (see [`Session::plan`]).
const PLAN_ATTEMPTS: usize = 3;

/// The names `statement` calls as table functions (`FROM cells('t')`),
/// lower-cased unless quoted.
fn table_functions_called(statement: &DfStatement) -> HashSet<String> {
    use datafusion::sql::sqlparser::ast::{TableFactor, Visit, Visitor};
    use std::ops::ControlFlow;
    struct Calls(HashSet<String>);
    impl Visitor for Calls {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name,
                args: Some(_),
                ..
            } = factor
            {
                if let Some(ident) = name.0.last().and_then(|part| part.as_ident()) {
                    let called = match ident.quote_style {
                        Some(_) => ident.value.clone(),
                        None => ident.value.to_lowercase(),
                    };
                    self.0.insert(called);
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut calls = Calls(HashSet::new());
    match statement {
        DfStatement::Statement(inner) => {
            let _ = inner.visit(&mut calls);
        }
        DfStatement::Explain(explain) => return table_functions_called(&explain.statement),
        _ => {}
    }
    calls.0
}

/// `plan` with the target of each INSERT in it (a `PREPARE`'s or an
/// `EXPLAIN ANALYZE`'s too) marked with the columns the statement left to
/// their DEFAULT (see [`insert_with_defaults_marked`]).
fn with_defaults_marked(plan: LogicalPlan) -> Result<LogicalPlan> {
    use datafusion::common::tree_node::Transformed;
    // Only these hold an INSERT: a query (a point read's too) is not walked.
    if !matches!(
        plan,
        LogicalPlan::Dml(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::Explain(_)
            | LogicalPlan::Analyze(_)
    ) {
        return Ok(plan);
    }
    let marked = plan.transform_up(|node| {
        Ok(match node {
            LogicalPlan::Dml(_) => Transformed::yes(insert_with_defaults_marked(node)),
            other => Transformed::no(other),
        })
    })?;
    Ok(marked.data)
}

/// An INSERT's plan whose target knows the columns the statement left to
/// their DEFAULT: those whose value in the planner's projection onto the
/// table reads no column of the input (named columns do). A DEFAULT then
/// fills only rows the INSERT creates (see
/// [`RowWriter::with_defaulted`](crate::sql::dml::write::RowWriter::with_defaulted)).
fn insert_with_defaults_marked(plan: LogicalPlan) -> LogicalPlan {
    use datafusion::catalog::TableProvider;
    use datafusion::datasource::{provider_as_source, source_as_provider};
    use datafusion::logical_expr::DmlStatement;
    let LogicalPlan::Dml(dml) = &plan else {
        return plan;
    };
    let LogicalPlan::Projection(projection) = dml.input.as_ref() else {
        return plan;
    };
    if !matches!(dml.op, WriteOp::Insert(_)) {
        return plan;
    }
    let Some(table) = source_as_provider(&dml.target)
        .ok()
        .and_then(|p| p.downcast_ref::<WideTable>().cloned())
    else {
        return plan;
    };
    let schema = table.schema();
    let defaulted: Vec<usize> = projection
        .expr
        .iter()
        .enumerate()
        .filter(|(at, expr)| {
            expr.column_refs().is_empty()
                && schema
                    .fields()
                    .get(*at)
                    .is_some_and(|f| table.get_column_default(f.name()).is_some())
        })
        .map(|(at, _)| at)
        .collect();
    if defaulted.is_empty() || projection.expr.len() != schema.fields().len() {
        return plan;
    }
    let target = provider_as_source(Arc::new(table.with_defaulted(defaulted)));
    LogicalPlan::Dml(DmlStatement::new(
        dml.table_name.clone(),
        target,
        dml.op.clone(),
        Arc::clone(&dml.input),
    ))
}

pub(in crate::sql) fn statement_back(statement: Statement) -> DfStatement {
    DfStatement::Statement(Box::new(statement))
}

pub(in crate::sql) fn has_into(query: &Query) -> bool {
    matches!(query.body.as_ref(), SetExpr::Select(select) if select.into.is_some())
}

/// The table a `SELECT … INTO` creates.
pub(in crate::sql) fn select_into_target(query: &Query) -> Option<&ObjectName> {
    match query.body.as_ref() {
        SetExpr::Select(select) => select.into.as_ref().map(|into| &into.name),
        _ => None,
    }
}

/// The SELECT of `query` if it has an INTO clause.
pub(in crate::sql) fn select_into(query: &mut Query) -> Option<&mut Select> {
    match query.body.as_mut() {
        SetExpr::Select(select) if select.into.is_some() => Some(select),
        _ => None,
    }
}

/// What `statement` is when it uses the host's files or resources.
fn host_file_statement(statement: &DfStatement) -> Option<&'static str> {
    match statement {
        DfStatement::CopyTo(_) => Some("COPY … TO"),
        DfStatement::CreateExternalTable(_) => Some("CREATE EXTERNAL TABLE"),
        DfStatement::Statement(inner) => match inner.as_ref() {
            Statement::Set(Set::SingleAssignment { variable, .. }) => {
                let name = variable.to_string().to_lowercase();
                if name.starts_with("datafusion.runtime.") {
                    // The spill directory and its size, the memory limit.
                    Some("SET datafusion.runtime.*")
                } else if name == "datafusion.sql_parser.recursion_limit" {
                    // How deep the parser recurses on the thread's stack.
                    Some("SET datafusion.sql_parser.recursion_limit")
                } else {
                    None
                }
            }
            _ => None,
        },
        _ => None,
    }
}

/// `COPY … TO 'file'` without options, as an export: `(query, file,
/// format)`. Exports stream, write CSV's nested values as JSON text, and
/// leave no file when they fail. Copies with options, partitions, a
/// directory or a URL as the target are DataFusion's. As in DataFusion,
/// `json` is newline-delimited.
fn file_copy(copy: &CopyToStatement) -> Option<(String, PathBuf, FileFormat)> {
    let target = &copy.target;
    if !copy.options.is_empty()
        || !copy.partitioned_by.is_empty()
        || target.contains("://")
        || target.ends_with('/')
        || Path::new(target).is_dir()
    {
        return None;
    }
    let path = PathBuf::from(target);
    let format = match &copy.stored_as {
        Some(name) => FileFormat::from_name(name).ok()?,
        None => FileFormat::from_path(&path)?,
    };
    let format = match format {
        FileFormat::Json => FileFormat::NdJson,
        other => other,
    };
    let query = match &copy.source {
        CopyToSource::Relation(name) => format!("SELECT * FROM {name}"),
        CopyToSource::Query(query) => query.to_string(),
    };
    Some((query, path, format))
}
