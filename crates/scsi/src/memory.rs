//! The reference backend: logical units held in memory, with LUN masking.
//!
//! For tests and conformance runs only, not for production: nothing is durable and the
//! whole unit lives in RAM. It exists so the SCSI layer can be exercised end to end
//! (including thin provisioning, out-of-space, resize and LUN-map changes) without the
//! engine, and so its behaviour defines what the engine adapter must match. It presents
//! protocol endpoints too: an [`AdministrativeUnit`] mapped like any unit, with memory
//! units bound beneath it as its subsidiaries (vVols).
//!
//! Storage is sparse at the physical block size (the "grain"): a grain that was never
//! written, or was unmapped, holds no memory and reads as zeros, which is what GET LBA
//! STATUS reports as deallocated.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Largest copy the reference backend calls quick (a memcpy of this much).
const MAX_QUICK_COPY_BYTES: u64 = 64 * 1024;

use parking_lot::{Mutex, RwLock};

use crate::backend::{
    AdministrativeUnit, Backend, BackendError, Extent, LogicalUnit, LunEntry, Provisioning,
    SecondLevelId, Subsidiary, UnitId,
};

/// How to create a memory unit.
#[derive(Clone, Debug)]
pub struct MemoryUnitConfig {
    pub name: String,
    pub size_bytes: u64,
    pub block_size_bytes: u32,
    pub physical_block_size_bytes: u32,
    pub provisioning: Provisioning,
    pub read_only: bool,
    pub removable: bool,
}

impl MemoryUnitConfig {
    /// A thin unit with 512-byte logical and 4096-byte physical blocks, like Lacuna volumes.
    pub fn thin(name: &str, size_bytes: u64) -> Self {
        Self {
            name: name.to_string(),
            size_bytes,
            block_size_bytes: 512,
            physical_block_size_bytes: 4096,
            provisioning: Provisioning::Thin,
            read_only: false,
            removable: false,
        }
    }
}

struct UnitData {
    size_bytes: u64,
    /// Grain index → grain bytes (`grain_size_bytes` long). Absent: a hole.
    grains: HashMap<u64, Box<[u8]>>,
}

/// Shared between a backend and its units: the array-wide "out of space" switch.
#[derive(Default)]
struct Space {
    exhausted: AtomicBool,
}

/// One in-memory logical unit.
pub struct MemoryUnit {
    id: UnitId,
    name: String,
    block_size_bytes: u32,
    grain_size_bytes: u32,
    provisioning: Provisioning,
    removable: bool,
    read_only: AtomicBool,
    /// Whether `read_from_memory` finds the data in memory (tests set it false to
    /// stand for data that would have to come from a disk).
    cached: AtomicBool,
    capacity_generation: AtomicU64,
    space: Arc<Space>,
    data: RwLock<UnitData>,
}

impl MemoryUnit {
    fn new(id: UnitId, config: &MemoryUnitConfig, space: Arc<Space>) -> Self {
        assert!(config.block_size_bytes.is_power_of_two() && config.block_size_bytes >= 512);
        assert!(config.physical_block_size_bytes.is_power_of_two());
        assert!(config.physical_block_size_bytes >= config.block_size_bytes);
        assert_eq!(config.size_bytes % u64::from(config.block_size_bytes), 0);
        Self {
            id,
            name: config.name.clone(),
            block_size_bytes: config.block_size_bytes,
            grain_size_bytes: config.physical_block_size_bytes,
            provisioning: config.provisioning,
            removable: config.removable,
            read_only: AtomicBool::new(config.read_only),
            cached: AtomicBool::new(true),
            capacity_generation: AtomicU64::new(0),
            space,
            data: RwLock::new(UnitData {
                size_bytes: config.size_bytes,
                grains: HashMap::new(),
            }),
        }
    }

    /// Changes the capacity; shrinking drops the data beyond the new end.
    pub fn resize(&self, size_bytes: u64) {
        assert_eq!(size_bytes % u64::from(self.block_size_bytes), 0);
        let mut data = self.data.write();
        let grain = u64::from(self.grain_size_bytes);
        data.grains.retain(|index, _| index * grain < size_bytes);
        data.size_bytes = size_bytes;
        self.capacity_generation.fetch_add(1, Ordering::SeqCst);
    }

    pub fn set_read_only(&self, read_only: bool) {
        self.read_only.store(read_only, Ordering::SeqCst);
    }

    /// `false`: `read_from_memory` refuses, as if the data were on a disk
    /// (`read` still reads it).
    pub fn set_cached(&self, cached: bool) {
        self.cached.store(cached, Ordering::SeqCst);
    }

