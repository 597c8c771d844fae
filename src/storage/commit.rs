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
//! One thread applies every batch, so sled's queue of log writes can be
//! bounded by flushing from that thread (see [`EVENTUAL_BACKLOG`] and the
//! *Hangs* in `docs/design.md`).
//!
//! **The watchdog.** A writer waits for its answer in slices. When the
//! operation the commit thread runs (an apply or a flush, its own or
//! another writer's) has not returned after the stall limit, the writer
//! gets [`StorageError::Stalled`](super::StorageError::Stalled) naming that
//! operation and gives up its row locks, and the database refuses every
//! later write ([`Health::ReadOnly`]): the stuck call may still land, so
//! nothing after it can be ordered. If the call does return after all, and
//! succeeds, writes are served again; sled 0.34's deadlock never returns,
//! and then the process must restart. A failed flush stops writes for good
//! (after a failed fsync the state of the file is unknown, PostgreSQL's
//! rule; sled itself refuses every write after an I/O error), and so does a
//! panic inside the store. Reads go on.

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
    /// Nothing to apply or flush: answered once every job queued before it
    /// was applied or refused, also while the store refuses writes.
    Barrier,
}

impl Work {
    /// Whether a store that refuses writes refuses this job: all but a
    /// barrier, which changes nothing.
    fn refused_when_read_only(&self) -> bool {
        !matches!(self, Work::Barrier)
    }
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
    /// A storage call has run past the stall limit (until it returns), or a
    /// flush failed or the store panicked (until the process restarts):
    /// writes are refused; reads go on.
    ReadOnly {
        /// What happened, naming the operation.
        reason: String,
    },
}

/// Counters of the pipeline, for tests and the benchmark.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Jobs answered (batches, meta writes, tree drops, flush waits and
    /// barriers).
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

/// The operation the commit thread runs and when it started.
struct Operation {
    /// Numbers the operations, so a stall is lifted only by the call that
    /// stalled.
    number: u64,
    since: Instant,
    what: Running,
}

/// Why writes are refused.
struct Refusal {
    reason: String,
    /// The operation whose stall refused them: they are served again when
    /// it returns and succeeds. `None`: refused until a restart.
    stalled: Option<u64>,
}

/// What the writers and the commit thread share.
struct Shared {
    backend: Arc<dyn Backend>,
    /// The operation in progress. Its lock is taken before `refusal`'s.
    running: Mutex<Option<Operation>>,
    operations: AtomicU64,
    /// Set while writes are refused; the reason is in `refusal`.
    read_only: AtomicBool,
    refusal: Mutex<Option<Refusal>>,
    /// Names the store in the message a refusal prints.
    path: String,
    jobs: AtomicU64,
    submitted: AtomicU64,
    flushes: AtomicU64,
    largest_group: AtomicU64,
}

impl Shared {
    /// Refuses writes from now on, unless they are refused already; the
    /// first reason is kept and printed on standard error.
    fn refuse_writes(&self, reason: String, stalled: Option<u64>) {
        let first = {
            let mut refusal = self.refusal.lock().unwrap_or_else(|p| p.into_inner());
            let first = refusal.is_none();
            if first {
                *refusal = Some(Refusal {
                    reason: reason.clone(),
                    stalled,
                });
            }
            self.read_only.store(true, Ordering::SeqCst);
            first
        };
        if first {
            eprintln!(
                "widesql: database '{}': {reason}; it refuses writes",
                self.path
            );
        }
    }

    /// The operation that has run `limit` or longer, described, and for
    /// how long; it is also made the reason writes are refused, under the
    /// same lock as the commit thread's end of the call, so a call that
    /// ends meanwhile lifts the refusal.
    fn refuse_if_stalled(&self, limit: Duration) -> Option<(String, Duration)> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let operation = running.as_ref()?;
        let waited = operation.since.elapsed();
        if waited < limit {
            return None;
        }
        let what = operation.what.describe();
        self.refuse_writes(
            format!(
                "{what} has not returned after {:.1} s",
                waited.as_secs_f64()
            ),
            Some(operation.number),
        );
        Some((what, waited))
    }

    fn health(&self) -> Health {
        if !self.read_only.load(Ordering::SeqCst) {
            return Health::Healthy;
        }
        let refusal = self.refusal.lock().unwrap_or_else(|p| p.into_inner());
        Health::ReadOnly {
            reason: refusal
                .as_ref()
                .map(|r| r.reason.clone())
                .unwrap_or_default(),
        }
    }

    /// Runs one backend call, reporting a panic as an error: the store's
    /// state after a panic inside it is unknown, so writes stop.
    fn call<T>(
        &self,
        what: Running,
        f: impl FnOnce(&dyn Backend) -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        let number = self.operations.fetch_add(1, Ordering::SeqCst);
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = Some(Operation {
            number,
            since: Instant::now(),
            what,
        });
        let result = catch_unwind(AssertUnwindSafe(|| f(self.backend.as_ref())));
        {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            *running = None;
            if matches!(result, Ok(Ok(_))) {
                self.lift_stall(number);
            }
        }
        result.unwrap_or_else(|panic| {
            let reason = format!(
                "the store panicked: {}",
                crate::error::panic_message(panic.as_ref())
            );
            self.refuse_writes(reason.clone(), None);
            Err(reason.into())
        })
    }

    /// Serves writes again if the stall of operation `number` refused them:
    /// it returned, so what follows is ordered after it.
    fn lift_stall(&self, number: u64) {
        if !self.read_only.load(Ordering::SeqCst) {
            return;
        }
        let mut refusal = self.refusal.lock().unwrap_or_else(|p| p.into_inner());
        if refusal.as_ref().is_some_and(|r| r.stalled == Some(number)) {
            *refusal = None;
            self.read_only.store(false, Ordering::SeqCst);
        }
    }

    fn refusal_text(&self) -> String {
        match self.health() {
            Health::ReadOnly { reason } => reason,
            Health::Healthy => String::new(),
        }
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
            operations: AtomicU64::new(0),
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
                let guard = Stopped(thread_shared);
                commit_loop(&guard.0, &queue);
                drop(guard);
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
        if work.refused_when_read_only() {
            if let Health::ReadOnly { reason } = self.shared.health() {
                return Err(CommitError::ReadOnly { reason });
            }
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
            self.shared.submitted.fetch_sub(1, Ordering::SeqCst);
            return Err(CommitError::ReadOnly {
                reason: self.shared.refusal_text(),
            });
        }
        let slice = (self.stall_limit / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
        loop {
            match answer.recv_timeout(slice) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Timeout) => {
                    if let Some((operation, waited)) = self.shared.refuse_if_stalled(self.stall_limit)
                    {
                        // The answer may have come meanwhile.
                        return answer
                            .try_recv()
                            .unwrap_or(Err(CommitError::Stalled { operation, waited }));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(CommitError::Backend(
                        "the commit thread stopped before it answered; whether this write landed is unknown".into(),
                    ))
                }
            }
        }
    }
}

