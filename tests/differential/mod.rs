//! Differential test: random SQL write scripts run on widesql and on SQLite,
//! and every table is compared after every statement.
//!
//! SQLite is the reference for what a statement does to the rows. Where
//! SQLite is more permissive than widesql (it stores any value in any
//! column), the tester computes widesql's expected behaviour from SQLite's
//! result: each statement runs on SQLite inside a transaction, and if the
//! values it leaves behind do not fit the declared column types (a SMALLINT
//! above 32767, text in an INT column, an invalid DATE), widesql must fail
//! the statement and change nothing, and SQLite's transaction is rolled
//! back. Statements whose outcome the two engines define differently on
//! purpose (see [`Verdict::Skip`]) are rolled back on SQLite and not run on
//! widesql.
//!
//! Half of the time after a statement, a random `SELECT * FROM t WHERE …`
//! runs on both engines too, and the rows must match.
//!
//! Tables have integer, text or two-column keys, or generated ones; columns
//! are of every type below, TIMESTAMP, DECIMAL and MAP included; some keep columns
//! in a locality group of their own. INSERTs upsert rows at keys that may
//! exist (row after row, and `INSERT … SELECT` of a table onto itself),
//! compared with SQLite's `ON CONFLICT DO UPDATE` of the non-NULL values.
//! Some seeds apply statements in atomic batches of two rows, and some
//! write at explicit timestamps (see [`Mode`]).
//!
//! A run may also drive a *twin*: a second widesql (a cluster's master,
//! say) that runs every statement and query too, and must give what the
//! first gives: the same success or failure, affected rows, tables and
//! answers ([`run`]).
//!
//! `cargo test --test sql_differential` runs a bounded number of statements.
//! `WIDESQL_DIFF_STATEMENTS=<total>` and `WIDESQL_DIFF_SEED=<first seed>`
//! make a longer run, `WIDESQL_DIFF_PLAN_CACHE=off` runs it with the plan
//! cache off (it is on by default); every divergence is printed with its seed, the script
//! so far and both tables, and the run fails if there was any.

use std::cmp::Ordering;
use std::fmt::Write as _;

use datafusion::arrow::array::{Array, Float64Array, Int64Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use widesql::{Db, DbOptions, Session};

/// Statements per seed in both modes.
const STATEMENTS_PER_SEED: usize = 150;
/// Total statements of the run inside `cargo test`.
pub const DEFAULT_STATEMENTS: usize = 3000;

/// `-x`, written so that no engine can read it as a comment.
fn negate(x: &str) -> String {
    format!("(- {x})")
}

// ---------------------------------------------------------------------------
// PRNG
// ---------------------------------------------------------------------------

/// splitmix64: tiny, fast, and the same sequence for a seed on every
/// platform, which is all a reproducible test needs.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i64
    }

    /// True with probability `percent` / 100.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

// ---------------------------------------------------------------------------
// Schema model
// ---------------------------------------------------------------------------

/// Column types both engines can store and compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Bool,
    TinyInt,
    SmallInt,
    Int,
    BigInt,
    UTinyInt,
    USmallInt,
    UInt,
    Real,
    Double,
    Varchar,
    Date,
    Timestamp,
    /// `DECIMAL(10, 2)`, holding multiples of 1/4 (exact as SQLite's REAL).
    Decimal,
    /// `MAP(VARCHAR, BIGINT)`, a family of its own; in SQLite a JSON object
    /// of the entries whose value is not NULL (NULL for none).
    Map,
}

/// What an expression computes; expressions are generated per class so that
/// both engines agree on the value before it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Int,
    Float,
    Text,
    Bool,
    Date,
    Timestamp,
    Decimal,
    Map,
}

const ALL_TYPES: [Ty; 15] = [
    Ty::Bool,
    Ty::TinyInt,
    Ty::SmallInt,
    Ty::Int,
    Ty::BigInt,
    Ty::UTinyInt,
    Ty::USmallInt,
    Ty::UInt,
    Ty::Real,
    Ty::Double,
    Ty::Varchar,
    Ty::Date,
    Ty::Timestamp,
    Ty::Decimal,
    Ty::Map,
];

/// BIGINT values beyond this are not compared: SQLite turns an overflowing
/// i64 into a REAL while widesql, as PostgreSQL does, fails the statement
/// (sql_tests/integer_overflow.slt), by design on both sides.
const BIGINT_SAFE: i64 = 1 << 62;

impl Ty {
    fn widesql(self) -> &'static str {
        match self {
            Ty::Bool => "BOOLEAN",
            Ty::TinyInt => "TINYINT",
            Ty::SmallInt => "SMALLINT",
            Ty::Int => "INT",
            Ty::BigInt => "BIGINT",
            Ty::UTinyInt => "TINYINT UNSIGNED",
            Ty::USmallInt => "SMALLINT UNSIGNED",
            Ty::UInt => "INT UNSIGNED",
            Ty::Real => "REAL",
            Ty::Double => "DOUBLE",
            Ty::Varchar => "VARCHAR",
            Ty::Date => "DATE",
            Ty::Timestamp => "TIMESTAMP",
            Ty::Decimal => "DECIMAL(10, 2)",
            Ty::Map => "MAP(VARCHAR, BIGINT)",
        }
    }

    /// SQLite's declared type: the same name gives the right affinity,
    /// except DATE (NUMERIC affinity), which is stored as ISO text.
    fn sqlite(self) -> &'static str {
        match self {
            Ty::Date | Ty::Timestamp | Ty::Map => "TEXT",
            other => other.widesql(),
        }
    }

    fn class(self) -> Class {
        match self {
            Ty::Bool => Class::Bool,
            Ty::Real | Ty::Double => Class::Float,
            Ty::Varchar => Class::Text,
            Ty::Date => Class::Date,
            Ty::Timestamp => Class::Timestamp,
            Ty::Decimal => Class::Decimal,
            Ty::Map => Class::Map,
            _ => Class::Int,
        }
    }

    /// The range of an integer type.
    fn int_range(self) -> Option<(i64, i64)> {
        Some(match self {
            Ty::TinyInt => (i8::MIN as i64, i8::MAX as i64),
            Ty::SmallInt => (i16::MIN as i64, i16::MAX as i64),
            Ty::Int => (i32::MIN as i64, i32::MAX as i64),
            Ty::BigInt => (i64::MIN, i64::MAX),
            Ty::UTinyInt => (0, u8::MAX as i64),
            Ty::USmallInt => (0, u16::MAX as i64),
            Ty::UInt => (0, u32::MAX as i64),
            _ => return None,
        })
    }
}

#[derive(Debug, Clone)]
struct Column {
    name: String,
    ty: Ty,
    /// NOT NULL: primary keys, and the columns CREATE TABLE AS copies from
    /// them (widesql keeps the query's nullability; SQLite does not).
    not_null: bool,
}

/// A table as the generator believes it is.
#[derive(Debug, Clone)]
struct TableModel {
    name: String,
    /// Whether `columns[0]` is the key `id` (BIGINT or VARCHAR); otherwise
    /// widesql generates hidden keys.
    keyed: bool,
    /// Whether `columns[1]` is `k VARCHAR`, the key's second part:
    /// `PRIMARY KEY (id, k)`.
    composite: bool,
    columns: Vec<Column>,
}

impl TableModel {
    /// How many columns the key has.
    fn key_len(&self) -> usize {
        usize::from(self.keyed) + usize::from(self.composite)
    }

    /// The columns a statement may write.
    fn value_columns(&self) -> &[Column] {
        &self.columns[self.key_len()..]
    }
}

#[derive(Debug, Clone, Default)]
struct Model {
    tables: Vec<TableModel>,
}

