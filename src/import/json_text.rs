//! CSV columns of MAP, list, struct and binary types, read from the text
//! an export writes for them: each value's JSON, binary as a JSON string
//! of hex (see [`crate::export`]); bare hex is read too. Arrow's CSV reader parses neither, so such a
//! column is read as text and each value decoded with Arrow's JSON decoder
//! into the table column's type: a CSV export imports back whole.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, RecordBatchReader};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::json::ReaderBuilder;

/// Whether a CSV file's text for a column of type `t` is decoded here:
/// JSON text of a nested value, or hex of a binary one.
pub fn decodes(t: &DataType) -> bool {
    matches!(
        t,
        DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
            | DataType::Map(..)
            | DataType::Struct(_)
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::FixedSizeBinary(_)
    )
}

/// The batches of `inner`, with the text columns at `columns` decoded into
/// their fields' types.
pub struct JsonTextColumns {
    inner: Box<dyn RecordBatchReader + Send>,
    schema: SchemaRef,
    columns: Vec<(usize, FieldRef)>,
    /// Rows read before the current batch, for the row an error names.
    rows_before: usize,
}

impl JsonTextColumns {
    /// Decodes the text columns at `columns` (index, and the field to
    /// decode into) of the batches of `inner`.
    pub fn new(inner: Box<dyn RecordBatchReader + Send>, columns: Vec<(usize, FieldRef)>) -> Self {
        let mut fields: Vec<FieldRef> = inner.schema().fields().iter().cloned().collect();
        for (at, field) in &columns {
            fields[*at] = Arc::new(Field::new(
                fields[*at].name(),
                field.data_type().clone(),
                true,
            ));
        }
        JsonTextColumns {
            inner,
            schema: Arc::new(Schema::new(fields)),
            columns,
            rows_before: 0,
        }
    }

    fn decode_batch(&mut self, batch: RecordBatch) -> Result<RecordBatch, ArrowError> {
        let mut arrays: Vec<ArrayRef> = batch.columns().to_vec();
        for (at, field) in &self.columns {
            let name = self.schema.field(*at).name();
            arrays[*at] = decode(&arrays[*at], field, self.rows_before)
                .map_err(|e| ArrowError::ParseError(format!("column '{name}': {e}")))?;
        }
        self.rows_before += batch.num_rows();
        RecordBatch::try_new(Arc::clone(&self.schema), arrays)
    }
}

/// Each text of `texts` decoded as a value of `field`'s type; NULL stays
/// NULL. `first_row`: the file row of the first text (1-based rows in
/// errors).
fn decode(texts: &ArrayRef, field: &Field, first_row: usize) -> Result<ArrayRef, String> {
    let texts = texts
        .as_string_opt::<i32>()
        .ok_or_else(|| format!("read as {}, not as text", texts.data_type()))?;
    let binary = matches!(
        field.data_type(),
        DataType::Binary | DataType::LargeBinary | DataType::FixedSizeBinary(_)
    );
    let value = Field::new("v", field.data_type().clone(), true);
    let mut decoder = ReaderBuilder::new(Arc::new(Schema::new(vec![value])))
        // One more than the rows: a full batch would stop reading before
        // the last line's end.
        .with_batch_size(texts.len() + 1)
        .build_decoder()
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    for (i, text) in texts.iter().enumerate() {
        let row = first_row + i + 1;
        line.clear();
        line.push_str("{\"v\":");
        match text {
            None => line.push_str("null"),
            // Hex: an export writes it as a JSON string, other tools
            // bare.
            Some(text) if binary && !text.starts_with('"') => {
                line.push_str(&serde_json::to_string(text).map_err(|e| format!("row {row}: {e}"))?)
            }
            Some(text) => line.push_str(text),
        }
        line.push_str("}\n");
        let decoded = decoder
            .decode(line.as_bytes())
            .map_err(|e| format!("row {row}: {e}"))?;
        if decoded != line.len() || decoder.has_partial_record() || decoder.len() != i + 1 {
            return Err(format!(
                "row {row}: {:?} is not one JSON value of type {}",
                text.unwrap_or_default(),
                field.data_type()
            ));
        }
    }
    match decoder.flush().map_err(|e| e.to_string())? {
        Some(batch) => Ok(Arc::clone(batch.column(0))),
        None => Ok(datafusion::arrow::array::new_empty_array(field.data_type())),
    }
}

impl Iterator for JsonTextColumns {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = self.inner.next()?;
        Some(batch.and_then(|b| self.decode_batch(b)))
    }
}

impl RecordBatchReader for JsonTextColumns {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}
