//! COMPARE AND WRITE (SBC-4 5.3): VMware's ATS primitive.
//!
//! The compare and the write happen under the unit's range lock for exactly the blocks
//! involved, so no write through this SCSI layer can land between them, while commands on
//! other blocks proceed. A miscompare reports the offset of the first differing byte in
//! the INFORMATION field and leaves the medium untouched.

use crate::block::{be64, storage_failure};
use crate::dispatch::{CommandResult, Request};
use crate::rw::compare;
use crate::sense::Sense;

/// MAXIMUM COMPARE AND WRITE LENGTH (Block Limits VPD), in blocks: everything the one-byte
/// NUMBER OF LOGICAL BLOCKS field can name (at most 127.5 KiB per half at 512 bytes).
pub(crate) const MAX_COMPARE_AND_WRITE_BLOCKS: u8 = u8::MAX;

pub(crate) fn compare_and_write(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    if cdb[1] >> 5 != 0 {
        return Err(Sense::invalid_cdb_field(1, Some(7)).into()); // WRPROTECT
    }
    let fua = cdb[1] & 0x08 != 0;
    let lba = be64(cdb, 2);
    let block_count = cdb[13];
    const _: () = assert!(MAX_COMPARE_AND_WRITE_BLOCKS == u8::MAX);
    let geometry = request.geometry;
    geometry.check_range(lba, u64::from(block_count))?;
    request.check_writable()?;
    let half_bytes = geometry.len_bytes(u64::from(block_count)) as usize;
    // Data-Out is the verify data followed by the write data, nothing more or less.
    if request.data_out.len() != 2 * half_bytes {
        return Err(Sense::invalid_cdb_field(13, None).into());
    }
    if block_count == 0 {
        return Ok(Vec::new());
    }
    let (expected, replacement) = request.data_out.split_at(half_bytes);
    let offset_bytes = geometry.offset_bytes(lba);
    let _range = request
        .state
        .range_lock
        .lock(offset_bytes, half_bytes as u64);
    let mut stored = vec![0u8; half_bytes];
    request
        .unit
        .read(offset_bytes, &mut stored)
        .map_err(|e| storage_failure(e, false))?;
    compare(expected, &stored)?;
    let fua = fua || !request.state.lock().mode.write_cache_enabled();
    request
        .unit
        .write(offset_bytes, replacement, fua)
        .map_err(|e| storage_failure(e, true))?;
    Ok(Vec::new())
}
