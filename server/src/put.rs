//! The bodies of `DoPut` calls: rows of parameters to bind, and the record
//! batches of a bulk ingest with what to do with its table.

use arrow_flight::decode::{
    DecodedFlightData, DecodedPayload, FlightDataDecoder, FlightRecordBatchStream,
};
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::CommandStatementIngest;
use datafusion::arrow::array::ArrayRef;
use datafusion::common::ScalarValue;
use datafusion::error::DataFusionError;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::FlightData;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use std::future::Future;
use tokio::sync::watch;
use tonic::Status;
use widesql::import::ImportOptions;

/// The record batches of a bulk ingest, streamed as they arrive: the
/// first message with an IPC header is their schema.
pub(crate) async fn ingest_stream(
    body: PeekableFlightDataStream,
    input: Input,
) -> Result<SendableRecordBatchStream, Status> {
    let mut check = MessageCheck::new(input.decoded_bytes, input.schema_bytes, &input.memory);
    let data = paced(body, input)
        .try_filter(|data| futures::future::ready(!data.data_header.is_empty()))
        .and_then(move |data| futures::future::ready(check.check(&data).map(|()| data)))
        .map_err(FlightError::from);
    let mut decoder = FlightDataDecoder::new(data);
    let schema = decoded(async {
        loop {
            match decoder.try_next().await.map_err(Status::from)? {
                Some(DecodedFlightData {
                    payload: DecodedPayload::Schema(schema),
                    ..
                }) => return Ok(schema),
                Some(DecodedFlightData {
                    payload: DecodedPayload::None,
                    ..
                }) => continue,
                Some(_) => {
                    return Err(Status::invalid_argument(
                        "the ingested rows came before their schema",
                    ))
                }
                None => return Err(Status::invalid_argument("the ingest carried no schema")),
            }
        }
    })
    .await?;
    // A panic of the decoder ends the rows with an error.
    let batches = std::panic::AssertUnwindSafe(decoder)
        .catch_unwind()
        .filter_map(|item| {
            futures::future::ready(match item {
                Ok(Ok(DecodedFlightData {
                    payload: DecodedPayload::RecordBatch(batch),
                    ..
                })) => Some(Ok(batch)),
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(Err(DataFusionError::External(Box::new(e)))),
                Err(panic) => Some(Err(DataFusionError::Execution(undecodable(panic)))),
            })
        });
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
}

/// How long a `DoPut` body may pause, the signal that ends every body
/// when the server stops, and how large its messages may be (see
/// [`MessageCheck`]).
pub(crate) struct Input {
    pub(crate) idle: Duration,
    pub(crate) ended: watch::Receiver<bool>,
    /// The most bytes the buffers of one message may hold once
    /// decompressed, with the dictionaries the call keeps.
    pub(crate) decoded_bytes: usize,
    /// The longest schema taken, in bytes of its header: an ingest's
    /// becomes the text of the statement that writes its rows.
    pub(crate) schema_bytes: usize,
    /// The memory pool of the caller's session, which holds what the
    /// call's last message takes once decoded (see [`MessageCheck`]).
    pub(crate) memory: Arc<dyn MemoryPool>,
}

/// Checks each IPC message of a `DoPut` body before it is decoded, for
/// what the decoder would trust: it slices a message's buffers where its
/// header says (one past the body's end is a panic), sets aside the size
/// a compressed buffer claims to decompress to (a claim of an exabyte
/// aborts the process) and, for LZ4, goes on past it, makes arrays of the
/// length a header claims (a column of nulls costs no bytes to send), keeps
/// the last dictionary of each id for the whole call, decodes rows after a
/// second schema against that schema, and appends each delta of a
/// dictionary to the dictionary without bound. What the last two messages
/// take once decoded (a writer reads the next message before it is done
/// with the last) is held in the call's session's memory pool until the
/// call ends, so that the calls of one session share its memory instead
/// of each taking as much.
struct MessageCheck {
    /// The most bytes one message's buffers, with the dictionaries kept,
    /// may hold once decompressed; a message holds at most an eighth as
    /// many rows.
    room: usize,
    /// The last two messages' bytes once decoded, held in the session's
    /// pool.
    held: MemoryReservation,
    /// The bytes of the last message of rows, once decoded.
    last_rows: usize,
    /// The most bytes a schema's header may have.
    schema_bytes: usize,
    schemas: usize,
    /// What the dictionary of each id holds now.
    dictionaries: HashMap<i64, usize>,
}

