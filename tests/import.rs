//! Imports of every format, into existing and new tables, and what a bad
//! file leaves behind.

mod common;

use std::path::Path;

use common::{query, run, runtime};
use widesql::export::ExportOptions;
use widesql::import::ImportOptions;
use widesql::{Db, DbOptions, Error, ErrorKind, FileFormat};

type TestResult = Result<(), common::BoxError>;

/// A table with a composite key, text, a decimal, a timestamp and a MAP
/// family.
fn source(db: &Db) -> widesql::Result<()> {
    run(
        db,
        "CREATE TABLE src (k BIGINT PRIMARY KEY, name VARCHAR, price DECIMAL(10, 2),
                           at TIMESTAMP, tags MAP(VARCHAR, VARCHAR));
         INSERT INTO src (k, name, price, at) SELECT value, concat('n', CAST(value AS VARCHAR)),
             CAST(value AS DECIMAL(10, 2)) / 4, to_timestamp(value * 60)
             FROM generate_series(1, 250) AS s(value);
         UPDATE src SET tags = MAP {'color': 'red', 'size': CAST(k AS VARCHAR)} WHERE k % 2 = 0;
         UPDATE src SET name = NULL WHERE k % 7 = 0",
    )
}

fn import(db: &Db, table: &str, path: &Path, options: ImportOptions) -> widesql::Result<u64> {
    runtime().block_on(db.session().import(table, path, options, |_| {}))
}

fn export(db: &Db, sql: &str, path: &Path, format: FileFormat) -> widesql::Result<()> {
    let session = db.session();
    runtime()
        .block_on(session.export(sql, path, format, ExportOptions::default(), |_| {}))
        .map(|_| ())
}

#[test]
fn every_format_imports_back_into_an_existing_and_a_new_table() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    source(&db)?;
    let expected = query(&db, "SELECT k, name, price, at, tags FROM src ORDER BY k")?;
    for format in FileFormat::ALL {
        // CSV carries the map as its JSON text, which the import decodes.
        let columns = "k, name, price, at, tags";
        let path = dir.path().join(format!("src.{}", format.name()));
        export(&db, &format!("SELECT {columns} FROM src"), &path, format)?;

        let existing = format!("into_{}", format.name());
        run(
            &db,
            &format!("CREATE TABLE {existing} AS SELECT * FROM src WHERE false"),
        )?;
        let written = import(&db, &existing, &path, ImportOptions::default())?;
        assert_eq!(written, 250, "{format:?}");
        let back = query(&db, &format!("SELECT {columns} FROM {existing} ORDER BY k"))?;
        let want = query(&db, &format!("SELECT {columns} FROM src ORDER BY k"))?;
        assert_eq!(back, want, "{format:?} into an existing table");

        let created = format!("new_{}", format.name());
        let options = ImportOptions {
            create: true,
            ..ImportOptions::default()
        };
        assert_eq!(import(&db, &created, &path, options)?, 250, "{format:?}");
        let count = query(&db, &format!("SELECT count(*), count(name) FROM {created}"))?;
        assert_eq!(
            count,
            vec![vec!["250".to_string(), "215".to_string()]],
            "{format:?}"
        );
    }
    // The binary formats keep every type: the new table equals the source.
    let created = query(
        &db,
        "SELECT k, name, price, at, tags FROM new_parquet ORDER BY k",
    )?;
    assert_eq!(created, expected);
    Ok(())
}

#[test]
fn a_bad_csv_row_is_named_and_a_small_file_writes_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    run(
        &db,
        "CREATE TABLE people (id BIGINT PRIMARY KEY, name VARCHAR NOT NULL, zip VARCHAR)",
    )?;
    let path = dir.path().join("people.csv");
    std::fs::write(&path, "id,name,zip\n1,ann,007\n2,bob,01234\nx,cy,9\n")?;
    let err = import(&db, "people", &path, ImportOptions::default())
        .err()
        .ok_or("a row whose id is not a number was imported")?;
    let message = err.to_string();
    assert!(message.contains("people.csv"), "{message}");
    assert!(message.contains("line"), "{message}");
    assert_eq!(
        query(&db, "SELECT count(*) FROM people")?,
        vec![vec!["0".to_string()]]
    );

    // A NULL in a NOT NULL column names the file's row.
    std::fs::write(&path, "id,name,zip\n1,ann,007\n2,,01234\n")?;
    let err = import(&db, "people", &path, ImportOptions::default())
        .err()
        .ok_or("a NULL name was imported")?;
    let message = err.to_string();
    assert!(
        message.contains("people.csv") && message.contains("row 2"),
        "{message}"
    );
    assert_eq!(
        query(&db, "SELECT count(*) FROM people")?,
        vec![vec!["0".to_string()]]
    );

    // Text is parsed with the table's types: the zip codes keep their zeros.
    std::fs::write(&path, "id,name,zip\n1,ann,007\n2,bob,01234\n")?;
    assert_eq!(import(&db, "people", &path, ImportOptions::default())?, 2);
    assert_eq!(
        query(&db, "SELECT zip FROM people ORDER BY id")?,
        vec![vec!["007".to_string()], vec!["01234".to_string()]]
    );
    Ok(())
}

