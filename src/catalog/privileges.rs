//! What a grant gives ([`Privilege`]) and what it is on ([`Securable`]):
//! the data of a `_grants` row. Who may do what with them is decided in
//! [`access`](crate::access).

use std::fmt;

use crate::ids::{DatasetId, ProjectId, TableId};

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Privilege {
    /// Read rows (queries, subqueries, `DESCRIBE`, the rows `DELETE` and
    /// `UPDATE` change).
    Select,
    /// Add rows.
    Insert,
    /// Change rows.
    Update,
    /// Remove rows.
    Delete,
    /// Create objects inside the object, and alter or drop the object and
    /// what it holds.
    Create,
}

impl Privilege {
    /// Every privilege: what `ALL` grants.
    pub const ALL: [Privilege; 5] = [
        Privilege::Select,
        Privilege::Insert,
        Privilege::Update,
        Privilege::Delete,
        Privilege::Create,
    ];

    /// Its SQL name.
    pub fn name(self) -> &'static str {
        match self {
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
            Privilege::Update => "UPDATE",
            Privilege::Delete => "DELETE",
            Privilege::Create => "CREATE",
        }
    }

    /// The privilege of a SQL name (any case).
    pub fn parse(name: &str) -> Option<Privilege> {
        Privilege::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Privilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An object a grant is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Securable {
    /// A project and everything in it.
    Project(ProjectId),
    /// A dataset and its tables.
    Dataset(DatasetId),
    /// One table.
    Table(TableId),
}

impl Securable {
    /// How it is stored in a `_grants` key: `project:<id>`, `dataset:<id>`,
    /// `table:<id>`.
    pub(crate) fn to_key(self) -> String {
        match self {
            Securable::Project(id) => format!("project:{id}"),
            Securable::Dataset(id) => format!("dataset:{id}"),
            Securable::Table(id) => format!("table:{id}"),
        }
    }

    /// The securable of a `_grants` key.
    pub(crate) fn from_key(key: &str) -> Option<Securable> {
        let (kind, id) = key.split_once(':')?;
        match kind {
            "project" => ProjectId::parse(id).map(Securable::Project),
            "dataset" => DatasetId::parse(id).map(Securable::Dataset),
            "table" => TableId::parse(id).map(Securable::Table),
            _ => None,
        }
    }

    /// `project`, `dataset` or `table`.
    pub fn kind(self) -> &'static str {
        match self {
            Securable::Project(_) => "project",
            Securable::Dataset(_) => "dataset",
            Securable::Table(_) => "table",
        }
    }
}
