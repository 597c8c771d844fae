//! W7: many writers at once, each durability, with and without readers,
//! next to SQLite and raw sled doing the same writes.
//!
//! A write stores one row of 20,000: a short cell and a 600-byte cell
//! (new bytes every time) in two locality groups (two sled trees for raw sled, one transaction; one
//! autocommitted UPSERT for SQLite). Immediate durability: every write is
//! on disk when it returns (widesql's default, SQLite WAL with
//! `synchronous = FULL`, raw sled with `flush()` after each write).
//! Eventual: SQLite `synchronous = NORMAL`, raw sled without flushes.
//! A reader reads one whole row.
//!
//! Each run gets a time limit: a system that stops answering (sled 0.34's
//! rotation deadlock) prints "hung", its threads are left behind, and the
//! run goes on.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use sled::Transactional;
use widesql::{Db, DbOptions, Durability, FamilySpec, Filter, RowMutation, Table, TableSpec};

use crate::data::{page_key, Rng};
use crate::report::{rate, MdTable, Ratios, Target};
use crate::systems::raw_sled::cell_key;
use crate::workloads::Config;
use crate::Res;

/// Rows the writers overwrite.
const KEYS: usize = 20_000;
/// Bytes of the large cell.
const VALUE_BYTES: usize = 600;
/// Writer counts measured.
const WRITERS: [usize; 3] = [1, 4, 16];
/// How long past its planned end a run may take before it counts as hung.
const GRACE: Duration = Duration::from_secs(60);

/// One system's store for W7.
trait Store: Send + Sync {
    fn write(&self, key: usize, value: &[u8]) -> Res<()>;
    fn read(&self, key: usize) -> Res<()>;
    /// Writes answered and flushes run so far, where the system counts
    /// them (widesql's commit pipeline).
    fn commits(&self) -> Option<(u64, u64)> {
        None
    }
}

struct Widesql {
    db: Db,
    table: Table,
}

impl Widesql {
    fn open(path: &Path, durability: Durability, cache: u64) -> Res<Self> {
        let db = Db::open_with(
            path,
            DbOptions::new()
                .with_cache_capacity(cache)
                .with_compaction_interval(None),
        )?;
        let table = db.default_dataset()?.create_table(
            "w7",
            TableSpec::new()
                .with_family(FamilySpec::new("cf").with_max_versions(1))
                .with_family(
                    FamilySpec::new("page")
                        .with_max_versions(1)
                        .with_locality_group("contents"),
                ),
        )?;
        let value = vec![b'v'; VALUE_BYTES];
        table.bulk_mutate((0..KEYS).map(|i| (page_key(i).into_bytes(), mutation(&value))))?;
        db.flush()?;
        Ok(Widesql {
            db,
            table: table.with_durability(durability),
        })
    }
}

fn mutation(value: &[u8]) -> RowMutation {
    RowMutation::new()
        .set("cf", "language", "XX")
        .set("page", "contents", value)
}

impl Store for Widesql {
    fn write(&self, key: usize, value: &[u8]) -> Res<()> {
        Ok(self
            .table
            .mutate_row(page_key(key).as_bytes(), &mutation(value))?)
    }

    fn read(&self, key: usize) -> Res<()> {
        let row = self.table.read_row(
            page_key(key).as_bytes(),
            &Filter::all().with_latest_versions(1),
        )?;
        row.map(|_| ()).ok_or_else(|| "missing row".into())
    }

    fn commits(&self) -> Option<(u64, u64)> {
        let stats = self.db.commit_stats();
        Some((stats.jobs, stats.flushes))
    }
}

struct RawSled {
    db: sled::Db,
    small: sled::Tree,
    blobs: sled::Tree,
    flush: bool,
}

