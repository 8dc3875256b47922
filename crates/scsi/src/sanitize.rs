//! SANITIZE (SBC-4 5.30) is not offered: erasing a whole volume is a control-plane
//! operation in Lacuna (destroy and eradicate), not something a host should trigger
//! through the data path. The command answers INVALID COMMAND OPERATION CODE (it is not in
//! the command table); this module only holds the state the dispatcher consults, so the
//! NOT READY / SANITIZE IN PROGRESS rules are in place if it is ever offered.

use crate::sense::{AdditionalSense, Sense, SenseKey};

#[derive(Debug, Default)]
pub(crate) struct SanitizeState {}

impl SanitizeState {
    pub(crate) fn in_progress(&self) -> bool {
        false
    }
}

/// NOT READY, SANITIZE IN PROGRESS.
pub(crate) fn in_progress_sense(_state: &crate::unit_state::UnitState) -> Sense {
    Sense::new(
        SenseKey::NotReady,
        AdditionalSense::NOT_READY_SANITIZE_IN_PROGRESS,
    )
}
