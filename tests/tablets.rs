//! Tablets: `SHOW TABLETS` lists a table's key ranges, a split is one
//! atomic catalog change that outlives a restart, a split key must be a
//! key of the table, a dropped table's tablets go with it, and splitting
//! and listing follow the grants.
//! (What a split does to queries and `EXPLAIN` is in
//! `sql_tests/tablets.slt`.)

mod common;

use widesql::{Db, ErrorKind, Session, SessionOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `SHOW TABLETS FROM table`, each row as `id start end served_by`.
async fn tablets(
    session: &Session,
    table: &str,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    common::lines(session, &format!("SHOW TABLETS FROM {table}")).await
}

/// The rows without their tablet ids.
fn ranges(listing: &[String]) -> Vec<String> {
    listing
        .iter()
        .map(|row| row.split_once(' ').map_or("", |(_, rest)| rest).to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_cuts_the_key_ranges_and_outlives_a_restart() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (first_id, listing) = {
        let db = Db::open(dir.path())?;
        let session = db.session();
        session
            .run(
                "CREATE TABLE pages (_key VARCHAR PRIMARY KEY, n BIGINT); \
                 CREATE TABLE events (region VARCHAR, at TIMESTAMP, PRIMARY KEY (region, at)); \
                 CREATE TABLE blobs (_key BYTEA PRIMARY KEY)",
            )
            .await?;
        // A table never split is one tablet, with the table's own id.
        let table_id = db
            .open_table("default", "public", "pages")?
            .id()
            .to_string();
        let before = tablets(&session, "pages").await?;
        assert_eq!(before, vec![format!("{table_id} NULL NULL local")]);

        // The split answers with the tablets it made.
        let made = common::lines(&session, "ALTER TABLE pages SPLIT AT ('m', 'it''s')").await?;
        assert_eq!(ranges(&made), vec!["'it''s' 'm' local", "'m' NULL local"]);
        let listing = tablets(&session, "pages").await?;
        assert_eq!(&listing[1..], made.as_slice());
        assert_eq!(
            ranges(&listing),
            vec!["NULL 'it''s' local", "'it''s' 'm' local", "'m' NULL local"]
        );
        // The first tablet keeps its id; the new ones have ids of their own.
        assert!(listing[0].starts_with(&table_id), "{listing:?}");
        let mut ids: Vec<&str> = listing.iter().filter_map(|r| r.split(' ').next()).collect();
        ids.dedup();
        assert_eq!(ids.len(), 3, "{listing:?}");

        session
            .run("ALTER TABLE events SPLIT AT (('eu', TIMESTAMP '2024-05-01 12:00:00'), 'us')")
            .await?;
        assert_eq!(
            ranges(&tablets(&session, "events").await?),
            vec![
                "NULL ('eu', TIMESTAMP '2024-05-01T12:00:00') local",
                "('eu', TIMESTAMP '2024-05-01T12:00:00') 'us' local",
                "'us' NULL local"
            ]
        );
        session.run("ALTER TABLE blobs SPLIT AT (X'00ff')").await?;
        assert_eq!(
            ranges(&tablets(&session, "blobs").await?),
            vec!["NULL X'00FF' local", "X'00FF' NULL local"]
        );
        (table_id, listing)
    };
    let db = Db::open(dir.path())?;
    let session = db.session();
    assert_eq!(tablets(&session, "pages").await?, listing);
    assert!(listing[0].starts_with(&first_id));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_api_lists_and_splits_tablets() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    db.session()
        .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)")
        .await?;
    let table = db.open_table("default", "public", "t")?;
    let made = table.split_at(&[b"k", b"c"])?;
    let all = table.tablets()?;
    let starts: Vec<&[u8]> = all.iter().map(|t| t.start.as_slice()).collect();
    assert_eq!(starts, vec![&b""[..], b"c", b"k"]);
    assert_eq!(all[1].end.as_deref(), Some(&b"k"[..]));
    assert_eq!(all[2].end, None);
    // The ids returned are the new tablets', in key order.
    assert_eq!(made, vec![all[1].id, all[2].id]);
    assert!(all[1].contains(b"d") && !all[1].contains(b"k") && all[2].contains(b"zzz"));
    assert!(all.iter().all(|t| t.worker.is_none()));
    // The first key always starts a tablet; a refused split changes nothing.
    let err = table
        .split_at(&[b"x", b""])
        .err()
        .ok_or("split at the first key")?;
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    assert_eq!(table.tablets()?, all);
    let err = table
        .split_at(&[b"\xff"])
        .err()
        .ok_or("split at a key not UTF-8")?;
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let message = err.to_string();
    assert!(
        message.contains("cannot split table 'default.public.t': [ff] is not a VARCHAR key"),
        "{message}"
    );

    // A key must be one of the table's key type, or a prefix of one.
    db.session()
        .run("CREATE TABLE n (id BIGINT, at BIGINT, PRIMARY KEY (id, at)); CREATE TABLE log (v BIGINT)")
        .await?;
    let numbered = db.open_table("default", "public", "n")?;
    let err = numbered.split_at(&[b"k"]).err().ok_or("split at text")?;
    let message = err.to_string();
    assert!(
        message.contains("cannot split table 'default.public.n': [6b] is not a key of its columns"),
        "{message}"
    );
    let mut prefix = Vec::new();
    widesql::internals::Element::Int(7).encode_into(&mut prefix)?;
    numbered.split_at(&[&prefix])?;
    // A part of a column, or bytes after the last column, is no key.
    prefix.push(0);
    let err = numbered
        .split_at(&[&prefix])
        .err()
        .ok_or("split inside a column")?;
    assert!(err.to_string().contains("ends inside a i64"), "{err}");
    let mut whole = Vec::new();
    widesql::internals::Element::Int(7).encode_into(&mut whole)?;
    widesql::internals::Element::Int(8).encode_into(&mut whole)?;
    whole.push(0);
    let err = numbered
        .split_at(&[&whole])
        .err()
        .ok_or("split at a key with a tail")?;
    assert!(err.to_string().contains("bytes are left"), "{err}");
    let listing = tablets(&db.session(), "n").await?;
    assert_eq!(ranges(&listing), vec!["NULL 7 local", "7 NULL local"]);

    // A table without a primary key is one tablet, listed and never split.
    let log = db.open_table("default", "public", "log")?;
    let err = log
        .split_at(&[b"k"])
        .err()
        .ok_or("split a table without a key")?;
    assert!(err.to_string().contains("has no primary key"), "{err}");
    let listing = tablets(&db.session(), "log").await?;
    assert_eq!(ranges(&listing), vec!["NULL NULL local"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_tables_tablets_go_with_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let stored = "SELECT count(*) FROM _system._catalog._tablets";
    {
        let db = Db::open(dir.path())?;
        let session = db.session();
        session
            .run(
                "CREATE TABLE t (_key VARCHAR PRIMARY KEY); ALTER TABLE t SPLIT AT ('a', 'b'); \
                 CREATE TABLE kept (_key VARCHAR PRIMARY KEY); ALTER TABLE kept SPLIT AT ('q')",
            )
            .await?;
        // Three rows for t (the first tablet's, now stored, and two), two for kept.
        assert_eq!(common::lines(&session, stored).await?, vec!["5"]);
        session
            .run("DROP TABLE t; CREATE TABLE t (_key VARCHAR PRIMARY KEY)")
            .await?;
        // The new t is one tablet; the old rows match no table.
        assert_eq!(tablets(&session, "t").await?.len(), 1);
    }
    // Opening removes the rows of tables that are gone, and keeps the rest.
    let db = Db::open(dir.path())?;
    let session = db.session();
    assert_eq!(common::lines(&session, stored).await?, vec!["2"]);
    assert_eq!(tablets(&session, "kept").await?.len(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splitting_takes_create_and_listing_takes_seeing_the_table() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    db.session()
        .run(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY); CREATE TABLE secret (_key VARCHAR PRIMARY KEY); \
             CREATE USER alice PASSWORD 'alice pw'; GRANT SELECT ON TABLE t TO alice",
        )
        .await?;
    let alice = Session::with_options(
        db.clone(),
        SessionOptions {
            user: Some("alice".into()),
            ..SessionOptions::default()
        },
    );
    assert_eq!(tablets(&alice, "t").await?.len(), 1);
    let err = alice
        .run("ALTER TABLE t SPLIT AT ('m')")
        .await
        .err()
        .ok_or("split ran")?;
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    // Tablet bounds are keys of rows: listed only to who may read them.
    let err = alice
        .run("SHOW TABLETS FROM secret")
        .await
        .err()
        .ok_or("listed")?;
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    assert!(err.to_string().contains("default.public.secret"), "{err}");

    db.session().run("GRANT CREATE ON TABLE t TO alice").await?;
    alice.run("ALTER TABLE t SPLIT AT ('m')").await?;
    assert_eq!(tablets(&alice, "t").await?.len(), 2);
    Ok(())
}
