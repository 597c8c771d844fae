//! The tablet data a worker holds for its master: the keys of the tablets
//! it serves, kept in its own database under the same table tree names
//! and keys as the master would keep them. The worker's service reads and
//! writes them through these two calls; only table trees are reachable,
//! never the worker's own catalog.

use std::ops::Bound;

use crate::storage::{RangeIter, Write, WriteBatch};
use crate::table::layout::parse_table_tree_name;
use crate::{Db, Result};

/// Refuses a name that is not a user table's tree.
fn table_tree(db: &Db, name: &[u8]) -> Result<crate::storage::Tree> {
    match parse_table_tree_name(name) {
        Some(id) if !id.is_reserved() => Ok(db.inner.engine.storage.tree(name)?),
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
