//! DataFusion's own sqllogictest files, run against widesql's sled-backed
//! tables and against plain in-memory DataFusion (the baseline).
//!
//! The files are read from the `datafusion-sqllogictest` 55.2.0 package that
//! cargo downloads for the never-built workspace member
//! `suites/datafusion`; they are copied into a temporary directory (some
//! files write scratch output) and run there. A file fails when widesql
//! fails a record that in-memory DataFusion passes, unless
//! `suites/datafusion/skip.tsv` lists the record with its reason.
//!
//! `WIDESQL_WRITE_COUNTS=1 cargo test --test datafusion_suites` rewrites
//! `suites/datafusion/pass_counts.md`, the per-file table of pass counts.

#![expect(
    clippy::expect_used,
    reason = "a test harness: a failed expectation is the test failing"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use libtest_mimic::{Arguments, Failed, Trial};
use widesql::SessionOptions;
use widesql_slt::{run_file_in_memory, run_file_isolated, FileReport, RunOptions};

/// The files run: every storage file of 55.2, then a broad query set.
const FILES: &[&str] = &[
    "insert.slt",
    "dml_delete.slt",
    "dml_update.slt",
    "update.slt",
    "truncate.slt",
    "ddl.slt",
    "create_external_table.slt",
    "select.slt",
    "aggregate.slt",
    "joins.slt",
    "order.slt",
    "limit.slt",
    "group_by.slt",
    "window.slt",
    "subquery.slt",
    "union.slt",
    "predicates.slt",
];

/// The workspace root, where `suites/` lives.
fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The source folder of the datafusion-sqllogictest package.
fn package_dir() -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(manifest_dir().join("Cargo.toml"))
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "datafusion-sqllogictest" && p["version"] == "55.2.0")
        .and_then(|p| p["manifest_path"].as_str())
        .and_then(|m| Path::new(m).parent().map(Path::to_path_buf))
        .ok_or_else(|| "datafusion-sqllogictest 55.2.0 is not in the workspace".to_string())
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// file -> line -> reason.
fn skip_list() -> BTreeMap<String, BTreeMap<usize, String>> {
    let text = std::fs::read_to_string(manifest_dir().join("suites/datafusion/skip.tsv"))
        .unwrap_or_default();
    let mut skips: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let mut parts = line.splitn(3, '\t');
        let (Some(file), Some(at), Some(reason)) = (parts.next(), parts.next(), parts.next())
        else {
            panic!("skip.tsv: '{line}' is not file<TAB>line<TAB>reason");
        };
        let at: usize = at
            .parse()
            .unwrap_or_else(|_| panic!("skip.tsv: '{at}' is not a line number"));
        skips
            .entry(file.to_string())
            .or_default()
            .insert(at, reason.to_string());
    }
    skips
}

#[derive(Debug, Clone)]
struct Counts {
    records: usize,
    memory: usize,
    widesql: usize,
    skipped: usize,
}

fn run_one(path: &Path, skips: &BTreeMap<usize, String>) -> Result<(Counts, Vec<String>), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let session = SessionOptions {
        default_project: "datafusion".into(),
        default_dataset: "public".into(),
        target_partitions: Some(4),
        ..SessionOptions::default()
    };
    let memory_options = RunOptions {
        session: session.clone(),
        ..RunOptions::default()
    };
    let widesql_options = RunOptions {
        session,
        skip_lines: skips.keys().copied().collect(),
        ..RunOptions::default()
    };
    // Files write scratch output under test_files/scratch/<file>: each run
    // starts without the other's, as DataFusion's runner does.
    let scratch = path
        .parent()
        .map(|dir| {
            dir.join("scratch")
                .join(path.file_stem().unwrap_or_default())
        })
        .ok_or("no parent")?;
    let clear = || {
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch)
    };
    clear().map_err(|e| e.to_string())?;
    let memory: FileReport = runtime
        .block_on(run_file_in_memory(path, &memory_options))
        .map_err(|e| e.to_string())?;
    clear().map_err(|e| e.to_string())?;
    let widesql: FileReport = runtime
        .block_on(run_file_isolated(path, &widesql_options))
        .map_err(|e| e.to_string())?;
    let memory_failed = memory.failed_lines();
    let skipped_passing_in_memory = skips.keys().filter(|l| !memory_failed.contains(l)).count();
    let counts = Counts {
        records: memory.passed + memory.failed(),
        memory: memory.passed,
        widesql: widesql.passed,
        skipped: skipped_passing_in_memory,
    };
    // Records widesql fails but the baseline passes (and no skip explains).
    let gaps: Vec<String> = widesql
        .failures
        .iter()
        .filter(|f| f.line.is_none_or(|l| !memory_failed.contains(&l)))
        .map(|f| f.message.clone())
        .collect();
    Ok((counts, gaps))
}

