//! The system tables: the catalog stored as ordinary wide-column rows.
//!
//! All of them live in the `_system` project (`ffffffff-ffff-0000-0000-000000000001`)
//! and its `_catalog` dataset (`…-000000000002`), in one shared sled tree
//! called `catalog`, each under the key prefix of its 16-byte table id.
//! Each row key is the tuple encoding of the key columns; every other column
//! is a declared qualifier of the family `c`, which keeps one version.
//!
//! | table | id | key | columns |
//! |---|---|---|---|
//! | `_projects` | `…-000000000003` | `name` | `id`, `created_at` |
//! | `_datasets` | `…-000000000004` | `project_id`, `name` | `id`, `created_at` |
//! | `_tables` | `…-000000000005` | `dataset_id`, `name` | `id`, `created_at`, `spec` (JSON), `next_family_id` |
//! | `_users` | `…-000000000006` | `name` | `password_hash` (Argon2id PHC string), `admin`, `created_at` |
//! | `_grants` | `…-000000000007` | `user`, `object` (`project:<id>`, `dataset:<id>`, `table:<id>`), `privilege` | `granted_at` |
//! | `_tablets` | `…-000000000008` | `table_id`, `start` (lowercase hex of the first row key's encoding; empty for the first tablet) | `id`, `worker` (empty: this process), `created_at` |
//!
//! IDs are stored as their hyphenated text, timestamps as microseconds.

use crate::ids::{DatasetId, ProjectId, TableId};
use crate::table::layout::Placement;
use crate::table::spec::{ColumnSpec, FamilySpec, RowKeySpec, TableSpec, ValueType};

/// The `_system` project.
pub const SYSTEM_PROJECT: ProjectId = ProjectId::reserved(1);
/// The `_catalog` dataset.
pub const CATALOG_DATASET: DatasetId = DatasetId::reserved(2);
/// The name of the `_system` project.
pub const SYSTEM_PROJECT_NAME: &str = "_system";
/// The name of the `_catalog` dataset.
pub const CATALOG_DATASET_NAME: &str = "_catalog";
/// The tree that holds every system table.
pub const CATALOG_TREE: &[u8] = b"catalog";
/// The family holding a system row's columns.
pub const FAMILY: &str = "c";

/// A system table: its reserved id, name, key and columns.
#[derive(Debug, Clone, Copy)]
pub struct SystemTable {
    /// The reserved id.
    pub id: TableId,
    /// The name inside `_system._catalog`.
    pub name: &'static str,
    /// The key columns.
    pub key: &'static [&'static str],
    /// The other columns and their types.
    pub columns: &'static [(&'static str, ValueType)],
}

/// `_projects`: one row per project.
pub const PROJECTS: SystemTable = SystemTable {
    id: TableId::reserved(3),
    name: "_projects",
    key: &["name"],
    columns: &[
        ("id", ValueType::Utf8),
        ("created_at", ValueType::Timestamp),
    ],
};

/// `_datasets`: one row per dataset.
pub const DATASETS: SystemTable = SystemTable {
    id: TableId::reserved(4),
    name: "_datasets",
    key: &["project_id", "name"],
    columns: &[
        ("id", ValueType::Utf8),
        ("created_at", ValueType::Timestamp),
    ],
};

/// `_tables`: one row per table, with its spec as JSON.
pub const TABLES: SystemTable = SystemTable {
    id: TableId::reserved(5),
    name: "_tables",
    key: &["dataset_id", "name"],
    columns: &[
        ("id", ValueType::Utf8),
        ("created_at", ValueType::Timestamp),
        ("spec", ValueType::Utf8),
        ("next_family_id", ValueType::Int64),
    ],
};

/// `_users`: one row per user, with its password hash.
pub const USERS: SystemTable = SystemTable {
    id: TableId::reserved(6),
    name: "_users",
    key: &["name"],
    columns: &[
        ("password_hash", ValueType::Utf8),
        ("admin", ValueType::Bool),
        ("created_at", ValueType::Timestamp),
    ],
};

/// `_grants`: one row per privilege a user holds on an object.
pub const GRANTS: SystemTable = SystemTable {
    id: TableId::reserved(7),
    name: "_grants",
    key: &["user", "object", "privilege"],
    columns: &[("granted_at", ValueType::Timestamp)],
};

/// `_tablets`: one row per tablet of a table that was split. A table
/// without rows here is one tablet, with the table's id, served by this
/// process.
pub const TABLETS: SystemTable = SystemTable {
    id: TableId::reserved(8),
    name: "_tablets",
    key: &["table_id", "start"],
    columns: &[
        ("id", ValueType::Utf8),
        ("worker", ValueType::Utf8),
        ("created_at", ValueType::Timestamp),
    ],
};

/// Every system table. A database made before `_users`, `_grants` and
/// `_tablets` existed gets them (empty) when it is opened: their rows live
/// in the shared `catalog` tree, under their own prefixes.
pub const ALL: [SystemTable; 6] = [PROJECTS, DATASETS, TABLES, USERS, GRANTS, TABLETS];

impl SystemTable {
    /// The table's spec: text key columns, one family `c` keeping one
    /// version, with the declared columns.
    pub fn spec(&self) -> TableSpec {
        let key = self
            .key
            .iter()
            .map(|name| ColumnSpec::new(*name, ValueType::Utf8).with_nullable(false))
            .collect();
        let family = self.columns.iter().fold(
            FamilySpec::new(FAMILY)
                .with_max_versions(1)
                .with_qualifier_type(None),
            |family, (name, ty)| family.with_column(ColumnSpec::new(*name, ty.clone())),
        );
        TableSpec::new()
            .with_key(RowKeySpec::Columns(key))
            .with_family(family)
    }

    /// Where its rows are stored.
    pub fn placement(&self) -> Placement {
        Placement::Shared {
            tree: CATALOG_TREE.to_vec(),
            prefix: self.id.as_bytes().to_vec(),
        }
    }
}
