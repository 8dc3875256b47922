//! Physical space near full: thin writes are refused before they eat the
//! cleaner's reserve, overwrites at a high fill level keep succeeding while the
//! cleaner frees stale space, concurrent writes and unmaps of one volume never
//! return wrong data, and after everything is unmapped the data directory
//! shrinks back to metadata.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::temp_dir;
use lacuna_engine::{Engine, EngineConfig, EngineError};
use parking_lot::Mutex;

const MIB: u64 = 1 << 20;
const GRAIN: u64 = 4096;

fn open(dir: &Path, capacity_bytes: u64) -> Arc<Engine> {
    Engine::open(EngineConfig::new(dir, capacity_bytes)).expect("open engine")
}

/// A grain that names its address and version (never compressible, never a
/// duplicate of another grain).
fn grain(grain_no: u64, version: u64) -> Vec<u8> {
    let mut x = (grain_no << 20 ^ version).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(GRAIN as usize);
    out.extend_from_slice(&grain_no.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    while out.len() < GRAIN as usize {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Bytes the files of a directory tree occupy on disk (what `du` reports).
fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            allocated_bytes(&entry.path())
        } else {
            meta.blocks() * 512
        };
    }
    total
}

/// Waits (boundedly) for the background reclaimer to empty the backlog, then
/// makes its work durable and waits for freed space to be punched.
fn reclaim_then_flush(engine: &Engine) {
    let mut attempts = 0;
    while engine.space().reclaim_backlog_bytes > 0 {
        attempts += 1;
        assert!(attempts < 500, "reclaim never finished");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    engine.flush_freeing().unwrap();
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn writes_stop_before_the_reserve_and_overwrites_near_full_keep_working() {
    let tmp = temp_dir("space", "full");
    let dir = tmp.path();
    let capacity = 768 * MIB;
    let engine = open(dir, capacity);
    engine.create_volume("v", 2048 * MIB).unwrap();
    let vol = engine.open_volume("v").unwrap();
    // Fill with unique data, 1 MiB at a time, until the array refuses.
    let chunk_grains = MIB / GRAIN;
    let mut written_grains = 0u64;
    loop {
        let data: Vec<u8> = (0..chunk_grains)
            .flat_map(|g| grain(written_grains + g, 0))
            .collect();
        match vol.write(written_grains * GRAIN, &data) {
            Ok(()) => written_grains += chunk_grains,
            Err(EngineError::NoSpace(_)) => break,
            Err(e) => panic!("unexpected error filling: {e}"),
        }
    }
    let space = engine.space();
    let reserve = lacuna_engine::space::provisioning::cleaning_reserve_bytes(capacity);
    assert!(
        space.live_physical_bytes + reserve <= capacity,
        "live data {} ate into the cleaner's reserve of {reserve}",
        space.live_physical_bytes
    );
    assert!(
        written_grains * GRAIN >= capacity - reserve - 128 * MIB,
        "refused early: {written_grains} grains"
    );
    // Free a tenth, then overwrite at random, as much as the remaining data,
    // in 64 KiB writes: every write succeeds while the cleaner frees space.
    let keep = written_grains * 9 / 10;
    vol.unmap(keep * GRAIN, (written_grains - keep) * GRAIN)
        .unwrap();
    let mut version: HashMap<u64, u64> = HashMap::new();
    let mut rng = Rng(0x5eed);
    let writes = keep / 16;
    for _ in 0..writes {
        let first = rng.below(keep / 16) * 16;
        let mut data = Vec::with_capacity(16 * GRAIN as usize);
        for g in first..first + 16 {
            let v = version.entry(g).or_insert(0);
            *v += 1;
            data.extend_from_slice(&grain(g, *v));
        }
        vol.write(first * GRAIN, &data)
            .unwrap_or_else(|e| panic!("overwrite near full refused: {e}"));
    }
    let mut back = vec![0u8; GRAIN as usize];
    for g in (0..keep).step_by(7) {
        vol.read(g * GRAIN, &mut back).unwrap();
        let v = version.get(&g).copied().unwrap_or(0);
        assert!(back == grain(g, v), "grain {g} lost version {v}");
    }
    let space = engine.space();
    eprintln!(
        "near full: write amplification {:.2}, {} victims cleaned by writers",
        space.write_amplification,
        engine.stats.writer_cleans.load(Ordering::Relaxed)
    );
    assert!(space.physical_used_bytes <= capacity);
    assert!(
        engine.stats.cleaned_segments.load(Ordering::Relaxed) > 0,
        "the cleaner never ran"
    );
    engine.check_consistency().unwrap();
}

#[test]
fn concurrent_writes_and_unmaps_of_one_volume_never_read_wrong_data() {
    let tmp = temp_dir("space", "race");
    let dir = tmp.path();
    let engine = open(dir, 1024 * MIB);
    let grains = 4096u64; // 16 MiB
    engine.create_volume("v", grains * GRAIN).unwrap();
    // Each grain is owned by one worker (grain % WORKERS), so the model of what
    // it holds is exact: the last version written, or zeroes after an unmap.
    const WORKERS: u64 = 4;
    let model: Arc<Mutex<HashMap<u64, u64>>> = Arc::default();
    let threads: Vec<_> = (0..WORKERS)
        .map(|w| {
            let vol = engine.open_volume("v").unwrap();
            let model = model.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x1234 + w);
                let mut back = vec![0u8; GRAIN as usize];
                for step in 1..=3000u64 {
                    let g = rng.below(grains / WORKERS) * WORKERS + w;
                    match rng.below(4) {
                        0 => {
                            vol.unmap(g * GRAIN, GRAIN).unwrap();
                            model.lock().insert(g, 0);
                        }
                        1 | 2 => {
                            vol.write(g * GRAIN, &grain(g, step)).unwrap();
                            model.lock().insert(g, step);
                        }
                        _ => {
                            vol.read(g * GRAIN, &mut back).unwrap();
                            let expected = model.lock().get(&g).copied().unwrap_or(0);
                            if expected == 0 {
                                assert!(
                                    back.iter().all(|&b| b == 0),
                                    "grain {g}: data after unmap"
                                );
                            } else {
                                assert!(
                                    back == grain(g, expected),
                                    "grain {g}: not version {expected}"
                                );
                            }
                        }
                    }
                }
            })
        })
        .collect();
    // Meanwhile: unmaps of whole stretches across every worker's grains would
    // break the model, so the cleaner and reclaimer are what run alongside.
    for _ in 0..20 {
        engine.clean_now().unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    let vol = engine.open_volume("v").unwrap();
    let mut back = vec![0u8; GRAIN as usize];
    for (g, v) in model.lock().iter() {
        vol.read(g * GRAIN, &mut back).unwrap();
        if *v == 0 {
            assert!(back.iter().all(|&b| b == 0), "grain {g}");
        } else {
            assert!(back == grain(*g, *v), "grain {g}");
        }
    }
    engine.check_consistency().unwrap();
}