impl MessageCheck {
    fn new(room: usize, schema_bytes: usize, memory: &Arc<dyn MemoryPool>) -> MessageCheck {
        MessageCheck {
            room,
            held: MemoryConsumer::new("a DoPut call's message").register(memory),
            last_rows: 0,
            schema_bytes,
            schemas: 0,
            dictionaries: HashMap::new(),
        }
    }

    fn check(&mut self, data: &FlightData) -> Result<(), Status> {
        use datafusion::arrow::ipc::{root_as_message, MessageHeader};
        let message = root_as_message(&data.data_header).map_err(|e| {
            Status::invalid_argument(format!("a message's IPC header cannot be read: {e}"))
        })?;
        let (batch, dictionary) = match message.header_type() {
            MessageHeader::Schema => {
                self.schemas += 1;
                if self.schemas > 1 {
                    return Err(invalid_message(
                        "carries a second schema: every row of one call is of its first",
                    ));
                }
                let bytes = data.data_header.len();
                if bytes > self.schema_bytes {
                    return Err(Status::resource_exhausted(format!(
                        "a schema of {bytes} bytes is longer than the {} bytes of the longest \
                         statement this server takes",
                        self.schema_bytes
                    )));
                }
                return Ok(());
            }
            MessageHeader::RecordBatch => (message.header_as_record_batch(), None),
            MessageHeader::DictionaryBatch => {
                let dictionary = message.header_as_dictionary_batch().ok_or_else(|| {
                    invalid_message("says it holds a dictionary but has no header")
                })?;
                if dictionary.isDelta() {
                    return Err(invalid_message(
                        "carries a dictionary delta, which is not taken: send each dictionary \
                         whole",
                    ));
                }
                (dictionary.data(), Some(dictionary.id()))
            }
            other => {
                return Err(invalid_message(&format!(
                    "is a {other:?}, which a DoPut body does not carry"
                )))
            }
        };
        let batch =
            batch.ok_or_else(|| invalid_message("says it holds rows but has no rows' header"))?;
        self.check_rows(&batch)?;
        let (holds, lz4) = buffer_sizes(&batch, &data.data_body)?;
        let kept: usize = self
            .dictionaries
            .iter()
            .filter(|(id, _)| Some(**id) != dictionary)
            .map(|(_, bytes)| bytes)
            .sum();
        let total = holds.saturating_add(kept);
        if total > self.room {
            return Err(Status::resource_exhausted(format!(
                "a message's buffers, with the dictionaries before it, hold {total} bytes once \
                 decompressed, more than the {} bytes one message may: send fewer rows per \
                 message",
                self.room
            )));
        }
        self.held
            .try_resize(total.saturating_add(self.last_rows))
            .map_err(|_| {
                Status::resource_exhausted(format!(
                    "a message's buffers, with the dictionaries and the rows before it, hold \
                     {} bytes once decompressed, more than the session's memory has free now \
                     (its queries and other calls hold the rest): send fewer rows per message, \
                     or once they have ended",
                    total.saturating_add(self.last_rows)
                ))
            })?;
        for (at, claimed) in lz4 {
            lz4_stops_at_its_claim(&data.data_body[at], claimed)?;
        }
        match dictionary {
            Some(id) => {
                self.dictionaries.insert(id, holds);
            }
            None => self.last_rows = holds,
        }
        Ok(())
    }

