//! The commit pipeline on the in-memory backend, whose flushes a test can
//! hold back or fail:
//! - writers that arrive while a flush runs share the next one;
//! - a failed flush fails exactly the writers of its group, nothing
//!   acknowledged before is lost (a restart from what was flushed has it),
//!   and the database then refuses writes until the process restarts;
//! - a flush stuck past the stall limit is an error naming it for its
//!   writer and for a writer queued behind it, and the database reports
//!   itself read-only until the flush returns;
//! - settling the store waits for the writes queued before it, also those
//!   whose writers gave up, and answers while writes are refused;
//! - a reader of another row does not wait for a writer's flush.

use std::sync::Arc;
use std::time::{Duration, Instant};

use widesql::internals::{lock_stripe, settle_held, Fault, MemoryBackend};
use widesql::{
    Db, DbOptions, ErrorKind, FamilySpec, Filter, Health, RowMutation, StorageError, Table,
    TableSpec,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn open(backend: &MemoryBackend, stall_limit: Duration) -> widesql::Result<Db> {
    Db::open_on_backend(
        "memory:group-commit",
        Arc::new(backend.clone()),
        DbOptions::new()
            .with_compaction_interval(None)
            .with_stall_limit(stall_limit),
    )
}

fn table(db: &Db) -> widesql::Result<Table> {
    match db.default_dataset()?.table("t")? {
        Some(table) => Ok(table),
        None => db
            .default_dataset()?
            .create_table("t", TableSpec::new().with_family(FamilySpec::new("f"))),
    }
}

fn write(table: &Table, key: &str) -> widesql::Result<()> {
    table.mutate_row(key.as_bytes(), &RowMutation::new().set("f", "v", key))
}

/// `n` keys `{prefix}{i}` on lock stripes apart from each other and from
/// the rows `taken`: a writer holds its row's stripe until its write is
/// answered, so a writer that shares one waits before it queues (stripes
/// are seeded per run, so keys fixed in advance would share one now and
/// then).
fn keys_apart(
    table: &Table,
    taken: &[&str],
    prefix: &str,
    n: usize,
) -> widesql::Result<Vec<String>> {
    let mut stripes = Vec::new();
    for key in taken {
        stripes.push(lock_stripe(table, key.as_bytes())?);
    }
    let mut keys = Vec::new();
    for i in 0.. {
        if keys.len() == n {
            break;
        }
        let key = format!("{prefix}{i}");
        let stripe = lock_stripe(table, key.as_bytes())?;
        if !stripes.contains(&stripe) {
            stripes.push(stripe);
            keys.push(key);
        }
    }
    Ok(keys)
}

fn exists(table: &Table, key: &str) -> widesql::Result<bool> {
    Ok(table.read_row(key.as_bytes(), &Filter::all())?.is_some())
}

/// Waits (up to 10 s) until `done` holds.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting until {what}").into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

#[test]
fn writers_that_arrive_during_a_flush_share_the_next_one() -> TestResult {
    let backend = MemoryBackend::new();
    let db = open(&backend, Duration::from_secs(60))?;
    let t = table(&db)?;
    let before = db.commit_stats();
    let flushes = backend.flushes();
    let rest_keys = keys_apart(&t, &["first"], "w", 7)?;
    let hold = backend.hold_flushes();
    std::thread::scope(|scope| -> TestResult {
        // The first writer's flush is held; seven more queue behind it.
        let first = scope.spawn(|| write(&t, "first"));
        wait_until("the first flush started", || {
            backend.flushes() == flushes + 1
        })?;
        let rest: Vec<_> = rest_keys
            .iter()
            .map(|key| {
                let t = t.clone();
                scope.spawn(move || write(&t, key))
            })
            .collect();
        wait_until("eight writes are waiting", || db.commit_stats().queued == 8)?;
        drop(hold);
        first.join().map_err(|_| "writer panicked")??;
        for writer in rest {
            writer.join().map_err(|_| "writer panicked")??;
        }
        Ok(())
    })?;
    let after = db.commit_stats();
    assert_eq!(after.jobs - before.jobs, 8);
    assert_eq!(after.flushes - before.flushes, 2, "{after:?}");
    assert_eq!(after.largest_group, 7, "{after:?}");
    let all: Vec<&str> = std::iter::once("first")
        .chain(rest_keys.iter().map(String::as_str))
        .collect();
    for key in &all {
        assert!(exists(&t, key)?);
    }
    // All eight were flushed: a restart from what was flushed has them.
    drop((t, db));
    let db = open(&backend.restart_from_flushed(), Duration::from_secs(60))?;
    let t = table(&db)?;
    for key in &all {
        assert!(exists(&t, key)?, "{key} lost");
    }
    Ok(())
}

#[test]
fn a_group_applies_in_arrival_order_and_a_refused_batch_fails_its_writer_only() -> TestResult {
    let backend = MemoryBackend::new();
    let db = open(&backend, Duration::from_secs(60))?;
    let t = table(&db)?;
    let flushes = backend.flushes();
    let keys = keys_apart(&t, &["first"], "x", 3)?;
    let hold = backend.hold_flushes();
    let outcomes = std::thread::scope(|scope| -> Result<_, Box<dyn std::error::Error>> {
        let first = scope.spawn(|| write(&t, "first"));
        wait_until("the first flush started", || {
            backend.flushes() == flushes + 1
        })?;
        // Three writers queue one after the other; the second one's batch
        // will be the second applied, and the store refuses it.
        let mut queued = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let t = t.clone();
            queued.push(scope.spawn(move || write(&t, key)));
            wait_until("the writer queued", || {
                db.commit_stats().queued == 2 + i as u64
            })?;
        }
        backend.inject(Fault::FailBatch(backend.batches() + 2));
        drop(hold);
        first.join().map_err(|_| "writer panicked")??;
        queued
            .into_iter()
            .map(|w| w.join().map_err(|_| "writer panicked".into()))
            .collect::<Result<Vec<widesql::Result<()>>, Box<dyn std::error::Error>>>()
    })?;
    let [x, y, z] = <[widesql::Result<()>; 3]>::try_from(outcomes).map_err(|_| "three writers")?;
    x?;
    z?;
    let error = y.err().ok_or("the refused batch succeeded")?;
    assert!(error.to_string().contains("injected fault"), "{error}");
    assert!(exists(&t, &keys[0])? && exists(&t, &keys[2])? && !exists(&t, &keys[1])?);
    // A refused batch is its writer's error only: the store goes on.
    assert_eq!(db.health(), Health::Healthy);
    write(&t, "after")?;
    Ok(())
}

