//! GlueSQL 0.20 on its sled storage: a key per row. Pages only (GlueSQL
//! has no BYTEA literal in multi-row INSERT, so the checksum is hex text,
//! and anchors are left out, as in the figures this benchmark started from).
//!
//! GlueSQL runs on a thread of its own, and each statement has
//! [`STATEMENT_LIMIT`] to answer: sled 0.34.7 can deadlock between a
//! writer rotating its log's segments and an I/O thread (sled issue
//! #1412), and two full runs of this program hung there, inside a GlueSQL
//! point read. A statement that runs out of time leaves GlueSQL out of the
//! rest of the run ([`Hung`]); its thread is abandoned, not joined.
// GlueSQL deprecates its sled storage in favour of redb; sled is the point
// of this comparison (the same storage engine under both SQL layers).
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use gluesql_core::prelude::{Glue, Payload, Value};
use gluesql_sled_storage::SledStorage;

use super::System;
use crate::data::Page;
use crate::report::Hung;
use crate::Res;

/// The longest one GlueSQL statement may take: far above the slowest
/// (a range read at 1,000,000 rows takes about a second).
const STATEMENT_LIMIT: Duration = Duration::from_secs(120);

/// Set once a GlueSQL statement ran out of time: every GlueSQL database of
/// the process is left out from then on, since sled's threads are shared.
static HUNG: AtomicBool = AtomicBool::new(false);

type Job = Box<dyn FnOnce(&mut Glue<SledStorage>) + Send>;

/// The thread GlueSQL runs on.
struct Worker {
    jobs: mpsc::Sender<Job>,
    thread: JoinHandle<()>,
}

/// A GlueSQL database holding the benchmark pages.
pub struct GlueSql {
    /// `None` once a statement ran out of time.
    worker: Option<Worker>,
    path: PathBuf,
}

impl GlueSql {
    /// A new database in `path`.
    pub fn open(path: &Path) -> Res<Self> {
        if HUNG.load(Ordering::SeqCst) {
            return Ok(Self::left_out(path));
        }
        let (jobs, receive) = mpsc::channel::<Job>();
        let (opened, open_result) = mpsc::channel::<Res<()>>();
        let dir = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("gluesql".into())
            .spawn(move || {
                let mut glue = match SledStorage::new(&dir) {
                    Ok(storage) => Glue::new(storage),
                    Err(e) => {
                        let _ = opened.send(Err(e.into()));
                        return;
                    }
                };
                let _ = opened.send(Ok(()));
                for job in receive {
                    job(&mut glue);
                }
            })?;
        match open_result.recv_timeout(STATEMENT_LIMIT) {
            Ok(opened) => opened?,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                HUNG.store(true, Ordering::SeqCst);
                return Ok(Self::left_out(path));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err("GlueSQL's thread ended while opening its database".into())
            }
        }
        let mut glue = GlueSql {
            worker: Some(Worker { jobs, thread }),
            path: path.to_path_buf(),
        };
        let created = glue.execute(
            "CREATE TABLE pages (key TEXT PRIMARY KEY, language TEXT, checksum TEXT, rank INT, contents TEXT)"
                .into(),
        );
        match created {
            Err(e) if !e.is::<Hung>() => Err(e),
            _ => Ok(glue),
        }
    }

    /// A database left out of the run: every operation reports [`Hung`].
    fn left_out(path: &Path) -> Self {
        GlueSql {
            worker: None,
            path: path.to_path_buf(),
        }
    }

    /// Runs `job` on GlueSQL's thread and waits up to [`STATEMENT_LIMIT`].
    fn run<T: Send + 'static>(
        &mut self,
        job: impl FnOnce(&mut Glue<SledStorage>) -> Res<T> + Send + 'static,
    ) -> Res<T> {
        let Some(worker) = self
            .worker
            .as_ref()
            .filter(|_| !HUNG.load(Ordering::SeqCst))
        else {
            return Err(Box::new(Hung(self.name())));
        };
        let (send, answer) = mpsc::channel();
        worker
            .jobs
            .send(Box::new(move |glue: &mut Glue<SledStorage>| {
                let _ = send.send(job(glue));
            }))
            .map_err(|_| "GlueSQL's thread has ended")?;
        match answer.recv_timeout(STATEMENT_LIMIT) {
            Ok(result) => result,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Dropping the sender would let the thread end once the
                // statement returns; it may never.
                self.worker = None;
                HUNG.store(true, Ordering::SeqCst);
                eprintln!(
                    "{}: a statement ran for more than {} s; left out of the rest of the run",
                    self.name(),
                    STATEMENT_LIMIT.as_secs()
                );
                Err(Box::new(Hung(self.name())))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err("GlueSQL's thread ended without an answer".into())
            }
        }
    }

    fn execute(&mut self, sql: String) -> Res<Vec<Payload>> {
        self.run(move |glue| Ok(glue.execute(sql)?))
    }

    /// The rows of a query.
    fn select(&mut self, sql: String) -> Res<Vec<Vec<Value>>> {
        match self.execute(sql)?.pop() {
            Some(Payload::Select { rows, .. }) => Ok(rows),
            other => Err(format!("GlueSQL returned {other:?} for a query").into()),
        }
    }
}

