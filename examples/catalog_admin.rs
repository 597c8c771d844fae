//! The catalog: project `acme`, dataset `metrics` and table `events` made
//! through the embedded API and through SQL, listed at every level,
//! renamed, dropped with and without CASCADE, and the system tables with
//! their reserved ids.
//!
//! `cargo run --release --example catalog_admin [DIR]` (a temporary
//! directory unless DIR is given).

use std::fmt::Write as _;

use widesql::StatementOutput;
use widesql::{Db, DropMode, FamilySpec, TableSpec};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = std::env::args()
        .nth(1)
        .map_or_else(|| dir.path().join("db"), Into::into);
    let db = Db::open(&path)?;
    print!("{}", run(&db)?);
    Ok(())
}

/// Runs the tour on `db` and returns what it shows.
pub fn run(db: &Db) -> Result<String, Box<dyn std::error::Error>> {
    let mut out = String::new();
    let runtime = tokio::runtime::Runtime::new()?;
    let session = db.session();
    let sql = |statement: &str| -> Result<String, Box<dyn std::error::Error>> {
        let outputs = runtime.block_on(session.run(statement))?;
        Ok(outputs
            .iter()
            .map(StatementOutput::pretty)
            .collect::<widesql::Result<String>>()?)
    };

    writeln!(out, "# Through the embedded API")?;
    let acme = db.create_project("acme")?;
    let metrics = acme.create_dataset("metrics")?;
    let events = metrics.create_table(
        "events",
        TableSpec::new()
            .with_family(FamilySpec::new("cf"))
            .with_family(FamilySpec::new("raw").with_locality_group("blobs")),
    )?;
    writeln!(out, "created {}", events.qualified_name()?)?;

    writeln!(out, "\n# Through SQL")?;
    sql("CREATE SCHEMA acme.logs;
         CREATE TABLE acme.logs.lines (id BIGINT PRIMARY KEY, line VARCHAR);
         INSERT INTO acme.logs.lines VALUES (1, 'started'), (2, 'ready')")?;
    writeln!(out, "created acme.logs.lines with 2 rows")?;

    writeln!(out, "\n# Listed at every level")?;
    for project in db.projects()? {
        writeln!(out, "project {}", project.name()?)?;
        for dataset in project.datasets()? {
            writeln!(out, "  dataset {}", dataset.name()?)?;
            for table in dataset.tables()? {
                let families: Vec<String> = table
                    .spec()?
                    .families
                    .iter()
                    .map(|f| format!("{} [{}]", f.name, f.locality_group))
                    .collect();
                writeln!(out, "    table {}  {}", table.name()?, families.join(", "))?;
            }
        }
    }
    out.push_str(&sql("SHOW TABLES FROM acme.logs")?);

    writeln!(out, "\n# Renamed")?;
    events.rename("events_v2")?;
    metrics.rename("telemetry")?;
    writeln!(out, "now {}", events.qualified_name()?)?;

    writeln!(out, "\n# Dropped without and with CASCADE")?;
    match acme.drop_dataset("telemetry", DropMode::Restrict) {
        Err(e) => writeln!(out, "DROP without CASCADE refused: {e}")?,
        Ok(()) => writeln!(out, "DROP without CASCADE went through")?,
    }
    acme.drop_dataset("telemetry", DropMode::Cascade)?;
    writeln!(out, "dropped acme.telemetry and its table with CASCADE")?;
    sql("DROP SCHEMA acme.logs CASCADE")?;
    db.drop_project("acme", DropMode::Restrict)?;
    writeln!(
        out,
        "dropped acme.logs (SQL, CASCADE), then the empty project acme"
    )?;

    writeln!(out, "\n# The system tables and their reserved ids")?;
    out.push_str(&sql(
        "SELECT table_schema, table_name FROM information_schema.tables \
         WHERE table_catalog = '_system' AND table_schema = '_catalog' ORDER BY table_name",
    )?);
    out.push_str(&sql("SELECT * FROM _system._catalog._projects")?);
    Ok(out)
}
