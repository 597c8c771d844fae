//! The Flight SQL calls.
//!
//! Each call finds its session ([`Sessions::session_of`]) and runs through
//! that session as the embedded API does. A query is planned by
//! `GetFlightInfo` and streamed by `DoGet`, or both in one `DoGet` whose
//! ticket is the query itself (one round trip instead of two): batches
//! are encoded as the client reads them (HTTP/2 flow control holds the
//! plan back), never collected whole, and a client that goes away drops
//! the plan, which stops it. Calls the server does not implement answer `UNIMPLEMENTED`
//! (ADBC runs a statement unprepared when preparing it is refused so).

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, XdbcTypeInfoData};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandGetCatalogs, CommandGetCrossReference,
    CommandGetDbSchemas, CommandGetExportedKeys, CommandGetImportedKeys, CommandGetPrimaryKeys,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandGetXdbcTypeInfo,
    CommandPreparedStatementQuery, CommandPreparedStatementUpdate, CommandStatementIngest,
    CommandStatementQuery, CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt,
    SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus,
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage,
    SchemaAsIpc, Ticket,
};
use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type};
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use datafusion::execution::SendableRecordBatchStream;
use futures::{stream, Stream, StreamExt, TryStreamExt};
use prost::bytes::Bytes;
use prost::Message;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};
use widesql::{Db, Session};

use crate::calls::{statement_kind, Call, Slot, Work};
use crate::metadata;
use crate::put::{
    ingest_options, ingest_stream, ingest_table, parameter_rows, Bound, Input, Reading,
};
use crate::sessions::{basic_credentials, Sessions};
use crate::statements::{About, Cancelled, Running, Statements};
use crate::status::{not_to_retry, status, status_of_df};

type DoGetStream = <WideFlightSql as FlightService>::DoGetStream;
type DoActionStream = <WideFlightSql as FlightService>::DoActionStream;

/// The action that cancels a query (not a method of the trait in
/// arrow-flight 59).
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

/// The Flight SQL service of one database.
pub(crate) struct WideFlightSql {
    db: Db,
    sessions: Arc<Sessions>,
    statements: Arc<Statements>,
    work: Arc<Work>,
    sql_info: SqlInfoData,
    type_info: XdbcTypeInfoData,
    /// How long a query may run.
    query_time: std::time::Duration,
    /// The most bytes of parameters one call binds.
    parameter_bytes: usize,
    /// What all calls putting parameters hold between them.
    reading: Reading,
    /// The longest statement text taken.
    statement_bytes: usize,
    /// How long a `DoPut` body may pause.
    input_idle: std::time::Duration,
    /// The most bytes one message of a `DoPut` body may hold decoded.
    decoded_bytes: usize,
}

/// A statement planned by [`WideFlightSql::plan_statement`].
struct Planned {
    frame: widesql::Frame,
    about: About,
    /// What its user could do when it was planned.
    privileges: Option<u64>,
    /// Whether it changed something (it has then run to its end).
    wrote: bool,
}

impl WideFlightSql {
    pub(crate) fn new(
        db: Db,
        limits: &crate::server::Limits,
        statements: Arc<Statements>,
        work: Arc<Work>,
    ) -> Result<WideFlightSql, Status> {
        Ok(WideFlightSql {
            sessions: Arc::new(Sessions::new(db.clone(), limits)),
            db,
            statements,
            work,
            sql_info: metadata::sql_info()?,
            type_info: metadata::xdbc_type_info()?,
            query_time: limits.query_time,
            parameter_bytes: limits.message_bytes,
            reading: Reading::new(limits.bound_parameter_bytes),
            statement_bytes: limits.statement_bytes,
            input_idle: limits.input_idle,
            decoded_bytes: limits.session_memory,
        })
    }

    /// The sessions of the clients that shook hands.
    pub(crate) fn sessions(&self) -> Arc<Sessions> {
        Arc::clone(&self.sessions)
    }

    /// How the body of a `DoPut` call of `session` is read (see
    /// [`crate::put::Input`]).
    fn input(&self, session: &Session) -> Input {
        Input {
            idle: self.input_idle,
            ended: self.work.inputs_ended(),
            decoded_bytes: self.decoded_bytes,
            schema_bytes: self.statement_bytes,
            memory: session.memory_pool(),
        }
    }

