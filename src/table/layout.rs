//! Where a table's cells live: one tree per user table with a key space per
//! locality group, or a key prefix inside the shared catalog tree (system
//! tables).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::ids::TableId;
use crate::keys::{CellKey, ColumnKey, KeyError};
use crate::storage::{Storage, StorageError, Tree};
use crate::table::spec::gc_visible;
use crate::table::spec::{FamilySpec, GcPolicy, TableSpec};
use crate::table::splits::SplitMemo;
use crate::table::TableError;

/// The first bytes of every user table tree's name: `t:` ‖ table id (16
/// bytes).
const TABLE_TREE_TAG: &[u8] = b"t:";

/// The name of the tree holding table `id`.
pub fn table_tree_name(id: TableId) -> Vec<u8> {
    let mut name = Vec::with_capacity(TABLE_TREE_TAG.len() + 16);
    name.extend_from_slice(TABLE_TREE_TAG);
    name.extend_from_slice(id.as_bytes());
    name
}

/// The tree in which a worker holds the tablets of its master's table
/// `id` (see `db::held`): not a table tree of the worker's own.
pub fn held_tree_name(id: TableId) -> Vec<u8> {
    let mut name = Vec::with_capacity(2 + 16);
    name.extend_from_slice(b"h:");
    name.extend_from_slice(id.as_bytes());
    name
}

/// The master's table whose tablets a worker holds in the tree `name`,
/// if it is such a tree ([`held_tree_name`]).
pub fn parse_held_tree_name(name: &[u8]) -> Option<TableId> {
    let id: [u8; 16] = name.strip_prefix(b"h:")?.try_into().ok()?;
    Some(TableId::from_bytes(id))
}

/// The table a tree belongs to, if it is a table tree.
pub fn parse_table_tree_name(name: &[u8]) -> Option<TableId> {
    let rest = name.strip_prefix(TABLE_TREE_TAG)?;
    let id: [u8; 16] = rest.try_into().ok()?;
    Some(TableId::from_bytes(id))
}

/// The key prefix of locality group `group` in its table's tree: the name
/// as an escaped, terminated byte string, so no group's prefix starts with
/// another's.
pub fn group_key_prefix(group: &str) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(group.len() + 2);
    crate::keys::put_bytes(&mut prefix, group.as_bytes());
    prefix
}

/// The key prefixes of the locality groups that hold keys in the table
/// tree `tree` (see [`group_key_prefix`]), found with one seek per group.
/// Keys that do not start with an encoded byte string are skipped.
pub fn stored_group_prefixes(tree: &Tree) -> Result<Vec<Vec<u8>>, StorageError> {
    let mut prefixes = Vec::new();
    let mut from = Vec::new();
    loop {
        let Some(first) = tree
            .range(
                std::ops::Bound::Included(from),
                std::ops::Bound::Unbounded,
                false,
            )
            .next()
        else {
            return Ok(prefixes);
        };
        let (key, _) = first?;
        let Ok(prefix) = crate::keys::KeyReader::new(&key).encoded_bytes() else {
            from = [&key[..], &[0]].concat();
            continue;
        };
        prefixes.push(prefix.to_vec());
        let Some(next) = crate::keys::prefix_successor(prefix) else {
            return Ok(prefixes);
        };
        from = next;
    }
}

/// A group key prefix as text, for diagnostics.
pub fn group_of_prefix(prefix: &[u8]) -> String {
    match crate::keys::KeyReader::new(prefix).bytes() {
        Ok(name) => String::from_utf8_lossy(&name).into_owned(),
        Err(_) => format!("{prefix:02x?}"),
    }
}

/// Where a table's cells are stored.
#[derive(Debug, Clone)]
pub enum Placement {
    /// The table's own tree, named by [`table_tree_name`], with a key
    /// space per locality group ([`group_key_prefix`]).
    OwnTree,
    /// The tree in which a worker holds its master's tablets of the table
    /// ([`held_tree_name`]), with the same key spaces as its own tree.
    Held,
    /// Every family in one shared tree, keys after a prefix.
    Shared {
        /// The shared tree's name.
        tree: Vec<u8>,
        /// The key prefix.
        prefix: Vec<u8>,
    },
}

