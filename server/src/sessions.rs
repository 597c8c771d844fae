//! Handshakes, bearer tokens and the session of each.
//!
//! A client that shakes hands gets a token, sent back in the `authorization:
//! Bearer …` response header (ADBC's Go driver reads it there) and as the
//! handshake's payload; every call that carries it runs in the same
//! [`Session`], so its settings (`SET`), views and SQL `PREPARE`s last
//! from one call to the next. A call without a token runs in a session of
//! its own. The server has no users yet: it trusts whoever reaches it (as
//! PostgreSQL's `trust` method does), which is why it listens only on
//! loopback addresses unless told otherwise. Tokens of sessions left idle
//! expire.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tonic::{Request, Status};
use widesql::{Db, Session, SessionOptions};

/// The sessions of the clients that shook hands, by token.
pub(crate) struct Sessions {
    db: Db,
    by_token: Mutex<HashMap<String, Open>>,
    /// How long a session may stay unused before its token expires.
    idle: Duration,
    /// How many sessions may be open at once.
    max: usize,
}

struct Open {
    session: Session,
    last_used: Instant,
}

impl Sessions {
    pub(crate) fn new(db: Db, idle: Duration, max: usize) -> Sessions {
        Sessions {
            db,
            by_token: Mutex::new(HashMap::new()),
            idle,
            max,
        }
    }

    fn by_token(&self) -> MutexGuard<'_, HashMap<String, Open>> {
        self.by_token.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new session: it may not read or write the host's files (`COPY …
    /// TO`, `CREATE EXTERNAL TABLE`), since a client is not the host's
    /// user.
    fn new_session(&self) -> Session {
        let options = SessionOptions {
            host_files: false,
            ..SessionOptions::default()
        };
        Session::with_options(self.db.clone(), options)
    }

    /// Opens a session and returns its token (122 random bits).
    pub(crate) fn open(&self) -> Result<String, Status> {
        let mut by_token = self.by_token();
        let idle = self.idle;
        by_token.retain(|_, open| open.last_used.elapsed() < idle);
        if by_token.len() >= self.max {
            return Err(Status::resource_exhausted(format!(
                "the server has {} sessions open, its limit",
                self.max
            )));
        }
        let token = uuid::Uuid::new_v4().simple().to_string();
        let open = Open {
            session: self.new_session(),
            last_used: Instant::now(),
        };
        by_token.insert(token.clone(), open);
        Ok(token)
    }

    /// The session a call runs in: its token's, or a new one when it
    /// carries none.
    pub(crate) fn session_of<T>(&self, request: &Request<T>) -> Result<Session, Status> {
        Ok(match self.token_session(request)? {
            Some(session) => session,
            None => self.new_session(),
        })
    }

    /// Refuses a call whose token is unknown or expired, for calls that
    /// need no session of their own (no session is made for them).
    pub(crate) fn check<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.token_session(request).map(drop)
    }

    /// The session of the call's token; `None` when it carries none.
    fn token_session<T>(&self, request: &Request<T>) -> Result<Option<Session>, Status> {
        let Some(header) = request.metadata().get("authorization") else {
            return Ok(None);
        };
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .ok_or_else(|| {
                Status::unauthenticated("the authorization header is not 'Bearer <token>'")
            })?;
        let mut by_token = self.by_token();
        match by_token.get_mut(token.trim()) {
            Some(open) if open.last_used.elapsed() < self.idle => {
                open.last_used = Instant::now();
                Ok(Some(open.session.clone()))
            }
            Some(_) => {
                by_token.remove(token.trim());
                Err(Status::unauthenticated(
                    "the session's token expired: shake hands again",
                ))
            }
            None => Err(Status::unauthenticated("unknown token: shake hands again")),
        }
    }
}
