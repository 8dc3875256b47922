//! Data transfer: READ, WRITE, WRITE ATOMIC, WRITE AND VERIFY, VERIFY, ORWRITE, PRE-FETCH
//! and SYNCHRONIZE CACHE (SBC-4 5.x).
//!
//! All variants of a command decode into one [`BlockCdb`] (LBA, block count, flags), so the
//! range, protection and transfer-size checks are written once. Every write takes the
//! unit's range lock for the blocks it changes, which is what makes COMPARE AND WRITE
//! atomic with respect to them.
//!
//! A write whose Data-Out is shorter than its transfer length (an iSCSI initiator may send
//! less than the CDB asks for) writes the whole blocks that arrived and leaves the rest
//! untouched; the transport reports the residual.

use crate::block::{be, be16, be32, be64, storage_failure, MAX_TRANSFER_BYTES};
use crate::commands::opcode as op;
use crate::dispatch::{CommandResult, Failure, Request};
use crate::inquiry::MAX_ATOMIC_TRANSFER_BLOCKS;
use crate::sense::{AdditionalSense, Sense, SenseKey};

/// Chunk size for commands that walk a range larger than one transfer (VERIFY without
/// data, ORWRITE read-modify-write).
const CHUNK_BYTES: u64 = 1 << 20;

/// The fields shared by the block commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockCdb {
    pub lba: u64,
    pub block_count: u64,
    /// RDPROTECT / WRPROTECT / VRPROTECT / ORPROTECT.
    pub protect: u8,
    pub fua: bool,
    /// BYTCHK (VERIFY, WRITE AND VERIFY).
    pub byte_check: u8,
    /// Where the transfer length field starts, for field pointers.
    pub length_field_byte: u16,
}

impl BlockCdb {
    pub(crate) fn parse(cdb: &[u8]) -> Self {
        let flags = cdb[1];
        let (lba, block_count, length_field_byte) = match cdb[0] {
            op::READ_6 | op::WRITE_6 => {
                let lba = be(cdb, 1, 3) & 0x1f_ffff;
                let count = if cdb[4] == 0 { 256 } else { u64::from(cdb[4]) };
                return Self {
                    lba,
                    block_count: count,
                    protect: 0,
                    fua: false,
                    byte_check: 0,
                    length_field_byte: 4,
                };
            }
            0x20..=0x5f => (u64::from(be32(cdb, 2)), u64::from(be16(cdb, 7)), 7),
            0xa0..=0xbf => (u64::from(be32(cdb, 2)), u64::from(be32(cdb, 6)), 6),
            op::WRITE_ATOMIC_16 => (be64(cdb, 2), u64::from(be16(cdb, 12)), 12),
            _ => (be64(cdb, 2), u64::from(be32(cdb, 10)), 10),
        };
        Self {
            lba,
            block_count,
            protect: flags >> 5,
            fua: flags & 0x08 != 0,
            byte_check: (flags >> 1) & 0x03,
            length_field_byte,
        }
    }

    /// Protection information is not supported: any *PROTECT value but 0 is refused.
    pub(crate) fn check_no_protection(&self) -> Result<(), Sense> {
        if self.protect != 0 {
            return Err(Sense::invalid_cdb_field(1, Some(7)));
        }
        Ok(())
    }
}

/// READ (6/10/12/16).
pub(crate) fn read(request: &Request<'_>) -> CommandResult {
    let fields = BlockCdb::parse(request.cdb);
    fields.check_no_protection()?;
    let geometry = request.geometry;
    geometry.check_range(fields.lba, fields.block_count)?;
    let len_bytes = geometry.transfer_len_bytes(fields.block_count, fields.length_field_byte)?;
    // A recycled buffer holds an earlier read's bytes: `read` overwrites them all.
    let mut data = request.core.data_in.take(len_bytes);
    if len_bytes == 0 {
        return Ok(data);
    }
    let offset_bytes = geometry.offset_bytes(fields.lba);
    if request.from_memory {
        let read = request.unit.read_from_memory(offset_bytes, &mut data);
        if !read.map_err(|e| storage_failure(e, false))? {
            request.core.data_in.give_back(data);
            return Err(Failure::WouldWait);
        }
    } else {
        request
            .unit
            .read(offset_bytes, &mut data)
            .map_err(|e| storage_failure(e, false))?;
    }
    Ok(data)
}

/// The whole blocks of Data-Out that arrived, up to the transfer length.
fn arrived_blocks(request: &Request<'_>, len_bytes: usize) -> bytes::Bytes {
    let block_size_bytes = request.geometry.block_size_bytes as usize;
    let arrived = request.data_out.len().min(len_bytes);
    request
        .data_out
        .slice(..arrived - arrived % block_size_bytes)
}

