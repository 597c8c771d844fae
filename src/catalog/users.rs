//! Users and grants: create, alter and drop users, grant and revoke
//! privileges. Each change is one atomic batch of `_users` and `_grants`
//! rows, made under the DDL lock like every catalog change, and it moves
//! the catalog generation, so that plans made under the old grants are
//! planned (and checked) again.

use super::rows::{text_key, SystemWrite};
use super::*;
use crate::catalog::{Privilege, Securable};

/// A user as the catalog knows it.
#[derive(Clone)]
pub struct UserEntry {
    /// Its name.
    pub name: String,
    /// Whether it may do everything, users and grants included.
    pub admin: bool,
    /// The Argon2id PHC string of its password.
    pub(crate) password_hash: String,
    /// Creation time, microseconds.
    pub created_at: i64,
}

impl fmt::Debug for UserEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the hash.
        f.debug_struct("UserEntry")
            .field("name", &self.name)
            .field("admin", &self.admin)
            .finish()
    }
}

impl CatalogState {
    /// The user `name`.
    pub fn user(&self, name: &str) -> Option<&UserEntry> {
        self.users.get(name)
    }

    /// Every user, by name.
    pub fn users(&self) -> impl Iterator<Item = &UserEntry> {
        self.users.values()
    }

    /// The grants of `user`: (object, privilege).
    pub fn grants_of<'a>(
        &'a self,
        user: &'a str,
    ) -> impl Iterator<Item = (Securable, Privilege)> + 'a {
        self.grants.get(user).into_iter().flatten().copied()
    }

    /// Every grant on an object that exists: (user, object, privilege), by
    /// user. (A dropped object's grants match nothing and are removed at
    /// the next open.)
    pub fn grants(&self) -> impl Iterator<Item = (&str, Securable, Privilege)> {
        self.grants
            .iter()
            .flat_map(|(user, held)| held.iter().map(move |(on, p)| (user.as_str(), *on, *p)))
            .filter(|(_, on, _)| self.securable_exists(*on))
    }

    fn held(&self, user: &str, on: Securable, privilege: Privilege) -> bool {
        self.grants
            .get(user)
            .is_some_and(|held| held.contains(&(on, privilege)))
    }

    /// Whether a `_grants` key (`user`, `object`, `privilege`) names a
    /// grant of the state: not one on a dropped object or of a dropped user.
    pub(super) fn holds_grant(&self, key: &[String]) -> bool {
        match key {
            [user, object, privilege] => Securable::from_key(object)
                .zip(Privilege::parse(privilege))
                .is_some_and(|(on, p)| self.held(user, on, p)),
            _ => true,
        }
    }

    /// Whether the object a grant is on exists.
    fn securable_exists(&self, on: Securable) -> bool {
        match on {
            Securable::Project(id) => self.project(id).is_some(),
            Securable::Dataset(id) => self.dataset(id).is_some(),
            Securable::Table(id) => self.table(id).is_some(),
        }
    }

    /// `project p`, `dataset p.d` or `table p.d.t`, as errors and
    /// `SHOW GRANTS` name an object.
    pub fn securable_name(&self, on: Securable) -> String {
        match on {
            Securable::Project(id) => match self.project(id) {
                Some(p) => format!("project {}", p.name),
                None => format!("project {id}"),
            },
            Securable::Dataset(id) => format!("dataset {}", self.dataset_path(id)),
            Securable::Table(id) => match self.table(id) {
                Some(t) => format!("table {}", self.table_path(t.dataset, &t.name)),
                None => format!("table {id}"),
            },
        }
    }
}

impl Catalog {
    /// Reads `_users` and `_grants` into `state`; grants on objects that
    /// no longer exist are left out (and removed by
    /// [`Catalog::remove_orphan_rows`]).
    pub(super) fn load_access(&self, state: &mut CatalogState) -> Result<()> {
        for (key, row) in self.rows_of(system::USERS)? {
            let t = system::USERS;
            let name = key.into_iter().next().unwrap_or_default();
            let entry = UserEntry {
                password_hash: Self::text(t, &row, "password_hash")?,
                admin: Self::bool(t, &row, "admin")?,
                created_at: Self::int(t, &row, "created_at")?,
                name: name.clone(),
            };
            state.users.insert(name, entry);
        }
        for (key, _) in self.rows_of(system::GRANTS)? {
            let [user, object, privilege] = <[String; 3]>::try_from(key).map_err(|_| {
                CatalogError::Corrupt("a _grants key is not (user, object, privilege)".into())
            })?;
            let on = Securable::from_key(&object).ok_or_else(|| {
                CatalogError::Corrupt(format!("'{object}' is not a grant object"))
            })?;
            let privilege = Privilege::parse(&privilege).ok_or_else(|| {
                CatalogError::Corrupt(format!("'{privilege}' is not a privilege"))
            })?;
            if state.securable_exists(on) && state.users.contains_key(&user) {
                state
                    .grants
                    .entry(user)
                    .or_default()
                    .insert((on, privilege));
            }
        }
        Ok(())
    }

