//! The soak test: concurrent writers and readers on a sled database, with
//! invariants checked throughout and after a reopen.
//!
//! - Four writers, two with immediate and two with eventual durability,
//!   each on its own 150 rows: they overwrite rows with values of 100 B to
//!   64 KiB (so sled frees and reuses log segments), delete rows, write
//!   five rows in one `bulk_mutate`, and increment a counter of their own.
//! - Two readers scan the table and read single rows the whole time: every
//!   row they see is whole (its two locality groups carry the same
//!   generation and its value is the one that generation wrote) and no
//!   counter goes back.
//! - At the end, after a reopen: every row holds exactly what its writer
//!   last acknowledged, and every counter its exact count.
//!
//! A storage call stuck past the stall limit (sled 0.34's rotation
//! deadlock) fails the writer that waits for it, and so the test: the run
//! counts hangs as failures. `cargo test` runs it for 15 s;
//! `WIDESQL_SOAK_SECS=1800 cargo test --release --test soak -- --nocapture`
//! runs it for half an hour and prints its figures.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use widesql::{
    Db, DbOptions, Durability, FamilySpec, Filter, ReadModifyWriteRule, ReadOptions, RowMutation,
    RowSet, Table, TableSpec,
};

type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const WRITERS: usize = 4;
const READERS: usize = 2;
const ROWS_PER_WRITER: u64 = 150;

fn seconds() -> u64 {
    std::env::var("WIDESQL_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15)
}

/// A small deterministic generator (SplitMix64): each writer its own.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn row_key(writer: usize, row: u64) -> Vec<u8> {
    format!("w{writer}/r{row:04}").into_bytes()
}

fn counter_key(writer: usize) -> Vec<u8> {
    format!("counter/{writer}").into_bytes()
}

/// The value generation `generation` writes: 100 B to 64 KiB, spread
/// evenly over the powers of two, and recognisable from its bytes.
fn value(generation: u64) -> Vec<u8> {
    let bits = 7 + generation % 10; // 128 B .. 64 KiB
    let len = ((1u64 << bits) - 28 + generation % 29) as usize;
    let mut value = vec![(generation % 251) as u8; len];
    value[..8].copy_from_slice(&generation.to_be_bytes());
    value
}

/// What a reader checks of a row it sees: one generation in both groups,
/// and that generation's value.
fn check_row(row: &widesql::Row) -> Result<(), String> {
    let key = String::from_utf8_lossy(&row.key).into_owned();
    if row.key.starts_with(b"counter/") {
        return Ok(());
    }
    let small = row.value("small", b"gen").map(<[u8]>::to_vec);
    let big = row.value("big", b"gen").map(<[u8]>::to_vec);
    let (Some(small), Some(big)) = (small, big) else {
        return Err(format!("row {key} is torn: one locality group is missing"));
    };
    if small != big {
        return Err(format!(
            "row {key} is torn: generations {small:?} and {big:?}"
        ));
    }
    let generation = u64::from_be_bytes(small.try_into().map_err(|_| "bad generation")?);
    let data = row
        .value("big", b"data")
        .ok_or(format!("row {key} has no data"))?;
    if data != value(generation).as_slice() {
        return Err(format!(
            "row {key} holds a value of {} bytes that generation {generation} did not write",
            data.len()
        ));
    }
    Ok(())
}

fn counter(table: &Table, writer: usize) -> widesql::Result<i64> {
    let row = table.read_row(&counter_key(writer), &Filter::all())?;
    Ok(row
        .and_then(|r| r.value("small", b"n").map(<[u8]>::to_vec))
        .and_then(|v| <[u8; 8]>::try_from(v).ok())
        .map(i64::from_be_bytes)
        .unwrap_or(0))
}

/// The rows of one writer as it last acknowledged them (`None`: deleted),
/// and its counter.
#[derive(Default)]
struct Model {
    rows: BTreeMap<u64, Option<u64>>,
    count: i64,
}

fn set_row(generation: u64) -> RowMutation {
    RowMutation::new()
        .set("small", "gen", generation.to_be_bytes())
        .set("big", "gen", generation.to_be_bytes())
        .set("big", "data", value(generation))
}

fn writer(table: &Table, id: usize, stop: &AtomicBool, ops: &AtomicU64) -> Result<Model, String> {
    let mut rng = Rng(0x5eed ^ id as u64);
    let mut model = Model::default();
    let mut generation = id as u64 * 1_000_000_000;
    let at =
        |what: &str, row: u64, e: widesql::Error| format!("writer {id}, {what} row {row}: {e}");
    while !stop.load(Ordering::Relaxed) {
        let row = rng.below(ROWS_PER_WRITER);
        generation += 1;
        match rng.below(20) {
            0..=11 => {
                table
                    .mutate_row(&row_key(id, row), &set_row(generation))
                    .map_err(|e| at("writing", row, e))?;
                model.rows.insert(row, Some(generation));
            }
            12..=13 => {
                table
                    .mutate_row(&row_key(id, row), &RowMutation::new().delete_row())
                    .map_err(|e| at("deleting", row, e))?;
                model.rows.insert(row, None);
            }
            14..=16 => {
                let rows: Vec<u64> = (0..5).map(|i| (row + i) % ROWS_PER_WRITER).collect();
                let mutation = set_row(generation);
                table
                    .bulk_mutate(rows.iter().map(|&r| (row_key(id, r), mutation.clone())))
                    .map_err(|e| at("bulk writing from", row, e))?;
                for r in rows {
                    model.rows.insert(r, Some(generation));
                }
            }
            _ => {
                table
                    .read_modify_write(
                        &counter_key(id),
                        &[ReadModifyWriteRule::increment("small", "n", 1)],
                    )
                    .map_err(|e| at("incrementing the counter of", row, e))?;
                model.count += 1;
            }
        }
        ops.fetch_add(1, Ordering::Relaxed);
    }
    Ok(model)
}

