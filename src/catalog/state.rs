//! The in-memory mirror of the system tables: entries by id and by name.

use super::*;
use crate::catalog::{Privilege, Securable};

/// A project as the catalog knows it.
#[derive(Debug, Clone)]
pub struct ProjectEntry {
    /// Its id.
    pub id: ProjectId,
    /// Its name.
    pub name: String,
    /// Creation time, microseconds.
    pub created_at: i64,
}

/// A dataset as the catalog knows it.
#[derive(Debug, Clone)]
pub struct DatasetEntry {
    /// Its id.
    pub id: DatasetId,
    /// Its project.
    pub project: ProjectId,
    /// Its name.
    pub name: String,
    /// Creation time, microseconds.
    pub created_at: i64,
}

/// A table as the catalog knows it.
#[derive(Debug, Clone)]
pub struct TableEntry {
    /// Its id.
    pub id: TableId,
    /// Its dataset.
    pub dataset: DatasetId,
    /// Its name.
    pub name: String,
    /// Creation time, microseconds.
    pub created_at: i64,
    /// The next family id to hand out (ids are never reused).
    pub next_family_id: u16,
    /// Its resolved storage layout (holds the spec).
    pub layout: Arc<Layout>,
}

impl TableEntry {
    /// The table's spec.
    pub fn spec(&self) -> &TableSpec {
        &self.layout.spec
    }
}

/// The in-memory mirror of the system tables.
#[derive(Debug, Default)]
pub struct CatalogState {
    pub(super) projects: BTreeMap<ProjectId, ProjectEntry>,
    pub(super) datasets: BTreeMap<DatasetId, DatasetEntry>,
    pub(super) tables: BTreeMap<TableId, TableEntry>,
    pub(super) project_names: BTreeMap<String, ProjectId>,
    pub(super) dataset_names: BTreeMap<(ProjectId, String), DatasetId>,
    pub(super) table_names: BTreeMap<(DatasetId, String), TableId>,
    pub(super) users: BTreeMap<String, UserEntry>,
    /// The grants of each user: (object, privilege).
    pub(super) grants: BTreeMap<String, std::collections::BTreeSet<(Securable, Privilege)>>,
    /// The stored tablets of each table that was split, by start key.
    pub(super) tablets: BTreeMap<TableId, BTreeMap<Vec<u8>, StoredTablet>>,
}

impl CatalogState {
    /// The project called `name`.
    pub fn project_by_name(&self, name: &str) -> Option<&ProjectEntry> {
        self.project_names
            .get(name)
            .and_then(|id| self.projects.get(id))
    }

    /// The dataset `name` of project `project`.
    pub fn dataset_by_name(&self, project: ProjectId, name: &str) -> Option<&DatasetEntry> {
        self.dataset_names
            .get(&(project, name.to_string()))
            .and_then(|id| self.datasets.get(id))
    }

    /// The table `name` of dataset `dataset`.
    pub fn table_by_name(&self, dataset: DatasetId, name: &str) -> Option<&TableEntry> {
        self.table_names
            .get(&(dataset, name.to_string()))
            .and_then(|id| self.tables.get(id))
    }

    /// The project with id `id`.
    pub fn project(&self, id: ProjectId) -> Option<&ProjectEntry> {
        self.projects.get(&id)
    }

    /// The dataset with id `id`.
    pub fn dataset(&self, id: DatasetId) -> Option<&DatasetEntry> {
        self.datasets.get(&id)
    }

    /// The table with id `id`.
    pub fn table(&self, id: TableId) -> Option<&TableEntry> {
        self.tables.get(&id)
    }

    /// Every project, by name.
    pub fn projects(&self) -> Vec<&ProjectEntry> {
        self.project_names
            .values()
            .filter_map(|id| self.projects.get(id))
            .collect()
    }

    /// The datasets of a project, by name.
    pub fn datasets_of(&self, project: ProjectId) -> Vec<&DatasetEntry> {
        self.dataset_names
            .range((project, String::new())..)
            .take_while(|((p, _), _)| *p == project)
            .filter_map(|(_, id)| self.datasets.get(id))
            .collect()
    }

    /// The tables of a dataset, by name.
    pub fn tables_of(&self, dataset: DatasetId) -> Vec<&TableEntry> {
        self.table_names
            .range((dataset, String::new())..)
            .take_while(|((d, _), _)| *d == dataset)
            .filter_map(|(_, id)| self.tables.get(id))
            .collect()
    }

    /// `project.dataset` of a dataset.
    pub fn dataset_path(&self, id: DatasetId) -> String {
        match self.datasets.get(&id) {
            Some(d) => {
                let project = self
                    .projects
                    .get(&d.project)
                    .map_or("?", |p| p.name.as_str());
                format!("{project}.{}", d.name)
            }
            None => format!("{id}"),
        }
    }

    /// `project.dataset.table` of a table.
    pub fn table_path(&self, dataset: DatasetId, name: &str) -> String {
        format!("{}.{name}", self.dataset_path(dataset))
    }

    pub(super) fn insert_project(&mut self, entry: ProjectEntry) {
        self.project_names.insert(entry.name.clone(), entry.id);
        self.projects.insert(entry.id, entry);
    }

    pub(super) fn insert_dataset(&mut self, entry: DatasetEntry) {
        self.dataset_names
            .insert((entry.project, entry.name.clone()), entry.id);
        self.datasets.insert(entry.id, entry);
    }

    pub(super) fn insert_table(&mut self, entry: TableEntry) {
        self.table_names
            .insert((entry.dataset, entry.name.clone()), entry.id);
        self.tables.insert(entry.id, entry);
    }

    pub(super) fn remove_project(&mut self, id: ProjectId) {
        if let Some(p) = self.projects.remove(&id) {
            self.project_names.remove(&p.name);
        }
    }

    pub(super) fn remove_dataset(&mut self, id: DatasetId) {
        if let Some(d) = self.datasets.remove(&id) {
            self.dataset_names.remove(&(d.project, d.name));
        }
    }

    pub(super) fn remove_table(&mut self, id: TableId) -> Option<TableEntry> {
        let t = self.tables.remove(&id)?;
        self.table_names.remove(&(t.dataset, t.name.clone()));
        Some(t)
    }
}