impl Model {
    fn apply(&mut self, effect: &Effect) {
        match effect {
            Effect::None => {}
            Effect::Create(table) => self.tables.push(table.clone()),
            Effect::Drop(name) => self.tables.retain(|t| &t.name != name),
            Effect::Replace(table) => {
                self.tables.retain(|t| t.name != table.name);
                self.tables.push(table.clone());
            }
            Effect::AddColumn(table, column) => {
                if let Some(t) = self.tables.iter_mut().find(|t| &t.name == table) {
                    t.columns.push(column.clone());
                }
            }
            Effect::DropColumn(table, column) => {
                if let Some(t) = self.tables.iter_mut().find(|t| &t.name == table) {
                    t.columns.retain(|c| &c.name != column);
                }
            }
            Effect::Rename(from, to) => {
                if let Some(t) = self.tables.iter_mut().find(|t| &t.name == from) {
                    t.name = to.clone();
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Generator
// ---------------------------------------------------------------------------

/// One piece of SQL in both dialects; nearly always the same text.
#[derive(Debug, Clone)]
struct Sql {
    widesql: String,
    sqlite: String,
}

impl Sql {
    fn same(text: impl Into<String>) -> Sql {
        let text = text.into();
        Sql {
            widesql: text.clone(),
            sqlite: text,
        }
    }

    /// Applies the same template to both texts.
    fn map(&self, f: impl Fn(&str) -> String) -> Sql {
        Sql {
            widesql: f(&self.widesql),
            sqlite: f(&self.sqlite),
        }
    }

    fn zip(&self, other: &Sql, f: impl Fn(&str, &str) -> String) -> Sql {
        Sql {
            widesql: f(&self.widesql, &other.widesql),
            sqlite: f(&self.sqlite, &other.sqlite),
        }
    }

    fn join(items: &[Sql], sep: &str) -> Sql {
        Sql {
            widesql: items
                .iter()
                .map(|s| s.widesql.as_str())
                .collect::<Vec<_>>()
                .join(sep),
            sqlite: items
                .iter()
                .map(|s| s.sqlite.as_str())
                .collect::<Vec<_>>()
                .join(sep),
        }
    }
}

/// What a statement does, for the known-bug flags and the row-count check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Insert,
    InsertSelect,
    Update,
    Delete,
    Truncate,
    Ddl,
}

/// How a statement changes the schema when it succeeds.
#[derive(Debug, Clone)]
enum Effect {
    None,
    Create(TableModel),
    Drop(String),
    AddColumn(String, Column),
    DropColumn(String, String),
    /// The table of the first name now has the second.
    Rename(String, String),
    /// The table of that name is replaced by this one.
    Replace(TableModel),
}

#[derive(Debug, Clone)]
struct Statement {
    sql: Sql,
    kind: Kind,
    effect: Effect,
}

/// The table and alias column references are qualified with, plus the outer
/// scope a correlated subquery may refer to.
#[derive(Clone, Copy)]
struct Scope<'a> {
    alias: &'a str,
    table: &'a TableModel,
    outer: Option<(&'a str, &'a TableModel)>,
    /// Whether expressions may contain subqueries.
    subqueries: bool,
}

const INT_EDGES: [i64; 28] = [
    0,
    1,
    -1,
    127,
    128,
    -128,
    -129,
    255,
    256,
    1000,
    32767,
    32768,
    -32768,
    -32769,
    65535,
    65536,
    100000,
    2147483647,
    2147483648,
    -2147483648,
    -2147483649,
    4294967295,
    4294967296,
    1000000000000,
    -7,
    42,
    3,
    10,
];

const TEXTS: [&str; 9] = ["a", "b", "ab", "abc", "", "Z z", "it''s", "12", "x1"];

const DATES: [&str; 8] = [
    "2020-01-01",
    "2020-02-29",
    "1999-12-31",
    "2024-06-15",
    "1970-01-01",
    "2000-03-01",
    "1969-07-20",
    "2038-01-19",
];

/// Strings SQLite stores in a DATE column but widesql must refuse.
const BAD_DATES: [&str; 3] = ["2020-02-30", "2021-13-01", "not a date"];

const TIMESTAMPS: [&str; 6] = [
    "2020-01-01 00:00:00",
    "2020-02-29 12:30:00",
    "1999-12-31 23:59:59",
    "2024-06-15 08:00:00",
    "2024-06-15 08:00:01",
    "1970-01-01 00:00:00",
];

/// Strings SQLite stores in a TIMESTAMP column but widesql must refuse.
const BAD_TIMESTAMPS: [&str; 3] = ["2020-02-30 00:00:00", "2020-01-01 25:00:00", "noon"];

struct Generator {
    rng: Rng,
    model: Model,
    /// Suffix of the next table or column name.
    next_name: u32,
    /// Next primary key for plain INSERTs; INSERT … SELECT adds offsets of
    /// a million, so keys stay fresh and SQLite's PRIMARY KEY check never
    /// fires on purpose.
    next_key: i64,
    next_offset: i64,
}

impl Generator {
    fn new(seed: u64) -> Generator {
        Generator {
            rng: Rng::new(seed),
            model: Model::default(),
            next_name: 0,
            next_key: 1,
            next_offset: 1_000_000,
        }
    }

    fn name(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        format!("{prefix}{}", self.next_name)
    }

    /// The next statement for the current model.
    fn statement(&mut self) -> Statement {
        let tables = self.model.tables.len();
        if tables < 2 || (tables < 3 && self.rng.chance(3)) {
            return self.create_table();
        }
        let table = self.model.tables[self.rng.below(tables)].clone();
        let roll = self.rng.below(100);
        match roll {
            0..=27 => self.insert_values(&table),
            28..=35 => self.insert_select(&table),
            36..=63 => self.update(&table),
            64..=77 => self.delete(&table),
            78..=79 => self.truncate(&table),
            80..=84 => self.add_column(&table),
            85..=89 => self.drop_column(&table),
            90..=92 => {
                let source = self.other_table();
                self.create_table_as(&source, None)
            }
            93..=94 => {
                let source = self.other_table();
                self.create_table_as(&source, Some(&table.name))
            }
            97..=98 => {
                let to = self.name(if table.keyed { "t" } else { "g" });
                Statement {
                    sql: Sql::same(format!("ALTER TABLE {} RENAME TO {to}", table.name)),
                    kind: Kind::Ddl,
                    effect: Effect::Rename(table.name.clone(), to),
                }
            }
            95..=96 if tables > 2 => Statement {
                sql: Sql::same(format!("DROP TABLE {}", table.name)),
                kind: Kind::Ddl,
                effect: Effect::Drop(table.name.clone()),
            },
            _ => self.insert_values(&table),
        }
    }

    fn random_type(&mut self) -> Ty {
        *self.rng.pick(&ALL_TYPES)
    }

    fn create_table(&mut self) -> Statement {
        let keyed = self.rng.chance(80);
        let name = self.name(if keyed { "t" } else { "g" });
        let mut columns = Vec::new();
        if keyed {
            // Text keys now and then: ordered and compared as bytes by both.
            let ty = if self.rng.chance(25) {
                Ty::Varchar
            } else {
                Ty::BigInt
            };
            columns.push(Column {
                name: "id".into(),
                ty,
                not_null: true,
            });
        }
        // Now and then a key of two columns, the second text.
        let composite = keyed && columns[0].ty == Ty::BigInt && self.rng.chance(25);
        if composite {
            columns.push(Column {
                name: "k".into(),
                ty: Ty::Varchar,
                not_null: true,
            });
        }
        let key_len = usize::from(keyed) + usize::from(composite);
        for _ in 0..self.rng.range(2, 6) {
            let column = Column {
                name: self.name("c"),
                ty: self.random_type(),
                not_null: false,
            };
            columns.push(column);
        }
        let definitions = |sqlite: bool| {
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let ty = if sqlite {
                        c.ty.sqlite()
                    } else {
                        c.ty.widesql()
                    };
                    match (i < key_len, composite, sqlite) {
                        // SQLite lets a non-INTEGER primary key be NULL.
                        (true, _, true) if composite => format!("{} {ty} NOT NULL", c.name),
                        (true, _, true) => format!("{} {ty} PRIMARY KEY NOT NULL", c.name),
                        (true, false, false) => format!("{} {ty} PRIMARY KEY", c.name),
                        _ => format!("{} {ty}", c.name),
                    }
                })
                .chain(composite.then(|| "PRIMARY KEY (id, k)".to_string()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        // Some columns in a family of their own locality group, which a
        // query of only those columns reads apart from the others.
        let value_columns = &columns[key_len..];
        let grouped: Vec<&str> = if value_columns.len() >= 2 && self.rng.chance(35) {
            let n = self.rng.range(1, value_columns.len() as i64 - 1) as usize;
            // (A MAP column is a family of its own.)
            value_columns[..n]
                .iter()
                .filter(|c| c.ty != Ty::Map)
                .map(|c| c.name.as_str())
                .collect()
        } else {
            Vec::new()
        };
        let options = if grouped.is_empty() {
            String::new()
        } else {
            format!(
                " WITH ('f.columns' = '{}', 'f.locality_group' = 'lg')",
                grouped.join(",")
            )
        };
        let sql = Sql {
            widesql: format!("CREATE TABLE {name} ({}){options}", definitions(false)),
            sqlite: format!("CREATE TABLE {name} ({})", definitions(true)),
        };
        Statement {
            sql,
            kind: Kind::Ddl,
            effect: Effect::Create(TableModel {
                name,
                keyed,
                composite,
                columns,
            }),
        }
    }

    // -- literals --------------------------------------------------------

    fn int_literal(&mut self) -> String {
        if self.rng.chance(35) {
            self.rng.pick(&INT_EDGES).to_string()
        } else {
            self.rng.range(-50, 50).to_string()
        }
    }

    /// Multiples of 1/4: exact in REAL and DOUBLE alike.
    fn float_literal(&mut self) -> String {
        format!("{:.2}", self.rng.range(-400, 400) as f64 / 4.0)
    }

    fn literal(&mut self, class: Class) -> Sql {
        Sql::same(match class {
            Class::Int => self.int_literal(),
            Class::Float => self.float_literal(),
            Class::Text => format!("'{}'", self.rng.pick(&TEXTS)),
            Class::Bool => (*self.rng.pick(&["TRUE", "FALSE"])).to_string(),
            Class::Decimal => self.float_literal(),
            Class::Date => {
                // DataFusion does not unify text with DATE everywhere
                // (coalesce, CASE), so expressions use typed literals.
                let date = self.rng.pick(&DATES);
                return Sql {
                    widesql: format!("DATE '{date}'"),
                    sqlite: format!("'{date}'"),
                };
            }
            Class::Timestamp => {
                let at = self.rng.pick(&TIMESTAMPS);
                return Sql {
                    widesql: format!("TIMESTAMP '{at}'"),
                    sqlite: format!("'{at}'"),
                };
            }
            Class::Map => return self.map_literal(),
        })
    }

    /// `MAP {'a': 1, 'c': NULL}` of one to three keys, at least one value
    /// not NULL; in SQLite the JSON object of the others, `{"a":1}`.
    fn map_literal(&mut self) -> Sql {
        let mut keys = vec!["a", "b", "c", "d"];
        let n = self.rng.range(1, 3) as usize;
        let mut entries = Vec::new();
        let mut object = serde_json::Map::new();
        for at in 0..n {
            let key = keys.remove(self.rng.below(keys.len()));
            if at > 0 && self.rng.chance(20) {
                entries.push(format!("'{key}': NULL"));
            } else {
                let value = self.rng.range(-50, 50);
                entries.push(format!("'{key}': {value}"));
                object.insert(key.to_string(), value.into());
            }
        }
        Sql {
            widesql: format!("MAP {{{}}}", entries.join(", ")),
            sqlite: format!("'{}'", serde_json::Value::Object(object)),
        }
    }

    /// A literal for a column of `ty` that usually fits, sometimes does not
    /// (out of range, text for a number, an invalid date).
    fn value_literal(&mut self, ty: Ty, allow_bad: bool) -> Sql {
        if self.rng.chance(15) {
            return Sql::same("NULL");
        }
        if allow_bad && self.rng.chance(8) {
            return Sql::same(match ty.class() {
                Class::Int => format!("'{}'", self.rng.pick(&["12", "x1", "-3"])),
                Class::Date => format!("'{}'", self.rng.pick(&BAD_DATES)),
                Class::Timestamp => format!("'{}'", self.rng.pick(&BAD_TIMESTAMPS)),
                _ => return self.literal(ty.class()),
            });
        }
        if let Some((lo, hi)) = ty.int_range() {
            if self.rng.chance(75) {
                let (lo, hi) = (lo.max(-1000), hi.min(1000));
                return Sql::same(self.rng.range(lo, hi).to_string());
            }
        }
        // Text, so that widesql's conversion on write is exercised.
        if ty == Ty::Date {
            return Sql::same(format!("'{}'", self.rng.pick(&DATES)));
        }
        if ty == Ty::Timestamp {
            return Sql::same(format!("'{}'", self.rng.pick(&TIMESTAMPS)));
        }
        self.literal(ty.class())
    }

    // -- expressions -----------------------------------------------------

    fn columns_of(table: &TableModel, class: Class) -> Vec<&Column> {
        table
            .columns
            .iter()
            .filter(|c| c.ty.class() == class)
            .collect()
    }

    /// A column reference of `class` from the scope (the outer scope now
    /// and then), or None when there is none.
    fn column_ref(&mut self, class: Class, scope: &Scope) -> Option<Sql> {
        let (alias, table) = match scope.outer {
            Some(outer) if self.rng.chance(30) => outer,
            _ => (scope.alias, scope.table),
        };
        let mut candidates = Self::columns_of(table, class);
        // Integers read as floats are fine for both engines.
        if class == Class::Float && self.rng.chance(30) {
            candidates.extend(Self::columns_of(table, Class::Int));
        }
        if candidates.is_empty() {
            return None;
        }
        let column = candidates[self.rng.below(candidates.len())];
        Some(Sql::same(
            if class == Class::Float && column.ty.class() == Class::Int {
                // DataFusion refuses arithmetic like `- x` on unsigned columns.
                format!("CAST({alias}.{} AS DOUBLE)", column.name)
            } else {
                format!("{alias}.{}", column.name)
            },
        ))
    }

    /// An expression of `class`. Integer arithmetic is done in BIGINT
    /// (widesql computes narrow types in their own width and fails when
    /// they overflow it; SQLite computes in 64 bits).
    fn expr(&mut self, class: Class, scope: &Scope, depth: u32) -> Sql {
        if depth == 0 || class == Class::Map || self.rng.chance(35) {
            return self.leaf(class, scope);
        }
        let d = depth - 1;
        match self.rng.below(10) {
            0 => {
                let cond = self.bool_expr(scope, d);
                let a = self.expr(class, scope, d);
                let b = self.expr(class, scope, d);
                let then = cond.zip(&a, |c, a| format!("CASE WHEN {c} THEN {a}"));
                then.zip(&b, |t, b| format!("{t} ELSE {b} END"))
            }
            1 => {
                let a = self.expr(class, scope, d);
                let b = self.expr(class, scope, d);
                a.zip(&b, |a, b| format!("coalesce({a}, {b})"))
            }
            2 if scope.subqueries && class != Class::Bool => self.scalar_subquery(class, None),
            _ => match class {
                Class::Int => self.int_composite(scope, d),
                Class::Float => self.float_composite(scope, d),
                Class::Text => self.text_composite(scope, d),
                Class::Bool => self.bool_expr(scope, d),
                Class::Date | Class::Timestamp | Class::Decimal | Class::Map => {
                    self.leaf(class, scope)
                }
            },
        }
    }

    fn leaf(&mut self, class: Class, scope: &Scope) -> Sql {
        let roll = self.rng.below(100);
        if roll < 8 {
            return match class {
                Class::Map => Sql::same("NULL"),
                _ => typed_null(class),
            };
        }
        if roll < 65 {
            if let Some(column) = self.column_ref(class, scope) {
                return column;
            }
        }
        self.literal(class)
    }

    /// Integer arithmetic whose operands are brought below 10^9 first:
    /// where a BIGINT result overflows, SQLite makes it a REAL while
    /// widesql fails the statement, so the two would not be comparable (a
    /// stored value's overflow is judged by [`check_value`] instead).
    fn int_composite(&mut self, scope: &Scope, d: u32) -> Sql {
        let a = self.expr(Class::Int, scope, d);
        let bounded = |a: &str| format!("(CAST({a} AS BIGINT) % 1000000000)");
        match self.rng.below(7) {
            0 => a.map(|a| negate(&bounded(a))),
            1 => {
                let divisor = *self.rng.pick(&[2, 3, 7, -4, 100]);
                let op = *self.rng.pick(&["/", "%"]);
                a.map(|a| format!("(CAST({a} AS BIGINT) {op} {divisor})"))
            }
            2 => {
                let text = self.expr(Class::Text, scope, d);
                text.map(|t| format!("length({t})"))
            }
            3 => {
                let factor = *self.rng.pick(&[2, 10, 1000, -3, 100000]);
                a.map(|a| format!("({} * {factor})", bounded(a)))
            }
            _ => {
                let b = self.expr(Class::Int, scope, d);
                let op = *self.rng.pick(&["+", "-", "*"]);
                a.zip(&b, |a, b| format!("({} {op} {})", bounded(a), bounded(b)))
            }
        }
    }

    fn float_composite(&mut self, scope: &Scope, d: u32) -> Sql {
        let a = self.expr(Class::Float, scope, d);
        match self.rng.below(4) {
            0 => a.map(negate),
            1 => {
                let factor = *self.rng.pick(&["2", "-3", "0.5", "1000"]);
                a.map(|a| format!("({a} * {factor})"))
            }
            _ => {
                let b = self.expr(Class::Float, scope, d);
                let op = *self.rng.pick(&["+", "-"]);
                a.zip(&b, |a, b| format!("({a} {op} {b})"))
            }
        }
    }

    fn text_composite(&mut self, scope: &Scope, d: u32) -> Sql {
        let a = self.expr(Class::Text, scope, d);
        match self.rng.below(5) {
            0 => a.map(|a| format!("upper({a})")),
            1 => a.map(|a| format!("lower({a})")),
            2 => a.map(|a| format!("substr({a}, 1, 2)")),
            3 => {
                let n = self.expr(Class::Int, scope, d);
                n.map(|n| format!("CAST({n} AS VARCHAR)"))
            }
            _ => {
                let b = self.expr(Class::Text, scope, d);
                a.zip(&b, |a, b| format!("({a} || {b})"))
            }
        }
    }

    /// A boolean expression (comparisons, NULL tests, AND/OR/NOT).
    fn bool_expr(&mut self, scope: &Scope, depth: u32) -> Sql {
        let d = depth.saturating_sub(1);
        match self.rng.below(10) {
            0 => self.leaf(Class::Bool, scope),
            1 if depth > 0 => {
                let a = self.bool_expr(scope, d);
                a.map(|a| format!("(NOT {a})"))
            }
            2 | 3 if depth > 0 => {
                let a = self.bool_expr(scope, d);
                let b = self.bool_expr(scope, d);
                let op = *self.rng.pick(&["AND", "OR"]);
                a.zip(&b, |a, b| format!("({a} {op} {b})"))
            }
            4 => {
                let class = self.comparable_class();
                let a = self.expr(class, scope, d);
                let not = if self.rng.chance(50) { " NOT" } else { "" };
                a.map(|a| format!("({a} IS{not} NULL)"))
            }
            5 => {
                let class = self.comparable_class();
                let a = self.expr(class, scope, d);
                let items: Vec<Sql> = (0..self.rng.range(1, 3))
                    .map(|_| self.literal(class))
                    .collect();
                let list = Sql::join(&items, ", ");
                a.zip(&list, |a, l| format!("({a} IN ({l}))"))
            }
            _ => {
                let class = self.comparable_class();
                let a = self.expr(class, scope, d);
                let b = self.expr(class, scope, d);
                let op = *self.rng.pick(&["=", "<>", "<", "<=", ">", ">="]);
                a.zip(&b, |a, b| format!("({a} {op} {b})"))
            }
        }
    }

    fn comparable_class(&mut self) -> Class {
        *self.rng.pick(&[
            Class::Int,
            Class::Int,
            Class::Float,
            Class::Text,
            Class::Date,
            Class::Timestamp,
            Class::Decimal,
        ])
    }

    /// Another table to read in a subquery (possibly the same one).
    /// `SELECT * FROM t WHERE <predicate>` over a random table, drawn from
    /// `rng` so that the write statements of a seed stay the same whether
    /// or not queries are checked.
    fn query(&mut self, rng: &mut Rng) -> Option<Sql> {
        if self.model.tables.is_empty() {
            return None;
        }
        let saved = std::mem::replace(&mut self.rng, Rng(rng.next_u64()));
        let table = self.other_table();
        let scope = Scope {
            alias: &table.name,
            table: &table,
            outer: None,
            subqueries: true,
        };
        let predicate = self.predicate(&scope);
        rng.next_u64();
        self.rng = saved;
        Some(predicate.map(|p| format!("SELECT * FROM {} WHERE {p}", table.name)))
    }

    fn other_table(&mut self) -> TableModel {
        let tables = &self.model.tables;
        tables[self.rng.below(tables.len())].clone()
    }

    /// `(SELECT max(q.c) FROM other q [WHERE …])`, or a count; `other` is
    /// any table when None.
    fn scalar_subquery(&mut self, class: Class, other: Option<TableModel>) -> Sql {
        let other = other.unwrap_or_else(|| self.other_table());
        let alias = "q";
        // Uncorrelated: DataFusion plans a correlated scalar subquery only
        // when the correlation is an equality.
        let inner = Scope {
            alias,
            table: &other,
            outer: None,
            subqueries: false,
        };
        let filter = if self.rng.chance(60) {
            let p = self.bool_expr(&inner, 1);
            p.map(|p| format!(" WHERE {p}"))
        } else {
            Sql::same("")
        };
        let columns = Self::columns_of(&other, class);
        let aggregate = if class == Class::Int && (columns.is_empty() || self.rng.chance(30)) {
            "count(*)".to_string()
        } else if columns.is_empty() {
            return self.literal(class);
        } else {
            let c = columns[self.rng.below(columns.len())];
            let f = *self.rng.pick(&["max", "min"]);
            format!("{f}({alias}.{})", c.name)
        };
        let name = other.name.clone();
        filter.map(|f| format!("(SELECT {aggregate} FROM {name} AS {alias}{f})"))
    }

    /// A WHERE clause: constant, key ranges, subqueries or any boolean
    /// expression.
    fn predicate(&mut self, scope: &Scope) -> Sql {
        self.predicate_part(scope)
    }

    /// A predicate that is a WHERE clause or a part of one.
    fn predicate_part(&mut self, scope: &Scope) -> Sql {
        let roll = self.rng.below(100);
        let key = scope.table.keyed;
        let alias = scope.alias;
        match roll {
            0..=9 => Sql::same(*self.rng.pick(&[
                "false",
                "1 = 0",
                "1 = 1",
                "NULL",
                "true",
                "NOT (1 = 1)",
            ])),
            10..=27 if key => {
                let hi = self.next_key.max(2);
                let (a, b) = {
                    let a = self.rng.range(0, hi);
                    (a, self.rng.range(a, hi + 2))
                };
                let text = scope.table.columns[0].ty == Ty::Varchar;
                let k = |n: i64| {
                    if text {
                        format!("'k{n:07}'")
                    } else {
                        n.to_string()
                    }
                };
                let (a, b, far, half) = (k(a), k(b), k(a + 1_000_000), k(b / 2));
                Sql::same(match self.rng.below(5) {
                    0 => format!("{alias}.id = {a}"),
                    1 => format!("{alias}.id IN ({a}, {b}, {far})"),
                    2 => format!("{alias}.id BETWEEN {a} AND {b}"),
                    3 => format!("({alias}.id > {a} OR {alias}.id < {half})"),
                    _ => format!("{alias}.id >= {a} AND {alias}.id < {b}"),
                })
            }
            28..=39 if scope.subqueries => self.in_subquery(scope),
            40..=51 if scope.subqueries => self.exists_subquery(scope),
            52..=59 => {
                let a = if scope.subqueries && self.rng.chance(40) {
                    // Every position of a filter: under NOT, IS [NOT] NULL
                    // and a comparison too.
                    let a = self.in_subquery(scope);
                    match self.rng.below(4) {
                        0 => a.map(|a| format!("NOT ({a})")),
                        1 => a.map(|a| format!("(({a}) IS NULL)")),
                        2 => a.map(|a| format!("(({a}) IS NOT NULL)")),
                        _ => a,
                    }
                } else {
                    self.predicate_part(scope)
                };
                let b = self.bool_expr(scope, 2);
                let op = *self.rng.pick(&["AND", "OR"]);
                a.zip(&b, |a, b| format!("({a}) {op} {b}"))
            }
            _ => self.bool_expr(scope, 3),
        }
    }

    /// `x [NOT] IN (SELECT q.y FROM other q WHERE …)`, where `x` is a
    /// column or an expression and the subquery may read the outer row.
    fn in_subquery(&mut self, scope: &Scope) -> Sql {
        let other = self.other_table();
        let class = self.comparable_class();
        let Some(column) = self.column_ref(class, scope) else {
            return self.bool_expr(scope, 2);
        };
        let outer = if self.rng.chance(30) {
            self.expr(class, scope, 1)
        } else {
            column
        };
        let candidates = Self::columns_of(&other, class);
        if candidates.is_empty() {
            return self.bool_expr(scope, 2);
        }
        let inner_column = candidates[self.rng.below(candidates.len())].name.clone();
        let correlated = self.rng.chance(40);
        let inner = Scope {
            alias: "q",
            table: &other,
            outer: correlated.then_some((scope.alias, scope.table)),
            subqueries: false,
        };
        let filter = self.bool_expr(&inner, 2);
        let not = if self.rng.chance(40) { "NOT " } else { "" };
        let name = other.name.clone();
        outer.zip(&filter, |o, f| {
            format!("{o} {not}IN (SELECT q.{inner_column} FROM {name} AS q WHERE {f})")
        })
    }

    /// `[NOT] EXISTS (SELECT 1 FROM other q WHERE q.y = t.x AND …)`.
    fn exists_subquery(&mut self, scope: &Scope) -> Sql {
        let other = self.other_table();
        let inner = Scope {
            alias: "q",
            table: &other,
            outer: Some((scope.alias, scope.table)),
            subqueries: false,
        };
        let filter = self.bool_expr(&inner, 2);
        let not = if self.rng.chance(30) { "NOT " } else { "" };
        let name = other.name.clone();
        filter.map(|f| format!("{not}EXISTS (SELECT 1 FROM {name} AS q WHERE {f})"))
    }

    // -- statements ------------------------------------------------------

    fn insert_values(&mut self, table: &TableModel) -> Statement {
        let mut columns: Vec<&Column> = table.columns[..table.key_len()].iter().collect();
        for c in table.value_columns() {
            if self.rng.chance(70) {
                columns.push(c);
            }
        }
        if columns.is_empty() {
            columns.push(&table.value_columns()[0]);
        }
        // Now and then rows at keys that may exist: widesql's INSERT is an
        // upsert of the non-NULL values, row after row, SQLite's `ON
        // CONFLICT DO UPDATE` with `coalesce` the same.
        let upsert = table.keyed && self.next_key > 1 && self.rng.chance(15);
        let rows = self.rng.range(1, 4);
        let text_key = table.keyed && table.columns[0].ty == Ty::Varchar;
        let key = |n: i64| {
            if text_key {
                format!("'k{n:07}'")
            } else {
                n.to_string()
            }
        };
        // Values that do not fit only in one-row INSERTs: DataFusion unifies
        // the types of a VALUES list's rows before the target's types apply.
        let allow_bad = rows == 1;
        let mut tuples = Vec::new();
        for _ in 0..rows {
            let mut values = Vec::new();
            for (i, c) in columns.iter().enumerate() {
                if upsert && i == 0 && self.rng.chance(70) {
                    // A key that may exist (or come earlier in the statement).
                    values.push(Sql::same(key(self.rng.range(1, self.next_key))));
                } else if table.composite && i == 1 {
                    values.push(Sql::same(*self.rng.pick(&["'a'", "'b'", "'c'"])));
                } else if table.keyed && i == 0 {
                    self.next_key += self.rng.range(1, 3);
                    values.push(Sql::same(if self.rng.chance(1) {
                        "NULL".to_string()
                    } else {
                        key(self.next_key)
                    }));
                } else if let (true, Some((lo, hi))) = (upsert, c.ty.int_range()) {
                    // A value a later row of the same key replaces is checked
                    // by widesql but never seen by SQLite's check of the
                    // table: upserts write integers that fit.
                    values.push(Sql::same(if self.rng.chance(15) {
                        "NULL".to_string()
                    } else {
                        self.rng.range(lo.max(-1000), hi.min(1000)).to_string()
                    }));
                } else {
                    values.push(self.value_literal(c.ty, allow_bad && !upsert));
                }
            }
            tuples.push(Sql::join(&values, ", ").map(|v| format!("({v})")));
        }
        let names = columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let name = &table.name;
        let mut sql =
            Sql::join(&tuples, ", ").map(|v| format!("INSERT INTO {name} ({names}) VALUES {v}"));
        if upsert {
            let key = &columns[0].name;
            let sets: Vec<String> = columns[table.key_len()..]
                .iter()
                .map(|c| upsert_set(name, &c.name, c.ty))
                .collect();
            // widesql counts every row it upserts, as SQLite counts an
            // update: a row of the key alone updates the key to itself.
            let action = if sets.is_empty() {
                format!("UPDATE SET {key} = excluded.{key}")
            } else {
                format!("UPDATE SET {}", sets.join(", "))
            };
            let conflict = if table.composite { "id, k" } else { "id" };
            sql.sqlite = format!("{} ON CONFLICT({conflict}) DO {action}", sql.sqlite);
        }
        Statement {
            sql,
            kind: Kind::Insert,
            effect: Effect::None,
        }
    }

    /// `INSERT INTO t (…) SELECT … FROM src WHERE …`; new keys are the
    /// source keys plus a fresh offset.
    fn insert_select(&mut self, table: &TableModel) -> Statement {
        let mut source = self.other_table();
        let text_key = table.keyed && table.columns[0].ty == Ty::Varchar;
        // An integer key is made from an integer key.
        let int_source = source.keyed && source.columns[0].ty != Ty::Varchar;
        if table.keyed && (!source.keyed || (!text_key && !int_source)) {
            source = table.clone();
        }
        // Now and then the rows of the table itself at their own keys: an
        // upsert of every row the filter selects.
        let upsert = table.keyed && self.rng.chance(20);
        if upsert || table.composite {
            source = table.clone();
        }
        let scope = Scope {
            alias: "src",
            table: &source,
            outer: None,
            subqueries: false,
        };
        let mut names = Vec::new();
        let mut values = Vec::new();
        if table.keyed {
            self.next_offset += 1_000_000;
            names.push("id".to_string());
            values.push(Sql::same(match (upsert, text_key) {
                (true, _) => "src.id".to_string(),
                (false, true) => format!("(CAST(src.id AS VARCHAR) || '.{}')", self.next_offset),
                (false, false) => format!("src.id + {}", self.next_offset),
            }));
            if table.composite {
                names.push("k".to_string());
                values.push(Sql::same("src.k"));
            }
        }
        let mut chosen: Vec<Column> = table
            .value_columns()
            .iter()
            .filter(|_| self.rng.chance(60))
            .cloned()
            .collect();
        if chosen.is_empty() {
            chosen.push(table.value_columns()[0].clone());
        }
        for c in chosen {
            names.push(c.name.clone());
            values.push(self.row_expr(c.ty.class(), &scope));
        }
        let filter = if self.rng.chance(80) {
            let subqueries_scope = Scope {
                subqueries: true,
                ..scope
            };
            self.predicate(&subqueries_scope)
                .map(|p| format!(" WHERE {p}"))
        } else {
            Sql::same("")
        };
        // DataFusion wants distinct names in a projection.
        let values: Vec<Sql> = values
            .iter()
            .enumerate()
            .map(|(i, v)| v.map(|v| format!("{v} AS v{i}")))
            .collect();
        let list = Sql::join(&values, ", ");
        let (name, src) = (&table.name, &source.name);
        let mut sql = list.zip(&filter, |l, f| {
            format!(
                "INSERT INTO {name} ({}) SELECT {l} FROM {src} AS src{f}",
                names.join(", ")
            )
        });
        if upsert {
            let sets: Vec<String> = names[table.key_len()..]
                .iter()
                .map(|c| {
                    let ty = table.columns.iter().find(|t| &t.name == c).map(|t| t.ty);
                    upsert_set(name, c, ty.unwrap_or(Ty::BigInt))
                })
                .collect();
            // (SQLite reads `ON` after a FROM without WHERE as a join's.)
            let filler = if filter.sqlite.is_empty() {
                " WHERE true"
            } else {
                ""
            };
            let conflict = if table.composite { "id, k" } else { "id" };
            sql.sqlite = format!(
                "{}{filler} ON CONFLICT({conflict}) DO UPDATE SET {}",
                sql.sqlite,
                sets.join(", ")
            );
        }
        Statement {
            sql,
            kind: Kind::InsertSelect,
            effect: Effect::None,
        }
    }

    /// An expression that reads the source row. DataFusion folds constant
    /// expressions while planning, so a constant that does not fit the
    /// target column fails an INSERT … SELECT even when no row matches.
    fn row_expr(&mut self, class: Class, scope: &Scope) -> Sql {
        for _ in 0..8 {
            let value = self.expr(class, scope, 2);
            if value.widesql.contains(&format!("{}.", scope.alias)) {
                return value;
            }
        }
        match class {
            Class::Map => Sql::same("NULL"),
            _ => typed_null(class),
        }
    }

    fn update(&mut self, table: &TableModel) -> Statement {
        let alias = table.name.as_str();
        // Subqueries in SET read other tables only: engines differ on
        // whether a SET subquery over the target sees earlier rows' updates.
        let others: Vec<TableModel> = self
            .model
            .tables
            .iter()
            .filter(|t| t.name != table.name)
            .cloned()
            .collect();
        let value_columns = table.value_columns().to_vec();
        let mut assignments = Vec::new();
        let mut targets: Vec<String> = Vec::new();
        // A swap of two columns of one class must read the old values.
        if value_columns.len() >= 2 && self.rng.chance(15) {
            let a = &value_columns[self.rng.below(value_columns.len())];
            let same: Vec<&Column> = value_columns
                .iter()
                .filter(|c| c.name != a.name && c.ty.class() == a.ty.class())
                .collect();
            if !same.is_empty() {
                let b = same[self.rng.below(same.len())];
                assignments.push(Sql::same(format!("{} = {alias}.{}", a.name, b.name)));
                assignments.push(Sql::same(format!("{} = {alias}.{}", b.name, a.name)));
                targets.push(a.name.clone());
                targets.push(b.name.clone());
            }
        }
        for _ in 0..self.rng.range(1, 3) {
            let c = value_columns[self.rng.below(value_columns.len())].clone();
            if targets.contains(&c.name) {
                continue;
            }
            targets.push(c.name.clone());
            let value = match self.rng.below(100) {
                // Overflow: grow an integer column past its width.
                0..=9 if c.ty.int_range().is_some() => {
                    let factor = *self.rng.pick(&[1000, 100000, -1]);
                    Sql::same(format!("CAST({alias}.{} AS BIGINT) * {factor}", c.name))
                }
                10..=29 => self.value_literal(c.ty, true),
                _ => {
                    let scope = Scope {
                        alias,
                        table,
                        outer: None,
                        subqueries: false,
                    };
                    // (No maximum of maps.)
                    if !others.is_empty() && c.ty != Ty::Map && self.rng.chance(15) {
                        let other = others[self.rng.below(others.len())].clone();
                        self.scalar_subquery(c.ty.class(), Some(other))
                    } else {
                        self.expr(c.ty.class(), &scope, 3)
                    }
                }
            };
            assignments.push(value.map(|v| format!("{} = {v}", c.name)));
        }
        let scope = Scope {
            alias,
            table,
            outer: None,
            subqueries: true,
        };
        let filter = if self.rng.chance(90) {
            self.predicate(&scope).map(|p| format!(" WHERE {p}"))
        } else {
            Sql::same("")
        };
        let set = Sql::join(&assignments, ", ");
        let sql = set.zip(&filter, |s, f| format!("UPDATE {alias} SET {s}{f}"));
        Statement {
            sql,
            kind: Kind::Update,
            effect: Effect::None,
        }
    }

    fn delete(&mut self, table: &TableModel) -> Statement {
        let alias = table.name.as_str();
        let scope = Scope {
            alias,
            table,
            outer: None,
            subqueries: true,
        };
        let filter = if self.rng.chance(95) {
            self.predicate(&scope).map(|p| format!(" WHERE {p}"))
        } else {
            Sql::same("")
        };
        Statement {
            sql: filter.map(|f| format!("DELETE FROM {alias}{f}")),
            kind: Kind::Delete,
            effect: Effect::None,
        }
    }

    fn truncate(&mut self, table: &TableModel) -> Statement {
        Statement {
            sql: Sql {
                widesql: format!("TRUNCATE TABLE {}", table.name),
                sqlite: format!("DELETE FROM {}", table.name),
            },
            kind: Kind::Truncate,
            effect: Effect::None,
        }
    }

    fn add_column(&mut self, table: &TableModel) -> Statement {
        let column = Column {
            name: self.name("c"),
            ty: self.random_type(),
            not_null: false,
        };
        Statement {
            sql: Sql {
                widesql: format!(
                    "ALTER TABLE {} ADD COLUMN {} {}",
                    table.name,
                    column.name,
                    column.ty.widesql()
                ),
                sqlite: format!(
                    "ALTER TABLE {} ADD COLUMN {} {}",
                    table.name,
                    column.name,
                    column.ty.sqlite()
                ),
            },
            kind: Kind::Ddl,
            effect: Effect::AddColumn(table.name.clone(), column),
        }
    }

    fn drop_column(&mut self, table: &TableModel) -> Statement {
        let columns = table.value_columns();
        if columns.len() < 2 {
            return self.add_column(table);
        }
        let column = columns[self.rng.below(columns.len())].name.clone();
        Statement {
            sql: Sql::same(format!("ALTER TABLE {} DROP COLUMN {column}", table.name)),
            kind: Kind::Ddl,
            effect: Effect::DropColumn(table.name.clone(), column),
        }
    }

    /// `CREATE TABLE x AS SELECT <columns> FROM src WHERE …`: a table
    /// without a primary key whose columns keep the source's types; with
    /// `replace`, `CREATE OR REPLACE TABLE replace AS …` (SQLite has no OR
    /// REPLACE: it builds a new table, drops the old one and renames).
    fn create_table_as(&mut self, source: &TableModel, replace: Option<&str>) -> Statement {
        let name = match replace {
            Some(name) => name.to_string(),
            None => self.name("x"),
        };
        let mut columns: Vec<Column> = source
            .columns
            .iter()
            .filter(|_| self.rng.chance(60))
            .cloned()
            .collect();
        if columns.is_empty() {
            columns.push(source.columns[self.rng.below(source.columns.len())].clone());
        }
        let scope = Scope {
            alias: "src",
            table: source,
            outer: None,
            subqueries: true,
        };
        let filter = if self.rng.chance(70) {
            self.predicate(&scope).map(|p| format!(" WHERE {p}"))
        } else {
            Sql::same("")
        };
        let list = columns
            .iter()
            .map(|c| format!("src.{}", c.name))
            .collect::<Vec<_>>()
            .join(", ");
        let src = &source.name;
        let table = TableModel {
            name: name.clone(),
            keyed: false,
            composite: false,
            columns,
        };
        match replace {
            None => Statement {
                sql: filter
                    .map(|f| format!("CREATE TABLE {name} AS SELECT {list} FROM {src} AS src{f}")),
                kind: Kind::Ddl,
                effect: Effect::Create(table),
            },
            Some(_) => Statement {
                sql: Sql {
                    widesql: format!(
                        "CREATE OR REPLACE TABLE {name} AS SELECT {list} FROM {src} AS src{}",
                        filter.widesql
                    ),
                    sqlite: format!(
                        "CREATE TABLE {name}__new AS SELECT {list} FROM {src} AS src{}; \
                         DROP TABLE {name}; ALTER TABLE {name}__new RENAME TO {name}",
                        filter.sqlite
                    ),
                },
                kind: Kind::Ddl,
                effect: Effect::Replace(table),
            },
        }
    }
}

/// SQLite's `SET` of column `c` of `table` for a row an INSERT upserts, as
/// widesql's INSERT writes it: a NULL keeps the stored value, and a map's
/// entries are added to the stored ones.
fn upsert_set(table: &str, c: &str, ty: Ty) -> String {
    match ty {
        Ty::Map => format!(
            "{c} = CASE WHEN excluded.{c} IS NULL THEN {table}.{c} \
             WHEN {table}.{c} IS NULL THEN excluded.{c} \
             ELSE json_patch({table}.{c}, excluded.{c}) END"
        ),
        _ => format!("{c} = coalesce(excluded.{c}, {table}.{c})"),
    }
}

/// A NULL of `class`: DataFusion cannot type an untyped NULL everywhere
/// (`NULL || NULL`).
fn typed_null(class: Class) -> Sql {
    let ty = match class {
        Class::Int => "BIGINT",
        Class::Float => "DOUBLE",
        Class::Text => "VARCHAR",
        Class::Bool => "BOOLEAN",
        Class::Date => "DATE",
        Class::Timestamp => "TIMESTAMP",
        Class::Decimal => "DECIMAL(10, 2)",
        Class::Map => "MAP(VARCHAR, BIGINT)",
    };
    Sql {
        widesql: format!("CAST(NULL AS {ty})"),
        sqlite: "NULL".into(),
    }
}

// ---------------------------------------------------------------------------
// Values and tables, normalised
// ---------------------------------------------------------------------------

/// A cell as both engines are compared: integers (booleans are 0/1), floats,
/// text (dates are ISO text), NULL.
#[derive(Debug, Clone)]
enum Value {
    Null,
    Int(i64),
    Float(f64),
    Text(String),
}

impl Value {
    fn rank(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Int(_) | Value::Float(_) => 1,
            Value::Text(_) => 2,
        }
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// A total order for sorting rows the same way on both sides.
    fn order(&self, other: &Value) -> Ordering {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => a.cmp(b),
            (Value::Text(a), Value::Text(b)) => a.cmp(b),
            _ => match (self.as_f64(), other.as_f64()) {
                (Some(a), Some(b)) => a.total_cmp(&b),
                _ => self.rank().cmp(&other.rank()),
            },
        }
    }

    /// Equality, with a relative tolerance for floats (looser for REAL,
    /// which widesql stores as f32 and SQLite as f64).
    fn matches(&self, other: &Value, single_precision: bool) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Text(a), Value::Text(b)) => a == b,
            _ => match (self.as_f64(), other.as_f64()) {
                (Some(a), Some(b)) => {
                    let tolerance = if single_precision { 1e-6 } else { 1e-9 };
                    (a - b).abs() <= tolerance * a.abs().max(b.abs()).max(1.0)
                }
                _ => false,
            },
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Null => write!(f, "NULL"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x:?}"),
            Value::Text(s) => write!(f, "'{s}'"),
        }
    }
}

