//! Key ranges of a key space that another store holds: the tablets of a
//! table that a cluster's workers serve.
//!
//! A [`Routes`] splits a key space at the first key of each range and names
//! each range's home: this store, or another [`Backend`] (a worker's,
//! reached over the network) that keeps the same keys under the same tree
//! name. A [`Tree`] given routes scans each range from its
//! home, in key order, and a [`WriteBatch`](super::WriteBatch) sends each
//! write to the home of its key. [`Storage::apply`](super::Storage::apply)
//! then applies the batch home by home: each home's part atomically, the
//! whole not (see [`StorageError::PartlyApplied`](super::StorageError)).

use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use super::{Backend, BackendIter, BackendTree, StorageError, Tree};

/// The bounds of a key range.
pub type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Where the keys of one range are stored.
#[derive(Clone)]
pub enum Home {
    /// This store.
    Here,
    /// Another store, named for messages (`tablet … on worker …`).
    Away {
        /// The store.
        store: Arc<dyn Backend>,
        /// What to call it in an error.
        name: Arc<str>,
    },
}

impl fmt::Debug for Home {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Home::Here => f.write_str("Here"),
            Home::Away { name, .. } => write!(f, "Away({name})"),
        }
    }
}

/// The homes of a key space's keys, by the first key of each range; the
/// first range starts at the empty key, and each ends where the next one
/// starts.
#[derive(Debug, Clone)]
pub struct Routes {
    starts: Vec<Vec<u8>>,
    homes: Vec<Home>,
}

impl Routes {
    /// Routes from `(first key, home)` pairs in key order, the first one's
    /// key empty; `None` when they are not.
    pub fn new(ranges: Vec<(Vec<u8>, Home)>) -> Option<Routes> {
        let ordered = ranges.first().is_some_and(|(start, _)| start.is_empty())
            && ranges.windows(2).all(|w| w[0].0 < w[1].0);
        if !ordered {
            return None;
        }
        let (starts, homes) = ranges.into_iter().unzip();
        Some(Routes { starts, homes })
    }

    /// The index of the range that holds `key`.
    pub(super) fn range_of(&self, key: &[u8]) -> usize {
        // The last start at or before the key; the first start is empty.
        self.starts
            .partition_point(|start| start.as_slice() <= key)
            .saturating_sub(1)
    }

    /// The home of range `index`.
    pub(super) fn home(&self, index: usize) -> &Home {
        &self.homes[index]
    }

    /// How many ranges there are.
    pub(super) fn len(&self) -> usize {
        self.starts.len()
    }

    /// The ranges that `(lo, hi)` reaches, in key order, each with the
    /// bounds of `(lo, hi)` clipped to it.
    pub(super) fn pieces(
        &self,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
    ) -> Vec<(usize, KeyRange)> {
        let first = match lo {
            Bound::Included(k) | Bound::Excluded(k) => self.range_of(k),
            Bound::Unbounded => 0,
        };
        let mut pieces = Vec::new();
        for index in first..self.starts.len() {
            let start = &self.starts[index];
            // A range that starts past the scan's end is not reached.
            let past_end = match hi {
                Bound::Included(k) => start.as_slice() > k.as_slice(),
                Bound::Excluded(k) => start.as_slice() >= k.as_slice() && index > first,
                Bound::Unbounded => false,
            };
            if past_end {
                break;
            }
            let piece_lo = if index == first {
                lo.clone()
            } else {
                Bound::Included(start.clone())
            };
            let piece_hi = match self.starts.get(index + 1) {
                Some(next) if !ends_before(hi, next) => Bound::Excluded(next.clone()),
                _ => hi.clone(),
            };
            pieces.push((index, (piece_lo, piece_hi)));
        }
        pieces
    }
}

/// Whether the scan bound `hi` ends before the key `next`.
fn ends_before(hi: &Bound<Vec<u8>>, next: &[u8]) -> bool {
    match hi {
        Bound::Included(k) => k.as_slice() < next,
        Bound::Excluded(k) => k.as_slice() <= next,
        Bound::Unbounded => false,
    }
}

