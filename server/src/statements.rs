//! Statements kept between calls.
//!
//! Flight SQL runs a query in two calls: `GetFlightInfo` plans it (and
//! runs a statement that changes something, so that it runs once) and
//! returns a ticket; `DoGet` with that ticket streams the rows. The
//! [`Frame`] waits here in between, under a random handle, and so does a
//! prepared statement until the client closes it. A query being streamed
//! keeps an abort handle here, so that `CancelFlightInfo` can stop it.
//! Frames nobody fetched expire, and the number of each kind is bounded,
//! for the server and for each session.
//!
//! Each statement belongs to the session (token) that made it: a handle
//! used with another session's token is unknown, so a handle that leaks
//! to another client is of no use to it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use datafusion::common::ScalarValue;
use std::sync::Arc;

use futures::stream::{AbortHandle, AbortRegistration};
use prost::bytes::Bytes;
use tonic::Status;
use widesql::{Frame, Prepared};

use crate::put::Bound;

/// Who made a statement: the token of its session; `None` for calls
/// without one (a database without users).
pub(crate) type Owner = Option<Arc<str>>;

/// A query planned by `GetFlightInfo`, waiting for its `DoGet`.
pub(crate) struct Pending {
    pub(crate) frame: Frame,
    made: Instant,
    owner: Owner,
    /// Who runs it and what it is, for the log and `SHOW ACTIVITY`.
    pub(crate) about: About,
    /// What the user could do when the query was planned and checked
    /// ([`widesql::Db::privileges_version`]).
    pub(crate) privileges: Option<u64>,
    /// Whether it changed something when it ran in `GetFlightInfo`: its
    /// rows are then only its outcome, fetched whatever the user's grants
    /// are now, in no statement slot, and never cancelled.
    pub(crate) wrote: bool,
}

/// Who runs a statement and what it is (its first word, never its text).
#[derive(Clone, Debug)]
pub(crate) struct About {
    pub(crate) user: Option<String>,
    pub(crate) kind: String,
}

/// A prepared statement and the rows of parameters bound to it last.
#[derive(Clone)]
pub(crate) struct PreparedStatement {
    pub(crate) prepared: Prepared,
    /// Shared, so that handing them to a call copies no value.
    pub(crate) rows: Arc<Vec<Vec<ScalarValue>>>,
    /// What `rows` hold, in bytes (see [`crate::put::Bound`]).
    pub(crate) bound_bytes: usize,
    used: Instant,
    owner: Owner,
    pub(crate) about: About,
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

/// The queries waiting for their `DoGet`, and the places of those being
/// planned (see [`Place`]).
#[derive(Default)]
struct Waiting {
    frames: HashMap<Bytes, Pending>,
    /// The owner of each place taken.
    places: Vec<Owner>,
}

impl Waiting {
    /// Gives back one place of `owner`.
    fn free_place(&mut self, owner: &Owner) {
        if let Some(at) = self.places.iter().position(|o| o == owner) {
            self.places.swap_remove(at);
        }
    }
}

/// The place a query being planned holds among the queries waiting for
/// their `DoGet`, taken before it is planned: the planning of many at once
/// cannot take the server, or a session, past its limit. It is given back
/// when dropped, or becomes the query's in [`Statements::add_pending`].
pub(crate) struct Place {
    statements: Arc<Statements>,
    owner: Owner,
    held: bool,
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.held {
            locked(&self.statements.pending).free_place(&self.owner);
        }
    }
}

