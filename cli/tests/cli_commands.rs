//! The command line: `sql` in every format, errors as one line with a
//! non-zero exit, the shell reading statements from standard input, export
//! and import.

#![expect(
    clippy::expect_used,
    reason = "a test harness: a failed expectation is the test failing"
)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn widesql(db: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_widesql"))
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("the binary runs")
}

/// The shell on `db`, fed `input` as its standard input to its end.
fn shell(db: &std::path::Path, input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_widesql"))
        .arg("--db")
        .arg(db)
        .arg("shell")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the shell starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write");
    child.wait_with_output().expect("the shell ends")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn cli_sql_runs_statements_in_order_in_every_format() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("new-db");
    let out = widesql(
        &db,
        &[
            "sql",
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT); \
             INSERT INTO t VALUES ('a', 1), ('b', 2); \
             SELECT _key, n FROM t ORDER BY _key",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(db.is_dir(), "a new database directory is created");
    let text = stdout(&out);
    // The INSERT's count, then the query as a table.
    assert!(
        text.contains("| count |") && text.contains("| 2     |"),
        "{text}"
    );
    assert!(
        text.contains("| a    | 1 |") && text.contains("| b    | 2 |"),
        "{text}"
    );

    let csv = stdout(&widesql(
        &db,
        &[
            "sql",
            "--format",
            "csv",
            "SELECT _key, n FROM t ORDER BY _key",
        ],
    ));
    assert_eq!(csv, "_key,n\na,1\nb,2\n");
    let json = stdout(&widesql(
        &db,
        &["sql", "--format", "json", "SELECT n FROM t ORDER BY n"],
    ));
    assert_eq!(json.trim(), r#"[{"n":1},{"n":2}]"#);
    let ndjson = stdout(&widesql(
        &db,
        &["sql", "--format", "ndjson", "SELECT n FROM t ORDER BY n"],
    ));
    assert_eq!(ndjson.trim(), "{\"n\":1}\n{\"n\":2}");
    let line = stdout(&widesql(
        &db,
        &[
            "sql",
            "--format",
            "line",
            "SELECT _key, n FROM t ORDER BY n",
        ],
    ));
    assert_eq!(line.trim(), "_key = a\n   n = 1\n\n_key = b\n   n = 2");
    // Nested values go into CSV as their JSON text, as `export` writes them.
    let nested = stdout(&widesql(
        &db,
        &[
            "sql",
            "--format",
            "csv",
            "SELECT make_array(1, 2) AS l, named_struct('a', 1) AS s, map(['k'], [1]) AS m",
        ],
    ));
    assert_eq!(
        nested,
        "l,s,m\n\"[1,2]\",\"{\"\"a\"\":1}\",\"{\"\"k\"\":1}\"\n"
    );
}

#[test]
fn cli_errors_are_one_line_and_exit_non_zero() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = widesql(dir.path(), &["sql", "SELECT * FROM nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim(),
        "error: table 'default.public.nope' does not exist"
    );
    assert!(!err.contains("panicked") && !err.contains("backtrace"));
    let out = widesql(dir.path(), &["sql", "--format", "xml", "SELECT 1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid value 'xml' for '--format"), "{err}");
    assert!(
        err.contains("possible values: table, csv, json, ndjson"),
        "{err}"
    );
    // A failing statement stops the script: the table after it is not made.
    let out = widesql(
        dir.path(),
        &[
            "sql",
            "CREATE TABLE a (x INT); SELECT nope; CREATE TABLE b (x INT)",
        ],
    );
    assert!(!out.status.success());
    let tables = stdout(&widesql(
        dir.path(),
        &["sql", "--format", "csv", "SHOW TABLES"],
    ));
    assert_eq!(
        tables,
        "table_catalog,table_schema,table_name,table_type\ndefault,public,a,BASE TABLE\n"
    );
}

#[test]
fn cli_shell_reads_multi_line_statements() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = shell(
        dir.path(),
        b"SELECT 40 +\n 2 AS answer;\nSELECT * FROM missing;\n.quit\n",
    );
    let text = stdout(&out);
    assert!(
        text.contains("| answer |") && text.contains("| 42     |"),
        "{text}"
    );
    assert!(text.contains(" s)"), "timing is shown: {text}");
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("error: table 'default.public.missing' does not exist"));
}

