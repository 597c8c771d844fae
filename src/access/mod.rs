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

/// What a grant gives and what it is on are catalog rows' data; the rules
/// about them are here.
pub use crate::catalog::{Privilege, Securable};
pub(crate) use password::{hash_password, verify_password};

use crate::error::ErrorKind;

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
