//! Object names in DDL: identifiers normalised as DataFusion normalises
//! them, and the parts of a dotted name.

use datafusion::sql::sqlparser::ast::{Ident, ObjectName};

use super::sql_error;
use crate::error::Result;

/// An identifier as DataFusion normalises it: unquoted ones lower-cased.
pub fn normalize(ident: &Ident) -> String {
    if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_lowercase()
    }
}

/// The parts of an object name, normalised.
pub fn name_parts(name: &ObjectName) -> Result<Vec<String>> {
    name.0
        .iter()
        .map(|part| {
            part.as_ident()
                .map(normalize)
                .ok_or_else(|| sql_error(format!("'{name}' is not a plain name")))
        })
        .collect()
}

/// The parts of a dotted name given as text (`'acme.web."Pages"'`):
/// quoted parts keep their case, others are lower-cased.
pub fn name_parts_of_text(name: &str) -> Vec<String> {
    name.split('.')
        .map(str::trim)
        .map(
            |part| match part.strip_prefix('"').and_then(|p| p.strip_suffix('"')) {
                Some(quoted) => quoted.to_string(),
                None => part.to_lowercase(),
            },
        )
        .collect()
}
