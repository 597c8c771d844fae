//! `widesql serve`: the database over Arrow Flight SQL until SIGINT or
//! SIGTERM, then a clean stop (running calls finish within a grace period,
//! the database is flushed).

use std::net::SocketAddr;
use std::path::PathBuf;

use widesql::Db;
use widesql_server::{
    ClusterSecret, MasterOptions, ServeOptions, Server, TlsIdentity, WorkerOptions, WorkerServer,
};

use crate::error::CliError;

/// What `widesql serve` was given.
pub(crate) struct ServeArgs {
    pub(crate) listen: SocketAddr,
    pub(crate) tls_cert: Option<PathBuf>,
    pub(crate) tls_key: Option<PathBuf>,
    /// The certificates a cluster's process trusts in the others'.
    pub(crate) tls_ca: Option<PathBuf>,
    pub(crate) insecure: bool,
    pub(crate) init_admin: Option<String>,
    pub(crate) role: Role,
    /// The host the other processes of a cluster reach this one at.
    pub(crate) advertise: Option<String>,
    pub(crate) limits: widesql_server::Limits,
}

/// What the process is.
pub(crate) enum Role {
    /// The one process of the database.
    Single,
    /// A cluster's master.
    Master,
    /// A worker of the master at this address.
    Worker { master: String },
}

/// The first admin's password: `WIDESQL_ADMIN_PASSWORD`, or the first line
/// of standard input (never a flag, which `ps` would show).
fn admin_password() -> Result<String, CliError> {
    if let Ok(password) = std::env::var("WIDESQL_ADMIN_PASSWORD") {
        return Ok(password);
    }
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|source| CliError::Read {
            path: "standard input".into(),
            source,
        })?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

fn read(path: PathBuf) -> Result<Vec<u8>, CliError> {
    std::fs::read(&path).map_err(|source| CliError::Read { path, source })
}

pub(crate) fn run(db: &Db, args: ServeArgs) -> Result<(), CliError> {
    log_calls();
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsIdentity {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        }),
        _ => None,
    };
    let tls_ca = args.tls_ca.map(read).transpose()?;
    let master = match args.role {
        Role::Single => None,
        Role::Master => Some(MasterOptions {
            advertise: args.advertise,
            tls_ca,
            ..MasterOptions::new(ClusterSecret::from_env()?)
        }),
        Role::Worker { master } => {
            let options = WorkerOptions {
                listen: args.listen,
                advertise: args.advertise,
                master,
                secret: ClusterSecret::from_env()?,
                tls,
                tls_ca,
                insecure: args.insecure,
            };
            return serve_worker(db, options);
        }
    };
    if let Some(admin) = &args.init_admin {
        db.create_user(admin, &admin_password()?, true)?;
        eprintln!("created admin user '{admin}'");
    }
    let options = ServeOptions {
        listen: args.listen,
        tls,
        insecure: args.insecure,
        limits: args.limits,
        master,
        ..ServeOptions::default()
    };
    crate::runtime()?.block_on(async {
        // The handlers are installed before the address is printed: a
        // supervisor that reads the line may stop the server at once.
        let signals = Signals::install()?;
        let server = Server::start(db.clone(), options).await?;
        println!("listening on {}", server.local_addr());
        signals.wait().await;
        eprintln!("stopping: running calls may finish, then the database is flushed");
        server.shutdown().await?;
        Ok(())
    })
}

/// A worker, until SIGINT or SIGTERM.
fn serve_worker(db: &Db, options: WorkerOptions) -> Result<(), CliError> {
    crate::runtime()?.block_on(async {
        let signals = Signals::install()?;
        let worker = WorkerServer::start(db.clone(), options).await?;
        println!("listening on {}", worker.local_addr());
        signals.wait().await;
        eprintln!("stopping: the database is flushed");
        worker.shutdown().await?;
        Ok(())
    })
}

/// One line per call on standard error: who, what, how long, how many
/// rows, how it ended (and a cluster's joins and heartbeats).
fn log_calls() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .try_init();
}

/// SIGINT and SIGTERM, listened for from the moment they are installed.
#[cfg(unix)]
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn install() -> Result<Signals, CliError> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).map_err(CliError::Runtime)?,
            terminate: signal(SignalKind::terminate()).map_err(CliError::Runtime)?,
        })
    }

    /// Waits for either.
    async fn wait(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// Ctrl-C where there are no Unix signals.
#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn install() -> Result<Signals, CliError> {
        Ok(Signals)
    }

    async fn wait(self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}
