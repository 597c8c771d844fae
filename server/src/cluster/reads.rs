//! Queries on a cluster, through datafusion-distributed. A master's
//! sessions plan with its distributed planner; the handlers here make a
//! scan whose keys reach only tablets that workers hold one task per
//! worker ([`widesql::internals::worker_tasks`]) and send each task to the
//! worker that holds its tablets. The filters, partial aggregates and
//! projections above the scan run in the same task; the master merges.
//! A worker decodes a task's scan over the tablets it holds
//! ([`widesql::internals::held_scan`]). Every call between the processes
//! carries the cluster secret.
//!
//! A scan that stays on the master (it reaches a tablet the master
//! serves, or the tablets of one worker only, or it has a `LIMIT`) reads
//! the workers' tablets through the storage routes, as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryLimit;
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::physical_plan::Distribution;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::grpc::{create_worker_client, BoxCloneSyncChannel};
use datafusion_distributed::{
    ChannelResolver, DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedExt,
    DistributedLeafExec, NetworkBoundaryExt, RouteTasksEvent, RouteTasksEventResponse,
    ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse, SessionStateBuilderExt, Worker,
    WorkerChannel, WorkerQueryContext, WorkerResolver,
};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use tonic::transport::Channel;
use tower::ServiceExt;
use url::Url;
use widesql::internals::{self, SessionHook};
use widesql::{Db, Workers};

use super::remote::worker_endpoint;
use super::task_settings::{self, apply_settings, session_runtime, SessionRuntimes};
use super::Peers;

/// Makes every session `db` opens plan its queries over the workers that
/// joined it (the master calls it once, when it starts, with the URL its
/// workers reach it at). The master is a worker too, for the stages of
/// one task (a scan that stays on the master, a merge): it runs them in
/// process, and serves their output to the workers from the worker this
/// returns (behind [`refuse_plans`]).
pub(crate) fn distribute_queries(db: &Db, peers: &Peers, reached_at: &str) -> Result<Worker> {
    let channels = SecretChannels::new(peers.clone());
    let runtimes = SessionRuntimes::default();
    let here = worker_of(None, channels.clone(), runtimes.clone());
    let hook = MasterSessions {
        workers: Arc::clone(db.workers()),
        channels,
        here: here.clone(),
        here_url: worker_url(reached_at)?,
        runtimes,
    };
    if !internals::extend_sessions(db, Arc::new(hook)) {
        return Err(DataFusionError::Execution(
            "the database already serves a cluster's master in this process".to_string(),
        ));
    }
    Ok(here)
}

/// The sessions of a master: they plan over its workers, and their tasks
/// carry their memory limit and settings ([`task_settings`]).
struct MasterSessions {
    workers: Arc<Workers>,
    channels: SecretChannels,
    /// The master's own worker, and the URL the workers reach it at.
    here: Worker,
    here_url: Url,
    /// The runtimes its worker runs the sessions' stages in: each
    /// session's own ([`task_settings::share_runtime`]).
    runtimes: SessionRuntimes,
}

impl SessionHook for MasterSessions {
    fn build(&self, builder: SessionStateBuilder) -> SessionStateBuilder {
        let workers = &self.workers;
        let local = self.here.to_local_worker_context(self.here_url.clone());
        let mut builder = builder
            .with_distributed_local_worker_context(local)
            .with_distributed_worker_resolver(UpWorkers(Arc::clone(workers)))
            .with_distributed_channel_resolver(self.channels.clone())
            .with_distributed_user_codec(ScanCodec { held: None })
            .with_distributed_desired_task_count_handler(desired_tasks(Arc::clone(workers)))
            .with_distributed_scale_up_leaf_node_handler(scale_up)
            .with_distributed_route_tasks_handler(route_tasks(Arc::clone(workers)))
            .with_distributed_planner();
        let limit = builder
            .runtime_env()
            .as_ref()
            .map_or(MemoryLimit::Infinite, |runtime| {
                runtime.memory_pool.memory_limit()
            });
        // A union's children would share a stage's task numbers, which
        // route each task to its tablets' worker; a task sent to another
        // worker fails there (see `held_scan`), never reads the wrong
        // tablets.
        let config = builder.config().get_or_insert_default();
        if let Err(e) = config.set_distributed_children_isolator_unions(false) {
            tracing::warn!(error = %e, "unions of scans on workers will fail");
        }
        if let Err(e) = task_settings::carry_session(config, limit) {
            tracing::warn!(error = %e, "tasks on workers will run without the session's limit and settings");
        }
        let runtime = builder.runtime_env().clone();
        if let (Some(config), Some(runtime)) = (builder.config().as_ref(), runtime) {
            task_settings::share_runtime(&self.runtimes, config, &runtime);
        }
        builder
    }

