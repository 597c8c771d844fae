//! Handshakes, bearer tokens and the session of each.
//!
//! A client shakes hands with HTTP Basic credentials (`authorization: Basic
//! base64(user:password)`, as ADBC and the Flight SQL JDBC driver send
//! them) and gets a token, sent back in the `authorization: Bearer …`
//! response header (ADBC's Go driver reads it there) and as the
//! handshake's payload. Every call that carries the token runs in the same
//! [`Session`], opened for that user, so its grants are checked on every
//! statement and its settings (`SET`), views and SQL `PREPARE`s last from
//! one call to the next. Tokens of sessions left idle expire.
//!
//! A database without users trusts whoever reaches the server (as
//! PostgreSQL's `trust` method does): the handshake needs no credentials
//! and sessions are not checked, which is why such a server listens only
//! on loopback addresses unless told otherwise. Once a user exists, a call
//! without a token of a user's session is refused.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD_NO_PAD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use tonic::{Request, Status};
use widesql::{Db, Session, SessionOptions};

use crate::statements::Owner;
use crate::status::status;

/// The token a call carries, if any.
fn bearer<T>(request: &Request<T>) -> Option<&str> {
    request
        .metadata()
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// Standard base64, padded or not: ADBC's Go driver leaves the padding out.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The sessions of the clients that shook hands, by token.
pub(crate) struct Sessions {
    db: Db,
    by_token: Mutex<HashMap<String, Open>>,
    /// How long a session may stay unused before its token expires.
    idle: Duration,
    /// How many sessions may be open at once.
    max: usize,
    /// The memory each session's queries may hold.
    memory: usize,
    /// Password checks running at once: each takes ~19 MiB and
    /// milliseconds of CPU on purpose, so a flood of sign-ins is refused
    /// rather than queued.
    checks: tokio::sync::Semaphore,
    /// Sessions one user may have open at once.
    max_per_user: usize,
    /// Failed sign-ins, by client address and user name, and by client
    /// address alone (the user `None`).
    failures: Mutex<HashMap<Signer, Failures>>,
}

/// Password checks that may run at once.
const PASSWORD_CHECKS: usize = 4;

/// One session in this many is kept for admins.
const ADMIN_SHARE: usize = 16;

/// Failed sign-ins as one user an address may make before it waits: the
/// first wait is one second, and each further failure doubles it, up to a
/// minute. (Kept by address and user, so that a client's success as one
/// user does not forget its failures as another.)
const FREE_FAILURES: u32 = 5;
/// Failed sign-ins an address may make as any users before it waits the
/// same way: trying a few passwords for many user names is slowed too. A
/// success does not forget them (one known account would otherwise reset
/// the count); they are forgotten [`FAILURES_KEPT`] after the last.
const FREE_ADDRESS_FAILURES: u32 = 20;
const FIRST_WAIT: Duration = Duration::from_secs(1);
const LONGEST_WAIT: Duration = Duration::from_secs(60);
/// How long failures are remembered after the last one, and how many
/// addresses and users at most (an address that still waits is never
/// forgotten).
const FAILURES_KEPT: Duration = Duration::from_secs(900);
const FAILING_ADDRESSES: usize = 10_000;

/// Who signs in: the client's network, and the user it signs in as
/// (`None`: as anyone).
type Signer = (IpAddr, Option<String>);

/// The failed sign-ins as one user from one address since its last
/// success (or as any user, lately).
struct Failures {
    count: u32,
    last: Instant,
    /// No sign-in from the address is checked before this.
    wait_until: Instant,
}

struct Open {
    session: Session,
    last_used: Instant,
    /// The user's credentials when it signed in: a changed password, or
    /// the user dropped (and made again), ends the session.
    credentials: Option<u64>,
}

/// The network a client's address stands for: the address itself, or for
/// IPv6 its /64, which one client can fill with addresses of its own.
fn network_of(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            segments[4..].fill(0);
            IpAddr::V6(segments.into())
        }
        v4 => v4,
    }
}

