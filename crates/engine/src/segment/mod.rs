//! TODO(segment)

pub(crate) mod fault_injection;
pub mod fs_space;
pub mod log;
pub(crate) mod write_buffer;
