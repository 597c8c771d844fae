//! INSERT: record batches become row mutations.
//!
//! Each row writes a new version of every non-NULL column (a NULL writes
//! nothing, so INSERT of an existing key updates the columns it gives) at
//! one server timestamp per batch of 1000 rows, or at the session's
//! `widesql.write_timestamp` for backfills.
//!
//! A row exists while it has a cell. A row whose every column is NULL gets
//! a *row marker* instead: an empty cell under the empty qualifier of the
//! first family that has only declared columns (`cf` in tables made by
//! SQL). No SQL column reads that qualifier, so the marker only keeps the
//! row.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{exec_err, DataFusionError, Result};
use datafusion::datasource::sink::DataSink;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use futures::StreamExt;

use crate::keys::{encode_tuple, Element};
use crate::sql::scan::to_df;
use crate::sql::shape::{Shape, Source};
use crate::sql::values;
use crate::table::{RowMutation, TableStore};

/// The family that holds row markers in `store`, if any: the first with
/// declared columns only.
pub fn marker_family(store: &TableStore) -> Option<String> {
    store
        .layout
        .spec
        .families
        .iter()
        .find(|f| f.qualifier_type.is_none())
        .map(|f| f.name.clone())
}

/// Adds the row marker to a mutation.
pub fn with_marker(m: RowMutation, family: &Option<String>, timestamp: Option<i64>) -> RowMutation {
    match (family, timestamp) {
        (Some(f), Some(ts)) => m.set_at(f.clone(), b"", ts, b""),
        (Some(f), None) => m.set(f.clone(), b"", b""),
        (None, _) => m,
    }
}

/// Per-session write settings, kept as a DataFusion config extension.
#[derive(Debug, Clone, Default)]
pub struct WriteSettings {
    /// Write cells at this timestamp (µs) instead of a server timestamp.
    pub timestamp: Option<i64>,
}

/// Writes INSERTed rows into a table.
#[derive(Debug)]
pub struct WideSink {
    store: TableStore,
    shape: Arc<Shape>,
    settings: WriteSettings,
}

impl WideSink {
    /// A sink into `store`.
    pub fn new(store: TableStore, shape: Arc<Shape>, settings: WriteSettings) -> Self {
        Self {
            store,
            shape,
            settings,
        }
    }

    fn family_name(&self, id: u16) -> Result<String> {
        self.store
            .layout
            .family_by_id(id)
            .map(|f| f.name.clone())
            .ok_or_else(|| DataFusionError::Internal(format!("family id {id} vanished")))
    }

    fn set(&self, m: RowMutation, family: String, qualifier: &[u8], value: Vec<u8>) -> RowMutation {
        match self.settings.timestamp {
            Some(ts) => m.set_at(family, qualifier, ts, value),
            None => m.set(family, qualifier, value),
        }
    }

    /// The row mutations of a batch (whose columns are the table's).
    pub fn mutations(&self, batch: &RecordBatch) -> Result<Vec<(Vec<u8>, RowMutation)>> {
        let schema = self.shape.schema.clone();
        let marker = marker_family(&self.store);
        let mut rows = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let mut key: Option<Vec<u8>> = None;
            let mut parts: Vec<(usize, Element)> = Vec::new();
            let mut mutation = RowMutation::new();
            for (c, source) in self.shape.sources.iter().enumerate() {
                let array = batch.column(c);
                let name = schema.field(c).name();
                let bad = |e: String| DataFusionError::Execution(format!("column '{name}': {e}"));
                match source {
                    Source::RowKey { .. } => match values::encode_cell(array, row).map_err(bad)? {
                        Some(bytes) => key = Some(bytes),
                        None => return exec_err!("column '{name}': the row key must not be NULL"),
                    },
                    Source::KeyPart { index, value_type } => {
                        match values::encode_element(array, row, *value_type).map_err(bad)? {
                            Some(element) => parts.push((*index, element)),
                            None => {
                                return exec_err!("primary key column '{name}' must not be NULL")
                            }
                        }
                    }
                    Source::Column {
                        family, qualifier, ..
                    } => {
                        if let Some(value) = values::encode_cell(array, row).map_err(bad)? {
                            mutation =
                                self.set(mutation, self.family_name(*family)?, qualifier, value);
                        }
                    }
                    Source::Map { family, .. } => {
                        if array.is_null(row) {
                            continue;
                        }
                        let family = self.family_name(*family)?;
                        let entries = array.as_map().value(row);
                        let (keys, vals) = (entries.column(0), entries.column(1));
                        for i in 0..entries.len() {
                            let Some(qualifier) = values::encode_cell(keys, i).map_err(bad)? else {
                                continue;
                            };
                            if let Some(value) = values::encode_cell(vals, i).map_err(bad)? {
                                mutation = self.set(mutation, family.clone(), &qualifier, value);
                            }
                        }
                    }
                }
            }
            let key = match key {
                Some(key) => key,
                None if !parts.is_empty() => {
                    parts.sort_by_key(|(i, _)| *i);
                    let tuple: Vec<Element> = parts.into_iter().map(|(_, e)| e).collect();
                    encode_tuple(&tuple).map_err(|e| DataFusionError::Execution(e.to_string()))?
                }
                None => uuid::Uuid::now_v7().as_bytes().to_vec(),
            };
            if mutation.is_empty() {
                mutation = with_marker(mutation, &marker, self.settings.timestamp);
            }
            rows.push((key, mutation));
        }
        Ok(rows)
    }
}

impl DisplayAs for WideSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "WideSink: table={}", self.store.layout.name)
    }
}

#[async_trait]
impl DataSink for WideSink {
    fn schema(&self) -> &SchemaRef {
        &self.shape.schema
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let mut written = 0u64;
        while let Some(batch) = data.next().await {
            let rows = self.mutations(&batch?)?;
            let store = self.store.clone();
            written += tokio::task::spawn_blocking(move || store.bulk_mutate(rows))
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?
                .map_err(to_df)? as u64;
        }
        Ok(written)
    }
}
