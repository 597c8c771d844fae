//! Runs every sqllogictest file under `sql_tests/` as its own test, each in
//! a new temporary database.

#![expect(
    clippy::expect_used,
    reason = "a test harness: a failed expectation is the test failing"
)]

use std::path::Path;

use libtest_mimic::{Arguments, Failed, Trial};

fn main() {
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql_tests");
    let files = widesql_slt::collect_named_files(&root).expect("sql_tests/ is readable");
    let trials = files
        .into_iter()
        .map(|(name, path)| {
            Trial::test(name, move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| Failed::from(e.to_string()))?;
                let report = runtime
                    .block_on(widesql_slt::run_file_isolated(
                        &path,
                        &widesql_slt::RunOptions::default(),
                    ))
                    .map_err(|e| Failed::from(e.to_string()))?;
                report.verdict().map_err(Failed::from)
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
