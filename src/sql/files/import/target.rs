//! Where an import writes: the table checked against the options, and the
//! one SQL statement (`INSERT … SELECT`, `CREATE [OR REPLACE] TABLE … AS
//! SELECT`) that writes a source's rows through the one write path; and a
//! stream of record batches as such a source.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::common::{DataFusionError, TableReference};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::PartitionStream;

use super::ImportOptions;
use crate::access::{Privilege, Securable};
use crate::error::{Error, Result};
use crate::sql::read::table::WideTable;
use crate::sql::session::names::name_parts_of_text;
use crate::sql::Session;
use crate::sql::SqlError;

/// The table an import writes, checked against `options`.
pub(super) async fn import_target(
    session: &Session,
    table: &str,
    options: ImportOptions,
) -> Result<ImportTarget> {
    let (project, dataset, name) = session
        .options()
        .resolve(&name_parts_of_text(table))
        .ok_or_else(|| {
            Error::Sql(SqlError::BadName {
                name: table.to_string(),
                expected: "a [[project.]dataset.]table name",
            })
        })?;
    let qualified = format!("{project}.{dataset}.{name}");
    let dataset_handle = session
        .db()
        .open_project(&project)?
        .open_dataset(&dataset)?;
    let existing = dataset_handle.table(&name)?;
    let exists = existing.is_some();
    match (exists, options.create, options.append || options.replace) {
        (true, true, false) => {
            return Err(Error::Sql(SqlError::Invalid(format!(
                "table {qualified} exists: import into it without create, or drop it first"
            ))))
        }
        (false, false, _) => {
            return Err(Error::Sql(SqlError::Invalid(format!(
                "table {qualified} does not exist: create it first, or import with create"
            ))))
        }
        _ => {}
    }
    // A session of its own, as this one's user: one partition keeps
    // the file's row order, so the row an error names is the file's.
    let session = Session::with_options(session.db().clone(), session.options().clone());
    session
        .run("SET datafusion.execution.target_partitions = 1")
        .await?;
    let target = quoted(&[&project, &dataset, &name]);
    let appends = exists && (!options.create || options.append);
    // The columns `SELECT *` reads, from the catalog: appending needs the
    // INSERT grant alone, which the import's statement is checked for.
    let columns = match existing.filter(|_| appends) {
        Some(table) => {
            // Checked here too, so that a user who may not write the table
            // learns nothing of its columns from what the import says.
            session.require(Privilege::Insert, Securable::Table(table.id()))?;
            let provider = WideTable::open(session.db(), table.id(), false)?.ok_or_else(|| {
                Error::Sql(SqlError::Invalid(format!(
                    "table {qualified} was dropped while the import began"
                )))
            })?;
            Some(Arc::clone(&provider.shape().schema))
        }
        None => None,
    };
    Ok(ImportTarget {
        session,
        project,
        dataset,
        qualified,
        target,
        columns,
        replace: exists && !appends,
    })
}

/// Where an import writes.
pub(super) struct ImportTarget {
    /// The session the import's statement runs in.
    session: Session,
    project: String,
    dataset: String,
    /// `project.dataset.table`, for messages.
    qualified: String,
    /// The quoted name.
    target: String,
    /// The columns of the table appended to; `None`: it is created.
    pub(super) columns: Option<SchemaRef>,
    /// It exists and is replaced.
    replace: bool,
}

impl ImportTarget {
    /// Writes the rows of `source` through one SQL statement: `INSERT …
    /// SELECT` into a table that exists, `CREATE [OR REPLACE] TABLE … AS
    /// SELECT` otherwise.
    pub(super) async fn write(self, source: Arc<dyn PartitionStream>) -> Result<()> {
        let schema = Arc::clone(source.schema());
        let source_columns: Vec<String> =
            schema.fields().iter().map(|f| f.name().clone()).collect();
        if source_columns.is_empty() {
            return Err(Error::Sql(SqlError::Invalid(
                "the file has no columns: it is empty, or has no header row or fields".into(),
            )));
        }
        if let Some(columns) = &self.columns {
            let unknown: Vec<&str> = source_columns
                .iter()
                .filter(|c| columns.field_with_name(c).is_err())
                .map(String::as_str)
                .collect();
            if !unknown.is_empty() {
                return Err(Error::Sql(SqlError::Invalid(format!(
                    "the file has column(s) '{}', which table {} does not have",
                    unknown.join("', '"),
                    self.qualified
                ))));
            }
        }
        let source_name = format!("widesql_import_{}", uuid::Uuid::now_v7().simple());
        let source_ref = TableReference::full(
            self.project.as_str(),
            self.dataset.as_str(),
            source_name.as_str(),
        );
        let provider = StreamingTable::try_new(schema, vec![source])?;
        let context = self.session.own_context();
        context.register_table(source_ref.clone(), Arc::new(provider))?;
        let from = quoted(&[&self.project, &self.dataset, &source_name]);
        let list = source_columns
            .iter()
            .map(|c| quoted(&[c]))
            .collect::<Vec<_>>()
            .join(", ");
        let target = &self.target;
        let statement = match (&self.columns, self.replace) {
            (Some(_), _) => format!("INSERT INTO {target} ({list}) SELECT {list} FROM {from}"),
            (None, false) => format!("CREATE TABLE {target} AS SELECT {list} FROM {from}"),
            (None, true) => {
                format!("CREATE OR REPLACE TABLE {target} AS SELECT {list} FROM {from}")
            }
        };
        let result = self.session.run(&statement).await;
        context.deregister_table(source_ref)?;
        result.map(drop)
    }
}

/// A stream of record batches as the one partition of a table, read once;
/// counts the rows through it.
pub(super) struct StreamSource {
    pub(super) schema: SchemaRef,
    pub(super) stream: Mutex<Option<SendableRecordBatchStream>>,
    pub(super) rows: Arc<AtomicU64>,
}

impl std::fmt::Debug for StreamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSource")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PartitionStream for StreamSource {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        use futures::StreamExt as _;
        let taken = self.stream.lock().unwrap_or_else(|p| p.into_inner()).take();
        let rows = Arc::clone(&self.rows);
        let stream = match taken {
            Some(stream) => stream
                .map(move |batch| {
                    if let Ok(batch) = &batch {
                        rows.fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
                    }
                    batch
                })
                .boxed(),
            None => futures::stream::once(async {
                Err(DataFusionError::Execution(
                    "the stream was read already".into(),
                ))
            })
            .boxed(),
        };
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        ))
    }
}

/// `"a"."b"`: identifiers quoted as SQL quotes them.
fn quoted(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|p| format!("\"{}\"", p.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_as_sql_quotes_them() {
        assert_eq!(quoted(&["a", "b\"c"]), "\"a\".\"b\"\"c\"");
    }
}
