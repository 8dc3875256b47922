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
pub(crate) fn block_rows(engine: &crate::Engine) -> Vec<(u64, crate::meta::schema::BlockRec)> {
    use redb::ReadableTable;
    let txn = engine.begin_read().unwrap();
    let blocks = txn.open_table(crate::meta::schema::BLOCKS).unwrap();
    blocks
        .iter()
        .unwrap()
        .map(|item| {
            let (id, value) = item.unwrap();
            (
                id.value(),
                crate::meta::schema::BlockRec::decode(value.value()).unwrap(),
            )
        })
        .collect()
}

/// A fresh data directory, `lacuna-<name>-…` in the system's temporary
/// directory, removed when dropped.
pub(crate) fn data_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("lacuna-{name}-"))
        .tempdir()
        .unwrap()
}

/// An engine of `capacity_bytes` on `dir` without the background thread: the
/// tests run background steps themselves, when they mean to.
pub(crate) fn quiet_engine(
    dir: &std::path::Path,
    capacity_bytes: u64,
) -> std::sync::Arc<crate::Engine> {
    crate::Engine::open(quiet_config(dir, capacity_bytes)).unwrap()
}

fn quiet_config(dir: &std::path::Path, capacity_bytes: u64) -> crate::EngineConfig {
    let mut config = crate::EngineConfig::new(dir, capacity_bytes);
    config.background = false;
    config
}

/// [`quiet_engine`] keeping no grains for reads (see `hot`): every block read
/// goes to its segment, for tests of how that is done.
pub(crate) fn quiet_engine_reading_segments(
    dir: &std::path::Path,
    capacity_bytes: u64,
) -> std::sync::Arc<crate::Engine> {
    let mut config = quiet_config(dir, capacity_bytes);
    config.hot_grains = 0;
    crate::Engine::open(config).unwrap()
}
