//! The tablet data a worker holds, reached by the master:
//! `widesql.cluster.TabletData`, which a worker serves behind the cluster
//! secret, and [`RemoteStore`], the master's side, a storage
//! [`Backend`] whose trees are the worker's. `Scan` streams the entries of
//! a key range in chunks; `Apply` writes a batch atomically (durably when
//! asked). The worker keeps the keys as the master would, under the same
//! table tree names ([`widesql::internals::held_entries`]).

use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::ops::Bound;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::StreamExt;
use tonic::body::Body;
use tonic::server::{NamedService, ServerStreamingService, UnaryService};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use tower_service::Service;
use widesql::internals::{
    apply_held, held_entries, Backend, BackendError, BackendIter, BackendTree, Bytes, TreeWrites,
    WorkerStores, Write,
};
use widesql::Db;

use super::ClusterSecret;

const SCAN: &str = "/widesql.cluster.TabletData/Scan";
const APPLY: &str = "/widesql.cluster.TabletData/Apply";

/// How long a call to a worker may wait for its answer, or a scan for its
/// next chunk, before it fails: a worker that hangs must not hold the
/// row locks of the writes waiting for it.
const CALL_WAIT: Duration = Duration::from_secs(30);

/// Entries a chunk of a scan holds at most.
const CHUNK_ENTRIES: usize = 1024;
/// Bytes of keys and values a chunk holds at most (one entry may pass it).
const CHUNK_BYTES: usize = 1 << 20;

/// One end of a scanned range; absent: unbounded.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyBound {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bool, tag = "2")]
    excluded: bool,
}

/// The entries of a tree in a range.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ScanRequest {
    #[prost(bytes = "vec", tag = "1")]
    tree: Vec<u8>,
    #[prost(message, optional, tag = "2")]
    lo: Option<KeyBound>,
    #[prost(message, optional, tag = "3")]
    hi: Option<KeyBound>,
    #[prost(bool, tag = "4")]
    reverse: bool,
}

/// A chunk of a scan's entries, in order. The last one says so: a scan
/// whose stream ends without it stopped early (its worker's thread died)
/// and is an error, never a shorter range.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Entries {
    #[prost(bytes = "vec", repeated, tag = "1")]
    keys: Vec<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    values: Vec<Vec<u8>>,
    #[prost(bool, tag = "3")]
    last: bool,
}

/// One write; no value: a delete.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WriteMessage {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", optional, tag = "2")]
    value: Option<Vec<u8>>,
}

/// The writes of one tree.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TreeWritesMessage {
    #[prost(bytes = "vec", tag = "1")]
    tree: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    writes: Vec<WriteMessage>,
}

/// A batch, applied atomically.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ApplyRequest {
    #[prost(message, repeated, tag = "1")]
    trees: Vec<TreeWritesMessage>,
    #[prost(bool, tag = "2")]
    durable: bool,
}

/// A batch was applied.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Applied {}

fn to_bound(bound: Option<KeyBound>) -> Bound<Vec<u8>> {
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

fn from_bound(bound: Bound<Vec<u8>>) -> Option<KeyBound> {
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
                    let mut grpc = tonic::server::Grpc::new(ProstCodec::default())
                        .max_decoding_message_size(usize::MAX);
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

/// The runtime the master's calls to its workers run on: storage calls
/// are synchronous, and a caller may be a thread of another runtime,
/// which must not run them itself.
fn io() -> &'static tokio::runtime::Runtime {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("widesql-cluster-io")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("the cluster's I/O threads did not start: {e}"))
    })
}

/// Runs `call` on the cluster's runtime and waits for it here.
fn wait<T: Send + 'static>(
    call: impl Future<Output = Result<T, BackendError>> + Send + 'static,
) -> Result<T, BackendError> {
    futures::executor::block_on(io().spawn(call))
        .map_err(|e| BackendError::from(format!("a call to a worker stopped: {e}")))?
}

/// A worker's tablet data, as the master's storage reaches it.
#[derive(Clone, Debug)]
pub struct RemoteStore {
    client: Arc<Client>,
}

#[derive(Debug)]
struct Client {
    /// `worker http://host:port`, for messages.
    name: String,
    channel: Channel,
    secret: ClusterSecret,
}

impl Client {
    fn failed(&self, status: &Status) -> BackendError {
        format!("{}: {}", self.name, status.message()).into()
    }

    fn grpc(&self) -> tonic::client::Grpc<Channel> {
        tonic::client::Grpc::new(self.channel.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        self.secret.add_to_request(&mut request);
        request
    }
}

/// Where a worker is called: a connection fails after 2 s, and pings
/// find a worker whose host went away mid-call.
pub(super) fn worker_endpoint(worker: &str) -> Result<Endpoint, String> {
    Ok(Endpoint::from_shared(worker.to_string())
        .map_err(|e| format!("'{worker}' is not a worker address: {e}"))?
        .connect_timeout(Duration::from_secs(2))
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .tcp_nodelay(true))
}

impl RemoteStore {
    /// The store of the worker at `worker` (`http://host:port`); nothing
    /// is called until it is used.
    pub fn new(worker: &str, secret: ClusterSecret) -> Result<RemoteStore, BackendError> {
        let endpoint = worker_endpoint(worker)?.timeout(CALL_WAIT);
        // The channel's background task runs on the cluster's runtime.
        let _inside = io().enter();
        Ok(RemoteStore {
            client: Arc::new(Client {
                name: format!("worker {worker}"),
                channel: endpoint.connect_lazy(),
                secret,
            }),
        })
    }
}

impl Backend for RemoteStore {
    fn open_tree(&self, name: &[u8]) -> Result<Arc<dyn BackendTree>, BackendError> {
        Ok(Arc::new(RemoteTree {
            client: Arc::clone(&self.client),
            name: name.to_vec(),
        }))
    }

