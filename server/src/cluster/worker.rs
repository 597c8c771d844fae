//! A worker process: it owns a database directory of its own, serves
//! datafusion-distributed's worker service (the tasks of distributed
//! queries the master sends it) behind the cluster secret, and joins the
//! master, calling again every heartbeat so that the master knows it is
//! up. A master that restarts learns of it at its next heartbeat. A worker
//! serves TLS exactly when its master does.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint};
use widesql::Db;

use super::data::TabletDataService;
use super::protocol::join;
use super::{worker_service, ClusterSecret, Peers};
use crate::{ServeError, TlsIdentity};

/// How a worker listens and which master it joins.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// The address to listen on (port 0 picks a free one); the worker is
    /// named by it, or by `advertise` and its port.
    pub listen: SocketAddr,
    /// The host (a name or an address) the master reaches this worker at,
    /// on the port it listens on; `None`: the address it listens on,
    /// which must then not be an unspecified one (`0.0.0.0`, `::`).
    pub advertise: Option<String>,
    /// The master's address, `host:port` (called over TLS when the worker
    /// serves TLS), `http://host:port` or `https://host:port`.
    pub master: String,
    /// The secret the cluster shares.
    pub secret: ClusterSecret,
    /// Serve TLS with this identity, as the master does: every call
    /// between the processes then goes over TLS.
    pub tls: Option<TlsIdentity>,
    /// The certificates (PEM) the worker trusts in the answers of the
    /// master and the other workers, such as the CA that signed their
    /// certificates: needed exactly with `tls`.
    pub tls_ca: Option<Vec<u8>>,
    /// Listen on an address other than a loopback one without TLS: calls
    /// between the processes are then authenticated by the secret but not
    /// encrypted.
    pub insecure: bool,
}

/// A running worker.
pub struct WorkerServer {
    addr: SocketAddr,
    db: Db,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
    heartbeat: JoinHandle<()>,
}

impl WorkerServer {
    /// Binds `options.listen`, serves, and joins the master: it fails when
    /// the master cannot be reached or refuses the worker (a wrong secret,
    /// a process that is not a master).
    pub async fn start(db: Db, options: WorkerOptions) -> Result<WorkerServer, ServeError> {
        let addr = options.listen;
        if !addr.ip().is_loopback() && options.tls.is_none() && !options.insecure {
            return Err(ServeError::Insecure {
                addr,
                reason: "without TLS (--tls-cert, --tls-key and --tls-ca, which its master must \
                         have too), calls between the processes of a cluster are not encrypted",
            });
        }
        let peers = Peers::new(
            options.secret.clone(),
            options.tls.is_some(),
            options.tls_ca.as_deref(),
        )?;
        super::reachable_url(addr, options.advertise.as_deref(), &peers)?;
        let master = master_channel(&options.master, &peers)?;
        if !options.insecure && !peers.encrypted() && !is_loopback(master.uri()) {
            return Err(ServeError::ClusterTls(
                "a worker without TLS joins only a master on a loopback address: its calls, \
                 and the cluster secret they carry, would cross the network in the clear; give \
                 --tls-cert, --tls-key and --tls-ca (which its master must have too), or \
                 --insecure",
            ));
        }
        let master = master.connect_lazy();
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &options.tls {
            builder = tls.serve(builder)?;
        }
        let (listener, addr) = crate::server::bind(addr).await?;
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let name = super::reachable_url(addr, options.advertise.as_deref(), &peers)?;
        let worker = worker_service(db.clone(), peers, name.clone());
        let worker = worker.into_worker_server();
        let worker = options.secret.guard(worker);
        let (stop, stopped) = oneshot::channel::<()>();
        let data = options.secret.guard(TabletDataService::new(db.clone()));
        let serving = builder
            .add_service(worker)
            .add_service(data)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            });
        let task = tokio::spawn(serving);
        let first = match join(&master, &options.secret, &name, &db).await {
            Ok(first) => first,
            Err(status) => {
                // Not a worker after all: it stops serving.
                let _ = stop.send(());
                task.abort();
                let status = match status.code() {
                    tonic::Code::Unimplemented => tonic::Status::unimplemented(
                        "it is not a cluster's master (a master is started with --master)",
                    ),
                    // Not the master's answer but the connection's: one
                    // side may speak TLS and the other not.
                    tonic::Code::Unavailable
                    | tonic::Code::Internal
                    | tonic::Code::Unknown
                    | tonic::Code::Cancelled => tonic::Status::unavailable(format!(
                        "{} (if the master is up: a worker serves TLS exactly when its master \
                         does, and trusts the certificate the master serves)",
                        status.message()
                    )),
                    _ => status,
                };
                return Err(ServeError::Join {
                    master: options.master.clone(),
                    status,
                });
            }
        };
        let heartbeat = tokio::spawn(heartbeats(
            master,
            options.secret,
            name,
            db.clone(),
            Duration::from_millis(first.heartbeat_millis.max(1)),
        ));
        Ok(WorkerServer {
            addr,
            db,
            stop: Some(stop),
            task,
            heartbeat,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops calling the master and taking calls, and flushes the
    /// database.
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        self.heartbeat.abort();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let served = (&mut self.task).await.unwrap_or(Ok(()));
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.flush())
            .await
            .map_err(ServeError::Flush)??;
        served.map_err(ServeError::Transport)
    }
}

/// Where the master is called, as `peers` call (over TLS when the worker
/// serves TLS); its channel connects on first use (and again after the
/// master restarts).
fn master_channel(master: &str, peers: &Peers) -> Result<Endpoint, ServeError> {
    let url = if master.contains("://") {
        master.to_string()
    } else {
        format!("{}://{master}", peers.scheme())
    };
    let endpoint = peers.endpoint(&url).map_err(|why| ServeError::Join {
        master: master.to_string(),
        status: tonic::Status::invalid_argument(why),
    })?;
    Ok(endpoint
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5)))
}

/// Whether `uri` names this machine: a loopback address or `localhost`.
fn is_loopback(uri: &http::Uri) -> bool {
    let host = uri.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

/// Calls the master every `every`, as long as the worker runs; a failed
/// call is logged and the next one tried at the next beat.
async fn heartbeats(
    master: Channel,
    secret: ClusterSecret,
    name: String,
    db: Db,
    mut every: Duration,
) {
    let mut reached = true;
    loop {
        tokio::time::sleep(every).await;
        match join(&master, &secret, &name, &db).await {
            Ok(reply) => {
                if !reached {
                    tracing::info!("the master is reached again");
                }
                reached = true;
                every = Duration::from_millis(reply.heartbeat_millis.max(1));
            }
            Err(status) if reached => {
                tracing::warn!(status = %status.message(), "the master did not take a heartbeat");
                reached = false;
            }
            Err(_) => {}
        }
    }
}
