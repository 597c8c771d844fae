//! The workloads W1–W8, each measuring every system that can run it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use widesql::{Durability, ErrorKind, Filter, RowMutation};

use crate::data::{self, Page, Rng};
use crate::report::{
    disk_read_bytes, duration, median, median_of, median_secs, rate, reset_peak_rss, rss_kib,
    times, unless_hung, Hung, MdTable, Ratios, Target,
};
use crate::systems::datafusion_mem::{row_count, DataFusionMem};
use crate::systems::gluesql::GlueSql;
use crate::systems::raw_sled::{cell_key, RawSled};
use crate::systems::sqlite::Sqlite;
use crate::systems::widesql::{
    bulk_load, open_db, Load, WidesqlEmbedded, WidesqlSql, STATEMENT_ROWS,
};
use crate::systems::{evict_from_page_cache, System};
use crate::Res;

/// What a run measures and where.
pub struct Config {
    /// Rows of the main data set.
    pub rows: usize,
    /// Repetitions per figure.
    pub reps: usize,
    /// Point reads per repetition (W2).
    pub points: usize,
    /// Range reads per repetition (W3).
    pub ranges: usize,
    /// Versions of the one cell of W6.
    pub versions: usize,
    /// Seconds each system runs in W7.
    pub concurrent_secs: f64,
    /// Statements per durability setting (W8).
    pub durable_statements: usize,
    /// Rows of 2 KiB in the table W9 scans with a 16 MiB cache.
    pub scan_memory_rows: usize,
    /// The page cache every store gets.
    pub cache_bytes: u64,
    /// The folder of all databases.
    pub root: PathBuf,
    /// The runtime SQL runs on.
    pub runtime: Arc<tokio::runtime::Runtime>,
    /// Workloads to run (empty: all).
    pub only: Vec<String>,
}

impl Config {
    fn wants(&self, workload: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|w| w == workload)
    }

    /// A fresh folder for one store.
    pub(crate) fn fresh(&self, name: &str) -> Res<PathBuf> {
        let path = self.root.join(name);
        if path.exists() {
            std::fs::remove_dir_all(&path)?;
        }
        Ok(path)
    }
}

/// The machine and versions, for the results file.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!(
        "machine: {cpus} cores, {model}; sled 0.34, SQLite {} (rusqlite), GlueSQL 0.20.0, DataFusion 55.2.0",
        rusqlite::version()
    )
}

/// The stores W1 loaded, read by the later workloads.
struct Stores {
    sled: RawSled,
    sqlite: Sqlite,
    glue: GlueSql,
    mem: DataFusionMem,
    embedded: WidesqlEmbedded,
    sql: WidesqlSql,
}

impl Stores {
    /// Every system, in the order the tables list them; widesql last.
    fn all(&mut self) -> [&mut dyn System; 6] {
        [
            &mut self.sled,
            &mut self.sqlite,
            &mut self.glue,
            &mut self.mem,
            &mut self.embedded,
            &mut self.sql,
        ]
    }
}

/// Runs the workloads the configuration names.
pub fn run(config: &Config) -> Res<()> {
    let pages = data::pages(config.rows);
    let mut ratios = Ratios::default();
    reset_peak_rss();
    let mut stores = w1_load(config, &pages, &mut ratios)?;
    if config.wants("W2") {
        reset_peak_rss();
        w2_point(config, &pages, &mut stores, &mut ratios)?;
    }
    if config.wants("W3") {
        reset_peak_rss();
        w3_range(config, &mut stores, &mut ratios)?;
    }
    if config.wants("W4") {
        reset_peak_rss();
        w4_groups(config, &pages, &mut stores, &mut ratios)?;
    }
    if config.wants("W5") {
        reset_peak_rss();
        w5_scan(config, &mut stores, &mut ratios)?;
    }
    if config.wants("W6") {
        reset_peak_rss();
        w6_versions(config)?;
    }
    if config.wants("W7") {
        reset_peak_rss();
        crate::concurrent::w7(config, &mut ratios)?;
    }
    if config.wants("W8") {
        reset_peak_rss();
        w8_durability(config)?;
    }
    if config.wants("W9") {
        w9_scan_memory(config)?;
    }
    if config.wants("W10") {
        reset_peak_rss();
        crate::server::w10(config, &mut ratios)?;
    }
    if config.wants("W11") {
        w11_long_expressions(config)?;
    }
    if config.wants("W12") {
        reset_peak_rss();
        crate::cluster::w12(config, &pages, &mut ratios)?;
    }
    ratios.print();
    Ok(())
}

/// A load's median time and the store's size.
struct Loaded<S> {
    store: S,
    secs: f64,
    bytes: Option<u64>,
}

/// Loads `pages` into a fresh store `config.reps` times; keeps the last.
fn load_reps<S: System>(
    config: &Config,
    pages: &[Page],
    name: &str,
    mut open: impl FnMut(&Path) -> Res<S>,
) -> Res<Loaded<S>> {
    let mut last = None;
    let mut secs = Vec::new();
    for rep in 0..config.reps {
        // The previous store closes before the next one starts.
        drop(last.take());
        let path = config.fresh(&format!("{name}-{rep}"))?;
        let mut store = open(&path)?;
        let start = Instant::now();
        match store.load(pages) {
            // Left out of this workload; its size is not a loaded store's.
            Err(e) if e.is::<Hung>() => {
                return Ok(Loaded {
                    store,
                    secs: f64::NAN,
                    bytes: None,
                })
            }
            other => other?,
        }
        secs.push(start.elapsed().as_secs_f64());
        last = Some((store, path));
        if rep > 0 {
            let _ = std::fs::remove_dir_all(config.root.join(format!("{name}-{}", rep - 1)));
        }
    }
    let (store, _) = last.ok_or("no repetition ran")?;
    let bytes = store.bytes_on_disk()?;
    Ok(Loaded {
        store,
        secs: crate::report::median(secs),
        bytes,
    })
}

