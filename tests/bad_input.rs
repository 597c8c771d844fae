//! Bad input never panics and never loses data: a table of SQL statements
//! and embedded calls that must fail with an error naming what is wrong (or
//! succeed where the input is odd but valid), then corrupt bytes in a data
//! tree and in the catalog, and a directory of another program. After all
//! of it the database reopens with every earlier row intact.

#![expect(
    clippy::expect_used,
    reason = "a test: a failed expectation is the test failing"
)]

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use common::{query, query_in, run_in, BoxError};
use widesql::{
    Db, DbOptions, DropMode, ErrorKind, FamilySpec, Filter, GcPolicy, ReadModifyWriteRule,
    RowMutation, TableSpec, MAX_QUALIFIER_LEN, MAX_ROW_KEY_LEN, MAX_VALUE_LEN,
};

type TestResult = Result<(), BoxError>;

/// What a case must give.
enum Expect {
    /// Success.
    Ok,
    /// An error whose message contains every one of these (ignoring case).
    Error(Vec<String>),
}

fn err(parts: &[&str]) -> Expect {
    Expect::Error(parts.iter().map(|p| p.to_string()).collect())
}

/// The rows every case must leave as they are.
const KEEP: &str = "SELECT id, v, m['a'] FROM keep ORDER BY id";

fn setup(db: &Db) -> widesql::Result<()> {
    let session = db.session();
    run_in(
        &session,
        "CREATE TABLE keep (id BIGINT PRIMARY KEY, v VARCHAR, m MAP(VARCHAR, BIGINT)); \
         INSERT INTO keep VALUES (1, 'one', MAP {'a': 1}), (2, NULL, NULL), (3, 'three', MAP {'a': 3}); \
         CREATE TABLE t (id BIGINT PRIMARY KEY, n INT, small SMALLINT, v VARCHAR, ts TIMESTAMP, \
                         m MAP(VARCHAR, BIGINT)); \
         INSERT INTO t (id, n, v) VALUES (1, 10, 'a'), (2, 20, 'b'); \
         CREATE TABLE nn (id BIGINT PRIMARY KEY, must VARCHAR NOT NULL)",
    )
}

