//! TODO(space)

pub mod container;
pub mod data_bitmap;
pub mod provisioning;
pub mod rate;
pub mod report;
