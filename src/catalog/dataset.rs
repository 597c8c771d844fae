//! Datasets: create, rename, drop.

use super::*;

impl Catalog {
    pub(super) fn existing_dataset(&self, id: DatasetId) -> Result<DatasetEntry> {
        self.read()
            .dataset(id)
            .cloned()
            .ok_or_else(|| not_found(ObjectKind::Dataset, id))
    }

    /// Refuses to rename or drop (`action`) the dataset `name` of the
    /// system's project.
    pub(super) fn refuse_system_dataset(
        &self,
        project: ProjectId,
        name: &str,
        action: &'static str,
    ) -> Result<()> {
        if project == system::SYSTEM_PROJECT {
            return Err(CatalogError::Reserved {
                kind: ObjectKind::Dataset,
                name: format!("{}.{name}", system::SYSTEM_PROJECT_NAME),
                action,
            }
            .into());
        }
        Ok(())
    }

    /// Refuses to add a dataset or a table to the system's project.
    pub(super) fn refuse_in_system_project(&self, project: ProjectId) -> Result<()> {
        if project == system::SYSTEM_PROJECT {
            return Err(CatalogError::Reserved {
                kind: ObjectKind::Project,
                name: system::SYSTEM_PROJECT_NAME.to_string(),
                action: "changed",
            }
            .into());
        }
        Ok(())
    }

    /// Refuses to drop or rename the default dataset.
    fn refuse_default_dataset(&self, id: DatasetId, action: &'static str) -> Result<()> {
        let path = self.read().dataset_path(id);
        if path == format!("{DEFAULT_PROJECT}.{DEFAULT_DATASET}") {
            return Err(CatalogError::Default {
                kind: ObjectKind::Dataset,
                name: path,
                action,
            }
            .into());
        }
        Ok(())
    }

    /// Creates a dataset in a project.
    pub fn create_dataset(&self, project: ProjectId, name: &str) -> Result<DatasetId> {
        check_user_name(ObjectKind::Dataset, name)?;
        let _ddl = self.ddl_lock();
        let p = self.existing_project(project)?;
        self.refuse_in_system_project(project)?;
        if self.read().dataset_by_name(project, name).is_some() {
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Dataset,
                name: format!("{}.{name}", p.name),
            }
            .into());
        }
        let id = DatasetId::generate();
        let now = self.engine.clock.next(&self.engine.storage)?;
        self.apply(vec![Self::dataset_row(id, project, name, now)?])?;
        self.write_state().insert_dataset(DatasetEntry {
            id,
            project,
            name: name.to_string(),
            created_at: now,
        });
        Ok(id)
    }

    /// Renames a dataset; only catalog rows change.
    pub fn rename_dataset(&self, id: DatasetId, new_name: &str) -> Result<()> {
        check_user_name(ObjectKind::Dataset, new_name)?;
        let _ddl = self.ddl_lock();
        let entry = self.existing_dataset(id)?;
        self.refuse_system_dataset(entry.project, &entry.name, "renamed")?;
        self.refuse_default_dataset(id, "renamed")?;
        if entry.name == new_name {
            return Ok(());
        }
        if self
            .read()
            .dataset_by_name(entry.project, new_name)
            .is_some()
        {
            let path = self.read().dataset_path(id);
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Dataset,
                name: format!(
                    "{}.{new_name}",
                    path.rsplit_once('.').map_or("", |(p, _)| p)
                ),
            }
            .into());
        }
        let project_text = entry.project.to_string();
        self.apply(vec![
            Self::delete_row(system::DATASETS, &[&project_text, &entry.name])?,
            Self::dataset_row(id, entry.project, new_name, entry.created_at)?,
        ])?;
        let mut state = self.write_state();
        state.remove_dataset(id);
        state.insert_dataset(DatasetEntry {
            name: new_name.to_string(),
            ..entry
        });
        self.refresh_layouts(&mut state)
    }

    /// Drops a dataset, and with [`DropMode::Cascade`] its tables.
    pub fn drop_dataset(&self, id: DatasetId, mode: DropMode) -> Result<()> {
        let _ddl = self.ddl_lock();
        let entry = self.existing_dataset(id)?;
        self.refuse_system_dataset(entry.project, &entry.name, "dropped")?;
        self.refuse_default_dataset(id, "dropped")?;
        let tables: Vec<TableEntry> = self.read().tables_of(id).into_iter().cloned().collect();
        if mode == DropMode::Restrict && !tables.is_empty() {
            return Err(CatalogError::NotEmpty {
                kind: ObjectKind::Dataset,
                name: self.read().dataset_path(id),
                children: tables.len(),
                child_kind: ObjectKind::Table,
            }
            .into());
        }
        let dataset_text = id.to_string();
        let mut writes = vec![Self::delete_row(
            system::DATASETS,
            &[&entry.project.to_string(), &entry.name],
        )?];
        for t in &tables {
            writes.push(Self::delete_row(system::TABLES, &[&dataset_text, &t.name])?);
        }
        self.apply(writes)?;
        {
            let mut state = self.write_state();
            for t in &tables {
                state.remove_table(t.id);
            }
            state.remove_dataset(id);
        }
        self.drop_table_trees(&tables)
    }

    // ----- tables --------------------------------------------------------
}