/// Counts a failure of `signer` at `now`, which waits once it has failed
/// more than `free` times: one second, doubling with each failure, up to a
/// minute; failures [`FAILURES_KEPT`] after the one before start counting
/// again. At most [`FAILING_ADDRESSES`] signers are kept, and one that
/// still waits is never forgotten.
fn count_failure(
    failures: &mut HashMap<Signer, Failures>,
    signer: Signer,
    free: u32,
    now: Instant,
) {
    if failures.len() >= FAILING_ADDRESSES && !failures.contains_key(&signer) {
        failures.retain(|_, failed| {
            failed.wait_until > now || now.duration_since(failed.last) < FAILURES_KEPT
        });
        if failures.len() >= FAILING_ADDRESSES {
            // Every one kept still waits or failed lately; the oldest that
            // no longer waits makes room, or this one goes uncounted.
            let oldest = failures
                .iter()
                .filter(|(_, failed)| failed.wait_until <= now)
                .min_by_key(|(_, failed)| failed.last)
                .map(|(key, _)| key.clone());
            match oldest {
                Some(oldest) => {
                    failures.remove(&oldest);
                }
                None => return,
            }
        }
    }
    let failed = failures.entry(signer).or_insert(Failures {
        count: 0,
        last: now,
        wait_until: now,
    });
    if now.duration_since(failed.last) >= FAILURES_KEPT {
        failed.count = 0;
    }
    failed.count = failed.count.saturating_add(1);
    failed.last = now;
    if let Some(over) = failed.count.checked_sub(free) {
        let wait = FIRST_WAIT
            .saturating_mul(1 << over.min(16))
            .min(LONGEST_WAIT);
        failed.wait_until = now + wait;
    }
}

/// A user name and password.
pub(crate) struct Credentials {
    pub(crate) user: String,
    pub(crate) password: String,
}

/// The HTTP Basic credentials of a call; `None` when it carries none.
pub(crate) fn basic_credentials<T>(request: &Request<T>) -> Result<Option<Credentials>, Status> {
    let Some(header) = request.metadata().get("authorization") else {
        return Ok(None);
    };
    let malformed = || {
        Status::unauthenticated("the authorization header is not 'Basic <base64 of user:password>'")
    };
    let Some(encoded) = header.to_str().ok().and_then(|v| v.strip_prefix("Basic ")) else {
        return Ok(None);
    };
    let decoded = BASE64
        .decode(encoded.trim())
        .or_else(|_| STANDARD_NO_PAD.decode(encoded.trim()))
        .map_err(|_| malformed())?;
    let text = String::from_utf8(decoded).map_err(|_| malformed())?;
    let (user, password) = text.split_once(':').ok_or_else(malformed)?;
    Ok(Some(Credentials {
        user: user.to_string(),
        password: password.to_string(),
    }))
}

impl Sessions {
    pub(crate) fn new(db: Db, limits: &crate::server::Limits) -> Sessions {
        Sessions {
            db,
            by_token: Mutex::new(HashMap::new()),
            idle: limits.session_idle,
            max: limits.sessions,
            memory: limits.session_memory,
            checks: tokio::sync::Semaphore::new(PASSWORD_CHECKS),
            max_per_user: limits.sessions_per_user,
            failures: Mutex::default(),
        }
    }

    fn by_token(&self) -> MutexGuard<'_, HashMap<String, Open>> {
        self.by_token.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new session for `user` (`None`: a database without users): it
    /// may not read or write the host's files (`COPY … TO`, `CREATE
    /// EXTERNAL TABLE`), since a client is not the host's user, and its
    /// queries hold at most the server's session memory.
    fn new_session(&self, user: Option<String>) -> Session {
        let options = SessionOptions {
            host_files: false,
            user,
            memory_limit: Some(self.memory),
            ..SessionOptions::default()
        };
        Session::with_options(self.db.clone(), options)
    }