    /// Bytes of memory held by mapped grains (what a thin unit "uses").
    pub fn mapped_bytes(&self) -> u64 {
        self.data.read().grains.len() as u64 * u64::from(self.grain_size_bytes)
    }

    fn check_range(data: &UnitData, offset_bytes: u64, len_bytes: u64) -> Result<(), BackendError> {
        match offset_bytes.checked_add(len_bytes) {
            Some(end) if end <= data.size_bytes => Ok(()),
            _ => Err(BackendError::OutOfRange),
        }
    }

    fn check_writable(&self) -> Result<(), BackendError> {
        if self.read_only.load(Ordering::SeqCst) {
            return Err(BackendError::ReadOnly);
        }
        Ok(())
    }

    /// Calls `visit(grain_index, offset_in_grain, offset_in_range, len)` for each grain piece.
    fn for_each_piece(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        mut visit: impl FnMut(u64, usize, usize, usize),
    ) {
        let grain = u64::from(self.grain_size_bytes);
        let mut done_bytes = 0u64;
        while done_bytes < len_bytes {
            let position = offset_bytes + done_bytes;
            let index = position / grain;
            let in_grain = position % grain;
            let piece = (grain - in_grain).min(len_bytes - done_bytes);
            visit(
                index,
                in_grain as usize,
                done_bytes as usize,
                piece as usize,
            );
            done_bytes += piece;
        }
    }

    fn zero_range(&self, data: &mut UnitData, offset_bytes: u64, len_bytes: u64) {
        let grain_size = self.grain_size_bytes as usize;
        self.for_each_piece(offset_bytes, len_bytes, |index, in_grain, _, piece| {
            if piece == grain_size {
                data.grains.remove(&index);
            } else if let Some(bytes) = data.grains.get_mut(&index) {
                bytes[in_grain..in_grain + piece].fill(0);
                if bytes.iter().all(|&b| b == 0) {
                    data.grains.remove(&index);
                }
            }
        });
    }
}