/// The statements of a server, by handle.
pub(crate) struct Statements {
    pending: Mutex<Waiting>,
    /// The queries streaming, by handle: a prepared statement's handle
    /// may run more than once at a time.
    running: Mutex<HashMap<Bytes, Vec<Run>>>,
    /// The number of the next run.
    runs: std::sync::atomic::AtomicU64,
    prepared: Mutex<HashMap<Bytes, PreparedStatement>>,
    /// How long a planned query waits for its `DoGet`, and a prepared
    /// statement unused waits for its next call.
    ttl: Duration,
    /// How many of each kind may be kept at once.
    max: usize,
    /// How many of each kind one session may keep at once.
    per_session: usize,
    /// The bytes of parameters all prepared statements may hold bound at
    /// once; one holder ([`Holder`]) holds at most a quarter of them.
    bound_bytes: usize,
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
    pub(crate) fn new(
        ttl: Duration,
        max: usize,
        per_session: usize,
        bound_bytes: usize,
    ) -> Statements {
        Statements {
            pending: Mutex::default(),
            running: Mutex::default(),
            runs: std::sync::atomic::AtomicU64::new(0),
            prepared: Mutex::default(),
            ttl,
            max,
            per_session,
            bound_bytes,
        }
    }

    /// Refuses one more statement of `owner` when the server, or the
    /// session, holds as many of the kind as it may.
    fn room<'a>(
        &self,
        owners: impl Iterator<Item = &'a Owner>,
        owner: &Owner,
        what: &str,
    ) -> Result<(), Status> {
        let (mut all, mut own) = (0, 0);
        for o in owners {
            all += 1;
            own += usize::from(o == owner);
        }
        if all >= self.max {
            return Err(too_many(what, self.max));
        }
        if own >= self.per_session {
            return Err(Status::resource_exhausted(format!(
                "this session holds {} {what}, its limit",
                self.per_session
            )));
        }
        Ok(())
    }

    /// A place for a new query of `owner` among those waiting for their
    /// `DoGet`, taken before the statement runs (so that a write is not
    /// run and then reported as refused); refused when as many wait, or
    /// are being planned, as may.
    pub(crate) fn place_for_pending(self: &Arc<Self>, owner: &Owner) -> Result<Place, Status> {
        let mut pending = locked(&self.pending);
        let ttl = self.ttl;
        pending.frames.retain(|_, p| p.made.elapsed() < ttl);
        let owners = pending.frames.values().map(|p| &p.owner);
        self.room(
            owners.chain(&pending.places),
            owner,
            "queries waiting for their DoGet",
        )?;
        pending.places.push(owner.clone());
        Ok(Place {
            statements: Arc::clone(self),
            owner: owner.clone(),
            held: true,
        })
    }

    /// Keeps a planned query in its place until its `DoGet`; its handle.
    pub(crate) fn add_pending(
        &self,
        mut place: Place,
        frame: Frame,
        about: About,
        privileges: Option<u64>,
        wrote: bool,
    ) -> Bytes {
        let mut pending = locked(&self.pending);
        pending.free_place(&place.owner);
        place.held = false;
        let handle = handle();
        let made = Instant::now();
        let query = Pending {
            frame,
            made,
            owner: place.owner.clone(),
            about,
            privileges,
            wrote,
        };
        pending.frames.insert(handle.clone(), query);
        handle
    }

    /// Whether the statement waiting under `handle` for `owner` wrote
    /// when it ran (see [`Pending::wrote`]).
    pub(crate) fn pending_wrote(&self, handle: &Bytes, owner: &Owner) -> bool {
        locked(&self.pending)
            .frames
            .get(handle)
            .is_some_and(|p| p.owner == *owner && p.wrote)
    }

    /// The planned query of `handle`, taken out (a ticket is fetched
    /// once) and marked running in the same step, so that a cancel never
    /// falls between the two; a statement that wrote is not marked (see
    /// [`Pending::wrote`]).
    pub(crate) fn take_pending(
        self: &Arc<Self>,
        handle: &Bytes,
        owner: &Owner,
    ) -> Result<(Pending, Option<Running>), Status> {
        let mut waiting = locked(&self.pending);
        let pending = &mut waiting.frames;
        let unknown = || {
            Status::not_found(
                "no query of this session waits under this ticket: it was fetched, cancelled or \
                 expired",
            )
        };
        if pending.get(handle).is_none_or(|p| p.owner != *owner) {
            return Err(unknown());
        }
        let taken = pending
            .remove(handle)
            .filter(|p| p.made.elapsed() < self.ttl)
            .ok_or_else(unknown)?;
        let running = (!taken.wrote).then(|| self.start(handle.clone(), owner.clone()));
        Ok((taken, running))
    }

    /// Marks the query of `handle` as running: `CancelFlightInfo` aborts
    /// it until the returned guard is dropped.
    pub(crate) fn start(self: &Arc<Self>, handle: Bytes, owner: Owner) -> Running {
        let (abort, registration) = AbortHandle::new_pair();
        let serial = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        locked(&self.running)
            .entry(handle.clone())
            .or_default()
            .push(Run {
                serial,
                owner,
                abort: abort.clone(),
            });
        Running {
            statements: Arc::clone(self),
            handle,
            serial,
            abort,
            registration: Some(registration),
        }
    }

    /// Marks a query that has no ticket to name it (one sent as its own
    /// ticket) as running, under a handle of its own.
    pub(crate) fn start_unnamed(self: &Arc<Self>, owner: Owner) -> Running {
        self.start(handle(), owner)
    }

    /// Counts the lifetime of the prepared statement of `handle`, if it is
    /// one, from now: a run that took long does not use it up.
    pub(crate) fn touch_prepared(&self, handle: &Bytes) {
        if let Some(statement) = locked(&self.prepared).get_mut(handle) {
            statement.used = Instant::now();
        }
    }

    /// Forgets run `serial` of `handle`, which finished streaming.
    fn finish(&self, handle: &Bytes, serial: u64) {
        {
            let mut running = locked(&self.running);
            if let Some(runs) = running.get_mut(handle) {
                runs.retain(|run| run.serial != serial);
                if runs.is_empty() {
                    running.remove(handle);
                }
            }
        }
        self.touch_prepared(handle);
    }

    /// Cancels the query of `handle`, when `owner` made it. A statement
    /// that changed something when it was planned (a write, DDL, a
    /// setting) cannot be.
    pub(crate) fn cancel(&self, handle: &Bytes, owner: &Owner) -> Cancelled {
        let mut pending = locked(&self.pending);
        if pending
            .frames
            .get(handle)
            .is_some_and(|p| p.owner == *owner && !p.wrote)
        {
            pending.frames.remove(handle);
            return Cancelled::BeforeItRan;
        }
        drop(pending);
        let mut running = locked(&self.running);
        let Some(runs) = running.get_mut(handle) else {
            return Cancelled::Unknown;
        };
        let before = runs.len();
        runs.retain(|run| {
            let cancelled = run.owner == *owner;
            if cancelled {
                run.abort.abort();
            }
            !cancelled
        });
        let cancelled = runs.len() < before;
        if runs.is_empty() {
            running.remove(handle);
        }
        match cancelled {
            true => Cancelled::WhileRunning,
            false => Cancelled::Unknown,
        }
    }

    /// Stops every query being streamed (at shutdown).
    pub(crate) fn cancel_running(&self) {
        for run in locked(&self.running).drain().flat_map(|(_, runs)| runs) {
            run.abort.abort();
        }
    }

    /// Keeps a prepared statement of `owner` until it is closed or left
    /// unused for the ticket lifetime; its handle.
    pub(crate) fn add_prepared(
        &self,
        prepared: Prepared,
        owner: Owner,
        about: About,
    ) -> Result<Bytes, Status> {
        let mut all = locked(&self.prepared);
        let ttl = self.ttl;
        all.retain(|_, s| s.used.elapsed() < ttl);
        self.room(
            all.values().map(|s| &s.owner),
            &owner,
            "prepared statements",
        )?;
        let handle = handle();
        let statement = PreparedStatement {
            prepared,
            rows: Arc::default(),
            bound_bytes: 0,
            used: Instant::now(),
            owner,
            about,
        };
        all.insert(handle.clone(), statement);
        Ok(handle)
    }

    /// The prepared statement of `handle`, with the rows of parameters
    /// bound to it; `take` takes them from a statement that writes, so
    /// that an update runs with a binding once (a query keeps its own).
    pub(crate) fn prepared(
        &self,
        handle: &Bytes,
        take: bool,
        owner: &Owner,
    ) -> Result<PreparedStatement, Status> {
        let mut all = locked(&self.prepared);
        let statement = owned(&mut all, handle, owner, self.ttl)?;
        statement.used = Instant::now();
        let (rows, bound_bytes) = match take && statement.prepared.writes() {
            true => (
                std::mem::take(&mut statement.rows),
                std::mem::take(&mut statement.bound_bytes),
            ),
            false => (Arc::clone(&statement.rows), statement.bound_bytes),
        };
        Ok(PreparedStatement {
            prepared: statement.prepared.clone(),
            rows,
            bound_bytes,
            used: statement.used,
            owner: statement.owner.clone(),
            about: statement.about.clone(),
        })
    }

    /// Binds rows of parameters to the prepared statement of `handle`.
    pub(crate) fn bind(&self, handle: &Bytes, bound: Bound, owner: &Owner) -> Result<(), Status> {
        let mut all = locked(&self.prepared);
        let ttl = self.ttl;
        all.retain(|_, s| s.used.elapsed() < ttl);
        let this = all
            .get(handle)
            .filter(|s| s.owner == *owner)
            .map(Holder::of)
            .ok_or_else(unknown_prepared)?;
        // What the other statements hold: the rows bound to this one now
        // are replaced.
        let (mut held, mut own) = (0usize, 0usize);
        for statement in all
            .iter()
            .filter(|(other, _)| *other != handle)
            .map(|(_, s)| s)
        {
            held = held.saturating_add(statement.bound_bytes);
            if Holder::of(statement) == this {
                own = own.saturating_add(statement.bound_bytes);
            }
        }
        let share = self.bound_bytes / 4;
        if own.saturating_add(bound.bytes) > share {
            return Err(Status::resource_exhausted(format!(
                "the prepared statements of {this} would hold more than {share} bytes of bound \
                 parameters, its share: close some, or bind fewer rows"
            )));
        }
        if held.saturating_add(bound.bytes) > self.bound_bytes {
            return Err(Status::resource_exhausted(format!(
                "the server's prepared statements would hold more than {} bytes of bound \
                 parameters, its limit: bind fewer rows, or later",
                self.bound_bytes
            )));
        }
        let statement = owned(&mut all, handle, owner, self.ttl)?;
        statement.rows = Arc::new(bound.rows);
        statement.bound_bytes = bound.bytes;
        statement.used = Instant::now();
        Ok(())
    }

    /// Closes the prepared statement of `handle`.
    pub(crate) fn close_prepared(&self, handle: &Bytes, owner: &Owner) -> Result<(), Status> {
        let mut all = locked(&self.prepared);
        owned(&mut all, handle, owner, self.ttl)?;
        all.remove(handle);
        Ok(())
    }
}

