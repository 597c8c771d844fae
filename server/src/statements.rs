//! Statements kept between calls.
//!
//! Flight SQL runs a query in two calls: `GetFlightInfo` plans it (and
//! runs a statement that changes something, so that it runs once) and
//! returns a ticket; `DoGet` with that ticket streams the rows. The
//! [`Frame`] waits here in between, under a random handle, and so does a
//! prepared statement until the client closes it. A query being streamed
//! keeps an abort handle here, so that `CancelFlightInfo` can stop it.
//! Frames nobody fetched expire, and the number of each kind is bounded.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use datafusion::common::ScalarValue;
use std::sync::Arc;

use futures::stream::{AbortHandle, AbortRegistration};
use prost::bytes::Bytes;
use tonic::Status;
use widesql::{Frame, Prepared};

/// A query planned by `GetFlightInfo`, waiting for its `DoGet`.
pub(crate) struct Pending {
    pub(crate) frame: Frame,
    made: Instant,
}

/// A prepared statement and the rows of parameters bound to it last.
#[derive(Clone)]
pub(crate) struct PreparedStatement {
    pub(crate) prepared: Prepared,
    pub(crate) rows: Vec<Vec<ScalarValue>>,
    used: Instant,
}

/// What `CancelFlightInfo` found.
pub(crate) enum Cancelled {
    /// The query had not started; it never will.
    BeforeItRan,
    /// The query was streaming; it stops with a `CANCELLED` status.
    WhileRunning,
    /// No query has that handle (it finished, or never was).
    Unknown,
}

/// The statements of a server, by handle.
pub(crate) struct Statements {
    pending: Mutex<HashMap<Bytes, Pending>>,
    running: Mutex<HashMap<Bytes, AbortHandle>>,
    prepared: Mutex<HashMap<Bytes, PreparedStatement>>,
    /// How long a planned query waits for its `DoGet`, and a prepared
    /// statement unused waits for its next call.
    ttl: Duration,
    /// How many of each kind may be kept at once.
    max: usize,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A new random handle (122 random bits).
fn handle() -> Bytes {
    Bytes::from(uuid::Uuid::new_v4().as_bytes().to_vec())
}

fn too_many(what: &str, max: usize) -> Status {
    Status::resource_exhausted(format!("the server holds {max} {what}, its limit"))
}

impl Statements {
    pub(crate) fn new(ttl: Duration, max: usize) -> Statements {
        Statements {
            pending: Mutex::default(),
            running: Mutex::default(),
            prepared: Mutex::default(),
            ttl,
            max,
        }
    }

    /// Refuses a new query when as many wait for their `DoGet` as may
    /// (asked before the statement runs, so that a write is not run and
    /// then reported as refused).
    pub(crate) fn room_for_pending(&self) -> Result<(), Status> {
        let mut pending = locked(&self.pending);
        let ttl = self.ttl;
        pending.retain(|_, p| p.made.elapsed() < ttl);
        match pending.len() < self.max {
            true => Ok(()),
            false => Err(too_many("queries waiting for their DoGet", self.max)),
        }
    }

    /// Keeps a planned query until its `DoGet`; its handle.
    pub(crate) fn add_pending(&self, frame: Frame) -> Bytes {
        let mut pending = locked(&self.pending);
        let handle = handle();
        let made = Instant::now();
        pending.insert(handle.clone(), Pending { frame, made });
        handle
    }

    /// The planned query of `handle`, taken out (a ticket is fetched
    /// once) and marked running in the same step, so that a cancel never
    /// falls between the two.
    pub(crate) fn take_pending(
        self: &Arc<Self>,
        handle: &Bytes,
    ) -> Result<(Pending, Running), Status> {
        let mut pending = locked(&self.pending);
        let taken = pending
            .remove(handle)
            .filter(|p| p.made.elapsed() < self.ttl)
            .ok_or_else(|| {
                Status::not_found(
                    "no query waits under this ticket: it was fetched, cancelled or expired",
                )
            })?;
        Ok((taken, self.start(handle.clone())))
    }

