//! [`Table`]: the handle of a wide-column table: reads, mutations, DDL.

use super::{retrying, Dataset, Db};
use crate::catalog::{self, CatalogError, DropMode, ObjectKind, SplitPoint, Tablet};
use crate::error::Result;
use crate::ids::{TableId, TabletId};
use crate::storage::Durability;
use crate::table::spec::{FamilySpec, GcPolicy, TableSpec};
use crate::table::{
    Cell, Filter, ReadModifyWriteRule, ReadOptions, ResumeToken, Row, RowIter, RowMutation, RowSet,
    TableStore, BULK_CHUNK_ROWS,
};

/// A wide-column table: rows of cells in column families.
///
/// ```
/// # use widesql::{Db, FamilySpec, Filter, RowMutation, TableSpec};
/// # fn main() -> widesql::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Db::open(dir.path())?;
/// let table = db.default_dataset()?.create_table(
///     "webtable",
///     TableSpec::new().with_family(FamilySpec::new("anchor")),
/// )?;
/// table.mutate_row(b"com.cnn.www", &RowMutation::new().set("anchor", "cnnsi.com", "CNN"))?;
/// let row = table.read_row(b"com.cnn.www", &Filter::all())?.expect("row exists");
/// assert_eq!(row.value("anchor", b"cnnsi.com"), Some(&b"CNN"[..]));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Table {
    pub(super) db: Db,
    pub(super) id: TableId,
    /// The durability of this handle's writes; `None`: the database's.
    pub(super) durability: Option<Durability>,
}

impl Table {
    /// Its id.
    pub fn id(&self) -> TableId {
        self.id
    }

    /// A handle on the same table whose data writes have `durability`
    /// instead of the database's ([`DbOptions::with_durability`](super::DbOptions::with_durability)).
    ///
    /// ```
    /// # use widesql::{Db, Durability, FamilySpec, RowMutation, TableSpec};
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// let table = db.default_dataset()?.create_table("events", TableSpec::new().with_family(FamilySpec::new("e")))?;
    /// // A burst of writes that may lose its last half second in a crash.
    /// let fast = table.with_durability(Durability::Eventual);
    /// for i in 0..100 {
    ///     fast.mutate_row(format!("ev{i:03}").as_bytes(), &RowMutation::new().set("e", "n", "1"))?;
    /// }
    /// db.flush()?; // now every one of them is on disk
    /// # Ok(()) }
    /// ```
    pub fn with_durability(&self, durability: Durability) -> Table {
        Table {
            durability: Some(durability),
            ..self.clone()
        }
    }

    pub(super) fn entry(&self) -> Result<catalog::TableEntry> {
        self.db
            .catalog()
            .read()
            .table(self.id)
            .cloned()
            .ok_or_else(|| catalog::not_found(ObjectKind::Table, self.id))
    }

    pub(crate) fn store(&self) -> Result<TableStore> {
        let store = self
            .db
            .catalog()
            .store(self.id)
            .ok_or_else(|| catalog::not_found(ObjectKind::Table, self.id))?;
        Ok(match self.durability {
            Some(durability) => store.with_durability(durability),
            None => store,
        })
    }

    /// Its current name.
    pub fn name(&self) -> Result<String> {
        Ok(self.entry()?.name)
    }

    /// `project.dataset.table`.
    pub fn qualified_name(&self) -> Result<String> {
        Ok(self.store()?.layout.name.clone())
    }

    /// Its tablets, in key order: one until it is split
    /// ([`Table::split_at`]).
    pub fn tablets(&self) -> Result<Vec<Tablet>> {
        self.store()?;
        Ok(self.db.catalog().read().tablets_of(self.id))
    }

    /// Splits it at each of `keys` (row keys as stored) in one catalog
    /// change: the tablet that holds a key ends there, and a new tablet
    /// starts there. No row moves. Returns the new tablets' ids.
    /// A key that is not one of the table's key type (or a prefix of
    /// one: a composite key's first columns) is refused, as is any key of
    /// a table without a primary key.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, TableSpec};
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// let pages = db.default_dataset()?.create_table("pages", TableSpec::new().with_family(FamilySpec::new("p")))?;
    /// let made = pages.split_at(&[b"m"])?;
    /// let tablets = pages.tablets()?;
    /// assert_eq!(tablets.len(), 2);
    /// assert_eq!((tablets[1].start.as_slice(), tablets[1].id), (&b"m"[..], made[0]));
    /// assert!(tablets[0].contains(b"apple") && tablets[1].contains(b"zebra"));
    /// # Ok(()) }
    /// ```
    pub fn split_at(&self, keys: &[&[u8]]) -> Result<Vec<TabletId>> {
        let (spec, table) = (self.spec()?, self.qualified_name()?);
        let points = keys
            .iter()
            .map(|key| SplitPoint::stored(&spec.key, key))
            .collect::<std::result::Result<Vec<_>, String>>()
            .map_err(|reason| CatalogError::CannotSplit { table, reason })?;
        self.db.catalog().split_table(self.id, points)
    }

