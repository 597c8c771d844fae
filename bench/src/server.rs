//! W10: widesql served over Arrow Flight SQL on loopback, next to
//! PostgreSQL (Debian's `postgresql` package, started here in a temporary
//! data directory, called with `tokio-postgres`) and to widesql embedded
//! (what the protocol costs).
//!
//! For 1, 8 and 32 clients, each system runs point reads, ~100-row key
//! ranges and single-row inserts for a fixed time, one kind at a time
//! (with 1 client, also an empty round trip: what the protocol costs
//! before any work); every client has a connection (and a session) of its
//! own. A point read is timed twice: as each protocol's usual client sends
//! it (Flight SQL's `GetFlightInfo` then `DoGet`, PostgreSQL's prepare
//! then bind and run: two round trips each), and in one round trip
//! (`DoGet` of the statement as its ticket; a statement PostgreSQL
//! prepared once per connection). Each
//! measurement runs in up to three rounds (`--reps`), the systems taking
//! turns in each; the table shows the medians of the rounds' throughput
//! and p50/p99 latency, and the lowest and highest p50 of a round; after each insert run, every
//! acknowledged row is counted back, and a missing one stops the run. Then
//! a full-table `DoGet` is timed against the same query collected
//! embedded. Both sides run with their defaults: every write durable when
//! it returns (widesql's immediate durability, PostgreSQL's synchronous
//! commit).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{CommandStatementQuery, ProstMessageExt};
use arrow_flight::Ticket;
use futures::TryStreamExt;
use prost::Message;
use tonic::transport::{Channel, Endpoint};
use widesql_server::{ServeOptions, Server};

use crate::report::{median, median_of, rate, MdTable, Ratios, Target};
use crate::workloads::Config;
use crate::Res;

/// Rows of the table every system reads (at most).
const MAX_ROWS: usize = 100_000;
/// Client counts measured.
const CLIENTS: [usize; 3] = [1, 8, 32];
/// The most rounds of each measurement (`--reps`, at most this many): the
/// p50 of one 3 s run moves by a third between runs on a 2-core machine.
const MAX_ROUNDS: usize = 3;

/// One kind of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    /// One call that reads nothing: what a round trip costs.
    RoundTrip,
    Point,
    /// A point read in one round trip: Flight SQL's `DoGet` of a ticket
    /// that is the statement itself; PostgreSQL's statement prepared once
    /// per connection, then bound and run.
    PointOneTrip,
    Range,
    Insert,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::RoundTrip => "empty round trip",
            Op::Point => "point read",
            Op::PointOneTrip => "point read, one round trip",
            Op::Range => "~100-row range",
            Op::Insert => "single-row insert",
        }
    }
}

/// A client's connection.
enum Conn {
    Flight(FlightSqlServiceClient<Channel>),
    /// With the point read prepared once (for [`Op::PointOneTrip`]).
    Postgres(tokio_postgres::Client, Option<tokio_postgres::Statement>),
    Embedded(widesql::Session),
}

fn key(i: usize) -> String {
    format!("k{i:08}")
}

