//! Printing: Markdown tables, the `ratio` lines with their targets, the
//! median of repetitions and the process's peak memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::Res;

/// One Markdown table.
pub struct MdTable {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl MdTable {
    /// A table with a title and column names.
    pub fn new(title: impl Into<String>, header: &[&str]) -> Self {
        MdTable {
            title: title.into(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Prints the table, then the peak memory since the last
    /// [`reset_peak_rss`].
    pub fn print(&self) {
        println!("\n### {}\n", self.title);
        println!("| {} |", self.header.join(" | "));
        println!("|{}", "---|".repeat(self.header.len()));
        for row in &self.rows {
            println!("| {} |", row.join(" | "));
        }
        if let Some(peak) = rss_kib("VmHWM:") {
            let start = WORKLOAD_START_RSS.load(Ordering::Relaxed);
            println!(
                "\npeak RSS: {} MiB ({} MiB above the {} MiB held when the workload began)",
                peak / 1024,
                peak.saturating_sub(start) / 1024,
                start / 1024
            );
        }
    }
}

/// A system that stopped answering; the run goes on without it, and its
/// figures are NaN, printed as "hung".
#[derive(Debug)]
pub struct Hung(pub String);

impl std::fmt::Display for Hung {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} stopped answering", self.0)
    }
}

impl std::error::Error for Hung {}

/// The seconds `result` measured, or NaN when its system hung.
pub fn unless_hung(result: Res<f64>) -> Res<f64> {
    match result {
        Err(e) if e.is::<Hung>() => Ok(f64::NAN),
        other => other,
    }
}

/// What a ratio should be.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// At least this.
    AtLeast(f64),
    /// At most this.
    AtMost(f64),
}

/// The `ratio NAME VALUE` lines printed at the end.
#[derive(Default)]
pub struct Ratios(Vec<(String, f64, Option<Target>)>);

impl Ratios {
    /// Records a ratio and its target.
    pub fn add(&mut self, name: &str, value: f64, target: Option<Target>) {
        self.0.push((name.to_string(), value, target));
    }

    /// Prints one line per ratio: name, value, target and whether it is met.
    pub fn print(&self) {
        println!("\n### Ratios\n\n```");
        for (name, value, target) in &self.0 {
            if value.is_nan() {
                println!("ratio {name} not measured (a system hung)");
                continue;
            }
            let verdict = match target {
                Some(Target::AtLeast(t)) => format!(
                    "  target >= {t}  {}",
                    if *value >= *t { "met" } else { "missed" }
                ),
                Some(Target::AtMost(t)) => format!(
                    "  target <= {t}  {}",
                    if *value <= *t { "met" } else { "missed" }
                ),
                None => String::new(),
            };
            println!("ratio {name} {value:.3}{verdict}");
        }
        println!("```");
    }
}

/// The median of `values`.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The median seconds of `reps` runs of `run`.
pub fn median_secs(reps: usize, mut run: impl FnMut() -> Res<()>) -> Res<f64> {
    median_of(reps, || {
        let start = Instant::now();
        run()?;
        Ok(start.elapsed().as_secs_f64())
    })
}

/// The median of the seconds `run` measures itself in `reps` runs (for a
/// run whose set-up is not part of the figure).
pub fn median_of(reps: usize, mut run: impl FnMut() -> Res<f64>) -> Res<f64> {
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        times.push(run()?);
    }
    Ok(median(times))
}

/// The resident memory when the running workload began, KiB.
static WORKLOAD_START_RSS: AtomicU64 = AtomicU64::new(0);

/// Bytes this process has had read from the disk (Linux: `read_bytes` of
/// `/proc/self/io`, which counts reads the page cache answered as none).
pub fn disk_read_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// A memory figure of `/proc/self/status` in KiB (Linux): `VmRSS:` now,
/// `VmHWM:` the peak since start or the last reset.
pub fn rss_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Starts a workload's memory figures: resets the peak (Linux:
/// `/proc/self/clear_refs`) and notes what is resident now, so each
/// workload reports its own peak and how much it added.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    WORKLOAD_START_RSS.store(rss_kib("VmRSS:").unwrap_or(0), Ordering::Relaxed);
}

/// A rate with a k/M suffix.
pub fn rate(per_sec: f64) -> String {
    if per_sec.is_nan() {
        "hung".into()
    } else if per_sec >= 1e6 {
        format!("{:.2}M", per_sec / 1e6)
    } else if per_sec >= 1e3 {
        format!("{:.1}k", per_sec / 1e3)
    } else {
        format!("{per_sec:.0}")
    }
}

/// A duration in the unit that reads best.
pub fn duration(secs: f64) -> String {
    if secs.is_nan() {
        "hung".into()
    } else if secs < 1e-3 {
        format!("{:.1} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}

/// `x.xx×`.
pub fn times(ratio: f64) -> String {
    if ratio.is_nan() {
        return "—".into();
    }
    format!("{ratio:.2}×")
}