fn w1_load(config: &Config, pages: &[Page], ratios: &mut Ratios) -> Res<Stores> {
    let logical: usize = pages.iter().map(Page::logical_bytes).sum();
    let (cache, rt) = (config.cache_bytes, &config.runtime);
    let sled = load_reps(config, pages, "sled", |p| RawSled::open(p, cache))?;
    let sqlite = load_reps(config, pages, "sqlite", Sqlite::open)?;
    let glue = load_reps(config, pages, "glue", GlueSql::open)?;
    let mem = load_reps(config, pages, "mem", |_| Ok(DataFusionMem::new(rt.clone())))?;
    let embedded = load_reps(config, pages, "widesql-embedded", |p| {
        WidesqlEmbedded::open(p, cache, rt.clone())
    })?;
    // Flushed at its end only, as SQLite's WAL commits with `synchronous =
    // NORMAL`: the load without the cost of a flush per 1,000 rows.
    let embedded_eventual = load_reps(config, pages, "widesql-embedded-eventual", |p| {
        Ok(WidesqlEmbedded::open(p, cache, rt.clone())?.loading_with(Durability::Eventual))
    })?;
    let sql =
        |how: Load| move |p: &Path| WidesqlSql::open(p, cache, rt.clone(), "pages", true, how);
    let insert = load_reps(
        config,
        pages,
        "widesql-insert",
        sql(Load::InsertValues(STATEMENT_ROWS)),
    )?;
    // Statements of 100 rows, each flushed or not: what a commit costs.
    let insert_100 = load_reps(
        config,
        pages,
        "widesql-insert-100",
        sql(Load::InsertValues(100)),
    )?;
    let eventual = load_reps(
        config,
        pages,
        "widesql-insert-eventual",
        sql(Load::InsertValuesEventual(100)),
    )?;
    let import = load_reps(config, pages, "widesql-import", sql(Load::InsertSelect))?;
    let mut table = MdTable::new(
        format!(
            "W1 bulk load of {} pages ({} MB of values)",
            pages.len(),
            logical >> 20
        ),
        &[
            "system",
            "rows/s",
            "MB/s",
            "bytes on disk",
            "÷ logical bytes",
            "rows/s vs widesql embedded",
        ],
    );
    let base = embedded.secs;
    let mut line = |name: String, secs: f64, bytes: Option<u64>| {
        table.row(vec![
            name,
            rate(pages.len() as f64 / secs),
            format!("{:.1}", logical as f64 / secs / 1e6),
            bytes.map_or("in memory".into(), |b| format!("{} MB", b >> 20)),
            bytes.map_or("—".into(), |b| {
                format!("{:.2}", b as f64 / logical as f64)
            }),
            times(base / secs),
        ]);
    };
    line(sled.store.name(), sled.secs, sled.bytes);
    line(sqlite.store.name(), sqlite.secs, sqlite.bytes);
    line(glue.store.name(), glue.secs, glue.bytes);
    line(mem.store.name(), mem.secs, mem.bytes);
    line(embedded.store.name(), embedded.secs, embedded.bytes);
    line(
        embedded_eventual.store.name(),
        embedded_eventual.secs,
        embedded_eventual.bytes,
    );
    line(insert.store.name(), insert.secs, insert.bytes);
    line(insert_100.store.name(), insert_100.secs, insert_100.bytes);
    line(eventual.store.name(), eventual.secs, eventual.bytes);
    line(import.store.name(), import.secs, import.bytes);
    table.print();
    text_costs(config, pages, insert.secs)?;
    ratios.add(
        "w1.load_embedded_vs_sqlite",
        sqlite.secs / embedded.secs,
        Some(Target::AtLeast(1.0)),
    );
    ratios.add(
        "w1.load_embedded_eventual_vs_sqlite",
        sqlite.secs / embedded_eventual.secs,
        None,
    );
    ratios.add(
        "w1.load_sql_insert_vs_sqlite",
        sqlite.secs / insert.secs,
        Some(Target::AtLeast(0.7)),
    );
    ratios.add(
        "w1.load_sql_insert_100_vs_sqlite",
        sqlite.secs / insert_100.secs,
        None,
    );
    ratios.add(
        "w1.load_sql_insert_100_eventual_vs_sqlite",
        sqlite.secs / eventual.secs,
        None,
    );
    ratios.add(
        "w1.load_sql_import_vs_sqlite",
        sqlite.secs / import.secs,
        Some(Target::AtLeast(0.7)),
    );
    if let (Some(ours), Some(theirs)) = (embedded.bytes, sqlite.bytes) {
        ratios.add(
            "w1.disk_vs_sqlite",
            ours as f64 / theirs as f64,
            Some(Target::AtMost(1.2)),
        );
    }
    drop((insert, eventual, import));
    let sql = WidesqlSql::on(embedded.store.db().clone(), rt.clone(), "pages");
    Ok(Stores {
        sled: sled.store,
        sqlite: sqlite.store,
        glue: glue.store,
        mem: mem.store,
        embedded: embedded.store,
        sql,
    })
}

/// What the `INSERT … VALUES` text costs: building the statements (the
/// benchmark's side), and what parsing them with DataFusion's SQL parser
/// would cost (sqlparser's tokenizer reads each 2 KB string literal
/// character by character), which widesql skips for statements of
/// literals by reading their rows off the text.
fn text_costs(config: &Config, pages: &[Page], load_secs: f64) -> Res<()> {
    let mut statements = Vec::new();
    let build = median_secs(config.reps, || {
        statements = pages
            .chunks(STATEMENT_ROWS)
            .map(|chunk| crate::systems::widesql::insert_sql("pages", chunk))
            .collect();
        Ok(())
    })?;
    let parse = median_secs(config.reps, || {
        for sql in &statements {
            datafusion::sql::parser::DFParserBuilder::new(sql.as_str())
                .build()?
                .parse_statements()?;
        }
        Ok(())
    })?;
    println!(
        "Of widesql SQL's `INSERT … VALUES` load ({}), building the statements' text took {} \
         ({:.0}%). Parsing them with DataFusion's parser would take {} ({:.0}% of the load); \
         widesql reads rows of literals off the text instead.\n",
        duration(load_secs),
        duration(build),
        100.0 * build / load_secs,
        duration(parse),
        100.0 * parse / load_secs
    );
    Ok(())
}

/// Random keys of loaded pages, the same for every system.
fn random_keys(rows: usize, n: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| data::page_key(rng.below(rows))).collect()
}

