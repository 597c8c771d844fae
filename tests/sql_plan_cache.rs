//! The plan cache: a query shape is planned once and run with each
//! statement's values; DDL, settings and functions whose value changes
//! never let a cached plan answer for what it no longer means.

mod common;
use common::{query_in, run_in, BoxError};

use widesql::{Db, DbOptions, PlanCacheStats, Session};

fn open() -> Result<(tempfile::TempDir, Db), BoxError> {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    Ok((dir, db))
}

/// A database with table `t (_key, n)` holding `('a', 1)`, and a session.
fn one_row_table() -> Result<(tempfile::TempDir, Db, Session), BoxError> {
    let (dir, db) = open()?;
    let session = db.session();
    run_in(
        &session,
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT); INSERT INTO t VALUES ('a', 1)",
    )?;
    Ok((dir, db, session))
}

/// Rows of `sql` through `Session::run` (the last statement's).
fn run_rows(session: &Session, sql: &str) -> Result<Vec<Vec<String>>, BoxError> {
    let outputs = common::runtime().block_on(session.run(sql))?;
    let output = outputs.last().ok_or("no output")?;
    common::rows_of(&output.batches)
}

/// The answer to `sql` through `Session::sql`, as a table with its header.
fn pretty(session: &Session, sql: &str) -> Result<String, BoxError> {
    let batches = common::batches_in(session, sql)?;
    Ok(datafusion::arrow::util::pretty::pretty_format_batches(&batches)?.to_string())
}

fn rows(values: &[&[&str]]) -> Vec<Vec<String>> {
    values
        .iter()
        .map(|r| r.iter().map(|v| v.to_string()).collect())
        .collect()
}

/// A session with its own cache switched off, to compare answers with.
fn uncached(db: &Db) -> Result<Session, BoxError> {
    let session = db.session();
    run_in(&session, "SET widesql.plan_cache = off")?;
    Ok(session)
}

