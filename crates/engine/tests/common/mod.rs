//! Helpers the engine's integration tests share.

#![allow(dead_code)]

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