    /// Starts a call about a statement (`cancel`: how to stop it; `None`
    /// for a write, which runs to its end).
    fn call<T>(
        &self,
        name: &'static str,
        about: About,
        request: &Request<T>,
        cancel: Option<Box<dyn Fn() + Send + Sync>>,
    ) -> Call {
        let client = request
            .remote_addr()
            .map_or_else(|| "?".to_string(), |a| a.to_string());
        Call::start(&self.db, name, about, client, cancel)
    }

    /// Answers a catalog call with what `read` finds in the caller's
    /// session, as a query: in a slot (listing every table of a large
    /// catalog with its schema is work like a query's, under the same
    /// limits), listed in `SHOW ACTIVITY` while it runs, and logged. It
    /// reads and writes nothing, so it ends with its call when the client
    /// goes away.
    async fn catalog_call<T, F, R>(
        &self,
        name: &'static str,
        request: &Request<T>,
        read: F,
    ) -> Result<Response<DoGetStream>, Status>
    where
        F: FnOnce(Session) -> R,
        R: std::future::Future<Output = Result<RecordBatch, Status>>,
    {
        let session = self.sessions.session_of(request)?;
        let about = About {
            user: session.options().user.clone(),
            kind: name.into(),
        };
        let _slot = self.work.slot(about.user.as_deref())?;
        let (abort, registration) = futures::future::AbortHandle::new_pair();
        let cancel = Box::new(move || abort.abort()) as Box<dyn Fn() + Send + Sync>;
        let call = self.call("DoGet", about, request, Some(cancel));
        let batch = futures::future::Abortable::new(read(session), registration)
            .await
            .unwrap_or_else(|_| Err(Status::cancelled("the call was cancelled")));
        let rows = batch.as_ref().ok().map(|b| b.num_rows() as u64);
        call.done(batch, rows).map(one_batch)
    }

    /// What the user of a statement may do now, to compare with what it
    /// could when its query was planned.
    fn privileges_of(&self, about: &About) -> Option<u64> {
        about
            .user
            .as_deref()
            .and_then(|user| self.db.privileges_version(user))
    }

    /// Refuses a statement sent in a transaction, or whose text is longer
    /// than the server takes, before it is parsed.
    fn check_statement(&self, sql: &str, transaction_id: &Option<Bytes>) -> Result<(), Status> {
        no_transaction(transaction_id)?;
        if sql.len() <= self.statement_bytes {
            return Ok(());
        }
        Err(Status::resource_exhausted(format!(
            "the statement is {} bytes long, more than the server's limit of {} bytes \
             (serve --max-statement-kib): send many rows as a prepared statement's \
             parameters or by bulk ingest",
            sql.len(),
            self.statement_bytes
        )))
    }

    /// Plans the statement `sql` of `session` in a slot, as the call
    /// `name`; one that changes something runs there, to its end, whether
    /// or not its rows are fetched. A query during which the user's grants
    /// changed is refused: it was checked against the old ones.
    async fn plan_statement<T>(
        &self,
        name: &'static str,
        session: Session,
        sql: String,
        request: &Request<T>,
    ) -> Result<Planned, Status> {
        let about = About {
            user: session.options().user.clone(),
            kind: statement_kind(&sql),
        };
        // Taken before the query is planned and checked: a REVOKE while it
        // plans is seen when its rows are fetched.
        let before = self.privileges_of(&about);
        let call = self.call(name, about.clone(), request, None);
        let ran = self
            .work
            .run(about.user.as_deref(), async move {
                let frame = session.sql(&sql).await.map_err(status)?;
                match frame.writes() {
                    true => frame.finish().await.map_err(status),
                    false => Ok(frame),
                }
            })
            .await;
        let frame = call.done(ran, None)?;
        // Its rows are then only its outcome: a limit or a change of grants
        // must not refuse them and have the client run it a second time.
        let wrote = frame.changed();
        // Grants that changed while it ran: a read was checked against the
        // old ones and is refused; a statement that changed something (a
        // GRANT of one's own, say) has run and answers.
        let privileges = self.privileges_of(&about);
        if privileges != before && !wrote {
            return Err(Status::aborted(
                "the user's grants changed while this query was planned: run it again",
            ));
        }
        Ok(Planned {
            frame,
            about,
            privileges,
            wrote,
        })
    }

