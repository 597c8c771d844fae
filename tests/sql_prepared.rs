//! Key lookups and prepared statements: a query by full primary key, or
//! by a range of keys, is answered without DataFusion's executor and
//! returns what DataFusion returns; statements prepared in Rust or SQL run with parameters and are
//! planned again after DDL.

mod common;
use common::text;

use datafusion::common::ScalarValue;
use widesql::{Db, DbOptions, Session};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn query(session: &Session, sql: &str) -> Result<String, Box<dyn std::error::Error>> {
    text(&session.sql(sql).await?.collect().await?)
}

async fn setup() -> Result<(tempfile::TempDir, Session), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    let session = db.session();
    session
        .run(
            "CREATE TABLE pages (_key VARCHAR PRIMARY KEY, lang VARCHAR, n BIGINT);
             INSERT INTO pages VALUES ('a', 'en', 1), ('b', NULL, 2), ('05', 'de', 3);
             CREATE TABLE pairs (a BIGINT, b VARCHAR, v DOUBLE, PRIMARY KEY (a, b));
             INSERT INTO pairs VALUES (1, 'x', 0.5), (1, 'y', 1.5), (2, 'x', NULL);",
        )
        .await?;
    Ok((dir, session))
}

#[tokio::test]
async fn point_reads_return_what_datafusion_returns() -> TestResult {
    let (_dir, session) = setup().await?;
    // `AND true` keeps a statement off the key lookup: DataFusion runs it.
    let cases = [
        "SELECT * FROM pages WHERE _key = 'a'",
        "SELECT * FROM pages WHERE _key = 'b'",
        "SELECT * FROM pages WHERE 'missing' = _key",
        "SELECT n AS count, _key, lang FROM pages WHERE _key = '05'",
        "SELECT * FROM pages WHERE _key = 5",
        "SELECT v, a FROM pairs WHERE b = 'y' AND a = 1",
        "SELECT * FROM pairs WHERE a = 2 AND b = 'x'",
        "SELECT * FROM pairs WHERE a = 1.0 AND b = 'x'",
        "SELECT * FROM pairs WHERE a = 1.5 AND b = 'x'",
        "SELECT * FROM pairs WHERE a = '1' AND b = 'x'",
        "SELECT * FROM pairs WHERE a = 3 AND b = 'x'",
    ];
    for sql in cases {
        // Errors too must be the same (a string compared with a number).
        let fast = query(&session, sql).await.map_err(|e| e.to_string());
        let planned = query(&session, &format!("{sql} AND true"))
            .await
            .map_err(|e| e.to_string());
        assert_eq!(fast, planned, "{sql}");
    }
    assert_eq!(
        query(
            &session,
            "SELECT n AS count, _key FROM pages WHERE _key = '05'"
        )
        .await?,
        "3 05"
    );
    assert_eq!(
        query(&session, "SELECT * FROM pages WHERE _key = 'zz'").await?,
        ""
    );
    Ok(())
}