#[test]
fn a_failed_flush_fails_exactly_its_group_and_loses_nothing_acknowledged() -> TestResult {
    let backend = MemoryBackend::new();
    let db = open(&backend, Duration::from_secs(60))?;
    let t = table(&db)?;
    write(&t, "before")?;
    let group_keys = keys_apart(&t, &["a"], "b", 3)?;
    let hold = backend.hold_flushes();
    let flushes = backend.flushes();
    let (first, group) = std::thread::scope(|scope| -> Result<_, Box<dyn std::error::Error>> {
        let first = scope.spawn(|| write(&t, "a"));
        wait_until("a's flush started", || backend.flushes() == flushes + 1)?;
        let group: Vec<_> = group_keys
            .iter()
            .map(|key| {
                let t = t.clone();
                scope.spawn(move || write(&t, key))
            })
            .collect();
        wait_until("b, c and d wait", || db.commit_stats().queued == 4)?;
        // a's flush succeeds; the next one, b's, c's and d's, fails.
        backend.inject(Fault::FailFlush(flushes + 2));
        drop(hold);
        let first = first.join().map_err(|_| "writer panicked")?;
        let group: Vec<widesql::Result<()>> = group
            .into_iter()
            .map(|w| w.join().map_err(|_| "writer panicked"))
            .collect::<Result<_, _>>()?;
        Ok((first, group))
    })?;
    first?;
    for outcome in group {
        let error = outcome
            .err()
            .ok_or("a write of the failed group succeeded")?;
        assert_eq!(error.kind(), ErrorKind::Storage);
        assert!(
            error
                .to_string()
                .contains("flush of this write's group failed"),
            "{error}"
        );
    }
    // The database refuses writes now, and says why; reads go on.
    let Health::ReadOnly { reason } = db.health() else {
        return Err("the database is still healthy".into());
    };
    assert!(reason.contains("a flush failed"), "{reason}");
    let refused = write(&t, "e").err().ok_or("a write was accepted")?;
    assert!(
        matches!(
            refused,
            widesql::Error::Storage(StorageError::ReadOnly { .. })
        ),
        "{refused}"
    );
    assert!(refused.to_string().contains("refuses writes"), "{refused}");
    assert!(exists(&t, "a")?);
    // Nothing queued can land any more: settling says so at once, where a
    // flush is refused.
    assert!(db.flush().is_err());
    settle_held(&db)?;
    // After a power loss, what was acknowledged is there; what the failed
    // flush should have made durable is not; the reopened database writes.
    drop((t, db));
    let db = open(&backend.restart_from_flushed(), Duration::from_secs(60))?;
    let t = table(&db)?;
    assert_eq!(db.health(), Health::Healthy);
    assert!(exists(&t, "before")? && exists(&t, "a")?);
    for key in group_keys.iter().map(String::as_str).chain(["e"]) {
        assert!(!exists(&t, key)?, "{key} survived");
    }
    write(&t, "after")?;
    assert!(exists(&t, "after")?);
    Ok(())
}