    fn settings_changed(&self, state: &mut SessionState) -> Result<()> {
        let limit = state.runtime_env().memory_pool.memory_limit();
        task_settings::carry_session(state.config_mut(), limit)?;
        let runtime = Arc::clone(state.runtime_env());
        task_settings::share_runtime(&self.runtimes, state.config(), &runtime);
        Ok(())
    }
}

/// The call that sends a worker a plan to run.
const COORDINATOR_CHANNEL: &str = "/worker.WorkerService/CoordinatorChannel";

/// Refuses the calls that send the master's worker a plan: it runs only
/// the tasks it plans itself, and workers only read their output.
pub(crate) fn refuse_plans(
    request: &http::Request<tonic::body::Body>,
) -> Result<(), tonic::Status> {
    match request.uri().path() == COORDINATOR_CHANNEL {
        true => Err(tonic::Status::permission_denied(
            "a master runs only the tasks it plans itself; workers read their output",
        )),
        false => Ok(()),
    }
}

/// datafusion-distributed's worker service of the worker named `name`,
/// running the tasks it is sent over the tablets `db` holds.
pub(crate) fn worker_service(db: Db, peers: Peers, name: String) -> Worker {
    worker_of(
        Some((db, name)),
        SecretChannels::new(peers),
        SessionRuntimes::default(),
    )
}

/// A worker whose tasks' scans read the tablets `held` holds (none on the
/// master, whose tasks arrive as plans, not encoded). The tasks of a
/// session run in one memory pool of the session's limit on each worker,
/// so that its queries cannot take more memory in a worker's process than
/// they may in the master's.
fn worker_of(
    held: Option<(Db, String)>,
    channels: SecretChannels,
    runtimes: SessionRuntimes,
) -> Worker {
    Worker::from_session_builder(move |context: WorkerQueryContext| {
        let (held, channels, runtimes) = (held.clone(), channels.clone(), runtimes.clone());
        async move {
            let mut builder = context.builder;
            let base = builder.runtime_env().clone();
            if let Some(runtime) = session_runtime(&runtimes, &context.headers, base.as_deref())? {
                builder = builder.with_runtime_env(runtime);
            }
            apply_settings(&context.headers, builder.config().get_or_insert_default())?;
            Ok(internals::with_functions(builder)
                .with_distributed_user_codec(ScanCodec { held })
                .with_distributed_channel_resolver(channels)
                .build())
        }
    })
}

/// Ships a scan to a worker and, on the worker, reads it from the tablets
/// it holds.
#[derive(Debug)]
struct ScanCodec {
    /// The worker's database and name; `None` on the master, which only
    /// sends.
    held: Option<(Db, String)>,
}

impl PhysicalExtensionCodec for ScanCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _context: &TaskContext,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some((db, name)) = &self.held else {
            return internal_err!("a scan of held tablets is run by a worker, not a master");
        };
        if !inputs.is_empty() {
            return internal_err!("a scan has no inputs, got {}", inputs.len());
        }
        internals::held_scan(db, buf, name)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        match internals::ship_scan(&node) {
            Some(shipped) => {
                buf.extend(shipped?);
                Ok(())
            }
            None => internal_err!("{} cannot be sent to a worker", node.name()),
        }
    }
}

