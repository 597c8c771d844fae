//! The differential tester (`tests/differential/mod.rs`) with a cluster
//! as its twin: each random script runs on one process, on SQLite and on a
//! master with three worker processes, whose tables are placed on the
//! workers after every statement ([`processes::place_tablets`]). The
//! cluster must give what the one process gives: the same success or
//! failure, affected rows, tables and query answers.
//!
//! `WIDESQL_DIFF_STATEMENTS` and `WIDESQL_DIFF_SEED` make a longer run, as
//! for `cargo test --test sql_differential`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

#[expect(
    dead_code,
    reason = "the cluster helpers are shared by every cluster test; this one starts its workers as processes"
)]
mod common;
#[path = "../../tests/differential/mod.rs"]
mod differential;
mod processes;

use differential::{Mode, Widesql};
use processes::{place_tablets, Cluster, Placed};

/// Statements of the run inside `cargo test`, unless
/// `WIDESQL_DIFF_STATEMENTS` says otherwise: a fifth of the one-process
/// run's, as a cluster runs each statement across processes.
const CLUSTER_STATEMENTS: usize = differential::DEFAULT_STATEMENTS / 5;

/// Workers of each seed's cluster.
const WORKERS: usize = 3;

fn main() {
    processes::serve_if_worker();
    let placed = Arc::new(Placed::default());
    let counts = Arc::clone(&placed);
    let open = move |mode: Mode| -> Result<Widesql, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let cluster =
            Cluster::start(&runtime, WORKERS, Widesql::options(mode)).map_err(|e| e.to_string())?;
        let (db, workers, counts) = (
            cluster.db.clone(),
            cluster.workers.clone(),
            Arc::clone(&counts),
        );
        let after =
            Box::new(move || place_tablets(&db, &workers, &counts).map_err(|e| e.to_string()));
        Widesql::over(
            &cluster.db.clone(),
            Arc::new(runtime),
            Box::new(cluster),
            Some(after),
        )
    };
    differential::run(Some(&open), CLUSTER_STATEMENTS);
    assert!(
        !placed.moved_nothing(),
        "no tablet moved to a worker: the run tested nothing of the cluster"
    );
    println!(
        "cluster: {} tablets moved to workers",
        placed.moves.load(Ordering::Relaxed)
    );
}