/// Held by the commit thread: if it ends by a panic, writes stop.
struct Stopped(Arc<Shared>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .refuse_writes("the commit thread stopped".into(), None);
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // The commit thread ends when the queue closes; wait for it (it
        // drops its handle of the backend, which closes sled), but not for
        // a thread already stuck, and no longer than a stall.
        self.sender = None;
        let stalled = self
            .shared
            .refusal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|r| r.stalled.is_some());
        if !stalled {
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

/// The answers that wait for a flush.
type Waiting = Vec<(mpsc::SyncSender<Result<bool, CommitError>>, bool)>;

/// Applies a group's jobs in order, then flushes once for its durable
/// ones; also as soon as `backlog` reaches [`EVENTUAL_BACKLOG`] eventual
/// batches applied since the last flush.
fn commit_group(shared: &Shared, group: Vec<Job>, backlog: &mut usize) {
    let mut waiting: Waiting = Vec::new();
    for job in group {
        let work = job.work;
        let (batch, meta) = (
            matches!(work, Work::Apply { .. }),
            matches!(work, Work::PutMeta { .. }),
        );
        let outcome = if work.refused_when_read_only() && shared.read_only.load(Ordering::SeqCst) {
            Err(CommitError::ReadOnly {
                reason: shared.refusal_text(),
            })
        } else {
            run(shared, work)
        };
        match (&outcome, meta) {
            // A meta write flushes: what was applied before is durable.
            (Ok(_), true) => *backlog = 0,
            (Ok(_), false) => *backlog += usize::from(batch && !job.durable),
            (Err(CommitError::Backend(e)), true) => {
                shared.refuse_writes(format!("a durable meta write failed: {e}"), None)
            }
            (Err(_), _) => {}
        }
        match outcome {
            Ok(answer) if job.durable => waiting.push((job.reply, answer)),
            outcome => answer(shared, &job.reply, outcome),
        }
        if *backlog >= EVENTUAL_BACKLOG {
            flush(shared, &mut waiting, backlog);
        }
    }
    if !waiting.is_empty() {
        flush(shared, &mut waiting, backlog);
    }
}

/// Flushes, then answers every job in `waiting`.
fn flush(shared: &Shared, waiting: &mut Waiting, backlog: &mut usize) {
    *backlog = 0;
    let jobs = waiting.len();
    let flushed = shared.call(Running::Flush { jobs }, |backend| backend.flush());
    shared.flushes.fetch_add(1, Ordering::SeqCst);
    shared
        .largest_group
        .fetch_max(jobs as u64, Ordering::SeqCst);
    match flushed {
        Ok(()) => {
            for (reply, value) in waiting.drain(..) {
                answer(shared, &reply, Ok(value));
            }
        }
        Err(e) => {
            let message = e.to_string();
            shared.refuse_writes(format!("a flush failed: {message}"), None);
            for (reply, _) in waiting.drain(..) {
                let error = format!("the flush of this write's group failed: {message}");
                answer(shared, &reply, Err(CommitError::Backend(error.into())));
            }
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
            applied.map(|()| true)
        }
        Work::PutMeta { key, value } => shared
            .call(Running::PutMeta, |backend| {
                backend.meta_put_durable(&key, &value)
            })
            .map(|()| true),
        Work::DropTree(name) => shared.call(Running::DropTree(name.clone()), |backend| {
            backend.drop_tree(&name)
        }),
        Work::Flush | Work::Barrier => return Ok(true),
    };
    result.map_err(CommitError::Backend)
}
