//! widesql side by side with raw sled, SQLite, GlueSQL 0.20 and
//! DataFusion's `MemTable`, all loading and reading the same generated
//! webtable pages in one process.
//!
//! `cargo run --release -p widesql-bench -- [--quick] [--rows N] [--only W1,W3]`
//!
//! W12 (a cluster) runs a master and three workers in this process, each
//! on its own loopback port.
//!
//! W10 (the Flight SQL server under 1, 8 and 32 clients, next to
//! PostgreSQL) starts a PostgreSQL server when Debian's `postgresql`
//! package is installed, and says so when it is not.
//!
//! Each workload prints a Markdown table (the median of the repetitions)
//! and its peak memory; the end prints `ratio NAME VALUE` lines with the
//! targets they are measured against. Nothing here asserts a time: a
//! missed target is a printed fact. Results of the systems are compared
//! with each other, and a disagreement stops the run.

mod cluster;
mod concurrent;
mod data;
mod report;
mod server;
mod systems;
mod workloads;

/// The allocator widesql's own binaries use (the CLI too): every system
/// measured here allocates through it, SQLite's C code aside.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;

/// The benchmark's result type.
pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Command-line options.
#[derive(Parser, Debug)]
#[command(
    name = "widesql-bench",
    about = "widesql next to raw sled, SQLite, GlueSQL and DataFusion"
)]
struct Args {
    /// A small run (3,000 rows) that finishes within a minute.
    #[arg(long)]
    quick: bool,
    /// Rows of the main data set (W3 also loads ten times as many).
    #[arg(long)]
    rows: Option<usize>,
    /// Repetitions of each measurement (the median is printed).
    #[arg(long)]
    reps: Option<usize>,
    /// Only these workloads, e.g. `--only W2,W5` (W1 always loads).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Where the databases go (a temporary folder by default).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Rows of 2 KiB in W9's first table (default 160,000; 20,000 with
    /// `--quick`); its table of 256 KiB values has 1/80 as many.
    #[arg(long)]
    scan_rows: Option<usize>,
    /// Runs one W7 run alone (for a profiler) and nothing else:
    /// `SYSTEM:DURABILITY:WRITERS[:READERS]`, e.g. `widesql:immediate:16`
    /// (systems: widesql, SQLite, "raw sled"); `--secs` sets its length.
    #[arg(long)]
    w7: Option<String>,
    /// Seconds of each W7 run (default 5; 1 with `--quick`).
    #[arg(long)]
    secs: Option<f64>,
    /// Internal: runs one W9 step on `--w9-db` in this process.
    #[arg(long, hide = true)]
    w9_step: Option<String>,
    /// Internal: the database of `--w9-step`.
    #[arg(long, hide = true)]
    w9_db: Option<PathBuf>,
    /// Internal: the rows of the table of `--w9-step`.
    #[arg(long, hide = true)]
    w9_rows: Option<usize>,
}

fn main() -> Res<()> {
    let args = Args::parse();
    if let (Some(step), Some(db), Some(rows)) = (&args.w9_step, &args.w9_db, args.w9_rows) {
        return workloads::w9_step(step, db, rows);
    }
    let root = match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            tempfile::tempdir_in(dir)?
        }
        None => tempfile::tempdir()?,
    };
    let rows = args
        .rows
        .unwrap_or(if args.quick { 3_000 } else { 100_000 });
    let config = workloads::Config {
        rows,
        reps: args.reps.unwrap_or(5).max(1),
        points: if args.quick { 300 } else { 2_000 },
        ranges: if args.quick { 20 } else { 50 },
        versions: 10_000,
        concurrent_secs: args.secs.unwrap_or(if args.quick { 1.0 } else { 5.0 }),
        durable_statements: if args.quick { 50 } else { 300 },
        scan_memory_rows: args
            .scan_rows
            .unwrap_or(if args.quick { 20_000 } else { 160_000 }),
        cache_bytes: 256 << 20,
        root: root.path().to_path_buf(),
        runtime: Arc::new(tokio::runtime::Runtime::new()?),
        only: args.only.iter().map(|w| w.to_uppercase()).collect(),
    };
    if let Some(spec) = &args.w7 {
        return concurrent::w7_one(&config, spec);
    }
    println!(
        "# widesql-bench: {} rows (W3 also {}), median of {} runs\n\n{}",
        config.rows,
        config.rows * 10,
        config.reps,
        workloads::machine()
    );
    workloads::run(&config)
}
