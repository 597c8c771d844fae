//! Users and grants in SQL:
//!
//! ```text
//! CREATE USER [IF NOT EXISTS] name [WITH] PASSWORD 'secret' [ADMIN]
//! ALTER USER name [WITH] { PASSWORD 'secret' | ADMIN | NOADMIN } …
//! DROP USER [IF EXISTS] name
//! GRANT { ALL [PRIVILEGES] | privilege [, …] } ON { PROJECT | DATASET | TABLE } name TO user
//! REVOKE { ALL [PRIVILEGES] | privilege [, …] } ON { PROJECT | DATASET | TABLE } name FROM user
//! SHOW GRANTS [FOR user]
//! SHOW USERS
//! SHOW ACTIVITY
//! CANCEL [STATEMENT] id
//! ```
//!
//! `SHOW ACTIVITY` lists the statements running now ([`crate::Activity`]):
//! an admin sees every user's, a user its own; `CANCEL` stops one (an
//! admin any, a user its own).
//!
//! A privilege is `SELECT`, `INSERT`, `UPDATE`, `DELETE` or `CREATE`;
//! `DATABASE` and `SCHEMA` are accepted for `PROJECT` and `DATASET`.
//! widesql parses these statements itself, at the same position of a
//! script as DataFusion's parser would, so that a script mixes them with
//! other statements. A statement's text as widesql prints it (in results,
//! logs) never holds its password.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, StringArray, TimestampMicrosecondArray, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::{Ident, ObjectName};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::access::{hash_password, AccessError, Privilege, Securable};
use crate::error::Result;
use crate::sql::SqlError;
use crate::sql::{Frame, Session};

/// A statement widesql's parser reads and DataFusion's does not: about
/// users, grants and running statements, and `ALTER DATABASE … RENAME`.
#[derive(Debug, Clone)]
pub(crate) enum AccessStatement {
    CreateUser {
        name: Ident,
        password: String,
        admin: bool,
        if_not_exists: bool,
    },
    AlterUser {
        name: Ident,
        password: Option<String>,
        admin: Option<bool>,
    },
    DropUser {
        name: Ident,
        if_exists: bool,
    },
    Grant {
        privileges: Vec<Privilege>,
        on: ObjectRef,
        user: Ident,
        revoke: bool,
    },
    ShowGrants {
        user: Option<Ident>,
    },
    ShowUsers,
    ShowActivity,
    Cancel {
        id: u64,
    },
    /// `ALTER DATABASE [IF EXISTS] p RENAME TO q`, which DataFusion's
    /// parser does not read.
    RenameProject {
        name: Ident,
        new_name: Ident,
        if_exists: bool,
    },
}

/// The object of a `GRANT` or `REVOKE`, as written.
#[derive(Debug, Clone)]
pub(crate) enum ObjectRef {
    Project(ObjectName),
    Dataset(ObjectName),
    Table(ObjectName),
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectRef::Project(name) => write!(f, "PROJECT {name}"),
            ObjectRef::Dataset(name) => write!(f, "DATASET {name}"),
            ObjectRef::Table(name) => write!(f, "TABLE {name}"),
        }
    }
}

impl fmt::Display for AccessStatement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessStatement::CreateUser {
                name,
                admin,
                if_not_exists,
                ..
            } => {
                let if_not_exists = if *if_not_exists { "IF NOT EXISTS " } else { "" };
                let admin = if *admin { " ADMIN" } else { "" };
                write!(f, "CREATE USER {if_not_exists}{name} PASSWORD '…'{admin}")
            }
            AccessStatement::AlterUser {
                name,
                password,
                admin,
            } => {
                write!(f, "ALTER USER {name}")?;
                if password.is_some() {
                    write!(f, " PASSWORD '…'")?;
                }
                match admin {
                    Some(true) => write!(f, " ADMIN"),
                    Some(false) => write!(f, " NOADMIN"),
                    None => Ok(()),
                }
            }
            AccessStatement::DropUser { name, if_exists } => {
                let if_exists = if *if_exists { "IF EXISTS " } else { "" };
                write!(f, "DROP USER {if_exists}{name}")
            }
            AccessStatement::Grant {
                privileges,
                on,
                user,
                revoke,
            } => {
                let names: Vec<&str> = privileges.iter().map(|p| p.name()).collect();
                let (verb, to) = if *revoke {
                    ("REVOKE", "FROM")
                } else {
                    ("GRANT", "TO")
                };
                write!(f, "{verb} {} ON {on} {to} {user}", names.join(", "))
            }
            AccessStatement::ShowGrants { user: Some(user) } => write!(f, "SHOW GRANTS FOR {user}"),
            AccessStatement::ShowGrants { user: None } => write!(f, "SHOW GRANTS"),
            AccessStatement::ShowUsers => write!(f, "SHOW USERS"),
            AccessStatement::ShowActivity => write!(f, "SHOW ACTIVITY"),
            AccessStatement::Cancel { id } => write!(f, "CANCEL STATEMENT {id}"),
            AccessStatement::RenameProject {
                name,
                new_name,
                if_exists,
            } => {
                let if_exists = if *if_exists { "IF EXISTS " } else { "" };
                write!(f, "ALTER DATABASE {if_exists}{name} RENAME TO {new_name}")
            }
        }
    }
}

