//! The queues of background work that versions leave behind, worked off by
//! `lifecycle` (history sweeps) and `reference_bits` (data bits of
//! references).

use std::collections::{BTreeMap, VecDeque};

use parking_lot::Mutex;

/// Background work that versions leave behind: history to sweep once no
/// snapshot needs it, and the data bits of references to settle.
pub(crate) struct VersionJobs {
    /// Volumes whose snapshot history may hold versions no snapshot needs any more.
    pub sweep_pending:
        Mutex<BTreeMap<crate::ids::VolumeId, crate::versions::lifecycle::SweepCursor>>,
    /// Reference ranges whose data bits the background job still has to settle.
    pub bits_pending: Mutex<VecDeque<crate::versions::reference_bits::PendingBits>>,
    /// The volume whose job `bits_step` holds out of the queue (lock after
    /// `bits_pending`).
    pub bits_in_progress: Mutex<Option<crate::ids::VolumeId>>,
}
