//! TODO(segment)

pub mod fs_space;
pub mod log;
pub(crate) mod write_buffer;
