//! INSERT as a DataFusion data sink: the batches of the statement's input
//! become row mutations through [`RowWriter`] and are applied as one
//! statement by [`apply_input`] (see [`crate::sql::dml::write`]).

use std::fmt;
use std::sync::Arc;

use crate::sql::dml::apply::apply_input;
use crate::sql::dml::write::RowWriter;
use async_trait::async_trait;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::datasource::sink::DataSink;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};

/// Writes INSERTed rows into a table.
#[derive(Debug)]
pub struct WideSink {
    writer: RowWriter,
    streamed: bool,
    /// The table's columns, all nullable: NOT NULL is checked row by row
    /// by [`RowWriter::insert`], whose error names the row and the column,
    /// not by DataFusion, whose error names neither.
    schema: SchemaRef,
}

impl WideSink {
    /// A sink that writes through `writer` the rows of an input that reads
    /// the target table (`reads_target`) or not.
    pub fn new(writer: RowWriter, reads_target: bool) -> Self {
        let shape = &writer.shape().schema;
        let fields: Vec<Field> = shape
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(fields, shape.metadata().clone()));
        Self {
            writer,
            streamed: !reads_target,
            schema,
        }
    }

    /// Writes the input as one statement: as it streams, unless it reads
    /// the target table.
    pub async fn write_stream(&self, data: SendableRecordBatchStream) -> Result<u64> {
        let writer = self.writer.clone();
        apply_input(
            self.writer.store().clone(),
            data,
            self.streamed,
            move |batch: &RecordBatch, first_row| writer.insert(batch, first_row),
        )
        .await
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
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        self.write_stream(data).await
    }
}
