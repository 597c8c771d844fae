//! Projects: create, rename, drop.

use super::*;

impl Catalog {
    // ----- projects ------------------------------------------------------

    pub(super) fn refuse_system_project(
        id: ProjectId,
        name: &str,
        action: &'static str,
    ) -> Result<()> {
        if id == system::SYSTEM_PROJECT {
            return Err(CatalogError::Reserved {
                kind: ObjectKind::Project,
                name: name.to_string(),
                action,
            }
            .into());
        }
        Ok(())
    }

    /// Refuses to drop or rename the default project.
    fn refuse_default_project(name: &str, action: &'static str) -> Result<()> {
        if name == DEFAULT_PROJECT {
            return Err(CatalogError::Default {
                kind: ObjectKind::Project,
                name: name.to_string(),
                action,
            }
            .into());
        }
        Ok(())
    }

    /// Creates a project.
    pub fn create_project(&self, name: &str) -> Result<ProjectId> {
        check_user_name(ObjectKind::Project, name)?;
        let _ddl = self.ddl_lock();
        if self.read().project_by_name(name).is_some() {
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Project,
                name: name.to_string(),
            }
            .into());
        }
        let id = ProjectId::generate();
        let now = self.engine.clock.next(&self.engine.storage)?;
        self.apply(vec![Self::project_row(id, name, now)?])?;
        self.write_state().insert_project(ProjectEntry {
            id,
            name: name.to_string(),
            created_at: now,
        });
        Ok(id)
    }

    /// Renames a project; only catalog rows change.
    pub fn rename_project(&self, id: ProjectId, new_name: &str) -> Result<()> {
        check_user_name(ObjectKind::Project, new_name)?;
        let _ddl = self.ddl_lock();
        let entry = self.existing_project(id)?;
        Self::refuse_system_project(id, &entry.name, "renamed")?;
        Self::refuse_default_project(&entry.name, "renamed")?;
        if entry.name == new_name {
            return Ok(());
        }
        if self.read().project_by_name(new_name).is_some() {
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Project,
                name: new_name.to_string(),
            }
            .into());
        }
        self.apply(vec![
            Self::delete_row(system::PROJECTS, &[&entry.name])?,
            Self::project_row(id, new_name, entry.created_at)?,
        ])?;
        let mut state = self.write_state();
        state.remove_project(id);
        state.insert_project(ProjectEntry {
            name: new_name.to_string(),
            ..entry
        });
        self.refresh_layouts(&mut state)
    }

    pub(super) fn existing_project(&self, id: ProjectId) -> Result<ProjectEntry> {
        self.read()
            .project(id)
            .cloned()
            .ok_or_else(|| not_found(ObjectKind::Project, id))
    }

    /// Drops a project, and with [`DropMode::Cascade`] its datasets and
    /// tables.
    pub fn drop_project(&self, id: ProjectId, mode: DropMode) -> Result<()> {
        let _ddl = self.ddl_lock();
        let entry = self.existing_project(id)?;
        Self::refuse_system_project(id, &entry.name, "dropped")?;
        Self::refuse_default_project(&entry.name, "dropped")?;
        let (datasets, tables): (Vec<DatasetEntry>, Vec<TableEntry>) = {
            let state = self.read();
            let datasets: Vec<DatasetEntry> = state.datasets_of(id).into_iter().cloned().collect();
            let tables = datasets
                .iter()
                .flat_map(|d| state.tables_of(d.id))
                .cloned()
                .collect();
            (datasets, tables)
        };
        if mode == DropMode::Restrict && !datasets.is_empty() {
            return Err(CatalogError::NotEmpty {
                kind: ObjectKind::Project,
                name: entry.name,
                children: datasets.len(),
                child_kind: ObjectKind::Dataset,
            }
            .into());
        }
        let project_text = id.to_string();
        let mut writes = vec![Self::delete_row(system::PROJECTS, &[&entry.name])?];
        for d in &datasets {
            writes.push(Self::delete_row(
                system::DATASETS,
                &[&project_text, &d.name],
            )?);
        }
        for t in &tables {
            writes.push(Self::delete_row(
                system::TABLES,
                &[&t.dataset.to_string(), &t.name],
            )?);
        }
        self.apply(writes)?;
        {
            let mut state = self.write_state();
            for t in &tables {
                state.remove_table(t.id);
            }
            for d in &datasets {
                state.remove_dataset(d.id);
            }
            state.remove_project(id);
        }
        self.drop_table_trees(&tables)
    }

    // ----- datasets ------------------------------------------------------
}
