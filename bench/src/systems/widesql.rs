//! widesql, through the embedded API and through SQL, on one table shape:
//! the webtable with `contents` in the locality group `blobs` (or, for W4's
//! comparison, in the default group).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use widesql::{
    Db, DbOptions, Durability, Filter, QualifierFilter, ReadOptions, RowMutation, RowSet, Table,
};

use super::datafusion_mem::{language_counts, page_batches, row_count, single_i64};
use super::System;
use crate::data::Page;
use crate::Res;

/// The table's DDL; `{groups}` is the WITH clause.
fn create_table(name: &str, own_group: bool) -> String {
    let groups = if own_group {
        "WITH ('page.columns' = 'contents', 'page.locality_group' = 'blobs')"
    } else {
        "WITH ('page.columns' = 'contents')"
    };
    format!(
        "CREATE TABLE {name} (_key VARCHAR PRIMARY KEY, language VARCHAR, checksum BYTEA, \
         rank BIGINT, contents VARCHAR, anchor MAP(VARCHAR, VARCHAR)) {groups}"
    )
}

/// Opens a database in `path` with background compaction off (it would
/// run during some measurements and not others).
pub fn open_db(path: &Path, cache_bytes: u64) -> Res<Db> {
    Ok(Db::open_with(
        path,
        DbOptions::new()
            .with_cache_capacity(cache_bytes)
            .with_compaction_interval(None),
    )?)
}

/// Stores `pages` in the table `pages` of `db` through the embedded API,
/// durably.
pub fn bulk_load(db: &Db, pages: &[Page]) -> Res<()> {
    bulk_load_into(db, &db.open_table("default", "public", "pages")?, pages)
}

/// Stores `pages` in `table` of `db` with the table handle's durability,
/// then flushes: durable at return either way.
fn bulk_load_into(db: &Db, table: &Table, pages: &[Page]) -> Res<()> {
    table.bulk_mutate(pages.iter().map(|p| (p.key.as_bytes(), page_mutation(p))))?;
    db.flush()?;
    Ok(())
}

/// The rows of each `INSERT … VALUES` statement of a load: the 1,000
/// rows SQLite commits per transaction, so that both commit as often.
pub const STATEMENT_ROWS: usize = 1000;

/// A widesql database with the benchmark table, used through SQL.
pub struct WidesqlSql {
    db: Db,
    session: widesql::Session,
    runtime: Arc<tokio::runtime::Runtime>,
    table: String,
    how: Load,
    /// The point read of [`WidesqlSql::point_prepared`], once prepared.
    prepared: Option<widesql::Prepared>,
    /// The range read of [`WidesqlSql::range_prepared`], once prepared.
    prepared_range: Option<widesql::Prepared>,
}

/// How [`WidesqlSql`] loads pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(
    clippy::enum_variant_names,
    reason = "every way of loading is an INSERT statement"
)]
pub enum Load {
    /// `INSERT … VALUES` statements of this many rows each.
    InsertValues(usize),
    /// The same statements after `SET widesql.durability = 'eventual'`:
    /// no flush per statement, as SQLite's `synchronous = NORMAL` does not
    /// sync a WAL commit (though a process crash loses more here).
    InsertValuesEventual(usize),
    /// `INSERT INTO t SELECT * FROM` an Arrow table registered with the
    /// session: the import path.
    InsertSelect,
}

impl WidesqlSql {
    /// A database in `path` with an empty table `table`.
    pub fn open(
        path: &Path,
        cache_bytes: u64,
        runtime: Arc<tokio::runtime::Runtime>,
        table: &str,
        own_group: bool,
        how: Load,
    ) -> Res<Self> {
        let db = open_db(path, cache_bytes)?;
        let session = db.session();
        let this = WidesqlSql {
            db,
            session,
            runtime,
            table: table.to_string(),
            how,
            prepared: None,
            prepared_range: None,
        };
        this.query(&create_table(table, own_group))?;
        if matches!(how, Load::InsertValuesEventual(_)) {
            this.query("SET widesql.durability = 'eventual'")?;
        }
        Ok(this)
    }

    /// SQL over the table `table` of an open database (loads with
    /// `INSERT … VALUES`).
    pub fn on(db: Db, runtime: Arc<tokio::runtime::Runtime>, table: &str) -> Self {
        WidesqlSql {
            session: db.session(),
            db,
            runtime,
            table: table.to_string(),
            how: Load::InsertValues(STATEMENT_ROWS),
            prepared: None,
            prepared_range: None,
        }
    }

    /// The ad hoc statement that reads the page at `key`.
    fn point_sql(&self, key: &str) -> String {
        format!("SELECT * FROM {} WHERE _key = '{key}'", self.table)
    }

    /// Reads the page at `key` with `Session::sql` (its `Frame` collected
    /// here); false when it is missing.
    pub fn point_dataframe(&self, key: &str) -> Res<bool> {
        Ok(row_count(&self.query(&self.point_sql(key))?) == 1)
    }

    /// Runs one statement to the end; its batches.
    pub fn query(&self, sql: &str) -> Res<Vec<RecordBatch>> {
        self.runtime
            .block_on(async { Ok(self.session.sql(sql).await?.collect().await?) })
    }

