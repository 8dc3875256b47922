//! Logical block provisioning: UNMAP, WRITE SAME (10/16) and GET LBA STATUS (SBC-4 5.28,
//! 5.45, 5.46, 5.8) — VMware's Delete and Zero primitives.
//!
//! Why these map to whole-range backend calls: the engine makes UNMAP and zeroing
//! metadata-only, so a 100 GiB WRITE SAME of zeros must become one `write_zeroes` (or
//! `unmap`, when the UNMAP bit allows it), never a loop of block writes. Only a WRITE SAME
//! of a non-zero pattern writes data, in bounded chunks.

use crate::backend::Extent;
use crate::block::{be16, be32, be64, storage_failure, truncate};
use crate::commands::opcode as op;
use crate::dispatch::{CommandResult, Failure, Request};
use crate::sense::{AdditionalSense, Sense, SenseKey};

/// MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT: all a 16-bit parameter list length can carry.
pub(crate) const MAX_UNMAP_DESCRIPTORS: u32 = (u16::MAX as u32 - 8) / 16;
/// The engine's grain: what one unmap frees at the least (divides 1 MiB).
const UNMAP_GRANULARITY_BYTES: u32 = 4096;

/// OPTIMAL UNMAP GRANULARITY in blocks of `block_size_bytes`: one grain (8
/// blocks of 512 bytes, 1 of 4096).
pub(crate) fn unmap_granularity_blocks(block_size_bytes: u32) -> u32 {
    (UNMAP_GRANULARITY_BYTES / block_size_bytes).max(1)
}
/// MAXIMUM WRITE SAME LENGTH in blocks: a WRITE SAME(16) can name no more.
pub(crate) const MAX_WRITE_SAME_BLOCKS: u64 = u32::MAX as u64;
/// Chunk written per call for a non-zero WRITE SAME pattern.
const PATTERN_CHUNK_BYTES: usize = 1 << 20;
/// Most LBA status descriptors returned by one GET LBA STATUS.
const MAX_LBA_STATUS_DESCRIPTORS: usize = 4096;

/// UNMAP.
pub(crate) fn unmap(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    if !request.unit.provisioning().is_thin() {
        return Err(Sense::invalid_opcode().into());
    }
    if cdb[1] & 0x01 != 0 {
        return Err(Sense::invalid_cdb_field(1, Some(0)).into()); // ANCHOR
    }
    let parameter_list_len = usize::from(be16(cdb, 7));
    if parameter_list_len == 0 {
        return Ok(Vec::new());
    }
    request.check_writable()?;
    if parameter_list_len < 8 || request.data_out.len() < parameter_list_len {
        return Err(Sense::parameter_list_length_error().into());
    }
    let list = &request.data_out[..parameter_list_len];
    let descriptor_bytes = usize::from(be16(list, 2)).min(parameter_list_len - 8);
    let descriptor_count = descriptor_bytes / 16;
    if descriptor_count > MAX_UNMAP_DESCRIPTORS as usize {
        return Err(Sense::invalid_parameter_field(2, None).into());
    }
    let geometry = request.geometry;
    let descriptors: Vec<(u64, u64)> = (0..descriptor_count)
        .map(|i| {
            let at = 8 + 16 * i;
            (be64(list, at), u64::from(be32(list, at + 8)))
        })
        .collect();
    // Validate every descriptor before changing anything.
    for &(lba, block_count) in &descriptors {
        geometry.check_range(lba, block_count)?;
    }
    for (lba, block_count) in descriptors {
        if block_count == 0 {
            continue;
        }
        let offset_bytes = geometry.offset_bytes(lba);
        let len_bytes = geometry.len_bytes(block_count);
        let _range = request.state.range_lock.lock(offset_bytes, len_bytes);
        request
            .unit
            .unmap(offset_bytes, len_bytes)
            .map_err(|e| storage_failure(e, true))?;
    }
    Ok(Vec::new())
}

