//! Storage that fails: the in-memory backend injects faults (a batch that
//! fails, a process that dies between two steps, a torn batch), and every
//! statement either applies in full or leaves the database as it was.

use std::sync::Arc;

use widesql::internals::{Fault, MemoryBackend};
use widesql::{Db, DbOptions, ErrorKind, Session};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn open(backend: &MemoryBackend) -> widesql::Result<Db> {
    Db::open_on_backend(
        "memory:faults",
        Arc::new(backend.clone()),
        DbOptions::new().with_compaction_interval(None),
    )
}

/// The one BIGINT a query returns.
async fn int(session: &Session, sql: &str) -> Result<i64, Box<dyn std::error::Error>> {
    let batches = session.sql(sql).await?.collect().await?;
    let value = batches
        .first()
        .ok_or("no batch")?
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .ok_or("not a BIGINT")?
        .value(0);
    Ok(value)
}

async fn count(session: &Session, table: &str) -> Result<i64, Box<dyn std::error::Error>> {
    int(session, &format!("SELECT count(*) FROM {table}")).await
}

fn tree_names(backend: &MemoryBackend) -> Vec<String> {
    use widesql::internals::Backend;
    backend
        .tree_names()
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}

#[tokio::test]
async fn a_failed_statement_batch_changes_nothing() -> TestResult {
    let backend = MemoryBackend::new();
    let db = open(&backend)?;
    let session = db.session();
    session
        .run("CREATE TABLE t (id BIGINT PRIMARY KEY, a INT, b VARCHAR); INSERT INTO t VALUES (1, 1, 'x'), (2, 2, 'y')")
        .await?;
    backend.inject(Fault::FailBatch(backend.batches() + 1));
    let values: Vec<String> = (10..200).map(|i| format!("({i}, {i}, 'v{i}')")).collect();
    let failed = session
        .run(&format!("INSERT INTO t VALUES {}", values.join(", ")))
        .await;
    let error = failed.err().ok_or("the INSERT succeeded")?;
    assert_eq!(error.kind(), ErrorKind::Storage, "{error}");
    assert_eq!(count(&session, "t").await?, 2);
    // The store works again: the same statement now lands whole.
    session
        .run(&format!("INSERT INTO t VALUES {}", values.join(", ")))
        .await?;
    assert_eq!(count(&session, "t").await?, 192);
    // A failing UPDATE and DELETE change nothing either.
    backend.inject(Fault::FailBatch(backend.batches() + 1));
    assert!(session.run("UPDATE t SET a = a + 1").await.is_err());
    backend.inject(Fault::FailBatch(backend.batches() + 1));
    assert!(session.run("DELETE FROM t WHERE id < 100").await.is_err());
    let sum = int(&session, "SELECT CAST(sum(a) AS BIGINT) FROM t").await?;
    assert_eq!(sum, 3 + (10..200).sum::<i64>());
    assert_eq!(count(&session, "t").await?, 192);
    Ok(())
}

#[tokio::test]
async fn a_failed_catalog_batch_creates_nothing() -> TestResult {
    let backend = MemoryBackend::new();
    let db = open(&backend)?;
    let session = db.session();
    backend.inject(Fault::FailBatch(backend.batches() + 1));
    assert!(session.run("CREATE TABLE t (a INT)").await.is_err());
    assert!(db.default_dataset()?.table("t")?.is_none());
    // The name is free, and the table works.
    session
        .run("CREATE TABLE t (a INT); INSERT INTO t VALUES (1)")
        .await?;
    assert_eq!(count(&session, "t").await?, 1);
    // A CREATE TABLE AS whose commit fails leaves neither a table nor its
    // trees behind once the database is opened again.
    let before = tree_names(&backend).len();
    session
        .run("CREATE TABLE src (a INT); INSERT INTO src VALUES (1), (2), (3)")
        .await?;
    let trees_with_src = tree_names(&backend).len();
    assert!(trees_with_src >= before);
    backend.inject(Fault::CrashAtBatch(backend.batches() + 2));
    assert!(session
        .run("CREATE TABLE copy AS SELECT a FROM src")
        .await
        .is_err());
    drop(session);
    drop(db);
    let restarted = backend.restart();
    let db = open(&restarted)?;
    assert!(db.default_dataset()?.table("copy")?.is_none());
    assert_eq!(tree_names(&restarted).len(), trees_with_src);
    assert_eq!(count(&db.session(), "src").await?, 3);
    Ok(())
}

