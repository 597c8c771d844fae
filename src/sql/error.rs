//! DataFusion errors and ours: ours cross DataFusion as `External` and are
//! unwrapped again; DataFusion's stay whole, as the source.

use datafusion::common::DataFusionError;

use crate::error::Error;

/// Turns a DataFusion error back into ours when it wraps one (our errors
/// cross DataFusion as `External`); any other stays DataFusion's, kept
/// whole as the source.
pub fn from_df(e: DataFusionError) -> Error {
    match e {
        DataFusionError::External(inner) => match inner.downcast::<Error>() {
            Ok(ours) => *ours,
            Err(other) => Error::DataFusion(Box::new(DataFusionError::External(other))),
        },
        DataFusionError::Context(_, inner) => from_df(*inner),
        other => Error::DataFusion(Box::new(other)),
    }
}

impl From<DataFusionError> for Error {
    fn from(e: DataFusionError) -> Self {
        from_df(e)
    }
}