#[test]
fn unmapping_everything_returns_the_data_directory_to_metadata_only() {
    let tmp = temp_dir("space", "du");
    let dir = tmp.path();
    let engine = open(dir, 2048 * MIB);
    let empty_bytes = allocated_bytes(dir);
    engine.create_volume("a", 256 * MIB).unwrap();
    engine.create_volume("b", 256 * MIB).unwrap();
    for name in ["a", "b"] {
        let vol = engine.open_volume(name).unwrap();
        for mib in 0..128 {
            let data: Vec<u8> = (0..MIB / GRAIN)
                .flat_map(|g| grain(mib * 256 + g + (name == "b") as u64 * (1 << 30), 1))
                .collect();
            vol.write(mib * MIB, &data).unwrap();
        }
    }
    engine.flush().unwrap();
    let full_bytes = allocated_bytes(&dir.join("segments"));
    assert!(full_bytes >= 256 * MIB, "data on disk: {full_bytes}");
    // One volume unmapped, the other deleted and eradicated.
    engine
        .open_volume("a")
        .unwrap()
        .unmap(0, 256 * MIB)
        .unwrap();
    engine.delete_volume("b").unwrap();
    engine.eradicate_volume("b").unwrap();
    let mut attempts = 0;
    loop {
        engine.clean_now().unwrap();
        let space = engine.space();
        if space.reclaim_backlog_bytes == 0 && space.physical_used_bytes == 0 {
            break;
        }
        attempts += 1;
        assert!(attempts < 500, "space never came back: {space:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let segments_bytes = allocated_bytes(&dir.join("segments"));
    assert!(
        segments_bytes <= MIB,
        "segments still occupy {segments_bytes} bytes on disk"
    );
    // Metadata stays a small constant (redb keeps freed pages for reuse).
    let total = allocated_bytes(dir);
    assert!(
        total <= empty_bytes + 64 * MIB,
        "data directory holds {total} bytes after everything was freed (empty: {empty_bytes})"
    );
}

#[test]
fn freed_records_are_punched_out_of_their_segments_at_once() {
    let tmp = temp_dir("space", "punch");
    let dir = tmp.path();
    let engine = open(dir, 2048 * MIB);
    engine.create_volume("v", 128 * MIB).unwrap();
    let vol = engine.open_volume("v").unwrap();
    let grains = 128 * MIB / GRAIN;
    for mib in 0..128u64 {
        let data: Vec<u8> = (0..MIB / GRAIN)
            .flat_map(|g| grain(mib * (MIB / GRAIN) + g, 1))
            .collect();
        vol.write(mib * MIB, &data).unwrap();
    }
    engine.flush().unwrap();
    let before = allocated_bytes(&dir.join("segments"));
    // A fifth unmapped: too little for the cleaner, so only punching can give
    // the space back.
    let (from, to) = (40 * MIB / GRAIN, 64 * MIB / GRAIN);
    vol.unmap(from * GRAIN, (to - from) * GRAIN).unwrap();
    reclaim_then_flush(&engine);
    let after = allocated_bytes(&dir.join("segments"));
    let punched = engine.stats.punched_bytes.load(Ordering::Relaxed);
    assert_eq!(engine.stats.cleaned_segments.load(Ordering::Relaxed), 0);
    assert!(punched >= 23 * MIB, "punched only {punched} bytes");
    assert!(
        before - after >= 23 * MIB,
        "du fell by {} bytes only ({before} → {after})",
        before - after
    );
    // What is left reads back; the cleaner walks over the holes.
    let check = |vol: &lacuna_engine::Volume| {
        let mut back = vec![0u8; GRAIN as usize];
        for g in (0..grains).step_by(5) {
            vol.read(g * GRAIN, &mut back).unwrap();
            if (from..to).contains(&g) {
                assert!(back.iter().all(|&b| b == 0), "grain {g}");
            } else {
                assert!(back == grain(g, 1), "grain {g}");
            }
        }
    };
    check(&vol);
    engine.clean_now().unwrap();
    check(&vol);
    engine.check_consistency().unwrap();
}

/// Dead records cut short by punching (their header in a page still shared with
/// a live neighbour, their payload's page punched) are not damage: the cleaner
/// walks over them without counting checksum errors, and relocates every live
/// record intact.
#[test]
fn cleaning_over_partly_punched_dead_records_reports_no_damage() {
    let tmp = temp_dir("space", "punched-clean");
    let dir = tmp.path();
    let engine = open(dir, 2048 * MIB);
    engine.create_volume("v", 16 * MIB).unwrap();
    let vol = engine.open_volume("v").unwrap();
    let grains = 16 * MIB / GRAIN;
    for g in 0..grains {
        vol.write(g * GRAIN, &grain(g, 1)).unwrap();
    }
    engine.flush().unwrap();
    // Every other grain dies: each dead record straddles pages shared with live
    // ones, so only its middle page is punched.
    for g in (0..grains).step_by(2) {
        vol.unmap(g * GRAIN, GRAIN).unwrap();
    }
    reclaim_then_flush(&engine);
    assert!(engine.stats.punched_bytes.load(Ordering::Relaxed) > 0);
    engine.clean_now().unwrap();
    assert!(engine.stats.cleaned_segments.load(Ordering::Relaxed) > 0);
    assert_eq!(engine.stats.checksum_errors.load(Ordering::Relaxed), 0);
    let mut back = vec![0u8; GRAIN as usize];
    for g in 0..grains {
        vol.read(g * GRAIN, &mut back).unwrap();
        if g % 2 == 0 {
            assert!(back.iter().all(|&b| b == 0), "grain {g}");
        } else {
            assert!(back == grain(g, 1), "grain {g}");
        }
    }
    engine.check_consistency().unwrap();
}

/// Foreground first, but background never stops: while a host writes without
/// pause (so the background thread sees busy hosts the whole time and spaces
/// its reclaim steps), an unmapped volume's dead space is still reclaimed to
/// the last grain before the host stops, and every write still reads back.
#[test]
fn reclaim_finishes_while_a_host_writes_without_pause() {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    const DEAD_GRAINS: u64 = 4096; // 16 MiB
    const BUSY_GRAINS: u64 = 1024;
    let tmp = temp_dir("space", "busy-reclaim");
    let engine = open(tmp.path(), 1024 * MIB);
    engine.create_volume("dead", DEAD_GRAINS * GRAIN).unwrap();
    engine.create_volume("busy", BUSY_GRAINS * GRAIN).unwrap();
    let dead = engine.open_volume("dead").unwrap();
    for first in (0..DEAD_GRAINS).step_by(256) {
        let data: Vec<u8> = (first..first + 256).flat_map(|g| grain(g, 1)).collect();
        dead.write(first * GRAIN, &data).unwrap();
    }
    dead.flush().unwrap();
    let stop = AtomicBool::new(false);
    let writes = AtomicU64::new(0);
    let busy = engine.open_volume("busy").unwrap();
    std::thread::scope(|scope| {
        let host = scope.spawn(|| {
            let mut version = 0;
            while !stop.load(Ordering::SeqCst) {
                version += 1;
                let g = (version * 7919) % BUSY_GRAINS;
                busy.write(g * GRAIN, &grain(g, version)).unwrap();
                writes.fetch_add(1, Ordering::SeqCst);
            }
            version
        });
        // The host is writing before the dead space appears.
        while writes.load(Ordering::SeqCst) < 100 {
            std::thread::yield_now();
        }
        dead.unmap(0, DEAD_GRAINS * GRAIN).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while engine.space().reclaim_backlog_bytes > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "reclaim starved under host writes: {:?}",
                engine.space()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let writes_when_empty = writes.load(Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            writes.load(Ordering::SeqCst) > writes_when_empty,
            "the host was still writing when the backlog emptied"
        );
        stop.store(true, Ordering::SeqCst);
        let last_version = host.join().unwrap();
        // Each grain holds the last version written to it.
        let mut latest = HashMap::new();
        for version in 1..=last_version {
            latest.insert((version * 7919) % BUSY_GRAINS, version);
        }
        let mut back = vec![0u8; GRAIN as usize];
        for (g, version) in latest {
            busy.read(g * GRAIN, &mut back).unwrap();
            assert!(back == grain(g, version), "grain {g}");
        }
    });
    engine.check_consistency().unwrap();
    engine.close().unwrap();
}

/// A segment's file, freed, is kept and taken by a later segment (its pages,
/// still cached, take the appends); the records it held past the new
/// segment's end are never read, and everything reads back, before and after
/// a reopen. Releasing now deletes what is kept.
#[test]
fn freed_segment_files_are_reused_by_later_segments() {
    let tmp = temp_dir("space", "reuse");
    let dir = tmp.path();
    let config = EngineConfig {
        background: false,
        ..EngineConfig::new(dir, 2048 * MIB)
    };
    let engine = Engine::open(config.clone()).unwrap();
    let size_mib = 96u64;
    engine.create_volume("v", size_mib * MIB).unwrap();
    let vol = engine.open_volume("v").unwrap();
    let write_version = |version: u64| {
        for mib in 0..size_mib {
            let data: Vec<u8> = (0..MIB / GRAIN)
                .flat_map(|g| grain(mib * (MIB / GRAIN) + g, version))
                .collect();
            vol.write(mib * MIB, &data).unwrap();
        }
        // The first commit kills the old version's segments, the second frees them.
        engine.flush().unwrap();
        engine.flush().unwrap();
    };
    write_version(1);
    write_version(2);
    let kept = engine.space();
    assert!(
        kept.reusable_freed_bytes >= 32 * MIB,
        "the first version's files are kept: {kept:?}"
    );
    write_version(3);
    let reused = engine.space();
    assert!(reused.reused_segment_files > 0, "{reused:?}");
    let check = |vol: &lacuna_engine::Volume| {
        let mut back = vec![0u8; GRAIN as usize];
        for g in (0..size_mib * MIB / GRAIN).step_by(7) {
            vol.read(g * GRAIN, &mut back).unwrap();
            assert!(back == grain(g, 3), "grain {g}");
        }
    };
    check(&vol);
    engine.check_consistency().unwrap();
    drop(vol);
    engine.close().unwrap();
    drop(engine);
    let kept_after_close: Vec<_> = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with(".seg"))
        .collect();
    assert!(kept_after_close.is_empty(), "{kept_after_close:?}");
    let engine = Engine::open(config).unwrap();
    check(&engine.open_volume("v").unwrap());
    engine.check_consistency().unwrap();
}