/// One locality group and where its keys are.
#[derive(Debug, Clone)]
pub struct Group {
    /// The locality group's name.
    pub name: String,
    /// Its key space in the table's tree (or the shared tree of system
    /// tables).
    pub tree: Tree,
}

/// One family as the read and write paths need it.
#[derive(Debug, Clone)]
pub struct FamilyLayout {
    /// The id written in keys.
    pub id: u16,
    /// The name.
    pub name: String,
    /// Index into [`Layout::groups`].
    pub group: usize,
    /// Its GC policy.
    pub gc: GcPolicy,
    /// Versions older than this stay hidden (see [`FamilySpec::hidden_before`]).
    pub hidden_before: Option<i64>,
    /// Dropped columns: qualifier and drop time (see [`FamilySpec::dropped`]).
    pub dropped: Vec<(Vec<u8>, i64)>,
}

/// The family id under which delete markers are stored (never a real
/// family's: the catalog hands out ids below it). It sorts after every
/// family, so a row's markers come last among its cells. The qualifier says
/// what a marker hides: empty for the row, the family id (2 bytes,
/// big-endian) for a family, the family id, `0x00` and the qualifier for a
/// column.
pub const MARK_FAMILY: u16 = u16::MAX;

/// The qualifier of a delete marker of a family (`None`: the row) or a
/// column.
pub fn mark_qualifier(family: Option<u16>, qualifier: Option<&[u8]>) -> Vec<u8> {
    let Some(family) = family else {
        return Vec::new();
    };
    let mut out = family.to_be_bytes().to_vec();
    if let Some(q) = qualifier {
        out.push(0);
        out.extend_from_slice(q);
    }
    out
}

/// The delete markers of one row that a read honours.
#[derive(Debug, Default)]
pub struct Marks {
    row: Option<i64>,
    families: Vec<(u16, i64)>,
    columns: Vec<(u16, Vec<u8>, i64)>,
}

impl Marks {
    /// Adds the marker stored under `qualifier` at `ts`, unless it is at or
    /// after `until` (a read of the past does not see later deletes).
    pub fn add(&mut self, qualifier: &[u8], ts: i64, until: Option<i64>) {
        if until.is_some_and(|end| ts >= end) {
            return;
        }
        match qualifier {
            [] => self.row = self.row.max(Some(ts)),
            [hi, lo] => self.families.push((u16::from_be_bytes([*hi, *lo]), ts)),
            [hi, lo, 0, column @ ..] => {
                self.columns
                    .push((u16::from_be_bytes([*hi, *lo]), column.to_vec(), ts))
            }
            _ => {}
        }
    }

    /// Whether a version of `family:qualifier` written at `ts` is hidden.
    pub fn covers(&self, family: u16, qualifier: &[u8], ts: i64) -> bool {
        self.row.is_some_and(|m| ts < m)
            || self.families.iter().any(|(f, m)| *f == family && ts < *m)
            || self
                .columns
                .iter()
                .any(|(f, q, m)| *f == family && q.as_slice() == qualifier && ts < *m)
    }
}

/// Why a stored version is not visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hidden {
    /// It is visible.
    No,
    /// The family's GC policy hides it.
    ByGc,
    /// Its column was dropped after it was written.
    Dropped,
}

impl FamilyLayout {
    /// Whether the version at 1-based position `index` (newest first) of
    /// column `qualifier`, written at `ts`, is hidden at time `now`.
    pub fn hidden(&self, qualifier: &[u8], index: usize, ts: i64, now: i64) -> Hidden {
        self.hidden_by(&self.gc, qualifier, index, ts, now)
    }

    /// [`FamilyLayout::hidden`] with another GC policy.
    pub fn hidden_by(
        &self,
        gc: &GcPolicy,
        qualifier: &[u8],
        index: usize,
        ts: i64,
        now: i64,
    ) -> Hidden {
        // GC first: an expired version of a dropped column is just expired
        // (it must not keep its row alive).
        if self.hidden_before.is_some_and(|floor| ts < floor) || !gc_visible(gc, index, ts, now) {
            Hidden::ByGc
        } else if self
            .dropped
            .iter()
            .any(|(q, at)| q.as_slice() == qualifier && ts <= *at)
        {
            Hidden::Dropped
        } else {
            Hidden::No
        }
    }
}

/// [`Layout::compacted_at`] before the first pass.
const NEVER_COMPACTED: u64 = u64::MAX;

