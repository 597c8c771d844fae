//! The Flight SQL server, called by arrow-flight's own Flight SQL client
//! over 127.0.0.1: statements, prepared statements, the catalog calls,
//! sessions, cancellation, errors, TLS and shutdown.

use std::sync::Arc;

use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandGetCrossReference, CommandGetDbSchemas, CommandGetExportedKeys, CommandGetImportedKeys,
    CommandGetPrimaryKeys, CommandGetTables, CommandGetXdbcTypeInfo, CommandStatementIngest,
    SqlInfo, TableDefinitionOptions, TableExistsOption, TableNotExistOption, XdbcDataType,
};
use arrow_flight::{CancelFlightInfoRequest, CancelStatus, FlightClient, FlightInfo};
use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::Int32Type;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::util::display::array_value_to_string;
use futures::{StreamExt, TryStreamExt};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::Code;
use widesql::Db;
use widesql_server::{ServeError, ServeOptions, Server, TlsIdentity};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Client = FlightSqlServiceClient<Channel>;

/// A server on a free loopback port over a new database.
async fn serve(options: ServeOptions) -> Result<(tempfile::TempDir, Db, Server), BoxError> {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    let options = ServeOptions {
        listen: "127.0.0.1:0".parse()?,
        ..options
    };
    let server = Server::start(db.clone(), options).await?;
    Ok((dir, db, server))
}

/// A server with `limits` on a free loopback port over a new database.
async fn serve_with(
    limits: widesql_server::Limits,
) -> Result<(tempfile::TempDir, Db, Server), BoxError> {
    serve(ServeOptions {
        limits,
        ..ServeOptions::default()
    })
    .await
}

/// A server with `limits` over a new database holding an empty table
/// `t (_key VARCHAR PRIMARY KEY, body VARCHAR)`, and a client signed in.
async fn serve_with_table_t(
    limits: widesql_server::Limits,
) -> Result<(tempfile::TempDir, Db, Server, Client), BoxError> {
    let (dir, db, server) = serve_with(limits).await?;
    db.session()
        .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, body VARCHAR)")
        .await?;
    let mut client = connect(&server).await?;
    client.handshake("anyone", "").await?;
    Ok((dir, db, server, client))
}

/// A server whose shutdown waits 300 ms for running calls.
async fn serve_with_short_grace() -> Result<(tempfile::TempDir, Db, Server), BoxError> {
    serve(ServeOptions {
        shutdown_grace: std::time::Duration::from_millis(300),
        ..ServeOptions::default()
    })
    .await
}

/// A table `big (k BIGINT PRIMARY KEY, v VARCHAR)` of `rows` rows, keys 0
/// to `rows - 1`.
async fn big_table(db: &Db, rows: u64) -> Result<(), BoxError> {
    db.session()
        .run(&format!(
            "CREATE TABLE big (k BIGINT PRIMARY KEY, v VARCHAR); \
             INSERT INTO big SELECT value, concat('value ', CAST(value AS VARCHAR)) \
             FROM generate_series(0, {}) AS s(value)",
            rows - 1
        ))
        .await?;
    Ok(())
}

async fn connect(server: &Server) -> Result<Client, BoxError> {
    let channel = Endpoint::from_shared(format!("http://{}", server.local_addr()))?
        .connect()
        .await?;
    Ok(FlightSqlServiceClient::new(channel))
}

/// The rows of every endpoint of `info`, as text: cells joined by " ",
/// rows by "\n".
async fn rows(client: &mut Client, info: FlightInfo) -> Result<String, BoxError> {
    let mut lines = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.ok_or("an endpoint without a ticket")?;
        let batches: Vec<RecordBatch> = client.do_get(ticket).await?.try_collect().await?;
        lines.extend(text_lines(&batches)?);
    }
    Ok(lines.join("\n"))
}

fn text_lines(batches: &[RecordBatch]) -> Result<Vec<String>, BoxError> {
    let mut lines = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            let cells = batch
                .columns()
                .iter()
                .map(|c| array_value_to_string(c, row))
                .collect::<Result<Vec<_>, _>>()?;
            lines.push(cells.join(" "));
        }
    }
    Ok(lines)
}

async fn query(client: &mut Client, sql: &str) -> Result<String, BoxError> {
    let info = client.execute(sql.to_string(), None).await?;
    rows(client, info).await
}

/// How fetching `ticket` failed, when it did: at the call or in its stream.
async fn fetch_error(
    client: &mut Client,
    ticket: arrow_flight::Ticket,
) -> Option<arrow_flight::error::FlightError> {
    match client.do_get(ticket).await {
        Ok(stream) => stream.try_collect::<Vec<_>>().await.err(),
        Err(e) => Some(e),
    }
}

/// The message of a call that must fail with the code `want`.
fn refused<T>(
    result: Result<T, arrow_flight::error::FlightError>,
    want: Code,
    what: impl std::fmt::Display,
) -> Result<String, BoxError> {
    let error = result
        .err()
        .ok_or_else(|| format!("it should have failed: {what}"))?;
    assert_eq!(code(&error), Some(want), "{what}: {error}");
    Ok(error.to_string())
}

/// The gRPC code a failed client call ended with.
fn code(error: &arrow_flight::error::FlightError) -> Option<Code> {
    match error {
        arrow_flight::error::FlightError::Tonic(status) => Some(status.code()),
        _ => None,
    }
}

#[tokio::test]
async fn statements_run_and_stream_through_the_one_front_door() -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    let created = client
        .execute_update(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)".into(),
            None,
        )
        .await?;
    assert_eq!(created, 0);
    let inserted = client
        .execute_update(
            "INSERT INTO t VALUES ('a', 1), ('b', 2), ('c', 3)".into(),
            None,
        )
        .await?;
    assert_eq!(inserted, 3);
    assert_eq!(
        client
            .execute_update("UPDATE t SET n = n * 10 WHERE n >= 2".into(), None)
            .await?,
        2
    );
    assert_eq!(
        client
            .execute_update("DELETE FROM t WHERE _key = 'a'".into(), None)
            .await?,
        1
    );
    assert_eq!(
        query(&mut client, "SELECT _key, n FROM t ORDER BY _key").await?,
        "b 20\nc 30"
    );
    // A key lookup, answered from the rows it read.
    assert_eq!(
        query(&mut client, "SELECT n FROM t WHERE _key = 'c'").await?,
        "30"
    );
    // The FlightInfo carries the result's schema.
    let info = client.execute("SELECT _key, n FROM t".into(), None).await?;
    let schema = info.clone().try_decode_schema()?;
    assert_eq!(schema.field(1).name(), "n");
    assert_eq!(schema.field(1).data_type(), &DataType::Int64);
    rows(&mut client, info).await?;

    // A result of many batches arrives whole.
    big_table(&db, 20_000).await?;
    let info = client.execute("SELECT k FROM big".into(), None).await?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let batches: Vec<RecordBatch> = client.do_get(ticket.clone()).await?.try_collect().await?;
    assert!(batches.len() > 1, "{} batches", batches.len());
    let keys: i64 = batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .values()
                .to_vec()
        })
        .sum();
    assert_eq!(keys, (0..20_000i64).sum::<i64>());
    // A ticket is fetched once.
    let error = fetch_error(&mut client, ticket)
        .await
        .ok_or("a ticket was fetched twice")?;
    assert_eq!(code(&error), Some(Code::NotFound), "{error}");
    server.shutdown().await?;
    Ok(())
}

/// A ticket that is a Flight SQL command itself.
fn command_ticket(command: impl arrow_flight::sql::ProstMessageExt) -> arrow_flight::Ticket {
    use prost::Message;
    arrow_flight::Ticket::new(command.as_any().encode_to_vec())
}

/// A ticket that is the query itself (`DoGet` of a `CommandStatementQuery`).
fn statement_ticket(sql: &str, transaction_id: Option<&str>) -> arrow_flight::Ticket {
    command_ticket(arrow_flight::sql::CommandStatementQuery {
        query: sql.to_string(),
        transaction_id: transaction_id.map(|id| id.as_bytes().to_vec().into()),
    })
}

/// The rows of a query sent as its own ticket, as text.
async fn query_in_one_call(client: &mut Client, sql: &str) -> Result<String, BoxError> {
    let batches: Vec<RecordBatch> = client
        .do_get(statement_ticket(sql, None))
        .await?
        .try_collect()
        .await?;
    Ok(text_lines(&batches)?.join("\n"))
}

