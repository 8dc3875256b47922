//! TODO(versions)

pub mod copy;
pub(crate) mod lifecycle;
pub mod range_map;
pub(crate) mod reference_bits;
pub(crate) mod resolve;
pub mod snapshot;
