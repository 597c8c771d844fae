//! Helpers shared by the integration tests: running SQL on a database from
//! synchronous test code and reading the answer as display strings.

#![expect(
    dead_code,
    reason = "each test binary uses the helpers it needs; the rest are unused there"
)]

use datafusion::arrow::util::display::array_value_to_string;
use widesql::{Db, Session};

/// A boxed error that may cross threads.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A single-threaded runtime for one blocking call into the async SQL API.
pub fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => panic!("a tokio runtime: {e}"),
    }
}

/// Runs a script of statements in `session`.
pub fn run_in(session: &Session, script: &str) -> widesql::Result<()> {
    runtime().block_on(session.run(script)).map(|_| ())
}

/// Runs a script of statements in a new session.
pub fn run(db: &Db, script: &str) -> widesql::Result<()> {
    run_in(&db.session(), script)
}

/// The batches of a query through `Session::sql` in `session`.
pub fn batches_in(
    session: &Session,
    sql: &str,
) -> Result<Vec<datafusion::arrow::record_batch::RecordBatch>, BoxError> {
    Ok(runtime().block_on(async { session.sql(sql).await?.collect().await })?)
}

/// The rows of a one-statement query, from async test code, as text
/// lines: cells as sqllogictest shows them (`NULL`), joined by spaces.
pub async fn lines(
    session: &Session,
    sql: &str,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let batches = session.sql(sql).await?.collect().await?;
    Ok(widesql_slt::rows_as_text(&batches)?
        .into_iter()
        .map(|row| row.join(" "))
        .collect())
}

/// Runs a query in `session`; every row as its columns' display strings.
pub fn query_in(session: &Session, sql: &str) -> Result<Vec<Vec<String>>, BoxError> {
    rows_of(&batches_in(session, sql)?)
}

/// Every row of `batches` as its columns' display strings.
pub fn rows_of(
    batches: &[datafusion::arrow::record_batch::RecordBatch],
) -> Result<Vec<Vec<String>>, BoxError> {
    let mut rows = Vec::new();
    for batch in batches {
        for r in 0..batch.num_rows() {
            let row = batch
                .columns()
                .iter()
                .map(|c| array_value_to_string(c, r))
                .collect::<Result<Vec<_>, _>>()?;
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Runs a query in a new session.
pub fn query(db: &Db, sql: &str) -> Result<Vec<Vec<String>>, BoxError> {
    query_in(&db.session(), sql)
}

/// Batches as text, one line per row, values separated by a space, as
/// sqllogictest prints them.
pub fn text(
    batches: &[datafusion::arrow::array::RecordBatch],
) -> Result<String, Box<dyn std::error::Error>> {
    Ok(widesql_slt::rows_as_text(batches)?
        .into_iter()
        .map(|r| r.join(" "))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// Opens the sled database in `dir` directly, waiting up to 2 s for the
/// file lock: sled's I/O threads may hold it for a moment after the last
/// handle of a database of this process was dropped.
pub fn open_raw_sled(dir: &std::path::Path) -> sled::Result<sled::Db> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match sled::open(dir) {
            Err(e) if e.to_string().contains("lock") && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            opened => return opened,
        }
    }
}
