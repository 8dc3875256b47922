//! Test machinery: named sync points where a test makes another thread's work
//! fall between two steps of the engine, and the data the unit tests share.
//!
//! Owns no production state (a sync point is a check of a flag no production
//! code sets). The fault-injecting segment store lives with the segments it
//! wraps (`segment::fault_injection`).
//!
//! May use: nothing else in the crate.

pub(crate) mod sync_points;
#[cfg(test)]
pub(crate) mod test_data;
