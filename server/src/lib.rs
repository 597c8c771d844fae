//! widesql over the network: an Arrow Flight SQL server.
//!
//! [`Server::start`] serves one [`widesql::Db`] over Arrow Flight SQL
//! (gRPC), the protocol ADBC drivers (Python, Go, R, Java, C), the Flight
//! SQL JDBC driver and the tools built on them speak. Every call goes
//! through the same [`widesql::Session`] front door as the embedded API:
//! queries stream their batches as the client reads them, updates take the
//! one write path, prepared statements are the session's prepared plans,
//! and the catalog calls list projects (catalogs), datasets (schemas) and
//! tables.
//!
//! Where things are:
//! - `server`: options, limits, binding, TLS, shutdown;
//! - `connections`: the bound on open connections;
//! - `service`: the Flight SQL calls;
//! - `calls`: how a statement runs (its task, slot, activity entry and log line);
//! - `put`: the bodies of `DoPut` calls (parameters, bulk ingest);
//! - `cluster`: the master's side of a cluster and the worker process;
//! - `door`: the check of a call's headers before its message is read;
//! - `sessions`: handshakes, bearer tokens and the session of each;
//! - `statements`: statements kept between calls (a query between its
//!   `GetFlightInfo` and `DoGet`, prepared statements, running queries to
//!   cancel);
//! - `metadata`: the catalog calls and `GetSqlInfo`;
//! - `status`: widesql's errors as gRPC statuses.

mod calls;
mod cluster;
mod connections;
mod door;
mod metadata;
mod put;
mod server;
mod service;
mod sessions;
mod statements;
mod status;

pub use cluster::{
    ClusterSecret, MasterOptions, RemoteStore, WorkerOptions, WorkerServer, SECRET_VARIABLE,
};
pub use server::{Limits, ServeError, ServeOptions, Server, TlsIdentity};

/// Hooks for tests of the cluster; not part of the API.
#[doc(hidden)]
pub mod internals {
    pub use crate::cluster::{hold_back_applies_to, send_held_back_apply};
}
