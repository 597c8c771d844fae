//! The cluster's own gRPC service, `widesql.cluster.Cluster`, which the
//! master serves beside Flight SQL: a worker calls `Join` when it starts
//! and again every heartbeat. Its messages are few and small, so they are
//! declared here with prost's derive rather than generated from a `.proto`
//! file; the wire format is protobuf all the same.

use std::convert::Infallible;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tonic::body::Body;
use tonic::server::{NamedService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use tower_service::Service;
use widesql::{Db, TableId};

use super::{ClusterSecret, Peers};

/// The path of `Join`.
const JOIN: &str = "/widesql.cluster.Cluster/Join";

/// A worker's call to join the cluster (and its heartbeat).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct JoinRequest {
    /// The address the worker serves on: `http://host:port`, or
    /// `https://host:port` in a cluster that encrypts its calls.
    #[prost(string, tag = "1")]
    pub(crate) worker: String,
    /// The ids of the master's tables whose tablets the worker holds.
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub(crate) held: Vec<Vec<u8>>,
}

/// The master's answer.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct JoinReply {
    /// How often the worker calls again, in milliseconds.
    #[prost(uint64, tag = "1")]
    pub(crate) heartbeat_millis: u64,
    /// Of the tables the worker holds tablets of, those the master
    /// dropped: the worker removes its copies.
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub(crate) dropped: Vec<Vec<u8>>,
}

/// The master's side: it records each worker that calls in the database's
/// [`widesql::Workers`], and answers which of the tables the worker holds
/// tablets of it dropped, so that a worker that missed a `DROP` removes
/// its copy at its next call.
#[derive(Clone)]
pub(crate) struct ClusterService {
    db: Db,
    heartbeat: Duration,
    /// The scheme of its workers' addresses ([`Peers::scheme`]).
    scheme: &'static str,
}

impl ClusterService {
    /// A worker not heard from for this many heartbeats is down.
    pub(crate) const MISSED_HEARTBEATS: u32 = 3;

    pub(crate) fn new(db: Db, heartbeat: Duration, peers: &Peers) -> Self {
        db.workers()
            .set_down_after(heartbeat.saturating_mul(Self::MISSED_HEARTBEATS));
        ClusterService {
            db,
            heartbeat,
            scheme: peers.scheme(),
        }
    }
}

impl NamedService for ClusterService {
    const NAME: &'static str = "widesql.cluster.Cluster";
}

impl Service<http::Request<Body>> for ClusterService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            Ok(match request.uri().path() {
                JOIN => {
                    let mut grpc = tonic::server::Grpc::new(ProstCodec::default());
                    grpc.unary(this, request).await
                }
                other => Status::unimplemented(format!("no cluster call {other}")).into_http(),
            })
        })
    }
}

impl UnaryService<JoinRequest> for ClusterService {
    type Response = JoinReply;
    type Future = std::future::Ready<Result<Response<JoinReply>, Status>>;

    fn call(&mut self, request: Request<JoinRequest>) -> Self::Future {
        std::future::ready(self.join(request.into_inner()))
    }
}

impl ClusterService {
    fn join(&self, request: JoinRequest) -> Result<Response<JoinReply>, Status> {
        let worker = request.worker.as_str();
        check_worker_address(worker, self.scheme)?;
        let held = table_ids(&request.held)?;
        if self.db.workers().heard_from(worker) {
            tracing::info!(worker, "worker joined");
        }
        // The call is a heartbeat first: a failure to look up drops is
        // logged, and the worker asks again at its next one.
        let dropped = widesql::internals::dropped_tables(&self.db, &held).unwrap_or_else(|e| {
            tracing::warn!(worker, error = %e, "could not look up the tables dropped on workers");
            Vec::new()
        });
        Ok(Response::new(JoinReply {
            heartbeat_millis: u64::try_from(self.heartbeat.as_millis()).unwrap_or(u64::MAX),
            dropped: dropped.iter().map(|id| id.as_bytes().to_vec()).collect(),
        }))
    }
}

