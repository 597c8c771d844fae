//! The `widesql` command line: parses arguments and calls the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use widesql::export::{render, Format};
use widesql::{Db, Filter, ReadOptions, RowMutation, RowSet};

/// An embedded SQL engine over Bigtable-style wide-column tables in sled.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// The database directory (created if missing).
    #[arg(long, global = true)]
    db: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs SQL statements in order and prints each result.
    Sql {
        /// Output format: table, csv, json or ndjson.
        #[arg(long, default_value = "table")]
        format: String,
        /// The statements, separated by ';'.
        statements: String,
    },
    /// An interactive SQL shell.
    Shell {
        /// Output format: table, csv, json or ndjson.
        #[arg(long, default_value = "table")]
        format: String,
    },
    /// Runs sqllogictest files (.slt, .test) and directories, each file in a
    /// new temporary database unless --db is given.
    Test {
        /// Rewrite the expected results with widesql's output.
        #[arg(long)]
        complete: bool,
        /// Run on plain in-memory DataFusion instead (the baseline).
        #[arg(long)]
        memory: bool,
        /// Do not check column types (for files written for other engines).
        #[arg(long)]
        loose_types: bool,
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Lists projects, datasets, tables and their column families.
    Catalog,
    /// Loads the Bigtable paper's webtable example and reads it back.
    Demo,
}

fn runtime() -> widesql::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| widesql::Error::Sql(format!("cannot start the runtime: {e}")))
}

fn run_sql(db: &Db, statements: &str, format: &str) -> widesql::Result<()> {
    let format: Format = format.parse()?;
    let session = db.session();
    runtime()?.block_on(async {
        for output in session.run(statements).await? {
            if !output.schema.fields().is_empty() {
                let text = render(&output.batches, format)?;
                if text.ends_with('\n') {
                    print!("{text}");
                } else {
                    println!("{text}");
                }
            }
        }
        Ok(())
    })
}