/// A table's resolved storage: its groups' key spaces, key prefix and
/// families.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The table's id.
    pub id: TableId,
    /// The qualified name, for messages (`project.dataset.table`).
    pub name: String,
    /// Bytes before every cell key (empty for user tables).
    pub prefix: Vec<u8>,
    /// The locality groups.
    pub groups: Vec<Group>,
    /// The families, sorted by id.
    pub families: Vec<FamilyLayout>,
    /// The declared spec.
    pub spec: TableSpec,
    /// Whether writes are refused (system tables).
    pub read_only: bool,
    /// The family that holds row markers: the first one without free
    /// qualifiers (`cf` in tables made by SQL). A row whose only cells are
    /// of dropped columns reads as having a marker there, so dropping a
    /// column never makes a row vanish.
    pub marker_family: Option<u16>,
    /// The NOT NULL declared columns: family id and qualifier. Every write
    /// that leaves a row with cells must leave these with a cell.
    pub not_null: Vec<(u16, Vec<u8>)>,
    /// Set when the catalog replaced this layout (the spec changed or the
    /// table was dropped), with every row lock held: a write checks it
    /// under its row locks, so none is applied by an outdated layout.
    superseded: Arc<AtomicBool>,
    /// The write epoch of the table's groups when the last complete
    /// compaction pass started; see [`Layout::needs_compaction`].
    compacted_at: Arc<AtomicU64>,
    /// The partitions recent SQL scans of the table were split into.
    pub(crate) splits: Arc<SplitMemo>,
}

impl Layout {
    /// Resolves the tree and key spaces of a table.
    pub fn new(
        storage: &Storage,
        id: TableId,
        name: String,
        spec: TableSpec,
        placement: &Placement,
        read_only: bool,
    ) -> Result<Layout, StorageError> {
        let mut groups: Vec<Group> = Vec::new();
        let mut prefix = Vec::new();
        match placement {
            Placement::OwnTree | Placement::Held => {
                let tree = match placement {
                    Placement::Held => held_tree_name(id),
                    _ => table_tree_name(id),
                };
                for group in spec.locality_groups() {
                    groups.push(Group {
                        name: group.to_string(),
                        tree: storage.key_space(&tree, &group_key_prefix(group))?,
                    });
                }
            }
            Placement::Shared { tree, prefix: p } => {
                // One tree: every family reads and writes group 0, so a scan
                // never visits the shared tree twice.
                prefix = p.clone();
                groups.push(Group {
                    name: crate::table::spec::DEFAULT_LOCALITY_GROUP.to_string(),
                    tree: storage.tree(tree)?,
                });
            }
        }
        let mut families: Vec<FamilyLayout> = spec
            .families
            .iter()
            .map(|f: &FamilySpec| FamilyLayout {
                id: f.id,
                name: f.name.clone(),
                group: groups
                    .iter()
                    .position(|g| g.name == f.locality_group)
                    .unwrap_or(0),
                gc: f.gc,
                hidden_before: f.hidden_before,
                dropped: f
                    .dropped
                    .iter()
                    .map(|d| (d.qualifier.as_bytes().to_vec(), d.at))
                    .collect(),
            })
            .collect();
        families.sort_by_key(|f| f.id);
        let marker_family = spec
            .families
            .iter()
            .find(|f| f.qualifier_type.is_none())
            .map(|f| f.id);
        let not_null = spec
            .families
            .iter()
            .flat_map(|f| {
                f.columns
                    .iter()
                    .filter(|c| !c.nullable && c.missing.is_none())
                    .map(|c| (f.id, c.name.as_bytes().to_vec()))
            })
            .collect();
        Ok(Layout {
            marker_family,
            not_null,
            id,
            name,
            prefix,
            groups,
            families,
            spec,
            read_only,
            superseded: Arc::default(),
            compacted_at: Arc::new(AtomicU64::new(NEVER_COMPACTED)),
            splits: Arc::default(),
        })
    }

    /// The same layout, its key spaces' ranges stored as `routes` says
    /// (the tablets workers hold).
    pub fn with_routes(&self, routes: &crate::storage::Routes) -> Result<Layout, StorageError> {
        let groups = self
            .groups
            .iter()
            .map(|g| {
                Ok(Group {
                    name: g.name.clone(),
                    tree: g.tree.with_routes(routes.clone())?,
                })
            })
            .collect::<Result<_, StorageError>>()?;
        Ok(Layout {
            groups,
            splits: Arc::default(),
            ..self.clone()
        })
    }

