//! Users, their passwords and their grants: who may run which statement on
//! which object.
//!
//! Users and grants are catalog rows (`_users`, `_grants`; see
//! [`system`](crate::catalog::system)), changed atomically like every
//! other catalog row. A grant gives one [`Privilege`] on a project, a
//! dataset or a table ([`Securable`]), and covers everything inside that
//! object, including objects created later. An admin may do everything.
//!
//! Sessions of the embedded API have no user and are not checked: the
//! program that opened the files owns them. A session opened for a user
//! ([`SessionOptions::user`](crate::SessionOptions::user)) checks every
//! statement before it runs ([`crate::sql`] does, against the rules here).

mod password;
mod rules;

pub(crate) use password::{hash_password, verify_password};

use std::fmt;

use crate::error::ErrorKind;
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

/// Errors of authentication and of access checks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    /// A user lacks a privilege.
    #[error("permission denied: user '{user}' has no {privilege} privilege on {object}")]
    Denied {
        /// The user.
        user: String,
        /// The privilege it lacks.
        privilege: Privilege,
        /// The object, as `table p.d.t`, `dataset p.d` or `project p`.
        object: String,
    },
    /// Only an admin may do this.
    #[error("permission denied: only an admin may {action} (user '{user}' is not one)")]
    AdminOnly {
        /// The user.
        user: String,
        /// What it tried.
        action: String,
    },
    /// A user name and password that do not match a user. Which of the two
    /// was wrong is not said.
    #[error("wrong user name or password")]
    WrongPassword,
    /// The session's user was dropped.
    #[error("user '{0}' no longer exists")]
    UserGone(String),
    /// A password that cannot be used.
    #[error("invalid password: {0}")]
    InvalidPassword(String),
}

impl AccessError {
    /// Its category.
    pub fn kind(&self) -> ErrorKind {
        match self {
            AccessError::Denied { .. } | AccessError::AdminOnly { .. } => {
                ErrorKind::PermissionDenied
            }
            AccessError::WrongPassword | AccessError::UserGone(_) => ErrorKind::Unauthenticated,
            AccessError::InvalidPassword(_) => ErrorKind::InvalidArgument,
        }
    }
}
