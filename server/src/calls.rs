//! How a statement runs on the server: to its end, whatever happens to
//! its call ([`Work`], within a bounded number of slots), listed in `SHOW
//! ACTIVITY` and logged when it ends ([`Call`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;

use futures::FutureExt;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;
use widesql::Db;

use crate::statements::About;

/// Statements that run to their end whatever happens to the call that
/// started them: a client that goes away, or a deadline, drops its call,
/// and a write bigger than one atomic batch must not stop half-way. The
/// server waits for them before it flushes at shutdown. Every statement,
/// and every query while its rows stream, holds one of a bounded number of
/// slots, and one user holds at most a share of them, so that one user's
/// load never locks the others (an admin who would cancel it) out.
pub(crate) struct Work {
    permits: Arc<Semaphore>,
    slots: Arc<Semaphore>,
    max_running: usize,
    /// Each user's slots, by name.
    users: Mutex<HashMap<String, Arc<Semaphore>>>,
    max_per_user: usize,
    /// Turns true when the server stops: calls still reading their
    /// client's rows end (see [`crate::put::Input`]).
    inputs_ended: tokio::sync::watch::Sender<bool>,
}

/// A running statement's slot: one of the server's, and one of its user's.
pub(crate) struct Slot {
    _server: OwnedSemaphorePermit,
    _user: Option<OwnedSemaphorePermit>,
}

/// More statements than can run at once.
const WORK_PERMITS: u32 = 1 << 20;

impl Work {
    pub(crate) fn new(max_running: usize, max_per_user: usize) -> Work {
        Work {
            permits: Arc::new(Semaphore::new(WORK_PERMITS as usize)),
            slots: Arc::new(Semaphore::new(max_running)),
            max_running,
            users: Mutex::default(),
            max_per_user,
            inputs_ended: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Ends the input of every call still reading its client's rows, now
    /// and from now on.
    pub(crate) fn end_inputs(&self) {
        self.inputs_ended.send_replace(true);
    }

    /// Watches for [`Work::end_inputs`].
    pub(crate) fn inputs_ended(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inputs_ended.subscribe()
    }

    /// A slot for one more running statement of `user` (`None`: a
    /// database without users), refused when all are taken, or all of the
    /// user's.
    pub(crate) fn slot(&self, user: Option<&str>) -> Result<Slot, Status> {
        let user_slot = match user {
            Some(user) => {
                let slots = {
                    let mut users = self.users.lock().unwrap_or_else(PoisonError::into_inner);
                    match users.get(user) {
                        Some(slots) => Arc::clone(slots),
                        None => {
                            let slots = Arc::new(Semaphore::new(self.max_per_user));
                            users.insert(user.to_string(), Arc::clone(&slots));
                            slots
                        }
                    }
                };
                Some(slots.try_acquire_owned().map_err(|_| {
                    Status::resource_exhausted(format!(
                        "user {user} runs {} statements at once, the limit for one user: run \
                         this one when another has ended",
                        self.max_per_user
                    ))
                })?)
            }
            None => None,
        };
        let server_slot = Arc::clone(&self.slots).try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "the server runs {} statements at once, its limit: run this one when another \
                 has ended",
                self.max_running
            ))
        })?;
        Ok(Slot {
            _server: server_slot,
            _user: user_slot,
        })
    }

    /// Runs `statement` of `user` to its end, even if this call is dropped
    /// meanwhile, and waits for it. It is polled here first: most
    /// statements (a key lookup, an INSERT of constants) end in their first
    /// poll and need no task of their own, whose start and end cost a
    /// thread wake-up each (a point read over Flight SQL made ~13% fewer
    /// context switches without it). One that waits goes on from where it
    /// stopped on a task of its own. A panic is an internal error either way.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        user: Option<&str>,
        statement: impl std::future::Future<Output = Result<T, Status>> + Send + 'static,
    ) -> Result<T, Status> {
        self.run_in(self.slot(user)?, statement).await
    }

    /// [`Work::run`] in a slot taken before, for a call that must know it
    /// has one before it takes what the statement consumes.
    pub(crate) async fn run_in<T: Send + 'static>(
        &self,
        slot: Slot,
        statement: impl std::future::Future<Output = Result<T, Status>> + Send + 'static,
    ) -> Result<T, Status> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| Status::unavailable("the server is shutting down"))?;
        let mut statement = Box::pin(
            std::panic::AssertUnwindSafe(async move {
                let result = statement.await;
                drop(permit);
                drop(slot);
                result
            })
            .catch_unwind(),
        );
        let ended = match futures::poll!(statement.as_mut()) {
            Poll::Ready(ended) => ended,
            Poll::Pending => tokio::spawn(statement)
                .await
                .map_err(|e| Status::internal(format!("a statement's task failed: {e}")))?,
        };
        ended.unwrap_or_else(|panic| {
            Err(Status::internal(format!(
                "the statement stopped on an internal error: {}",
                widesql::panic_message(panic.as_ref())
            )))
        })
    }

    /// Waits until every statement started has ended, and takes no more.
    pub(crate) async fn finish(&self) {
        if let Ok(all) = self.permits.acquire_many(WORK_PERMITS).await {
            all.forget();
        }
        self.permits.close();
    }
}

