//! Properties of snapshots, clones and copies that a model test cannot see:
//! metadata-only cost (records counted, not time), read cost independent of
//! snapshot depth, consistency of group snapshots under concurrent writers, and
//! out-of-space behaviour by provisioning type.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{temp_dir, unique_bytes};
use lacuna_engine::{Engine, EngineConfig, EngineError, Provisioning};

fn open(dir: &Path, capacity_bytes: u64) -> Arc<Engine> {
    Engine::open(EngineConfig::new(dir, capacity_bytes)).expect("open engine")
}

fn records(engine: &Engine) -> u64 {
    engine
        .stats
        .foreground_records_written
        .load(Ordering::SeqCst)
}

#[test]
fn snapshot_clone_copy_and_eager_zeroing_write_constant_records() {
    let tmp = temp_dir("ver", "records");
    let dir = tmp.path();
    let engine = open(dir, 4 << 30);
    let mut costs = Vec::new();
    for (i, mib) in [1u64, 16, 64].into_iter().enumerate() {
        let name = format!("v{i}");
        engine.create_volume(&name, mib << 20).unwrap();
        let vol = engine.open_volume(&name).unwrap();
        vol.write(0, &unique_bytes((mib << 20) as usize, i as u64))
            .unwrap();
        let mut cost = Vec::new();
        let before = records(&engine);
        engine.create_snapshots(&[&name], Some("s"), None).unwrap();
        cost.push(records(&engine) - before);
        let before = records(&engine);
        engine
            .clone_volume(
                &format!("{name}@s"),
                &format!("{name}-clone"),
                Provisioning::Thin,
            )
            .unwrap();
        cost.push(records(&engine) - before);
        let before = records(&engine);
        engine
            .clone_volume(&name, &format!("{name}-clone2"), Provisioning::Thin)
            .unwrap();
        cost.push(records(&engine) - before);
        let half = (mib << 20) / 2;
        let before = records(&engine);
        let report = engine
            .copy_range(&name, 0, half, &format!("{name}-clone"), half)
            .unwrap();
        assert_eq!(report.referenced_bytes, half);
        cost.push(records(&engine) - before);
        let before = records(&engine);
        engine
            .create_volume_with(
                &format!("{name}-ezt"),
                mib << 20,
                Provisioning::EagerZeroedThick,
            )
            .unwrap();
        cost.push(records(&engine) - before);
        costs.push(cost);
    }
    // The same records whatever the size of the data beneath, and few of them.
    assert_eq!(costs[0], costs[1], "{costs:?}");
    assert_eq!(costs[1], costs[2], "{costs:?}");
    assert!(costs[0].iter().all(|&c| c <= 4), "{costs:?}");
    engine.check_consistency().unwrap();
    engine.close().unwrap();
    drop(engine);
}

#[test]
fn live_reads_cost_the_same_kv_operations_at_any_snapshot_depth() {
    let tmp = temp_dir("ver", "depth");
    let dir = tmp.path();
    let engine = open(dir, 1 << 30);
    let mut ops_per_depth = Vec::new();
    for depth in [0u64, 64] {
        let name = format!("d{depth}");
        engine.create_volume(&name, 1 << 20).unwrap();
        let vol = engine.open_volume(&name).unwrap();
        vol.write(0, &unique_bytes(1 << 20, depth)).unwrap();
        for s in 0..depth {
            engine
                .create_snapshots(&[&name], Some(&format!("s{s}")), None)
                .unwrap();
            // Overwrite between snapshots so every grain has `depth` old versions.
            vol.write(0, &unique_bytes(1 << 20, depth * 1000 + s))
                .unwrap();
        }
        let mut buf = vec![0u8; 1 << 20];
        // Committed, so that the read looks the mappings up in the store (the
        // open write transaction's grains are found in memory).
        vol.flush().unwrap();
        let before = engine.stats.read_kv_ops.load(Ordering::SeqCst);
        vol.read(0, &mut buf).unwrap();
        ops_per_depth.push(engine.stats.read_kv_ops.load(Ordering::SeqCst) - before);
        // The oldest snapshot still reads its own version.
        if depth > 0 {
            let snap = engine.open_snapshot(&format!("{name}@s0")).unwrap();
            snap.read(0, &mut buf).unwrap();
            assert!(buf == unique_bytes(1 << 20, depth), "s0 of {name}");
        }
    }
    assert!(ops_per_depth[0] > 0);
    assert_eq!(ops_per_depth[0], ops_per_depth[1], "{ops_per_depth:?}");
    engine.check_consistency().unwrap();
    engine.close().unwrap();
    drop(engine);
}