/// A table's contents, rows sorted.
#[derive(Debug, Clone, Default)]
struct TableData {
    columns: Vec<String>,
    /// Per column: whether widesql stores it as f32 (REAL).
    single_precision: Vec<bool>,
    rows: Vec<Vec<Value>>,
}

impl TableData {
    fn sort(&mut self) {
        self.rows.sort_by(|a, b| {
            a.iter()
                .zip(b)
                .map(|(x, y)| x.order(y))
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        });
    }

    fn render(&self) -> String {
        let mut out = format!("  ({})\n", self.columns.join(", "));
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(|v| v.to_string()).collect();
            let _ = writeln!(out, "  {}", cells.join(" | "));
        }
        out
    }
}

/// What differs between two tables, or None.
fn compare_tables(widesql: &TableData, sqlite: &TableData) -> Option<String> {
    if widesql.columns != sqlite.columns {
        return Some(format!(
            "columns differ: widesql {:?}, sqlite {:?}",
            widesql.columns, sqlite.columns
        ));
    }
    if widesql.rows.len() != sqlite.rows.len() {
        return Some(format!(
            "row counts differ: widesql {}, sqlite {}",
            widesql.rows.len(),
            sqlite.rows.len()
        ));
    }
    for (i, (w, s)) in widesql.rows.iter().zip(&sqlite.rows).enumerate() {
        for (c, (a, b)) in w.iter().zip(s).enumerate() {
            if !a.matches(b, widesql.single_precision[c]) {
                return Some(format!(
                    "row {i} column {}: widesql {a}, sqlite {b}",
                    widesql.columns[c]
                ));
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------
// Executors
// ---------------------------------------------------------------------------

/// Runs after each statement of a [`Widesql`] (such as placing a
/// cluster's tablets on its workers).
pub type AfterStatement = Box<dyn Fn() -> Result<(), String>>;

/// widesql driven through a SQL session: in a temporary directory of its
/// own, or a database someone else made ([`Widesql::over`]).
pub struct Widesql {
    _keep: Box<dyn std::any::Any>,
    session: Session,
    runtime: std::sync::Arc<tokio::runtime::Runtime>,
    after: Option<AfterStatement>,
}

/// Opens the twin of a seed run in `mode` ([`run`]).
pub type OpenTwin = dyn Fn(Mode) -> Result<Widesql, String>;

impl Widesql {
    fn open(mode: Mode) -> Result<Widesql, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let db =
            Db::open_with(dir.path().join("db"), Self::options(mode)).map_err(|e| e.to_string())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        Self::over(&db, std::sync::Arc::new(runtime), Box::new(dir), None)
    }

    /// The options of a database for a seed run in `mode`.
    pub fn options(mode: Mode) -> DbOptions {
        let options = DbOptions::new().with_temporary(true);
        if mode.small_batches {
            options.with_statement_batch_rows(2)
        } else {
            options
        }
    }

    /// A session of `db`, run on `runtime`; `keep` lives as long as it,
    /// and `after` runs after each statement.
    pub fn over(
        db: &Db,
        runtime: std::sync::Arc<tokio::runtime::Runtime>,
        keep: Box<dyn std::any::Any>,
        after: Option<AfterStatement>,
    ) -> Result<Widesql, String> {
        let session = db.session();
        if env_flag_off("WIDESQL_DIFF_PLAN_CACHE") {
            runtime
                .block_on(session.run("SET widesql.plan_cache = off"))
                .map_err(|e| e.to_string())?;
        }
        Ok(Widesql {
            _keep: keep,
            session,
            runtime,
            after,
        })
    }

    /// Runs what comes after each statement; an error is the tester's.
    fn after_statement(&self) -> Result<(), String> {
        match &self.after {
            Some(after) => after().map_err(|e| format!("after the statement: {e}")),
            None => Ok(()),
        }
    }

    /// Runs one statement; returns the affected-row count when there is one.
    fn execute(&self, sql: &str) -> Result<Option<u64>, String> {
        let outputs = self
            .runtime
            .block_on(self.session.run(sql))
            .map_err(|e| e.to_string())?;
        let count = outputs
            .last()
            .and_then(|o| o.batches.first())
            .filter(|b| b.num_columns() == 1 && b.num_rows() == 1)
            .and_then(|b| cast(b.column(0), &DataType::Int64).ok())
            .and_then(|a| {
                a.as_any()
                    .downcast_ref::<Int64Array>()
                    .map(|a| a.value(0) as u64)
            });
        Ok(count)
    }

    fn table(&self, name: &str) -> Result<TableData, String> {
        let outputs = self
            .runtime
            .block_on(self.session.run(&format!("SELECT * FROM {name}")))
            .map_err(|e| e.to_string())?;
        let output = outputs.last().ok_or("no result")?;
        table_data(&output.schema, &output.batches)
    }

    /// The result of a query as sorted rows.
    fn query(&self, sql: &str) -> Result<TableData, String> {
        let outputs = self
            .runtime
            .block_on(self.session.run(sql))
            .map_err(|e| e.to_string())?;
        let output = outputs.last().ok_or("no result")?;
        table_data(&output.schema, &output.batches)
    }

    /// The same query on plain in-memory DataFusion, over copies of
    /// widesql's tables: scans, key-range pushdown and locality groups must
    /// not change a query's answer.
    fn query_in_memory(&self, sql: &str, tables: &[String]) -> Result<TableData, String> {
        self.runtime.block_on(async {
            let ctx = datafusion::prelude::SessionContext::new();
            for name in tables {
                let frame = self
                    .session
                    .sql(&format!("SELECT * FROM {name}"))
                    .await
                    .map_err(|e| e.to_string())?;
                let schema = std::sync::Arc::new(frame.schema().as_arrow().clone());
                let batches = frame.collect().await.map_err(|e| e.to_string())?;
                let table = datafusion::datasource::MemTable::try_new(schema, vec![batches])
                    .map_err(|e| e.to_string())?;
                ctx.register_table(name.as_str(), std::sync::Arc::new(table))
                    .map_err(|e| e.to_string())?;
            }
            let frame = ctx.sql(sql).await.map_err(|e| e.to_string())?;
            let schema = std::sync::Arc::new(frame.schema().as_arrow().clone());
            let batches = frame.collect().await.map_err(|e| e.to_string())?;
            table_data(&schema, &batches)
        })
    }
    fn table_names(&self) -> Result<Vec<String>, String> {
        let outputs = self
            .runtime
            .block_on(self.session.run(
                "SELECT table_name FROM information_schema.tables \
                 WHERE table_catalog = 'default' AND table_schema = 'public' ORDER BY table_name",
            ))
            .map_err(|e| e.to_string())?;
        let mut names = Vec::new();
        for batch in outputs.last().map(|o| o.batches.as_slice()).unwrap_or(&[]) {
            for value in normalise_array(batch.column(0))? {
                if let Value::Text(name) = value {
                    names.push(name);
                }
            }
        }
        Ok(names)
    }
}

/// Batches as sorted rows of [`Value`]s.
fn table_data(
    schema: &datafusion::arrow::datatypes::SchemaRef,
    batches: &[datafusion::arrow::record_batch::RecordBatch],
) -> Result<TableData, String> {
    let mut data = TableData {
        columns: schema
            .fields()
            .iter()
            .map(|f| f.name().to_lowercase())
            .collect(),
        single_precision: schema
            .fields()
            .iter()
            .map(|f| f.data_type() == &DataType::Float32)
            .collect(),
        rows: Vec::new(),
    };
    for batch in batches {
        let columns = batch
            .columns()
            .iter()
            .map(normalise_array)
            .collect::<Result<Vec<_>, _>>()?;
        for row in 0..batch.num_rows() {
            data.rows
                .push(columns.iter().map(|c| c[row].clone()).collect());
        }
    }
    data.sort();
    Ok(data)
}

/// An Arrow column as [`Value`]s: integers and booleans as i64, floats as
/// f64, everything else (strings, dates) as its text.
fn normalise_array(array: &datafusion::arrow::array::ArrayRef) -> Result<Vec<Value>, String> {
    let err = |e: datafusion::arrow::error::ArrowError| e.to_string();
    let values = match array.data_type() {
        DataType::Map(..) => {
            use datafusion::arrow::array::AsArray;
            let maps = array.as_map();
            (0..maps.len())
                .map(|i| {
                    if maps.is_null(i) {
                        return Ok(Value::Null);
                    }
                    let entries = maps.value(i);
                    let keys = normalise_array(entries.column(0))?;
                    let values = normalise_array(entries.column(1))?;
                    let mut object = serde_json::Map::new();
                    for (k, v) in keys.iter().zip(&values) {
                        let key = match k {
                            Value::Text(t) => t.clone(),
                            other => other.to_string(),
                        };
                        match v {
                            Value::Int(n) => object.insert(key, (*n).into()),
                            Value::Null => None,
                            other => object.insert(key, other.to_string().into()),
                        };
                    }
                    Ok(canonical_json(serde_json::Value::Object(object)))
                })
                .collect::<Result<Vec<_>, String>>()?
        }
        DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32 => {
            let a = cast(array, &DataType::Int64).map_err(err)?;
            let a = a.as_any().downcast_ref::<Int64Array>().ok_or("not i64")?;
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else {
                        Value::Int(a.value(i))
                    }
                })
                .collect()
        }
        DataType::Float32 | DataType::Float64 | DataType::Decimal128(..) => {
            let a = cast(array, &DataType::Float64).map_err(err)?;
            let a = a.as_any().downcast_ref::<Float64Array>().ok_or("not f64")?;
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else {
                        // SQLite keeps no negative zero: -0.0 + 0.0 is 0.0.
                        Value::Float(a.value(i) + 0.0)
                    }
                })
                .collect()
        }
        _ => {
            let a = cast(array, &DataType::Utf8).map_err(err)?;
            let a = a.as_any().downcast_ref::<StringArray>().ok_or("not utf8")?;
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else if matches!(array.data_type(), DataType::Timestamp(..)) {
                        // As SQLite holds it: `2024-01-01 10:00:00`.
                        Value::Text(a.value(i).replacen('T', " ", 1))
                    } else {
                        Value::Text(a.value(i).to_string())
                    }
                })
                .collect()
        }
    };
    Ok(values)
}