fn w2_point(config: &Config, pages: &[Page], stores: &mut Stores, ratios: &mut Ratios) -> Res<()> {
    let keys = random_keys(config.rows, config.points, 2);
    w2_shape_table(&stores.sql)?;
    // SQLite with its rows in key order, as widesql keeps them.
    let mut clustered = Sqlite::open_without_rowid(&config.fresh("w2-sqlite-without-rowid")?)?;
    clustered.load(pages)?;
    let mut table = MdTable::new(
        format!(
            "W2 point read of a whole page ({} random keys per run)",
            keys.len()
        ),
        &["system", "µs per read", "vs widesql embedded"],
    );
    let mut figures = Vec::new();
    for system in stores.all() {
        let secs = unless_hung(median_secs(config.reps, || {
            for key in &keys {
                if !system.point(key)? {
                    return Err(format!("{} did not find {key}", system.name()).into());
                }
            }
            Ok(())
        }))? / keys.len() as f64;
        figures.push((system.name(), secs));
    }
    let prepared = median_secs(config.reps, || {
        for key in &keys {
            if !stores.sql.point_prepared(key)? {
                return Err(format!("the prepared point read did not find {key}").into());
            }
        }
        Ok(())
    })? / keys.len() as f64;
    figures.push(("widesql SQL, prepared (`_key = $1`)".into(), prepared));
    let dataframe = median_secs(config.reps, || {
        for key in &keys {
            if !stores.sql.point_dataframe(key)? {
                return Err(format!("Session::sql did not find {key}").into());
            }
        }
        Ok(())
    })? / keys.len() as f64;
    figures.push(("widesql SQL, `Session::sql` → `collect`".into(), dataframe));
    // The floor: `SELECT 1` through each entry point.
    let floor = median_secs(config.reps, || {
        for _ in &keys {
            stores.sql.query("SELECT 1")?;
        }
        Ok(())
    })? / keys.len() as f64;
    figures.push((
        "widesql SQL `SELECT 1`, `Session::sql` → `collect`".into(),
        floor,
    ));
    let floor_run = median_secs(config.reps, || {
        for _ in &keys {
            stores.sql.run("SELECT 1")?;
        }
        Ok(())
    })? / keys.len() as f64;
    figures.push(("widesql SQL `SELECT 1`, `Session::run`".into(), floor_run));
    let select_one = stores.sql.prepare("SELECT 1")?;
    let floor_prepared = median_secs(config.reps, || {
        for _ in &keys {
            stores.sql.prepared_query(&select_one)?;
        }
        Ok(())
    })? / keys.len() as f64;
    figures.push(("widesql SQL `SELECT 1`, prepared".into(), floor_prepared));
    // DataFusion's own floor: a bare `SessionContext`, nothing registered.
    let bare = datafusion::prelude::SessionContext::new();
    let datafusion_floor = median_secs(config.reps, || {
        for _ in &keys {
            config
                .runtime
                .block_on(async { bare.sql("SELECT 1").await?.collect().await })?;
        }
        Ok(())
    })? / keys.len() as f64;
    figures.push((
        "DataFusion `SessionContext` `SELECT 1`".into(),
        datafusion_floor,
    ));
    let clustered_point = median_secs(config.reps, || {
        for key in &keys {
            if !clustered.point(key)? {
                return Err(format!("{} did not find {key}", clustered.name()).into());
            }
        }
        Ok(())
    })? / keys.len() as f64;
    figures.push((clustered.name(), clustered_point));
    let base = figures[4].1;
    for (name, secs) in &figures {
        table.row(vec![name.clone(), duration(*secs), times(secs / base)]);
    }
    table.print();
    println!(
        "widesql SQL runs the statement's text with `Session::run`, which returns rows; \
         `Session::sql` returns a `Frame`, whose `collect()` runs the plan or returns the rows \
         the statement made.\n"
    );
    let sqlite = figures[1].1;
    ratios.add(
        "w2.point_embedded_vs_sqlite",
        figures[4].1 / sqlite,
        Some(Target::AtMost(1.0)),
    );
    ratios.add(
        "w2.point_sql_vs_sqlite",
        figures[5].1 / sqlite,
        Some(Target::AtMost(2.0)),
    );
    ratios.add(
        "w2.point_sql_prepared_vs_sqlite",
        prepared / sqlite,
        Some(Target::AtMost(2.0)),
    );
    ratios.add(
        "w2.point_sql_dataframe_vs_sqlite",
        dataframe / sqlite,
        Some(Target::AtMost(1.0)),
    );
    ratios.add(
        "w2.point_sql_vs_sqlite_without_rowid",
        figures[5].1 / clustered_point,
        None,
    );
    w2_range(config, stores, &mut clustered, ratios)?;
    w2_value_shape(config, stores, keys.len(), ratios)?;
    ratios.add("w2.sql_floor_vs_sqlite", floor / sqlite, None);
    // Microseconds, not a ratio: the floor's target is absolute.
    for (name, secs) in [
        ("w2.sql_floor_micros", floor),
        ("w2.sql_floor_run_micros", floor_run),
        ("w2.sql_floor_prepared_micros", floor_prepared),
    ] {
        ratios.add(name, secs * 1e6, Some(Target::AtMost(30.0)));
    }
    ratios.add("w2.sql_floor_vs_datafusion", floor / datafusion_floor, None);
    Ok(())
}

/// The rows of W2's small table for a repeated shape with a value.
const SHAPE_ROWS: i64 = 16;

/// W2's repeated statement shape with a value that is not a key: `WHERE n
/// = …` over a table of [`SHAPE_ROWS`] rows, a new value each time,
/// through every entry point, next to the same scan without a value (a
/// shape whose physical plan is kept). Their difference is what the value
/// costs above the statement's work.
/// Makes W2's small table before any system of the run reads: a hung
/// GlueSQL, abandoned in sled, can stall every sled database of the
/// process, and widesql's writes with it (its stall guard then refuses
/// them).
fn w2_shape_table(sql: &WidesqlSql) -> Res<()> {
    sql.query("CREATE TABLE shapes (_key VARCHAR PRIMARY KEY, n BIGINT)")?;
    let rows: Vec<String> = (0..SHAPE_ROWS)
        .map(|n| format!("('k{n:02}', {n})"))
        .collect();
    sql.query(&format!("INSERT INTO shapes VALUES {}", rows.join(", ")))?;
    Ok(())
}

fn w2_value_shape(
    config: &Config,
    stores: &mut Stores,
    statements: usize,
    ratios: &mut Ratios,
) -> Res<()> {
    let sql = &mut stores.sql;
    let mut table = MdTable::new(
        format!(
            "W2 repeated shape with a value (`SELECT _key FROM shapes WHERE n = …`, \
             {SHAPE_ROWS} rows, {statements} statements per run)"
        ),
        &[
            "entry point",
            "µs per statement",
            "above the scan without a value",
        ],
    );
    let check = |batches: Vec<RecordBatch>, want: usize| -> Res<()> {
        match row_count(&batches) == want {
            true => Ok(()),
            false => Err(format!("the shape's statement did not return {want} row(s)").into()),
        }
    };
    let value = |i: usize| i as i64 % SHAPE_ROWS;
    let scan = median_secs(config.reps, || {
        for _ in 0..statements {
            check(sql.run("SELECT _key FROM shapes")?, SHAPE_ROWS as usize)?;
        }
        Ok(())
    })? / statements as f64;
    let run = median_secs(config.reps, || {
        for i in 0..statements {
            check(
                sql.run(&format!("SELECT _key FROM shapes WHERE n = {}", value(i)))?,
                1,
            )?;
        }
        Ok(())
    })? / statements as f64;
    let dataframe = median_secs(config.reps, || {
        for i in 0..statements {
            check(
                sql.query(&format!("SELECT _key FROM shapes WHERE n = {}", value(i)))?,
                1,
            )?;
        }
        Ok(())
    })? / statements as f64;
    let prepared_statement = sql.prepare("SELECT _key FROM shapes WHERE n = $1")?;
    let prepared = median_secs(config.reps, || {
        for i in 0..statements {
            let params = vec![value(i).into()];
            check(
                config.runtime.block_on(prepared_statement.query(params))?,
                1,
            )?;
        }
        Ok(())
    })? / statements as f64;
    let figures = [
        (
            "the scan without a value (`SELECT _key FROM shapes`), `Session::run`",
            scan,
        ),
        ("`Session::run`", run),
        ("`Session::sql` → `collect`", dataframe),
        ("prepared (`n = $1`)", prepared),
    ];
    for (name, secs) in figures {
        table.row(vec![
            name.to_string(),
            duration(secs),
            format!("{:.1} µs", (secs - scan) * 1e6),
        ]);
    }
    table.print();
    // Microseconds above the scan: the target is absolute.
    for (name, secs) in [
        ("w2.value_shape_run_micros", run),
        ("w2.value_shape_dataframe_micros", dataframe),
        ("w2.value_shape_prepared_micros", prepared),
    ] {
        ratios.add(name, (secs - scan) * 1e6, Some(Target::AtMost(30.0)));
    }
    Ok(())
}