#[test]
fn a_file_larger_than_a_batch_says_how_many_rows_it_wrote() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open_with(
        dir.path().join("db"),
        DbOptions::default().with_statement_batch_rows(100),
    )?;
    run(
        &db,
        "CREATE TABLE n (id BIGINT PRIMARY KEY, v INT NOT NULL)",
    )?;
    let path = dir.path().join("n.ndjson");
    let mut text = String::new();
    for i in 1..=5000 {
        if i == 4950 {
            text.push_str(&format!("{{\"id\": {i}}}\n"));
        } else {
            text.push_str(&format!("{{\"id\": {i}, \"v\": {i}}}\n"));
        }
    }
    std::fs::write(&path, text)?;
    let err = import(&db, "n", &path, ImportOptions::default())
        .err()
        .ok_or("a row without its NOT NULL value was imported")?;
    let message = err.to_string();
    assert!(
        message.contains("n.ndjson") && message.contains("row 4950"),
        "{message}"
    );
    let written = match &err {
        Error::Import { source, .. } => match source.as_ref() {
            Error::PartlyApplied { written, .. } => *written,
            other => return Err(format!("not partly applied: {other}").into()),
        },
        other => return Err(format!("not an import error: {other}").into()),
    };
    assert!(written > 0 && written < 4950, "{written}");
    let count = query(&db, "SELECT count(*), max(id) FROM n")?;
    assert_eq!(count, vec![vec![written.to_string(), written.to_string()]]);
    Ok(())
}

#[test]
fn wrong_files_and_tables_are_refused_by_name() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    run(&db, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR)")?;
    let csv = dir.path().join("extra.csv");
    std::fs::write(&csv, "id,v,color\n1,a,red\n")?;
    let cases: Vec<(&str, std::path::PathBuf, ImportOptions, &str)> = vec![
        ("t", csv.clone(), ImportOptions::default(), "'color'"),
        (
            "missing",
            csv.clone(),
            ImportOptions::default(),
            "does not exist",
        ),
        (
            "t",
            csv.clone(),
            ImportOptions {
                create: true,
                ..ImportOptions::default()
            },
            "exists",
        ),
        (
            "t",
            dir.path().join("none.csv"),
            ImportOptions::default(),
            "none.csv",
        ),
        (
            "t",
            dir.path().join("data.bin"),
            ImportOptions::default(),
            "extension",
        ),
    ];
    for (table, path, options, expected) in cases {
        let err = import(&db, table, &path, options)
            .err()
            .ok_or(format!("{table} <- {} was imported", path.display()))?;
        let message = err.to_string();
        assert!(message.contains(expected), "{expected}: {message}");
    }
    let unclosed = dir.path().join("unclosed.json");
    std::fs::write(&unclosed, "[{\"id\": 1, \"v\": \"a\"},\n{\"id\": 2")?;
    let message = import(&db, "t", &unclosed, ImportOptions::default())
        .err()
        .ok_or("an unclosed JSON array was imported")?
        .to_string();
    assert!(message.contains("unclosed.json"), "{message}");
    assert!(message.contains("closing ']'"), "{message}");
    let parquet = dir.path().join("not.parquet");
    std::fs::write(&parquet, "id,v\n1,a\n")?;
    let err = import(&db, "t", &parquet, ImportOptions::default())
        .err()
        .ok_or("a CSV file named .parquet was imported")?;
    assert!(err.to_string().contains("not a Parquet file"), "{err}");
    assert_eq!(err.kind(), ErrorKind::Sql);
    assert_eq!(
        query(&db, "SELECT count(*) FROM t")?,
        vec![vec!["0".to_string()]]
    );
    Ok(())
}

