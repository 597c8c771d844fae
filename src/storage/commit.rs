//! The commit pipeline: every write reaches the backend through one thread,
//! which makes durable writes durable in groups, and a watchdog that turns
//! a storage call that never returns into an error.
//!
//! A writer hands its atomic batch to the pipeline ([`Pipeline::submit`])
//! and waits. The commit thread takes every job queued so far as one
//! *group*: it applies the group's batches one by one in queue order (each
//! atomic on its own; a batch the backend refuses fails only its writer),
//! answers the eventual ones at once, then flushes once for all the
//! group's durable ones and answers them. Jobs that arrive during that
//! flush form the next group, so under load one flush acknowledges many
//! writes, as PostgreSQL's, InnoDB's and RocksDB's group commit do, and a
//! lone writer still waits for exactly one flush. Writers keep their row
//! locks until they are answered, so a reader waits only for a flush that
//! covers the row it reads.
//!
//! One thread applying every batch also means only one thread ever writes
//! into sled's log at a time, which is one of the two conditions of sled
//! 0.34's segment-rotation deadlock (see the README's *Concurrency*
//! section); the other, sled's own I/O threads, widesql cannot control.
//!
//! **The watchdog.** A writer waits for its answer in slices. When the
//! operation the commit thread runs (an apply or a flush, its own or
//! another writer's) has not returned after the stall limit, the writer
//! gets [`StorageError::Stalled`](super::StorageError::Stalled) naming that
//! operation, the store prints one line saying so on standard error, and
//! the database refuses every later write ([`Health::ReadOnly`]) until it is
//! reopened: the stuck call may still land, so nothing after it can be
//! ordered. A failed flush does the same (after a failed fsync the state of
//! the file is unknown, PostgreSQL's rule; sled itself refuses every write
//! after an I/O error). Reads go on.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::backend::{Backend, BackendError, BackendTree, TreeWrites};

/// What the commit thread does for a job.
pub(super) enum Work {
    /// Apply an atomic batch, then move the written trees' write epochs.
    Apply {
        writes: Vec<TreeWrites>,
        epochs: Vec<Arc<AtomicU64>>,
    },
    /// Write a meta key of the default tree durably (the backend flushes).
    PutMeta { key: Vec<u8>, value: Vec<u8> },
    /// Remove a tree; answers whether there was one.
    DropTree(Vec<u8>),
    /// Nothing to apply: a job that only waits for the group's flush.
    Flush,
}

/// Why a job failed.
#[derive(Debug)]
pub(super) enum CommitError {
    /// The backend refused the job's own operation, or the flush of its
    /// group failed.
    Backend(BackendError),
    /// An operation of the commit thread has not returned within the limit.
    Stalled { operation: String, waited: Duration },
    /// The store refuses writes since an earlier stall or failed flush.
    ReadOnly { reason: String },
}

/// Whether a database serves writes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Health {
    /// Reads and writes are served.
    Healthy,
    /// A storage call stalled past the limit, a flush failed, or the store
    /// panicked: writes are refused until the database is reopened; reads
    /// go on.
    ReadOnly {
        /// What happened, naming the operation.
        reason: String,
    },
}

/// Counters of the pipeline, for tests and the benchmark.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Jobs answered (batches, meta writes, tree drops and flush waits).
    pub jobs: u64,
    /// Flushes the pipeline ran for durable jobs.
    pub flushes: u64,
    /// The most durable jobs one flush acknowledged.
    pub largest_group: u64,
    /// Jobs handed in and not answered yet.
    pub queued: u64,
}

/// A job and where its answer goes.
struct Job {
    work: Work,
    durable: bool,
    reply: mpsc::SyncSender<Result<bool, CommitError>>,
}

/// The operation the commit thread runs now, for the watchdog.
#[derive(Clone)]
enum Running {
    Apply {
        /// The batch's first tree.
        tree: Option<Arc<dyn BackendTree>>,
        writes: usize,
    },
    PutMeta,
    DropTree(Vec<u8>),
    Flush {
        jobs: usize,
    },
}

impl Running {
    fn describe(&self) -> String {
        match self {
            Running::Apply { tree, writes } => match tree {
                Some(tree) => format!(
                    "applying a batch of {writes} writes to tree '{}'",
                    String::from_utf8_lossy(tree.name())
                ),
                None => format!("applying a batch of {writes} writes"),
            },
            Running::PutMeta => "writing a meta key".into(),
            Running::DropTree(name) => {
                format!("dropping tree '{}'", String::from_utf8_lossy(name))
            }
            Running::Flush { jobs } => {
                format!("flushing the log to disk ({jobs} durable writes wait for it)")
            }
        }
    }
}

/// What the writers and the commit thread share.
struct Shared {
    backend: Arc<dyn Backend>,
    /// The operation in progress and when it started.
    running: Mutex<Option<(Instant, Running)>>,
    /// Set once writes are refused; the reason is in `refusal`.
    read_only: AtomicBool,
    refusal: Mutex<Option<String>>,
    /// Names the store in the watchdog's message.
    path: String,
    jobs: AtomicU64,
    submitted: AtomicU64,
    flushes: AtomicU64,
    largest_group: AtomicU64,
}