/// Writers each write an increasing counter to their own volume, one volume after
/// another in a fixed order per round (a write to volume i+1 starts only after
/// the write to volume i completed). A consistent group snapshot therefore shows
/// counters that never increase from one member to the next, and differ by at
/// most one round.
#[test]
fn group_snapshot_of_sixteen_volumes_under_writers_is_consistent() {
    const VOLUMES: usize = 16;
    let tmp = temp_dir("ver", "group");
    let dir = tmp.path();
    let engine = open(dir, 1 << 30);
    let names: Vec<String> = (0..VOLUMES).map(|i| format!("m{i:02}")).collect();
    for name in &names {
        engine.create_volume(name, 1 << 20).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let engine = engine.clone();
            let names = names.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let vols: Vec<_> = names
                    .iter()
                    .map(|n| engine.open_volume(n).unwrap())
                    .collect();
                let mut round = 1u64;
                while !stop.load(Ordering::SeqCst) {
                    for vol in &vols {
                        let mut grain = vec![0u8; 4096];
                        grain[..8].copy_from_slice(&round.to_le_bytes());
                        grain[8] = 0xa5;
                        vol.write(w * 4096, &grain).unwrap();
                    }
                    round += 1;
                }
            })
        })
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut windows_us = Vec::new();
    for g in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        let group = format!("g{g}");
        let taken = engine.create_snapshots(&refs, None, Some(&group)).unwrap();
        windows_us.push(taken.commit_window_us);
        for w in 0..2u64 {
            let mut counters = Vec::new();
            for name in &names {
                let snap = engine.open_snapshot(&format!("{name}@{group}")).unwrap();
                let mut grain = vec![0u8; 4096];
                snap.read(w * 4096, &mut grain).unwrap();
                counters.push(u64::from_le_bytes(grain[..8].try_into().unwrap()));
            }
            for pair in counters.windows(2) {
                assert!(
                    pair[0] >= pair[1] && pair[0] - pair[1] <= 1,
                    "group {group}, writer {w}: {counters:?}"
                );
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().unwrap();
    }
    eprintln!("group commit windows (us): {windows_us:?}");
    engine.check_consistency().unwrap();
    engine.close().unwrap();
    drop(engine);
}

#[test]
fn out_of_space_fails_thin_writes_only_and_recovers_after_freeing() {
    let tmp = temp_dir("ver", "oos");
    let dir = tmp.path();
    let capacity: u64 = 64 << 20;
    // Thin data stops short of the thick reservations, the thick headroom and
    // the cleaner's reserve (a quarter of so small an array): about 53% live.
    let engine = Engine::open(EngineConfig {
        soft_threshold_percent: 65,
        ..EngineConfig::new(dir, capacity)
    })
    .unwrap();
    // A thick volume reserves its size up front; one too big is refused.
    let too_big = engine.create_volume_with("huge", 128 << 20, Provisioning::ZeroedThick);
    assert!(
        matches!(too_big, Err(EngineError::NoSpace(_))),
        "{too_big:?}"
    );
    engine
        .create_volume_with("thick", 8 << 20, Provisioning::ZeroedThick)
        .unwrap();
    engine
        .create_volume_with("eager", 4 << 20, Provisioning::EagerZeroedThick)
        .unwrap();
    engine.create_volume("thin", 256 << 20).unwrap();
    assert!(engine.space().reserved_bytes >= 12 << 20);
    let thin = engine.open_volume("thin").unwrap();
    let chunk = 1 << 20;
    let mut written = Vec::new();
    let mut offset = 0;
    let failure = loop {
        let data = unique_bytes(chunk, offset);
        match thin.write(offset, &data) {
            Ok(()) => {
                written.push((offset, data));
                offset += chunk as u64;
            }
            Err(e) => break e,
        }
        assert!(offset < 256 << 20, "thin writes never failed");
    };
    assert!(matches!(failure, EngineError::NoSpace(_)), "{failure}");
    assert!(!engine.space().soft_threshold_exceeded);
    // Thick volumes still take every grain they reserved.
    for (name, size) in [("thick", 8u64 << 20), ("eager", 4 << 20)] {
        let vol = engine.open_volume(name).unwrap();
        let data = unique_bytes(size as usize, size);
        vol.write(0, &data).unwrap();
        let mut back = vec![0u8; size as usize];
        vol.read(0, &mut back).unwrap();
        assert!(back == data, "{name}");
    }
    // Thick writes took physical use past 65%: the soft threshold fired once.
    let space = engine.space();
    assert!(space.soft_threshold_exceeded, "{space:?}");
    assert_eq!(space.soft_threshold_events, 1, "{space:?}");
    // Nothing written before the failure is damaged.
    for (offset, data) in &written {
        let mut back = vec![0u8; data.len()];
        thin.read(*offset, &mut back).unwrap();
        assert!(back == *data, "thin at {offset}");
    }
    engine.check_consistency().unwrap();
    // Freeing space (unmap + reclaim) makes thin writable again.
    thin.unmap(0, offset).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        engine.flush().unwrap();
        if thin.write(0, &unique_bytes(chunk, 99)).is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "space never came back"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    engine.check_consistency().unwrap();
    engine.close().unwrap();
    drop(engine);
}

