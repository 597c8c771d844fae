//! Name rules for projects, datasets, tables, families and columns.

use crate::catalog::{CatalogError, ObjectKind};

/// The longest name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 255;

/// Checks a name a user gives to a project, dataset or table: 1 to 255
/// bytes, no control characters, no leading `_` (reserved for the system).
pub fn check_user_name(kind: ObjectKind, name: &str) -> Result<(), CatalogError> {
    check_name(kind, name)?;
    if name.starts_with('_') {
        return Err(CatalogError::InvalidName {
            kind,
            name: name.to_string(),
            reason: "names starting with '_' are reserved for the system".into(),
        });
    }
    Ok(())
}

/// Checks a family or column name: 1 to 255 bytes, no control characters.
pub fn check_name(kind: ObjectKind, name: &str) -> Result<(), CatalogError> {
    let reason = if name.is_empty() {
        "a name must not be empty".to_string()
    } else if name.len() > MAX_NAME_LEN {
        format!(
            "a name is at most {MAX_NAME_LEN} bytes, this one has {}",
            name.len()
        )
    } else if name.chars().any(char::is_control) {
        "a name must not contain control characters".to_string()
    } else {
        return Ok(());
    };
    Err(CatalogError::InvalidName {
        kind,
        name: name.escape_debug().to_string(),
        reason,
    })
}
