//! `SHOW DATABASES | SCHEMAS | TABLES | COLUMNS` and `DESCRIBE`; a
//! session's user sees only what its grants reach (see [`crate::access`]).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::ObjectName;

use crate::access::Securable;
use crate::error::Result;
use crate::sql::values::sql_type_name;
use crate::sql::Session;

/// `SHOW DATABASES`.
pub(crate) fn show_databases(session: &Session) -> Result<RecordBatch> {
    let names: Vec<String> = session
        .db()
        .projects()?
        .iter()
        .filter(|p| session.sees(Securable::Project(p.id())))
        .map(|p| p.name())
        .collect::<Result<_>>()?;
    one_column("database_name", names)
}

/// `SHOW SCHEMAS [FROM project]`.
pub(crate) fn show_schemas(session: &Session, project: Option<&str>) -> Result<RecordBatch> {
    let project = project.unwrap_or(&session.options().default_project);
    let names: Vec<String> = session
        .db()
        .open_project(project)?
        .datasets()?
        .iter()
        .filter(|d| session.sees(Securable::Dataset(d.id())))
        .map(|d| d.name())
        .collect::<Result<_>>()?;
    one_column("schema_name", names)
}

/// `SHOW TABLES [FROM [project.]dataset]`: the tables of every
/// project but the system's, or of one dataset, with their project and
/// dataset (as DataFusion's `SHOW TABLES` lists catalog and schema).
pub(crate) fn show_tables(session: &Session, dataset: Option<&ObjectName>) -> Result<RecordBatch> {
    let datasets = match dataset {
        Some(name) => {
            let (project, dataset) = session.resolve_dataset_name(name)?;
            let found = session
                .db()
                .open_project(&project)?
                .open_dataset(&dataset)?;
            vec![(project, found)]
        }
        // The system's own (`_system`, a leading `_`) are listed only
        // when named, as psql's `\dt` leaves out `pg_catalog`.
        None => {
            let mut all = Vec::new();
            for project in session.db().projects()? {
                let name = project.name()?;
                if !name.starts_with('_') {
                    all.extend(project.datasets()?.into_iter().map(|d| (name.clone(), d)));
                }
            }
            all
        }
    };
    let mut rows: Vec<[String; 4]> = Vec::new();
    for (project, dataset) in datasets {
        let tables = dataset.tables()?;
        let seen: Vec<_> = tables
            .iter()
            .filter(|t| session.sees(Securable::Table(t.id())))
            .collect();
        if seen.is_empty() {
            continue;
        }
        let dataset = dataset.name()?;
        for table in seen {
            rows.push([
                project.clone(),
                dataset.clone(),
                table.name()?,
                "BASE TABLE".into(),
            ]);
        }
    }
    text_columns(
        &["table_catalog", "table_schema", "table_name", "table_type"],
        (0..4)
            .map(|i| rows.iter().map(|r| Some(r[i].clone())).collect())
            .collect(),
    )
}

/// `DESCRIBE t` / `SHOW COLUMNS FROM t`: the SQL columns in order, with
/// their family, locality group and GC policy.
pub(crate) fn describe(session: &Session, name: &ObjectName) -> Result<RecordBatch> {
    let table = session.open_table(name)?;
    let spec = table.spec()?;
    let shape = crate::sql::read::shape::Shape::new(&spec, false);
    let family_of = |id: u16| spec.families.iter().find(|f| f.id == id);
    let mut rows: Vec<[Option<String>; 7]> = Vec::new();
    for (field, source) in shape.schema.fields().iter().zip(&shape.sources) {
        use crate::sql::read::shape::Source;
        let (data_type, family) = match source {
            Source::RowKey { utf8 } => (if *utf8 { "VARCHAR" } else { "BYTEA" }.to_string(), None),
            Source::KeyPart { value_type, .. } => (sql_type_name(value_type), None),
            Source::Column {
                family, value_type, ..
            } => (sql_type_name(value_type), family_of(*family)),
            Source::Map { family, value_type } => (
                format!("MAP(VARCHAR, {})", sql_type_name(value_type)),
                family_of(*family),
            ),
        };
        let nullable = if field.is_nullable() { "YES" } else { "NO" };
        rows.push(match family {
            None => [
                Some(field.name().clone()),
                Some(data_type),
                Some(nullable.into()),
                Some("PRIMARY KEY".into()),
                None,
                None,
                None,
            ],
            Some(f) => [
                Some(field.name().clone()),
                Some(data_type),
                Some(nullable.into()),
                Some(f.name.clone()),
                Some(f.locality_group.clone()),
                f.gc.max_versions.map(|n| n.to_string()),
                f.gc.max_age_micros.map(|us| format!("{}s", us / 1_000_000)),
            ],
        });
    }
    let names = [
        "column_name",
        "data_type",
        "is_nullable",
        "family",
        "locality_group",
        "max_versions",
        "ttl",
    ];
    text_columns(
        &names,
        (0..names.len())
            .map(|i| rows.iter().map(|r| r[i].clone()).collect())
            .collect(),
    )
}

/// A batch of nullable text columns `names`, holding `columns`.
fn text_columns(names: &[&str], columns: Vec<Vec<Option<String>>>) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(
        names
            .iter()
            .map(|n| Field::new(*n, DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let columns: Vec<ArrayRef> = columns
        .into_iter()
        .map(|values| Arc::new(StringArray::from(values)) as ArrayRef)
        .collect();
    Ok(RecordBatch::try_new(schema, columns)?)
}

pub(super) fn one_column(name: &str, values: Vec<String>) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]));
    Ok(RecordBatch::try_new(
        schema,
        vec![Arc::new(StringArray::from(values)) as ArrayRef],
    )?)
}
