//! Cells of [`ValueType::Arrow`](crate::ValueType::Arrow) columns: the Arrow
//! types without a codec of their own.
//!
//! A fixed-width value (an interval, a `Decimal256`, a timestamp with a
//! time zone) is stored as its Arrow bytes in big-endian order, as the typed
//! integer codecs store theirs; a fixed-size binary value as its bytes. Any
//! other value (a list, a struct, a union, a nested map) is a one-row Arrow
//! IPC stream: Arrow's own stable format, so whatever Arrow can hold, a cell
//! holds, and any Arrow reader can decode a cell read with the embedded API.

use std::any::Any;
use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::{
    make_array, new_empty_array, new_null_array, Array, ArrayBuilder, ArrayData, ArrayRef, AsArray,
    NullBufferBuilder, RecordBatch,
};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer};
use datafusion::arrow::compute::concat;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;

use super::values::DecodeError;

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
        Codec::Ipc => {
            let ipc_error = |e: datafusion::arrow::error::ArrowError| {
                format!("a {} value cannot be encoded: {e}", array.data_type())
            };
            let schema = Arc::new(Schema::new(vec![Field::new(
                "value",
                array.data_type().clone(),
                true,
            )]));
            let batch = RecordBatch::try_new(schema.clone(), vec![array.slice(row, 1)])
                .map_err(ipc_error)?;
            let mut bytes = Vec::new();
            let mut writer = StreamWriter::try_new(&mut bytes, &schema).map_err(ipc_error)?;
            writer.write(&batch).map_err(ipc_error)?;
            writer.finish().map_err(ipc_error)?;
            drop(writer);
            Ok(bytes)
        }
    }
}

/// Builds a column of one Arrow type from cells (or NULLs).
#[derive(Debug)]
pub struct ArrowCellBuilder {
    data_type: DataType,
    codec: Codec,
    /// Fixed-width values in Arrow's layout (NULLs are zeroes).
    fixed: MutableBuffer,
    nulls: NullBufferBuilder,
    /// Decoded IPC values, one row each.
    decoded: Vec<ArrayRef>,
    len: usize,
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
            data_type,
            codec,
            fixed: MutableBuffer::with_capacity(capacity * width),
            nulls: NullBufferBuilder::new(capacity),
            decoded: Vec::new(),
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
            (Codec::Ipc, Some(bytes)) => self.decoded.push(self.decode_ipc(bytes)?),
            (Codec::Ipc, None) => self.decoded.push(new_null_array(&self.data_type, 1)),
        }
        self.len += 1;
        Ok(())
    }

    fn decode_ipc(&self, bytes: &[u8]) -> Result<ArrayRef, DecodeError> {
        let bad = |why: String| format!("is not a {} value: {why}", self.data_type);
        let mut reader =
            StreamReader::try_new(Cursor::new(bytes), None).map_err(|e| bad(e.to_string()))?;
        let batch = reader
            .next()
            .ok_or_else(|| bad("the stream is empty".into()))?
            .map_err(|e| bad(e.to_string()))?;
        match batch.columns() {
            [column] if column.len() == 1 && column.data_type() == &self.data_type => {
                Ok(column.clone())
            }
            [column] => Err(bad(format!(
                "it holds {} value(s) of type {}",
                column.len(),
                column.data_type()
            ))),
            columns => Err(bad(format!("it holds {} columns", columns.len()))),
        }
    }

    fn build(&mut self) -> ArrayRef {
        let len = std::mem::take(&mut self.len);
        match self.codec {
            Codec::Ipc if len == 0 => new_empty_array(&self.data_type),
            Codec::Ipc => {
                let parts = std::mem::take(&mut self.decoded);
                let refs: Vec<&dyn Array> = parts.iter().map(AsRef::as_ref).collect();
                // Every part was checked to have the builder's type; what
                // is left is a column too large for one Arrow array, which
                // a scan cannot return as anything else.
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
