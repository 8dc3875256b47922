//! TODO(dedup)

pub(crate) mod index_hints;
pub(crate) mod proof_readahead;
pub(crate) mod proven_payloads;