/// A statement being served: listed in `SHOW ACTIVITY` while it runs, and
/// logged (who, what, how long, how many rows, how it ended) when it ends.
pub(crate) struct Call {
    name: &'static str,
    about: About,
    client: String,
    started: std::time::Instant,
    _listed: widesql::Running,
}

impl Call {
    /// Lists a statement of `client` in the database's activity (`cancel`
    /// stops it; `None` for a write, which runs to its end).
    pub(crate) fn start(
        db: &Db,
        name: &'static str,
        about: About,
        client: String,
        cancel: Option<Box<dyn Fn() + Send + Sync>>,
    ) -> Call {
        let listed = db.activity().start(
            about.user.clone(),
            client.clone(),
            about.kind.clone(),
            cancel,
        );
        Call {
            name,
            about,
            client,
            started: std::time::Instant::now(),
            _listed: listed,
        }
    }

    /// Logs the end of the call and passes its result on.
    pub(crate) fn done<T>(self, result: Result<T, Status>, rows: Option<u64>) -> Result<T, Status> {
        let ms = self.started.elapsed().as_secs_f64() * 1000.0;
        let user = self.about.user.as_deref().unwrap_or("-");
        let kind = self.about.kind.as_str();
        match &result {
            Ok(_) => {
                tracing::info!(call = self.name, user, client = %self.client, kind, ms, rows, "done")
            }
            Err(e) => tracing::warn!(
                call = self.name,
                user,
                client = %self.client,
                kind,
                ms,
                code = ?e.code(),
                message = e.message(),
                "failed"
            ),
        }
        result
    }
}

/// The first word of a statement, upper-cased (`SELECT`, `INSERT`,
/// `CREATE`): what the log and `SHOW ACTIVITY` say of it, since its text
/// may hold a password.
pub(crate) fn statement_kind(sql: &str) -> String {
    let word: String = sql
        .trim_start()
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect();
    match word.is_empty() {
        true => "?".into(),
        false => word.to_ascii_uppercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::Work;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tonic::{Code, Status};

    /// A statement that ends in its first poll runs on the caller's task;
    /// one that waits runs to its end on a task of its own after its call
    /// is dropped (the server's shutdown waits for it); a panic is an
    /// internal error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_statement_runs_to_its_end_and_a_quick_one_on_the_callers_task() {
        let work = Work::new(4, 4);
        let caller = tokio::task::try_id();
        let ran_on = work
            .run(None, async { Ok(tokio::task::try_id()) })
            .await
            .map_err(|e| e.message().to_string());
        assert_eq!(ran_on, Ok(caller));

        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let ended = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ended);
        let mut call = Box::pin(work.run(None, async move {
            let _ = wait.await;
            flag.store(true, Ordering::SeqCst);
            Ok::<_, Status>(())
        }));
        assert!(futures::poll!(call.as_mut()).is_pending());
        drop(call);
        assert!(!ended.load(Ordering::SeqCst));
        let _ = go.send(());
        work.finish().await;
        assert!(
            ended.load(Ordering::SeqCst),
            "the statement was dropped with its call"
        );

        let work = Work::new(4, 4);
        let panicked = work
            .run(None, async {
                if work_panics() {
                    panic!("a bug");
                }
                Ok::<_, Status>(())
            })
            .await;
        match panicked {
            Err(status) => {
                assert_eq!(status.code(), Code::Internal);
                assert!(status.message().contains("a bug"), "{}", status.message());
            }
            Ok(()) => panic!("a panicking statement succeeded"),
        }
    }

    /// `true`, in a way the compiler does not see through.
    fn work_panics() -> bool {
        std::hint::black_box(true)
    }
}
