//! How many bytes of Data-Out a CDB asks for, so a transport can report write
//! residuals (RFC 7143 11.4.5) without parsing CDBs itself.

use crate::block::{be16, be32};
use crate::rw::BlockCdb;

/// Data-Out bytes `cdb` asks for on a unit with `block_size_bytes` blocks; `None`
/// for commands that send no data to the target.
pub(crate) fn data_out_bytes(cdb: &[u8], block_size_bytes: u32) -> Option<u64> {
    let opcode = *cdb.first()?;
    let len = match opcode {
        0x0a | 0x2a | 0xaa | 0x8a | 0x2e | 0xae | 0x8e | 0x8b | 0x9c => 6,
        0x2f | 0xaf | 0x8f | 0x89 | 0x41 | 0x93 => 6,
        0x42 | 0x55 | 0x48 => 10,
        0x15 => 6,
        0x5f => 10,
        0x83 => 16,
        _ => return None,
    };
    if cdb.len() < len.max(cdb_len(opcode)) {
        return None;
    }
    let block = u64::from(block_size_bytes);
    let blocks = |cdb: &[u8]| BlockCdb::parse(cdb).block_count;
    Some(match opcode {
        // WRITE, WRITE AND VERIFY, ORWRITE, WRITE ATOMIC.
        0x0a | 0x2a | 0xaa | 0x8a | 0x2e | 0xae | 0x8e | 0x8b | 0x9c => blocks(cdb) * block,
        // VERIFY: data only with BYTCHK 01b (every block) or 11b (one block).
        0x2f | 0xaf | 0x8f => match (cdb[1] >> 1) & 0x03 {
            0x01 => blocks(cdb) * block,
            0x03 => block,
            _ => 0,
        },
        // COMPARE AND WRITE: the compare data then the write data.
        0x89 => 2 * u64::from(cdb[13]) * block,
        // WRITE SAME: one block, none with NDOB.
        0x41 => block,
        0x93 if cdb[1] & 0x01 != 0 => 0,
        0x93 => block,
        // Parameter lists.
        0x42 | 0x55 | 0x48 => u64::from(be16(cdb, 7)),
        0x15 => u64::from(cdb[4]),
        0x5f => u64::from(be32(cdb, 5)),
        0x83 => u64::from(be32(cdb, 10)),
        _ => unreachable!("filtered above"),
    })
}

/// The CDB length of an opcode by its group code (SAM-5 5.2).
fn cdb_len(opcode: u8) -> usize {
    match opcode >> 5 {
        0 => 6,
        1 | 2 => 10,
        4 => 16,
        5 => 12,
        _ => 6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_of_the_data_out_commands() {
        let mut write10 = [0u8; 10];
        write10[0] = 0x2a;
        write10[8] = 3;
        assert_eq!(data_out_bytes(&write10, 512), Some(1536));
        let mut caw = [0u8; 16];
        caw[0] = 0x89;
        caw[13] = 2;
        assert_eq!(data_out_bytes(&caw, 512), Some(2048));
        let mut ws16 = [0u8; 16];
        ws16[0] = 0x93;
        ws16[1] = 0x01;
        assert_eq!(data_out_bytes(&ws16, 4096), Some(0));
        let mut verify = [0u8; 10];
        verify[0] = 0x2f;
        verify[8] = 4;
        assert_eq!(data_out_bytes(&verify, 512), Some(0));
        verify[1] = 0x02;
        assert_eq!(data_out_bytes(&verify, 512), Some(2048));
        let mut unmap = [0u8; 10];
        unmap[0] = 0x42;
        unmap[8] = 24;
        assert_eq!(data_out_bytes(&unmap, 512), Some(24));
        assert_eq!(data_out_bytes(&[0x28; 10], 512), None);
        assert_eq!(data_out_bytes(&[0x2a; 3], 512), None);
        assert_eq!(data_out_bytes(&[], 512), None);
    }
}
