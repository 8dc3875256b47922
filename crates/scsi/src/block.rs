//! Block addressing: LBA ranges checked against the capacity and turned into byte ranges,
//! transfer-size bounds, and the mapping of storage errors to sense data.
//!
//! Every command that touches the medium goes through [`Geometry::check_range`] before it
//! reaches the backend, so the backend only ever sees in-range, block-aligned requests,
//! and every buffer the SCSI layer allocates is bounded by [`MAX_TRANSFER_BYTES`].

use crate::backend::{BackendError, LogicalUnit};
use crate::dispatch::Failure;
use crate::sense::{AdditionalSense, Sense, SenseKey};

/// Largest single data transfer (READ/WRITE/VERIFY data, COMPARE AND WRITE, UNMAP lists):
/// bounds every buffer allocated from an initiator-controlled length. Reported in the
/// Block Limits VPD page as MAXIMUM TRANSFER LENGTH (in blocks).
pub const MAX_TRANSFER_BYTES: u64 = 32 << 20;

/// The shape of a unit as one command sees it (read once per command).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub block_size_bytes: u32,
    pub block_count: u64,
    /// LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT.
    pub physical_exponent: u8,
}

impl Geometry {
    pub(crate) fn of(unit: &dyn LogicalUnit) -> Self {
        let block_size_bytes = unit.block_size_bytes();
        assert!(block_size_bytes.is_power_of_two() && block_size_bytes >= 512);
        let physical_bytes = unit.physical_block_size_bytes().max(block_size_bytes);
        assert!(physical_bytes.is_power_of_two());
        let physical_exponent = (physical_bytes / block_size_bytes).trailing_zeros() as u8;
        Self {
            block_size_bytes,
            block_count: unit.size_bytes() / u64::from(block_size_bytes),
            physical_exponent,
        }
    }

    /// Largest transfer in blocks (MAXIMUM TRANSFER LENGTH).
    pub(crate) fn max_transfer_blocks(&self) -> u64 {
        MAX_TRANSFER_BYTES / u64::from(self.block_size_bytes)
    }

    /// LOGICAL BLOCK ADDRESS OUT OF RANGE unless `[lba, lba + block_count)` is inside the
    /// unit (SBC-4: the LBA plus the number of blocks exceeds the capacity). An empty range
    /// may start at the capacity itself.
    pub(crate) fn check_range(&self, lba: u64, block_count: u64) -> Result<(), Sense> {
        match lba.checked_add(block_count) {
            Some(end) if end <= self.block_count => Ok(()),
            _ => Err(Sense::lba_out_of_range()),
        }
    }

    pub(crate) fn offset_bytes(&self, lba: u64) -> u64 {
        debug_assert!(lba <= self.block_count);
        lba * u64::from(self.block_size_bytes)
    }

    pub(crate) fn len_bytes(&self, block_count: u64) -> u64 {
        debug_assert!(block_count <= self.block_count);
        block_count * u64::from(self.block_size_bytes)
    }

    /// The transfer length in bytes as a buffer size, refusing transfers beyond
    /// [`MAX_TRANSFER_BYTES`] with INVALID FIELD IN CDB at `length_field_byte`.
    pub(crate) fn transfer_len_bytes(
        &self,
        block_count: u64,
        length_field_byte: u16,
    ) -> Result<usize, Sense> {
        if block_count > self.max_transfer_blocks() {
            return Err(Sense::invalid_cdb_field(length_field_byte, None));
        }
        let len_bytes = block_count * u64::from(self.block_size_bytes);
        assert!(len_bytes <= MAX_TRANSFER_BYTES);
        Ok(len_bytes as usize)
    }
}

/// The sense condition for a failed storage operation.
pub(crate) fn storage_failure(error: BackendError, writing: bool) -> Failure {
    let sense = match error {
        BackendError::NoSpace => Sense::new(
            SenseKey::DataProtect,
            AdditionalSense::SPACE_ALLOCATION_FAILED_WRITE_PROTECT,
        ),
        BackendError::Io if writing => {
            Sense::new(SenseKey::MediumError, AdditionalSense::WRITE_ERROR)
        }
        BackendError::Io | BackendError::Checksum => Sense::new(
            SenseKey::MediumError,
            AdditionalSense::UNRECOVERED_READ_ERROR,
        ),
        BackendError::OutOfRange => Sense::lba_out_of_range(),
        BackendError::ReadOnly => {
            Sense::new(SenseKey::DataProtect, AdditionalSense::WRITE_PROTECTED)
        }
        BackendError::Gone => Sense::illegal_request(AdditionalSense::LOGICAL_UNIT_NOT_SUPPORTED),
    };
    Failure::Check(sense)
}

/// Reads a big-endian unsigned integer of `N` bytes at `at` (the caller checked lengths).
pub(crate) fn be(bytes: &[u8], at: usize, len: usize) -> u64 {
    assert!(len <= 8);
    bytes[at..at + len]
        .iter()
        .fold(0u64, |value, &b| (value << 8) | u64::from(b))
}

pub(crate) fn be16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

pub(crate) fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

pub(crate) fn be64(bytes: &[u8], at: usize) -> u64 {
    be(bytes, at, 8)
}

/// Truncates data-in to the CDB's allocation length.
pub(crate) fn truncate(mut data: Vec<u8>, allocation_len_bytes: usize) -> Vec<u8> {
    data.truncate(allocation_len_bytes);
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry {
            block_size_bytes: 512,
            block_count: 1000,
            physical_exponent: 3,
        }
    }

    #[test]
    fn range_checks_cover_the_end_and_overflow() {
        let g = geometry();
        assert!(g.check_range(0, 1000).is_ok());
        assert!(g.check_range(999, 1).is_ok());
        assert!(g.check_range(999, 0).is_ok());
        assert!(g.check_range(999, 2).is_err());
        assert!(g.check_range(1000, 0).is_ok());
        assert!(g.check_range(1001, 0).is_err());
        assert!(g.check_range(u64::MAX, 1).is_err());
        assert!(g.check_range(1, u64::MAX).is_err());
    }

    #[test]
    fn transfer_bound_is_enforced() {
        let g = geometry();
        assert_eq!(g.transfer_len_bytes(2, 7), Ok(1024));
        assert_eq!(
            g.transfer_len_bytes(g.max_transfer_blocks() + 1, 7),
            Err(Sense::invalid_cdb_field(7, None))
        );
    }

    #[test]
    fn big_endian_readers() {
        let bytes = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(be16(&bytes, 1), 0x0203);
        assert_eq!(be32(&bytes, 0), 0x01020304);
        assert_eq!(be64(&bytes, 1), 0x0203040506070809);
        assert_eq!(be(&bytes, 2, 3), 0x030405);
    }
}
