//! A cluster: one master and worker processes (`widesql serve --master`,
//! `widesql serve --worker --join MASTER`).
//!
//! The master is the [`Server`](crate::Server) clients call: it owns the
//! catalog, the tablet map among it, and serves Flight SQL. Beside it, it
//! serves the cluster's own service ([`protocol`]), which workers call to
//! join and then every heartbeat; `SHOW WORKERS` lists them. A worker
//! ([`worker`]) owns a database directory of its own and serves
//! datafusion-distributed's worker service and the tablet data it holds
//! ([`data`]), which the master reaches as a storage backend. A master's
//! queries run on its workers where their tablets are ([`reads`]). Every
//! call between the
//! processes carries the secret they share ([`secret`]), and each
//! process's cluster services refuse a call without it before reading its
//! message.

mod data;
mod protocol;
mod reads;
mod remote;
mod secret;
mod worker;

use std::time::Duration;

pub(crate) use protocol::ClusterService;
pub(crate) use reads::{distribute_queries, refuse_plans, worker_service};
pub(crate) use remote::MasterStores;
pub use remote::RemoteStore;
pub use secret::{ClusterSecret, SECRET_VARIABLE};
pub use worker::{WorkerOptions, WorkerServer};

/// What makes a [`Server`](crate::Server) a cluster's master.
#[derive(Clone, Debug)]
pub struct MasterOptions {
    /// The secret the cluster shares.
    pub secret: ClusterSecret,
    /// How often workers call; one not heard from for three beats is down.
    pub heartbeat: Duration,
}

impl MasterOptions {
    /// A master of the cluster that shares `secret`, with a heartbeat of
    /// one second.
    pub fn new(secret: ClusterSecret) -> Self {
        MasterOptions {
            secret,
            heartbeat: Duration::from_secs(1),
        }
    }
}
