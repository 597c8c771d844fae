//! widesql's catalog as DataFusion's: project = catalog, dataset = schema,
//! table = table. Every lookup reads the live catalog, so tables created by
//! another handle since the session started are visible.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, CatalogProviderList, SchemaProvider, TableProvider};
use datafusion::common::{exec_err, Result};

use crate::db::Db;
use crate::ids::{DatasetId, ProjectId};
use crate::sql::table::WideTable;

/// Every project of a database.
#[derive(Debug)]
pub struct ProjectList {
    db: Db,
}

impl ProjectList {
    /// The projects of `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
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
            .map(|p| p.name.clone())
            .collect()
    }

    fn catalog(&self, name: &str) -> Option<Arc<dyn CatalogProvider>> {
        let id = self.db.catalog().read().project_by_name(name)?.id;
        Some(Arc::new(ProjectCatalog {
            db: self.db.clone(),
            id,
        }))
    }
}

/// One project's datasets.
#[derive(Debug)]
pub struct ProjectCatalog {
    db: Db,
    id: ProjectId,
}

impl CatalogProvider for ProjectCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.db
            .catalog()
            .read()
            .datasets_of(self.id)
            .iter()
            .map(|d| d.name.clone())
            .collect()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        let id = self.db.catalog().read().dataset_by_name(self.id, name)?.id;
        Some(Arc::new(DatasetSchema {
            db: self.db.clone(),
            id,
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
}

#[async_trait]
impl SchemaProvider for DatasetSchema {
    fn table_names(&self) -> Vec<String> {
        self.db
            .catalog()
            .read()
            .tables_of(self.id)
            .iter()
            .map(|t| t.name.clone())
            .collect()
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
            None => None,
        })
    }

    fn register_table(
        &self,
        name: String,
        _table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        exec_err!("table '{name}' cannot be attached: widesql datasets hold only widesql tables (use CREATE TABLE)")
    }

    fn table_exist(&self, name: &str) -> bool {
        self.db
            .catalog()
            .read()
            .table_by_name(self.id, name)
            .is_some()
    }
}
