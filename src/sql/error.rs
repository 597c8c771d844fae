//! DataFusion errors and ours: ours cross DataFusion as `External` and are
//! unwrapped again; DataFusion's stay whole, as the source.

use datafusion::common::DataFusionError;

use crate::catalog::{CatalogError, ObjectKind};
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
        DataFusionError::Diagnostic(_, inner) if matches!(&*inner, DataFusionError::Plan(m) if missing_table(m).is_some()) => {
            from_df(*inner)
        }
        DataFusionError::Plan(message) => match missing_table(&message) {
            Some(name) => Error::Catalog(CatalogError::NotFound {
                kind: ObjectKind::Table,
                name: name.to_string(),
            }),
            None => Error::DataFusion(Box::new(DataFusionError::Plan(message))),
        },
        other => Error::DataFusion(Box::new(other)),
    }
}

/// The table DataFusion's planner did not find, from its message: a name
/// the session resolved a moment before (a rename raced the statement).
/// Said as every other missing table is.
fn missing_table(message: &str) -> Option<&str> {
    let name = message
        .strip_prefix("table '")?
        .strip_suffix("' not found")?;
    (!name.contains('\'')).then_some(name)
}

impl From<DataFusionError> for Error {
    fn from(e: DataFusionError) -> Self {
        from_df(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn a_table_datafusion_did_not_find_is_a_missing_table() {
        let e = from_df(DataFusionError::Plan(
            "table 'default.public.w' not found".to_string(),
        ));
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(e.to_string(), "table 'default.public.w' does not exist");
        // As DataFusion's SQL planner reports it, with a diagnostic.
        let planned = DataFusionError::Plan("table 'w' not found".to_string());
        let diagnostic = datafusion::common::Diagnostic::new_error("table 'w' not found", None);
        let e = from_df(planned.with_diagnostic(diagnostic));
        assert_eq!(e.to_string(), "table 'w' does not exist");
        let other = from_df(DataFusionError::Plan(
            "table function 'x' not found".to_string(),
        ));
        assert_eq!(other.kind(), ErrorKind::Sql);
    }
}