fn write_counts(counts: &BTreeMap<String, Counts>) {
    let mut text = String::from(
        "# DataFusion 55.2 sqllogictest files: widesql vs in-memory DataFusion\n\n\
         Records that pass, per file. `memory` runs the file on plain DataFusion with in-memory\n\
         tables; `widesql` runs it with every table stored in sled through widesql. Records in\n\
         `skip.tsv` are not run on widesql; `skipped` counts those that pass in memory. Written by\n\
         `WIDESQL_WRITE_COUNTS=1 cargo test --test datafusion_suites`.\n\n\
         | file | records | memory | widesql | skipped | gap |\n|---|---:|---:|---:|---:|---:|\n",
    );
    let mut totals = (0, 0, 0, 0);
    for (file, c) in counts {
        text.push_str(&format!(
            "| {file} | {} | {} | {} | {} | {} |\n",
            c.records,
            c.memory,
            c.widesql,
            c.skipped,
            c.memory as i64 - c.widesql as i64 - c.skipped as i64
        ));
        totals = (
            totals.0 + c.records,
            totals.1 + c.memory,
            totals.2 + c.widesql,
            totals.3 + c.skipped,
        );
    }
    text.push_str(&format!(
        "| **total** | {} | {} | {} | {} | {} |\n",
        totals.0,
        totals.1,
        totals.2,
        totals.3,
        totals.1 as i64 - totals.2 as i64 - totals.3 as i64
    ));
    std::fs::write(
        manifest_dir().join("suites/datafusion/pass_counts.md"),
        text,
    )
    .expect("write pass_counts.md");
}

fn main() {
    let args = Arguments::from_args();
    let package = match package_dir() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cannot find DataFusion's sqllogictest files: {e}");
            std::process::exit(1);
        }
    };
    let work = tempfile::tempdir().expect("temp dir");
    copy_dir(&package.join("test_files"), &work.path().join("test_files"))
        .expect("copy test_files");
    copy_dir(&package.join("data"), &work.path().join("data")).expect("copy data");
    // Relative paths in the files (data, scratch) resolve in the copy.
    std::env::set_current_dir(work.path()).expect("cd");
    let skips = skip_list();
    let counts: Arc<Mutex<BTreeMap<String, Counts>>> = Arc::default();
    let trials = FILES
        .iter()
        .map(|file| {
            let path = work.path().join("test_files").join(file);
            let file_skips = skips.get(*file).cloned().unwrap_or_default();
            let counts = Arc::clone(&counts);
            let name = (*file).to_string();
            Trial::test(name.clone(), move || {
                let (c, gaps) = run_one(&path, &file_skips).map_err(Failed::from)?;
                counts.lock().expect("counts").insert(name, c);
                if gaps.is_empty() {
                    Ok(())
                } else {
                    Err(Failed::from(format!(
                        "{} records pass on in-memory DataFusion but fail on widesql (add them to suites/datafusion/skip.tsv with a reason, or fix them):\n{}",
                        gaps.len(),
                        gaps.join("\n")
                    )))
                }
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if std::env::var_os("WIDESQL_WRITE_COUNTS").is_some() {
        write_counts(&counts.lock().expect("counts"));
    }
    drop(work);
    conclusion.exit();
}