/// Runs `check` `rounds` times on each of 4 threads at once, each with a
/// session of its own.
fn on_threads(
    db: &Db,
    rounds: usize,
    check: &(dyn Fn(&Session) -> Result<(), BoxError> + Sync),
) -> Result<(), BoxError> {
    std::thread::scope(|scope| -> Result<(), BoxError> {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let session = db.session();
                scope.spawn(move || -> Result<(), BoxError> {
                    for _ in 0..rounds {
                        check(&session)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for thread in threads {
            thread.join().map_err(|_| "a thread panicked")??;
        }
        Ok(())
    })
}

fn delta(before: PlanCacheStats, after: PlanCacheStats) -> (u64, u64) {
    (after.hits - before.hits, after.misses - before.misses)
}

#[test]
fn one_shape_is_planned_once_and_answers_for_each_value() -> Result<(), BoxError> {
    let (_dir, db) = open()?;
    let session = db.session();
    run_in(
        &session,
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT, s VARCHAR);
         INSERT INTO t VALUES ('a', 1, 'x'), ('b', 2, 'y'), ('c', 3, 'z')",
    )?;
    let before = session.plan_cache_stats();
    for (bound, expected) in [(1, "b,c"), (2, "c"), (0, "a,b,c"), (3, "")] {
        let sql = format!("SELECT _key FROM t WHERE n > {bound} ORDER BY _key");
        for found in [query_in(&session, &sql)?, run_rows(&session, &sql)?] {
            let keys: Vec<String> = found.into_iter().map(|r| r[0].clone()).collect();
            assert_eq!(keys.join(","), expected, "{sql}");
        }
    }
    // One miss for the shape, then every statement of it is a hit.
    assert_eq!(delta(before, session.plan_cache_stats()), (7, 1));
    // Another session of the database shares the plans.
    let other = db.session();
    let before = other.plan_cache_stats();
    assert_eq!(
        query_in(&other, "SELECT _key FROM t WHERE n > 1 ORDER BY _key")?,
        rows(&[&["b"], &["c"]])
    );
    assert_eq!(delta(before, other.plan_cache_stats()), (1, 0));
    Ok(())
}

#[test]
fn a_dataframe_of_a_cached_plan_runs_again_and_sees_new_rows() -> Result<(), BoxError> {
    let (_dir, _db, session) = one_row_table()?;
    let sql = "SELECT count(*) AS c FROM t WHERE n >= 1";
    query_in(&session, sql)?;
    let runtime = common::runtime();
    let frame = runtime.block_on(session.sql(sql))?.into_dataframe()?;
    // The DataFrame holds the plan made already: collect only runs it.
    let logical = frame.logical_plan().display().to_string();
    assert!(logical.starts_with("Planned"), "{logical}");
    run_in(&session, "INSERT INTO t VALUES ('b', 2)")?;
    for _ in 0..2 {
        let batches = runtime.block_on(frame.clone().collect())?;
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)?.to_string();
        assert!(text.contains("| 2 |"), "{text}");
    }
    // Operations added to the DataFrame run on top of the cached plan.
    let filtered = runtime.block_on(
        frame
            .filter(datafusion::prelude::col("c").gt(datafusion::prelude::lit(5)))?
            .collect(),
    )?;
    assert_eq!(filtered.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    Ok(())
}

/// A shape without values keeps its physical plan; each run of it, also
/// from threads at once, answers as a session without the cache does,
/// after writes and DDL too. (A TopK sort is among the shapes: its plan is
/// not kept.)
#[test]
fn shapes_without_values_answer_as_new_plans_after_writes_and_ddl() -> Result<(), BoxError> {
    let (_dir, db, session) = one_row_table()?;
    let uncached = uncached(&db)?;
    let shapes = [
        "SELECT 1",
        "SELECT 'x' AS a, count(*), sum(n) FROM t",
        "SELECT * FROM t ORDER BY _key",
        "SELECT n % 3 AS m, count(*) FROM t GROUP BY n % 3 ORDER BY m",
        "SELECT _key FROM t ORDER BY n DESC LIMIT 2",
        "SELECT min(n), max(n) FROM t",
    ];
    let same_answers = |session: &Session| -> Result<(), BoxError> {
        for sql in shapes {
            let expected = query_in(&uncached, sql)?;
            assert_eq!(query_in(session, sql)?, expected, "{sql}");
            assert_eq!(run_rows(session, sql)?, expected, "{sql}");
        }
        Ok(())
    };
    for round in 0..3 {
        same_answers(&session)?;
        run_in(
            &session,
            &format!(
                "INSERT INTO t VALUES ('k{round}', {round}), ('j{round}', {})",
                round * 7
            ),
        )?;
    }
    let before = session.plan_cache_stats();
    same_answers(&session)?;
    assert_eq!(delta(before, session.plan_cache_stats()).1, 0, "all cached");
    // Runs of one kept plan at once, each with its own copy.
    on_threads(&db, 10, &same_answers)?;
    run_in(
        &session,
        "ALTER TABLE t ADD COLUMN s VARCHAR; UPDATE t SET s = 'x'",
    )?;
    let star = query_in(&session, "SELECT * FROM t ORDER BY _key")?;
    assert!(
        star.iter().all(|row| row.len() == 3 && row[2] == "x"),
        "{star:?}"
    );
    same_answers(&session)?;
    Ok(())
}

/// Shapes with values in their filters keep one physical plan and run a
/// copy of it with each statement's values: every answer, through `sql`,
/// `run` and a prepared statement, from threads at once and after writes,
/// is a session's without the cache.
#[test]
fn shapes_with_values_answer_for_each_value() -> Result<(), BoxError> {
    let (_dir, db, session) = one_row_table()?;
    run_in(
        &session,
        "ALTER TABLE t ADD COLUMN s VARCHAR;
         INSERT INTO t VALUES ('b', 2, 'x'), ('c', 3, 'y'), ('d', 4, 'x'), ('e', 5, NULL),
                              ('f', 6, 'z'), ('g', 7, 'y')",
    )?;
    let uncached = uncached(&db)?;
    let shapes = |a: i64, b: i64| {
        [
            format!("SELECT _key FROM t WHERE n = {a} ORDER BY _key"),
            format!("SELECT _key FROM t WHERE n IN ({a}, {b}) ORDER BY _key"),
            format!("SELECT _key FROM t WHERE n NOT IN ({a}, {b}, 100) ORDER BY _key"),
            format!("SELECT _key FROM t WHERE n IN ({a}, {b}, 100, 101, 102) ORDER BY _key"),
            format!("SELECT count(*) FROM t WHERE n BETWEEN {a} AND {b}"),
            format!("SELECT s, count(*) FROM t WHERE s <> 'x' AND n > {a} GROUP BY s ORDER BY s"),
            format!("SELECT _key FROM t WHERE n * 2 > {b} OR s = 'y' ORDER BY _key"),
            format!("SELECT _key FROM t WHERE _key > 'b' AND n < {b} ORDER BY _key"),
        ]
    };
    let values = [(1, 3), (2, 6), (4, 5), (7, 1), (3, 3)];
    let same_answers = |session: &Session| -> Result<(), BoxError> {
        for (a, b) in values {
            for sql in shapes(a, b) {
                let expected = query_in(&uncached, &sql)?;
                assert_eq!(query_in(session, &sql)?, expected, "{sql}");
                assert_eq!(run_rows(session, &sql)?, expected, "{sql}");
            }
        }
        Ok(())
    };
    same_answers(&session)?;
    let before = session.plan_cache_stats();
    same_answers(&session)?;
    assert_eq!(delta(before, session.plan_cache_stats()).1, 0, "all cached");
    let prepared = common::runtime().block_on(
        session.prepare("SELECT _key FROM t WHERE n IN ($1, $2) OR s = $3 ORDER BY _key"),
    )?;
    for (a, b) in values {
        let s = if a % 2 == 0 { "x" } else { "z" };
        let params = vec![a.into(), b.into(), s.into()];
        let rows = common::rows_of(&common::runtime().block_on(prepared.query(params))?)?;
        let sql = format!("SELECT _key FROM t WHERE n IN ({a}, {b}) OR s = '{s}' ORDER BY _key");
        assert_eq!(rows, query_in(&uncached, &sql)?, "{sql}");
    }
    on_threads(&db, 1, &same_answers)?;
    run_in(
        &session,
        "INSERT INTO t VALUES ('h', 3, 'x'); DELETE FROM t WHERE _key = 'c'",
    )?;
    same_answers(&session)?;
    // A shape's first values are ones that would let the optimiser drop a
    // sort (equal bounds, equal values in a union) or a limit (values
    // that leave no row): its plan is made for values unknown.
    run_in(
        &session,
        "INSERT INTO t VALUES ('i', 4, 'q'), ('j', 4, 'q')",
    )?;
    for runs in [
        [
            "SELECT _key FROM t WHERE n BETWEEN 3 AND 3 ORDER BY n, _key",
            "SELECT _key FROM t WHERE n BETWEEN 1 AND 7 ORDER BY n, _key",
        ],
        [
            "SELECT _key, n FROM t WHERE n = 5 UNION ALL SELECT _key, n FROM t WHERE n = 5 ORDER BY n",
            "SELECT _key, n FROM t WHERE n = 5 UNION ALL SELECT _key, n FROM t WHERE n = 2 ORDER BY n",
        ],
        [
            "SELECT _key FROM t WHERE n = 1 AND n = 2 LIMIT 1",
            "SELECT _key FROM t WHERE n = 4 AND n = 4 LIMIT 1",
        ],
    ] {
        for sql in runs {
            let (expected, rows) = (query_in(&uncached, sql)?, query_in(&session, sql)?);
            match sql.contains("LIMIT") {
                // Which row a limit keeps is not fixed.
                true => assert_eq!(rows.len(), expected.len(), "{sql}"),
                false => assert_eq!(rows, expected, "{sql}"),
            }
        }
    }
    Ok(())
}

#[test]
fn ddl_of_every_kind_replans_what_it_changed() -> Result<(), BoxError> {
    let (_dir, db) = open()?;
    let session = db.session();
    let star = "SELECT * FROM t WHERE _key >= 'a' ORDER BY _key";
    run_in(
        &session,
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT); INSERT INTO t VALUES ('a', 1)",
    )?;
    assert_eq!(query_in(&session, star)?, rows(&[&["a", "1"]]));

    run_in(
        &session,
        "ALTER TABLE t ADD COLUMN s VARCHAR; UPDATE t SET s = 'x'",
    )?;
    assert_eq!(query_in(&session, star)?, rows(&[&["a", "1", "x"]]));

    run_in(&session, "ALTER TABLE t DROP COLUMN n")?;
    assert_eq!(query_in(&session, star)?, rows(&[&["a", "x"]]));

    run_in(&session, "ALTER TABLE t RENAME TO t2")?;
    assert!(query_in(&session, star).is_err(), "t is gone");
    run_in(
        &session,
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, d DOUBLE, b BOOLEAN)
             WITH ('cf.max_versions' = '3');
         INSERT INTO t VALUES ('a', 1.5, true)",
    )?;
    assert_eq!(query_in(&session, star)?, rows(&[&["a", "1.5", "true"]]));

    run_in(
        &session,
        "DROP TABLE t;
         CREATE TABLE t (_key VARCHAR PRIMARY KEY, page VARCHAR, lang VARCHAR)
             WITH ('page.locality_group' = 'blobs');
         INSERT INTO t VALUES ('a', 'p', 'en')",
    )?;
    assert_eq!(query_in(&session, star)?, rows(&[&["a", "p", "en"]]));

    // A GC policy change: fewer versions are visible.
    let versions = "SELECT count(*) FROM cells('t') WHERE _key = 'a'";
    run_in(
        &session,
        "DROP TABLE t;
         CREATE TABLE t (_key VARCHAR PRIMARY KEY, v VARCHAR) WITH ('cf.max_versions' = '3');
         SET widesql.write_timestamp = 10; INSERT INTO t VALUES ('a', '1');
         SET widesql.write_timestamp = 20; INSERT INTO t VALUES ('a', '2');
         SET widesql.write_timestamp = DEFAULT",
    )?;
    let uncached = uncached(&db)?;
    let first = query_in(&session, versions)?;
    assert_eq!(first, rows(&[&["2"]]));
    assert_eq!(first, query_in(&uncached, versions)?);
    run_in(&session, "ALTER TABLE t SET ('cf.max_versions' = '1')")?;
    let after = query_in(&session, versions)?;
    assert_eq!(after, query_in(&uncached, versions)?);
    assert_ne!(first, after, "the GC policy change shows");
    Ok(())
}