    fn user_row(entry: &UserEntry) -> Result<SystemWrite> {
        Ok(SystemWrite {
            table: system::USERS,
            key: text_key(&[&entry.name])?,
            mutation: RowMutation::new()
                .set(system::FAMILY, "password_hash", entry.password_hash.clone())
                .set(system::FAMILY, "admin", [u8::from(entry.admin)])
                .set(system::FAMILY, "created_at", entry.created_at.to_be_bytes()),
        })
    }

    fn grant_key(user: &str, on: Securable, privilege: Privilege) -> Result<Vec<u8>> {
        text_key(&[user, &on.to_key(), privilege.name()])
    }

    fn existing_user(&self, name: &str) -> Result<UserEntry> {
        self.read()
            .user(name)
            .cloned()
            .ok_or_else(|| not_found(ObjectKind::User, name))
    }

    /// Creates a user with the Argon2id hash of its password. Returns
    /// false (and changes nothing) when it exists and `if_not_exists`.
    pub fn create_user(
        &self,
        name: &str,
        password_hash: String,
        admin: bool,
        if_not_exists: bool,
    ) -> Result<bool> {
        check_user_name(ObjectKind::User, name)?;
        let _ddl = self.ddl_lock();
        if self.read().user(name).is_some() {
            if if_not_exists {
                return Ok(false);
            }
            return Err(CatalogError::AlreadyExists {
                kind: ObjectKind::User,
                name: name.to_string(),
            }
            .into());
        }
        let entry = UserEntry {
            name: name.to_string(),
            admin,
            password_hash,
            created_at: self.timestamp()?,
        };
        self.apply(vec![Self::user_row(&entry)?])?;
        self.write_state().users.insert(entry.name.clone(), entry);
        Ok(true)
    }

    /// Changes a user's password hash, its admin flag, or both.
    pub fn alter_user(
        &self,
        name: &str,
        password_hash: Option<String>,
        admin: Option<bool>,
    ) -> Result<()> {
        let _ddl = self.ddl_lock();
        let mut entry = self.existing_user(name)?;
        if let Some(hash) = password_hash {
            entry.password_hash = hash;
        }
        if let Some(admin) = admin {
            entry.admin = admin;
        }
        self.apply(vec![Self::user_row(&entry)?])?;
        self.write_state().users.insert(entry.name.clone(), entry);
        Ok(())
    }

    /// Drops a user and every grant it holds, in one batch. Returns false
    /// when it does not exist and `if_exists`.
    pub fn drop_user(&self, name: &str, if_exists: bool) -> Result<bool> {
        let _ddl = self.ddl_lock();
        if self.read().user(name).is_none() && if_exists {
            return Ok(false);
        }
        self.existing_user(name)?;
        let grants: Vec<(Securable, Privilege)> = self.read().grants_of(name).collect();
        let mut writes = vec![Self::delete_row(system::USERS, &[name])?];
        for (on, privilege) in &grants {
            writes.push(SystemWrite {
                table: system::GRANTS,
                key: Self::grant_key(name, *on, *privilege)?,
                mutation: RowMutation::new().delete_row(),
            });
        }
        self.apply(writes)?;
        let mut state = self.write_state();
        state.users.remove(name);
        state.grants.remove(name);
        Ok(true)
    }

    /// Grants (`grant` true) or revokes privileges of a user on an object,
    /// in one batch. Revoking a privilege not held is no error.
    pub fn set_grants(
        &self,
        user: &str,
        on: Securable,
        privileges: &[Privilege],
        grant: bool,
    ) -> Result<()> {
        let _ddl = self.ddl_lock();
        self.existing_user(user)?;
        if !self.read().securable_exists(on) {
            return Err(not_found(
                match on {
                    Securable::Project(_) => ObjectKind::Project,
                    Securable::Dataset(_) => ObjectKind::Dataset,
                    Securable::Table(_) => ObjectKind::Table,
                },
                self.read().securable_name(on),
            ));
        }
        let now = self.timestamp()?;
        let mut writes = Vec::new();
        for privilege in privileges {
            let mutation = if grant {
                RowMutation::new().set(system::FAMILY, "granted_at", now.to_be_bytes())
            } else {
                RowMutation::new().delete_row()
            };
            writes.push(SystemWrite {
                table: system::GRANTS,
                key: Self::grant_key(user, on, *privilege)?,
                mutation,
            });
        }
        self.apply(writes)?;
        let mut state = self.write_state();
        let held = state.grants.entry(user.to_string()).or_default();
        for privilege in privileges {
            if grant {
                held.insert((on, *privilege));
            } else {
                held.remove(&(on, *privilege));
            }
        }
        Ok(())
    }
}