#[tokio::test]
async fn key_range_reads_return_what_datafusion_returns() -> TestResult {
    let (_dir, session) = setup().await?;
    session
        .run(
            "INSERT INTO pages VALUES ('ab', 'fr', 4), ('b\u{e9}', 'fr', 5), ('0', 'en', 6);
             INSERT INTO pairs VALUES (-3, 'z', 2.5), (-1, 'x', 3.5), (7, 'q', 4.5);",
        )
        .await?;
    let cases = [
        "SELECT _key, lang FROM pages WHERE _key >= 'a' AND _key < 'b'",
        "SELECT * FROM pages WHERE _key > 'a'",
        "SELECT * FROM pages WHERE _key <= '05'",
        "SELECT * FROM pages WHERE 'b' > _key",
        "SELECT n FROM pages WHERE _key BETWEEN '0' AND 'ab'",
        "SELECT * FROM pages WHERE _key >= 'b' AND _key < 'a'",
        "SELECT * FROM pages WHERE _key = 'a' AND _key = 'b'",
        "SELECT * FROM pages WHERE _key = 'a' AND _key < 'z'",
        "SELECT * FROM pages WHERE _key = 'a' AND _key > 'a'",
        "SELECT * FROM pages WHERE _key > 'b' AND _key <= 'c'",
        "SELECT * FROM pages WHERE _key >= ''",
        "SELECT * FROM pages WHERE _key >= 5",
        "SELECT * FROM pairs WHERE a >= 1",
        "SELECT * FROM pairs WHERE a > 1",
        "SELECT * FROM pairs WHERE a < 2",
        "SELECT * FROM pairs WHERE a <= 1",
        "SELECT b, v FROM pairs WHERE a = 1",
        "SELECT * FROM pairs WHERE a BETWEEN -3 AND 1",
        "SELECT * FROM pairs WHERE a > -2 AND a < 7",
        "SELECT * FROM pairs WHERE a > 1.5",
        "SELECT * FROM pairs WHERE a >= '1'",
        "SELECT * FROM pairs WHERE 0 < a",
    ];
    // Rows in key order from the lookup; DataFusion promises no order.
    let sorted = |rows: String| {
        let mut lines: Vec<&str> = rows.lines().collect();
        lines.sort_unstable();
        lines.join("\n")
    };
    for sql in cases {
        let fast = query(&session, sql)
            .await
            .map(sorted)
            .map_err(|e| e.to_string());
        let planned = query(&session, &format!("{sql} AND true"))
            .await
            .map(sorted)
            .map_err(|e| e.to_string());
        assert_eq!(fast, planned, "{sql}");
    }
    // Through `Session::run` too (the literals taken off the text), rows
    // come in key order.
    let cases = [
        (
            "SELECT _key FROM pages WHERE _key >= 'a' AND _key < 'b'",
            "a\nab",
        ),
        (
            "SELECT _key FROM pages WHERE _key >= 'ab' AND _key < 'c'",
            "ab\nb\nb\u{e9}",
        ),
        ("SELECT b FROM pairs WHERE a < 0", "z\nx"),
    ];
    for (sql, rows) in cases {
        let outputs = session.run(sql).await?;
        assert_eq!(text(&outputs[0].batches)?, rows, "{sql}");
    }
    Ok(())
}

#[tokio::test]
async fn a_range_too_large_for_one_batch_is_streamed_by_datafusion() -> TestResult {
    let (_dir, session) = setup().await?;
    let rows: Vec<String> = (0..5000)
        .map(|i| format!("('k{i:05}', 'en', {i})"))
        .collect();
    session
        .run(&format!("INSERT INTO pages VALUES {}", rows.join(", ")))
        .await?;
    let batches = session
        .sql("SELECT _key, n FROM pages WHERE _key >= 'k' AND _key < 'l'")
        .await?
        .collect()
        .await?;
    let read: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(read, 5000);
    let outputs = session
        .run("SELECT n FROM pages WHERE _key > 'k00100' AND _key <= 'k00110'")
        .await?;
    assert_eq!(
        outputs[0]
            .batches
            .iter()
            .map(|b| b.num_rows())
            .sum::<usize>(),
        10
    );
    Ok(())
}

#[tokio::test]
async fn which_queries_are_key_lookups() -> TestResult {
    let (_dir, session) = setup().await?;
    let point = [
        "SELECT * FROM pages WHERE _key = $1",
        "SELECT lang AS l FROM pages WHERE _key = $1",
        "SELECT v FROM pairs WHERE a = $1 AND b = $2",
        "SELECT v FROM pairs WHERE a = $1",
        "SELECT _key, lang FROM pages WHERE _key >= $1 AND _key < $2",
        "SELECT * FROM pages WHERE $1 < _key",
        "SELECT n FROM pages WHERE _key BETWEEN $1 AND $2",
        "SELECT * FROM pairs WHERE a > $1 AND a <= $2",
    ];
    for sql in point {
        assert!(session.prepare(sql).await?.is_key_lookup(), "{sql}");
    }
    let planned = [
        "SELECT n + 1 FROM pages WHERE _key = $1",
        "SELECT * FROM pages WHERE _key = $1 OR _key = 'b'",
        "SELECT * FROM pages WHERE _key = $1 AND n = 1",
        "SELECT * FROM pages WHERE _key = $1 ORDER BY n",
        "SELECT * FROM pages WHERE _key >= $1 LIMIT 2",
        "SELECT * FROM pages WHERE _key <> $1",
        "SELECT * FROM pages WHERE _key NOT BETWEEN $1 AND $2",
        "SELECT * FROM pages WHERE _key > $1 AND n = 1",
        "SELECT v FROM pairs WHERE b = $1",
        "SELECT v FROM pairs WHERE a = $1 AND b > $2",
        "SELECT count(*) FROM pages WHERE _key = $1",
        "SELECT * FROM pages",
    ];
    for sql in planned {
        assert!(!session.prepare(sql).await?.is_key_lookup(), "{sql}");
    }
    Ok(())
}

