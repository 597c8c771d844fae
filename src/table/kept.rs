//! Which cells a read decodes ([`KeptCells`]): the others are skipped
//! before their keys are built.

use std::sync::Arc;

use crate::table::layout::MARK_FAMILY;

/// The cells a read decodes: a cursor skips the others while it decodes a
/// chunk, before it builds their keys, so a read of one column of a group
/// pays for that column only. Delete markers are always kept.
#[derive(Debug, Clone)]
pub struct KeptCells {
    /// The kept families.
    families: Arc<[KeptFamily]>,
    /// Whether the cells of kept families whose qualifiers are left out
    /// still make their row exist, as in SQL, where a row whose read
    /// columns are all NULL is a row. A chunk that keeps none of its cells
    /// (delete markers aside) then yields them all; one that keeps some
    /// records its row as *pruned*, for the reader to check when none of
    /// the kept cells is visible ([`CellCursor::took_pruned`](crate::table::chunks::CellCursor::took_pruned)).
    pub(super) presence: bool,
}

/// A kept family's id and the qualifiers kept (in their stored form:
/// escaped and terminated), `None` for all of them.
pub(super) type KeptFamily = (u16, Option<Vec<Vec<u8>>>);

/// What a read does with one cell of a chunk.
pub(super) enum Judged {
    Kept,
    /// Of a family the read does not ask for.
    Skipped,
    /// Of a kept family, under a qualifier the read does not ask for.
    Pruned,
    /// Of a family kept only to show that its row exists (none of its
    /// qualifiers is asked for): its first cell shows it, and the rest of
    /// the family is passed over like a skipped one.
    PrunedFamily,
}

impl KeptCells {
    /// Keeps the given qualifiers (`None`: all) of each family listed; see
    /// [`KeptCells::presence`] for `presence`.
    pub fn columns(
        families: impl IntoIterator<Item = (u16, Option<Vec<Vec<u8>>>)>,
        presence: bool,
    ) -> Self {
        let encode = |qualifier: Vec<u8>| {
            let mut stored = Vec::with_capacity(qualifier.len() + 2);
            crate::keys::put_bytes(&mut stored, &qualifier);
            stored
        };
        let families = families
            .into_iter()
            .map(|(id, qualifiers)| (id, qualifiers.map(|q| q.into_iter().map(encode).collect())))
            .collect();
        Self { families, presence }
    }

    /// How the cell whose key suffix (after the row part) is `suffix` is
    /// read. A suffix too short to name a family is kept, so that decoding
    /// it reports the corruption.
    pub(super) fn judge(&self, suffix: &[u8]) -> Judged {
        let [a, b, rest @ ..] = suffix else {
            return Judged::Kept;
        };
        let id = u16::from_be_bytes([*a, *b]);
        if id == MARK_FAMILY {
            return Judged::Kept;
        }
        match self.families.iter().find(|(f, _)| *f == id) {
            None => Judged::Skipped,
            Some((_, None)) => Judged::Kept,
            Some((_, Some(qualifiers))) if qualifiers.is_empty() => Judged::PrunedFamily,
            // The first byte first: most qualifiers differ there, and it
            // saves a call to compare the rest.
            Some((_, Some(qualifiers)))
                if qualifiers
                    .iter()
                    .any(|q| q.first() == rest.first() && rest.starts_with(q)) =>
            {
                Judged::Kept
            }
            Some(_) => Judged::Pruned,
        }
    }
}