/// Whose share of the bound parameters a prepared statement's are: its
/// user's, or its session's in a database without users.
#[derive(PartialEq)]
enum Holder<'s> {
    User(&'s str),
    Session(&'s Owner),
}

impl<'s> Holder<'s> {
    fn of(statement: &'s PreparedStatement) -> Holder<'s> {
        match &statement.about.user {
            Some(user) => Holder::User(user),
            None => Holder::Session(&statement.owner),
        }
    }
}

impl std::fmt::Display for Holder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::User(user) => write!(f, "user {user}"),
            Holder::Session(_) => write!(f, "this session"),
        }
    }
}

/// One run of a query being streamed.
struct Run {
    serial: u64,
    owner: Owner,
    abort: AbortHandle,
}

/// A query marked running; dropping it (the stream ended, or the client
/// went away) forgets it.
pub(crate) struct Running {
    statements: Arc<Statements>,
    handle: Bytes,
    serial: u64,
    pub(crate) abort: AbortHandle,
    /// Taken by the stream that the abort handle stops.
    pub(crate) registration: Option<AbortRegistration>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.statements.finish(&self.handle, self.serial);
    }
}

/// The prepared statement of `handle`, when `owner` made it and used it
/// within `ttl`.
fn owned<'a>(
    all: &'a mut HashMap<Bytes, PreparedStatement>,
    handle: &Bytes,
    owner: &Owner,
    ttl: Duration,
) -> Result<&'a mut PreparedStatement, Status> {
    all.get_mut(handle)
        .filter(|s| s.owner == *owner && s.used.elapsed() < ttl)
        .ok_or_else(unknown_prepared)
}

