//! Crash safety: a child process writes and acknowledges, the parent kills
//! it with SIGKILL at a random moment, reopens the database and checks what
//! survived.
//!
//! The child runs, generation after generation:
//! - an embedded row mutation across three families in two locality
//!   groups, every cell carrying the generation;
//! - an SQL `INSERT` of 20 rows in one statement, and every fifth
//!   generation an `UPDATE` of those 20 rows;
//! - DDL: `CREATE TABLE d<gen>`, an `INSERT`, `ALTER TABLE … ADD COLUMN …
//!   DEFAULT` (which fills every row before the column appears), `CREATE OR
//!   REPLACE TABLE latest AS SELECT`, and for the table three generations
//!   back `ALTER TABLE … RENAME` and `DROP TABLE`.
//!
//! Beside them a thread compacts the database over and over (every family
//! keeps one version, so each pass removes the versions the writes hid).
//! Every fourth child is killed at a random moment within the time the
//! last child took to open the database, so mostly while it opens it and
//! sled recovers its log.
//!
//! It prints a line for each write after the call returned (writes use the
//! default durability, immediate). After every kill the parent checks: the
//! database opens; every acknowledged write is there; no row is torn (all
//! cells of a mutation or none, all rows of a statement or none); every
//! table is whole, none is both renamed and not, none that was dropped
//! comes back; and no table data is left without a table.
//!
//! The run counts only if the children acknowledged at least
//! [`MIN_ACKS_PER_KIND`] of each kind of operation (row writes, statements,
//! alters, renames, drops, compaction passes) for every 20 kills, and
//! some kills came before a child was ready.
//!
//! `cargo test --test crash_safety` kills 20 times;
//! `WIDESQL_CRASH_KILLS=500 WIDESQL_CRASH_SEED=7` runs longer.

#![expect(
    clippy::expect_used,
    reason = "a test harness: a failed expectation is the test failing"
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{query, run};
use libtest_mimic::{Arguments, Failed, Trial};
use widesql::{Db, FamilySpec, ReadOptions, RowMutation, RowSet, TableSpec};

/// Set in the child's environment: the database directory.
const CHILD_DB: &str = "WIDESQL_CRASH_CHILD_DB";
/// Set in the child's environment: its first generation.
const CHILD_FIRST_GEN: &str = "WIDESQL_CRASH_CHILD_GEN";
/// Rows the embedded writes cycle through.
const ROW_KEYS: u64 = 64;
/// Rows of one INSERT statement.
const STATEMENT_ROWS: u64 = 20;
/// Generations apart that a child renames and drops its tables.
const DROP_LAG: u64 = 3;
/// Each child's generations start at a multiple of this.
const GENERATIONS_PER_CHILD: u64 = 1_000_000;
/// Every this many kills (and after the last) the parent reads every table
/// back; after the other kills it reads the tables of the child it just
/// killed, and checks the others only by name. A child touches only its own
/// generations' tables, so the others can change only by a fault this
/// periodic full check still finds, and the check no longer grows with the
/// number of kills so far.
const FULL_CHECK_EVERY: u64 = 25;
/// Every this many kills, one comes while the child opens the database.
const KILL_AT_OPEN_EVERY: u64 = 4;
/// Acknowledgements of each kind that every 20 kills must have produced.
const MIN_ACKS_PER_KIND: usize = 2;
/// The kinds counted.
const KINDS: [&str; 6] = ["row", "stmt", "alter", "rename", "drop", "compact"];

fn main() {
    if let (Ok(dir), Ok(first)) = (std::env::var(CHILD_DB), std::env::var(CHILD_FIRST_GEN)) {
        child(Path::new(&dir), first.parse().expect("a generation number"));
        return;
    }
    let args = Arguments::from_args();
    let trials = vec![Trial::test(
        "killed_writers_lose_no_acknowledged_write_and_tear_nothing",
        || parent().map_err(|e| Failed::from(e.to_string())),
    )];
    libtest_mimic::run(&args, trials).exit();
}

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

// ---------------------------------------------------------------------------
// The child
// ---------------------------------------------------------------------------

