//! The embedded API: [`Db`] and the handles of its projects, datasets and
//! tables.
//!
//! Handles hold ids, not names: a handle keeps working after its object was
//! renamed, and answers `NotFound` after it was dropped.

mod activity;
mod database;
mod dataset;
mod held;
mod options;
mod project;
mod registry;
mod retry;
mod table;
mod users;
mod workers;

pub use activity::{Activity, ActivityEntry, Running};
pub use database::Db;
pub use dataset::Dataset;
#[cfg(test)]
pub(crate) use held::hold_own_rows;
pub use held::{
    apply_held, drop_held, dropped_tables, held_entries, held_keys_read, held_store, held_tables,
    settle_held, stored_entries,
};
pub use options::DbOptions;
pub use project::Project;
use registry::{open_databases, DbInner};
pub(crate) use retry::{retrying, retrying_async};
pub use table::Table;
pub use workers::{WorkerEntry, Workers};
