//! The interactive shell: line editing and history (rustyline), statements
//! that span lines until a `;`, and the time each statement took.

use std::time::Instant;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use widesql::Session;

use crate::error::CliError;
use crate::render::{render, Format};

/// Runs the shell until end of input or `.quit`.
pub async fn run(session: &Session, format: Format) -> Result<(), CliError> {
    let mut editor = DefaultEditor::new().map_err(CliError::Terminal)?;
    let history = session.db().path().join(".widesql_history");
    let _ = editor.load_history(&history);
    println!(
        "widesql {} — end statements with ';', '.quit' to leave",
        env!("CARGO_PKG_VERSION")
    );
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
                    run_statements(session, &pending, format).await;
                }
                break;
            }
            Err(e) => return Err(CliError::Terminal(e)),
        };
        if pending.is_empty() && matches!(line.trim(), ".quit" | ".exit" | "\\q") {
            break;
        }
        // Not SQL: a command the shell does not have would otherwise
        // swallow the lines after it until a ';'.
        if pending.is_empty() && line.trim_start().starts_with('.') {
            eprintln!(
                "error: unknown command '{}': the shell has '.quit' (and '.exit', '\\q'); end SQL statements with ';'",
                line.trim()
            );
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
        run_statements(session, &pending, format).await;
        pending.clear();
    }
    let _ = editor.save_history(&history);
    Ok(())
}

/// Runs `statements`, showing each result as its statement ends (so a
/// later error does not hide what the earlier statements did), then the
/// time they took or the error.
async fn run_statements(session: &Session, statements: &str, format: Format) {
    let started = Instant::now();
    let ran = session
        .run_each(statements, |output| {
            if !output.schema.fields().is_empty() {
                match render(&output.batches, format) {
                    Ok(text) => println!("{text}"),
                    Err(e) => eprintln!("error: {e}"),
                }
            }
        })
        .await;
    match ran {
        Ok(_) => println!("({:.3} s)", started.elapsed().as_secs_f64()),
        Err(e) => eprintln!("error: {e}"),
    }
}

/// Whether `statement` may hold a password (`CREATE USER … PASSWORD`,
/// `ALTER USER … PASSWORD`).
fn holds_password(statement: &str) -> bool {
    statement.to_ascii_uppercase().contains("PASSWORD")
}