/// A scan of the tablets of several workers wants a task on each; one
/// that needs a worker that is down fails here, before any task starts.
fn desired_tasks(
    workers: Arc<Workers>,
) -> impl Fn(DesiredTaskCountEvent<'_>) -> Option<Result<DesiredTaskCountEventResponse>> {
    move |event: DesiredTaskCountEvent<'_>| {
        // An operator that needs every row in one partition (a window over
        // the whole input, a final aggregate, a global sort or limit) runs
        // as one task.
        let needs = event
            .plan
            .input_distribution_requirements()
            .into_per_child();
        if !needs.is_empty()
            && needs
                .iter()
                .all(|d| matches!(d, Distribution::SinglePartition))
        {
            return Some(Ok(DesiredTaskCountEventResponse::maximum(1)));
        }
        // A stage's task runs on one worker: scans of tablets on different
        // workers under a union (whose inputs share its stage) cannot share
        // tasks, so the union runs as one task, which reads them all.
        let union = matches!(event.plan.name(), "UnionExec" | "InterleaveExec");
        if union && mixed_placements(event.plan) {
            return Some(Ok(DesiredTaskCountEventResponse::maximum(1)));
        }
        let tasks = internals::worker_tasks(event.plan, 0)?;
        let up = workers.up();
        for task in &tasks {
            if let Some(worker) = task.worker.as_ref().filter(|w| !up.contains(w)) {
                return Some(Err(DataFusionError::Execution(format!(
                    "tablet {} of {} is on worker {worker}, which is down",
                    task.tablets.join(", "),
                    task.table
                ))));
            }
        }
        Some(Ok(match tasks.len() {
            n if n >= 2 => DesiredTaskCountEventResponse::desired(n),
            _ => DesiredTaskCountEventResponse::maximum(1),
        }))
    }
}

/// Whether the scans under `plan` that workers would run read tablets on
/// different sets of workers.
fn mixed_placements(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut placements: Vec<Vec<String>> = Vec::new();
    let _ = plan.apply(|node| {
        if let Some(tasks) = internals::worker_tasks(node, 0) {
            let workers = tasks.into_iter().filter_map(|task| task.worker).collect();
            if !placements.contains(&workers) {
                placements.push(workers);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    placements.len() > 1
}

/// Splits a scan into its workers' tasks.
fn scale_up(event: ScaleUpLeafNodeEvent<'_>) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    if event.task_count < 2 {
        return None;
    }
    let tasks = internals::worker_tasks(event.plan, event.task_count)?;
    if tasks.len() > event.task_count {
        let table = tasks.first().map_or("", |t| t.table.as_str());
        return Some(Err(DataFusionError::Plan(format!(
            "the scan of {table} reads tablets on {} workers, but its stage has {} tasks",
            tasks.len(),
            event.task_count
        ))));
    }
    let variants = tasks.into_iter().map(|task| task.plan);
    Some(
        DistributedLeafExec::try_new(Arc::clone(event.plan), variants)
            .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))),
    )
}

