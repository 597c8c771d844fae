//! The tablet data a worker holds for its master: the keys of the tablets
//! it serves, with the keys the master would keep them under. The master
//! names a table's tree (`t:` and the table's id); the worker keeps it in
//! a tree of its own, `h:` and that id ([`held_tree_name`]), which its
//! catalog does not take for a tree of one of its own tables, so that
//! opening the worker's database never removes it as an orphan. The
//! worker's service reads and writes them through these two calls; only
//! those trees are reachable, never the worker's own catalog or tables.

use std::ops::Bound;

use crate::storage::{RangeIter, Write, WriteBatch};
use crate::table::layout::{held_tree_name, parse_table_tree_name, table_tree_name};
use crate::{Db, Result};

/// The tree a worker holds the tablets of its master's table tree `name`
/// in; a name that is not a user table's tree is refused.
fn table_tree(db: &Db, name: &[u8]) -> Result<crate::storage::Tree> {
    match parse_table_tree_name(name) {
        Some(id) if !id.is_reserved() => Ok(db.inner.engine.storage.tree(&held_tree_name(id))?),
        _ => Err(crate::table::TableError::InvalidArgument {
            table: String::from_utf8_lossy(name).into_owned(),
            message: "not the tree of a table".into(),
        }
        .into()),
    }
}

/// The entries of the table tree `name` in `(lo, hi)`, in key order or
/// reversed.
pub fn held_entries(
    db: &Db,
    name: &[u8],
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    reverse: bool,
) -> Result<RangeIter> {
    Ok(table_tree(db, name)?.range(lo, hi, reverse))
}

/// Applies `writes` to table trees atomically; durable on return when
/// `durable`.
pub fn apply_held(db: &Db, writes: Vec<(Vec<u8>, Vec<Write>)>, durable: bool) -> Result<()> {
    let durability = match durable {
        true => crate::storage::Durability::Immediate,
        false => crate::storage::Durability::Eventual,
    };
    let mut batch = WriteBatch::with_durability(durability);
    for (name, tree_writes) in writes {
        let tree = table_tree(db, &name)?;
        for write in tree_writes {
            match write {
                Write::Put(key, value) => batch.put(&tree, key, value),
                Write::Delete(key) => batch.delete(&tree, key),
            }
        }
    }
    let storage = &db.inner.engine.storage;
    if durable && batch.bytes() == 0 {
        // No writes: a flush, so that what came before is durable.
        return Ok(storage.flush()?);
    }
    Ok(storage.apply(batch)?)
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
