//! Pushdown, proven by the scan counters: on a table of 100k rows, a `_key`
//! range query visits only the keys in the range, a projection reads only
//! its locality group, a LIMIT stops the scan early, and a large scan's
//! split is found once while nothing writes the table (every time for a
//! table with a TTL).

use widesql::{Db, DbOptions};

fn keys_read(db: &Db, group: &str) -> Result<u64, Box<dyn std::error::Error>> {
    keys_read_of(db, "pages", group)
}

fn keys_read_of(db: &Db, table: &str, group: &str) -> Result<u64, Box<dyn std::error::Error>> {
    Ok(db
        .open_table("default", "public", table)?
        .keys_read_per_group()?
        .into_iter()
        .find(|(g, _)| g == group)
        .map_or(0, |(_, n)| n))
}

/// What `EXPLAIN` shows of `SELECT count(n) FROM table` in `session`, and
/// the keys of the table's default group that planning it read.
async fn explain_count(
    db: &Db,
    session: &widesql::Session,
    table: &str,
) -> Result<(String, u64), Box<dyn std::error::Error>> {
    let before = keys_read_of(db, table, "default")?;
    let plan = session
        .sql(&format!("EXPLAIN SELECT count(n) FROM {table}"))
        .await?
        .collect()
        .await?;
    let plan = widesql_slt::rows_as_text(&plan)?.concat().join(" ");
    Ok((plan, keys_read_of(db, table, "default")? - before))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_pushdown_reads_only_matching_keys() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    let session = db.session();
    session
        .run(
            "CREATE TABLE pages (_key VARCHAR PRIMARY KEY, n BIGINT, body VARCHAR) \
             WITH ('blob.columns' = 'body', 'blob.locality_group' = 'blobs')",
        )
        .await?;
    session
        .run(
            "INSERT INTO pages SELECT 'k' || lpad(CAST(value AS VARCHAR), 6, '0'), value, 'body' \
             FROM generate_series(0, 99999)",
        )
        .await?;
    let count = |sql: &'static str| {
        let session = session.clone();
        async move {
            let batches = session.sql(sql).await?.collect().await?;
            let text = widesql_slt::rows_as_text(&batches)?;
            Ok::<String, widesql::Error>(text.concat().join(" "))
        }
    };
    assert_eq!(count("SELECT count(*) FROM pages").await?, "100000");

    // A range of 250 keys: one cell each in the default group.
    let before = keys_read(&db, "default")?;
    let blobs_before = keys_read(&db, "blobs")?;
    assert_eq!(
        count("SELECT count(n) FROM pages WHERE _key >= 'k050000' AND _key < 'k050250'").await?,
        "250"
    );
    let read = keys_read(&db, "default")? - before;
    assert!(
        (250..=260).contains(&read),
        "the range scan read {read} keys"
    );
    assert_eq!(
        keys_read(&db, "blobs")?,
        blobs_before,
        "the blobs group was not read"
    );

    // Points and prefixes.
    let before = keys_read(&db, "default")?;
    assert_eq!(
        count("SELECT n FROM pages WHERE _key IN ('k000007', 'k099999')").await?,
        "7 99999"
    );
    assert_eq!(
        count("SELECT count(*) FROM pages WHERE _key LIKE 'k0999%'").await?,
        "100"
    );
    let read = keys_read(&db, "default")? - before;
    assert!(read <= 110, "points and a 100-row prefix read {read} keys");

    // LIMIT stops the scan.
    let before = keys_read(&db, "default")?;
    assert_eq!(
        count("SELECT count(*) FROM (SELECT n FROM pages LIMIT 10)").await?,
        "10"
    );
    let read = keys_read(&db, "default")? - before;
    assert!(read < 1000, "a LIMIT 10 scan read {read} keys");

    // A large scan is split into key-range partitions.
    let session4 = widesql::Session::with_options(
        db.clone(),
        widesql::SessionOptions {
            target_partitions: Some(4),
            ..Default::default()
        },
    );
    let (plan, _) = explain_count(&db, &session4, "pages").await?;
    assert!(
        plan.contains("keys=all, groups=[default], partitions=4"),
        "{plan}"
    );

    // Finding the split reads the table (a sample and its first and last
    // keys); planning the scan again uses the split found, reading nothing,
    // until a batch writes the table.
    assert_eq!(explain_count(&db, &session4, "pages").await?.1, 0);
    session
        .run("INSERT INTO pages VALUES ('k100000', 100000, 'body')")
        .await?;
    let (plan, sampled) = explain_count(&db, &session4, "pages").await?;
    assert!(plan.contains("partitions=4"), "{plan}");
    assert!(
        sampled >= 4096,
        "planning after a write read {sampled} keys"
    );
    assert_eq!(explain_count(&db, &session4, "pages").await?.1, 0);
    session
        .run("DELETE FROM pages WHERE _key = 'k100000'")
        .await?;
    // Rows that age out leave no batch behind: a table with a TTL is
    // sampled every time its scan is planned.
    session
        .run("CREATE TABLE aged (_key VARCHAR PRIMARY KEY, n BIGINT) WITH ('cf.ttl' = '7d')")
        .await?;
    session
        .run(
            "INSERT INTO aged SELECT 'k' || lpad(CAST(value AS VARCHAR), 6, '0'), value \
             FROM generate_series(0, 4999)",
        )
        .await?;
    for _ in 0..2 {
        let (_, sampled) = explain_count(&db, &session4, "aged").await?;
        assert!(
            sampled >= 4096,
            "planning read {sampled} keys of a table with a TTL"
        );
    }
    let batches = session4
        .sql("SELECT count(n), sum(n) FROM pages")
        .await?
        .collect()
        .await?;
    assert_eq!(
        widesql_slt::rows_as_text(&batches)?.concat().join(" "),
        "100000 4999950000"
    );

    // A predicate that is not on the key reads everything (the control).
    let before = keys_read(&db, "default")?;
    assert_eq!(
        count("SELECT count(*) FROM pages WHERE n < 250").await?,
        "250"
    );
    assert!(keys_read(&db, "default")? - before >= 100_000);
    Ok(())
}
