//! The medium and the unit's readiness: START STOP UNIT, PREVENT ALLOW MEDIUM REMOVAL and
//! REQUEST SENSE (SBC-4 5.25, 5.17; SPC-5 6.39).
//!
//! Lacuna volumes are never removable: for them START STOP UNIT and PREVENT ALLOW are
//! accepted and change nothing. A unit that reports itself removable (the reference
//! backend can, for conformance runs) gets the full model: eject and load, and removal
//! prevention held per I_T nexus until allowed, the nexus is lost, or a reset.

use std::collections::HashSet;

use crate::block::truncate;
use crate::dispatch::{CommandResult, Failure, Request};
use crate::sanitize;
use crate::sense::{AdditionalSense, Sense, SenseFormat, SenseKey};
use crate::target::ItNexus;

#[derive(Debug, Default)]
pub(crate) struct MediumState {
    ejected: bool,
    preventing: HashSet<ItNexus>,
}

impl MediumState {
    pub(crate) fn present(&self) -> bool {
        !self.ejected
    }

    pub(crate) fn forget_nexus(&mut self, nexus: &ItNexus) {
        self.preventing.remove(nexus);
    }

    pub(crate) fn reset(&mut self) {
        self.preventing.clear();
    }
}

/// START STOP UNIT.
pub(crate) fn start_stop_unit(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    let power_condition = cdb[4] >> 4;
    let no_flush = cdb[4] & 0x04 != 0;
    let load_eject = cdb[4] & 0x02 != 0;
    let start = cdb[4] & 0x01 != 0;
    if power_condition != 0 {
        // START and LOEJ are ignored when a power condition is requested (SBC-4 5.25);
        // power conditions have no meaning for an array volume.
        return Ok(Vec::new());
    }
    if !start && !no_flush {
        request
            .unit
            .flush()
            .map_err(|e| crate::block::storage_failure(e, true))?;
    }
    if !load_eject {
        return Ok(Vec::new());
    }
    if !request.unit.removable() {
        return Err(Sense::invalid_cdb_field(4, Some(1)).into());
    }
    let mut shared = request.state.lock();
    if !shared.medium.preventing.is_empty() {
        return Err(Sense::illegal_request(AdditionalSense::MEDIUM_REMOVAL_PREVENTED).into());
    }
    shared.medium.ejected = !start;
    Ok(Vec::new())
}

/// PREVENT ALLOW MEDIUM REMOVAL.
pub(crate) fn prevent_allow(request: &Request<'_>) -> CommandResult {
    let prevent = match request.cdb[4] & 0x03 {
        0 => false,
        1 => true,
        _ => return Err(Sense::invalid_cdb_field(4, Some(1)).into()),
    };
    if !request.unit.removable() {
        return Ok(Vec::new());
    }
    let mut shared = request.state.lock();
    if prevent {
        shared.medium.preventing.insert(request.nexus.clone());
    } else {
        shared.medium.preventing.remove(request.nexus);
    }
    Ok(Vec::new())
}

/// REQUEST SENSE: the pending unit attention (cleared by reporting it), or the unit's
/// readiness, as sense data with GOOD status.
pub(crate) fn request_sense(request: &Request<'_>) -> CommandResult {
    let format = requested_format(request.cdb)?;
    let pending = request.nexus_state.lock().take(request.unit.as_ref());
    let sense = if let Some(code) = pending {
        Sense::unit_attention(code)
    } else if request.state.sanitize_in_progress() {
        sanitize::in_progress_sense(request.state)
    } else if !request.state.medium_present() {
        Sense::new(SenseKey::NotReady, AdditionalSense::MEDIUM_NOT_PRESENT)
    } else {
        Sense::new(SenseKey::NoSense, AdditionalSense::NO_ADDITIONAL_SENSE)
    };
    Ok(truncate(sense.encode(format), usize::from(request.cdb[4])))
}

/// REQUEST SENSE addressed to a LUN that does not exist for this initiator.
pub(crate) fn request_sense_without_unit(cdb: &[u8], sense: Sense) -> CommandResult {
    if cdb.len() < 6 {
        return Err(Failure::Check(Sense::invalid_cdb_field(0, Some(7))));
    }
    let format = requested_format(cdb)?;
    Ok(truncate(sense.encode(format), usize::from(cdb[4])))
}

fn requested_format(cdb: &[u8]) -> Result<SenseFormat, Sense> {
    Ok(if cdb[1] & 0x01 != 0 {
        SenseFormat::Descriptor
    } else {
        SenseFormat::Fixed
    })
}