#[test]
fn functions_whose_value_changes_are_evaluated_every_time() -> Result<(), BoxError> {
    let (_dir, _db, session) = one_row_table()?;
    let now = "SELECT CAST(now() AS VARCHAR) FROM t WHERE n = 1";
    let first = query_in(&session, now)?;
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_ne!(first, query_in(&session, now)?, "now() moves on");
    let random = "SELECT random() FROM t WHERE n = 1";
    assert_ne!(query_in(&session, random)?, query_in(&session, random)?);
    Ok(())
}

#[test]
fn a_shape_is_planned_for_the_types_of_its_values() -> Result<(), BoxError> {
    let (_dir, db) = open()?;
    let session = db.session();
    run_in(
        &session,
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT, s VARCHAR);
         INSERT INTO t VALUES ('1', 5, '5'), ('2', 6, '6.5')",
    )?;
    let uncached = uncached(&db)?;
    // The same text with a number, a fraction and a string where a key,
    // a number column and a text column are compared.
    for sql in [
        "SELECT _key FROM t WHERE _key = '1'",
        "SELECT _key FROM t WHERE _key = 1",
        "SELECT _key FROM t WHERE n = 5",
        "SELECT _key FROM t WHERE n = 5.5",
        "SELECT _key FROM t WHERE n = '5'",
        "SELECT _key FROM t WHERE n < 5.5",
        "SELECT _key FROM t WHERE s = '6.5'",
        "SELECT _key FROM t WHERE s = 5",
        "SELECT _key FROM t WHERE _key IN ('1', '2') AND n BETWEEN 5 AND 5.5",
    ] {
        let cached = query_in(&session, sql).map_err(|e| e.to_string());
        let again = query_in(&session, sql).map_err(|e| e.to_string());
        let plain = query_in(&uncached, sql).map_err(|e| e.to_string());
        assert_eq!(cached, plain, "{sql}");
        assert_eq!(again, plain, "{sql}, cached");
    }
    // A number compared with text (DataFusion compares them as numbers,
    // and fails on '6.5') is planned every time.
    let before = session.plan_cache_stats();
    for _ in 0..2 {
        let answer = query_in(&session, "SELECT _key FROM t WHERE s = 7");
        assert!(answer.is_err(), "{answer:?}");
    }
    assert_eq!(delta(before, session.plan_cache_stats()), (0, 2));
    Ok(())
}

