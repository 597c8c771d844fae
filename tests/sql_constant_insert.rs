//! `INSERT … VALUES` of constants is written without DataFusion's planner
//! and executor: each statement here runs once through the session (that
//! path) and once through the bare DataFusion context over the same kind
//! of table (DataFusion's INSERT into the table's sink), and both tables
//! must end up equal, or both statements fail.

mod common;
use common::text;

use std::sync::Arc;

use datafusion::arrow::array::{Int64Builder, MapBuilder, StringBuilder};
use datafusion::common::ScalarValue;
use widesql::{Db, DbOptions, Session};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const COLUMNS: &str = "(_key VARCHAR PRIMARY KEY, n BIGINT DEFAULT 7, small SMALLINT, d DOUBLE, \
     flag BOOLEAN, day DATE, at TIMESTAMP, price DECIMAL(10, 2), raw BYTEA, \
     tags MAP(VARCHAR, VARCHAR), counts MAP(VARCHAR, BIGINT), \
     note VARCHAR NOT NULL DEFAULT 'none')";

async fn rows(session: &Session, table: &str) -> Result<String, Box<dyn std::error::Error>> {
    let sql = format!("SELECT * FROM {table} ORDER BY _key");
    text(&session.sql(&sql).await?.collect().await?)
}

async fn session() -> Result<(tempfile::TempDir, Session), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    Ok((dir, db.session()))
}

