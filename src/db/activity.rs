//! What runs now, as PostgreSQL's `pg_stat_activity` shows it: each
//! statement a caller registers (the Flight SQL server registers every
//! call that runs one) with its user, client, kind and start, and a way to
//! stop it. `SHOW ACTIVITY` lists them (an admin sees all, a user its
//! own); `CANCEL <id>` stops one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime};

/// The statements running now.
#[derive(Default)]
pub struct Activity {
    next: AtomicU64,
    running: Arc<Mutex<BTreeMap<u64, Registered>>>,
}

impl std::fmt::Debug for Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activity")
            .field("running", &self.locked().len())
            .finish()
    }
}

/// One running statement, as listed.
#[derive(Debug, Clone)]
pub struct ActivityEntry {
    /// Its id, for `CANCEL`.
    pub id: u64,
    /// The user it runs for; `None`: a session without one.
    pub user: Option<String>,
    /// Who sent it (the client's address).
    pub client: String,
    /// What it is: the call, and the statement's first word (never its
    /// text, which may hold a password).
    pub kind: String,
    /// When it started.
    pub started: SystemTime,
    /// How long it has run, in microseconds.
    pub running_micros: u64,
}

struct Registered {
    entry: ActivityEntry,
    started: Instant,
    cancel: Option<Box<dyn Fn() + Send + Sync>>,
}

/// A registered statement; dropping it (the statement ended) removes it.
#[must_use = "the statement is listed while this lives"]
pub struct Running {
    id: u64,
    running: Arc<Mutex<BTreeMap<u64, Registered>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

impl Running {
    /// Its id.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Activity {
    fn locked(&self) -> MutexGuard<'_, BTreeMap<u64, Registered>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a statement; `cancel` stops it (`None`: it cannot be
    /// stopped, as a write, which runs to its end). It is listed until the
    /// returned guard is dropped.
    pub fn start(
        &self,
        user: Option<String>,
        client: String,
        kind: String,
        cancel: Option<Box<dyn Fn() + Send + Sync>>,
    ) -> Running {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = ActivityEntry {
            id,
            user,
            client,
            kind,
            started: SystemTime::now(),
            running_micros: 0,
        };
        self.locked().insert(
            id,
            Registered {
                entry,
                started: Instant::now(),
                cancel,
            },
        );
        Running {
            id,
            running: Arc::clone(&self.running),
        }
    }

    /// The statements running now, oldest first.
    pub fn list(&self) -> Vec<ActivityEntry> {
        self.locked()
            .values()
            .map(|r| ActivityEntry {
                running_micros: u64::try_from(r.started.elapsed().as_micros()).unwrap_or(u64::MAX),
                ..r.entry.clone()
            })
            .collect()
    }

    /// The user of statement `id`: `None` when no statement has that id,
    /// `Some(None)` when it runs without a user.
    pub(crate) fn user_of(&self, id: u64) -> Option<Option<String>> {
        self.locked().get(&id).map(|r| r.entry.user.clone())
    }

    /// Stops statement `id`: `None` when no statement has that id,
    /// `Some(false)` when it cannot be stopped.
    pub fn cancel(&self, id: u64) -> Option<bool> {
        let running = self.locked();
        let registered = running.get(&id)?;
        Some(match &registered.cancel {
            Some(cancel) => {
                cancel();
                true
            }
            None => false,
        })
    }
}
