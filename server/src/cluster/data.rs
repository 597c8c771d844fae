//! The tablet data a worker holds, reached by the master:
//! `widesql.cluster.TabletData`, which a worker serves behind the cluster
//! secret (the master's side is [`super::remote::RemoteStore`]). `Scan`
//! streams the entries of a key range in chunks; `Apply` writes a batch
//! atomically (durably when asked); `Drop` removes a dropped table's
//! tree; `Fence` settles the writes the master gave up waiting for (see
//! [`FenceRequest`]). The worker keeps the keys as the master would, under
//! the same table tree names ([`widesql::internals::held_entries`]).

use std::collections::{HashSet, VecDeque};
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
use widesql::internals::{apply_held, drop_held, held_entries, settle_held, Bytes, Write};
use widesql::Db;

pub(super) const SCAN: &str = "/widesql.cluster.TabletData/Scan";
pub(super) const APPLY: &str = "/widesql.cluster.TabletData/Apply";
pub(super) const DROP: &str = "/widesql.cluster.TabletData/Drop";
pub(super) const FENCE: &str = "/widesql.cluster.TabletData/Fence";

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
    /// The call's id, which a fence names once the master gave up on it.
    #[prost(bytes = "vec", tag = "3")]
    pub(super) call: Vec<u8>,
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

/// Settles the `Apply` calls the master gave up waiting for: the worker
/// refuses those of them that arrive later, waits for the calls being
/// applied, and then for any write a stall left queued in its store.
/// When it answers, each call named has landed or never will: a tablet
/// that moves away meanwhile does not miss it (see the master's
/// `Catalog::move_tablet`).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FenceRequest {
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub(super) given_up: Vec<Vec<u8>>,
}

/// The calls named are settled.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Fenced {}

/// The id of an `Apply` call as its message carries it (16 bytes; none
/// from a master that names its calls no id).
pub(super) fn call_id(bytes: &[u8]) -> Option<u128> {
    Some(u128::from_be_bytes(bytes.try_into().ok()?))
}

/// The ids of calls a fence named, kept to refuse them should they
/// arrive: [`GIVEN_UP_KEPT`] at most, the oldest forgotten first.
#[derive(Debug, Default)]
struct GivenUp {
    ids: HashSet<u128>,
    order: VecDeque<u128>,
}

/// Ids of given-up calls a worker keeps, and a master names at most: a
/// few megabytes. A call older than the oldest is taken to have arrived
/// by then, or never to arrive.
pub(super) const GIVEN_UP_KEPT: usize = 65_536;

impl GivenUp {
    fn add(&mut self, ids: impl IntoIterator<Item = u128>) {
        for id in ids {
            if !self.ids.insert(id) {
                continue;
            }
            self.order.push_back(id);
            if self.order.len() > GIVEN_UP_KEPT {
                if let Some(oldest) = self.order.pop_front() {
                    self.ids.remove(&oldest);
                }
            }
        }
    }

    fn refuses(&self, call: &[u8]) -> bool {
        call_id(call).is_some_and(|id| self.ids.contains(&id))
    }
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
    /// Held shared by each `Apply` call from its check to its answer, and
    /// exclusively by a fence as it adds ids.
    given_up: Arc<tokio::sync::RwLock<GivenUp>>,
    /// Where a test holds `Apply` calls as they apply.
    #[cfg(test)]
    applying: Option<Arc<tests::Gate>>,
}

impl TabletDataService {
    pub(crate) fn new(db: Db) -> Self {
        TabletDataService {
            db,
            scans: Arc::new(tokio::sync::Semaphore::new(SCANS_AT_ONCE)),
            given_up: Arc::default(),
            #[cfg(test)]
            applying: None,
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
                FENCE => {
                    let mut grpc =
                        tonic::server::Grpc::new(ProstCodec::<Fenced, FenceRequest>::default());
                    grpc.unary(this, request).await
                }
                other => Status::unimplemented(format!("no tablet data call {other}")).into_http(),
            })
        })
    }
}

/// Runs `work` on a blocking thread (the store's calls block); `what`
/// names it if that thread fails.
async fn blocking<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> widesql::Result<T> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Status::internal(format!("{what} stopped: {e}")))?
        .map_err(status)
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
        let given_up = Arc::clone(&self.given_up);
        #[cfg(test)]
        let gate = self.applying.clone();
        Box::pin(async move {
            // Held until the write returns, also when the master stops
            // waiting, so that a fence waits for it.
            let applying = given_up.read_owned().await;
            if applying.refuses(&apply.call) {
                return Err(Status::aborted(
                    "the master gave up waiting for this write before it arrived: \
                     it was not applied",
                ));
            }
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
            blocking("the write", move || {
                let _applying = applying;
                #[cfg(test)]
                if let Some(gate) = gate {
                    gate.pass();
                }
                apply_held(&db, writes, apply.durable)
            })
            .await?;
            Ok(Response::new(Applied {}))
        })
    }
}

impl UnaryService<FenceRequest> for TabletDataService {
    type Response = Fenced;
    type Future = BoxFuture<'static, Result<Response<Fenced>, Status>>;