/// Whether the token `n` ahead is the unquoted word `word`.
pub(super) fn is_word(parser: &Parser<'_>, n: usize, word: &str) -> bool {
    matches!(&parser.peek_nth_token(n).token,
        Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// Consumes the unquoted word `word` when it comes next.
fn take_word(parser: &mut Parser<'_>, word: &str) -> bool {
    let found = is_word(parser, 0, word);
    if found {
        parser.advance_token();
    }
    found
}

/// The access statement at the parser's position; `None`, with nothing
/// consumed, when the statement there is of another kind.
pub(crate) fn parse_access(
    parser: &mut Parser<'_>,
) -> Option<std::result::Result<AccessStatement, ParserError>> {
    let starts = |parser: &Parser<'_>, first: &str, second: &str| {
        is_word(parser, 0, first) && is_word(parser, 1, second)
    };
    let kind = if starts(parser, "CREATE", "USER") {
        0
    } else if starts(parser, "ALTER", "USER") {
        1
    } else if starts(parser, "DROP", "USER") {
        2
    } else if is_word(parser, 0, "GRANT") {
        3
    } else if is_word(parser, 0, "REVOKE") {
        4
    } else if starts(parser, "SHOW", "GRANTS") {
        5
    } else if starts(parser, "SHOW", "USERS") {
        6
    } else if starts(parser, "SHOW", "ACTIVITY") {
        7
    } else if is_word(parser, 0, "CANCEL") {
        8
    } else if starts(parser, "ALTER", "DATABASE") {
        9
    } else {
        return None;
    };
    Some(parse_kind(parser, kind))
}

fn parse_kind(
    parser: &mut Parser<'_>,
    kind: u8,
) -> std::result::Result<AccessStatement, ParserError> {
    let two_words = kind <= 2 || (5..=7).contains(&kind) || kind == 9;
    parser.advance_token();
    if two_words {
        parser.advance_token();
    }
    Ok(match kind {
        0 => {
            let if_not_exists =
                parser.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
            let name = parser.parse_identifier()?;
            let _ = parser.parse_keyword(Keyword::WITH);
            parser.expect_keyword_is(Keyword::PASSWORD)?;
            let password = parse_password(parser)?;
            let admin = take_word(parser, "ADMIN");
            AccessStatement::CreateUser {
                name,
                password,
                admin,
                if_not_exists,
            }
        }
        1 => {
            let name = parser.parse_identifier()?;
            let _ = parser.parse_keyword(Keyword::WITH);
            let (mut password, mut admin) = (None, None);
            loop {
                if parser.parse_keyword(Keyword::PASSWORD) {
                    password = Some(parse_password(parser)?);
                } else if take_word(parser, "ADMIN") {
                    admin = Some(true);
                } else if take_word(parser, "NOADMIN") {
                    admin = Some(false);
                } else {
                    break;
                }
            }
            if password.is_none() && admin.is_none() {
                return parser.expected("PASSWORD, ADMIN or NOADMIN", parser.peek_token());
            }
            AccessStatement::AlterUser {
                name,
                password,
                admin,
            }
        }
        2 => AccessStatement::DropUser {
            if_exists: parser.parse_keywords(&[Keyword::IF, Keyword::EXISTS]),
            name: parser.parse_identifier()?,
        },
        3 | 4 => {
            let revoke = kind == 4;
            let privileges = parse_privileges(parser)?;
            parser.expect_keyword_is(Keyword::ON)?;
            let on = if take_word(parser, "PROJECT") || take_word(parser, "DATABASE") {
                ObjectRef::Project(parser.parse_object_name(false)?)
            } else if take_word(parser, "DATASET") || take_word(parser, "SCHEMA") {
                ObjectRef::Dataset(parser.parse_object_name(false)?)
            } else if take_word(parser, "TABLE") {
                ObjectRef::Table(parser.parse_object_name(false)?)
            } else {
                return parser.expected("PROJECT, DATASET or TABLE", parser.peek_token());
            };
            parser.expect_keyword_is(if revoke { Keyword::FROM } else { Keyword::TO })?;
            AccessStatement::Grant {
                privileges,
                on,
                user: parser.parse_identifier()?,
                revoke,
            }
        }
        5 => AccessStatement::ShowGrants {
            user: if parser.parse_keyword(Keyword::FOR) {
                Some(parser.parse_identifier()?)
            } else {
                None
            },
        },
        6 => AccessStatement::ShowUsers,
        7 => AccessStatement::ShowActivity,
        9 => {
            let if_exists = parser.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
            let name = parser.parse_identifier()?;
            parser.expect_keywords(&[Keyword::RENAME, Keyword::TO])?;
            AccessStatement::RenameProject {
                name,
                new_name: parser.parse_identifier()?,
                if_exists,
            }
        }
        _ => {
            let _ = take_word(parser, "STATEMENT");
            let token = parser.next_token();
            match &token.token {
                Token::Number(n, _) => match n.parse::<u64>() {
                    Ok(id) => AccessStatement::Cancel { id },
                    Err(_) => return parser.expected("a statement id", token),
                },
                _ => return parser.expected("a statement id", token),
            }
        }
    })
}

/// A password: a quoted string. What follows `PASSWORD` otherwise is not
/// echoed in the error (it may be a password written unquoted).
fn parse_password(parser: &mut Parser<'_>) -> std::result::Result<String, ParserError> {
    match parser.next_token().token {
        Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => Ok(s),
        _ => Err(ParserError::ParserError(
            "PASSWORD takes a quoted string: PASSWORD '…'".into(),
        )),
    }
}

fn parse_privileges(parser: &mut Parser<'_>) -> std::result::Result<Vec<Privilege>, ParserError> {
    if parser.parse_keyword(Keyword::ALL) {
        let _ = parser.parse_keyword(Keyword::PRIVILEGES);
        return Ok(Privilege::ALL.to_vec());
    }
    let mut privileges = Vec::new();
    loop {
        let token = parser.next_token();
        let privilege = match &token.token {
            Token::Word(w) => Privilege::parse(&w.value),
            _ => None,
        };
        match privilege {
            Some(p) => privileges.push(p),
            None => {
                return parser.expected(
                    "a privilege (SELECT, INSERT, UPDATE, DELETE, CREATE or ALL)",
                    token,
                )
            }
        }
        if !parser.consume_token(&Token::Comma) {
            return Ok(privileges);
        }
    }
}

/// Runs a statement about users, grants or running statements, or a
/// project's rename. Only an admin (or a session
/// without a user) changes users and grants; a user may change its own
/// password and see its own grants.
pub(crate) fn run_access(session: &Session, statement: AccessStatement) -> Result<Frame> {
    let catalog = session.db.catalog();
    match statement {
        AccessStatement::CreateUser {
            name,
            password,
            admin,
            if_not_exists,
        } => {
            session.require_admin("create users")?;
            let name = session.normalize(&name);
            catalog.create_user(&name, hash_password(&password)?, admin, if_not_exists)?;
        }
        AccessStatement::AlterUser {
            name,
            password,
            admin,
        } => {
            let name = session.normalize(&name);
            let own_password = admin.is_none() && session.options.user.as_ref() == Some(&name);
            if !own_password {
                session.require_admin("alter other users or the admin flag")?;
            }
            let hash = password.as_deref().map(hash_password).transpose()?;
            catalog.alter_user(&name, hash, admin)?;
        }
        AccessStatement::DropUser { name, if_exists } => {
            session.require_admin("drop users")?;
            let name = session.normalize(&name);
            if session.options.user.as_ref() == Some(&name) {
                return Err(AccessError::AdminOnly {
                    user: name,
                    action: "drop another user (a session's own user cannot be dropped)".into(),
                }
                .into());
            }
            catalog.drop_user(&name, if_exists)?;
        }
        AccessStatement::Grant {
            privileges,
            on,
            user,
            revoke,
        } => {
            session.require_admin(if revoke {
                "revoke privileges"
            } else {
                "grant privileges"
            })?;
            let on = securable(session, &on)?;
            catalog.set_grants(&session.normalize(&user), on, &privileges, !revoke)?;
        }
        AccessStatement::ShowGrants { user } => {
            let user = user.map(|u| session.normalize(&u));
            if user.is_some() && user != session.options.user {
                session.require_admin("show the grants of other users")?;
            }
            return session.frame(grants_batch(
                session,
                user.or_else(|| session.options.user.clone()),
            )?);
        }
        AccessStatement::ShowUsers => {
            session.require_admin("list users")?;
            return session.frame(users_batch(session)?);
        }
        AccessStatement::ShowActivity => return session.frame(activity_batch(session)?),
        AccessStatement::Cancel { id } => {
            let activity = session.db.activity();
            let owner = activity.user_of(id).ok_or_else(|| {
                crate::Error::Sql(SqlError::Invalid(format!(
                    "no statement runs with id {id} (it may have ended)"
                )))
            })?;
            if owner != session.options.user {
                session.require_admin("cancel the statements of other users")?;
            }
            if activity.cancel(id) == Some(false) {
                return Err(crate::Error::Sql(SqlError::Invalid(format!(
                    "statement {id} writes, and a write runs to its end: it cannot be cancelled"
                ))));
            }
        }
        AccessStatement::RenameProject {
            name,
            new_name,
            if_exists,
        } => {
            let (name, new_name) = (session.normalize(&name), session.normalize(&new_name));
            // Renaming a project takes what dropping it does.
            session.require_in_project(&name)?;
            match session.db.open_project(&name) {
                Ok(project) => project.rename(&new_name)?,
                Err(e) if if_exists && e.kind() == crate::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    session.done()
}

/// `SHOW ACTIVITY`: the statements running now; a user sees its own.
fn activity_batch(session: &Session) -> Result<RecordBatch> {
    let all = session.require_admin("").is_ok();
    let entries: Vec<crate::ActivityEntry> = session
        .db
        .activity()
        .list()
        .into_iter()
        .filter(|e| all || e.user == session.options.user)
        .collect();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::UInt64, false),
            Field::new("user", DataType::Utf8, true),
            Field::new("client", DataType::Utf8, false),
            Field::new("kind", DataType::Utf8, false),
            Field::new("started", utc_time_type(), false),
            Field::new("running_ms", DataType::UInt64, false),
        ])),
        vec![
            Arc::new(UInt64Array::from_iter_values(entries.iter().map(|e| e.id))),
            Arc::new(StringArray::from_iter(
                entries.iter().map(|e| e.user.as_deref()),
            )),
            Arc::new(StringArray::from_iter_values(
                entries.iter().map(|e| e.client.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                entries.iter().map(|e| e.kind.as_str()),
            )),
            utc_times(entries.iter().map(|e| e.started)),
            Arc::new(UInt64Array::from_iter_values(
                entries.iter().map(|e| e.running_micros / 1000),
            )),
        ],
    )?)
}

