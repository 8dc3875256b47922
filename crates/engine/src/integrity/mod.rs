//! TODO(integrity)

pub(crate) mod fsck;
pub mod scrub;
