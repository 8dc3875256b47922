//! Unit attention conditions, kept per I_T nexus and logical unit (SAM-5 5.14, SPC-5 4.5).
//!
//! Why per nexus: every initiator port must learn of a reset, a resize or a preempted
//! reservation exactly once, on its next command, however many other initiators have
//! already been told. Conditions that the backend announces by a counter (capacity
//! generation, LUN-map generation, soft-threshold crossings) are detected lazily when a
//! nexus next sends a command, so the backend never has to call into the SCSI layer.
//!
//! REPORTED LUNS DATA HAS CHANGED is told once per nexus, on whichever LU its next command
//! goes to, and besides on each administrative LU whose subsidiaries changed: an initiator
//! learns of a bind or an unbind on the protocol endpoint it manages vVols through, even
//! when its next command went to another LU. A nexus told on the endpoint is not told again
//! elsewhere for the same change.

use std::collections::{HashMap, VecDeque};

use crate::backend::{LogicalUnit, UnitId};
use crate::lun_map::LunMap;
use crate::sense::AdditionalSense;

/// Most conditions queued per nexus and unit; older ones are dropped first (they are
/// superseded by whatever comes after, and the initiator rescans on any of them).
const MAX_PENDING: usize = 16;

/// Commands that neither report nor clear a unit attention (SAM-5 5.14).
pub(crate) fn is_exempt(opcode: u8) -> bool {
    use crate::commands::opcode::{INQUIRY, REPORT_LUNS, REQUEST_SENSE};
    matches!(opcode, INQUIRY | REPORT_LUNS | REQUEST_SENSE)
}

#[derive(Debug)]
struct UnitAttentions {
    pending: VecDeque<AdditionalSense>,
    capacity_generation_seen: u64,
}

/// What the SCSI layer remembers about one I_T nexus.
#[derive(Debug)]
pub(crate) struct NexusState {
    /// The LUN map of this initiator, as of `lun_map_generation`.
    pub lun_map: LunMap,
    pub lun_map_generation: u64,
    lun_map_changed: bool,
    soft_threshold_events_seen: u64,
    soft_threshold_reached: bool,
    units: HashMap<UnitId, UnitAttentions>,
}

impl NexusState {
    pub(crate) fn new(
        lun_map: LunMap,
        lun_map_generation: u64,
        soft_threshold_events: u64,
    ) -> Self {
        Self {
            lun_map,
            lun_map_generation,
            lun_map_changed: false,
            soft_threshold_events_seen: soft_threshold_events,
            soft_threshold_reached: false,
            units: HashMap::new(),
        }
    }

    /// Installs a new LUN map and raises REPORTED LUNS DATA HAS CHANGED, for the nexus and
    /// on every administrative LU whose subsidiaries changed.
    pub(crate) fn replace_lun_map(&mut self, lun_map: LunMap, generation: u64) {
        assert!(generation >= self.lun_map_generation);
        for unit_id in self.lun_map.changed_conglomerates(&lun_map) {
            self.raise(&unit_id, AdditionalSense::REPORTED_LUNS_DATA_HAS_CHANGED);
        }
        self.lun_map = lun_map;
        self.lun_map_generation = generation;
        self.lun_map_changed = true;
    }

    /// Notes the backend's soft-threshold counter; an increase raises one condition.
    pub(crate) fn observe_soft_threshold(&mut self, events: u64) {
        if events > self.soft_threshold_events_seen {
            self.soft_threshold_events_seen = events;
            self.soft_threshold_reached = true;
        }
    }

    fn unit_entry(&mut self, unit: &dyn LogicalUnit) -> &mut UnitAttentions {
        self.units
            .entry(unit.unit_id())
            .or_insert_with(|| UnitAttentions {
                // A nexus meeting a unit for the first time sees it "power on".
                pending: VecDeque::from([AdditionalSense::POWER_ON_RESET_OR_BUS_DEVICE_RESET]),
                capacity_generation_seen: unit.capacity_generation(),
            })
    }

    /// Queues `code` for this nexus on `unit_id`, if the nexus has met the unit (a nexus
    /// that has not will see POWER ON first, which covers everything before it).
    pub(crate) fn raise(&mut self, unit_id: &UnitId, code: AdditionalSense) {
        if let Some(entry) = self.units.get_mut(unit_id) {
            if entry.pending.contains(&code) {
                return;
            }
            if entry.pending.len() == MAX_PENDING {
                entry.pending.pop_front();
            }
            entry.pending.push_back(code);
        }
    }

