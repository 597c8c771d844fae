//! Queries on a cluster: a scan of tablets that three workers hold runs
//! as one task on each (filters and partial aggregates there, the merge on
//! the master), gives what one process gives for the same statements, and
//! fails naming the worker when one that it needs is down; so does a
//! cluster whose processes serve TLS.

use std::time::Duration;

use widesql::{Db, Session, SessionOptions};
use widesql_server::{Server, WorkerServer};

mod common;

use common::{
    any_port, lines, master, master_options, until_up, worker, worker_options, BoxError, TestTls,
};

/// Statements whose answers must be the same on the cluster as on one
/// process: aggregates over every tablet, ranges over some, joins (one
/// with a table the master serves), a filter, the history view, the cells
/// view (which the master reads itself), a window over the whole table, a
/// global sort with a limit, unions and distinct counts.
const QUERIES: &[&str] = &[
    "SELECT grp, count(*), sum(v), min(_key), max(_key) FROM t GROUP BY grp ORDER BY grp",
    "SELECT count(*) FROM t WHERE v % 3 = 0",
    "SELECT _key, grp, v FROM t WHERE _key >= 'k0990' AND _key < 'k1010' ORDER BY _key",
    "SELECT count(*), sum(v) FROM t WHERE _key >= 'k0500' AND _key < 'k2500'",
    "SELECT count(*) FROM t a JOIN t b ON a._key = b._key WHERE a.v < 1500",
    "SELECT grp, count(*) FROM t WHERE grp IN ('g1', 'g4') GROUP BY grp ORDER BY grp",
    "SELECT _key, v FROM history('t') WHERE _key IN ('k0001', 'k1501', 'k2999') ORDER BY _key",
    "SELECT u.name, count(*), sum(t.v) FROM t JOIN u ON t.grp = u.grp GROUP BY u.name ORDER BY u.name",
    "SELECT count(*) FROM cells('t') WHERE qualifier = 'v'",
    "SELECT b, count(*), sum(v) FROM (SELECT row_number() OVER (ORDER BY _key) % 3 AS b, v FROM t) \
     GROUP BY b ORDER BY b",
    "SELECT _key, v FROM t ORDER BY v DESC, _key LIMIT 5",
    "SELECT count(*), sum(v) FROM (SELECT _key, v FROM t UNION ALL SELECT _key, v FROM t WHERE v < 100)",
    "SELECT count(*), sum(v) FROM (SELECT grp, v FROM t UNION ALL SELECT grp, 0 FROM u)",
    "SELECT count(*), sum(cardinality(v)) FROM history('t')",
    "SELECT count(DISTINCT grp), count(DISTINCT v % 100) FROM t",
];

/// The statements both databases run, in order.
const SETUP: &str = "CREATE TABLE u (grp VARCHAR PRIMARY KEY, name VARCHAR); \
    INSERT INTO u VALUES ('g1', 'one'), ('g2', 'two'), ('g5', 'five'); \
    CREATE TABLE t (_key VARCHAR PRIMARY KEY, grp VARCHAR, v BIGINT); \
    INSERT INTO t SELECT 'k' || lpad(CAST(value AS VARCHAR), 4, '0'), 'g' || CAST(value % 7 AS VARCHAR), value \
    FROM generate_series(0, 2999) AS s(value)";