fn child(dir: &Path, first: u64) {
    let db = Db::open(dir).expect("the child opens the database");
    let rows = db
        .default_dataset()
        .and_then(|d| d.open_table("rows"))
        .expect("table rows");
    let blob = "b".repeat(1024);
    // "ready" first: a compaction pass of a small database can end (and
    // print) before this thread would.
    println!("ready");
    let compactor = db.clone();
    std::thread::spawn(move || {
        for pass in 0.. {
            compactor.compact().expect("compaction");
            println!("compact {pass}");
        }
    });
    for gen in first.. {
        let key = format!("r{:02}", gen % ROW_KEYS);
        let g = gen.to_string();
        rows.mutate_row(
            key.as_bytes(),
            &RowMutation::new()
                .set("a", "g", g.as_str())
                .set("b", "g", g.as_str())
                .set("b", "blob", blob.as_str())
                .set("c", "g", g.as_str()),
        )
        .expect("row mutation");
        println!("row {gen}");

        let values: Vec<String> = (0..STATEMENT_ROWS)
            .map(|i| format!("({gen}, {i}, 'p')"))
            .collect();
        run(
            &db,
            &format!("INSERT INTO stmts VALUES {}", values.join(", ")),
        )
        .expect("insert");
        println!("stmt {gen}");
        if gen % 5 == 0 {
            run(
                &db,
                &format!("UPDATE stmts SET payload = 'u' WHERE gen = {gen}"),
            )
            .expect("update");
            println!("update {gen}");
        }

        run(
            &db,
            &format!("CREATE TABLE d{gen} (k INT PRIMARY KEY, v VARCHAR)"),
        )
        .expect("create");
        println!("create {gen}");
        run(&db, &format!("INSERT INTO d{gen} VALUES (1, 'x')")).expect("fill");
        println!("fill {gen}");
        run(
            &db,
            &format!("ALTER TABLE d{gen} ADD COLUMN w BIGINT DEFAULT 7"),
        )
        .expect("alter");
        println!("alter {gen}");
        run(
            &db,
            &format!("CREATE OR REPLACE TABLE latest AS SELECT CAST({gen} AS BIGINT) AS gen"),
        )
        .expect("replace");
        println!("latest {gen}");
        if gen >= first + DROP_LAG {
            let old = gen - DROP_LAG;
            println!("renaming {old}");
            run(&db, &format!("ALTER TABLE d{old} RENAME TO x{old}")).expect("rename");
            println!("rename {old}");
            println!("dropping {old}");
            run(&db, &format!("DROP TABLE x{old}")).expect("drop");
            println!("drop {old}");
        }
    }
}

// ---------------------------------------------------------------------------
// The parent
// ---------------------------------------------------------------------------

/// What the children acknowledged (and started), over every kill.
#[derive(Default)]
struct Acks {
    /// Per row key, the newest acknowledged generation.
    rows: BTreeMap<String, u64>,
    statements: BTreeSet<u64>,
    updates: BTreeSet<u64>,
    /// Per DDL step ("create", "fill", …), the generations acknowledged.
    ddl: BTreeMap<String, BTreeSet<u64>>,
    latest: Option<u64>,
    /// Every generation a child started.
    started: BTreeSet<u64>,
    /// Acknowledgements read.
    acknowledged: usize,
    /// Acknowledgements by kind.
    kinds: BTreeMap<String, usize>,
}

impl Acks {
    fn add(&mut self, line: &str) {
        let Some((what, gen)) = line.split_once(' ') else {
            return;
        };
        let Ok(gen) = gen.parse::<u64>() else { return };
        if !what.ends_with("ing") {
            self.acknowledged += 1;
            *self.kinds.entry(what.to_string()).or_default() += 1;
        }
        if what == "compact" {
            // A pass number, not a generation.
            return;
        }
        self.started.insert(gen);
        match what {
            "row" => {
                let key = format!("r{:02}", gen % ROW_KEYS);
                let newest = self.rows.entry(key).or_default();
                *newest = (*newest).max(gen);
            }
            "stmt" => {
                self.statements.insert(gen);
            }
            "update" => {
                self.updates.insert(gen);
            }
            "latest" => self.latest = self.latest.max(Some(gen)),
            step => {
                self.ddl.entry(step.to_string()).or_default().insert(gen);
            }
        }
    }

    fn did(&self, step: &str, gen: u64) -> bool {
        self.ddl.get(step).is_some_and(|s| s.contains(&gen))
    }

    fn count(&self) -> usize {
        self.acknowledged
    }
}

