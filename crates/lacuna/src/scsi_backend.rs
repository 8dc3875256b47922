//! Adapts engine volumes to the SCSI layer's storage traits, and the host registry
//! to the iSCSI transport's access policy: the only place that knows both sides.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lacuna_engine::{Engine, EngineError, ExtentState, Provisioning, Snapshot, Volume};
use lacuna_iscsi::{AccessPolicy, ChapCredentials, ChapRequirement};
use lacuna_monitor::{Direction, Meter, Monitor, Protocol};
use lacuna_scsi::backend::{
    self, AdministrativeUnit, Backend, BackendError, Extent, LogicalUnit, LunEntry, SecondLevelId,
    Subsidiary, UnitId,
};
use parking_lot::Mutex;

use crate::hosts::{HostRegistry, LunSpec};

/// File holding the array's random identity (hex), from which unit ids derive.
pub const ARRAY_ID_FILE: &str = "array-id";

/// Loads the array id, creating it on first start.
pub fn array_id(data_dir: &Path) -> anyhow::Result<[u8; 16]> {
    let path = data_dir.join(ARRAY_ID_FILE);
    let mut id = [0u8; 16];
    if let Ok(text) = std::fs::read_to_string(&path) {
        hex::decode_to_slice(text.trim(), &mut id)
            .map_err(|_| anyhow::anyhow!("{} is not 32 hex digits", path.display()))?;
        return Ok(id);
    }
    getrandom::fill(&mut id).map_err(|e| anyhow::anyhow!("no randomness for the array id: {e}"))?;
    std::fs::write(&path, hex::encode(id) + "\n")?;
    Ok(id)
}

/// The engine as the SCSI layer's backend, with LUN masking by host, and the
/// vVol protocol endpoint with each host's bound vVols beneath it.
pub struct EngineBackend {
    engine: Arc<Engine>,
    hosts: Arc<HostRegistry>,
    vvols: Arc<lacuna_vvol::VvolService>,
    /// The array's one protocol endpoint (every host that has one sees this unit).
    protocol_endpoint: Arc<dyn LogicalUnit>,
    array_id: [u8; 16],
    /// One unit per (volume, presentation), so capacity generations and medium
    /// state survive between lookups.
    units: Mutex<HashMap<UnitKey, Arc<dyn LogicalUnit>>>,
    /// Where each unit counts its reads and writes.
    monitor: Arc<Monitor>,
}

/// What makes two LUNs the same unit: the volume or snapshot (by id, never
/// reused) and how it is shown.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct UnitKey {
    snapshot: bool,
    id: u64,
    block_size_bytes: u32,
    removable: bool,
}

impl EngineBackend {
    pub fn new(
        engine: Arc<Engine>,
        hosts: Arc<HostRegistry>,
        vvols: Arc<lacuna_vvol::VvolService>,
        array_id: [u8; 16],
        monitor: Arc<Monitor>,
    ) -> Self {
        let protocol_endpoint = Arc::new(AdministrativeUnit::new(
            crate::protocol_endpoint::unit_id(array_id),
            "lacuna vVol protocol endpoint".to_string(),
        ));
        EngineBackend {
            engine,
            hosts,
            vvols,
            protocol_endpoint,
            array_id,
            units: Mutex::new(HashMap::new()),
            monitor,
        }
    }

