//! Space figures kept beside the writer state, for readers that must not
//! take the writer mutex: the free bytes as of the last commit (writers skip
//! the mutex when there is plenty) and whether use is above the soft threshold
//! (for its edge-triggered event).

use std::sync::atomic::{AtomicBool, AtomicU64};

/// Space figures read without the writer mutex.
pub(crate) struct SpaceWatch {
    /// Physical bytes free as of the last commit: lets writers skip the writer
    /// mutex when there is plenty of room (see `make_room`).
    pub free_bytes_hint: AtomicU64,
    /// Whether physical use is above the soft threshold (for edge detection).
    pub above_soft_threshold: AtomicBool,
}
