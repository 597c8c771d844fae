//! `SET widesql.*`: session settings that are widesql's, not DataFusion's.

use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, ObjectName};

use crate::error::{Error, Result};
use crate::sql::dml::write::WriteSettings;
use crate::sql::Session;

impl Session {
    /// `SET widesql.write_timestamp = '2024-01-01T00:00:00Z' | <micros> | DEFAULT`.
    pub(super) fn set_widesql(&self, variable: &ObjectName, values: &[SqlExpr]) -> Result<()> {
        let name = variable.to_string().to_lowercase();
        if name != "widesql.write_timestamp" {
            return Err(Error::Sql(format!(
                "unknown setting '{name}'; widesql has 'widesql.write_timestamp'"
            )));
        }
        let text = match values {
            [SqlExpr::Value(v)] => v.value.to_string().trim_matches('\'').to_string(),
            [SqlExpr::Identifier(i)] => i.value.clone(),
            _ => {
                return Err(Error::Sql(
                    "SET widesql.write_timestamp takes one value".into(),
                ))
            }
        };
        let timestamp = if text.eq_ignore_ascii_case("default") || text.eq_ignore_ascii_case("null")
        {
            None
        } else if let Ok(micros) = text.parse::<i64>() {
            Some(micros)
        } else {
            let parsed =
                datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(&text)
                    .map_err(|e| Error::Sql(format!("'{text}' is not a timestamp: {e}")))?;
            Some(parsed / 1000)
        };
        if timestamp.is_some_and(|ts| ts < 0) {
            return Err(Error::Sql(
                "widesql.write_timestamp must not be before 1970".into(),
            ));
        }
        let state = self.ctx.state_ref();
        state
            .write()
            .config_mut()
            .set_extension(Arc::new(WriteSettings { timestamp }));
        Ok(())
    }
}