    /// The unit for a LUN, made on first use; `None` when the volume or snapshot
    /// granted does not exist (any more), or its name now names another object
    /// (the grant is for the object: [`LunSpec`]). Keyed by id, so a new volume
    /// that reuses a deleted one's name is a new unit.
    fn unit(&self, spec: &LunSpec) -> Option<Arc<dyn LogicalUnit>> {
        let presentation = Presentation {
            block_size_bytes: spec.block_size_bytes,
            removable: spec.removable,
        };
        let (key, make): (UnitKey, Box<dyn FnOnce() -> Arc<dyn LogicalUnit>>) =
            if spec.volume.contains('@') {
                let snapshot = self.engine.open_snapshot(&spec.volume).ok()?;
                if snapshot.id() != spec.object_id {
                    return None;
                }
                let key = UnitKey {
                    snapshot: true,
                    id: snapshot.id(),
                    block_size_bytes: spec.block_size_bytes,
                    removable: spec.removable,
                };
                let (array_id, monitor) = (self.array_id, self.monitor.clone());
                (
                    key,
                    Box::new(move || {
                        Arc::new(SnapshotUnit::new(
                            snapshot,
                            array_id,
                            presentation,
                            Meter::new(monitor, Protocol::Iscsi),
                        ))
                    }),
                )
            } else {
                let volume = self.engine.open_volume(&spec.volume).ok()?;
                if volume.id() != spec.object_id {
                    return None;
                }
                let key = UnitKey {
                    snapshot: false,
                    id: volume.id(),
                    block_size_bytes: spec.block_size_bytes,
                    removable: spec.removable,
                };
                let (array_id, monitor) = (self.array_id, self.monitor.clone());
                (
                    key,
                    Box::new(move || {
                        let meter =
                            Meter::for_volume(monitor, Protocol::Iscsi, volume.id(), volume.name());
                        Arc::new(VolumeUnit::new(volume, array_id, presentation, meter))
                    }),
                )
            };
        let mut units = self.units.lock();
        Some(units.entry(key).or_insert_with(make).clone())
    }
}

impl EngineBackend {
    /// The protocol endpoint at `lun` with the vVols bound to `host` beneath
    /// it, each at its second-level id (its engine object id, never reused).
    fn endpoint_entry(&self, host: &str, lun: u64) -> LunEntry {
        let subsidiaries = self
            .vvols
            .bound(host)
            .into_iter()
            .filter_map(|bound| {
                let id = SecondLevelId::new(bound.object_id).ok()?;
                let unit = self.unit(&LunSpec::plain(&bound.engine_name, bound.object_id))?;
                Some(Subsidiary { id, unit })
            })
            .collect();
        LunEntry {
            lun,
            unit: self.protocol_endpoint.clone(),
            subsidiaries: Some(subsidiaries),
        }
    }
}

impl Backend for EngineBackend {
    fn units_for(&self, initiator_name: &str) -> Vec<LunEntry> {
        // Units of volumes and snapshots that are gone are dropped once per
        // map, not once per unit looked up (a PE can hold thousands of vVols).
        self.units.lock().retain(|_, unit| unit.size_bytes() > 0);
        let host = self.hosts.host_of(initiator_name);
        let endpoint = host.as_ref().and_then(|h| {
            let lun = h.protocol_endpoint_lun?;
            Some(self.endpoint_entry(&h.name, lun))
        });
        let mapping: Vec<(u64, LunSpec)> = match host {
            Some(host) => host.luns.into_iter().collect(),
            None if self.hosts.open_access => {
                let mut volumes = self.engine.list_volume_names();
                volumes.sort_by_key(|(id, _)| *id);
                volumes
                    .into_iter()
                    .enumerate()
                    .map(|(lun, (id, name))| (lun as u64, LunSpec::plain(&name, id)))
                    .collect()
            }
            None => Vec::new(),
        };
        mapping
            .into_iter()
            .filter_map(|(lun, spec)| {
                Some(LunEntry {
                    lun,
                    unit: self.unit(&spec)?,
                    subsidiaries: None,
                })
            })
            .chain(endpoint)
            .collect()
    }

    fn lun_map_generation(&self) -> u64 {
        // Any of these changes can change what an initiator sees.
        self.hosts.generation()
            + self.engine.stats.catalog_generation.load(Ordering::SeqCst)
            + self.vvols.generation()
    }

    fn soft_threshold_events(&self) -> u64 {
        self.engine
            .stats
            .soft_threshold_events
            .load(Ordering::SeqCst)
    }
}

/// How a LUN presents its volume.
#[derive(Debug, Clone, Copy)]
struct Presentation {
    block_size_bytes: u32,
    removable: bool,
}

/// A unit id unique per array, volume or snapshot, and presentation.
fn unit_id(array_id: [u8; 16], kind: &[u8], id: u64, presentation: Presentation) -> UnitId {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"lacuna unit id");
    hasher.update(&array_id);
    hasher.update(kind);
    hasher.update(&id.to_le_bytes());
    hasher.update(&presentation.block_size_bytes.to_le_bytes());
    hasher.update(&[u8::from(presentation.removable)]);
    let mut out = [0u8; 16];
    out.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
    out
}

