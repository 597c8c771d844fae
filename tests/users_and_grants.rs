//! Users and grants: each privilege allows exactly its statements, on the
//! object granted and what it holds; listings show only what a user may
//! use; grants outlive a restart and changes to them reach cached plans.

mod common;

use widesql::{Db, Error, ErrorKind, Session, SessionOptions};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn session_of(db: &Db, user: &str) -> Session {
    Session::with_options(
        db.clone(),
        SessionOptions {
            user: Some(user.to_string()),
            ..SessionOptions::default()
        },
    )
}

/// The error of a statement that must fail: it is refused for `user`
/// lacking `privilege` on `object`.
async fn refused(session: &Session, sql: &str, expected: &str) -> TestResult {
    match session.run(sql).await {
        Ok(_) => Err(format!("'{sql}' ran; it should have been refused").into()),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{sql}: {e}");
            assert!(e.to_string().contains(expected), "{sql}: {e}");
            Ok(())
        }
    }
}

async fn setup(db: &Db) -> TestResult {
    db.session()
        .run(
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT); \
             INSERT INTO t VALUES ('a', 1), ('b', 2); \
             CREATE TABLE secret (_key VARCHAR PRIMARY KEY, n BIGINT); \
             INSERT INTO secret VALUES ('a', 10); \
             CREATE DATABASE other; CREATE SCHEMA other.d; \
             CREATE TABLE other.d.o (_key VARCHAR PRIMARY KEY, n BIGINT); \
             CREATE USER alice PASSWORD 'alice pw'; \
             CREATE USER root WITH PASSWORD 'root pw' ADMIN",
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_privilege_allows_its_statements_only() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    setup(&db).await?;
    let admin = db.session();
    let alice = session_of(&db, "alice");

    refused(
        &alice,
        "SELECT n FROM t",
        "user 'alice' has no SELECT privilege on table default.public.t",
    )
    .await?;
    admin.run("GRANT SELECT ON TABLE t TO alice").await?;
    assert_eq!(
        common::lines(&alice, "SELECT n FROM t ORDER BY n").await?,
        ["1", "2"]
    );
    // A key lookup (the front door's fast path) is checked as well.
    assert_eq!(
        common::lines(&alice, "SELECT n FROM t WHERE _key = 'b'").await?,
        ["2"]
    );
    // Other tables, however reached: a subquery, a join, a view, versions.
    refused(
        &alice,
        "SELECT n FROM t WHERE n IN (SELECT n FROM secret)",
        "table default.public.secret",
    )
    .await?;
    refused(
        &alice,
        "SELECT * FROM t JOIN secret USING (_key)",
        "table default.public.secret",
    )
    .await?;
    refused(
        &alice,
        "CREATE VIEW v AS SELECT * FROM secret",
        "table default.public.secret",
    )
    .await?;
    refused(
        &alice,
        "SELECT * FROM cells('secret')",
        "table default.public.secret",
    )
    .await?;
    refused(
        &alice,
        "SELECT * FROM history('secret')",
        "table default.public.secret",
    )
    .await?;
    refused(
        &alice,
        "DESCRIBE secret",
        "SELECT privilege on table default.public.secret",
    )
    .await?;
    // SELECT does not write.
    refused(
        &alice,
        "INSERT INTO t VALUES ('c', 3)",
        "INSERT privilege on table default.public.t",
    )
    .await?;
    refused(
        &alice,
        "UPDATE t SET n = 5",
        "UPDATE privilege on table default.public.t",
    )
    .await?;
    refused(
        &alice,
        "DELETE FROM t WHERE n = 1",
        "DELETE privilege on table default.public.t",
    )
    .await?;
    refused(
        &alice,
        "CREATE TABLE mine (_key VARCHAR PRIMARY KEY)",
        "CREATE privilege on dataset default.public",
    )
    .await?;
    refused(
        &alice,
        "DROP TABLE t",
        "CREATE privilege on table default.public.t",
    )
    .await?;
    refused(
        &alice,
        "ALTER TABLE t ADD COLUMN m BIGINT",
        "CREATE privilege on table default.public.t",
    )
    .await?;

    // A grant on a dataset covers its tables, also those created later.
    admin
        .run("GRANT INSERT, UPDATE ON DATASET public TO alice")
        .await?;
    alice
        .run("INSERT INTO t VALUES ('c', 3); UPDATE t SET n = n + 10 WHERE _key = 'c'")
        .await?;
    assert_eq!(
        common::lines(&alice, "SELECT n FROM t WHERE _key = 'c'").await?,
        ["13"]
    );
    admin
        .run("CREATE TABLE later (_key VARCHAR PRIMARY KEY, n BIGINT)")
        .await?;
    alice.run("INSERT INTO later VALUES ('x', 1)").await?;
    // INSERT … SELECT needs SELECT on what it reads.
    refused(
        &alice,
        "INSERT INTO later SELECT _key, n FROM secret",
        "table default.public.secret",
    )
    .await?;
    // A grant on a project covers its datasets.
    admin
        .run("GRANT DELETE, CREATE ON PROJECT default TO alice")
        .await?;
    alice.run("DELETE FROM t WHERE _key = 'c'").await?;
    alice
        .run("CREATE TABLE mine (_key VARCHAR PRIMARY KEY, n BIGINT); DROP TABLE mine")
        .await?;
    // But not other projects, nor what only admins do.
    refused(&alice, "SELECT * FROM other.d.o", "table other.d.o").await?;
    // Renaming a project or a dataset takes CREATE on it, as dropping it
    // does.
    refused(
        &alice,
        "ALTER DATABASE other RENAME TO another",
        "CREATE privilege on project other",
    )
    .await?;
    refused(
        &alice,
        "ALTER SCHEMA other.d RENAME TO e",
        "CREATE privilege on dataset other.d",
    )
    .await?;
    refused(
        &alice,
        "CREATE DATABASE p2",
        "only an admin may create projects",
    )
    .await?;
    refused(
        &alice,
        "CREATE USER eve PASSWORD 'x'",
        "only an admin may create users",
    )
    .await?;
    refused(
        &alice,
        "GRANT SELECT ON TABLE secret TO alice",
        "only an admin may grant",
    )
    .await?;
    refused(
        &alice,
        "SHOW GRANTS FOR root",
        "only an admin may show the grants of other users",
    )
    .await?;
    refused(&alice, "SELECT * FROM _system._catalog._users", "_users").await?;

    // REVOKE takes effect on the next statement, also for a plan cached
    // from before (and for a prepared statement).
    let prepared = alice.prepare("SELECT n FROM t WHERE _key = $1").await?;
    assert_eq!(prepared.query(vec!["a".into()]).await?.len(), 1);
    admin.run("REVOKE SELECT ON TABLE t FROM alice").await?;
    refused(
        &alice,
        "SELECT n FROM t WHERE _key = 'b'",
        "SELECT privilege on table default.public.t",
    )
    .await?;
    let err = prepared
        .query(vec!["a".into()])
        .await
        .err()
        .ok_or("the prepared query ran after REVOKE")?;
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    // REVOKE ALL removes every privilege on the object.
    admin.run("REVOKE ALL ON DATASET public FROM alice").await?;
    refused(
        &alice,
        "INSERT INTO later VALUES ('y', 2)",
        "INSERT privilege",
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_lists_only_what_its_grants_reach() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    setup(&db).await?;
    let alice = session_of(&db, "alice");
    assert!(common::lines(&alice, "SHOW TABLES").await?.is_empty());
    db.session().run("GRANT SELECT ON TABLE t TO alice").await?;
    assert_eq!(
        common::lines(&alice, "SHOW TABLES").await?,
        ["default public t BASE TABLE"]
    );
    assert_eq!(common::lines(&alice, "SHOW DATABASES").await?, ["default"]);
    assert_eq!(
        common::lines(&alice, "SELECT table_catalog || '.' || table_schema || '.' || table_name FROM information_schema.tables WHERE table_schema <> 'information_schema' ORDER BY 1").await?,
        ["default.public.t"]
    );
    assert_eq!(
        common::lines(&alice, "SELECT DISTINCT table_name FROM information_schema.columns WHERE table_schema = 'public'").await?,
        ["t"]
    );
    // An admin sees everything, the system tables too.
    let root = session_of(&db, "root");
    assert_eq!(
        common::lines(&root, "SELECT count(*) FROM information_schema.tables WHERE table_catalog = '_system' AND table_schema = '_catalog'").await?,
        ["6"]
    );
    assert_eq!(
        common::lines(&root, "SELECT name FROM _system._catalog._users ORDER BY 1").await?,
        ["alice", "root"]
    );
    // SHOW GRANTS and SHOW USERS.
    assert_eq!(
        common::lines(&alice, "SHOW GRANTS").await?,
        ["alice SELECT table default.public.t"]
    );
    assert_eq!(
        common::lines(&root, "SHOW USERS").await?,
        ["alice false", "root true"]
    );
    // The workers of a cluster are listed to an admin only.
    db.workers().heard_from("http://127.0.0.1:7001");
    let listed = common::lines(&root, "SHOW WORKERS").await?;
    assert_eq!(listed.len(), 1);
    assert!(
        listed[0].starts_with("http://127.0.0.1:7001 up "),
        "{listed:?}"
    );
    refused(&alice, "SHOW WORKERS", "only an admin").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_users_and_grants_survive_a_restart() -> TestResult {
    let dir = tempfile::tempdir()?;
    {
        let db = Db::open(dir.path())?;
        setup(&db).await?;
        let outputs = db
            .session()
            .run("GRANT SELECT ON TABLE t TO alice; ALTER USER root PASSWORD 'new root pw'")
            .await?;
        // A statement's text never shows its password.
        assert_eq!(outputs[1].sql, "ALTER USER root PASSWORD '…'");
        // A user may change its own password, and nothing else about itself.
        let alice = session_of(&db, "alice");
        alice.run("ALTER USER alice PASSWORD 'second'").await?;
        refused(&alice, "ALTER USER alice ADMIN", "only an admin").await?;
        refused(&alice, "ALTER USER root PASSWORD 'x'", "only an admin").await?;
    }
    let db = Db::open(dir.path())?;
    db.authenticate("alice", "second")?;
    db.authenticate("root", "new root pw")?;
    for (user, password) in [("alice", "alice pw"), ("root", "root pw"), ("nobody", "x")] {
        let err = db
            .authenticate(user, password)
            .err()
            .ok_or("a wrong password was accepted")?;
        assert_eq!(err.kind(), ErrorKind::Unauthenticated);
        assert_eq!(err.to_string(), "wrong user name or password");
    }
    let alice = session_of(&db, "alice");
    assert_eq!(
        common::lines(&alice, "SELECT count(*) FROM t").await?,
        ["2"]
    );
    // A grant on a dropped table does not reach a new table of its name.
    db.session()
        .run("DROP TABLE t; CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)")
        .await?;
    refused(&alice, "SELECT count(*) FROM t", "SELECT privilege").await?;
    assert!(common::lines(&alice, "SHOW GRANTS").await?.is_empty());
    // A dropped user's session stops working.
    let root = session_of(&db, "root");
    root.run("DROP USER alice").await?;
    let err = alice
        .run("SELECT 1")
        .await
        .err()
        .ok_or("a dropped user's statement ran")?;
    assert_eq!(err.kind(), ErrorKind::Unauthenticated, "{err}");
    refused(&root, "DROP USER root", "cannot be dropped").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_statements_are_checked_and_parsed_with_the_rest() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    let session = db.session();
    let outputs = session
        .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY); CREATE USER \"Bob\" PASSWORD 'p;w'; GRANT ALL PRIVILEGES ON SCHEMA public TO \"Bob\"; SELECT 1")
        .await?;
    assert_eq!(outputs.len(), 4);
    assert_eq!(
        common::lines(&session, "SHOW GRANTS FOR \"Bob\"")
            .await?
            .len(),
        5
    );
    let errors = [
        (
            "CREATE USER bob PASSWORD ''",
            ErrorKind::InvalidArgument,
            "a password must not be empty",
        ),
        (
            "CREATE USER \"Bob\" PASSWORD 'x'",
            ErrorKind::AlreadyExists,
            "user 'Bob' already exists",
        ),
        (
            "CREATE USER _x PASSWORD 'x'",
            ErrorKind::InvalidName,
            "reserved",
        ),
        (
            "DROP USER nobody",
            ErrorKind::NotFound,
            "user 'nobody' does not exist",
        ),
        (
            "GRANT SELECT ON TABLE nope TO \"Bob\"",
            ErrorKind::NotFound,
            "table 'default.public.nope' does not exist",
        ),
        (
            "GRANT SELECT ON TABLE t TO nobody",
            ErrorKind::NotFound,
            "user 'nobody' does not exist",
        ),
        (
            "GRANT FLY ON TABLE t TO \"Bob\"",
            ErrorKind::Sql,
            "a privilege",
        ),
        (
            "GRANT SELECT ON VIEW t TO \"Bob\"",
            ErrorKind::Sql,
            "PROJECT, DATASET or TABLE",
        ),
        (
            "ALTER USER \"Bob\"",
            ErrorKind::Sql,
            "PASSWORD, ADMIN or NOADMIN",
        ),
    ];
    for (sql, kind, message) in errors {
        let err: Error = session.run(sql).await.err().ok_or(sql)?;
        assert_eq!(err.kind(), kind, "{sql}: {err}");
        assert!(err.to_string().contains(message), "{sql}: {err}");
    }
    session
        .run("DROP USER IF EXISTS nobody; CREATE USER IF NOT EXISTS \"Bob\" PASSWORD 'y'")
        .await?;
    db.authenticate("Bob", "p;w")?;
    let err = session
        .prepare("GRANT SELECT ON TABLE t TO \"Bob\"")
        .await
        .err()
        .ok_or("prepared a GRANT")?;
    assert!(err.to_string().contains("cannot be prepared"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_statement_reads_or_moves_data_around_the_checks() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    setup(&db).await?;
    db.session()
        .run("CREATE SCHEMA mine; GRANT ALL ON DATASET mine TO alice; CREATE TABLE mine.t (_key VARCHAR PRIMARY KEY)")
        .await?;
    let alice = session_of(&db, "alice");
    alice.run("INSERT INTO mine.t VALUES ('a')").await?;
    // A query inside DDL is checked like any other.
    refused(
        &alice,
        "CREATE TABLE mine.loot AS SELECT * FROM secret",
        "SELECT privilege on table default.public.secret",
    )
    .await?;
    refused(
        &alice,
        "CREATE TABLE mine.loot AS SELECT * FROM _system._catalog._users",
        "_users",
    )
    .await?;
    refused(
        &alice,
        "SELECT * INTO mine.loot FROM secret",
        "SELECT privilege on table default.public.secret",
    )
    .await?;
    refused(
        &alice,
        "CREATE OR REPLACE TABLE mine.t AS SELECT * FROM cells('secret')",
        "table default.public.secret",
    )
    .await?;
    assert!(db.open_table("default", "mine", "loot").is_err());
    // A DEFAULT cannot read tables.
    for sql in [
        "ALTER TABLE mine.t ADD COLUMN leak VARCHAR DEFAULT (SELECT max(_key) FROM secret)",
        "CREATE TABLE mine.u (_key VARCHAR PRIMARY KEY, leak BIGINT DEFAULT (SELECT count(*) FROM mine.t))",
    ] {
        let err = alice.run(sql).await.err().ok_or(sql)?;
        assert!(err.to_string().contains("holds a subquery"), "{sql}: {err}");
    }
    // Names are resolved as the statement resolves them: quoted or not.
    refused(
        &alice,
        "DROP DATABASE OTHER CASCADE",
        "CREATE privilege on project other",
    )
    .await?;
    refused(
        &alice,
        "DROP DATABASE \"other\" CASCADE",
        "CREATE privilege on project other",
    )
    .await?;
    assert!(db.open_project("other").is_ok());
    // A table moves only into a dataset where its user may create tables.
    refused(
        &alice,
        "ALTER TABLE mine.t RENAME TO public.moved",
        "CREATE privilege on dataset default.public",
    )
    .await?;
    refused(
        &alice,
        "ALTER TABLE mine.t RENAME TO _system._catalog.moved",
        "CREATE privilege",
    )
    .await?;
    // Chosen write timestamps are an admin's.
    refused(
        &alice,
        "SET widesql.write_timestamp = 1",
        "only an admin may choose write timestamps",
    )
    .await?;
    // A password is a quoted string, and a bad one is not echoed.
    let err = db
        .session()
        .run("CREATE USER eve PASSWORD hunter2")
        .await
        .err()
        .ok_or("an unquoted password")?;
    assert!(
        err.to_string().contains("PASSWORD takes a quoted string"),
        "{err}"
    );
    assert!(!err.to_string().contains("hunter2"), "{err}");
    Ok(())
}

/// Every INSERT is an upsert (a write of new versions, as a Bigtable
/// mutation is), so INSERT alone writes over a row that exists: what
/// `UPDATE` guards is changing rows chosen by a query of the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_alone_writes_new_versions_of_an_existing_row() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    setup(&db).await?;
    let admin = session_of(&db, "root");
    admin.run("GRANT INSERT ON TABLE t TO alice").await?;
    let alice = session_of(&db, "alice");
    alice.run("INSERT INTO t VALUES ('a', 100)").await?;
    assert_eq!(
        common::lines(&admin, "SELECT n FROM t WHERE _key = 'a'").await?,
        ["100"]
    );
    // The value it wrote over is still in the row's history.
    assert_eq!(
        common::lines(&admin, "SELECT n FROM history('t') WHERE _key = 'a'").await?,
        ["[100, 1]"]
    );
    refused(
        &alice,
        "UPDATE t SET n = 5 WHERE _key = 'a'",
        "UPDATE privilege on table default.public.t",
    )
    .await?;
    // An import that appends needs INSERT alone too; without it, it is
    // refused and writes nothing.
    let rows_in = |key: &str, column: &str| -> Result<_, Box<dyn std::error::Error>> {
        use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
        let schema = std::sync::Arc::new(Schema::new(vec![
            Field::new("_key", DataType::Utf8, false),
            Field::new(column, DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                std::sync::Arc::new(StringArray::from(vec![key])),
                std::sync::Arc::new(Int64Array::from(vec![7])),
            ],
        )?;
        let stream = futures::stream::iter([Ok(batch)]);
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    };
    let options = widesql::import::ImportOptions::default();
    let imported = alice
        .import_stream("t", rows_in("c", "n")?, options)
        .await?;
    assert_eq!(imported, 1);
    assert_eq!(
        common::lines(&admin, "SELECT n FROM t WHERE _key = 'c'").await?,
        ["7"]
    );
    // Nor does she learn its columns: a column it lacks is not named.
    let error = alice
        .import_stream("secret", rows_in("c", "x")?, options)
        .await
        .err()
        .ok_or("alice imported into a table she has no grant on")?;
    assert_eq!(error.kind(), ErrorKind::PermissionDenied, "{error}");
    assert!(
        error.to_string().contains("table default.public.secret"),
        "{error}"
    );
    assert_eq!(
        common::lines(&admin, "SELECT count(*) FROM secret").await?,
        ["1"]
    );
    Ok(())
}