#[test]
fn cli_import_creates_fills_and_refuses_by_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("db");
    let csv = dir.path().join("people.csv");
    std::fs::write(&csv, "_key,name,age\nann,Ann,31\nbob,Bob,\n").expect("write csv");
    let csv_arg = csv.to_string_lossy().into_owned();
    let made = widesql(&db, &["import", "--table", "people", "--create", &csv_arg]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    assert!(
        String::from_utf8_lossy(&made.stderr).contains("imported 2 rows from"),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let catalog = stdout(&widesql(&db, &["catalog"]));
    assert!(catalog.contains("default.public.people"), "{catalog}");

    // Out as Parquet, and in again into the same table: versions, not rows.
    let parquet = dir.path().join("people.parquet");
    let parquet_arg = parquet.to_string_lossy().into_owned();
    let out = widesql(
        &db,
        &[
            "export",
            "--quiet",
            "--output",
            &parquet_arg,
            "SELECT _key, age FROM people",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = widesql(
        &db,
        &[
            "import",
            "--quiet",
            "--table",
            "default.public.people",
            &parquet_arg,
        ],
    );
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let rows = stdout(&widesql(
        &db,
        &[
            "sql",
            "--format",
            "csv",
            "SELECT _key, name, age FROM people ORDER BY _key",
        ],
    ));
    assert_eq!(rows, "_key,name,age\nann,Ann,31\nbob,Bob,\n");

    // A bad row: exit 1, one line naming the file and the line.
    std::fs::write(&csv, "_key,name,age\ncy,Cy,old\n").expect("write csv");
    let bad = widesql(&db, &["import", "--table", "people", &csv_arg]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("people.csv") && err.contains("line"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn cli_export_writes_files_and_streams_to_stdout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("db");
    let made = widesql(
        &db,
        &[
            "sql",
            "CREATE TABLE t (k BIGINT PRIMARY KEY, m MAP(VARCHAR, BIGINT)); \
             INSERT INTO t VALUES (1, MAP {'a': 1}), (2, NULL), (3, MAP {'b': 3})",
        ],
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );

    // To a file: the format from the extension, MAP values as JSON text.
    let csv = dir.path().join("t.csv");
    let csv_arg = csv.to_string_lossy().into_owned();
    let out = widesql(
        &db,
        &["export", "--output", &csv_arg, "SELECT * FROM t ORDER BY k"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("exported 3 rows"));
    let text = std::fs::read_to_string(&csv).expect("the CSV file");
    assert_eq!(text, "k,m\n1,\"{\"\"a\"\":1}\"\n2,\n3,\"{\"\"b\"\":3}\"\n");

    // To stdout: an Arrow IPC stream another program reads as it comes.
    let out = widesql(&db, &["export", "--quiet", "SELECT k FROM t"]);
    assert!(out.status.success());
    assert!(out.stderr.is_empty(), "--quiet prints nothing");
    let reader = datafusion::arrow::ipc::reader::StreamReader::try_new(&out.stdout[..], None)
        .expect("an IPC stream");
    let rows: usize = reader.map(|b| b.expect("a batch").num_rows()).sum();
    assert_eq!(rows, 3);

    // A failed export leaves no file and exits non-zero with the reason.
    let bad = dir.path().join("bad.parquet");
    let bad_arg = bad.to_string_lossy().into_owned();
    let out = widesql(
        &db,
        &["export", "--output", &bad_arg, "SELECT 1 / (k - 2) FROM t"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Divide by zero"));
    assert!(!bad.exists());
    let out = widesql(&db, &["export", "--format", "xlsx", "SELECT 1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown file format 'xlsx'"));
}

#[test]
fn cli_sql_stops_quietly_when_its_reader_goes_away() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_widesql"))
        .arg("--db")
        .arg(dir.path())
        .args(["sql", "SELECT * FROM generate_series(1, 200000)"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    // Like `| head -1`: one line read, then the pipe closed.
    let mut first = String::new();
    let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
    reader.read_line(&mut first).expect("a line");
    drop(reader);
    let out = child.wait_with_output().expect("the command ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(first.starts_with('+'), "{first}");
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn cli_sql_shows_what_ran_before_a_failing_statement() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = widesql(
        dir.path(),
        &[
            "sql",
            "--format",
            "csv",
            "CREATE TABLE t (_key VARCHAR PRIMARY KEY, a INT); INSERT INTO t VALUES ('a', 1); \
             SELECT * FROM t; SELECT 1/0; INSERT INTO t VALUES ('b', 2)",
        ],
    );
    assert!(!out.status.success());
    // The INSERT's count and the SELECT's row, committed before the error.
    assert_eq!(stdout(&out), "count\n1\n_key,a\na,1\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Divide by zero"));
}

#[test]
fn cli_shell_runs_a_last_statement_without_semicolon_and_refuses_unknown_commands() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = shell(
        dir.path(),
        b".tabels\nSELECT 6 * 7 AS answer;\nSELECT 'last' AS word\n",
    );
    let text = stdout(&out);
    assert!(
        text.contains("| 42     |"),
        "the line after .tabels ran: {text}"
    );
    assert!(
        text.contains("| last |"),
        "the statement at the end ran: {text}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown command '.tabels'"));
}

#[test]
fn cli_shell_commands_list_describe_format_time_and_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("db");
    let made = widesql(
        &db,
        &[
            "sql",
            "CREATE TABLE pages (_key VARCHAR PRIMARY KEY, title VARCHAR); \
             CREATE TABLE zeta (_key VARCHAR PRIMARY KEY)",
        ],
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let script = dir.path().join("fill.sql");
    std::fs::write(
        &script,
        "INSERT INTO pages VALUES ('a', 'Alpha');\nSELECT title FROM pages;\n",
    )
    .expect("the script is written");
    let input = format!(
        ".help\n.mode csv\n.tables\n.tables p%\n\\d pages\n.mode line\n\
         SELECT 6 * 7 AS answer, 'x' AS word;\n.timer off\n.mode csv\n.read {}\n\
         SELECT 1 AS one;\n.read {}\n",
        script.display(),
        dir.path().join("missing.sql").display()
    );
    let out = shell(&db, input.as_bytes());
    let text = stdout(&out);
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains(".schema TABLE"), "{text}");
    // `.tables`, then `.tables p%`, in CSV: every project's tables.
    let header = "table_catalog,table_schema,table_name,table_type\n";
    let (pages, zeta) = (
        "default,public,pages,BASE TABLE\n",
        "default,public,zeta,BASE TABLE\n",
    );
    assert!(text.contains(&format!("{header}{pages}{zeta}\n")), "{text}");
    assert!(text.contains(&format!("{header}{pages}\n")), "{text}");
    // `\d pages`: DESCRIBE, with the family and its locality group.
    assert!(
        text.contains("column_name,data_type,is_nullable,family,locality_group"),
        "{text}"
    );
    assert!(text.contains("title,VARCHAR,YES,"), "{text}");
    // `.mode line`, names aligned right; the time shows (after `\d` and
    // the SELECT) until `.timer off`.
    assert!(text.contains("answer = 42\n  word = x\n"), "{text}");
    assert_eq!(text.matches(" s)\n").count(), 2, "{text}");
    // `.read`: the file's statements ran, then the next line.
    assert!(
        text.contains("count\n1\n\ntitle\nAlpha\n\none\n1\n"),
        "{text}"
    );
    assert!(errors.contains("missing.sql"), "{errors}");
}

#[test]
fn cli_sql_takes_a_predicate_of_three_thousand_terms() {
    // Each term is a level of the expression tree that parsing, planning
    // and dropping recurse through; the process must not run out of stack
    // (with the 8 MiB of the main thread, a debug build did).
    let dir = tempfile::tempdir().expect("a directory");
    let terms: Vec<String> = (0..3000).map(|i| format!("x = {i}")).collect();
    let sql = format!(
        "SELECT count(*) AS n FROM (VALUES (5), (7), (-1)) AS t(x) WHERE {}",
        terms.join(" OR ")
    );
    let output = widesql(dir.path(), &["sql", "--format", "csv", &sql]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        stdout(&output).lines().nth(1),
        Some("2"),
        "{}",
        stdout(&output)
    );
}
