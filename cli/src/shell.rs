//! The interactive shell: line editing and history (rustyline), statements
//! that span lines until a `;`, and the commands of sqlite3's and psql's
//! shells (`.help`, `.tables`, `.schema` / `\d`, `.mode`, `.timer`,
//! `.read`, `.quit`).

use std::time::Instant;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use widesql::Session;

use crate::error::CliError;
use crate::render::{render, Format};

/// What `.help` prints.
const HELP: &str = "\
.help                 this list (also \\?)
.tables [PATTERN]     the tables, or those whose name is LIKE PATTERN (also \\dt)
.schema TABLE         a table's columns, families, locality groups and GC policies (also \\d TABLE)
.mode MODE            how results show: table, csv, json, ndjson or line
.timer on|off         whether each statement's time shows
.read FILE            run the statements of FILE
.quit                 leave (also .exit, \\q)
SQL statements end with ';' and may span lines.";

/// A line of the shell that is not SQL.
#[derive(Debug, PartialEq)]
enum Command<'a> {
    Help,
    Quit,
    Tables(Option<&'a str>),
    Schema(&'a str),
    Mode(Format),
    Timer(bool),
    Read(&'a str),
}

impl<'a> Command<'a> {
    /// The command `line` (which starts with `.` or `\`) names, or why it
    /// names none.
    fn parse(line: &'a str) -> Result<Command<'a>, String> {
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or_default();
        let argument = words.next();
        if let Some(extra) = words.next() {
            return Err(format!(
                "{name} takes one argument at most; '{extra}' is one too many"
            ));
        }
        let needs = |what: &str| argument.ok_or_else(|| format!("{name} needs {what}: see .help"));
        Ok(match name {
            ".help" | "\\?" | "\\h" => Command::Help,
            ".quit" | ".exit" | "\\q" => Command::Quit,
            ".tables" | "\\dt" => Command::Tables(argument),
            ".schema" | "\\d" => Command::Schema(needs("a table's name")?),
            ".read" | "\\i" => Command::Read(needs("a file's name")?),
            ".timer" | "\\timing" => match needs("on or off")? {
                "on" => Command::Timer(true),
                "off" => Command::Timer(false),
                other => return Err(format!(".timer takes on or off, not '{other}'")),
            },
            ".mode" => {
                let mode = needs("a mode")?;
                let format = <Format as clap::ValueEnum>::from_str(mode, true).map_err(|_| {
                    format!("there is no mode '{mode}': table, csv, json, ndjson and line are")
                })?;
                Command::Mode(format)
            }
            other => {
                return Err(format!(
                    "unknown command '{other}': .help lists the commands; end SQL statements \
                     with ';'"
                ))
            }
        })
    }
}

/// The shell's session and settings.
struct Shell<'s> {
    session: &'s Session,
    format: Format,
    timer: bool,
}

/// Runs the shell until end of input or `.quit`.
pub async fn run(session: &Session, format: Format) -> Result<(), CliError> {
    let mut editor = DefaultEditor::new().map_err(CliError::Terminal)?;
    let history = session.db().path().join(".widesql_history");
    let _ = editor.load_history(&history);
    println!(
        "widesql {} — end statements with ';', '.help' for the commands, '.quit' to leave",
        env!("CARGO_PKG_VERSION")
    );
    let mut shell = Shell {
        session,
        format,
        timer: true,
    };
    let mut pending = String::new();
    loop {
        let prompt = if pending.is_empty() {
            "widesql> "
        } else {
            "     ..> "
        };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                pending.clear();
                continue;
            }
            // A last statement without its ';' still runs.
            Err(ReadlineError::Eof) => {
                if !pending.trim().is_empty() {
                    shell.run_statements(&pending).await;
                }
                break;
            }
            Err(e) => return Err(CliError::Terminal(e)),
        };
        // A command is a line of its own, between statements.
        let trimmed = line.trim();
        if pending.is_empty() && (trimmed.starts_with('.') || trimmed.starts_with('\\')) {
            let _ = editor.add_history_entry(trimmed);
            match Command::parse(trimmed) {
                Ok(Command::Quit) => break,
                Ok(command) => shell.obey(command).await,
                Err(e) => eprintln!("error: {e}"),
            }
            continue;
        }
        pending.push_str(&line);
        pending.push('\n');
        if !line.trim_end().ends_with(';') {
            continue;
        }
        // A statement that sets a password stays out of the history file.
        if !holds_password(&pending) {
            let _ = editor.add_history_entry(pending.trim_end());
        }
        shell.run_statements(&pending).await;
        pending.clear();
    }
    let _ = editor.save_history(&history);
    Ok(())
}