    /// Marks the query of `handle` as running: `CancelFlightInfo` aborts
    /// it until the returned guard is dropped.
    pub(crate) fn start(self: &Arc<Self>, handle: Bytes) -> Running {
        let (abort, registration) = AbortHandle::new_pair();
        locked(&self.running).insert(handle.clone(), abort.clone());
        Running {
            statements: Arc::clone(self),
            handle,
            abort,
            registration: Some(registration),
        }
    }

    /// Forgets a query that finished streaming.
    pub(crate) fn finish(&self, handle: &Bytes) {
        locked(&self.running).remove(handle);
    }

    /// Cancels the query of `handle`. A statement that ran when it was
    /// planned (a write, DDL) cannot be.
    pub(crate) fn cancel(&self, handle: &Bytes) -> Cancelled {
        let mut pending = locked(&self.pending);
        if pending.get(handle).is_some_and(|p| !p.frame.has_run()) {
            pending.remove(handle);
            return Cancelled::BeforeItRan;
        }
        drop(pending);
        match locked(&self.running).remove(handle) {
            Some(abort) => {
                abort.abort();
                Cancelled::WhileRunning
            }
            None => Cancelled::Unknown,
        }
    }

    /// Stops every query being streamed (at shutdown).
    pub(crate) fn cancel_running(&self) {
        for (_, abort) in locked(&self.running).drain() {
            abort.abort();
        }
    }

    /// Keeps a prepared statement until it is closed or left unused for
    /// the ticket lifetime; its handle.
    pub(crate) fn add_prepared(&self, prepared: Prepared) -> Result<Bytes, Status> {
        let mut all = locked(&self.prepared);
        let ttl = self.ttl;
        all.retain(|_, s| s.used.elapsed() < ttl);
        if all.len() >= self.max {
            return Err(too_many("prepared statements", self.max));
        }
        let handle = handle();
        let statement = PreparedStatement {
            prepared,
            rows: Vec::new(),
            used: Instant::now(),
        };
        all.insert(handle.clone(), statement);
        Ok(handle)
    }

    /// The prepared statement of `handle`, with the rows of parameters
    /// bound to it; `take` takes them, so that an update runs with a
    /// binding once.
    pub(crate) fn prepared(&self, handle: &Bytes, take: bool) -> Result<PreparedStatement, Status> {
        let mut all = locked(&self.prepared);
        let statement = all.get_mut(handle).ok_or_else(unknown_prepared)?;
        statement.used = Instant::now();
        let rows = match take {
            true => std::mem::take(&mut statement.rows),
            false => statement.rows.clone(),
        };
        Ok(PreparedStatement {
            rows,
            ..statement.clone()
        })
    }

    /// Binds rows of parameters to the prepared statement of `handle`.
    pub(crate) fn bind(&self, handle: &Bytes, rows: Vec<Vec<ScalarValue>>) -> Result<(), Status> {
        let mut all = locked(&self.prepared);
        let statement = all.get_mut(handle).ok_or_else(unknown_prepared)?;
        statement.rows = rows;
        statement.used = Instant::now();
        Ok(())
    }

    /// Closes the prepared statement of `handle`.
    pub(crate) fn close_prepared(&self, handle: &Bytes) -> Result<(), Status> {
        locked(&self.prepared)
            .remove(handle)
            .map(|_| ())
            .ok_or_else(unknown_prepared)
    }
}

/// A query marked running; dropping it (the stream ended, or the client
/// went away) forgets it.
pub(crate) struct Running {
    statements: Arc<Statements>,
    handle: Bytes,
    pub(crate) abort: AbortHandle,
    /// Taken by the stream that the abort handle stops.
    pub(crate) registration: Option<AbortRegistration>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.statements.finish(&self.handle);
    }
}

fn unknown_prepared() -> Status {
    Status::not_found("no prepared statement has this handle (it was closed, or never made)")
}