impl RawSled {
    fn open(path: &Path, durability: Durability, cache: u64) -> Res<Self> {
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache)
            .open()?;
        let store = RawSled {
            small: db.open_tree("small")?,
            blobs: db.open_tree("blobs")?,
            db,
            flush: durability == Durability::Immediate,
        };
        let value = vec![b'v'; VALUE_BYTES];
        for i in 0..KEYS {
            store.put(i, &value)?;
        }
        store.db.flush()?;
        Ok(store)
    }

    fn put(&self, key: usize, value: &[u8]) -> Res<()> {
        let key = page_key(key);
        let (mut a, mut b) = (sled::Batch::default(), sled::Batch::default());
        a.insert(cell_key(&key, 0, b"language")?, &b"XX"[..]);
        b.insert(cell_key(&key, 2, b"contents")?, value);
        (&self.small, &self.blobs)
            .transaction(|(s, t)| {
                s.apply_batch(&a)?;
                t.apply_batch(&b)?;
                Ok::<(), sled::transaction::ConflictableTransactionError<()>>(())
            })
            .map_err(|e| format!("{e:?}"))?;
        Ok(())
    }
}

impl Store for RawSled {
    fn write(&self, key: usize, value: &[u8]) -> Res<()> {
        self.put(key, value)?;
        if self.flush {
            self.db.flush()?;
        }
        Ok(())
    }

    fn read(&self, key: usize) -> Res<()> {
        let mut prefix = Vec::new();
        widesql::internals::put_bytes(&mut prefix, page_key(key).as_bytes());
        let n = self.small.scan_prefix(&prefix).count() + self.blobs.scan_prefix(&prefix).count();
        if n > 0 {
            Ok(())
        } else {
            Err("missing row".into())
        }
    }
}

/// SQLite in WAL mode, a connection per thread.
struct Sqlite {
    connections: Vec<Mutex<rusqlite::Connection>>,
}

impl Sqlite {
    fn open(path: &Path, durability: Durability, threads: usize) -> Res<Self> {
        let synchronous = match durability {
            Durability::Immediate => "FULL",
            _ => "NORMAL",
        };
        std::fs::create_dir_all(path)?;
        let file = path.join("w7.sqlite");
        let connect = || -> Res<rusqlite::Connection> {
            let conn = rusqlite::Connection::open(&file)?;
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", synchronous)?;
            conn.busy_timeout(Duration::from_secs(30))?;
            Ok(conn)
        };
        let first = connect()?;
        first.execute_batch(
            "CREATE TABLE pages (key TEXT PRIMARY KEY, language TEXT, contents BLOB) WITHOUT ROWID",
        )?;
        first.execute_batch("BEGIN")?;
        let value = vec![b'v'; VALUE_BYTES];
        for i in 0..KEYS {
            first.execute(
                "INSERT INTO pages VALUES (?1, 'XX', ?2)",
                rusqlite::params![page_key(i), value],
            )?;
        }
        first.execute_batch("COMMIT")?;
        let mut connections = vec![Mutex::new(first)];
        for _ in 1..threads {
            connections.push(Mutex::new(connect()?));
        }
        Ok(Sqlite { connections })
    }

    fn connection(&self) -> Res<std::sync::MutexGuard<'_, rusqlite::Connection>> {
        let slot = THREAD_SLOT.with(|s| s.get()) % self.connections.len();
        self.connections[slot]
            .lock()
            .map_err(|_| "a connection's lock is poisoned".into())
    }
}