#[tokio::test]
async fn a_crash_between_drop_and_tree_removal_leaves_no_orphan() -> TestResult {
    let backend = MemoryBackend::new();
    let db = open(&backend)?;
    let session = db.session();
    session
        .run("CREATE TABLE keep (a INT); CREATE TABLE gone (a INT, b VARCHAR) WITH ('cf.locality_group' = 'g2'); INSERT INTO gone VALUES (1, 'x'); INSERT INTO keep VALUES (7)")
        .await?;
    let with_both = tree_names(&backend);
    // The DROP's catalog batch lands, then the process dies before the
    // table's trees are removed.
    backend.inject(Fault::CrashAfterBatch(backend.batches() + 1));
    let _ = session.run("DROP TABLE gone").await;
    assert_eq!(
        tree_names(&backend),
        with_both,
        "the trees outlived the crash"
    );
    drop(session);
    drop(db);
    let restarted = backend.restart();
    let db = open(&restarted)?;
    assert!(db.default_dataset()?.table("gone")?.is_none());
    let left = tree_names(&restarted);
    assert!(
        left.len() < with_both.len(),
        "orphan trees stayed: {left:?}"
    );
    assert_eq!(count(&db.session(), "keep").await?, 1);
    Ok(())
}

#[tokio::test]
async fn a_torn_batch_never_makes_the_database_unreadable() -> TestResult {
    // sled never tears a batch; a store that does must still leave a
    // database that opens and reads without panicking. Every prefix of the
    // INSERT's batch is tried, until the batch is short enough to land.
    for writes in 0.. {
        let backend = MemoryBackend::new();
        let db = open(&backend)?;
        let session = db.session();
        session
            .run("CREATE TABLE web (_key VARCHAR PRIMARY KEY, lang VARCHAR, contents VARCHAR) WITH ('page.columns' = 'contents', 'page.locality_group' = 'blobs'); INSERT INTO web VALUES ('a', 'EN', '<a>')")
            .await?;
        backend.inject(Fault::TearBatch {
            batch: backend.batches() + 1,
            writes,
        });
        let insert = session
            .run("INSERT INTO web VALUES ('b', 'DE', '<b>'), ('c', 'FR', '<c>')")
            .await;
        if insert.is_ok() {
            // Two rows in two locality groups are at least four writes.
            assert!(writes >= 4, "a batch of {writes} writes held the INSERT");
            break;
        }
        drop(session);
        drop(db);
        let restarted = backend.restart();
        let db = open(&restarted)?;
        let rows = count(&db.session(), "web").await?;
        assert!(
            (1..=3).contains(&rows),
            "{writes} writes landed: {rows} rows"
        );
    }
    Ok(())
}

/// A database whose storage batches hold about 16 KiB.
fn open_with_small_batches(backend: &MemoryBackend) -> widesql::Result<Db> {
    Db::open_on_backend(
        "memory:faults",
        Arc::new(backend.clone()),
        DbOptions::new()
            .with_compaction_interval(None)
            .with_statement_batch_bytes(16 * 1024),
    )
}

/// The rows an error says were written before it stopped the statement.
fn written_before(error: &widesql::Error) -> Option<usize> {
    match error {
        widesql::Error::PartlyApplied { written, .. } => Some(*written),
        _ => None,
    }
}

