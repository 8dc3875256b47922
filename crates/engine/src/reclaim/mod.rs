//! TODO(reclaim)

pub(crate) mod cleaner;
pub(crate) mod reclaimer;