    fn call(&mut self, request: Request<FenceRequest>) -> Self::Future {
        let given_up = request.into_inner().given_up;
        let db = self.db.clone();
        let lock = Arc::clone(&self.given_up);
        Box::pin(async move {
            // Taken once the calls being applied have answered; a call
            // that arrives later finds the ids.
            lock.write_owned()
                .await
                .add(given_up.iter().filter_map(|id| call_id(id)));
            // A write that answered as stalled may still be queued in the
            // store: this answers once it landed or was refused.
            blocking("the fence", move || settle_held(&db)).await?;
            Ok(Response::new(Fenced {}))
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
            let held = blocking("the drop", move || drop_held(&db, &tree)).await?;
            Ok(Response::new(Dropped { held }))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Mutex};

    use super::*;
    use widesql::internals::table_tree_name;
    use widesql::TableId;

    /// Where a test holds an `Apply` call as it applies: the call says it
    /// got there, then waits (10 s at most) to be let go on.
    pub(super) struct Gate {
        reached: Mutex<mpsc::Sender<()>>,
        go: Mutex<mpsc::Receiver<()>>,
    }

    impl Gate {
        /// The gate, where the test hears of the call, and how it lets it go.
        fn new() -> (Arc<Gate>, mpsc::Receiver<()>, mpsc::Sender<()>) {
            let (reached, heard) = mpsc::channel();
            let (go, waited) = mpsc::channel();
            let gate = Gate {
                reached: Mutex::new(reached),
                go: Mutex::new(waited),
            };
            (Arc::new(gate), heard, go)
        }

        pub(super) fn pass(&self) {
            let _ = self.reached.lock().map(|reached| reached.send(()));
            let _ = self
                .go
                .lock()
                .map(|go| go.recv_timeout(Duration::from_secs(10)));
        }
    }

    /// An `Apply` call of one put of `key` to a table's tree, as call `id`.
    fn put(key: &[u8], id: &[u8]) -> Request<ApplyRequest> {
        Request::new(ApplyRequest {
            trees: vec![TreeWritesMessage {
                tree: table_tree_name(TableId::from_bytes([7; 16])),
                writes: vec![WriteMessage {
                    key: key.to_vec(),
                    value: Some(b"v".to_vec()),
                }],
            }],
            durable: false,
            call: id.to_vec(),
        })
    }

    fn held_keys(db: &Db) -> Vec<Vec<u8>> {
        let tree = table_tree_name(TableId::from_bytes([7; 16]));
        let entries = held_entries(db, &tree, Bound::Unbounded, Bound::Unbounded, false);
        entries
            .map(|entries| {
                entries
                    .map(|e| e.map(|(k, _)| k.to_vec()))
                    .collect::<Result<Vec<_>, _>>()
            })
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_fence_waits_for_the_writes_being_applied_and_refuses_the_given_up_ones_that_come_later(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let runtime = tokio::runtime::Runtime::new()?;
        let dir = tempfile::tempdir()?;
        let db = Db::open(dir.path())?;
        let (gate, reached, go) = Gate::new();
        let mut service = TabletDataService::new(db.clone());
        let (late, live) = (7u128.to_be_bytes(), 8u128.to_be_bytes());
        runtime.block_on(async {
            // A call being applied holds the fence off until it answers.
            let mut held = service.clone();
            held.applying = Some(gate);
            let applying = tokio::spawn(UnaryService::call(&mut held, put(b"k0", &live)));
            tokio::task::spawn_blocking(move || reached.recv_timeout(Duration::from_secs(10)))
                .await?
                .map_err(|_| "the call did not reach its apply")?;
            let fence = FenceRequest {
                given_up: vec![late.to_vec(), b"not an id".to_vec()],
            };
            let fencing = tokio::spawn(UnaryService::call(
                &mut service.clone(),
                Request::new(fence),
            ));
            tokio::time::sleep(Duration::from_millis(100)).await;
            let waited = !fencing.is_finished();
            go.send(())?;
            applying.await??;
            fencing.await??;
            assert!(waited, "the fence did not wait for a write");
            // A call named arrives late: refused, and not applied.
            let refused = UnaryService::call(&mut service, put(b"k1", &late)).await;
            let refused = refused.expect_err("a given-up call was applied");
            assert_eq!(refused.code(), tonic::Code::Aborted);
            assert!(refused.message().contains("not applied"), "{refused:?}");
            // Other calls, and calls without an id, are applied.
            UnaryService::call(&mut service, put(b"k2", &live)).await?;
            UnaryService::call(&mut service, put(b"k3", b"")).await?;
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
        let keys = held_keys(&db);
        assert!(keys.iter().all(|k| !k.ends_with(b"k1")), "{keys:?}");
        assert_eq!(keys.len(), 3, "{keys:?}");
        Ok(())
    }

    #[test]
    fn a_worker_keeps_the_newest_given_up_ids() {
        let mut given_up = GivenUp::default();
        given_up.add(0..=GIVEN_UP_KEPT as u128);
        given_up.add([5]);
        assert_eq!(given_up.ids.len(), GIVEN_UP_KEPT);
        assert_eq!(given_up.order.len(), GIVEN_UP_KEPT);
        assert!(!given_up.refuses(&0u128.to_be_bytes()));
        assert!(given_up.refuses(&5u128.to_be_bytes()));
        assert!(given_up.refuses(&(GIVEN_UP_KEPT as u128).to_be_bytes()));
        assert!(!given_up.refuses(b""));
    }
}
