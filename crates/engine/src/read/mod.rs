//! TODO(read)

pub(crate) mod assemble;
pub(crate) mod grain_cache;
pub(crate) mod location_cache;
