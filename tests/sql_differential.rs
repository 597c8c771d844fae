//! Differential test: random SQL write scripts run on widesql and on
//! SQLite, every table compared after every statement (the tester and what
//! it generates: `tests/differential/mod.rs`).

mod differential;

/// Random write scripts leave widesql's tables exactly as SQLite's.
#[test]
fn widesql_matches_sqlite() {
    differential::run(None, differential::DEFAULT_STATEMENTS);
}
