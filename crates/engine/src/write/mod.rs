//! TODO(write)

pub(crate) mod appends;
pub mod classify;
pub(crate) mod group_commit;
pub(crate) mod transaction;
pub(crate) mod uncommitted;