#[tokio::test]
async fn prepared_statements_run_with_parameters() -> TestResult {
    let (_dir, session) = setup().await?;
    let insert = session
        .prepare("INSERT INTO pages VALUES ($1, $2, $3)")
        .await?;
    for (key, n) in [("c", 10i64), ("d", 11)] {
        insert
            .query(vec![
                ScalarValue::from(key),
                ScalarValue::from("fr"),
                ScalarValue::from(n),
            ])
            .await?;
    }
    let get = session
        .prepare("SELECT n, lang FROM pages WHERE _key = $1")
        .await?;
    assert_eq!(
        text(&get.query(vec![ScalarValue::from("d")]).await?)?,
        "11 fr"
    );
    assert_eq!(text(&get.query(vec![ScalarValue::from("zz")]).await?)?, "");
    let pair = session
        .prepare("SELECT v FROM pairs WHERE a = $1 AND b = $2")
        .await?;
    let got = pair
        .query(vec![ScalarValue::Int32(Some(1)), ScalarValue::from("y")])
        .await?;
    assert_eq!(text(&got)?, "1.5");
    // A range is planned by DataFusion and takes its parameters the same way.
    let range = session
        .prepare("SELECT _key FROM pages WHERE _key >= $1 ORDER BY _key")
        .await?;
    assert_eq!(
        text(&range.query(vec![ScalarValue::from("b")]).await?)?,
        "b\nc\nd"
    );
    // Statements widesql runs itself are refused.
    let refused = session.prepare("DELETE FROM pages WHERE _key = $1").await;
    assert!(refused.is_err_and(|e| e.to_string().contains("only queries and INSERT")));
    Ok(())
}

#[tokio::test]
async fn sql_prepare_and_execute_use_the_key_lookup() -> TestResult {
    let (_dir, session) = setup().await?;
    session
        .run("PREPARE get(VARCHAR) AS SELECT n, lang FROM pages WHERE _key = $1")
        .await?;
    assert_eq!(query(&session, "EXECUTE get('a')").await?, "1 en");
    assert_eq!(query(&session, "EXECUTE get('nothing')").await?, "");
    session
        .run("PREPARE pair(BIGINT, VARCHAR) AS SELECT v FROM pairs WHERE a = $1 AND b = $2")
        .await?;
    assert_eq!(query(&session, "EXECUTE pair(1, 'x')").await?, "0.5");
    session.run("DEALLOCATE get").await?;
    assert!(session.run("EXECUTE get('a')").await.is_err());
    Ok(())
}

#[tokio::test]
async fn a_prepared_read_is_planned_again_after_ddl() -> TestResult {
    let (_dir, session) = setup().await?;
    let get = session
        .prepare("SELECT * FROM pages WHERE _key = $1")
        .await?;
    assert_eq!(
        text(&get.query(vec![ScalarValue::from("a")]).await?)?,
        "a en 1"
    );
    session
        .run("ALTER TABLE pages ADD COLUMN score DOUBLE DEFAULT 0.25")
        .await?;
    session
        .run("INSERT INTO pages (_key, lang, n, score) VALUES ('a', 'en', 7, 9.5)")
        .await?;
    assert_eq!(
        text(&get.query(vec![ScalarValue::from("a")]).await?)?,
        "a en 7 9.5"
    );
    Ok(())
}

