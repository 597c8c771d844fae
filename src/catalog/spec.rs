//! Checks and edits of table specs.

use super::*;

/// The name of the row-key column of tables without typed keys.
pub const KEY_COLUMN: &str = "_key";
/// The name of the raw row-key column of SQL's internal DML view: no
/// column of a new table may take it.
pub const ROWID_COLUMN: &str = "_rowid";

pub(super) fn check_gc(table: &str, family: &str, gc: &GcPolicy) -> Result<(), CatalogError> {
    let reason = if gc.max_versions == Some(0) {
        "max_versions must be at least 1"
    } else if gc.max_age_micros.is_some_and(|age| age <= 0) {
        "the maximum age must be positive"
    } else {
        return Ok(());
    };
    Err(CatalogError::InvalidSpec {
        table: table.to_string(),
        reason: format!("column family '{family}': {reason}"),
    })
}

/// A family spec with the GC policy replaced.
pub fn with_gc(spec: &TableSpec, family: &str, gc: GcPolicy, table: &str) -> Result<TableSpec> {
    let mut spec = spec.clone();
    let f = spec
        .families
        .iter_mut()
        .find(|f| f.name == family)
        .ok_or_else(|| TableError::UnknownFamily {
            table: table.to_string(),
            family: family.to_string(),
        })?;
    f.gc = gc;
    Ok(spec)
}

/// A spec with one more family.
pub fn with_family(spec: &TableSpec, family: FamilySpec, table: &str) -> Result<TableSpec> {
    if spec.family(&family.name).is_some() {
        return Err(TableError::FamilyExists {
            table: table.to_string(),
            family: family.name,
        }
        .into());
    }
    Ok(spec.clone().with_family(family))
}

/// A spec without the family `family`.
pub fn without_family(spec: &TableSpec, family: &str, table: &str) -> Result<TableSpec> {
    if spec.family(family).is_none() {
        return Err(TableError::UnknownFamily {
            table: table.to_string(),
            family: family.to_string(),
        }
        .into());
    }
    let mut spec = spec.clone();
    spec.families.retain(|f| f.name != family);
    Ok(spec)
}