#[tokio::test]
async fn constant_rows_are_written_as_datafusion_writes_them() -> TestResult {
    let statements = [
        "INSERT INTO t VALUES ('a', 1, 2, 0.5, true, '2024-02-29', '2024-01-01T10:00:00', 12.34, X'00ff', MAP {'k': 'v'}, MAP {'x': 1, 'y': 2}, 'hello')",
        "INSERT INTO t (_key, d) VALUES ('b', 1), ('c', -2.5), ('d', NULL)",
        "INSERT INTO t (note, _key) VALUES ('first', 'e'), ('second', 'f')",
        "INSERT INTO t (_key, counts) VALUES ('g', MAP {}), ('h', NULL), ('i', MAP {'only': NULL})",
        "INSERT INTO t (_key, small, price) VALUES ('j', CAST('12' AS SMALLINT), '9.99')",
        "INSERT INTO t (_key, n) VALUES ('k', TRY_CAST('nope' AS BIGINT))",
        "INSERT INTO t (_key, flag, day) VALUES ('l', 'true', CAST('2020-01-01' AS DATE))",
        // Errors: every one fails on both paths and writes nothing.
        "INSERT INTO t (_key, n) VALUES ('m', 1), ('n', 'not a number')",
        "INSERT INTO t (_key, small) VALUES ('o', 40000)",
        "INSERT INTO t (_key, day) VALUES ('p', '2023-02-30')",
        "INSERT INTO t (_key, counts) VALUES ('q', MAP {'x': 1, 'x': 2})",
        "INSERT INTO t (_key, counts) VALUES ('r', MAP {NULL: 1})",
        "INSERT INTO t (_key, note) VALUES ('s', NULL)",
        "INSERT INTO t (_key) VALUES (NULL)",
        "INSERT INTO t (_key, n) VALUES ('t', CAST('x' AS BIGINT))",
        // The same key twice in one statement: the later row wins.
        "INSERT INTO t (_key, n) VALUES ('u', 1), ('u', 2)",
        "INSERT INTO t (_key, n, d, price, small) VALUES ('v', -9223372036854775808, -1e3, -0.005, -7)",
        "INSERT INTO t (_key, n) VALUES ('w', 18446744073709551615)",
        "INSERT INTO t (_key, raw, note) VALUES ('x', X'abc', 'odd hex'), ('y', 'text as bytes', X'41')",
        "INSERT INTO t (_key, counts, flag, note) VALUES ('z', MAP {'neg': -1, 'big': 9}, 'yes', true)",
        "INSERT INTO t (_key, d, at) VALUES ('za', 1.5, '2024-13-01')",
        "INSERT INTO t (_key, counts) VALUES ('zb', MAP {'x': 1.5})",
        // Maps of strings (copied straight into their columns), with
        // quotes, NULL values, NULL and empty maps, and values of other
        // types that DataFusion casts.
        "INSERT INTO t (_key, tags) VALUES ('ta', MAP {'it''s': 'o''k', 'b': NULL}), ('tb', NULL), ('tc', MAP {})",
        "INSERT INTO t (_key, tags, note) VALUES ('td', MAP {'n': 1, 'm': 2}, 'numbers as text')",
        "INSERT INTO t (_key, tags) VALUES ('te', MAP {'x': 'a', 'x': 'b'})",
        "INSERT INTO t (_key, tags) VALUES ('tf', MAP {'x': 'a'}), ('tg', MAP {'x': 'b', 'y': 'c', 'x': 'd'})",
        "INSERT INTO t (_key, tags) VALUES ('th', MAP {NULL: 'a'})",
        "INSERT INTO t (_key, tags) VALUES ('ti', MAP {1: 'one'})",
        "INSERT INTO t (_key, tags) VALUES ('tj', 'not a map')",
        "INSERT INTO t (_key, note) VALUES ('tk', 'ünï''cödé'), ('tl', '')",
        // Maps whose keys or values DataFusion first brings to one type.
        "INSERT INTO t (_key, counts) VALUES ('zc', MAP {'x': 1, 'y': 2.5})",
        "INSERT INTO t (_key, counts) VALUES ('zd', MAP {'lang': 'en', 'n': 3})",
        "INSERT INTO t (_key, counts) VALUES ('ze', MAP {'a': true, 'b': 1})",
        "INSERT INTO t (_key, counts) VALUES ('zf', MAP {1: 5, 1.0: 6})",
    ];
    let (_dir, session) = session().await?;
    for (at, insert) in statements.iter().enumerate() {
        let (ours, theirs) = (format!("ours{at}"), format!("theirs{at}"));
        session
            .run(&format!(
                "CREATE TABLE {ours} {COLUMNS}; CREATE TABLE {theirs} {COLUMNS}"
            ))
            .await?;
        let by_session = session
            .sql(&insert.replace(" t ", &format!(" {ours} ")))
            .await;
        let by_session = match by_session {
            Ok(frame) => frame.collect().await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let plain = session.context();
        let by_datafusion = match plain
            .sql(&insert.replace(" t ", &format!(" {theirs} ")))
            .await
        {
            Ok(frame) => frame.collect().await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match (&by_session, &by_datafusion) {
            (Ok(a), Ok(b)) => assert_eq!(text(a)?, text(b)?, "{insert}: counts"),
            (Err(_), Err(_)) => {}
            _ => panic!("{insert}: session {by_session:?}, DataFusion {by_datafusion:?}"),
        }
        assert_eq!(
            rows(&session, &ours).await?,
            rows(&session, &theirs).await?,
            "{insert}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn map_literal_errors_name_the_key() -> TestResult {
    let (_dir, session) = session().await?;
    session.run(&format!("CREATE TABLE t {COLUMNS}")).await?;
    for (insert, expected) in [
        (
            "INSERT INTO t (_key, counts) VALUES ('a', MAP {'x': 1}), ('b', MAP {'x': 1, 'x': 2})",
            "duplicate key found: x",
        ),
        (
            "INSERT INTO t (_key, counts) VALUES ('a', MAP {NULL: 1})",
            "map key cannot be null",
        ),
    ] {
        let error = session.run(insert).await.expect_err(insert).to_string();
        assert!(error.contains(expected), "{insert}: {error}");
    }
    assert_eq!(rows(&session, "t").await?, "", "nothing was written");
    Ok(())
}

#[tokio::test]
async fn a_prepared_insert_writes_its_parameters() -> TestResult {
    let (_dir, session) = session().await?;
    session.run(&format!("CREATE TABLE t {COLUMNS}")).await?;
    let insert = session
        .prepare("INSERT INTO t (_key, n, d, note) VALUES ($1, $2, $3, $4)")
        .await?;
    for (key, n) in [("a", 1i64), ("b", 2)] {
        let count = insert
            .query(vec![
                ScalarValue::from(key),
                ScalarValue::from(n),
                ScalarValue::from(n as f64 / 4.0),
                ScalarValue::from(format!("row {key}")),
            ])
            .await?;
        assert_eq!(text(&count)?, "1");
    }
    // A map parameter.
    let with_tags = session
        .prepare("INSERT INTO t (_key, counts) VALUES ($1, $2)")
        .await?;
    let mut tags = MapBuilder::new(None, StringBuilder::new(), Int64Builder::new());
    tags.keys().append_value("x");
    tags.values().append_value(1);
    tags.keys().append_value("y");
    tags.values().append_value(2);
    tags.append(true)?;
    with_tags
        .query(vec![
            ScalarValue::from("m"),
            ScalarValue::Map(Arc::new(tags.finish())),
        ])
        .await?;
    assert_eq!(
        text(
            &session
                .sql("SELECT counts FROM t WHERE _key = 'm'")
                .await?
                .collect()
                .await?
        )?,
        "{x: 1, y: 2}"
    );
    // A map parameter holding no map, or two, is refused, not a panic.
    let mut two = MapBuilder::new(None, StringBuilder::new(), Int64Builder::new());
    two.append(true)?;
    two.append(true)?;
    let none = MapBuilder::new(None, StringBuilder::new(), Int64Builder::new()).finish();
    let empty = with_tags
        .query(vec![
            ScalarValue::from("none"),
            ScalarValue::Map(Arc::new(none)),
        ])
        .await;
    assert!(empty.is_err(), "{empty:?}");
    let refused = with_tags
        .query(vec![
            ScalarValue::from("two"),
            ScalarValue::Map(Arc::new(two.finish())),
        ])
        .await;
    assert!(refused.is_err(), "{refused:?}");
    // A parameter is converted to its column's type; NULL reaches NOT NULL.
    insert
        .query(vec![
            ScalarValue::from("c"),
            ScalarValue::Int32(Some(3)),
            ScalarValue::from("0.75"),
            ScalarValue::from("third"),
        ])
        .await?;
    let refused = insert
        .query(vec![
            ScalarValue::from("d"),
            ScalarValue::from(4i64),
            ScalarValue::from(1.0),
            ScalarValue::Utf8(None),
        ])
        .await
        .expect_err("note is NOT NULL")
        .to_string();
    assert!(refused.contains("note"), "{refused}");
    assert_eq!(
        widesql_slt::rows_as_text(
            &session
                .sql("SELECT _key, n, d, note FROM t ORDER BY _key")
                .await?
                .collect()
                .await?
        )?,
        vec![
            vec!["a", "1", "0.25", "row a"],
            vec!["b", "2", "0.5", "row b"],
            vec!["c", "3", "0.75", "third"],
            vec!["m", "7", "NULL", "none"],
        ]
    );
    Ok(())
}

/// An INSERT of literals is planned once per shape; DDL in between makes
/// it planned again, so it follows the table's columns and name.
#[tokio::test]
async fn inserts_of_one_shape_follow_ddl() -> TestResult {
    let (_dir, session) = session().await?;
    session
        .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)")
        .await?;
    let insert = |key: &str, n: i64| format!("INSERT INTO t VALUES ('{key}', {n})");
    session.run(&insert("a", 1)).await?;
    session.run(&insert("b", 2)).await?;
    session
        .run("ALTER TABLE t ADD COLUMN s VARCHAR DEFAULT 'new'")
        .await?;
    session
        .run(&insert("c", 3))
        .await
        .expect_err("t has 3 columns now");
    session
        .run("INSERT INTO t VALUES ('c', 3, 'three')")
        .await?;
    session.run("ALTER TABLE t RENAME TO old_t").await?;
    let missing = session.run(&insert("d", 4)).await.expect_err("t is gone");
    assert!(missing.to_string().contains('t'), "{missing}");
    session
        .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)")
        .await?;
    session.run(&insert("e", 5)).await?;
    assert_eq!(rows(&session, "t").await?, "e 5");
    // A shape is remembered with the default schema it resolved in.
    session
        .run("CREATE SCHEMA other; CREATE TABLE other.t (_key VARCHAR PRIMARY KEY, n BIGINT)")
        .await?;
    session
        .run("SET datafusion.catalog.default_schema = 'other'")
        .await?;
    session.run(&insert("f", 6)).await?;
    session
        .run("SET datafusion.catalog.default_schema = 'public'")
        .await?;
    assert_eq!(rows(&session, "t").await?, "e 5");
    assert_eq!(rows(&session, "other.t").await?, "f 6");
    assert_eq!(
        rows(&session, "old_t").await?,
        "a 1 new\nb 2 new\nc 3 three"
    );
    Ok(())
}

/// Text that hides rows where the parser sees none (in a comment the
/// scanner cannot tell from a quoted name) writes what the parser reads.
#[tokio::test]
async fn rows_hidden_from_the_parser_are_never_written() -> TestResult {
    let (_dir, session) = session().await?;
    session
        .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)")
        .await?;
    for insert in [
        r#"INSERT INTO t WITH c AS (SELECT $$"$$) VALUES ('real', 1) -- "VALUES ('fake', 2)"#,
        r#"INSERT INTO t WITH c AS (SELECT $$"$$) VALUES ('real', 1) -- "VALUES ('fake', 2), ('fake2', 3)"#,
        "INSERT INTO t VALUES ('real', 1) -- , ('fake', 2)",
        "INSERT INTO t VALUES ('real', 1) /* , ('fake', 2) */",
    ] {
        let written = session.run(insert).await;
        let keys = text(
            &session
                .sql("SELECT _key FROM t ORDER BY _key")
                .await?
                .collect()
                .await?,
        )?;
        assert!(!keys.contains("fake"), "{insert}: {keys}");
        if written.is_ok() {
            assert!(keys.contains("real"), "{insert}: {keys}");
        }
        session.run("DELETE FROM t").await?;
    }
    Ok(())
}
