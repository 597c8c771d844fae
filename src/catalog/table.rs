//! Tables: create (staged, then committed), rename, alter, drop, compact.

use super::spec::check_gc;
use super::*;

impl Catalog {
    pub(super) fn existing_table(&self, id: TableId) -> Result<TableEntry> {
        self.read()
            .table(id)
            .cloned()
            .ok_or_else(|| not_found(ObjectKind::Table, id))
    }

    pub(super) fn refuse_system_table(entry: &TableEntry, action: &'static str) -> Result<()> {
        if entry.id.is_reserved() {
            return Err(CatalogError::Reserved {
                kind: ObjectKind::Table,
                name: entry.layout.name.clone(),
                action,
            }
            .into());
        }
        Ok(())
    }

    /// Checks a spec and assigns family ids from `next_family_id` to families
    /// that have none yet (those not in `existing`). Returns the next id.
    pub(super) fn prepare_spec(
        path: &str,
        mut spec: TableSpec,
        existing: Option<&TableSpec>,
        mut next_family_id: u16,
    ) -> Result<(TableSpec, u16)> {
        let invalid = |reason: String| CatalogError::InvalidSpec {
            table: path.to_string(),
            reason,
        };
        let mut column_names: Vec<&str> = Vec::new();
        match &spec.key {
            RowKeySpec::Key { .. } => column_names.push(KEY_COLUMN),
            RowKeySpec::Generated => {}
            RowKeySpec::Columns(columns) => {
                if columns.is_empty() {
                    return Err(invalid("a primary key needs at least one column".into()).into());
                }
                for c in columns {
                    check_name(ObjectKind::Column, &c.name)?;
                    if crate::table::spec::key_element_kind(&c.value_type).is_none() {
                        return Err(invalid(format!(
                            "primary key column '{}' has type {:?}, which cannot be part of a row key",
                            c.name, c.value_type
                        ))
                        .into());
                    }
                    column_names.push(&c.name);
                }
            }
        }
        let mut family_names: Vec<&str> = Vec::new();
        for family in &spec.families {
            check_name(ObjectKind::Family, &family.name)?;
            check_name(ObjectKind::LocalityGroup, &family.locality_group)?;
            if family_names.contains(&family.name.as_str()) {
                return Err(
                    invalid(format!("column family '{}' is declared twice", family.name)).into(),
                );
            }
            family_names.push(&family.name);
            check_gc(path, &family.name, &family.gc)?;
            if let (Some(_), Some(c)) = (
                family.gc.max_age_micros,
                family.columns.iter().find(|c| !c.nullable),
            ) {
                return Err(invalid(format!(
                    "column family '{}' has a TTL, so its NOT NULL column '{}' could expire; declare the column nullable or put it in a family without a TTL",
                    family.name, c.name
                ))
                .into());
            }
            if family.qualifier_type.is_some() {
                column_names.push(&family.name);
            }
            for c in &family.columns {
                check_name(ObjectKind::Column, &c.name)?;
            }
            column_names.extend(family.columns.iter().map(|c| c.name.as_str()));
        }
        let mut sorted = column_names.clone();
        sorted.sort_unstable();
        if let Some(dup) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(invalid(format!("column '{}' is defined twice", dup[0])).into());
        }
        // Refused when new: a table that has one from before stays
        // alterable (its UPDATE and DELETE need it renamed).
        let rowid = ROWID_COLUMN;
        let had_rowid = existing.is_some_and(|e| {
            e.family(rowid).is_some()
                || e.families.iter().any(|f| f.column(rowid).is_some())
                || matches!(&e.key, RowKeySpec::Columns(c) if c.iter().any(|c| c.name == rowid))
        });
        if column_names.contains(&rowid) && !had_rowid {
            return Err(invalid(format!(
                "column '{rowid}' is reserved: UPDATE and DELETE name the row key so; name the column otherwise"
            ))
            .into());
        }
        for family in &mut spec.families {
            match existing.and_then(|e| e.family(&family.name)) {
                // A family's cells stay in its group's key range: moving it
                // would leave them behind, unread.
                Some(old) if old.locality_group != family.locality_group => {
                    return Err(invalid(format!(
                        "column family '{}' is in locality group '{}' and cannot move to '{}'",
                        family.name, old.locality_group, family.locality_group
                    ))
                    .into());
                }
                Some(old) => family.id = old.id,
                None => {
                    // The last id is the delete markers'.
                    if next_family_id == crate::table::layout::MARK_FAMILY {
                        return Err(
                            invalid("the table has used up its 65535 family ids".into()).into()
                        );
                    }
                    family.id = next_family_id;
                    next_family_id += 1;
                }
            }
        }
        Ok((spec, next_family_id))
    }

    /// Creates a table in a dataset.
    pub fn create_table(&self, dataset: DatasetId, name: &str, spec: TableSpec) -> Result<TableId> {
        let staged = self.stage_table(dataset, name, spec, false)?;
        self.commit_table(staged, false)
    }

    /// Checks a new table (name, spec, and that the name is free unless
    /// `replace`) and creates its tree, without a catalog row yet.
    pub fn stage_table(
        &self,
        dataset: DatasetId,
        name: &str,
        spec: TableSpec,
        replace: bool,
    ) -> Result<StagedTable> {
        check_user_name(ObjectKind::Table, name)?;
        let _ddl = self.ddl_lock();
        let d = self.existing_dataset(dataset)?;
        self.refuse_in_system_project(d.project)?;
        let path = self.read().table_path(dataset, name);
        if !replace {
            self.refuse_taken_table_name(dataset, name)?;
        }
        let (spec, next_family_id) = Self::prepare_spec(&path, spec, None, 0)?;
        let id = TableId::generate();
        self.staged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id);
        let layout = Layout::new(
            &self.engine.storage,
            id,
            path,
            spec,
            &Placement::OwnTree,
            false,
        );
        let layout = match layout {
            Ok(layout) => Arc::new(layout),
            Err(e) => {
                self.unstage(id);
                return Err(e.into());
            }
        };
        Ok(StagedTable {
            dataset,
            name: name.to_string(),
            next_family_id,
            layout,
        })
    }

    pub(super) fn refuse_taken_table_name(&self, dataset: DatasetId, name: &str) -> Result<()> {
        if self.read().table_by_name(dataset, name).is_some() {
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Table,
                name: self.read().table_path(dataset, name),
            }
            .into());
        }
        Ok(())
    }

    pub(super) fn unstage(&self, id: TableId) {
        self.staged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Makes a staged table visible under its name in one atomic catalog
    /// write. With `replace`, a table of that name is replaced by it (its
    /// catalog row is overwritten in the same write, its tree dropped
    /// after); without, a table of that name makes this fail. On failure
    /// the staged table is abandoned.
    pub fn commit_table(&self, staged: StagedTable, replace: bool) -> Result<TableId> {
        let result = self.commit_staged(&staged, replace);
        self.unstage(staged.layout.id);
        match result {
            Ok((id, replaced)) => {
                // The new table is committed: only the old one's tree goes
                // now. If that fails the statement has still succeeded; the
                // next open removes trees that no table owns.
                if let Some(old) = replaced {
                    let _ = self.drop_table_trees(&[old]);
                }
                Ok(id)
            }
            Err(e) => {
                let _ = self.drop_table_trees_of(&staged.layout);
                Err(e)
            }
        }
    }

    /// Writes the catalog row of a staged table; returns its id and the
    /// table it replaced.
    pub(super) fn commit_staged(
        &self,
        staged: &StagedTable,
        replace: bool,
    ) -> Result<(TableId, Option<TableEntry>)> {
        let _ddl = self.ddl_lock();
        let StagedTable {
            dataset,
            name,
            next_family_id,
            layout,
        } = staged;
        let d = self.existing_dataset(*dataset)?;
        self.refuse_in_system_project(d.project)?;
        let old = self.read().table_by_name(*dataset, name).cloned();
        if old.is_some() && !replace {
            self.refuse_taken_table_name(*dataset, name)?;
        }
        let id = layout.id;
        let now = self.engine.clock.next(&self.engine.storage)?;
        // The row of the old table, if any, has the same key: this write
        // replaces it whole (`id`, `spec`, … are all set anew).
        self.apply(vec![Self::table_row(
            id,
            *dataset,
            name,
            now,
            &layout.spec,
            *next_family_id,
        )?])?;
        {
            let mut state = self.write_state();
            if let Some(old) = &old {
                state.remove_table(old.id);
            }
            state.insert_table(TableEntry {
                id,
                dataset: *dataset,
                name: name.clone(),
                created_at: now,
                next_family_id: *next_family_id,
                layout: Arc::clone(layout),
            });
        }
        Ok((id, old))
    }

    /// A store that writes into a staged table.
    pub fn staged_store(&self, staged: &StagedTable) -> TableStore {
        TableStore::new(Arc::clone(&self.engine), Arc::clone(&staged.layout))
    }

    /// Drops the tree of a staged table that will not be committed.
    pub fn abandon_table(&self, staged: StagedTable) -> Result<()> {
        self.unstage(staged.layout.id);
        self.drop_table_trees_of(&staged.layout)
    }

    /// Renames a table (also moves it to `new_dataset`); only catalog rows
    /// change.
    pub fn rename_table(&self, id: TableId, new_dataset: DatasetId, new_name: &str) -> Result<()> {
        check_user_name(ObjectKind::Table, new_name)?;
        let _ddl = self.ddl_lock();
        let entry = self.existing_table(id)?;
        Self::refuse_system_table(&entry, "renamed")?;
        let target = self.existing_dataset(new_dataset)?;
        self.refuse_in_system_project(target.project)?;
        if entry.dataset == new_dataset && entry.name == new_name {
            return Ok(());
        }
        if self.read().table_by_name(new_dataset, new_name).is_some() {
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::Table,
                name: self.read().table_path(new_dataset, new_name),
            }
            .into());
        }
        self.apply(vec![
            Self::delete_row(system::TABLES, &[&entry.dataset.to_string(), &entry.name])?,
            Self::table_row(
                id,
                new_dataset,
                new_name,
                entry.created_at,
                entry.spec(),
                entry.next_family_id,
            )?,
        ])?;
        let mut state = self.write_state();
        state.remove_table(id);
        state.insert_table(TableEntry {
            dataset: new_dataset,
            name: new_name.to_string(),
            ..entry
        });
        self.refresh_layouts(&mut state)
    }

    /// What [`Catalog::drop_table`] commits first, and nothing after it:
    /// the table's catalog row removed, as a process that died there left
    /// it (for tests of what the next open does).
    #[cfg(test)]
    pub(crate) fn drop_table_row_only(&self, id: TableId) -> Result<()> {
        let entry = self.existing_table(id)?;
        let dataset = entry.dataset.to_string();
        self.apply(vec![Self::delete_row(
            system::TABLES,
            &[&dataset, &entry.name],
        )?])
    }

    /// Drops a table and its data.
    pub fn drop_table(&self, id: TableId) -> Result<()> {
        let _ddl = self.ddl_lock();
        let entry = self.existing_table(id)?;
        Self::refuse_system_table(&entry, "dropped")?;
        self.apply(vec![Self::delete_row(
            system::TABLES,
            &[&entry.dataset.to_string(), &entry.name],
        )?])?;
        self.write_state().remove_table(id);
        self.drop_table_trees(&[entry])
    }

    /// Replaces a table's spec by `change(old spec)`, keeping family ids.
    ///
    /// A GC policy that gets looser must not bring back what the old one
    /// hid. Writes wait while it takes over: versions beyond the old
    /// `max_versions` are compacted away, and a loosened TTL leaves a floor
    /// (`hidden_before`) below which versions stay hidden. Cells of dropped
    /// families are removed after the change.
    pub fn alter_table(
        &self,
        id: TableId,
        change: impl FnOnce(&TableSpec) -> Result<TableSpec>,
    ) -> Result<()> {
        self.alter_table_filling(id, change, |_| Ok(()))
    }

    /// [`Catalog::alter_table`] that first runs `fill` on the table as it
    /// is, while every write waits: what `fill` writes (the value of a new
    /// column in every row) and the new spec take effect together, and a
    /// write planned for the old spec is refused under its row locks
    /// ([`crate::table::TableError::Changed`]) rather than applied.
    pub fn alter_table_filling(
        &self,
        id: TableId,
        change: impl FnOnce(&TableSpec) -> Result<TableSpec>,
        fill: impl FnOnce(&TableStore) -> Result<()>,
    ) -> Result<()> {
        let _ddl = self.ddl_lock();
        let entry = self.existing_table(id)?;
        Self::refuse_system_table(&entry, "changed")?;
        let old = entry.spec().clone();
        let path = entry.layout.name.clone();
        let (mut spec, next_family_id) =
            Self::prepare_spec(&path, change(&old)?, Some(&old), entry.next_family_id)?;
        let looser =
            |old: Option<u64>, new: Option<u64>| old.is_some_and(|o| new.is_none_or(|n| n > o));
        let mut more_versions = Vec::new();
        let mut longer_ttl = Vec::new();
        for family in &spec.families {
            let Some(before) = old.family(&family.name) else {
                continue;
            };
            if looser(
                before.gc.max_versions.map(u64::from),
                family.gc.max_versions.map(u64::from),
            ) {
                more_versions.push((before.id, before.gc));
            }
            let age = |gc: &GcPolicy| gc.max_age_micros.map(|a| a.max(0) as u64);
            if let (true, Some(old_age)) = (
                looser(age(&before.gc), age(&family.gc)),
                before.gc.max_age_micros,
            ) {
                longer_ttl.push((family.name.clone(), old_age));
            }
        }
        let writes_wait = self.engine.locks.write_every();
        let store = TableStore::new(Arc::clone(&self.engine), Arc::clone(&entry.layout));
        fill(
            &store
                .clone()
                .with_durability(crate::storage::Durability::Eventual),
        )?;
        for policy in more_versions {
            store.compact_checked(&crate::table::unchecked, Some(policy))?;
        }
        let now = crate::clock::wall_micros();
        for (name, old_age) in longer_ttl {
            if let Some(family) = spec.families.iter_mut().find(|f| f.name == name) {
                family.hidden_before = family.hidden_before.max(Some(now.saturating_sub(old_age)));
            }
        }
        let layout = Layout::new(
            &self.engine.storage,
            id,
            path,
            spec.clone(),
            &Placement::OwnTree,
            false,
        )?;
        let layout = Arc::new(self.routed(&self.read(), id, layout)?);
        let row = Self::table_row(
            id,
            entry.dataset,
            &entry.name,
            entry.created_at,
            &spec,
            next_family_id,
        )?;
        self.apply(vec![row])?;
        writes_wait.supersede(&entry.layout);
        self.write_state().insert_table(TableEntry {
            next_family_id,
            layout: Arc::clone(&layout),
            ..entry
        });
        drop(writes_wait);
        let dropped_family = old.families.iter().any(|f| spec.family(&f.name).is_none());
        if dropped_family {
            // The change is committed: a group no family uses is emptied
            // even when compaction fails (the next open retries both).
            let compacted = TableStore::new(Arc::clone(&self.engine), layout).compact();
            self.remove_orphan_trees()?;
            compacted?;
        }
        Ok(())
    }

    /// Compacts table `id` unless nothing changed since its last complete
    /// pass; each batch is applied only while the layout it was judged by is
    /// still the table's, under the DDL lock.
    pub fn compact_table(&self, id: TableId) -> Result<u64> {
        let Some(store) = self.store(id) else {
            return Ok(0);
        };
        let check = |layout: &Arc<Layout>, apply: &mut dyn FnMut() -> Result<()>| {
            let _ddl = self.ddl_lock();
            let current = self
                .read()
                .table(id)
                .is_some_and(|t| Arc::ptr_eq(&t.layout, layout));
            if current {
                apply()?;
            }
            Ok(current)
        };
        // Read before the pass: a write during it moves the epoch, and the
        // next pass runs (its own deletes move it too, once).
        let epoch = store.layout.write_epoch();
        if !store.layout.needs_compaction(epoch) {
            return Ok(0);
        }
        let removed = match store.compact_checked(&check, None) {
            Ok(removed) => removed,
            // The table was dropped during the pass: its tree is gone (so
            // reading it failed), and nothing of it is left to compact.
            Err(_) if self.read().table(id).is_none() => return Ok(0),
            Err(e) => return Err(e),
        };
        if !store.layout.is_superseded() {
            store.layout.compacted(epoch);
        }
        Ok(removed)
    }

    pub(super) fn drop_table_trees(&self, tables: &[TableEntry]) -> Result<()> {
        for t in tables {
            self.drop_table_trees_of(&t.layout)?;
        }
        Ok(())
    }

    pub(super) fn drop_table_trees_of(&self, layout: &Layout) -> Result<()> {
        // A write that waits for its row locks now finds the table gone
        // instead of writing into a dropped tree.
        self.engine.locks.write_every().supersede(layout);
        let name = crate::table::layout::table_tree_name(layout.id);
        // First: a failure to drop the tree here must not keep the
        // workers' copies (the catalog no longer names the table).
        self.drop_on_workers(layout.id, &name);
        self.engine.storage.drop_tree(&name)?;
        Ok(())
    }

    /// Rebuilds every table layout, so qualified names in messages follow a
    /// rename.
    pub(super) fn refresh_layouts(&self, state: &mut CatalogState) -> Result<()> {
        let ids: Vec<TableId> = state
            .tables
            .keys()
            .copied()
            .filter(|id| !id.is_reserved())
            .collect();
        for id in ids {
            let Some(entry) = state.tables.get(&id) else {
                continue;
            };
            let path = state.table_path(entry.dataset, &entry.name);
            if path == entry.layout.name {
                continue;
            }
            let layout = Arc::new(entry.layout.renamed(path));
            if let Some(entry) = state.tables.get_mut(&id) {
                entry.layout = layout;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_cannot_move_to_another_locality_group() {
        let spec = TableSpec::new()
            .with_family(FamilySpec::new("f"))
            .with_family(FamilySpec::new("blob").with_locality_group("blobs"));
        let (old, next) = Catalog::prepare_spec("p.d.t", spec, None, 0).expect("valid");
        let mut moved = old.clone();
        moved.families[1].locality_group = "default".into();
        let err =
            Catalog::prepare_spec("p.d.t", moved, Some(&old), next).expect_err("a move is refused");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("p.d.t") && text.contains("'blob'") && text.contains("'blobs'"),
            "{text}"
        );
        // Staying put is fine.
        assert!(Catalog::prepare_spec("p.d.t", old.clone(), Some(&old), next).is_ok());
    }
}
