//! Moving a tablet to another process ([`Catalog::move_tablet`]).
//!
//! A move clears the target's copy of the tablet's range (what a move that
//! stopped half-way left there) and copies the rows while writes go on,
//! watching the keys they write ([`crate::storage::Watch`]). It copies
//! those keys again, in a few rounds, until few are left; then it holds
//! every write to the database, copies the last of them, makes the target
//! the tablet's home in one catalog change, and lets writes go on. Writes
//! wait only for that last part; only in a locality group where more keys
//! were written than its watch keeps do they wait for a copy of the group's
//! whole range again. A write whose writer gave up waiting for it (its
//! store stalled, its worker did not answer in time) may still be on its
//! way: before the copy at the source and the target, and again at the
//! source before its last part, the move settles such writes, so that each
//! lands before the copy reads its key, or never. A crash before the
//! catalog change leaves the tablet where it was; after it, the tablet is
//! at its target. The source's copy stays, so that a query that began
//! before the move reads it whole; a copy in this process's store is
//! removed at the next open, one on a worker is never read again and is
//! cleared by the next move of that range to it.

use std::ops::Bound;

use super::move_steps::{self, reached, MoveStep};
use super::routing::{all_to, bounds, home};
use super::*;
use crate::ids::TabletId;
use crate::storage::{BackendError, Home, StorageError, Tree};

/// What the worker's store `name` reported, as an error that names it.
fn failed_at(name: &str) -> impl FnOnce(BackendError) -> StorageError + '_ {
    move |source| StorageError::Away {
        home: name.to_string(),
        source,
    }
}

/// Rounds in which a move copies again, without locks, the keys written
/// while it copied: each round copies what writes did during the one
/// before. Writes to a busy table may never let up, so they are bounded.
const UNLOCKED_ROUNDS: usize = 8;
/// Written keys few enough for a move to copy them under every row lock.
const KEYS_COPIED_LOCKED: usize = 1024;
/// The most written keys a move keeps per locality group (their memory is
/// about a hundred bytes each). Past them it copies the whole range again
/// under every row lock, as if it had watched nothing.
const KEYS_NOTED: usize = 256 * 1024;

/// One locality group's key space as a move copies it: from its source,
/// to its target, and the keys written meanwhile.
struct GroupCopy {
    from: Tree,
    to: Tree,
    watch: crate::storage::Watch,
}

impl Catalog {
    /// Copies the entries of `from` in `(lo, hi)` to `to`.
    fn copy_range(
        &self,
        from: &Tree,
        to: &Tree,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
    ) -> Result<()> {
        let entries = from
            .range(lo.clone(), hi.clone(), false)
            .map(|entry| entry.map(|(key, value)| (key, Some(value))));
        self.write_copies(to, entries)
    }

    /// Copies again the keys written to `group` since they were last
    /// copied (`last`: and every key of a write that failed), each as its
    /// source holds it now: a key the source no longer holds is deleted.
    fn copy_written(&self, group: &GroupCopy, last: bool) -> Result<()> {
        let keys = match last {
            true => group.watch.take_all(),
            false => group.watch.take(),
        };
        let entries = keys.into_iter().map(|key| {
            let at = Bound::Included(key.to_vec());
            let value = group.from.range(at.clone(), at, false).next().transpose()?;
            Ok::<_, crate::Error>((key, value.map(|(_, value)| value)))
        });
        self.write_copies(&group.to, entries)
    }

    /// Settles the writes given up on at `home`: in this process's store,
    /// those a stall left queued ([`Storage::settle`](crate::storage::Storage::settle));
    /// on a worker, the calls it did not answer in time
    /// ([`Backend::settle`](crate::storage::Backend::settle)).
    fn settle(&self, home: &Home) -> Result<()> {
        match home {
            Home::Here => self.engine.storage.settle()?,
            Home::Away { store, name } => store.settle().map_err(failed_at(name))?,
        }
        Ok(())
    }

