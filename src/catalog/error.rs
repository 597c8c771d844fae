//! Catalog errors and the kinds of catalog objects they name.

use super::*;

/// What kind of catalog object an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjectKind {
    /// A project.
    Project,
    /// A dataset.
    Dataset,
    /// A table.
    Table,
    /// A column family.
    Family,
    /// A column.
    Column,
    /// A locality group.
    LocalityGroup,
    /// A user.
    User,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Project => "project",
            ObjectKind::Dataset => "dataset",
            ObjectKind::Table => "table",
            ObjectKind::Family => "column family",
            ObjectKind::Column => "column",
            ObjectKind::LocalityGroup => "locality group",
            ObjectKind::User => "user",
        })
    }
}

/// Errors of the catalog.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// No object of that name.
    #[error("{kind} '{name}' does not exist")]
    NotFound {
        /// The kind of object.
        kind: ObjectKind,
        /// Its qualified name.
        name: String,
    },
    /// An object of that name exists already.
    #[error("{kind} '{name}' already exists")]
    AlreadyExists {
        /// The kind of object.
        kind: ObjectKind,
        /// Its qualified name.
        name: String,
    },
    /// The name breaks the naming rules.
    #[error("invalid {kind} name '{name}': {reason}")]
    InvalidName {
        /// The kind of object.
        kind: ObjectKind,
        /// The name given.
        name: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// The object belongs to the system.
    #[error("{kind} '{name}' belongs to the system and cannot be {action}")]
    Reserved {
        /// The kind of object.
        kind: ObjectKind,
        /// Its name.
        name: String,
        /// What was attempted ("dropped", "renamed", "changed").
        action: &'static str,
    },
    /// The default project or dataset, which names resolve against.
    #[error("{kind} '{name}' is the default one (unqualified names resolve to it) and cannot be {action}")]
    Default {
        /// The kind of object.
        kind: ObjectKind,
        /// Its qualified name.
        name: String,
        /// What was attempted ("dropped", "renamed").
        action: &'static str,
    },
    /// Dropping would remove children, and cascading was not asked for.
    #[error(
        "{kind} '{name}' is not empty ({children} {child_kind}{}); drop it with cascade",
        if *children == 1 { "" } else { "s" }
    )]
    NotEmpty {
        /// The kind of object.
        kind: ObjectKind,
        /// Its qualified name.
        name: String,
        /// How many children it has.
        children: usize,
        /// Their kind.
        child_kind: ObjectKind,
    },
    /// The table spec is inconsistent.
    #[error("invalid definition of table '{table}': {reason}")]
    InvalidSpec {
        /// The qualified table name.
        table: String,
        /// What is wrong.
        reason: String,
    },
    /// A split at a key where a tablet of the table starts already.
    #[error("table '{table}' already has a tablet starting at {at}")]
    TabletExists {
        /// The qualified table name.
        table: String,
        /// The key, as SQL shows it.
        at: String,
    },
    /// A split key that is not a key of the table.
    #[error("cannot split table '{table}': {reason}")]
    CannotSplit {
        /// The qualified table name.
        table: String,
        /// What is wrong with the key, or the table.
        reason: String,
    },
    /// A tablet cannot move as asked.
    #[error("cannot move a tablet of table '{table}': {reason}")]
    CannotMove {
        /// The qualified table name.
        table: String,
        /// Why.
        reason: String,
    },
    /// A system row could not be read back.
    #[error("the catalog is corrupt: {0}")]
    Corrupt(String),
}

impl CatalogError {
    /// The category.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CatalogError::NotFound { .. } => ErrorKind::NotFound,
            CatalogError::AlreadyExists { .. } | CatalogError::TabletExists { .. } => {
                ErrorKind::AlreadyExists
            }
            CatalogError::InvalidName { .. } | CatalogError::Reserved { .. } => {
                ErrorKind::InvalidName
            }
            CatalogError::NotEmpty { .. } => ErrorKind::NotEmpty,
            CatalogError::InvalidSpec { .. }
            | CatalogError::Default { .. }
            | CatalogError::CannotSplit { .. }
            | CatalogError::CannotMove { .. } => ErrorKind::InvalidArgument,
            CatalogError::Corrupt(_) => ErrorKind::Corruption,
        }
    }
}

/// The `NotFound` error of an object.
pub fn not_found(kind: ObjectKind, name: impl ToString) -> crate::Error {
    CatalogError::NotFound {
        kind,
        name: name.to_string(),
    }
    .into()
}
