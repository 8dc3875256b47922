//! Checking what is stored: `scrub` reads back every record and verifies its
//! checksum, decoding and fingerprint; `fsck` checks the metadata's own
//! consistency (reference counts, live bytes, counters) and the space sums.
//!
//! Reads only; never repairs.
//!
//! May use: `meta`, `segment`, `space`, `versions`, `write`, `units`.

pub(crate) mod fsck;
pub mod scrub;
