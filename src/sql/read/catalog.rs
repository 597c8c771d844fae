//! widesql's catalog as DataFusion's: project = catalog, dataset = schema,
//! table = table. Every lookup reads the live catalog, so tables created by
//! another handle since the session started are visible.
//!
//! Providers registered on a session's `SessionContext` (a CSV or Parquet
//! file, a `MemTable`, your own) live in a session-local overlay next to the
//! widesql tables, so they can be joined with them; they are never stored
//! and cannot shadow a widesql table.
//!
//! A session opened for a user lists only the projects, datasets and tables
//! that user sees (see [`crate::access`]), so `information_schema` shows
//! nothing else; looking a name up still finds it, and the statement is
//! then refused by the access check, naming the privilege it lacks.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, CatalogProviderList, SchemaProvider, TableProvider};
use datafusion::common::{exec_err, Result};

use crate::access::Securable;
use crate::db::Db;
use crate::ids::{DatasetId, ProjectId};
use crate::sql::read::table::WideTable;

/// Providers registered in one session: (dataset, name) -> provider.
type Overlay = Arc<RwLock<HashMap<(DatasetId, String), Arc<dyn TableProvider>>>>;

/// Who lists the catalog: `Some(user)` sees what that user's grants
/// reach, `None` everything.
#[derive(Debug, Clone)]
struct Viewer {
    db: Db,
    user: Option<Arc<str>>,
}

impl Viewer {
    fn sees(&self, on: Securable) -> bool {
        self.db.catalog().read().sees(self.user.as_deref(), on)
    }
}

/// Every project of a database.
#[derive(Debug)]
pub struct ProjectList {
    db: Db,
    overlay: Overlay,
    viewer: Viewer,
}

impl ProjectList {
    /// The projects of `db`, as `user` sees them (`None`: all of them).
    pub fn new(db: Db, user: Option<String>) -> Self {
        Self {
            viewer: Viewer {
                db: db.clone(),
                user: user.map(Arc::from),
            },
            db,
            overlay: Overlay::default(),
        }
    }
}

impl CatalogProviderList for ProjectList {
    fn register_catalog(
        &self,
        _name: String,
        _catalog: Arc<dyn CatalogProvider>,
    ) -> Option<Arc<dyn CatalogProvider>> {
        // Projects are created with CREATE DATABASE; nothing else is attached.
        None
    }

    fn catalog_names(&self) -> Vec<String> {
        self.db
            .catalog()
            .read()
            .projects()
            .iter()
            .filter(|p| self.viewer.sees(Securable::Project(p.id)))
            .map(|p| p.name.clone())
            .collect()
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        let id = self.db.catalog().read().project_by_name(name)?.id;
        Some(Arc::new(ProjectCatalog {
            db: self.db.clone(),
            id,
            overlay: Arc::clone(&self.overlay),
            viewer: self.viewer.clone(),
        }))
    }
}

/// One project's datasets.
#[derive(Debug)]
pub struct ProjectCatalog {
    db: Db,
    id: ProjectId,
    overlay: Overlay,
    viewer: Viewer,
}

impl CatalogProvider for ProjectCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.db
            .catalog()
            .read()
            .datasets_of(self.id)
            .iter()
            .filter(|d| self.viewer.sees(Securable::Dataset(d.id)))
            .map(|d| d.name.clone())
            .collect()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let id = self.db.catalog().read().dataset_by_name(self.id, name)?.id;
        Some(Arc::new(DatasetSchema {
            db: self.db.clone(),
            id,
            overlay: Arc::clone(&self.overlay),
            viewer: self.viewer.clone(),
        }))
    }

    fn register_schema(
        &self,
        name: &str,
        _schema: Arc<dyn SchemaProvider>,
    ) -> Result<Option<Arc<dyn SchemaProvider>>> {
        exec_err!("datasets are created with CREATE SCHEMA, '{name}' cannot be attached")
    }
}

/// One dataset's tables.
#[derive(Debug)]
pub struct DatasetSchema {
    db: Db,
    id: DatasetId,
    overlay: Overlay,
    viewer: Viewer,
}

impl DatasetSchema {
    fn overlay(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, HashMap<(DatasetId, String), Arc<dyn TableProvider>>> {
        self.overlay.read().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl SchemaProvider for DatasetSchema {
    fn table_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .db
            .catalog()
            .read()
            .tables_of(self.id)
            .iter()
            .filter(|t| self.viewer.sees(Securable::Table(t.id)))
            .map(|t| t.name.clone())
            .collect();
        names.extend(
            self.overlay()
                .keys()
                .filter(|(d, _)| *d == self.id)
                .map(|(_, n)| n.clone()),
        );
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let id = self
            .db
            .catalog()
            .read()
            .table_by_name(self.id, name)
            .map(|t| t.id);
        Ok(match id {
            Some(id) => {
                WideTable::open(&self.db, id, false)?.map(|t| Arc::new(t) as Arc<dyn TableProvider>)
            }
            None => self.overlay().get(&(self.id, name.to_string())).cloned(),
        })
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        if self
            .db
            .catalog()
            .read()
            .table_by_name(self.id, &name)
            .is_some()
        {
            return exec_err!(
                "'{name}' is a widesql table; a registered provider cannot replace it"
            );
        }
        Ok(self
            .overlay
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert((self.id, name), table))
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(self
            .overlay
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(self.id, name.to_string())))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.db
            .catalog()
            .read()
            .table_by_name(self.id, name)
            .is_some()
            || self.overlay().contains_key(&(self.id, name.to_string()))
    }
}