/// The other store that holds a key: the store, its name, its tree.
pub(super) struct AwayHome<'a> {
    pub(super) store: &'a Arc<dyn Backend>,
    pub(super) name: &'a Arc<str>,
    pub(super) tree: &'a Arc<dyn BackendTree>,
}

/// A key space's [`Routes`] and the tree of each range's home.
#[derive(Debug)]
pub(super) struct Routed {
    pub(super) routes: Routes,
    pub(super) trees: Vec<Arc<dyn BackendTree>>,
}

impl Tree {
    /// The same key space, its key ranges stored as `routes` says; a tree
    /// of another store is opened for each range held away (which costs
    /// no call to that store).
    pub fn with_routes(&self, routes: Routes) -> Result<Tree, StorageError> {
        let trees = (0..routes.len())
            .map(|index| match routes.home(index) {
                Home::Here => Ok(Arc::clone(&self.inner)),
                Home::Away { store, name } => {
                    store
                        .open_tree(self.inner.name())
                        .map_err(|source| StorageError::Away {
                            home: name.to_string(),
                            source,
                        })
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Tree {
            routed: Some(Arc::new(Routed { routes, trees })),
            ..self.clone()
        })
    }

    /// The home of `key` (seen without the key space's prefix) when
    /// another store holds it.
    pub(super) fn away_home(&self, key: &[u8]) -> Option<AwayHome<'_>> {
        let routed = self.routed.as_deref()?;
        let index = routed.routes.range_of(key);
        match routed.routes.home(index) {
            Home::Here => None,
            Home::Away { store, name } => Some(AwayHome {
                store,
                name,
                tree: &routed.trees[index],
            }),
        }
    }
}

/// A scan of `(lo, hi)` over ranges that live in several homes: each
/// range's scan opens when the one before it has ended.
pub(super) fn routed_scan(
    pieces: Vec<(Arc<dyn BackendTree>, KeyRange)>,
    reverse: bool,
) -> BackendIter {
    let mut pieces = pieces;
    if reverse {
        pieces.reverse();
    }
    Box::new(
        pieces
            .into_iter()
            .flat_map(move |(tree, (lo, hi))| tree.range(lo, hi, reverse)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(starts: &[&str]) -> Routes {
        Routes::new(
            starts
                .iter()
                .map(|s| (s.as_bytes().to_vec(), Home::Here))
                .collect(),
        )
        .expect("ordered")
    }

    fn shown(pieces: Vec<(usize, KeyRange)>) -> Vec<String> {
        let bound = |b: &Bound<Vec<u8>>, open: &str| match b {
            Bound::Included(k) => format!("[{}", String::from_utf8_lossy(k)),
            Bound::Excluded(k) => format!("({}", String::from_utf8_lossy(k)),
            Bound::Unbounded => open.to_string(),
        };
        pieces
            .iter()
            .map(|(i, (lo, hi))| format!("{i}:{} {}", bound(lo, "-"), bound(hi, "+")))
            .collect()
    }

    #[test]
    fn routes_start_empty_in_key_order() {
        assert!(Routes::new(Vec::new()).is_none());
        assert!(Routes::new(vec![(b"a".to_vec(), Home::Here)]).is_none());
        assert!(Routes::new(vec![
            (Vec::new(), Home::Here),
            (b"m".to_vec(), Home::Here),
            (b"m".to_vec(), Home::Here)
        ])
        .is_none());
        let r = routes(&["", "g", "p"]);
        assert_eq!(
            ["", "a", "g", "g\0", "o", "p", "z"].map(|k| r.range_of(k.as_bytes())),
            [0, 0, 1, 1, 1, 2, 2]
        );
    }

    use crate::storage::{Durability, Fault, MemoryBackend, StorageError, Tree, WriteBatch};

    fn keys(tree: &Tree, reverse: bool) -> Vec<String> {
        tree.range(Bound::Unbounded, Bound::Unbounded, reverse)
            .map(|item| {
                item.map(|(k, v)| {
                    format!(
                        "{}={}",
                        String::from_utf8_lossy(&k),
                        String::from_utf8_lossy(&v)
                    )
                })
            })
            .collect::<Result<_, _>>()
            .expect("scan")
    }

    #[test]
    fn a_routed_key_space_reads_and_writes_each_range_in_its_home() {
        let here = crate::storage::in_memory();
        let away = Arc::new(MemoryBackend::new());
        let away_home = Home::Away {
            store: Arc::clone(&away) as Arc<dyn Backend>,
            name: Arc::from("tablet 2 on worker w"),
        };
        let routes = Routes::new(vec![
            (Vec::new(), Home::Here),
            (b"g".to_vec(), away_home),
            (b"p".to_vec(), Home::Here),
        ])
        .expect("ordered");
        let plain = here.key_space(b"t", b"g1").expect("key space");
        let routed = plain.with_routes(routes).expect("routed");
        let mut batch = WriteBatch::with_durability(Durability::Immediate);
        for key in ["a", "g", "k", "p", "z"] {
            batch.put(&routed, key, key.to_uppercase());
        }
        here.apply(batch).expect("applied");
        assert_eq!(routed.write_epoch(), 1);
        assert_eq!(
            away.flushes(),
            1,
            "an immediate batch is durable in every home"
        );
        // The keys held away are not here, and are read from there, in order.
        assert_eq!(keys(&plain, false), ["a=A", "p=P", "z=Z"]);
        let all = ["a=A", "g=G", "k=K", "p=P", "z=Z"];
        assert_eq!(keys(&routed, false), all);
        let mut reversed = all.to_vec();
        reversed.reverse();
        assert_eq!(keys(&routed, true), reversed);
        let away_tree = away.open_tree(b"t").expect("tree");
        let stored: Vec<Vec<u8>> = away_tree
            .range(Bound::Unbounded, Bound::Unbounded, false)
            .map(|item| item.map(|(k, _)| k.to_vec()))
            .collect::<Result<_, _>>()
            .expect("scan");
        assert_eq!(
            stored,
            [b"g1g".to_vec(), b"g1k".to_vec()],
            "under the same prefix"
        );

        // A home that fails: nothing of a batch of its keys alone lands,
        // and a batch over several homes says which applied.
        away.inject(Fault::CrashAtBatch(away.batches() + 1));
        let mut batch = WriteBatch::with_durability(Durability::Eventual);
        batch.delete(&routed, "k");
        match here.apply(batch) {
            Err(StorageError::Away { home, .. }) => assert_eq!(home, "tablet 2 on worker w"),
            other => panic!("{other:?}"),
        }
        let mut batch = WriteBatch::with_durability(Durability::Eventual);
        batch.delete(&routed, "a");
        batch.delete(&routed, "k");
        let error = here.apply(batch).expect_err("the away part fails");
        assert!(
            matches!(&error, StorageError::PartlyApplied { applied, failed, .. }
                if applied == &["this process"] && failed == "tablet 2 on worker w"),
            "{error}"
        );
        assert!(error
            .to_string()
            .starts_with("the write was applied by this process but not by tablet 2 on worker w"));
        assert_eq!(keys(&routed, false), ["g=G", "k=K", "p=P", "z=Z"]);
    }

    #[test]
    fn a_scan_is_cut_where_ranges_start() {
        let r = routes(&["", "g", "p"]);
        let inc = |k: &str| Bound::Included(k.as_bytes().to_vec());
        let exc = |k: &str| Bound::Excluded(k.as_bytes().to_vec());
        assert_eq!(
            shown(r.pieces(&Bound::Unbounded, &Bound::Unbounded)),
            ["0:- (g", "1:[g (p", "2:[p +"]
        );
        assert_eq!(shown(r.pieces(&inc("b"), &inc("c"))), ["0:[b [c"]);
        assert_eq!(
            shown(r.pieces(&inc("b"), &inc("g"))),
            ["0:[b (g", "1:[g [g"]
        );
        assert_eq!(shown(r.pieces(&inc("b"), &exc("g"))), ["0:[b (g"]);
        assert_eq!(
            shown(r.pieces(&exc("g"), &exc("q"))),
            ["1:(g (p", "2:[p (q"]
        );
        assert_eq!(shown(r.pieces(&inc("q"), &Bound::Unbounded)), ["2:[q +"]);
        // An empty scan inside one range is that range's own business.
        assert_eq!(shown(r.pieces(&inc("h"), &exc("h"))), ["1:[h (h"]);
    }
}