/// WRITE SAME (10/16), including the UNMAP and NDOB bits.
pub(crate) fn write_same(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    let sixteen = cdb[0] == op::WRITE_SAME_16;
    if cdb[1] >> 5 != 0 {
        return Err(Sense::invalid_cdb_field(1, Some(7)).into()); // WRPROTECT
    }
    if cdb[1] & 0x10 != 0 {
        return Err(Sense::invalid_cdb_field(1, Some(4)).into()); // ANCHOR: ANC_SUP is 0
    }
    let unmap_allowed = cdb[1] & 0x08 != 0;
    let no_data_out = sixteen && cdb[1] & 0x01 != 0;
    let (lba, requested_blocks, length_field_byte) = if sixteen {
        (be64(cdb, 2), u64::from(be32(cdb, 10)), 10)
    } else {
        (u64::from(be32(cdb, 2)), u64::from(be16(cdb, 7)), 7)
    };
    let geometry = request.geometry;
    // WSNZ is 0: a zero length means "to the end of the medium".
    let block_count = if requested_blocks == 0 {
        geometry.block_count.saturating_sub(lba)
    } else {
        requested_blocks
    };
    geometry.check_range(lba, block_count)?;
    if block_count > MAX_WRITE_SAME_BLOCKS {
        return Err(Sense::invalid_cdb_field(length_field_byte, None).into());
    }
    request.check_writable()?;
    let block_size_bytes = geometry.block_size_bytes as usize;
    let pattern: &[u8] = if no_data_out {
        &[]
    } else if request.data_out.len() == block_size_bytes {
        request.data_out
    } else {
        return Err(Sense::invalid_cdb_field(length_field_byte, None).into());
    };
    if block_count == 0 {
        return Ok(Vec::new());
    }
    let offset_bytes = geometry.offset_bytes(lba);
    let len_bytes = geometry.len_bytes(block_count);
    let thin = request.unit.provisioning().is_thin();
    // With UNMAP on a thin unit the blocks are deallocated whatever the
    // Data-Out holds (they then read as zeroes, LBPRZ), as LIO does and
    // libiscsi's WriteSame10.UnmapUntilEnd expects (it sends 0xFF blocks and
    // reads back zeroes). On a fully provisioned unit UNMAP is ignored.
    if unmap_allowed && thin {
        let _range = request.state.range_lock.lock(offset_bytes, len_bytes);
        request
            .unit
            .unmap(offset_bytes, len_bytes)
            .map_err(|e| storage_failure(e, true))?;
        return Ok(Vec::new());
    }
    if pattern.iter().all(|&b| b == 0) {
        let _range = request.state.range_lock.lock(offset_bytes, len_bytes);
        request
            .unit
            .write_zeroes(offset_bytes, len_bytes, false)
            .map_err(|e| storage_failure(e, true))?;
        return Ok(Vec::new());
    }
    write_pattern(request, offset_bytes, len_bytes, pattern)?;
    Ok(Vec::new())
}

/// Writes `pattern` (one block) over `[offset_bytes, offset_bytes + len_bytes)`.
fn write_pattern(
    request: &Request<'_>,
    offset_bytes: u64,
    len_bytes: u64,
    pattern: &[u8],
) -> Result<(), Failure> {
    let blocks_per_chunk = PATTERN_CHUNK_BYTES / pattern.len();
    let chunk: Vec<u8> = pattern.repeat(blocks_per_chunk);
    let fua = !request.state.lock().mode.write_cache_enabled();
    let mut done_bytes = 0u64;
    while done_bytes < len_bytes {
        let piece_bytes = (len_bytes - done_bytes).min(chunk.len() as u64);
        let at = offset_bytes + done_bytes;
        let _range = request.state.range_lock.lock(at, piece_bytes);
        request
            .unit
            .write(at, &chunk[..piece_bytes as usize], fua)
            .map_err(|e| storage_failure(e, true))?;
        done_bytes += piece_bytes;
    }
    Ok(())
}

/// GET LBA STATUS: mapped and deallocated extents from the starting LBA.
pub(crate) fn get_lba_status(request: &Request<'_>) -> CommandResult {
    let cdb = request.cdb;
    let lba = be64(cdb, 2);
    let allocation_len = be32(cdb, 10) as usize;
    let geometry = request.geometry;
    if lba >= geometry.block_count {
        return Err(Sense::lba_out_of_range().into());
    }
    let max_descriptors =
        (allocation_len.saturating_sub(8) / 16).clamp(1, MAX_LBA_STATUS_DESCRIPTORS);
    let remaining_blocks = geometry.block_count - lba;
    let extents = if request.unit.provisioning().is_thin() {
        request
            .unit
            .extents(
                geometry.offset_bytes(lba),
                geometry.len_bytes(remaining_blocks),
                max_descriptors,
            )
            .map_err(|e| storage_failure(e, false))?
    } else {
        vec![Extent {
            len_bytes: geometry.len_bytes(remaining_blocks),
            mapped: true,
        }]
    };
    let mut descriptors = Vec::new();
    let mut next_lba = lba;
    for extent in extents {
        let mut blocks = extent.len_bytes / u64::from(geometry.block_size_bytes);
        while blocks > 0 && descriptors.len() < max_descriptors * 16 {
            let count = blocks.min(u64::from(u32::MAX));
            descriptors.extend_from_slice(&next_lba.to_be_bytes());
            descriptors.extend_from_slice(&(count as u32).to_be_bytes());
            descriptors.push(if extent.mapped { 0 } else { 1 });
            descriptors.extend_from_slice(&[0, 0, 0]);
            next_lba += count;
            blocks -= count;
        }
    }
    if descriptors.is_empty() {
        // A backend returning no extent breaks its contract; answer rather than panic.
        return Err(Sense::new(
            SenseKey::HardwareError,
            AdditionalSense::INTERNAL_TARGET_FAILURE,
        )
        .into());
    }
    let mut data = ((descriptors.len() + 4) as u32).to_be_bytes().to_vec();
    data.extend_from_slice(&[0, 0, 0, 0]);
    data.extend_from_slice(&descriptors);
    Ok(truncate(data, allocation_len))
}