    /// Refuses a batch, or a column of it, that claims a negative number
    /// of rows or more than an eighth of the room.
    fn check_rows(&self, batch: &RecordBatchHeader<'_>) -> Result<(), Status> {
        let most_rows = self.room / 8;
        let nodes = batch
            .nodes()
            .into_iter()
            .flatten()
            .map(|node| node.length());
        for length in std::iter::once(batch.length()).chain(nodes) {
            match usize::try_from(length) {
                Err(_) => return Err(invalid_message("claims a negative number of rows")),
                Ok(rows) if rows > most_rows => {
                    return Err(Status::resource_exhausted(format!(
                        "a message claims {rows} rows, more than the {most_rows} one message \
                         may hold: send fewer rows per message"
                    )))
                }
                Ok(_) => {}
            }
        }
        Ok(())
    }
}

/// Where each LZ4 buffer of a message lies in its body, and the size it
/// claims once decompressed.
type Lz4Buffers = Vec<(std::ops::Range<usize>, usize)>;

/// A message's header of rows (a batch's, or a dictionary's).
type RecordBatchHeader<'m> = datafusion::arrow::ipc::RecordBatch<'m>;

fn invalid_message(what: &str) -> Status {
    Status::invalid_argument(format!("a message {what}"))
}

/// What the buffers of `batch`, whose body is `body`, hold once
/// decompressed, and where each LZ4 buffer lies in the body with the size
/// it claims; refuses buffers outside the body and buffer counts past
/// those it has.
fn buffer_sizes(batch: &RecordBatchHeader<'_>, body: &[u8]) -> Result<(usize, Lz4Buffers), Status> {
    use datafusion::arrow::ipc::CompressionType;
    let buffers: Vec<_> = batch.buffers().into_iter().flatten().collect();
    let mut variadic = 0usize;
    for count in batch.variadicBufferCounts().into_iter().flatten() {
        let count = usize::try_from(count)
            .map_err(|_| invalid_message("claims a negative number of buffers"))?;
        variadic = variadic.saturating_add(count);
    }
    if variadic > buffers.len() {
        return Err(invalid_message("claims more buffers than it has"));
    }
    let codec = batch.compression().map(|c| c.codec());
    let mut holds = 0usize;
    let mut lz4 = Vec::new();
    for buffer in buffers {
        let start = usize::try_from(buffer.offset()).ok();
        let length = usize::try_from(buffer.length()).ok();
        let at = start
            .zip(length)
            .and_then(|(start, length)| Some(start..start.checked_add(length)?))
            .filter(|at| at.end <= body.len())
            .ok_or_else(|| invalid_message("has a buffer outside its body"))?;
        // A compressed buffer begins with its length once decompressed
        // (-1: it is not compressed).
        let size = match body.get(at.start..at.start + 8) {
            Some(prefix) if codec.is_some() && at.len() >= 8 => {
                let mut claimed = [0u8; 8];
                claimed.copy_from_slice(prefix);
                match i64::from_le_bytes(claimed) {
                    -1 => at.len() - 8,
                    claimed => {
                        let claimed = usize::try_from(claimed).map_err(|_| {
                            invalid_message("has a compressed buffer of a negative length")
                        })?;
                        // (0: empty, and not decompressed.)
                        if codec == Some(CompressionType::LZ4_FRAME) && claimed > 0 {
                            lz4.push((at.start + 8..at.end, claimed));
                        }
                        claimed
                    }
                }
            }
            _ => at.len(),
        };
        holds = holds.saturating_add(size);
    }
    Ok((holds, lz4))
}

