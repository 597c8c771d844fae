//! A statement's result, as [`Session::sql`](crate::Session::sql) returns it.
//!
//! DataFusion's `DataFrame` copies the whole session state when it is made
//! and builds a task context, optimises and plans again in `collect`: about
//! 30 µs a statement before any row is read (profile in
//! `bench/RESULTS.md`). A [`Frame`] holds what the statement gave instead:
//! rows read already (a key lookup, a count of rows written, `SHOW`), a
//! physical plan taken from the plan cache, which runs with the session's
//! shared task context, or, for anything else, DataFusion's `DataFrame`.
//! `collect`, `execute_stream` and `show` read it as they are; the rest of
//! the DataFrame API is one [`Frame::into_dataframe`] away.

use std::sync::Arc;

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::pretty::print_batches;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, DFSchemaRef};
use datafusion::dataframe::DataFrame;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::context::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::{collect, execute_stream, ExecutionPlan};

use crate::error::Result;
use crate::sql::from_df;
use crate::sql::session::planned;

/// The result of one statement: collect it, stream it, show it, or turn it
/// into a DataFusion `DataFrame` to go on with DataFusion's API.
#[derive(Debug)]
pub struct Frame {
    body: Body,
    /// Whether the statement changed something when it ran (see
    /// [`Frame::changed`]).
    changed: bool,
}

#[derive(Debug)]
enum Body {
    /// Rows computed when the statement ran.
    Rows {
        batch: RecordBatch,
        schema: DFSchemaRef,
        state: Arc<SessionState>,
    },
    /// A query's physical plan, ready to run once.
    Planned {
        physical: Arc<dyn ExecutionPlan>,
        schema: DFSchemaRef,
        state: Arc<SessionState>,
        task: Arc<TaskContext>,
    },
    /// A statement DataFusion planned, to run as DataFusion runs it.
    DataFrame(DataFrame),
}

impl Frame {
    /// Rows computed already; `state` is the session's, for
    /// [`Frame::into_dataframe`].
    pub(crate) fn rows(batch: RecordBatch, state: Arc<SessionState>) -> Result<Frame> {
        let schema = Arc::new(DFSchema::try_from(batch.schema())?);
        Ok(Frame {
            body: Body::Rows {
                batch,
                schema,
                state,
            },
            changed: false,
        })
    }

    /// The same result, of a statement that changed something when it ran
    /// (see [`Frame::changed`]).
    pub(crate) fn that_changed(mut self) -> Frame {
        self.changed = true;
        self
    }

    /// A physical plan that runs with `task` (the session's).
    pub(crate) fn planned(
        physical: Arc<dyn ExecutionPlan>,
        schema: DFSchemaRef,
        state: Arc<SessionState>,
        task: Arc<TaskContext>,
    ) -> Frame {
        Frame {
            body: Body::Planned {
                physical,
                schema,
                state,
                task,
            },
            changed: false,
        }
    }

    /// Whether running it may write: a statement DataFusion planned whose
    /// plan holds a write of rows or files (`INSERT … SELECT`, `COPY`, an
    /// `EXPLAIN ANALYZE` of one), which happens when it runs rather than
    /// when it was planned. A caller that hands the rows to someone else (a
    /// server) runs such a statement to its end first, with
    /// [`Frame::finish`], so that the write does not depend on the rows
    /// being read. An `EXPLAIN` without `ANALYZE` only gives its plan.
    pub fn writes(&self) -> bool {
        let Body::DataFrame(frame) = &self.body else {
            return false;
        };
        let plan = frame.logical_plan();
        !matches!(plan, LogicalPlan::Explain(_))
            && plan
                .exists(|plan| Ok(matches!(plan, LogicalPlan::Dml(_) | LogicalPlan::Copy(_))))
                .unwrap_or(true)
    }

