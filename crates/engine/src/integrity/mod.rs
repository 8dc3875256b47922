//! Checking what is stored: `scrub` reads back every record and verifies its
//! checksum, decoding and fingerprint; `fsck` checks the metadata's own
//! consistency (reference counts, live bytes, counters) and the space sums;
//! `faults` keeps the read failures hosts met, for the daemon's event log.
//!
//! Reads only; never repairs.
//!
//! May use: `meta`, `segment`, `space`, `versions`, `write`, `units`.

pub mod faults;
pub(crate) mod fsck;
pub mod scrub;
