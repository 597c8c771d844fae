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
