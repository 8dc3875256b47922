//! The write path below the volume API: what each grain holds (`classify`),
//! group commit of queued host writes (`group_commit`), the metadata
//! transaction with block reference counting and segment allocation
//! (`transaction`, `appends`), writes acknowledged but not yet committed
//! (`uncommitted`) and durable commits (`durable`: FLUSH); the state they
//! share is the `committer`'s.
//!
//! Knows no versions: a write replaces the live mapping and hands the old one
//! to history or release as the transaction's rules say.
//!
//! May use: `dedup`, `meta`, `segment`, `space`, `testing`.

pub(crate) mod appends;
pub mod classify;
pub(crate) mod committer;
pub(crate) mod durable;
pub(crate) mod group_commit;
pub(crate) mod transaction;
pub(crate) mod uncommitted;