/// A map as both engines' rows are compared: its JSON object with the keys
/// in order, NULL when it has no entry.
fn canonical_json(value: serde_json::Value) -> Value {
    match value {
        serde_json::Value::Object(object) if object.is_empty() => Value::Null,
        serde_json::Value::Object(object) => {
            let mut entries: Vec<(String, serde_json::Value)> = object.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let inner: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}:{v}", serde_json::Value::from(k.as_str())))
                .collect();
            Value::Text(format!("{{{}}}", inner.join(",")))
        }
        other => Value::Text(other.to_string()),
    }
}

/// SQLite in memory; every statement runs in its own transaction.
struct Sqlite {
    conn: rusqlite::Connection,
}

impl Sqlite {
    fn open() -> Result<Sqlite, String> {
        let conn = rusqlite::Connection::open_in_memory().map_err(|e| e.to_string())?;
        Ok(Sqlite { conn })
    }

    fn batch(&self, sql: &str) -> Result<(), String> {
        self.conn.execute_batch(sql).map_err(|e| e.to_string())
    }

    /// Runs a statement, or a script of several (affected rows: 0).
    fn execute(&self, sql: &str) -> Result<u64, String> {
        if sql.contains("; ") {
            return self.batch(sql).map(|()| 0);
        }
        self.conn
            .execute(sql, [])
            .map(|n| n as u64)
            .map_err(|e| e.to_string())
    }