    /// Drops everything queued for `unit_id` and queues `code` (after a reset, earlier
    /// conditions are moot).
    pub(crate) fn reset(&mut self, unit_id: &UnitId, code: AdditionalSense) {
        if let Some(entry) = self.units.get_mut(unit_id) {
            entry.pending.clear();
            entry.pending.push_back(code);
        }
    }

    /// Takes the next condition to report on `unit`, clearing it.
    pub(crate) fn take(&mut self, unit: &dyn LogicalUnit) -> Option<AdditionalSense> {
        let capacity_generation = unit.capacity_generation();
        let entry = self.unit_entry(unit);
        if capacity_generation != entry.capacity_generation_seen {
            entry.capacity_generation_seen = capacity_generation;
            if !entry
                .pending
                .contains(&AdditionalSense::CAPACITY_DATA_HAS_CHANGED)
            {
                entry
                    .pending
                    .push_back(AdditionalSense::CAPACITY_DATA_HAS_CHANGED);
            }
        }
        if let Some(code) = entry.pending.pop_front() {
            if code == AdditionalSense::REPORTED_LUNS_DATA_HAS_CHANGED {
                self.lun_map_changed = false;
            }
            return Some(code);
        }
        if std::mem::take(&mut self.lun_map_changed) {
            return Some(AdditionalSense::REPORTED_LUNS_DATA_HAS_CHANGED);
        }
        if std::mem::take(&mut self.soft_threshold_reached) {
            return Some(AdditionalSense::THIN_PROVISIONING_SOFT_THRESHOLD_REACHED);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryBackend, MemoryUnitConfig};

    #[test]
    fn first_contact_is_power_on_then_nothing() {
        let backend = MemoryBackend::new();
        let unit = backend.create_unit(MemoryUnitConfig::thin("a", 1 << 20));
        let mut nexus = NexusState::new(LunMap::default(), 0, 0);
        assert_eq!(
            nexus.take(unit.as_ref()),
            Some(AdditionalSense::POWER_ON_RESET_OR_BUS_DEVICE_RESET)
        );
        assert_eq!(nexus.take(unit.as_ref()), None);
    }

    #[test]
    fn resize_lun_map_and_threshold_each_report_once() {
        let backend = MemoryBackend::new();
        let unit = backend.create_unit(MemoryUnitConfig::thin("a", 1 << 20));
        let mut nexus = NexusState::new(LunMap::default(), 0, 5);
        nexus.take(unit.as_ref());
        unit.resize(2 << 20);
        nexus.replace_lun_map(LunMap::default(), 1);
        nexus.observe_soft_threshold(5);
        nexus.observe_soft_threshold(6);
        let mut seen = Vec::new();
        while let Some(code) = nexus.take(unit.as_ref()) {
            seen.push(code);
        }
        assert_eq!(
            seen,
            vec![
                AdditionalSense::CAPACITY_DATA_HAS_CHANGED,
                AdditionalSense::REPORTED_LUNS_DATA_HAS_CHANGED,
                AdditionalSense::THIN_PROVISIONING_SOFT_THRESHOLD_REACHED,
            ]
        );
    }

    #[test]
    fn raise_is_deduplicated_and_reset_supersedes() {
        let backend = MemoryBackend::new();
        let unit = backend.create_unit(MemoryUnitConfig::thin("a", 1 << 20));
        let id = unit.unit_id();
        let mut nexus = NexusState::new(LunMap::default(), 0, 0);
        nexus.take(unit.as_ref());
        nexus.raise(&id, AdditionalSense::MODE_PARAMETERS_CHANGED);
        nexus.raise(&id, AdditionalSense::MODE_PARAMETERS_CHANGED);
        nexus.reset(&id, AdditionalSense::BUS_DEVICE_RESET_FUNCTION_OCCURRED);
        assert_eq!(
            nexus.take(unit.as_ref()),
            Some(AdditionalSense::BUS_DEVICE_RESET_FUNCTION_OCCURRED)
        );
        assert_eq!(nexus.take(unit.as_ref()), None);
    }
}