/// Refuses an LZ4 frame that decompresses to more than the `claimed`
/// bytes. LZ4's decoder takes a claim as where to start, not where to
/// stop: the frame is decompressed here first, into nothing, to see that
/// it stops there.
fn lz4_stops_at_its_claim(frame: &[u8], claimed: usize) -> Result<(), Status> {
    let frame = lz4_flex::frame::FrameDecoder::new(frame);
    let limit = u64::try_from(claimed).unwrap_or(u64::MAX).saturating_add(1);
    let made = std::io::copy(&mut std::io::Read::take(frame, limit), &mut std::io::sink())
        .map_err(|e| invalid_message(&format!("has an LZ4 buffer that cannot be read: {e}")))?;
    if made > limit - 1 {
        return Err(invalid_message(
            "has an LZ4 buffer that decompresses to more than it claims",
        ));
    }
    Ok(())
}

/// The messages of a `DoPut` body while the client keeps sending them: it
/// fails once `input.idle` passes without one, or once the server stops,
/// so that a client that stalls holds neither a statement slot nor the
/// server's shutdown for ever.
fn paced(
    body: PeekableFlightDataStream,
    input: Input,
) -> impl Stream<Item = Result<FlightData, Status>> + Send {
    let Input { idle, ended, .. } = input;
    // Counted from when the next message is asked for, and from then on
    // until one with rows (or their schema) comes.
    let waiting: Option<tokio::time::Instant> = None;
    futures::stream::unfold(Some((body, ended, waiting)), move |state| async move {
        let (mut body, mut ended, waiting) = state?;
        let deadline = waiting.unwrap_or_else(|| tokio::time::Instant::now() + idle);
        let stopped = async {
            if ended.wait_for(|ended| *ended).await.is_err() {
                // The server is gone without saying so: nothing to wait for.
                std::future::pending::<()>().await;
            }
        };
        let next = tokio::select! {
            next = tokio::time::timeout_at(deadline, body.next()) => next.unwrap_or_else(|_| {
                Some(Err(Status::deadline_exceeded(format!(
                    "the client sent no rows for {} s: the call stopped before its last \
                     message",
                    idle.as_secs_f64()
                ))))
            }),
            () = stopped => Some(Err(Status::unavailable(
                "the server is shutting down: the call stopped before its last message",
            ))),
        };
        match next {
            Some(Ok(data)) => {
                // Only a message that carries rows (or their schema) shows
                // that the client goes on: one of metadata alone could be
                // sent for ever.
                let waiting = data.data_header.is_empty().then_some(deadline);
                Some((Ok(data), Some((body, ended, waiting))))
            }
            // The first error ends the body.
            Some(Err(e)) => Some((Err(e), None)),
            None => None,
        }
    })
}

/// How to ingest, from the client's table definition options (ADBC's
/// modes: create, append, create_append, replace); options of the
/// command's own are refused, since none is taken.
pub(crate) fn ingest_options(command: &CommandStatementIngest) -> Result<ImportOptions, Status> {
    use arrow_flight::sql::{TableExistsOption as Exists, TableNotExistOption as Missing};
    if !command.options.is_empty() {
        let mut names: Vec<_> = command.options.keys().map(|k| format!("'{k}'")).collect();
        names.sort();
        return Err(Status::invalid_argument(format!(
            "this server takes no ingest options, and was given {}",
            names.join(", ")
        )));
    }
    let options = command.table_definition_options.ok_or_else(|| {
        Status::invalid_argument(
            "an ingest must say what to do when the table exists and when it does not",
        )
    })?;
    let (create, append, replace) = match (options.if_not_exist(), options.if_exists()) {
        (Missing::Create, Exists::Fail) => (true, false, false),
        (Missing::Fail, Exists::Append) => (false, false, false),
        (Missing::Create, Exists::Append) => (true, true, false),
        (Missing::Create, Exists::Replace) => (true, false, true),
        (missing, exists) => {
            return Err(Status::invalid_argument(format!(
                "an ingest with if_not_exist {} and if_exists {} is not offered",
                missing.as_str_name(),
                exists.as_str_name()
            )))
        }
    };
    Ok(ImportOptions {
        create,
        append,
        replace,
        ..ImportOptions::default()
    })
}

