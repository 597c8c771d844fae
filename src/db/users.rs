//! Users from the embedded API: what a server needs to let clients in
//! (see [`crate::access`] for what users may do once in).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use crate::access::{hash_password, verify_password, AccessError};
use crate::catalog::{CatalogState, UserEntry};
use crate::db::Db;
use crate::error::Result;

impl Db {
    /// Checks a user's password. A wrong password and an unknown user give
    /// the same error, after the same work (a hash is checked either way).
    pub fn authenticate(&self, user: &str, password: &str) -> Result<()> {
        let hash = self
            .catalog()
            .read()
            .user(user)
            .map(|u| u.password_hash.clone());
        let matches = match hash {
            Some(hash) => verify_password(password, &hash),
            None => {
                static NOBODY: OnceLock<String> = OnceLock::new();
                let hash = NOBODY.get_or_init(|| hash_password("-").unwrap_or_default());
                let _ = verify_password(password, hash);
                false
            }
        };
        if matches {
            Ok(())
        } else {
            Err(AccessError::WrongPassword.into())
        }
    }

    /// Creates a user (an admin with `admin`); an error when it exists.
    /// SQL's `CREATE USER` does the same for a session.
    pub fn create_user(&self, name: &str, password: &str, admin: bool) -> Result<()> {
        self.catalog()
            .create_user(name, hash_password(password)?, admin, false)
            .map(drop)
    }

    /// A number that changes when the user's password does, or when the
    /// user is dropped and made again; `None` when there is no such user.
    /// A server compares it on every call, so that signing in again is
    /// needed after either.
    pub fn credentials_version(&self, user: &str) -> Option<u64> {
        self.user_version(user, |_, entry, hasher| {
            (entry.created_at, &entry.password_hash).hash(hasher)
        })
    }

    /// A number that changes whenever what `user` may do does: a grant or
    /// revoke of its own, `ADMIN` or `NOADMIN`, or the user dropped and
    /// made again; `None` when there is no such user. A server compares it
    /// before it runs a query that an earlier call planned and checked.
    pub fn privileges_version(&self, user: &str) -> Option<u64> {
        self.user_version(user, |state, entry, hasher| {
            (entry.created_at, entry.admin).hash(hasher);
            for grant in state.grants_of(user) {
                grant.hash(hasher);
            }
        })
    }

    /// A hash of what `part` hashes of `user`'s catalog entry.
    fn user_version(
        &self,
        user: &str,
        part: impl FnOnce(&CatalogState, &UserEntry, &mut DefaultHasher),
    ) -> Option<u64> {
        let state = self.catalog().read();
        let entry = state.user(user)?;
        let mut hasher = DefaultHasher::new();
        part(&state, entry, &mut hasher);
        Some(hasher.finish())
    }

    /// Whether `user` exists and is an admin. A server keeps room for
    /// admins' sessions that other users cannot take.
    pub fn is_admin(&self, user: &str) -> bool {
        self.catalog()
            .read()
            .user(user)
            .is_some_and(|entry| entry.admin)
    }

    /// Whether the database has any user. A server lets clients in
    /// without credentials only while it has none.
    pub fn has_users(&self) -> bool {
        self.catalog().read().users().next().is_some()
    }
}
