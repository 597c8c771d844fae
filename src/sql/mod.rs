//! SQL over widesql tables through Apache DataFusion.
//!
//! A [`Session`] is a DataFusion `SessionContext` whose catalog list is the
//! widesql catalog (project = catalog, dataset = schema). Statements that
//! change the catalog or rows (`CREATE`, `DROP`, `ALTER`, `SHOW`,
//! `DESCRIBE`, `DELETE`, `UPDATE`, `SET widesql.*`) are run by widesql;
//! everything else (queries, `INSERT`, `EXPLAIN`, `TRUNCATE`) is planned
//! and run by DataFusion over widesql's table providers.

pub mod catalog;
mod ddl;
pub mod dml;
pub mod pushdown;
pub mod scan;
pub mod shape;
pub mod sink;
pub mod table;
pub mod values;
pub mod versions;
pub mod write;

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, TableReference};
use datafusion::dataframe::DataFrame;
use datafusion::execution::context::SessionContext;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionConfig;
use datafusion::sql::parser::{DFParserBuilder, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::helpers::stmt_create_table::CreateTableBuilder;
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, ObjectName, ObjectType, SchemaName, Set, ShowStatementIn, Statement,
};
use datafusion::sql::sqlparser::ast::{Query, Select, SetExpr};
use datafusion::sql::sqlparser::dialect::dialect_from_str;

use crate::catalog::{DEFAULT_DATASET, DEFAULT_PROJECT};
use crate::db::{Db, Table};
use crate::error::{Error, Result};
use crate::table::TableStore;
use ddl::name_parts;
use sink::WideSink;
use write::{RowWriter, WriteSettings};

/// Turns a DataFusion error back into ours when it wraps one (our errors
/// cross DataFusion as `External`); any other stays DataFusion's, kept
/// whole as the source.
pub fn from_df(e: DataFusionError) -> Error {
    match e {
        DataFusionError::External(inner) => match inner.downcast::<Error>() {
            Ok(ours) => *ours,
            Err(other) => Error::DataFusion(Box::new(DataFusionError::External(other))),
        },
        DataFusionError::Context(_, inner) => from_df(*inner),
        other => Error::DataFusion(Box::new(other)),
    }
}

impl From<DataFusionError> for Error {
    fn from(e: DataFusionError) -> Self {
        from_df(e)
    }
}

/// The result of one statement of a script.
#[derive(Debug, Clone)]
pub struct StatementOutput {
    /// The statement's text.
    pub sql: String,
    /// The result's schema.
    pub schema: SchemaRef,
    /// The result rows.
    pub batches: Vec<RecordBatch>,
}

/// Settings of a [`Session`].
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The project unqualified names resolve in. Default: `default`.
    pub default_project: String,
    /// The dataset unqualified names resolve in. Default: `public`.
    pub default_dataset: String,
    /// DataFusion's target partitions. Default: the number of cores.
    pub target_partitions: Option<usize>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            default_project: DEFAULT_PROJECT.to_string(),
            default_dataset: DEFAULT_DATASET.to_string(),
            target_partitions: None,
        }
    }
}

impl SessionOptions {
    /// `(project, dataset, table)` of a one- to three-part name.
    pub fn resolve(&self, parts: &[String]) -> Option<(String, String, String)> {
        Some(match parts {
            [t] => (
                self.default_project.clone(),
                self.default_dataset.clone(),
                t.clone(),
            ),
            [d, t] => (self.default_project.clone(), d.clone(), t.clone()),
            [p, d, t] => (p.clone(), d.clone(), t.clone()),
            _ => return None,
        })
    }
}

/// A SQL session over one database.
#[derive(Clone)]
pub struct Session {
    db: Db,
    ctx: SessionContext,
    options: SessionOptions,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("db", &self.db.path())
            .finish()
    }
}

