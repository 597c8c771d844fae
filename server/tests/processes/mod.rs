//! A cluster of processes for tests: a master in the test's process and
//! workers that are the test binary again, in worker mode, each over a
//! database directory of its own, on 127.0.0.1. A worker stops when its
//! standard input closes, which happens when the test that started it
//! ends, however it ends.
//!
//! [`place_tablets`] then puts a database's tables on the workers as an
//! operator would: a table with a primary key and at least three rows is
//! split into three tablets (once), and each tablet moves to a worker of
//! its own, so that statements write and read rows across processes.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use widesql::{Db, DbOptions, ReadOptions, RowKeySpec, RowSet, Table};
use widesql_server::{ClusterSecret, Server, WorkerOptions, WorkerServer};

use crate::common::{any_port, master_of, until_up, BoxError, SECRET};

/// Set in a worker process's environment: its database directory and the
/// master's address, separated by a space.
const WORKER: &str = "WIDESQL_TEST_CLUSTER_WORKER";

/// In a worker process, serves until standard input closes and exits;
/// otherwise returns. A test binary's `main` calls it first.
pub fn serve_if_worker() {
    let Ok(spec) = std::env::var(WORKER) else {
        return;
    };
    let code = match serve_worker(&spec) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("worker {spec}: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn serve_worker(spec: &str) -> Result<(), BoxError> {
    let (dir, master) = spec
        .split_once(' ')
        .ok_or_else(|| format!("{WORKER} is {spec:?}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let db = Db::open(dir)?;
        let options = WorkerOptions {
            listen: any_port(),
            advertise: None,
            master: master.to_string(),
            secret: ClusterSecret::new(SECRET)?,
            tls: None,
            tls_ca: None,
            insecure: false,
        };
        let worker = WorkerServer::start(db, options).await?;
        println!("listening on {}", worker.local_addr());
        std::io::stdout().flush()?;
        tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await??;
        worker.shutdown().await?;
        Ok(())
    })
}

/// A worker process and the pipe that keeps it serving.
struct WorkerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        // Closing its input stops it; it is killed if it does not stop.
        drop(self.stdin.take());
        for _ in 0..250 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a worker process over `dir` that joins `master`; returns it
/// with its address as the master lists it.
fn start_worker(dir: &Path, master: &str) -> Result<(WorkerProcess, String), BoxError> {
    let mut child = Command::new(std::env::current_exe()?)
        .env(WORKER, format!("{} {master}", dir.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().ok_or("the worker has no output")?;
    let process = WorkerProcess { child, stdin };
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| format!("the worker said {line:?}"))?;
    Ok((process, format!("http://{addr}")))
}

/// A master and its worker processes, with their directories. Dropped,
/// it stops the workers (then the master's runtime stops the master).
pub struct Cluster {
    /// The master's database.
    pub db: Db,
    /// The workers' names, as `SHOW WORKERS` lists them.
    pub workers: Vec<String>,
    _server: Server,
    _processes: Vec<WorkerProcess>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Cluster {
    /// A master over a database opened with `options`, on `runtime`, and
    /// `workers` worker processes that have joined it.
    pub fn start(
        runtime: &tokio::runtime::Runtime,
        workers: usize,
        options: DbOptions,
    ) -> Result<Cluster, BoxError> {
        let master_dir = tempfile::tempdir()?;
        let db = Db::open_with(master_dir.path(), options)?;
        let (db, server) = runtime.block_on(master_of(db))?;
        // A loaded machine must not make a worker look down between beats.
        db.workers().set_down_after(Duration::from_secs(30));
        let mut dirs = vec![master_dir];
        let mut processes = Vec::new();
        let mut names = Vec::new();
        for _ in 0..workers {
            let dir = tempfile::tempdir()?;
            let (process, name) = start_worker(dir.path(), &server.local_addr().to_string())?;
            processes.push(process);
            names.push(name);
            dirs.push(dir);
        }
        runtime.block_on(until_up(&db, workers))?;
        Ok(Cluster {
            db,
            workers: names,
            _server: server,
            _processes: processes,
            _dirs: dirs,
        })
    }
}

/// What [`place_tablets`] did: a run whose tables never reached a worker
/// would test nothing of the cluster.
#[derive(Default, Debug)]
pub struct Placed {
    /// User tables seen.
    pub tables: AtomicUsize,
    /// Tablets moved to a worker.
    pub moves: AtomicUsize,
}

impl Placed {
    /// Whether some table was seen and none moved.
    pub fn moved_nothing(&self) -> bool {
        self.tables.load(Ordering::Relaxed) > 0 && self.moves.load(Ordering::Relaxed) == 0
    }
}

/// Every user table of `db`, placed on `workers` as the module doc says.
/// The master's copies of tablets that moved are removed at once, so that
/// a read or write that stayed on the master instead of reaching a
/// tablet's worker would find no row, and answer differently.
pub fn place_tablets(db: &Db, workers: &[String], placed: &Placed) -> widesql::Result<()> {
    let moves = placed.moves.load(Ordering::Relaxed);
    for project in db.projects()? {
        for dataset in project.datasets()? {
            // The system's tables stay with the catalog, on the master.
            for table in dataset.tables()? {
                if !table.id().is_reserved() {
                    placed.tables.fetch_add(1, Ordering::Relaxed);
                    place_table(&table, workers, placed)?;
                }
            }
        }
    }
    if placed.moves.load(Ordering::Relaxed) > moves {
        widesql::internals::remove_moved_away(db)?;
    }
    Ok(())
}

/// Splits `table` in three once it has a primary key and three rows, and
/// moves its `i`-th tablet to a worker of its own (counted from a worker
/// picked by the table's id), unless it is there already.
fn place_table(table: &Table, workers: &[String], placed: &Placed) -> widesql::Result<()> {
    let tablets = table.tablets()?;
    if tablets.len() == 1 && !matches!(table.spec()?.key, RowKeySpec::Generated) {
        let keys = table
            .read_rows(&RowSet::all(), ReadOptions::default())?
            .map(|row| row.map(|row| row.key))
            .collect::<widesql::Result<Vec<_>>>()?;
        if keys.len() >= 3 {
            let mut points: Vec<&[u8]> = vec![&keys[keys.len() / 3], &keys[2 * keys.len() / 3]];
            points.retain(|key| !key.is_empty());
            points.dedup();
            table.split_at(&points)?;
        }
    }
    let first = table
        .id()
        .as_bytes()
        .iter()
        .map(|b| *b as usize)
        .sum::<usize>();
    for (i, tablet) in table.tablets()?.iter().enumerate() {
        let worker = &workers[(first + i) % workers.len()];
        if tablet.worker.as_ref() != Some(worker) {
            table.move_tablet(&tablet.start, Some(worker))?;
            placed.moves.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}
