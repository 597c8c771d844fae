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
    #[arg(long, global = true, default_value = "widesql-data")]
    db: PathBuf,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = Db::open(&cli.db).and_then(|db| match cli.command {
        Command::Sql { format, statements } => run_sql(&db, &statements, &format),
        Command::Shell { format } => {
            let format: Format = format.parse()?;
            let session = db.session();
            runtime()?.block_on(widesql::shell::run(&session, format))
        }
        Command::Catalog => print_catalog(&db),
        Command::Demo => demo(&db),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
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