    fn table(&self, name: &str) -> Result<TableData, String> {
        self.rows(&format!("SELECT * FROM {name}"))
    }

    /// The rows of a query, sorted.
    fn rows(&self, sql: &str) -> Result<TableData, String> {
        let err = |e: rusqlite::Error| e.to_string();
        let mut statement = self.conn.prepare(sql).map_err(err)?;
        let columns: Vec<String> = statement
            .column_names()
            .iter()
            .map(|c| c.to_lowercase())
            .collect();
        let n = columns.len();
        let mut rows = statement.query([]).map_err(err)?;
        let mut data = TableData {
            single_precision: vec![false; n],
            columns,
            rows: Vec::new(),
        };
        while let Some(row) = rows.next().map_err(err)? {
            let mut values = Vec::with_capacity(n);
            for i in 0..n {
                use rusqlite::types::ValueRef;
                values.push(match row.get_ref(i).map_err(err)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(v) => Value::Int(v),
                    ValueRef::Real(v) => Value::Float(v),
                    ValueRef::Text(t) => {
                        let text = String::from_utf8_lossy(t).into_owned();
                        // A map, as JSON: its keys in order.
                        match serde_json::from_str::<serde_json::Value>(&text) {
                            Ok(object @ serde_json::Value::Object(_)) => canonical_json(object),
                            _ => Value::Text(text),
                        }
                    }
                    ValueRef::Blob(b) => Value::Text(format!("blob {b:?}")),
                });
            }
            data.rows.push(values);
        }
        data.sort();
        Ok(data)
    }

    fn table_names(&self) -> Result<Vec<String>, String> {
        let err = |e: rusqlite::Error| e.to_string();
        let mut statement = self
            .conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .map_err(err)?;
        let names = statement
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        Ok(names)
    }
}

