//! Reads: widesql's catalog and tables as DataFusion providers, and how a
//! query's rows come out of storage.
//!
//! A query names tables through the [`catalog`] providers; each table is a
//! [`table`] provider whose scan turns key predicates into key ranges
//! ([`pushdown`]) and becomes the [`scan`] plan, reading the locality
//! groups it needs and shaping rows into record batches ([`shape`]). A
//! query that only compares the key with values skips DataFusion's planner
//! ([`key_lookup`]). [`versions`] are the table functions over stored
//! versions (`cells`, `history`, `as_of`). On a cluster's master, a scan of
//! tablets that workers hold runs on them ([`shipped`]).

pub mod catalog;
pub mod key_lookup;
pub mod pushdown;
pub mod scan;
pub mod shape;
pub mod shipped;
pub mod table;
pub mod versions;