fn unknown_prepared() -> Status {
    Status::not_found(
        "no prepared statement of this session has this handle (it was closed, expired unused, \
         or never made)",
    )
}

#[cfg(test)]
mod tests {
    use super::{About, Owner, Statements};
    use std::sync::Arc;
    use std::time::Duration;

    fn owner(name: &str) -> Owner {
        Some(Arc::from(name))
    }

    fn about() -> About {
        About {
            user: None,
            kind: "SELECT".into(),
        }
    }

    /// Places are counted against the limits as the queries waiting are:
    /// statements planned at once cannot pass the server's limit or a
    /// session's, and a place given back (the planning failed) or taken
    /// by its query leaves the count right.
    #[tokio::test]
    async fn queries_being_planned_hold_their_places_under_the_limits(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let statements = Arc::new(Statements::new(Duration::from_secs(60), 2, 1, 1 << 20));
        let (a, b, c) = (owner("a"), owner("b"), owner("c"));
        let place_a = statements.place_for_pending(&a)?;
        let refused = statements
            .place_for_pending(&a)
            .err()
            .ok_or("a second place of a")?;
        assert!(
            refused.message().contains("this session holds 1"),
            "{refused}"
        );
        let place_b = statements.place_for_pending(&b)?;
        let refused = statements
            .place_for_pending(&c)
            .err()
            .ok_or("a third place")?;
        assert!(
            refused.message().contains("the server holds 2"),
            "{refused}"
        );
        // b's planning failed: its place is free again.
        drop(place_b);
        let place_c = statements.place_for_pending(&c)?;
        // a's query is planned and waits in its place.
        let dir = tempfile::tempdir()?;
        let db = widesql::Db::open(dir.path())?;
        let frame = db.session().sql("SELECT 1").await?;
        let handle = statements.add_pending(place_a, frame, about(), None, false);
        assert!(
            statements.place_for_pending(&b).is_err(),
            "a and c hold both"
        );
        assert!(statements.place_for_pending(&a).is_err(), "a's query waits");
        let (taken, _running) = statements.take_pending(&handle, &a)?;
        assert!(!taken.wrote);
        drop(place_c);
        let _a = statements.place_for_pending(&a)?;
        let _b = statements.place_for_pending(&b)?;
        Ok(())
    }

