//! TODO(space)

pub(crate) mod cleaner;
pub mod container;
pub mod data_bitmap;
pub mod provisioning;
pub mod rate;
pub(crate) mod reclaim;
pub mod report;