/// The table an ingest names, as SQL quotes it (`"catalog"."schema"."t"`).
pub(crate) fn ingest_table(command: &CommandStatementIngest) -> String {
    [
        command.catalog.as_deref(),
        command.schema.as_deref(),
        Some(command.table.as_str()),
    ]
    .into_iter()
    .flatten()
    .map(|part| format!("\"{}\"", part.replace('"', "\"\"")))
    .collect::<Vec<_>>()
    .join(".")
}

/// Rows of parameters a client put, and the bytes their values hold.
#[derive(Default)]
pub(crate) struct Bound {
    pub(crate) rows: Vec<Vec<ScalarValue>>,
    pub(crate) bytes: usize,
    /// Their part of what calls reading parameters hold, given back when
    /// they are bound (prepared statements count them from then on) or
    /// have run.
    pub(crate) reading: Charge,
}

/// The bytes of parameter values that calls hold between reading them and
/// binding or running them. Each call is bounded on its own; this bounds
/// them together, so that many calls putting rows at once cannot take the
/// server's memory.
#[derive(Clone)]
pub(crate) struct Reading {
    held: Arc<AtomicUsize>,
    limit: usize,
}

impl Reading {
    /// At most `limit` bytes held at once by all calls.
    pub(crate) fn new(limit: usize) -> Reading {
        Reading {
            held: Arc::new(AtomicUsize::new(0)),
            limit,
        }
    }

    /// What all calls hold now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// An empty part, for one call.
    fn charge(&self) -> Charge {
        Charge {
            reading: Some(self.clone()),
            bytes: 0,
        }
    }
}

/// One call's part of [`Reading`], given back when it is dropped.
#[derive(Default)]
pub(crate) struct Charge {
    reading: Option<Reading>,
    bytes: usize,
}

impl Charge {
    /// Adds `bytes`, refused when all calls would hold more than the limit.
    fn add(&mut self, bytes: usize) -> Result<(), Status> {
        let Some(reading) = &self.reading else {
            return Ok(());
        };
        let before = reading.held.fetch_add(bytes, Ordering::Relaxed);
        if before.saturating_add(bytes) > reading.limit {
            reading.held.fetch_sub(bytes, Ordering::Relaxed);
            return Err(Status::resource_exhausted(format!(
                "the calls putting parameters now would hold more than {} bytes of them, the \
                 server's limit: put fewer rows at once, or later",
                reading.limit
            )));
        }
        self.bytes += bytes;
        Ok(())
    }

    /// Adds `bytes` whatever the limit: rows taken from a binding, which
    /// the limit on bound parameters admitted, go on counting while they
    /// run (others are refused meanwhile if that passes the limit).
    pub(crate) fn carry(&mut self, bytes: usize) {
        if let Some(reading) = &self.reading {
            reading.held.fetch_add(bytes, Ordering::Relaxed);
            self.bytes += bytes;
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(reading) = &self.reading {
            reading.held.fetch_sub(self.bytes, Ordering::Relaxed);
        }
    }
}

/// The rows of parameters a client put, each as `$1`, `$2`, …, at most
/// `max_bytes` of them as they came (the messages' IPC bodies; decoded
/// arrays share their message's buffer, so their sizes would count it once
/// per column), and at most as many bytes of values made of them. A
/// message that only carries the command (no IPC header) holds none.
pub(crate) async fn parameter_rows(
    body: PeekableFlightDataStream,
    max_bytes: usize,
    reading: &Reading,
    input: Input,
) -> Result<Bound, Status> {
    decoded(read_parameter_rows(body, max_bytes, reading, input)).await
}

/// `decoding`'s result, or its panic as a status: arrow-ipc's decoder
/// panics on some malformed messages that [`MessageCheck`] does not
/// foresee.
async fn decoded<T>(decoding: impl Future<Output = Result<T, Status>>) -> Result<T, Status> {
    std::panic::AssertUnwindSafe(decoding)
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(Status::invalid_argument(undecodable(panic))))
}

