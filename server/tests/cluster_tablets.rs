//! Tablets on workers: a tablet moves to a worker (and on, and back), its
//! rows are then read and written there, a worker that is down fails the
//! statements that need it and no other, and a master opened again finds
//! its tablets where the tablet map says.

use std::ops::Bound;
use std::time::{Duration, Instant};

use widesql::Db;
use widesql_server::{Server, WorkerServer};

#[expect(
    dead_code,
    reason = "the cluster helpers are shared by every cluster test; this one uses some"
)]
mod common;

use common::{any_port, lines, master, until_up, worker, BoxError};

/// Waits until `db`, a worker, holds nothing of `table`, which its master
/// dropped: the master removes the workers' copies after the drop.
async fn until_dropped(db: &Db, table: widesql::TableId) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while held(db, table)? > 0 {
        if Instant::now() > deadline {
            return Err(format!("the worker still holds {} entries", held(db, table)?).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// How many entries the table tree of `table` holds in `db`. A count that
/// meets the tree dropped under it (the worker removes a dropped table's
/// copy meanwhile) is taken again: such an iterator yields an error at
/// every step, for good.
fn held(db: &Db, table: widesql::TableId) -> Result<usize, BoxError> {
    let mut name = b"t:".to_vec();
    name.extend_from_slice(table.as_bytes());
    let mut failed = None;
    for _ in 0..100 {
        let entries =
            widesql::internals::held_entries(db, &name, Bound::Unbounded, Bound::Unbounded, false)?;
        match entries.collect::<Result<Vec<_>, _>>() {
            Ok(entries) => return Ok(entries.len()),
            Err(e) => failed = Some(e),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(format!("the worker's entries cannot be counted: {failed:?}").into())
}

/// A master and one worker that joined it, each on a database of its own
/// in `dirs`.
struct OneWorker {
    dirs: [tempfile::TempDir; 2],
    db: Db,
    master: Server,
    worker_db: Db,
    worker: WorkerServer,
    url: String,
}

async fn one_worker() -> Result<OneWorker, BoxError> {
    let dirs = [tempfile::tempdir()?, tempfile::tempdir()?];
    let (db, master) = master(dirs[0].path()).await?;
    let worker_db = Db::open(dirs[1].path())?;
    let worker = worker(&worker_db, &master, any_port()).await?;
    let url = format!("http://{}", worker.local_addr());
    until_up(&db, 1).await?;
    Ok(OneWorker {
        dirs,
        db,
        master,
        worker_db,
        worker,
        url,
    })
}

const ALL: &str = "SELECT _key, v FROM t ORDER BY _key";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tablet_moves_to_workers_and_back_and_its_rows_follow() -> Result<(), BoxError> {
    let dirs = [
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    ];
    let (db, master) = master(dirs[0].path()).await?;
    let worker_dbs = [Db::open(dirs[1].path())?, Db::open(dirs[2].path())?];
    let w1 = worker(&worker_dbs[0], &master, any_port()).await?;
    let w2 = worker(&worker_dbs[1], &master, any_port()).await?;
    let (url1, url2) = (
        format!("http://{}", w1.local_addr()),
        format!("http://{}", w2.local_addr()),
    );
    until_up(&db, 2).await?;
    let session = db.session();
    session
        .run(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, v BIGINT); \
             INSERT INTO t SELECT chr(97 + value), value FROM generate_series(0, 25) AS s(value); \
             ALTER TABLE t SPLIT AT ('h', 'p')",
        )
        .await?;
    let table = db.open_table("default", "public", "t")?.id();
    let before = lines(&session, ALL).await?;
    assert_eq!(before.len(), 26);

    let moved = lines(
        &session,
        &format!("ALTER TABLE t MOVE TABLET AT ('k') TO '{url1}'"),
    )
    .await?;
    assert_eq!(moved.len(), 1);
    assert!(moved[0].ends_with(&format!("'h' 'p' {url1}")), "{moved:?}");
    assert_eq!(lines(&session, ALL).await?, before);
    // Its rows, h to o, are in the worker's database.
    assert!(held(&worker_dbs[0], table)? >= 8);
    let explain = lines(
        &session,
        "EXPLAIN SELECT * FROM t WHERE _key >= 'k' AND _key < 'l'",
    )
    .await?;
    assert!(
        explain
            .concat()
            .contains(&format!("tablets=1 of 3 ({url1})")),
        "{explain:?}"
    );

    // Writes to its keys go there; the others stay here.
    session
        .run(
            "INSERT INTO t VALUES ('kk', 100), ('zz', 200); \
             UPDATE t SET v = v + 1000 WHERE _key IN ('k', 'a'); \
             DELETE FROM t WHERE _key IN ('l', 'b')",
        )
        .await?;
    let mut expected: Vec<String> = before
        .iter()
        .filter(|l| !l.starts_with("l ") && !l.starts_with("b "))
        .map(|l| match l.as_str() {
            "a 0" => "a 1000".to_string(),
            "k 10" => "k 1010".to_string(),
            other => other.to_string(),
        })
        .collect();
    expected.push("kk 100".into());
    expected.push("zz 200".into());
    expected.sort();
    assert_eq!(lines(&session, ALL).await?, expected);

    // On to the second worker, then back to the master.
    session
        .run(&format!("ALTER TABLE t MOVE TABLET AT ('h') TO '{url2}'"))
        .await?;
    assert_eq!(lines(&session, ALL).await?, expected);
    assert!(held(&worker_dbs[1], table)? >= 8);
    let shown = lines(&session, "SHOW TABLETS FROM t").await?;
    assert!(shown[1].ends_with(&url2), "{shown:?}");
    session
        .run("ALTER TABLE t MOVE TABLET AT ('h') TO LOCAL")
        .await?;
    assert_eq!(lines(&session, ALL).await?, expected);
    assert!(lines(&session, "SHOW TABLETS FROM t")
        .await?
        .iter()
        .all(|l| l.ends_with(" local")));
    // The first worker still holds its copy from the first move, 'kk'
    // among it: a move there again clears it first.
    session
        .run(&format!(
            "DELETE FROM t WHERE _key = 'kk'; ALTER TABLE t MOVE TABLET AT ('h') TO '{url1}'"
        ))
        .await?;
    expected.retain(|l| l != "kk 100");
    assert_eq!(lines(&session, ALL).await?, expected);

    // Refused: a worker that is not up, the home it has.
    for (sql, said) in [
        (
            "ALTER TABLE t MOVE TABLET AT ('a') TO 'http://127.0.0.1:9'",
            "is not a worker that is up",
        ),
        (
            "ALTER TABLE t MOVE TABLET AT ('a') TO LOCAL",
            "already served by this process",
        ),
    ] {
        let error = session.run(sql).await.expect_err(sql);
        assert!(error.to_string().contains(said), "{sql}: {error}");
    }
    // The master keeps its copy of the tablet it moved last until it
    // opens the database again.
    let kept = widesql::internals::stored_entries(&db, table)?;
    w1.shutdown().await?;
    w2.shutdown().await?;
    master.shutdown().await?;
    drop(session);
    drop(db);
    let reopened = Db::open(dirs[0].path())?;
    let after = widesql::internals::stored_entries(&reopened, table)?;
    assert!(after < kept, "the moved rows are gone: {after} of {kept}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_of_one_tablet_moves_without_a_key_and_drops_from_its_worker(
) -> Result<(), BoxError> {
    let OneWorker {
        dirs: _dirs,
        db,
        master,
        worker_db,
        worker: w,
        url,
    } = one_worker().await?;
    let session = db.session();
    // No primary key: its keys are generated, so no key names its tablet.
    session
        .run(
            "CREATE TABLE n (a INT, b VARCHAR); INSERT INTO n VALUES (1, 'x'), (2, 'y'), (3, NULL)",
        )
        .await?;
    let table = db.open_table("default", "public", "n")?.id();
    let moved = lines(&session, &format!("ALTER TABLE n MOVE TABLET TO '{url}'")).await?;
    assert!(moved.len() == 1 && moved[0].ends_with(&url), "{moved:?}");
    assert!(held(&worker_db, table)? >= 3);
    session
        .run("INSERT INTO n VALUES (4, 'z'); UPDATE n SET b = 'w' WHERE a = 1")
        .await?;
    let all = "SELECT a, b FROM n ORDER BY a";
    let expected = ["1 w", "2 y", "3 ", "4 z"];
    assert_eq!(lines(&session, all).await?, expected);
    session.run("ALTER TABLE n MOVE TABLET TO LOCAL").await?;
    assert_eq!(lines(&session, all).await?, expected);
    // The worker keeps its old copy, never read again; dropped, the
    // table leaves nothing there.
    assert!(held(&worker_db, table)? >= 4);
    session.run("DROP TABLE n").await?;
    until_dropped(&worker_db, table).await?;
    // So does a table replaced, and one in a schema dropped whole.
    session
        .run(&format!(
            "CREATE TABLE r (k VARCHAR PRIMARY KEY); INSERT INTO r VALUES ('a'); \
             ALTER TABLE r MOVE TABLET TO '{url}'; \
             CREATE SCHEMA s; CREATE TABLE s.c (k VARCHAR PRIMARY KEY); INSERT INTO s.c VALUES ('a'); \
             ALTER TABLE s.c MOVE TABLET TO '{url}'"
        ))
        .await?;
    let replaced = db.open_table("default", "public", "r")?.id();
    let cascaded = db.open_table("default", "s", "c")?.id();
    assert!(held(&worker_db, replaced)? > 0 && held(&worker_db, cascaded)? > 0);
    session
        .run("CREATE OR REPLACE TABLE r (k VARCHAR PRIMARY KEY); DROP SCHEMA s CASCADE")
        .await?;
    until_dropped(&worker_db, replaced).await?;
    until_dropped(&worker_db, cascaded).await?;
    session
        .run(
            "CREATE TABLE n (a INT, b VARCHAR); INSERT INTO n VALUES (1, 'x'), (2, 'y'), (3, NULL)",
        )
        .await?;

    // Refused: a key of a table without one, no key for a table of two
    // tablets.
    session
        .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY); ALTER TABLE t SPLIT AT ('m')")
        .await?;
    for (sql, said) in [
        (
            "ALTER TABLE n MOVE TABLET AT (1) TO LOCAL".to_string(),
            "cannot move a tablet of table 'default.public.n': it has no primary key: its rows \
             are keyed in the order they were written; move its one tablet without AT",
        ),
        (
            format!("ALTER TABLE t MOVE TABLET TO '{url}'"),
            "table 'default.public.t': it has 2 tablets: name the one to move with AT (key)",
        ),
    ] {
        let error = session.run(&sql).await.expect_err(&sql);
        assert!(error.to_string().contains(said), "{sql}: {error}");
    }
    w.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_is_down_fails_only_the_statements_that_need_it() -> Result<(), BoxError> {
    let OneWorker {
        dirs,
        db,
        master,
        worker_db,
        worker: w1,
        url,
    } = one_worker().await?;
    let addr = w1.local_addr();
    let session = db.session();
    session
        .run(&format!(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, v BIGINT); \
             INSERT INTO t VALUES ('a', 1), ('m', 2), ('x', 3); \
             ALTER TABLE t SPLIT AT ('k'); \
             ALTER TABLE t MOVE TABLET AT ('m') TO '{url}'"
        ))
        .await?;
    w1.shutdown().await?;
    // A move that cannot read its tablet changes nothing.
    let error = session
        .run("ALTER TABLE t MOVE TABLET AT ('m') TO LOCAL")
        .await
        .expect_err("the source is down");
    assert!(
        error.to_string().contains(&format!("worker {url}")),
        "{error}"
    );
    assert!(lines(&session, "SHOW TABLETS FROM t").await?[1].ends_with(&url));
    // The first tablet is here: reads and writes of its keys go on.
    assert_eq!(
        lines(&session, "SELECT v FROM t WHERE _key < 'k'").await?,
        ["1"]
    );
    session.run("INSERT INTO t VALUES ('b', 4)").await?;
    // The second is on the worker that stopped: they fail, naming both.
    for sql in ["SELECT count(*) FROM t", "INSERT INTO t VALUES ('n', 5)"] {
        let started = Instant::now();
        let error = session.run(sql).await.expect_err(sql).to_string();
        assert!(error.contains(&format!("worker {url}")), "{sql}: {error}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{sql} took {:?}",
            started.elapsed()
        );
    }
    // Compaction goes on past it: tables on either side of it in the
    // catalog, each with versions its GC hides, are compacted, and the
    // error names the worker.
    for table in ["a_before", "z_after"] {
        session
            .run(&format!(
                "CREATE TABLE {table} (_key VARCHAR PRIMARY KEY, v BIGINT) \
                     WITH ('cf.max_versions' = '1'); \
                 INSERT INTO {table} VALUES ('k', 1); \
                 UPDATE {table} SET v = 2; \
                 UPDATE {table} SET v = 3"
            ))
            .await?;
    }
    let error = db.compact().expect_err("a tablet's worker is down");
    assert!(
        error.to_string().contains(&format!("worker {url}")),
        "{error}"
    );
    for name in ["a_before", "z_after"] {
        let table = db.open_table("default", "public", name)?;
        assert_eq!(table.compact()?, 0, "{name} was not compacted");
    }
    // A flush reaches every worker that holds a tablet: it cannot be
    // whole while one is down.
    let error = db.flush().expect_err("a tablet's worker is down");
    assert!(
        error.to_string().contains(&format!("worker {url}")),
        "{error}"
    );
    // Back on its address, its directory opened again, the worker serves
    // its tablet again.
    drop(worker_db);
    let worker_db = Db::open(dirs[1].path())?;
    let again = worker(&worker_db, &master, addr).await?;
    assert_eq!(
        lines(&session, "SELECT _key, v FROM t ORDER BY _key").await?,
        ["a 1", "b 4", "m 2", "x 3"]
    );
    db.flush()?;
    // A master opened again finds the tablet where the map says.
    master.shutdown().await?;
    drop(session);
    drop(db);
    // Opened by a process that is no master, the directory serves the
    // tablets the master holds, and no other.
    let embedded = Db::open(dirs[0].path())?;
    let session = embedded.session();
    assert_eq!(
        lines(&session, "SELECT v FROM t WHERE _key < 'k' ORDER BY v").await?,
        ["1", "4"]
    );
    let error = session
        .run("SELECT count(*) FROM t")
        .await
        .expect_err("no master");
    assert!(
        error.to_string().contains("only a cluster's master"),
        "{error}"
    );
    drop(session);
    drop(embedded);
    let (db, master) = self::master(dirs[0].path()).await?;
    assert_eq!(
        lines(&db.session(), "SELECT _key, v FROM t ORDER BY _key").await?,
        ["a 1", "b 4", "m 2", "x 3"]
    );
    again.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_made_while_a_tablet_moves_are_all_at_its_new_home() -> Result<(), BoxError> {
    let OneWorker {
        dirs: _dirs,
        db,
        master,
        worker_db,
        worker: w1,
        url,
    } = one_worker().await?;
    db.session()
        .run(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, v BIGINT); \
             INSERT INTO t SELECT concat('k', CAST(value AS VARCHAR)), value \
             FROM generate_series(0, 19999) AS s(value)",
        )
        .await?;
    let writer = {
        let db = db.clone();
        tokio::spawn(async move {
            let session = db.session();
            for i in 0..100 {
                session
                    .run(&format!("INSERT INTO t VALUES ('w{i}', {i})"))
                    .await?;
            }
            Ok::<_, widesql::Error>(())
        })
    };
    db.session()
        .run(&format!("ALTER TABLE t MOVE TABLET AT ('k') TO '{url}'"))
        .await?;
    writer.await??;
    assert_eq!(
        lines(&db.session(), "SELECT count(*) FROM t").await?,
        ["20100"]
    );
    // Every row is on the worker, the table's one tablet there.
    let table = db.open_table("default", "public", "t")?.id();
    assert!(held(&worker_db, table)? >= 20100);
    w1.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}

/// Rows `n0000` to `n1999`, written while a tablet's copy is held.
const WRITTEN_WHILE_HELD: &str =
    "INSERT INTO t SELECT concat('n', lpad(CAST(value AS VARCHAR), 4, '0')), \
     value, 'new' FROM generate_series(0, 1999) AS s(value)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_on_while_a_tablet_is_copied_and_reach_its_new_home() -> Result<(), BoxError> {
    move_while_writing(None).await
}

/// The same, where the move keeps so few written keys that it copies the
/// whole range again under every row lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_that_keeps_too_many_written_keys_copies_its_range_again() -> Result<(), BoxError> {
    move_while_writing(Some(100)).await
}

/// Moves a tablet of a table of two locality groups to a worker, held
/// between the copies of its groups while rows are written; the move
/// keeps at most `noted` written keys per group.
async fn move_while_writing(noted: Option<usize>) -> Result<(), BoxError> {
    let OneWorker {
        dirs: _dirs,
        db,
        master,
        worker_db,
        worker: w1,
        url,
    } = one_worker().await?;
    // Two locality groups, so that the move is held between their copies.
    db.session()
        .run(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, v BIGINT, body VARCHAR) \
             WITH ('page.columns' = 'body', 'page.locality_group' = 'blobs'); \
             INSERT INTO t SELECT concat('k', lpad(CAST(value AS VARCHAR), 4, '0')), value, \
             concat('b', CAST(value AS VARCHAR)) FROM generate_series(0, 999) AS s(value); \
             ALTER TABLE t SPLIT AT ('k0500')",
        )
        .await?;
    let table = db.open_table("default", "public", "t")?.id();
    if let Some(noted) = noted {
        widesql::internals::limit_keys_noted(table, noted);
    }
    let hold = widesql::internals::hold_moves_at(table, widesql::internals::MoveStep::Copying);
    let moving = {
        let db = db.clone();
        let url = url.clone();
        tokio::spawn(async move {
            db.session()
                .run(&format!(
                    "ALTER TABLE t MOVE TABLET AT ('k0600') TO '{url}'"
                ))
                .await
        })
    };
    let reached =
        tokio::task::spawn_blocking(move || (hold.reached(Duration::from_secs(30)), hold));
    let (reached, hold) = reached.await?;
    assert!(reached, "the move did not reach its copy");
    // The first group is copied, the second not yet. Writes to the
    // tablet's rows run meanwhile (they waited for the whole copy before):
    // an update of a copied row in both groups, a delete, a new row, and
    // more rows than the move copies under its lock.
    let writes = tokio::time::timeout(Duration::from_secs(30), async {
        let session = db.session();
        session
            .run(
                "UPDATE t SET v = -1, body = 'changed' WHERE _key = 'k0600'; \
                 DELETE FROM t WHERE _key = 'k0700'; \
                 INSERT INTO t VALUES ('k0800x', 8000, 'added'), ('a', 1, 'outside')",
            )
            .await?;
        session.run(WRITTEN_WHILE_HELD).await
    })
    .await;
    let moved_yet = moving.is_finished();
    drop(hold);
    let written = writes.map_err(|_| "writes waited for the tablet's copy")?;
    written?;
    assert!(!moved_yet, "the move ended while it was held");
    moving.await??;
    // Every write is at the tablet's new home, which now serves its rows.
    assert_eq!(
        lines(
            &db.session(),
            "SELECT _key, v, body FROM t WHERE _key IN ('a', 'k0600', 'k0700', 'k0800x', 'n1999') \
             ORDER BY _key",
        )
        .await?,
        [
            "a 1 outside",
            "k0600 -1 changed",
            "k0800x 8000 added",
            "n1999 1999 new"
        ]
    );
    assert_eq!(
        lines(&db.session(), "SELECT count(*), sum(v) FROM t").await?,
        [format!(
            "3001 {}",
            (0..1000).sum::<i64>() - 600 - 1 - 700 + 8000 + 1 + (0..2000).sum::<i64>()
        )]
    );
    // The tablet's 2,500 rows are in the worker's database.
    assert!(held(&worker_db, table)? >= 2500);
    let explain = lines(&db.session(), "EXPLAIN SELECT * FROM t WHERE _key >= 'n'").await?;
    assert!(
        explain
            .concat()
            .contains(&format!("tablets=1 of 2 ({url})")),
        "{explain:?}"
    );
    w1.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}

/// A move of `table` (`sql`) held at `step`, where the oldest call held
/// back from the worker `url` is sent: the call's answer, the hold (the
/// move goes on once it is dropped) and the move.
async fn send_held_back_during_move(
    db: &Db,
    table: widesql::TableId,
    step: widesql::internals::MoveStep,
    sql: String,
    url: &str,
) -> Result<(SentLate, widesql::internals::MoveHold, Moving), BoxError> {
    let hold = widesql::internals::hold_moves_at(table, step);
    let moving = {
        let db = db.clone();
        tokio::spawn(async move {
            db.session().run(&sql).await?;
            Ok(())
        })
    };
    let reached =
        tokio::task::spawn_blocking(move || (hold.reached(Duration::from_secs(30)), hold));
    let (reached, hold) = reached.await?;
    if !reached {
        return Err(format!("the move did not reach {step:?}").into());
    }
    let sending = url.to_string();
    let sent = tokio::task::spawn_blocking(move || {
        widesql_server::internals::send_held_back_apply(&sending)
    })
    .await?;
    Ok((sent.ok_or("no call was held back")?, hold, moving))
}

/// What a worker answered a call sent late.
type SentLate = Result<(), widesql::internals::BackendError>;
/// A move running on a task of its own.
type Moving = tokio::task::JoinHandle<Result<(), BoxError>>;

/// Checks that a call sent late was refused as one its master gave up on.
fn refused_as_given_up(sent: SentLate) -> Result<(), BoxError> {
    let refused = sent.err().ok_or("the call sent late was applied")?;
    if !refused.to_string().contains("not applied") {
        return Err(format!("refused for another reason: {refused}").into());
    }
    Ok(())
}

/// A master and one worker, with a table `t` of 100 rows (`k0000` to
/// `k0099`) whose tablet from `k0050` is on the worker.
async fn rows_on_one_worker() -> Result<(OneWorker, widesql::TableId), BoxError> {
    let cluster = one_worker().await?;
    cluster
        .db
        .session()
        .run(&format!(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, v BIGINT, body VARCHAR); \
             INSERT INTO t SELECT concat('k', lpad(CAST(value AS VARCHAR), 4, '0')), value, 'old' \
             FROM generate_series(0, 99) AS s(value); \
             ALTER TABLE t SPLIT AT ('k0050'); \
             ALTER TABLE t MOVE TABLET AT ('k0060') TO '{}'",
            cluster.url
        ))
        .await?;
    let table = cluster.db.open_table("default", "public", "t")?.id();
    Ok((cluster, table))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_given_up_on_lands_before_its_tablet_moves_or_never() -> Result<(), BoxError> {
    use widesql_server::internals::hold_back_applies_to;
    let (
        OneWorker {
            dirs: _dirs,
            db,
            master,
            worker_db: _worker_db,
            worker: w1,
            url,
        },
        table,
    ) = rows_on_one_worker().await?;
    let session = db.session();
    // A write to the worker's tablet whose answer is lost: its writer
    // gets an error, and the call is still on its way.
    hold_back_applies_to(&url, true);
    let lost = session
        .run("INSERT INTO t VALUES ('k0077x', 7, 'late')")
        .await;
    hold_back_applies_to(&url, false);
    assert!(lost.is_err(), "the write whose answer was lost succeeded");
    // The tablet moves back; the call arrives once its rows are copied.
    let (sent, hold, moving) = send_held_back_during_move(
        &db,
        table,
        widesql::internals::MoveStep::Copying,
        "ALTER TABLE t MOVE TABLET AT ('k0060') TO LOCAL".into(),
        &url,
    )
    .await?;
    // Landed there, it would be read now and gone once the move ends.
    let read_meanwhile = lines(&session, "SELECT v FROM t WHERE _key = 'k0077x'").await?;
    drop(hold);
    moving.await??;
    refused_as_given_up(sent)?;
    assert!(read_meanwhile.is_empty(), "{read_meanwhile:?}");
    assert!(lines(&session, "SELECT v FROM t WHERE _key = 'k0077x'")
        .await?
        .is_empty());
    assert_eq!(
        lines(&session, "SELECT count(*), sum(v) FROM t").await?,
        [format!("100 {}", (0..100).sum::<i64>())]
    );
    w1.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_given_up_on_while_its_tablet_moves_is_copied_or_refused() -> Result<(), BoxError> {
    use widesql::internals::{hold_moves_at, MoveStep};
    use widesql_server::internals::{hold_back_applies_to, send_held_back_apply};
    let (
        OneWorker {
            dirs: _dirs,
            db,
            master,
            worker_db: _worker_db,
            worker: w1,
            url,
        },
        table,
    ) = rows_on_one_worker().await?;
    let session = db.session();
    let holds = [
        hold_moves_at(table, MoveStep::Copying),
        hold_moves_at(table, MoveStep::CopiedAgain),
        hold_moves_at(table, MoveStep::Flushed),
    ];
    let moving = {
        let db = db.clone();
        tokio::spawn(async move {
            db.session()
                .run("ALTER TABLE t MOVE TABLET AT ('k0060') TO LOCAL")
                .await
        })
    };
    let mut holds = holds.into_iter();
    // Waits until the move reaches the next step held, and lets it go on
    // from there once the returned hold is dropped.
    let mut next_step = || {
        let hold = holds.next().ok_or("no step left")?;
        let reached = hold.reached(Duration::from_secs(30));
        if !reached {
            return Err(BoxError::from("the move did not reach its step"));
        }
        Ok(hold)
    };
    let copying = tokio::task::block_in_place(&mut next_step)?;
    // While the rows are copied: two writes whose answers are lost, and
    // more writes than the move copies under its locks, so that it copies
    // the written keys again without them first.
    hold_back_applies_to(&url, true);
    let lost = [
        session
            .run("INSERT INTO t VALUES ('k0077x', 7, 'late')")
            .await,
        session
            .run("INSERT INTO t VALUES ('k0088x', 8, 'later')")
            .await,
    ];
    hold_back_applies_to(&url, false);
    assert!(lost.iter().all(Result::is_err), "{lost:?}");
    session.run(WRITTEN_WHILE_HELD).await?;
    drop(copying);
    let copied_again = tokio::task::block_in_place(&mut next_step)?;
    // The first arrives after its key was copied again, and lands: it is
    // read at the tablet's source now, and must be at its new home too.
    let sending = url.clone();
    let first = tokio::task::spawn_blocking(move || send_held_back_apply(&sending)).await?;
    first.ok_or("no call was held back")??;
    let read = lines(&session, "SELECT v FROM t WHERE _key = 'k0077x'").await?;
    assert_eq!(read, ["7"]);
    drop(copied_again);
    // The second arrives after the last copy: refused.
    let flushed = tokio::task::block_in_place(&mut next_step)?;
    let sending = url.clone();
    let second = tokio::task::spawn_blocking(move || send_held_back_apply(&sending)).await?;
    drop(flushed);
    moving.await??;
    refused_as_given_up(second.ok_or("no call was held back")?)?;
    assert_eq!(
        lines(
            &session,
            "SELECT _key, v FROM t WHERE _key IN ('k0077x', 'k0088x') ORDER BY _key"
        )
        .await?,
        ["k0077x 7"]
    );
    assert_eq!(lines(&session, "SELECT count(*) FROM t").await?, ["2101"]);
    w1.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_given_up_on_never_lands_on_a_later_copy() -> Result<(), BoxError> {
    use widesql_server::internals::hold_back_applies_to;
    let OneWorker {
        dirs: _dirs,
        db,
        master,
        worker_db: _worker_db,
        worker: w1,
        url,
    } = one_worker().await?;
    let session = db.session();
    session
        .run(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, v BIGINT); \
             INSERT INTO t SELECT concat('k', lpad(CAST(value AS VARCHAR), 4, '0')), value \
             FROM generate_series(0, 99) AS s(value); \
             ALTER TABLE t SPLIT AT ('k0050')",
        )
        .await?;
    let table = db.open_table("default", "public", "t")?.id();
    let to_worker = format!("ALTER TABLE t MOVE TABLET AT ('k0060') TO '{url}'");
    // A move whose copy to the worker is lost on its way fails, and the
    // tablet stays; a row of that copy is deleted meanwhile.
    hold_back_applies_to(&url, true);
    let failed = session.run(&to_worker).await;
    hold_back_applies_to(&url, false);
    assert!(failed.is_err(), "the move whose copy was lost succeeded");
    session.run("DELETE FROM t WHERE _key = 'k0077'").await?;
    // The move again; the lost copy arrives once the target was cleared.
    let (sent, hold, moving) = send_held_back_during_move(
        &db,
        table,
        widesql::internals::MoveStep::Cleared,
        to_worker,
        &url,
    )
    .await?;
    drop(hold);
    moving.await??;
    refused_as_given_up(sent)?;
    // The deleted row did not come back with it.
    assert_eq!(
        lines(&session, "SELECT count(*), sum(v) FROM t").await?,
        [format!("99 {}", (0..100).sum::<i64>() - 77)]
    );
    w1.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_away_at_a_drop_removes_its_copy_when_it_joins_again() -> Result<(), BoxError> {
    let dirs = [
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    ];
    let (db, master) = master(dirs[0].path()).await?;
    let worker_db = Db::open(dirs[1].path())?;
    let w = worker(&worker_db, &master, any_port()).await?;
    let addr = w.local_addr();
    let url = format!("http://{addr}");
    until_up(&db, 1).await?;
    let session = db.session();
    for table in ["gone", "kept", "moved_back"] {
        session
            .run(&format!(
                "CREATE TABLE {table} (_key VARCHAR PRIMARY KEY, v BIGINT); \
                 INSERT INTO {table} VALUES ('a', 1), ('b', 2); \
                 ALTER TABLE {table} MOVE TABLET TO '{url}'"
            ))
            .await?;
    }
    let id = |name: &str| -> Result<widesql::TableId, BoxError> {
        Ok(db.open_table("default", "public", name)?.id())
    };
    let (gone, kept, moved_back) = (id("gone")?, id("kept")?, id("moved_back")?);
    // A tablet moved away leaves its old copy on the worker.
    session
        .run("ALTER TABLE moved_back MOVE TABLET TO LOCAL")
        .await?;

    // Dropped while the worker is down: its copies stay there for now.
    w.shutdown().await?;
    session.run("DROP TABLE gone").await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(held(&worker_db, gone)? >= 2);

    // Back, it names the tables it holds when it joins, and the master
    // answers which were dropped: they are gone once its start returns.
    let w = worker(&worker_db, &master, addr).await?;
    assert_eq!(held(&worker_db, gone)?, 0);
    assert!(held(&worker_db, kept)? >= 2);
    assert_eq!(
        lines(&session, "SELECT _key, v FROM kept ORDER BY _key").await?,
        ["a 1", "b 2"]
    );

    // A master opened again (on its address) reaches the workers its
    // tablet map names; with every tablet back on it, it names none, and
    // a table whose old copy only the worker keeps is dropped without a
    // call to the worker: the copy goes at the worker's next heartbeat.
    session.run("ALTER TABLE kept MOVE TABLET TO LOCAL").await?;
    let master_addr = master.local_addr();
    master.shutdown().await?;
    drop(session);
    drop(db);
    let db = Db::open(dirs[0].path())?;
    let options = widesql_server::ServeOptions {
        listen: master_addr,
        ..common::master_options(None)?
    };
    let master = widesql_server::Server::start(db.clone(), options).await?;
    let session = db.session();
    assert!(held(&worker_db, moved_back)? >= 2);
    session.run("DROP TABLE moved_back").await?;
    until_dropped(&worker_db, moved_back).await?;
    until_up(&db, 1).await?;
    assert_eq!(
        lines(&session, "SELECT _key, v FROM kept ORDER BY _key").await?,
        ["a 1", "b 2"]
    );

    // A master whose catalog does not know a table (another database's
    // here; one restored from an older copy of its files is the same)
    // did not drop it, and the worker keeps its tablets.
    w.shutdown().await?;
    let other_db = Db::open(dirs[2].path())?;
    let (_, other) = common::master_of(other_db.clone()).await?;
    let w = worker(&worker_db, &other, addr).await?;
    until_up(&other_db, 1).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(held(&worker_db, kept)? >= 2);
    other.shutdown().await?;

    w.shutdown().await?;
    master.shutdown().await?;
    Ok(())
}