    /// Moves the tablet of table `id` that holds the key `at` to `worker`
    /// (`None`: this process), as the module doc says; returns its id.
    pub fn move_tablet(&self, id: TableId, at: &[u8], worker: Option<String>) -> Result<TabletId> {
        let _ddl = self.ddl_lock();
        let entry = self.existing_table(id)?;
        Self::refuse_system_table(&entry, "moved")?;
        let current = self.read().tablets_of(id);
        let Some(tablet) = current.iter().find(|t| t.contains(at)).cloned() else {
            return Err(CatalogError::Corrupt(format!(
                "no tablet of {} holds the key",
                entry.layout.name
            ))
            .into());
        };
        if tablet.worker == worker {
            return Err(CatalogError::CannotMove {
                table: entry.layout.name.clone(),
                reason: format!(
                    "tablet {} is already served by {}",
                    tablet.id,
                    worker.as_deref().unwrap_or("this process")
                ),
            }
            .into());
        }
        let (lo, hi) = bounds(&tablet);
        let stored = |worker: &Option<String>| StoredTablet {
            id: tablet.id,
            worker: worker.clone(),
        };
        let (source_home, target_home) = (
            home(&self.workers, &stored(&tablet.worker)),
            home(&self.workers, &stored(&worker)),
        );
        let source = all_to(source_home.clone());
        let target = all_to(target_home.clone());
        // Writes go on while the range is copied; the keys they write are
        // watched from before the copy begins, and copied again after it.
        let groups = self
            .local_key_spaces(id)?
            .iter()
            .map(|tree| {
                Ok(GroupCopy {
                    from: tree.with_routes(source.clone())?,
                    to: tree.with_routes(target.clone())?,
                    watch: self.engine.storage.watch(
                        tree,
                        (lo.clone(), hi.clone()),
                        move_steps::noted_limit(id).unwrap_or(KEYS_NOTED),
                    ),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // A write given up on before the watches began was not noted: it
        // lands before the copy, or never. At the target, an old one would
        // land on the copy.
        self.settle(&source_home)?;
        self.settle(&target_home)?;
        for group in &groups {
            self.delete_range(&group.to, &lo, &hi)?;
            reached(id, MoveStep::Cleared);
            self.copy_range(&group.from, &group.to, &lo, &hi)?;
            reached(id, MoveStep::Copying);
        }
        for _ in 0..UNLOCKED_ROUNDS {
            let written: usize = groups.iter().map(|g| g.watch.written()).sum();
            if written <= KEYS_COPIED_LOCKED {
                break;
            }
            for group in &groups {
                self.copy_written(group, false)?;
            }
            reached(id, MoveStep::CopiedAgain);
        }
        // The last keys are copied while no write can run, so the target
        // holds what the source holds when the catalog changes: in a group
        // where more were written than its watch keeps, all of them.
        let writes_wait = self.engine.locks.write_every();
        // Every write has answered its writer now. One that failed while
        // the move copied was noted and its keys kept for this copy; once
        // settled, it has landed before the copy reads them, or never will.
        self.settle(&source_home)?;
        for group in &groups {
            if group.watch.overflowed() {
                self.delete_range(&group.to, &lo, &hi)?;
                self.copy_range(&group.from, &group.to, &lo, &hi)?;
            } else {
                self.copy_written(group, true)?;
            }
        }
        if let Home::Away { store, name } = &target_home {
            store.flush().map_err(failed_at(name))?;
        }
        reached(id, MoveStep::Flushed);
        // The new map and layout are made before the catalog changes, so
        // that nothing can fail between the change and its use.
        let mut tablets = self.read().tablets.get(&id).cloned().unwrap_or_default();
        tablets.insert(tablet.start.clone(), stored(&worker));
        let mut layout = Layout::new(
            &self.engine.storage,
            id,
            entry.layout.name.clone(),
            entry.spec().clone(),
            &Placement::OwnTree,
            false,
        )?;
        if let Some(routes) = self.routes_from(&tablets) {
            layout = layout.with_routes(&routes)?;
        }
        let now = self.timestamp()?;
        // A table never split gets its first tablet's row here.
        self.apply(vec![Self::tablet_row(
            id,
            &tablet.start,
            tablet.id,
            worker.as_deref(),
            now,
        )?])?;
        reached(id, MoveStep::Committed);
        {
            let mut state = self.write_state();
            state.tablets.insert(id, tablets);
            state.insert_table(TableEntry {
                layout: Arc::new(layout),
                ..entry.clone()
            });
        }
        writes_wait.supersede(&entry.layout);
        Ok(tablet.id)
    }
}
