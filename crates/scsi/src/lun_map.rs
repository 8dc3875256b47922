//! One initiator's LUN map, as of one LUN-map generation: which unit a command's 8-byte
//! LUN reaches, and which LUNs REPORT LUNS lists.
//!
//! Why an index built once per map: a protocol endpoint may have thousands of vVols bound
//! beneath it, and every command resolves its LUN; the map changes only when the backend
//! bumps its generation (a bind, an unbind, a grant). A two-level LUN reaches a unit only
//! through an administrative LU of this very map, and only at an id bound beneath it for
//! this initiator: a subsidiary unbound from the map is unreachable from the next command
//! on, whichever form of its LUN is sent.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::backend::{LogicalUnit, LunEntry, Subsidiary, UnitId};
use crate::lun::{Lun, LunAddress, SecondLevelId, FIRST_LEVEL_LUNS};

/// A unit's place with respect to logical unit conglomerates (SAM-5), at one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Membership {
    /// An ordinary LU, in no conglomerate.
    Standalone,
    /// The administrative LU of a conglomerate (a protocol endpoint).
    Administrative,
    /// A subsidiary LU of a conglomerate (a bound vVol).
    Subsidiary,
}

/// What a LUN reaches.
#[derive(Clone)]
pub(crate) struct Addressed {
    pub unit: Arc<dyn LogicalUnit>,
    pub membership: Membership,
}

/// The LUN map of one nexus.
#[derive(Default)]
pub(crate) struct LunMap {
    /// As the backend listed them (REPORT LUNS keeps this order).
    entries: Vec<LunEntry>,
    by_address: HashMap<LunAddress, Addressed>,
}

impl std::fmt::Debug for LunMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.entries).finish()
    }
}

impl LunMap {
    /// Indexes `entries`, which must keep [`crate::backend::Backend::units_for`]'s
    /// promises: first-level LUNs below 16384 and unique, ids unique beneath each
    /// administrative LU.
    pub(crate) fn new(entries: Vec<LunEntry>) -> Self {
        let mut by_address = HashMap::new();
        for entry in &entries {
            assert!(
                entry.lun < FIRST_LEVEL_LUNS,
                "LUN {} is beyond 14-bit flat space",
                entry.lun
            );
            let first = by_address.insert(
                LunAddress::SingleLevel(entry.lun),
                Addressed {
                    unit: Arc::clone(&entry.unit),
                    membership: membership_of(entry),
                },
            );
            assert!(first.is_none(), "LUN {} is mapped twice", entry.lun);
            for subsidiary in entry.subsidiaries.iter().flatten() {
                let address = LunAddress::Subsidiary {
                    administrative: entry.lun,
                    id: subsidiary.id,
                };
                let addressed = Addressed {
                    unit: Arc::clone(&subsidiary.unit),
                    membership: Membership::Subsidiary,
                };
                let first = by_address.insert(address, addressed);
                assert!(
                    first.is_none(),
                    "id {} is bound twice beneath LUN {}",
                    subsidiary.id,
                    entry.lun
                );
            }
        }
        Self {
            entries,
            by_address,
        }
    }

    /// The unit `lun` reaches, if any.
    pub(crate) fn resolve(&self, lun: Lun) -> Option<&Addressed> {
        self.by_address.get(&lun.address()?)
    }

    /// Every unit the map reaches, at every address (a unit may have several).
    pub(crate) fn units(&self) -> impl Iterator<Item = &Arc<dyn LogicalUnit>> {
        self.by_address.values().map(|addressed| &addressed.unit)
    }

    /// The single-level LUNs (of ordinary and administrative LUs: subsidiaries have none)
    /// whose membership `include` accepts, in the backend's order.
    pub(crate) fn first_level_luns(&self, include: impl Fn(Membership) -> bool) -> Vec<Lun> {
        self.entries
            .iter()
            .filter(|entry| include(membership_of(entry)))
            .map(|entry| Lun::single_level(entry.lun))
            .collect()
    }

    /// When `lun` addresses an administrative LU: its own LUN, then those of the
    /// subsidiaries bound beneath it. `None` for any other LUN.
    pub(crate) fn conglomerate(&self, lun: Lun) -> Option<Vec<Lun>> {
        let Some(LunAddress::SingleLevel(number)) = lun.address() else {
            return None;
        };
        let entry = self.entries.iter().find(|entry| entry.lun == number)?;
        let subsidiaries = entry.subsidiaries.as_ref()?;
        let mut luns = vec![Lun::single_level(number)];
        luns.extend(
            subsidiaries
                .iter()
                .map(|subsidiary| Lun::subsidiary(number, subsidiary.id)),
        );
        Some(luns)
    }