/// A small, seeded generator for kill times.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn parent() -> Res<()> {
    let kills = env_number("WIDESQL_CRASH_KILLS", 20);
    let seed = env_number("WIDESQL_CRASH_SEED", 1);
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("db");
    {
        let db = Db::open(&path)?;
        db.default_dataset()?.create_table(
            "rows",
            TableSpec::new()
                .with_family(FamilySpec::new("a").with_max_versions(1))
                .with_family(
                    FamilySpec::new("b")
                        .with_max_versions(1)
                        .with_locality_group("blobs"),
                )
                .with_family(FamilySpec::new("c").with_max_versions(1)),
        )?;
        run(
            &db,
            "CREATE TABLE stmts (gen BIGINT, i BIGINT, payload VARCHAR, PRIMARY KEY (gen, i))",
        )?;
    }
    let exe = std::env::current_exe()?;
    let mut acks = Acks::default();
    let mut killed_at_open = 0;
    // How long the last child took from its start to "ready": a kill
    // meant for the open comes at a random moment within it.
    let mut open_time = Duration::from_millis(20);
    for kill in 0..kills {
        let first = (kill + 1) * GENERATIONS_PER_CHILD;
        let spawned = std::time::Instant::now();
        let mut child = Command::new(&exe)
            .env(CHILD_DB, &path)
            .env(CHILD_FIRST_GEN, first.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            let mut line = String::new();
            // Only whole lines count: a line cut by the kill was not printed.
            while stdout.read_line(&mut line).unwrap_or(0) > 0 && line.ends_with('\n') {
                if tx.send(line.trim_end().to_string()).is_err() {
                    return;
                }
                line.clear();
            }
        });
        let mut ready = false;
        if kill % KILL_AT_OPEN_EVERY == KILL_AT_OPEN_EVERY - 1 {
            // While it opens (and recovers) the database.
            let micros = rng.below(open_time.as_micros().max(1) as u64);
            std::thread::sleep(Duration::from_micros(micros));
        } else {
            match lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) if line == "ready" => {
                    ready = true;
                    open_time = spawned.elapsed();
                }
                other => {
                    let _ = child.kill();
                    let output = child.wait_with_output()?;
                    return Err(format!(
                        "child {kill} did not start ({other:?}): {}",
                        String::from_utf8_lossy(&output.stderr)
                    )
                    .into());
                }
            }
            std::thread::sleep(Duration::from_millis(5 + rng.below(300)));
        }
        child.kill()?;
        let status = child.wait()?;
        reader.join().map_err(|_| "the reader thread panicked")?;
        let before = acks.count();
        for line in lines.try_iter() {
            ready |= line == "ready";
            acks.add(&line);
        }
        killed_at_open += u64::from(!ready);
        if status.success() {
            return Err(format!("child {kill} ended by itself").into());
        }
        let full = kill % FULL_CHECK_EVERY == 0 || kill + 1 == kills;
        let read_from = if full { 0 } else { first };
        check(&path, &acks, read_from)
            .map_err(|e| format!("after kill {kill} (seed {seed}): {e}"))?;
        eprintln!(
            "kill {kill}: {} new acknowledged writes",
            acks.count() - before
        );
    }
    println!(
        "crash: {kills} kills (seed {seed}, {killed_at_open} while opening), {} acknowledged writes checked ({:?}), 0 lost, 0 torn",
        acks.count(),
        acks.kinds
    );
    let least = MIN_ACKS_PER_KIND * (kills as usize).div_ceil(20);
    for kind in KINDS {
        let count = acks.kinds.get(kind).copied().unwrap_or(0);
        if count < least {
            return Err(format!(
                "the children acknowledged {count} {kind} operations, fewer than {least}: the run does not count"
            )
            .into());
        }
    }
    if kills >= KILL_AT_OPEN_EVERY && killed_at_open == 0 {
        return Err("no kill came while a child opened the database".into());
    }
    Ok(())
}