#[test]
fn a_new_table_appears_only_when_its_file_is_in() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    let path = dir.path().join("bad.csv");
    let mut text = String::from("_key,n\n");
    for i in 0..3000 {
        text.push_str(&format!("row{i:05},{i}\n"));
    }
    text.push_str(",7\n"); // a NULL row key
    std::fs::write(&path, text)?;
    let options = ImportOptions {
        create: true,
        ..ImportOptions::default()
    };
    let err = import(&db, "keyed", &path, options)
        .err()
        .ok_or("a NULL row key was imported")?;
    assert!(err.to_string().contains("row 3001"), "{err}");
    let tables = query(
        &db,
        "SELECT table_name FROM information_schema.tables WHERE table_name = 'keyed'",
    )?;
    assert!(tables.is_empty(), "{tables:?}");

    std::fs::write(&path, "_key,n\nb,2\na,1\n")?;
    assert_eq!(import(&db, "keyed", &path, options)?, 2);
    assert_eq!(
        query(&db, "SELECT _key, n FROM keyed")?,
        vec![
            vec!["a".to_string(), "1".to_string()],
            vec!["b".to_string(), "2".to_string()]
        ]
    );
    Ok(())
}

#[test]
fn insert_select_reads_an_external_file() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    let path = dir.path().join("in.csv");
    std::fs::write(&path, "id,name\n1,ann\n2,bob\n3,cy\n")?;
    let session = db.session();
    common::run_in(
        &session,
        &format!(
            "CREATE TABLE people (id BIGINT PRIMARY KEY, name VARCHAR);
             CREATE EXTERNAL TABLE staged (id BIGINT, name VARCHAR) STORED AS CSV
                 LOCATION '{}' OPTIONS ('format.has_header' 'true');
             INSERT INTO people SELECT id, upper(name) FROM staged WHERE id > 1",
            path.display()
        ),
    )?;
    assert_eq!(
        common::query_in(&session, "SELECT id, name FROM people ORDER BY id")?,
        vec![
            vec!["2".to_string(), "BOB".to_string()],
            vec!["3".to_string(), "CY".to_string()]
        ]
    );
    Ok(())
}

/// A JSON array as pandas (`orient="records", indent=2`) and Polars
/// (`write_json`) write it: objects over several lines, strings holding
/// brackets, commas and escaped quotes.
#[test]
fn a_json_array_imports_as_its_objects() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    run(
        &db,
        "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR, n DOUBLE)",
    )?;
    let path = dir.path().join("records.json");
    std::fs::write(
        &path,
        "[\n  {\n    \"id\": 1,\n    \"v\": \"a, [b] {c}\",\n    \"n\": 1.5\n  },\n  \
         {\"id\": 2, \"v\": \"say \\\"hi\\\"\", \"n\": null},\n  {\"id\": 3}\n]\n",
    )?;
    assert_eq!(import(&db, "t", &path, ImportOptions::default())?, 3);
    assert_eq!(
        query(&db, "SELECT id, v, n FROM t ORDER BY id")?,
        vec![
            vec!["1".to_string(), "a, [b] {c}".to_string(), "1.5".to_string()],
            vec!["2".to_string(), "say \"hi\"".to_string(), String::new()],
            // NULL prints as nothing.
            vec!["3".to_string(), String::new(), String::new()],
        ]
    );
    let options = ImportOptions {
        create: true,
        ..ImportOptions::default()
    };
    assert_eq!(import(&db, "created", &path, options)?, 3);
    assert_eq!(
        query(&db, "SELECT count(*), count(v), sum(id) FROM created")?,
        vec![vec!["3".to_string(), "2".to_string(), "6".to_string()]]
    );
    Ok(())
}

