//! TODO(read)

pub(crate) mod assemble;
pub(crate) mod grain_cache;
pub(crate) mod location_cache;
pub(crate) mod mapping_cache;
pub(crate) mod resolve;
