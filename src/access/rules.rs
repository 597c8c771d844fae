//! The rules: what a user may do to an object, and which objects it sees.

use super::{AccessError, Privilege, Securable};
use crate::catalog::system::SYSTEM_PROJECT;
use crate::catalog::CatalogState;

impl CatalogState {
    /// `on` and the objects it lies in: a table, its dataset, its project.
    fn containers(&self, on: Securable) -> Vec<Securable> {
        let mut chain = vec![on];
        let dataset = match on {
            Securable::Table(id) => self.table(id).map(|t| t.dataset),
            Securable::Dataset(id) => Some(id),
            Securable::Project(_) => None,
        };
        if let (Securable::Table(_), Some(dataset)) = (on, dataset) {
            chain.push(Securable::Dataset(dataset));
        }
        if let Some(project) = dataset.and_then(|d| self.dataset(d)).map(|d| d.project) {
            chain.push(Securable::Project(project));
        }
        chain
    }

    /// Whether `on` lies in the `_system` project (the catalog, users and
    /// grants), which only admins read.
    fn is_system(&self, chain: &[Securable]) -> bool {
        chain.iter().any(|s| match s {
            Securable::Project(id) => *id == SYSTEM_PROJECT,
            Securable::Table(id) => id.is_reserved(),
            _ => false,
        })
    }

    /// The user `name`, as an error when it was dropped.
    fn known_user(&self, name: &str) -> Result<&crate::catalog::UserEntry, AccessError> {
        self.user(name)
            .ok_or_else(|| AccessError::UserGone(name.to_string()))
    }

    /// Whether `user` is an admin.
    pub(crate) fn is_admin(&self, user: &str) -> Result<bool, AccessError> {
        Ok(self.known_user(user)?.admin)
    }

    /// Whether `user` holds `privilege` on `on`: an admin always; others
    /// by a grant on the object or on an object it lies in, never on the
    /// `_system` project.
    pub(crate) fn allows(
        &self,
        user: &str,
        privilege: Privilege,
        on: Securable,
    ) -> Result<bool, AccessError> {
        if self.known_user(user)?.admin {
            return Ok(true);
        }
        let chain = self.containers(on);
        if self.is_system(&chain) {
            return Ok(false);
        }
        Ok(self
            .grants_of(user)
            .any(|(granted, p)| p == privilege && chain.contains(&granted)))
    }

    /// Whether `user` sees `on` in listings (`SHOW`, `information_schema`,
    /// Flight SQL's catalog calls): it holds a privilege on it, on an
    /// object it lies in, or on an object inside it. A session without a
    /// user (`None`) sees everything.
    pub(crate) fn sees(&self, user: Option<&str>, on: Securable) -> bool {
        let Some(user) = user else {
            return true;
        };
        match self.user(user) {
            Some(entry) if entry.admin => return true,
            Some(_) => {}
            None => return false,
        }
        let chain = self.containers(on);
        if self.is_system(&chain) {
            return false;
        }
        self.grants_of(user)
            .any(|(granted, _)| chain.contains(&granted) || self.containers(granted).contains(&on))
    }
}