#[tokio::test]
async fn a_query_sent_as_its_own_ticket_runs_in_one_call_under_the_same_checks(
) -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    big_table(&db, 5_000).await?;
    // Rows as the two calls give them, many batches streamed.
    let sql = "SELECT k, v FROM big WHERE k < 3 ORDER BY k";
    assert_eq!(
        query_in_one_call(&mut client, sql).await?,
        query(&mut client, sql).await?
    );
    assert_eq!(
        query_in_one_call(&mut client, sql).await?,
        "0 value 0\n1 value 1\n2 value 2"
    );
    let batches: Vec<RecordBatch> = client
        .do_get(statement_ticket("SELECT k FROM big", None))
        .await?
        .try_collect()
        .await?;
    assert!(batches.len() > 1, "{} batches", batches.len());
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 5_000);
    // A write runs and answers its row count.
    assert_eq!(
        query_in_one_call(&mut client, "INSERT INTO big VALUES (-1, 'new')").await?,
        "1"
    );
    assert_eq!(
        query(&mut client, "SELECT v FROM big WHERE k = -1").await?,
        "new"
    );
    // What the two calls refuse, it refuses.
    refused(
        client
            .do_get(statement_ticket("SELECT 1", Some("a transaction")))
            .await,
        Code::InvalidArgument,
        "a statement in a transaction ran",
    )?;
    let error = fetch_error(&mut client, statement_ticket("SELECT * FROM nowhere", None))
        .await
        .ok_or("a query of a missing table ran")?;
    assert_eq!(code(&error), Some(Code::NotFound), "{error}");
    // Another command as a ticket is not a query.
    let update = arrow_flight::sql::CommandStatementUpdate {
        query: "DELETE FROM big".into(),
        transaction_id: None,
    };
    let error = fetch_error(&mut client, command_ticket(update))
        .await
        .ok_or("an update sent as a ticket ran")?;
    assert_eq!(code(&error), Some(Code::Unimplemented), "{error}");
    assert_eq!(
        query(&mut client, "SELECT count(*) FROM big").await?,
        "5001"
    );

    // Users: a token is needed, and grants are checked.
    db.session()
        .run(
            "CREATE TABLE secret (_key VARCHAR PRIMARY KEY); \
             CREATE USER alice PASSWORD 'alice pw'; GRANT SELECT ON TABLE big TO alice",
        )
        .await?;
    let mut alice = connect(&server).await?;
    let error = fetch_error(&mut alice, statement_ticket("SELECT 1", None))
        .await
        .ok_or("a query without a token ran")?;
    assert_eq!(code(&error), Some(Code::Unauthenticated), "{error}");
    alice.handshake("alice", "alice pw").await?;
    assert_eq!(
        query_in_one_call(&mut alice, "SELECT v FROM big WHERE k = 2").await?,
        "value 2"
    );
    for (sql, what) in [
        (
            "SELECT * FROM secret",
            "alice read a table she has no grant on",
        ),
        (
            "INSERT INTO big VALUES (-2, 'x')",
            "alice wrote with SELECT only",
        ),
    ] {
        let error = fetch_error(&mut alice, statement_ticket(sql, None))
            .await
            .ok_or(what)?;
        assert_eq!(
            code(&error),
            Some(Code::PermissionDenied),
            "{what}: {error}"
        );
    }
    assert_eq!(query(&mut alice, "SELECT count(*) FROM big").await?, "5001");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn prepared_statements_bind_parameters_for_queries_and_updates() -> Result<(), BoxError> {
    let (_dir, _db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    client
        .execute_update(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT NOT NULL)".into(),
            None,
        )
        .await?;
    // An INSERT prepared once, run with two rows of parameters.
    let mut insert = client
        .prepare("INSERT INTO t VALUES ($1, $2)".into(), None)
        .await?;
    let parameters = insert.parameter_schema()?.clone();
    assert_eq!(parameters.fields().len(), 2);
    assert_eq!(parameters.field(0).name(), "$1");
    let schema = Arc::new(Schema::new(vec![
        Field::new("$1", DataType::Utf8, false),
        Field::new("$2", DataType::Int64, false),
    ]));
    let binding = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(Int64Array::from(vec![1, 2])),
        ],
    )?;
    insert.set_parameters(binding)?;
    assert_eq!(insert.execute_update().await?, 2);
    // Each row runs on its own: one that fails after others ran says what
    // they changed, which stays.
    let binding = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("$1", DataType::Utf8, false),
            Field::new("$2", DataType::Int64, true),
        ])),
        vec![
            Arc::new(StringArray::from(vec!["c", "d", "e"])),
            Arc::new(Int64Array::from(vec![Some(3), None, Some(5)])),
        ],
    )?;
    insert.set_parameters(binding)?;
    let error = refused(
        insert.execute_update().await,
        Code::InvalidArgument,
        "a NULL in a NOT NULL column",
    )?;
    assert!(
        error.contains(
            "1 of the 3 rows of parameters ran, changing 1 rows, which stay; row 2 failed"
        ),
        "{error}"
    );
    assert_eq!(
        query(&mut client, "SELECT _key FROM t ORDER BY _key").await?,
        "a\nb\nc"
    );
    insert.close().await?;
    // Without parameters bound, it does not run.
    let mut unbound = client
        .prepare("INSERT INTO t VALUES ($1, $2)".into(), None)
        .await?;
    let error = refused(
        unbound.execute_update().await,
        Code::InvalidArgument,
        "ran without parameters",
    )?;
    assert!(
        error.to_string().contains("no row of them is bound"),
        "{error}"
    );

    // A query prepared once, run with one value and then another.
    let mut select = client
        .prepare("SELECT n FROM t WHERE _key = $1".into(), None)
        .await?;
    assert_eq!(select.dataset_schema()?.field(0).name(), "n");
    for (key, expected) in [("a", "1"), ("b", "2")] {
        let schema = Arc::new(Schema::new(vec![Field::new("$1", DataType::Utf8, false)]));
        let binding = RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(vec![key]))])?;
        select.set_parameters(binding)?;
        let info = select.execute().await?;
        assert_eq!(rows(&mut client, info).await?, expected);
    }
    select.close().await?;

    // Statements that are never prepared say so, so that ADBC runs them
    // unprepared; a statement that does not parse is invalid.
    refused(
        client
            .prepare("CREATE TABLE u (_key VARCHAR PRIMARY KEY)".into(), None)
            .await,
        Code::Unimplemented,
        "DDL was prepared",
    )?;
    refused(
        client.prepare("SELEC 1".into(), None).await,
        Code::InvalidArgument,
        "nonsense was prepared",
    )?;
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn catalog_calls_list_projects_datasets_tables_and_keys() -> Result<(), BoxError> {
    let (_dir, _db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    for statement in [
        "CREATE DATABASE shop",
        "CREATE SCHEMA shop.sales",
        "CREATE TABLE shop.sales.orders (_key VARCHAR PRIMARY KEY, total BIGINT)",
        "CREATE TABLE pages (_key VARCHAR PRIMARY KEY, body VARCHAR)",
    ] {
        client.execute_update(statement.into(), None).await?;
    }
    let info = client.get_catalogs().await?;
    let catalogs = rows(&mut client, info).await?;
    assert!(catalogs.lines().any(|l| l == "shop"), "{catalogs}");
    assert!(catalogs.lines().any(|l| l == "default"), "{catalogs}");

    let info = client
        .get_db_schemas(CommandGetDbSchemas {
            catalog: Some("shop".into()),
            db_schema_filter_pattern: None,
        })
        .await?;
    let schemas = rows(&mut client, info).await?;
    assert!(schemas.lines().any(|l| l == "shop sales"), "{schemas}");
    assert!(schemas.lines().all(|l| l.starts_with("shop ")), "{schemas}");

    let info = client
        .get_tables(CommandGetTables {
            catalog: None,
            db_schema_filter_pattern: None,
            table_name_filter_pattern: Some("ord%".into()),
            table_types: vec!["TABLE".into()],
            include_schema: true,
        })
        .await?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let batches: Vec<RecordBatch> = client.do_get(ticket).await?.try_collect().await?;
    let tables = text_lines(&batches)?;
    assert_eq!(tables.len(), 1, "{tables:?}");
    assert!(
        tables[0].starts_with("shop sales orders TABLE"),
        "{tables:?}"
    );
    // The table's Arrow schema, IPC-encoded.
    let encoded = batches[0].column(4).as_binary::<i32>().value(0).to_vec();
    let schema = Schema::try_from(arrow_flight::IpcMessage(encoded.into()))?;
    assert_eq!(schema.field(1).name(), "total");

    let info = client.get_table_types().await?;
    assert!(rows(&mut client, info).await?.lines().any(|l| l == "TABLE"));

    let info = client
        .get_primary_keys(CommandGetPrimaryKeys {
            catalog: None,
            db_schema: None,
            table: "pages".into(),
        })
        .await?;
    assert_eq!(
        rows(&mut client, info).await?,
        "default public pages _key  1"
    );

    let info = client
        .get_sql_info(vec![SqlInfo::FlightSqlServerName])
        .await?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let batches: Vec<RecordBatch> = client.do_get(ticket).await?.try_collect().await?;
    let value = batches[0].column(1);
    let union = value.as_union();
    let name = union.value(0);
    assert_eq!(array_value_to_string(&name, 0)?, "widesql");
    // Bulk ingest is served (`CommandStatementIngest`), and said so.
    let info = client
        .get_sql_info(vec![SqlInfo::FlightSqlServerBulkIngestion])
        .await?;
    let batch = metadata_batch(&mut client, info).await?;
    let ingest = batch.column(1).as_union().value(0);
    assert_eq!(array_value_to_string(&ingest, 0)?, "true");
    server.shutdown().await?;
    Ok(())
}

/// The one batch of a metadata call's answer, checked against the schema
/// its `FlightInfo` announced.
async fn metadata_batch(client: &mut Client, info: FlightInfo) -> Result<RecordBatch, BoxError> {
    let announced = info.clone().try_decode_schema()?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let mut stream = client.do_get(ticket).await?;
    let mut batches = Vec::new();
    while let Some(batch) = stream.try_next().await? {
        batches.push(batch);
    }
    let schema = stream.schema().ok_or("no schema was sent")?;
    assert_eq!(schema.fields(), announced.fields());
    Ok(concat_batches(schema, &batches)?)
}

/// The XDBC type of a column of Arrow type `data_type`, and whether it is
/// unsigned; `None` for a type with no XDBC type.
fn xdbc_type(data_type: &DataType) -> Option<(XdbcDataType, bool)> {
    use DataType::*;
    use XdbcDataType::*;
    Some(match data_type {
        Boolean => (XdbcBit, false),
        Int8 => (XdbcTinyint, false),
        UInt8 => (XdbcTinyint, true),
        Int16 => (XdbcSmallint, false),
        UInt16 => (XdbcSmallint, true),
        Int32 => (XdbcInteger, false),
        UInt32 => (XdbcInteger, true),
        Int64 => (XdbcBigint, false),
        UInt64 => (XdbcBigint, true),
        Float32 => (XdbcReal, false),
        Float64 => (XdbcDouble, false),
        Decimal128(..) => (XdbcDecimal, false),
        Utf8 | Utf8View | LargeUtf8 => (XdbcVarchar, false),
        Binary | BinaryView | LargeBinary => (XdbcVarbinary, false),
        Date32 => (XdbcDate, false),
        Time64(_) => (XdbcTime, false),
        Timestamp(..) => (XdbcTimestamp, false),
        Interval(_) => (XdbcInterval, false),
        _ => return None,
    })
}

#[tokio::test]
async fn type_info_lists_types_a_column_takes_as_what_they_are() -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    let every = CommandGetXdbcTypeInfo { data_type: None };
    let info = client.get_xdbc_type_info(every).await?;
    let types = metadata_batch(&mut client, info).await?;
    let column = |name: &str| {
        types
            .column_by_name(name)
            .ok_or(format!("no column {name}"))
    };
    let names = column("type_name")?.as_string::<i32>();
    let codes = column("data_type")?.as_primitive::<Int32Type>();
    let params = column("create_params")?;
    let unsigned = column("unsigned_attribute")?.as_boolean();
    assert!(types.num_rows() >= 17, "{} types", types.num_rows());
    // Each type listed declares a column, whose Arrow type is of the XDBC
    // type listed.
    for row in 0..types.num_rows() {
        let name = names.value(row);
        let declared = match params.is_null(row) {
            true => name.to_string(),
            false => format!("{name}(10, 2)"),
        };
        let table = format!("t{row}");
        client
            .execute_update(
                format!("CREATE TABLE {table} (_key VARCHAR PRIMARY KEY, c {declared})"),
                None,
            )
            .await
            .map_err(|e| format!("{declared}: {e}"))?;
        let frame = db.session().sql(&format!("SELECT c FROM {table}")).await?;
        let data_type = frame.stream_schema().field(0).data_type().clone();
        let (code, is_unsigned) =
            xdbc_type(&data_type).ok_or(format!("{declared} is {data_type}"))?;
        assert_eq!(codes.value(row), code as i32, "{declared} is {data_type}");
        let listed_unsigned = unsigned.is_valid(row) && unsigned.value(row);
        assert_eq!(listed_unsigned, is_unsigned, "{declared} is {data_type}");
    }
    // Asked for one XDBC type: its types only.
    let bigint = CommandGetXdbcTypeInfo {
        data_type: Some(XdbcDataType::XdbcBigint as i32),
    };
    let info = client.get_xdbc_type_info(bigint).await?;
    let types = metadata_batch(&mut client, info).await?;
    let names: Vec<&str> = types
        .column(0)
        .as_string::<i32>()
        .iter()
        .flatten()
        .collect();
    assert_eq!(names, ["BIGINT", "BIGINT UNSIGNED"]);
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn the_foreign_key_calls_answer_that_no_table_has_foreign_keys() -> Result<(), BoxError> {
    let (_dir, _db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    client
        .execute_update(
            "CREATE TABLE orders (_key VARCHAR PRIMARY KEY, customer VARCHAR)".into(),
            None,
        )
        .await?;
    let infos = [
        client
            .get_imported_keys(CommandGetImportedKeys {
                catalog: None,
                db_schema: None,
                table: "orders".into(),
            })
            .await?,
        client
            .get_exported_keys(CommandGetExportedKeys {
                catalog: None,
                db_schema: None,
                table: "orders".into(),
            })
            .await?,
        client
            .get_cross_reference(CommandGetCrossReference {
                pk_catalog: None,
                pk_db_schema: None,
                pk_table: "orders".into(),
                fk_catalog: None,
                fk_db_schema: None,
                fk_table: "orders".into(),
            })
            .await?,
    ];
    for info in infos {
        let keys = metadata_batch(&mut client, info).await?;
        assert_eq!(keys.num_rows(), 0);
        let schema = keys.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "pk_catalog_name",
                "pk_db_schema_name",
                "pk_table_name",
                "pk_column_name",
                "fk_catalog_name",
                "fk_db_schema_name",
                "fk_table_name",
                "fk_column_name",
                "key_sequence",
                "fk_key_name",
                "pk_key_name",
                "update_rule",
                "delete_rule"
            ]
        );
    }
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_handshake_gives_a_session_whose_settings_last() -> Result<(), BoxError> {
    let (_dir, _db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    client.handshake("anyone", "").await?;
    assert!(client.token().is_some());
    client
        .execute_update("SET datafusion.execution.batch_size = 123".into(), None)
        .await?;
    let shown = query(&mut client, "SHOW datafusion.execution.batch_size").await?;
    assert!(shown.ends_with(" 123"), "{shown}");
    // A client without a token runs each call in a session of its own.
    let mut other = connect(&server).await?;
    let shown = query(&mut other, "SHOW datafusion.execution.batch_size").await?;
    assert!(!shown.ends_with(" 123"), "{shown}");
    // An unknown token is refused.
    other.set_token("not-a-token".into());
    refused(
        other.execute("SELECT 1".into(), None).await,
        Code::Unauthenticated,
        "a made-up token was taken",
    )?;
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn users_sign_in_and_every_call_is_checked_against_their_grants() -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    // A token of the time before the database had users.
    let mut early = connect(&server).await?;
    early.handshake("anyone", "").await?;
    db.session()
        .run(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT); INSERT INTO t VALUES ('a', 1); \
             CREATE TABLE secret (_key VARCHAR PRIMARY KEY); \
             CREATE USER alice PASSWORD 'alice pw'; GRANT SELECT ON TABLE t TO alice; \
             CREATE USER root PASSWORD 'root pw' ADMIN",
        )
        .await?;
    refused(
        early.execute("SELECT 1".into(), None).await,
        Code::Unauthenticated,
        "a token from before the first user still worked",
    )?;
    // No token, a wrong password, an unknown user.
    let mut client = connect(&server).await?;
    refused(
        client.execute("SELECT 1".into(), None).await,
        Code::Unauthenticated,
        "a call without a token ran",
    )?;
    for (user, password) in [("alice", "wrong"), ("nobody", "alice pw")] {
        let error = client
            .handshake(user, password)
            .await
            .err()
            .ok_or("a wrong password was taken")?;
        // The client reports a failed handshake as text.
        assert!(
            error
                .to_string()
                .contains("valid authentication credentials"),
            "{error}"
        );
        assert!(
            error.to_string().contains("wrong user name or password"),
            "{error}"
        );
    }
    client.handshake("alice", "alice pw").await?;
    assert_eq!(query(&mut client, "SELECT n FROM t").await?, "1");
    let error = refused(
        client.execute("SELECT * FROM secret".into(), None).await,
        Code::PermissionDenied,
        "alice read a table she has no grant on",
    )?;
    assert!(
        error.contains("user 'alice' has no SELECT privilege on table default.public.secret"),
        "{error}"
    );
    refused(
        client
            .execute_update("INSERT INTO t VALUES ('b', 2)".into(), None)
            .await,
        Code::PermissionDenied,
        "alice wrote with SELECT only",
    )?;
    // A prepared INSERT is refused when it is prepared (it is planned
    // then), or else when it runs.
    match client
        .prepare("INSERT INTO t VALUES ($1, $2)".into(), None)
        .await
    {
        Err(error) => assert_eq!(code(&error), Some(Code::PermissionDenied), "{error}"),
        Ok(mut statement) => {
            let params = RecordBatch::try_new(
                Arc::new(Schema::new(vec![
                    Field::new("k", DataType::Utf8, false),
                    Field::new("n", DataType::Int64, false),
                ])),
                vec![
                    Arc::new(StringArray::from(vec!["c"])),
                    Arc::new(Int64Array::from(vec![3])),
                ],
            )?;
            statement.set_parameters(params)?;
            refused(
                statement.execute_update().await,
                Code::PermissionDenied,
                "a prepared INSERT ran without the INSERT privilege",
            )?;
        }
    }
    let outputs = db.session().run("SELECT count(*) FROM t").await?;
    assert_eq!(
        text_lines(&outputs[0].batches)?,
        ["1"],
        "alice's INSERTs wrote rows"
    );
    // The catalog calls list only what alice may use.
    let info = client
        .get_tables(CommandGetTables {
            catalog: None,
            db_schema_filter_pattern: None,
            table_name_filter_pattern: None,
            table_types: vec![],
            include_schema: false,
        })
        .await?;
    let tables = rows(&mut client, info).await?;
    assert_eq!(tables, "default public t TABLE", "{tables}");
    let info = client.get_catalogs().await?;
    assert_eq!(rows(&mut client, info).await?, "default");
    // An admin sees and does everything.
    let mut root = connect(&server).await?;
    root.handshake("root", "root pw").await?;
    root.execute_update("INSERT INTO secret VALUES ('x')".into(), None)
        .await?;
    assert_eq!(query(&mut root, "SELECT count(*) FROM secret").await?, "1");
    let info = root.get_catalogs().await?;
    assert_eq!(rows(&mut root, info).await?, "_system\ndefault");
    // A revoked grant reaches a session that is open.
    root.execute_update("REVOKE SELECT ON TABLE t FROM alice".into(), None)
        .await?;
    refused(
        client.execute("SELECT n FROM t".into(), None).await,
        Code::PermissionDenied,
        "a revoked grant still held",
    )?;
    // A query sent as an update is refused: it would run unseen by the
    // query time and by cancellation.
    refused(
        root.execute_update("SELECT count(*) FROM secret".into(), None)
            .await,
        Code::InvalidArgument,
        "a query ran as an update",
    )?;
    // So is a script that begins with an INSERT and holds a query, whose
    // INSERT does not run either.
    refused(
        root.execute_update(
            "INSERT INTO secret VALUES ('y'); SELECT count(*) FROM secret".into(),
            None,
        )
        .await,
        Code::InvalidArgument,
        "a script holding a query ran as an update",
    )?;
    assert_eq!(query(&mut root, "SELECT count(*) FROM secret").await?, "1");
    // A new password ends the sessions signed in with the old one.
    root.execute_update("ALTER USER alice PASSWORD 'new pw'".into(), None)
        .await?;
    let error = refused(
        client.execute("SELECT 1".into(), None).await,
        Code::Unauthenticated,
        "a session outlived its user's password",
    )?;
    assert!(error.contains("sign in again"), "{error}");
    let mut client = connect(&server).await?;
    client.handshake("alice", "new pw").await?;
    assert_eq!(query(&mut client, "SELECT 1").await?, "1");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_call_without_a_valid_token_is_refused_before_its_message_is_read() -> Result<(), BoxError>
{
    let limits = widesql_server::Limits {
        message_bytes: 64 << 10,
        ..widesql_server::Limits::default()
    };
    let (_dir, db, server) = serve_with(limits).await?;
    db.session()
        .run("CREATE USER alice PASSWORD 'alice pw'")
        .await?;
    // A message four times the limit: read first, its size would be what
    // the server answers.
    let big = format!("SELECT '{}'", "x".repeat(256 << 10));
    let mut client = connect(&server).await?;
    refused(
        client.execute(big.clone(), None).await,
        Code::Unauthenticated,
        "a call without a token",
    )?;
    let mut forged = connect(&server).await?;
    forged.set_token("not a token".into());
    refused(
        forged.execute(big.clone(), None).await,
        Code::Unauthenticated,
        "a call with a made-up token",
    )?;
    // Signed in, the same message is read, and refused for its size.
    client.handshake("alice", "alice pw").await?;
    let error = client
        .execute(big, None)
        .await
        .err()
        .ok_or("a message past the limit was taken")?;
    assert_ne!(code(&error), Some(Code::Unauthenticated), "{error}");
    assert_eq!(query(&mut client, "SELECT 1").await?, "1");
    server.shutdown().await?;
    Ok(())
}

/// A bulk ingest of `batches` into `table` with ADBC's `mode`.
async fn ingest(
    client: &mut Client,
    table: &str,
    mode: (TableNotExistOption, TableExistsOption),
    batches: Vec<RecordBatch>,
) -> Result<i64, arrow_flight::error::FlightError> {
    let command = CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: mode.0.into(),
            if_exists: mode.1.into(),
        }),
        table: table.into(),
        schema: None,
        catalog: None,
        temporary: false,
        transaction_id: None,
        options: Default::default(),
    };
    client
        .execute_ingest(command, futures::stream::iter(batches.into_iter().map(Ok)))
        .await
}