fn reader(table: &Table, id: usize, stop: &AtomicBool, reads: &AtomicU64) -> Result<(), String> {
    let mut rng = Rng(0xfeed ^ id as u64);
    let mut counters = [0i64; WRITERS];
    while !stop.load(Ordering::Relaxed) {
        if rng.below(4) == 0 {
            for row in table
                .read_rows(&RowSet::all(), ReadOptions::new())
                .map_err(|e| e.to_string())?
            {
                check_row(&row.map_err(|e| e.to_string())?)?;
                reads.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let writer = rng.below(WRITERS as u64) as usize;
            let key = row_key(writer, rng.below(ROWS_PER_WRITER));
            if let Some(row) = table
                .read_row(&key, &Filter::all())
                .map_err(|e| e.to_string())?
            {
                check_row(&row)?;
            }
            let now = counter(table, writer).map_err(|e| e.to_string())?;
            if now < counters[writer] {
                return Err(format!(
                    "counter {writer} went back from {} to {now}",
                    counters[writer]
                ));
            }
            counters[writer] = now;
            reads.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

fn open(dir: &std::path::Path) -> widesql::Result<Db> {
    Db::open_with(
        dir,
        DbOptions::new()
            .with_compaction_interval(Some(Duration::from_secs(2)))
            .with_stall_limit(Duration::from_secs(60)),
    )
}

fn soak_table(db: &Db) -> widesql::Result<Table> {
    match db.default_dataset()?.table("soak")? {
        Some(table) => Ok(table),
        None => db.default_dataset()?.create_table(
            "soak",
            TableSpec::new()
                .with_family(FamilySpec::new("small").with_max_versions(1))
                .with_family(
                    FamilySpec::new("big")
                        .with_max_versions(1)
                        .with_locality_group("large"),
                ),
        ),
    }
}

#[test]
fn writers_and_readers_keep_every_invariant() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = open(dir.path())?;
    let table = soak_table(&db)?;
    let stop = AtomicBool::new(false);
    let (ops, reads) = (AtomicU64::new(0), AtomicU64::new(0));
    let started = Instant::now();
    let models = std::thread::scope(|scope| -> Result<Vec<Model>, String> {
        let writers: Vec<_> = (0..WRITERS)
            .map(|id| {
                let durability = if id % 2 == 0 {
                    Durability::Immediate
                } else {
                    Durability::Eventual
                };
                let table = table.with_durability(durability);
                let (stop, ops) = (&stop, &ops);
                scope.spawn(move || writer(&table, id, stop, ops))
            })
            .collect();
        let readers: Vec<_> = (0..READERS)
            .map(|id| {
                let (table, stop, reads) = (&table, &stop, &reads);
                scope.spawn(move || reader(table, id, stop, reads))
            })
            .collect();
        let deadline = started + Duration::from_secs(seconds());
        // Stop early when a thread failed; its error is reported below.
        while Instant::now() < deadline
            && !writers.iter().any(|w| w.is_finished())
            && !readers.iter().any(|r| r.is_finished())
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            reader.join().map_err(|_| "a reader panicked")??;
        }
        writers
            .into_iter()
            .map(|w| w.join().map_err(|_| "a writer panicked".to_string())?)
            .collect()
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    let stats = db.commit_stats();
    let ops = ops.load(Ordering::Relaxed);
    println!(
        "soak: {elapsed:.0} s, {ops} writes ({:.0}/s), {} reads, {} flushes, largest group {}, {:.1} MiB on disk",
        ops as f64 / elapsed,
        reads.load(Ordering::Relaxed),
        stats.flushes,
        stats.largest_group,
        db.size_on_disk()? as f64 / (1024.0 * 1024.0)
    );
    assert_eq!(db.health(), widesql::Health::Healthy);
    // A clean close flushes the eventual writes too; after the reopen every
    // row is as its writer last acknowledged it.
    drop((table, db));
    let db = open(dir.path())?;
    let table = soak_table(&db)?;
    for (id, model) in models.iter().enumerate() {
        assert_eq!(counter(&table, id)?, model.count, "counter {id}");
        for (&row, &generation) in &model.rows {
            let found = table.read_row(&row_key(id, row), &Filter::all())?;
            match (generation, found) {
                (None, None) => {}
                (None, Some(_)) => return Err(format!("deleted row {id}/{row} is back").into()),
                (Some(_), None) => return Err(format!("row {id}/{row} is lost").into()),
                (Some(generation), Some(found)) => {
                    check_row(&found)?;
                    let stored = found.value("small", b"gen").map(<[u8]>::to_vec);
                    assert_eq!(
                        stored,
                        Some(generation.to_be_bytes().to_vec()),
                        "row {id}/{row}"
                    );
                }
            }
        }
    }
    Ok(())
}
