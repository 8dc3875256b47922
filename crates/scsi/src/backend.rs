//! The storage the SCSI layer serves, as two small synchronous traits.
//!
//! Why synchronous and byte-addressed: the transport already calls the SCSI layer from a
//! blocking context, and the engine below works in bytes (512-byte sectors, 4 KiB grain).
//! The SCSI layer converts LBAs to byte offsets once, checks every range against the
//! capacity before calling in, and maps each [`BackendError`] to its sense data, so an
//! implementation never sees a malformed request and never builds SCSI structures.
//!
//! Range operations (`unmap`, `write_zeroes`, `copy_from`) are expected to be
//! metadata-only: the SCSI layer hands whole ranges down (one call per UNMAP descriptor,
//! one call per WRITE SAME or EXTENDED COPY segment) and never splits them into blocks.

use std::any::Any;
use std::sync::Arc;

/// Stable identity of a logical unit: the NAA-6 designator of VPD page 83h, the unit
/// serial number of page 80h, and what EXTENDED COPY target descriptors are matched on.
pub type UnitId = [u8; 16];

pub use crate::lun::{SecondLevelId, SecondLevelIdOutOfRange};

/// A logical unit as one initiator sees it at one first-level LUN number.
#[derive(Clone)]
pub struct LunEntry {
    /// The first-level LUN number, below [`crate::lun::FIRST_LEVEL_LUNS`] (16384).
    pub lun: u64,
    pub unit: Arc<dyn LogicalUnit>,
    /// Some: this is an administrative LU (a conglomerate's; a vVol protocol endpoint),
    /// with the units bound beneath it for this initiator, addressed by two-level LUNs.
    /// None: an ordinary LU.
    pub subsidiaries: Option<Vec<Subsidiary>>,
}

/// A subsidiary LU of a conglomerate (a bound vVol): the unit at second-level id `id`
/// beneath its administrative LU.
#[derive(Clone)]
pub struct Subsidiary {
    pub id: SecondLevelId,
    pub unit: Arc<dyn LogicalUnit>,
}

impl std::fmt::Debug for LunEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LunEntry")
            .field("lun", &self.lun)
            .field("unit", &self.unit.name())
            .field("subsidiaries", &self.subsidiaries)
            .finish()
    }
}

impl std::fmt::Debug for Subsidiary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subsidiary")
            .field("id", &self.id)
            .field("unit", &self.unit.name())
            .finish()
    }
}

/// The array as the SCSI layer sees it: LUN masking and array-wide events.
pub trait Backend: Send + Sync {
    /// The logical units `initiator_name` may see, each at its first-level LUN number,
    /// administrative LUs with the subsidiaries bound beneath them. Only these exist for
    /// that initiator (REPORT LUNS, addressing). LUN numbers are unique in the list, and
    /// second-level ids beneath each administrative LU.
    fn units_for(&self, initiator_name: &str) -> Vec<LunEntry>;

    /// Increases whenever any initiator's LUN mapping changes, binding and unbinding a
    /// subsidiary included. The SCSI layer re-reads `units_for` when it changes and
    /// raises REPORTED LUNS DATA HAS CHANGED (on an administrative LU whose subsidiaries
    /// changed as well).
    fn lun_map_generation(&self) -> u64;

    /// Counts how many times the array crossed its soft space threshold (upwards). Each
    /// increase raises one THIN PROVISIONING SOFT THRESHOLD REACHED unit attention per
    /// I_T nexus.
    fn soft_threshold_events(&self) -> u64;
}

/// How a unit's capacity is provisioned (VPD B2h PROVISIONING TYPE, READ CAPACITY LBPME).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provisioning {
    /// Thin: space is allocated on write; UNMAP and GET LBA STATUS report holes.
    Thin,
    /// Capacity reserved at creation; reported as fully provisioned.
    ZeroedThick,
    /// Capacity reserved and zeroed at creation; reported as fully provisioned.
    EagerZeroedThick,
}

impl Provisioning {
    pub fn is_thin(self) -> bool {
        self == Provisioning::Thin
    }
}