/// W2's ~100-row key range (one domain's key and language), through every
/// entry point: the same statement ad hoc with `Session::run` and with
/// `Session::sql` → `collect`, and prepared.
fn w2_range(
    config: &Config,
    stores: &mut Stores,
    clustered: &mut Sqlite,
    ratios: &mut Ratios,
) -> Res<()> {
    let mut table = MdTable::new(
        "W2 ~100-row key range (one domain, key and language)",
        &["system", "µs per range", "vs SQLite"],
    );
    let mut figures = Vec::new();
    let systems: [&mut dyn System; 3] = [&mut stores.sqlite, clustered, &mut stores.embedded];
    for system in systems {
        let secs = unless_hung(time_ranges(config, system, config.rows))?;
        figures.push((system.name(), secs));
    }
    let run = time_ranges(config, &mut stores.sql, config.rows)?;
    figures.push(("widesql SQL, `Session::run`".into(), run));
    let sql = &mut stores.sql;
    let name = "widesql SQL, `Session::sql` → `collect`";
    let dataframe = time_range_reads(config, name, config.rows, |p| sql.range_dataframe(p))?;
    figures.push((name.into(), dataframe));
    let name = "widesql SQL, prepared (`_key >= $1 AND _key < $2`)";
    let prepared = time_range_reads(config, name, config.rows, |p| sql.range_prepared(p))?;
    figures.push((name.into(), prepared));
    let sqlite = figures[0].1;
    for (name, secs) in &figures {
        table.row(vec![name.clone(), duration(*secs), times(secs / sqlite)]);
    }
    table.print();
    ratios.add(
        "w2.range_run_vs_sqlite",
        run / sqlite,
        Some(Target::AtMost(1.0)),
    );
    ratios.add(
        "w2.range_dataframe_vs_sqlite",
        dataframe / sqlite,
        Some(Target::AtMost(1.0)),
    );
    ratios.add(
        "w2.range_prepared_vs_sqlite",
        prepared / sqlite,
        Some(Target::AtMost(1.0)),
    );
    Ok(())
}

/// Median seconds of one range read over `ranges` domains, checking that
/// each holds a full domain.
pub(crate) fn time_ranges(config: &Config, system: &mut dyn System, rows: usize) -> Res<f64> {
    let name = system.name();
    time_range_reads(config, &name, rows, |prefix| system.range(prefix))
}

/// [`time_ranges`] of the range read `read` (of what `name` names).
fn time_range_reads(
    config: &Config,
    name: &str,
    rows: usize,
    mut read: impl FnMut(&str) -> Res<usize>,
) -> Res<f64> {
    let domains = (rows / data::PAGES_PER_DOMAIN).max(1);
    let mut rng = Rng::new(3);
    let prefixes: Vec<String> = (0..config.ranges)
        .map(|_| data::domain_prefix(rng.below(domains)))
        .collect();
    let expected = data::PAGES_PER_DOMAIN.min(rows);
    Ok(median_secs(config.reps, || {
        for prefix in &prefixes {
            let n = read(prefix)?;
            if n != expected {
                return Err(
                    format!("{name} found {n} pages under {prefix}, not {expected}").into(),
                );
            }
        }
        Ok(())
    })? / prefixes.len() as f64)
}

fn w3_range(config: &Config, stores: &mut Stores, ratios: &mut Ratios) -> Res<()> {
    let big_rows = config.rows * 10;
    let (cache, rt) = (config.cache_bytes, &config.runtime);
    let mut at_n = Vec::new();
    for system in stores.all() {
        let secs = unless_hung(time_ranges(config, system, config.rows))?;
        at_n.push((system.name(), secs));
    }
    // Ten times the rows, loaded once per system in slices (the pages of a
    // large run do not fit in memory at once).
    let mut sled = RawSled::open(&config.fresh("w3-sled")?, cache)?;
    let mut sqlite = Sqlite::open(&config.fresh("w3-sqlite")?)?;
    let mut glue = GlueSql::open(&config.fresh("w3-glue")?)?;
    let mut mem = DataFusionMem::new(rt.clone());
    let mut embedded = WidesqlEmbedded::open(&config.fresh("w3-widesql")?, cache, rt.clone())?;
    for start in (0..big_rows).step_by(50_000) {
        let slice: Vec<Page> = (start..(start + 50_000).min(big_rows))
            .map(data::page)
            .collect();
        let systems: [&mut dyn System; 5] =
            [&mut sled, &mut sqlite, &mut glue, &mut mem, &mut embedded];
        for system in systems {
            match system.load(&slice) {
                Err(e) if e.is::<Hung>() => {}
                other => other?,
            }
        }
    }
    let sql = WidesqlSql::on(embedded.db().clone(), rt.clone(), "pages");
    let mut big = Stores {
        sled,
        sqlite,
        glue,
        mem,
        embedded,
        sql,
    };
    let mut table = MdTable::new(
        format!(
            "W3 range read of one domain (~100 pages, key and language) at {} and {big_rows} rows",
            config.rows
        ),
        &[
            "system",
            &format!("at {}", config.rows),
            &format!("at {big_rows}"),
            "growth",
            "vs widesql SQL at N",
        ],
    );
    let mut at_10n = Vec::new();
    for system in big.all() {
        at_10n.push(unless_hung(time_ranges(config, system, big_rows))?);
    }
    let base = at_n[5].1;
    for ((name, n), ten) in at_n.iter().zip(&at_10n) {
        table.row(vec![
            name.clone(),
            duration(*n),
            duration(*ten),
            times(ten / n),
            times(n / base),
        ]);
    }
    table.print();
    let sqlite = at_n[1].1;
    ratios.add(
        "w3.range_embedded_vs_sqlite",
        at_n[4].1 / sqlite,
        Some(Target::AtMost(1.0)),
    );
    ratios.add(
        "w3.range_sql_vs_sqlite",
        at_n[5].1 / sqlite,
        Some(Target::AtMost(1.0)),
    );
    ratios.add(
        "w3.range_sql_growth_10x",
        at_10n[5] / at_n[5].1,
        Some(Target::AtMost(1.3)),
    );
    ratios.add(
        "w3.glue_vs_sql",
        at_n[2].1 / at_n[5].1,
        Some(Target::AtLeast(50.0)),
    );
    Ok(())
}

fn w4_groups(config: &Config, pages: &[Page], stores: &mut Stores, ratios: &mut Ratios) -> Res<()> {
    let (cache, rt) = (config.cache_bytes, &config.runtime);
    // The same pages with `contents` in the default group.
    let one_group_dir = config.fresh("w4-one-group")?;
    let mut one_group = WidesqlSql::open(
        &one_group_dir,
        cache,
        rt.clone(),
        "pages",
        false,
        Load::InsertValues(STATEMENT_ROWS),
    )?;
    bulk_load(one_group.db(), pages)?;
    let mut table = MdTable::new(
        "W4 pages per language (GROUP BY) over the whole table",
        &["system", "time", "vs widesql SQL"],
    );
    let mut clustered = Sqlite::open_without_rowid(&config.fresh("w4-sqlite-without-rowid")?)?;
    clustered.load(pages)?;
    let mut all: Vec<&mut dyn System> = stores.all().into_iter().collect();
    all.push(&mut one_group);
    all.push(&mut clustered);
    let mut figures = time_agreeing(config.reps, all, "pages per language", |s| s.per_language())?;
    figures[6].0 = "widesql SQL, contents in the default group".into();
    let base = figures[5].1;
    for (name, secs) in &figures {
        table.row(vec![name.clone(), duration(*secs), times(secs / base)]);
    }
    table.print();
    ratios.add(
        "w4.one_group_vs_groups",
        figures[6].1 / figures[5].1,
        Some(Target::AtLeast(5.0)),
    );
    ratios.add(
        "w4.groups_vs_sqlite",
        figures[5].1 / figures[1].1,
        Some(Target::AtMost(1.0)),
    );
    ratios.add(
        "w4.groups_vs_sqlite_without_rowid",
        figures[5].1 / figures[7].1,
        Some(Target::AtMost(1.0)),
    );
    drop(one_group);
    w4_cold(config, pages, stores, &one_group_dir, ratios)
}

