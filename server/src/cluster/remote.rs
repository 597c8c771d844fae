//! The master's side of a worker's tablet data: [`RemoteStore`], a
//! storage [`Backend`] whose trees are the worker's, called through the
//! worker's `widesql.cluster.TabletData` service ([`super::data`]).

use std::any::Any;
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use widesql::internals::{
    Backend, BackendError, BackendIter, BackendTree, Bytes, TreeWrites, WorkerStores, Write,
};

use super::data::{
    from_bound, Applied, ApplyRequest, DropRequest, Dropped, Entries, FenceRequest, Fenced,
    ScanRequest, TreeWritesMessage, WriteMessage, APPLY, CALL_WAIT, DROP, FENCE, GIVEN_UP_KEPT,
    SCAN,
};
use super::{ClusterSecret, Peers};

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
    /// `worker http://host:port` (or `https://`), for messages.
    name: String,
    channel: Channel,
    secret: ClusterSecret,
    /// The ids of `Apply` calls that failed after they left: whether the
    /// worker applied them, or still will, is unknown until a fence
    /// settles them. The
    /// newest [`GIVEN_UP_KEPT`], as many as the worker keeps.
    given_up: Mutex<VecDeque<u128>>,
}

impl Client {
    fn given_up(&self) -> std::sync::MutexGuard<'_, VecDeque<u128>> {
        self.given_up.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that the call `id` failed: it may still land.
    fn gave_up(&self, id: u128) {
        let mut given_up = self.given_up();
        if given_up.len() == GIVEN_UP_KEPT {
            given_up.pop_front();
        }
        given_up.push_back(id);
    }

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

    /// Calls `path` with `message` and waits for the answer.
    fn unary<M, R>(self: &Arc<Self>, path: &'static str, message: M) -> Result<R, BackendError>
    where
        M: prost::Message + Send + 'static,
        R: prost::Message + Default + Send + 'static,
    {
        self.unary_sent(path, message).map_err(|(error, _)| error)
    }

    /// [`Client::unary`], whose error also says whether the message may
    /// have left (it did not when the channel was not ready for it).
    fn unary_sent<M, R>(
        self: &Arc<Self>,
        path: &'static str,
        message: M,
    ) -> Result<R, (BackendError, bool)>
    where
        M: prost::Message + Send + 'static,
        R: prost::Message + Default + Send + 'static,
    {
        let client = Arc::clone(self);
        let sent = Arc::new(AtomicBool::new(false));
        let sending = Arc::clone(&sent);
        wait(async move {
            let mut grpc = client.grpc();
            grpc.ready()
                .await
                .map_err(|e| client.failed(&Status::unavailable(e.to_string())))?;
            sending.store(true, Ordering::SeqCst);
            let request = client.request(message);
            let path = http::uri::PathAndQuery::from_static(path);
            grpc.unary::<_, R, _>(request, path, ProstCodec::default())
                .await
                .map(Response::into_inner)
                .map_err(|status| client.failed(&status))
        })
        .map_err(|error| (error, sent.load(Ordering::SeqCst)))
    }
}

/// Where a worker is called (`peers` say how): a connection fails after
/// 2 s, and pings find a worker whose host went away mid-call.
pub(super) fn worker_endpoint(worker: &str, peers: &Peers) -> Result<Endpoint, String> {
    Ok(peers
        .endpoint(worker)
        .map_err(|e| format!("worker {e}"))?
        .connect_timeout(Duration::from_secs(2))
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .tcp_nodelay(true))
}

impl RemoteStore {
    /// The store of the worker at `worker` (`http://host:port`) of a
    /// cluster that does not encrypt its calls; nothing is called until it
    /// is used.
    pub fn new(worker: &str, secret: ClusterSecret) -> Result<RemoteStore, BackendError> {
        RemoteStore::of(worker, &Peers::plain(secret))
    }

