//! The tablet data a worker holds, reached by the master:
//! `widesql.cluster.TabletData`, which a worker serves behind the cluster
//! secret (the master's side is [`super::remote::RemoteStore`]). `Scan`
//! streams the entries of a key range in chunks; `Apply` writes a batch
//! atomically (durably when asked); `Drop` removes a dropped table's
//! tree. The worker keeps the keys as the master would, under the same
//! table tree names ([`widesql::internals::held_entries`]).

use std::convert::Infallible;
use std::ops::Bound;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::StreamExt;
use tonic::body::Body;
use tonic::server::{NamedService, ServerStreamingService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use tower_service::Service;
use widesql::internals::{apply_held, drop_held, held_entries, Bytes, Write};
use widesql::Db;

pub(super) const SCAN: &str = "/widesql.cluster.TabletData/Scan";
pub(super) const APPLY: &str = "/widesql.cluster.TabletData/Apply";
pub(super) const DROP: &str = "/widesql.cluster.TabletData/Drop";

/// How long a call to a worker may wait for its answer, or a scan for its
/// next chunk, before it fails: a worker that hangs must not hold the
/// row locks of the writes waiting for it.
pub(super) const CALL_WAIT: Duration = Duration::from_secs(30);

/// Entries a chunk of a scan holds at most.
const CHUNK_ENTRIES: usize = 1024;
/// Bytes of keys and values a chunk holds at most (one entry may pass it).
const CHUNK_BYTES: usize = 1 << 20;

/// One end of a scanned range; absent: unbounded.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyBound {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(bool, tag = "2")]
    pub(super) excluded: bool,
}

/// The entries of a tree in a range.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ScanRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) tree: Vec<u8>,
    #[prost(message, optional, tag = "2")]
    pub(super) lo: Option<KeyBound>,
    #[prost(message, optional, tag = "3")]
    pub(super) hi: Option<KeyBound>,
    #[prost(bool, tag = "4")]
    pub(super) reverse: bool,
}

/// A chunk of a scan's entries, in order. The last one says so: a scan
/// whose stream ends without it stopped early (its worker's thread died)
/// and is an error, never a shorter range.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Entries {
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub(super) keys: Vec<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub(super) values: Vec<Vec<u8>>,
    #[prost(bool, tag = "3")]
    pub(super) last: bool,
}

/// One write; no value: a delete.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WriteMessage {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) key: Vec<u8>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub(super) value: Option<Vec<u8>>,
}

/// The writes of one tree.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TreeWritesMessage {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) tree: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    pub(super) writes: Vec<WriteMessage>,
}

/// A batch, applied atomically.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ApplyRequest {
    #[prost(message, repeated, tag = "1")]
    pub(super) trees: Vec<TreeWritesMessage>,
    #[prost(bool, tag = "2")]
    pub(super) durable: bool,
}

/// A batch was applied.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Applied {}

/// The master dropped the table of a tree.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DropRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(super) tree: Vec<u8>,
}

/// Whether the worker held any of the tree.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Dropped {
    #[prost(bool, tag = "1")]
    pub(super) held: bool,
}

pub(super) fn to_bound(bound: Option<KeyBound>) -> Bound<Vec<u8>> {
    match bound {
        None => Bound::Unbounded,
        Some(KeyBound {
            key,
            excluded: false,
        }) => Bound::Included(key),
        Some(KeyBound {
            key,
            excluded: true,
        }) => Bound::Excluded(key),
    }
}

pub(super) fn from_bound(bound: Bound<Vec<u8>>) -> Option<KeyBound> {
    match bound {
        Bound::Unbounded => None,
        Bound::Included(key) => Some(KeyBound {
            key,
            excluded: false,
        }),
        Bound::Excluded(key) => Some(KeyBound {
            key,
            excluded: true,
        }),
    }
}

/// Scans a worker runs at once: each holds a blocking thread while its
/// reader is slow, and writes need those threads too.
const SCANS_AT_ONCE: usize = 64;

/// The worker's side: the tablet data of its own database.
#[derive(Clone)]
pub(crate) struct TabletDataService {
    db: Db,
    scans: Arc<tokio::sync::Semaphore>,
}

impl TabletDataService {
    pub(crate) fn new(db: Db) -> Self {
        TabletDataService {
            db,
            scans: Arc::new(tokio::sync::Semaphore::new(SCANS_AT_ONCE)),
        }
    }
}

impl NamedService for TabletDataService {
    const NAME: &'static str = "widesql.cluster.TabletData";
}

