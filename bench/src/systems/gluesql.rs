//! GlueSQL 0.20 on its sled storage: a key per row. Pages only (GlueSQL
//! has no BYTEA literal in multi-row INSERT, so the checksum is hex text,
//! and anchors are left out, as in the figures this benchmark started from).
// GlueSQL deprecates its sled storage in favour of redb; sled is the point
// of this comparison (the same storage engine under both SQL layers).
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gluesql_core::prelude::{Glue, Payload, Value};
use gluesql_sled_storage::SledStorage;

use super::System;
use crate::data::Page;
use crate::Res;

/// A GlueSQL database holding the benchmark pages.
pub struct GlueSql {
    glue: Glue<SledStorage>,
    path: PathBuf,
}

impl GlueSql {
    /// A new database in `path`.
    pub fn open(path: &Path) -> Res<Self> {
        let mut glue = Glue::new(SledStorage::new(path)?);
        glue.execute(
            "CREATE TABLE pages (key TEXT PRIMARY KEY, language TEXT, checksum TEXT, rank INT, contents TEXT)",
        )?;
        Ok(GlueSql {
            glue,
            path: path.to_path_buf(),
        })
    }

    /// The rows of a query.
    fn select(&mut self, sql: &str) -> Res<Vec<Vec<Value>>> {
        match self.glue.execute(sql)?.pop() {
            Some(Payload::Select { rows, .. }) => Ok(rows),
            other => Err(format!("GlueSQL returned {other:?} for a query").into()),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl System for GlueSql {
    fn name(&self) -> String {
        "GlueSQL 0.20 (pages only)".into()
    }

    fn load(&mut self, pages: &[Page]) -> Res<()> {
        for chunk in pages.chunks(100) {
            let values: Vec<String> = chunk
                .iter()
                .map(|p| {
                    format!(
                        "('{}', '{}', '{}', {}, '{}')",
                        p.key,
                        p.language,
                        hex(&p.checksum),
                        p.rank,
                        p.contents
                    )
                })
                .collect();
            self.glue
                .execute(format!("INSERT INTO pages VALUES {}", values.join(", ")))?;
        }
        self.glue.storage.tree.flush()?;
        Ok(())
    }

    fn point(&mut self, key: &str) -> Res<bool> {
        let rows = self.select(&format!("SELECT * FROM pages WHERE key = '{key}'"))?;
        Ok(rows.len() == 1)
    }

    fn range(&mut self, prefix: &str) -> Res<usize> {
        let (start, end) = super::prefix_bounds(prefix);
        Ok(self
            .select(&format!(
                "SELECT key, language FROM pages WHERE key >= '{start}' AND key < '{end}'"
            ))?
            .len())
    }

    fn per_language(&mut self) -> Res<Vec<(String, i64)>> {
        let mut counts = BTreeMap::new();
        for row in self.select("SELECT language, COUNT(*) FROM pages GROUP BY language")? {
            match row.as_slice() {
                [Value::Str(language), Value::I64(n)] => {
                    counts.insert(language.clone(), *n);
                }
                other => return Err(format!("GlueSQL returned the row {other:?}").into()),
            }
        }
        Ok(counts.into_iter().collect())
    }

    fn sum_rank(&mut self) -> Res<i64> {
        match self.select("SELECT SUM(rank) FROM pages")?.as_slice() {
            [row] => match row.as_slice() {
                [Value::I64(n)] => Ok(*n),
                [Value::Decimal(d)] => Ok(d.to_string().parse()?),
                other => Err(format!("GlueSQL returned the sum {other:?}").into()),
            },
            other => Err(format!("GlueSQL returned {} rows for a sum", other.len()).into()),
        }
    }

    fn bytes_on_disk(&self) -> Res<Option<u64>> {
        Ok(Some(super::dir_size(&self.path)?))
    }
}