/// The SQL cases: statement text and what it must give.
fn sql_cases() -> Vec<(String, Expect)> {
    let long_key = "k".repeat(MAX_ROW_KEY_LEN + 1);
    let long_name = "x".repeat(300);
    let mut cases: Vec<(String, Expect)> = vec![
        // Malformed SQL.
        ("SELEC 1".into(), err(&["SELEC"])),
        ("SELECT * FROM".into(), err(&["expected"])),
        ("INSERT INTO t VALUES (".into(), err(&["expected"])),
        ("CREATE TABLE".into(), err(&["expected"])),
        ("SELECT 'unterminated".into(), err(&["unterminated"])),
        ("DROP TABLE".into(), err(&["expected"])),
        ("UPDATE t SET".into(), err(&["expected"])),
        ("DELETE FROM".into(), err(&["expected"])),
        ("ALTER TABLE t ADD".into(), err(&["expected"])),
        ("SELECT * FROM t WHERE".into(), err(&["expected"])),
        ("CREATE TABLE x (id BIGINT PRIMARY KEY".into(), err(&["expected"])),
        ("INSERT INTO t (id) VALUES (1, 2)".into(), err(&["values"])),
        ("SELECT 1 +".into(), err(&["expected"])),
        ("SELECT (1".into(), err(&["expected"])),
        ("\u{0}".into(), err(&[""])),
        // Unknown names.
        ("SELECT * FROM nope".into(), err(&["nope", "does not exist"])),
        ("SELECT nope FROM t".into(), err(&["nope"])),
        ("INSERT INTO nope VALUES (1)".into(), err(&["nope", "does not exist"])),
        ("UPDATE t SET nope = 1".into(), err(&["nope"])),
        ("DELETE FROM nope".into(), err(&["nope", "does not exist"])),
        ("DROP TABLE nope".into(), err(&["nope", "does not exist"])),
        ("TRUNCATE nope".into(), err(&["nope"])),
        ("ALTER TABLE nope ADD COLUMN x INT".into(), err(&["nope", "does not exist"])),
        ("ALTER TABLE t DROP COLUMN nope".into(), err(&["nope"])),
        ("ALTER TABLE t RENAME TO keep".into(), err(&["keep", "already exists"])),
        ("SELECT * FROM nope.public.t".into(), err(&["nope"])),
        ("SELECT * FROM default.nope.t".into(), err(&["nope"])),
        ("CREATE TABLE nope.public.x (id INT PRIMARY KEY)".into(), err(&["nope", "does not exist"])),
        ("INSERT INTO t (id, nope) VALUES (1, 2)".into(), err(&["nope"])),
        ("SELECT * FROM cells('nope')".into(), err(&["nope"])),
        ("SELECT * FROM t JOIN nope ON true".into(), err(&["nope"])),
        ("DELETE FROM t WHERE id IN (SELECT id FROM nope)".into(), err(&["nope"])),
        ("INSERT INTO t SELECT * FROM nope".into(), err(&["nope"])),
        ("CREATE TABLE t (id INT PRIMARY KEY)".into(), err(&["t", "already exists"])),
        ("CREATE SCHEMA nope.s".into(), err(&["nope"])),
        ("DROP SCHEMA nope".into(), err(&["nope"])),
        ("DROP DATABASE nope".into(), err(&["nope"])),
        // Invalid and reserved identifiers.
        ("CREATE TABLE \"\" (id INT PRIMARY KEY)".into(), err(&["empty"])),
        ("CREATE TABLE \"a\tb\" (id INT PRIMARY KEY)".into(), err(&["control"])),
        (format!("CREATE TABLE {long_name} (id INT PRIMARY KEY)"), err(&["255"])),
        ("CREATE TABLE _mine (id INT PRIMARY KEY)".into(), err(&["_mine", "reserved"])),
        ("CREATE DATABASE _p".into(), err(&["_p", "reserved"])),
        ("CREATE SCHEMA _s".into(), err(&["_s", "reserved"])),
        ("CREATE TABLE x (a INT PRIMARY KEY, a INT)".into(), err(&["a"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, \"\" INT)".into(), err(&["empty"])),
        (format!("CREATE TABLE x (id INT PRIMARY KEY, {long_name} INT)"), err(&["255"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, \"c\u{1}\" INT)".into(), err(&["control"])),
        ("ALTER TABLE t RENAME TO _hidden".into(), err(&["_hidden", "reserved"])),
        ("ALTER TABLE t RENAME TO \"\"".into(), err(&["empty"])),
        ("ALTER TABLE t ADD COLUMN n INT".into(), err(&["n", "already"])),
        // Family options.
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT) WITH ('f\tg.columns' = 'v')".into(), err(&["control"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT) WITH ('.columns' = 'v')".into(), err(&["empty"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT) WITH ('cf.bogus' = '1')".into(), err(&["bogus"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT) WITH ('cf.max_versions' = '-1')".into(), err(&["max_versions"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT) WITH ('cf.max_versions' = 'abc')".into(), err(&["abc"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT) WITH ('cf.max_versions' = '0')".into(), err(&["max_versions"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT) WITH ('cf.ttl' = 'forever')".into(), err(&["forever"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT) WITH ('cf.ttl' = '100000000 years')".into(), err(&["ttl"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT) WITH ('cf.locality_group' = '')".into(), err(&["empty"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT) WITH ('f.columns' = 'nope')".into(), err(&["nope"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT, w INT) WITH ('f.columns' = 'v', 'g.columns' = 'v')".into(), err(&["v"])),
        ("CREATE TABLE x (id INT PRIMARY KEY, v INT) WITH ('f.columns' = 'id')".into(), err(&["id"])),
        ("ALTER TABLE t SET ('cf.max_versions' = 'many')".into(), err(&["many"])),
        // Oversized keys, qualifiers and values.
        (format!("CREATE TABLE big (k VARCHAR PRIMARY KEY, v VARCHAR); INSERT INTO big VALUES ('{long_key}', 'x')"), err(&[&MAX_ROW_KEY_LEN.to_string()])),
        ("INSERT INTO t (id, m) VALUES (9, MAP {repeat('q', 20000): 1})".into(), err(&[&MAX_QUALIFIER_LEN.to_string()])),
        (format!("INSERT INTO t (id, v) VALUES (9, repeat('v', {}))", MAX_VALUE_LEN + 1), err(&[&MAX_VALUE_LEN.to_string()])),
        (format!("UPDATE t SET v = repeat('v', {}) WHERE id = 1", MAX_VALUE_LEN + 1), err(&[&MAX_VALUE_LEN.to_string()])),
        // Wrong types and values out of range.
        ("INSERT INTO t (id) VALUES ('abc')".into(), err(&["abc"])),
        ("INSERT INTO t (id, n) VALUES (5, 'x')".into(), err(&["x"])),
        ("INSERT INTO t (id, small) VALUES (5, 100000)".into(), err(&["100000", "int16"])),
        ("INSERT INTO t (id, n) VALUES (5, 9999999999)".into(), err(&["n"])),
        ("UPDATE t SET n = 'abc'".into(), err(&["abc"])),
        ("UPDATE t SET small = 40000 WHERE id = 1".into(), err(&["small"])),
        ("UPDATE t SET n = 1 / 0".into(), err(&["zero"])),
        ("INSERT INTO t (id, m) VALUES (5, MAP {'a': 'text'})".into(), err(&["text"])),
        ("INSERT INTO t (id, m) VALUES (5, MAP {NULL: 1})".into(), err(&["null"])),
        ("INSERT INTO t (id, m) VALUES (5, MAP(['a', NULL], [1, 2]))".into(), err(&["null"])),
        ("INSERT INTO t (id) VALUES (NULL)".into(), err(&["null"])),
        ("INSERT INTO nn (id) VALUES (1)".into(), err(&["null"])),
        ("INSERT INTO nn VALUES (1, NULL)".into(), err(&["null"])),
        ("INSERT INTO t (id, ts) VALUES (5, 'never')".into(), err(&["never"])),
        ("INSERT INTO t (id, n) VALUES (6, 1), (7, 2), (8, 'three')".into(), err(&["three"])),
        ("INSERT INTO t (id, n) VALUES (CAST('abc' AS BIGINT), 1)".into(), err(&["abc"])),
        ("CREATE TABLE x (id DECIMAL(50, 2) PRIMARY KEY)".into(), err(&["50"])),
        ("CREATE TABLE x (m MAP(VARCHAR, INT) PRIMARY KEY)".into(), err(&["m"])),
        // Write timestamps, durability and TTLs.
        ("SET widesql.write_timestamp = '1960-01-01T00:00:00Z'".into(), err(&["1970"])),
        ("SET widesql.write_timestamp = 'yesterday-ish'".into(), err(&["yesterday-ish"])),
        ("SET widesql.durability = 'sometimes'".into(), err(&["sometimes"])),
        ("SET widesql.nope = 1".into(), err(&["nope"])),
        ("ALTER TABLE t SET ('cf.ttl' = '-1 day')".into(), err(&["ttl"])),
        // The system's own objects.
        ("INSERT INTO _system._catalog._tables (name) VALUES ('x')".into(), err(&["_tables", "read-only"])),
        ("DELETE FROM _system._catalog._projects".into(), err(&["_projects", "read-only"])),
        ("UPDATE _system._catalog._datasets SET name = 'x'".into(), err(&["_datasets", "read-only"])),
        ("DROP TABLE _system._catalog._tables".into(), err(&["_tables", "cannot be dropped"])),
        ("TRUNCATE _system._catalog._tables".into(), err(&["_tables"])),
        ("ALTER TABLE _system._catalog._tables RENAME TO x".into(), err(&["_tables"])),
        ("ALTER TABLE _system._catalog._tables ADD COLUMN x INT".into(), err(&["_tables"])),
        ("DROP DATABASE _system CASCADE".into(), err(&["_system", "cannot be dropped"])),
        ("DROP SCHEMA default.public CASCADE".into(), err(&["public"])),
        ("DROP DATABASE default CASCADE".into(), err(&["default"])),
        ("ALTER SCHEMA default.public RENAME TO other".into(), err(&["public"])),
        // Odd but valid: these succeed.
        ("SELECT 1; ;".into(), Expect::Ok),
        ("CREATE TABLE spaced (id INT PRIMARY KEY, v INT) WITH ('f g.columns' = 'v'); DROP TABLE spaced".into(), Expect::Ok),
        ("INSERT INTO t (id, v) VALUES (100, '')".into(), Expect::Ok),
        ("INSERT INTO t (id, m) VALUES (101, MAP {'': 0})".into(), Expect::Ok),
        ("INSERT INTO t (id, v) VALUES (102, 'emoji \u{1F600} and \u{0} nul')".into(), Expect::Ok),
        ("CREATE TABLE \"weird name ü\" (id INT PRIMARY KEY); DROP TABLE \"weird name ü\"".into(), Expect::Ok),
        // A text key part is stored with a two-byte terminator.
        (format!("CREATE TABLE ok_key (k VARCHAR PRIMARY KEY); INSERT INTO ok_key VALUES ('{}')", "k".repeat(MAX_ROW_KEY_LEN - 2)), Expect::Ok),
        (format!("INSERT INTO ok_key VALUES ('{}')", "k".repeat(MAX_ROW_KEY_LEN - 1)), err(&["ok_key", &MAX_ROW_KEY_LEN.to_string()])),
        (format!("CREATE TABLE raw_key (_key VARCHAR PRIMARY KEY); INSERT INTO raw_key VALUES ('{}'); DROP TABLE raw_key", "k".repeat(MAX_ROW_KEY_LEN)), Expect::Ok),
        ("DELETE FROM t WHERE id >= 100".into(), Expect::Ok),
        // A MAP column is a family of its own, never shared with declared
        // columns, whose cells its entries would overwrite and delete.
        ("CREATE TABLE x (_key VARCHAR PRIMARY KEY, a INT, cf MAP(VARCHAR, VARCHAR))".into(), err(&["map column 'cf'", "default column family"])),
        ("CREATE TABLE x (_key VARCHAR PRIMARY KEY, p VARCHAR, page MAP(VARCHAR, VARCHAR)) WITH ('page.columns' = 'p')".into(), err(&["map column 'page'", "page.columns"])),
        ("CREATE TABLE x AS SELECT 'k' AS _key, 1 AS a, MAP {'q': 'v'} AS cf".into(), err(&["map column 'cf'"])),
        // A literal that does not fit its column: the error names both.
        ("INSERT INTO t (id, n) VALUES (200, 'abc')".into(), err(&["row 1", "column 'n'", "abc"])),
        ("INSERT INTO t (id, n) VALUES (200, 1), (201, 2147483648)".into(), err(&["row 2", "column 'n'"])),
        ("ALTER TABLE t DROP COLUMN id".into(), err(&["column 'id'", "row key", "cannot be dropped"])),
        // UPDATE and DELETE name the row key `_rowid`.
        ("CREATE TABLE x (id INT PRIMARY KEY, _rowid INT)".into(), err(&["'_rowid' is reserved"])),
        ("ALTER TABLE t ADD COLUMN _rowid INT".into(), err(&["'_rowid' is reserved"])),
    ];
    // Every statement above that writes must leave `t` as it was; the
    // successful ones that write clean up after themselves. Each CREATE of
    // a table `x` gets a name of its own, so that one wrongly accepted
    // cannot make the others fail for the wrong reason.
    for (i, (sql, _)) in cases.iter_mut().enumerate() {
        *sql = sql.replace("CREATE TABLE x ", &format!("CREATE TABLE x{i} "));
    }
    cases
}

/// The embedded API cases.
fn api_cases(db: &Db) -> Vec<(&'static str, widesql::Result<()>, Expect)> {
    let dataset = match db.default_dataset() {
        Ok(dataset) => dataset,
        Err(e) => return vec![("the default dataset is there", Err(e), Expect::Ok)],
    };
    let t = dataset.open_table("t").expect("table t");
    let wide = dataset
        .create_table(
            "wide",
            TableSpec::new()
                .with_family(FamilySpec::new("f"))
                .with_family(FamilySpec::new("g").with_locality_group("other")),
        )
        .expect("table wide");
    let ok = RowMutation::new().set("f", "q", "v");
    let huge_value = vec![0u8; MAX_VALUE_LEN + 1];
    let spec = |family: FamilySpec| TableSpec::new().with_family(family);
    vec![
        (
            "family name empty",
            dataset
                .create_table("x1", spec(FamilySpec::new("")))
                .map(drop),
            err(&["empty"]),
        ),
        (
            "family name control",
            dataset
                .create_table("x2", spec(FamilySpec::new("a\nb")))
                .map(drop),
            err(&["control"]),
        ),
        (
            "family twice",
            dataset
                .create_table(
                    "x3",
                    spec(FamilySpec::new("f")).with_family(FamilySpec::new("f")),
                )
                .map(drop),
            err(&["f"]),
        ),
        (
            "no family yet",
            dataset
                .create_table("x0", TableSpec::new())
                .and_then(|t| t.drop()),
            Expect::Ok,
        ),
        (
            "max versions zero",
            dataset
                .create_table("x4", spec(FamilySpec::new("f").with_max_versions(0)))
                .map(drop),
            err(&["max_versions"]),
        ),
        (
            "locality group empty",
            dataset
                .create_table("x5", spec(FamilySpec::new("f").with_locality_group("")))
                .map(drop),
            err(&["empty"]),
        ),
        (
            "table name reserved",
            dataset
                .create_table("_x", spec(FamilySpec::new("f")))
                .map(drop),
            err(&["_x", "reserved"]),
        ),
        (
            "table exists",
            dataset
                .create_table("t", spec(FamilySpec::new("f")))
                .map(drop),
            err(&["t", "already exists"]),
        ),
        (
            "unknown family",
            wide.mutate_row(b"r", &RowMutation::new().set("nope", "q", "v")),
            err(&["nope"]),
        ),
        ("empty row key", wide.mutate_row(b"", &ok), err(&["key"])),
        (
            "row key too long",
            wide.mutate_row(&vec![b'k'; MAX_ROW_KEY_LEN + 1], &ok),
            err(&[&MAX_ROW_KEY_LEN.to_string()]),
        ),
        (
            "qualifier too long",
            wide.mutate_row(
                b"r",
                &RowMutation::new().set("f", vec![b'q'; MAX_QUALIFIER_LEN + 1], "v"),
            ),
            err(&[&MAX_QUALIFIER_LEN.to_string()]),
        ),
        (
            "value too long",
            wide.mutate_row(b"r", &RowMutation::new().set("f", "q", huge_value)),
            err(&[&MAX_VALUE_LEN.to_string()]),
        ),
        (
            "negative timestamp",
            wide.mutate_row(b"r", &RowMutation::new().set_at("f", "q", -1, "v")),
            err(&["-1"]),
        ),
        (
            "half valid mutation",
            wide.mutate_row(
                b"r",
                &RowMutation::new().set("f", "q", "v").set("nope", "q", "v"),
            ),
            err(&["nope"]),
        ),
        (
            "filter unknown family",
            wide.read_row(b"r", &Filter::all().with_families(["nope"]))
                .map(drop),
            err(&["nope"]),
        ),
        (
            "increment non-counter",
            wide.mutate_row(b"c", &RowMutation::new().set("f", "n", "abc"))
                .and_then(|()| {
                    wide.read_modify_write(b"c", &[ReadModifyWriteRule::increment("f", "n", 1)])
                        .map(drop)
                }),
            err(&["8"]),
        ),
        (
            "increment overflow",
            wide.mutate_row(
                b"o",
                &RowMutation::new().set("f", "n", i64::MAX.to_be_bytes()),
            )
            .and_then(|()| {
                wide.read_modify_write(b"o", &[ReadModifyWriteRule::increment("f", "n", 1)])
                    .map(drop)
            }),
            err(&["overflow"]),
        ),
        (
            "write system table",
            db.open_table("_system", "_catalog", "_tables")
                .and_then(|s| s.mutate_row(b"x", &RowMutation::new().set("cf", "name", "x"))),
            err(&["_tables", "read-only"]),
        ),
        (
            "drop default dataset",
            dataset.drop(DropMode::Cascade),
            err(&["default"]),
        ),
        (
            "drop system project",
            db.drop_project("_system", DropMode::Cascade),
            err(&["_system"]),
        ),
        (
            "project name empty",
            db.create_project("").map(drop),
            err(&["empty"]),
        ),
        (
            "rename to existing",
            t.rename("keep"),
            err(&["keep", "already exists"]),
        ),
        (
            "unknown family gc",
            wide.set_gc_policy("nope", GcPolicy::keep_all()),
            err(&["nope"]),
        ),
        (
            "drop unknown family",
            wide.drop_family("nope"),
            err(&["nope"]),
        ),
        (
            "add existing family",
            wide.add_family(FamilySpec::new("f")),
            err(&["f", "already"]),
        ),
        (
            "open missing table",
            db.open_table("default", "public", "nope").map(drop),
            err(&["nope", "does not exist"]),
        ),
    ]
}

fn check(label: &str, result: widesql::Result<()>, expect: &Expect, failures: &mut Vec<String>) {
    match (result, expect) {
        (Ok(()), Expect::Ok) => {}
        (Err(e), Expect::Error(parts)) => {
            let message = e.to_string().to_lowercase();
            for part in parts {
                if !message.contains(&part.to_lowercase()) {
                    failures.push(format!("{label}: error {e:?} does not mention {part:?}"));
                }
            }
        }
        (Ok(()), Expect::Error(_)) => {
            failures.push(format!("{label}: succeeded, expected an error"))
        }
        (Err(e), Expect::Ok) => failures.push(format!("{label}: failed with {e}")),
    }
}

fn snapshot(db: &Db) -> Result<Vec<Vec<Vec<String>>>, BoxError> {
    Ok(vec![
        query(db, KEEP)?,
        query(db, "SELECT id, n, small, v, ts, m FROM t ORDER BY id")?,
    ])
}

#[test]
fn bad_input_gives_clear_errors_and_changes_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let before;
    let mut tried = 0;
    let mut failures = Vec::new();
    {
        let db = Db::open_with(dir.path(), DbOptions::new().with_compaction_interval(None))?;
        setup(&db)?;
        before = snapshot(&db)?;
        for (sql, expect) in sql_cases() {
            tried += 1;
            let session = db.session();
            let label: String = sql.chars().take(120).collect();
            match catch_unwind(AssertUnwindSafe(|| run_in(&session, &sql))) {
                Ok(result) => check(&label, result, &expect, &mut failures),
                Err(_) => failures.push(format!("{label}: panicked")),
            }
            // The session still works after the error.
            if let Err(e) = query_in(&session, "SELECT count(*) FROM keep") {
                failures.push(format!("{label}: the session broke: {e}"));
            }
        }
        match catch_unwind(AssertUnwindSafe(|| api_cases(&db))) {
            Ok(cases) => {
                for (label, result, expect) in cases {
                    tried += 1;
                    check(label, result, &expect, &mut failures);
                }
            }
            Err(_) => failures.push("the embedded API cases panicked".into()),
        }
        match snapshot(&db) {
            Ok(now) if now == before => {}
            Ok(now) => failures.push(format!("the rows changed: {now:?}")),
            Err(e) => failures.push(format!("the rows cannot be read: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {tried} cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(tried >= 100, "{tried} cases");
    // Everything is still there after reopening.
    let db = Db::open(dir.path())?;
    assert_eq!(snapshot(&db)?, before);
    Ok(())
}

/// Rewrites entries of the first tree whose name contains `name_part`,
/// with sled directly (the database is closed).
fn tamper(dir: &Path, name_part: &[u8], change: impl FnOnce(&sled::Tree)) -> TestResult {
    let sled = common::open_raw_sled(dir)?;
    let name = sled
        .tree_names()
        .into_iter()
        .find(|n| n.windows(name_part.len()).any(|w| w == name_part))
        .ok_or("no such tree")?;
    let tree = sled.open_tree(name)?;
    change(&tree);
    tree.flush()?;
    Ok(())
}

#[test]
fn corrupt_bytes_are_corruption_errors_naming_table_and_key() -> TestResult {
    let dir = tempfile::tempdir()?;
    let table_id;
    {
        let db = Db::open(dir.path())?;
        setup(&db)?;
        let id = db.default_dataset()?.open_table("t")?.id().to_string();
        table_id = uuid::Uuid::parse_str(&id)?;
    }
    // A key that is not a cell key, among t's cells (in the key space of
    // its locality group `default`).
    tamper(dir.path(), table_id.as_bytes(), |tree| {
        tree.insert(b"default\x00\x01\x00\x01\xFF", &b"junk"[..])
            .expect("insert");
    })?;
    {
        let db = Db::open(dir.path())?;
        let e = query(&db, "SELECT * FROM t").expect_err("a corrupt key is an error");
        let message = e.to_string();
        assert!(message.contains("default.public.t"), "{message}");
        assert!(
            message.contains("00 01 ff") || message.contains("0001ff"),
            "{message}"
        );
        // The other tables read as before.
        assert_eq!(query(&db, KEEP)?.len(), 3);
    }
    // A catalog row whose spec is not JSON: the database refuses to open
    // and says which table.
    tamper(dir.path(), b"catalog", |tree| {
        let key = tree
            .iter()
            .filter_map(Result::ok)
            .find(|(_, v)| {
                v.windows(b"\"families\"".len())
                    .any(|w| w == b"\"families\"")
            })
            .map(|(k, _)| k)
            .expect("a table spec cell");
        tree.insert(key, &b"{not json"[..]).expect("insert");
    })?;
    let e = Db::open(dir.path()).expect_err("a corrupt catalog is refused");
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    Ok(())
}

#[test]
fn a_directory_of_another_program_is_refused_and_left_alone() -> TestResult {
    // A sled database another program wrote.
    let dir = tempfile::tempdir()?;
    {
        let other = sled::open(dir.path())?;
        other.insert("theirs", "data")?;
        other.flush()?;
    }
    let e = Db::open(dir.path()).expect_err("not a widesql database");
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    assert!(e.to_string().contains("not a widesql database"), "{e}");
    assert_eq!(
        common::open_raw_sled(dir.path())?.get("theirs")?.as_deref(),
        Some(&b"data"[..]),
        "their data is untouched"
    );
    // A plain file where the directory should be.
    let file = dir.path().join("file");
    std::fs::write(&file, "hello")?;
    let e = Db::open(&file).expect_err("a file is not a database");
    assert_eq!(e.kind(), ErrorKind::Storage, "{e}");
    assert_eq!(std::fs::read_to_string(&file)?, "hello");
    Ok(())
}

#[test]
fn a_map_sharing_its_family_with_declared_columns_never_overwrites_them() -> TestResult {
    use widesql::{ColumnSpec, ValueType};
    let dir = tempfile::tempdir()?;
    let db = Db::open(dir.path())?;
    // Made through the embedded API: family `f` has the declared column
    // `a` and takes free-form qualifiers, which SQL shows as the map `f`.
    db.default_dataset()?.create_table(
        "mixed",
        TableSpec::new().with_family(
            FamilySpec::new("f")
                .with_column(ColumnSpec::new("a", ValueType::Utf8))
                .with_qualifier_type(Some(ValueType::Utf8)),
        ),
    )?;
    let session = db.session();
    run_in(
        &session,
        "INSERT INTO mixed (_key, a, f) VALUES ('k', 'kept', MAP {'x': '1'})",
    )?;
    let refused = [
        (
            "INSERT INTO mixed (_key, f) VALUES ('k', MAP {'a': 'lost'})",
            "map key 'a'",
        ),
        (
            "UPDATE mixed SET f = MAP {'y': '2'}",
            "cannot be replaced as a whole",
        ),
        ("UPDATE mixed SET f = NULL", "cannot be replaced as a whole"),
    ];
    for (sql, expected) in refused {
        let error = run_in(&session, sql).expect_err(sql).to_string();
        assert!(error.contains(expected), "{sql}: {error}");
    }
    assert_eq!(
        query(&db, "SELECT _key, a, f['x'] FROM mixed")?,
        vec![vec!["k".to_string(), "kept".into(), "1".into()]]
    );
    // A declared column does not join a family that is a map.
    db.default_dataset()?.create_table(
        "map_cf",
        TableSpec::new()
            .with_family(FamilySpec::new("cf").with_qualifier_type(Some(ValueType::Utf8))),
    )?;
    let error = run_in(&session, "ALTER TABLE map_cf ADD COLUMN a INT")
        .expect_err("a column into the map's family")
        .to_string();
    assert!(error.contains("map column 'cf'"), "{error}");
    Ok(())
}