/// After `pages` is renamed and a new `pages` created, every way of
/// reading `pages` by key reads the new table, as PostgreSQL's prepared
/// statements do; before the new one exists, each says it is missing.
#[tokio::test]
async fn statements_planned_before_a_rename_read_what_the_name_means_now() -> TestResult {
    let (_dir, session) = setup().await?;
    let ad_hoc = "SELECT n FROM pages WHERE _key = 'a'";
    let rust = session
        .prepare("SELECT n FROM pages WHERE _key = $1")
        .await?;
    let scan = session.prepare("SELECT count(*) FROM pages").await?;
    session
        .run("PREPARE get(VARCHAR) AS SELECT n FROM pages WHERE _key = $1")
        .await?;
    session
        .run("PREPARE total AS SELECT sum(n) FROM pages")
        .await?;
    let a = || vec![ScalarValue::from("a")];
    // Each is planned and has run once against the old table.
    assert_eq!(query(&session, ad_hoc).await?, "1");
    assert_eq!(text(&rust.query(a()).await?)?, "1");
    assert_eq!(text(&scan.query(vec![]).await?)?, "3");
    assert_eq!(query(&session, "EXECUTE get('a')").await?, "1");
    assert_eq!(query(&session, "EXECUTE total").await?, "6");

    session.run("ALTER TABLE pages RENAME TO old_pages").await?;
    for missing in [
        query(&session, ad_hoc).await.map(|_| ()),
        rust.query(a()).await.map(|_| ()).map_err(Into::into),
        scan.query(vec![]).await.map(|_| ()).map_err(Into::into),
        query(&session, "EXECUTE get('a')").await.map(|_| ()),
        query(&session, "EXECUTE total").await.map(|_| ()),
    ] {
        let error = missing.expect_err("pages no longer exists").to_string();
        assert!(error.contains("pages"), "{error}");
    }

    session
        .run("CREATE TABLE pages (_key VARCHAR PRIMARY KEY, n BIGINT); INSERT INTO pages VALUES ('a', 40), ('z', 2)")
        .await?;
    assert_eq!(query(&session, ad_hoc).await?, "40");
    assert_eq!(text(&rust.query(a()).await?)?, "40");
    assert_eq!(text(&scan.query(vec![]).await?)?, "2");
    assert_eq!(query(&session, "EXECUTE get('a')").await?, "40");
    assert_eq!(query(&session, "EXECUTE total").await?, "42");
    // The renamed table keeps its rows.
    assert_eq!(
        query(&session, "SELECT n FROM old_pages WHERE _key = 'a'").await?,
        "1"
    );
    Ok(())
}

#[tokio::test]
async fn ad_hoc_key_lookups_of_one_shape_follow_their_literals_and_ddl() -> TestResult {
    let (_dir, session) = setup().await?;
    // One shape, planned once, run with each statement's own literals.
    for (key, want) in [
        ("a", "a en 1"),
        ("b", "b NULL 2"),
        ("05", "05 de 3"),
        ("none", ""),
    ] {
        let sql = format!("SELECT * FROM pages WHERE _key = '{key}'");
        assert_eq!(query(&session, &sql).await?, want, "{sql}");
    }
    assert_eq!(
        query(&session, "SELECT v FROM pairs WHERE a = 2 AND b = 'x'").await?,
        "NULL"
    );
    assert_eq!(
        query(&session, "SELECT v FROM pairs WHERE a = 1 AND b = 'y'").await?,
        "1.5"
    );
    // The shape follows DDL: a new column shows at once.
    session
        .run("ALTER TABLE pages ADD COLUMN score DOUBLE")
        .await?;
    session
        .run("INSERT INTO pages (_key, score) VALUES ('a', 2.5)")
        .await?;
    assert_eq!(
        query(&session, "SELECT * FROM pages WHERE _key = 'a'").await?,
        "a en 1 2.5"
    );
    session.run("DROP TABLE pages").await?;
    assert!(query(&session, "SELECT * FROM pages WHERE _key = 'a'")
        .await
        .is_err());
    Ok(())
}

#[tokio::test]
async fn scripts_answer_key_lookups_as_queries_do() -> TestResult {
    let (_dir, session) = setup().await?;
    let script = "SELECT lang, n FROM pages WHERE _key = 'a'; \
                  SELECT v FROM pairs WHERE a = 1 AND b = 'y'; \
                  SELECT * FROM pages WHERE _key = 'zz'";
    let outputs = session.run(script).await?;
    let texts = outputs
        .iter()
        .map(|o| text(&o.batches))
        .collect::<Result<Vec<_>, _>>()?;
    assert_eq!(texts, ["en 1", "1.5", ""]);
    // The schema is the query's, as DataFusion names it.
    let names: Vec<&str> = outputs[0]
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["lang", "n"]);
    assert_eq!(
        outputs[2].schema,
        session
            .sql("SELECT * FROM pages WHERE _key = 'zz' AND true")
            .await?
            .schema()
            .as_arrow()
            .clone()
            .into()
    );
    Ok(())
}
