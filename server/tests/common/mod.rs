//! A cluster for tests: a master and workers on free loopback ports, in
//! this process, with databases of their own.

use std::time::{Duration, Instant};

use widesql::{Db, Session};
use widesql_server::{
    ClusterSecret, MasterOptions, ServeOptions, Server, WorkerOptions, WorkerServer,
};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub const SECRET: &str = "a-secret-of-the-test-cluster";

pub fn any_port() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A master over `dir` on a free loopback port, workers beating every
/// 50 ms.
pub async fn master(dir: &std::path::Path) -> Result<(Db, Server), BoxError> {
    master_of(Db::open(dir)?).await
}

/// A master over `db` on a free loopback port, workers beating every
/// 50 ms.
pub async fn master_of(db: Db) -> Result<(Db, Server), BoxError> {
    let master = MasterOptions {
        heartbeat: Duration::from_millis(50),
        ..MasterOptions::new(ClusterSecret::new(SECRET)?)
    };
    let options = ServeOptions {
        listen: any_port(),
        master: Some(master),
        ..ServeOptions::default()
    };
    let server = Server::start(db.clone(), options).await?;
    Ok((db, server))
}

/// A worker over `db` joining `master`, on `listen`.
pub async fn worker(
    db: &Db,
    master: &Server,
    listen: std::net::SocketAddr,
) -> Result<WorkerServer, BoxError> {
    let options = WorkerOptions {
        listen,
        advertise: None,
        master: master.local_addr().to_string(),
        secret: ClusterSecret::new(SECRET)?,
        insecure: false,
    };
    Ok(WorkerServer::start(db.clone(), options).await?)
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
