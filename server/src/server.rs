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

use crate::service::{WideFlightSql, Work};
use crate::statements::Statements;

/// A certificate chain and its private key, both PEM.
#[derive(Clone)]
pub struct TlsIdentity {
    /// The certificate chain.
    pub cert_pem: Vec<u8>,
    /// The private key.
    pub key_pem: Vec<u8>,
}

/// How a server listens and what it holds at most.
#[derive(Clone)]
pub struct ServeOptions {
    /// The address to listen on; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Serve TLS with this identity instead of plain TCP.
    pub tls: Option<TlsIdentity>,
    /// Listen on an address other than a loopback one although the server
    /// has no users, so anyone who reaches it can read and write every
    /// table.
    pub insecure: bool,
    /// How long running calls may go on after a shutdown starts.
    pub shutdown_grace: Duration,
    /// Bounds on messages, sessions and statements.
    pub limits: Limits,
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
    /// How long a planned query waits for its `DoGet`.
    pub ticket_ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            message_bytes: 64 << 20,
            sessions: 1024,
            session_idle: Duration::from_secs(3600),
            statements: 4096,
            ticket_ttl: Duration::from_secs(300),
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
        }
    }
}

impl ServeOptions {
    /// Refuses an address other than a loopback one unless `insecure`:
    /// the server has no users, so whoever reaches it is trusted.
    fn check(&self) -> Result<(), ServeError> {
        match self.listen.ip().is_loopback() || self.insecure {
            true => Ok(()),
            false => Err(ServeError::Insecure(self.listen)),
        }
    }
}

/// Why a server did not start or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A non-loopback address without `insecure`.
    #[error(
        "refusing to listen on {0}: the server has no users yet, so anyone who reaches it could \
         read and write every table; listen on a loopback address (127.0.0.1 or ::1), or pass \
         --insecure to serve it anyway"
    )]
    Insecure(SocketAddr),
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
    /// The service could not be made.
    #[error("the server could not start: {0}")]
    Service(tonic::Status),
    /// Flushing the database failed at shutdown.
    #[error(transparent)]
    Db(#[from] widesql::Error),
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

impl Server {
    /// Binds `options.listen` and serves `db` until [`Server::shutdown`].
    pub async fn start(db: Db, options: ServeOptions) -> Result<Server, ServeError> {
        options.check()?;
        let addr = options.listen;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServeError::Bind { addr, source })?;
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let limits = &options.limits;
        let statements = Arc::new(Statements::new(limits.ticket_ttl, limits.statements));
        let work = Arc::new(Work::new());
        let service = WideFlightSql::new(
            db.clone(),
            limits,
            Arc::clone(&statements),
            Arc::clone(&work),
        )
        .map_err(ServeError::Service)?;
        let service = FlightServiceServer::new(service)
            .max_decoding_message_size(limits.message_bytes)
            .max_encoding_message_size(limits.message_bytes);
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &options.tls {
            let identity = Identity::from_pem(&tls.cert_pem, &tls.key_pem);
            builder = builder
                .tls_config(ServerTlsConfig::new().identity(identity))
                .map_err(ServeError::Tls)?;
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = builder
            .add_service(service)
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
    /// grace period; then stops the queries still streaming, waits for
    /// every statement that writes to end (a write is never stopped
    /// half-way), and flushes the database: every write a client was told
    /// succeeded is on disk when this returns.
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
        self.work.finish().await;
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.flush())
            .await
            .map_err(|e| {
                ServeError::Db(widesql::Error::Sql(format!("the flush stopped: {e}")))
            })??;
        served.map_err(ServeError::Transport)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_served_without_insecure() {
        for (listen, insecure, allowed) in [
            ("127.0.0.1:1", false, true),
            ("[::1]:1", false, true),
            ("0.0.0.0:1", false, false),
            ("10.1.2.3:1", false, false),
            ("0.0.0.0:1", true, true),
            ("10.1.2.3:1", true, true),
        ] {
            let options = ServeOptions {
                listen: listen.parse().expect("an address"),
                insecure,
                ..ServeOptions::default()
            };
            assert_eq!(
                options.check().is_ok(),
                allowed,
                "{listen} insecure {insecure}"
            );
        }
    }
}
