//! The SQL of the documentation runs: every ```` ```sql ```` block of
//! `README.md` and of each `docs/*.md`, in the order of its file, all the
//! blocks of one file in one session of a fresh database. A block tagged
//! ```` ```sql error ```` must fail. Relative file names in the SQL (a
//! `COPY … TO 'pages.parquet'`) land in the database's temporary directory.

mod common;

use std::path::{Path, PathBuf};

/// A fenced SQL block of a Markdown file.
struct Block {
    /// The line of its opening fence, counted from 1.
    line: usize,
    /// Whether it is tagged `error`: it must fail.
    must_fail: bool,
    /// The statements.
    sql: String,
}

/// Where the scanner of a Markdown file is.
enum Fence {
    /// Outside any fenced block.
    Outside,
    /// Inside a block of another language.
    Other,
    /// Inside a SQL block.
    Sql(Block),
}

/// Every ```` ```sql ```` block of `text`, in order. Fences may be
/// indented (a block inside a list item); as in CommonMark, a fence that
/// closes a block has no info string.
fn sql_blocks(text: &str) -> Result<Vec<Block>, String> {
    let mut blocks = Vec::new();
    let mut fence = Fence::Outside;
    for (index, line) in text.lines().enumerate() {
        let is_fence = line.trim_start().starts_with("```");
        let closes = is_fence && line.trim().trim_start_matches('`').is_empty();
        fence = match fence {
            Fence::Outside if is_fence => {
                let info = line.trim_start().trim_start_matches('`');
                let mut words = info.split_whitespace();
                if words.next() == Some("sql") {
                    Fence::Sql(Block {
                        line: index + 1,
                        must_fail: words.any(|word| word == "error"),
                        sql: String::new(),
                    })
                } else {
                    Fence::Other
                }
            }
            Fence::Outside => Fence::Outside,
            Fence::Other if closes => Fence::Outside,
            Fence::Other => Fence::Other,
            Fence::Sql(block) if closes => {
                blocks.push(block);
                Fence::Outside
            }
            Fence::Sql(mut block) => {
                block.sql.push_str(line);
                block.sql.push('\n');
                Fence::Sql(block)
            }
        };
    }
    match fence {
        Fence::Outside => Ok(blocks),
        Fence::Other | Fence::Sql(_) => Err("a fenced block is not closed".to_string()),
    }
}

/// The documentation's Markdown files: `README.md`, then `docs/*.md` by
/// name.
fn documents() -> Result<Vec<PathBuf>, Box<dyn std::error::Error>> {
    let mut pages = Vec::new();
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/docs"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    pages.insert(
        0,
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")),
    );
    Ok(pages)
}

/// Runs the SQL blocks of the file at `path` in order, in one session of a
/// fresh database in `dir`; the failures, each naming the file, the block's
/// line, the statement that failed or the last one that ran, and the error.
fn run_document(
    path: &Path,
    dir: &Path,
) -> Result<(usize, Vec<String>), Box<dyn std::error::Error>> {
    let name = path
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path)
        .display()
        .to_string();
    let text = std::fs::read_to_string(path)?;
    let blocks = sql_blocks(&text).map_err(|e| format!("{name}: {e}"))?;
    if blocks.is_empty() {
        return Ok((0, Vec::new()));
    }
    let db = widesql::Db::open(dir.join("db"))?;
    let session = db.session();
    let mut failures = Vec::new();
    for block in &blocks {
        let mut last = None;
        let ran = common::runtime().block_on(session.run_each(&block.sql, |output| {
            last = Some(output.sql);
        }));
        let place = format!("{name}:{}", block.line);
        match (ran, block.must_fail) {
            (Ok(_), false) | (Err(_), true) => {}
            (Ok(count), true) => failures.push(format!(
                "{place}: the block is tagged `sql error`, but its {count} statements ran"
            )),
            (Err(error), false) => failures.push(format!(
                "{place}: {error}\n  (after: {})\n{}",
                last.as_deref()
                    .unwrap_or("the block's first statement failed"),
                block.sql
            )),
        }
    }
    Ok((blocks.len(), failures))
}

#[test]
fn every_sql_block_of_the_documentation_runs() -> Result<(), Box<dyn std::error::Error>> {
    let start = std::env::current_dir()?;
    let mut failures = Vec::new();
    let mut counts = Vec::new();
    for path in documents()? {
        let dir = tempfile::tempdir()?;
        // No other test of this binary depends on the working directory.
        std::env::set_current_dir(dir.path())?;
        let ran = run_document(&path, dir.path());
        std::env::set_current_dir(&start)?;
        let (count, mut failed) = ran?;
        counts.push((path, count));
        failures.append(&mut failed);
    }
    let readme = counts
        .iter()
        .find(|(path, _)| path.ends_with("README.md"))
        .map_or(0, |(_, count)| *count);
    assert!(readme > 0, "no SQL block found in README.md");
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} SQL block(s) of the documentation failed:\n\n{}",
            failures.len(),
            failures.join("\n\n")
        )
        .into())
    }
}

#[test]
fn sql_blocks_are_found_with_their_tags() {
    let text = "x\n```sql\nSELECT 1;\n```\n\n  ```sql error\n  SELECT nope;\n  ```\n```rust\n```sql\n```\n";
    let blocks = match sql_blocks(text) {
        Ok(blocks) => blocks,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(blocks.len(), 2);
    assert_eq!((blocks[0].line, blocks[0].must_fail), (2, false));
    assert_eq!(blocks[0].sql, "SELECT 1;\n");
    assert_eq!((blocks[1].line, blocks[1].must_fail), (6, true));
    assert!(sql_blocks("```sql\nSELECT 1;\n").is_err());
}
