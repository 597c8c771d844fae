//! What widesql adds to DataFusion's planning, installed in every
//! session: the `MAP(K, V)` type ([`types`]), integer arithmetic that
//! fails instead of wrapping ([`checked`]), and `[NOT] IN (subquery)`
//! under SQL's three-valued logic ([`in_subquery`]).

pub(crate) mod checked;
pub(crate) mod in_subquery;
pub(crate) mod types;