#[tokio::test]
async fn bulk_ingest_creates_appends_and_replaces_through_the_import_path() -> Result<(), BoxError>
{
    use TableExistsOption as Exists;
    use TableNotExistOption as Missing;
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("_key", DataType::Utf8, false),
        Field::new("n", DataType::Int64, true),
    ]));
    let batch = |keys: Vec<&str>, ns: Vec<i64>| {
        RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from(keys)),
                Arc::new(Int64Array::from(ns)),
            ],
        )
    };
    // create: two batches into a new table.
    let written = ingest(
        &mut client,
        "people",
        (Missing::Create, Exists::Fail),
        vec![
            batch(vec!["ada", "lin"], vec![36, 29])?,
            batch(vec!["max"], vec![41])?,
        ],
    )
    .await?;
    assert_eq!(written, 3);
    assert_eq!(
        query(&mut client, "SELECT _key, n FROM people ORDER BY _key").await?,
        "ada 36\nlin 29\nmax 41"
    );
    // create again: refused, nothing changed.
    refused(
        ingest(
            &mut client,
            "people",
            (Missing::Create, Exists::Fail),
            vec![batch(vec!["x"], vec![1])?],
        )
        .await,
        Code::InvalidArgument,
        "an ingest created a table that exists",
    )?;
    // append, and create_append into a table that exists.
    ingest(
        &mut client,
        "people",
        (Missing::Fail, Exists::Append),
        vec![batch(vec!["zoe"], vec![7])?],
    )
    .await?;
    ingest(
        &mut client,
        "people",
        (Missing::Create, Exists::Append),
        vec![batch(vec!["bo"], vec![8])?],
    )
    .await?;
    assert_eq!(
        query(&mut client, "SELECT count(*) FROM people").await?,
        "5"
    );
    // append to a missing table: refused, no table made.
    refused(
        ingest(
            &mut client,
            "nobody",
            (Missing::Fail, Exists::Append),
            vec![batch(vec!["x"], vec![1])?],
        )
        .await,
        Code::InvalidArgument,
        "an append created a table",
    )?;
    assert!(db.open_table("default", "public", "nobody").is_err());
    // Options of its own, which this server has none of: refused by name.
    let command = CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: Missing::Create.into(),
            if_exists: Exists::Append.into(),
        }),
        table: "people".into(),
        options: [("compress".to_string(), "yes".to_string())].into(),
        ..Default::default()
    };
    let rows = futures::stream::iter([Ok(batch(vec!["o"], vec![1])?)]);
    let error = refused(
        client.execute_ingest(command, rows).await,
        Code::InvalidArgument,
        "an ingest with an option the server lacks ran",
    )?;
    assert!(error.contains("'compress'"), "{error}");
    // replace: the table holds only the new rows.
    ingest(
        &mut client,
        "people",
        (Missing::Create, Exists::Replace),
        vec![batch(vec!["new"], vec![1])?],
    )
    .await?;
    assert_eq!(
        query(&mut client, "SELECT _key, n FROM people").await?,
        "new 1"
    );
    // A column the table lacks is an error naming it; the table is as it was.
    let other = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("_key", DataType::Utf8, false),
            Field::new("age", DataType::Int64, true),
        ])),
        vec![
            Arc::new(StringArray::from(vec!["q"])),
            Arc::new(Int64Array::from(vec![1])),
        ],
    )?;
    let error = refused(
        ingest(
            &mut client,
            "people",
            (Missing::Fail, Exists::Append),
            vec![other],
        )
        .await,
        Code::InvalidArgument,
        "an unknown column was ingested",
    )?;
    assert!(error.contains("'age'"), "{error}");
    assert_eq!(
        query(&mut client, "SELECT count(*) FROM people").await?,
        "1"
    );
    // An ingest is checked against the user's grants like an INSERT.
    db.session()
        .run("CREATE USER reader PASSWORD 'pw'; GRANT SELECT ON TABLE people TO reader")
        .await?;
    let mut reader = connect(&server).await?;
    reader.handshake("reader", "pw").await?;
    refused(
        ingest(
            &mut reader,
            "people",
            (Missing::Fail, Exists::Append),
            vec![batch(vec!["r"], vec![1])?],
        )
        .await,
        Code::PermissionDenied,
        "an ingest without the INSERT privilege",
    )?;
    refused(
        ingest(
            &mut reader,
            "mine",
            (Missing::Create, Exists::Fail),
            vec![batch(vec!["r"], vec![1])?],
        )
        .await,
        Code::PermissionDenied,
        "an ingest created a table without the CREATE privilege",
    )?;
    assert_eq!(
        query(&mut reader, "SELECT count(*) FROM people").await?,
        "1"
    );
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn errors_carry_their_code_and_widesqls_message() -> Result<(), BoxError> {
    let (_dir, _db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    let error = refused(
        client.execute("SELECT * FROM missing".into(), None).await,
        Code::NotFound,
        "a missing table was read",
    )?;
    assert!(error.to_string().contains("missing"), "{error}");
    client
        .execute_update("CREATE TABLE t (_key VARCHAR PRIMARY KEY)".into(), None)
        .await?;
    refused(
        client
            .execute_update("CREATE TABLE t (_key VARCHAR PRIMARY KEY)".into(), None)
            .await,
        Code::AlreadyExists,
        "a table was created twice",
    )?;
    refused(
        client.execute("SELEC 1".into(), None).await,
        Code::InvalidArgument,
        "nonsense ran",
    )?;
    // No transactions: a statement sent inside one is refused, not run.
    refused(
        client
            .execute_update(
                "INSERT INTO t VALUES ('in-a-transaction')".into(),
                Some("tx".into()),
            )
            .await,
        Code::InvalidArgument,
        "a statement ran inside a transaction",
    )?;
    assert_eq!(query(&mut client, "SELECT count(*) FROM t").await?, "0");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_query_cancelled_before_its_rows_are_fetched_never_runs() -> Result<(), BoxError> {
    let (_dir, _db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    let info = client.execute("SELECT 1".into(), None).await?;
    let channel = Endpoint::from_shared(format!("http://{}", server.local_addr()))?
        .connect()
        .await?;
    let mut flight = FlightClient::new(channel);
    let result = flight
        .cancel_flight_info(CancelFlightInfoRequest::new(info.clone()))
        .await?;
    assert_eq!(result.status(), CancelStatus::Cancelled);
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let error = fetch_error(&mut client, ticket)
        .await
        .ok_or("a cancelled query ran")?;
    assert_eq!(code(&error), Some(Code::NotFound), "{error}");
    // Cancelling it again finds nothing to cancel.
    let result = flight
        .cancel_flight_info(CancelFlightInfoRequest::new(info))
        .await?;
    assert_eq!(result.status(), CancelStatus::NotCancellable);
    // A write runs when it is planned: it cannot be cancelled after.
    client
        .execute_update("CREATE TABLE t (_key VARCHAR PRIMARY KEY)".into(), None)
        .await?;
    let info = client
        .execute("INSERT INTO t VALUES ('a')".into(), None)
        .await?;
    let result = flight
        .cancel_flight_info(CancelFlightInfoRequest::new(info))
        .await?;
    assert_eq!(result.status(), CancelStatus::NotCancellable);
    assert_eq!(query(&mut client, "SELECT _key FROM t").await?, "a");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn tls_serves_a_client_that_trusts_the_certificate() -> Result<(), BoxError> {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()])?;
    let cert_pem = certified.cert.pem();
    let tls = TlsIdentity {
        cert_pem: cert_pem.clone().into_bytes(),
        key_pem: certified.signing_key.serialize_pem().into_bytes(),
    };
    let (_dir, _db, server) = serve(ServeOptions {
        tls: Some(tls),
        ..ServeOptions::default()
    })
    .await?;
    let port = server.local_addr().port();
    let channel = Endpoint::from_shared(format!("https://localhost:{port}"))?
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&cert_pem))
                .domain_name("localhost"),
        )?
        .connect()
        .await?;
    let mut client = FlightSqlServiceClient::new(channel);
    assert_eq!(query(&mut client, "SELECT 41 + 1").await?, "42");
    // A client speaking plain TCP gets nothing.
    let plain = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))?
        .connect()
        .await;
    if let Ok(channel) = plain {
        let mut client = FlightSqlServiceClient::new(channel);
        assert!(client.execute("SELECT 1".into(), None).await.is_err());
    }
    server.shutdown().await?;
    Ok(())
}

/// Refused before anything is bound (tests bind only 127.0.0.1).
#[tokio::test]
async fn a_non_loopback_address_needs_insecure() -> Result<(), BoxError> {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    for listen in ["0.0.0.0:0", "192.0.2.1:50051", "[::]:0"] {
        let options = ServeOptions {
            listen: listen.parse()?,
            ..ServeOptions::default()
        };
        match Server::start(db.clone(), options).await {
            Err(ServeError::Insecure { addr, .. }) => assert_eq!(addr, listen.parse()?),
            Err(other) => return Err(other.into()),
            Ok(_) => return Err(format!("a server without users listened on {listen}").into()),
        }
    }
    Ok(())
}

#[tokio::test]
async fn writes_acknowledged_before_shutdown_are_there_when_the_database_opens_again(
) -> Result<(), BoxError> {
    let (dir, db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    client
        .execute_update(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)".into(),
            None,
        )
        .await?;
    for i in 0..50 {
        client
            .execute_update(format!("INSERT INTO t VALUES ('k{i}', {i})"), None)
            .await?;
    }
    drop(client);
    server.shutdown().await?;
    drop(db);
    let db = Db::open(dir.path())?;
    let outputs = db.session().run("SELECT count(*), sum(n) FROM t").await?;
    assert_eq!(text_lines(&outputs[0].batches)?, ["50 1225"]);
    Ok(())
}

