//! W12: a cluster on this machine. The W3 range reads, the W4 GROUP BY
//! and the W5 full scan on one process, then on a master whose table's
//! three tablets are on 3, 2 and 1 workers, with the bytes the loopback
//! interface carried for one run of each. The master and its workers run
//! in this process, each behind its own gRPC port on 127.0.0.1, so every
//! call between them crosses the network stack; on one 2-core machine
//! they share the cores, so the figure is the cluster's overhead, not a
//! speed-up.

use std::time::{Duration, Instant};

use widesql::Db;
use widesql_server::{
    ClusterSecret, MasterOptions, ServeOptions, Server, WorkerOptions, WorkerServer,
};

use crate::data::Page;
use crate::report::{duration, median_secs, times, MdTable, Ratios, Target};
use crate::systems::widesql::{bulk_load, open_db, Load, WidesqlSql, STATEMENT_ROWS};
use crate::systems::System;
use crate::workloads::{time_ranges, Config};
use crate::Res;

/// What one layout measured: the medians of W3, W4 and W5, and the
/// loopback bytes of one W4 and one W5.
struct Figures {
    w3: f64,
    w4: f64,
    w5: f64,
    w4_bytes: Option<u64>,
    w5_bytes: Option<u64>,
}

/// Bytes the loopback interface received since boot, from
/// `/proc/net/dev` (`None` where there is none).
fn loopback_bytes() -> Option<u64> {
    let dev = std::fs::read_to_string("/proc/net/dev").ok()?;
    let line = dev.lines().find(|l| l.trim_start().starts_with("lo:"))?;
    line.split_once(':')?
        .1
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The loopback bytes one run of `op` took.
fn bytes_of(mut op: impl FnMut() -> Res<()>) -> Res<Option<u64>> {
    let before = loopback_bytes();
    op()?;
    Ok(before
        .zip(loopback_bytes())
        .map(|(b, a)| a.saturating_sub(b)))
}

/// Measures W3, W4 and W5 on `system`, checking its answers against
/// `expected` (the one process's) when given.
fn measure(
    config: &Config,
    system: &mut WidesqlSql,
    expected: Option<&(Vec<(String, i64)>, i64)>,
) -> Res<(Figures, (Vec<(String, i64)>, i64))> {
    let answers = (system.per_language()?, system.sum_rank()?);
    if let Some(expected) = expected {
        if *expected != answers {
            return Err(
                format!("the cluster answers {answers:?}, one process {expected:?}").into(),
            );
        }
    }
    let w3 = time_ranges(config, system, config.rows)?;
    let w4 = median_secs(config.reps, || system.per_language().map(drop))?;
    let w5 = median_secs(config.reps, || system.sum_rank().map(drop))?;
    let w4_bytes = bytes_of(|| system.per_language().map(drop))?;
    let w5_bytes = bytes_of(|| system.sum_rank().map(drop))?;
    let figures = Figures {
        w3,
        w4,
        w5,
        w4_bytes,
        w5_bytes,
    };
    Ok((figures, answers))
}

/// Runs W12; see the module documentation.
pub fn w12(config: &Config, pages: &[Page], ratios: &mut Ratios) -> Res<()> {
    let rt = &config.runtime;
    let mut one = WidesqlSql::open(
        &config.fresh("w12-master")?,
        config.cache_bytes,
        rt.clone(),
        "pages",
        true,
        Load::InsertValues(STATEMENT_ROWS),
    )?;
    bulk_load(one.db(), pages)?;
    let db = one.db().clone();
    let (alone, expected) = measure(config, &mut one, None)?;

    let secret = ClusterSecret::new("the-benchmark-cluster-secret")?;
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let master = rt.block_on(Server::start(
        db.clone(),
        ServeOptions {
            listen: loopback,
            master: Some(MasterOptions::new(secret.clone())),
            ..ServeOptions::default()
        },
    ))?;
    let mut workers: Vec<(Db, WorkerServer)> = Vec::new();
    for i in 0..3 {
        let worker_db = open_db(
            &config.fresh(&format!("w12-worker-{i}"))?,
            config.cache_bytes,
        )?;
        let options = WorkerOptions {
            listen: loopback,
            advertise: None,
            master: master.local_addr().to_string(),
            secret: secret.clone(),
            tls: None,
            tls_ca: None,
            insecure: false,
        };
        let server = rt.block_on(WorkerServer::start(worker_db.clone(), options))?;
        workers.push((worker_db, server));
    }
    let urls: Vec<String> = workers
        .iter()
        .map(|(_, w)| format!("http://{}", w.local_addr()))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while db.workers().up().len() < 3 {
        if Instant::now() > deadline {
            return Err("the workers did not join".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    // Three tablets of about a third of the pages each.
    let mut keys: Vec<&str> = pages.iter().map(|p| p.key.as_str()).collect();
    keys.sort_unstable();
    let third = keys.len() / 3;
    let (second, last) = (keys[third.max(1)], keys[(2 * third).max(2)]);
    let admin = db.session();
    let run = |sql: String| -> Res<()> {
        rt.block_on(admin.run(&sql))?;
        Ok(())
    };
    run(format!("ALTER TABLE pages SPLIT AT ('{second}', '{last}')"))?;
    let first = keys[0];
    let moves: [Vec<(&str, &str)>; 3] = [
        vec![
            (first, urls[0].as_str()),
            (second, urls[1].as_str()),
            (last, urls[2].as_str()),
        ],
        vec![(last, urls[1].as_str())],
        vec![(second, urls[0].as_str()), (last, urls[0].as_str())],
    ];
    let mut table = MdTable::new(
        "W12 a cluster on this machine: master and workers in one process, tablets on 3, 2 and 1 workers",
        &[
            "layout",
            "W3 range reads",
            "W4 GROUP BY",
            "W5 full scan",
            "W4 vs one process",
            "W5 vs one process",
            "W4 bytes on loopback",
            "W5 bytes on loopback",
        ],
    );
    let bytes = |b: Option<u64>| b.map_or("-".to_string(), |b| format!("{:.1} KB", b as f64 / 1e3));
    let mut row = |layout: String, f: &Figures| {
        table.row(vec![
            layout,
            duration(f.w3),
            duration(f.w4),
            duration(f.w5),
            times(alone.w4 / f.w4),
            times(alone.w5 / f.w5),
            bytes(f.w4_bytes),
            bytes(f.w5_bytes),
        ]);
    };
    row("one process".into(), &alone);
    for (step, moves) in moves.iter().enumerate() {
        for (at, worker) in moves {
            run(format!(
                "ALTER TABLE pages MOVE TABLET AT ('{at}') TO '{worker}'"
            ))?;
        }
        let mut cluster = WidesqlSql::on(db.clone(), rt.clone(), "pages");
        let (figures, _) = measure(config, &mut cluster, Some(&expected))?;
        let count = 3 - step;
        row(
            format!(
                "master + {count} worker{}",
                if count > 1 { "s" } else { "" }
            ),
            &figures,
        );
        if count == 3 {
            ratios.add(
                "w12.w4_3_workers_vs_one_process",
                alone.w4 / figures.w4,
                Some(Target::AtLeast(0.7)),
            );
            ratios.add(
                "w12.w5_3_workers_vs_one_process",
                alone.w5 / figures.w5,
                Some(Target::AtLeast(0.7)),
            );
        }
    }
    table.print();
    for (_, worker) in workers {
        rt.block_on(worker.shutdown())?;
    }
    rt.block_on(master.shutdown())?;
    Ok(())
}