impl LogicalUnit for MemoryUnit {
    fn unit_id(&self) -> UnitId {
        self.id
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn size_bytes(&self) -> u64 {
        self.data.read().size_bytes
    }

    fn block_size_bytes(&self) -> u32 {
        self.block_size_bytes
    }

    fn physical_block_size_bytes(&self) -> u32 {
        self.grain_size_bytes
    }

    fn provisioning(&self) -> Provisioning {
        self.provisioning
    }

    fn capacity_generation(&self) -> u64 {
        self.capacity_generation.load(Ordering::SeqCst)
    }

    fn read_only(&self) -> bool {
        self.read_only.load(Ordering::SeqCst)
    }

    fn removable(&self) -> bool {
        self.removable
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        let data = self.data.read();
        Self::check_range(&data, offset_bytes, buf.len() as u64)?;
        self.for_each_piece(
            offset_bytes,
            buf.len() as u64,
            |index, in_grain, at, piece| {
                let target = &mut buf[at..at + piece];
                match data.grains.get(&index) {
                    Some(bytes) => target.copy_from_slice(&bytes[in_grain..in_grain + piece]),
                    None => target.fill(0),
                }
            },
        );
        Ok(())
    }

    fn read_from_memory(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<bool, BackendError> {
        if !self.cached.load(Ordering::SeqCst) {
            return Ok(false);
        }
        self.read(offset_bytes, buf)?;
        Ok(true)
    }

    fn write(&self, offset_bytes: u64, bytes: &[u8], _fua: bool) -> Result<(), BackendError> {
        self.check_writable()?;
        let mut data = self.data.write();
        Self::check_range(&data, offset_bytes, bytes.len() as u64)?;
        let exhausted = self.space.exhausted.load(Ordering::SeqCst);
        let grain_size = self.grain_size_bytes as usize;
        let mut allocation_failed = false;
        // Check first, so a failed write changes nothing.
        self.for_each_piece(offset_bytes, bytes.len() as u64, |index, _, _, _| {
            if exhausted && !data.grains.contains_key(&index) {
                allocation_failed = true;
            }
        });
        if allocation_failed {
            return Err(BackendError::NoSpace);
        }
        self.for_each_piece(
            offset_bytes,
            bytes.len() as u64,
            |index, in_grain, at, piece| {
                let grain = data
                    .grains
                    .entry(index)
                    .or_insert_with(|| vec![0u8; grain_size].into_boxed_slice());
                grain[in_grain..in_grain + piece].copy_from_slice(&bytes[at..at + piece]);
            },
        );
        Ok(())
    }

    fn unmap(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), BackendError> {
        self.check_writable()?;
        let mut data = self.data.write();
        Self::check_range(&data, offset_bytes, len_bytes)?;
        self.zero_range(&mut data, offset_bytes, len_bytes);
        Ok(())
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        _allow_unmap: bool,
    ) -> Result<(), BackendError> {
        // Zeros are a metadata-only hole here either way; a thick engine would keep the
        // reservation, which this backend does not model.
        self.unmap(offset_bytes, len_bytes)
    }

    fn flush(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn extents(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, BackendError> {
        assert!(max_extents > 0);
        let data = self.data.read();
        Self::check_range(&data, offset_bytes, len_bytes)?;
        let mut extents: Vec<Extent> = Vec::new();
        let mut full = false;
        self.for_each_piece(offset_bytes, len_bytes, |index, _, _, piece| {
            if full {
                return;
            }
            let mapped = data.grains.contains_key(&index);
            if let Some(last) = extents.last_mut().filter(|last| last.mapped == mapped) {
                last.len_bytes += piece as u64;
            } else if extents.len() == max_extents {
                full = true;
            } else {
                extents.push(Extent {
                    len_bytes: piece as u64,
                    mapped,
                });
            }
        });
        Ok(extents)
    }

    /// The reference backend copies bytes: quick only while there are few.
    fn copy_is_quick(
        &self,
        _source: &dyn LogicalUnit,
        _source_offset_bytes: u64,
        _destination_offset_bytes: u64,
        len_bytes: u64,
    ) -> bool {
        len_bytes <= MAX_QUICK_COPY_BYTES
    }

    fn copy_from(
        &self,
        source: &dyn LogicalUnit,
        source_offset_bytes: u64,
        destination_offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<(), BackendError> {
        self.check_writable()?;
        // Point in time: take the source bytes first, then write them (handles overlap).
        let mut buffer =
            vec![0u8; usize::try_from(len_bytes).map_err(|_| BackendError::OutOfRange)?];
        source.read(source_offset_bytes, &mut buffer)?;
        let mut data = self.data.write();
        Self::check_range(&data, destination_offset_bytes, len_bytes)?;
        let grain_size = self.grain_size_bytes as usize;
        self.for_each_piece(
            destination_offset_bytes,
            len_bytes,
            |index, in_grain, at, piece| {
                let bytes = &buffer[at..at + piece];
                if bytes.iter().all(|&b| b == 0) && !data.grains.contains_key(&index) {
                    return; // A hole copied onto a hole stays a hole.
                }
                let grain = data
                    .grains
                    .entry(index)
                    .or_insert_with(|| vec![0u8; grain_size].into_boxed_slice());
                grain[in_grain..in_grain + piece].copy_from_slice(bytes);
            },
        );
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Which initiators see a unit at which LUN.
#[derive(Clone)]
struct Mapping {
    /// `None`: every initiator.
    initiator_name: Option<String>,
    lun: u64,
    unit: Arc<dyn LogicalUnit>,
    /// Some: an administrative unit, with what is bound beneath it.
    subsidiaries: Option<Vec<Subsidiary>>,
}

/// The in-memory array: units, LUN masking, the soft-threshold counter and a "no space"
/// switch.
#[derive(Default)]
pub struct MemoryBackend {
    mappings: Mutex<Vec<Mapping>>,
    next_unit_number: AtomicU64,
    lun_map_generation: AtomicU64,
    soft_threshold_events: AtomicU64,
    space: Arc<Space>,
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates a unit (not yet visible to anyone).
    pub fn create_unit(&self, config: MemoryUnitConfig) -> Arc<MemoryUnit> {
        Arc::new(MemoryUnit::new(
            self.next_unit_id(),
            &config,
            Arc::clone(&self.space),
        ))
    }

    fn next_unit_id(&self) -> UnitId {
        let number = self.next_unit_number.fetch_add(1, Ordering::SeqCst) + 1;
        let mut id = [0u8; 16];
        // NAA 6, then an arbitrary 24-bit company id ("LCN"), then the unit number.
        id[0] = 0x60;
        id[1..4].copy_from_slice(b"LCN");
        id[8..16].copy_from_slice(&number.to_be_bytes());
        id
    }

    /// Makes `unit` visible at `lun` to `initiator_name` (or to every initiator).
    pub fn map(&self, initiator_name: Option<&str>, lun: u64, unit: &Arc<MemoryUnit>) {
        self.install(Mapping {
            initiator_name: initiator_name.map(str::to_string),
            lun,
            unit: Arc::clone(unit) as Arc<dyn LogicalUnit>,
            subsidiaries: None,
        });
    }

    /// Makes a new administrative unit (a protocol endpoint with nothing bound beneath
    /// it yet) visible at `lun` to `initiator_name` (or to every initiator).
    pub fn map_administrative(
        &self,
        initiator_name: Option<&str>,
        lun: u64,
        name: &str,
    ) -> Arc<AdministrativeUnit> {
        let unit = Arc::new(AdministrativeUnit::new(
            self.next_unit_id(),
            name.to_string(),
        ));
        self.install(Mapping {
            initiator_name: initiator_name.map(str::to_string),
            lun,
            unit: Arc::clone(&unit) as Arc<dyn LogicalUnit>,
            subsidiaries: Some(Vec::new()),
        });
        unit
    }

    fn install(&self, mapping: Mapping) {
        let mut mappings = self.mappings.lock();
        mappings.retain(|m| !(m.lun == mapping.lun && m.initiator_name == mapping.initiator_name));
        mappings.push(mapping);
        self.lun_map_generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Binds `unit` as subsidiary `id` beneath the administrative unit mapped at `lun`
    /// for `initiator_name` (or for every initiator), replacing what `id` named.
    pub fn bind(
        &self,
        initiator_name: Option<&str>,
        lun: u64,
        id: SecondLevelId,
        unit: &Arc<MemoryUnit>,
    ) {
        self.change_bindings(initiator_name, lun, |subsidiaries| {
            subsidiaries.retain(|s| s.id != id);
            subsidiaries.push(Subsidiary {
                id,
                unit: Arc::clone(unit) as Arc<dyn LogicalUnit>,
            });
        });
    }

    /// Unbinds subsidiary `id` from beneath the administrative unit at `lun`.
    pub fn unbind(&self, initiator_name: Option<&str>, lun: u64, id: SecondLevelId) {
        self.change_bindings(initiator_name, lun, |subsidiaries| {
            subsidiaries.retain(|s| s.id != id);
        });
    }

    fn change_bindings(
        &self,
        initiator_name: Option<&str>,
        lun: u64,
        change: impl FnOnce(&mut Vec<Subsidiary>),
    ) {
        let mut mappings = self.mappings.lock();
        let subsidiaries = mappings
            .iter_mut()
            .find(|m| m.lun == lun && m.initiator_name.as_deref() == initiator_name)
            .and_then(|m| m.subsidiaries.as_mut())
            .unwrap_or_else(|| panic!("no administrative unit is mapped at LUN {lun}"));
        change(subsidiaries);
        self.lun_map_generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Removes the mapping of `lun` for `initiator_name` (or the all-initiators mapping).
    pub fn unmap(&self, initiator_name: Option<&str>, lun: u64) {
        let mut mappings = self.mappings.lock();
        mappings.retain(|m| !(m.lun == lun && m.initiator_name.as_deref() == initiator_name));
        self.lun_map_generation.fetch_add(1, Ordering::SeqCst);
    }

    /// While set, writes that need new space fail with [`BackendError::NoSpace`].
    pub fn set_no_space(&self, exhausted: bool) {
        self.space.exhausted.store(exhausted, Ordering::SeqCst);
    }

    /// Records one crossing of the soft space threshold.
    pub fn cross_soft_threshold(&self) {
        self.soft_threshold_events.fetch_add(1, Ordering::SeqCst);
    }
}

impl Backend for MemoryBackend {
    fn units_for(&self, initiator_name: &str) -> Vec<LunEntry> {
        let mappings = self.mappings.lock();
        let mut entries: Vec<LunEntry> = Vec::new();
        // Initiator-specific mappings win over all-initiator ones at the same LUN.
        for specific in [true, false] {
            for mapping in mappings.iter() {
                let matches = match &mapping.initiator_name {
                    Some(name) => specific && name == initiator_name,
                    None => !specific,
                };
                if matches && entries.iter().all(|e| e.lun != mapping.lun) {
                    entries.push(LunEntry {
                        lun: mapping.lun,
                        unit: Arc::clone(&mapping.unit),
                        subsidiaries: mapping.subsidiaries.clone(),
                    });
                }
            }
        }
        entries.sort_by_key(|e| e.lun);
        entries
    }

    fn lun_map_generation(&self) -> u64 {
        self.lun_map_generation.load(Ordering::SeqCst)
    }

    fn soft_threshold_events(&self) -> u64 {
        self.soft_threshold_events.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit() -> (MemoryBackend, Arc<MemoryUnit>) {
        let backend = MemoryBackend::new();
        let unit = backend.create_unit(MemoryUnitConfig::thin("a", 1 << 20));
        (backend, unit)
    }

    #[test]
    fn unwritten_reads_zero_and_written_reads_back() {
        let (_, unit) = unit();
        let mut buf = vec![0xffu8; 1024];
        unit.read(512, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        unit.write(4000, &[7u8; 200], false).unwrap();
        let mut buf = vec![0xffu8; 300];
        unit.read(3950, &mut buf).unwrap();
        assert!(buf[..50].iter().all(|&b| b == 0));
        assert!(buf[50..250].iter().all(|&b| b == 7));
        assert!(buf[250..].iter().all(|&b| b == 0));
    }

    #[test]
    fn unmap_makes_holes_and_extents_report_them() {
        let (_, unit) = unit();
        unit.write(0, &vec![1u8; 16384], false).unwrap();
        unit.unmap(4096, 8192).unwrap();
        let extents = unit.extents(0, 16384, 16).unwrap();
        assert_eq!(
            extents,
            vec![
                Extent {
                    len_bytes: 4096,
                    mapped: true
                },
                Extent {
                    len_bytes: 8192,
                    mapped: false
                },
                Extent {
                    len_bytes: 4096,
                    mapped: true
                },
            ]
        );
        assert_eq!(unit.extents(0, 16384, 2).unwrap().len(), 2);
        assert_eq!(unit.mapped_bytes(), 8192);
    }

    #[test]
    fn no_space_refuses_new_allocation_but_allows_overwrite() {
        let (backend, unit) = unit();
        unit.write(0, &[1u8; 512], false).unwrap();
        backend.set_no_space(true);
        assert_eq!(unit.write(0, &[2u8; 512], false), Ok(()));
        assert_eq!(
            unit.write(8192, &[2u8; 512], false),
            Err(BackendError::NoSpace)
        );
    }

    #[test]
    fn copy_from_overlapping_self_is_point_in_time() {
        let (_, unit) = unit();
        let pattern: Vec<u8> = (0..8192u32).map(|i| (i / 512) as u8 + 1).collect();
        unit.write(0, &pattern, false).unwrap();
        unit.copy_from(unit.as_ref(), 0, 1024, 8192).unwrap();
        let mut buf = vec![0u8; 8192];
        unit.read(1024, &mut buf).unwrap();
        assert_eq!(buf, pattern);
    }

    #[test]
    fn binding_beneath_an_administrative_unit_moves_the_generation() {
        let backend = MemoryBackend::new();
        let vvol = backend.create_unit(MemoryUnitConfig::thin("vvol", 1 << 20));
        let pe = backend.map_administrative(Some("iqn.x"), 3, "pe");
        assert_eq!(pe.size_bytes(), 0);
        let id = SecondLevelId::new(0xa6).unwrap();
        let before = backend.lun_map_generation();
        backend.bind(Some("iqn.x"), 3, id, &vvol);
        assert!(backend.lun_map_generation() > before);
        let entries = backend.units_for("iqn.x");
        let bound = entries[0].subsidiaries.as_ref().unwrap();
        assert_eq!((bound[0].id, bound[0].unit.unit_id()), (id, vvol.unit_id()));
        backend.unbind(Some("iqn.x"), 3, id);
        assert!(backend.units_for("iqn.x")[0]
            .subsidiaries
            .as_ref()
            .unwrap()
            .is_empty());
        assert!(backend.units_for("iqn.y").is_empty());
    }

    #[test]
    fn masking_specific_mapping_wins_and_generation_moves() {
        let backend = MemoryBackend::new();
        let a = backend.create_unit(MemoryUnitConfig::thin("a", 1 << 20));
        let b = backend.create_unit(MemoryUnitConfig::thin("b", 1 << 20));
        let before = backend.lun_map_generation();
        backend.map(None, 0, &a);
        backend.map(Some("iqn.x"), 0, &b);
        assert!(backend.lun_map_generation() > before);
        assert_eq!(backend.units_for("iqn.x")[0].unit.unit_id(), b.unit_id());
        assert_eq!(backend.units_for("iqn.y")[0].unit.unit_id(), a.unit_id());
        backend.unmap(None, 0);
        assert!(backend.units_for("iqn.y").is_empty());
    }
}