/// A CSV export writes binary as hex and nested values as JSON text; an
/// import into a table of those types decodes them, and a text that is not
/// one value of the column's type is an error naming column and row.
#[test]
fn csv_brings_back_binary_and_nested_columns() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    run(
        &db,
        "CREATE TABLE b (k BIGINT PRIMARY KEY, data BYTEA, tags MAP(VARCHAR, BIGINT));
         INSERT INTO b (k, data) VALUES (1, X'00FF10'), (2, X''), (3, NULL);
         UPDATE b SET tags = MAP {'a': k, 'b,\"c': 2} WHERE k < 3;
         CREATE TABLE back AS SELECT * FROM b WHERE false",
    )?;
    let path = dir.path().join("b.csv");
    export(&db, "SELECT k, data, tags FROM b", &path, FileFormat::Csv)?;
    assert_eq!(import(&db, "back", &path, ImportOptions::default())?, 3);
    let rows = "SELECT k, encode(data, 'hex'), tags['a'], tags['b,\"c'] FROM {} ORDER BY k";
    assert_eq!(
        query(&db, &rows.replace("{}", "back"))?,
        query(&db, &rows.replace("{}", "b"))?
    );
    assert_eq!(
        query(&db, "SELECT encode(data, 'hex') FROM back WHERE k = 1")?,
        vec![vec!["00ff10".to_string()]]
    );

    // Bare hex, as other tools write binary.
    let bare = dir.path().join("bare.csv");
    std::fs::write(&bare, "k,data\n7,0aff\n")?;
    assert_eq!(import(&db, "back", &bare, ImportOptions::default())?, 1);
    assert_eq!(
        query(&db, "SELECT encode(data, 'hex') FROM back WHERE k = 7")?,
        vec![vec!["0aff".to_string()]]
    );

    let before = query(
        &db,
        "SELECT k, encode(data, 'hex'), tags['a'] FROM back ORDER BY k",
    )?;
    for (row, what) in [
        ("{not json}", "tags"),
        // Two values, or a value of another type.
        ("\"{\"\"a\"\": 1}, \"\"v\"\": {}\"", "tags"),
        ("[1]", "tags"),
    ] {
        let bad = dir.path().join("bad.csv");
        std::fs::write(&bad, format!("k,tags\n1,\"{{\"\"a\"\": 1}}\"\n2,{row}\n"))?;
        let message = import(&db, "back", &bad, ImportOptions::default())
            .err()
            .ok_or(format!("the CSV row {row:?} was imported"))?
            .to_string();
        assert!(message.contains(&format!("column '{what}'")), "{message}");
        assert!(message.contains("row 2"), "{message}");
    }
    let odd = dir.path().join("odd.csv");
    std::fs::write(&odd, "k,data\n1,0aff\n2,abc\n")?;
    let message = import(&db, "back", &odd, ImportOptions::default())
        .err()
        .ok_or("odd-length hex was imported")?
        .to_string();
    assert!(message.contains("odd number of hex digits"), "{message}");
    assert!(message.contains("row 2"), "{message}");
    // Files of one batch: nothing of a refused file was written.
    assert_eq!(
        query(
            &db,
            "SELECT k, encode(data, 'hex'), tags['a'] FROM back ORDER BY k"
        )?,
        before
    );
    Ok(())
}

/// A reader that panics on a file's contents (Arrow's JSON decoder has an
/// `unreachable!` for a number where a fixed-size binary value belongs)
/// fails the import; it used to end the file there, and the import
/// reported success without the rest.
#[test]
fn a_reader_that_panics_fails_the_import() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    run(
        &db,
        "CREATE TABLE f AS SELECT 1 AS k, \
         arrow_cast(make_array(X'0102'), 'List(FixedSizeBinary(2))') AS u",
    )?;
    let path = dir.path().join("f.csv");
    std::fs::write(&path, "k,u\n2,\"[\"\"0304\"\"]\"\n3,[5]\n")?;
    let error = import(&db, "f", &path, ImportOptions::default())
        .err()
        .ok_or("a file its reader panicked on was imported")?;
    assert!(
        error.to_string().contains("reading the file failed"),
        "{error}"
    );
    assert_eq!(
        query(&db, "SELECT count(*) FROM f")?,
        vec![vec!["1".to_string()]]
    );
    Ok(())
}

/// A UTF-8 byte-order mark before the text (Excel's "CSV UTF-8" writes
/// one) is not part of the first column's name.
#[test]
fn a_byte_order_mark_is_skipped() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    run(&db, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR)")?;
    for (name, text) in [
        ("excel.csv", "\u{feff}id,v\n1,a\n"),
        ("lines.ndjson", "\u{feff}{\"id\": 2, \"v\": \"b\"}\n"),
        ("array.json", "\u{feff}[{\"id\": 3, \"v\": \"c\"}]"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text)?;
        assert_eq!(
            import(&db, "t", &path, ImportOptions::default())?,
            1,
            "{name}"
        );
    }
    assert_eq!(
        query(&db, "SELECT id, v FROM t ORDER BY id")?,
        vec![
            vec!["1".to_string(), "a".to_string()],
            vec!["2".to_string(), "b".to_string()],
            vec!["3".to_string(), "c".to_string()],
        ]
    );
    Ok(())
}

#[test]
fn an_empty_file_is_an_error_naming_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path().join("db"))?;
    run(&db, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR)")?;
    for name in ["empty.csv", "empty.ndjson"] {
        let path = dir.path().join(name);
        std::fs::write(&path, "")?;
        for create in [false, true] {
            let table = if create { "fresh" } else { "t" };
            let options = ImportOptions {
                create,
                ..Default::default()
            };
            let error = import(&db, table, &path, options)
                .expect_err("an empty file")
                .to_string();
            assert!(
                error.contains(name) && error.contains("has no columns"),
                "{name} into {table}: {error}"
            );
        }
    }
    assert!(query(&db, "SELECT * FROM fresh").is_err(), "no table");
    Ok(())
}