/// W4 with cold caches, what a locality group is for: each repetition
/// opens the database again (an empty cache of its own) and drops its
/// files from the operating system's page cache, so the query reads from
/// the disk the pages it needs. The table prints the bytes read: sled
/// writes every tree's pages into one log in the order they are flushed,
/// so a group's pages lie between the other groups' pages on disk. A third
/// database holds the same pages without their contents: what the query
/// would read at best if each locality group had a file of its own.
fn w4_cold(
    config: &Config,
    pages: &[Page],
    stores: &mut Stores,
    one_group_dir: &Path,
    ratios: &mut Ratios,
) -> Res<()> {
    let expected = stores.sql.per_language()?;
    // W1's widesql store stays open for the workloads after this one: the
    // same table again, in a database this workload may close.
    // A new database of `pages` with `contents` in its own group, closed.
    let load_closed = |name: &str, pages: &[Page]| -> Res<PathBuf> {
        let dir = config.fresh(name)?;
        let db = WidesqlSql::open(
            &dir,
            config.cache_bytes,
            config.runtime.clone(),
            "pages",
            true,
            Load::InsertValues(STATEMENT_ROWS),
        )?;
        bulk_load(db.db(), pages)?;
        Ok(dir)
    };
    let groups_dir = load_closed("w4-groups", pages)?;
    let without_contents: Vec<Page> = pages
        .iter()
        .map(|p| Page {
            contents: String::new(),
            ..p.clone()
        })
        .collect();
    let small_dir = load_closed("w4-without-contents", &without_contents)?;
    drop(without_contents);
    // The seconds of one cold query and the bytes it had read from disk.
    let cold_answer = |system: &mut dyn System, read: &mut Vec<u64>| -> Res<f64> {
        let (start, bytes_before) = (Instant::now(), disk_read_bytes());
        let answer = system.per_language()?;
        let secs = start.elapsed().as_secs_f64();
        if let (Some(before), Some(after)) = (bytes_before, disk_read_bytes()) {
            read.push(after - before);
        }
        if answer != expected {
            return Err(format!(
                "{}: {answer:?} pages per language, not {expected:?}",
                system.name()
            )
            .into());
        }
        Ok(secs)
    };
    let widesql_cold = |dir: &Path, read: &mut Vec<u64>| {
        median_of(config.reps, || {
            let db = open_db(dir, config.cache_bytes)?;
            let mut sql = WidesqlSql::on(db, config.runtime.clone(), "pages");
            evict_from_page_cache(dir)?;
            cold_answer(&mut sql, read)
        })
    };
    let mut read = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    let groups = widesql_cold(&groups_dir, &mut read[1])?;
    let one_group = widesql_cold(one_group_dir, &mut read[2])?;
    let small = widesql_cold(&small_dir, &mut read[3])?;
    let sqlite_file = stores.sqlite.path().to_path_buf();
    let sqlite = median_of(config.reps, || {
        let mut sqlite = Sqlite::connect(&sqlite_file)?;
        evict_from_page_cache(
            sqlite_file
                .parent()
                .ok_or("the SQLite file has no folder")?,
        )?;
        cold_answer(&mut sqlite, &mut read[0])
    })?;
    let mut table = MdTable::new(
        "W4 with cold caches: each run on a database just opened, its files dropped from the OS page cache",
        &["system", "time", "read from disk", "vs widesql SQL"],
    );
    let names = [
        "SQLite",
        "widesql SQL",
        "widesql SQL, contents in the default group",
        "widesql SQL, the pages without contents (a file per group, at best)",
    ];
    let figures = [sqlite, groups, one_group, small];
    for ((name, secs), read) in names.into_iter().zip(figures).zip(read) {
        let read = match median(read.iter().map(|&b| b as f64).collect()) {
            bytes if bytes.is_nan() => "—".to_string(),
            bytes => format!("{} MB", bytes as u64 >> 20),
        };
        table.row(vec![
            name.into(),
            duration(secs),
            read,
            times(secs / groups),
        ]);
    }
    table.print();
    ratios.add(
        "w4.cold_one_group_vs_groups",
        one_group / groups,
        Some(Target::AtLeast(5.0)),
    );
    ratios.add("w4.cold_groups_vs_sqlite", groups / sqlite, None);
    ratios.add(
        "w4.cold_one_group_vs_without_contents",
        one_group / small,
        None,
    );
    Ok(())
}

/// The median seconds of `op` on each system, checking that every system
/// gives the first one's answer.
fn time_agreeing<'a, T: PartialEq + std::fmt::Debug>(
    reps: usize,
    systems: impl IntoIterator<Item = &'a mut dyn System>,
    what: &str,
    mut op: impl FnMut(&mut dyn System) -> Res<T>,
) -> Res<Vec<(String, f64)>> {
    let mut figures = Vec::new();
    let mut expected: Option<T> = None;
    for system in systems {
        let mut answer = None;
        let secs = unless_hung(median_secs(reps, || {
            answer = Some(op(&mut *system)?);
            Ok(())
        }))?;
        match (&expected, answer) {
            (None, answer) => expected = answer,
            (Some(e), Some(a)) if *e != a => {
                return Err(format!("{}: {what} is {a:?}, others say {e:?}", system.name()).into())
            }
            _ => {}
        }
        figures.push((system.name(), secs));
    }
    Ok(figures)
}

fn w5_scan(config: &Config, stores: &mut Stores, ratios: &mut Ratios) -> Res<()> {
    let mut table = MdTable::new(
        "W5 full scan: sum of a BIGINT column",
        &["system", "time", "rows/s", "vs widesql SQL"],
    );
    let figures = time_agreeing(config.reps, stores.all(), "sum of rank", |s| s.sum_rank())?;
    let base = figures[5].1;
    for (name, secs) in &figures {
        table.row(vec![
            name.clone(),
            duration(*secs),
            rate(config.rows as f64 / secs),
            times(secs / base),
        ]);
    }
    table.print();
    ratios.add(
        "w5.sql_vs_raw_sled",
        figures[0].1 / figures[5].1,
        Some(Target::AtLeast(0.7)),
    );
    ratios.add(
        "w5.embedded_vs_raw_sled",
        figures[0].1 / figures[4].1,
        Some(Target::AtLeast(0.7)),
    );
    Ok(())
}

/// Runs `read` `reps` times and checks that it returned `expected` values.
fn versions_read(
    reps: usize,
    expected: usize,
    what: &str,
    mut read: impl FnMut() -> Res<usize>,
) -> Res<String> {
    let secs = median_secs(reps, || {
        let n = read()?;
        if n == expected {
            Ok(())
        } else {
            Err(format!("{what}: {n} versions, not {expected}").into())
        }
    })?;
    Ok(duration(secs))
}