fn write_range(
    request: &Request<'_>,
    lba: u64,
    data: &bytes::Bytes,
    fua: bool,
) -> Result<(), Failure> {
    if data.is_empty() {
        return Ok(());
    }
    let offset_bytes = request.geometry.offset_bytes(lba);
    let _range = request
        .state
        .range_lock
        .lock(offset_bytes, data.len() as u64);
    let fua = fua || !request.state.lock().mode.write_cache_enabled();
    request
        .unit
        .write_shared(offset_bytes, data, fua)
        .map_err(|e| storage_failure(e, true))
}

/// WRITE (6/10/12/16) and WRITE ATOMIC(16).
pub(crate) fn write(request: &Request<'_>) -> CommandResult {
    let fields = BlockCdb::parse(request.cdb);
    fields.check_no_protection()?;
    if request.cdb[0] == op::WRITE_ATOMIC_16 {
        if be16(request.cdb, 10) != 0 {
            return Err(Sense::invalid_cdb_field(10, None).into()); // ATOMIC BOUNDARY
        }
        if fields.block_count > u64::from(MAX_ATOMIC_TRANSFER_BLOCKS) {
            return Err(Sense::invalid_cdb_field(12, None).into());
        }
    }
    let geometry = request.geometry;
    geometry.check_range(fields.lba, fields.block_count)?;
    let len_bytes = geometry.transfer_len_bytes(fields.block_count, fields.length_field_byte)?;
    request.check_writable()?;
    write_range(
        request,
        fields.lba,
        &arrived_blocks(request, len_bytes),
        fields.fua,
    )?;
    Ok(Vec::new())
}

/// WRITE AND VERIFY (10/12/16): BYTCHK 0 verifies the medium, 1 reads back and compares.
pub(crate) fn write_and_verify(request: &Request<'_>) -> CommandResult {
    let fields = BlockCdb::parse(request.cdb);
    fields.check_no_protection()?;
    if fields.byte_check > 1 {
        return Err(Sense::invalid_cdb_field(1, Some(2)).into());
    }
    let geometry = request.geometry;
    geometry.check_range(fields.lba, fields.block_count)?;
    let len_bytes = geometry.transfer_len_bytes(fields.block_count, fields.length_field_byte)?;
    request.check_writable()?;
    let data = arrived_blocks(request, len_bytes);
    // The verification is part of the write: durable first, then read back.
    write_range(request, fields.lba, &data, true)?;
    if !data.is_empty() {
        let mut stored = vec![0u8; data.len()];
        request
            .unit
            .read(geometry.offset_bytes(fields.lba), &mut stored)
            .map_err(|e| storage_failure(e, false))?;
        if fields.byte_check == 1 {
            compare(&data, &stored)?;
        }
    }
    Ok(Vec::new())
}

/// MISCOMPARE with the offset of the first differing byte in INFORMATION.
pub(crate) fn compare(expected: &[u8], stored: &[u8]) -> Result<(), Failure> {
    assert_eq!(expected.len(), stored.len());
    match expected.iter().zip(stored).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(offset) => Err(Sense::new(
            SenseKey::Miscompare,
            AdditionalSense::MISCOMPARE_DURING_VERIFY,
        )
        .with_information(offset as u64)
        .into()),
    }
}

/// VERIFY (10/12/16): BYTCHK 0 checks the medium is readable, 1 compares Data-Out with
/// the medium, 3 compares one block of Data-Out with every block of the range.
pub(crate) fn verify(request: &Request<'_>) -> CommandResult {
    let fields = BlockCdb::parse(request.cdb);
    fields.check_no_protection()?;
    let geometry = request.geometry;
    geometry.check_range(fields.lba, fields.block_count)?;
    let offset_bytes = geometry.offset_bytes(fields.lba);
    match fields.byte_check {
        0 => {
            let mut buffer = Vec::new();
            let total_bytes = geometry.len_bytes(fields.block_count);
            let mut done_bytes = 0u64;
            while done_bytes < total_bytes {
                let chunk_bytes = (total_bytes - done_bytes).min(CHUNK_BYTES);
                buffer.resize(chunk_bytes as usize, 0);
                request
                    .unit
                    .read(offset_bytes + done_bytes, &mut buffer)
                    .map_err(|e| storage_failure(e, false))?;
                done_bytes += chunk_bytes;
            }
            Ok(Vec::new())
        }
        1 => {
            let len_bytes =
                geometry.transfer_len_bytes(fields.block_count, fields.length_field_byte)?;
            if request.data_out.len() < len_bytes {
                return Err(Sense::invalid_cdb_field(fields.length_field_byte, None).into());
            }
            let mut stored = vec![0u8; len_bytes];
            request
                .unit
                .read(offset_bytes, &mut stored)
                .map_err(|e| storage_failure(e, false))?;
            compare(&request.data_out[..len_bytes], &stored)?;
            Ok(Vec::new())
        }
        3 => {
            let block_size_bytes = geometry.block_size_bytes as usize;
            if fields.block_count == 0 {
                return Ok(Vec::new());
            }
            if request.data_out.len() < block_size_bytes {
                return Err(Sense::invalid_cdb_field(fields.length_field_byte, None).into());
            }
            let pattern = &request.data_out[..block_size_bytes];
            let len_bytes =
                geometry.transfer_len_bytes(fields.block_count, fields.length_field_byte)?;
            let mut stored = vec![0u8; len_bytes];
            request
                .unit
                .read(offset_bytes, &mut stored)
                .map_err(|e| storage_failure(e, false))?;
            for (index, block) in stored.chunks(block_size_bytes).enumerate() {
                compare(pattern, block).map_err(|failure| match failure {
                    Failure::Check(mut sense) => {
                        let within = sense.information.unwrap_or(0);
                        sense.information = Some((index * block_size_bytes) as u64 + within);
                        Failure::Check(sense)
                    }
                    other => other,
                })?;
            }
            Ok(Vec::new())
        }
        _ => Err(Sense::invalid_cdb_field(1, Some(2)).into()),
    }
}