#[test]
fn destroyed_volumes_and_snapshots_are_eradicated_when_the_retention_passes() {
    let tmp = temp_dir("ver", "retention");
    let dir = tmp.path();
    let engine = Engine::open(EngineConfig {
        destroy_retention_s: 0,
        ..EngineConfig::new(dir, 1 << 30)
    })
    .unwrap();
    engine.create_volume("keep", 1 << 20).unwrap();
    engine.create_volume("gone", 1 << 20).unwrap();
    engine
        .open_volume("gone")
        .unwrap()
        .write(0, &unique_bytes(1 << 20, 5))
        .unwrap();
    engine.create_snapshots(&["keep"], Some("s"), None).unwrap();
    engine.delete_snapshot("keep@s").unwrap();
    engine.delete_volume("gone").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let space = engine.space();
        let snapshots_left = engine.list_snapshots(None, true).unwrap().len();
        if space.destroyed_volume_count == 0
            && snapshots_left == 0
            && space.live_physical_bytes == 0
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not eradicated: {space:?}, {snapshots_left} snapshots"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Eradicated means gone for good: the names are free again.
    assert!(engine.recover_volume("gone").is_err());
    engine.create_volume("gone", 1 << 20).unwrap();
    engine.check_consistency().unwrap();
    engine.close().unwrap();
    drop(engine);
}

#[test]
fn cleaner_relocates_live_records_and_frees_mostly_dead_segments() {
    let tmp = temp_dir("ver", "cleaner");
    let dir = tmp.path();
    // No background thread: its own cleaning, started while the machine is
    // slow, would relocate records before the first measurement below.
    let mut config = EngineConfig::new(dir, 1 << 30);
    config.background = false;
    let engine = Engine::open(config).unwrap();
    engine.create_volume("v", 64 << 20).unwrap();
    let vol = engine.open_volume("v").unwrap();
    let data = unique_bytes(64 << 20, 1);
    vol.write(0, &data).unwrap();
    // Overwrite every other 64 KiB piece: half of each segment goes stale.
    let mut expected = data.clone();
    for piece in (0..(64 << 20)).step_by(128 << 10) {
        let fresh = unique_bytes(64 << 10, piece as u64 + 7);
        vol.write(piece as u64, &fresh).unwrap();
        expected[piece..piece + (64 << 10)].copy_from_slice(&fresh);
    }
    engine.flush().unwrap();
    let before = engine.space();
    assert!(before.stale_bytes > 16 << 20, "{before:?}");
    // Unique incompressible data: every host byte became a record (plus headers).
    assert_eq!(before.host_written_bytes, (64 << 20) + (32 << 20));
    assert!(
        before.write_amplification > 1.0 && before.write_amplification < 1.01,
        "{before:?}"
    );
    let cleaned = engine.clean_now().unwrap();
    assert!(cleaned > 0);
    let relocated = engine.stats.relocated_bytes.load(Ordering::SeqCst);
    assert!(relocated > 0);
    let after = engine.space();
    // Relocation is media writing without host writing: amplification rises by it.
    assert_eq!(
        after.media_written_bytes,
        before.media_written_bytes + relocated
    );
    assert!(after.write_amplification > before.write_amplification);
    assert!(
        after.stale_bytes < before.stale_bytes / 4,
        "{before:?}\n{after:?}"
    );
    assert!(
        after.physical_used_bytes < before.physical_used_bytes,
        "{after:?}"
    );
    assert_eq!(after.live_physical_bytes, before.live_physical_bytes);
    let mut back = vec![0u8; 64 << 20];
    vol.read(0, &mut back).unwrap();
    assert!(back == expected, "data changed by cleaning");
    engine.check_consistency().unwrap();
    // And it all survives a restart (relocations are durable, victims gone).
    drop(vol);
    engine.close().unwrap();
    drop(engine);
    let engine = open(dir, 1 << 30);
    let mut back = vec![0u8; 64 << 20];
    engine.open_volume("v").unwrap().read(0, &mut back).unwrap();
    assert!(back == expected, "data changed across restart");
    engine.check_consistency().unwrap();
    engine.close().unwrap();
    drop(engine);
}

