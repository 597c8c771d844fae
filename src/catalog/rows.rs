//! How catalog objects are stored: system-table rows, read at open (with
//! the bootstrap of a new database) and written as atomic batches.

use super::*;

/// One row write to a system table, part of an atomic catalog change.
pub(super) struct SystemWrite {
    pub(super) table: SystemTable,
    pub(super) key: Vec<u8>,
    pub(super) mutation: RowMutation,
}

pub(super) fn text_key(parts: &[&str]) -> Result<Vec<u8>> {
    let tuple: Vec<Element> = parts
        .iter()
        .map(|p| Element::Bytes(p.as_bytes().to_vec()))
        .collect();
    Ok(encode_tuple(&tuple)?)
}

impl Catalog {
    pub(super) fn sys(&self, table: SystemTable) -> Result<&TableStore> {
        self.system_stores
            .iter()
            .find(|(id, _)| *id == table.id)
            .map(|(_, s)| s)
            .ok_or_else(|| CatalogError::Corrupt(format!("no store for {}", table.name)).into())
    }

    // ----- loading -------------------------------------------------------

    pub(super) fn rows_of(&self, table: SystemTable) -> Result<Vec<(Vec<String>, Row)>> {
        let store = self.sys(table)?;
        let kinds = vec![ElementKind::Bytes; table.key.len()];
        let mut rows = Vec::new();
        for row in store.read_rows(&RowSet::all(), ReadOptions::new()) {
            let row = row?;
            let key = decode_tuple(&row.key, &kinds)?
                .into_iter()
                .map(|e| match e {
                    Element::Bytes(b) => String::from_utf8(b).map_err(|_| {
                        CatalogError::Corrupt(format!("a key of {} is not UTF-8", table.name))
                    }),
                    _ => Err(CatalogError::Corrupt(format!(
                        "a key of {} is not text",
                        table.name
                    ))),
                })
                .collect::<Result<Vec<String>, CatalogError>>()?;
            rows.push((key, row));
        }
        Ok(rows)
    }

    pub(super) fn text(
        table: SystemTable,
        row: &Row,
        column: &str,
    ) -> Result<String, CatalogError> {
        row.value(system::FAMILY, column.as_bytes())
            .and_then(|v| String::from_utf8(v.to_vec()).ok())
            .ok_or_else(|| {
                CatalogError::Corrupt(format!("a row of {} has no text '{column}'", table.name))
            })
    }

    pub(super) fn bool(table: SystemTable, row: &Row, column: &str) -> Result<bool, CatalogError> {
        match row.value(system::FAMILY, column.as_bytes()) {
            Some([0]) => Ok(false),
            Some([1]) => Ok(true),
            _ => Err(CatalogError::Corrupt(format!(
                "a row of {} has no boolean '{column}'",
                table.name
            ))),
        }
    }

    pub(super) fn int(table: SystemTable, row: &Row, column: &str) -> Result<i64, CatalogError> {
        row.value(system::FAMILY, column.as_bytes())
            .and_then(|v| <[u8; 8]>::try_from(v).ok())
            .map(i64::from_be_bytes)
            .ok_or_else(|| {
                CatalogError::Corrupt(format!("a row of {} has no integer '{column}'", table.name))
            })
    }

