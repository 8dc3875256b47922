//! Data for the crate's unit tests.

/// Incompressible bytes with no repeated pattern, different for each seed
/// (xorshift): every 4 KiB grain of them is stored as a distinct block.
pub(crate) fn unique_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Every row of the block table, in block id order.
pub(crate) fn block_rows(engine: &crate::Engine) -> Vec<(u64, crate::meta::BlockRec)> {
    use redb::ReadableTable;
    let txn = engine.begin_read().unwrap();
    let blocks = txn.open_table(crate::meta::BLOCKS).unwrap();
    blocks
        .iter()
        .unwrap()
        .map(|item| {
            let (id, value) = item.unwrap();
            (
                id.value(),
                crate::meta::BlockRec::decode(value.value()).unwrap(),
            )
        })
        .collect()
}
