//! The catalog calls and `GetSqlInfo`.
//!
//! Flight SQL's catalogs, schemas and tables are widesql's projects,
//! datasets and tables, read from the calling session's DataFusion catalog,
//! so a client sees what its SQL sees (`information_schema` and views
//! included). The builders of `arrow-flight` apply the filters and
//! patterns a call carries.

use std::sync::Arc;

use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetTableTypes,
    CommandGetTables, SqlInfo, SqlSupportedTransaction,
};
use datafusion::arrow::array::{Int32Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::Constraint;
use datafusion::datasource::TableType;
use tonic::Status;
use widesql::Session;

use crate::status::status_of_df;

/// The table types a table can have, as GetTables names them.
const TABLE_TYPES: [&str; 3] = ["LOCAL TEMPORARY", "TABLE", "VIEW"];

fn table_type(table_type: TableType) -> &'static str {
    match table_type {
        TableType::Base => "TABLE",
        TableType::View => "VIEW",
        TableType::Temporary => "LOCAL TEMPORARY",
    }
}

fn arrow_status(error: impl std::fmt::Display) -> Status {
    Status::internal(format!("building a catalog result failed: {error}"))
}

/// The session's catalog names, sorted.
fn catalog_names(session: &Session) -> Vec<String> {
    let mut names = session.catalog_list().catalog_names();
    names.sort();
    names
}

/// Projects, as catalogs.
pub(crate) fn catalogs(
    session: &Session,
    query: CommandGetCatalogs,
) -> Result<RecordBatch, Status> {
    let mut builder = query.into_builder();
    for name in catalog_names(session) {
        builder.append(name);
    }
    builder.build().map_err(arrow_status)
}

/// Datasets, as schemas.
pub(crate) fn schemas(
    session: &Session,
    query: CommandGetDbSchemas,
) -> Result<RecordBatch, Status> {
    let catalogs = session.catalog_list();
    let mut builder = query.into_builder();
    for catalog in catalog_names(session) {
        let Some(provider) = catalogs.catalog(&catalog) else {
            continue;
        };
        for schema in provider.schema_names() {
            builder.append(&catalog, schema);
        }
    }
    builder.build().map_err(arrow_status)
}

/// Tables, with their types and, when asked, their Arrow schemas.
pub(crate) async fn tables(
    session: &Session,
    query: CommandGetTables,
) -> Result<RecordBatch, Status> {
    let catalogs = session.catalog_list();
    let wanted_catalog = query.catalog.clone();
    let mut builder = query.into_builder();
    for catalog in catalog_names(session) {
        if wanted_catalog.as_ref().is_some_and(|c| *c != catalog) {
            continue;
        }
        let Some(provider) = catalogs.catalog(&catalog) else {
            continue;
        };
        for schema in provider.schema_names() {
            let Some(tables) = provider.schema(&schema) else {
                continue;
            };
            let mut names = tables.table_names();
            names.sort();
            for name in names {
                let Some(table) = tables.table(&name).await.map_err(status_of_df)? else {
                    continue;
                };
                builder
                    .append(
                        &catalog,
                        &schema,
                        &name,
                        table_type(table.table_type()),
                        &table.schema(),
                    )
                    .map_err(arrow_status)?;
            }
        }
    }
    builder.build().map_err(arrow_status)
}

/// The table types.
pub(crate) fn table_types(query: CommandGetTableTypes) -> Result<RecordBatch, Status> {
    let mut builder = query.into_builder();
    for name in TABLE_TYPES {
        builder.append(name);
    }
    builder.build().map_err(arrow_status)
}

/// The schema of GetPrimaryKeys' result, as Flight SQL defines it.
pub(crate) fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

/// The columns of a table's row key, in key order (none for a table
/// that is not found).
pub(crate) async fn primary_keys(
    session: &Session,
    query: CommandGetPrimaryKeys,
) -> Result<RecordBatch, Status> {
    let (default_catalog, default_schema) = session.default_names();
    let catalog = query.catalog.unwrap_or(default_catalog);
    let schema = query.db_schema.unwrap_or(default_schema);
    let tables = session
        .catalog_list()
        .catalog(&catalog)
        .and_then(|c| c.schema(&schema));
    let table = match tables {
        // Only a table the session's user sees.
        Some(tables) if tables.table_names().contains(&query.table) => {
            tables.table(&query.table).await.map_err(status_of_df)?
        }
        _ => None,
    };
    let mut columns = Vec::new();
    if let Some(table) = &table {
        let fields = table.schema();
        for constraint in table.constraints().into_iter().flat_map(|c| c.iter()) {
            if let Constraint::PrimaryKey(indices) = constraint {
                columns.extend(indices.iter().map(|&i| fields.field(i).name().clone()));
            }
        }
    }
    let n = columns.len();
    let sequence: Vec<i32> = (1..=n)
        .map(|i| i32::try_from(i).unwrap_or(i32::MAX))
        .collect();
    RecordBatch::try_new(
        primary_keys_schema(),
        vec![
            Arc::new(StringArray::from(vec![Some(catalog.as_str()); n])),
            Arc::new(StringArray::from(vec![Some(schema.as_str()); n])),
            Arc::new(StringArray::from(vec![query.table.as_str(); n])),
            Arc::new(StringArray::from(columns)),
            Arc::new(StringArray::from(vec![None::<&str>; n])),
            Arc::new(Int32Array::from(sequence)),
        ],
    )
    .map_err(arrow_status)
}

/// What `GetSqlInfo` answers.
pub(crate) fn sql_info() -> Result<SqlInfoData, Status> {
    let mut builder = SqlInfoDataBuilder::new();
    builder.append(SqlInfo::FlightSqlServerName, "widesql");
    builder.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    builder.append(SqlInfo::FlightSqlServerArrowVersion, "59.3.2");
    builder.append(SqlInfo::FlightSqlServerReadOnly, false);
    builder.append(SqlInfo::FlightSqlServerSql, true);
    builder.append(SqlInfo::FlightSqlServerSubstrait, false);
    builder.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::None as i32,
    );
    builder.append(SqlInfo::FlightSqlServerCancel, true);
    builder.append(SqlInfo::FlightSqlServerBulkIngestion, false);
    builder.append(SqlInfo::SqlDdlCatalog, true);
    builder.append(SqlInfo::SqlDdlSchema, true);
    builder.append(SqlInfo::SqlDdlTable, true);
    builder.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    builder.build().map_err(arrow_status)
}
