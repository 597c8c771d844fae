//! Options, binding, TLS and shutdown.

use std::net::SocketAddr;
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, ServerTlsConfig};
use widesql::Db;

use std::sync::Arc;

use crate::calls::Work;
use crate::cluster::{ClusterService, MasterOptions, MasterStores, Peers, SECRET_VARIABLE};
use crate::service::WideFlightSql;
use crate::statements::Statements;

/// A certificate chain and its private key, both PEM.
#[derive(Clone)]
pub struct TlsIdentity {
    /// The certificate chain.
    pub cert_pem: Vec<u8>,
    /// The private key.
    pub key_pem: Vec<u8>,
}

impl TlsIdentity {
    /// `builder`, serving TLS with this identity.
    pub(crate) fn serve(
        &self,
        builder: tonic::transport::Server,
    ) -> Result<tonic::transport::Server, ServeError> {
        let identity = Identity::from_pem(&self.cert_pem, &self.key_pem);
        builder
            .tls_config(ServerTlsConfig::new().identity(identity))
            .map_err(ServeError::Tls)
    }
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsIdentity(…)")
    }
}

/// How a server listens and what it holds at most.
#[derive(Clone)]
pub struct ServeOptions {
    /// The address to listen on; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Serve TLS with this identity instead of plain TCP.
    pub tls: Option<TlsIdentity>,
    /// Listen on an address other than a loopback one without TLS, or
    /// while the database has no users (so anyone who reaches it can read
    /// and write every table).
    pub insecure: bool,
    /// How long running calls may go on after a shutdown starts.
    pub shutdown_grace: Duration,
    /// Bounds on messages, sessions and statements.
    pub limits: Limits,
    /// Serve as a cluster's master: workers join it.
    pub master: Option<MasterOptions>,
}

/// What a server holds at most.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The largest gRPC message taken or sent, in bytes.
    pub message_bytes: usize,
    /// Sessions open at once (clients that shook hands).
    pub sessions: usize,
    /// How long a session may stay unused before its token expires.
    pub session_idle: Duration,
    /// Queries waiting for their `DoGet`, and prepared statements, each.
    pub statements: usize,
    /// The same, for one session.
    pub statements_per_session: usize,
    /// How long a planned query waits for its `DoGet`.
    pub ticket_ttl: Duration,
    /// Connections open at once; one more is closed as soon as it is
    /// accepted.
    pub connections: usize,
    /// Statements running at once (a query counts while its rows stream);
    /// one more is refused with `RESOURCE_EXHAUSTED`.
    pub running_statements: usize,
    /// The same, for the statements of one user.
    pub running_statements_per_user: usize,
    /// Sessions one user may have open at once.
    pub sessions_per_user: usize,
    /// How long a query may run (planning and streaming its rows) before
    /// it is stopped with `DEADLINE_EXCEEDED`. Writes always run to their
    /// end: a write is never stopped half-way.
    pub query_time: Duration,
    /// The memory each session's queries may hold at once (see
    /// [`SessionOptions::memory_limit`](widesql::SessionOptions::memory_limit)).
    pub session_memory: usize,
    /// The longest statement text taken, in bytes. Parsing, planning and
    /// dropping a statement take stack and memory in proportion to its
    /// length (a chain `a + b + …` nests one level per term), so a text of
    /// the message size could hold a worker for long; rows in bulk go as
    /// parameters or by ingest instead.
    pub statement_bytes: usize,
    /// The bytes of parameters prepared statements may hold bound between
    /// calls, counted as their values hold them; one user (one session in
    /// a database without users) holds at most a quarter of them. Calls
    /// putting parameters (to bind them, or to run an update with them)
    /// hold at most as many between them until the rows are bound or
    /// have run; rows a prepared update takes from its binding count with
    /// them while it runs.
    pub bound_parameter_bytes: usize,
    /// How long a call that streams rows in (a bulk ingest, rows of
    /// parameters) waits for the client's next message before it fails:
    /// a client that stalls holds a statement slot no longer than this. A
    /// message counts once it has all arrived (one of 64 MiB needs about
    /// 220 KB/s to come within the default).
    pub input_idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            message_bytes: 64 << 20,
            sessions: 1024,
            session_idle: Duration::from_secs(3600),
            statements: 4096,
            statements_per_session: 256,
            ticket_ttl: Duration::from_secs(300),
            connections: 4096,
            running_statements: 256,
            running_statements_per_user: 128,
            sessions_per_user: 512,
            query_time: Duration::from_secs(3600),
            session_memory: 1 << 30,
            statement_bytes: 1 << 20,
            bound_parameter_bytes: 1 << 30,
            input_idle: Duration::from_secs(300),
        }
    }
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            tls: None,
            insecure: false,
            shutdown_grace: Duration::from_secs(30),
            limits: Limits::default(),
            master: None,
        }
    }
}

