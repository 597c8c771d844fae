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
use widesql::Db;

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
}

/// The master's answer.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct JoinReply {
    /// How often the worker calls again, in milliseconds.
    #[prost(uint64, tag = "1")]
    pub(crate) heartbeat_millis: u64,
}

/// The master's side: it records each worker that calls in the database's
/// [`widesql::Workers`].
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
        std::future::ready(self.join(&request.into_inner().worker))
    }
}

impl ClusterService {
    fn join(&self, worker: &str) -> Result<Response<JoinReply>, Status> {
        check_worker_address(worker, self.scheme)?;
        if self.db.workers().heard_from(worker) {
            tracing::info!(worker, "worker joined");
        }
        Ok(Response::new(JoinReply {
            heartbeat_millis: u64::try_from(self.heartbeat.as_millis()).unwrap_or(u64::MAX),
        }))
    }
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

/// Calls `Join` on the master at `master` for the worker at `worker`.
pub(crate) async fn join(
    master: &tonic::transport::Channel,
    secret: &ClusterSecret,
    worker: &str,
) -> Result<JoinReply, Status> {
    let mut client = tonic::client::Grpc::new(master.clone());
    client
        .ready()
        .await
        .map_err(|e| Status::unavailable(format!("the master cannot be reached: {e}")))?;
    let mut request = Request::new(JoinRequest {
        worker: worker.to_string(),
    });
    secret.add_to_request(&mut request);
    let path = http::uri::PathAndQuery::from_static(JOIN);
    client
        .unary(request, path, ProstCodec::default())
        .await
        .map(Response::into_inner)
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