thread_local! {
    /// The index of this benchmark thread, so that each uses its own
    /// SQLite connection.
    static THREAD_SLOT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Store for Sqlite {
    fn write(&self, key: usize, value: &[u8]) -> Res<()> {
        self.connection()?.execute(
            "INSERT INTO pages VALUES (?1, 'XX', ?2) ON CONFLICT (key) DO UPDATE SET language = excluded.language, contents = excluded.contents",
            rusqlite::params![page_key(key), value],
        )?;
        Ok(())
    }

    fn read(&self, key: usize) -> Res<()> {
        let n: i64 = self.connection()?.query_row(
            "SELECT length(contents) FROM pages WHERE key = ?1",
            [page_key(key)],
            |r| r.get(0),
        )?;
        if n == VALUE_BYTES as i64 {
            Ok(())
        } else {
            Err("wrong row".into())
        }
    }
}

/// One run: writes and reads per second, errors, and the writes (and
/// other jobs) per flush where the system counts them.
#[derive(Clone, Copy)]
struct Run {
    writes: f64,
    reads: f64,
    errors: u64,
    per_flush: Option<f64>,
}

/// A run, or `None` when it hung.
type Outcome = Option<Run>;

/// Runs `writers` writer and `readers` reader threads on `store` for
/// `secs`, on threads of their own so that a hung system is left behind.
fn measure(store: Arc<dyn Store>, writers: usize, readers: usize, secs: f64) -> Outcome {
    let (done, finished) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("w7".into())
        .spawn(move || {
            let stop = Arc::new(AtomicBool::new(false));
            let (writes, reads, errors) = (
                Arc::new(AtomicU64::new(0)),
                Arc::new(AtomicU64::new(0)),
                Arc::new(AtomicU64::new(0)),
            );
            let started = Instant::now();
            let commits_before = store.commits();
            let threads: Vec<_> = (0..writers + readers)
                .map(|t| {
                    let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
                    let counter = Arc::clone(if t < writers { &writes } else { &reads });
                    let errors = Arc::clone(&errors);
                    std::thread::spawn(move || {
                        THREAD_SLOT.with(|s| s.set(t));
                        let mut rng = Rng::new(700 + t as u64);
                        let mut value = vec![b'a' + (t % 26) as u8; VALUE_BYTES];
                        let mut sequence = (t as u64) << 40;
                        while !stop.load(Ordering::Relaxed) {
                            let key = rng.below(KEYS);
                            let result = if t < writers {
                                // Every write changes its row: SQLite skips
                                // an UPDATE that stores the same bytes.
                                sequence += 1;
                                value[..8].copy_from_slice(&sequence.to_be_bytes());
                                store.write(key, &value)
                            } else {
                                store.read(key)
                            };
                            let counter = if result.is_ok() { &counter } else { &errors };
                            counter.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_secs_f64(secs));
            stop.store(true, Ordering::Relaxed);
            for thread in threads {
                let _ = thread.join();
            }
            let elapsed = started.elapsed().as_secs_f64();
            let per_flush = match (commits_before, store.commits()) {
                (Some((jobs0, flushes0)), Some((jobs, flushes))) if flushes > flushes0 => {
                    Some((jobs - jobs0) as f64 / (flushes - flushes0) as f64)
                }
                _ => None,
            };
            let _ = done.send(Run {
                writes: writes.load(Ordering::Relaxed) as f64 / elapsed,
                reads: reads.load(Ordering::Relaxed) as f64 / elapsed,
                errors: errors.load(Ordering::Relaxed),
                per_flush,
            });
        });
    if spawned.is_err() {
        return None;
    }
    finished
        .recv_timeout(Duration::from_secs_f64(secs) + GRACE)
        .ok()
}

/// A fresh store of `system` ("widesql", "SQLite" or "raw sled") loaded
/// with the rows.
fn open_store(config: &Config, system: &str, durability: Durability) -> Res<Arc<dyn Store>> {
    let label = durability_label(durability);
    let path = config.fresh(&format!("w7-{system}-{label}").replace(' ', "-"))?;
    let threads = WRITERS.iter().max().copied().unwrap_or(1) + 2;
    Ok(match system {
        "widesql" => Arc::new(Widesql::open(&path, durability, config.cache_bytes)?),
        "SQLite" => Arc::new(Sqlite::open(&path, durability, threads)?),
        "raw sled" => Arc::new(RawSled::open(&path, durability, config.cache_bytes)?),
        other => return Err(format!("W7 has no system '{other}'").into()),
    })
}

fn durability_label(durability: Durability) -> &'static str {
    match durability {
        Durability::Immediate => "immediate",
        _ => "eventual",
    }
}

/// Runs one W7 run alone, for a profiler: `spec` is
/// `SYSTEM:DURABILITY:WRITERS[:READERS]`, e.g. `widesql:immediate:16`.
pub fn w7_one(config: &Config, spec: &str) -> Res<()> {
    let parts: Vec<&str> = spec.split(':').collect();
    let [system, durability, writers, rest @ ..] = parts.as_slice() else {
        return Err(format!("'{spec}' is not SYSTEM:DURABILITY:WRITERS[:READERS]").into());
    };
    let durability: Durability = durability.parse()?;
    let writers: usize = writers.parse()?;
    let readers: usize = rest.first().map_or(Ok(0), |r| r.parse())?;
    let store = open_store(config, system, durability)?;
    println!("loaded; running {spec} for {} s", config.concurrent_secs);
    match measure(store, writers, readers, config.concurrent_secs) {
        Some(run) => println!(
            "{spec}: {:.0} writes/s, {:.0} reads/s, {} errors, {} writes a flush",
            run.writes,
            run.reads,
            run.errors,
            run.per_flush
                .map_or_else(|| "-".into(), |n| format!("{n:.1}"))
        ),
        None => println!("{spec}: hung"),
    }
    Ok(())
}

fn shown(value: Option<f64>) -> String {
    value.map_or_else(|| "hung".into(), rate)
}

/// W7; its ratios go to `ratios`.
pub fn w7(config: &Config, ratios: &mut Ratios) -> Res<()> {
    let secs = config.concurrent_secs;
    let mut table = MdTable::new(
        format!("W7 concurrent writers of one 600-byte row each ({KEYS} rows), {secs} s per run"),
        &[
            "system",
            "durability",
            "writers",
            "readers",
            "writes/s",
            "reads/s",
            "errors",
            "writes a flush",
        ],
    );
    // (system, durability, writers, readers) -> writes/s
    let mut found: Vec<(&str, Durability, usize, usize, Option<f64>)> = Vec::new();
    for durability in [Durability::Immediate, Durability::Eventual] {
        let label = durability_label(durability);
        for system in ["widesql", "SQLite", "raw sled"] {
            let store = open_store(config, system, durability)?;
            let mut runs: Vec<(usize, usize)> = WRITERS.iter().map(|&w| (w, 0)).collect();
            if system != "raw sled" {
                runs.push((4, 2));
            }
            let mut hung = false;
            for (writers, readers) in runs {
                let outcome = if hung {
                    None
                } else {
                    measure(Arc::clone(&store), writers, readers, secs)
                };
                hung |= outcome.is_none();
                table.row(vec![
                    system.into(),
                    label.into(),
                    writers.to_string(),
                    readers.to_string(),
                    shown(outcome.map(|o| o.writes)),
                    if readers > 0 {
                        shown(outcome.map(|o| o.reads))
                    } else {
                        "".into()
                    },
                    outcome.map_or_else(|| "hung".into(), |o| o.errors.to_string()),
                    outcome
                        .and_then(|o| o.per_flush)
                        .map_or_else(String::new, |n| format!("{n:.1}")),
                ]);
                found.push((
                    system,
                    durability,
                    writers,
                    readers,
                    outcome.map(|o| o.writes),
                ));
            }
            if hung {
                // Its threads are stuck; the store is left to them.
                std::mem::forget(store);
            }
        }
    }
    table.print();
    let get = |system: &str, durability: Durability, writers: usize, readers: usize| {
        found
            .iter()
            .find(|f| f.0 == system && f.1 == durability && f.2 == writers && f.3 == readers)
            .and_then(|f| f.4)
            .unwrap_or(f64::NAN)
    };
    let (imm, ev) = (Durability::Immediate, Durability::Eventual);
    let mut ratio = |name: &str, value: f64, target: f64| {
        ratios.add(name, value, Some(Target::AtLeast(target)));
    };
    // (name, numerator, denominator, target), each (system, durability,
    // writers, readers).
    let targets = [
        (
            "W7 immediate, 1 writer, widesql / SQLite FULL",
            ("widesql", imm, 1, 0),
            ("SQLite", imm, 1, 0),
            1.0,
        ),
        (
            "W7 immediate, 16 writers, widesql / SQLite FULL",
            ("widesql", imm, 16, 0),
            ("SQLite", imm, 16, 0),
            3.0,
        ),
        (
            "W7 immediate, widesql 16 writers / 1 writer",
            ("widesql", imm, 16, 0),
            ("widesql", imm, 1, 0),
            4.0,
        ),
        (
            "W7 eventual, 16 writers, widesql / SQLite NORMAL",
            ("widesql", ev, 16, 0),
            ("SQLite", ev, 16, 0),
            1.0,
        ),
    ];
    for (name, (s1, d1, w1, r1), (s2, d2, w2, r2), target) in targets {
        ratio(name, get(s1, d1, w1, r1) / get(s2, d2, w2, r2), target);
    }
    for (durability, label) in [(imm, "immediate"), (ev, "eventual")] {
        ratio(
            &format!("W7 {label}, widesql writes with 2 readers / without (4 writers)"),
            get("widesql", durability, 4, 2) / get("widesql", durability, 4, 0),
            0.8,
        );
    }
    Ok(())
}