#[test]
fn the_cache_is_bounded_and_reported() -> Result<(), BoxError> {
    let (_dir, _db, session) = one_row_table()?;
    session.set_plan_cache_limits(2, 1 << 30);
    for column in ["n", "_key", "n + 1", "n * 2"] {
        query_in(&session, &format!("SELECT {column} FROM t WHERE n > 0"))?;
    }
    // Each shape is one entry, or two when its text holds literals that
    // are no values (`n + 1`): one for its text, one for its parsed form.
    let stats = session.plan_cache_stats();
    assert_eq!(stats.entries, 2);
    assert!(stats.evictions >= 4, "{stats:?}");
    // The most recently used shapes stayed.
    let before = session.plan_cache_stats();
    query_in(&session, "SELECT n * 2 FROM t WHERE n > 5")?;
    assert_eq!(delta(before, session.plan_cache_stats()), (1, 0));
    let before = session.plan_cache_stats();
    query_in(&session, "SELECT n FROM t WHERE n > 5")?;
    assert_eq!(delta(before, session.plan_cache_stats()), (0, 1));
    // A bound in bytes below one plan's estimate keeps none.
    session.set_plan_cache_limits(100, 10);
    assert_eq!(session.plan_cache_stats().entries, 0);
    assert!(session.plan_cache_stats().bytes <= 10);

    session.set_plan_cache_limits(100, 1 << 30);
    query_in(&session, "SELECT n FROM t WHERE n > 0")?;
    let shown = query_in(&session, "SHOW widesql.plan_cache")?;
    let stats = session.plan_cache_stats();
    assert_eq!(
        shown,
        vec![vec![
            stats.hits.to_string(),
            stats.misses.to_string(),
            stats.entries.to_string(),
            stats.bytes.to_string(),
            stats.evictions.to_string(),
        ]]
    );
    // Off for a session: its statements neither hit nor miss.
    run_in(&session, "SET widesql.plan_cache = off")?;
    let before = session.plan_cache_stats();
    query_in(&session, "SELECT n FROM t WHERE n > 0")?;
    assert_eq!(delta(before, session.plan_cache_stats()), (0, 0));
    assert!(run_in(&session, "SET widesql.plan_cache = sometimes").is_err());
    Ok(())
}

