//! `widesql serve`: the database over Arrow Flight SQL until SIGINT or
//! SIGTERM, then a clean stop (running calls finish within a grace period,
//! the database is flushed).

use std::net::SocketAddr;
use std::path::PathBuf;

use widesql::Db;
use widesql_server::{ServeOptions, Server, TlsIdentity};

use crate::error::CliError;

/// What `widesql serve` was given.
pub(crate) struct ServeArgs {
    pub(crate) listen: SocketAddr,
    pub(crate) tls_cert: Option<PathBuf>,
    pub(crate) tls_key: Option<PathBuf>,
    pub(crate) insecure: bool,
}

fn read(path: PathBuf) -> Result<Vec<u8>, CliError> {
    std::fs::read(&path).map_err(|source| CliError::Read { path, source })
}

pub(crate) fn run(db: &Db, args: ServeArgs) -> Result<(), CliError> {
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsIdentity {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        }),
        _ => None,
    };
    let options = ServeOptions {
        listen: args.listen,
        tls,
        insecure: args.insecure,
        ..ServeOptions::default()
    };
    crate::runtime()?.block_on(async {
        let server = Server::start(db.clone(), options).await?;
        println!("listening on {}", server.local_addr());
        stopped().await;
        eprintln!("stopping: running calls may finish, then the database is flushed");
        server.shutdown().await?;
        Ok(())
    })
}

/// Waits for SIGINT or SIGTERM.
async fn stopped() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
