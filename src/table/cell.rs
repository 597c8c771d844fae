//! What reads return: rows of cells.

use crate::storage::Bytes;
use crate::table::layout::Layout;

/// One version of one column of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// The column family's name.
    pub family: String,
    /// The column qualifier.
    pub qualifier: Vec<u8>,
    /// The version timestamp, microseconds since 1970-01-01 UTC.
    pub timestamp: i64,
    /// The value.
    pub value: Vec<u8>,
}

/// A row as a read returns it: its key and the cells that passed the
/// filter, ordered by family id, then qualifier, then newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The row key.
    pub key: Vec<u8>,
    /// The cells.
    pub cells: Vec<Cell>,
}

impl Row {
    /// The newest returned version of `family:qualifier`.
    pub fn latest(&self, family: &str, qualifier: &[u8]) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.family == family && c.qualifier == qualifier)
    }

    /// The returned versions of `family:qualifier`, newest first.
    pub fn versions<'a>(
        &'a self,
        family: &'a str,
        qualifier: &'a [u8],
    ) -> impl Iterator<Item = &'a Cell> + 'a {
        self.cells
            .iter()
            .filter(move |c| c.family == family && c.qualifier == qualifier)
    }

    /// The newest returned value of `family:qualifier`.
    pub fn value(&self, family: &str, qualifier: &[u8]) -> Option<&[u8]> {
        self.latest(family, qualifier).map(|c| c.value.as_slice())
    }
}

/// A row lent by [`RowIter::next_ref`](crate::RowIter::next_ref): the same
/// key and cells as a [`Row`], read in place from the scan's buffers
/// until the scan moves on. [`RowRef::to_row`] makes a [`Row`] of it.
#[derive(Debug, Clone, Copy)]
pub struct RowRef<'a> {
    layout: &'a Layout,
    row: &'a RawRow,
}

/// One cell of a [`RowRef`], borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellRef<'a> {
    /// The column family's name.
    pub family: &'a str,
    /// The column qualifier.
    pub qualifier: &'a [u8],
    /// The version timestamp, microseconds since 1970-01-01 UTC.
    pub timestamp: i64,
    /// The value.
    pub value: &'a [u8],
}

impl<'a> RowRef<'a> {
    pub(crate) fn new(layout: &'a Layout, row: &'a RawRow) -> Self {
        RowRef { layout, row }
    }

    /// The row key.
    pub fn key(&self) -> &'a [u8] {
        &self.row.key
    }

    /// The cells, ordered as [`Row::cells`].
    pub fn cells(&self) -> impl ExactSizeIterator<Item = CellRef<'a>> + 'a {
        let layout = self.layout;
        self.row.cells.iter().map(move |c| CellRef {
            family: layout
                .family_by_id(c.family)
                .map_or("", |f| f.name.as_str()),
            qualifier: &c.qualifier,
            timestamp: c.timestamp,
            value: &c.value,
        })
    }

    /// The newest returned version of `family:qualifier`.
    pub fn latest(&self, family: &str, qualifier: &[u8]) -> Option<CellRef<'a>> {
        self.cells()
            .find(|c| c.family == family && c.qualifier == qualifier)
    }

    /// The newest returned value of `family:qualifier`.
    pub fn value(&self, family: &str, qualifier: &[u8]) -> Option<&'a [u8]> {
        self.latest(family, qualifier).map(|c| c.value)
    }

    /// The row, copied out of the scan's buffers.
    pub fn to_row(&self) -> Row {
        Row {
            key: self.row.key.clone(),
            cells: self.cells().map(|c| c.to_cell()).collect(),
        }
    }
}

impl CellRef<'_> {
    /// The cell, copied.
    pub fn to_cell(&self) -> Cell {
        Cell {
            family: self.family.to_string(),
            qualifier: self.qualifier.to_vec(),
            timestamp: self.timestamp,
            value: self.value.to_vec(),
        }
    }
}

/// A cell as the engine passes it around: family by id, value unconverted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawCell {
    /// The family id.
    pub family: u16,
    /// The qualifier (shares the memory of the keys of the chunk it was
    /// decoded from, which it keeps alive).
    pub qualifier: Bytes,
    /// Microseconds.
    pub timestamp: i64,
    /// The value.
    pub value: Bytes,
}

/// A row as the engine passes it around.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawRow {
    /// The row key.
    pub key: Vec<u8>,
    /// The cells, in family id, qualifier, newest-first order.
    pub cells: Vec<RawCell>,
}

impl RawRow {
    /// Bytes of its key, qualifiers and values.
    pub fn bytes(&self) -> usize {
        self.key.len()
            + self
                .cells
                .iter()
                .map(|c| c.qualifier.len() + c.value.len())
                .sum::<usize>()
    }
}