    /// Whether the statement changed something when it ran: wrote rows or
    /// files, changed the catalog, a user or grant, a setting, or made or
    /// dropped a prepared statement. A statement whose writes run with its
    /// plan ([`Frame::writes`]) has changed nothing until it runs: after
    /// [`Frame::finish`] it has. A caller that hands a result to someone
    /// else (a server) tells by this whether asking for it again would
    /// change something twice.
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// Runs the statement to its end now, if it has not run, and keeps its
    /// rows to be read later.
    pub async fn finish(self) -> Result<Frame> {
        let state = match &self.body {
            Body::Rows { .. } => return Ok(self),
            Body::Planned { state, .. } => Arc::clone(state),
            Body::DataFrame(frame) => Arc::new(frame.clone().into_parts().0),
        };
        let planned = self.stream_schema();
        let changed = self.changed || self.writes();
        let batches = self.collect().await?;
        // The batches' own schema where there are any: the logical one
        // can differ from it in nullability.
        let schema = batches.first().map_or(planned, RecordBatch::schema);
        let frame = Frame::rows(concat_batches(&schema, &batches)?, state)?;
        Ok(Frame { changed, ..frame })
    }

    /// The result's schema, with the qualifiers of its columns.
    pub fn schema(&self) -> &DFSchema {
        match &self.body {
            Body::Rows { schema, .. } | Body::Planned { schema, .. } => schema,
            Body::DataFrame(frame) => frame.schema(),
        }
    }

    /// The Arrow schema of the batches [`Frame::execute_stream`] gives:
    /// the physical plan's when there is one (its nullability can differ
    /// from the logical schema's), else the rows' or the logical one.
    pub fn stream_schema(&self) -> SchemaRef {
        match &self.body {
            Body::Rows { batch, .. } => batch.schema(),
            Body::Planned { physical, .. } => physical.schema(),
            Body::DataFrame(frame) => Arc::new(frame.schema().as_arrow().clone()),
        }
    }

    /// Runs the statement's plan, if it has one, and returns every row.
    pub async fn collect(self) -> Result<Vec<RecordBatch>> {
        match self.body {
            Body::Rows { batch, .. } => Ok(vec![batch]),
            Body::Planned { physical, task, .. } => Ok(collect(physical, task).await?),
            Body::DataFrame(frame) => frame.collect().await.map_err(from_df),
        }
    }

    /// Runs the statement's plan, if it has one, as a stream of batches
    /// read as they are asked for.
    pub async fn execute_stream(self) -> Result<SendableRecordBatchStream> {
        match self.body {
            Body::Rows { batch, .. } => {
                let schema = batch.schema();
                Ok(Box::pin(MemoryStream::try_new(vec![batch], schema, None)?))
            }
            Body::Planned { physical, task, .. } => Ok(execute_stream(physical, task)?),
            Body::DataFrame(frame) => frame.execute_stream().await.map_err(from_df),
        }
    }

    /// The result's Arrow schema and every row.
    pub(crate) async fn into_rows(self) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let schema = Arc::new(self.schema().as_arrow().clone());
        Ok((schema, self.collect().await?))
    }

    /// Prints the rows as a text table.
    pub async fn show(self) -> Result<()> {
        let batches = self.collect().await?;
        Ok(print_batches(&batches)?)
    }

    /// The result as a DataFusion `DataFrame`, whose `collect` runs the
    /// plan made already (or returns the rows read already) instead of
    /// planning the statement again.
    pub fn into_dataframe(self) -> Result<DataFrame> {
        match self.body {
            Body::Rows {
                batch,
                schema,
                state,
            } => {
                let physical =
                    MemorySourceConfig::try_new_exec(&[vec![batch]], schema.inner().clone(), None)?;
                Ok(planned::frame(state.as_ref().clone(), physical, schema))
            }
            Body::Planned {
                physical,
                schema,
                state,
                ..
            } => Ok(planned::frame(state.as_ref().clone(), physical, schema)),
            Body::DataFrame(frame) => Ok(frame),
        }
    }
}

impl From<DataFrame> for Frame {
    /// A statement DataFusion planned, which has changed nothing yet (see
    /// [`Frame::changed`]).
    fn from(frame: DataFrame) -> Frame {
        Frame {
            body: Body::DataFrame(frame),
            changed: false,
        }
    }
}