#[tokio::test]
async fn sessions_are_bounded_and_expire_when_idle() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        sessions: 1,
        session_idle: std::time::Duration::from_secs(2),
        ..widesql_server::Limits::default()
    };
    let (_dir, _db, server) = serve_with(limits).await?;
    let mut first = connect(&server).await?;
    first.handshake("a", "").await?;
    let mut second = connect(&server).await?;
    let denied = second
        .handshake("b", "")
        .await
        .err()
        .ok_or("a second session opened")?;
    // The client reports a failed handshake as text: the status's code
    // and message.
    let denied = denied.to_string();
    assert!(denied.contains("resource has been exhausted"), "{denied}");
    assert!(denied.contains("1 sessions open, its limit"), "{denied}");
    assert_eq!(query(&mut first, "SELECT 1").await?, "1");
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    refused(
        first.execute("SELECT 1".into(), None).await,
        Code::Unauthenticated,
        "an idle token lived on",
    )?;
    // Its place is free again.
    second.handshake("b", "").await?;
    assert_eq!(query(&mut second, "SELECT 2").await?, "2");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn the_last_sessions_are_kept_for_admins_and_users_dropped_or_signed_out_make_room(
) -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        sessions: 16,
        ..widesql_server::Limits::default()
    };
    let (_dir, db, server) = serve_with(limits).await?;
    db.session()
        .run(
            "CREATE USER alice PASSWORD 'alice pw'; CREATE USER bob PASSWORD 'bob pw'; \
             CREATE USER root PASSWORD 'root pw' ADMIN",
        )
        .await?;
    let sign_in_with = |user: &'static str, password: &'static str| {
        let server_addr = server.local_addr();
        async move {
            let channel = Endpoint::from_shared(format!("http://{server_addr}"))?
                .connect()
                .await?;
            let mut client = FlightSqlServiceClient::new(channel);
            client.handshake(user, password).await?;
            Ok::<_, BoxError>(client)
        }
    };
    let sign_in = |user: &'static str| {
        let password = match user {
            "alice" => "alice pw",
            "bob" => "bob pw",
            _ => "root pw",
        };
        sign_in_with(user, password)
    };
    // Users other than admins fill 15 of the 16 sessions.
    let mut open = Vec::new();
    for user in ["bob"; 5].into_iter().chain(["alice"; 10]) {
        open.push(sign_in(user).await?);
    }
    let refused = sign_in("alice")
        .await
        .err()
        .ok_or("a user took the admins' session")?;
    assert!(
        refused
            .to_string()
            .contains("its limit for users other than admins"),
        "{refused}"
    );
    // The last one is an admin's.
    let mut root = sign_in("root").await?;
    assert_eq!(query(&mut root, "SELECT 1").await?, "1");
    sign_in("root")
        .await
        .err()
        .ok_or("more sessions opened than the server's limit")?;
    // The sessions of a user whose password changed make room at once.
    db.session()
        .run("ALTER USER bob PASSWORD 'bob new pw'")
        .await?;
    let mut alice = sign_in("alice").await?;
    assert_eq!(query(&mut alice, "SELECT 2").await?, "2");
    // With 11 of alice's and root's, three of bob's fill the users' share
    // again; then a dropped user's sessions make room at once.
    for _ in 0..3 {
        open.push(sign_in_with("bob", "bob new pw").await?);
    }
    sign_in("alice")
        .await
        .err()
        .ok_or("a user took the admins' session")?;
    db.session().run("DROP USER bob").await?;
    let mut alice = sign_in("alice").await?;
    assert_eq!(query(&mut alice, "SELECT 3").await?, "3");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn statements_kept_between_calls_are_bounded() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        statements: 1,
        ..widesql_server::Limits::default()
    };
    let (_dir, db, server) = serve_with(limits).await?;
    let mut client = connect(&server).await?;
    client
        .execute_update("CREATE TABLE t (_key VARCHAR PRIMARY KEY)".into(), None)
        .await?;
    let waiting = client.execute("SELECT 1".into(), None).await?;
    // A second statement is refused before it runs: the row is not written.
    refused(
        client
            .execute("INSERT INTO t VALUES ('x')".into(), None)
            .await,
        Code::ResourceExhausted,
        "a second statement was kept",
    )?;
    let outputs = db.session().run("SELECT count(*) FROM t").await?;
    assert_eq!(text_lines(&outputs[0].batches)?, ["0"]);
    // Fetching the first makes room.
    assert_eq!(rows(&mut client, waiting).await?, "1");
    assert_eq!(query(&mut client, "SELECT 2").await?, "2");
    // Prepared statements have the same bound.
    let _kept = client.prepare("SELECT 3".into(), None).await?;
    refused(
        client.prepare("SELECT 4".into(), None).await,
        Code::ResourceExhausted,
        "a second prepared statement was kept",
    )?;
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn statements_longer_than_the_limit_are_refused_unread() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        statement_bytes: 64,
        ..widesql_server::Limits::default()
    };
    let (_dir, db, server) = serve_with(limits).await?;
    let mut client = connect(&server).await?;
    client
        .execute_update("CREATE TABLE t (_key VARCHAR PRIMARY KEY)".into(), None)
        .await?;
    // Padded with spaces to the limit exactly: taken.
    let at_limit = format!("{:<64}", "INSERT INTO t VALUES ('a')");
    assert_eq!(client.execute_update(at_limit, None).await?, 1);
    let over = format!("{:<65}", "INSERT INTO t VALUES ('b')");
    let error = refused(
        client.execute_update(over.clone(), None).await,
        Code::ResourceExhausted,
        "an update over the limit ran",
    )?;
    assert!(
        error.contains("65 bytes long, more than the server's limit of 64 bytes"),
        "{error}"
    );
    refused(
        client.execute(over.clone(), None).await,
        Code::ResourceExhausted,
        "a query over the limit was planned",
    )?;
    refused(
        client.prepare(over.clone(), None).await,
        Code::ResourceExhausted,
        "a statement over the limit was prepared",
    )?;
    refused(
        client.do_get(statement_ticket(&over, None)).await,
        Code::ResourceExhausted,
        "a statement over the limit ran as its own ticket",
    )?;
    let outputs = db.session().run("SELECT _key FROM t").await?;
    assert_eq!(text_lines(&outputs[0].batches)?, ["a"]);
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn one_session_cannot_take_every_kept_statement() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        statements_per_session: 2,
        ..widesql_server::Limits::default()
    };
    let (_dir, _db, server) = serve_with(limits).await?;
    let mut greedy = connect(&server).await?;
    greedy.handshake("greedy", "").await?;
    let _first = greedy.execute("SELECT 1".into(), None).await?;
    let _second = greedy.execute("SELECT 2".into(), None).await?;
    let error = refused(
        greedy.execute("SELECT 3".into(), None).await,
        Code::ResourceExhausted,
        "a session kept more statements than its share",
    )?;
    assert!(error.contains("this session holds 2"), "{error}");
    let _kept = greedy.prepare("SELECT 4".into(), None).await?;
    let _kept2 = greedy.prepare("SELECT 5".into(), None).await?;
    refused(
        greedy.prepare("SELECT 6".into(), None).await,
        Code::ResourceExhausted,
        "a session kept more prepared statements than its share",
    )?;
    // Another session still has room.
    let mut other = connect(&server).await?;
    other.handshake("other", "").await?;
    assert_eq!(query(&mut other, "SELECT 7").await?, "7");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn clients_cannot_use_the_hosts_files_or_resources() -> Result<(), BoxError> {
    let (dir, _db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    let target = dir.path().join("out.csv");
    for statement in [
        format!("COPY (SELECT 1 AS a) TO '{}'", target.display()),
        format!(
            "CREATE EXTERNAL TABLE leak STORED AS CSV LOCATION '{}'",
            dir.path().display()
        ),
        format!(
            "SET datafusion.runtime.temp_directory = '{}'",
            dir.path().display()
        ),
        "SET datafusion.runtime.memory_limit = '100G'".to_string(),
        "SET datafusion.sql_parser.recursion_limit = 1000000".to_string(),
    ] {
        let error = refused(
            client.execute_update(statement.clone(), None).await,
            Code::InvalidArgument,
            format!("ran: {statement}"),
        )?;
        assert!(
            error.to_string().contains("the host's files or resources"),
            "{error}"
        );
    }
    assert!(!target.exists());
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn shutdown_ends_a_stream_left_open_after_its_grace() -> Result<(), BoxError> {
    let (_dir, db, server) = serve_with_short_grace().await?;
    big_table(&db, 50_000).await?;
    let mut client = connect(&server).await?;
    let info = client.execute("SELECT * FROM big".into(), None).await?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let mut stream = client.do_get(ticket).await?;
    // One batch read; the rest left waiting.
    assert!(stream.try_next().await?.is_some());
    tokio::time::timeout(std::time::Duration::from_secs(20), server.shutdown())
        .await
        .map_err(|_| "shutdown waited past its grace")??;
    Ok(())
}

/// Cancels `info` from another connection of `client`'s session (a query
/// belongs to the session that planned it); what the server answered.
async fn cancel_from_another_connection(
    server: &Server,
    client: &Client,
    info: FlightInfo,
) -> Result<CancelStatus, BoxError> {
    let channel = Endpoint::from_shared(format!("http://{}", server.local_addr()))?
        .connect()
        .await?;
    let mut flight = FlightClient::new(channel);
    let token = client.token().ok_or("no token")?.clone();
    flight.add_header("authorization", &format!("Bearer {token}"))?;
    let result = flight
        .cancel_flight_info(CancelFlightInfoRequest::new(info))
        .await?;
    Ok(result.status())
}

/// Starts, on a client of its own, a bulk ingest creating `table` that
/// sends one batch and then nothing, with its call left waiting; returns
/// the call's task, which ends with the call's answer.
async fn stalled_ingest(
    server: &Server,
    table: &str,
) -> Result<tokio::task::JoinHandle<Result<i64, arrow_flight::error::FlightError>>, BoxError> {
    let mut client = connect(server).await?;
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("_key", DataType::Utf8, false)])),
        vec![Arc::new(StringArray::from(vec!["a", "b"]))],
    )?;
    let command = CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Create.into(),
            if_exists: TableExistsOption::Fail.into(),
        }),
        table: table.into(),
        schema: None,
        catalog: None,
        temporary: false,
        transaction_id: None,
        options: Default::default(),
    };
    let rows = futures::stream::iter([Ok(batch)]).chain(futures::stream::pending());
    Ok(tokio::spawn(async move {
        client.execute_ingest(command, rows).await
    }))
}

#[tokio::test]
async fn an_ingest_whose_client_stalls_fails_and_frees_its_slot() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        input_idle: std::time::Duration::from_millis(300),
        running_statements: 1,
        ..widesql_server::Limits::default()
    };
    let (_dir, _db, server) = serve_with(limits).await?;
    let answer = stalled_ingest(&server, "stalled").await?;
    let answer = tokio::time::timeout(std::time::Duration::from_secs(60), answer)
        .await
        .map_err(|_| "a stalled ingest was still waiting after a minute")??;
    let error = answer.err().ok_or("a stalled ingest succeeded")?;
    assert_eq!(code(&error), Some(Code::DeadlineExceeded), "{error}");
    assert!(
        error
            .to_string()
            .contains("the client sent no rows for 0.3 s"),
        "{error}"
    );
    // So does one that goes on sending messages without rows.
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("_key", DataType::Utf8, false)])),
        vec![Arc::new(StringArray::from(vec!["a"]))],
    )?;
    let options = datafusion::arrow::ipc::writer::IpcWriteOptions::default();
    let messages = ingest_messages("pinging", &[batch], &options)?;
    let pings = futures::stream::unfold((), |()| async {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let ping = arrow_flight::FlightData {
            app_metadata: "still here".into(),
            ..Default::default()
        };
        Some((ping, ()))
    });
    let mut pinging = connect(&server).await?;
    let put = async move {
        let body = futures::stream::iter(messages).chain(pings);
        match pinging.do_put(body).await {
            Ok(answers) => answers
                .try_collect::<Vec<_>>()
                .await
                .err()
                .map(|s| s.code()),
            Err(e) => code(&e),
        }
    };
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(60), put)
        .await
        .map_err(|_| "an ingest sending metadata alone still ran after a minute")?;
    assert_eq!(stopped, Some(Code::DeadlineExceeded));
    // The table it would have created does not exist, and the only slot
    // is free again.
    let mut client = connect(&server).await?;
    assert_eq!(
        query(
            &mut client,
            "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('stalled', \
             'pinging')"
        )
        .await?,
        "0"
    );
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn shutdown_ends_an_ingest_whose_client_stalls() -> Result<(), BoxError> {
    let (_dir, db, server) = serve_with_short_grace().await?;
    let answer = stalled_ingest(&server, "stalled").await?;
    // The ingest is under way once it shows in the activity (its rows
    // are then being read, in a statement slot, a moment later).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !text_lines(&db.session().run("SHOW ACTIVITY").await?[0].batches)?
        .iter()
        .any(|line| line.contains("INGEST"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the ingest never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // Waiting for the client's next message (a minute by default) would
    // hold the shutdown: it stops the ingest instead.
    tokio::time::timeout(std::time::Duration::from_secs(20), server.shutdown())
        .await
        .map_err(|_| "a stalled ingest held the shutdown")??;
    // The client is told the server is stopping, a reason to try again.
    let answer = tokio::time::timeout(std::time::Duration::from_secs(20), answer)
        .await
        .map_err(|_| "the stalled ingest got no answer")??;
    let error = answer.err().ok_or("a stalled ingest succeeded")?;
    assert_eq!(code(&error), Some(Code::Unavailable), "{error}");
    let outputs = db
        .session()
        .run("SELECT count(*) FROM information_schema.tables WHERE table_name = 'stalled'")
        .await?;
    assert_eq!(text_lines(&outputs[0].batches)?.join(""), "0");
    Ok(())
}

#[tokio::test]
async fn a_prepared_query_streaming_twice_is_cancelled_after_one_run_ends() -> Result<(), BoxError>
{
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    big_table(&db, 20_000).await?;
    let mut client = connect(&server).await?;
    client.handshake("reader", "").await?;
    client
        .execute_update("SET datafusion.execution.batch_size = 50".into(), None)
        .await?;
    let mut prepared = client.prepare("SELECT k, v FROM big".into(), None).await?;
    let info = prepared.execute().await?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    // Two runs of the one handle; the first ends (its client drops it).
    let mut first = client.do_get(ticket.clone()).await?;
    let mut second = client.do_get(ticket).await?;
    first.try_next().await?.ok_or("no rows")?;
    second.try_next().await?.ok_or("no rows")?;
    drop(first);
    // Once the server has seen the first run end, only the second shows.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let selects = || async {
        let outputs = db.session().run("SHOW ACTIVITY").await?;
        let lines = text_lines(&outputs[0].batches)?;
        Ok::<_, BoxError>(lines.iter().filter(|l| l.contains("SELECT")).count())
    };
    while selects().await? != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the first run never ended"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The run still streaming is the one the cancel stops.
    assert_eq!(
        cancel_from_another_connection(&server, &client, info).await?,
        CancelStatus::Cancelled
    );
    let error = end_of(second)
        .await
        .ok_or("every row of the second run came after the cancel")?;
    assert_eq!(code(&error), Some(Code::Cancelled), "{error}");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_query_cancelled_while_its_rows_stream_stops() -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    big_table(&db, 20_000).await?;
    let mut client = connect(&server).await?;
    client.handshake("reader", "").await?;
    // Small batches: many messages, so the stream is still going when the
    // cancel arrives.
    client
        .execute_update("SET datafusion.execution.batch_size = 50".into(), None)
        .await?;
    let info = client.execute("SELECT k, v FROM big".into(), None).await?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let mut stream = client.do_get(ticket).await?;
    let first = stream.try_next().await?.ok_or("no rows")?;
    assert!(first.num_rows() > 0);
    assert_eq!(
        cancel_from_another_connection(&server, &client, info).await?,
        CancelStatus::Cancelled
    );
    let mut read = first.num_rows();
    let ended = loop {
        match stream.try_next().await {
            Ok(Some(batch)) => read += batch.num_rows(),
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    let error = ended.ok_or(format!("all {read} rows came after the cancel"))?;
    assert_eq!(code(&error), Some(Code::Cancelled), "{error}");
    assert!(read < 20_000, "{read} rows");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_write_runs_to_its_end_when_its_client_gives_up() -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    client
        .execute_update(
            "CREATE TABLE t (k BIGINT PRIMARY KEY, v VARCHAR)".into(),
            None,
        )
        .await?;
    // A client that waits a millisecond: it gives up long before the
    // 30,000 rows (three atomic batches) are written.
    let impatient = Endpoint::from_shared(format!("http://{}", server.local_addr()))?
        .timeout(std::time::Duration::from_millis(1))
        .connect()
        .await?;
    let mut impatient = FlightSqlServiceClient::new(impatient);
    let insert = "INSERT INTO t SELECT value, concat('v', CAST(value AS VARCHAR)) \
                  FROM generate_series(1, 30000) AS s(value)";
    let gave_up = impatient.execute_update(insert.into(), None).await;
    assert!(gave_up.is_err(), "the write finished within a millisecond");
    // Every row arrives: the write was not stopped part-way.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let outputs = db.session().run("SELECT count(*) FROM t").await?;
        let count = text_lines(&outputs[0].batches)?.join("");
        if count == "30000" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{count} rows of 30000 after a minute"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_write_sent_as_a_query_is_made_when_it_is_asked_for() -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    client
        .execute_update(
            "CREATE TABLE t (k BIGINT PRIMARY KEY, v VARCHAR)".into(),
            None,
        )
        .await?;
    let count = || async {
        let outputs = db.session().run("SELECT count(*) FROM t").await?;
        Ok::<_, BoxError>(text_lines(&outputs[0].batches)?.join(""))
    };
    // Sent as a query (GetFlightInfo): made by the time its FlightInfo
    // comes back, whether or not its ticket is ever fetched.
    let insert = "INSERT INTO t SELECT value, 'q' FROM generate_series(1, 30000) AS s(value)";
    let info = client.execute(insert.into(), None).await?;
    assert_eq!(count().await?, "30000");
    // Its ticket gives the count, and does not write again.
    assert_eq!(rows(&mut client, info).await?, "30000");
    assert_eq!(count().await?, "30000");
    // A prepared one fetched with DoGet (what ADBC's `execute` does with
    // parameters): made by the time DoGet answers, its rows unread.
    let mut prepared = client
        .prepare(
            "INSERT INTO t SELECT value + $1, 'p' FROM generate_series(1, 5) AS s(value)".into(),
            None,
        )
        .await?;
    let schema = Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, false)]));
    let binding = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![100_000]))])?;
    prepared.set_parameters(binding)?;
    let info = prepared.execute().await?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let unread = client.do_get(ticket).await?;
    assert_eq!(count().await?, "30005");
    drop(unread);
    server.shutdown().await?;
    Ok(())
}