    pub(super) fn id<T>(
        table: SystemTable,
        row: &Row,
        column: &str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<T, CatalogError> {
        let text = Self::text(table, row, column)?;
        parse(&text).ok_or_else(|| {
            CatalogError::Corrupt(format!("'{text}' in {} is not an id", table.name))
        })
    }

    pub(super) fn load(&self) -> Result<()> {
        let mut state = CatalogState::default();
        for (key, row) in self.rows_of(system::PROJECTS)? {
            let t = system::PROJECTS;
            state.insert_project(ProjectEntry {
                id: Self::id(t, &row, "id", ProjectId::parse)?,
                name: key.into_iter().next().unwrap_or_default(),
                created_at: Self::int(t, &row, "created_at")?,
            });
        }
        for (key, row) in self.rows_of(system::DATASETS)? {
            let t = system::DATASETS;
            let [project, name] = <[String; 2]>::try_from(key).map_err(|_| {
                CatalogError::Corrupt("a _datasets key is not (project_id, name)".into())
            })?;
            state.insert_dataset(DatasetEntry {
                id: Self::id(t, &row, "id", DatasetId::parse)?,
                project: ProjectId::parse(&project).ok_or_else(|| {
                    CatalogError::Corrupt(format!("'{project}' is not a project id"))
                })?,
                name,
                created_at: Self::int(t, &row, "created_at")?,
            });
        }
        for (key, row) in self.rows_of(system::TABLES)? {
            let t = system::TABLES;
            let [dataset, name] = <[String; 2]>::try_from(key).map_err(|_| {
                CatalogError::Corrupt("a _tables key is not (dataset_id, name)".into())
            })?;
            let id = Self::id(t, &row, "id", TableId::parse)?;
            if id.is_reserved() {
                continue; // system tables are described by code, not by their rows
            }
            let dataset = DatasetId::parse(&dataset)
                .ok_or_else(|| CatalogError::Corrupt(format!("'{dataset}' is not a dataset id")))?;
            let spec: TableSpec =
                serde_json::from_str(&Self::text(t, &row, "spec")?).map_err(|e| {
                    CatalogError::Corrupt(format!("the spec of table {id} is unreadable: {e}"))
                })?;
            let path = state.table_path(dataset, &name);
            let layout = Layout::new(
                &self.engine.storage,
                id,
                path,
                spec,
                &Placement::OwnTree,
                false,
            )?;
            state.insert_table(TableEntry {
                id,
                dataset,
                name,
                created_at: Self::int(t, &row, "created_at")?,
                next_family_id: u16::try_from(Self::int(t, &row, "next_family_id")?)
                    .unwrap_or(u16::MAX),
                layout: Arc::new(layout),
            });
        }
        // The system tables themselves, as the catalog lists them.
        for table in system::ALL {
            if let Some(store) = self.system_store(table.id) {
                state.insert_table(TableEntry {
                    id: table.id,
                    dataset: system::CATALOG_DATASET,
                    name: table.name.to_string(),
                    created_at: 0,
                    next_family_id: 1,
                    layout: Arc::clone(&store.layout),
                });
            }
        }
        self.load_access(&mut state)?;
        self.load_tablets(&mut state)?;
        self.route_layouts(&mut state)?;
        *self.write_state() = state;
        Ok(())
    }

    pub(super) fn bootstrap(&self) -> Result<()> {
        let _ddl = self.ddl_lock();
        let now = self.engine.clock.next(&self.engine.storage)?;
        let mut writes = vec![
            Self::project_row(system::SYSTEM_PROJECT, system::SYSTEM_PROJECT_NAME, now)?,
            Self::dataset_row(
                system::CATALOG_DATASET,
                system::SYSTEM_PROJECT,
                system::CATALOG_DATASET_NAME,
                now,
            )?,
        ];
        for table in system::ALL {
            writes.push(Self::table_row(
                table.id,
                system::CATALOG_DATASET,
                table.name,
                now,
                &table.spec(),
                1,
            )?);
        }
        let default_project = ProjectId::generate();
        let default_dataset = DatasetId::generate();
        writes.push(Self::project_row(default_project, DEFAULT_PROJECT, now)?);
        writes.push(Self::dataset_row(
            default_dataset,
            default_project,
            DEFAULT_DATASET,
            now,
        )?);
        self.apply(writes)?;
        self.load()
    }

    /// Removes trees that belong to no table, and the keys of locality
    /// groups that no family of their table uses any more.
    pub(super) fn remove_orphan_trees(&self) -> Result<()> {
        let mut orphan_trees = Vec::new();
        let mut orphan_groups = Vec::new();
        {
            let staged = self.staged.lock().unwrap_or_else(|p| p.into_inner());
            let state = self.read();
            for name in self.engine.storage.tree_names() {
                let Some(id) = parse_table_tree_name(&name) else {
                    continue;
                };
                if staged.contains(&id) {
                    continue;
                }
                let Some(table) = state.table(id) else {
                    orphan_trees.push(name);
                    continue;
                };
                let tree = self.engine.storage.tree(&name)?;
                let used: Vec<Vec<u8>> = table
                    .spec()
                    .locality_groups()
                    .into_iter()
                    .map(crate::table::layout::group_key_prefix)
                    .collect();
                // A prefix no group of the spec has (a dropped group's, or
                // bytes no write of this format makes) is never read.
                for prefix in crate::table::layout::stored_group_prefixes(&tree)? {
                    if !used.contains(&prefix) {
                        orphan_groups.push((name.clone(), prefix));
                    }
                }
            }
        }
        for name in orphan_trees {
            self.engine.storage.drop_tree(&name)?;
        }
        for (name, prefix) in orphan_groups {
            let space = self.engine.storage.key_space(&name, &prefix)?;
            self.engine
                .storage
                .clear(&space, crate::table::BULK_CHUNK_ROWS)?;
        }
        Ok(())
    }

    /// Removes the rows of `table` whose key `kept` refuses: rows about
    /// objects that were dropped (a grant, a tablet), which match nothing
    /// (ids are never reused) until the next open removes them here.
    pub(super) fn remove_orphan_rows(
        &self,
        table: SystemTable,
        kept: fn(&CatalogState, &[String]) -> bool,
    ) -> Result<()> {
        let _ddl = self.ddl_lock();
        let mut writes = Vec::new();
        {
            let state = self.read();
            for (key, _) in self.rows_of(table)? {
                if !kept(&state, &key) {
                    let parts: Vec<&str> = key.iter().map(String::as_str).collect();
                    writes.push(Self::delete_row(table, &parts)?);
                }
            }
        }
        if !writes.is_empty() {
            self.apply(writes)?;
        }
        Ok(())
    }

    // ----- system rows ---------------------------------------------------

    pub(super) fn project_row(id: ProjectId, name: &str, created_at: i64) -> Result<SystemWrite> {
        Ok(SystemWrite {
            table: system::PROJECTS,
            key: text_key(&[name])?,
            mutation: RowMutation::new()
                .set(system::FAMILY, "id", id.to_string())
                .set(system::FAMILY, "created_at", created_at.to_be_bytes()),
        })
    }

    pub(super) fn dataset_row(
        id: DatasetId,
        project: ProjectId,
        name: &str,
        created_at: i64,
    ) -> Result<SystemWrite> {
        Ok(SystemWrite {
            table: system::DATASETS,
            key: text_key(&[&project.to_string(), name])?,
            mutation: RowMutation::new()
                .set(system::FAMILY, "id", id.to_string())
                .set(system::FAMILY, "created_at", created_at.to_be_bytes()),
        })
    }

    pub(super) fn table_row(
        id: TableId,
        dataset: DatasetId,
        name: &str,
        created_at: i64,
        spec: &TableSpec,
        next_family_id: u16,
    ) -> Result<SystemWrite> {
        let json = serde_json::to_string(spec).map_err(|e| {
            CatalogError::Corrupt(format!("cannot serialise the spec of {name}: {e}"))
        })?;
        // A spec that does not read back as itself would make the catalog
        // unreadable, and with it every table: refuse it before it lands.
        let unreadable = match serde_json::from_str::<TableSpec>(&json) {
            Ok(read) if read == *spec => None,
            Ok(_) => Some("its definition does not read back as written".to_string()),
            Err(e) => Some(format!("its definition cannot be read back: {e}")),
        };
        if let Some(reason) = unreadable {
            return Err(CatalogError::InvalidSpec {
                table: name.to_string(),
                reason,
            }
            .into());
        }
        Ok(SystemWrite {
            table: system::TABLES,
            key: text_key(&[&dataset.to_string(), name])?,
            mutation: RowMutation::new()
                .set(system::FAMILY, "id", id.to_string())
                .set(system::FAMILY, "created_at", created_at.to_be_bytes())
                .set(system::FAMILY, "spec", json)
                .set(
                    system::FAMILY,
                    "next_family_id",
                    i64::from(next_family_id).to_be_bytes(),
                ),
        })
    }

    pub(super) fn delete_row(table: SystemTable, parts: &[&str]) -> Result<SystemWrite> {
        Ok(SystemWrite {
            table,
            key: text_key(parts)?,
            mutation: RowMutation::new().delete_row(),
        })
    }

    /// Applies system-row writes as one atomic batch.
    pub(super) fn apply(&self, writes: Vec<SystemWrite>) -> Result<()> {
        let mut rows: Vec<(&TableStore, &[u8], &RowMutation)> = Vec::with_capacity(writes.len());
        for w in &writes {
            rows.push((self.sys(w.table)?, &w.key, &w.mutation));
        }
        crate::table::mutate_rows_atomically(&self.engine, &rows)
    }
}