#[test]
fn settings_and_views_of_a_session_keep_its_plans_apart() -> Result<(), BoxError> {
    let (_dir, db) = open()?;
    let session = db.session();
    run_in(
        &session,
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT); INSERT INTO t VALUES ('a', 1), ('b', 2)",
    )?;
    run_in(&session, "CREATE VIEW v AS SELECT _key FROM t WHERE n = 1")?;
    let sql = "SELECT * FROM v WHERE _key >= 'a'";
    assert_eq!(query_in(&session, sql)?, rows(&[&["a"]]));
    run_in(
        &session,
        "DROP VIEW v; CREATE VIEW v AS SELECT _key FROM t WHERE n = 2",
    )?;
    assert_eq!(query_in(&session, sql)?, rows(&[&["b"]]));

    // A setting that changes what a query means: how identifiers read.
    let other = db.session();
    run_in(
        &other,
        "CREATE TABLE u (_key VARCHAR PRIMARY KEY, \"N\" BIGINT, n BIGINT);
         INSERT INTO u VALUES ('a', 10, 20)",
    )?;
    let read = "SELECT N FROM u WHERE n > 0";
    assert_eq!(query_in(&other, read)?, rows(&[&["20"]]));
    run_in(
        &other,
        "SET datafusion.sql_parser.enable_ident_normalization = false",
    )?;
    assert_eq!(query_in(&other, read)?, rows(&[&["10"]]));

    // Reading a session's catalog or memory pool changes nothing it
    // plans with: its statements go on using the shared plans.
    let third = db.session();
    query_in(&third, read)?;
    let _ = (third.memory_pool(), third.catalog_list());
    let before = third.plan_cache_stats();
    query_in(&third, read)?;
    assert_eq!(delta(before, third.plan_cache_stats()), (1, 0));
    // A session whose DataFusion context was handed out plans apart: what
    // its names resolve to may have changed there.
    let _ = third.context();
    let before = third.plan_cache_stats();
    query_in(&third, read)?;
    assert_eq!(delta(before, third.plan_cache_stats()), (0, 1));
    Ok(())
}

#[test]
fn unsigned_values_result_names_and_own_parameters_are_as_without_the_cache() -> Result<(), BoxError>
{
    let (_dir, db) = open()?;
    let session = db.session();
    let uncached = uncached(&db)?;
    run_in(
        &session,
        "CREATE TABLE u (_key VARCHAR PRIMARY KEY, k BIGINT UNSIGNED);
         INSERT INTO u VALUES ('a', 1), ('b', 2), ('c', 18446744073709551615);
         CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT);
         INSERT INTO t VALUES ('a', 1), ('b', 7)",
    )?;
    for sql in [
        // Unsigned values past i64::MAX.
        "SELECT count(*) FROM u WHERE k >= 9223372036854775808",
        "SELECT count(*) FROM u WHERE k IN (1, 18446744073709551615)",
        // Result columns keep the names their literals give them.
        "SELECT n > 5, n = 1 FROM t WHERE n > 0 ORDER BY n",
    ] {
        for _ in 0..2 {
            assert_eq!(pretty(&session, sql)?, pretty(&uncached, sql)?, "{sql}");
        }
    }
    // A statement's own parameters are bound by its caller, not by the cache.
    let runtime = common::runtime();
    let bound = runtime.block_on(async {
        session
            .sql("SELECT _key FROM t WHERE n = $1 AND n < 10")
            .await?
            .into_dataframe()?
            .with_param_values(vec![datafusion::common::ScalarValue::from(7i64)])?
            .collect()
            .await
            .map_err(widesql::Error::from)
    })?;
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&bound)?.to_string();
    assert!(text.contains("| b "), "{text}");
    assert!(!text.contains("| a "), "{text}");
    Ok(())
}