/// Starts a query of a billion rows on `client` and reads its first
/// batch; the rest waits in the stream (the server blocks once the
/// connection's window is full).
/// A query that streams rows for far longer than any test runs.
const ENDLESS_QUERY: &str =
    "SELECT value, 'a row of the endless query' AS v FROM generate_series(1, 1000000000)";

async fn started_query(
    client: &mut Client,
) -> Result<arrow_flight::decode::FlightRecordBatchStream, BoxError> {
    let info = client.execute(ENDLESS_QUERY.into(), None).await?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let mut stream = client.do_get(ticket).await?;
    stream.try_next().await?.ok_or("no rows")?;
    Ok(stream)
}

/// How a stream ends after its first batch: its error, if any.
async fn end_of(
    mut stream: arrow_flight::decode::FlightRecordBatchStream,
) -> Option<arrow_flight::error::FlightError> {
    loop {
        match stream.try_next().await {
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => return Some(e),
        }
    }
}

#[tokio::test]
async fn limits_stop_the_statement_that_breaks_them_and_no_other() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        running_statements: 1,
        query_time: std::time::Duration::from_secs(2),
        session_memory: 256 << 10,
        ..widesql_server::Limits::default()
    };
    let (_dir, db, server) = serve_with(limits).await?;
    big_table(&db, 20_000).await?;
    let mut first = connect(&server).await?;
    first.handshake("first", "").await?;
    // A query streaming its rows holds the one slot.
    let stream = started_query(&mut first).await?;
    let mut second = connect(&server).await?;
    let error = refused(
        second.execute("SELECT 1".into(), None).await,
        Code::ResourceExhausted,
        "a second statement ran past the limit of one",
    )?;
    assert!(error.contains("1 statements at once"), "{error}");
    let error = fetch_error(&mut second, statement_ticket("SELECT 1", None))
        .await
        .ok_or("a query sent as its own ticket ran past the limit of one")?;
    assert_eq!(code(&error), Some(Code::ResourceExhausted), "{error}");
    // A catalog call's rows are made in a slot too (every table's schema,
    // of a catalog as large as it may be).
    let tables = CommandGetTables {
        table_name_filter_pattern: Some("big".into()),
        include_schema: true,
        ..Default::default()
    };
    let info = second.get_tables(tables.clone()).await?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let error = fetch_error(&mut second, ticket)
        .await
        .ok_or("a catalog call ran past the limit of one statement")?;
    assert_eq!(code(&error), Some(Code::ResourceExhausted), "{error}");
    assert!(
        error.to_string().contains("1 statements at once"),
        "{error}"
    );
    // The query is stopped once it has run for the query time.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let error = end_of(stream).await.ok_or("the query outlived its time")?;
    assert_eq!(code(&error), Some(Code::DeadlineExceeded), "{error}");
    // So is one sent as its own ticket.
    let mut one_call = first.do_get(statement_ticket(ENDLESS_QUERY, None)).await?;
    one_call.try_next().await?.ok_or("no rows")?;
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let error = end_of(one_call)
        .await
        .ok_or("a query sent as its own ticket outlived its time")?;
    assert_eq!(code(&error), Some(Code::DeadlineExceeded), "{error}");
    // Its slot is free again.
    assert_eq!(query(&mut second, "SELECT 41 + 1").await?, "42");
    let info = second.get_tables(tables).await?;
    assert_eq!(metadata_batch(&mut second, info).await?.num_rows(), 1);
    // A query that needs more memory than a session may hold.
    let error = refused(
        query(
            &mut second,
            "SELECT count(*) FROM big a JOIN big b ON a.v = b.v",
        )
        .await
        .map_err(|e| match e.downcast::<arrow_flight::error::FlightError>() {
            Ok(e) => *e,
            Err(e) => arrow_flight::error::FlightError::ProtocolError(e.to_string()),
        }),
        Code::ResourceExhausted,
        "a join larger than the session's memory ran",
    )?;
    assert!(
        error.contains("memory") || error.contains("Resources exhausted"),
        "{error}"
    );
    assert_eq!(
        query(&mut first, "SELECT count(*) FROM big").await?,
        "20000"
    );
    // The rows of a write made when it was planned are sent without a
    // slot, while a query holds the only one.
    let info = second
        .execute("INSERT INTO big VALUES (-1, 'one more')".into(), None)
        .await?;
    let wrote = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let stream = started_query(&mut first).await?;
    let batches: Vec<RecordBatch> = second.do_get(wrote).await?.try_collect().await?;
    assert_eq!(text_lines(&batches)?, ["1"], "rows the INSERT wrote");
    drop(stream);
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn connections_past_the_limit_are_closed_and_others_go_on() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        connections: 1,
        ..widesql_server::Limits::default()
    };
    let (_dir, _db, server) = serve_with(limits).await?;
    let mut first = connect(&server).await?;
    assert_eq!(query(&mut first, "SELECT 1").await?, "1");
    let second = match connect(&server).await {
        Ok(mut client) => client.execute("SELECT 2".into(), None).await.err(),
        Err(e) => Some(arrow_flight::error::FlightError::ProtocolError(
            e.to_string(),
        )),
    };
    assert!(second.is_some(), "a second connection was served");
    assert_eq!(query(&mut first, "SELECT 3").await?, "3");
    // Once the first closes, a new one is served.
    drop(first);
    let mut served = None;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if let Ok(mut client) = connect(&server).await {
            if let Ok(rows) = query(&mut client, "SELECT 4").await {
                served = Some(rows);
                break;
            }
        }
    }
    assert_eq!(served.as_deref(), Some("4"));
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn tickets_and_prepared_statements_belong_to_their_session() -> Result<(), BoxError> {
    let (_dir, _db, server) = serve(ServeOptions::default()).await?;
    let mut owner = connect(&server).await?;
    owner.handshake("owner", "").await?;
    let mut other = connect(&server).await?;
    other.handshake("other", "").await?;
    let info = owner.execute("SELECT 7".into(), None).await?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let error = fetch_error(&mut other, ticket.clone())
        .await
        .ok_or("another session fetched the ticket")?;
    assert_eq!(code(&error), Some(Code::NotFound), "{error}");
    let batches: Vec<RecordBatch> = owner.do_get(ticket).await?.try_collect().await?;
    assert_eq!(text_lines(&batches)?, ["7"]);
    // So do prepared statements: their ticket names the statement's handle.
    let mut prepared = owner.prepare("SELECT 8".into(), None).await?;
    let info = prepared.execute().await?;
    let ticket = info.endpoint[0].ticket.clone().ok_or("no ticket")?;
    let error = fetch_error(&mut other, ticket.clone())
        .await
        .ok_or("another session ran the prepared statement")?;
    assert_eq!(code(&error), Some(Code::NotFound), "{error}");
    let batches: Vec<RecordBatch> = owner.do_get(ticket).await?.try_collect().await?;
    assert_eq!(text_lines(&batches)?, ["8"]);
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn show_activity_lists_running_statements_and_cancel_stops_one() -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    big_table(&db, 20_000).await?;
    db.session()
        .run(
            "CREATE USER root PASSWORD 'r' ADMIN; CREATE USER alice PASSWORD 'a'; \
             GRANT SELECT ON TABLE big TO alice; CREATE USER bob PASSWORD 'b'",
        )
        .await?;
    let mut alice = connect(&server).await?;
    alice.handshake("alice", "a").await?;
    let stream = started_query(&mut alice).await?;
    let mut root = connect(&server).await?;
    root.handshake("root", "r").await?;
    let activity = query(&mut root, "SHOW ACTIVITY").await?;
    let line = activity
        .lines()
        .find(|l| l.contains(" alice ") && l.contains("SELECT"))
        .ok_or(format!("alice's query is not listed: {activity}"))?
        .to_string();
    let id = line.split(' ').next().ok_or("no id")?.to_string();
    // Another user sees only its own statements, and cannot cancel hers.
    let mut bob = connect(&server).await?;
    bob.handshake("bob", "b").await?;
    let seen = query(&mut bob, "SHOW ACTIVITY").await?;
    assert!(!seen.contains("alice"), "{seen}");
    refused(
        bob.execute_update(format!("CANCEL {id}"), None).await,
        Code::PermissionDenied,
        "bob cancelled alice's query",
    )?;
    root.execute_update(format!("CANCEL STATEMENT {id}"), None)
        .await?;
    let error = end_of(stream)
        .await
        .ok_or("the cancelled query ran to its end")?;
    assert_eq!(code(&error), Some(Code::Cancelled), "{error}");
    refused(
        root.execute_update("CANCEL 999999".into(), None).await,
        Code::InvalidArgument,
        "a statement that does not run was cancelled",
    )?;
    server.shutdown().await?;
    Ok(())
}

/// The error of a sign-in that must be refused.
async fn refused_sign_in(
    client: &mut FlightSqlServiceClient<Channel>,
    user: &str,
    password: &str,
) -> Result<String, BoxError> {
    match client.handshake(user, password).await {
        Ok(_) => Err(format!("{user} signed in, where it must be refused").into()),
        Err(e) => Ok(e.to_string()),
    }
}

#[tokio::test]
async fn sign_ins_that_keep_failing_wait_before_the_next() -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    db.create_user("alice", "alice pw", false)?;
    db.create_user("bob", "bob pw", false)?;
    let mut client = connect(&server).await?;
    // Five failures in a row are answered as failures.
    for _ in 0..5 {
        let error = refused_sign_in(&mut client, "alice", "guess").await?;
        assert!(error.contains("wrong user name or password"), "{error}");
    }
    // Then the address waits, even with the right password.
    let error = refused_sign_in(&mut client, "alice", "alice pw").await?;
    assert!(
        error.contains("5 sign-ins as alice from 127.0.0.1 failed in a row: sign in again in"),
        "{error}"
    );
    // Another user's sign-in from the address is checked, and its success
    // does not forget alice's failures.
    connect(&server).await?.handshake("bob", "bob pw").await?;
    let error = refused_sign_in(&mut connect(&server).await?, "alice", "alice pw").await?;
    assert!(error.contains("sign in again in"), "{error}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    client.handshake("alice", "alice pw").await?;
    // A success forgets the failures: the next failure is answered as one.
    let error = refused_sign_in(&mut connect(&server).await?, "alice", "guess").await?;
    assert!(error.contains("wrong user name or password"), "{error}");
    server.shutdown().await?;
    Ok(())
}