    /// A prepared statement left unused for its lifetime, and a query not
    /// fetched within it, are gone for every call, not only once another
    /// statement is made.
    #[tokio::test]
    async fn statements_unused_for_their_lifetime_are_unknown(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let ttl = Duration::from_millis(200);
        let statements = Arc::new(Statements::new(ttl, 8, 8, 1 << 20));
        let dir = tempfile::tempdir()?;
        let db = widesql::Db::open(dir.path())?;
        let prepared = db.session().prepare("SELECT 1").await?;
        let a = owner("a");
        let handle = statements.add_prepared(prepared, a.clone(), about())?;
        statements.prepared(&handle, false, &a)?;
        let place = statements.place_for_pending(&a)?;
        let frame = db.session().sql("SELECT 1").await?;
        let ticket = statements.add_pending(place, frame, about(), None, false);
        tokio::time::sleep(ttl * 2).await;
        let error = statements
            .take_pending(&ticket, &a)
            .err()
            .ok_or("a query was fetched past its lifetime")?;
        assert_eq!(error.code(), tonic::Code::NotFound);
        assert!(error.message().contains("expired"), "{error}");
        let error = statements
            .prepared(&handle, false, &a)
            .err()
            .ok_or("a prepared statement was used past its lifetime")?;
        assert_eq!(error.code(), tonic::Code::NotFound);
        assert!(error.message().contains("expired unused"), "{error}");
        assert!(statements.close_prepared(&handle, &a).is_err());
        Ok(())
    }
}
