//! Cells of [`ValueType::Arrow`](crate::ValueType::Arrow) columns: the Arrow
//! types without a codec of their own.
//!
//! A fixed-width value (an interval, a `Decimal256`, a timestamp with a
//! time zone) is stored as its Arrow bytes in big-endian order, as the typed
//! integer codecs store theirs; a fixed-size binary value as its bytes. Any
//! other value (a list, a struct, a union, a nested map) is the record-batch
//! message of a one-row Arrow IPC stream: Arrow's own stable format, so
//! whatever Arrow can hold, a cell holds, and an Arrow IPC reader given the
//! column's type decodes a cell read with the embedded API. A NULL is no
//! cell, so a message whose one value is NULL is refused as corrupt, as
//! are messages the IPC reader cannot read.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    make_array, new_empty_array, new_null_array, Array, ArrayBuilder, ArrayData, ArrayRef, AsArray,
    NullBufferBuilder, RecordBatch,
};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::reader::read_record_batch;
use datafusion::arrow::ipc::writer::{
    DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions,
};
use datafusion::arrow::ipc::{root_as_message, MetadataVersion, RecordBatch as RecordBatchMessage};

use super::DecodeError;

/// How a cell holds a value of an Arrow type.
#[derive(Debug, Clone, Copy)]
enum Codec {
    /// Arrow's little-endian bytes of this width, reversed.
    BigEndian(usize),
    /// These many bytes as they are (fixed-size binary).
    Raw(usize),
    /// A one-row Arrow IPC stream.
    Ipc,
}

fn codec(data_type: &DataType) -> Codec {
    match data_type {
        DataType::FixedSizeBinary(n) => Codec::Raw(usize::try_from(*n).unwrap_or(0)),
        other => other.primitive_width().map_or(Codec::Ipc, Codec::BigEndian),
    }
}

/// The cell bytes of `array[row]`, which is not NULL, for an Arrow type
/// without a codec of its own.
pub fn encode(array: &ArrayRef, row: usize) -> Result<Vec<u8>, DecodeError> {
    match codec(array.data_type()) {
        Codec::Raw(_) => Ok(array.as_fixed_size_binary().value(row).to_vec()),
        Codec::BigEndian(width) => {
            let data = array.to_data();
            let start = (data.offset() + row) * width;
            let mut bytes = data
                .buffers()
                .first()
                .and_then(|b| b.as_slice().get(start..start + width))
                .ok_or_else(|| format!("a {} value is out of its buffer", array.data_type()))?
                .to_vec();
            bytes.reverse();
            Ok(bytes)
        }
        Codec::Ipc => encode_batch_message(array, row),
    }
}

/// The one-column schema a value is encoded in.
fn value_schema(data_type: &DataType) -> Schema {
    Schema::new(vec![Field::new("value", data_type.clone(), true)])
}

/// `array[row]` as the record-batch message of a one-row Arrow IPC stream:
/// its length (4 bytes, big-endian), the message, the body. The schema
/// message is left out (the column's type is in the catalog), and buffers
/// are aligned to 8 bytes, not IPC's default 64: `[1, 2, 3]` takes 212
/// bytes, where the whole stream took 520.
fn encode_batch_message(array: &ArrayRef, row: usize) -> Result<Vec<u8>, DecodeError> {
    let ipc_error = |e: ArrowError| format!("a {} value cannot be encoded: {e}", array.data_type());
    let batch = RecordBatch::try_new(
        Arc::new(value_schema(array.data_type())),
        vec![array.slice(row, 1)],
    )
    .map_err(ipc_error)?;
    let options = IpcWriteOptions::try_new(8, false, MetadataVersion::V5).map_err(ipc_error)?;
    let mut dictionaries = DictionaryTracker::new(false);
    let (dictionary_batches, encoded) = IpcDataGenerator::default()
        .encode(
            &batch,
            &mut dictionaries,
            &options,
            &mut IpcWriteContext::default(),
        )
        .map_err(ipc_error)?;
    // Column types hold no dictionaries (`values::value_type_of` takes
    // them off), so a batch needs none.
    if !dictionary_batches.is_empty() {
        return Err(format!(
            "a {} value holds a dictionary, which a cell cannot",
            array.data_type()
        ));
    }
    let length = u32::try_from(encoded.ipc_message.len()).map_err(|e| e.to_string())?;
    let mut bytes = Vec::with_capacity(4 + encoded.ipc_message.len() + encoded.arrow_data.len());
    bytes.extend_from_slice(&length.to_be_bytes());
    bytes.extend_from_slice(&encoded.ipc_message);
    bytes.extend_from_slice(&encoded.arrow_data);
    Ok(bytes)
}

