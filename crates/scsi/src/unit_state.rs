//! What the SCSI layer keeps per logical unit, shared by every nexus that reaches it:
//! mode parameters, reservations, medium state, copy results and the range lock.
//!
//! Why here and not in the backend: all of it is SCSI protocol state with no meaning to
//! the engine. It lives as long as the core (it is small), keyed by the unit's id, so a
//! unit mapped at different LUNs for different initiators is still one unit.

use parking_lot::{Mutex, MutexGuard};

use crate::medium::MediumState;
use crate::mode::ModeState;
use crate::range_lock::RangeLock;
use crate::reservation::Reservations;
use crate::sanitize::SanitizeState;
use crate::sense::SenseFormat;
use crate::target::ItNexus;
use crate::xcopy::CopyResults;

#[derive(Default)]
pub(crate) struct UnitShared {
    pub mode: ModeState,
    pub reservations: Reservations,
    pub medium: MediumState,
    pub copies: CopyResults,
}

pub(crate) struct UnitState {
    pub range_lock: RangeLock,
    pub sanitize: SanitizeState,
    shared: Mutex<UnitShared>,
}

impl UnitState {
    pub(crate) fn new() -> Self {
        Self {
            range_lock: RangeLock::default(),
            sanitize: SanitizeState::default(),
            shared: Mutex::new(UnitShared::default()),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, UnitShared> {
        self.shared.lock()
    }

    pub(crate) fn sense_format(&self) -> SenseFormat {
        if self.lock().mode.descriptor_sense() {
            SenseFormat::Descriptor
        } else {
            SenseFormat::Fixed
        }
    }

    pub(crate) fn software_write_protected(&self) -> bool {
        self.lock().mode.software_write_protect()
    }

    pub(crate) fn medium_present(&self) -> bool {
        self.lock().medium.present()
    }

    pub(crate) fn sanitize_in_progress(&self) -> bool {
        self.sanitize.in_progress()
    }

    /// The nexus is gone: its SPC-2 reservation and medium-removal prevention end.
    pub(crate) fn forget_nexus(&self, nexus: &ItNexus) {
        let mut shared = self.lock();
        shared.reservations.forget_nexus(nexus);
        shared.medium.forget_nexus(nexus);
        shared.copies.forget_nexus(nexus);
    }

    /// Logical unit reset.
    pub(crate) fn reset(&self) {
        let mut shared = self.lock();
        shared.reservations.reset();
        shared.medium.reset();
    }
}
