//! `DROP DATABASE | SCHEMA | TABLE`.

use datafusion::sql::sqlparser::ast::{ObjectName, ObjectType};

use super::sql_error;
use crate::catalog::DropMode;
use crate::error::Result;
use crate::sql::Session;

/// `DROP DATABASE | SCHEMA | TABLE`.
pub(crate) fn drop_objects(
    session: &Session,
    object_type: ObjectType,
    names: &[ObjectName],
    if_exists: bool,
    cascade: bool,
) -> Result<()> {
    let mode = DropMode::cascade_if(cascade);
    for name in names {
        let result = match object_type {
            ObjectType::Table => session.open_table(name).and_then(|t| t.drop()),
            ObjectType::Schema => {
                let (project, dataset) = session.resolve_dataset_name(name)?;
                session
                    .db()
                    .open_project(&project)
                    .and_then(|p| p.open_dataset(&dataset))
                    .and_then(|d| d.drop(mode))
            }
            ObjectType::Database => {
                let parts = session.name_parts(name)?;
                session.db().drop_project(&parts.join("."), mode)
            }
            other => return Err(sql_error(format!("DROP {other} is not supported"))),
        };
        match result {
            Err(e) if if_exists && e.kind() == crate::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    Ok(())
}