fn w6_versions(config: &Config) -> Res<()> {
    let n = config.versions;
    let (cache, rt) = (config.cache_bytes, &config.runtime);
    let reps = config.reps;
    let mut table = MdTable::new(
        format!("W6 one cell with {n} versions"),
        &["system", "latest", "latest 10", "all versions"],
    );
    // widesql
    let sql = WidesqlSql::open(
        &config.fresh("w6-widesql")?,
        cache,
        rt.clone(),
        "pages",
        true,
        Load::InsertValues(STATEMENT_ROWS),
    )?;
    sql.query("CREATE TABLE versions (_key VARCHAR PRIMARY KEY, v BIGINT) WITH ('cf.max_versions' = '1000000')")?;
    let versions = sql.db().open_table("default", "public", "versions")?;
    versions.bulk_mutate((0..n).map(|i| {
        (
            "k",
            RowMutation::new().set_at("cf", "v", i as i64 + 1, (i as i64).to_be_bytes()),
        )
    }))?;
    sql.db().flush()?;
    let cells = |filter: Filter| -> Res<usize> {
        Ok(versions
            .read_row(b"k", &filter)?
            .map_or(0, |r| r.cells.len()))
    };
    table.row(vec![
        "widesql embedded".into(),
        versions_read(reps, 1, "embedded latest", || {
            cells(Filter::all().with_latest_versions(1))
        })?,
        versions_read(reps, 10, "embedded latest 10", || {
            cells(Filter::all().with_latest_versions(10))
        })?,
        versions_read(reps, n, "embedded history", || cells(Filter::all()))?,
    ]);
    let rows =
        |q: &str| -> Res<usize> { Ok(crate::systems::datafusion_mem::row_count(&sql.query(q)?)) };
    table.row(vec![
        "widesql SQL".into(),
        versions_read(reps, 1, "SQL latest", || rows("SELECT v FROM versions WHERE _key = 'k'"))?,
        versions_read(reps, 10, "SQL latest 10", || {
            rows("SELECT value FROM cells('versions') WHERE _key = 'k' ORDER BY _timestamp DESC LIMIT 10")
        })?,
        versions_read(reps, n, "SQL history", || rows("SELECT value FROM cells('versions') WHERE _key = 'k'"))?,
    ]);
    // raw sled: the same keys, newest first.
    let sled = RawSled::open(&config.fresh("w6-sled")?, cache)?;
    let tree = sled.db().open_tree("versions")?;
    let mut batch = sled::Batch::default();
    for i in 0..n {
        batch.insert(
            widesql::internals::CellKey::encode(&[], b"k", 0, b"v", i as i64 + 1)?,
            &(i as i64).to_be_bytes()[..],
        );
    }
    tree.apply_batch(batch)?;
    let mut prefix = Vec::new();
    widesql::internals::put_bytes(&mut prefix, b"k");
    let scan = |take: usize| -> Res<usize> {
        let mut n = 0;
        for item in tree.scan_prefix(&prefix).take(take) {
            item?;
            n += 1;
        }
        Ok(n)
    };
    table.row(vec![
        "raw sled".into(),
        versions_read(reps, 1, "sled latest", || scan(1))?,
        versions_read(reps, 10, "sled latest 10", || scan(10))?,
        versions_read(reps, n, "sled history", || scan(usize::MAX))?,
    ]);
    // SQLite: (key, ts) primary key.
    let sqlite = Sqlite::open(&config.fresh("w6-sqlite")?)?;
    let conn = sqlite.conn();
    conn.execute_batch("CREATE TABLE versions (key TEXT, ts INTEGER, value INTEGER, PRIMARY KEY (key, ts)) WITHOUT ROWID")?;
    conn.execute_batch("BEGIN")?;
    {
        let mut insert = conn.prepare("INSERT INTO versions VALUES ('k', ?1, ?2)")?;
        for i in 0..n {
            insert.execute(rusqlite::params![i as i64 + 1, i as i64])?;
        }
    }
    conn.execute_batch("COMMIT")?;
    let query = |limit: i64| -> Res<usize> {
        let mut statement = conn.prepare_cached(
            "SELECT value FROM versions WHERE key = 'k' ORDER BY ts DESC LIMIT ?1",
        )?;
        let mut rows = statement.query([limit])?;
        let mut n = 0;
        while rows.next()?.is_some() {
            n += 1;
        }
        Ok(n)
    };
    table.row(vec![
        "SQLite".into(),
        versions_read(reps, 1, "SQLite latest", || query(1))?,
        versions_read(reps, 10, "SQLite latest 10", || query(10))?,
        versions_read(reps, n, "SQLite history", || query(-1))?,
    ]);
    table.print();
    Ok(())
}

