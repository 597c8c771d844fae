//! [`Project`]: the handle of a project and its datasets.

use super::{Dataset, Db};
use crate::catalog::{self, DropMode, ObjectKind};
use crate::error::Result;
use crate::ids::{DatasetId, ProjectId};

/// A project: a namespace of datasets.
#[derive(Debug, Clone)]
pub struct Project {
    pub(super) db: Db,
    pub(super) id: ProjectId,
}

impl Project {
    /// Its id.
    pub fn id(&self) -> ProjectId {
        self.id
    }

    pub(super) fn entry(&self) -> Result<catalog::ProjectEntry> {
        self.db
            .catalog()
            .read()
            .project(self.id)
            .cloned()
            .ok_or_else(|| catalog::not_found(ObjectKind::Project, self.id))
    }

    /// Its current name.
    pub fn name(&self) -> Result<String> {
        Ok(self.entry()?.name)
    }

    /// Creates a dataset in this project.
    pub fn create_dataset(&self, name: &str) -> Result<Dataset> {
        let id = self.db.catalog().create_dataset(self.id, name)?;
        Ok(self.db.dataset_handle(id))
    }

    /// The dataset called `name`, if any.
    pub fn dataset(&self, name: &str) -> Result<Option<Dataset>> {
        self.entry()?;
        let id = self
            .db
            .catalog()
            .read()
            .dataset_by_name(self.id, name)
            .map(|d| d.id);
        Ok(id.map(|id| self.db.dataset_handle(id)))
    }

    /// The dataset called `name`, or a `NotFound` error.
    pub fn open_dataset(&self, name: &str) -> Result<Dataset> {
        let project = self.name()?;
        self.dataset(name)?
            .ok_or_else(|| catalog::not_found(ObjectKind::Dataset, format!("{project}.{name}")))
    }

    /// Its datasets, by name.
    pub fn datasets(&self) -> Result<Vec<Dataset>> {
        self.entry()?;
        let ids: Vec<DatasetId> = self
            .db
            .catalog()
            .read()
            .datasets_of(self.id)
            .iter()
            .map(|d| d.id)
            .collect();
        Ok(ids
            .into_iter()
            .map(|id| self.db.dataset_handle(id))
            .collect())
    }

    /// Drops the dataset called `name`.
    pub fn drop_dataset(&self, name: &str, mode: DropMode) -> Result<()> {
        self.open_dataset(name)?.drop(mode)
    }

    /// Renames the project.
    pub fn rename(&self, new_name: &str) -> Result<()> {
        self.db.catalog().rename_project(self.id, new_name)
    }

    /// Drops the project.
    pub fn drop(&self, mode: DropMode) -> Result<()> {
        self.db.catalog().drop_project(self.id, mode)
    }
}
