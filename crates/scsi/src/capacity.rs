//! READ CAPACITY (10/16) and READ DEFECT DATA (10/12) (SBC-4 5.20, 5.21, 5.14, 5.15).
//!
//! READ CAPACITY(16) is where an initiator learns the physical block size (LOGICAL BLOCKS
//! PER PHYSICAL BLOCK EXPONENT), whether the unit is thin (LBPME) and whether unmapped
//! blocks read as zeros (LBPRZ); the last two must agree with VPD page B2h.

use crate::block::{be16, be32, truncate};
use crate::commands::opcode as op;
use crate::dispatch::{CommandResult, Request};

/// READ CAPACITY(10): the last LBA (saturated to FFFFFFFFh) and the block length.
pub(crate) fn read_capacity_10(request: &Request<'_>) -> CommandResult {
    let geometry = request.geometry;
    let last_lba = u32::try_from(geometry.block_count.saturating_sub(1)).unwrap_or(u32::MAX);
    let mut data = last_lba.to_be_bytes().to_vec();
    data.extend_from_slice(&geometry.block_size_bytes.to_be_bytes());
    Ok(data)
}

/// READ CAPACITY(16).
pub(crate) fn read_capacity_16(request: &Request<'_>) -> CommandResult {
    let geometry = request.geometry;
    let allocation_len = be32(request.cdb, 10) as usize;
    let mut data = vec![0u8; 32];
    data[0..8].copy_from_slice(&geometry.block_count.saturating_sub(1).to_be_bytes());
    data[8..12].copy_from_slice(&geometry.block_size_bytes.to_be_bytes());
    data[13] = geometry.physical_exponent & 0x0f;
    if request.unit.provisioning().is_thin() {
        data[14] = 0x80 | 0x40; // LBPME, LBPRZ
    } else {
        data[14] = 0x40; // LBPRZ
    }
    Ok(truncate(data, allocation_len))
}

/// READ DEFECT DATA: a virtual volume has no defects; the (empty) lists are valid.
pub(crate) fn read_defect_data(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    if cdb[0] == op::READ_DEFECT_DATA_10 {
        let flags = cdb[2] & 0x1f;
        let allocation_len = usize::from(be16(cdb, 7));
        Ok(truncate(vec![0, flags, 0, 0], allocation_len))
    } else {
        let flags = cdb[1] & 0x1f;
        let allocation_len = be32(cdb, 6) as usize;
        Ok(truncate(vec![0, flags, 0, 0, 0, 0, 0, 0], allocation_len))
    }
}