    /// Streams `rows` as Flight data; `running` lets `CancelFlightInfo`
    /// stop them, and forgets the query when the stream ends or is
    /// dropped (the client went away). The query holds `slot` while its
    /// rows stream, and is stopped once it has run for the server's query
    /// time. Rows with no `running` are the outcome of a write that ran:
    /// how they fail never invites running it again ([`not_to_retry`]).
    fn stream_rows(
        &self,
        rows: SendableRecordBatchStream,
        mut running: Option<Running>,
        slot: Option<Slot>,
        call: Call,
    ) -> DoGetStream {
        let schema = rows.schema();
        let outcome_of_a_write = running.is_none();
        let final_status = move |status: Status| match outcome_of_a_write {
            true => not_to_retry(status),
            false => status,
        };
        let abort = running.as_ref().map(|running| running.abort.clone());
        let rows = match running.as_mut().and_then(|r| r.registration.take()) {
            Some(registration) => stream::Abortable::new(rows, registration).boxed(),
            None => rows.boxed(),
        };
        let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = Arc::clone(&counted);
        let rows = rows.inspect(move |batch| {
            if let Ok(batch) = batch {
                counter.fetch_add(
                    batch.num_rows() as u64,
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        });
        let limit = self.query_time;
        let deadline = tokio::time::Instant::now() + limit;
        let rows = rows.take_until(tokio::time::sleep_until(deadline));
        let failed: Arc<Mutex<Option<Status>>> = Arc::default();
        let seen = Arc::clone(&failed);
        let end = stream::once(async move {
            drop(running);
            drop(slot);
            let stopped = if abort.is_some_and(|abort| abort.is_aborted()) {
                Some(Status::cancelled("the query was cancelled"))
            } else if tokio::time::Instant::now() >= deadline {
                Some(final_status(Status::deadline_exceeded(format!(
                    "the query ran for {} s, the server's limit, and was stopped",
                    limit.as_secs_f64()
                ))))
            } else {
                None
            };
            let outcome = match stopped.clone().or_else(|| seen.lock().ok()?.take()) {
                Some(status) => Err(status),
                None => Ok(()),
            };
            let rows = counted.load(std::sync::atomic::Ordering::Relaxed);
            let _ = call.done(outcome, Some(rows));
            stopped.map(|status| Err(FlightError::Tonic(Box::new(status))))
        })
        .filter_map(|end| async move { end });
        let rows = rows
            .map_err(move |e| {
                let status = final_status(status_of_df(e));
                if let Ok(mut failed) = failed.lock() {
                    *failed = Some(status.clone());
                }
                FlightError::Tonic(Box::new(status))
            })
            .chain(end);
        Box::pin(
            FlightDataEncoderBuilder::new()
                .with_schema(schema)
                .build(rows)
                .map_err(Status::from),
        )
    }
}

/// The schema as it goes on the wire (dictionaries sent as their values,
/// as the encoder sends them).
fn wire_schema(schema: SchemaRef) -> SchemaRef {
    let encoder = FlightDataEncoderBuilder::new()
        .with_schema(Arc::clone(&schema))
        .build(stream::empty());
    encoder.known_schema().unwrap_or(schema)
}

fn flight_info(
    schema: &Schema,
    ticket: Vec<u8>,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("encoding the result's schema failed: {e}")))?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
        .with_descriptor(descriptor)
        .with_total_records(-1)
        .with_ordered(true);
    Ok(Response::new(info))
}

/// A metadata call's `FlightInfo`: its ticket is the command itself.
fn metadata_info(
    command: impl ProstMessageExt,
    schema: SchemaRef,
    request: Request<FlightDescriptor>,
) -> Result<Response<FlightInfo>, Status> {
    flight_info(
        &schema,
        command.as_any().encode_to_vec(),
        request.into_inner(),
    )
}