#[test]
fn views_and_registered_tables_are_read_as_they_are_now() -> Result<(), BoxError> {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    let (_dir, _db, session) = one_row_table()?;
    run_in(
        &session,
        "CREATE VIEW clock AS SELECT CAST(now() AS VARCHAR) AS at FROM t WHERE n = 1",
    )?;
    let first = query_in(&session, "SELECT at FROM clock WHERE at > ''")?;
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_ne!(
        first,
        query_in(&session, "SELECT at FROM clock WHERE at > ''")?
    );

    let ctx = session.context().clone();
    let batch = |v: i64| -> Result<RecordBatch, BoxError> {
        let schema = Schema::new(vec![Field::new("id", DataType::Int64, false)]);
        Ok(RecordBatch::try_new(
            std::sync::Arc::new(schema),
            vec![std::sync::Arc::new(Int64Array::from(vec![v]))],
        )?)
    };
    ctx.register_batch("ext", batch(1)?)?;
    let sql = "SELECT id FROM ext WHERE id > 0";
    assert_eq!(query_in(&session, sql)?, rows(&[&["1"]]));
    ctx.deregister_table("ext")?;
    ctx.register_batch("ext", batch(2)?)?;
    assert_eq!(query_in(&session, sql)?, rows(&[&["2"]]));
    Ok(())
}

#[test]
fn a_cached_plan_keeps_the_key_range_of_its_values() -> Result<(), BoxError> {
    let (_dir, db) = open()?;
    let session = db.session();
    run_in(
        &session,
        "CREATE TABLE i (k INT PRIMARY KEY, v INT);
         INSERT INTO i VALUES (1, 1), (50, 2), (200, 3);
         CREATE TABLE d (day DATE PRIMARY KEY, v INT);
         INSERT INTO d VALUES ('2024-01-01', 1), ('2024-02-01', 2)",
    )?;
    let runtime = common::runtime();
    for (sql, keys) in [
        // An expression in the select list: no key lookup, the cache's.
        ("SELECT v + 1 FROM i WHERE k BETWEEN 10 AND 100", "keys="),
        ("SELECT v + 1 FROM d WHERE day >= '2024-01-15'", "keys="),
    ] {
        for _ in 0..2 {
            let plan = runtime.block_on(async {
                session
                    .sql(sql)
                    .await?
                    .into_dataframe()?
                    .create_physical_plan()
                    .await
                    .map_err(widesql::Error::from)
            })?;
            let text = datafusion::physical_plan::displayable(plan.as_ref())
                .indent(true)
                .to_string();
            let scan = text
                .lines()
                .find(|l| l.contains("WideScanExec"))
                .unwrap_or_default();
            assert!(
                scan.contains(keys) && !scan.contains("keys=all"),
                "{sql}: {text}"
            );
        }
        assert_eq!(query_in(&session, sql)?, rows(&[&["3"]]));
    }
    Ok(())
}

/// Rows of a prepared statement run with `params`.
fn prepared_rows(
    session: &Session,
    sql: &str,
    params: Vec<datafusion::common::ScalarValue>,
) -> Result<Vec<Vec<String>>, BoxError> {
    let runtime = common::runtime();
    let batches = runtime.block_on(async { session.prepare(sql).await?.query(params).await })?;
    common::rows_of(&batches)
}

/// Rows of a key lookup of one key, through one entry point.
type Lookup = dyn Fn(&Session, &str) -> Result<Vec<Vec<String>>, BoxError>;