fn w8_durability(config: &Config) -> Res<()> {
    let n = config.durable_statements;
    let (cache, rt) = (config.cache_bytes, &config.runtime);
    let pages = data::pages(n * 100);
    let mut table = MdTable::new(
        format!("W8 what durability costs ({n} writes each)"),
        &[
            "system",
            "write",
            "durability",
            "µs per write",
            "µs per row",
        ],
    );
    let per = |secs: f64, count: usize| format!("{:.1}", secs / count as f64 * 1e6);
    // widesql: one-row SQL statements, then 100-row statements.
    let sql = WidesqlSql::open(
        &config.fresh("w8-widesql")?,
        cache,
        rt.clone(),
        "pages",
        true,
        Load::InsertValues(STATEMENT_ROWS),
    )?;
    let db = sql.db().clone();
    let statement = |rows: usize, i: usize| {
        crate::systems::widesql::insert_sql("pages", &pages[i * rows..(i + 1) * rows])
    };
    let table_handle = db.open_table("default", "public", "pages")?;
    // Each setting writes its own slice of the pages: n one-row statements,
    // n/10 statements of 100 rows, n row mutations.
    let batches = (n / 10).max(1);
    for (k, (setting, name, label)) in [
        (
            Durability::Eventual,
            "eventual",
            "eventual (flushed within 500 ms)",
        ),
        (
            Durability::Immediate,
            "immediate",
            "immediate (the default)",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        sql.query(&format!("SET widesql.durability = '{name}'"))?;
        let start = Instant::now();
        for i in 0..n {
            sql.query(&statement(1, k * n + i))?;
        }
        let secs = start.elapsed().as_secs_f64();
        table.row(vec![
            "widesql SQL".into(),
            "INSERT of 1 row".into(),
            label.into(),
            per(secs, n),
            per(secs, n),
        ]);
        let start = Instant::now();
        for i in 0..batches {
            sql.query(&statement(100, (2 + k) * batches + i))?;
        }
        let secs = start.elapsed().as_secs_f64();
        table.row(vec![
            "widesql SQL".into(),
            "INSERT of 100 rows".into(),
            label.into(),
            per(secs, batches),
            per(secs, batches * 100),
        ]);
        let handle = table_handle.with_durability(setting);
        let start = Instant::now();
        for p in &pages[k * n..(k + 1) * n] {
            handle.mutate_row(
                format!("w8/{}", p.key).as_bytes(),
                &crate::systems::widesql::page_mutation(p),
            )?;
        }
        let secs = start.elapsed().as_secs_f64();
        table.row(vec![
            "widesql embedded".into(),
            "mutate_row".into(),
            label.into(),
            per(secs, n),
            per(secs, n),
        ]);
    }
    // SQLite: a one-row transaction under each synchronous setting.
    let sqlite = Sqlite::open(&config.fresh("w8-sqlite")?)?;
    for (k, setting) in ["OFF", "NORMAL", "FULL"].into_iter().enumerate() {
        sqlite.conn().pragma_update(None, "synchronous", setting)?;
        let mut insert = sqlite.conn().prepare(
            "INSERT INTO pages (key, language, checksum, rank, contents) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        let start = Instant::now();
        for p in &pages[k * n..(k + 1) * n] {
            crate::systems::sqlite::insert_page(&mut insert, p)?;
        }
        let secs = start.elapsed().as_secs_f64();
        table.row(vec![
            "SQLite (WAL)".into(),
            "INSERT of 1 row".into(),
            format!("synchronous = {setting}"),
            per(secs, n),
            per(secs, n),
        ]);
    }
    // raw sled
    let sled = RawSled::open(&config.fresh("w8-sled")?, cache)?;
    let tree = sled.db().open_tree("small")?;
    for (flush, label) in [(false, "background (≤ 500 ms)"), (true, "flush after each")] {
        let start = Instant::now();
        for (i, p) in pages[..n].iter().enumerate() {
            tree.insert(
                cell_key(&format!("{flush}{i}"), 2, b"contents")?,
                p.contents.as_bytes(),
            )?;
            if flush {
                sled.db().flush()?;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        table.row(vec![
            "raw sled".into(),
            "insert".into(),
            label.into(),
            per(secs, n),
            per(secs, n),
        ]);
    }
    table.print();
    Ok(())
}

/// W9: memory of full scans, an export and an import, and an UPDATE and a
/// DELETE of every row, of tables about ten times the cache: one of 2 KiB
/// values and one of 256 KiB values. Each table is written and closed, and
/// each step runs in a process of its own (this program, `--w9-step`), whose
/// peak resident memory is the figure: in one process the allocator keeps
/// what earlier steps freed, and a later step's growth hides in it.
fn w9_scan_memory(config: &Config) -> Res<()> {
    let rows = config.scan_memory_rows;
    for (rows, value_bytes) in [(rows, 2048), ((rows / 80).max(10), 256 << 10)] {
        w9_table(config, rows, value_bytes)?;
    }
    Ok(())
}

/// The page cache every W9 step opens its database with.
const W9_CACHE: u64 = 16 << 20;

/// The W9 steps, each run by [`w9_step`] in a process of its own.
const W9_STEPS: [(&str, &str); 8] = [
    (
        "open",
        "widesql: open the database, nothing else (the floor)",
    ),
    (
        "raw_sled_scan",
        "raw sled: iterate every entry of the same database",
    ),
    ("sql_scan", "widesql SQL: SELECT sum(n), sum(length(blob))"),
    (
        "embedded_scan",
        "widesql embedded: read_rows over every row",
    ),
    ("export", "widesql export to Parquet"),
    ("import", "widesql import of that file into a new table"),
    ("update", "widesql SQL: UPDATE big SET n = n + 1"),
    ("delete", "widesql SQL: DELETE FROM big"),
];

fn w9_table(config: &Config, rows: usize, value_bytes: usize) -> Res<()> {
    let path = config.fresh(&format!("w9-widesql-{value_bytes}"))?;
    let rt = &config.runtime;
    let on_disk = {
        let db = crate::systems::widesql::open_db(&path, W9_CACHE)?;
        let sql = WidesqlSql::on(db.clone(), rt.clone(), "big");
        sql.query("CREATE TABLE big (_key VARCHAR PRIMARY KEY, n BIGINT, blob VARCHAR)")?;
        sql.query("SET widesql.durability = 'eventual'")?;
        let step = (20 << 20) / value_bytes.max(1);
        for start in (0..rows).step_by(step.max(1)) {
            let end = (start + step).min(rows);
            sql.query(&format!(
                "INSERT INTO big SELECT concat('k', lpad(CAST(value AS VARCHAR), 9, '0')), value, \
                 repeat('x', {value_bytes}) FROM generate_series({start}, {}) AS s(value)",
                end - 1
            ))?;
        }
        db.flush()?;
        db.size_on_disk()?
    };
    let mut table = MdTable::new(
        format!(
            "W9 full scans, export, import, UPDATE and DELETE of {rows} rows of {} KiB values ({} MiB on disk) with a {} MiB cache, each in a process of its own",
            value_bytes >> 10,
            on_disk >> 20,
            W9_CACHE >> 20
        ),
        &["step", "time", "rows/s", "peak RSS of the process"],
    );
    for (step, label) in W9_STEPS {
        let exe = std::env::current_exe()?;
        let out = std::process::Command::new(exe)
            .args(["--w9-step", step, "--w9-rows", &rows.to_string(), "--w9-db"])
            .arg(&path)
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find_map(|l| l.strip_prefix("w9-step "));
        let parsed = line.and_then(|l| {
            let mut parts = l.split_whitespace().map(str::parse::<f64>);
            Some((parts.next()?.ok()?, parts.next()?.ok()?))
        });
        let Some((secs, peak_kib)) = parsed.filter(|_| out.status.success()) else {
            return Err(format!(
                "W9 step {step} failed: {}{}",
                text,
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        };
        let (time, per_second) = match step {
            "open" => ("—".to_string(), "—".to_string()),
            _ => (duration(secs), rate(rows as f64 / secs)),
        };
        table.row(vec![
            label.into(),
            time,
            per_second,
            format!("{} MiB", peak_kib as u64 / 1024),
        ]);
    }
    table.print();
    Ok(())
}

/// `open()`, tried again for up to 10 s: the W9 step before lets go of the
/// directory shortly after its process ends.
fn open_when_free<T>(mut open: impl FnMut() -> Res<T>) -> Res<T> {
    let mut opened = open();
    for _ in 0..100 {
        if opened.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        opened = open();
    }
    opened
}

/// The W9 step that reads the database's entries with sled alone (same
/// cache): the memory sled itself takes to scan these entries, which
/// follows their size (`docs/design.md`, format 4).
fn w9_raw_sled_scan(dir: &std::path::Path, rows: usize) -> Res<()> {
    let db = open_when_free(|| {
        Ok(sled::Config::new()
            .path(dir)
            .cache_capacity(W9_CACHE)
            .open()?)
    })?;
    let start = Instant::now();
    let mut bytes = 0u64;
    for name in db.tree_names() {
        for entry in db.open_tree(name)?.iter() {
            let (key, value) = entry?;
            bytes += (key.len() + value.len()) as u64;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // Every row's value is stored: the entries hold at least that.
    if bytes < rows as u64 {
        return Err(format!("W9: sled read {bytes} bytes for {rows} rows").into());
    }
    println!("w9-step {secs} {}", rss_kib("VmHWM:").unwrap_or(0));
    Ok(())
}

/// One W9 step on the database in `dir` holding `rows` rows (run in a
/// process of its own by [`w9_table`]): prints `w9-step SECONDS PEAK_KIB`.
pub fn w9_step(step: &str, dir: &std::path::Path, rows: usize) -> Res<()> {
    if step == "raw_sled_scan" {
        return w9_raw_sled_scan(dir, rows);
    }
    let runtime = Arc::new(tokio::runtime::Runtime::new()?);
    let db = open_when_free(|| crate::systems::widesql::open_db(dir, W9_CACHE))?;
    let sql = WidesqlSql::on(db.clone(), runtime.clone(), "big");
    let session = db.session();
    let parquet = dir.with_extension("parquet");
    let start = Instant::now();
    match step {
        "open" => {}
        "sql_scan" => {
            let expected = rows as i64 * (rows as i64 - 1) / 2;
            let batches = sql.query("SELECT sum(n) AS s, sum(length(blob)) AS b FROM big")?;
            let sum = batches
                .first()
                .and_then(|b| {
                    b.column(0)
                        .as_any()
                        .downcast_ref::<datafusion::arrow::array::Int64Array>()
                })
                .map(|a| a.value(0));
            if sum != Some(expected) {
                return Err(format!("W9: sum {sum:?}, not {expected}").into());
            }
        }
        "embedded_scan" => {
            let big = db.open_table("default", "public", "big")?;
            let mut count = 0;
            for row in big.read_rows(&widesql::RowSet::all(), widesql::ReadOptions::new())? {
                row?;
                count += 1;
            }
            if count != rows {
                return Err(format!("W9: {count} rows, not {rows}").into());
            }
        }
        "export" => {
            let done = runtime.block_on(session.export(
                "SELECT * FROM big",
                &parquet,
                widesql::FileFormat::Parquet,
                widesql::export::ExportOptions::default(),
                |_| {},
            ))?;
            if done.rows != rows as u64 {
                return Err(format!("W9: exported {} rows, not {rows}", done.rows).into());
            }
        }
        "import" => {
            let options = widesql::import::ImportOptions {
                create: true,
                ..Default::default()
            };
            let imported =
                runtime.block_on(session.import("big_copy", &parquet, options, |_| {}))?;
            std::fs::remove_file(&parquet)?;
            if imported != rows as u64 {
                return Err(format!("W9: imported {imported} rows, not {rows}").into());
            }
        }
        "update" | "delete" => {
            let statement = match step {
                "update" => "UPDATE big SET n = n + 1",
                _ => "DELETE FROM big",
            };
            let batches = sql.query(statement)?;
            let changed = batches
                .first()
                .and_then(|b| {
                    b.column(0)
                        .as_any()
                        .downcast_ref::<datafusion::arrow::array::UInt64Array>()
                })
                .map(|a| a.value(0));
            if changed != Some(rows as u64) {
                return Err(format!("W9: {statement} changed {changed:?} rows, not {rows}").into());
            }
        }
        other => return Err(format!("no W9 step '{other}'").into()),
    }
    let secs = start.elapsed().as_secs_f64();
    println!("w9-step {secs} {}", rss_kib("VmHWM:").unwrap_or(0));
    Ok(())
}

/// W11: what planning a long arithmetic chain costs (`c + c + … + c` in a
/// projection), on integers, whose operators widesql checks for overflow,
/// and on doubles, which DataFusion plans alone. Naming each level of a
/// checked chain once made it grow with the cube of the terms.
fn w11_long_expressions(config: &Config) -> Res<()> {
    let db = widesql::Db::open(config.fresh("w11")?)?;
    let session = db.session();
    let rt = &config.runtime;
    rt.block_on(session.run(
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, i BIGINT, d DOUBLE); \
         INSERT INTO t VALUES ('a', 1, 1.0)",
    ))?;
    let mut table = MdTable::new(
        "W11 planning and running `SELECT c + c + … + c FROM t` (one row)",
        &["terms", "BIGINT (checked)", "DOUBLE"],
    );
    // Each run is named apart, so that none is the plan cache's. Planned
    // on a thread with the stack of the CLI's and the server's threads
    // (64 MiB): 800 levels are more than the main thread's 8 MiB allow.
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn_scoped(scope, || -> Res<()> {
                let mut run = 0;
                for terms in [100, 200, 400, 800] {
                    let mut cells = vec![terms.to_string()];
                    for column in ["i", "d"] {
                        let chain = vec![column; terms].join(" + ");
                        let secs = median_secs(config.reps.min(3), || {
                            run += 1;
                            let sql = format!("SELECT {chain} AS run{run} FROM t");
                            rt.block_on(async { session.sql(&sql).await?.collect().await })?;
                            Ok(())
                        })?;
                        cells.push(format!("{:.1} ms", secs * 1e3));
                    }
                    table.row(cells);
                }
                Ok(())
            })?;
        thread.join().map_err(|_| "W11's thread panicked")?
    })?;
    table.print();
    deepest_statements(config, &db)
}

/// A chain of one kind `n` levels deep over the table of W11, and the
/// value its one row answers.
type Chain = fn(usize) -> (String, String);

/// The chains a statement can nest deepest with, one level each (a chain
/// of casts takes the most stack a level of those measured).
const CHAINS: [(&str, Chain); 6] = [
    ("a sum", |n| {
        let sql = format!("SELECT {} FROM t", vec!["i"; n].join(" + "));
        (sql, n.to_string())
    }),
    ("an OR of equalities", |n| {
        let mut terms = vec!["i = 2"; n];
        terms.push("i = 1");
        let sql = format!("SELECT count(*) FROM t WHERE {}", terms.join(" OR "));
        (sql, "1".into())
    }),
    ("an IS NULL chain", |n| {
        let sql = format!("SELECT i{} FROM t", " IS NULL".repeat(n));
        (sql, "false".into())
    }),
    ("a chain of UNION ALL", |n| {
        let sql = format!(
            "SELECT count(*) FROM (SELECT 1 AS a{})",
            " UNION ALL SELECT 1".repeat(n)
        );
        (sql, (n + 1).to_string())
    }),
    ("an array type", |n| {
        let sql = format!("SELECT CAST(NULL AS INT{}) IS NULL", "[]".repeat(n));
        (sql, "true".into())
    }),
    ("a chain of casts", |n| {
        let sql = format!("SELECT i{} FROM t", "::BIGINT".repeat(n));
        (sql, "1".into())
    }),
];

/// W11's second part: the deepest statement of each kind of chain that a
/// session accepts on a runtime worker (whose stack, 2 MiB, is the one a
/// server's statements run on), planned and run to its answer there. A
/// limit set too high for this build aborts the benchmark here.
fn deepest_statements(config: &Config, db: &widesql::Db) -> Res<()> {
    let mut table = MdTable::new(
        "W11 the deepest statement accepted on a runtime worker (2 MiB stack), run there",
        &[
            "chain",
            "levels accepted",
            "refused from",
            "planned again (cached) and run",
        ],
    );
    for (what, chain) in CHAINS {
        let session = db.session();
        let found = config.runtime.block_on(config.runtime.spawn(async move {
            let accepted = |n: usize| {
                let session = &session;
                async move {
                    match session.sql(&chain(n).0).await {
                        Ok(_) => Ok(true),
                        // A chain joins no table: the limit past is the nesting's.
                        Err(e) if e.kind() == ErrorKind::LimitExceeded => Ok(false),
                        Err(e) => Err(format!("{what} of {n}: {e}")),
                    }
                }
            };
            // Accepted at `low`, refused at `high`.
            let (mut low, mut high) = (1, 20_000);
            if !accepted(low).await? || accepted(high).await? {
                return Err(format!("{what}: no limit between {low} and {high} levels"));
            }
            while high - low > 1 {
                let mid = (low + high) / 2;
                match accepted(mid).await? {
                    true => low = mid,
                    false => high = mid,
                }
            }
            let (sql, answer) = chain(low);
            let started = Instant::now();
            let batches = async { session.sql(&sql).await?.collect().await }
                .await
                .map_err(|e| format!("{what} of {low}: {e}"))?;
            let secs = started.elapsed().as_secs_f64();
            let value = datafusion::arrow::util::display::array_value_to_string(
                batches.first().ok_or("no batch")?.column(0),
                0,
            )
            .map_err(|e| e.to_string())?;
            if value != answer {
                return Err(format!("{what} of {low} answered {value}, not {answer}"));
            }
            Ok((low, high, secs))
        }))?;
        let (low, high, secs) = found?;
        table.row(vec![
            what.into(),
            low.to_string(),
            high.to_string(),
            format!("{:.1} ms", secs * 1e3),
        ]);
    }
    table.print();
    Ok(())
}
