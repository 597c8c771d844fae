//! Applying a statement's row changes: all at once ([`apply`]), or batch by
//! batch as its input streams ([`apply_input`]), each batch atomic and an
//! error after the first saying how many rows were written.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;

use crate::sql::error::from_df;
use crate::sql::error::to_df;
use crate::sql::runtime::off_runtime;
use crate::sql::SqlError;
use crate::table::{StatementWriter, TableStore};

use super::write::RowChanges;

/// Turns one batch of a statement's input into row changes; it also gets
/// the input's number (from 0) of the batch's first row. It may read the
/// table (INSERT looks up the rows its DEFAULTs go into), so it runs off
/// the async runtime, as writes do.
pub trait BuildRows: Fn(&RecordBatch, u64) -> Result<RowChanges> + Send + Sync + 'static {}

impl<F> BuildRows for F where F: Fn(&RecordBatch, u64) -> Result<RowChanges> + Send + Sync + 'static {}

/// Applies the rows `build` makes of each batch of `input` as one
/// statement, and returns how many rows were written.
///
/// `streamed`: nothing in the input reads the table but (for DELETE and
/// UPDATE) its own target scan, which visits each row once and ahead of the
/// writes to it; so the rows are applied as they come, in bounded memory,
/// by a [`StatementWriter`]. Otherwise the input is read to its end first,
/// so that the statement sees the table as of its start.
pub async fn apply_input(
    store: TableStore,
    mut input: SendableRecordBatchStream,
    streamed: bool,
    build: impl BuildRows,
) -> Result<u64> {
    if !streamed {
        let rows = collect_rows(input, build).await?;
        return apply(store, rows).await;
    }
    let build = Arc::new(build);
    let mut writer = StatementWriter::new(store).map_err(to_df)?;
    let mut seen = 0;
    let mut next = input.next().await;
    while let Some(batch) = next {
        let batch = batch.map_err(|e| to_df(writer.stopped(from_df(e))))?;
        let first_row = seen;
        seen += batch.num_rows() as u64;
        // The next batch is read before this one is applied: after the
        // last, its rows and the statement's end are written in one step
        // off the runtime instead of two (most writes are one batch, and
        // each step is a thread hand-off; see `bench/RESULTS.md`).
        next = input.next().await;
        let last = next.is_none();
        let build = Arc::clone(&build);
        let step = blocking(move || {
            // A panic here must still say how many rows earlier batches
            // wrote, so it is caught while the writer, which counts them,
            // is at hand. (The writer is not used again after one.)
            let added = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let rows = build(&batch, first_row).map_err(from_df)?;
                rows.into_iter()
                    .try_for_each(|(key, mutation)| writer.push(key, mutation))
            }));
            match added {
                Ok(Ok(())) if last => writer.finish().map(Step::Done),
                Ok(Ok(())) => Ok(Step::Going(writer)),
                Ok(Err(e)) => Err(writer.stopped(e)),
                Err(panic) => Err(writer.stopped(crate::Error::Sql(SqlError::Invalid(
                    crate::error::stopped_by_panic(panic.as_ref()),
                )))),
            }
        })
        .await?;
        match step {
            Step::Going(going) => writer = going,
            Step::Done(rows) => return Ok(rows as u64),
        }
    }
    Ok(blocking(move || writer.finish()).await? as u64)
}

/// Where a streamed statement is after one batch: going on with its
/// writer, or done, with the rows it wrote.
enum Step {
    Going(StatementWriter),
    Done(usize),
}

/// The rows `build` makes of every batch of `input`.
pub async fn collect_rows(
    mut input: SendableRecordBatchStream,
    build: impl BuildRows,
) -> Result<RowChanges> {
    let build = Arc::new(build);
    let mut rows = RowChanges::new();
    let mut seen = 0;
    while let Some(batch) = input.next().await {
        let batch = batch?;
        let first_row = seen;
        seen += batch.num_rows() as u64;
        let build = Arc::clone(&build);
        rows.extend(off_runtime(move || build(&batch, first_row)).await?);
    }
    Ok(rows)
}

/// Runs storage work off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> crate::Result<T> + Send + 'static,
) -> Result<T> {
    off_runtime(move || work().map_err(to_df)).await
}

/// Applies a statement's row changes off the async runtime: all checked
/// first, then written atomically up to the statement batch size.
pub async fn apply(store: TableStore, rows: RowChanges) -> Result<u64> {
    Ok(blocking(move || store.apply_statement(&rows)).await? as u64)
}

