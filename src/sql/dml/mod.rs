//! The one write path of SQL: every statement that changes rows ends in
//! [`write::RowWriter`], which turns record batches into validated row
//! mutations and applies them. INSERT and CREATE TABLE AS reach it through
//! the DataFusion sink ([`sink::WideSink`]), `INSERT … VALUES` of constants
//! through [`constant_insert`] straight into that sink; DELETE, UPDATE and TRUNCATE
//! through [`delete_update`].

pub mod apply;
pub(crate) mod constant_insert;
pub mod delete_update;
pub mod sink;
pub mod write;

pub use delete_update::*;