impl Shell<'_> {
    async fn obey(&mut self, command: Command<'_>) {
        match command {
            Command::Help => println!("{HELP}"),
            Command::Quit => {}
            Command::Mode(format) => self.format = format,
            Command::Timer(on) => self.timer = on,
            Command::Schema(table) => self.run_statements(&format!("DESCRIBE {table}")).await,
            Command::Tables(pattern) => self.tables(pattern).await,
            Command::Read(file) => match std::fs::read_to_string(file) {
                Ok(text) => self.run_statements(&text).await,
                Err(e) => eprintln!("error: reading {file}: {e}"),
            },
        }
    }

    /// `.tables`: `SHOW TABLES`, the rows whose name is LIKE `pattern`.
    async fn tables(&self, pattern: Option<&str>) {
        let frame = match self.session.sql("SHOW TABLES").await {
            Ok(frame) => frame,
            Err(e) => return eprintln!("error: {e}"),
        };
        let schema = frame.stream_schema();
        let batches = match frame.collect().await {
            Ok(batches) => batches,
            Err(e) => return eprintln!("error: {e}"),
        };
        let kept = match pattern {
            None => batches,
            Some(pattern) => match keep_names_like(&batches, pattern) {
                Ok(kept) => kept,
                Err(e) => return eprintln!("error: {e}"),
            },
        };
        match render(&schema, &kept, self.format) {
            Ok(text) => println!("{text}"),
            Err(e) => eprintln!("error: {e}"),
        }
    }

    /// Runs `statements`, showing each result as its statement ends (so a
    /// later error does not hide what the earlier statements did), then
    /// the time they took (with `.timer on`) or the error.
    async fn run_statements(&self, statements: &str) {
        let started = Instant::now();
        let format = self.format;
        let ran = self
            .session
            .run_each(statements, |output| {
                if !output.schema.fields().is_empty() {
                    match render(&output.schema, &output.batches, format) {
                        Ok(text) => println!("{text}"),
                        Err(e) => eprintln!("error: {e}"),
                    }
                }
            })
            .await;
        match ran {
            Ok(_) if self.timer => println!("({:.3} s)", started.elapsed().as_secs_f64()),
            Ok(_) => {}
            Err(e) => eprintln!("error: {e}"),
        }
    }
}

/// The rows of `batches` whose `table_name` is LIKE `pattern` (`%` any
/// text, `_` one character, case-sensitive as SQL's LIKE).
fn keep_names_like(
    batches: &[datafusion::arrow::record_batch::RecordBatch],
    pattern: &str,
) -> Result<Vec<datafusion::arrow::record_batch::RecordBatch>, String> {
    use datafusion::arrow::array::{BooleanArray, StringArray};
    let pattern: Vec<char> = pattern.chars().collect();
    batches
        .iter()
        .map(|batch| {
            let names = batch
                .column_by_name("table_name")
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                .ok_or("SHOW TABLES has no table_name column of text")?;
            let keep: BooleanArray = names
                .iter()
                .map(|name| {
                    Some(name.is_some_and(|n| like(&n.chars().collect::<Vec<_>>(), &pattern)))
                })
                .collect();
            datafusion::arrow::compute::filter_record_batch(batch, &keep).map_err(|e| e.to_string())
        })
        .collect()
}

/// Whether `text` matches the LIKE `pattern`: a `%` that fails to match is
/// retried one character further, from the last `%` only (no recursion).
fn like(text: &[char], pattern: &[char]) -> bool {
    let (mut t, mut p) = (0, 0);
    // Past the last `%` seen, and where in the text it resumes.
    let mut resume: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('%') => {
                p += 1;
                resume = Some((p, t));
            }
            Some(&c) if c == '_' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match resume {
                Some((after, from)) => {
                    p = after;
                    t = from + 1;
                    resume = Some((after, from + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '%')
}

/// Whether `statement` may hold a password (`CREATE USER … PASSWORD`,
/// `ALTER USER … PASSWORD`).
fn holds_password(statement: &str) -> bool {
    statement.to_ascii_uppercase().contains("PASSWORD")
}

#[cfg(test)]
mod tests {
    use super::{like, Command};
    use crate::render::Format;

    #[test]
    fn commands_and_their_arguments_are_read_or_refused() {
        assert_eq!(Command::parse(".tables"), Ok(Command::Tables(None)));
        assert_eq!(
            Command::parse("\\dt web%"),
            Ok(Command::Tables(Some("web%")))
        );
        assert_eq!(Command::parse("\\d pages"), Ok(Command::Schema("pages")));
        assert_eq!(
            Command::parse(".mode LINE"),
            Ok(Command::Mode(Format::Line))
        );
        assert_eq!(Command::parse(".timer off"), Ok(Command::Timer(false)));
        assert_eq!(Command::parse("\\q"), Ok(Command::Quit));
        for (line, says) in [
            (".schema", ".schema needs a table's name"),
            (".mode xml", "there is no mode 'xml'"),
            (".timer maybe", ".timer takes on or off, not 'maybe'"),
            (".tables a b", "'b' is one too many"),
            (".frobnicate", "unknown command '.frobnicate'"),
        ] {
            match Command::parse(line) {
                Ok(command) => panic!("{line} was read as {command:?}"),
                Err(error) => assert!(error.contains(says), "{line}: {error}"),
            }
        }
    }

    #[test]
    fn like_matches_as_sql_does() {
        let chars = |s: &str| s.chars().collect::<Vec<_>>();
        for (text, pattern, matches) in [
            ("pages", "pages", true),
            ("pages", "p%", true),
            ("pages", "%ge%", true),
            ("pages", "page_", true),
            ("pages", "page", false),
            ("pages", "P%", false),
            ("", "%", true),
            ("a", "_%_", false),
            ("abcabd", "%ab_", true),
            ("aaab", "%a%b", true),
            ("aaac", "%a%b", false),
        ] {
            assert_eq!(
                like(&chars(text), &chars(pattern)),
                matches,
                "{text} LIKE {pattern}"
            );
        }
    }
}
