//! The embedded SQL API: a session sees tables created after it started,
//! runs scripts, and joins widesql tables with providers registered on its
//! DataFusion context.

mod common;
use common::text;

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use widesql::{Db, DbOptions, FamilySpec, RowMutation, TableSpec};

#[tokio::test]
async fn sql_session_sees_new_tables_and_joins_registered_providers(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    let session = db.session();

    // A table made through the embedded API after the session started.
    let spec = TableSpec::new().with_family(FamilySpec::new("f"));
    let table = db.default_dataset()?.create_table("late", spec)?;
    table.mutate_row(b"k1", &RowMutation::new().set("f", "q", "v1"))?;
    let batches = session
        .sql("SELECT _key, f['q'] FROM late")
        .await?
        .collect()
        .await?;
    // The family takes free qualifiers of bytes: shown as hex.
    assert_eq!(text(&batches)?, "k1 7631");

    // A provider registered on the context, joined with a widesql table.
    session
        .run("CREATE TABLE users (_key VARCHAR PRIMARY KEY, name VARCHAR); INSERT INTO users VALUES ('u1', 'Ada'), ('u2', 'Lin')")
        .await?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("user", DataType::Utf8, false),
        Field::new("amount", DataType::Int64, false),
    ]));
    let orders = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["u1", "u2", "u1"])),
            Arc::new(Int64Array::from(vec![5, 7, 11])),
        ],
    )?;
    session.context().register_batch("orders", orders)?;
    let batches = session
        .sql("SELECT u.name, sum(o.amount) FROM users u JOIN orders o ON o.user = u._key GROUP BY u.name ORDER BY u.name")
        .await?
        .collect()
        .await?;
    assert_eq!(text(&batches)?, "Ada 16\nLin 7");

    // A registered provider never replaces a widesql table, and is not stored.
    assert!(session
        .context()
        .register_batch("users", RecordBatch::new_empty(Arc::new(Schema::empty())))
        .is_err());
    assert!(db.default_dataset()?.table("orders")?.is_none());

    // Scripts return every statement's output.
    let outputs = session.run("SELECT 1 AS a; SELECT 2 AS b").await?;
    assert_eq!(outputs.len(), 2);
    assert_eq!(text(&outputs[1].batches)?, "2");
    assert_eq!(
        outputs[1].pretty()?,
        "+---+\n| b |\n+---+\n| 2 |\n+---+\n",
        "rows print as a table"
    );
    let created = session
        .run("CREATE TABLE empty (_key VARCHAR PRIMARY KEY)")
        .await?;
    assert_eq!(
        created[0].pretty()?,
        "",
        "a statement without rows prints nothing"
    );
    assert!(
        session.sql("SELECT 1; SELECT 2").await.is_err(),
        "sql() runs exactly one statement"
    );
    Ok(())
}

/// A query decodes only the cells of the columns it reads, yet finds every
/// row of their locality group: a row whose read columns are all NULL,
/// never written or set to NULL later, is still a row, and a deleted row
/// is not, through a full scan and through a key range alike.
#[tokio::test]
async fn a_query_of_some_columns_finds_rows_whose_columns_are_null(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    let session = db.session();
    session
        .run(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, a BIGINT, b VARCHAR, c BIGINT)
                 WITH ('other.columns' = 'c');
             INSERT INTO t VALUES ('r1', 1, 'x', 10), ('r2', NULL, 'y', NULL),
                 ('r3', 3, NULL, NULL), ('r4', NULL, NULL, NULL), ('r5', 5, 'z', 50),
                 ('r6', 6, 'w', 60);
             UPDATE t SET a = NULL WHERE _key = 'r5';
             DELETE FROM t WHERE _key = 'r6';
             UPDATE t SET a = NULL, b = NULL, c = NULL WHERE _key = 'r1';",
        )
        .await?;
    let cases = [
        ("_key", "r1\nr2\nr3\nr4\nr5"),
        ("_key, a", "r1 NULL\nr2 NULL\nr3 3\nr4 NULL\nr5 NULL"),
        ("_key, b", "r1 NULL\nr2 y\nr3 NULL\nr4 NULL\nr5 z"),
        ("_key, c", "r1 NULL\nr2 NULL\nr3 NULL\nr4 NULL\nr5 50"),
        ("a, c", "NULL NULL\nNULL NULL\n3 NULL\nNULL NULL\nNULL 50"),
        ("count(*), count(a), count(b)", "5 1 2"),
    ];
    for (columns, want) in cases {
        for range in ["", " WHERE _key >= 'r0' AND _key < 'r9'"] {
            let order = if columns.starts_with("count") {
                ""
            } else {
                " ORDER BY _key"
            };
            let sql = format!("SELECT {columns} FROM t{range}{order}");
            let got = text(&session.sql(&sql).await?.collect().await?)?;
            assert_eq!(got, want, "{sql}");
            let sql = format!("SELECT {columns} FROM t{range}");
            if !columns.starts_with("count") {
                let outputs = session.run(&sql).await?;
                let rows: usize = outputs
                    .iter()
                    .flat_map(|o| &o.batches)
                    .map(|b| b.num_rows())
                    .sum();
                assert_eq!(rows, 5, "{sql} through Session::run");
            }
        }
    }
    Ok(())
}