/// Checks the commonest damage to a record-batch message before Arrow's
/// IPC reader, which takes buffer bounds on trust and panics on them:
/// every buffer lies within the `body_len` bytes of the body, no length is
/// negative, and the body is not compressed (cells never are).
fn check_batch_message(batch: &RecordBatchMessage<'_>, body_len: usize) -> Result<(), String> {
    if batch.compression().is_some() {
        return Err("it claims a compressed body".into());
    }
    for buffer in batch.buffers().iter().flatten() {
        let end = usize::try_from(buffer.offset())
            .ok()
            .zip(usize::try_from(buffer.length()).ok())
            .and_then(|(offset, length)| offset.checked_add(length));
        if end.is_none_or(|end| end > body_len) {
            return Err(format!(
                "a buffer at {} of {} bytes lies outside its {body_len}-byte body",
                buffer.offset(),
                buffer.length()
            ));
        }
    }
    for node in batch.nodes().iter().flatten() {
        if node.length() < 0 || node.null_count() < 0 {
            return Err("a column has a negative length".into());
        }
    }
    Ok(())
}

/// Builds a column of one Arrow type from cells (or NULLs).
#[derive(Debug)]
pub struct ArrowCellBuilder {
    data_type: DataType,
    /// The schema IPC values are decoded with, made once, not per cell.
    schema: SchemaRef,
    codec: Codec,
    /// Fixed-width values in Arrow's layout (NULLs are zeroes).
    fixed: MutableBuffer,
    nulls: NullBufferBuilder,
    /// Decoded IPC values, one row each.
    decoded: Vec<ArrayRef>,
    /// The sum of the decoded values' [`extent`]s: what bounds the 32-bit
    /// offsets of the batch they are built into.
    decoded_extent: u64,
    len: usize,
}

/// At least the largest offset any 32-bit offset buffer needs to hold
/// `data` (a count of values or of bytes): the largest length or buffer
/// at any depth of it.
fn extent(data: &ArrayData) -> u64 {
    let own = data
        .buffers()
        .iter()
        .map(|b| b.len())
        .sum::<usize>()
        .max(data.len());
    let children = data.child_data().iter().map(extent).max().unwrap_or(0);
    (own as u64).max(children)
}

impl ArrowCellBuilder {
    /// An empty builder for values of `data_type`.
    pub fn new(data_type: DataType, capacity: usize) -> Self {
        let codec = codec(&data_type);
        let width = match codec {
            Codec::BigEndian(w) | Codec::Raw(w) => w,
            Codec::Ipc => 0,
        };
        Self {
            schema: Arc::new(value_schema(&data_type)),
            data_type,
            codec,
            fixed: MutableBuffer::with_capacity(capacity * width),
            nulls: NullBufferBuilder::new(capacity),
            decoded: Vec::new(),
            decoded_extent: 0,
            len: 0,
        }
    }

    /// Appends the value a cell holds, or NULL.
    pub fn append(&mut self, bytes: Option<&[u8]>) -> Result<(), DecodeError> {
        match (self.codec, bytes) {
            (Codec::BigEndian(width) | Codec::Raw(width), Some(bytes)) => {
                if bytes.len() != width {
                    return Err(format!(
                        "holds {} bytes, a {} value has {width}",
                        bytes.len(),
                        self.data_type
                    ));
                }
                if matches!(self.codec, Codec::BigEndian(_)) {
                    self.fixed.extend(bytes.iter().rev().copied());
                } else {
                    self.fixed.extend_from_slice(bytes);
                }
                self.nulls.append_non_null();
            }
            (Codec::BigEndian(width) | Codec::Raw(width), None) => {
                self.fixed.extend_zeros(width);
                self.nulls.append_null();
            }
            (Codec::Ipc, Some(bytes)) => self.push_decoded(self.decode_ipc(bytes)?)?,
            (Codec::Ipc, None) => self.push_decoded(new_null_array(&self.data_type, 1))?,
        }
        self.len += 1;
        Ok(())
    }

    /// Adds a decoded value unless the batch's values would then pass the
    /// 32-bit offsets of an Arrow array, which building it would panic on.
    /// A scan's batches hold at most a few MiB of cells, so this is a value
    /// of that size, or a cell that claims one: a `LIST<NULL>` of two
    /// billion NULLs takes a few bytes.
    fn push_decoded(&mut self, value: ArrayRef) -> Result<(), DecodeError> {
        let total = self.decoded_extent + extent(&value.to_data());
        if total > i32::MAX as u64 {
            return Err(format!(
                "is too large a {} value for one batch: with the values before it, it passes Arrow's 2 GiB offsets",
                self.data_type
            ));
        }
        self.decoded_extent = total;
        self.decoded.push(value);
        Ok(())
    }

