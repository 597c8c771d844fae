//! CSV columns of MAP, list, struct and binary types, read from the text
//! an export writes for them: each value's JSON, binary as a JSON string
//! of hex (see [`crate::sql::files::export`]); bare hex is read too. Arrow's CSV
//! reader parses none of these, so such a column is read as text and each
//! value decoded with Arrow's JSON decoder into the table column's type: a
//! CSV export imports back whole. Each text must be exactly one value of
//! the column's type: several values, a struct field the type lacks or
//! odd-length hex are errors naming the column and row.

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
    /// Decodes the text columns at `columns` (index, and the field, of the
    /// column's name, to decode into) of the batches of `inner`.
    pub fn new(inner: Box<dyn RecordBatchReader + Send>, columns: Vec<(usize, FieldRef)>) -> Self {
        let mut fields: Vec<FieldRef> = inner.schema().fields().iter().cloned().collect();
        for (at, field) in &columns {
            fields[*at] = Arc::clone(field);
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
/// NULL. `first_row`: the file row of the first text (rows in errors
/// count from 1).
fn decode(texts: &ArrayRef, field: &Field, first_row: usize) -> Result<ArrayRef, String> {
    let texts = texts
        .as_string_opt::<i32>()
        .ok_or_else(|| format!("read as {}, not as text", texts.data_type()))?;
    let binary = matches!(
        field.data_type(),
        DataType::Binary | DataType::LargeBinary | DataType::FixedSizeBinary(_)
    );
    let mut values: Vec<Option<String>> = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let row = first_row + i + 1;
        values.push(match text {
            Some(text) if binary => Some(hex_json(text).map_err(|e| format!("row {row}: {e}"))?),
            text => text.map(str::to_string),
        });
    }
    decode_values(&values, field).map_err(|e| {
        // Type errors surface only when the batch is built: find the row.
        let at = (0..values.len())
            .find(|&i| decode_values(&values[i..=i], field).is_err())
            .map_or(String::new(), |i| format!("row {}: ", first_row + i + 1));
        format!("{at}{e}")
    })
}

/// A binary value's text as a JSON string of hex: an export writes it
/// quoted, other tools bare. Odd-length hex is refused (Arrow's decoder
/// would read the last digit as a byte of its own).
fn hex_json(text: &str) -> Result<String, String> {
    let (quoted, hex) = match text.starts_with('"') {
        true => (
            text.to_string(),
            serde_json::from_str::<String>(text).map_err(|e| e.to_string())?,
        ),
        false => (
            serde_json::to_string(text).map_err(|e| e.to_string())?,
            text.to_string(),
        ),
    };
    if hex.len() % 2 == 1 {
        return Err(format!("{hex:?} has an odd number of hex digits"));
    }
    Ok(quoted)
}

/// `values` (JSON texts, `None` for NULL) decoded as one array of
/// `field`'s type; each must be exactly one JSON value of that type, with
/// no field a struct does not have.
fn decode_values(values: &[Option<String>], field: &Field) -> Result<ArrayRef, String> {
    let value = Field::new("v", field.data_type().clone(), true);
    let mut decoder = ReaderBuilder::new_with_field(value)
        .with_strict_mode(true)
        // One more than the rows: a full batch would stop reading before
        // the last line's end.
        .with_batch_size(values.len() + 1)
        .build_decoder()
        .map_err(|e| e.to_string())?;
    for (i, value) in values.iter().enumerate() {
        let line = format!("{}\n", value.as_deref().unwrap_or("null"));
        let used = decoder.decode(line.as_bytes()).map_err(|e| e.to_string())?;
        if used != line.len() || decoder.has_partial_record() || decoder.len() != i + 1 {
            return Err(format!(
                "{:?} is not one JSON value of type {}",
                value.as_deref().unwrap_or_default(),
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
