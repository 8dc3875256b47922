//! TODO(meta)

pub(crate) mod file;
pub(crate) mod mapping_cache;
pub(crate) mod point_rows;
pub mod schema;
pub(crate) mod store;