    /// Checks `credentials` (when the database has users) and opens a
    /// session; returns its token (122 random bits). An address whose
    /// sign-ins failed too often in a row waits before its next one is
    /// checked, so that passwords cannot be guessed at the server's speed.
    pub(crate) async fn open(
        &self,
        credentials: Option<Credentials>,
        client: Option<IpAddr>,
    ) -> Result<String, Status> {
        let user = if self.db.has_users() {
            let Credentials { user, password } = credentials.ok_or_else(|| {
                Status::unauthenticated(
                    "this server has users: shake hands with a user name and password (HTTP Basic)",
                )
            })?;
            let client = client.map(network_of);
            self.may_try(client, &user)?;
            let _check = self.checks.try_acquire().map_err(|_| {
                Status::resource_exhausted(
                    "the server is checking as many passwords as it may at once: sign in again",
                )
            })?;
            let db = self.db.clone();
            let name = user.clone();
            let checked = tokio::task::spawn_blocking(move || db.authenticate(&name, &password))
                .await
                .map_err(|e| Status::internal(format!("the password check stopped: {e}")))?;
            self.note_sign_in(client, &user, checked.is_ok());
            checked.map_err(status)?;
            Some(user)
        } else {
            None
        };
        let credentials = user.as_deref().and_then(|u| self.db.credentials_version(u));
        let mut by_token = self.by_token();
        let idle = self.idle;
        // Sessions whose token no call would take any more (idle too long,
        // or of a user dropped or whose password changed) make room.
        by_token.retain(|_, open| open.last_used.elapsed() < idle && self.still_signed_in(open));
        // The last sessions are an admin's: other users filling the server
        // never lock out the admin who would stop them (a database without
        // users has no admin, and every session is anyone's).
        let admin = user.as_deref().is_none_or(|user| self.db.is_admin(user));
        let max = match admin {
            true => self.max,
            false => self.max - self.max / ADMIN_SHARE,
        };
        if by_token.len() >= max {
            return Err(Status::resource_exhausted(format!(
                "the server has {} sessions open, its limit{}",
                by_token.len(),
                if admin {
                    ""
                } else {
                    " for users other than admins"
                }
            )));
        }
        if let Some(user) = &user {
            let open = by_token
                .values()
                .filter(|open| open.session.options().user.as_ref() == Some(user))
                .count();
            if open >= self.max_per_user {
                return Err(Status::resource_exhausted(format!(
                    "user {user} has {open} sessions open, the limit for one user: close one first"
                )));
            }
        }
        let token = uuid::Uuid::new_v4().simple().to_string();
        let open = Open {
            session: self.new_session(user),
            last_used: Instant::now(),
            credentials,
        };
        by_token.insert(token.clone(), open);
        Ok(token)
    }

    /// Whether an open session's user is as it signed in: not dropped,
    /// its password unchanged (a session without a user is, while the
    /// database has no users).
    fn still_signed_in(&self, open: &Open) -> bool {
        match open.session.options().user.as_deref() {
            Some(user) => self.db.credentials_version(user) == open.credentials,
            None => !self.db.has_users(),
        }
    }

    fn failures(&self) -> MutexGuard<'_, HashMap<Signer, Failures>> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses a sign-in as `user` from a network that must still wait, as
    /// that user or as anyone.
    fn may_try(&self, network: Option<IpAddr>, user: &str) -> Result<(), Status> {
        let Some(network) = network else {
            return Ok(());
        };
        let now = Instant::now();
        let failures = self.failures();
        let waiting = |signer: &Signer| failures.get(signer).filter(|f| f.wait_until > now);
        let as_user = waiting(&(network, Some(user.to_string())));
        let (failed, who_and_how) = match (as_user, waiting(&(network, None))) {
            (Some(failed), _) => (failed, format!("as {user} from {network} failed in a row")),
            (None, Some(failed)) => (failed, format!("as any user from {network} failed lately")),
            (None, None) => return Ok(()),
        };
        Err(Status::resource_exhausted(format!(
            "{} sign-ins {who_and_how}: sign in again in {:.1} s",
            failed.count,
            (failed.wait_until - now).as_secs_f64()
        )))
    }

    /// Counts a failed sign-in as `user` from a network (also as one of
    /// anyone's), or forgets its failures as that user after a success.
    fn note_sign_in(&self, network: Option<IpAddr>, user: &str, succeeded: bool) {
        let Some(network) = network else { return };
        let mut failures = self.failures();
        let as_user = (network, Some(user.to_string()));
        if succeeded {
            failures.remove(&as_user);
            return;
        }
        let now = Instant::now();
        count_failure(&mut failures, as_user, FREE_FAILURES, now);
        count_failure(&mut failures, (network, None), FREE_ADDRESS_FAILURES, now);
    }

    /// The session a call runs in: its token's; a new one when it carries
    /// none and the database has no users.
    pub(crate) fn session_of<T>(&self, request: &Request<T>) -> Result<Session, Status> {
        self.session_and_caller(request).map(|(session, _)| session)
    }

    /// The session a call runs in and who makes it (its token), for calls
    /// that keep a statement for later calls of the same session.
    pub(crate) fn session_and_caller<T>(
        &self,
        request: &Request<T>,
    ) -> Result<(Session, Owner), Status> {
        let session = match self.token_session(request)? {
            Some(session) => session,
            None => self.new_session(None),
        };
        Ok((session, bearer(request).map(Arc::from)))
    }