/// Refuses a statement sent inside a transaction: none is offered (each
/// statement commits on its own), so running it would mislead.
fn no_transaction(transaction_id: &Option<Bytes>) -> Result<(), Status> {
    match transaction_id {
        Some(_) => Err(Status::invalid_argument(
            "transactions are not offered: every statement commits on its own",
        )),
        None => Ok(()),
    }
}

/// One batch as a `DoGet` stream.
fn one_batch(batch: RecordBatch) -> Response<DoGetStream> {
    let schema = batch.schema();
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(stream::once(async { Ok(batch) }))
        .map_err(Status::from);
    Response::new(Box::pin(stream))
}

fn schema_bytes(schema: &Schema) -> Result<Bytes, Status> {
    let options = IpcWriteOptions::default();
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &options)
        .try_into()
        .map_err(|e| Status::internal(format!("encoding a schema failed: {e}")))?;
    Ok(bytes)
}

/// The status of an `executemany` whose row of parameters `ran` (from 0)
/// failed with `failed` after the rows before it ran, each a statement of
/// its own: what they changed stays, so the answer says so, and is never
/// one that invites running the whole call again.
fn partly_ran(failed: Status, ran: usize, total: usize, changed: i64) -> Status {
    not_to_retry(Status::new(
        failed.code(),
        format!(
            "{ran} of the {total} rows of parameters ran, changing {changed} rows, which stay; \
             row {} failed: {}",
            ran + 1,
            failed.message()
        ),
    ))
}

/// The rows an INSERT, UPDATE or DELETE reports (its one `count`
/// column); 0 for a statement that reports none (DDL).
fn rows_changed(batches: &[RecordBatch]) -> i64 {
    let counted = batches
        .iter()
        .filter(|b| b.num_columns() == 1 && b.schema().field(0).name() == "count");
    let total: u64 = counted
        .filter_map(|b| b.column(0).as_primitive_opt::<UInt64Type>())
        .flat_map(|counts| counts.iter().flatten())
        .sum();
    i64::try_from(total).unwrap_or(i64::MAX)
}

/// The handle a ticket or `FlightInfo` names: a statement's or a prepared
/// statement's.
fn handle_of(ticket: &Ticket) -> Option<Bytes> {
    let any = Any::decode(ticket.ticket.clone()).ok()?;
    if let Ok(Some(query)) = any.unpack::<TicketStatementQuery>() {
        return Some(query.statement_handle);
    }
    match any.unpack::<CommandPreparedStatementQuery>() {
        Ok(Some(query)) => Some(query.prepared_statement_handle),
        _ => None,
    }
}