    fn decode_ipc(&self, bytes: &[u8]) -> Result<ArrayRef, DecodeError> {
        let bad = |why: String| format!("is not a {} value: {why}", self.data_type);
        let (length, rest) = bytes
            .split_first_chunk::<4>()
            .ok_or_else(|| bad("it is shorter than its header".into()))?;
        let length = u32::from_be_bytes(*length) as usize;
        let (header, body) = (rest.get(..length), rest.get(length..));
        let (Some(header), Some(body)) = (header, body) else {
            return Err(bad("its header is cut short".into()));
        };
        let message = root_as_message(header).map_err(|e| bad(e.to_string()))?;
        let batch = message
            .header_as_record_batch()
            .ok_or_else(|| bad("it holds no record batch".into()))?;
        check_batch_message(&batch, body.len()).map_err(bad)?;
        // The reader trusts the message's lengths too (a column's length
        // against its null bitmap, for one), and the bytes may be anything
        // a user wrote into the cell with the embedded API: a panic in it
        // is this cell's error, not the query's end. (The process's panic
        // hook still runs first, and a build with `panic = "abort"` still
        // aborts.)
        let (schema, version) = (Arc::clone(&self.schema), message.version());
        let read = std::panic::catch_unwind(|| {
            read_record_batch(
                &Buffer::from(body.to_vec()),
                batch,
                schema,
                &HashMap::new(),
                None,
                &version,
            )
        });
        let decoded = match read {
            Ok(decoded) => decoded.map_err(|e| bad(e.to_string()))?,
            Err(panic) => {
                return Err(bad(format!(
                    "Arrow's IPC reader failed on it: {}",
                    crate::error::panic_message(panic.as_ref())
                )))
            }
        };
        match decoded.columns() {
            // A NULL is no cell at all, so a message of one is not a value
            // widesql wrote.
            [column] if column.len() == 1 && column.is_null(0) => {
                Err(bad("it holds a NULL".into()))
            }
            [column] if column.len() == 1 => Ok(Arc::clone(column)),
            [column] => Err(bad(format!("it holds {} values", column.len()))),
            columns => Err(bad(format!("it holds {} columns", columns.len()))),
        }
    }

    fn build(&mut self) -> ArrayRef {
        let len = std::mem::take(&mut self.len);
        match self.codec {
            Codec::Ipc if len == 0 => new_empty_array(&self.data_type),
            Codec::Ipc => {
                let parts = std::mem::take(&mut self.decoded);
                self.decoded_extent = 0;
                let refs: Vec<&dyn Array> = parts.iter().map(AsRef::as_ref).collect();
                // Every part was checked to have the builder's type and
                // to fit the batch's offsets (`push_decoded`).
                concat(&refs).unwrap_or_else(|e| {
                    panic!("a batch of {} values cannot be built: {e}", self.data_type)
                })
            }
            Codec::BigEndian(_) | Codec::Raw(_) => {
                let values = std::mem::take(&mut self.fixed);
                let data = ArrayData::builder(self.data_type.clone())
                    .len(len)
                    .add_buffer(values.into())
                    .nulls(self.nulls.finish())
                    .build();
                // Every value was checked to have the type's width.
                make_array(data.unwrap_or_else(|e| {
                    panic!("a batch of {} values cannot be built: {e}", self.data_type)
                }))
            }
        }
    }
}

impl ArrayBuilder for ArrowCellBuilder {
    fn len(&self) -> usize {
        self.len
    }

    fn finish(&mut self) -> ArrayRef {
        self.build()
    }

    fn finish_cloned(&self) -> ArrayRef {
        let mut copy = Self::new(self.data_type.clone(), 0);
        copy.fixed.extend_from_slice(self.fixed.as_slice());
        if let Some(nulls) = self.nulls.as_slice() {
            copy.nulls
                .append_buffer(&NullBuffer::new(BooleanBuffer::new(
                    Buffer::from(nulls.to_vec()),
                    0,
                    self.len,
                )));
        } else {
            copy.nulls.append_n_non_nulls(self.len);
        }
        copy.decoded.clone_from(&self.decoded);
        copy.decoded_extent = self.decoded_extent;
        copy.len = self.len;
        copy.build()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn into_box_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}