/// Table ids as a worker sends them, 16 bytes each.
fn table_ids(ids: &[Vec<u8>]) -> Result<Vec<TableId>, Status> {
    ids.iter()
        .map(|id| {
            <[u8; 16]>::try_from(id.as_slice())
                .map(TableId::from_bytes)
                .map_err(|_| Status::invalid_argument("a table id is 16 bytes"))
        })
        .collect()
}

/// A worker is named by the address it serves on, `http://host:port`
/// (`https://` when the cluster encrypts its calls: `scheme`), which the
/// master calls it back at.
fn check_worker_address(worker: &str, scheme: &str) -> Result<(), Status> {
    let refused = |why: &str| {
        Err(Status::invalid_argument(format!(
            "the worker address '{worker}' {why}; a worker is named by the address it listens \
             on, as {scheme}://host:port"
        )))
    };
    let Ok(uri) = worker.parse::<http::Uri>() else {
        return refused("is not an address");
    };
    match uri.scheme_str() {
        Some(s) if s == scheme => {}
        Some("https") => {
            return refused(
                "serves TLS, and this master does not: a cluster's processes serve TLS all or \
                 none",
            )
        }
        Some("http") => {
            return refused(
                "serves no TLS, and this master does: start the worker with --tls-cert, \
                 --tls-key and --tls-ca",
            )
        }
        _ => return refused(&format!("does not start with {scheme}://")),
    }
    match uri.authority() {
        Some(authority) if authority.port_u16().is_some_and(|p| p != 0) => {}
        _ => return refused("has no port"),
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return refused("has a path");
    }
    Ok(())
}

/// Calls `Join` on the master at `master` for the worker at `worker`,
/// whose database is `db`, and removes the copies of the tables the
/// master dropped.
pub(crate) async fn join(
    master: &tonic::transport::Channel,
    secret: &ClusterSecret,
    worker: &str,
    db: &Db,
) -> Result<JoinReply, Status> {
    let mut client = tonic::client::Grpc::new(master.clone());
    client
        .ready()
        .await
        .map_err(|e| Status::unavailable(format!("the master cannot be reached: {e}")))?;
    let held = widesql::internals::held_tables(db);
    let mut request = Request::new(JoinRequest {
        worker: worker.to_string(),
        held: held.iter().map(|id| id.as_bytes().to_vec()).collect(),
    });
    secret.add_to_request(&mut request);
    let path = http::uri::PathAndQuery::from_static(JOIN);
    let reply: JoinReply = client
        .unary(request, path, ProstCodec::default())
        .await
        .map(Response::into_inner)?;
    // The master took the call; removing the copies of dropped tables is
    // tried again at the next heartbeat if it fails.
    match table_ids(&reply.dropped) {
        Ok(dropped) => {
            let db = db.clone();
            // Whole trees removed: off the runtime's threads.
            let removing =
                tokio::task::spawn_blocking(move || remove_dropped(&db, &held, &dropped));
            if let Err(e) = removing.await {
                tracing::warn!(error = %e, "the removal of dropped tables' tablets stopped");
            }
        }
        Err(status) => {
            tracing::warn!(status = %status.message(), "the master named dropped tables wrongly");
        }
    }
    Ok(reply)
}