    /// Runs the statement `sql` with `Session::run`; its batches.
    pub fn run(&self, sql: &str) -> Res<Vec<RecordBatch>> {
        let outputs = self.runtime.block_on(self.session.run(sql))?;
        Ok(outputs
            .into_iter()
            .flat_map(|output| output.batches)
            .collect())
    }

    /// Runs `sql`, prepared once by the caller, with no parameters.
    pub fn prepared_query(&self, prepared: &widesql::Prepared) -> Res<Vec<RecordBatch>> {
        Ok(self.runtime.block_on(prepared.query(Vec::new()))?)
    }

    /// Prepares `sql`.
    pub fn prepare(&self, sql: &str) -> Res<widesql::Prepared> {
        Ok(self.runtime.block_on(self.session.prepare(sql))?)
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The ad hoc statement that reads key and language of the pages under
    /// `prefix`.
    fn range_sql(&self, prefix: &str) -> String {
        let (start, end) = super::prefix_bounds(prefix);
        format!(
            "SELECT _key, language FROM {} WHERE _key >= '{start}' AND _key < '{end}'",
            self.table
        )
    }

    /// [`System::range`] with `Session::sql` and `Frame::collect`.
    pub fn range_dataframe(&self, prefix: &str) -> Res<usize> {
        Ok(row_count(&self.query(&self.range_sql(prefix))?))
    }

    /// [`System::range`] with a statement prepared once.
    pub fn range_prepared(&mut self, prefix: &str) -> Res<usize> {
        if self.prepared_range.is_none() {
            let sql = format!(
                "SELECT _key, language FROM {} WHERE _key >= $1 AND _key < $2",
                self.table
            );
            self.prepared_range = Some(self.runtime.block_on(self.session.prepare(&sql))?);
        }
        let Some(prepared) = &self.prepared_range else {
            return Ok(0);
        };
        let (start, end) = super::prefix_bounds(prefix);
        let params = vec![start.into(), end.into()];
        let rows = self.runtime.block_on(prepared.query(params))?;
        Ok(row_count(&rows))
    }

    /// Reads every value of the page at `key` with a statement prepared
    /// once (W2); false when it is missing.
    pub fn point_prepared(&mut self, key: &str) -> Res<bool> {
        if self.prepared.is_none() {
            let sql = format!("SELECT * FROM {} WHERE _key = $1", self.table);
            let prepared = self.runtime.block_on(self.session.prepare(&sql))?;
            if !prepared.is_key_lookup() {
                return Err(format!("'{sql}' is not planned as a key lookup").into());
            }
            self.prepared = Some(prepared);
        }
        let Some(prepared) = &self.prepared else {
            return Ok(false);
        };
        let key = datafusion::common::ScalarValue::from(key);
        let rows = self.runtime.block_on(prepared.query(vec![key]))?;
        Ok(row_count(&rows) == 1)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `INSERT INTO table VALUES …` of `pages`.
pub fn insert_sql(table: &str, pages: &[Page]) -> String {
    let rows: Vec<String> = pages.iter().map(values_row).collect();
    format!("INSERT INTO {table} VALUES {}", rows.join(", "))
}

/// One page as a row of `INSERT … VALUES`.
fn values_row(p: &Page) -> String {
    let anchors: Vec<String> = p
        .anchors
        .iter()
        .map(|(from, text)| format!("'{from}': '{text}'"))
        .collect();
    format!(
        "('{}', '{}', X'{}', {}, '{}', MAP {{{}}})",
        p.key,
        p.language,
        hex(&p.checksum),
        p.rank,
        p.contents,
        anchors.join(", ")
    )
}

impl System for WidesqlSql {
    fn name(&self) -> String {
        match self.how {
            Load::InsertValues(STATEMENT_ROWS) => "widesql SQL".into(),
            Load::InsertValues(rows) => format!("widesql SQL, {rows}-row statements"),
            Load::InsertValuesEventual(rows) => {
                format!("widesql SQL, {rows}-row statements, durability eventual")
            }
            Load::InsertSelect => "widesql SQL (INSERT … SELECT)".into(),
        }
    }

    fn load(&mut self, pages: &[Page]) -> Res<()> {
        match self.how {
            Load::InsertValues(rows) | Load::InsertValuesEventual(rows) => {
                for chunk in pages.chunks(rows) {
                    self.query(&insert_sql(&self.table, chunk))?;
                }
            }
            Load::InsertSelect => {
                let (schema, batches) = page_batches(pages)?;
                let source = MemTable::try_new(schema, vec![batches])?;
                self.session
                    .context()
                    .register_table("bench_source", Arc::new(source))?;
                let loaded = self.query(&format!(
                    "INSERT INTO {} SELECT * FROM bench_source",
                    self.table
                ));
                self.session.context().deregister_table("bench_source")?;
                loaded?;
            }
        }
        self.db.flush()?;
        Ok(())
    }

    /// The statement's text run with `Session::run`, which returns rows
    /// (as the CLI, the shell and the sqllogictest runner run SQL).
    fn point(&mut self, key: &str) -> Res<bool> {
        let outputs = self
            .runtime
            .block_on(self.session.run(&self.point_sql(key)))?;
        let rows: usize = outputs.iter().map(|o| row_count(&o.batches)).sum();
        Ok(rows == 1)
    }

    /// Run with `Session::run`, as W2's point read (a key lookup).
    fn range(&mut self, prefix: &str) -> Res<usize> {
        let sql = self.range_sql(prefix);
        let outputs = self.runtime.block_on(self.session.run(&sql))?;
        Ok(outputs.iter().map(|o| row_count(&o.batches)).sum())
    }

    fn per_language(&mut self) -> Res<Vec<(String, i64)>> {
        language_counts(&self.query(&format!(
            "SELECT language, count(*) FROM {} GROUP BY language",
            self.table
        ))?)
    }

    fn sum_rank(&mut self) -> Res<i64> {
        single_i64(&self.query(&format!("SELECT sum(rank) FROM {}", self.table))?)
    }

    fn bytes_on_disk(&self) -> Res<Option<u64>> {
        Ok(Some(self.db.size_on_disk()?))
    }
}

/// The same table written and read through the embedded API.
pub struct WidesqlEmbedded {
    db: Db,
    table: Table,
    /// Whether the load flushes each of its 1,000-row batches (the default)
    /// or only at its end, as SQLite's `synchronous = NORMAL` commits do.
    durability: Durability,
}

impl WidesqlEmbedded {
    /// A database in `path` with an empty table `pages`, created by SQL so
    /// that it has exactly the SQL table's layout.
    pub fn open(path: &Path, cache_bytes: u64, runtime: Arc<tokio::runtime::Runtime>) -> Res<Self> {
        let sql = WidesqlSql::open(
            path,
            cache_bytes,
            runtime,
            "pages",
            true,
            Load::InsertValues(STATEMENT_ROWS),
        )?;
        let db = sql.db().clone();
        let table = db.open_table("default", "public", "pages")?;
        Ok(WidesqlEmbedded {
            db,
            table,
            durability: Durability::Immediate,
        })
    }

    /// The same, loading with `durability` (W1).
    pub fn loading_with(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Visits the value of column `name` of family `cf` of every row, in
    /// place ([`widesql::RowIter::next_ref`]).
    fn for_each_value(&self, name: &str, mut visit: impl FnMut(&[u8]) -> Res<()>) -> Res<()> {
        let filter = Filter::all()
            .with_families(["cf"])
            .with_qualifiers(QualifierFilter::Exact([name.as_bytes().to_vec()].into()))
            .with_latest_versions(1);
        let mut rows = self
            .table
            .read_rows(&RowSet::all(), ReadOptions::new().with_filter(filter))?;
        while let Some(row) = rows.next_ref() {
            if let Some(cell) = row?.cells().next() {
                visit(cell.value)?;
            }
        }
        Ok(())
    }
}

/// A page as a row mutation, in the cells the SQL table declares.
pub fn page_mutation(p: &Page) -> RowMutation {
    let mut m = RowMutation::new()
        .set("cf", "language", p.language)
        .set("cf", "checksum", p.checksum)
        .set("cf", "rank", p.rank.to_be_bytes())
        .set("page", "contents", &p.contents);
    for (from, text) in &p.anchors {
        m = m.set("anchor", from, text);
    }
    m
}

impl System for WidesqlEmbedded {
    fn name(&self) -> String {
        match self.durability {
            Durability::Immediate => "widesql embedded".into(),
            Durability::Eventual => "widesql embedded, durability eventual".into(),
        }
    }

    fn load(&mut self, pages: &[Page]) -> Res<()> {
        let table = self.table.with_durability(self.durability);
        bulk_load_into(&self.db, &table, pages)
    }

    fn point(&mut self, key: &str) -> Res<bool> {
        Ok(self
            .table
            .read_row(key.as_bytes(), &Filter::all().with_latest_versions(1))?
            .is_some())
    }

    fn range(&mut self, prefix: &str) -> Res<usize> {
        let filter = Filter::all()
            .with_families(["cf"])
            .with_qualifiers(QualifierFilter::Exact([b"language".to_vec()].into()))
            .with_latest_versions(1);
        let rows = self.table.read_rows(
            &RowSet::prefix(prefix),
            ReadOptions::new().with_filter(filter),
        )?;
        let mut n = 0;
        for row in rows {
            row?;
            n += 1;
        }
        Ok(n)
    }

    fn per_language(&mut self) -> Res<Vec<(String, i64)>> {
        let mut counts = BTreeMap::new();
        self.for_each_value("language", |value| {
            super::count(&mut counts, value);
            Ok(())
        })?;
        Ok(counts.into_iter().collect())
    }

    fn sum_rank(&mut self) -> Res<i64> {
        let mut sum = 0i64;
        self.for_each_value("rank", |value| {
            sum += i64::from_be_bytes(value.try_into()?);
            Ok(())
        })?;
        Ok(sum)
    }

    fn bytes_on_disk(&self) -> Res<Option<u64>> {
        Ok(Some(self.db.size_on_disk()?))
    }
}
