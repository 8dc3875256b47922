//! The engine itself on a one-node Ceph cluster: volumes, writes, a snapshot
//! and overwrites on RADOS objects; another client's engine (a second
//! gateway) opens the shard and reads back everything flushed, after a clean
//! close and after a crash (the first engine leaked, never closed), and the
//! metadata check passes on what it finds.

use std::sync::Arc;

use lacuna_engine::{Engine, EngineConfig};
use lacuna_rados::test_cluster::{TestCluster, POOL};

const MIB: u64 = 1 << 20;
const GRAIN: u64 = 4096;

fn open(cluster: &TestCluster, dir: &std::path::Path) -> Arc<Engine> {
    let io = Arc::new(cluster.client().io(POOL, "shard-0").unwrap());
    let config = EngineConfig {
        // No background thread: a leaked engine must not write after its
        // "crash" (fencing that for real is the gateways' business).
        background: false,
        external_store: Some(lacuna_rados_store::shard_store(io, "test shard-0")),
        ..EngineConfig::new(dir, 4096 * MIB)
    };
    Engine::open(config).expect("opening the engine on RADOS")
}

/// A grain naming its address and version; a fifth of them repeat another's
/// content (deduplicated), the rest are unique.
fn grain(g: u64, version: u64) -> Vec<u8> {
    let seed = if g.is_multiple_of(5) { 7 } else { g };
    let mut x = (seed << 16 ^ version).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..GRAIN / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

fn write_mib(volume: &lacuna_engine::Volume, mib: u64, version: u64) {
    let data: Vec<u8> = (0..MIB / GRAIN)
        .flat_map(|g| grain(mib * (MIB / GRAIN) + g, version))
        .collect();
    volume.write(mib * MIB, &data).unwrap();
}

type Read<'a> = &'a dyn Fn(u64, &mut [u8]) -> lacuna_engine::Result<()>;

fn check_mib(read: Read, mib: u64, version: u64, what: &str) {
    let mut back = vec![0u8; MIB as usize];
    read(mib * MIB, &mut back).unwrap();
    for g in 0..MIB / GRAIN {
        let at = (g * GRAIN) as usize;
        assert!(
            back[at..at + GRAIN as usize] == grain(mib * (MIB / GRAIN) + g, version)[..],
            "{what}: MiB {mib}, grain {g} is not version {version}"
        );
    }
}

#[test]
fn the_engine_runs_on_rados_and_another_gateway_recovers_it() {
    let cluster = TestCluster::start();
    let local = tempfile::tempdir().unwrap();
    let engine = open(&cluster, &local.path().join("gw-1"));
    engine.create_volume("v", 64 * MIB).unwrap();
    let v = engine.open_volume("v").unwrap();
    for mib in 0..48 {
        write_mib(&v, mib, 1);
    }
    engine.flush().unwrap();
    engine.create_snapshots(&["v"], Some("s1"), None).unwrap();
    for mib in 0..24 {
        write_mib(&v, mib, 2);
    }
    v.unmap(40 * MIB, 8 * MIB).unwrap();
    engine.flush().unwrap();
    engine.check_consistency().unwrap();
    let space = engine.space();
    assert!(
        space.shared_bytes > 0 && space.snapshot_count == 1,
        "dedup and a snapshot on RADOS: {space:?}"
    );
    drop(v);
    engine.close().unwrap();
    drop(engine);

    let objects = cluster
        .client()
        .io(POOL, "shard-0")
        .unwrap()
        .list(1 << 16)
        .unwrap();
    assert!(objects.iter().any(|o| o.starts_with("seg.")), "{objects:?}");
    assert!(
        objects.iter().any(|o| o.starts_with("meta.")),
        "{objects:?}"
    );
    let local_files: Vec<_> = walk(local.path());
    assert!(
        local_files
            .iter()
            .all(|f| !f.ends_with(".seg") && !f.ends_with(".redb")),
        "nothing of the shard is local: {local_files:?}"
    );

    // Gateway 2, on its own client and local directory, after a clean close.
    let engine = open(&cluster, &local.path().join("gw-2"));
    engine.check_consistency().unwrap();
    let v = engine.open_volume("v").unwrap();
    let read_v = |at: u64, buf: &mut [u8]| v.read(at, buf);
    for mib in 0..24 {
        check_mib(&read_v, mib, 2, "after a clean close");
    }
    for mib in 24..40 {
        check_mib(&read_v, mib, 1, "after a clean close");
    }
    let mut zeroes = vec![1u8; MIB as usize];
    v.read(44 * MIB, &mut zeroes).unwrap();
    assert!(
        zeroes.iter().all(|&b| b == 0),
        "the unmapped range reads zero"
    );
    let snap = engine.open_snapshot("v@s1").unwrap();
    let read_snap = |at: u64, buf: &mut [u8]| snap.read(at, buf);
    for mib in [0, 23, 24, 47] {
        check_mib(&read_snap, mib, 1, "the snapshot");
    }
    // Flushed writes, then unflushed ones, then a crash (never closed).
    for mib in 24..32 {
        write_mib(&v, mib, 3);
    }
    engine.flush().unwrap();
    for mib in 32..40 {
        write_mib(&v, mib, 4);
    }
    std::mem::forget((v, snap, engine));

    // Gateway 3 recovers to the last flush.
    let engine = open(&cluster, &local.path().join("gw-3"));
    engine.check_consistency().unwrap();
    let v = engine.open_volume("v").unwrap();
    let read_v = |at: u64, buf: &mut [u8]| v.read(at, buf);
    for mib in 0..24 {
        check_mib(&read_v, mib, 2, "after the crash");
    }
    for mib in 24..32 {
        check_mib(&read_v, mib, 3, "after the crash (flushed)");
    }
    for mib in 32..40 {
        let mut back = vec![0u8; MIB as usize];
        v.read(mib * MIB, &mut back).unwrap();
        let first = &back[..GRAIN as usize];
        let base = mib * (MIB / GRAIN);
        assert!(
            first == grain(base, 1).as_slice() || first == grain(base, 4).as_slice(),
            "MiB {mib} after the crash: neither its flushed nor its unflushed content"
        );
    }
    engine.create_volume("w", 8 * MIB).unwrap();
    engine.flush().unwrap();
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path.display().to_string());
        }
    }
    out
}
