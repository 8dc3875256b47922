//! What the write path knows about duplicates before and while it proves
//! them: which fingerprints the index probably holds, readable without the
//! writer mutex (`index_hints`), payloads recently proven equal
//! (`proven_payloads`), and segment bytes read ahead for proofs
//! (`proof_readahead`).
//!
//! The dedup index itself is part of the writer state
//! (`write::transaction`); nothing here changes metadata.
//!
//! May use: `segment`.

pub(crate) mod index_hints;
pub(crate) mod proof_readahead;
pub(crate) mod proven_payloads;