/// Reopens the database and checks everything the children acknowledged;
/// the contents of DDL tables only from generation `read_from` on.
fn check(path: &Path, acks: &Acks, read_from: u64) -> Res<()> {
    let db = Db::open(path).map_err(|e| format!("the database does not open: {e}"))?;

    // Embedded rows: never torn, never older than acknowledged.
    let rows = db.default_dataset()?.open_table("rows")?;
    let mut seen = BTreeMap::new();
    for row in rows.read_rows(&RowSet::all(), ReadOptions::new())? {
        let row = row?;
        let key = String::from_utf8(row.key.clone())?;
        let cells = ["a", "b", "c"].map(|f| row.value(f, b"g").map(<[u8]>::to_vec));
        if cells[0] != cells[1] || cells[1] != cells[2] || row.value("b", b"blob").is_none() {
            return Err(format!("row {key} is torn: {cells:?}").into());
        }
        let gen: u64 = String::from_utf8(cells[0].clone().ok_or("no generation")?)?.parse()?;
        seen.insert(key, gen);
    }
    for (key, acked) in &acks.rows {
        match seen.get(key) {
            Some(gen) if gen >= acked => {}
            other => {
                return Err(
                    format!("row {key}: acknowledged generation {acked}, found {other:?}").into(),
                )
            }
        }
    }

    // Statements: all 20 rows or none; acknowledged ones all there.
    let groups = query(
        &db,
        "SELECT gen, count(*), min(payload), max(payload) FROM stmts GROUP BY gen",
    )?;
    let mut statements = BTreeMap::new();
    for g in &groups {
        let gen: u64 = g[0].parse()?;
        if g[1] != STATEMENT_ROWS.to_string() || g[2] != g[3] {
            return Err(format!("statement {gen} is torn: {g:?}").into());
        }
        statements.insert(gen, g[2].clone());
    }
    for gen in &acks.statements {
        if !statements.contains_key(gen) {
            return Err(format!("acknowledged INSERT {gen} is lost").into());
        }
    }
    for gen in &acks.updates {
        if statements.get(gen).map(String::as_str) != Some("u") {
            return Err(format!("acknowledged UPDATE {gen} is lost").into());
        }
    }

    // DDL: every table whole, in exactly one of its states.
    let tables: BTreeSet<String> = query(
        &db,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
    )?
    .into_iter()
    .map(|r| r[0].clone())
    .collect();
    for gen in &acks.started {
        let (d, x) = (format!("d{gen}"), format!("x{gen}"));
        let (has_d, has_x) = (tables.contains(&d), tables.contains(&x));
        if has_d && has_x {
            return Err(format!("{d} exists both renamed and not").into());
        }
        if acks.did("drop", *gen) && (has_d || has_x) {
            return Err(format!("dropped table of generation {gen} is back").into());
        }
        if acks.did("rename", *gen) && !acks.did("dropping", *gen) && !has_x {
            return Err(format!("renamed table {x} is lost").into());
        }
        if acks.did("rename", *gen) && has_d {
            return Err(format!("renamed table {d} is back under its old name").into());
        }
        if acks.did("create", *gen) && !acks.did("renaming", *gen) && !has_d {
            return Err(format!("acknowledged table {d} is lost").into());
        }
        let name = if *gen < read_from {
            continue;
        } else if has_d {
            d
        } else if has_x {
            x
        } else {
            continue;
        };
        let columns = query(
            &db,
            &format!(
                "SELECT column_name FROM information_schema.columns WHERE table_name = '{name}'"
            ),
        )?;
        let has_w = columns.iter().any(|c| c[0] == "w");
        if acks.did("alter", *gen) && !has_w {
            return Err(format!("acknowledged ADD COLUMN of {name} is lost").into());
        }
        let contents = query(&db, &format!("SELECT * FROM {name}"))?;
        let want_fill = acks.did("fill", *gen);
        match contents.as_slice() {
            [] if !want_fill => {}
            [row] if row[0] == "1" && row[1] == "x" && (!has_w || row[2] == "7") => {}
            other => {
                return Err(format!("table {name} holds {other:?} (filled: {want_fill})").into())
            }
        }
    }
    if let Some(acked) = acks.latest {
        let latest = query(&db, "SELECT gen FROM latest")?;
        match latest.as_slice() {
            [row] if row[0].parse::<u64>()? >= acked => {}
            other => return Err(format!("latest holds {other:?}, acknowledged {acked}").into()),
        }
    }

    // No table data without a table.
    let mut ids = BTreeSet::new();
    for project in db.projects()? {
        for dataset in project.datasets()? {
            for table in dataset.tables()? {
                ids.insert(table.id().to_string());
            }
        }
    }
    for tree in db.storage_trees() {
        if let Some(rest) = tree.strip_prefix("t:") {
            let id = rest.split(':').next().unwrap_or_default();
            if !ids.contains(id) {
                return Err(format!("tree {tree} belongs to no table").into());
            }
        }
    }
    Ok(())
}
