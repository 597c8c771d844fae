//! SQLite through `rusqlite` (bundled): WAL journal, one transaction per
//! 1,000-row batch, prepared statements. Pages in one table with a TEXT
//! primary key, anchors in a second table keyed by (page, referring page);
//! as rowid tables (SQLite's default) or `WITHOUT ROWID`, where rows are
//! stored in their primary key's order, as widesql stores them.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection};

use super::System;
use crate::data::Page;
use crate::Res;

/// A SQLite database holding the benchmark pages.
pub struct Sqlite {
    conn: Connection,
    path: PathBuf,
    without_rowid: bool,
}

/// The schema.
const SCHEMA: &str = "
    CREATE TABLE pages (key TEXT PRIMARY KEY, language TEXT, checksum BLOB, rank INTEGER, contents TEXT);
    CREATE TABLE anchors (page TEXT, from_page TEXT, text TEXT, PRIMARY KEY (page, from_page));";

impl Sqlite {
    /// A new database file in `dir`.
    pub fn open(dir: &Path) -> Res<Self> {
        Self::create(dir, false)
    }

    /// A new database file in `dir` whose tables are `WITHOUT ROWID`.
    pub fn open_without_rowid(dir: &Path) -> Res<Self> {
        Self::create(dir, true)
    }

    fn create(dir: &Path, without_rowid: bool) -> Res<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("bench.sqlite");
        let conn = open_connection(&path)?;
        match without_rowid {
            true => conn.execute_batch(&SCHEMA.replace(");", ") WITHOUT ROWID;"))?,
            false => conn.execute_batch(SCHEMA)?,
        }
        Ok(Sqlite {
            conn,
            path,
            without_rowid,
        })
    }

    /// A new connection to the database file `path` (its own, empty page
    /// cache).
    pub fn connect(path: &Path) -> Res<Self> {
        Ok(Sqlite {
            conn: open_connection(path)?,
            path: path.to_path_buf(),
            without_rowid: false,
        })
    }

    /// The connection.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A connection in WAL mode with `synchronous = NORMAL` (WAL's usual
/// setting) and a busy timeout for concurrent writers.
pub fn open_connection(path: &Path) -> Res<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    Ok(conn)
}

/// Runs `INSERT INTO pages (key, language, checksum, rank, contents)` for
/// one page.
pub fn insert_page(statement: &mut rusqlite::Statement<'_>, p: &Page) -> Res<()> {
    statement.execute(params![
        p.key,
        p.language,
        &p.checksum[..],
        p.rank,
        p.contents
    ])?;
    Ok(())
}

impl System for Sqlite {
    fn name(&self) -> String {
        match self.without_rowid {
            true => "SQLite, WITHOUT ROWID".into(),
            false => "SQLite".into(),
        }
    }

    fn load(&mut self, pages: &[Page]) -> Res<()> {
        for chunk in pages.chunks(1000) {
            let tx = self.conn.transaction()?;
            {
                let mut page = tx.prepare_cached(
                    "INSERT INTO pages (key, language, checksum, rank, contents) VALUES (?1, ?2, ?3, ?4, ?5)",
                )?;
                let mut anchor = tx.prepare_cached(
                    "INSERT INTO anchors (page, from_page, text) VALUES (?1, ?2, ?3)",
                )?;
                for p in chunk {
                    insert_page(&mut page, p)?;
                    for (from, text) in &p.anchors {
                        anchor.execute(params![p.key, from, text])?;
                    }
                }
            }
            tx.commit()?;
        }
        self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")?;
        Ok(())
    }

    fn point(&mut self, key: &str) -> Res<bool> {
        let mut page = self.conn.prepare_cached(
            "SELECT language, checksum, rank, contents FROM pages WHERE key = ?1",
        )?;
        let mut values = 0usize;
        let mut rows = page.query(params![key])?;
        while let Some(row) = rows.next()? {
            let contents: String = row.get(3)?;
            values += usize::from(!contents.is_empty());
        }
        let mut anchors = self
            .conn
            .prepare_cached("SELECT from_page, text FROM anchors WHERE page = ?1")?;
        let mut rows = anchors.query(params![key])?;
        while let Some(row) = rows.next()? {
            let text: String = row.get(1)?;
            values += usize::from(!text.is_empty());
        }
        Ok(values > 0)
    }

    fn range(&mut self, prefix: &str) -> Res<usize> {
        let (start, end) = super::prefix_bounds(prefix);
        let mut statement = self
            .conn
            .prepare_cached("SELECT key, language FROM pages WHERE key >= ?1 AND key < ?2")?;
        let mut rows = statement.query(params![start, end])?;
        let mut n = 0;
        while let Some(row) = rows.next()? {
            let _: String = row.get(1)?;
            n += 1;
        }
        Ok(n)
    }

    fn per_language(&mut self) -> Res<Vec<(String, i64)>> {
        let mut statement = self.conn.prepare_cached(
            "SELECT language, count(*) FROM pages GROUP BY language ORDER BY language",
        )?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn sum_rank(&mut self) -> Res<i64> {
        Ok(self
            .conn
            .query_row("SELECT sum(rank) FROM pages", [], |row| row.get(0))?)
    }

    fn bytes_on_disk(&self) -> Res<Option<u64>> {
        let dir = self.path.parent().ok_or("the SQLite file has no folder")?;
        Ok(Some(super::dir_size(dir)?))
    }
}