impl Service<http::Request<Body>> for TabletDataService {
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
                SCAN => {
                    let mut grpc = tonic::server::Grpc::new(ProstCodec::default())
                        .max_decoding_message_size(usize::MAX);
                    grpc.server_streaming(this, request).await
                }
                APPLY => {
                    let mut grpc =
                        tonic::server::Grpc::new(ProstCodec::<Applied, ApplyRequest>::default())
                            .max_decoding_message_size(usize::MAX);
                    grpc.unary(this, request).await
                }
                DROP => {
                    let mut grpc =
                        tonic::server::Grpc::new(ProstCodec::<Dropped, DropRequest>::default());
                    grpc.unary(this, request).await
                }
                other => Status::unimplemented(format!("no tablet data call {other}")).into_http(),
            })
        })
    }
}

fn status(error: widesql::Error) -> Status {
    match error.kind() {
        widesql::ErrorKind::InvalidArgument => Status::invalid_argument(error.to_string()),
        _ => Status::internal(error.to_string()),
    }
}

impl ServerStreamingService<ScanRequest> for TabletDataService {
    type Response = Entries;
    type ResponseStream = BoxStream<'static, Result<Entries, Status>>;
    type Future = std::future::Ready<Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: Request<ScanRequest>) -> Self::Future {
        let Ok(running) = Arc::clone(&self.scans).try_acquire_owned() else {
            return std::future::ready(Err(Status::resource_exhausted(format!(
                "the worker runs {SCANS_AT_ONCE} scans already"
            ))));
        };
        let scan = request.into_inner();
        let db = self.db.clone();
        let (chunks, received) = tokio::sync::mpsc::channel::<Result<Entries, Status>>(2);
        // The scan reads the store on a blocking thread; the channel holds
        // two chunks, so a slow master holds no more of them.
        tokio::task::spawn_blocking(move || {
            let _running = running;
            let entries = held_entries(
                &db,
                &scan.tree,
                to_bound(scan.lo),
                to_bound(scan.hi),
                scan.reverse,
            );
            let entries = match entries {
                Ok(entries) => entries,
                Err(e) => {
                    let _ = chunks.blocking_send(Err(status(e)));
                    return;
                }
            };
            let mut chunk = Entries::default();
            let mut bytes = 0;
            for entry in entries {
                match entry {
                    Ok((key, value)) => {
                        bytes += key.len() + value.len();
                        chunk.keys.push(key.to_vec());
                        chunk.values.push(value.to_vec());
                    }
                    Err(e) => {
                        let _ = chunks.blocking_send(Err(status(e.into())));
                        return;
                    }
                }
                if chunk.keys.len() >= CHUNK_ENTRIES || bytes >= CHUNK_BYTES {
                    if chunks
                        .blocking_send(Ok(std::mem::take(&mut chunk)))
                        .is_err()
                    {
                        return; // The master stopped reading.
                    }
                    bytes = 0;
                }
            }
            chunk.last = true;
            let _ = chunks.blocking_send(Ok(chunk));
        });
        let stream = futures::stream::unfold(received, |mut received| async move {
            received.recv().await.map(|chunk| (chunk, received))
        });
        std::future::ready(Ok(Response::new(stream.boxed())))
    }
}

impl UnaryService<ApplyRequest> for TabletDataService {
    type Response = Applied;
    type Future = BoxFuture<'static, Result<Response<Applied>, Status>>;

    fn call(&mut self, request: Request<ApplyRequest>) -> Self::Future {
        let apply = request.into_inner();
        let db = self.db.clone();
        Box::pin(async move {
            let writes = apply
                .trees
                .into_iter()
                .map(|tree| {
                    let writes = tree
                        .writes
                        .into_iter()
                        .map(|w| match w.value {
                            Some(value) => Write::Put(Bytes::from(w.key), Bytes::from(value)),
                            None => Write::Delete(Bytes::from(w.key)),
                        })
                        .collect();
                    (tree.tree, writes)
                })
                .collect();
            tokio::task::spawn_blocking(move || apply_held(&db, writes, apply.durable))
                .await
                .map_err(|e| Status::internal(format!("the write stopped: {e}")))?
                .map_err(status)?;
            Ok(Response::new(Applied {}))
        })
    }
}

impl UnaryService<DropRequest> for TabletDataService {
    type Response = Dropped;
    type Future = BoxFuture<'static, Result<Response<Dropped>, Status>>;

    fn call(&mut self, request: Request<DropRequest>) -> Self::Future {
        let tree = request.into_inner().tree;
        let db = self.db.clone();
        Box::pin(async move {
            let held = tokio::task::spawn_blocking(move || drop_held(&db, &tree))
                .await
                .map_err(|e| Status::internal(format!("the drop stopped: {e}")))?
                .map_err(status)?;
            Ok(Response::new(Dropped { held }))
        })
    }
}
