//! The library's layers depend only on those below them, as the design
//! says (docs/design.md, *Crates and layers*): every `crate::…` path (and
//! every `super::…` path of a table module) in the sources names a module
//! at or below the one that uses it. A new module must be given its place
//! here before it can be used. A module's tests in a file of their own
//! (`tests.rs`) may set up through any layer, as an embedding program does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The crate's layers, lowest first.
const LAYERS: &[&str] = &[
    "keys", "storage", "clock", "table", "catalog", "access", "db", "sql",
];

/// Modules every layer may use: typed ids, and the crate error, which wraps
/// each layer's own error type (so `error` itself names them all).
const SHARED: &[&str] = &["ids", "error"];

/// The modules of `table`, lowest first.
const TABLE: &[&str] = &[
    "spec", "varint", "filter", "splits", "mutation", "layout", "kept", "cell", "selector",
    "locks", "entries", "chunks", "read", "scanner", "write", "gc",
];

type BoxError = Box<dyn std::error::Error>;

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Result<Vec<PathBuf>, BoxError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(sources(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The code lines of a source (comments left out: a doc link is not a
/// dependency), numbered from 1.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim()))
        .filter(|(_, line)| !line.starts_with("//"))
}

/// The names after each occurrence of `prefix` in `line` (`crate::x::y`
/// gives `x`; `crate::{a, b::c}` gives `a` and `b`).
fn names_after<'l>(line: &'l str, prefix: &str) -> Vec<&'l str> {
    let ident = |s: &'l str| {
        let end = s
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        &s[..end]
    };
    let mut names = Vec::new();
    for (at, _) in line.match_indices(prefix) {
        let rest = &line[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            names.extend(group.split(',').map(|part| ident(part.trim())));
        } else {
            names.push(ident(rest));
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// What the crate root re-exports, by name: the module each comes from
/// (`pub use table::{Row, …}` makes `crate::Row` a use of `table`).
fn root_exports(lib: &str) -> BTreeMap<String, String> {
    let mut exports = BTreeMap::new();
    for statement in lib.split(';') {
        let statement = statement.trim();
        let Some(path) = statement
            .lines()
            .map(str::trim)
            .find_map(|line| line.strip_prefix("pub use "))
        else {
            continue;
        };
        let Some((module, _)) = path.split_once("::") else {
            continue;
        };
        let module = module.trim_start_matches("crate::");
        let rest = &statement[statement.find("pub use ").unwrap_or(0)..];
        for name in rest
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| w.chars().next().is_some_and(char::is_uppercase))
        {
            exports.insert(name.to_string(), module.to_string());
        }
    }
    exports
}

/// The place of `module` in `order`, or why it has none.
fn rank(order: &[&str], module: &str, file: &str) -> Result<usize, String> {
    order
        .iter()
        .position(|m| *m == module)
        .ok_or_else(|| format!("{file}: module '{module}' has no place in the layer order"))
}

#[test]
fn layers_depend_only_on_layers_below() -> Result<(), BoxError> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(root.join("lib.rs"))?;
    let exports = root_exports(&lib);
    assert!(
        exports.get("Row").is_some_and(|m| m == "table"),
        "the crate root's re-exports were not read: {exports:?}"
    );
    // Every module of `table` has its place in the order.
    let mut table_modules = Vec::new();
    for entry in std::fs::read_dir(root.join("table"))? {
        let name = entry?
            .file_name()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if name != "mod" {
            rank(TABLE, &name, "table/")?;
            table_modules.push(name);
        }
    }
    let mut wrong = Vec::new();
    let mut checked = 0;
    for path in sources(&root)? {
        let relative = path
            .strip_prefix(&root)?
            .to_string_lossy()
            .replace('\\', "/");
        let parts: Vec<&str> = relative.split('/').collect();
        let layer = parts[0].trim_end_matches(".rs");
        if layer == "lib" || SHARED.contains(&layer) || relative.ends_with("/tests.rs") {
            continue;
        }
        let own = rank(LAYERS, layer, &relative)?;
        // The table module this file is in, for the order inside `table`.
        let table_module = (layer == "table" && parts.len() > 1)
            .then(|| parts[1].trim_end_matches(".rs"))
            .filter(|m| *m != "mod");
        let text = std::fs::read_to_string(&path)?;
        for (number, line) in code_lines(&text) {
            for name in names_after(line, "crate::") {
                let used = exports.get(name).map_or(name, String::as_str);
                if SHARED.contains(&used) || !LAYERS.contains(&used) {
                    continue;
                }
                checked += 1;
                if rank(LAYERS, used, &relative)? > own {
                    wrong.push(format!("{relative}:{number}: {layer} uses {used}: {line}"));
                }
            }
            let Some(module) = table_module else {
                continue;
            };
            let mut used = names_after(line, "crate::table::");
            if parts.len() == 2 {
                used.extend(names_after(line, "super::"));
            }
            for name in used {
                // Items of the file's own module (`super::` in its tests),
                // of `table/mod.rs`, or re-exported there.
                if !table_modules.iter().any(|m| m == name) {
                    continue;
                }
                checked += 1;
                if rank(TABLE, name, &relative)? > rank(TABLE, module, &relative)? {
                    wrong.push(format!(
                        "{relative}:{number}: table::{module} uses table::{name}: {line}"
                    ));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} paths were checked");
    assert!(
        wrong.is_empty(),
        "arrows pointing up:\n{}",
        wrong.join("\n")
    );
    Ok(())
}

/// `Session` and its methods are defined in `sql/session/` alone; every
/// other stage is functions that take the session.
#[test]
fn the_session_is_defined_in_one_place() -> Result<(), BoxError> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let session = root.join("sql").join("session");
    let mut outside = Vec::new();
    let mut inside = 0;
    for path in sources(&root)? {
        let text = std::fs::read_to_string(&path)?;
        let blocks = code_lines(&text)
            .filter(|(_, line)| {
                line.starts_with("impl Session ") || line.starts_with("impl Session{")
            })
            .count();
        if path.starts_with(&session) {
            inside += blocks;
        } else if blocks > 0 {
            outside.push(path.display().to_string());
        }
    }
    assert!(
        inside > 0,
        "no impl Session found under {}",
        session.display()
    );
    assert!(
        outside.is_empty(),
        "impl Session outside sql/session/: {outside:?}"
    );
    Ok(())
}

#[test]
fn paths_are_read_from_lines() {
    assert_eq!(
        names_after("use crate::table::read::RawRow;", "crate::"),
        ["table"]
    );
    assert_eq!(
        names_after("use crate::{keys::x, Row};", "crate::"),
        ["keys", "Row"]
    );
    assert_eq!(names_after("let x = y;", "crate::"), Vec::<&str>::new());
    let exports = root_exports("pub use table::{\n    Cell, Row,\n};\npub use sql::Session;\n");
    assert_eq!(exports.get("Row").map(String::as_str), Some("table"));
    assert_eq!(exports.get("Session").map(String::as_str), Some("sql"));
}