/// The database directory when none is given.
const DEFAULT_DB: &str = "widesql-data";

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Test {
        complete,
        memory,
        loose_types,
        paths,
    } = &cli.command
    {
        let options = TestOptions {
            db: cli.db.clone(),
            complete: *complete,
            memory: *memory,
            loose_types: *loose_types,
        };
        return match run_tests(paths, &options) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let db_dir = cli.db.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_DB));
    let result = Db::open(&db_dir).and_then(|db| match cli.command {
        Command::Sql { format, statements } => run_sql(&db, &statements, &format),
        Command::Shell { format } => {
            let format: Format = format.parse()?;
            let session = db.session();
            runtime()?.block_on(widesql::shell::run(&session, format))
        }
        Command::Catalog => print_catalog(&db),
        Command::Demo => demo(&db),
        Command::Test { .. } => Ok(()),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

struct TestOptions {
    db: Option<PathBuf>,
    complete: bool,
    memory: bool,
    loose_types: bool,
}

/// Runs every file; prints failures and `N passed, N failed` (records).
/// Returns whether everything passed.
fn run_tests(paths: &[PathBuf], options: &TestOptions) -> widesql::Result<bool> {
    let mut files = Vec::new();
    for path in paths {
        if !path.exists() {
            return Err(widesql::Error::Sql(format!(
                "'{}' does not exist",
                path.display()
            )));
        }
        files.extend(widesql::slt::collect_files(path)?);
    }
    let run_options = widesql::slt::RunOptions {
        strict_types: !options.loose_types,
        progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        ..Default::default()
    };
    let shared_db = options.db.as_ref().map(Db::open).transpose()?;
    let runtime = runtime()?;
    let (mut passed, mut failed, mut skipped, mut failed_files) = (0, 0, 0, 0);
    for file in &files {
        if options.complete {
            runtime.block_on(widesql::slt::complete_file(file, &run_options))?;
            println!("completed {}", file.display());
            continue;
        }
        let report = runtime.block_on(async {
            match (&shared_db, options.memory) {
                (_, true) => widesql::slt::run_file_in_memory(file, &run_options).await,
                (Some(db), false) => widesql::slt::run_file(file, db, &run_options).await,
                (None, false) => widesql::slt::run_file_isolated(file, &run_options).await,
            }
        })?;
        for failure in &report.failures {
            println!("{}\n", failure.message);
        }
        let status = if report.failures.is_empty() {
            "ok"
        } else {
            "FAILED"
        };
        println!(
            "{status} {} ({} passed, {} failed{})",
            file.display(),
            report.passed,
            report.failed(),
            if report.skipped > 0 {
                format!(", {} skipped", report.skipped)
            } else {
                String::new()
            }
        );
        passed += report.passed;
        failed += report.failed();
        skipped += report.skipped;
        failed_files += usize::from(!report.failures.is_empty());
    }
    if options.complete {
        return Ok(true);
    }
    println!(
        "{} files, {failed_files} with failures; records:",
        files.len()
    );
    if skipped > 0 {
        println!("{passed} passed, {failed} failed, {skipped} skipped");
    } else {
        println!("{passed} passed, {failed} failed");
    }
    Ok(failed == 0)
}

fn print_catalog(db: &Db) -> widesql::Result<()> {
    for project in db.projects()? {
        for dataset in project.datasets()? {
            for table in dataset.tables()? {
                let spec = table.spec()?;
                let families: Vec<String> = spec
                    .families
                    .iter()
                    .map(|f| format!("{} [{}]", f.name, f.locality_group))
                    .collect();
                println!("{}  {}", table.qualified_name()?, families.join(", "));
            }
        }
    }
    Ok(())
}

fn demo(db: &Db) -> widesql::Result<()> {
    let session = db.session();
    let runtime = runtime()?;
    let sql = |statements: &str| -> widesql::Result<()> {
        runtime.block_on(async {
            for output in session.run(statements).await? {
                if !output.schema.fields().is_empty() {
                    println!("{}", render(&output.batches, Format::Table)?);
                }
            }
            Ok(())
        })
    };
    // The table, declared in SQL: contents in their own locality group,
    // three versions kept; anchors as a family of free qualifiers.
    sql("CREATE TABLE IF NOT EXISTS webtable (
           _key VARCHAR PRIMARY KEY, language VARCHAR, contents VARCHAR, anchor MAP(VARCHAR, VARCHAR)
         ) WITH ('page.columns' = 'contents', 'page.max_versions' = '3', 'page.locality_group' = 'blobs')")?;
    // Rows written through the embedded API: four versions of a page.
    let webtable = db.default_dataset()?.open_table("webtable")?;
    for (version, page) in ["<html>v1", "<html>v2", "<html>v3", "<html>v4"]
        .iter()
        .enumerate()
    {
        webtable.mutate_row(
            b"com.cnn.www",
            &RowMutation::new()
                .set_at("page", "contents", 1 + version as i64, page)
                .set("cf", "language", "EN")
                .set("anchor", "com.cnnsi.www", "CNN")
                .set("anchor", "ca.look.my", "CNN.com"),
        )?;
    }
    webtable.mutate_row(
        b"de.spiegel.www",
        &RowMutation::new()
            .set("cf", "language", "DE")
            .set("anchor", "com.cnn.www", "Spiegel"),
    )?;
    db.flush()?;
    // Read back with the embedded API ...
    let latest = ReadOptions::new().with_filter(Filter::all().with_latest_versions(1));
    for row in webtable.read_rows(&RowSet::prefix("com."), latest)? {
        let row = row?;
        for cell in &row.cells {
            println!(
                "{}  {}:{}  @{}  {}",
                String::from_utf8_lossy(&row.key),
                cell.family,
                String::from_utf8_lossy(&cell.qualifier),
                cell.timestamp,
                String::from_utf8_lossy(&cell.value)
            );
        }
    }
    let versions = webtable
        .read_row(b"com.cnn.www", &Filter::all().with_families(["page"]))?
        .map_or(0, |r| r.cells.len());
    println!("contents versions kept for com.cnn.www: {versions} (max_versions = 3)");
    // ... and with SQL.
    sql(
        "SELECT _key, language, contents, anchor FROM webtable ORDER BY _key;
         SELECT CAST(_timestamp AS BIGINT) AS version, CAST(value AS VARCHAR) AS contents
           FROM cells('webtable') WHERE _key = 'com.cnn.www' AND family = 'page';
         SELECT language, count(*) AS pages FROM webtable GROUP BY language ORDER BY language",
    )
}