impl Db {
    /// A SQL session over this database.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = widesql::Db::open(dir.path())?;
    /// let session = db.session();
    /// session.run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT); INSERT INTO t VALUES ('a', 1), ('b', 2)").await?;
    /// let batches = session.sql("SELECT sum(n) AS total FROM t").await?.collect().await?;
    /// assert_eq!(datafusion::arrow::util::pretty::pretty_format_batches(&batches)?.to_string().lines().nth(3), Some("| 3     |"));
    /// # Ok(()) }
    /// ```
    pub fn session(&self) -> Session {
        Session::new(self.clone())
    }
}

impl Session {
    /// A session whose catalog is `db`'s; plain names resolve in
    /// `default.public`.
    pub fn new(db: Db) -> Session {
        Self::with_options(db, SessionOptions::default())
    }

    /// A session with other default names or partitions.
    pub fn with_options(db: Db, options: SessionOptions) -> Session {
        let mut config = SessionConfig::new()
            .with_information_schema(true)
            .with_default_catalog_and_schema(&options.default_project, &options.default_dataset)
            .with_create_default_catalog_and_schema(false)
            .with_extension(Arc::new(WriteSettings::default()));
        if let Some(n) = options.target_partitions {
            config = config.with_target_partitions(n);
        }
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features()
            .with_catalog_list(Arc::new(catalog::ProjectList::new(db.clone())))
            .build();
        let ctx = SessionContext::new_with_state(state);
        ctx.register_udtf(
            dml::ROWS_FUNCTION,
            Arc::new(dml::RowsFunction::new(db.clone())),
        );
        let functions = versions::VersionFunctions::new(db.clone(), options.clone());
        ctx.register_udtf("cells", Arc::new(functions.cells()));
        ctx.register_udtf("as_of", Arc::new(functions.as_of()));
        ctx.register_udtf("history", Arc::new(functions.history()));
        Session { db, ctx, options }
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The session's settings.
    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// The DataFusion context: register Parquet or CSV files or your own
    /// providers here to join them with widesql tables.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Parses statements with the session's dialect
    /// (`datafusion.sql_parser.dialect`) and recursion limit, as DataFusion
    /// does. A script is parsed whole, before any of it runs.
    pub(crate) fn parse(&self, sql: &str) -> Result<std::collections::VecDeque<DfStatement>> {
        // Read the settings without cloning the session state.
        let (dialect_name, recursion_limit) = {
            let state = self.ctx.state_ref();
            let state = state.read();
            let options = &state.config().options().sql_parser;
            (options.dialect, options.recursion_limit.get())
        };
        let dialect = dialect_from_str(dialect_name)
            .ok_or_else(|| Error::Sql(format!("unsupported SQL dialect '{dialect_name}'")))?;
        DFParserBuilder::new(sql)
            .with_dialect(dialect.as_ref())
            .with_recursion_limit(recursion_limit)
            .build()
            .and_then(|mut parser| parser.parse_statements())
            .map_err(from_df)
    }

    /// Runs one statement and returns its result as a DataFrame.
    pub async fn sql(&self, sql: &str) -> Result<DataFrame> {
        let mut statements = self.parse(sql)?;
        match (statements.pop_front(), statements.is_empty()) {
            (Some(statement), true) => self.execute(statement).await,
            (None, _) => Err(Error::Sql("no statement to run".into())),
            (Some(_), false) => Err(Error::Sql(
                "Session::sql runs one statement; use Session::run for scripts".into(),
            )),
        }
    }

    /// Runs every statement of a script in order and collects each result;
    /// stops at the first error.
    pub async fn run(&self, script: &str) -> Result<Vec<StatementOutput>> {
        let statements = self.parse(script)?;
        let mut outputs = Vec::with_capacity(statements.len());
        for statement in statements {
            let sql = statement.to_string();
            let frame = self.execute(statement).await?;
            let schema = Arc::new(frame.schema().as_arrow().clone());
            let batches = frame.collect().await?;
            outputs.push(StatementOutput {
                sql,
                schema,
                batches,
            });
        }
        Ok(outputs)
    }

    fn frame(&self, batch: RecordBatch) -> Result<DataFrame> {
        Ok(self.ctx.read_batch(batch)?)
    }

    fn done(&self) -> Result<DataFrame> {
        Ok(self.ctx.read_empty()?)
    }

    fn count(&self, n: u64) -> Result<DataFrame> {
        self.frame(dml::count_batch(n)?)
    }

    /// Runs one parsed statement.
    async fn execute(&self, statement: DfStatement) -> Result<DataFrame> {
        let DfStatement::Statement(inner) = statement else {
            return self.datafusion(statement).await;
        };
        match *inner {
            Statement::CreateDatabase {
                db_name,
                if_not_exists,
                ..
            } => {
                self.create_database(&db_name, if_not_exists)?;
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
                        return Err(Error::Sql(format!(
                            "CREATE SCHEMA {other} is not supported"
                        )))
                    }
                };
                self.create_schema(name, if_not_exists)?;
                self.done()
            }
            Statement::CreateTable(create) => {
                self.create_table(create).await?;
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
                self.drop_objects(object_type, &names, if_exists, cascade)?;
                self.done()
            }
            // SELECT … INTO t is CREATE TABLE t AS SELECT ….
            Statement::Query(mut query) if has_into(&query) => {
                let Some(into) = select_into(&mut query).and_then(|s| s.into.take()) else {
                    return Err(Error::Sql("SELECT INTO lost its target".into()));
                };
                let create = CreateTableBuilder::new(into.name)
                    .query(Some(query))
                    .build();
                self.create_table(create).await?;
                self.done()
            }
            Statement::AlterTable(alter) => {
                self.alter_table(&alter.name, alter.operations).await?;
                self.done()
            }
            Statement::ShowDatabases { .. } => self.frame(self.show_databases()?),
            Statement::ShowSchemas { show_options, .. } => {
                let project = match &show_options.show_in {
                    Some(ShowStatementIn {
                        parent_name: Some(name),
                        ..
                    }) => Some(name_parts(name)?.join(".")),
                    _ => None,
                };
                self.frame(self.show_schemas(project.as_deref())?)
            }
            Statement::ShowTables { show_options, .. } => {
                let dataset = match &show_options.show_in {
                    Some(ShowStatementIn {
                        parent_name: Some(name),
                        ..
                    }) => Some(name.clone()),
                    _ => None,
                };
                self.frame(self.show_tables(dataset.as_ref())?)
            }
            Statement::ShowColumns { show_options, .. } => match &show_options.show_in {
                Some(ShowStatementIn {
                    parent_name: Some(name),
                    ..
                }) => self.frame(self.describe(name)?),
                _ => Err(Error::Sql("SHOW COLUMNS needs FROM <table>".into())),
            },
            Statement::ExplainTable { ref table_name, .. }
                if !self.is_widesql_table_or_missing(table_name) =>
            {
                self.datafusion(statement_back(*inner)).await
            }
            Statement::ExplainTable { table_name, .. } => self.frame(self.describe(&table_name)?),
            Statement::Delete(delete) => {
                let n = self.delete(delete).await?;
                self.count(n)
            }
            Statement::Update(update) => {
                let n = self.update(update).await?;
                self.count(n)
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

    /// Whether `name` is a widesql table, or nothing at all (then widesql
    /// reports it missing); false for providers registered on the context.
    fn is_widesql_table_or_missing(&self, name: &ObjectName) -> bool {
        match self.open_table(name) {
            Ok(_) => true,
            Err(_) => {
                let reference = name.to_string();
                !self.ctx.table_exist(reference.as_str()).unwrap_or(false)
            }
        }
    }

    async fn datafusion(&self, statement: DfStatement) -> Result<DataFrame> {
        let state = self.ctx.state();
        // The statement's table references, as DataFusion resolves them
        // (identifier normalisation, quoted names with dots, CTEs left out).
        let references = state.resolve_table_references(&statement)?;
        let plan = match state.statement_to_plan(statement).await {
            Ok(plan) => plan,
            // A missing table is a planning error; other errors (a feature
            // DataFusion lacks, say) come first and stay DataFusion's.
            Err(e) if matches!(e.find_root(), DataFusionError::Plan(_)) => {
                return Err(self
                    .missing_table(&references)
                    .unwrap_or_else(|| from_df(e)))
            }
            Err(e) => return Err(from_df(e)),
        };
        Ok(self.ctx.execute_logical_plan(plan).await?)
    }

    /// The first of `references` that no catalog of the session holds, as
    /// widesql's error naming the part that is missing (`project 'p' does
    /// not exist`, …); `None` when every table exists.
    fn missing_table(&self, references: &[TableReference]) -> Option<Error> {
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

    /// `SET widesql.write_timestamp = '2024-01-01T00:00:00Z' | <micros> | DEFAULT`.
    fn set_widesql(&self, variable: &ObjectName, values: &[SqlExpr]) -> Result<()> {
        let name = variable.to_string().to_lowercase();
        if name != "widesql.write_timestamp" {
            return Err(Error::Sql(format!(
                "unknown setting '{name}'; widesql has 'widesql.write_timestamp'"
            )));
        }
        let text = match values {
            [SqlExpr::Value(v)] => v.value.to_string().trim_matches('\'').to_string(),
            [SqlExpr::Identifier(i)] => i.value.clone(),
            _ => {
                return Err(Error::Sql(
                    "SET widesql.write_timestamp takes one value".into(),
                ))
            }
        };
        let timestamp = if text.eq_ignore_ascii_case("default") || text.eq_ignore_ascii_case("null")
        {
            None
        } else if let Ok(micros) = text.parse::<i64>() {
            Some(micros)
        } else {
            let parsed =
                datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(&text)
                    .map_err(|e| Error::Sql(format!("'{text}' is not a timestamp: {e}")))?;
            Some(parsed / 1000)
        };
        if timestamp.is_some_and(|ts| ts < 0) {
            return Err(Error::Sql(
                "widesql.write_timestamp must not be before 1970".into(),
            ));
        }
        let state = self.ctx.state_ref();
        state
            .write()
            .config_mut()
            .set_extension(Arc::new(WriteSettings { timestamp }));
        Ok(())
    }

    /// `(project, dataset)` of a one- or two-part dataset name.
    fn resolve_dataset_name(&self, name: &ObjectName) -> Result<(String, String)> {
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
    fn resolve_table_name(&self, name: &ObjectName) -> Result<(String, String, String)> {
        let parts = name_parts(name)?;
        self.options
            .resolve(&parts)
            .ok_or_else(|| Error::Sql(format!("'{name}' is not a [[project.]dataset.]table name")))
    }

    fn open_table(&self, name: &ObjectName) -> Result<Table> {
        let (project, dataset, table) = self.resolve_table_name(name)?;
        self.db.open_table(&project, &dataset, &table)
    }

    /// The session's write settings (`SET widesql.write_timestamp`).
    pub(crate) fn write_settings(&self) -> WriteSettings {
        self.ctx
            .state()
            .config()
            .get_extension::<WriteSettings>()
            .map(|s| s.as_ref().clone())
            .unwrap_or_default()
    }

    /// Runs `plan` to its end and writes its rows into `store` as one
    /// statement.
    async fn insert_plan(&self, store: TableStore, plan: LogicalPlan) -> Result<u64> {
        let shape = Arc::new(shape::Shape::new(&store.layout.spec, false));
        let sink = WideSink::new(RowWriter::new(store, shape, self.write_settings()));
        let frame = self.ctx.execute_logical_plan(plan).await?;
        Ok(sink.write_stream(frame.execute_stream().await?).await?)
    }
}

fn statement_back(statement: Statement) -> DfStatement {
    DfStatement::Statement(Box::new(statement))
}

fn has_into(query: &Query) -> bool {
    matches!(query.body.as_ref(), SetExpr::Select(select) if select.into.is_some())
}

/// The SELECT of `query` if it has an INTO clause.
fn select_into(query: &mut Query) -> Option<&mut Select> {
    match query.body.as_mut() {
        SetExpr::Select(select) if select.into.is_some() => Some(select),
        _ => None,
    }
}
