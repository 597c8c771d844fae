//! Every file of `sql_tests/` (the SQLite corpus files under
//! `sql_tests/sqlite/` included) on a cluster: a master in this process
//! and three worker processes (this test binary again, in worker mode) on
//! 127.0.0.1, each file in new databases.
//!
//! After every record, the harness places the file's tables on the
//! workers ([`processes::place_tablets`]): tables are split and their
//! tablets go to different workers, so a file's statements write and read
//! rows across processes: routed writes, scans run as tasks on workers,
//! and moves of tablets that hold rows.
//!
//! Records whose answer is where a table's tablets are (`EXPLAIN` names
//! their workers) are marked `skipif cluster` in the files, each with its
//! reason. [`NOT_ON_A_CLUSTER`] lists the files not run here.

#![expect(
    clippy::expect_used,
    reason = "a test harness: a failed expectation is the test failing"
)]

use std::path::Path;
use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};
use widesql_slt::{AfterEach, RunOptions};

#[expect(
    dead_code,
    reason = "the cluster helpers are shared by every cluster test; this one starts its workers as processes"
)]
mod common;
mod processes;

use common::BoxError;
use processes::{place_tablets, Cluster, Placed};

/// The `skipif` / `onlyif` label of these runs.
const LABEL: &str = "cluster";

/// Files not run here, with the reason.
const NOT_ON_A_CLUSTER: &[(&str, &str)] = &[(
    "tablets.slt",
    "it checks the tablets that its own SPLIT statements make and where \
     EXPLAIN finds them, which this harness's splits and moves change; \
     server/tests/cluster_tablets.rs runs those statements on a cluster",
)];

/// Workers per file.
const WORKERS: usize = 3;

fn main() {
    processes::serve_if_worker();
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql_tests");
    let files = widesql_slt::collect_named_files(&root).expect("sql_tests/ is readable");
    let trials = files
        .into_iter()
        .filter(|(name, _)| !NOT_ON_A_CLUSTER.iter().any(|(file, _)| file == name))
        .map(|(name, path)| {
            Trial::test(name, move || {
                run_on_cluster(&path).map_err(|e| Failed::from(e.to_string()))
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

/// Runs the file at `path` on a new cluster.
fn run_on_cluster(path: &Path) -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let cluster = Cluster::start(&runtime, WORKERS, widesql::DbOptions::new())?;
    let mut options = RunOptions::default();
    widesql_slt::with_default_dataset(&cluster.db, &options.session)?;
    options.labels.push(LABEL.to_string());
    let placed = Arc::new(Placed::default());
    let (db, workers, counts) = (
        cluster.db.clone(),
        cluster.workers.clone(),
        Arc::clone(&placed),
    );
    options.after_each = Some(AfterEach(Arc::new(move || {
        place_tablets(&db, &workers, &counts).map_err(|e| e.to_string())
    })));
    let report = runtime.block_on(widesql_slt::run_file(path, &cluster.db, &options))?;
    drop(cluster);
    report.verdict()?;
    if placed.moved_nothing() {
        return Err("the file made tables, but none of their tablets moved to a worker".into());
    }
    Ok(())
}