impl Conn {
    /// Runs one operation: a read of key `i` (or the 100 keys from it), or
    /// the insert of `new_key`. Returns the rows read or written.
    async fn run(&mut self, op: Op, i: usize, new_key: &str) -> Res<usize> {
        let (sql, params): (String, Vec<String>) = match op {
            Op::RoundTrip => ("SELECT 1".into(), Vec::new()),
            Op::Point | Op::PointOneTrip => (
                format!("SELECT n, body FROM kv WHERE _key = '{}'", key(i)),
                vec![key(i)],
            ),
            Op::Range => (
                format!(
                    "SELECT n FROM kv WHERE _key >= '{}' AND _key < '{}'",
                    key(i),
                    key(i + 100)
                ),
                vec![key(i), key(i + 100)],
            ),
            Op::Insert => (
                format!("INSERT INTO kv VALUES ('{new_key}', {i}, 'inserted')"),
                vec![new_key.to_string()],
            ),
        };
        match self {
            // A catalog call's `GetFlightInfo`, answered without a plan;
            // PostgreSQL's simple query protocol, one message each way.
            Conn::Flight(client) if op == Op::RoundTrip => {
                client.get_table_types().await?;
                Ok(0)
            }
            Conn::Flight(client) if op == Op::Insert => {
                Ok(usize::try_from(client.execute_update(sql, None).await?)?)
            }
            Conn::Flight(client) if op == Op::PointOneTrip => {
                let query = CommandStatementQuery {
                    query: sql,
                    transaction_id: None,
                };
                ticket_rows(client, Ticket::new(query.as_any().encode_to_vec())).await
            }
            Conn::Flight(client) => flight_rows(client, sql).await,
            Conn::Embedded(session) => {
                let batches = session.sql(&sql).await?.collect().await?;
                Ok(batches.iter().map(|b| b.num_rows()).sum())
            }
            Conn::Postgres(client, prepared) => {
                let n = i64::try_from(i)?;
                Ok(match op {
                    Op::PointOneTrip => {
                        let statement = match prepared {
                            Some(statement) => statement,
                            None => prepared.insert(
                                client
                                    .prepare("SELECT n, body FROM kv WHERE k = $1")
                                    .await?,
                            ),
                        };
                        client.query(&*statement, &[&params[0]]).await?.len()
                    }
                    Op::RoundTrip => client.simple_query(&sql).await?.len(),
                    Op::Point => client
                        .query("SELECT n, body FROM kv WHERE k = $1", &[&params[0]])
                        .await?
                        .len(),
                    Op::Range => client
                        .query(
                            "SELECT n FROM kv WHERE k >= $1 AND k < $2",
                            &[&params[0], &params[1]],
                        )
                        .await?
                        .len(),
                    Op::Insert => usize::try_from(
                        client
                            .execute(
                                "INSERT INTO kv VALUES ($1, $2, 'inserted')",
                                &[&params[0], &n],
                            )
                            .await?,
                    )?,
                })
            }
        }
    }
}

/// The rows of a query run through `GetFlightInfo` and `DoGet`.
async fn flight_rows(client: &mut FlightSqlServiceClient<Channel>, sql: String) -> Res<usize> {
    let info = client.execute(sql, None).await?;
    let mut rows = 0;
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.ok_or("an endpoint without a ticket")?;
        rows += ticket_rows(client, ticket).await?;
    }
    Ok(rows)
}

/// The rows `DoGet` of `ticket` streams.
async fn ticket_rows(client: &mut FlightSqlServiceClient<Channel>, ticket: Ticket) -> Res<usize> {
    let mut rows = 0;
    let mut stream = client.do_get(ticket).await?;
    while let Some(batch) = stream.try_next().await? {
        rows += batch.num_rows();
    }
    Ok(rows)
}

/// How a system is reached.
#[derive(Clone)]
enum System {
    Flight(std::net::SocketAddr),
    Postgres(u16),
    Embedded(widesql::Db),
}

impl System {
    fn name(&self) -> &'static str {
        match self {
            System::Flight(_) => "widesql (Flight SQL)",
            System::Postgres(_) => "PostgreSQL",
            System::Embedded(_) => "widesql (embedded)",
        }
    }

    async fn connect(&self) -> Res<Conn> {
        Ok(match self {
            System::Flight(addr) => {
                let channel = Endpoint::from_shared(format!("http://{addr}"))?
                    .connect()
                    .await?;
                let mut client = FlightSqlServiceClient::new(channel);
                client.handshake("bench", "").await?;
                Conn::Flight(client)
            }
            System::Postgres(port) => {
                let (client, connection) = tokio_postgres::connect(
                    &format!("host=127.0.0.1 port={port} user=bench dbname=postgres"),
                    tokio_postgres::NoTls,
                )
                .await?;
                tokio::spawn(connection);
                Conn::Postgres(client, None)
            }
            System::Embedded(db) => Conn::Embedded(db.session()),
        })
    }

    /// Rows whose key starts with `prefix`.
    async fn count_prefix(&self, prefix: &str) -> Res<usize> {
        let end = format!("{prefix}\u{7f}");
        match self.connect().await? {
            Conn::Postgres(client, _) => {
                let row = client
                    .query_one(
                        "SELECT count(*) FROM kv WHERE k >= $1 AND k < $2",
                        &[&prefix, &end],
                    )
                    .await?;
                Ok(usize::try_from(row.get::<_, i64>(0))?)
            }
            mut conn => {
                let sql =
                    format!("SELECT _key FROM kv WHERE _key >= '{prefix}' AND _key < '{end}'");
                match &mut conn {
                    Conn::Flight(client) => flight_rows(client, sql).await,
                    Conn::Embedded(session) => {
                        let batches = session.sql(&sql).await?.collect().await?;
                        Ok(batches.iter().map(|b| b.num_rows()).sum())
                    }
                    Conn::Postgres(..) => Err("unreachable".into()),
                }
            }
        }
    }
}