impl ServeOptions {
    /// Refuses an address other than a loopback one, unless `insecure`,
    /// when the server would send passwords and rows in the clear (no TLS)
    /// or let anyone in (a database without users).
    fn check(&self, has_users: bool) -> Result<(), ServeError> {
        if self.listen.ip().is_loopback() || self.insecure {
            return Ok(());
        }
        let reason = match (self.tls.is_some(), has_users) {
            (true, true) => return Ok(()),
            (false, _) => "without TLS, passwords and rows would cross the network in the clear",
            (true, false) => {
                "the database has no users yet, so anyone who reaches the server could read and \
                 write every table (create one with --init-admin)"
            }
        };
        Err(ServeError::Insecure {
            addr: self.listen,
            reason,
        })
    }
}

/// Why a server did not start or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A non-loopback address without TLS or users, and without
    /// `insecure`.
    #[error(
        "refusing to listen on {addr}: {reason}; listen on a loopback address (127.0.0.1 or \
         ::1), or pass --insecure to serve it anyway"
    )]
    Insecure {
        /// The address.
        addr: SocketAddr,
        /// What is missing.
        reason: &'static str,
    },
    /// The host the other processes of a cluster reach this one at is
    /// missing (it listens on an unspecified address) or not a host.
    #[error(
        "{}",
        match advertise {
            None => format!(
                "listening on {addr} names no host the other processes of the cluster can \
                 reach: give --advertise HOST, the name or address they reach this one at"
            ),
            Some(host) => format!(
                "--advertise {host:?} is not a host name or address the other processes of the \
                 cluster can reach (give one such as db1.example.com or 10.0.0.5, without a \
                 port: they reach it on the port it listens on)"
            ),
        }
    )]
    Advertise {
        /// The address it listens on.
        addr: SocketAddr,
        /// The host it was given.
        advertise: Option<String>,
    },
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS identity was refused.
    #[error("the TLS certificate or key was refused: {0}")]
    Tls(tonic::transport::Error),
    /// Serving failed.
    #[error("the server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The cluster secret is missing or too weak.
    #[error("the cluster secret ({SECRET_VARIABLE}) {0}")]
    ClusterSecret(String),
    /// A cluster's processes would not all serve TLS, or one that does
    /// was given no certificates to trust in the others.
    #[error("{0}")]
    ClusterTls(&'static str),
    /// A worker could not join its master.
    #[error("cannot join the master at {master}: {}", .status.message())]
    Join {
        /// The master's address.
        master: String,
        /// What the master (or the connection) answered.
        status: tonic::Status,
    },
    /// The service could not be made.
    #[error("the server could not start: {0}")]
    Service(tonic::Status),
    /// Flushing the database failed at shutdown.
    #[error(transparent)]
    Db(#[from] widesql::Error),
    /// The thread flushing the database at shutdown stopped.
    #[error("the flush at shutdown stopped: {0}")]
    Flush(tokio::task::JoinError),
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    db: Db,
    statements: Arc<Statements>,
    work: Arc<Work>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
    grace: Duration,
}

/// A listener on `addr`, and the address it took (the port it picked for
/// port 0).
pub(crate) async fn bind(
    addr: SocketAddr,
) -> Result<(tokio::net::TcpListener, SocketAddr), ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    Ok((listener, addr))
}