/// One run of blocks with the same mapping state, as returned by [`LogicalUnit::extents`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub len_bytes: u64,
    /// False: a hole that reads as zeros and holds no space (deallocated, SBC-4).
    pub mapped: bool,
}

/// Why a storage operation failed. Each maps to one sense condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The array cannot allocate space (DATA PROTECT, SPACE ALLOCATION FAILED WRITE PROTECT).
    #[error("no space left in the array")]
    NoSpace,
    /// The media failed (MEDIUM ERROR, UNRECOVERED READ ERROR or WRITE ERROR).
    #[error("input/output error")]
    Io,
    /// A stored record failed its checksum (MEDIUM ERROR, UNRECOVERED READ ERROR).
    #[error("checksum mismatch")]
    Checksum,
    /// The range is outside the unit (LOGICAL BLOCK ADDRESS OUT OF RANGE); the SCSI layer
    /// checks ranges first, so this only happens when the unit shrank concurrently.
    #[error("range outside the unit")]
    OutOfRange,
    /// The unit does not accept writes (DATA PROTECT, WRITE PROTECTED).
    #[error("unit is read-only")]
    ReadOnly,
    /// The unit no longer exists (LOGICAL UNIT NOT SUPPORTED).
    #[error("unit no longer exists")]
    Gone,
}

/// One volume (or snapshot) exported as a SCSI direct-access block device.
///
/// Offsets and lengths are in bytes and always multiples of `block_size_bytes()`, within
/// `size_bytes()` as it was when the SCSI layer checked it.
pub trait LogicalUnit: Send + Sync {
    /// Stable for the life of the unit, unique in the array.
    fn unit_id(&self) -> UnitId;
    /// Human-readable name (ASCII), reported in VPD 83h as a vendor-specific designator.
    fn name(&self) -> String;
    fn size_bytes(&self) -> u64;
    /// Logical block size; 512 for Lacuna volumes.
    fn block_size_bytes(&self) -> u32 {
        512
    }
    /// Physical block size (a power-of-two multiple of the logical block size); 4096 for
    /// Lacuna volumes, reported as LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT 3.
    fn physical_block_size_bytes(&self) -> u32 {
        4096
    }
    fn provisioning(&self) -> Provisioning;
    /// Increases on every resize; the SCSI layer raises CAPACITY DATA HAS CHANGED.
    fn capacity_generation(&self) -> u64;
    /// A read-only unit (e.g. a snapshot) reports WP in MODE SENSE and refuses writes.
    fn read_only(&self) -> bool {
        false
    }
    /// A removable unit reports RMB and supports eject/load through START STOP UNIT.
    /// Lacuna volumes are not removable; the reference backend can be, for conformance.
    fn removable(&self) -> bool {
        false
    }

