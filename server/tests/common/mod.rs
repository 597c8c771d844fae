//! A cluster for tests: a master and workers on free loopback ports, in
//! this process, with databases of their own.

use std::time::{Duration, Instant};

use widesql::{Db, Session};
use widesql_server::{
    ClusterSecret, MasterOptions, ServeOptions, Server, TlsIdentity, WorkerOptions, WorkerServer,
};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub const SECRET: &str = "a-secret-of-the-test-cluster";

pub fn any_port() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A self-signed certificate for `localhost` and 127.0.0.1, which every
/// process of a test cluster that encrypts its calls serves and trusts.
#[derive(Clone)]
pub struct TestTls {
    pub identity: TlsIdentity,
    /// The certificate, as the certificates to trust.
    pub ca: Vec<u8>,
}

impl TestTls {
    pub fn new() -> Result<TestTls, BoxError> {
        let certified =
            rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])?;
        let cert_pem = certified.cert.pem().into_bytes();
        Ok(TestTls {
            identity: TlsIdentity {
                cert_pem: cert_pem.clone(),
                key_pem: certified.signing_key.serialize_pem().into_bytes(),
            },
            ca: cert_pem,
        })
    }
}

/// A master over `dir` on a free loopback port, workers beating every
/// 50 ms.
pub async fn master(dir: &std::path::Path) -> Result<(Db, Server), BoxError> {
    master_of(Db::open(dir)?).await
}

/// A master over `db` on a free loopback port, workers beating every
/// 50 ms.
pub async fn master_of(db: Db) -> Result<(Db, Server), BoxError> {
    Ok((db.clone(), Server::start(db, master_options(None)?).await?))
}

/// How a master on a free loopback port serves, over TLS with `tls`,
/// its workers beating every 50 ms.
pub fn master_options(tls: Option<&TestTls>) -> Result<ServeOptions, BoxError> {
    let master = MasterOptions {
        heartbeat: Duration::from_millis(50),
        tls_ca: tls.map(|tls| tls.ca.clone()),
        ..MasterOptions::new(ClusterSecret::new(SECRET)?)
    };
    Ok(ServeOptions {
        listen: any_port(),
        tls: tls.map(|tls| tls.identity.clone()),
        master: Some(master),
        ..ServeOptions::default()
    })
}

/// A worker over `db` joining `master`, on `listen`.
pub async fn worker(
    db: &Db,
    master: &Server,
    listen: std::net::SocketAddr,
) -> Result<WorkerServer, BoxError> {
    let options = worker_options(master, listen, None)?;
    Ok(WorkerServer::start(db.clone(), options).await?)
}

/// How a worker joining `master` on `listen` serves, over TLS with `tls`.
pub fn worker_options(
    master: &Server,
    listen: std::net::SocketAddr,
    tls: Option<&TestTls>,
) -> Result<WorkerOptions, BoxError> {
    Ok(WorkerOptions {
        listen,
        advertise: None,
        master: master.local_addr().to_string(),
        secret: ClusterSecret::new(SECRET)?,
        tls: tls.map(|tls| tls.identity.clone()),
        tls_ca: tls.map(|tls| tls.ca.clone()),
        insecure: false,
    })
}

/// The rows of `sql` as text lines.
pub async fn lines(session: &Session, sql: &str) -> Result<Vec<String>, BoxError> {
    let batches = session.sql(sql).await?.collect().await?;
    let mut lines = Vec::new();
    for batch in &batches {
        for row in 0..batch.num_rows() {
            let cells = batch
                .columns()
                .iter()
                .map(|c| datafusion::arrow::util::display::array_value_to_string(c, row))
                .collect::<Result<Vec<_>, _>>()?;
            lines.push(cells.join(" "));
        }
    }
    Ok(lines)
}

/// Waits until the master lists `count` workers that are up.
pub async fn until_up(db: &Db, count: usize) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.workers().up().len() < count {
        if Instant::now() > deadline {
            return Err(format!("{:?} are up, not {count}", db.workers().up()).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