// ---------------------------------------------------------------------------
// Expectations
// ---------------------------------------------------------------------------

/// What widesql must do with a statement, judged from SQLite's result.
#[derive(Debug)]
enum Verdict {
    /// Succeed, with this affected-row count for DML.
    Succeed(u64),
    /// Fail and change nothing (why).
    Fail(String),
    /// Change nothing; failing is allowed too (why).
    NoChange(String),
    /// Not comparable: the engines differ here by design, or a known bug
    /// is being skipped (why). Not run on widesql.
    Skip(String),
}

/// `YYYY-MM-DD HH:MM:SS` of a valid date and time.
fn is_valid_timestamp(text: &str) -> bool {
    let Some((date, time)) = text.split_once(' ') else {
        return false;
    };
    let parts: Vec<u32> = time.split(':').filter_map(|p| p.parse().ok()).collect();
    is_valid_date(date)
        && time.len() == 8
        && matches!(parts.as_slice(), [h, m, s] if *h < 24 && *m < 60 && *s < 60)
}

fn is_valid_date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return false;
    };
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return false;
    }
    let (Ok(y), Ok(m), Ok(d)) = (y.parse::<i64>(), m.parse::<u32>(), d.parse::<u32>()) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// Whether a value SQLite stored fits the declared type as widesql stores
