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
