//! The segment log: append-only files of records (`log`), small appends
//! gathered into larger writes (`write_buffer`), freed files kept for reuse
//! (`free_pool`), the room left on the
//! filesystem below (`fs_space`), and a store whose reads of one segment fail,
//! for the fault tests (`fault_injection`).
//!
//! Knows nothing of metadata: a record is a payload behind a header with its
//! length, block id and checksum; which volume reads it is the metadata's
//! business.
//!
//! May use: `testing`.

pub(crate) mod fault_injection;
pub(crate) mod free_pool;
pub mod fs_space;
pub mod log;
pub(crate) mod write_buffer;