    /// Writes every byte of `buf` (holes as zeros), or fails: the buffer may
    /// hold another read's data (see `data_in`), and on success all of it is sent.
    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), BackendError>;
    /// `read` if every byte can be had from memory (`true`), or nothing but
    /// `false`, with `buf` holding nothing in particular, when the read would
    /// wait for a disk: a transport runs small reads on its own task and
    /// hands the others to threads that may wait. `false` is always safe.
    fn read_from_memory(&self, _offset_bytes: u64, _buf: &mut [u8]) -> Result<bool, BackendError> {
        Ok(false)
    }
    /// `fua`: durable before returning (Force Unit Access).
    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), BackendError>;
    /// `write` of data in a shared buffer, which a unit may keep slices of
    /// (for as long as it likes) instead of copying what it keeps.
    fn write_shared(
        &self,
        offset_bytes: u64,
        data: &bytes::Bytes,
        fua: bool,
    ) -> Result<(), BackendError> {
        self.write(offset_bytes, data, fua)
    }
    /// Whether a write of `length_bytes` (not FUA) would return without waiting
    /// for background work such as cleaning: it may then run on a transport's
    /// own task. Only a hint; `false` is always safe.
    fn write_is_quick(&self, _length_bytes: u64) -> bool {
        false
    }
    /// Whether `copy_from` of `len_bytes` from `source` would change only
    /// metadata and not wait for background work: it may then run on a
    /// transport's own task. Only a hint; `false` is always safe.
    fn copy_is_quick(
        &self,
        _source: &dyn LogicalUnit,
        _source_offset_bytes: u64,
        _destination_offset_bytes: u64,
        _len_bytes: u64,
    ) -> bool {
        false
    }
    /// Deallocates the range: afterwards it reads as zeros and holds no space.
    fn unmap(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), BackendError>;
    /// Makes the range read as zeros. With `allow_unmap` the blocks may be deallocated;
    /// without it they stay allocated (thick semantics).
    fn write_zeroes(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        allow_unmap: bool,
    ) -> Result<(), BackendError>;
    /// Makes every completed write durable.
    fn flush(&self) -> Result<(), BackendError>;
    /// Mapping state from `offset_bytes`: at most `max_extents` contiguous extents covering
    /// a prefix (at least one block) of `[offset_bytes, offset_bytes + len_bytes)`.
    fn extents(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, BackendError>;
    /// Point-in-time copy of `len_bytes` from `source` (possibly `self`) into this unit. The
    /// ranges may overlap when `source` is `self`; the result is as if the source range was
    /// read completely before the destination was written.
    fn copy_from(
        &self,
        source: &dyn LogicalUnit,
        source_offset_bytes: u64,
        destination_offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<(), BackendError>;
    /// For `copy_from`: lets an implementation recognise its own units among sources.
    fn as_any(&self) -> &dyn Any;
}

/// The administrative LU of a conglomerate (a vVol protocol endpoint): a unit of zero
/// capacity. It exists to be addressed (INQUIRY, REPORT LUNS, TEST UNIT READY) and to
/// give its subsidiaries their first-level LUN; every block command on it is refused
/// with LOGICAL BLOCK ADDRESS OUT OF RANGE by the SCSI layer's range checks, before any
/// call reaches it.
///
/// Fully provisioned rather than thin: it has no blocks to provision, so UNMAP is not
/// offered on it and VPD B2h and READ CAPACITY(16) do not claim thin provisioning.
#[derive(Debug)]
pub struct AdministrativeUnit {
    unit_id: UnitId,
    name: String,
}

impl AdministrativeUnit {
    pub fn new(unit_id: UnitId, name: String) -> Self {
        Self { unit_id, name }
    }

    /// Only empty ranges are inside a unit of no blocks.
    fn empty(len_bytes: u64) -> Result<(), BackendError> {
        if len_bytes == 0 {
            Ok(())
        } else {
            Err(BackendError::OutOfRange)
        }
    }
}

impl LogicalUnit for AdministrativeUnit {
    fn unit_id(&self) -> UnitId {
        self.unit_id
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn size_bytes(&self) -> u64 {
        0
    }

    fn provisioning(&self) -> Provisioning {
        Provisioning::ZeroedThick
    }

    fn capacity_generation(&self) -> u64 {
        0
    }

    fn read(&self, _offset_bytes: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        Self::empty(buf.len() as u64)
    }

    fn write(&self, _offset_bytes: u64, data: &[u8], _fua: bool) -> Result<(), BackendError> {
        Self::empty(data.len() as u64)
    }

    fn unmap(&self, _offset_bytes: u64, len_bytes: u64) -> Result<(), BackendError> {
        Self::empty(len_bytes)
    }

    fn write_zeroes(
        &self,
        _offset_bytes: u64,
        len_bytes: u64,
        _allow_unmap: bool,
    ) -> Result<(), BackendError> {
        Self::empty(len_bytes)
    }

    fn flush(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn extents(
        &self,
        _offset_bytes: u64,
        len_bytes: u64,
        _max_extents: usize,
    ) -> Result<Vec<Extent>, BackendError> {
        Self::empty(len_bytes).map(|()| Vec::new())
    }

    fn copy_from(
        &self,
        _source: &dyn LogicalUnit,
        _source_offset_bytes: u64,
        _destination_offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<(), BackendError> {
        Self::empty(len_bytes)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