/// Sends each task of a stage that scans workers' tablets to the worker
/// that holds them; tasks that read nothing go to the workers that are up,
/// in turn.
fn route_tasks(
    workers: Arc<Workers>,
) -> impl Fn(RouteTasksEvent<'_>) -> Option<Result<RouteTasksEventResponse>> {
    move |event: RouteTasksEvent<'_>| {
        let mut routes: Vec<Option<String>> = vec![None; event.task_count];
        let mut scans = 0;
        let mut conflict = None;
        let walked = event.plan.apply(|node| {
            if node.is_network_boundary() {
                // Another stage's plan.
                return Ok(TreeNodeRecursion::Jump);
            }
            let Some(leaf) = node.downcast_ref::<DistributedLeafExec>() else {
                return Ok(TreeNodeRecursion::Continue);
            };
            let Some(tasks) = internals::worker_tasks(leaf.original(), event.task_count) else {
                return Ok(TreeNodeRecursion::Continue);
            };
            scans += 1;
            for (route, task) in routes.iter_mut().zip(tasks) {
                match (route.as_ref(), task.worker) {
                    (Some(taken), Some(worker)) if *taken != worker => {
                        conflict = Some((taken.clone(), worker, task.table));
                    }
                    (None, Some(worker)) => *route = Some(worker),
                    _ => {}
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        if let Err(e) = walked {
            return Some(Err(e));
        }
        if scans == 0 {
            return None;
        }
        if let Some((one, other, table)) = conflict {
            return Some(Err(DataFusionError::Plan(format!(
                "one task would read tablets on both {one} and {other} (of {table}): scans of \
                 tablets on different workers cannot share a stage"
            ))));
        }
        let up = workers.up();
        let mut spare = up.iter().cycle();
        let urls = routes
            .into_iter()
            .map(|route| {
                let worker = match route {
                    Some(worker) => worker,
                    None => spare
                        .next()
                        .cloned()
                        .ok_or_else(|| DataFusionError::Execution("no worker is up".to_string()))?,
                };
                worker_url(&worker)
            })
            .collect::<Result<Vec<Url>>>();
        Some(urls.map(RouteTasksEventResponse::new))
    }
}

/// The URL of the worker named `worker`.
fn worker_url(worker: &str) -> Result<Url> {
    Url::parse(worker)
        .map_err(|e| DataFusionError::Execution(format!("worker {worker} is not a URL: {e}")))
}

/// The workers that are up, for the planner to count and route to.
struct UpWorkers(Arc<Workers>);

impl WorkerResolver for UpWorkers {
    fn get_urls(&self) -> Result<Vec<Url>> {
        self.0.up().iter().map(|w| worker_url(w)).collect()
    }
}

/// Channels to workers whose calls carry the cluster secret (over TLS in
/// a cluster that encrypts its calls), connected as the master's other
/// calls to workers are (a 2 s connect timeout, HTTP/2 pings); one per
/// worker, shared by every session (clones share them).
#[derive(Clone)]
struct SecretChannels {
    channels: Arc<Mutex<HashMap<Url, Channel>>>,
    peers: Peers,
}

impl SecretChannels {
    fn new(peers: Peers) -> Self {
        SecretChannels {
            channels: Arc::default(),
            peers,
        }
    }

    /// The channel to `url`, made on first use; it connects when called.
    fn channel(&self, url: &Url) -> Result<Channel> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(channel) = channels.get(url) {
            return Ok(channel.clone());
        }
        let endpoint =
            worker_endpoint(url.as_str(), &self.peers).map_err(DataFusionError::Execution)?;
        let channel = endpoint.connect_lazy();
        channels.insert(url.clone(), channel.clone());
        Ok(channel)
    }
}

#[async_trait]
impl ChannelResolver for SecretChannels {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let channel = self.channel(url)?;
        let secret = self.peers.secret.clone();
        let signed = channel.map_request(move |mut request: http::Request<tonic::body::Body>| {
            secret.add_to(request.headers_mut());
            request
        });
        Ok(create_worker_client(BoxCloneSyncChannel::new(signed)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Weak;

    use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};

    use super::*;

    fn shared(runtimes: &SessionRuntimes) -> Vec<Arc<RuntimeEnv>> {
        let runtimes = runtimes.lock().unwrap_or_else(PoisonError::into_inner);
        runtimes.values().filter_map(Weak::upgrade).collect()
    }

    #[test]
    fn a_masters_sessions_lend_their_runtime_to_its_own_stages(
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        let peers = Peers::plain(super::super::ClusterSecret::new("sixteen-chars-ok")?);
        let channels = SecretChannels::new(peers);
        let runtimes = SessionRuntimes::default();
        let hook = MasterSessions {
            workers: Arc::default(),
            here: worker_of(None, channels.clone(), runtimes.clone()),
            channels,
            here_url: Url::parse("http://127.0.0.1:1")?,
            runtimes: runtimes.clone(),
        };
        let own = RuntimeEnvBuilder::new()
            .with_memory_limit(1 << 20, 1.0)
            .build_arc()?;
        let builder = SessionStateBuilder::new().with_runtime_env(Arc::clone(&own));
        let state = hook.build(builder).build();
        let lent = shared(&runtimes);
        assert!(lent.len() == 1 && Arc::ptr_eq(&lent[0], &own));
        // A SET of another limit gives the session another runtime, which
        // its stages then take.
        let other = RuntimeEnvBuilder::new()
            .with_memory_limit(2 << 20, 1.0)
            .build_arc()?;
        let mut state = SessionStateBuilder::new_from_existing(state)
            .with_runtime_env(Arc::clone(&other))
            .build();
        hook.settings_changed(&mut state)?;
        assert!(shared(&runtimes).iter().any(|r| Arc::ptr_eq(r, &other)));
        Ok(())
    }
}