impl Shared {
    fn start(&self, running: Running) {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), running));
    }

    fn finish(&self) {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The operation that has run longer than `limit`, and for how long.
    fn stalled(&self, limit: Duration) -> Option<(String, Duration)> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let (since, what) = running.as_ref()?;
        let waited = since.elapsed();
        (waited >= limit).then(|| (what.describe(), waited))
    }

    /// Refuses writes from now on; the first reason is kept and printed.
    fn refuse_writes(&self, reason: String) {
        let mut refusal = self.refusal.lock().unwrap_or_else(|p| p.into_inner());
        if refusal.is_none() {
            eprintln!(
                "widesql: database '{}': {reason}; it refuses writes until it is reopened",
                self.path
            );
            *refusal = Some(reason);
        }
        self.read_only.store(true, Ordering::SeqCst);
    }

    fn health(&self) -> Health {
        if !self.read_only.load(Ordering::SeqCst) {
            return Health::Healthy;
        }
        let reason = self.refusal.lock().unwrap_or_else(|p| p.into_inner());
        Health::ReadOnly {
            reason: reason.clone().unwrap_or_default(),
        }
    }

    /// Runs one backend call, reporting a panic as an error: the store's
    /// state after a panic inside it is unknown, so writes stop.
    fn call<T>(&self, running: Running, f: impl FnOnce(&dyn Backend) -> T) -> Result<T, String> {
        self.start(running);
        let result = catch_unwind(AssertUnwindSafe(|| f(self.backend.as_ref())));
        self.finish();
        result.map_err(|panic| {
            let reason = format!(
                "the store panicked: {}",
                crate::error::panic_message(panic.as_ref())
            );
            self.refuse_writes(reason.clone());
            reason
        })
    }
}

/// The commit pipeline of one store; dropping it stops its thread.
pub(super) struct Pipeline {
    sender: Option<mpsc::Sender<Job>>,
    shared: Arc<Shared>,
    stall_limit: Duration,
    /// Closed by the commit thread when it has ended (in a mutex, since a
    /// receiver cannot be shared between threads).
    ended: Mutex<mpsc::Receiver<()>>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("stall_limit", &self.stall_limit)
            .finish()
    }
}

/// Eventual batches applied between two flushes at most. Each sled batch
/// queues up to two log-buffer writes on sled's I/O thread pool, and sled's
/// rotation deadlock needs that pool's seven threads busy with writes
/// queued ahead of a file truncation; a flush waits until every queued
/// write is on disk, so it bounds that queue.
const EVENTUAL_BACKLOG: usize = 3;

/// The most jobs one group takes, so that a writer that joined a long
/// queue is answered within a bounded number of applies.
const MAX_GROUP: usize = 1024;

impl Pipeline {
    /// Starts the commit thread of `backend`; `path` names it in messages.
    pub(super) fn start(
        backend: Arc<dyn Backend>,
        path: String,
        stall_limit: Duration,
    ) -> std::io::Result<Pipeline> {
        let shared = Arc::new(Shared {
            backend,
            running: Mutex::new(None),
            read_only: AtomicBool::new(false),
            refusal: Mutex::new(None),
            path,
            jobs: AtomicU64::new(0),
            submitted: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            largest_group: AtomicU64::new(0),
        });
        let (sender, queue) = mpsc::channel::<Job>();
        let (ended_tx, ended) = mpsc::channel::<()>();
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("widesql-commit".into())
            .spawn(move || {
                commit_loop(&thread_shared, &queue);
                drop(thread_shared);
                drop(ended_tx);
            })?;
        Ok(Pipeline {
            sender: Some(sender),
            shared,
            stall_limit,
            ended: Mutex::new(ended),
        })
    }

    /// Whether the store serves writes.
    pub(super) fn health(&self) -> Health {
        self.shared.health()
    }

    pub(super) fn stats(&self) -> CommitStats {
        let jobs = self.shared.jobs.load(Ordering::SeqCst);
        CommitStats {
            jobs,
            flushes: self.shared.flushes.load(Ordering::SeqCst),
            largest_group: self.shared.largest_group.load(Ordering::SeqCst),
            queued: self
                .shared
                .submitted
                .load(Ordering::SeqCst)
                .saturating_sub(jobs),
        }
    }