#[test]
fn unmap_and_reclaim_counters_are_exact() {
    let tmp = temp_dir("ver", "counters");
    let dir = tmp.path();
    let engine = open(dir, 1 << 30);
    engine.create_volume("v", 8 << 20).unwrap();
    let vol = engine.open_volume("v").unwrap();
    vol.write(0, &unique_bytes(8 << 20, 3)).unwrap();
    vol.unmap(0, 1 << 20).unwrap();
    vol.unmap(2 << 20, 512).unwrap();
    vol.write_zeroes(4 << 20, 1 << 20, true).unwrap();
    vol.write_zeroes(6 << 20, 1 << 20, false).unwrap(); // keeps allocation: not an unmap
    let space = engine.space();
    assert_eq!(space.unmap_commands, 3);
    assert_eq!(space.unmapped_bytes, (1 << 20) + 512 + (1 << 20));
    assert_eq!(space.host_written_bytes, 8 << 20);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // Every whole-grain range (the 1 MiB unmap and both 1 MiB write-zeroes) has
    // its old mappings dropped; the 512-byte unmap is a partial-grain write of
    // zeroes, not a range.
    while engine.space().reclaim_backlog_bytes > 0 {
        assert!(std::time::Instant::now() < deadline, "{:?}", engine.space());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(engine.space().reclaimed_bytes, 3 << 20);
    engine.close().unwrap();
    drop(engine);
}

/// ESXi clones within one LUN with thousands of small XCOPY segments: each
/// copy pins the volume again, and the pins refer to earlier pins. Every copy
/// must stay cheap (this once doubled with each segment).
#[test]
fn many_copies_within_one_volume_stay_cheap() {
    let tmp = temp_dir("ver", "xcopy-chain");
    let dir = tmp.path();
    let engine = open(dir, 1 << 30);
    engine.create_volume("v", 64 << 20).unwrap();
    let vol = engine.open_volume("v").unwrap();
    let data = unique_bytes(8 << 20, 11);
    vol.write(0, &data).unwrap();
    let segment = 64 << 10;
    for i in 0..128u64 {
        let at = i * segment;
        engine
            .copy_range("v", at, segment, "v", (16 << 20) + at)
            .unwrap();
    }
    let mut back = vec![0u8; 8 << 20];
    vol.read(16 << 20, &mut back).unwrap();
    assert!(back == data, "copied range differs");
    engine.check_consistency().unwrap();
    drop(vol);
    engine.close().unwrap();
    drop(engine);
}

/// A write over grains whose old blocks are both kept for a snapshot (one
/// grain) and released (another grain sharing the block) changes each block's
/// row twice in one pass: the counts must come out as if done one by one.
#[test]
fn a_rewrite_that_keeps_and_releases_the_same_blocks_counts_both() {
    let tmp = temp_dir("ver", "keep-release");
    let engine = open(tmp.path(), 1 << 30);
    let half_grains = 64u64;
    let half_bytes = (half_grains * 4096) as usize;
    engine.create_volume("v", 2 * half_grains * 4096).unwrap();
    let vol = engine.open_volume("v").unwrap();
    let old = unique_bytes(half_bytes, 1);
    vol.write(0, &old).unwrap();
    engine.create_snapshots(&["v"], Some("s"), None).unwrap();
    // The second half shares the first half's blocks, after the snapshot.
    vol.write(half_bytes as u64, &old).unwrap();
    engine.check_consistency().unwrap();

    // The first half's old mappings go to the snapshot's history, the second
    // half's are released: the same blocks, in one write.
    let new = unique_bytes(2 * half_bytes, 2);
    vol.write(0, &new).unwrap();
    engine.check_consistency().unwrap();

    let mut back = vec![0u8; 2 * half_bytes];
    vol.read(0, &mut back).unwrap();
    assert!(back == new, "the volume reads the rewrite");
    let snap = engine.open_snapshot("v@s").unwrap();
    let mut seen = vec![0u8; half_bytes];
    snap.read(0, &mut seen).unwrap();
    assert!(seen == old, "the snapshot reads what it saw");
    drop(snap);
    engine.delete_snapshot("v@s").unwrap();
    engine.eradicate_snapshot("v@s").unwrap();
    engine.check_consistency().unwrap();
    engine.close().unwrap();
}