/// Many user names tried from one address, each fewer times than makes it
/// wait, are slowed as well; a success does not start that count again.
#[tokio::test]
async fn sign_ins_failing_as_many_users_wait_too() -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    db.create_user("alice", "alice pw", false)?;
    let mut client = connect(&server).await?;
    // 20 failures as 10 names, 2 each: every one answered as a failure.
    for _round in 0..2 {
        for n in 0..10 {
            let error = refused_sign_in(&mut client, &format!("user{n}"), "guess").await?;
            assert!(error.contains("wrong user name or password"), "{error}");
        }
    }
    // The next sign-in waits, whoever it is as, even one that would pass.
    let error = refused_sign_in(&mut client, "alice", "alice pw").await?;
    assert!(
        error.contains("20 sign-ins as any user from 127.0.0.1 failed lately: sign in again in"),
        "{error}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    client.handshake("alice", "alice pw").await?;
    // The success did not start the address's count again: one more
    // failure makes it wait (two seconds now).
    let error = refused_sign_in(&mut connect(&server).await?, "user0", "guess").await?;
    assert!(error.contains("wrong user name or password"), "{error}");
    let error = refused_sign_in(&mut connect(&server).await?, "alice", "alice pw").await?;
    assert!(error.contains("21 sign-ins as any user"), "{error}");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn one_user_cannot_take_every_session_or_statement_slot() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        sessions_per_user: 2,
        running_statements_per_user: 1,
        ..widesql_server::Limits::default()
    };
    let (_dir, db, server) = serve_with(limits).await?;
    db.create_user("alice", "a", false)?;
    db.create_user("bob", "b", false)?;
    let mut alice = connect(&server).await?;
    alice.handshake("alice", "a").await?;
    let mut alice_again = connect(&server).await?;
    alice_again.handshake("alice", "a").await?;
    let mut alice_third = connect(&server).await?;
    let error = alice_third.handshake("alice", "a").await.err();
    let error = error.ok_or("a third session of alice opened")?.to_string();
    assert!(
        error.contains("user alice has 2 sessions open, the limit for one user"),
        "{error}"
    );
    let mut bob = connect(&server).await?;
    bob.handshake("bob", "b").await?;
    // Alice's streaming query holds her one slot; bob's statements run.
    let stream = started_query(&mut alice).await?;
    let error = refused(
        alice_again.execute("SELECT 1".into(), None).await,
        Code::ResourceExhausted,
        "alice ran a second statement past her limit of one",
    )?;
    assert!(
        error.contains("user alice runs 1 statements at once, the limit for one user"),
        "{error}"
    );
    assert_eq!(query(&mut bob, "SELECT 40 + 2").await?, "42");
    // Her slot is free again once her query ends.
    drop(stream);
    let mut ran = None;
    for _ in 0..100 {
        match query(&mut alice_again, "SELECT 7").await {
            Ok(rows) => {
                ran = Some(rows);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
    assert_eq!(ran.as_deref(), Some("7"), "alice's slot was never freed");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_ticket_planned_before_a_revoke_is_not_fetched_after_it() -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    let admin = db.session();
    admin
        .run(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT); INSERT INTO t VALUES ('a', 1); \
             CREATE USER alice PASSWORD 'a'; CREATE USER bob PASSWORD 'b'; \
             CREATE USER root PASSWORD 'r' ADMIN; GRANT SELECT ON TABLE t TO alice",
        )
        .await?;
    let mut alice = connect(&server).await?;
    alice.handshake("alice", "a").await?;
    let ticket_of = |info: arrow_flight::FlightInfo| {
        info.endpoint[0]
            .ticket
            .clone()
            .ok_or_else(|| BoxError::from("no ticket"))
    };
    // A change to another user's grants leaves her ticket alone.
    let kept = ticket_of(alice.execute("SELECT n FROM t".into(), None).await?)?;
    admin.run("GRANT SELECT ON TABLE t TO bob").await?;
    let batches: Vec<RecordBatch> = alice.do_get(kept).await?.try_collect().await?;
    assert_eq!(text_lines(&batches)?, ["1"]);
    // A change to hers refuses it.
    let stale = ticket_of(alice.execute("SELECT n FROM t".into(), None).await?)?;
    admin.run("REVOKE SELECT ON TABLE t FROM alice").await?;
    let error = fetch_error(&mut alice, stale)
        .await
        .ok_or("a ticket planned before a REVOKE was fetched after it")?;
    assert_eq!(code(&error), Some(Code::Aborted), "{error}");
    assert!(
        error
            .to_string()
            .contains("the user's grants changed after this query was planned"),
        "{error}"
    );
    refused(
        alice.execute("SELECT n FROM t".into(), None).await,
        Code::PermissionDenied,
        "alice planned a query after her grant was revoked",
    )?;
    // A statement that wrote when it was planned (the EXECUTE of a prepared
    // INSERT) is fetched after a change to her grants: it has run, and to
    // refuse it would have her run it, and write, a second time.
    admin
        .run("GRANT SELECT ON TABLE t TO alice; GRANT INSERT ON TABLE t TO alice")
        .await?;
    query(
        &mut alice,
        "PREPARE ins(VARCHAR, BIGINT) AS INSERT INTO t VALUES ($1, $2)",
    )
    .await?;
    let wrote = ticket_of(alice.execute("EXECUTE ins('b', 2)".into(), None).await?)?;
    admin.run("REVOKE INSERT ON TABLE t FROM alice").await?;
    let batches: Vec<RecordBatch> = alice.do_get(wrote).await?.try_collect().await?;
    assert_eq!(text_lines(&batches)?, ["1"], "rows the EXECUTE wrote");
    assert_eq!(query(&mut alice, "SELECT count(*) FROM t").await?, "2");
    // So is one DataFusion ran as it planned it, whose first word says
    // nothing of what it is.
    let set = "/* smaller batches */ SET datafusion.execution.batch_size = 1024";
    let set = ticket_of(alice.execute(set.into(), None).await?)?;
    admin.run("GRANT INSERT ON TABLE t TO alice").await?;
    let _: Vec<RecordBatch> = alice.do_get(set).await?.try_collect().await?;
    let shown = query(&mut alice, "SHOW datafusion.execution.batch_size").await?;
    assert!(shown.contains("1024"), "{shown}");
    // A statement that changes its own user's grants has run, and answers.
    let mut root = connect(&server).await?;
    root.handshake("root", "r").await?;
    query(&mut root, "GRANT SELECT ON TABLE t TO root").await?;
    let grants = query(&mut root, "SHOW GRANTS FOR root").await?;
    assert!(grants.contains("SELECT"), "{grants}");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_statement_nested_too_deep_is_refused_and_the_server_goes_on() -> Result<(), BoxError> {
    let (_dir, _db, server) = serve(ServeOptions::default()).await?;
    let mut client = connect(&server).await?;
    client.handshake("anyone", "").await?;
    let deep = format!("SELECT {}", vec!["1"; 200_000].join(" + "));
    let error = refused(
        client.execute(deep.clone(), None).await,
        Code::ResourceExhausted,
        "a chain of 200,000 additions was planned",
    )?;
    assert!(
        error.contains("levels deep, the most this thread's stack allows"),
        "{error}"
    );
    let error = refused(
        client
            .execute_update(format!("INSERT INTO nowhere {deep}"), None)
            .await,
        Code::ResourceExhausted,
        "an update with a chain of 200,000 additions ran",
    )?;
    assert!(error.contains("levels deep"), "{error}");
    assert_eq!(query(&mut client, "SELECT 1 + 1").await?, "2");
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn parameters_past_the_servers_bytes_are_refused() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        message_bytes: 4 << 20,
        ..widesql_server::Limits::default()
    };
    let (_dir, _db, server, mut client) = serve_with_table_t(limits).await?;
    let mut insert = client
        .prepare("INSERT INTO t VALUES ($1, $2)".into(), None)
        .await?;
    let rows = |count: usize, prefix: &str| -> Result<RecordBatch, BoxError> {
        let keys: Vec<String> = (0..count).map(|i| format!("{prefix}{i:07}")).collect();
        let bodies = vec!["x".repeat(1100); count];
        let schema = Arc::new(Schema::new(vec![
            Field::new("$1", DataType::Utf8, false),
            Field::new("$2", DataType::Utf8, false),
        ]));
        Ok(RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(keys)),
                Arc::new(StringArray::from(bodies)),
            ],
        )?)
    };
    // ~3.3 MB, sent as two messages: under the limit, every row runs.
    insert.set_parameters(rows(3_000, "a")?)?;
    assert_eq!(insert.execute_update().await?, 3_000);
    // ~11 MB, sent as messages of at most 2 MiB each: refused whole.
    insert.set_parameters(rows(10_000, "b")?)?;
    let error = refused(
        insert.execute_update().await,
        Code::ResourceExhausted,
        "11 MB of parameters were bound past a limit of 4 MiB",
    )?;
    assert!(
        error.contains("hold more than 4194304 bytes, the server's limit"),
        "{error}"
    );
    assert_eq!(
        query(&mut client, "SELECT count(*) FROM t WHERE _key >= 'b'").await?,
        "0"
    );
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn parameters_are_charged_what_their_values_hold_not_what_they_came_in(
) -> Result<(), BoxError> {
    use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
    use arrow_flight::sql::{CommandPreparedStatementQuery, ProstMessageExt};
    use datafusion::arrow::array::DictionaryArray;
    use prost::Message;

    let limits = widesql_server::Limits {
        message_bytes: 4 << 20,
        ..widesql_server::Limits::default()
    };
    let (_dir, _db, server, mut client) = serve_with_table_t(limits).await?;
    let handle = prepare_raw(&mut client, "INSERT INTO t VALUES ($1, $2)").await?;
    // 100 rows whose body is one string of 1 MiB, sent once as the
    // dictionary of the column (about 1 MiB on the wire): each row's value
    // is a copy of it, 100 MiB in all, past the limit of 4 MiB.
    let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
    let long = "y".repeat(1 << 20);
    let bodies = DictionaryArray::<Int32Type>::new(
        vec![0; 100].into(),
        Arc::new(StringArray::from(vec![long.as_str()])),
    );
    let schema = Arc::new(Schema::new(vec![
        Field::new("$1", DataType::Utf8, false),
        Field::new("$2", bodies.data_type().clone(), false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![Arc::new(StringArray::from(keys)), Arc::new(bodies)],
    )?;
    let command = CommandPreparedStatementQuery {
        prepared_statement_handle: handle,
    };
    let messages: Vec<arrow_flight::FlightData> = FlightDataEncoderBuilder::new()
        .with_dictionary_handling(DictionaryHandling::Resend)
        .with_max_flight_data_size(8 << 20)
        .with_flight_descriptor(Some(arrow_flight::FlightDescriptor::new_cmd(
            command.as_any().encode_to_vec(),
        )))
        .build(futures::stream::iter([Ok(batch)]))
        .try_collect()
        .await?;
    let wire: usize = messages
        .iter()
        .map(|m| m.data_header.len() + m.data_body.len())
        .sum();
    assert!(wire < 2 << 20, "{wire} bytes on the wire");
    let put = match client.do_put(futures::stream::iter(messages)).await {
        Ok(results) => results
            .try_collect::<Vec<_>>()
            .await
            .err()
            .map(|status| (Some(status.code()), status.to_string())),
        Err(e) => Some((code(&e), e.to_string())),
    };
    let (code, message) =
        put.ok_or("100 MiB of parameter values were bound past a limit of 4 MiB")?;
    assert_eq!(code, Some(Code::ResourceExhausted), "{message}");
    assert!(
        message.contains("hold more than 4194304 bytes"),
        "{message}"
    );
    // A list in each row is charged what its own elements hold, not the
    // array all the rows' lists came in: 2,000 rows of three numbers fit.
    let mut select = client.prepare("SELECT $1".into(), None).await?;
    let lists = datafusion::arrow::array::ListArray::from_iter_primitive::<
        datafusion::arrow::datatypes::Int64Type,
        _,
        _,
    >((0..2000).map(|i| Some(vec![Some(i), Some(i + 1), Some(i + 2)])));
    let schema = Arc::new(Schema::new(vec![Field::new(
        "$1",
        lists.data_type().clone(),
        true,
    )]));
    select.set_parameters(RecordBatch::try_new(schema, vec![Arc::new(lists)])?)?;
    select.execute().await?;
    server.shutdown().await?;
    Ok(())
}

/// The handle of `sql` prepared by a CreatePreparedStatement action of
/// its own, for a test that calls what arrow-flight's client does not.
async fn prepare_raw(client: &mut Client, sql: &str) -> Result<prost::bytes::Bytes, BoxError> {
    use arrow_flight::sql::{
        ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
        ProstMessageExt,
    };
    use prost::Message;

    let create = ActionCreatePreparedStatementRequest {
        query: sql.into(),
        transaction_id: None,
    };
    let action = arrow_flight::Action {
        r#type: "CreatePreparedStatement".into(),
        body: create.as_any().encode_to_vec().into(),
    };
    let answer = client
        .do_action(action)
        .await?
        .message()
        .await?
        .ok_or("no answer to CreatePreparedStatement")?;
    let created: ActionCreatePreparedStatementResult = Any::decode(&*answer.body)?
        .unpack()?
        .ok_or("not a prepared statement")?;
    Ok(created.prepared_statement_handle)
}

/// The messages of a `DoPut` of `rows` under `command`.
async fn put_messages(
    command: Vec<u8>,
    rows: RecordBatch,
) -> Result<Vec<arrow_flight::FlightData>, BoxError> {
    use arrow_flight::encode::FlightDataEncoderBuilder;
    Ok(FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(arrow_flight::FlightDescriptor::new_cmd(command)))
        .build(futures::stream::iter([Ok(rows)]))
        .try_collect()
        .await?)
}

/// Binds `rows` to the prepared statement `handle` with a DoPut of its
/// query command, as ADBC binds parameters.
async fn bind_raw(
    client: &mut Client,
    handle: &prost::bytes::Bytes,
    rows: RecordBatch,
) -> Result<(), BoxError> {
    use arrow_flight::sql::{CommandPreparedStatementQuery, ProstMessageExt};
    use prost::Message;
    let bind = CommandPreparedStatementQuery {
        prepared_statement_handle: handle.clone(),
    };
    let messages = put_messages(bind.as_any().encode_to_vec(), rows).await?;
    client
        .do_put(futures::stream::iter(messages))
        .await?
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Runs the prepared update `handle` with `rows` (`None`: with the rows
/// bound to it): the rows it changed, or the status.
async fn update_raw(
    client: &Client,
    handle: &prost::bytes::Bytes,
    rows: Option<RecordBatch>,
) -> Result<i64, (Option<Code>, String)> {
    use arrow_flight::sql::{CommandPreparedStatementUpdate, DoPutUpdateResult, ProstMessageExt};
    use prost::Message;
    let command = CommandPreparedStatementUpdate {
        prepared_statement_handle: handle.clone(),
    }
    .as_any()
    .encode_to_vec();
    let messages = match rows {
        Some(rows) => put_messages(command, rows)
            .await
            .map_err(|e| (None, e.to_string()))?,
        None => vec![arrow_flight::FlightData {
            flight_descriptor: Some(arrow_flight::FlightDescriptor::new_cmd(command)),
            ..Default::default()
        }],
    };
    let mut client = client.clone();
    let answers = match client.do_put(futures::stream::iter(messages)).await {
        Ok(answers) => answers.try_collect::<Vec<_>>().await,
        Err(e) => return Err((code(&e), e.to_string())),
    };
    let answers = answers.map_err(|s| (Some(s.code()), s.message().to_string()))?;
    let answer = answers.first().ok_or((None, "no answer".to_string()))?;
    DoPutUpdateResult::decode(&*answer.app_metadata)
        .map(|result| result.record_count)
        .map_err(|e| (None, e.to_string()))
}

/// Rows bound to a prepared update (a DoPut of its query command, as ADBC
/// binds them) stay bound when a call to run it is refused a statement
/// slot, and the next call runs them.
#[tokio::test]
async fn a_prepared_update_refused_a_slot_keeps_its_bound_rows() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        running_statements: 1,
        ..widesql_server::Limits::default()
    };
    let (_dir, db, server) = serve_with(limits).await?;
    db.session()
        .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)")
        .await?;
    let mut client = connect(&server).await?;
    client.handshake("anyone", "").await?;
    let handle = prepare_raw(&mut client, "INSERT INTO t VALUES ($1, $2)").await?;
    let rows = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("$1", DataType::Utf8, false),
            Field::new("$2", DataType::Int64, false),
        ])),
        vec![
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(Int64Array::from(vec![1, 2])),
        ],
    )?;
    bind_raw(&mut client, &handle, rows).await?;

    // A stalled ingest holds the only slot once a query is refused one.
    let ingest = stalled_ingest(&server, "stalled").await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut probe = connect(&server).await?;
    probe.handshake("anyone", "").await?;
    while query(&mut probe, "SELECT 1").await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the ingest took no slot"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (refused, message) = update_raw(&client, &handle, None)
        .await
        .err()
        .ok_or("the update ran in no slot")?;
    assert_eq!(refused, Some(Code::ResourceExhausted), "{message}");

    // Once the ingest's client is gone, its slot frees and the same call
    // runs the two rows still bound.
    ingest.abort();
    let changed = loop {
        match update_raw(&client, &handle, None).await {
            Err((Some(Code::ResourceExhausted), _)) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            other => break other,
        }
    };
    assert_eq!(changed, Ok(2));
    assert_eq!(
        query(&mut client, "SELECT _key, n FROM t ORDER BY _key").await?,
        "a 1\nb 2"
    );
    server.shutdown().await?;
    Ok(())
}