/// What a panic of the decoder tells the client.
fn undecodable(panic: Box<dyn std::any::Any + Send>) -> String {
    format!(
        "a message could not be decoded: {}",
        widesql::panic_message(panic.as_ref())
    )
}

async fn read_parameter_rows(
    body: PeekableFlightDataStream,
    max_bytes: usize,
    reading: &Reading,
    input: Input,
) -> Result<Bound, Status> {
    let mut bytes = 0usize;
    let mut check = MessageCheck::new(
        input.decoded_bytes.min(max_bytes),
        input.schema_bytes,
        &input.memory,
    );
    let data = paced(body, input)
        .try_filter(|data| futures::future::ready(!data.data_header.is_empty()))
        .and_then(move |data| {
            bytes = bytes.saturating_add(data.data_header.len() + data.data_body.len());
            let checked = match bytes > max_bytes {
                true => Err(too_many_bytes(max_bytes)),
                false => check.check(&data),
            };
            futures::future::ready(checked.map(|()| data))
        })
        .map_err(FlightError::from);
    let mut batches = FlightRecordBatchStream::new_from_flight_data(data).map_err(Status::from);
    // Values can take far more than they came in (a batch of no columns,
    // or of NULLs, comes in a few bytes whatever its length; a compressed
    // one in fewer than it holds; and a dictionary or view column names
    // one long string from every row, which each row's value copies), so
    // each value is charged what it holds as it is made: the most ever
    // held past the limit is one value. Each row is also charged, once
    // made, to what all calls hold together.
    let mut held = 0usize;
    let mut rows = Vec::new();
    let mut charge = reading.charge();
    while let Some(batch) = batches.try_next().await? {
        for row in 0..batch.num_rows() {
            let mut row_bytes = std::mem::size_of::<Vec<ScalarValue>>();
            let mut values = Vec::with_capacity(batch.num_columns());
            for column in batch.columns() {
                let value = parameter(column, row)?;
                row_bytes = row_bytes.saturating_add(value.size());
                if held.saturating_add(row_bytes) > max_bytes {
                    return Err(too_many_bytes(max_bytes));
                }
                values.push(value);
            }
            held += row_bytes;
            charge.add(row_bytes)?;
            rows.push(values);
        }
        // Rows of no columns are charged their row alone.
        if held > max_bytes {
            return Err(too_many_bytes(max_bytes));
        }
    }
    Ok(Bound {
        rows,
        bytes: held,
        reading: charge,
    })
}

fn too_many_bytes(max_bytes: usize) -> Status {
    Status::resource_exhausted(format!(
        "the parameters bound in one call hold more than {max_bytes} bytes, the server's \
         limit: bind fewer rows per call"
    ))
}