#[test]
fn every_entry_point_runs_from_the_one_cache() -> Result<(), BoxError> {
    use datafusion::common::ScalarValue;
    let (_dir, db, session) = one_row_table()?;
    let other = db.session();
    // A key lookup read off the text (run, sql), parsed in a script, and
    // prepared (in Rust and in SQL): each shape is planned once, then
    // every statement of it is a hit, whichever session runs it.
    let lookups: [(&str, Box<Lookup>); 5] = [
        (
            "run",
            Box::new(|s, key| run_rows(s, &format!("SELECT n FROM t WHERE _key = '{key}'"))),
        ),
        (
            "sql",
            Box::new(|s, key| query_in(s, &format!("SELECT n FROM t WHERE _key = '{key}'"))),
        ),
        (
            "script",
            Box::new(|s, key| {
                run_rows(
                    s,
                    &format!("SELECT 1; SELECT n FROM t WHERE _key = '{key}'"),
                )
            }),
        ),
        (
            "prepare",
            Box::new(|s, key| {
                prepared_rows(
                    s,
                    "SELECT n FROM t WHERE _key = $1",
                    vec![ScalarValue::from(key)],
                )
            }),
        ),
        (
            "PREPARE",
            Box::new(|s, key| {
                run_in(s, "PREPARE get(VARCHAR) AS SELECT n FROM t WHERE _key = $1")?;
                let found = run_rows(s, &format!("EXECUTE get('{key}')"));
                run_in(s, "DEALLOCATE get")?;
                found
            }),
        ),
    ];
    for (entry, lookup) in &lookups {
        assert_eq!(lookup(&session, "a")?, rows(&[&["1"]]), "{entry}");
        let before = other.plan_cache_stats();
        assert_eq!(lookup(&other, "a")?, rows(&[&["1"]]), "{entry}");
        assert_eq!(lookup(&other, "zz")?, rows(&[]), "{entry}");
        let (hits, misses) = delta(before, other.plan_cache_stats());
        assert_eq!((hits >= 2, misses), (true, 0), "{entry}");
    }
    // INSERTs of literals, off the text, parsed and prepared.
    run_in(&session, "INSERT INTO t VALUES ('b', 2)")?;
    run_in(&session, "SELECT 1; INSERT INTO t VALUES ('c', 3)")?;
    let before = session.plan_cache_stats();
    run_in(&session, "INSERT INTO t VALUES ('d', 4)")?;
    run_in(&session, "SELECT 1; INSERT INTO t VALUES ('e', 5)")?;
    let runtime = common::runtime();
    let insert = runtime.block_on(session.prepare("INSERT INTO t VALUES ($1, $2)"))?;
    for (key, n) in [("f", 6i64), ("g", 7)] {
        runtime.block_on(insert.query(vec![ScalarValue::from(key), ScalarValue::from(n)]))?;
    }
    let (hits, misses) = delta(before, session.plan_cache_stats());
    assert_eq!(misses, 1, "the prepared INSERT's shape is planned once");
    assert!(hits >= 4, "{hits}");
    assert_eq!(
        query_in(
            &session,
            "SELECT string_agg(_key, '' ORDER BY _key), sum(n) FROM t"
        )?,
        rows(&[&["abcdefg", "28"]])
    );
    // DDL replans every form: a column dropped and added again is empty.
    run_in(
        &session,
        "ALTER TABLE t DROP COLUMN n; ALTER TABLE t ADD COLUMN n BIGINT",
    )?;
    let before = other.plan_cache_stats();
    for (entry, lookup) in &lookups {
        assert_eq!(lookup(&other, "b")?, rows(&[&[""]]), "{entry}");
    }
    let (_, misses) = delta(before, other.plan_cache_stats());
    assert!(
        misses >= 3,
        "text, parsed and prepared shapes are planned again"
    );
    Ok(())
}