/// `n` rows of parameters for `INSERT INTO t VALUES ($1, $2)`: keys from
/// `k{from}` on, bodies of 1,000 bytes (about 1,150 bytes a row as values).
fn kilobyte_rows(from: usize, n: usize) -> Result<RecordBatch, BoxError> {
    let keys: Vec<String> = (from..from + n).map(|i| format!("k{i}")).collect();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("$1", DataType::Utf8, false),
            Field::new("$2", DataType::Utf8, false),
        ])),
        vec![
            Arc::new(StringArray::from(keys)),
            Arc::new(StringArray::from(vec!["b".repeat(1000); n])),
        ],
    )?)
}

/// Parameters that calls are still reading count against the server's
/// limit on parameters together: a client that puts rows from many calls
/// at once, pausing before their end, holds no more than the limit.
#[tokio::test]
async fn parameters_being_put_are_bounded_for_the_server() -> Result<(), BoxError> {
    use arrow_flight::sql::{CommandPreparedStatementUpdate, ProstMessageExt};
    use prost::Message;

    let limits = widesql_server::Limits {
        bound_parameter_bytes: 4 << 20,
        ..widesql_server::Limits::default()
    };
    let (_dir, db, server, mut client) = serve_with_table_t(limits).await?;
    let handle = prepare_raw(&mut client, "INSERT INTO t VALUES ($1, $2)").await?;
    // About 3.2 MB of values put, and the call's end never sent.
    let update = CommandPreparedStatementUpdate {
        prepared_statement_handle: handle.clone(),
    };
    let held = put_messages(update.as_any().encode_to_vec(), kilobyte_rows(0, 2_800)?).await?;
    let mut stalled_client = client.clone();
    let stalled = tokio::spawn(async move {
        let body = futures::stream::iter(held).chain(futures::stream::pending());
        stalled_client.do_put(body).await.map(|_| ())
    });
    // Another 1.2 MB in a second call pass the 4 MiB the two may hold:
    // once the first call's rows are read, the second is refused; if the
    // two read at once, either may be.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut from = 10_000;
    let mut stalled = Some(stalled);
    let refused = loop {
        let second = update_raw(&client, &handle, Some(kilobyte_rows(from, 1_000)?)).await;
        if let Some(first) = stalled.take_if(|first| first.is_finished()) {
            let answer = first.await?;
            break answer.err().ok_or("the first call ended")?.to_string();
        }
        match second {
            Err((_, message)) => break message,
            Ok(_) => {
                assert!(std::time::Instant::now() < deadline, "no call was refused");
                from += 1_000;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    assert!(
        refused.contains("the calls putting parameters now would hold more than 4194304 bytes"),
        "{refused}"
    );
    // Once the first call has ended, the same rows are taken and run.
    if let Some(first) = stalled {
        first.abort();
    }
    let ran = loop {
        match update_raw(&client, &handle, Some(kilobyte_rows(from, 1_000)?)).await {
            Err((_, message))
                if message.contains("calls putting parameters")
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            other => break other,
        }
    };
    assert_eq!(ran, Ok(1_000));
    let outputs = db
        .session()
        .run(&format!("SELECT count(*) FROM t WHERE _key = 'k{from}'"))
        .await?;
    assert_eq!(text_lines(&outputs[0].batches)?, ["1"]);
    server.shutdown().await?;
    Ok(())
}

/// Rows a prepared update takes from its binding go on counting against
/// the limit on parameters while it runs: binding and running again and
/// again holds no more than the limit.
#[tokio::test]
async fn bound_rows_a_running_update_took_still_count() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        bound_parameter_bytes: 4 << 20,
        ..widesql_server::Limits::default()
    };
    let (_dir, _db, server, mut client) = serve_with_table_t(limits).await?;
    let insert = prepare_raw(&mut client, "INSERT INTO t VALUES ($1, $2)").await?;
    let slow = prepare_raw(
        &mut client,
        "INSERT INTO t SELECT $1 || CAST(value AS VARCHAR), 'x' \
         FROM generate_series(1, 300000) WHERE length($2) > 0",
    )
    .await?;
    // One row of about 0.95 MB bound: within the session's share (1 MiB).
    let big = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("$1", DataType::Utf8, false),
            Field::new("$2", DataType::Utf8, false),
        ])),
        vec![
            Arc::new(StringArray::from(vec!["s"])),
            Arc::new(StringArray::from(vec!["x".repeat(950_000)])),
        ],
    )?;
    bind_raw(&mut client, &slow, big).await?;
    let running = tokio::spawn({
        let (client, slow) = (client.clone(), slow.clone());
        async move { update_raw(&client, &slow, None).await }
    });
    // While it runs, 3.3 MB put beside the rows it took pass the 4 MiB.
    let mut from = 0;
    let refused = loop {
        match update_raw(&client, &insert, Some(kilobyte_rows(from, 2_850)?)).await {
            Err((_, message)) => break message,
            Ok(_) => {
                assert!(
                    !running.is_finished(),
                    "the update ended and no put was refused"
                );
                from += 2_850;
            }
        }
    };
    assert!(
        refused.contains("the calls putting parameters now would hold more than 4194304 bytes"),
        "{refused}"
    );
    assert_eq!(running.await?, Ok(300_000));
    // Once it has run, the same rows are taken.
    assert_eq!(
        update_raw(&client, &insert, Some(kilobyte_rows(from, 2_850)?)).await,
        Ok(2_850)
    );
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn parameters_held_bound_are_bounded_per_session_and_for_the_server() -> Result<(), BoxError>
{
    let limits = widesql_server::Limits {
        bound_parameter_bytes: 4 << 20,
        ..widesql_server::Limits::default()
    };
    let (_dir, _db, server) = serve_with(limits).await?;
    // About 650 KB of values: 600 strings of 1,000 bytes.
    let rows = || -> Result<RecordBatch, BoxError> {
        let values = vec!["z".repeat(1000); 600];
        let schema = Arc::new(Schema::new(vec![Field::new("$1", DataType::Utf8, false)]));
        Ok(RecordBatch::try_new(
            schema,
            vec![Arc::new(StringArray::from(values))],
        )?)
    };
    let bind = |client: &mut Client| {
        let mut client = client.clone();
        async move {
            let mut select = client.prepare("SELECT $1".into(), None).await?;
            select.set_parameters(rows()?)?;
            select.execute().await?;
            Ok::<_, BoxError>(select)
        }
    };
    // A session's share is a quarter of 4 MiB: one binding fits, a second
    // does not, and binding the first again replaces what it held.
    let mut first = connect(&server).await?;
    first.handshake("anyone", "").await?;
    let mut kept = vec![bind(&mut first).await?];
    let error = bind(&mut first)
        .await
        .err()
        .ok_or("a session bound past its share")?;
    assert!(error.to_string().contains("its share"), "{error}");
    kept[0].set_parameters(rows()?)?;
    kept[0].execute().await?;
    // The server's limit: six sessions' bindings fill it, a seventh's is
    // refused.
    let mut clients = Vec::new();
    for _ in 0..5 {
        let mut client = connect(&server).await?;
        client.handshake("anyone", "").await?;
        kept.push(bind(&mut client).await?);
        clients.push(client);
    }
    let mut last = connect(&server).await?;
    last.handshake("anyone", "").await?;
    let error = bind(&mut last)
        .await
        .err()
        .ok_or("sessions bound past the server's limit")?;
    assert!(error.to_string().contains("its limit"), "{error}");
    // Closing a statement frees what it held.
    kept.pop().ok_or("no statement")?.close().await?;
    bind(&mut last).await?;
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn password_checks_past_the_servers_share_are_refused_not_queued() -> Result<(), BoxError> {
    let (_dir, db, server) = serve(ServeOptions::default()).await?;
    db.create_user("alice", "alice pw", false)?;
    let mut clients = Vec::new();
    for _ in 0..16 {
        clients.push(connect(&server).await?);
    }
    let signed_in = futures::future::join_all(
        clients
            .iter_mut()
            .map(|client| client.handshake("alice", "alice pw")),
    )
    .await;
    let refused: Vec<String> = signed_in
        .iter()
        .filter_map(|result| result.as_ref().err().map(ToString::to_string))
        .collect();
    for error in &refused {
        assert!(
            error.contains("checking as many passwords as it may at once"),
            "{error}"
        );
    }
    assert!(
        !refused.is_empty(),
        "16 password checks ran at once, past the server's 4"
    );
    assert!(refused.len() < 16, "every sign-in was refused: {refused:?}");
    // A refusal is no failed sign-in: the address does not wait.
    let mut later = connect(&server).await?;
    later.handshake("alice", "alice pw").await?;
    server.shutdown().await?;
    Ok(())
}

/// What a `DoPut` message takes once decoded is held in its session's
/// memory while its call lasts: two ingests of one session share the
/// session's memory instead of each taking as much.
#[tokio::test]
async fn the_ingests_of_one_session_share_its_memory() -> Result<(), BoxError> {
    let limits = widesql_server::Limits {
        session_memory: 1 << 20,
        ..widesql_server::Limits::default()
    };
    let (_dir, db, server) = serve_with(limits).await?;
    db.session()
        .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, v VARCHAR)")
        .await?;
    // 600 rows of 1 KB: more than half of the session's memory.
    let keys: Vec<String> = (0..600).map(|i| format!("k{i:03}")).collect();
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("_key", DataType::Utf8, false),
            Field::new("v", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(StringArray::from(keys)),
            Arc::new(StringArray::from(vec!["x".repeat(1000); 600])),
        ],
    )?;
    let mut first = connect(&server).await?;
    first.handshake("someone", "").await?;
    let token = first.token().ok_or("no token")?.clone();
    let append = (TableNotExistOption::Fail, TableExistsOption::Append);
    // The first ingest sends its rows, then waits.
    let hold = |mut client: Client, batch: RecordBatch| {
        let command = CommandStatementIngest {
            table_definition_options: Some(TableDefinitionOptions {
                if_not_exist: append.0.into(),
                if_exists: append.1.into(),
            }),
            table: "t".into(),
            ..Default::default()
        };
        let rows = futures::stream::iter([Ok(batch)]).chain(futures::stream::pending());
        tokio::spawn(async move { client.execute_ingest(command, rows).await })
    };
    let mut holding = hold(first.clone(), batch.clone());
    // A second ingest of the session is refused once the first holds its
    // message (it may run first: it then writes the same rows again).
    let mut second = connect(&server).await?;
    second.set_token(token);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let refusal = loop {
        let result = ingest(&mut second, "t", append, vec![batch.clone()]).await;
        if holding.is_finished() {
            // The second held its rows when the first's came, and the
            // first was refused: it starts again.
            holding = hold(first.clone(), batch.clone());
        }
        match result {
            Ok(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await
            }
            Ok(_) => return Err("the second ingest was never refused".into()),
            Err(e) => break e,
        }
    };
    assert_eq!(code(&refusal), Some(Code::ResourceExhausted), "{refusal}");
    assert!(
        refusal
            .to_string()
            .contains("more than the session's memory has free now"),
        "{refusal}"
    );
    // Once the first call is gone, its memory is the session's again.
    holding.abort();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match ingest(&mut second, "t", append, vec![batch.clone()]).await {
            Ok(written) => {
                assert_eq!(written, 600);
                break;
            }
            Err(e) if code(&e) == Some(Code::ResourceExhausted) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the first call's memory was not given back: {e}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await
            }
            Err(e) => return Err(e.into()),
        }
    }
    assert_eq!(query(&mut second, "SELECT count(*) FROM t").await?, "600");
    server.shutdown().await?;
    Ok(())
}