#[tonic::async_trait]
impl FlightSqlService for WideFlightSql {
    type FlightService = WideFlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let credentials = basic_credentials(&request)?;
        let user = credentials.as_ref().map(|c| c.user.clone());
        let client = request
            .remote_addr()
            .map_or_else(|| "?".to_string(), |a| a.to_string());
        let address = request.remote_addr().map(|a| a.ip());
        let token = match self.sessions.open(credentials, address).await {
            Ok(token) => {
                tracing::info!(
                    call = "Handshake",
                    user = user.as_deref().unwrap_or("-"),
                    client,
                    "signed in"
                );
                token
            }
            Err(e) => {
                tracing::warn!(
                    call = "Handshake",
                    user = user.as_deref().unwrap_or("-"),
                    client,
                    message = e.message(),
                    "refused"
                );
                return Err(e);
            }
        };
        let header = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| Status::internal("a token is not a header value"))?;
        let reply = HandshakeResponse {
            protocol_version: 0,
            payload: Bytes::from(token),
        };
        let replies: Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>> =
            Box::pin(stream::iter([Ok(reply)]));
        let mut response = Response::new(replies);
        response.metadata_mut().insert("authorization", header);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let (session, owner) = self.sessions.session_and_caller(&request)?;
        self.check_statement(&query.query, &query.transaction_id)?;
        let place = self.statements.place_for_pending(&owner)?;
        let planned = self
            .plan_statement("GetFlightInfo", session, query.query, &request)
            .await?;
        let schema = wire_schema(planned.frame.stream_schema());
        let handle = self.statements.add_pending(
            place,
            planned.frame,
            planned.about,
            planned.privileges,
            planned.wrote,
        );
        let ticket = TicketStatementQuery {
            statement_handle: handle,
        };
        flight_info(
            &schema,
            ticket.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let (user, owner) = self.sessions.user_and_caller(&request)?;
        // The outcome of a statement that wrote is sent without a slot: a
        // limit must not refuse what has been made.
        let slot = match self
            .statements
            .pending_wrote(&ticket.statement_handle, &owner)
        {
            true => None,
            false => Some(self.work.slot(user.as_deref())?),
        };
        let (pending, running) = self
            .statements
            .take_pending(&ticket.statement_handle, &owner)?;
        if !pending.wrote && self.privileges_of(&pending.about) != pending.privileges {
            return Err(Status::aborted(
                "the user's grants changed after this query was planned: run it again",
            ));
        }
        let cancel = running.as_ref().map(|running| {
            let abort = running.abort.clone();
            Box::new(move || abort.abort()) as Box<dyn Fn() + Send + Sync>
        });
        let call = self.call("DoGet", pending.about.clone(), &request, cancel);
        let rows = match pending.frame.execute_stream().await {
            Ok(rows) => rows,
            Err(e) => return call.done(Err(status(e)), None),
        };
        Ok(Response::new(self.stream_rows(rows, running, slot, call)))
    }

    async fn do_put_statement_update(
        &self,
        ticket: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let session = self.sessions.session_of(&request)?;
        self.check_statement(&ticket.query, &ticket.transaction_id)?;
        let sql = ticket.query;
        let about = About {
            user: session.options().user.clone(),
            kind: statement_kind(&sql),
        };
        let user = about.user.clone();
        let call = self.call("DoPutUpdate", about, &request, None);
        let changed = self
            .work
            .run(user.as_deref(), async move {
                // A query here would run to its end unseen by the query
                // time and by cancellation, its rows collected and thrown
                // away.
                if session.is_query(&sql).map_err(status)? {
                    return Err(Status::invalid_argument(
                        "a query returns rows: run it as a query (GetFlightInfo, then DoGet), \
                         not as an update",
                    ));
                }
                let frame = session.sql(&sql).await.map_err(status)?;
                Ok(rows_changed(&frame.collect().await.map_err(status)?))
            })
            .await;
        let rows = changed.as_ref().ok().map(|n| n.unsigned_abs());
        call.done(changed, rows)
    }

    async fn do_put_statement_ingest(
        &self,
        command: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let session = self.sessions.session_of(&request)?;
        no_transaction(&command.transaction_id)?;
        if command.temporary {
            return Err(Status::invalid_argument(
                "temporary tables are not offered: ingest into a table",
            ));
        }
        if command.catalog.is_some() && command.schema.is_none() {
            return Err(Status::invalid_argument(
                "an ingest that names a catalog (project) names a schema (dataset) too",
            ));
        }
        let options = ingest_options(&command)?;
        let table = ingest_table(&command);
        let about = About {
            user: session.options().user.clone(),
            kind: "INGEST".into(),
        };
        let user = about.user.clone();
        let call = self.call("DoPutIngest", about, &request, None);
        let input = match ingest_stream(request.into_inner(), self.input(&session)).await {
            Ok(input) => input,
            Err(e) => return call.done(Err(e), None),
        };
        let written = self
            .work
            .run(user.as_deref(), async move {
                session
                    .import_stream(&table, input, options)
                    .await
                    .map_err(status)
            })
            .await;
        let rows = written.as_ref().ok().copied();
        call.done(written, rows)
            .map(|rows| i64::try_from(rows).unwrap_or(i64::MAX))
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let (session, owner) = self.sessions.session_and_caller(&request)?;
        self.check_statement(&query.query, &query.transaction_id)?;
        let user = session.options().user.clone();
        let text = query.query.clone();
        // Planned in a slot, as every statement is.
        let prepared = self
            .work
            .run(user.as_deref(), async move {
                if !session.can_prepare(&text).map_err(status)? {
                    return Err(Status::unimplemented(
                        "only one query or INSERT can be prepared; run other statements \
                         unprepared",
                    ));
                }
                session.prepare(&text).await.map_err(status)
            })
            .await?;
        let dataset_schema = schema_bytes(&wire_schema(prepared.schema()))?;
        let types = prepared.parameter_types().map_err(status)?;
        let parameter_schema = match types.is_empty() {
            true => Bytes::new(),
            false => {
                let fields: Vec<Field> = types
                    .into_iter()
                    .enumerate()
                    .map(|(i, t)| {
                        Field::new(format!("${}", i + 1), t.unwrap_or(DataType::Null), true)
                    })
                    .collect();
                schema_bytes(&Schema::new(fields))?
            }
        };
        let about = About {
            user,
            kind: statement_kind(&query.query),
        };
        let prepared_statement_handle = self.statements.add_prepared(prepared, owner, about)?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle,
            dataset_schema,
            parameter_schema,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let owner = self.sessions.caller(&request)?;
        self.statements
            .close_prepared(&query.prepared_statement_handle, &owner)
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let owner = self.sessions.caller(&request)?;
        let handle = query.prepared_statement_handle;
        let prepared = self.statements.prepared(&handle, false, &owner)?.prepared;
        let (body, input) = (request.into_inner(), self.input(prepared.session()));
        let bound = parameter_rows(body, self.parameter_bytes, &self.reading, input).await?;
        self.statements.bind(&handle, bound, &owner)?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let owner = self.sessions.caller(&request)?;
        let statement =
            self.statements
                .prepared(&query.prepared_statement_handle, false, &owner)?;
        let schema = wire_schema(statement.prepared.schema());
        flight_info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let owner = self.sessions.caller(&request)?;
        let handle = query.prepared_statement_handle;
        let statement = self.statements.prepared(&handle, false, &owner)?;
        if statement.rows.len() > 1 {
            return Err(Status::invalid_argument(format!(
                "a prepared query runs with one row of parameters; {} are bound",
                statement.rows.len()
            )));
        }
        let params = statement.rows.first().cloned().unwrap_or_default();
        let prepared = statement.prepared;
        let user = statement.about.user.clone();
        if prepared.writes() {
            // A prepared INSERT fetched as a query (ADBC's `execute` with
            // parameters) runs to its end in a slot, whatever happens to
            // this call, and is not cancelled; its outcome is then sent in
            // no slot, so that a limit never refuses what has been made.
            let call = self.call("DoGetPrepared", statement.about, &request, None);
            let ran = self
                .work
                .run(user.as_deref(), async move {
                    let frame = prepared.execute(params).await.map_err(status)?;
                    frame.finish().await.map_err(status)
                })
                .await;
            let rows = match ran {
                Ok(frame) => frame.execute_stream().await.map_err(status),
                Err(e) => Err(e),
            };
            return match rows {
                Ok(rows) => Ok(Response::new(self.stream_rows(rows, None, None, call))),
                Err(e) => call.done(Err(e), None),
            };
        }
        let slot = self.work.slot(user.as_deref())?;
        let running = self.statements.start(handle, owner);
        let abort = running.abort.clone();
        let cancel: Box<dyn Fn() + Send + Sync> = Box::new(move || abort.abort());
        let call = self.call("DoGetPrepared", statement.about, &request, Some(cancel));
        let rows = match prepared.execute(params).await {
            Ok(frame) => frame.execute_stream().await,
            Err(e) => Err(e),
        };
        match rows {
            Ok(rows) => Ok(Response::new(self.stream_rows(
                rows,
                Some(running),
                Some(slot),
                call,
            ))),
            Err(e) => call.done(Err(status(e)), None),
        }
    }

    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let owner = self.sessions.caller(&request)?;
        let handle = query.prepared_statement_handle;
        let mut statement = self.statements.prepared(&handle, false, &owner)?;
        let call = self.call(
            "DoPutPreparedUpdate",
            statement.about.clone(),
            &request,
            None,
        );
        // Each row of parameters runs the statement once (ADBC's
        // executemany), each row a statement of its own: the rows the
        // request carries, else the rows bound to it since it last ran,
        // taken once the request has been read (a binding runs once).
        let (body, input) = (
            request.into_inner(),
            self.input(statement.prepared.session()),
        );
        let Bound {
            mut rows,
            mut reading,
            ..
        } = parameter_rows(body, self.parameter_bytes, &self.reading, input).await?;
        // The slot first: a call refused for want of one leaves the rows
        // bound, for the client to run again.
        let slot = self.work.slot(statement.about.user.as_deref())?;
        if rows.is_empty() {
            // This call's own reference to them goes first, so that taking
            // them copies nothing.
            drop(std::mem::take(&mut statement.rows));
            let taken = self.statements.prepared(&handle, true, &owner)?;
            // No longer bound, they count with the rows being put.
            reading.carry(taken.bound_bytes);
            rows = Arc::unwrap_or_clone(taken.rows);
        }
        if !statement.prepared.writes() {
            return Err(Status::invalid_argument(
                "a prepared query returns rows: fetch them with DoGet, not as an update",
            ));
        }
        let wanted = statement.prepared.parameter_types().map_err(status)?.len();
        if rows.is_empty() {
            if wanted > 0 {
                return Err(Status::invalid_argument(format!(
                    "the statement takes {wanted} parameters, and no row of them is bound"
                )));
            }
            rows.push(Vec::new());
        }
        let prepared = statement.prepared;
        let changed = self
            .work
            .run_in(slot, async move {
                // The rows, put or taken, count until they have run.
                let _reading = reading;
                let (mut changed, total) = (0i64, rows.len());
                for (ran, params) in rows.into_iter().enumerate() {
                    match prepared.query(params).await {
                        Ok(result) => changed = changed.saturating_add(rows_changed(&result)),
                        Err(e) if ran == 0 => return Err(status(e)),
                        Err(e) => return Err(partly_ran(status(e), ran, total, changed)),
                    }
                }
                Ok(changed)
            })
            .await;
        // Its lifetime counts from the end of its last run.
        self.statements.touch_prepared(&handle);
        let rows = changed.as_ref().ok().map(|n| n.unsigned_abs());
        call.done(changed, rows)
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.sessions.caller(&request)?;
        let schema = query.into_builder().schema();
        metadata_info(query, schema, request)
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.catalog_call("GetCatalogs", &request, |session| async move {
            metadata::catalogs(&session, query)
        })
        .await
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.sessions.caller(&request)?;
        let query = metadata::checked_schemas(query)?;
        let schema = query.clone().into_builder().schema();
        metadata_info(query, schema, request)
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.catalog_call("GetDbSchemas", &request, |session| async move {
            metadata::schemas(&session, metadata::checked_schemas(query)?)
        })
        .await
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.sessions.caller(&request)?;
        let query = metadata::checked_tables(query)?;
        let schema = query.clone().into_builder().schema();
        metadata_info(query, schema, request)
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.catalog_call("GetTables", &request, |session| async move {
            metadata::tables(&session, metadata::checked_tables(query)?).await
        })
        .await
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.sessions.caller(&request)?;
        let schema = query.into_builder().schema();
        metadata_info(query, schema, request)
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.sessions.caller(&request)?;
        Ok(one_batch(metadata::table_types(query)?))
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.sessions.caller(&request)?;
        metadata_info(query, metadata::primary_keys_schema(), request)
    }

    async fn do_get_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.catalog_call("GetPrimaryKeys", &request, |session| async move {
            metadata::primary_keys(&session, query).await
        })
        .await
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.sessions.caller(&request)?;
        let query = metadata::checked_sql_info(query)?;
        let schema = query.clone().into_builder(&self.sql_info).schema();
        metadata_info(query, schema, request)
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.sessions.caller(&request)?;
        let batch = metadata::checked_sql_info(query)?
            .into_builder(&self.sql_info)
            .build()
            .map_err(|e| Status::internal(format!("building GetSqlInfo's result failed: {e}")))?;
        Ok(one_batch(batch))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.sessions.caller(&request)?;
        let schema = query.into_builder(&self.type_info).schema();
        metadata_info(query, schema, request)
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.sessions.caller(&request)?;
        let batch = query.into_builder(&self.type_info).build().map_err(|e| {
            Status::internal(format!("building GetXdbcTypeInfo's result failed: {e}"))
        })?;
        Ok(one_batch(batch))
    }

    async fn get_flight_info_imported_keys(
        &self,
        query: CommandGetImportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.sessions.caller(&request)?;
        metadata_info(query, metadata::foreign_keys_schema(), request)
    }

    async fn do_get_imported_keys(
        &self,
        _query: CommandGetImportedKeys,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.sessions.caller(&request)?;
        Ok(one_batch(metadata::foreign_keys()))
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.sessions.caller(&request)?;
        metadata_info(query, metadata::foreign_keys_schema(), request)
    }

    async fn do_get_exported_keys(
        &self,
        _query: CommandGetExportedKeys,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.sessions.caller(&request)?;
        Ok(one_batch(metadata::foreign_keys()))
    }

    async fn get_flight_info_cross_reference(
        &self,
        query: CommandGetCrossReference,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.sessions.caller(&request)?;
        metadata_info(query, metadata::foreign_keys_schema(), request)
    }

    async fn do_get_cross_reference(
        &self,
        _query: CommandGetCrossReference,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.sessions.caller(&request)?;
        Ok(one_batch(metadata::foreign_keys()))
    }

    /// A query sent as its own ticket (a `CommandStatementQuery` in
    /// `DoGet`, as InfluxDB's Flight API takes SQL): planned and streamed
    /// in one call, one round trip instead of `GetFlightInfo`'s and
    /// `DoGet`'s. It is checked, limited, logged and cancelled (by an
    /// admin, or by the client going away) as a query of two calls is.
    async fn do_get_fallback(
        &self,
        request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<DoGetStream>, Status> {
        let query = match message.unpack::<CommandStatementQuery>() {
            Ok(Some(query)) => query,
            _ => {
                return Err(Status::unimplemented(format!(
                    "a DoGet of '{}' is not implemented",
                    message.type_url
                )))
            }
        };
        let (session, owner) = self.sessions.session_and_caller(&request)?;
        self.check_statement(&query.query, &query.transaction_id)?;
        let planned = self
            .plan_statement("DoGetStatement", session, query.query, &request)
            .await?;
        // A query's rows stream in a slot, and can be stopped; the outcome
        // of a statement that wrote is sent without one, as in `DoGet`.
        let (slot, running) = match planned.wrote {
            true => (None, None),
            false => {
                let slot = self.work.slot(planned.about.user.as_deref())?;
                (Some(slot), Some(self.statements.start_unnamed(owner)))
            }
        };
        let cancel = running.as_ref().map(|running| {
            let abort = running.abort.clone();
            Box::new(move || abort.abort()) as Box<dyn Fn() + Send + Sync>
        });
        let call = self.call("DoGet", planned.about, &request, cancel);
        match planned.frame.execute_stream().await {
            Ok(rows) => Ok(Response::new(self.stream_rows(rows, running, slot, call))),
            Err(e) if planned.wrote => call.done(Err(not_to_retry(status(e))), None),
            Err(e) => call.done(Err(status(e)), None),
        }
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<DoActionStream>, Status> {
        let owner = self.sessions.caller(&request)?;
        let action = request.into_inner();
        if action.r#type != CANCEL_FLIGHT_INFO {
            return Err(Status::unimplemented(format!(
                "the action '{}' is not implemented",
                action.r#type
            )));
        }
        let cancel = CancelFlightInfoRequest::decode(action.body).map_err(|e| {
            Status::invalid_argument(format!("a CancelFlightInfo request cannot be read: {e}"))
        })?;
        let handles = cancel
            .info
            .iter()
            .flat_map(|info| &info.endpoint)
            .filter_map(|endpoint| endpoint.ticket.as_ref())
            .filter_map(handle_of);
        let mut outcome = CancelStatus::NotCancellable;
        for handle in handles {
            match self.statements.cancel(&handle, &owner) {
                Cancelled::BeforeItRan | Cancelled::WhileRunning => {
                    outcome = CancelStatus::Cancelled
                }
                Cancelled::Unknown => {}
            }
        }
        let result = arrow_flight::Result {
            body: CancelFlightInfoResult::new(outcome).encode_to_vec().into(),
        };
        Ok(Response::new(Box::pin(stream::iter([Ok(result)]))))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(vec![Ok(ActionType {
            r#type: CANCEL_FLIGHT_INFO.into(),
            description: "Cancels a query: before its DoGet, or while its rows stream".into(),
        })])
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
