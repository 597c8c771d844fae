//! widesql (or plain in-memory DataFusion) as a sqllogictest engine.

use async_trait::async_trait;
use datafusion::execution::context::SessionContext;
use sqllogictest::{AsyncDB, DBOutput};
use widesql::Session;

use crate::format::{rows_as_text, slt_type, SltType};
use crate::SltError;

/// The label `skipif` / `onlyif` records match.
pub const ENGINE_LABEL: &str = "widesql";

/// What a sqllogictest engine runs statements on.
#[derive(Clone)]
pub enum Backend {
    /// A widesql session (sled-backed tables).
    Widesql(Session),
    /// Plain DataFusion with in-memory tables: the baseline.
    Memory(SessionContext),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Widesql(session) => session.fmt(f),
            Backend::Memory(_) => f.write_str("Memory"),
        }
    }
}

/// A sqllogictest engine.
#[derive(Debug)]
pub struct Engine {
    backend: Backend,
}

impl Engine {
    /// An engine over `backend`.
    pub fn new(backend: Backend) -> Self {
        Self { backend }
    }
}

#[async_trait]
impl AsyncDB for Engine {
    type Error = SltError;
    type ColumnType = SltType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<SltType>, SltError> {
        let (schema, batches) = match &self.backend {
            Backend::Widesql(session) => {
                let outputs = session.run(sql).await?;
                match outputs.into_iter().last() {
                    Some(last) => (last.schema, last.batches),
                    None => return Ok(DBOutput::StatementComplete(0)),
                }
            }
            Backend::Memory(ctx) => {
                let frame = ctx.sql(sql).await?;
                let schema = std::sync::Arc::new(frame.schema().as_arrow().clone());
                (schema, frame.collect().await?)
            }
        };
        if batches.is_empty() || schema.fields().is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows {
            types: schema
                .fields()
                .iter()
                .map(|f| slt_type(f.data_type()))
                .collect(),
            rows: rows_as_text(&batches)?,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        match self.backend {
            Backend::Widesql(_) => ENGINE_LABEL,
            Backend::Memory(_) => "datafusion-memory",
        }
    }
}