#[test]
fn a_stalled_flush_is_an_error_naming_it_and_stops_writes_until_it_returns() -> TestResult {
    let backend = MemoryBackend::new();
    let db = open(&backend, Duration::from_millis(200))?;
    let t = table(&db)?;
    write(&t, "before")?;
    let hold = backend.hold_flushes();
    let flushes = backend.flushes();
    let started = Instant::now();
    let (error, queued) = std::thread::scope(|scope| -> Result<_, Box<dyn std::error::Error>> {
        let stuck = scope.spawn(|| write(&t, "stuck"));
        wait_until("the flush started", || backend.flushes() == flushes + 1)?;
        // Queued behind the stuck flush: its own batch never ran.
        let behind = scope.spawn(|| write(&t, "behind"));
        let stuck = stuck.join().map_err(|_| "writer panicked")?;
        let behind = behind.join().map_err(|_| "writer panicked")?;
        Ok((stuck.err(), behind.err()))
    })?;
    assert!(started.elapsed() >= Duration::from_millis(200));
    for error in [error, queued] {
        let error = error.ok_or("a write returned")?;
        let widesql::Error::Storage(StorageError::Stalled { operation, .. }) = &error else {
            return Err(format!("not a stall: {error}").into());
        };
        assert!(operation.contains("flushing"), "{operation}");
        assert!(error.to_string().contains("refuses writes"), "{error}");
    }
    let Health::ReadOnly { reason } = db.health() else {
        return Err("the database is still healthy".into());
    };
    assert!(reason.contains("flushing") && reason.contains("has not returned"));
    // Later writes are refused at once; reads are served.
    let started = Instant::now();
    assert!(write(&t, "later").is_err());
    assert!(started.elapsed() < Duration::from_millis(200));
    assert!(db.flush().is_err());
    assert!(exists(&t, "before")?);
    // The write queued behind it may still land: settling waits behind
    // the stuck flush, and fails as stalled.
    let unsettled = settle_held(&db)
        .err()
        .ok_or("settled behind a stuck flush")?;
    assert!(
        matches!(
            unsettled,
            widesql::Error::Storage(StorageError::Stalled { .. })
        ),
        "{unsettled}"
    );
    // The flush returns after all: what follows is ordered after it, and
    // writes are served again. Once settled, the write whose writer gave
    // up has landed.
    drop(hold);
    settle_held(&db)?;
    assert!(exists(&t, "behind")?);
    wait_until("the database serves writes again", || {
        db.health() == Health::Healthy
    })?;
    write(&t, "after")?;
    assert!(exists(&t, "after")?);
    Ok(())
}

