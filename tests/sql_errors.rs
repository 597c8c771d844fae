//! SQL errors are typed: the same violation has the same kind whichever
//! way the statement comes in (`Session::run`, `Session::sql`, a prepared
//! statement, the embedded API), and its message names the object.

mod common;

use datafusion::common::ScalarValue;
use widesql::{Db, ErrorKind, RowMutation, Session, SqlError};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A database with `t (_key, a BIGINT NOT NULL, b SMALLINT)`.
fn table_with_not_null(dir: &std::path::Path) -> Result<Db, BoxError> {
    let db = Db::open(dir.join("db"))?;
    common::run(
        &db,
        "CREATE TABLE t (_key VARCHAR PRIMARY KEY, a BIGINT NOT NULL, b SMALLINT); \
         INSERT INTO t VALUES ('k', 1, 2)",
    )?;
    Ok(db)
}

/// The error `sql` gives through `run`, through `sql(…).collect()` and,
/// when it can be prepared, as a prepared statement: all of one kind,
/// which is returned with the messages.
fn refused_everywhere(session: &Session, sql: &str) -> Result<(ErrorKind, Vec<String>), BoxError> {
    let runtime = common::runtime();
    let mut errors = Vec::new();
    if let Err(e) = runtime.block_on(session.run(sql)) {
        errors.push(e);
    } else {
        return Err(format!("run: '{sql}' ran").into());
    }
    let collected = runtime.block_on(async { session.sql(sql).await?.collect().await });
    match collected {
        Err(e) => errors.push(e),
        Ok(_) => return Err(format!("sql: '{sql}' ran").into()),
    }
    match session.can_prepare(sql) {
        // Refused before it could be prepared.
        Err(e) => errors.push(e),
        Ok(false) => {}
        Ok(true) => {
            let ran =
                runtime.block_on(async { session.prepare(sql).await?.query(Vec::new()).await });
            match ran {
                Err(e) => errors.push(e),
                Ok(_) => return Err(format!("prepared: '{sql}' ran").into()),
            }
        }
    }
    let kind = errors[0].kind();
    for e in &errors {
        assert_eq!(
            e.kind(),
            kind,
            "'{sql}': {e} is not of the kind of {}",
            errors[0]
        );
    }
    Ok((kind, errors.iter().map(ToString::to_string).collect()))
}

#[test]
fn a_null_for_a_not_null_column_is_a_constraint_violation_on_every_path() -> Result<(), BoxError> {
    let dir = tempfile::tempdir()?;
    let db = table_with_not_null(dir.path())?;
    let session = db.session();
    for sql in [
        "INSERT INTO t VALUES ('n', NULL, 1)",
        "INSERT INTO t (_key, b) VALUES ('n', 1)",
        "UPDATE t SET a = NULL WHERE _key = 'k'",
    ] {
        let (kind, messages) = refused_everywhere(&session, sql)?;
        assert_eq!(kind, ErrorKind::ConstraintViolation, "{sql}: {messages:?}");
        assert!(
            messages
                .iter()
                .all(|m| m.contains("'a'") && m.contains("NOT NULL")),
            "{messages:?}"
        );
    }
    // The row key is NOT NULL too.
    let (kind, messages) = refused_everywhere(&session, "INSERT INTO t VALUES (NULL, 1, 1)")?;
    assert_eq!(kind, ErrorKind::ConstraintViolation, "{messages:?}");
    assert!(
        messages
            .iter()
            .all(|m| m.contains("'_key'") && m.contains("NOT NULL")),
        "{messages:?}"
    );
    // A prepared INSERT given the NULL as a parameter.
    let runtime = common::runtime();
    let prepared = runtime.block_on(session.prepare("INSERT INTO t VALUES ($1, $2, $3)"))?;
    let e = runtime
        .block_on(prepared.query(vec![
            ScalarValue::from("p"),
            ScalarValue::Int64(None),
            ScalarValue::Int16(Some(1)),
        ]))
        .err()
        .ok_or("a NULL parameter was written into a NOT NULL column")?;
    assert_eq!(e.kind(), ErrorKind::ConstraintViolation, "{e}");
    let widesql::Error::Sql(SqlError::AtRow { row: 1, source }) = &e else {
        return Err(format!("not an error of the first row: {e:?}").into());
    };
    assert!(
        matches!(**source, widesql::Error::Sql(SqlError::NotNull { .. })),
        "{source:?}"
    );
    // The embedded API: a new row with b but not a.
    let table = db.open_table("default", "public", "t")?;
    let e = table
        .mutate_row(b"e", &RowMutation::new().set("cf", "b", 7i16.to_be_bytes()))
        .err()
        .ok_or("a row without its NOT NULL column was written")?;
    assert_eq!(e.kind(), ErrorKind::ConstraintViolation, "{e}");
    assert!(e.to_string().contains("'a' is NOT NULL"), "{e}");
    assert_eq!(
        common::query(&db, "SELECT count(*) FROM t")?,
        vec![vec!["1".to_string()]]
    );
    Ok(())
}

