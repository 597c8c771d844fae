//! [`Dataset`]: the handle of a dataset and its tables.

use super::{Db, Project, Table};
use crate::catalog::{self, DropMode, ObjectKind};
use crate::error::Result;
use crate::ids::{DatasetId, TableId};
use crate::table::spec::TableSpec;

/// A dataset: a namespace of tables within a project.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub(super) db: Db,
    pub(super) id: DatasetId,
}

impl Dataset {
    /// Its id.
    pub fn id(&self) -> DatasetId {
        self.id
    }

    pub(super) fn entry(&self) -> Result<catalog::DatasetEntry> {
        self.db
            .catalog()
            .read()
            .dataset(self.id)
            .cloned()
            .ok_or_else(|| catalog::not_found(ObjectKind::Dataset, self.id))
    }

    /// Its current name.
    pub fn name(&self) -> Result<String> {
        Ok(self.entry()?.name)
    }

    /// `project.dataset`.
    pub fn qualified_name(&self) -> Result<String> {
        self.entry()?;
        Ok(self.db.catalog().read().dataset_path(self.id))
    }

    /// Its project.
    pub fn project(&self) -> Result<Project> {
        Ok(self.db.project_handle(self.entry()?.project))
    }

    /// Creates a table.
    ///
    /// ```
    /// # use widesql::{Db, FamilySpec, TableSpec};
    /// # use std::time::Duration;
    /// # fn main() -> widesql::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Db::open(dir.path())?;
    /// let spec = TableSpec::new()
    ///     .with_family(FamilySpec::new("contents").with_locality_group("blobs").with_max_versions(3))
    ///     .with_family(FamilySpec::new("anchor").with_max_age(Duration::from_secs(86_400)));
    /// let table = db.default_dataset()?.create_table("webtable", spec)?;
    /// assert_eq!(table.spec()?.families.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn create_table(&self, name: &str, spec: TableSpec) -> Result<Table> {
        let id = self.db.catalog().create_table(self.id, name, spec)?;
        Ok(self.db.table_handle(id))
    }

    /// The table called `name`, if any.
    pub fn table(&self, name: &str) -> Result<Option<Table>> {
        self.entry()?;
        let id = self
            .db
            .catalog()
            .read()
            .table_by_name(self.id, name)
            .map(|t| t.id);
        Ok(id.map(|id| self.db.table_handle(id)))
    }

    /// The table called `name`, or a `NotFound` error.
    pub fn open_table(&self, name: &str) -> Result<Table> {
        let path = self.qualified_name()?;
        self.table(name)?
            .ok_or_else(|| catalog::not_found(ObjectKind::Table, format!("{path}.{name}")))
    }

    /// Its tables, by name.
    pub fn tables(&self) -> Result<Vec<Table>> {
        self.entry()?;
        let ids: Vec<TableId> = self
            .db
            .catalog()
            .read()
            .tables_of(self.id)
            .iter()
            .map(|t| t.id)
            .collect();
        Ok(ids.into_iter().map(|id| self.db.table_handle(id)).collect())
    }

    /// Drops the table called `name` and its data.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.open_table(name)?.drop()
    }

    /// Renames the table called `name` within this dataset.
    pub fn rename_table(&self, name: &str, new_name: &str) -> Result<()> {
        self.open_table(name)?.rename(new_name)
    }

    /// Renames the dataset.
    pub fn rename(&self, new_name: &str) -> Result<()> {
        self.db.catalog().rename_dataset(self.id, new_name)
    }

    /// Drops the dataset.
    pub fn drop(&self, mode: DropMode) -> Result<()> {
        self.db.catalog().drop_dataset(self.id, mode)
    }
}