#[test]
fn a_reader_of_another_row_does_not_wait_for_a_writers_flush() -> TestResult {
    let backend = MemoryBackend::new();
    let db = open(&backend, Duration::from_secs(60))?;
    let t = table(&db)?;
    write(&t, "other")?;
    let hold = backend.hold_flushes();
    std::thread::scope(|scope| -> TestResult {
        let writer = scope.spawn(|| write(&t, "held"));
        wait_until("the write waits for its flush", || {
            db.commit_stats().queued == 1
        })?;
        // The writer holds its row's lock until its flush; another row
        // reads at once (two rows share a lock stripe once in 4,096 tries,
        // so one row might wait: the hold goes in any case).
        let reader = scope.spawn(|| exists(&t, "other"));
        let read = wait_until("the other row was read", || reader.is_finished());
        let queued = db.commit_stats().queued;
        drop(hold);
        read?;
        assert!(reader.join().map_err(|_| "reader panicked")??);
        assert_eq!(queued, 1, "the flush was not held");
        writer.join().map_err(|_| "writer panicked")??;
        Ok(())
    })?;
    assert!(exists(&t, "held")?);
    Ok(())
}

#[test]
fn eventual_writes_do_not_wait_for_a_flush() -> TestResult {
    let backend = MemoryBackend::new();
    let db = open(&backend, Duration::from_secs(60))?;
    let t = table(&db)?.with_durability(widesql::Durability::Eventual);
    let hold = backend.hold_flushes();
    // Answered after their apply: the held flush does not hold them.
    write(&t, "e1")?;
    write(&t, "e2")?;
    assert!(exists(&t, "e1")? && exists(&t, "e2")?);
    assert!(!exists_after_power_loss(&backend, "e1")?);
    drop(hold);
    // The third eventual batch since the last flush brings one.
    let flushes = backend.flushes();
    write(&t, "e3")?;
    wait_until("the third batch's flush ran", || {
        backend.flushes() == flushes + 1
    })?;
    write(&t, "e4")?;
    assert_eq!(backend.flushes(), flushes + 1);
    assert!(exists_after_power_loss(&backend, "e3")?);
    db.flush()?;
    drop((t, db));
    let db = open(&backend.restart_from_flushed(), Duration::from_secs(60))?;
    let t = table(&db)?;
    for key in ["e1", "e2", "e3", "e4"] {
        assert!(exists(&t, key)?, "{key} lost");
    }
    Ok(())
}

/// Whether `key` is in what the flushes made durable.
fn exists_after_power_loss(backend: &MemoryBackend, key: &str) -> widesql::Result<bool> {
    let db = open(&backend.restart_from_flushed(), Duration::from_secs(60))?;
    let found = match db.default_dataset()?.table("t")? {
        Some(t) => exists(&t, key)?,
        None => false,
    };
    Ok(found)
}

#[test]
fn eventual_batches_of_one_group_still_flush_after_every_third() -> TestResult {
    let backend = MemoryBackend::new();
    let db = open(&backend, Duration::from_secs(60))?;
    let t = table(&db)?;
    let eventual = t.with_durability(widesql::Durability::Eventual);
    let flushes = backend.flushes();
    let eventual_keys = keys_apart(&t, &["immediate"], "e", 7)?;
    let hold = backend.hold_flushes();
    std::thread::scope(|scope| -> TestResult {
        // An immediate write holds the commit thread in its flush while
        // seven eventual writes queue: they are applied as one group.
        let first = scope.spawn(|| write(&t, "immediate"));
        wait_until("the flush started", || backend.flushes() == flushes + 1)?;
        let queued: Vec<_> = eventual_keys
            .iter()
            .map(|key| {
                let eventual = eventual.clone();
                scope.spawn(move || write(&eventual, key))
            })
            .collect();
        wait_until("seven eventual writes wait", || {
            db.commit_stats().queued == 8
        })?;
        drop(hold);
        first.join().map_err(|_| "writer panicked")??;
        for writer in queued {
            writer.join().map_err(|_| "writer panicked")??;
        }
        Ok(())
    })?;
    // The held flush, then one after the third and one after the sixth.
    wait_until("two more flushes ran", || backend.flushes() == flushes + 3)?;
    assert_eq!(backend.flushes(), flushes + 3);
    Ok(())
}