/// The value of a parameter in row `row` of its column, holding only its
/// own memory: a list, map or struct value taken from an array would share
/// the buffers of the whole message otherwise (and be charged for them).
fn parameter(column: &ArrayRef, row: usize) -> Result<ScalarValue, Status> {
    ScalarValue::try_from_array(column, row)
        .map(ScalarValue::compacted)
        .map_err(|e| Status::invalid_argument(format!("a parameter cannot be read: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_putting_parameters_hold_at_most_the_limit_between_them() {
        let reading = Reading::new(100);
        let (mut first, mut second) = (reading.charge(), reading.charge());
        first.add(60).expect("60 of 100 bytes");
        let refused = second.add(50).expect_err("110 of 100 bytes");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().contains("more than 100 bytes"),
            "{refused}"
        );
        // A refused part is not kept; a dropped one is given back.
        assert_eq!(reading.held(), 60);
        second.add(40).expect("100 of 100 bytes");
        drop(first);
        assert_eq!(reading.held(), 40);
        second.add(50).expect("90 of 100 bytes");
        drop(second);
        assert_eq!(reading.held(), 0);
        // Rows carried over from a binding count whatever the limit.
        let mut carried = reading.charge();
        carried.carry(150);
        assert_eq!(reading.held(), 150);
        reading.charge().add(1).expect_err("151 of 100 bytes");
        drop(carried);
        assert_eq!(reading.held(), 0);
        // Parameters read outside a server's calls are not counted.
        Charge::default().add(usize::MAX).expect("no limit");
    }
}

#[cfg(test)]
mod message_tests {
    use super::MessageCheck;
    use arrow_flight::encode::FlightDataEncoderBuilder;
    use datafusion::arrow::array::{RecordBatch, StringArray};
    use datafusion::arrow::ipc::writer::IpcWriteOptions;
    use datafusion::arrow::ipc::CompressionType;
    use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool, UnboundedMemoryPool};
    use futures::TryStreamExt;
    use std::sync::Arc;

    /// Messages of rows compressed either way pass the check.
    #[tokio::test]
    async fn compressed_messages_of_a_client_pass() -> Result<(), Box<dyn std::error::Error>> {
        let column = StringArray::from(vec!["some text"; 64]);
        let batch = RecordBatch::try_from_iter([("a", Arc::new(column) as _)])?;
        for codec in [CompressionType::LZ4_FRAME, CompressionType::ZSTD] {
            let options = IpcWriteOptions::default().try_with_compression(Some(codec))?;
            let messages: Vec<_> = FlightDataEncoderBuilder::new()
                .with_options(options)
                .build(futures::stream::iter([Ok(batch.clone())]))
                .try_collect()
                .await?;
            let mut check = MessageCheck::new(1 << 20, 1 << 10, &unbounded());
            for message in messages {
                check
                    .check(&message)
                    .map_err(|e| format!("{codec:?}: {e}"))?;
            }
        }
        Ok(())
    }

    fn unbounded() -> Arc<dyn MemoryPool> {
        Arc::new(UnboundedMemoryPool::default())
    }

    /// What a call's last two messages take once decoded is held in its
    /// session's pool until the call's end: two calls of one session share
    /// its memory.
    #[tokio::test]
    async fn a_message_holds_its_decoded_bytes_in_the_session_pool(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let column = StringArray::from(vec!["x".repeat(1000); 100]);
        let batch = RecordBatch::try_from_iter([("a", Arc::new(column) as _)])?;
        let small = batch.slice(0, 10);
        let encoded = |batch: RecordBatch| async move {
            FlightDataEncoderBuilder::new()
                .build(futures::stream::iter([Ok(batch)]))
                .try_collect::<Vec<_>>()
                .await
        };
        let (big, small) = (encoded(batch).await?, encoded(small).await?);
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(150_000));
        let mut first = MessageCheck::new(1 << 20, 1 << 10, &pool);
        for message in &big {
            first.check(message)?;
        }
        let held = pool.reserved();
        assert!(held >= 100_000, "the pool holds {held} bytes");
        // A second call of the session finds too little free.
        let mut second = MessageCheck::new(1 << 20, 1 << 10, &pool);
        let refused = big.iter().try_for_each(|m| second.check(m));
        let error = refused
            .err()
            .ok_or("a message past the pool's free bytes passed")?;
        assert_eq!(error.code(), tonic::Code::ResourceExhausted);
        assert!(
            error
                .message()
                .contains("more than the session's memory has free now"),
            "{error}"
        );
        // The rows of the message before are held with the next (their
        // writer may not be done with them); smaller messages after them
        // give their bytes back.
        for message in small.iter().skip(1) {
            first.check(message)?;
        }
        assert!(pool.reserved() > held, "{} bytes held", pool.reserved());
        for message in small.iter().skip(1) {
            first.check(message)?;
        }
        assert!(pool.reserved() < held / 4, "{} bytes held", pool.reserved());
        drop((first, second));
        assert_eq!(pool.reserved(), 0);
        Ok(())
    }
}