/// One volume as a SCSI logical unit.
pub struct VolumeUnit {
    volume: Volume,
    unit_id: UnitId,
    provisioning: backend::Provisioning,
    presentation: Presentation,
    /// Size last seen, and how many times it changed.
    seen_size_bytes: AtomicU64,
    capacity_generation: AtomicU64,
    meter: Meter,
}

impl VolumeUnit {
    fn new(volume: Volume, array_id: [u8; 16], presentation: Presentation, meter: Meter) -> Self {
        let unit_id = unit_id(array_id, b"volume", volume.id(), presentation);
        let provisioning = match volume.provisioning() {
            Provisioning::Thin => backend::Provisioning::Thin,
            Provisioning::ZeroedThick => backend::Provisioning::ZeroedThick,
            Provisioning::EagerZeroedThick => backend::Provisioning::EagerZeroedThick,
        };
        let size_bytes = volume.size_bytes().unwrap_or(0);
        VolumeUnit {
            volume,
            unit_id,
            provisioning,
            presentation,
            seen_size_bytes: AtomicU64::new(size_bytes),
            capacity_generation: AtomicU64::new(0),
            meter,
        }
    }

    /// A write's FUA: durable before the write returns.
    fn flush_if(&self, fua: bool) -> Result<(), EngineError> {
        if fua {
            self.volume.flush()?;
        }
        Ok(())
    }
}

/// Counts a SCSI read or write when it succeeds.
fn timed<T>(
    meter: &Meter,
    direction: Direction,
    bytes: usize,
    request: impl FnOnce() -> Result<T, EngineError>,
) -> Result<T, BackendError> {
    meter
        .time(direction, bytes as u64, request)
        .map_err(backend_error)
}

/// Counts a read answered from memory (one that is not is read again, and
/// counted then).
fn timed_from_memory(
    meter: &Meter,
    bytes: usize,
    request: impl FnOnce() -> Result<bool, EngineError>,
) -> Result<bool, BackendError> {
    let started = std::time::Instant::now();
    let answered = request().map_err(backend_error)?;
    if answered {
        let elapsed = started.elapsed();
        meter.record(Direction::Read, bytes as u64, elapsed);
    }
    Ok(answered)
}

fn backend_error(error: EngineError) -> BackendError {
    match error {
        EngineError::NoSpace(_) => BackendError::NoSpace,
        EngineError::OutOfRange { .. } => BackendError::OutOfRange,
        EngineError::VolumeNotFound(_) | EngineError::SnapshotNotFound(_) => BackendError::Gone,
        EngineError::Corruption(m) => {
            tracing::error!("checksum or metadata mismatch: {m}");
            BackendError::Checksum
        }
        other => {
            tracing::error!("volume I/O failed: {other}");
            BackendError::Io
        }
    }
}

impl LogicalUnit for VolumeUnit {
    fn unit_id(&self) -> UnitId {
        self.unit_id
    }

    fn name(&self) -> String {
        self.volume.name().to_string()
    }

    fn size_bytes(&self) -> u64 {
        self.volume.size_bytes().unwrap_or(0)
    }

    fn block_size_bytes(&self) -> u32 {
        self.presentation.block_size_bytes
    }

    fn removable(&self) -> bool {
        self.presentation.removable
    }

    fn provisioning(&self) -> backend::Provisioning {
        self.provisioning
    }

    fn capacity_generation(&self) -> u64 {
        let now = self.size_bytes();
        if self.seen_size_bytes.swap(now, Ordering::SeqCst) != now {
            self.capacity_generation.fetch_add(1, Ordering::SeqCst);
        }
        self.capacity_generation.load(Ordering::SeqCst)
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        let bytes = buf.len();
        timed(&self.meter, Direction::Read, bytes, || {
            self.volume.read(offset_bytes, buf)
        })
    }

