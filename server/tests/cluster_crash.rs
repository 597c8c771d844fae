//! A move stopped at each of its steps, as a crash would stop it: a child
//! process runs a master and a worker, moves a tablet (to the worker, or
//! back to the master) and aborts at the step under test. The parent then
//! opens both directories again and checks that the tablet has one owner
//! (the source before the catalog changed, the target after), that every
//! row is there once, and that the move, run again, finishes. At the step
//! where a move copies again the keys written while it copied, the rows
//! written then (acknowledged before the crash) are there too.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use widesql::internals::{crash_moves_at, hold_moves_at, MoveStep};
use widesql::Db;

#[expect(
    dead_code,
    reason = "the cluster helpers are shared by every cluster test; this one uses some"
)]
mod common;

use common::{lines, master, until_up, worker, BoxError};

/// Set in the child's environment: step, direction, master directory,
/// worker directory and worker port, separated by spaces.
const CHILD: &str = "WIDESQL_MOVE_CRASH_CHILD";

const SETUP: &str = "CREATE TABLE t (_key VARCHAR PRIMARY KEY, v BIGINT, body VARCHAR) \
         WITH ('page.columns' = 'body', 'page.locality_group' = 'blobs'); \
     INSERT INTO t SELECT 'k' || lpad(CAST(value AS VARCHAR), 3, '0'), value, repeat('x', 100) \
         FROM generate_series(0, 299) AS s(value); \
     ALTER TABLE t SPLIT AT ('k100')";

/// What every check reads: rows, distinct keys, and sums of both groups'
/// columns.
const WHOLE: &str = "SELECT count(*), count(DISTINCT _key), sum(v), sum(length(body)) FROM t";
const WHOLE_ANSWER: &str = "300 300 44850 30000";

/// Rows `n0000` to `n1999`, in the moving tablet, written while its rows
/// are copied: more keys than a move copies under its locks, so that it
/// copies them again first (and stops at [`MoveStep::CopiedAgain`]).
const WRITTEN_WHILE_COPYING: &str =
    "INSERT INTO t SELECT concat('n', lpad(CAST(value AS VARCHAR), 4, '0')), \
     value, repeat('y', 10) FROM generate_series(0, 1999) AS s(value)";
/// [`WHOLE_ANSWER`] with those rows.
const WHOLE_ANSWER_WITH_WRITES: &str = "2300 2300 2043850 50000";

const STEPS: [(MoveStep, &str); 5] = [
    (MoveStep::Cleared, "cleared"),
    (MoveStep::Copying, "copying"),
    (MoveStep::CopiedAgain, "copied-again"),
    (MoveStep::Flushed, "flushed"),
    (MoveStep::Committed, "committed"),
];

/// The move under test: `out` to the worker, `back` to the master.
fn move_sql(direction: &str, url: &str) -> String {
    match direction {
        "out" => format!("ALTER TABLE t MOVE TABLET AT ('k150') TO '{url}'"),
        _ => "ALTER TABLE t MOVE TABLET AT ('k150') TO LOCAL".to_string(),
    }
}

fn loopback(port: u16) -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], port))
}

/// The child: sets the table up, then runs the move that aborts.
async fn child(spec: &str) -> Result<(), BoxError> {
    let parts: Vec<&str> = spec.split(' ').collect();
    let [step, direction, master_dir, worker_dir, port] = parts[..] else {
        return Err(format!("{CHILD} is {spec:?}").into());
    };
    let step = STEPS
        .iter()
        .find(|(_, name)| *name == step)
        .ok_or("no such step")?
        .0;
    let (db, master) = master(Path::new(master_dir)).await?;
    let worker_db = Db::open(worker_dir)?;
    let _worker = worker(&worker_db, &master, loopback(port.parse()?)).await?;
    until_up(&db, 1).await?;
    let url = format!("http://127.0.0.1:{port}");
    let session = db.session();
    session.run(SETUP).await?;
    if direction == "back" {
        session.run(&move_sql("out", &url)).await?;
    }
    crash_moves_at(Some(step));
    if step != MoveStep::CopiedAgain {
        session.run(&move_sql(direction, &url)).await?;
        return Err("the move did not stop".into());
    }
    // Rows written while the first are copied, acknowledged before the
    // move copies them again and stops.
    let table = db.open_table("default", "public", "t")?.id();
    let copying = hold_moves_at(table, MoveStep::Copying);
    let moving = {
        let db = db.clone();
        let sql = move_sql(direction, &url);
        tokio::spawn(async move { db.session().run(&sql).await })
    };
    if !tokio::task::block_in_place(|| copying.reached(Duration::from_secs(30))) {
        return Err("the move did not reach its copy".into());
    }
    session.run(WRITTEN_WHILE_COPYING).await?;
    drop(copying);
    moving.await??;
    Err("the move did not stop".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_stopped_at_any_step_leaves_one_owner_and_every_row_once() -> Result<(), BoxError> {
    if let Ok(spec) = std::env::var(CHILD) {
        return child(&spec).await;
    }
    for direction in ["out", "back"] {
        for (step, name) in STEPS {
            let (master_dir, worker_dir) = (tempfile::tempdir()?, tempfile::tempdir()?);
            let port = std::net::TcpListener::bind(loopback(0))?
                .local_addr()?
                .port();
            let spec = format!(
                "{name} {direction} {} {} {port}",
                master_dir.path().display(),
                worker_dir.path().display()
            );
            let output = Command::new(std::env::current_exe()?)
                .args([
                    "--exact",
                    "a_move_stopped_at_any_step_leaves_one_owner_and_every_row_once",
                    "--nocapture",
                ])
                .env(CHILD, &spec)
                .output()?;
            assert_eq!(
                output.status.signal(),
                Some(6),
                "{spec}: the child did not abort: {}",
                String::from_utf8_lossy(&output.stderr)
            );

            let (db, master) = master(master_dir.path()).await?;
            let worker_db = Db::open(worker_dir.path())?;
            let w = worker(&worker_db, &master, loopback(port)).await?;
            until_up(&db, 1).await?;
            let url = format!("http://127.0.0.1:{port}");
            let session = db.session();
            let (source, target) = match direction {
                "out" => ("local", url.as_str()),
                _ => (url.as_str(), "local"),
            };
            let owner = if step == MoveStep::Committed {
                target
            } else {
                source
            };
            let whole = match step {
                MoveStep::CopiedAgain => WHOLE_ANSWER_WITH_WRITES,
                _ => WHOLE_ANSWER,
            };
            let tablets = lines(&session, "SHOW TABLETS FROM t").await?;
            assert_eq!(tablets.len(), 2, "{spec}: {tablets:?}");
            assert!(tablets[1].ends_with(owner), "{spec}: {tablets:?}");
            assert_eq!(lines(&session, WHOLE).await?, [whole], "{spec}");
            if owner == source {
                session.run(&move_sql(direction, &url)).await?;
                assert!(lines(&session, "SHOW TABLETS FROM t").await?[1].ends_with(target));
                assert_eq!(lines(&session, WHOLE).await?, [whole], "{spec}");
            }
            w.shutdown().await?;
            master.shutdown().await?;
        }
    }
    Ok(())
}