#[tokio::test]
async fn statements_past_the_batch_bytes_are_written_in_several_batches() -> TestResult {
    let backend = MemoryBackend::new();
    let db = open_with_small_batches(&backend)?;
    let session = db.session();
    session
        .run("CREATE TABLE t (id BIGINT PRIMARY KEY, a BIGINT, blob VARCHAR)")
        .await?;
    // 100 rows of 1 KB: the statement's rows fill a batch every 16 or so.
    let before = backend.batches();
    session
        .run("INSERT INTO t SELECT value, 0, repeat('x', 1000) FROM generate_series(1, 100)")
        .await?;
    // (A batch of rows may also end in a storage batch of its last row.)
    let inserted = backend.batches() - before;
    assert!((6..=16).contains(&inserted), "{inserted} batches");
    assert_eq!(count(&session, "t").await?, 100);

    // An UPDATE of a small column carries little, but rewrites each row's
    // 1 KB chunk: its writes are split as well.
    let before = backend.batches();
    session.run("UPDATE t SET a = a + 1").await?;
    let updated = backend.batches() - before;
    assert!((6..=8).contains(&updated), "{updated} batches");
    let sum = int(
        &session,
        "SELECT CAST(sum(a) + sum(length(blob)) AS BIGINT) FROM t",
    )
    .await?;
    assert_eq!(sum, 100 + 100 * 1000);

    // A batch that fails after the first: the error says how many rows
    // were written, and exactly that many changed.
    backend.inject(Fault::FailBatch(backend.batches() + 3));
    let error = session
        .run("UPDATE t SET a = a + 1")
        .await
        .err()
        .ok_or("the UPDATE succeeded")?;
    let written = written_before(&error).ok_or_else(|| format!("not partly applied: {error}"))?;
    assert!((20..=60).contains(&written), "{written}: {error}");
    assert_eq!(
        int(&session, "SELECT count(*) FROM t WHERE a = 2").await?,
        written as i64
    );
    assert_eq!(
        int(&session, "SELECT count(*) FROM t WHERE a = 1").await?,
        100 - written as i64
    );

    // A small statement is still one batch.
    let before = backend.batches();
    session.run("UPDATE t SET a = 0 WHERE id <= 5").await?;
    assert_eq!(backend.batches() - before, 1);
    Ok(())
}

#[tokio::test]
async fn bulk_writes_of_large_values_are_split_by_bytes() -> TestResult {
    use widesql::{FamilySpec, RowMutation, TableSpec};
    let backend = MemoryBackend::new();
    let db = open_with_small_batches(&backend)?;
    let table = db
        .default_dataset()?
        .create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?;
    let value = vec![b'v'; 1000];
    let before = backend.batches();
    let rows = (0..100).map(|i| {
        (
            format!("row{i:03}"),
            RowMutation::new().set("f", "q", &value),
        )
    });
    assert_eq!(table.bulk_mutate(rows)?, 100);
    let batches = backend.batches() - before;
    assert!((6..=16).contains(&batches), "{batches} batches");
    let read = table
        .read_rows(&widesql::RowSet::all(), widesql::ReadOptions::new())?
        .map(|row| row.map(|r| r.cells.len()))
        .collect::<widesql::Result<Vec<_>>>()?;
    assert_eq!(read, vec![1; 100]);

    // A batch that fails in a later chunk: the error counts every row
    // written before it, in earlier chunks too.
    backend.inject(Fault::FailBatch(backend.batches() + 9));
    let more = (0..100).map(|i| {
        (
            format!("second{i:03}"),
            RowMutation::new().set("f", "q", &value),
        )
    });
    let error = table.bulk_mutate(more).expect_err("batch 9 fails");
    let written = written_before(&error).ok_or_else(|| format!("not partly applied: {error}"))?;
    let stored = table
        .read_rows(
            &widesql::RowSet::prefix("second"),
            widesql::ReadOptions::new(),
        )?
        .count();
    assert!(written > 17, "{written}: {error}");
    assert_eq!(stored, written, "{error}");
    Ok(())
}
