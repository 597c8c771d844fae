//! DataFusion 55 over a `MemTable` of the pages: no storage at all, so the
//! upper bound of what DataFusion's execution gives widesql's SQL. It has
//! no index: a point read or a range is a filtered scan.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, Int64Builder, MapBuilder, RecordBatch, StringBuilder,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;

use super::System;
use crate::data::Page;
use crate::Res;

/// A DataFusion session with the pages in memory.
pub struct DataFusionMem {
    ctx: SessionContext,
    /// Everything loaded so far: a later load adds to it.
    batches: Vec<RecordBatch>,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl DataFusionMem {
    /// An empty session.
    pub fn new(runtime: Arc<tokio::runtime::Runtime>) -> Self {
        DataFusionMem {
            ctx: SessionContext::new(),
            batches: Vec::new(),
            runtime,
        }
    }

    /// Runs a query to the end; its batches.
    fn query(&self, sql: &str) -> Res<Vec<RecordBatch>> {
        self.runtime
            .block_on(async { Ok(self.ctx.sql(sql).await?.collect().await?) })
    }
}

/// The pages as Arrow batches of up to 8,192 rows:
/// `(_key, language, checksum, rank, contents, anchor MAP)`.
pub fn page_batches(pages: &[Page]) -> Res<(SchemaRef, Vec<RecordBatch>)> {
    let mut batches = Vec::new();
    for chunk in pages.chunks(8192) {
        let mut key = StringBuilder::new();
        let mut language = StringBuilder::new();
        let mut checksum = BinaryBuilder::new();
        let mut rank = Int64Builder::new();
        let mut contents = StringBuilder::new();
        let mut anchor = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        for p in chunk {
            key.append_value(&p.key);
            language.append_value(p.language);
            checksum.append_value(p.checksum);
            rank.append_value(p.rank);
            contents.append_value(&p.contents);
            for (from, text) in &p.anchors {
                anchor.keys().append_value(from);
                anchor.values().append_value(text);
            }
            anchor.append(true)?;
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("_key", Arc::new(key.finish())),
            ("language", Arc::new(language.finish())),
            ("checksum", Arc::new(checksum.finish())),
            ("rank", Arc::new(rank.finish())),
            ("contents", Arc::new(contents.finish())),
            ("anchor", Arc::new(anchor.finish())),
        ];
        batches.push(RecordBatch::try_from_iter(columns)?);
    }
    let schema = batches
        .first()
        .map(RecordBatch::schema)
        .ok_or("no pages to load")?;
    Ok((schema, batches))
}

/// The number of rows in `batches`.
pub fn row_count(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

/// Reads `(language, count)` rows and `sum` results, whatever integer or
/// string view types the engine chose.
pub fn language_counts(batches: &[RecordBatch]) -> Res<Vec<(String, i64)>> {
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::{DataType, Int64Type};
    let mut out = Vec::new();
    for batch in batches {
        let language = cast(batch.column(0), &DataType::Utf8)?;
        let count = cast(batch.column(1), &DataType::Int64)?;
        let (language, count) = (
            language.as_string::<i32>(),
            count.as_primitive::<Int64Type>(),
        );
        for i in 0..batch.num_rows() {
            if !language.is_null(i) {
                out.push((language.value(i).to_string(), count.value(i)));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The one integer of a one-row, one-column result.
pub fn single_i64(batches: &[RecordBatch]) -> Res<i64> {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::{DataType, Int64Type};
    let batch = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .ok_or("the query returned no row")?;
    Ok(cast(batch.column(0), &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .value(0))
}

impl System for DataFusionMem {
    fn name(&self) -> String {
        "DataFusion MemTable".into()
    }

    fn load(&mut self, pages: &[Page]) -> Res<()> {
        let (schema, batches) = page_batches(pages)?;
        self.batches.extend(batches);
        let table = MemTable::try_new(schema, vec![self.batches.clone()])?;
        self.ctx.deregister_table("pages")?;
        self.ctx.register_table("pages", Arc::new(table))?;
        Ok(())
    }

    fn point(&mut self, key: &str) -> Res<bool> {
        let rows = self.query(&format!("SELECT * FROM pages WHERE _key = '{key}'"))?;
        Ok(row_count(&rows) == 1)
    }

    fn range(&mut self, prefix: &str) -> Res<usize> {
        let (start, end) = super::prefix_bounds(prefix);
        let rows = self.query(&format!(
            "SELECT _key, language FROM pages WHERE _key >= '{start}' AND _key < '{end}'"
        ))?;
        Ok(row_count(&rows))
    }

    fn per_language(&mut self) -> Res<Vec<(String, i64)>> {
        language_counts(&self.query("SELECT language, count(*) FROM pages GROUP BY language")?)
    }

    fn sum_rank(&mut self) -> Res<i64> {
        single_i64(&self.query("SELECT sum(rank) FROM pages")?)
    }

    fn bytes_on_disk(&self) -> Res<Option<u64>> {
        Ok(None)
    }
}
