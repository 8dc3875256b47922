//! Helpers the engine's integration tests share.

#![allow(dead_code)]

pub mod model;

use tempfile::TempDir;

/// A fresh, empty directory under the system temp dir, named
/// `lacuna-<prefix>-<tag>-<random>` so a leftover says which test made it.
/// The guard removes it when dropped — at the end of the test, passed or
/// failed — so keep it alive (declared before the engine that uses it) for
/// as long as the directory is in use, reopens after a crash included.
pub fn temp_dir(prefix: &str, tag: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("lacuna-{prefix}-{tag}-"))
        .tempdir()
        .expect("create a temporary directory")
}

/// Unique (incompressible, undedupable) data from a seed.
pub fn unique_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Waits (boundedly) until the background reducer has compressed what writes
/// stored raw: the footprint the codec gives.
pub fn settle_reduction(engine: &lacuna_engine::Engine) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while engine.space().reduction_backlog_bytes > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "reduction never settled: {:?}",
            engine.space()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
