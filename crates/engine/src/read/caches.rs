//! The read caches together: block locations and decoded grains. Each is
//! bounded and always right (a block's content never changes under its id),
//! so dropping an entry costs a lookup, never a wrong answer.

/// What reads keep in front of the block table and the segments.
pub(crate) struct ReadCaches {
    /// Where committed blocks are stored, for reads.
    pub locations: crate::read::location_cache::BlockLocations,
    /// Grains of blocks read again and again, for reads.
    pub hot: crate::read::grain_cache::HotGrains,
}