    /// The user of a call's session (`None`: a database without users)
    /// and who makes it (its token); no session is made.
    pub(crate) fn user_and_caller<T>(
        &self,
        request: &Request<T>,
    ) -> Result<(Option<String>, Owner), Status> {
        let user = self
            .token_session(request)?
            .and_then(|session| session.options().user.clone());
        Ok((user, bearer(request).map(Arc::from)))
    }

    /// Who makes a call (its token), refusing a token that is unknown or
    /// expired and a call without one when the database has users. Calls
    /// that need no session of their own ask this (no session is made).
    pub(crate) fn caller<T>(&self, request: &Request<T>) -> Result<Owner, Status> {
        self.token_session(request)?;
        Ok(bearer(request).map(Arc::from))
    }

    /// The session of the call's token; `None` when it carries none and
    /// the database has no users.
    fn token_session<T>(&self, request: &Request<T>) -> Result<Option<Session>, Status> {
        let token = match request.metadata().get("authorization") {
            Some(header) => Some(
                header
                    .to_str()
                    .ok()
                    .and_then(|value| value.strip_prefix("Bearer "))
                    .ok_or_else(|| {
                        Status::unauthenticated(
                            "the authorization header is not 'Bearer <token>': shake hands first",
                        )
                    })?,
            ),
            None => None,
        };
        let has_users = self.db.has_users();
        let Some(token) = token else {
            if has_users {
                return Err(Status::unauthenticated(
                    "this server has users: shake hands with a user name and password first",
                ));
            }
            return Ok(None);
        };
        let mut by_token = self.by_token();
        let token = token.trim();
        match by_token.get_mut(token) {
            // A session of the time before the database had users.
            Some(open) if has_users && open.session.options().user.is_none() => {
                by_token.remove(token);
                Err(Status::unauthenticated(
                    "this server has users now: shake hands again with a user name and password",
                ))
            }
            Some(open)
                if open
                    .session
                    .options()
                    .user
                    .as_deref()
                    .is_some_and(|user| self.db.credentials_version(user) != open.credentials) =>
            {
                by_token.remove(token);
                Err(Status::unauthenticated(
                    "the user's password changed, or the user was dropped: sign in again",
                ))
            }
            Some(open) if open.last_used.elapsed() < self.idle => {
                open.last_used = Instant::now();
                Ok(Some(open.session.clone()))
            }
            Some(_) => {
                by_token.remove(token);
                Err(Status::unauthenticated(
                    "the session's token expired: shake hands again",
                ))
            }
            None => Err(Status::unauthenticated("unknown token: shake hands again")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address's failures as any users make it wait after the 20th, and
    /// each one more doubles the wait; one [`FAILURES_KEPT`] after the one
    /// before starts the count again.
    #[test]
    fn failures_long_apart_start_the_count_again() {
        let mut failures = HashMap::new();
        let address: IpAddr = [127, 0, 0, 1].into();
        let start = Instant::now();
        for n in 0..FREE_ADDRESS_FAILURES {
            let at = start + Duration::from_secs(u64::from(n));
            count_failure(&mut failures, (address, None), FREE_ADDRESS_FAILURES, at);
        }
        let failed = &failures[&(address, None)];
        assert_eq!(failed.count, FREE_ADDRESS_FAILURES);
        assert_eq!(
            failed.wait_until,
            failed.last + FIRST_WAIT,
            "waits after its 20th"
        );
        let lately = failed.last + FAILURES_KEPT - Duration::from_secs(1);
        count_failure(
            &mut failures,
            (address, None),
            FREE_ADDRESS_FAILURES,
            lately,
        );
        let failed = &failures[&(address, None)];
        assert_eq!(failed.count, FREE_ADDRESS_FAILURES + 1);
        assert_eq!(failed.wait_until, lately + FIRST_WAIT * 2);
        let long_after = lately + FAILURES_KEPT;
        count_failure(
            &mut failures,
            (address, None),
            FREE_ADDRESS_FAILURES,
            long_after,
        );
        let failed = &failures[&(address, None)];
        assert_eq!(failed.count, 1);
        assert_eq!(failed.wait_until, lately + FIRST_WAIT * 2, "no new wait");
    }
}
