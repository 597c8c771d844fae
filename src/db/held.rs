//! The tablet data a worker holds for its master: the keys of the tablets
//! it serves, with the keys the master would keep them under. The master
//! names a table's tree (`t:` and the table's id); the worker keeps it in
//! a tree of its own, `h:` and that id ([`held_tree_name`]), which its
//! catalog does not take for a tree of one of its own tables, so that
//! opening the worker's database never removes it as an orphan. The
//! worker's service reads and writes them through [`held_entries`] and
//! [`apply_held`] and removes them with [`drop_held`], and its tasks scan
//! them through [`held_store`]; only those trees are reachable, never the
//! worker's own catalog or tables.

use std::ops::Bound;

use crate::storage::{RangeIter, Write, WriteBatch};
use crate::table::layout::{
    held_tree_name, parse_held_tree_name, parse_table_tree_name, table_tree_name,
};
use crate::{Db, Result};

/// The entries of the table tree `name` in `(lo, hi)`, in key order or
/// reversed; none for a table the worker holds nothing of. A read never
/// makes the tree: an empty one would list the table in [`held_tables`].
pub fn held_entries(
    db: &Db,
    name: &[u8],
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
) -> Result<RangeIter> {
    let storage = &db.inner.engine.storage;
    let tree_name = held_tree_name(held_table(name)?);
    if !storage.has_tree(&tree_name) {
        return Ok(RangeIter::empty());
    }
    Ok(storage.tree(&tree_name)?.range(lo, hi, reverse))
}

/// Applies `writes` to table trees atomically; durable on return when
/// `durable`. Each write goes through its locality group's key space,
/// under the worker's lock of its row, as a write of the worker's own
/// would: a scan the worker runs of these tablets (a task of a
/// distributed query) then never reads half of a row's batch.
pub fn apply_held(db: &Db, writes: Vec<(Vec<u8>, Vec<Write>)>, durable: bool) -> Result<()> {
    let durability = match durable {
        true => crate::storage::Durability::Immediate,
        false => crate::storage::Durability::Eventual,
    };
    let storage = &db.inner.engine.storage;
    let mut batch = WriteBatch::with_durability(durability);
    let mut stripes = Vec::new();
    for (name, tree_writes) in writes {
        let id = held_table(&name)?;
        let tree_name = held_tree_name(id);
        // The key spaces this table's writes went to, by group prefix
        // (a table has a few): opened once per call, not once per write.
        let mut spaces: Vec<(Vec<u8>, crate::storage::Tree)> = Vec::new();
        for write in tree_writes {
            let key = match &write {
                Write::Put(key, _) | Write::Delete(key) => key.clone(),
            };
            let (group, row) = split_cell_key(&key).unwrap_or((&[], &[]));
            if !row.is_empty() {
                stripes.push(db.inner.engine.locks.stripe(id.as_bytes(), row));
            }
            let at = spaces
                .iter()
                .position(|(prefix, _)| prefix.as_slice() == group);
            let tree = match at {
                Some(at) => &spaces[at].1,
                None => {
                    spaces.push((group.to_vec(), storage.key_space(&tree_name, group)?));
                    &spaces[spaces.len() - 1].1
                }
            };
            let rest = key.slice(group.len(), key.len() - group.len());
            match write {
                Write::Put(_, value) => batch.put(tree, rest, value),
                Write::Delete(_) => batch.delete(tree, rest),
            }
        }
    }
    if durable && batch.bytes() == 0 {
        // No writes: a flush, so that what came before is durable.
        return Ok(storage.flush()?);
    }
    let _rows = db.inner.engine.locks.write_all(stripes);
    Ok(storage.apply(batch)?)
}

/// Waits until every write handed to `db`'s store was applied or
/// refused, also one whose caller stopped waiting (a stall): when it
/// returns, none of them can still land (see `Storage::settle`).
pub fn settle_held(db: &Db) -> Result<()> {
    Ok(db.inner.engine.storage.settle()?)
}

/// Removes what `db` holds of the master's table tree `name` (the master
/// dropped the table); whether it held any.
pub fn drop_held(db: &Db, name: &[u8]) -> Result<bool> {
    let id = held_table(name)?;
    Ok(db.inner.engine.storage.drop_tree(&held_tree_name(id))?)
}

/// The master's tables `db` holds tablets of, in id order.
pub fn held_tables(db: &Db) -> Vec<crate::TableId> {
    let mut ids: Vec<crate::TableId> = db
        .inner
        .engine
        .storage
        .tree_names()
        .iter()
        .filter_map(|name| parse_held_tree_name(name))
        .collect();
    ids.sort();
    ids
}

/// Of the tables `ids`, those `db` dropped while workers held tablets of
/// them. A table its catalog does not know and never recorded dropping
/// is not one: a database restored from an older copy of its files does
/// not know the tables made since, and their tablets must stay.
pub fn dropped_tables(db: &Db, ids: &[crate::TableId]) -> Result<Vec<crate::TableId>> {
    let catalog = db.catalog();
    let mut dropped = Vec::new();
    for &id in ids {
        let known = catalog.read().table(id).is_some();
        if !known && catalog.dropped_from_workers(id)? {
            dropped.push(id);
        }
    }
    Ok(dropped)
}

