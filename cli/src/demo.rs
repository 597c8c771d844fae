//! `widesql demo`: the Bigtable paper's webtable, written through SQL and
//! the embedded API, read back through both.

use widesql::{Db, Filter, ReadOptions, RowMutation, RowSet};

use crate::error::CliError;
use crate::render::{render, Format};

/// Creates (if missing) and fills the webtable, then queries it.
pub fn run(db: &Db) -> Result<(), CliError> {
    let session = db.session();
    let runtime = crate::runtime()?;
    let sql = |statements: &str| -> Result<(), CliError> {
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