    fn drop_tree(&self, _name: &[u8]) -> Result<bool, BackendError> {
        Err(format!(
            "{}: trees are not dropped from the master",
            self.client.name
        )
        .into())
    }

    fn tree_names(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }

    fn meta_get(&self, _key: &[u8]) -> Result<Option<Bytes>, BackendError> {
        Ok(None)
    }

    fn meta_put_durable(&self, _key: &[u8], _value: &[u8]) -> Result<(), BackendError> {
        Err(format!("{}: holds no meta keys for the master", self.client.name).into())
    }

    fn is_empty(&self) -> bool {
        false
    }

    fn apply(&self, batch: &[TreeWrites]) -> Result<(), BackendError> {
        self.apply_and_flush(batch, false)
    }

    fn flush(&self) -> Result<(), BackendError> {
        self.apply_and_flush(&[], true)
    }

    fn apply_and_flush(&self, batch: &[TreeWrites], durable: bool) -> Result<(), BackendError> {
        let trees = batch
            .iter()
            .map(|(tree, writes)| TreeWritesMessage {
                tree: tree.name().to_vec(),
                writes: writes
                    .iter()
                    .map(|write| match write {
                        Write::Put(key, value) => WriteMessage {
                            key: key.to_vec(),
                            value: Some(value.to_vec()),
                        },
                        Write::Delete(key) => WriteMessage {
                            key: key.to_vec(),
                            value: None,
                        },
                    })
                    .collect(),
            })
            .collect();
        let client = Arc::clone(&self.client);
        wait(async move {
            let mut grpc = client.grpc();
            grpc.ready()
                .await
                .map_err(|e| client.failed(&Status::unavailable(e.to_string())))?;
            let request = client.request(ApplyRequest { trees, durable });
            let path = http::uri::PathAndQuery::from_static(APPLY);
            grpc.unary::<_, Applied, _>(request, path, ProstCodec::default())
                .await
                .map_err(|status| client.failed(&status))?;
            Ok(())
        })
    }

    fn size_on_disk(&self) -> Result<u64, BackendError> {
        Ok(0)
    }
}

/// How a master reaches its workers' stores: a [`RemoteStore`] each.
#[derive(Debug)]
pub(crate) struct MasterStores {
    pub(crate) secret: ClusterSecret,
}

impl WorkerStores for MasterStores {
    fn store(&self, worker: &str) -> Result<Arc<dyn Backend>, BackendError> {
        Ok(Arc::new(RemoteStore::new(worker, self.secret.clone())?))
    }
}

/// A tree of a worker's tablet data.
#[derive(Debug)]
struct RemoteTree {
    client: Arc<Client>,
    name: Vec<u8>,
}

impl BackendTree for RemoteTree {
    fn name(&self) -> &[u8] {
        &self.name
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, BackendError> {
        let bound = Bound::Included(key.to_vec());
        match self.range(bound.clone(), bound, false).next() {
            Some(entry) => entry.map(|(_, value)| Some(value)),
            None => Ok(None),
        }
    }

    fn range(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, reverse: bool) -> BackendIter {
        let client = Arc::clone(&self.client);
        let scan = ScanRequest {
            tree: self.name.clone(),
            lo: from_bound(lo),
            hi: from_bound(hi),
            reverse,
        };
        // Chunks come through a channel of two: the worker runs ahead of
        // the reader by no more.
        let (mut chunks, received) =
            futures::channel::mpsc::channel::<Result<Entries, BackendError>>(1);
        io().spawn(async move {
            let mut grpc = client.grpc();
            let opened = match grpc.ready().await {
                Ok(()) => {
                    let path = http::uri::PathAndQuery::from_static(SCAN);
                    grpc.server_streaming::<_, Entries, _>(
                        client.request(scan),
                        path,
                        ProstCodec::default(),
                    )
                    .await
                }
                Err(e) => Err(Status::unavailable(e.to_string())),
            };
            let mut stream = match opened {
                Ok(response) => response.into_inner(),
                Err(status) => {
                    let _ = futures::SinkExt::send(&mut chunks, Err(client.failed(&status))).await;
                    return;
                }
            };
            loop {
                let chunk = match tokio::time::timeout(CALL_WAIT, stream.next()).await {
                    Ok(Some(chunk)) => chunk.map_err(|status| client.failed(&status)),
                    Ok(None) => Err(client.failed(&Status::data_loss("the scan ended early"))),
                    Err(_) => Err(client.failed(&Status::deadline_exceeded(format!(
                        "no entries for {} s",
                        CALL_WAIT.as_secs()
                    )))),
                };
                let end = chunk.as_ref().map_or(true, |c| c.last);
                if futures::SinkExt::send(&mut chunks, chunk).await.is_err() || end {
                    return;
                }
            }
        });
        let mut received = received;
        let chunks = std::iter::from_fn(move || futures::executor::block_on(received.next()));
        Box::new(
            chunks.flat_map(|chunk| -> Box<dyn Iterator<Item = _> + Send> {
                match chunk {
                    Ok(Entries { keys, values, .. }) => Box::new(
                        keys.into_iter()
                            .zip(values)
                            .map(|(k, v)| Ok((Bytes::from(k), Bytes::from(v)))),
                    ),
                    Err(e) => Box::new(std::iter::once(Err(e))),
                }
            }),
        )
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
