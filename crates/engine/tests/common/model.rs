//! The engine's model test, shared by the store it runs on: random
//! sequences of writes (aligned and not), unmaps, write-zeroes, reads,
//! flushes, restarts, reclaim and cleaning, checked byte for byte against a
//! plain in-memory model, with the space accounting checked after each
//! sequence. `tests/model.rs` runs it on the local store; the RADOS store's
//! tests run it on a one-node Ceph cluster.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lacuna_engine::{Engine, ExtentState};
use proptest::prelude::*;

pub const VOLUME_BYTES: u64 = 256 * 1024;

#[derive(Debug, Clone)]
pub enum Op {
    /// offset, length, fill kind (0 = zeroes, 1 = repeated word, 2 = a small set of
    /// blocks so dedup hits, 3 = unique bytes), seed
    Write(u64, u64, u8, u8),
    Unmap(u64, u64),
    WriteZeroes(u64, u64, bool),
    Read(u64, u64),
    Flush,
    Restart,
    Reclaim,
    /// Runs the segment cleaner over every segment holding stale bytes.
    Clean,
}

pub fn op() -> impl Strategy<Value = Op> {
    let range = (0..VOLUME_BYTES, 1u64..64 * 1024).prop_map(|(o, l)| (o, l.min(VOLUME_BYTES - o)));
    let aligned = (0..VOLUME_BYTES / 4096, 1u64..16)
        .prop_map(|(g, n)| (g * 4096, (n * 4096).min(VOLUME_BYTES - g * 4096)));
    prop_oneof![
        4 => (aligned.clone(), 0u8..4, any::<u8>()).prop_map(|((o, l), k, s)| Op::Write(o, l, k, s)),
        3 => (range.clone(), 0u8..4, any::<u8>()).prop_map(|((o, l), k, s)| Op::Write(o, l, k, s)),
        2 => range.clone().prop_map(|(o, l)| Op::Unmap(o, l)),
        1 => aligned.prop_map(|(o, l)| Op::Unmap(o, l)),
        2 => (range.clone(), any::<bool>()).prop_map(|((o, l), u)| Op::WriteZeroes(o, l, u)),
        3 => range.prop_map(|(o, l)| Op::Read(o, l)),
        1 => Just(Op::Flush),
        1 => Just(Op::Restart),
        1 => Just(Op::Reclaim),
        1 => Just(Op::Clean),
    ]
}

pub fn fill(kind: u8, seed: u8, offset: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let at = offset + i;
            match kind {
                0 => 0,
                1 => [seed, 1, 2, 3, 4, 5, 6, 7][(at % 8) as usize],
                2 => ((at % 4096) as u8).wrapping_mul(seed % 3 + 1),
                _ => (at.wrapping_mul(2654435761) >> 8) as u8 ^ seed,
            }
        })
        .collect()
}

/// Waits until the background reclaimer has no backlog (bounded).
pub fn drain_reclaim(engine: &Engine) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while engine.space().reclaim_backlog_bytes > 0 {
        assert!(
            Instant::now() < deadline,
            "reclaim did not drain: {:?}",
            engine.space()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The ops against the model on the engines `open` gives (a first one, and
/// another after each restart, on the same storage), then the final content,
/// extents, the metadata check and the space accounting, before and after the
/// background work settles.
pub fn run_on(ops: Vec<Op>, open: &dyn Fn() -> Arc<Engine>) {
    let mut engine = open();
    engine.create_volume("v", VOLUME_BYTES).unwrap();
    let mut model = vec![0u8; VOLUME_BYTES as usize];
    for op in ops {
        let vol = engine.open_volume("v").unwrap();
        match op {
            Op::Write(o, l, k, s) => {
                let data = fill(k, s, o, l);
                vol.write(o, &data).unwrap();
                model[o as usize..(o + l) as usize].copy_from_slice(&data);
            }
            Op::Unmap(o, l) => {
                vol.unmap(o, l).unwrap();
                model[o as usize..(o + l) as usize].fill(0);
            }
            Op::WriteZeroes(o, l, u) => {
                vol.write_zeroes(o, l, u).unwrap();
                model[o as usize..(o + l) as usize].fill(0);
            }
            Op::Read(o, l) => {
                let mut buf = vec![0xeeu8; l as usize];
                vol.read(o, &mut buf).unwrap();
                assert!(
                    buf == model[o as usize..(o + l) as usize],
                    "read {o}+{l} differs"
                );
            }
            Op::Flush => vol.flush().unwrap(),
            Op::Restart => {
                drop(vol);
                engine.close().unwrap();
                drop(engine);
                engine = open();
            }
            Op::Reclaim => drain_reclaim(&engine),
            Op::Clean => {
                drop(vol);
                engine.clean_now().unwrap();
            }
        }
    }
    let vol = engine.open_volume("v").unwrap();
    let mut all = vec![0u8; VOLUME_BYTES as usize];
    vol.read(0, &mut all).unwrap();
    assert!(all == model, "final content differs");
    check_extents(&vol, &model);
    engine.check_consistency().unwrap();
    // Shadowed mappings hold physical space until reclaimed: settle first.
    drain_reclaim(&engine);
    super::settle_reduction(&engine);
    let mut reduced = vec![0u8; VOLUME_BYTES as usize];
    vol.read(0, &mut reduced).unwrap();
    assert!(reduced == model, "content differs once reduced");
    engine.check_consistency().unwrap();
    check_accounting(&engine, &model);
    drop(vol);
    engine.close().unwrap();
    drop(engine);
}

/// Extents must cover the range, and every byte reported Hole or Zero must be zero.
pub fn check_extents(vol: &lacuna_engine::Volume, model: &[u8]) {
    let mut at = 0u64;
    while at < VOLUME_BYTES {
        let extents = vol.extents(at, VOLUME_BYTES - at).unwrap();
        assert!(!extents.is_empty());
        for e in extents {
            if e.state != ExtentState::Data {
                assert!(model[at as usize..(at + e.length_bytes) as usize]
                    .iter()
                    .all(|&b| b == 0));
            }
            at += e.length_bytes;
        }
    }
    assert_eq!(at, VOLUME_BYTES);
}

/// written bytes = grains holding non-zero data; physical figures add up.
pub fn check_accounting(engine: &Engine, model: &[u8]) {
    let info = engine.volume_info("v").unwrap();
    let data_grains = model
        .chunks(4096)
        .filter(|g| g.iter().any(|&b| b != 0))
        .count() as u64;
    // A grain of zeroes written as data is "data" only if stored as a block, which
    // zero grains never are; a grain that is a non-zero pattern counts as data.
    assert_eq!(info.written_bytes, data_grains * 4096, "{info:?}");
    let space = engine.space();
    assert_eq!(
        space.physical_used_bytes,
        space.live_physical_bytes + space.stale_bytes
    );
    assert_eq!(
        space.free_bytes + space.physical_used_bytes,
        space.capacity_bytes
    );
    let per_volume = info.unique_physical_bytes + info.shared_physical_bytes;
    assert!(
        per_volume.abs_diff(space.live_physical_bytes) <= 1,
        "{info:?} vs {space:?}"
    );
}