#[test]
fn each_refusal_has_its_kind() -> Result<(), BoxError> {
    let dir = tempfile::tempdir()?;
    let db = table_with_not_null(dir.path())?;
    let session = db.session();
    let joins = (0..65)
        .map(|i| format!("t AS t{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let cases = [
        (
            "INSERT INTO t VALUES ('x', 1, 70000)".to_string(),
            ErrorKind::InvalidArgument,
            "column 'b'",
        ),
        (
            "DELETE FROM t WHERE _key = 'k' RETURNING _key".to_string(),
            ErrorKind::Unsupported,
            "RETURNING",
        ),
        (
            "DELETE FROM a.b.c.t".to_string(),
            ErrorKind::InvalidName,
            "'a.b.c.t' is not a [[project.]dataset.]table name",
        ),
        (
            "UPDATE t SET nope = 1".to_string(),
            ErrorKind::NotFound,
            "table 'default.public.t' has no column 'nope'",
        ),
        (
            format!("SELECT count(*) FROM {joins}"),
            ErrorKind::LimitExceeded,
            "65 tables",
        ),
        (
            "CREATE TABLE u AS SELECT * FROM missing".to_string(),
            ErrorKind::NotFound,
            "table 'default.public.missing' does not exist",
        ),
        (
            "DELETE FROM t USING missing WHERE t._key = missing._key".to_string(),
            ErrorKind::NotFound,
            "table 'default.public.missing' does not exist",
        ),
        // A table named like a table function, not called as one.
        (
            "SELECT * FROM history".to_string(),
            ErrorKind::NotFound,
            "table 'default.public.history' does not exist",
        ),
        // A table function called wrongly keeps its own error.
        (
            "SELECT * FROM cells(1)".to_string(),
            ErrorKind::Sql,
            "cells() takes a table name",
        ),
        (
            "CREATE TABLE u (a INT DEFAULT (SELECT max(x) FROM missing))".to_string(),
            ErrorKind::NotFound,
            "table 'default.public.missing' does not exist",
        ),
        (
            "ALTER TABLE t DROP COLUMN nope".to_string(),
            ErrorKind::NotFound,
            "table 'default.public.t' has no column 'nope'",
        ),
    ];
    for (sql, kind, says) in cases {
        let (got, messages) = refused_everywhere(&session, &sql)?;
        assert_eq!(got, kind, "{sql}: {messages:?}");
        assert!(
            messages.iter().all(|m| m.contains(says)),
            "{sql}: {messages:?}"
        );
    }
    // A prepared INSERT: a parameter past SMALLINT does not fit; a
    // parameter left out is a statement error, not a value's.
    let runtime = common::runtime();
    let prepared = runtime.block_on(session.prepare("INSERT INTO t VALUES ($1, $2, $3)"))?;
    let too_big = runtime
        .block_on(prepared.query(vec![
            ScalarValue::from("y"),
            ScalarValue::Int64(Some(1)),
            ScalarValue::Int64(Some(70_000)),
        ]))
        .err()
        .ok_or("70,000 was written into a SMALLINT")?;
    assert_eq!(too_big.kind(), ErrorKind::InvalidArgument, "{too_big}");
    assert!(too_big.to_string().contains("column 'b'"), "{too_big}");
    let unbound = runtime
        .block_on(prepared.query(Vec::new()))
        .err()
        .ok_or("an INSERT ran without its parameters")?;
    assert_eq!(unbound.kind(), ErrorKind::Sql, "{unbound}");
    // Nothing of them was applied.
    assert_eq!(
        common::query(&db, "SELECT _key, a, b FROM t")?,
        vec![vec!["k".to_string(), "1".to_string(), "2".to_string()]]
    );
    Ok(())
}