/// ORWRITE(16): ORs Data-Out into the stored blocks, atomically with respect to other
/// writes.
pub(crate) fn orwrite(request: &Request<'_>) -> CommandResult {
    let fields = BlockCdb::parse(request.cdb);
    fields.check_no_protection()?;
    let geometry = request.geometry;
    geometry.check_range(fields.lba, fields.block_count)?;
    let len_bytes = geometry.transfer_len_bytes(fields.block_count, fields.length_field_byte)?;
    request.check_writable()?;
    let data = arrived_blocks(request, len_bytes);
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let offset_bytes = geometry.offset_bytes(fields.lba);
    let _range = request
        .state
        .range_lock
        .lock(offset_bytes, data.len() as u64);
    let mut stored = vec![0u8; data.len()];
    request
        .unit
        .read(offset_bytes, &mut stored)
        .map_err(|e| storage_failure(e, false))?;
    for (byte, or) in stored.iter_mut().zip(data.iter()) {
        *byte |= or;
    }
    let fua = fields.fua || !request.state.lock().mode.write_cache_enabled();
    request
        .unit
        .write(offset_bytes, &stored, fua)
        .map_err(|e| storage_failure(e, true))?;
    Ok(Vec::new())
}

/// PRE-FETCH (10/16): every block is as close as it gets already; the range is checked.
pub(crate) fn pre_fetch(request: &Request<'_>) -> CommandResult {
    let fields = BlockCdb::parse(request.cdb);
    request
        .geometry
        .check_range(fields.lba, fields.block_count)?;
    Ok(Vec::new())
}

/// SYNCHRONIZE CACHE (10/16): makes every completed write durable.
pub(crate) fn synchronize_cache(request: &Request<'_>) -> CommandResult {
    let fields = BlockCdb::parse(request.cdb);
    request
        .geometry
        .check_range(fields.lba, fields.block_count)?;
    request.unit.flush().map_err(|e| storage_failure(e, true))?;
    Ok(Vec::new())
}

const _: () = assert!(CHUNK_BYTES <= MAX_TRANSFER_BYTES);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_decodes_each_cdb_size() {
        let read6 = BlockCdb::parse(&[op::READ_6, 0xff, 0x12, 0x34, 0, 0]);
        assert_eq!((read6.lba, read6.block_count), (0x1f1234, 256));
        let mut cdb = [0u8; 16];
        cdb[0] = op::WRITE_10;
        cdb[1] = 0x08 | 0x20;
        cdb[2..6].copy_from_slice(&7u32.to_be_bytes());
        cdb[7..9].copy_from_slice(&3u16.to_be_bytes());
        let write10 = BlockCdb::parse(&cdb);
        assert_eq!(
            (
                write10.lba,
                write10.block_count,
                write10.fua,
                write10.protect
            ),
            (7, 3, true, 1)
        );
        let mut cdb = [0u8; 16];
        cdb[0] = op::READ_16;
        cdb[2..10].copy_from_slice(&(1u64 << 40).to_be_bytes());
        cdb[10..14].copy_from_slice(&9u32.to_be_bytes());
        let read16 = BlockCdb::parse(&cdb);
        assert_eq!(
            (read16.lba, read16.block_count, read16.length_field_byte),
            (1 << 40, 9, 10)
        );
        let mut cdb = [0u8; 12];
        cdb[0] = op::VERIFY_12;
        cdb[1] = 0x06;
        cdb[6..10].copy_from_slice(&5u32.to_be_bytes());
        let verify12 = BlockCdb::parse(&cdb);
        assert_eq!((verify12.block_count, verify12.byte_check), (5, 3));
    }

    #[test]
    fn compare_reports_first_difference() {
        assert!(compare(&[1, 2, 3], &[1, 2, 3]).is_ok());
        let failure = compare(&[1, 2, 3], &[1, 9, 9]).unwrap_err();
        let Failure::Check(sense) = failure else {
            panic!()
        };
        assert_eq!(sense.key, SenseKey::Miscompare);
        assert_eq!(sense.information, Some(1));
    }
}
