//! INSERT as a DataFusion data sink: the batches of the statement's input
//! become row mutations through [`RowWriter`] and are applied as one
//! statement once the input is exhausted (see [`crate::sql::dml::write`]).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result;
use datafusion::datasource::sink::DataSink;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use futures::StreamExt;

use crate::sql::dml::write::RowWriter;

/// Writes INSERTed rows into a table.
#[derive(Debug)]
pub struct WideSink {
    writer: RowWriter,
}

impl WideSink {
    /// A sink that writes through `writer`.
    pub fn new(writer: RowWriter) -> Self {
        Self { writer }
    }

    /// Reads the whole input, then writes it as one statement.
    pub async fn write_stream(&self, mut data: SendableRecordBatchStream) -> Result<u64> {
        let mut rows = Vec::new();
        while let Some(batch) = data.next().await {
            rows.extend(self.writer.insert(&batch?)?);
        }
        self.writer.apply(rows).await
    }
}

impl DisplayAs for WideSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "WideSink: table={}", self.writer.store().layout.name)
    }
}

#[async_trait]
impl DataSink for WideSink {
    fn schema(&self) -> &SchemaRef {
        &self.writer.shape().schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        self.write_stream(data).await
    }
}