/// Removes from `db` the tablets of the tables `dropped` that are among
/// those it named as `held` (sorted): the master cannot make a worker
/// remove anything else.
/// Each failure is logged, naming its table, and the rest are tried.
fn remove_dropped(db: &Db, held: &[TableId], dropped: &[TableId]) {
    for id in dropped {
        if held.binary_search(id).is_err() {
            continue;
        }
        let tree = widesql::internals::table_tree_name(*id);
        match widesql::internals::drop_held(db, &tree) {
            Ok(_) => {
                tracing::info!(table = %id, "removed the tablets of a table the master dropped")
            }
            Err(e) => tracing::warn!(
                table = %id,
                error = %e,
                "could not remove the tablets of a table the master dropped"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_down_after_three_missed_heartbeats_of_a_second(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let db = Db::open(dir.path())?;
        let options = crate::MasterOptions::new(ClusterSecret::new("sixteen-chars-ok")?);
        assert_eq!(options.heartbeat, Duration::from_secs(1));
        ClusterService::new(db.clone(), options.heartbeat, &Peers::plain(options.secret));
        assert_eq!(db.workers().down_after(), Duration::from_secs(3));
        Ok(())
    }

    #[test]
    fn a_master_names_only_the_tables_it_dropped_while_workers_held_them(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let db = Db::open(dir.path())?;
        let peers = Peers::plain(ClusterSecret::new("sixteen-chars-ok")?);
        let service = ClusterService::new(db.clone(), Duration::from_secs(1), &peers);
        let dataset = db.default_dataset()?;
        let live = dataset
            .create_table("live", widesql::TableSpec::new())?
            .id();
        // Dropped, but never on a worker: nothing recorded it.
        let gone = dataset
            .create_table("gone", widesql::TableSpec::new())?
            .id();
        dataset.drop_table("gone")?;
        // Unknown, as the tables made after the copy of its files a
        // database was restored from are.
        let unknown = TableId::from_bytes([7; 16]);
        let join = |held: Vec<Vec<u8>>| {
            service.join(JoinRequest {
                worker: "http://127.0.0.1:7001".into(),
                held,
            })
        };
        let held = [live, gone, unknown].map(|id| id.as_bytes().to_vec());
        assert!(join(held.to_vec())?.into_inner().dropped.is_empty());
        // Split, so workers may hold it: its drop is recorded (here, in a
        // process that serves no cluster, too), and the master names it.
        let split = dataset.create_table("split", widesql::TableSpec::new())?;
        split.split_at(&[b"m"])?;
        let split = split.id();
        dataset.drop_table("split")?;
        let named = join(vec![live.as_bytes().to_vec(), split.as_bytes().to_vec()])?;
        assert_eq!(named.into_inner().dropped, [split.as_bytes().to_vec()]);
        let bad = join(vec![vec![1, 2, 3]]).expect_err("a short id");
        assert_eq!(bad.code(), tonic::Code::InvalidArgument);
        Ok(())
    }

    #[test]
    fn a_worker_removes_only_the_dropped_tables_it_named() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let db = Db::open(dir.path())?;
        let table = TableId::from_bytes([7; 16]);
        let put = widesql::internals::Write::Put(b"k".to_vec().into(), b"v".to_vec().into());
        let tree = widesql::internals::table_tree_name(table);
        widesql::internals::apply_held(&db, vec![(tree, vec![put])], false)?;
        assert_eq!(widesql::internals::held_tables(&db), [table]);
        remove_dropped(&db, &[], &[table]);
        assert_eq!(widesql::internals::held_tables(&db), [table]);
        remove_dropped(&db, &[table], &[table]);
        assert!(widesql::internals::held_tables(&db).is_empty());
        Ok(())
    }

    #[test]
    fn a_worker_is_named_by_an_address_of_the_clusters_scheme_with_a_port() {
        for good in [
            "http://127.0.0.1:7001",
            "http://worker-1:7001/",
            "http://[::1]:9",
        ] {
            assert!(check_worker_address(good, "http").is_ok(), "{good}");
            let encrypted = good.replace("http://", "https://");
            assert!(
                check_worker_address(&encrypted, "https").is_ok(),
                "{encrypted}"
            );
        }
        for (bad, scheme) in [
            ("127.0.0.1:7001", "http"),
            ("https://127.0.0.1:7001", "http"),
            ("http://127.0.0.1:7001", "https"),
            ("ftp://127.0.0.1:7001", "https"),
            ("http://127.0.0.1", "http"),
            ("http://127.0.0.1:0", "http"),
            ("https://127.0.0.1:7001/x", "https"),
            ("http://127.0.0.1:7001/?a", "http"),
            ("", "http"),
        ] {
            let refused = check_worker_address(bad, scheme).expect_err(bad);
            assert_eq!(refused.code(), tonic::Code::InvalidArgument);
            assert!(refused.message().contains(bad), "{}", refused.message());
        }
        let refused = check_worker_address("http://w:1", "https").unwrap_err();
        assert!(
            refused
                .message()
                .contains("start the worker with --tls-cert"),
            "{}",
            refused.message()
        );
    }
}