#[test]
fn prepared_values_of_another_type_mean_what_they_mean_uncached() -> Result<(), BoxError> {
    use datafusion::common::ScalarValue;
    let (_dir, db) = open()?;
    let session = db.session();
    run_in(
        &session,
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT, x DOUBLE, i INT);
         INSERT INTO t VALUES ('1', 5, 0.5, 1000000000), ('2', 6, 1.5, -1)",
    )?;
    let uncached = uncached(&db)?;
    let cases: Vec<(&str, ScalarValue)> = vec![
        ("SELECT _key FROM t WHERE _key = $1", ScalarValue::from("1")),
        (
            "SELECT _key FROM t WHERE _key = $1",
            ScalarValue::from(1i64),
        ),
        (
            "SELECT _key FROM t WHERE _key = $1",
            ScalarValue::Int32(Some(2)),
        ),
        ("SELECT _key FROM t WHERE n = $1", ScalarValue::from(5i64)),
        (
            "SELECT _key FROM t WHERE n = $1",
            ScalarValue::Int32(Some(6)),
        ),
        ("SELECT _key FROM t WHERE n < $1", ScalarValue::from(5.5f64)),
        ("SELECT _key FROM t WHERE n = $1", ScalarValue::from("5")),
        ("SELECT _key FROM t WHERE x > $1", ScalarValue::from(1i64)),
        ("SELECT _key FROM t WHERE n = $1", ScalarValue::Int64(None)),
        // In arithmetic a value keeps its own type: INT * BIGINT is BIGINT.
        (
            "SELECT _key FROM t WHERE i * $1 > 0",
            ScalarValue::from(3i64),
        ),
        (
            "SELECT i + $1 AS s FROM t WHERE _key >= '1'",
            ScalarValue::from(2147483647i64),
        ),
    ];
    for (sql, value) in cases {
        for _ in 0..2 {
            let cached =
                prepared_rows(&session, sql, vec![value.clone()]).map_err(|e| e.to_string());
            let plain =
                prepared_rows(&uncached, sql, vec![value.clone()]).map_err(|e| e.to_string());
            assert_eq!(cached, plain, "{sql} with {value:?}");
        }
    }
    // A function whose value changes is evaluated at each run.
    let runtime = common::runtime();
    let random = runtime.block_on(session.prepare("SELECT random() FROM t WHERE n > $1"))?;
    let draws: Vec<String> = (0..3)
        .map(|_| {
            let batches = runtime.block_on(random.query(vec![ScalarValue::from(5i64)]))?;
            Ok(datafusion::arrow::util::pretty::pretty_format_batches(&batches)?.to_string())
        })
        .collect::<Result<_, BoxError>>()?;
    assert!(draws[0] != draws[1] || draws[1] != draws[2], "{draws:?}");
    Ok(())
}

#[test]
fn prepared_statements_resolve_names_and_types_as_they_are_now() -> Result<(), BoxError> {
    use datafusion::common::ScalarValue;
    let (_dir, db) = open()?;
    let session = db.session();
    // SQL PREPARE without declared types, run after its table was made
    // again with another type: the value is not cut to the old type.
    run_in(
        &session,
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT);
         PREPARE ins AS INSERT INTO t VALUES ($1, $2);
         PREPARE get AS SELECT _key FROM t WHERE n = $1;
         DROP TABLE t;
         CREATE TABLE t (_key VARCHAR PRIMARY KEY, n DOUBLE);
         EXECUTE ins('a', 2.5); INSERT INTO t VALUES ('b', 2)",
    )?;
    assert_eq!(
        query_in(&session, "SELECT n FROM t ORDER BY _key")?,
        rows(&[&["2.5"], &["2.0"]])
    );
    assert_eq!(run_rows(&session, "EXECUTE get(2.5)")?, rows(&[&["a"]]));
    assert_eq!(run_rows(&session, "EXECUTE get(2)")?, rows(&[&["b"]]));
    // A prepared statement after the default dataset changed reads the
    // table its names resolve to now, whatever its values.
    run_in(
        &session,
        "CREATE SCHEMA s2; CREATE TABLE s2.t (_key VARCHAR PRIMARY KEY, n DOUBLE);
         INSERT INTO s2.t VALUES ('a', 7)",
    )?;
    let runtime = common::runtime();
    let get = runtime.block_on(session.prepare("SELECT n FROM t WHERE _key = $1"))?;
    let read = |key: ScalarValue| -> Result<String, BoxError> {
        let batches = runtime.block_on(get.query(vec![key]))?;
        Ok(datafusion::arrow::util::pretty::pretty_format_batches(&batches)?.to_string())
    };
    assert!(read(ScalarValue::from("a"))?.contains("2.5"));
    run_in(&session, "SET datafusion.catalog.default_schema = 's2'")?;
    assert!(read(ScalarValue::from("a"))?.contains("| 7"));
    // A value the front door does not take (another type) reads the same table.
    assert!(read(ScalarValue::LargeUtf8(Some("a".into())))?.contains("| 7"));
    // Run again and again, then after the table was made again.
    for _ in 0..3 {
        assert!(read(ScalarValue::from("a"))?.contains("| 7"));
    }
    run_in(
        &session,
        "DROP TABLE s2.t; CREATE TABLE s2.t (_key VARCHAR PRIMARY KEY, n DOUBLE);
         INSERT INTO s2.t VALUES ('a', 8)",
    )?;
    assert!(read(ScalarValue::from("a"))?.contains("| 8"));
    Ok(())
}
