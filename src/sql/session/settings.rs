//! `SET widesql.*`: session settings that are widesql's, not DataFusion's.

use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{Expr as SqlExpr, ObjectName};

use crate::error::{Error, Result};
use crate::sql::Session;
use crate::sql::SqlError;
use crate::storage::Durability;

/// The settings `SET widesql.<name>` knows.
const SETTINGS: &str = "'widesql.write_timestamp', 'widesql.durability' and 'widesql.plan_cache'";

impl Session {
    /// `SET widesql.write_timestamp = '2024-01-01T00:00:00Z' | <micros> | DEFAULT`,
    /// `SET widesql.durability = 'immediate' | 'eventual' | DEFAULT`,
    /// `SET widesql.plan_cache = 'on' | 'off' | DEFAULT` (on).
    pub(in crate::sql) fn set_widesql(
        &self,
        variable: &ObjectName,
        values: &[SqlExpr],
    ) -> Result<()> {
        let name = variable.to_string().to_lowercase();
        let text = match values {
            [SqlExpr::Value(v)] => v.value.to_string().trim_matches('\'').to_string(),
            [SqlExpr::Identifier(i)] => i.value.clone(),
            _ => {
                return Err(Error::Sql(SqlError::Invalid(format!(
                    "SET {name} takes one value"
                ))))
            }
        };
        let default = text.eq_ignore_ascii_case("default") || text.eq_ignore_ascii_case("null");
        let mut settings = self.write_settings();
        match name.as_str() {
            "widesql.plan_cache" => {
                let on = match text.to_lowercase().as_str() {
                    _ if default => true,
                    "on" | "true" => true,
                    "off" | "false" => false,
                    _ => {
                        return Err(Error::Sql(SqlError::Invalid(format!(
                            "widesql.plan_cache is 'on' or 'off', not '{text}'"
                        ))))
                    }
                };
                self.cache.set_enabled(on);
                return Ok(());
            }
            "widesql.write_timestamp" => {
                settings.timestamp = if default {
                    None
                } else {
                    Some(parse_write_timestamp(&text)?)
                }
            }
            "widesql.durability" => {
                settings.durability = if default {
                    None
                } else {
                    Some(
                        text.parse::<Durability>()
                            .map_err(|e| Error::Sql(SqlError::Invalid(e)))?,
                    )
                }
            }
            _ => {
                return Err(Error::Sql(SqlError::Invalid(format!(
                    "unknown setting '{name}'; widesql has {SETTINGS}"
                ))))
            }
        }
        let state = self.ctx.state_ref();
        state.write().config_mut().set_extension(Arc::new(settings));
        self.cache.state_changed();
        Ok(())
    }
}

/// A write timestamp: microseconds since 1970, or a timestamp text.
fn parse_write_timestamp(text: &str) -> Result<i64> {
    let micros = match text.parse::<i64>() {
        Ok(micros) => micros,
        Err(_) => {
            datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(text)
                .map_err(|e| {
                    Error::Sql(SqlError::Invalid(format!(
                        "'{text}' is not a timestamp: {e}"
                    )))
                })?
                / 1000
        }
    };
    if micros < 0 {
        return Err(Error::Sql(SqlError::Invalid(
            "widesql.write_timestamp must not be before 1970".into(),
        )));
    }
    Ok(micros)
}
