//! Object names, all resolved one way: identifiers normalised by DataFusion's
//! own normaliser (unquoted ones lower-cased unless the session turned
//! `datafusion.sql_parser.enable_ident_normalization` off), statement table
//! references resolved as DataFusion resolves them, and widesql's
//! one-to-three-part names completed with the session defaults.

use datafusion::common::TableReference;
use datafusion::sql::planner::IdentNormalizer;
use datafusion::sql::sqlparser::ast::{Ident, ObjectName};

use crate::db::Table;
use crate::error::{Error, Result};
use crate::sql::Session;
use crate::sql::SqlError;

impl Session {
    /// Whether `name` is a widesql table, or nothing at all (then widesql
    /// reports it missing); false for providers registered on the context.
    pub(in crate::sql) fn is_widesql_table_or_missing(&self, name: &ObjectName) -> bool {
        match self.open_table(name) {
            Ok(_) => true,
            Err(_) => {
                let reference = name.to_string();
                !self.ctx.table_exist(reference.as_str()).unwrap_or(false)
            }
        }
    }

    /// The first of `references` (table functions left out) that no
    /// catalog of the session holds, as
    /// widesql's error naming the part that is missing (`project 'p' does
    /// not exist`, …); `None` when every table exists.
    pub(in crate::sql) fn missing_table(&self, references: &[TableReference]) -> Option<Error> {
        let state = self.ctx.state();
        let defaults = &state.config_options().catalog;
        references.iter().find_map(|reference| {
            if self.ctx.table_exist(reference.clone()).unwrap_or(false) {
                return None;
            }
            let name = reference
                .clone()
                .resolve(&defaults.default_catalog, &defaults.default_schema);
            let missing = self
                .db
                .open_project(&name.catalog)
                .and_then(|p| p.open_dataset(&name.schema))
                .and_then(|d| d.open_table(&name.table));
            missing.err()
        })
    }

    /// `(project, dataset)` of a one- or two-part dataset name.
    pub(in crate::sql) fn resolve_dataset_name(
        &self,
        name: &ObjectName,
    ) -> Result<(String, String)> {
        let parts = self.name_parts(name)?;
        match parts.as_slice() {
            [dataset] => Ok((self.options.default_project.clone(), dataset.clone())),
            [project, dataset] => Ok((project.clone(), dataset.clone())),
            _ => Err(Error::Sql(SqlError::BadName {
                name: name.to_string(),
                expected: "a [project.]dataset name",
            })),
        }
    }

    /// `(project, dataset, table)` of a one- to three-part table name.
    pub(in crate::sql) fn resolve_table_name(
        &self,
        name: &ObjectName,
    ) -> Result<(String, String, String)> {
        let parts = self.name_parts(name)?;
        self.options.resolve(&parts).ok_or_else(|| {
            Error::Sql(SqlError::BadName {
                name: name.to_string(),
                expected: "a [[project.]dataset.]table name",
            })
        })
    }

    pub(in crate::sql) fn open_table(&self, name: &ObjectName) -> Result<Table> {
        let (project, dataset, table) = self.resolve_table_name(name)?;
        self.db.open_table(&project, &dataset, &table)
    }
}

impl Session {
    /// Whether unquoted identifiers are lower-cased (DataFusion's setting).
    fn normalizes_identifiers(&self) -> bool {
        self.ctx
            .state_ref()
            .read()
            .config_options()
            .sql_parser
            .enable_ident_normalization
    }

    /// An identifier as DataFusion normalises it in this session.
    pub(crate) fn normalize(&self, ident: &Ident) -> String {
        IdentNormalizer::new(self.normalizes_identifiers()).normalize(ident.clone())
    }

    /// The parts of an object name, each normalised as DataFusion normalises
    /// it in this session.
    pub(crate) fn name_parts(&self, name: &ObjectName) -> Result<Vec<String>> {
        let normalizer = IdentNormalizer::new(self.normalizes_identifiers());
        name.0
            .iter()
            .map(|part| {
                part.as_ident()
                    .map(|ident| normalizer.normalize(ident.clone()))
                    .ok_or_else(|| {
                        Error::Sql(SqlError::BadName {
                            name: name.to_string(),
                            expected: "a plain name",
                        })
                    })
            })
            .collect()
    }
}

/// The parts of a dotted name given as text (`'acme.web."Pages"'`), parsed
/// as DataFusion parses a table name: quoted parts keep their case (and may
/// hold dots), others are lower-cased.
pub fn name_parts_of_text(name: &str) -> Vec<String> {
    let reference = TableReference::parse_str(name);
    [
        reference.catalog(),
        reference.schema(),
        Some(reference.table()),
    ]
    .into_iter()
    .flatten()
    .map(str::to_string)
    .collect()
}
