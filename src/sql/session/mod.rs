//! The front door: a SQL session, a DataFusion `SessionContext` over the
//! widesql catalog, with its options. Every statement enters here
//! ([`Session::run`], [`Session::sql`], [`Session::prepare`], the CLI, the
//! server) as text; the front door reads what it can off the text and looks
//! the plan cache up, the rest is parsed, checked (depth, access) and
//! dispatched to the stage that runs it. What leaves is a [`Frame`] (rows
//! to collect or stream) or, for scripts, one [`StatementOutput`] per
//! statement.

pub(crate) mod access;
pub(crate) mod dispatch;
mod files;
pub mod frame;
pub mod front_door;
pub(crate) mod names;
pub(crate) mod nesting;
mod parse;
pub(crate) mod planned;
pub mod prepared;
pub(crate) mod settings;

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use datafusion::arrow::datatypes::{FieldRef, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::execution::context::SessionContext;
use datafusion::execution::memory_pool::{GreedyMemoryPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::execute_stream;
use datafusion::prelude::SessionConfig;
use datafusion::sql::parser::Statement as DfStatement;

use crate::catalog::{DEFAULT_DATASET, DEFAULT_PROJECT};
use crate::db::{retrying_async, Db};
use crate::error::{Error, Result};
use crate::sql::ddl::OwnStatement;
use crate::sql::dml::sink::WideSink;
use crate::sql::dml::write::{RowWriter, WriteSettings};
use crate::sql::read::scan::scans_of;
use crate::sql::read::{catalog, shape, versions};
use crate::sql::rules::checked::{self, CheckedIntegers};
use crate::sql::rules::in_subquery::InSubqueryNulls;
use crate::sql::rules::types;
use crate::sql::session::front_door::{CacheSwitches, PlanCache};
use crate::sql::values::literal::Numbers;
use crate::sql::SqlError;
use crate::sql::{dml, from_df, Frame};

use crate::table::TableStore;

/// One statement of a script.
pub(crate) enum Parsed {
    /// A statement DataFusion's parser reads.
    Sql(DfStatement),
    /// A statement widesql's parser reads (users, grants, running
    /// statements, `ALTER DATABASE … RENAME`, tablets).
    Own(OwnStatement),
}

/// The result of one statement of a script.
#[derive(Debug, Clone)]
pub struct StatementOutput {
    /// The statement's text: as the parser prints it, or as written (less
    /// a final `;`) for a script of one statement the front door read off
    /// its text (an `INSERT … VALUES` of literals, a `SELECT` whose
    /// literals are all values of its `WHERE` clauses).
    pub sql: String,
    /// The result's schema.
    pub schema: SchemaRef,
    /// The result rows.
    pub batches: Vec<RecordBatch>,
}

impl StatementOutput {
    /// The rows as a text table and a line break, as a shell prints them;
    /// empty for a statement that returns no rows, such as DDL (an INSERT
    /// returns its count as a row).
    pub fn pretty(&self) -> Result<String> {
        if self.batches.is_empty() || self.schema.fields().is_empty() {
            return Ok(String::new());
        }
        let table = datafusion::arrow::util::pretty::pretty_format_batches(&self.batches)
            .map_err(|e| from_df(e.into()))?;
        Ok(format!("{table}\n"))
    }
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
    /// Whether statements may read and write files of the host: `COPY …
    /// TO` a file and `CREATE EXTERNAL TABLE`. Default: true; the sessions
    /// of network clients have it off, since they are not the host's user.
    pub host_files: bool,
    /// The user whose grants every statement is checked against; `None`
    /// (the default): no checks, as for the program that owns the files.
    /// Set it only for a user who proved who it is
    /// ([`Db::authenticate`](crate::Db::authenticate)).
    pub user: Option<String>,
    /// The most memory the session's running queries may hold at once
    /// (DataFusion's memory pool: sorts and aggregations spill to disk
    /// past it, other operators fail with a resources-exhausted error);
    /// `None` (the default): no limit.
    pub memory_limit: Option<usize>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            default_project: DEFAULT_PROJECT.to_string(),
            default_dataset: DEFAULT_DATASET.to_string(),
            target_partitions: None,
            host_files: true,
            user: None,
            memory_limit: None,
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
    pub(super) db: Db,
    pub(super) ctx: SessionContext,
    pub(super) options: SessionOptions,
    /// The statements of SQL `PREPARE`, by name.
    prepared: Arc<Mutex<HashMap<String, Planned<SqlPrepared>>>>,
    /// The session's switches for the plan cache.
    pub(super) cache: Arc<CacheSwitches>,
    /// The database's plan cache.
    pub(super) plan_cache: Arc<PlanCache>,
}

/// A statement of SQL `PREPARE`: the statement, kept to plan it again
/// after DDL, the statement it prepares, and its declared parameter types.
#[derive(Debug, Clone)]
pub(super) struct SqlPrepared {
    pub(super) statement: DfStatement,
    pub(super) inner: DfStatement,
    pub(super) fields: Vec<FieldRef>,
}

/// Something planned from names, and when ([`Session::is_current`]).
#[derive(Debug, Clone)]
pub(super) struct Planned<T> {
    pub(super) stamp: Stamp,
    pub(super) value: T,
}

/// What names resolved by when something was planned: the catalog
/// generation (DDL) and the session's settings epoch (`SET`, DataFusion
/// DDL, a handed-out context).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    generation: u64,
    settings: u64,
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
            .with_type_planner(Arc::new(types::WidesqlTypes::default()))
            .with_analyzer_rule(Arc::new(InSubqueryNulls))
            .with_analyzer_rule(Arc::new(CheckedIntegers))
            .with_catalog_list(Arc::new(catalog::ProjectList::new(
                db.clone(),
                options.user.clone(),
            )));
        let state = match options.memory_limit {
            Some(limit) => {
                let runtime = RuntimeEnv {
                    memory_pool: Arc::new(TrackConsumersPool::new(
                        GreedyMemoryPool::new(limit),
                        NonZeroUsize::MIN.saturating_add(4),
                    )),
                    ..RuntimeEnv::default()
                };
                state.with_runtime_env(Arc::new(runtime))
            }
            None => state,
        };
        let state = planned::with_planner(state);
        let state = match session_hook(&db) {
            Some(hook) => hook.build(state),
            None => state,
        };
        let state = state.build();
        let ctx = SessionContext::new_with_state(state);
        ctx.register_udaf(checked::checked_sum());
        ctx.register_udtf(
            dml::ROWS_FUNCTION,
            Arc::new(dml::RowsFunction::new(db.clone())),
        );
        let functions = versions::VersionFunctions::new(db.clone(), options.clone());
        ctx.register_udtf("cells", Arc::new(functions.cells()));
        ctx.register_udtf("as_of", Arc::new(functions.as_of()));
        ctx.register_udtf("history", Arc::new(functions.history()));
        Session {
            plan_cache: PlanCache::of(&db),
            db,
            ctx,
            options,
            prepared: Arc::default(),
            cache: Arc::default(),
        }
    }

    /// The statements prepared in SQL.
    pub(super) fn sql_prepared(&self) -> MutexGuard<'_, HashMap<String, Planned<SqlPrepared>>> {
        self.prepared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The catalog generation to record before planning a statement.
    pub(super) fn generation(&self) -> u64 {
        self.db.catalog().generation()
    }

    /// The key a statement's shape is remembered under: its text, the
    /// session's user (whose grants its plan was checked against), and the
    /// settings that decide what its names resolve to (a `SET` of the
    /// default catalog or schema, or of identifier normalization, makes
    /// it a new shape).
    pub(super) fn shape_key(&self, text: String) -> String {
        let state = self.ctx.state_ref();
        let state = state.read();
        let options = state.config().options();
        format!(
            "{:?} {}.{} {} {text}",
            self.options.user,
            options.catalog.default_catalog,
            options.catalog.default_schema,
            options.sql_parser.enable_ident_normalization
        )
    }

    /// How the session's SQL parser reads numbers with a fraction.
    pub(super) fn numbers(&self) -> Numbers {
        let state = self.ctx.state_ref();
        let floats = !state
            .read()
            .config()
            .options()
            .sql_parser
            .parse_float_as_decimal;
        Numbers { floats }
    }

    /// The stamp to record before planning a statement.
    pub(super) fn stamp(&self) -> Stamp {
        Stamp {
            generation: self.generation(),
            settings: self.cache.settings_epoch(),
        }
    }

    /// Whether names resolve as they did when something was planned at
    /// `stamp`: no DDL (a rename included) and no change of the session's
    /// settings happened since.
    pub(super) fn is_current(&self, stamp: Stamp) -> bool {
        stamp == self.stamp()
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
    /// providers here to join them with widesql tables. From then on the
    /// session's queries use plans of their own in the plan cache, since
    /// what its names resolve to may have changed.
    pub fn context(&self) -> &SessionContext {
        self.cache.settings_changed();
        &self.ctx
    }

    /// The catalog as DataFusion's providers (projects, their datasets,
    /// their tables), listing what the session's user sees; reading it
    /// changes nothing about the session, unlike [`Session::context`].
    pub fn catalog_list(&self) -> Arc<dyn datafusion::catalog::CatalogProviderList> {
        Arc::clone(self.ctx.state_ref().read().catalog_list())
    }

    /// The memory pool the session's queries draw from (see
    /// [`SessionOptions::memory_limit`]); reading it changes nothing about
    /// the session, unlike [`Session::context`].
    pub fn memory_pool(&self) -> Arc<dyn datafusion::execution::memory_pool::MemoryPool> {
        Arc::clone(&self.ctx.runtime_env().memory_pool)
    }

    /// The project and dataset that unqualified names resolve in now (`SET
    /// datafusion.catalog.default_catalog` changes them).
    pub fn default_names(&self) -> (String, String) {
        let state = self.ctx.state_ref();
        let state = state.read();
        let options = &state.config().options().catalog;
        (
            options.default_catalog.clone(),
            options.default_schema.clone(),
        )
    }

    /// The DataFusion context, for the crate's own registrations that it
    /// undoes itself (an import's source) and that no cached plan reads.
    pub(crate) fn own_context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Runs one statement and returns its result, to collect, stream or
    /// turn into a DataFusion `DataFrame`; a text of several is an error
    /// ([`Session::run`] runs scripts).
    pub async fn sql(&self, sql: &str) -> Result<Frame> {
        if let Some(answer) = self.door_text(sql).await? {
            return self.answer_frame(answer);
        }
        let mut statements = self.parse_script(sql)?;
        match (statements.pop_front(), statements.is_empty()) {
            (Some(Parsed::Sql(statement)), true) => self.frame_of(statement).await,
            (Some(Parsed::Own(statement)), true) => statement.run(self).await,
            (None, _) => Err(Error::Sql(SqlError::Invalid("no statement to run".into()))),
            (Some(_), false) => Err(Error::Sql(SqlError::Invalid(
                "the text holds several statements where one is expected".into(),
            ))),
        }
    }

    /// The result of the parsed statement `statement`.
    pub(crate) async fn frame_of(&self, mut statement: DfStatement) -> Result<Frame> {
        match self.door(&mut statement).await? {
            Some(answer) => self.answer_frame(answer),
            None => self.execute(statement).await,
        }
    }

    /// Runs every statement of a script in order and collects each result;
    /// stops at the first error.
    pub async fn run(&self, script: &str) -> Result<Vec<StatementOutput>> {
        let mut outputs = Vec::new();
        self.run_each(script, |output| outputs.push(output)).await?;
        Ok(outputs)
    }

    /// Runs every statement of a script in order and hands each result to
    /// `done` as soon as its statement has run, so that a script that
    /// fails later still shows what its earlier statements did (and
    /// committed). Stops at the first error; returns the statements run.
    pub async fn run_each(
        &self,
        script: &str,
        mut done: impl FnMut(StatementOutput),
    ) -> Result<usize> {
        // One INSERT of literals, or one key lookup: read off the text.
        if let Some(answer) = self.door_text(script).await? {
            let (schema, batches) = self.answer_frame(answer)?.into_rows().await?;
            done(StatementOutput {
                sql: script.trim().trim_end_matches(';').trim_end().to_string(),
                schema,
                batches,
            });
            return Ok(1);
        }
        let statements = self.parse_script(script)?;
        let count = statements.len();
        for statement in statements {
            done(match statement {
                Parsed::Sql(statement) => self.run_statement(statement).await?,
                Parsed::Own(statement) => {
                    let sql = statement.to_string();
                    let (schema, batches) = statement.run(self).await?.into_rows().await?;
                    StatementOutput {
                        sql,
                        schema,
                        batches,
                    }
                }
            });
        }
        Ok(count)
    }

    /// Plans and runs one statement; plans and runs it again when DDL
    /// changed its table while it waited to write (nothing was written
    /// then), as a statement that waited for the DDL's lock would.
    async fn run_statement(&self, mut statement: DfStatement) -> Result<StatementOutput> {
        let sql = statement.to_string();
        let (schema, batches) = match self.door(&mut statement).await? {
            Some(answer) => self.answer_frame(answer)?.into_rows().await?,
            None => {
                retrying_async(|| async {
                    self.execute(statement.clone()).await?.into_rows().await
                })
                .await?
            }
        };
        Ok(StatementOutput {
            sql,
            schema,
            batches,
        })
    }

    /// The result of rows computed already.
    pub(super) fn frame(&self, batch: RecordBatch) -> Result<Frame> {
        Frame::rows(batch, self.planning_state().0)
    }

    /// The result of a statement that changed something and returns no
    /// rows: one row of no columns, as DataFusion's DDL gives.
    pub(super) fn done(&self) -> Result<Frame> {
        let options = RecordBatchOptions::new().with_row_count(Some(1));
        let batch =
            RecordBatch::try_new_with_options(Arc::new(Schema::empty()), Vec::new(), &options)?;
        Ok(self.frame(batch)?.that_changed())
    }

    /// The result of a write of `n` rows.
    pub(super) fn count(&self, n: u64) -> Result<Frame> {
        Ok(self.frame(dml::count_batch(n)?)?.that_changed())
    }

    /// The session's write settings (`SET widesql.write_timestamp`).
    pub(crate) fn write_settings(&self) -> WriteSettings {
        WriteSettings::of(self.ctx.state_ref().read().config())
    }

    /// Runs `plan` to its end and writes its rows into `store` as one
    /// statement.
    pub(super) async fn insert_plan(&self, store: TableStore, plan: LogicalPlan) -> Result<u64> {
        let shape = Arc::new(shape::Shape::new(&store.layout.spec, false));
        let physical = self
            .ctx
            .execute_logical_plan(plan)
            .await?
            .create_physical_plan()
            .await?;
        let reads_target = scans_of(&physical, store.layout.id) > 0;
        let sink = WideSink::new(
            RowWriter::new(store, shape, self.write_settings()),
            reads_target,
        );
        let input = execute_stream(physical, self.ctx.task_ctx())?;
        Ok(sink.write_stream(input).await?)
    }
}

/// The SQL statements among parsed ones.
fn sql_statements(parsed: &VecDeque<Parsed>) -> Vec<&DfStatement> {
    let sql = parsed.iter().filter_map(|statement| match statement {
        Parsed::Sql(statement) => Some(statement),
        Parsed::Own(_) => None,
    });
    sql.collect()
}

/// Changes every session's state ([`extend_sessions`]): a cluster's master
/// adds its distributed planner as a session is built, and gives the
/// tasks it sends the session's settings each time they change.
pub trait SessionHook: Send + Sync {
    /// The state of a session being built.
    fn build(&self, builder: SessionStateBuilder) -> SessionStateBuilder;

    /// The state of a session whose settings a statement (`SET`, `RESET`)
    /// has just changed; an error fails that statement (its settings stay
    /// changed).
    fn settings_changed(&self, state: &mut SessionState) -> datafusion::error::Result<()>;
}

/// The [`SessionHook`] a database keeps.
struct SessionExtension(Arc<dyn SessionHook>);

/// Makes every session of `db` opened from now on go through `hook`;
/// `false` when a hook was set already.
pub fn extend_sessions(db: &Db, hook: Arc<dyn SessionHook>) -> bool {
    db.set_extension(Arc::new(SessionExtension(hook)))
}

/// The hook the sessions of `db` go through, if any.
fn session_hook(db: &Db) -> Option<Arc<dyn SessionHook>> {
    db.extension()
        .and_then(|e| e.downcast_ref::<SessionExtension>())
        .map(|SessionExtension(hook)| Arc::clone(hook))
}

/// `builder` with the functions widesql's plans may hold besides
/// DataFusion's (its checked `sum` and integer operators): a worker
/// decodes a master's plans in such a state.
pub fn with_functions(mut builder: SessionStateBuilder) -> SessionStateBuilder {
    builder
        .aggregate_functions()
        .get_or_insert_with(Vec::new)
        .push(Arc::new(checked::checked_sum()));
    builder
        .scalar_functions()
        .get_or_insert_with(Vec::new)
        .extend(checked::checked_operators().into_iter().map(Arc::new));
    builder
}