    /// Moves the tablet that holds the row key `at` (as stored; `b""` is
    /// the first tablet) to `worker`, a worker of this cluster's master
    /// that is up (`None`: back to this process), and returns its id.
    /// Writes go on while the rows are copied and wait while the last
    /// keys written meanwhile are; then the tablet map changes in one
    /// catalog change; the source keeps its copy for the queries
    /// that began before (docs/cluster.md says when it goes, and what a
    /// crash at each step leaves).
    pub fn move_tablet(&self, at: &[u8], worker: Option<&str>) -> Result<TabletId> {
        if let Some(worker) = worker {
            if !self.db.workers().up().iter().any(|up| up == worker) {
                return Err(CatalogError::CannotMove {
                    table: self.qualified_name()?,
                    reason: format!(
                        "'{worker}' is not a worker that is up (SHOW WORKERS lists them)"
                    ),
                }
                .into());
            }
        }
        self.db
            .catalog()
            .move_tablet(self.id, at, worker.map(str::to_string))
    }

    /// Its current spec (with family ids assigned).
    pub fn spec(&self) -> Result<TableSpec> {
        Ok(self.store()?.layout.spec.clone())
    }

    /// Its dataset.
    pub fn dataset(&self) -> Result<Dataset> {
        Ok(self.db.dataset_handle(self.entry()?.dataset))
    }

    /// Renames the table within its dataset; no data is moved.
    pub fn rename(&self, new_name: &str) -> Result<()> {
        let dataset = self.entry()?.dataset;
        self.db.catalog().rename_table(self.id, dataset, new_name)
    }

    /// Drops the table and its data.
    pub fn drop(&self) -> Result<()> {
        self.db.catalog().drop_table(self.id)
    }

    /// Adds a column family.
    pub fn add_family(&self, family: FamilySpec) -> Result<()> {
        let name = self.qualified_name()?;
        self.db
            .catalog()
            .alter_table(self.id, |spec| catalog::with_family(spec, family, &name))
    }

    /// Drops a column family; its cells are removed.
    pub fn drop_family(&self, family: &str) -> Result<()> {
        let name = self.qualified_name()?;
        self.db
            .catalog()
            .alter_table(self.id, |spec| catalog::without_family(spec, family, &name))
    }

    /// Changes a family's GC policy. It applies to every read at once; when
    /// it keeps more than before, versions hidden by the old policy do not
    /// come back.
    pub fn set_gc_policy(&self, family: &str, gc: GcPolicy) -> Result<()> {
        let name = self.qualified_name()?;
        self.db
            .catalog()
            .alter_table(self.id, |spec| catalog::with_gc(spec, family, gc, &name))
    }

    /// Applies a mutation to one row atomically.
    pub fn mutate_row(&self, key: &[u8], mutation: &RowMutation) -> Result<()> {
        self.write(|store| store.mutate_row(key, mutation))
    }

    /// Runs a write on the table's current store, and again on the new one
    /// when DDL replaced the store while the write waited for its row locks
    /// (nothing was applied then).
    fn write<T>(&self, op: impl Fn(&TableStore) -> Result<T>) -> Result<T> {
        retrying(|| op(&self.store()?))
    }

    /// Applies many row mutations, each row atomic, in batches of 1000 rows
    /// or about [`STATEMENT_ATOMIC_BYTES`](crate::STATEMENT_ATOMIC_BYTES)
    /// (see [`DbOptions::with_statement_batch_bytes`](crate::DbOptions::with_statement_batch_bytes)),
    /// whichever is smaller.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, RowMutation, RowSet, ReadOptions, TableSpec};
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// # let table = db.default_dataset()?.create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?;
    /// let rows = (0..2500).map(|i| (format!("row{i:05}"), RowMutation::new().set("f", "n", i.to_string())));
    /// assert_eq!(table.bulk_mutate(rows)?, 2500);
    /// assert_eq!(table.read_rows(&RowSet::prefix("row01"), ReadOptions::new())?.count(), 1000);
    /// # Ok(()) }
    /// ```
    pub fn bulk_mutate<K, I>(&self, rows: I) -> Result<usize>
    where
        K: AsRef<[u8]>,
        I: IntoIterator<Item = (K, RowMutation)>,
    {
        let max_bytes = self.store()?.engine.statement_batch_bytes;
        let mut written = 0;
        let mut rows = rows.into_iter().peekable();
        while rows.peek().is_some() {
            let mut chunk: Vec<(K, RowMutation)> = Vec::new();
            let mut bytes = 0;
            while chunk.len() < BULK_CHUNK_ROWS && bytes < max_bytes {
                let Some((key, mutation)) = rows.next() else {
                    break;
                };
                bytes += key.as_ref().len() + mutation.payload_bytes();
                chunk.push((key, mutation));
            }
            written += self
                .write(|store| store.apply_bulk_chunk(&chunk))
                .map_err(|e| crate::table::partly_applied(e, written))?;
        }
        Ok(written)
    }