    /// The same layout under a new name (the table or its dataset was
    /// renamed). It shares the superseded mark and the compaction state
    /// with this one: a rename changes no cell, so a write planned before
    /// it stays valid, and a later DDL that supersedes the renamed layout
    /// supersedes the writes still holding this one too.
    pub fn renamed(&self, name: String) -> Layout {
        Layout {
            name,
            ..self.clone()
        }
    }

    /// Marks the layout replaced; called through
    /// [`EveryRowLock::supersede`](crate::table::locks::EveryRowLock::supersede),
    /// so that the caller holds every row lock.
    pub(super) fn supersede(&self) {
        self.superseded.store(true, Ordering::SeqCst);
    }

    /// Whether the catalog replaced this layout.
    pub fn is_superseded(&self) -> bool {
        self.superseded.load(Ordering::SeqCst)
    }

    /// The family called `name`.
    pub fn family(&self, name: &str) -> Option<&FamilyLayout> {
        self.families.iter().find(|f| f.name == name)
    }

    /// The family with id `id`.
    pub fn family_by_id(&self, id: u16) -> Option<&FamilyLayout> {
        self.families
            .binary_search_by_key(&id, |f| f.id)
            .ok()
            .map(|at| &self.families[at])
    }

    /// The write epochs of the table's groups, summed: it moves whenever a
    /// batch writes one of them.
    pub fn write_epoch(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| g.tree.write_epoch())
            .fold(0, u64::wrapping_add)
    }

    /// Whether a compaction pass could find anything: not when no batch
    /// wrote the table since a complete pass under this layout started and
    /// no family hides versions by age (which passing time does).
    pub fn needs_compaction(&self, epoch: u64) -> bool {
        self.compacted_at.load(Ordering::SeqCst) != epoch || self.hides_by_age()
    }

    /// Whether a family hides versions by age: what a read finds then
    /// changes as time passes, with no batch written.
    pub fn hides_by_age(&self) -> bool {
        self.families.iter().any(|f| f.gc.max_age_micros.is_some())
    }

    /// Records a complete pass that started at write epoch `epoch`.
    pub fn compacted(&self, epoch: u64) {
        self.compacted_at.store(epoch, Ordering::SeqCst);
    }

    /// Decodes a stored cell key of this table; bytes this format never
    /// writes are a [`TableError::Corrupt`] naming the table and the key.
    pub fn decode_key<'k>(&self, key: &'k [u8]) -> Result<CellKey<'k>, TableError> {
        CellKey::decode(key, self.prefix.len()).map_err(|reason| self.corrupt(key, reason))
    }

    /// Decodes the part after the row of a stored cell key whose row part
    /// (prefix included) is `row_len` bytes long.
    pub fn decode_column<'k>(
        &self,
        key: &'k [u8],
        row_len: usize,
    ) -> Result<ColumnKey<'k>, TableError> {
        let suffix = key
            .get(row_len..)
            .ok_or(KeyError::Truncated { element: "row key" });
        suffix
            .and_then(ColumnKey::decode)
            .map_err(|reason| self.corrupt(key, reason))
    }

    /// The length of the row part (prefix included) of a stored cell key.
    pub fn row_len(&self, key: &[u8]) -> Result<usize, TableError> {
        CellKey::encoded_row_len(key, self.prefix.len())
            .map(|len| self.prefix.len() + len)
            .map_err(|reason| self.corrupt(key, reason))
    }

    /// A [`TableError::Corrupt`] naming this table and the stored `key`.
    pub(crate) fn corrupt(&self, key: &[u8], reason: KeyError) -> TableError {
        let mut hex: Vec<String> = key.iter().take(64).map(|b| format!("{b:02x}")).collect();
        if key.len() > 64 {
            hex.push(format!("… ({} bytes)", key.len()));
        }
        TableError::Corrupt {
            table: self.name.clone(),
            key: hex.join(" "),
            reason,
        }
    }

    /// The salt that spreads this table's rows over the lock stripes.
    pub fn lock_salt(&self) -> &[u8] {
        self.id.as_bytes()
    }
}
