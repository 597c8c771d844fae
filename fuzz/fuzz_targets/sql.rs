//! The SQL front door: any statement text against a small database gives
//! a result or an error, never a panic, and never touches a table the text
//! does not name. Inputs are either raw text or a sequence of tokens from
//! a SQL vocabulary (which reaches the planner far more often).

#![no_main]

use std::sync::{Arc, OnceLock};

use arbitrary::Arbitrary;
use datafusion::arrow::array::Int64Array;
use libfuzzer_sys::fuzz_target;
use widesql::internals::MemoryBackend;
use widesql::{Db, DbOptions, Session};

/// Words the token mode joins with spaces.
const WORDS: &[&str] = &[
    "SELECT",
    "INSERT",
    "INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "DELETE",
    "FROM",
    "WHERE",
    "CREATE",
    "TABLE",
    "DROP",
    "ALTER",
    "ADD",
    "COLUMN",
    "RENAME",
    "TO",
    "OR",
    "REPLACE",
    "IF",
    "NOT",
    "EXISTS",
    "AS",
    "PRIMARY",
    "KEY",
    "NULL",
    "DEFAULT",
    "AND",
    "IN",
    "IS",
    "BETWEEN",
    "LIMIT",
    "ORDER",
    "BY",
    "GROUP",
    "HAVING",
    "JOIN",
    "ON",
    "USING",
    "UNION",
    "ALL",
    "DISTINCT",
    "CAST",
    "TRUNCATE",
    "WITH",
    "MAP",
    "SCHEMA",
    "DATABASE",
    "SHOW",
    "TABLES",
    "DESCRIBE",
    "EXPLAIN",
    "t",
    "u",
    "k",
    "v",
    "m",
    "w",
    "x",
    "cf",
    "_key",
    "_timestamp",
    "cells",
    "versions",
    "widesql.durability",
    "widesql.write_timestamp",
    "'eventual'",
    "'immediate'",
    "'x.columns'",
    "'x.locality_group'",
    "'x.max_versions'",
    "'x.ttl'",
    "'1 day'",
    "'g'",
    "BIGINT",
    "INT",
    "VARCHAR",
    "DOUBLE",
    "BOOLEAN",
    "TIMESTAMP",
    "BYTEA",
    "DECIMAL(10,2)",
    "DATE",
    "MAP(VARCHAR, BIGINT)",
    "0",
    "1",
    "-1",
    "9223372036854775807",
    "1e308",
    "'a'",
    "''",
    "'2026-01-01T00:00:00Z'",
    "TRUE",
    "FALSE",
    "*",
    "(",
    ")",
    ",",
    ";",
    "=",
    "<",
    ">",
    "+",
    "-",
    "/",
    "%",
    "[",
    "]",
    "{",
    "}",
    ":",
    ".",
    "'",
    "\"",
    "count(*)",
    "sum(v)",
    "now()",
    "(SELECT k FROM t)",
    "x'00ff'",
];

struct Fixture {
    runtime: tokio::runtime::Runtime,
    /// Runs the inputs.
    session: Session,
    /// Checks the guard table, in a session no input changed.
    check: Session,
}

/// One database for the whole run; `guard` is a table no input can name
/// (it is not in the vocabulary), whose rows must stay as they were.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let db = Db::open_on_backend(
            "fuzz",
            Arc::new(MemoryBackend::new()),
            DbOptions::new().with_compaction_interval(None),
        )
        .expect("an in-memory database");
        let session = db.session();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime
            .block_on(session.run(
                "CREATE TABLE guard_zq (id BIGINT PRIMARY KEY, v VARCHAR); \
                 INSERT INTO guard_zq VALUES (1, 'a'), (2, 'b'), (3, NULL); \
                 CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT, w VARCHAR, m MAP(VARCHAR, BIGINT)); \
                 INSERT INTO t VALUES (1, 10, 'a', MAP {'x': 1}), (2, NULL, NULL, NULL)",
            ))
            .expect("the fixture");
        let check = db.session();
        Fixture { runtime, session, check }
    })
}

#[derive(Arbitrary, Debug)]
enum Input {
    Text(String),
    Tokens(Vec<u8>),
}

fuzz_target!(|input: Input| {
    let sql = match input {
        Input::Text(text) => text,
        Input::Tokens(tokens) => tokens
            .iter()
            .map(|t| WORDS[usize::from(*t) % WORDS.len()])
            .collect::<Vec<_>>()
            .join(" "),
    };
    if sql.to_ascii_lowercase().contains("guard_zq") {
        return;
    }
    let f = fixture();
    let _ = f.runtime.block_on(f.session.run(&sql));
    let guard = f
        .runtime
        .block_on(async {
            f.check
                .sql("SELECT count(*), count(v) FROM guard_zq")
                .await?
                .collect()
                .await
                .map_err(widesql::Error::from)
        })
        .expect("the guard table is readable");
    let counts: Vec<i64> = guard[0]
        .columns()
        .iter()
        .map(|c| {
            c.as_any()
                .downcast_ref::<Int64Array>()
                .expect("counts")
                .value(0)
        })
        .collect();
    assert_eq!(counts, [3, 2], "after {sql:?}");
});
