//! How a statement runs on the server: on a task of its own that runs to
//! its end ([`Work`], within a bounded number of slots), listed in `SHOW
//! ACTIVITY` and logged when it ends ([`Call`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

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
        }
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

    /// Runs `statement` of `user` on a task of its own and waits for its
    /// end.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        user: Option<&str>,
        statement: impl std::future::Future<Output = Result<T, Status>> + Send + 'static,
    ) -> Result<T, Status> {
        let slot = self.slot(user)?;
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| Status::unavailable("the server is shutting down"))?;
        tokio::spawn(async move {
            let result = statement.await;
            drop(permit);
            drop(slot);
            result
        })
        .await
        .map_err(|e| Status::internal(format!("a statement's task failed: {e}")))?
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