#[cfg(test)]
mod tests {
    use super::apply_input;
    use crate::{Db, DbOptions, Error, RowMutation};
    use datafusion::arrow::array::{ArrayRef, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::error::DataFusionError;
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    use std::sync::Arc;

    /// Streams one batch per item of `items` (a row key, or an error the
    /// input yields) through `apply_input` into `t (_key VARCHAR PRIMARY
    /// KEY, n BIGINT)` of a database whose atomic batches hold
    /// `batch_rows` rows; building the rows of input row `panic_at`
    /// panics. Returns the statement's error and the keys stored after it.
    async fn stream_into_table(
        batch_rows: usize,
        items: Vec<std::result::Result<&'static str, &'static str>>,
        panic_at: Option<u64>,
    ) -> crate::Result<(Error, String)> {
        let dir = tempfile::tempdir()
            .map_err(|e| Error::Sql(crate::sql::SqlError::Invalid(e.to_string())))?;
        let db = Db::open_with(
            dir.path(),
            DbOptions::default().with_statement_batch_rows(batch_rows),
        )?;
        let session = db.session();
        session
            .run("CREATE TABLE t (_key VARCHAR PRIMARY KEY, n BIGINT)")
            .await?;
        let store = db.open_table("default", "public", "t")?.store()?;
        let schema = Arc::new(Schema::new(vec![Field::new("_key", DataType::Utf8, true)]));
        let batches = items
            .into_iter()
            .map(|item| match item {
                Ok(key) => {
                    let keys: ArrayRef = Arc::new(StringArray::from(vec![key]));
                    Ok(RecordBatch::try_new(Arc::clone(&schema), vec![keys])?)
                }
                Err(message) => Err(DataFusionError::Execution(message.into())),
            })
            .collect::<Vec<_>>();
        let input = Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::iter(batches),
        ));
        let family = crate::sql::dml::write::marker_family(&store).ok_or(Error::Sql(
            crate::sql::SqlError::Invalid("no family".into()),
        ))?;
        let build = move |batch: &RecordBatch, first_row: u64| {
            if Some(first_row) == panic_at {
                panic!("row building failed");
            }
            let key = batch.column(0).as_any().downcast_ref::<StringArray>();
            let key = key
                .map(|k| k.value(0).as_bytes().to_vec())
                .unwrap_or_default();
            // A `_key VARCHAR` row key is the string's bytes.
            Ok(vec![(
                key,
                RowMutation::new().set(family.as_str(), "n", [0u8; 8]),
            )])
        };
        let e = apply_input(store, input, true, build)
            .await
            .err()
            .map(crate::sql::error::from_df)
            .ok_or(Error::Sql(crate::sql::SqlError::Invalid(
                "the statement did not fail".into(),
            )))?;
        let keys = session
            .sql("SELECT string_agg(_key, ',' ORDER BY _key) FROM t")
            .await?
            .collect()
            .await?;
        let keys = datafusion::arrow::util::display::array_value_to_string(keys[0].column(0), 0)?;
        Ok((e, keys))
    }

    /// An error the input yields after some of its batches stops the
    /// statement there, even though the input is read a batch ahead: the
    /// rows of full atomic batches stay written and are counted, the rows
    /// still pending are not written.
    #[tokio::test]
    async fn an_input_error_stops_a_streamed_statement_after_its_full_batches() -> crate::Result<()>
    {
        let items = vec![Ok("a"), Ok("b"), Err("the input broke")];
        let (e, keys) = stream_into_table(1, items, None).await?;
        match &e {
            Error::PartlyApplied { written, source } => {
                assert_eq!(*written, 1, "{e}");
                assert!(source.to_string().contains("the input broke"), "{e}");
            }
            other => panic!("not PartlyApplied: {other}"),
        }
        assert_eq!(keys, "a");
        Ok(())
    }

    /// A panic while a streamed statement builds its rows still says how
    /// many rows its earlier atomic batches wrote, as any other error does.
    #[tokio::test]
    async fn a_panic_in_a_streamed_statement_says_what_was_written() -> crate::Result<()> {
        let items = vec![Ok("a"), Ok("b"), Ok("c"), Ok("d")];
        let (e, keys) = stream_into_table(2, items, Some(3)).await?;
        match &e {
            Error::PartlyApplied { written, source } => {
                assert_eq!(*written, 2, "{e}");
                assert!(source.to_string().contains("row building failed"), "{e}");
            }
            other => panic!("not PartlyApplied: {other}"),
        }
        assert_eq!(keys, "a,b");
        Ok(())
    }
}