/// The table whose tree is `name`, when it is a user table's.
fn held_table(name: &[u8]) -> Result<crate::TableId> {
    match parse_table_tree_name(name) {
        Some(id) if !id.is_reserved() => Ok(id),
        _ => Err(crate::table::TableError::InvalidArgument {
            table: String::from_utf8_lossy(name).into_owned(),
            message: "not the tree of a table".into(),
        }
        .into()),
    }
}

/// A table tree's key split into its locality group's key prefix and its
/// encoded row key (what row locks are taken on); `None` for a key that
/// does not start with both, which goes to the whole tree unlocked.
fn split_cell_key(key: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut reader = crate::keys::KeyReader::new(key);
    let group = reader.encoded_bytes().ok()?;
    let row = reader.encoded_bytes().ok()?;
    Some((group, row))
}

/// A read-only store over the tablets of the master's table `id` (named
/// `name`, declared as `spec`) that `db` holds: a task of a distributed
/// query reads them through it as the master would read its own.
pub fn held_store(
    db: &Db,
    id: crate::TableId,
    name: String,
    spec: crate::table::spec::TableSpec,
) -> Result<crate::table::TableStore> {
    held_table(&table_tree_name(id))?;
    let engine = &db.inner.engine;
    let layout = crate::table::layout::Layout::new(
        &engine.storage,
        id,
        name,
        spec,
        &crate::table::layout::Placement::Held,
        true,
    )?;
    Ok(crate::table::TableStore::new(
        std::sync::Arc::clone(engine),
        std::sync::Arc::new(layout),
    ))
}

/// How many keys the tasks `db` ran over its tablets of table `table`
/// (of its master) visited since it opened: for tests that a query ran
/// where its tablets are. The master's own reads of them
/// ([`held_entries`]) are not counted.
pub fn held_keys_read(db: &Db, table: crate::TableId) -> Result<u64> {
    let storage = &db.inner.engine.storage;
    let name = held_tree_name(table);
    let prefixes = crate::table::layout::stored_group_prefixes(&storage.tree(&name)?)?;
    let mut read = 0;
    for prefix in prefixes {
        read += storage.key_space(&name, &prefix)?.keys_read();
    }
    Ok(read)
}

/// How many entries table `table`'s own tree holds in `db` (its rows this
/// process stores, whatever the tablet map says): for tests of what a
/// move leaves behind.
pub fn stored_entries(db: &Db, table: crate::TableId) -> Result<usize> {
    let tree = db.inner.engine.storage.tree(&table_tree_name(table))?;
    let mut count = 0;
    for entry in tree.range(Bound::Unbounded, Bound::Unbounded, false) {
        entry?;
        count += 1;
    }
    Ok(count)
}

/// Copies the rows of `db`'s own table `table` into the tree a worker
/// holds that table's tablets in: a database that plays both master and
/// worker, for tests of what a worker's tasks read.
#[cfg(test)]
pub(crate) fn hold_own_rows(db: &Db, table: crate::TableId) -> Result<()> {
    let name = table_tree_name(table);
    let tree = db.inner.engine.storage.tree(&name)?;
    let writes = tree
        .range(Bound::Unbounded, Bound::Unbounded, false)
        .map(|entry| entry.map(|(key, value)| Write::Put(key, value)))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    apply_held(db, vec![(name, writes)], false)
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;

    use crate::table::layout::table_tree_name;
    use crate::{Db, TableSpec};

    /// Reading the tablets of a table a worker holds nothing of finds no
    /// entries and leaves no tree behind that would list it as held.
    #[test]
    fn reading_a_table_not_held_makes_no_tree() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let db = Db::open(dir.path())?;
        let id = db
            .default_dataset()?
            .create_table("t", TableSpec::new())?
            .id();
        let name = table_tree_name(id);
        let read = |reverse| -> Result<usize, Box<dyn std::error::Error>> {
            let entries =
                super::held_entries(&db, &name, Bound::Unbounded, Bound::Unbounded, reverse)?;
            Ok(entries.count())
        };
        assert_eq!((read(false)?, read(true)?), (0, 0));
        assert!(super::held_tables(&db).is_empty());
        Ok(())
    }

    #[test]
    fn a_drop_whose_record_was_lost_is_recorded_at_the_next_open(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let db = Db::open(dir.path())?;
        let table = db.default_dataset()?.create_table("t", TableSpec::new())?;
        table.split_at(&[b"m"])?;
        let id = table.id();
        // The process dies after the drop's catalog change, before its
        // record.
        db.catalog().drop_table_row_only(id)?;
        assert!(super::dropped_tables(&db, &[id])?.is_empty());
        drop((table, db));
        let db = Db::open(dir.path())?;
        assert_eq!(super::dropped_tables(&db, &[id])?, [id]);
        Ok(())
    }
}