    fn read_from_memory(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<bool, BackendError> {
        let bytes = buf.len();
        timed_from_memory(&self.meter, bytes, || {
            self.volume.read_from_memory(offset_bytes, buf)
        })
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), BackendError> {
        timed(&self.meter, Direction::Write, data.len(), || {
            self.volume.write(offset_bytes, data)?;
            self.flush_if(fua)
        })
    }

    fn write_shared(
        &self,
        offset_bytes: u64,
        data: &bytes::Bytes,
        fua: bool,
    ) -> Result<(), BackendError> {
        timed(&self.meter, Direction::Write, data.len(), || {
            self.volume.write_shared(offset_bytes, data)?;
            self.flush_if(fua)
        })
    }

    fn write_is_quick(&self, length_bytes: u64) -> bool {
        self.volume.write_is_quick(length_bytes)
    }

    fn unmap(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), BackendError> {
        self.volume
            .unmap(offset_bytes, len_bytes)
            .map_err(backend_error)
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        allow_unmap: bool,
    ) -> Result<(), BackendError> {
        self.volume
            .write_zeroes(offset_bytes, len_bytes, allow_unmap)
            .map_err(backend_error)
    }

    fn flush(&self) -> Result<(), BackendError> {
        self.volume.flush().map_err(backend_error)
    }

    fn extents(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, BackendError> {
        let extents = self
            .volume
            .extents(offset_bytes, len_bytes)
            .map_err(backend_error)?;
        Ok(scsi_extents(extents, max_extents))
    }

    fn copy_is_quick(
        &self,
        source: &dyn LogicalUnit,
        source_offset_bytes: u64,
        destination_offset_bytes: u64,
        _len_bytes: u64,
    ) -> bool {
        source.as_any().downcast_ref::<VolumeUnit>().is_some()
            && self
                .volume
                .copy_is_quick(source_offset_bytes, destination_offset_bytes)
    }

    fn copy_from(
        &self,
        source: &dyn LogicalUnit,
        source_offset_bytes: u64,
        destination_offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<(), BackendError> {
        if let Some(snapshot) = source.as_any().downcast_ref::<SnapshotUnit>() {
            return self
                .volume
                .engine()
                .copy_from_snapshot(
                    &snapshot.snapshot,
                    source_offset_bytes,
                    &self.volume,
                    destination_offset_bytes,
                    len_bytes,
                )
                .map_err(backend_error);
        }
        let source = source
            .as_any()
            .downcast_ref::<VolumeUnit>()
            .ok_or(BackendError::Io)?;
        self.volume
            .engine()
            .copy_range(
                source.volume.name(),
                source_offset_bytes,
                len_bytes,
                self.volume.name(),
                destination_offset_bytes,
            )
            .map(|_| ())
            .map_err(backend_error)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A snapshot as a read-only SCSI logical unit.
pub struct SnapshotUnit {
    snapshot: Snapshot,
    unit_id: UnitId,
    presentation: Presentation,
    meter: Meter,
}

impl SnapshotUnit {
    fn new(
        snapshot: Snapshot,
        array_id: [u8; 16],
        presentation: Presentation,
        meter: Meter,
    ) -> Self {
        let unit_id = unit_id(array_id, b"snapshot", snapshot.id(), presentation);
        SnapshotUnit {
            snapshot,
            unit_id,
            presentation,
            meter,
        }
    }
}

impl LogicalUnit for SnapshotUnit {
    fn unit_id(&self) -> UnitId {
        self.unit_id
    }

    fn name(&self) -> String {
        self.snapshot.full_name()
    }

    fn size_bytes(&self) -> u64 {
        self.snapshot.size_bytes().unwrap_or(0)
    }

    fn block_size_bytes(&self) -> u32 {
        self.presentation.block_size_bytes
    }

    fn removable(&self) -> bool {
        self.presentation.removable
    }

    fn provisioning(&self) -> backend::Provisioning {
        backend::Provisioning::Thin
    }

    fn capacity_generation(&self) -> u64 {
        0
    }

    fn read_only(&self) -> bool {
        true
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        let bytes = buf.len();
        timed(&self.meter, Direction::Read, bytes, || {
            self.snapshot.read(offset_bytes, buf)
        })
    }

    fn read_from_memory(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<bool, BackendError> {
        let bytes = buf.len();
        timed_from_memory(&self.meter, bytes, || {
            self.snapshot.read_from_memory(offset_bytes, buf)
        })
    }

    fn write(&self, _offset_bytes: u64, _data: &[u8], _fua: bool) -> Result<(), BackendError> {
        Err(BackendError::ReadOnly)
    }

    fn unmap(&self, _offset_bytes: u64, _len_bytes: u64) -> Result<(), BackendError> {
        Err(BackendError::ReadOnly)
    }

    fn write_zeroes(
        &self,
        _offset: u64,
        _len: u64,
        _allow_unmap: bool,
    ) -> Result<(), BackendError> {
        Err(BackendError::ReadOnly)
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
        let extents = self
            .snapshot
            .extents(offset_bytes, len_bytes)
            .map_err(backend_error)?;
        Ok(scsi_extents(extents, max_extents))
    }

    fn copy_from(
        &self,
        _source: &dyn LogicalUnit,
        _source_offset_bytes: u64,
        _destination_offset_bytes: u64,
        _len_bytes: u64,
    ) -> Result<(), BackendError> {
        Err(BackendError::ReadOnly)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Engine extents as SCSI ones: written zeroes are allocated (mapped), only holes
/// are deallocated; at most `max_extents` of them.
fn scsi_extents(extents: Vec<lacuna_engine::Extent>, max_extents: usize) -> Vec<Extent> {
    let mut out: Vec<Extent> = Vec::new();
    for e in extents {
        let mapped = e.state != ExtentState::Hole;
        if let Some(last) = out.last_mut().filter(|l| l.mapped == mapped) {
            last.len_bytes += e.length_bytes;
        } else if out.len() == max_extents.max(1) {
            break;
        } else {
            out.push(Extent {
                len_bytes: e.length_bytes,
                mapped,
            });
        }
    }
    out
}

/// The host registry as the iSCSI transport's access policy.
pub struct HostAccess {
    pub hosts: Arc<HostRegistry>,
    /// Where refused initiators are noted for the event log.
    pub monitor: Arc<Monitor>,
}

impl AccessPolicy for HostAccess {
    fn chap_for(&self, initiator_name: &str) -> ChapRequirement {
        let Some(host) = self.hosts.host_of(initiator_name) else {
            return ChapRequirement::None;
        };
        let credentials = |c: &crate::hosts::Chap| ChapCredentials {
            user: c.user.clone(),
            secret: c.secret.as_bytes().to_vec(),
        };
        match (&host.chap, &host.mutual_chap) {
            (Some(initiator), Some(target)) => ChapRequirement::Mutual {
                initiator: credentials(initiator),
                target: credentials(target),
            },
            (Some(initiator), None) => ChapRequirement::OneWay {
                initiator: credentials(initiator),
            },
            _ => ChapRequirement::None,
        }
    }

    fn initiator_known(&self, initiator_name: &str) -> bool {
        let known = self.hosts.open_access || self.hosts.host_of(initiator_name).is_some();
        if !known {
            self.monitor.refusals.refused(
                "iSCSI",
                initiator_name,
                "not an initiator of any host",
                crate::sampler::unix_now_s(),
            );
        }
        known
    }

    fn authentication_failed(&self, initiator_name: &str) {
        self.monitor.refusals.refused(
            "iSCSI",
            initiator_name,
            "CHAP authentication failed",
            crate::sampler::unix_now_s(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_id_is_kept_as_32_hex_digits() {
        let dir = tempfile::tempdir().unwrap();
        let id = array_id(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(ARRAY_ID_FILE)).unwrap();
        assert_eq!(text.len(), 33, "{text:?}");
        assert!(
            text.ends_with('\n') && text[..32].bytes().all(|b| b"0123456789abcdef".contains(&b))
        );
        assert_eq!(array_id(dir.path()).unwrap(), id);

        let file = dir.path().join(ARRAY_ID_FILE);
        std::fs::write(&file, " 00112233445566778899AABBCCDDEEFF\n").unwrap();
        let expected: Vec<u8> = (0..16).map(|i| i * 0x11).collect();
        assert_eq!(array_id(dir.path()).unwrap().to_vec(), expected);
        for bad in [
            "0011223344556677889aabbccddeeff",
            "zz112233445566778899aabbccddeeff",
            "",
        ] {
            std::fs::write(&file, bad).unwrap();
            assert!(array_id(dir.path()).is_err(), "{bad:?}");
        }
    }
}
