//! The embedded default backend: sled.

use std::any::Any;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use sled::Transactional;

use super::backend::{Backend, BackendError, BackendIter, BackendTree, TreeWrites, Write};
use super::{Bytes, StorageError, StorageOptions};

/// A sled database.
#[derive(Debug)]
pub struct SledBackend {
    db: sled::Db,
}

/// A sled tree.
#[derive(Debug)]
struct SledTree {
    inner: sled::Tree,
    name: Vec<u8>,
}

/// How long an open waits for the database's file lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Opens `config`'s database, waiting up to [`LOCK_WAIT`] while its file is
/// locked: sled's I/O threads release the lock a moment after the last
/// handle of a database is dropped, so a program that closes a database and
/// opens it again would otherwise be told it is in use. A database another
/// process has open is still refused, after the wait.
fn open_when_unlocked(config: &sled::Config) -> sled::Result<sled::Db> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match config.open() {
            Err(sled::Error::Io(io))
                if is_lock_error(&io) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            opened => return opened,
        }
    }
}

/// Whether sled could not open a database because its file is locked.
fn is_lock_error(io: &std::io::Error) -> bool {
    io.kind() == std::io::ErrorKind::WouldBlock || io.to_string().contains("lock")
}

impl SledBackend {
    /// Opens (creating if needed) the sled database in `path`.
    pub fn open(path: &Path, options: &StorageOptions) -> Result<SledBackend, StorageError> {
        let display = path.display().to_string();
        let config = sled::Config::new()
            .path(path)
            .cache_capacity(options.cache_capacity)
            .flush_every_ms(options.flush_every_ms)
            .temporary(options.temporary);
        let db = open_when_unlocked(&config).map_err(|source| match source {
            sled::Error::Io(ref io) if is_lock_error(io) => StorageError::Locked {
                path: display.clone(),
            },
            source => StorageError::Store {
                path: display.clone(),
                source: Box::new(source),
            },
        })?;
        Ok(SledBackend { db })
    }

    fn sled_tree<'a>(
        &self,
        tree: &'a Arc<dyn BackendTree>,
    ) -> Result<&'a sled::Tree, BackendError> {
        tree.as_any()
            .downcast_ref::<SledTree>()
            .map(|t| &t.inner)
            .ok_or_else(|| "a batch names a tree of another backend".into())
    }
}

fn batch_of(writes: &[Write]) -> sled::Batch {
    let mut batch = sled::Batch::default();
    for write in writes {
        match write {
            Write::Put(key, value) => batch.insert(key.0.clone(), value.0.clone()),
            Write::Delete(key) => batch.remove(key.0.clone()),
        }
    }
    batch
}

impl Backend for SledBackend {
    fn open_tree(&self, name: &[u8]) -> Result<Arc<dyn BackendTree>, BackendError> {
        Ok(Arc::new(SledTree {
            inner: self.db.open_tree(name)?,
            name: name.to_vec(),
        }))
    }

    fn drop_tree(&self, name: &[u8]) -> Result<bool, BackendError> {
        Ok(self.db.drop_tree(name)?)
    }

    fn tree_names(&self) -> Vec<Vec<u8>> {
        let default = self.db.name();
        self.db
            .tree_names()
            .into_iter()
            .filter(|name| *name != default)
            .map(|name| name.to_vec())
            .collect()
    }

    fn meta_get(&self, key: &[u8]) -> Result<Option<Bytes>, BackendError> {
        Ok(self.db.get(key)?.map(Bytes))
    }

    fn meta_put_durable(&self, key: &[u8], value: &[u8]) -> Result<(), BackendError> {
        self.db.insert(key, value)?;
        self.db.flush()?;
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.db.tree_names().len() <= 1 && self.db.is_empty()
    }

    fn apply(&self, batch: &[TreeWrites]) -> Result<(), BackendError> {
        match batch {
            [] => Ok(()),
            // One write is atomic by itself. sled writes a batch's recovery
            // manifest to the log on its own, so a batch of one costs the
            // flush that follows a second log write (measured: two
            // `sync_file_range` calls per single-row INSERT instead of one).
            [(tree, writes)] if writes.len() == 1 => {
                let tree = self.sled_tree(tree)?;
                match &writes[0] {
                    Write::Put(key, value) => tree.insert(key.0.clone(), value.0.clone())?,
                    Write::Delete(key) => tree.remove(key.0.clone())?,
                };
                Ok(())
            }
            [(tree, writes)] => Ok(self.sled_tree(tree)?.apply_batch(batch_of(writes))?),
            _ => {
                let trees = batch
                    .iter()
                    .map(|(tree, _)| self.sled_tree(tree).cloned())
                    .collect::<Result<Vec<sled::Tree>, _>>()?;
                let batches: Vec<sled::Batch> =
                    batch.iter().map(|(_, writes)| batch_of(writes)).collect();
                trees
                    .as_slice()
                    .transaction(|views| {
                        for (view, writes) in views.iter().zip(&batches) {
                            view.apply_batch(writes)?;
                        }
                        Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
                    })
                    .map_err(|e| -> BackendError {
                        match e {
                            sled::transaction::TransactionError::Storage(e) => Box::new(e),
                            sled::transaction::TransactionError::Abort(()) => {
                                "sled aborted a batch".into()
                            }
                        }
                    })
            }
        }
    }

    fn flush(&self) -> Result<(), BackendError> {
        self.db.flush()?;
        Ok(())
    }

    fn size_on_disk(&self) -> Result<u64, BackendError> {
        Ok(self.db.size_on_disk()?)
    }
}

impl BackendTree for SledTree {
    fn name(&self) -> &[u8] {
        &self.name
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, BackendError> {
        Ok(self.inner.get(key)?.map(Bytes))
    }

    fn range(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, reverse: bool) -> BackendIter {
        let iter = self.inner.range::<Vec<u8>, _>((lo, hi));
        let convert = |item: sled::Result<(sled::IVec, sled::IVec)>| {
            item.map(|(k, v)| (Bytes(k), Bytes(v)))
                .map_err(|e| Box::new(e) as BackendError)
        };
        if reverse {
            Box::new(iter.rev().map(convert))
        } else {
            Box::new(iter.map(convert))
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