/// A column of UTC timestamps in microseconds, as the `SHOW` statements
/// list times.
pub(super) fn utc_times(times: impl Iterator<Item = std::time::SystemTime>) -> ArrayRef {
    let micros = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
    };
    Arc::new(TimestampMicrosecondArray::from_iter_values(times.map(micros)).with_timezone("UTC"))
}

/// The type of the columns [`utc_times`] makes.
pub(super) fn utc_time_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The object a `GRANT` names.
fn securable(session: &Session, on: &ObjectRef) -> Result<Securable> {
    Ok(match on {
        ObjectRef::Project(name) => {
            let parts = session.name_parts(name)?;
            Securable::Project(session.db.open_project(&parts.join("."))?.id())
        }
        ObjectRef::Dataset(name) => {
            let (project, dataset) = session.resolve_dataset_name(name)?;
            Securable::Dataset(
                session
                    .db
                    .open_project(&project)?
                    .open_dataset(&dataset)?
                    .id(),
            )
        }
        ObjectRef::Table(name) => Securable::Table(session.open_table(name)?.id()),
    })
}

/// `SHOW GRANTS`: `user`'s grants, or everyone's for `None`.
fn grants_batch(session: &Session, user: Option<String>) -> Result<RecordBatch> {
    let state = session.db.catalog().read();
    let (mut users, mut privileges, mut kinds, mut objects) = (vec![], vec![], vec![], vec![]);
    for (holder, on, privilege) in state.grants() {
        if user.as_deref().is_some_and(|u| u != holder) {
            continue;
        }
        let name = state.securable_name(on);
        users.push(holder.to_string());
        privileges.push(privilege.name());
        kinds.push(on.kind());
        objects.push(
            name.split_once(' ')
                .map_or(name.clone(), |(_, n)| n.to_string()),
        );
    }
    let text = |values: Vec<String>| Arc::new(StringArray::from(values)) as ArrayRef;
    let fields = ["user", "privilege", "object_kind", "object"]
        .map(|name| Field::new(name, DataType::Utf8, false));
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields.to_vec())),
        vec![
            text(users),
            Arc::new(StringArray::from(privileges)),
            Arc::new(StringArray::from(kinds)),
            text(objects),
        ],
    )?)
}

/// `SHOW USERS`: name and admin flag (never the password hash).
fn users_batch(session: &Session) -> Result<RecordBatch> {
    let state = session.db.catalog().read();
    let names: Vec<String> = state.users().map(|u| u.name.clone()).collect();
    let admins: Vec<bool> = state.users().map(|u| u.admin).collect();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("user", DataType::Utf8, false),
            Field::new("admin", DataType::Boolean, false),
        ])),
        vec![
            Arc::new(StringArray::from(names)),
            Arc::new(BooleanArray::from(admins)),
        ],
    )?)
}
