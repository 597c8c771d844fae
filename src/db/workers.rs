//! The workers of a cluster, as the master sees them: each worker process
//! joins by calling the master and calls again every heartbeat; a worker
//! not heard from for [`Workers::down_after`] is down. `SHOW WORKERS`
//! lists them. A database that is not a cluster's master has none.
//!
//! Membership is the master's memory, not catalog data: a worker that
//! restarts joins again, and the tablet map (`_tablets`) is what names the
//! worker that serves a tablet, by the address it joined with.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// The workers that joined this process, by address.
#[derive(Debug)]
pub struct Workers {
    down_after: Mutex<Duration>,
    joined: Mutex<BTreeMap<String, Member>>,
}

#[derive(Debug, Clone)]
struct Member {
    joined: SystemTime,
    last_heard: Instant,
    last_heard_at: SystemTime,
}

/// One worker, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerEntry {
    /// The address it serves on and joined with (`http://host:port`).
    pub address: String,
    /// Whether it was heard from within [`Workers::down_after`].
    pub up: bool,
    /// When it first joined since this process started.
    pub joined: SystemTime,
    /// When it was last heard from.
    pub last_heard: SystemTime,
}

impl Default for Workers {
    fn default() -> Self {
        Workers {
            down_after: Mutex::new(Duration::from_secs(10)),
            joined: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Workers {
    fn members(&self) -> MutexGuard<'_, BTreeMap<String, Member>> {
        self.joined.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long a worker may go unheard before it counts as down.
    pub fn down_after(&self) -> Duration {
        *self
            .down_after
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets [`Workers::down_after`] (the master sets it from its
    /// heartbeat interval).
    pub fn set_down_after(&self, after: Duration) {
        *self
            .down_after
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = after;
    }

    /// Records a call from the worker at `address` (its join, or a
    /// heartbeat); true when it was not a member, or was down.
    pub fn heard_from(&self, address: &str) -> bool {
        let down_after = self.down_after();
        let now = (Instant::now(), SystemTime::now());
        let mut members = self.members();
        match members.get_mut(address) {
            Some(member) => {
                let was_down = member.last_heard.elapsed() > down_after;
                member.last_heard = now.0;
                member.last_heard_at = now.1;
                was_down
            }
            None => {
                members.insert(
                    address.to_string(),
                    Member {
                        joined: now.1,
                        last_heard: now.0,
                        last_heard_at: now.1,
                    },
                );
                true
            }
        }
    }

    /// Every worker that joined, up or down, by address.
    pub fn list(&self) -> Vec<WorkerEntry> {
        let down_after = self.down_after();
        self.members()
            .iter()
            .map(|(address, member)| WorkerEntry {
                address: address.clone(),
                up: member.last_heard.elapsed() <= down_after,
                joined: member.joined,
                last_heard: member.last_heard_at,
            })
            .collect()
    }

    /// The addresses of the workers that are up.
    pub fn up(&self) -> Vec<String> {
        self.list()
            .into_iter()
            .filter(|w| w.up)
            .map(|w| w.address)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_up_once_heard_from_and_down_after_silence() {
        let workers = Workers::default();
        assert!(workers.list().is_empty());
        assert!(workers.heard_from("http://127.0.0.1:1"));
        assert!(!workers.heard_from("http://127.0.0.1:1"), "a heartbeat");
        assert!(workers.heard_from("http://127.0.0.1:2"));
        assert_eq!(workers.up(), ["http://127.0.0.1:1", "http://127.0.0.1:2"]);
        workers.set_down_after(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        let listed = workers.list();
        assert_eq!(listed.len(), 2, "a worker that is down is still listed");
        assert!(listed.iter().all(|w| !w.up));
        assert!(workers.up().is_empty());
        assert!(workers.heard_from("http://127.0.0.1:1"), "back from down");
    }
}