/// it: Ok(()) when it does, Err(Fail) when widesql must refuse it, Err(Skip)
/// when the engines differ by design.
fn check_value(column: &Column, value: &Value) -> Result<(), Verdict> {
    let fail = |why: String| Err(Verdict::Fail(why));
    let ty = column.ty;
    match (ty.class(), value) {
        (_, Value::Null) if column.not_null => fail("NULL in a NOT NULL column".into()),
        (_, Value::Null) => Ok(()),
        (Class::Int, Value::Int(v)) => {
            let (lo, hi) = ty.int_range().unwrap_or((i64::MIN, i64::MAX));
            if ty == Ty::BigInt && v.unsigned_abs() > BIGINT_SAFE as u64 {
                return Err(Verdict::Skip(format!("BIGINT {v} near the i64 limits")));
            }
            if *v < lo || *v > hi {
                return fail(format!("{v} does not fit {}", ty.widesql()));
            }
            Ok(())
        }
        (Class::Int, Value::Float(f)) if f.abs() >= BIGINT_SAFE as f64 => Err(Verdict::Skip(
            format!("integer arithmetic overflowed i64 in SQLite ({f})"),
        )),
        (Class::Bool, Value::Int(0 | 1)) => Ok(()),
        (Class::Float, Value::Int(_)) => Ok(()),
        (Class::Float, Value::Float(f)) => {
            let limit = if ty == Ty::Real { 1e30 } else { 1e300 };
            if f.is_finite() && f.abs() < limit {
                Ok(())
            } else {
                Err(Verdict::Skip(format!("{f} near the float limits")))
            }
        }
        (Class::Text, Value::Text(t)) if t.len() > 1000 => {
            Err(Verdict::Skip("text longer than 1000".into()))
        }
        (Class::Text, Value::Text(_)) => Ok(()),
        (Class::Date, Value::Text(t)) if is_valid_date(t) => Ok(()),
        (Class::Timestamp, Value::Text(t)) if is_valid_timestamp(t) => Ok(()),
        (Class::Map, Value::Text(t)) if t.starts_with('{') => Ok(()),
        (Class::Decimal, Value::Int(v)) if v.unsigned_abs() < 100_000_000 => Ok(()),
        (Class::Decimal, Value::Float(f)) if f.abs() < 1e8 && (f * 100.0).fract() == 0.0 => Ok(()),
        (_, v) => fail(format!("{v} is not a {}", ty.widesql())),
    }
}

/// Checks every stored value against the model's declared types.
fn check_tables(model: &Model, sqlite: &Sqlite) -> Result<(), Verdict> {
    for table in &model.tables {
        let data = sqlite
            .table(&table.name)
            .map_err(|e| Verdict::Skip(format!("cannot read {}: {e}", table.name)))?;
        for row in &data.rows {
            for (name, value) in data.columns.iter().zip(row) {
                if let Some(column) = table.columns.iter().find(|c| &c.name == name) {
                    check_value(column, value)
                        .map_err(|v| annotate(v, &format!("{}.{name}", table.name)))?;
                }
            }
        }
    }
    Ok(())
}

fn annotate(verdict: Verdict, place: &str) -> Verdict {
    match verdict {
        Verdict::Fail(why) => Verdict::Fail(format!("{place}: {why}")),
        Verdict::Skip(why) => Verdict::Skip(format!("{place}: {why}")),
        other => other,
    }
}

/// Runs `statement` on SQLite in a transaction and decides what widesql
/// must do; commits only what widesql must also do.
fn judge(statement: &Statement, model: &Model, sqlite: &Sqlite) -> Result<Verdict, String> {
    sqlite.batch("BEGIN")?;
    let count = match sqlite.execute(&statement.sql.sqlite) {
        Ok(count) => count,
        Err(e) => {
            sqlite.batch("ROLLBACK")?;
            // widesql's INSERT of an existing key is an upsert, by design.
            if e.contains("UNIQUE constraint failed") {
                return Ok(Verdict::Skip(format!("existing key: {e}")));
            }
            return Ok(Verdict::Fail(format!("sqlite: {e}")));
        }
    };
    let mut after = model.clone();
    after.apply(&statement.effect);
    let verdict = match check_tables(&after, sqlite) {
        // DataFusion folds constant expressions while planning, so an
        // INSERT … SELECT of a constant that does not fit fails even when
        // no row matches.
        Ok(()) if statement.kind == Kind::InsertSelect && count == 0 => {
            Verdict::NoChange("INSERT … SELECT of no rows".into())
        }
        Ok(()) => Verdict::Succeed(count),
        Err(v) => v,
    };
    sqlite.batch(match verdict {
        Verdict::Succeed(_) => "COMMIT",
        _ => "ROLLBACK",
    })?;
    Ok(verdict)
}

// ---------------------------------------------------------------------------
// Runner
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
struct SeedReport {
    /// Statements run on both engines.
    executed: usize,
    /// Statements widesql had to refuse.
    expected_errors: usize,
    /// Statements not comparable (rolled back, not run on widesql).
    skipped: usize,
    /// Queries compared with SQLite.
    queries: usize,
    divergence: Option<String>,
}

/// The script so far, each statement annotated with what happened.
fn render_script(seed: u64, log: &[(Statement, String)]) -> String {
    let mut out = format!("-- seed {seed}\n");
    for (statement, note) in log {
        let _ = writeln!(out, "{};{note}", statement.sql.widesql);
        if statement.sql.sqlite != statement.sql.widesql {
            let _ = writeln!(out, "--   sqlite: {};", statement.sql.sqlite);
        }
    }
    out
}

/// Compares every table of both engines; the difference, if any.
fn compare_all(
    model: &Model,
    widesql: &Widesql,
    sqlite: &Sqlite,
) -> Result<Option<String>, String> {
    let wide_names = widesql.table_names()?;
    let lite_names = sqlite.table_names()?;
    if wide_names != lite_names {
        return Ok(Some(format!(
            "tables differ: widesql {wide_names:?}, sqlite {lite_names:?}"
        )));
    }
    for table in &model.tables {
        let lite = sqlite.table(&table.name)?;
        let wide = match widesql.table(&table.name) {
            Ok(wide) => wide,
            Err(e) => {
                return Ok(Some(format!(
                    "table {}: widesql cannot read it: {e}\nsqlite:\n{}",
                    table.name,
                    lite.render()
                )))
            }
        };
        if let Some(difference) = compare_tables(&wide, &lite) {
            return Ok(Some(format!(
                "table {}: {difference}\nwidesql:\n{}sqlite:\n{}",
                table.name,
                wide.render(),
                lite.render()
            )));
        }
    }
    Ok(None)
}