impl Server {
    /// Binds `options.listen` and serves `db` until [`Server::shutdown`].
    pub async fn start(db: Db, options: ServeOptions) -> Result<Server, ServeError> {
        options.check(db.has_users())?;
        let master = match &options.master {
            Some(master) => {
                let peers = Peers::new(
                    master.secret.clone(),
                    options.tls.is_some(),
                    master.tls_ca.as_deref(),
                )?;
                crate::cluster::reachable_url(options.listen, master.advertise.as_deref(), &peers)?;
                Some((master, peers))
            }
            None => None,
        };
        let (listener, addr) = bind(options.listen).await?;
        let limits = &options.limits;
        // Keepalives find clients that vanished without closing.
        let incoming = TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .with_keepalive(Some(Duration::from_secs(60)));
        let incoming = crate::connections::Bounded::new(incoming, limits.connections);
        let statements = Arc::new(Statements::new(
            limits.ticket_ttl,
            limits.statements,
            limits.statements_per_session,
            limits.bound_parameter_bytes,
        ));
        let work = Arc::new(Work::new(
            limits.running_statements,
            limits.running_statements_per_user,
        ));
        let service = WideFlightSql::new(
            db.clone(),
            limits,
            Arc::clone(&statements),
            Arc::clone(&work),
        )
        .map_err(ServeError::Service)?;
        let sessions = service.sessions();
        let service = FlightServiceServer::new(service)
            .max_decoding_message_size(limits.message_bytes)
            .max_encoding_message_size(limits.message_bytes);
        let service = crate::door::signed_in(service, sessions);
        let mut builder = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            // Calls at once on one connection.
            .max_concurrent_streams(Some(256));
        if let Some(tls) = &options.tls {
            builder = tls.serve(builder)?;
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let (cluster, worker) = match master {
            Some((master, peers)) => {
                let stores = MasterStores {
                    peers: peers.clone(),
                };
                widesql::internals::reach_workers(&db, Arc::new(stores));
                let here =
                    crate::cluster::reachable_url(addr, master.advertise.as_deref(), &peers)?;
                let worker = crate::cluster::distribute_queries(&db, &peers, &here)
                    .map_err(|e| ServeError::Service(tonic::Status::internal(e.to_string())))?;
                let cluster = ClusterService::new(db.clone(), master.heartbeat, &peers);
                (
                    Some(master.secret.guard(cluster)),
                    Some(
                        master
                            .secret
                            .guard_calls(worker.into_worker_server(), crate::cluster::refuse_plans),
                    ),
                )
            }
            None => (None, None),
        };
        let serving = builder
            .add_service(service)
            .add_optional_service(cluster)
            .add_optional_service(worker)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            });
        Ok(Server {
            addr,
            db,
            statements,
            work,
            stop: Some(stop),
            task: tokio::spawn(serving),
            grace: options.shutdown_grace,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops taking calls and lets running ones finish for up to the
    /// grace period; then stops the queries still streaming and the
    /// ingests still reading their client's rows, waits for every
    /// statement that writes to end (a write is never stopped half-way),
    /// and flushes the database: every write a client was told succeeded
    /// is on disk when this returns. A cluster's master flushes its
    /// workers too, but a worker's error does not fail the shutdown: one
    /// that stopped flushed what it was sent when it stopped (or lost it
    /// when it crashed).
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let served = match tokio::time::timeout(self.grace, &mut self.task).await {
            Ok(Ok(served)) => served,
            // The serving task panicked or was aborted.
            Ok(Err(_)) => Ok(()),
            Err(_) => {
                self.task.abort();
                Ok(())
            }
        };
        self.statements.cancel_running();
        // An ingest still reading its client's rows stops (as a client
        // that went away would stop it), so that no client holds the
        // shutdown.
        self.work.end_inputs();
        self.work.finish().await;
        let db = self.db.clone();
        let flushed = tokio::task::spawn_blocking(move || db.flush())
            .await
            .map_err(ServeError::Flush)?;
        match flushed {
            Err(widesql::Error::Storage(widesql::StorageError::Away { .. })) | Ok(()) => {}
            Err(e) => return Err(e.into()),
        }
        served.map_err(ServeError::Transport)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_addresses_than_loopback_need_tls_and_users_or_insecure() {
        let identity = TlsIdentity {
            cert_pem: Vec::new(),
            key_pem: Vec::new(),
        };
        for (listen, tls, users, insecure, allowed) in [
            ("127.0.0.1:1", false, false, false, true),
            ("[::1]:1", false, true, false, true),
            ("0.0.0.0:1", false, false, false, false),
            ("0.0.0.0:1", false, true, false, false),
            ("10.1.2.3:1", true, false, false, false),
            ("10.1.2.3:1", true, true, false, true),
            ("0.0.0.0:1", false, false, true, true),
            ("10.1.2.3:1", true, false, true, true),
        ] {
            let options = ServeOptions {
                listen: listen.parse().expect("an address"),
                tls: tls.then(|| identity.clone()),
                insecure,
                ..ServeOptions::default()
            };
            assert_eq!(
                options.check(users).is_ok(),
                allowed,
                "{listen} tls {tls} users {users} insecure {insecure}"
            );
        }
    }
}
