//! The catalog calls, `GetSqlInfo` and `GetXdbcTypeInfo`.
//!
//! Flight SQL's catalogs, schemas and tables are widesql's projects,
//! datasets and tables, read from the calling session's DataFusion catalog,
//! so a client sees what its SQL sees (`information_schema` and views
//! included). The builders of `arrow-flight` apply the filters and
//! patterns a call carries.

use std::sync::Arc;

use arrow_flight::sql::metadata::{
    SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetSqlInfo,
    CommandGetTableTypes, CommandGetTables, Nullable, Searchable, SqlInfo, SqlSupportedTransaction,
    XdbcDataType, XdbcDatetimeSubcode,
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

/// The longest name pattern taken, in bytes: a name has at most 255, and
/// `arrow-flight` compiles a pattern into a regular expression whose
/// memory grows with its length.
const MAX_PATTERN_BYTES: usize = 1024;

/// The most ids one `GetSqlInfo` asks for: `arrow-flight` builds a filter
/// of the whole result for each id asked, and keeps them all until it
/// combines them. The ids it defines are fewer than 600.
const MAX_SQL_INFO_IDS: usize = 1024;

/// Refuses a name pattern longer than [`MAX_PATTERN_BYTES`].
fn check_pattern(what: &str, pattern: Option<&String>) -> Result<(), Status> {
    match pattern {
        Some(pattern) if pattern.len() > MAX_PATTERN_BYTES => {
            Err(Status::invalid_argument(format!(
                "the {what} pattern has {} bytes; names have at most 255, and a pattern at \
                 most {MAX_PATTERN_BYTES}",
                pattern.len()
            )))
        }
        _ => Ok(()),
    }
}

/// A `GetDbSchemas` whose pattern is of a length the server takes.
pub(crate) fn checked_schemas(query: CommandGetDbSchemas) -> Result<CommandGetDbSchemas, Status> {
    check_pattern("dataset", query.db_schema_filter_pattern.as_ref())?;
    Ok(query)
}

/// A `GetTables` whose patterns are of a length the server takes, asking
/// for each table type that exists at most once.
pub(crate) fn checked_tables(mut query: CommandGetTables) -> Result<CommandGetTables, Status> {
    check_pattern("dataset", query.db_schema_filter_pattern.as_ref())?;
    check_pattern("table name", query.table_name_filter_pattern.as_ref())?;
    if !query.table_types.is_empty() {
        let asked = std::mem::take(&mut query.table_types);
        query.table_types = TABLE_TYPES
            .iter()
            .filter(|known| asked.iter().any(|a| a == *known))
            .map(|known| known.to_string())
            .collect();
        if query.table_types.is_empty() {
            // Only types no table has were asked for: an empty list would
            // ask for every table, a type no table has asks for none.
            query.table_types.push(String::new());
        }
    }
    Ok(query)
}

/// A `GetSqlInfo` that asks for at most [`MAX_SQL_INFO_IDS`] ids, each
/// once.
pub(crate) fn checked_sql_info(mut query: CommandGetSqlInfo) -> Result<CommandGetSqlInfo, Status> {
    if query.info.len() > MAX_SQL_INFO_IDS {
        return Err(Status::invalid_argument(format!(
            "GetSqlInfo asks for {} ids, more than the {MAX_SQL_INFO_IDS} it may: ask for none \
             to have them all",
            query.info.len()
        )));
    }
    query.info.sort_unstable();
    query.info.dedup();
    Ok(query)
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
    builder.append(SqlInfo::FlightSqlServerBulkIngestion, true);
    builder.append(SqlInfo::SqlDdlCatalog, true);
    builder.append(SqlInfo::SqlDdlSchema, true);
    builder.append(SqlInfo::SqlDdlTable, true);
    builder.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    builder.build().map_err(arrow_status)
}

/// The schema of the foreign-key calls' result (`GetImportedKeys`,
/// `GetExportedKeys`, `GetCrossReference`), as Flight SQL defines it.
pub(crate) fn foreign_keys_schema() -> SchemaRef {
    let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Arc::new(Schema::new(vec![
        text("pk_catalog_name", true),
        text("pk_db_schema_name", true),
        text("pk_table_name", false),
        text("pk_column_name", false),
        text("fk_catalog_name", true),
        text("fk_db_schema_name", true),
        text("fk_table_name", false),
        text("fk_column_name", false),
        Field::new("key_sequence", DataType::Int32, false),
        text("fk_key_name", true),
        text("pk_key_name", true),
        Field::new("update_rule", DataType::UInt8, false),
        Field::new("delete_rule", DataType::UInt8, false),
    ]))
}

/// The foreign keys of a table: none, since widesql has no foreign keys
/// (a row key is the only key). A JDBC or ODBC tool asks for them when it
/// shows a table; an empty answer is the true one.
pub(crate) fn foreign_keys() -> RecordBatch {
    RecordBatch::new_empty(foreign_keys_schema())
}

/// A type as `GetXdbcTypeInfo` lists it: nullable, compared by `=` and
/// `<`, with no literal quotes or parameters, and not a number (no radix,
/// no sign).
fn column_type(name: &str, data_type: XdbcDataType, column_size: Option<i32>) -> XdbcTypeInfo {
    XdbcTypeInfo {
        type_name: name.into(),
        data_type,
        column_size,
        nullable: Nullable::NullabilityNullable,
        searchable: Searchable::Basic,
        auto_increment: Some(false),
        local_type_name: Some(name.into()),
        sql_data_type: data_type,
        ..XdbcTypeInfo::default()
    }
}

/// A signed number of `digits` digits in `radix`.
fn number(name: &str, data_type: XdbcDataType, digits: i32, radix: i32) -> XdbcTypeInfo {
    XdbcTypeInfo {
        unsigned_attribute: Some(false),
        num_prec_radix: Some(radix),
        ..column_type(name, data_type, Some(digits))
    }
}

/// The SQL types a column can be declared with, as JDBC's
/// `DatabaseMetaData.getTypeInfo` and ODBC's `SQLGetTypeInfo` list them:
/// the scalar types with an XDBC type. Nested types (MAP, lists,
/// STRUCT) have none and are not listed.
pub(crate) fn xdbc_type_info() -> Result<XdbcTypeInfoData, Status> {
    use XdbcDataType::*;
    let mut builder = XdbcTypeInfoDataBuilder::new();
    builder.append(XdbcTypeInfo {
        unsigned_attribute: Some(false),
        ..column_type("BOOLEAN", XdbcBit, Some(1))
    });
    for (name, data_type, digits, unsigned_digits) in [
        ("TINYINT", XdbcTinyint, 3, 3),
        ("SMALLINT", XdbcSmallint, 5, 5),
        ("INTEGER", XdbcInteger, 10, 10),
        ("BIGINT", XdbcBigint, 19, 20),
    ] {
        builder.append(number(name, data_type, digits, 10));
        builder.append(XdbcTypeInfo {
            unsigned_attribute: Some(true),
            ..number(&format!("{name} UNSIGNED"), data_type, unsigned_digits, 10)
        });
    }
    // Binary digits of the significand.
    builder.append(number("REAL", XdbcReal, 24, 2));
    builder.append(number("DOUBLE", XdbcDouble, 53, 2));
    builder.append(XdbcTypeInfo {
        create_params: Some(vec!["precision".into(), "scale".into()]),
        fixed_prec_scale: true,
        minimum_scale: Some(0),
        maximum_scale: Some(38),
        ..number("DECIMAL", XdbcDecimal, 38, 10)
    });
    builder.append(XdbcTypeInfo {
        literal_prefix: Some("'".into()),
        literal_suffix: Some("'".into()),
        case_sensitive: true,
        searchable: Searchable::Full,
        ..column_type("VARCHAR", XdbcVarchar, None)
    });
    builder.append(column_type("BYTEA", XdbcVarbinary, None));
    // Characters of the longest value's text: `2024-01-31`,
    // `23:59:59.123456789`, `2024-01-31T23:59:59.123456789`. DATE's
    // subcode is 1, which the protocol names both YEAR and DATE.
    for (name, data_type, size, subcode) in [
        ("DATE", XdbcDate, 10, XdbcDatetimeSubcode::XdbcSubcodeYear),
        ("TIME", XdbcTime, 18, XdbcDatetimeSubcode::XdbcSubcodeTime),
        (
            "TIMESTAMP",
            XdbcTimestamp,
            29,
            XdbcDatetimeSubcode::XdbcSubcodeTimestamp,
        ),
    ] {
        builder.append(XdbcTypeInfo {
            sql_data_type: XdbcDatetime,
            datetime_subcode: Some(subcode),
            ..column_type(name, data_type, Some(size))
        });
    }
    builder.append(column_type("INTERVAL", XdbcInterval, None));
    builder.build().map_err(arrow_status)
}