/// Compares every table of widesql and its twin; the difference, if any.
fn compare_twin(
    model: &Model,
    widesql: &Widesql,
    twin: &Widesql,
) -> Result<Option<String>, String> {
    let (names, twin_names) = (widesql.table_names()?, twin.table_names()?);
    if names != twin_names {
        return Ok(Some(format!(
            "tables differ: twin {twin_names:?}, widesql {names:?}"
        )));
    }
    for table in &model.tables {
        let wide = widesql.table(&table.name)?;
        let other = match twin.table(&table.name) {
            Ok(other) => other,
            Err(e) => {
                return Ok(Some(format!(
                    "table {}: the twin cannot read it: {e}",
                    table.name
                )))
            }
        };
        if let Some(difference) = compare_tables(&other, &wide) {
            return Ok(Some(format!(
                "table {}: {difference}\ntwin:\n{}widesql:\n{}",
                table.name,
                other.render(),
                wide.render()
            )));
        }
    }
    Ok(None)
}

/// How a seed runs widesql, beside the defaults.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    /// Every 4th seed applies statements in atomic batches of 2 rows, so
    /// that most statements span several batches (written as they stream).
    /// A statement SQLite says must fail is not run then: past its first
    /// batch it stops with `Error::PartlyApplied`, which SQLite, all or
    /// nothing, has no model of.
    small_batches: bool,
    /// Every 5th seed writes at explicit timestamps
    /// (`SET widesql.write_timestamp`), one later than the last before each
    /// statement, as a backfill in order does.
    backfill: bool,
}

impl Mode {
    fn of(seed: u64) -> Mode {
        Mode {
            small_batches: seed % 4 == 3,
            backfill: seed % 5 == 4,
        }
    }
}

/// The first explicit write timestamp of a backfill seed (2100-01-01, in
/// microseconds): later than every server timestamp of the run.
const BACKFILL_FROM: i64 = 4_102_444_800_000_000;

fn run_seed(
    seed: u64,
    statements: usize,
    open_twin: Option<&OpenTwin>,
) -> Result<SeedReport, String> {
    let mode = Mode::of(seed);
    let widesql = Widesql::open(mode)?;
    let twin = open_twin.map(|open| open(mode)).transpose()?;
    let sqlite = Sqlite::open()?;
    let mut generator = Generator::new(seed);
    let mut query_rng = Rng::new(seed ^ 0x5EED_0F9E_1234);
    let mut report = SeedReport::default();
    let mut log: Vec<(Statement, String)> = Vec::new();
    for index in 0..statements {
        let statement = generator.statement();
        let verdict = judge(&statement, &generator.model, &sqlite)?;
        let expected_ok = match &verdict {
            Verdict::Skip(_) => {
                report.skipped += 1;
                continue;
            }
            Verdict::Fail(_) if mode.small_batches => {
                report.skipped += 1;
                continue;
            }
            Verdict::Succeed(_) | Verdict::NoChange(_) => true,
            Verdict::Fail(_) => false,
        };
        report.executed += 1;
        if mode.backfill {
            let at = BACKFILL_FROM + index as i64 * 1000;
            widesql.execute(&format!("SET widesql.write_timestamp = {at}"))?;
            if let Some(twin) = &twin {
                twin.execute(&format!("SET widesql.write_timestamp = {at}"))?;
            }
        }
        let outcome = widesql.execute(&statement.sql.widesql);
        let twin_outcome = match &twin {
            Some(twin) => {
                let outcome = twin.execute(&statement.sql.widesql);
                twin.after_statement()?;
                Some(outcome)
            }
            None => None,
        };
        let note = match (&verdict, &outcome) {
            (Verdict::Fail(why), _) => format!(" -- must fail: {why}"),
            (Verdict::NoChange(why), Err(e)) => format!(" -- failed, allowed ({why}): {e}"),
            _ => String::new(),
        };
        log.push((statement.clone(), note));
        let problem = match (&verdict, &outcome) {
            (Verdict::Succeed(_), Err(e)) => Some(format!("widesql failed: {e}")),
            (Verdict::Fail(why), Ok(_)) => {
                Some(format!("widesql succeeded, but must fail ({why})"))
            }
            (Verdict::Succeed(expected), Ok(Some(actual)))
                if matches!(
                    statement.kind,
                    Kind::Insert | Kind::InsertSelect | Kind::Update | Kind::Delete
                ) && expected != actual =>
            {
                Some(format!(
                    "affected rows: widesql {actual}, sqlite {expected}"
                ))
            }
            _ => None,
        };
        if expected_ok {
            generator.model.apply(&statement.effect);
        } else {
            report.expected_errors += 1;
        }
        let problem = match (problem, twin_outcome) {
            (Some(p), _) => Some(p),
            (None, Some(twin_outcome)) if twin_outcome.as_ref().ok() != outcome.as_ref().ok() => {
                Some(format!(
                    "the twin gave {twin_outcome:?}, widesql {outcome:?}"
                ))
            }
            (None, _) => compare_all(&generator.model, &widesql, &sqlite)?,
        };
        let problem = match (problem, &twin) {
            (None, Some(twin)) => compare_twin(&generator.model, &widesql, twin)?,
            (problem, _) => problem,
        };
        let problem = match problem {
            None if query_rng.chance(QUERY_PERCENT) => {
                report.queries += 1;
                check_query(
                    &mut generator,
                    &mut query_rng,
                    &widesql,
                    twin.as_ref(),
                    &sqlite,
                )?
            }
            other => other,
        };
        if let Some(problem) = problem {
            report.divergence = Some(format!(
                "divergence at seed {seed}, statement {index}: {problem}\n\
                 statement: {}\n\
                 script:\n{}",
                statement.sql.widesql,
                render_script(seed, &log)
            ));
            return Ok(report);
        }
    }
    Ok(report)
}

/// After this share of statements (percent), a random query runs on widesql
/// and on SQLite over the same rows.
const QUERY_PERCENT: usize = 50;

/// Runs a random query on widesql and on SQLite; the difference, if any.
/// Where only widesql fails, the query must fail on in-memory DataFusion
/// over the same rows too (a cast SQLite makes and DataFusion refuses,
/// say). Where SQLite fails, widesql must answer as in-memory DataFusion
/// does: scans, key-range pushdown and locality groups must not change an
/// answer.
fn check_query(
    generator: &mut Generator,
    rng: &mut Rng,
    widesql: &Widesql,
    twin: Option<&Widesql>,
    sqlite: &Sqlite,
) -> Result<Option<String>, String> {
    let Some(sql) = generator.query(rng) else {
        return Ok(None);
    };
    if let Some(twin) = twin {
        let (wide, other) = (widesql.query(&sql.widesql), twin.query(&sql.widesql));
        let difference = match (&wide, &other) {
            (Ok(wide), Ok(other)) => compare_tables(other, wide),
            (Err(_), Err(_)) => None,
            _ => Some(format!("the twin gave {other:?}, widesql {wide:?}")),
        };
        if let Some(difference) = difference {
            return Ok(Some(format!(
                "query {} on the twin: {difference}",
                sql.widesql
            )));
        }
    }
    let tables: Vec<String> = generator
        .model
        .tables
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let wide = widesql.query(&sql.widesql);
    let reference = sqlite.rows(&sql.sqlite);
    let query = &sql.widesql;
    Ok(match (wide, reference) {
        (Ok(wide), Ok(reference)) => compare_tables(&wide, &reference).map(|difference| {
            format!(
                "query {query}: {difference}\nwidesql:\n{}sqlite:\n{}",
                wide.render(),
                reference.render()
            )
        }),
        (Err(e), Ok(_)) => match widesql.query_in_memory(query, &tables) {
            Err(_) => None,
            Ok(_) => Some(format!(
                "query {query}: widesql failed, SQLite and in-memory DataFusion did not: {e}"
            )),
        },
        (wide, Err(_)) => match (wide, widesql.query_in_memory(query, &tables)) {
            (Ok(wide), Ok(memory)) => compare_tables(&wide, &memory).map(|difference| {
                format!(
                    "query {query} (SQLite failed): {difference} (against in-memory DataFusion)\nwidesql:\n{}in-memory DataFusion:\n{}",
                    wide.render(),
                    memory.render()
                )
            }),
            (Err(e), Ok(_)) => Some(format!(
                "query {query}: widesql failed, DataFusion did not: {e}"
            )),
            (Ok(_), Err(e)) => Some(format!(
                "query {query}: DataFusion failed, widesql did not: {e}"
            )),
            (Err(_), Err(_)) => None,
        },
    })
}

/// Whether the variable `name` is set to `off`.
fn env_flag_off(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.trim().eq_ignore_ascii_case("off"))
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs the tester: random write scripts must leave widesql's tables
/// exactly as SQLite's, and `twin`'s (when there is one) exactly as
/// widesql's. `WIDESQL_DIFF_STATEMENTS` overrides `statements`. Panics
/// naming the seeds that diverged.
pub fn run(twin: Option<&OpenTwin>, statements: usize) {
    let total = env_number("WIDESQL_DIFF_STATEMENTS").map_or(statements, |n| n as usize);
    let first_seed = env_number("WIDESQL_DIFF_SEED").unwrap_or(1);
    let seeds = total.div_ceil(STATEMENTS_PER_SEED).max(1);
    let (mut executed, mut expected_errors, mut skipped, mut queries) = (0, 0, 0, 0);
    let mut divergences = Vec::new();
    for seed in first_seed..first_seed + seeds as u64 {
        let report = match run_seed(seed, STATEMENTS_PER_SEED, twin) {
            Ok(report) => report,
            Err(e) => panic!("seed {seed}: the tester itself failed: {e}"),
        };
        executed += report.executed;
        expected_errors += report.expected_errors;
        skipped += report.skipped;
        queries += report.queries;
        if let Some(divergence) = report.divergence {
            eprintln!("{divergence}\n");
            divergences.push(seed);
        }
    }
    println!(
        "differential{}: {executed} statements, {seeds} seeds, {} divergences \
         ({expected_errors} expected errors, {skipped} skipped, {queries} queries \
         compared with SQLite)",
        if twin.is_some() { " with a twin" } else { "" },
        divergences.len()
    );
    assert!(
        divergences.is_empty(),
        "{} seeds diverged: {divergences:?} (rerun one with WIDESQL_DIFF_SEED=<seed> WIDESQL_DIFF_STATEMENTS={STATEMENTS_PER_SEED})",
        divergences.len()
    );
}