    /// The administrative LUs of `newer` whose subsidiaries differ from what this map had
    /// beneath the same unit at the same LUN: each must report REPORTED LUNS DATA HAS
    /// CHANGED itself, whatever LU the nexus next sends a command to.
    pub(crate) fn changed_conglomerates(&self, newer: &LunMap) -> Vec<UnitId> {
        newer
            .entries
            .iter()
            .filter_map(|entry| {
                let subsidiaries = entry.subsidiaries.as_ref()?;
                let unit_id = entry.unit.unit_id();
                let before = self
                    .entries
                    .iter()
                    .find(|old| old.lun == entry.lun && old.unit.unit_id() == unit_id)
                    .and_then(|old| old.subsidiaries.as_ref());
                let unchanged = before.is_some_and(|old| bindings(old) == bindings(subsidiaries));
                (!unchanged).then_some(unit_id)
            })
            .collect()
    }
}

fn membership_of(entry: &LunEntry) -> Membership {
    match entry.subsidiaries {
        Some(_) => Membership::Administrative,
        None => Membership::Standalone,
    }
}

/// What is bound beneath an administrative LU, as a comparable set.
fn bindings(subsidiaries: &[Subsidiary]) -> HashSet<(SecondLevelId, UnitId)> {
    subsidiaries
        .iter()
        .map(|subsidiary| (subsidiary.id, subsidiary.unit.unit_id()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryBackend, MemoryUnitConfig};

    fn unit(backend: &MemoryBackend, name: &str) -> Arc<dyn LogicalUnit> {
        backend.create_unit(MemoryUnitConfig::thin(name, 1 << 20))
    }

    fn id(value: u64) -> SecondLevelId {
        SecondLevelId::new(value).unwrap()
    }

    fn entry(
        lun: u64,
        unit: &Arc<dyn LogicalUnit>,
        bound: &[(u64, &Arc<dyn LogicalUnit>)],
    ) -> LunEntry {
        LunEntry {
            lun,
            unit: Arc::clone(unit),
            subsidiaries: Some(
                bound
                    .iter()
                    .map(|(value, unit)| Subsidiary {
                        id: id(*value),
                        unit: Arc::clone(unit),
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn a_subsidiary_is_reached_only_beneath_its_administrative_lu() {
        let backend = MemoryBackend::new();
        let (pe, vvol, plain) = (
            unit(&backend, "pe"),
            unit(&backend, "vvol"),
            unit(&backend, "plain"),
        );
        let map = LunMap::new(vec![
            LunEntry {
                lun: 0,
                unit: Arc::clone(&plain),
                subsidiaries: None,
            },
            entry(1, &pe, &[(0xa6, &vvol)]),
        ]);
        let reached = map.resolve(Lun::subsidiary(1, id(0xa6))).unwrap();
        assert_eq!(reached.unit.unit_id(), vvol.unit_id());
        assert_eq!(reached.membership, Membership::Subsidiary);
        assert_eq!(
            map.resolve(Lun::single_level(1)).unwrap().membership,
            Membership::Administrative
        );
        assert!(map.resolve(Lun::subsidiary(1, id(0xa7))).is_none());
        assert!(map.resolve(Lun::subsidiary(0, id(0xa6))).is_none());
        assert!(map.resolve(Lun::subsidiary(2, id(0xa6))).is_none());
        assert_eq!(map.units().count(), 3);
        assert_eq!(map.conglomerate(Lun::single_level(0)), None);
        assert_eq!(
            map.conglomerate(Lun::single_level(1)),
            Some(vec![Lun::single_level(1), Lun::subsidiary(1, id(0xa6))])
        );
    }

    #[test]
    fn only_conglomerates_whose_bindings_changed_are_reported() {
        let backend = MemoryBackend::new();
        let (pe, other_pe) = (unit(&backend, "pe"), unit(&backend, "pe2"));
        let (a, b) = (unit(&backend, "a"), unit(&backend, "b"));
        let before = LunMap::new(vec![
            entry(1, &pe, &[(1, &a)]),
            entry(2, &other_pe, &[(1, &b)]),
        ]);
        let after = LunMap::new(vec![
            entry(1, &pe, &[(1, &a), (2, &b)]),
            entry(2, &other_pe, &[(1, &b)]),
        ]);
        assert_eq!(before.changed_conglomerates(&after), vec![pe.unit_id()]);
        assert!(after.changed_conglomerates(&after).is_empty());
    }

    #[test]
    #[should_panic(expected = "bound twice")]
    fn an_id_bound_twice_is_a_backend_bug() {
        let backend = MemoryBackend::new();
        let (pe, a) = (unit(&backend, "pe"), unit(&backend, "a"));
        LunMap::new(vec![entry(1, &pe, &[(1, &a), (1, &a)])]);
    }
}
