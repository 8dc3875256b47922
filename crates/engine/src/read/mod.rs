//! Filling a read's buffer from holes, patterns and blocks (`assemble`), and
//! the caches in front of the block table and the segments: block locations
//! (`location_cache`) and decoded grains read again and again (`grain_cache`),
//! held together as the engine's `caches`.
//!
//! Which mapping a grain has is decided by `versions::resolve`; the committed
//! mappings' cache lives with the store it caches (`meta::mapping_cache`).
//!
//! May use: `meta`, `versions`, `write` (codecs, and writes not yet committed).

pub(crate) mod assemble;
pub(crate) mod caches;
pub(crate) mod grain_cache;
pub(crate) mod location_cache;
