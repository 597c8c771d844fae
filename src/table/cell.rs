//! What reads return: rows of cells.

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