/// The status a `DoPut` of `messages` ends with, if it fails.
async fn put_error(
    client: &mut Client,
    messages: Vec<arrow_flight::FlightData>,
) -> Option<(Option<Code>, String)> {
    match client.do_put(futures::stream::iter(messages)).await {
        Ok(answers) => answers
            .try_collect::<Vec<_>>()
            .await
            .err()
            .map(|status| (Some(status.code()), status.message().to_string())),
        Err(e) => Some((code(&e), e.to_string())),
    }
}

/// The IPC messages of `batches` under the ingest of table `table` (mode
/// create), made with `options` and one dictionary tracker, so that a
/// dictionary that grows is sent as a delta when `options` say so.
fn ingest_messages(
    table: &str,
    batches: &[RecordBatch],
    options: &datafusion::arrow::ipc::writer::IpcWriteOptions,
) -> Result<Vec<arrow_flight::FlightData>, BoxError> {
    use arrow_flight::sql::ProstMessageExt;
    use datafusion::arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator};
    use prost::Message;
    let command = CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Create.into(),
            if_exists: TableExistsOption::Fail.into(),
        }),
        table: table.into(),
        ..Default::default()
    };
    let generator = IpcDataGenerator::default();
    let mut tracker = DictionaryTracker::new(false);
    let schema = batches.first().ok_or("no batch")?.schema();
    let mut first: arrow_flight::FlightData = generator
        .schema_to_bytes_with_dictionary_tracker(&schema, &mut tracker, options)
        .into();
    first.flight_descriptor = Some(arrow_flight::FlightDescriptor::new_cmd(
        command.as_any().encode_to_vec(),
    ));
    let mut messages = vec![first];
    for batch in batches {
        let (dictionaries, batch) =
            generator.encode(batch, &mut tracker, options, &mut Default::default())?;
        messages.extend(dictionaries.into_iter().map(arrow_flight::FlightData::from));
        messages.push(batch.into());
    }
    Ok(messages)
}

/// A `DoPut` message is checked before it is decoded: a compressed buffer
/// that claims to decompress to more than a message may hold, a buffer
/// outside the message's body, a second schema and a dictionary delta are
/// refused with a status naming them, the ingest they came in leaves no
/// table, and the server goes on. Catalog calls that ask for more than
/// the server builds are refused, or asked once.
#[tokio::test]
async fn messages_and_catalog_calls_the_server_cannot_afford_are_refused() -> Result<(), BoxError> {
    use arrow_flight::sql::{CommandPreparedStatementQuery, ProstMessageExt};
    use datafusion::arrow::array::DictionaryArray;
    use datafusion::arrow::ipc::writer::{DictionaryHandling, IpcWriteOptions};
    use datafusion::arrow::ipc::{root_as_message, CompressionType};
    use prost::Message;

    // A message may hold 1 MiB once decoded, and so 131,072 rows; a
    // statement, and so a schema, 8 KiB.
    let limits = widesql_server::Limits {
        session_memory: 1 << 20,
        statement_bytes: 8 << 10,
        ..widesql_server::Limits::default()
    };
    let (_dir, db, server, mut client) = serve_with_table_t(limits).await?;
    let handle = prepare_raw(&mut client, "INSERT INTO t VALUES ($1, $2)").await?;
    let parameters = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("$1", DataType::Utf8, false),
            Field::new("$2", DataType::Utf8, false),
        ])),
        vec![
            Arc::new(StringArray::from(vec!["a"; 64])),
            Arc::new(StringArray::from(vec!["some text"; 64])),
        ],
    )?;
    let bind = CommandPreparedStatementQuery {
        prepared_statement_handle: handle.clone(),
    }
    .as_any()
    .encode_to_vec();
    let compressed =
        IpcWriteOptions::default().try_with_compression(Some(CompressionType::LZ4_FRAME))?;
    let encoded: Vec<arrow_flight::FlightData> =
        arrow_flight::encode::FlightDataEncoderBuilder::new()
            .with_options(compressed)
            .with_flight_descriptor(Some(arrow_flight::FlightDescriptor::new_cmd(bind)))
            .build(futures::stream::iter([Ok(parameters)]))
            .try_collect()
            .await?;
    // Compressed rows bind as they are.
    let mut intact = client.clone();
    intact
        .do_put(futures::stream::iter(encoded.clone()))
        .await?
        .try_collect::<Vec<_>>()
        .await?;
    let at = encoded.len() - 1;
    let header = root_as_message(&encoded[at].data_header).map_err(|e| e.to_string())?;
    let buffers = header
        .header_as_record_batch()
        .and_then(|b| b.buffers())
        .ok_or("a batch without buffers")?;
    // The largest buffer stored compressed (its length prefix is not -1).
    let body = &encoded[at].data_body;
    let compressed = |b: &datafusion::arrow::ipc::Buffer| {
        let start = usize::try_from(b.offset()).unwrap_or(usize::MAX);
        b.length() > 8 && body.get(start..start + 8) != Some(&(-1i64).to_le_bytes()[..])
    };
    let largest = buffers
        .iter()
        .filter(|b| compressed(b))
        .max_by_key(|b| b.length())
        .ok_or("no compressed buffer")?;
    let (offset, length) = (
        usize::try_from(largest.offset())?,
        usize::try_from(largest.length())?,
    );
    let with_body = |body: Vec<u8>| {
        let mut messages = encoded.clone();
        messages[at].data_body = body.into();
        messages
    };
    // It claims to decompress to an exabyte.
    let mut body = encoded[at].data_body.to_vec();
    body[offset..offset + 8].copy_from_slice(&(1i64 << 60).to_le_bytes());
    let (status, message) = put_error(&mut client, with_body(body))
        .await
        .ok_or("a buffer claiming an exabyte was bound")?;
    assert_eq!(status, Some(Code::ResourceExhausted), "{message}");
    assert!(message.contains("bytes once decompressed"), "{message}");
    // Its body ends before it does.
    let body = encoded[at].data_body[..offset + length - 1].to_vec();
    let (status, message) = put_error(&mut client, with_body(body))
        .await
        .ok_or("a buffer past its body was bound")?;
    assert_eq!(status, Some(Code::InvalidArgument), "{message}");
    assert!(message.contains("a buffer outside its body"), "{message}");
    // It claims less than it decompresses to (LZ4 would go on past it).
    let mut body = encoded[at].data_body.to_vec();
    body[offset..offset + 8].copy_from_slice(&1i64.to_le_bytes());
    let (status, message) = put_error(&mut client, with_body(body))
        .await
        .ok_or("an LZ4 buffer longer than its claim was bound")?;
    assert_eq!(status, Some(Code::InvalidArgument), "{message}");
    assert!(
        message.contains("decompresses to more than it claims"),
        "{message}"
    );

    // An ingest whose rows change schema half-way.
    let numbers = |name: &str, values: Vec<i64>| {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(name, DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(values))],
        )
    };
    let plain = IpcWriteOptions::default();
    let mut messages = ingest_messages("two", &[numbers("a", vec![1, 2])?], &plain)?;
    messages.extend(ingest_messages("two", &[numbers("b", vec![3])?], &plain)?);
    let (status, message) = put_error(&mut client, messages)
        .await
        .ok_or("an ingest of two schemas ran")?;
    assert_eq!(status, Some(Code::InvalidArgument), "{message}");
    assert!(message.contains("a second schema"), "{message}");
    // An ingest whose dictionary grows by deltas.
    let words = |values: Vec<&str>| {
        let array: DictionaryArray<Int32Type> = values.into_iter().collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                "w",
                array.data_type().clone(),
                false,
            )])),
            vec![Arc::new(array)],
        )
    };
    let deltas = IpcWriteOptions::default().with_dictionary_handling(DictionaryHandling::Delta);
    let messages = ingest_messages(
        "grows",
        &[words(vec!["x", "y"])?, words(vec!["x", "y", "z"])?],
        &deltas,
    )?;
    let (status, message) = put_error(&mut client, messages)
        .await
        .ok_or("an ingest of a dictionary delta ran")?;
    assert_eq!(status, Some(Code::InvalidArgument), "{message}");
    assert!(message.contains("a dictionary delta"), "{message}");
    // Rows that cost nothing to send: 200,000 NULLs.
    let nulls = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("n", DataType::Null, true)])),
        vec![Arc::new(datafusion::arrow::array::NullArray::new(200_000))],
    )?;
    let (status, message) = put_error(&mut client, ingest_messages("nulls", &[nulls], &plain)?)
        .await
        .ok_or("an ingest of 200,000 rows in one message of a few bytes ran")?;
    assert_eq!(status, Some(Code::ResourceExhausted), "{message}");
    assert!(
        message.contains("claims 200000 rows, more than the 131072"),
        "{message}"
    );
    // Dictionaries of 400 KiB each, which the call keeps: the third passes
    // 1 MiB.
    let long = "d".repeat(400 << 10);
    let column = |name: &str| {
        let array: DictionaryArray<Int32Type> = vec![long.as_str()].into_iter().collect();
        (
            Field::new(name, array.data_type().clone(), false),
            Arc::new(array),
        )
    };
    let (fields, arrays): (Vec<_>, Vec<_>) = ["a", "b", "c"].into_iter().map(column).unzip();
    let arrays = arrays
        .into_iter()
        .map(|a| a as datafusion::arrow::array::ArrayRef)
        .collect();
    let wide = RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?;
    let (status, message) = put_error(&mut client, ingest_messages("wide", &[wide], &plain)?)
        .await
        .ok_or("an ingest of three dictionaries of 400 KiB ran")?;
    assert_eq!(status, Some(Code::ResourceExhausted), "{message}");
    assert!(
        message.contains("with the dictionaries before it"),
        "{message}"
    );
    // A schema of 1,000 columns, longer than the longest statement.
    let fields: Vec<_> = (0..1000)
        .map(|i| Field::new(format!("column_{i}"), DataType::Int64, false))
        .collect();
    let many = RecordBatch::new_empty(Arc::new(Schema::new(fields)));
    let (status, message) = put_error(&mut client, ingest_messages("many", &[many], &plain)?)
        .await
        .ok_or("an ingest of 1,000 columns ran")?;
    assert_eq!(status, Some(Code::ResourceExhausted), "{message}");
    assert!(
        message.contains("bytes of the longest statement"),
        "{message}"
    );
    let tables = query(&mut client, "SHOW TABLES").await?;
    for table in ["two", "grows", "nulls", "wide", "many"] {
        assert!(!tables.contains(table), "{tables}");
    }

    // Catalog calls.
    // GetSqlInfo of 5,000 ids, at both of its calls.
    let many = arrow_flight::sql::CommandGetSqlInfo {
        info: (0..5000).collect(),
    };
    let ticket = arrow_flight::Ticket::new(many.as_any().encode_to_vec());
    let error = fetch_error(&mut client, ticket)
        .await
        .ok_or("GetSqlInfo of 5,000 ids was answered")?;
    assert_eq!(code(&error), Some(Code::InvalidArgument), "{error}");
    assert!(error.to_string().contains("asks for 5000 ids"), "{error}");
    let channel = Endpoint::from_shared(format!("http://{}", server.local_addr()))?
        .connect()
        .await?;
    let mut flight = FlightClient::new(channel);
    let descriptor = |command: Vec<u8>| arrow_flight::FlightDescriptor::new_cmd(command);
    let error = refused(
        flight
            .get_flight_info(descriptor(many.as_any().encode_to_vec()))
            .await,
        Code::InvalidArgument,
        "GetSqlInfo of 5,000 ids was planned",
    )?;
    assert!(error.contains("asks for 5000 ids"), "{error}");
    // Asked twice, an id is answered once.
    let twice = arrow_flight::sql::CommandGetSqlInfo {
        info: vec![SqlInfo::FlightSqlServerName as u32; 2],
    };
    let info = flight
        .get_flight_info(descriptor(twice.as_any().encode_to_vec()))
        .await?;
    assert_eq!(rows(&mut client, info).await?.lines().count(), 1);
    let long = CommandGetTables {
        table_name_filter_pattern: Some("%".repeat(2000)),
        ..Default::default()
    };
    let error = refused(
        client.get_tables(long).await,
        Code::InvalidArgument,
        "a table name pattern of 2,000 bytes was taken",
    )?;
    assert!(error.contains("a pattern at most 1024"), "{error}");
    let mut types = vec!["TABLE".to_string(); 10_000];
    types.push("NO SUCH TYPE".into());
    let asked = CommandGetTables {
        table_types: types,
        ..Default::default()
    };
    let info = client.get_tables(asked).await?;
    let listed = rows(&mut client, info).await?;
    assert!(listed.contains(" t "), "{listed}");
    let asked = CommandGetTables {
        table_types: vec!["NO SUCH TYPE".into()],
        ..Default::default()
    };
    let info = client.get_tables(asked).await?;
    assert_eq!(rows(&mut client, info).await?, "");
    drop(db);
    server.shutdown().await?;
    Ok(())
}