    /// Reads one row; `None` when no cell passes the filter.
    pub fn read_row(&self, key: &[u8], filter: &Filter) -> Result<Option<Row>> {
        self.store()?.read_row(key, filter)
    }

    /// Reads rows: keys, ranges or prefixes, forward or reverse.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, RowMutation, RowSet, RowRange, ReadOptions, TableSpec};
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// # let table = db.default_dataset()?.create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?;
    /// for key in ["a", "b", "c", "d"] {
    ///     table.mutate_row(key.as_bytes(), &RowMutation::new().set("f", "q", key))?;
    /// }
    /// let rows = RowSet::range(RowRange::new(b"b".to_vec()..=b"d".to_vec()));
    /// let keys: Vec<Vec<u8>> = table
    ///     .read_rows(&rows, ReadOptions::new().with_reverse(true).with_row_limit(2))?
    ///     .map(|row| row.map(|r| r.key))
    ///     .collect::<widesql::Result<_>>()?;
    /// assert_eq!(keys, [b"d".to_vec(), b"c".to_vec()]);
    /// # Ok(()) }
    /// ```
    pub fn read_rows(&self, rows: &RowSet, options: ReadOptions) -> Result<RowIter> {
        Ok(self.store()?.read_rows(rows, options))
    }

    /// Reads up to `page_size` cells of a row after `resume`; returns a
    /// token when there may be more.
    pub fn read_row_page(
        &self,
        key: &[u8],
        filter: &Filter,
        page_size: usize,
        resume: Option<&ResumeToken>,
    ) -> Result<(Vec<Cell>, Option<ResumeToken>)> {
        self.store()?.read_row_page(key, filter, page_size, resume)
    }

    /// Atomically appends to or increments cells; returns the new cells.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, ReadModifyWriteRule, TableSpec};
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// # let table = db.default_dataset()?.create_table("t", TableSpec::new().with_family(FamilySpec::new("stats")))?;
    /// table.read_modify_write(b"page", &[ReadModifyWriteRule::increment("stats", "views", 5)])?;
    /// let row = table.read_modify_write(b"page", &[ReadModifyWriteRule::increment("stats", "views", 2)])?;
    /// assert_eq!(row.value("stats", b"views"), Some(&7i64.to_be_bytes()[..]));
    /// # Ok(()) }
    /// ```
    pub fn read_modify_write(&self, key: &[u8], rules: &[ReadModifyWriteRule]) -> Result<Row> {
        self.write(|store| store.read_modify_write(key, rules))
    }

    /// Atomically applies `on_match` when `predicate` selects a cell of the
    /// row, else `on_miss`; returns whether it matched.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, Filter, RowMutation, TableSpec, ValueFilter};
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// # let table = db.default_dataset()?.create_table("t", TableSpec::new().with_family(FamilySpec::new("f")))?;
    /// table.mutate_row(b"job", &RowMutation::new().set("f", "state", "queued"))?;
    /// let queued = Filter::all().with_latest_versions(1).with_value(ValueFilter::Equals(b"queued".to_vec()));
    /// let claim = RowMutation::new().set("f", "state", "running");
    /// assert!(table.check_and_mutate(b"job", &queued, &claim, &RowMutation::new())?);
    /// assert!(!table.check_and_mutate(b"job", &queued, &claim, &RowMutation::new())?);
    /// # Ok(()) }
    /// ```
    pub fn check_and_mutate(
        &self,
        key: &[u8],
        predicate: &Filter,
        on_match: &RowMutation,
        on_miss: &RowMutation,
    ) -> Result<bool> {
        self.write(|store| store.check_and_mutate(key, predicate, on_match, on_miss))
    }

    /// Removes hidden versions now; returns how many cells were removed.
    pub fn compact(&self) -> Result<u64> {
        self.entry()?;
        self.db.catalog().compact_table(self.id)
    }

    /// Keys that reads of each locality group have visited since the
    /// database was opened, by group name.
    pub fn keys_read_per_group(&self) -> Result<Vec<(String, u64)>> {
        Ok(self.store()?.keys_read_per_group())
    }
}

impl DropMode {
    /// `Cascade` when `cascade`, else `Restrict`.
    pub fn cascade_if(cascade: bool) -> Self {
        if cascade {
            DropMode::Cascade
        } else {
            DropMode::Restrict
        }
    }
}