    /// Hands `work` to the commit thread and waits for its answer: after
    /// the apply for an eventual job, after the flush that covers it for a
    /// durable one.
    pub(super) fn submit(&self, work: Work, durable: bool) -> Result<bool, CommitError> {
        if let Health::ReadOnly { reason } = self.shared.health() {
            return Err(CommitError::ReadOnly { reason });
        }
        let (reply, answer) = mpsc::sync_channel(1);
        let Some(sender) = &self.sender else {
            return Err(CommitError::Backend("the store is closing".into()));
        };
        self.shared.submitted.fetch_add(1, Ordering::SeqCst);
        if sender
            .send(Job {
                work,
                durable,
                reply,
            })
            .is_err()
        {
            return Err(self.thread_gone());
        }
        let slice = (self.stall_limit / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
        loop {
            match answer.recv_timeout(slice) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Timeout) => {
                    if let Some((operation, waited)) = self.shared.stalled(self.stall_limit) {
                        self.shared.refuse_writes(format!(
                            "{operation} has not returned after {:.1} s",
                            waited.as_secs_f64()
                        ));
                        return Err(CommitError::Stalled { operation, waited });
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.thread_gone()),
            }
        }
    }

    fn thread_gone(&self) -> CommitError {
        let reason = "the commit thread has stopped".to_string();
        self.shared.refuse_writes(reason.clone());
        CommitError::ReadOnly { reason }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // The commit thread ends when the queue closes; wait for it (it
        // drops its handle of the backend, which closes sled), but not for
        // a thread already stuck, and no longer than a stall.
        self.sender = None;
        if self.shared.stalled(self.stall_limit).is_none() {
            let ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
            let _ = ended.recv_timeout(self.stall_limit);
        }
    }
}

/// The commit thread: one group per turn until the queue closes.
fn commit_loop(shared: &Shared, queue: &mpsc::Receiver<Job>) {
    let mut backlog = 0;
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        commit_group(shared, group, &mut backlog);
    }
}

/// Applies a group's jobs in order, then flushes once for its durable ones,
/// or when `backlog` eventual batches have been applied since the last
/// flush.
fn commit_group(shared: &Shared, group: Vec<Job>, backlog: &mut usize) {
    let mut waiting = Vec::new();
    for job in group {
        let batch = matches!(job.work, Work::Apply { .. });
        let outcome = if shared.read_only.load(Ordering::SeqCst) {
            Err(CommitError::ReadOnly {
                reason: shared.refusal_text(),
            })
        } else {
            run(shared, job.work)
        };
        *backlog += usize::from(batch && outcome.is_ok());
        match outcome {
            Ok(answer) if job.durable => waiting.push((job.reply, answer)),
            outcome => answer(shared, &job.reply, outcome),
        }
    }
    if waiting.is_empty() && *backlog < EVENTUAL_BACKLOG {
        return;
    }
    *backlog = 0;
    let jobs = waiting.len();
    let flushed = shared
        .call(Running::Flush { jobs }, |backend| backend.flush())
        .map_err(BackendError::from)
        .and_then(|r| r);
    shared.flushes.fetch_add(1, Ordering::SeqCst);
    shared
        .largest_group
        .fetch_max(jobs as u64, Ordering::SeqCst);
    match flushed {
        Ok(()) => {
            for (reply, value) in waiting {
                answer(shared, &reply, Ok(value));
            }
        }
        Err(e) => {
            let message = e.to_string();
            shared.refuse_writes(format!("a flush failed: {message}"));
            for (reply, _) in waiting {
                let error = format!("the flush of this write's group failed: {message}");
                answer(shared, &reply, Err(CommitError::Backend(error.into())));
            }
        }
    }
}

impl Shared {
    fn refusal_text(&self) -> String {
        match self.health() {
            Health::ReadOnly { reason } => reason,
            Health::Healthy => String::new(),
        }
    }
}

fn answer(
    shared: &Shared,
    reply: &mpsc::SyncSender<Result<bool, CommitError>>,
    outcome: Result<bool, CommitError>,
) {
    shared.jobs.fetch_add(1, Ordering::SeqCst);
    // A writer that gave up (a stall) no longer listens.
    let _ = reply.try_send(outcome);
}

/// Runs one job's own operation (not the flush).
fn run(shared: &Shared, work: Work) -> Result<bool, CommitError> {
    let result = match work {
        Work::Apply { writes, epochs } => {
            let running = Running::Apply {
                tree: writes.first().map(|(tree, _)| Arc::clone(tree)),
                writes: writes.iter().map(|(_, w)| w.len()).sum(),
            };
            let applied = shared.call(running, |backend| backend.apply(&writes));
            // Readers compare epochs to notice a completed batch; a failed
            // one may have changed nothing, and a moved epoch costs them
            // only a re-read.
            for epoch in epochs {
                epoch.fetch_add(1, Ordering::SeqCst);
            }
            applied.map(|r| r.map(|()| true))
        }
        Work::PutMeta { key, value } => shared
            .call(Running::PutMeta, |backend| {
                backend.meta_put_durable(&key, &value)
            })
            .map(|r| r.map(|()| true)),
        Work::DropTree(name) => shared.call(Running::DropTree(name.clone()), |backend| {
            backend.drop_tree(&name)
        }),
        Work::Flush => return Ok(true),
    };
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(CommitError::Backend(e)),
        Err(panic) => Err(CommitError::Backend(panic.into())),
    }
}