/// What `sql` answers in each session, as text lines.
async fn both(cluster: &Session, single: &Session, sql: &str) -> Result<Vec<String>, BoxError> {
    let on_cluster = lines(cluster, sql).await?;
    assert_eq!(on_cluster, lines(single, sql).await?, "{sql}");
    Ok(on_cluster)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_of_tablets_on_workers_run_there_and_answer_as_one_process() -> Result<(), BoxError> {
    let dirs = [
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    ];
    let (db, master) = master(dirs[0].path()).await?;
    db.workers().set_down_after(Duration::from_secs(2));
    // Four workers, the tablets on three: a task must reach its tablets'
    // worker, never the spare one.
    let worker_dbs = [
        Db::open(dirs[1].path())?,
        Db::open(dirs[2].path())?,
        Db::open(dirs[3].path())?,
        Db::open(dirs[5].path())?,
    ];
    let mut workers = Vec::new();
    for worker_db in &worker_dbs {
        workers.push(worker(worker_db, &master, any_port()).await?);
    }
    let urls: Vec<String> = workers
        .iter()
        .map(|w| format!("http://{}", w.local_addr()))
        .collect();
    until_up(&db, 4).await?;
    let single_db = Db::open(dirs[4].path())?;
    let (cluster, single) = (db.session(), single_db.session());
    for session in [&cluster, &single] {
        session.run(SETUP).await?;
        session
            .run("UPDATE t SET v = v + 1 WHERE grp = 'g3'")
            .await?;
    }
    cluster
        .run(&format!(
            "ALTER TABLE t SPLIT AT ('k1000', 'k2000'); \
             ALTER TABLE t MOVE TABLET AT ('k0000') TO '{}'; \
             ALTER TABLE t MOVE TABLET AT ('k1000') TO '{}'; \
             ALTER TABLE t MOVE TABLET AT ('k2000') TO '{}'",
            urls[1], urls[2], urls[3]
        ))
        .await?;
    let table = db.open_table("default", "public", "t")?.id();
    let read = |i: usize| widesql::internals::held_keys_read(&worker_dbs[i + 1], table);
    let before: Vec<u64> = (0..3).map(read).collect::<Result<_, _>>()?;
    for sql in QUERIES {
        both(&cluster, &single, sql).await?;
    }
    // Each worker ran the scans of its tablet.
    for (i, was) in before.iter().enumerate() {
        assert!(read(i)? > *was, "worker {i} read nothing");
    }

    // A task on a worker runs under the memory limit of the session that
    // sent it: each worker's sort of its tablet's rows (the master only
    // merges their sorted streams) needs more than 64 KiB.
    let sorted = "SELECT _key, grp, v FROM t ORDER BY grp, v, _key";
    let limited = Session::with_options(
        db.clone(),
        SessionOptions {
            memory_limit: Some(64 * 1024),
            ..SessionOptions::default()
        },
    );
    let error = limited
        .run(sorted)
        .await
        .expect_err("a worker's sort takes more than 64 KiB")
        .to_string();
    assert!(error.contains("Resources exhausted"), "{error}");
    assert!(error.contains("ExternalSorter"), "{error}");
    both(&cluster, &single, sorted).await?;
    // The sort is the workers' (in the stage of their tasks); the master
    // only merges.
    let plan = lines(&cluster, &format!("EXPLAIN ANALYZE {sorted}"))
        .await?
        .join("\n");
    let (top, stage) = plan
        .split_once("───── Stage 1")
        .ok_or_else(|| format!("no stage of tasks: {plan}"))?;
    assert!(!top.contains("SortExec:"), "{plan}");
    assert!(
        stage.contains("tasks=3") && stage.contains("SortExec:"),
        "{plan}"
    );
    // So does a limit the session SETs, and every other setting it
    // changes: its tasks on the workers run under them.
    let setting = db.session();
    setting
        .run("SET datafusion.runtime.memory_limit = '64K'")
        .await?;
    let error = setting
        .run(sorted)
        .await
        .expect_err("a worker's sort takes more than the 64 KiB SET")
        .to_string();
    assert!(error.contains("ExternalSorter"), "{error}");
    let counted = "SELECT count(*) FROM t WHERE v % 3 = 0";
    let batches = |plan: &str| -> Result<usize, BoxError> {
        let (_, stage) = plan
            .split_once("───── Stage 1")
            .ok_or_else(|| format!("no stage of tasks: {plan}"))?;
        let filter = stage
            .lines()
            .find(|line| line.contains("FilterExec:"))
            .ok_or_else(|| format!("no filter in the tasks: {plan}"))?;
        let count = filter
            .split("output_batches=")
            .nth(1)
            .and_then(|rest| rest.split([',', ']']).next())
            .ok_or_else(|| format!("no batches counted: {filter}"))?;
        Ok(count.trim().parse()?)
    };
    let before = batches(
        &lines(&cluster, &format!("EXPLAIN ANALYZE {counted}"))
            .await?
            .join("\n"),
    )?;
    cluster
        .run("SET datafusion.execution.batch_size = 50")
        .await?;
    let plan = lines(&cluster, &format!("EXPLAIN ANALYZE {counted}"))
        .await?
        .join("\n");
    // A thousand rows pass the filter on the workers: at most a batch per
    // partition before, at least twenty of 50 rows after.
    let after = batches(&plan)?;
    assert!(
        after >= 20 && after > before,
        "{before} then {after}: {plan}"
    );
    cluster.run("RESET datafusion.execution.batch_size").await?;
    let plan = lines(&cluster, &format!("EXPLAIN ANALYZE {counted}"))
        .await?
        .join("\n");
    assert_eq!(batches(&plan)?, before, "RESET: {plan}");
    // Settings that shape a session as it is built stay on the master:
    // tasks are not built with a catalog at a location that is no URL.
    let cataloged = db.session();
    cataloged
        .run(
            "SET datafusion.catalog.create_default_catalog_and_schema = true; \
             SET datafusion.catalog.location = 'junk'; \
             SET datafusion.catalog.format = 'csv'",
        )
        .await?;
    both(&cataloged, &single, QUERIES[0]).await?;
    // Settings longer than a task's headers take are refused.
    let error = cataloged
        .run(&format!(
            "SET datafusion.execution.time_zone = '{}'",
            "+".repeat(9000)
        ))
        .await
        .expect_err("9,000 bytes of settings")
        .to_string();
    assert!(error.contains("set shorter values"), "{error}");
    // Its tasks carry the settings they carried before.
    both(&cataloged, &single, QUERIES[0]).await?;

    // The plan sends one task to each worker the keys reach.
    let plan = lines(&cluster, &format!("EXPLAIN ANALYZE {}", QUERIES[0]))
        .await?
        .concat();
    assert!(plan.contains("DistributedExec"), "{plan}");
    for url in &urls[1..] {
        assert!(plan.contains(&format!("on {url}")), "{url}: {plan}");
    }
    // A worker whose tablets the keys miss is not called.
    let third_read = read(2)?;
    let plan = lines(
        &cluster,
        "EXPLAIN ANALYZE SELECT count(*) FROM t WHERE _key >= 'k0500' AND _key < 'k1500'",
    )
    .await?
    .concat();
    assert!(plan.contains("DistributedExec"), "{plan}");
    assert!(!plan.contains(&format!("on {}", urls[3])), "{plan}");
    assert_eq!(read(2)?, third_read);
    // Keys of one worker's tablet: the master reads them itself.
    let plan = lines(
        &cluster,
        "EXPLAIN ANALYZE SELECT count(*) FROM t WHERE _key < 'k0500'",
    )
    .await?
    .concat();
    assert!(!plan.contains("DistributedExec"), "{plan}");

    // A union of scans of tablets on different workers: a task runs on
    // one worker, so the union runs as one task, which reads them all.
    for session in [&cluster, &single] {
        session
            .run(
                "CREATE TABLE w (_key VARCHAR PRIMARY KEY, v BIGINT); \
                 INSERT INTO w SELECT _key, v FROM t WHERE v < 1500",
            )
            .await?;
    }
    cluster
        .run(&format!(
            "ALTER TABLE w SPLIT AT ('k0700'); \
             ALTER TABLE w MOVE TABLET AT ('k0000') TO '{}'; \
             ALTER TABLE w MOVE TABLET AT ('k0700') TO '{}'",
            urls[0], urls[1]
        ))
        .await?;
    for sql in [
        "SELECT count(*), sum(v) FROM (SELECT _key, v FROM t UNION ALL SELECT _key, v FROM w)",
        "SELECT g, count(*), sum(v) FROM (SELECT grp AS g, v FROM t UNION ALL SELECT 'w' AS g, v FROM w) \
         GROUP BY g ORDER BY g",
    ] {
        both(&cluster, &single, sql).await?;
    }

    // Writes go to the tablets' workers, and the next scans see them; a
    // statement whose input scans the table it writes reads it whole
    // before it writes.
    for session in [&cluster, &single] {
        session
            .run(
                "DELETE FROM t WHERE v % 11 = 0; \
                 INSERT INTO t VALUES ('k0999', 'g9', 9), ('k1999', 'g9', 9), ('k2999', 'g9', 9); \
                 INSERT INTO t SELECT 'k' || CAST(v + 3000 AS VARCHAR), 'g8', v FROM t WHERE grp = 'g5'",
            )
            .await?;
    }
    for sql in QUERIES {
        both(&cluster, &single, sql).await?;
    }

    // A worker that is down fails the scans that need it, naming it, and
    // only those.
    let last = workers.pop().ok_or("four workers")?;
    last.shutdown().await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while db.workers().up().len() > 3 {
        assert!(std::time::Instant::now() < deadline, "the worker stays up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let error = cluster
        .run(QUERIES[0])
        .await
        .expect_err("a tablet is on a worker that is down")
        .to_string();
    assert!(
        error.contains(&format!(
            "of default.public.t is on worker {}, which is down",
            urls[3]
        )),
        "{error}"
    );
    both(
        &cluster,
        &single,
        "SELECT count(*), sum(v) FROM t WHERE _key < 'k2000'",
    )
    .await?;

    for worker in workers {
        worker.shutdown().await?;
    }
    master.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_whose_processes_serve_tls_answers_as_one_process() -> Result<(), BoxError> {
    let dirs = [
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    ];
    let tls = TestTls::new()?;
    let db = Db::open(dirs[0].path())?;
    let master = Server::start(db.clone(), master_options(Some(&tls))?).await?;
    let mut workers = Vec::new();
    for dir in &dirs[1..3] {
        let options = worker_options(&master, any_port(), Some(&tls))?;
        workers.push(WorkerServer::start(Db::open(dir.path())?, options).await?);
    }
    // The workers are named, and called, at https:// addresses.
    let urls: Vec<String> = workers
        .iter()
        .map(|w| format!("https://{}", w.local_addr()))
        .collect();
    until_up(&db, 2).await?;
    let (mut up, mut named) = (db.workers().up(), urls.clone());
    up.sort();
    named.sort();
    assert_eq!(up, named);
    let single_db = Db::open(dirs[3].path())?;
    let (cluster, single) = (db.session(), single_db.session());
    for session in [&cluster, &single] {
        session.run(SETUP).await?;
    }
    // Moves copy the rows to the workers over TLS.
    cluster
        .run(&format!(
            "ALTER TABLE t SPLIT AT ('k1500'); \
             ALTER TABLE t MOVE TABLET AT ('k0000') TO '{}'; \
             ALTER TABLE t MOVE TABLET AT ('k1500') TO '{}'",
            urls[0], urls[1]
        ))
        .await?;
    // The master's own copy goes, so the rows can only come from the
    // workers.
    widesql::internals::remove_moved_away(&db)?;
    let table = db.open_table("default", "public", "t")?.id();
    assert_eq!(widesql::internals::stored_entries(&db, table)?, 0);
    // Tasks on the workers, the master's stages whose output they read
    // (the join with `u`, which the master serves), and the master's
    // reads of one worker's tablet all answer as one process does.
    for sql in QUERIES {
        both(&cluster, &single, sql).await?;
    }
    both(
        &cluster,
        &single,
        "SELECT count(*), sum(v) FROM t WHERE _key < 'k0500'",
    )
    .await?;
    let plan = lines(&cluster, &format!("EXPLAIN ANALYZE {}", QUERIES[0]))
        .await?
        .concat();
    for url in &urls {
        assert!(plan.contains(&format!("on {url}")), "{url}: {plan}");
    }
    // The join runs on the workers, which read the scan of `u` from the
    // master's one task.
    let plan = lines(&cluster, &format!("EXPLAIN ANALYZE {}", QUERIES[7]))
        .await?
        .join("\n");
    let stages: Vec<&str> = plan.split("───── Stage").skip(1).collect();
    let stage_of = |what: &str| {
        stages
            .iter()
            .find(|stage| stage.contains(what))
            .map(|stage| stage.lines().next().unwrap_or_default())
            .ok_or_else(|| format!("no stage runs {what}: {plan}"))
    };
    assert!(stage_of("HashJoinExec")?.contains("tasks=2"), "{plan}");
    assert!(
        stage_of("WideScanExec: table=default.public.u")?.contains("tasks=1"),
        "{plan}"
    );
    for worker in workers {
        worker.shutdown().await?;
    }
    master.shutdown().await?;
    Ok(())
}