/// Throughput and latencies of one run.
struct Measured {
    ops_per_sec: f64,
    p50_micros: f64,
    p99_micros: f64,
    acknowledged_writes: usize,
}

/// `clients` clients doing `op` for `secs` seconds; inserted keys start
/// with `prefix`.
async fn measure(
    system: &System,
    clients: usize,
    op: Op,
    secs: f64,
    rows: usize,
    prefix: &str,
) -> Res<Measured> {
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(system.connect().await?);
    }
    // One deadline for all: a client that waits for a core does not run
    // past it (the embedded clients' calls never wait for the network, so
    // they yield after every operation to take turns).
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for (c, mut conn) in conns.into_iter().enumerate() {
        let prefix = format!("{prefix}{c:03}-");
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ (c as u64 + 1);
            let mut n = 0usize;
            while Instant::now() < deadline {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let i = (state % (rows.saturating_sub(100).max(1) as u64)) as usize;
                let new_key = format!("{prefix}{n:08}");
                let began = Instant::now();
                conn.run(op, i, &new_key).await?;
                latencies.push(began.elapsed().as_secs_f64() * 1e6);
                n += 1;
                tokio::task::yield_now().await;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(latencies)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let acknowledged_writes = if op == Op::Insert { all.len() } else { 0 };
    all.sort_by(f64::total_cmp);
    let at = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    Ok(Measured {
        ops_per_sec: all.len() as f64 / elapsed,
        p50_micros: at(0.5),
        p99_micros: at(0.99),
        acknowledged_writes,
    })
}

/// A PostgreSQL server in a temporary data directory, stopped on drop.
struct Postgres {
    child: Child,
    port: u16,
    dir: PathBuf,
    bin: PathBuf,
    root: bool,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // `pg_ctl` signals the server itself (the child may be `runuser`).
        let _ = pg_command(&self.bin, "pg_ctl", self.root)
            .args(["stop", "-m", "fast", "-D"])
            .arg(self.dir.join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The folder of `initdb` and `postgres`: on the PATH, else Debian's.
fn postgres_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .find(|d| d.join("initdb").exists() && d.join("postgres").exists())
    });
    on_path.or_else(|| {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|d| d.join("initdb").exists())
            .collect();
        versions.sort();
        versions.pop()
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program` as a command, run as the `postgres` user when this process is
/// root (PostgreSQL refuses to run as root).
fn pg_command(bin: &Path, program: &str, root: bool) -> Command {
    let path = bin.join(program);
    match root {
        true => {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        }
        false => Command::new(path),
    }
}

impl Postgres {
    /// Starts PostgreSQL with a table `kv` of `rows` rows; `None` (said
    /// why) when it is not installed.
    fn start(runtime: &tokio::runtime::Runtime, rows: usize) -> Res<Option<Postgres>> {
        let Some(bin) = postgres_bin() else {
            println!("\nW10: PostgreSQL not measured: no initdb/postgres found (Debian: apt-get install postgresql)");
            return Ok(None);
        };
        let root = is_root();
        let dir = std::env::temp_dir().join(format!("widesql-bench-pg-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        if root {
            let owned = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status()?;
            if !owned.success() {
                return Err("cannot give the PostgreSQL directory to the postgres user".into());
            }
        }
        let data = dir.join("data");
        let init = pg_command(&bin, "initdb", root)
            .args(["-A", "trust", "-U", "bench", "-E", "UTF8", "-D"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !init.success() {
            return Err(format!("initdb failed in {}", data.display()).into());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = pg_command(&bin, "postgres", root)
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=100",
                "-c",
                "shared_buffers=256MB",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let postgres = Postgres {
            child,
            port,
            dir,
            bin,
            root,
        };
        runtime.block_on(async {
            let started = Instant::now();
            let client = loop {
                match System::Postgres(port).connect().await {
                    Ok(Conn::Postgres(client, _)) => break client,
                    _ if started.elapsed() < Duration::from_secs(30) => {
                        tokio::time::sleep(Duration::from_millis(100)).await
                    }
                    _ => {
                        return Err::<(), Box<dyn std::error::Error + Send + Sync>>(
                            "PostgreSQL did not start".into(),
                        )
                    }
                }
            };
            client
                .batch_execute(&format!(
                    "CREATE TABLE kv (k text PRIMARY KEY, n bigint, body text); \
                     INSERT INTO kv SELECT 'k' || lpad(g::text, 8, '0'), g, repeat('x', 100) \
                     FROM generate_series(0, {}) g; ANALYZE kv",
                    rows - 1
                ))
                .await?;
            Ok(())
        })?;
        Ok(Some(postgres))
    }
}

/// W10.
pub fn w10(config: &Config, ratios: &mut Ratios) -> Res<()> {
    let rows = config.rows.clamp(200, MAX_ROWS);
    let secs = config.concurrent_secs;
    let runtime = &config.runtime;
    let db = widesql::Db::open(config.fresh("w10-widesql")?)?;
    runtime.block_on(db.session().run(&format!(
        "CREATE TABLE kv (_key VARCHAR PRIMARY KEY, n BIGINT, body VARCHAR); \
         INSERT INTO kv SELECT 'k' || lpad(CAST(value AS VARCHAR), 8, '0'), value, repeat('x', 100) \
         FROM generate_series(0, {})",
        rows - 1
    )))?;
    let options = ServeOptions {
        listen: "127.0.0.1:0".parse()?,
        ..ServeOptions::default()
    };
    let server = runtime.block_on(Server::start(db.clone(), options))?;
    let postgres = Postgres::start(runtime, rows)?;
    let mut systems = vec![
        System::Flight(server.local_addr()),
        System::Embedded(db.clone()),
    ];
    if let Some(pg) = &postgres {
        systems.push(System::Postgres(pg.port));
    }
    let rounds = config.reps.clamp(1, MAX_ROUNDS);
    let mut table = MdTable::new(
        format!(
            "W10: clients on loopback, {rows} rows of ~120 bytes, {secs} s per run, \
             medians of {rounds} rounds"
        ),
        &[
            "system",
            "clients",
            "operation",
            "ops/s",
            "p50",
            "p50, rounds' lowest–highest",
            "p99",
        ],
    );
    let mut p50 = std::collections::HashMap::new();
    let mut phase = 0;
    for clients in CLIENTS {
        // The empty round trip is the floor under every other call.
        let ops: &[Op] = match clients {
            1 => &[
                Op::RoundTrip,
                Op::Point,
                Op::PointOneTrip,
                Op::Range,
                Op::Insert,
            ],
            _ => &[Op::Point, Op::PointOneTrip, Op::Range, Op::Insert],
        };
        for &op in ops {
            // The systems take turns in each round, so that a drift of the
            // machine between rounds lands on all of them.
            let mut runs: Vec<Vec<Measured>> = systems.iter().map(|_| Vec::new()).collect();
            for _ in 0..rounds {
                for (system, runs) in systems.iter().zip(&mut runs) {
                    phase += 1;
                    let prefix = format!("w{phase:03}-");
                    let measured =
                        runtime.block_on(measure(system, clients, op, secs, rows, &prefix))?;
                    if op == Op::Insert {
                        let found = runtime.block_on(system.count_prefix(&prefix))?;
                        if found != measured.acknowledged_writes {
                            return Err(format!(
                                "{}: {} inserts were acknowledged, {found} are there",
                                system.name(),
                                measured.acknowledged_writes
                            )
                            .into());
                        }
                    }
                    runs.push(measured);
                }
            }
            for (system, runs) in systems.iter().zip(runs) {
                let of = |f: fn(&Measured) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
                let p50s = of(|m| m.p50_micros);
                let (low, high) = p50s
                    .iter()
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
                        (l.min(v), h.max(v))
                    });
                let median_p50 = median(p50s);
                table.row(vec![
                    system.name().into(),
                    clients.to_string(),
                    op.name().into(),
                    rate(median(of(|m| m.ops_per_sec))),
                    format!("{median_p50:.0} µs"),
                    format!("{low:.0}–{high:.0} µs"),
                    format!("{:.0} µs", median(of(|m| m.p99_micros))),
                ]);
                p50.insert((system.name(), clients, op), median_p50);
            }
        }
    }
    table.print();
    for clients in [1, 8] {
        for (op, name) in [
            (Op::Point, "point"),
            (Op::PointOneTrip, "point_one_trip"),
            (Op::Insert, "insert"),
        ] {
            if let (Some(ours), Some(theirs)) = (
                p50.get(&("widesql (Flight SQL)", clients, op)),
                p50.get(&("PostgreSQL", clients, op)),
            ) {
                ratios.add(
                    &format!("w10.{name}_p50_flight_vs_postgres_{clients}_clients"),
                    ours / theirs,
                    Some(Target::AtMost(1.5)),
                );
            }
        }
    }
    // A full-table DoGet against the same query collected embedded (the
    // table holds the inserted rows too now).
    let scan = "SELECT _key, n, body FROM kv";
    let rows = runtime.block_on(async {
        let batches = db
            .session()
            .sql("SELECT _key FROM kv")
            .await?
            .collect()
            .await?;
        Ok::<_, widesql::Error>(batches.iter().map(|b| b.num_rows()).sum::<usize>())
    })?;
    let flight = System::Flight(server.local_addr());
    let embedded_secs = median_of(config.reps, || {
        let started = Instant::now();
        let session = db.session();
        let read: usize = runtime.block_on(async {
            let batches = session.sql(scan).await?.collect().await?;
            Ok::<_, widesql::Error>(batches.iter().map(|b| b.num_rows()).sum())
        })?;
        if read != rows {
            return Err(format!("the embedded scan read {read} rows of {rows}").into());
        }
        Ok(started.elapsed().as_secs_f64())
    })?;
    let mut conn = runtime.block_on(flight.connect())?;
    let mut flight_times = Vec::new();
    for _ in 0..config.reps {
        let started = Instant::now();
        let read = match &mut conn {
            Conn::Flight(client) => runtime.block_on(flight_rows(client, scan.to_string()))?,
            _ => return Err("not a Flight SQL connection".into()),
        };
        if read != rows {
            return Err(format!("the DoGet scan read {read} rows of {rows}").into());
        }
        flight_times.push(started.elapsed().as_secs_f64());
    }
    let flight_secs = median(flight_times);
    let mut scans = MdTable::new(
        format!("W10: the whole table ({rows} rows) read once"),
        &["path", "time", "rows/s"],
    );
    scans.row(vec![
        "embedded `sql().collect()`".into(),
        format!("{:.1} ms", embedded_secs * 1e3),
        rate(rows as f64 / embedded_secs),
    ]);
    scans.row(vec![
        "Flight SQL `DoGet`".into(),
        format!("{:.1} ms", flight_secs * 1e3),
        rate(rows as f64 / flight_secs),
    ]);
    scans.print();
    ratios.add(
        "w10.doget_scan_rate_vs_embedded",
        embedded_secs / flight_secs,
        Some(Target::AtLeast(0.7)),
    );
    drop(postgres);
    runtime.block_on(server.shutdown())?;
    Ok(())
}
