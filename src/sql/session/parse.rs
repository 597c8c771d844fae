//! Statement text into statements: the session's dialect and recursion
//! limit, the stack bound of [`nesting`](super::nesting), and widesql's own
//! statements (users, grants, tablets) among DataFusion's.

use std::collections::VecDeque;

use datafusion::common::config::Dialect;
use datafusion::sql::parser::{DFParserBuilder, Statement as DfStatement};
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use datafusion::sql::sqlparser::parser::ParserError;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::{sql_statements, Parsed, Session};
use crate::error::{Error, Result};
use crate::sql::ddl::OwnStatement;
use crate::sql::from_df;
use crate::sql::SqlError;

impl Session {
    /// Parses statements with the session's dialect
    /// (`datafusion.sql_parser.dialect`) and recursion limit, as DataFusion
    /// does, and widesql's own statements among them.
    /// A script is parsed whole, before any of it runs.
    pub(crate) fn parse_script(&self, sql: &str) -> Result<VecDeque<Parsed>> {
        // Read the settings without cloning the session state.
        let (dialect_name, recursion_limit) = {
            let state = self.ctx.state_ref();
            let state = state.read();
            let options = &state.config().options().sql_parser;
            (options.dialect, options.recursion_limit.get())
        };
        let dialect = dialect_from_str(dialect_name).ok_or_else(|| {
            Error::Sql(SqlError::Unsupported(format!(
                "unsupported SQL dialect '{dialect_name}'"
            )))
        })?;
        let parse = || self.parse_with(sql, dialect.as_ref(), recursion_limit);
        crate::sql::session::nesting::parse_bounded(sql, parse, sql_statements)
    }

    /// [`Session::parse_script`]'s parse.
    fn parse_with(
        &self,
        sql: &str,
        dialect: &dyn datafusion::sql::sqlparser::dialect::Dialect,
        recursion_limit: usize,
    ) -> Result<VecDeque<Parsed>> {
        let mut parser = DFParserBuilder::new(sql)
            .with_dialect(dialect)
            .with_recursion_limit(recursion_limit)
            .build()
            .map_err(from_df)?;
        // DataFusion's `parse_statements`, with one more kind of statement.
        let mut statements = VecDeque::new();
        let mut expecting_delimiter = false;
        loop {
            while parser.parser.consume_token(&Token::SemiColon) {
                expecting_delimiter = false;
            }
            let next = parser.parser.peek_token();
            if next == Token::EOF {
                break;
            }
            if expecting_delimiter {
                let message = format!(
                    "Expected: end of statement, found: {next}{}",
                    next.span.start
                );
                return Err(from_df(ParserError::ParserError(message).into()));
            }
            let statement = match OwnStatement::parse(&mut parser.parser) {
                Some(own) => Parsed::Own(own.map_err(|e| from_df(e.into()))?),
                None => Parsed::Sql(parser.parse_statement().map_err(from_df)?),
            };
            statements.push_back(statement);
            expecting_delimiter = true;
        }
        Ok(statements)
    }

    /// The statements of `sql`, where a statement widesql's parser reads
    /// is an error (a prepared statement, an export's query).
    pub(crate) fn parse(&self, sql: &str) -> Result<VecDeque<DfStatement>> {
        self.parse_script(sql)?
            .into_iter()
            .map(|statement| match statement {
                Parsed::Sql(statement) => Ok(statement),
                Parsed::Own(own) => Err(Error::Sql(SqlError::Unsupported(format!(
                    "'{own}' cannot be prepared or used as a query"
                )))),
            })
            .collect()
    }

    /// Whether statements are parsed with the generic dialect (the
    /// default), the one whose literals the front door reads off the text
    /// ([`scan_insert_values`](crate::sql::session::front_door::text_literals::scan_insert_values)).
    pub(super) fn parses_generic_sql(&self) -> bool {
        let state = self.ctx.state_ref();
        let state = state.read();
        state.config().options().sql_parser.dialect == Dialect::Generic
    }

    /// The one statement of `sql`; an error when it holds none or several.
    pub(crate) fn parse_one(&self, sql: &str) -> Result<DfStatement> {
        let mut statements = self.parse(sql)?;
        match (statements.pop_front(), statements.is_empty()) {
            (Some(statement), true) => Ok(statement),
            (None, _) => Err(Error::Sql(SqlError::Invalid("no statement to run".into()))),
            (Some(_), false) => Err(Error::Sql(SqlError::Invalid(
                "the text holds several statements where one is expected".into(),
            ))),
        }
    }
}