impl Drop for GlueSql {
    /// Closes the database before the next system starts, as every other
    /// system does; a hung thread is left behind.
    fn drop(&mut self) {
        if let Some(Worker { jobs, thread }) = self.worker.take() {
            drop(jobs);
            let _ = thread.join();
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl System for GlueSql {
    fn name(&self) -> String {
        "GlueSQL 0.20 (pages only)".into()
    }

    fn load(&mut self, pages: &[Page]) -> Res<()> {
        for chunk in pages.chunks(100) {
            let values: Vec<String> = chunk
                .iter()
                .map(|p| {
                    format!(
                        "('{}', '{}', '{}', {}, '{}')",
                        p.key,
                        p.language,
                        hex(&p.checksum),
                        p.rank,
                        p.contents
                    )
                })
                .collect();
            self.execute(format!("INSERT INTO pages VALUES {}", values.join(", ")))?;
        }
        self.run(|glue| Ok(glue.storage.tree.flush().map(drop)?))
    }

    fn point(&mut self, key: &str) -> Res<bool> {
        let rows = self.select(format!("SELECT * FROM pages WHERE key = '{key}'"))?;
        Ok(rows.len() == 1)
    }

    fn range(&mut self, prefix: &str) -> Res<usize> {
        let (start, end) = super::prefix_bounds(prefix);
        Ok(self
            .select(format!(
                "SELECT key, language FROM pages WHERE key >= '{start}' AND key < '{end}'"
            ))?
            .len())
    }

    fn per_language(&mut self) -> Res<Vec<(String, i64)>> {
        let mut counts = BTreeMap::new();
        for row in self.select("SELECT language, COUNT(*) FROM pages GROUP BY language".into())? {
            match row.as_slice() {
                [Value::Str(language), Value::I64(n)] => {
                    counts.insert(language.clone(), *n);
                }
                other => return Err(format!("GlueSQL returned the row {other:?}").into()),
            }
        }
        Ok(counts.into_iter().collect())
    }

    fn sum_rank(&mut self) -> Res<i64> {
        match self
            .select("SELECT SUM(rank) FROM pages".into())?
            .as_slice()
        {
            [row] => match row.as_slice() {
                [Value::I64(n)] => Ok(*n),
                [Value::Decimal(d)] => Ok(d.to_string().parse()?),
                other => Err(format!("GlueSQL returned the sum {other:?}").into()),
            },
            other => Err(format!("GlueSQL returned {} rows for a sum", other.len()).into()),
        }
    }

    fn bytes_on_disk(&self) -> Res<Option<u64>> {
        Ok(Some(super::dir_size(&self.path)?))
    }
}
