//! Versions instead of copies: range records and their in-memory map
//! (`range_map`), how a grain's content is found at a seq (`resolve`),
//! snapshots (`snapshot`), clones, range copies and reverts (`copy`), destroy,
//! recover and eradicate (`lifecycle`), and the background settling of the
//! data bits that references bring (`reference_bits`), queued in `jobs`.
//!
//! Every operation here writes O(1) records whatever the data beneath; the
//! physical work they imply is the reclaimer's.
//!
//! May use: `meta`, `space`, `names`, `units`, `testing`.

pub mod copy;
pub(crate) mod diff;
pub(crate) mod jobs;
pub(crate) mod lifecycle;
pub mod range_map;
pub(crate) mod reference_bits;
pub(crate) mod resolve;
pub mod snapshot;