/// Every kind of result `Session::sql` gives (rows read already, a cached
/// plan, DataFusion's own plan, a count, DDL) has the schema of its rows,
/// collects and streams the same rows, and turns into a DataFrame that
/// further operations build on.
#[tokio::test]
async fn every_kind_of_frame_collects_streams_and_continues_as_a_dataframe(
) -> Result<(), Box<dyn std::error::Error>> {
    use datafusion::prelude::{col, lit};
    use futures::TryStreamExt;

    let dir = tempfile::tempdir()?;
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    let session = db.session();
    let created = session
        .sql("CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)")
        .await?;
    assert!(created.schema().fields().is_empty());
    let rows = created.collect().await?;
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let inserted = session
        .sql("INSERT INTO t VALUES ('a', 1), ('b', 2), ('c', 3)")
        .await?;
    assert_eq!(text(&inserted.collect().await?)?, "3");

    for (sql, expected, made) in [
        // A key lookup: rows read when the statement ran.
        ("SELECT _key, n FROM t WHERE _key = 'b'", "b 2", true),
        // Queries the plan cache keeps (the second run of one is a hit).
        (
            "SELECT _key, n FROM t WHERE n >= 2 ORDER BY _key",
            "b 2\nc 3",
            true,
        ),
        (
            "SELECT _key, n FROM t WHERE n >= 2 ORDER BY _key",
            "b 2\nc 3",
            true,
        ),
        (
            "SELECT _key, n FROM t ORDER BY _key DESC LIMIT 2",
            "c 3\nb 2",
            true,
        ),
        // A volatile query, which DataFusion plans each time it runs.
        (
            "SELECT _key, n FROM t WHERE random() < 2 AND n >= 2 ORDER BY _key",
            "b 2\nc 3",
            false,
        ),
    ] {
        let frame = session.sql(sql).await?;
        let names: Vec<_> = frame
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["_key", "n"], "{sql}");
        let announced = frame.stream_schema();
        let batches = frame.collect().await?;
        assert_eq!(text(&batches)?, expected, "{sql}");
        assert_eq!(batches[0].schema(), announced, "{sql}");
        assert_eq!(batches[0].schema().field(1).name(), "n", "{sql}");

        let stream = session.sql(sql).await?.execute_stream().await?;
        let streamed: Vec<RecordBatch> = stream.try_collect().await?;
        assert_eq!(text(&streamed)?, expected, "{sql}");

        let frame = session.sql(sql).await?.into_dataframe()?;
        // It holds the rows or the plan made already, or DataFusion's plan.
        let plan = frame.logical_plan().display().to_string();
        assert_eq!(plan.starts_with("Planned"), made, "{sql}: {plan}");
        let kept = frame.clone().filter(col("n").gt(lit(2)))?.collect().await?;
        let want: Vec<_> = expected.lines().filter(|l| !l.ends_with(" 2")).collect();
        assert_eq!(text(&kept)?, want.join("\n"), "{sql}");
        // A DataFrame runs again as often as it is collected.
        assert_eq!(text(&frame.clone().collect().await?)?, expected, "{sql}");
        assert_eq!(text(&frame.collect().await?)?, expected, "{sql}");
    }
    session.sql("SELECT 1 AS one").await?.show().await?;
    Ok(())
}

/// A result tells whether its statement changed something when it ran,
/// whatever its text begins with: writes, DDL, settings and prepared
/// statements did; reads did not; a write that runs with its plan has
/// once it is finished.
#[tokio::test]
async fn a_frame_tells_whether_its_statement_changed_something(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
    let session = db.session();
    let cases = [
        ("CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)", true),
        ("-- rows\nINSERT INTO t VALUES ('a', 1), ('b', 2)", true),
        ("SELECT n FROM t WHERE _key = 'a'", false),
        ("SELECT sum(n) FROM t", false),
        ("/* a query */ SELECT count(*) FROM t", false),
        ("SHOW TABLES", false),
        ("ALTER TABLE t SPLIT AT ('m')", true),
        ("SHOW TABLETS FROM t", false),
        ("UPDATE t SET n = n + 1 WHERE _key = 'a'", true),
        ("/* a view */ CREATE VIEW v AS SELECT n FROM t", true),
        ("SELECT * FROM v", false),
        (
            "/* a setting */ SET datafusion.execution.batch_size = 1024",
            true,
        ),
        ("SET widesql.plan_cache = 'on'", true),
        (
            "PREPARE ins(VARCHAR, BIGINT) AS INSERT INTO t VALUES ($1, $2)",
            true,
        ),
        (
            "PREPARE one(VARCHAR) AS SELECT n FROM t WHERE _key = $1",
            true,
        ),
        ("EXECUTE ins('c', 3)", true),
        ("EXECUTE one('c')", false),
        ("EXPLAIN SELECT n FROM t", false),
        ("DEALLOCATE one", true),
        ("DELETE FROM t WHERE _key = 'c'", true),
    ];
    for (sql, changed) in cases {
        let frame = session.sql(sql).await?;
        assert_eq!(frame.changed(), changed, "{sql}");
        frame.collect().await?;
    }
    // A write DataFusion runs with its plan: nothing yet, then done.
    let copy = session
        .sql("INSERT INTO t SELECT _key || 'x', n FROM t")
        .await?;
    assert!(copy.writes() && !copy.changed(), "a write that has not run");
    let done = copy.finish().await?;
    assert!(done.changed(), "a write that ran");
    assert_eq!(text(&done.collect().await?)?, "2");
    // Its plan alone writes nothing; run with ANALYZE, it writes.
    let explained = session.sql("EXPLAIN INSERT INTO t VALUES ('y', 9)").await?;
    assert!(!explained.writes() && !explained.changed());
    explained.collect().await?;
    let analyzed = session
        .sql("EXPLAIN ANALYZE INSERT INTO t SELECT 'z', 9")
        .await?;
    assert!(analyzed.writes() && !analyzed.changed());
    assert!(analyzed.finish().await?.changed());
    // 'y' was never written.
    let keys = session.sql("SELECT _key FROM t ORDER BY _key").await?;
    assert_eq!(text(&keys.collect().await?)?, "a\nax\nb\nbx\nz");
    Ok(())
}