    /// The store of the worker at `worker`, called as `peers` call.
    pub(crate) fn of(worker: &str, peers: &Peers) -> Result<RemoteStore, BackendError> {
        let endpoint = worker_endpoint(worker, peers)?.timeout(CALL_WAIT);
        // The channel's background task runs on the cluster's runtime.
        let _inside = io().enter();
        Ok(RemoteStore {
            client: Arc::new(Client {
                name: format!("worker {worker}"),
                channel: endpoint.connect_lazy(),
                secret: peers.secret.clone(),
                given_up: Mutex::default(),
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

    fn drop_tree(&self, name: &[u8]) -> Result<bool, BackendError> {
        let request = DropRequest {
            tree: name.to_vec(),
        };
        let dropped: Dropped = self.client.unary(DROP, request)?;
        Ok(dropped.held)
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
        let trees: Vec<TreeWritesMessage> = batch
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
        if batch.is_empty() {
            // A flush: nothing to give up on.
            let flush = ApplyRequest {
                durable,
                ..ApplyRequest::default()
            };
            let _: Applied = self.client.unary(APPLY, flush)?;
            return Ok(());
        }
        let call = uuid::Uuid::now_v7().as_u128();
        let request = ApplyRequest {
            trees,
            durable,
            call: call.to_be_bytes().to_vec(),
        };
        let applied = match held_back(&self.client, request) {
            Some(request) => self.client.unary_sent::<_, Applied>(APPLY, request),
            None => Err((
                "the call's answer was lost (held back by a test)".into(),
                true,
            )),
        };
        match applied {
            Ok(Applied {}) => Ok(()),
            Err((error, sent)) => {
                // A call that left may land yet: the next fence names it.
                if sent {
                    self.client.gave_up(call);
                }
                Err(error)
            }
        }
    }

    fn settle(&self) -> Result<(), BackendError> {
        let given_up: HashSet<u128> = self.client.given_up().iter().copied().collect();
        let fence = FenceRequest {
            given_up: given_up
                .iter()
                .map(|id| id.to_be_bytes().to_vec())
                .collect(),
        };
        let _: Fenced = self.client.unary(FENCE, fence)?;
        // Calls given up on meanwhile wait for the next fence.
        self.client.given_up().retain(|id| !given_up.contains(id));
        Ok(())
    }

    fn size_on_disk(&self) -> Result<u64, BackendError> {
        Ok(0)
    }
}

/// How a master reaches its workers' stores: a [`RemoteStore`] each.
#[derive(Debug)]
pub(crate) struct MasterStores {
    pub(crate) peers: Peers,
}

impl WorkerStores for MasterStores {
    fn store(&self, worker: &str) -> Result<Arc<dyn Backend>, BackendError> {
        Ok(Arc::new(RemoteStore::of(worker, &self.peers)?))
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

/// The `Apply` calls a test holds back from one worker, as a network
/// that delays them would.
struct HeldBack {
    worker: String,
    holding: bool,
    calls: VecDeque<(Arc<Client>, ApplyRequest)>,
}

/// Whether a test holds back any worker's calls: the only cost of the
/// hook to a call that no test holds back.
static HOLDING_BACK: AtomicBool = AtomicBool::new(false);
static HELD_BACK: Mutex<Vec<HeldBack>> = Mutex::new(Vec::new());

fn held_back_calls() -> std::sync::MutexGuard<'static, Vec<HeldBack>> {
    HELD_BACK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `request` as the test hook leaves it: `None` when a test holds back
/// the calls to this client's worker ([`hold_back_applies_to`]).
fn held_back(client: &Arc<Client>, request: ApplyRequest) -> Option<ApplyRequest> {
    if !HOLDING_BACK.load(Ordering::SeqCst) {
        return Some(request);
    }
    let mut held = held_back_calls();
    match held
        .iter_mut()
        .find(|h| h.holding && client.name == format!("worker {}", h.worker))
    {
        Some(h) => {
            h.calls.push_back((Arc::clone(client), request));
            None
        }
        None => Some(request),
    }
}

/// For tests: while `holding`, the master's `Apply` calls to `worker` fail
/// as if their answers were lost, and are sent only by
/// [`send_held_back_apply`], as a call a network delays arrives late.
pub fn hold_back_applies_to(worker: &str, holding: bool) {
    let mut held = held_back_calls();
    match held.iter_mut().find(|h| h.worker == worker) {
        Some(h) => h.holding = holding,
        None => held.push(HeldBack {
            worker: worker.to_string(),
            holding,
            calls: VecDeque::new(),
        }),
    }
    HOLDING_BACK.store(held.iter().any(|h| h.holding), Ordering::SeqCst);
}

/// For tests: sends the oldest call to `worker` held back by
/// [`hold_back_applies_to`] and returns what the worker answered; `None`
/// when none is held.
pub fn send_held_back_apply(worker: &str) -> Option<Result<(), BackendError>> {
    let (client, request) = held_back_calls()
        .iter_mut()
        .find(|h| h.worker == worker)?
        .calls
        .pop_front()?;
    Some(client.unary::<_, Applied>(APPLY, request).map(drop))
}
