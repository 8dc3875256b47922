//! Model-based tests on the local store (the model itself is
//! `common/model.rs`), and the engine's space, dedup, corruption and
//! concurrency checks that go with them.

mod common;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::model::{drain_reclaim, fill, op, run_on, Op};
use common::temp_dir;
use lacuna_engine::{Engine, EngineConfig, ReductionMode};
use proptest::prelude::*;

const CAPACITY_BYTES: u64 = 1 << 30;

fn open(dir: &Path) -> Arc<Engine> {
    open_with(dir, ReductionMode::default())
}

fn open_with(dir: &Path, reduction: ReductionMode) -> Arc<Engine> {
    Engine::open(EngineConfig {
        reduction,
        ..EngineConfig::new(dir.to_path_buf(), CAPACITY_BYTES)
    })
    .expect("open engine")
}

fn run(ops: Vec<Op>) {
    run_with(ops, ReductionMode::default())
}

/// The ops against the model on an engine compressing `reduction`: with
/// [`ReductionMode::Background`] every data grain is stored raw and the
/// background reducer rewrites it while the ops go on.
fn run_with(ops: Vec<Op>, reduction: ReductionMode) {
    let tmp = temp_dir("test", "model");
    run_on(ops, &|| open_with(tmp.path(), reduction));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn engine_reducing_in_the_background_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        run_with(ops, ReductionMode::Background);
    }
}

#[test]
fn unmap_of_a_fully_written_range_writes_constant_records() {
    let tmp = temp_dir("test", "complexity");
    let dir = tmp.path();
    let engine = open(dir);
    let mut records = Vec::new();
    for grains in [64u64, 1024, 8192] {
        let name = format!("v{grains}");
        engine.create_volume(&name, grains * 4096).unwrap();
        let vol = engine.open_volume(&name).unwrap();
        for chunk in 0..grains / 64 {
            let data = fill(3, chunk as u8, chunk * 64 * 4096, 64 * 4096);
            vol.write(chunk * 64 * 4096, &data).unwrap();
        }
        let before = engine
            .stats
            .foreground_records_written
            .load(Ordering::SeqCst);
        vol.unmap(0, grains * 4096).unwrap();
        vol.write_zeroes(0, grains * 4096, false).unwrap();
        let after = engine
            .stats
            .foreground_records_written
            .load(Ordering::SeqCst);
        records.push(after - before);
    }
    assert!(
        records.iter().all(|&r| r == records[0]),
        "records per unmap+zero vary with size: {records:?}"
    );
    assert!(records[0] <= 4, "{records:?}");
    engine.close().unwrap();
    drop(engine);
}

/// A write that replaces duplicates with duplicates (a guest rewriting the same
/// few blocks, or zero-like filler) drops and takes references to the same few
/// blocks grain after grain: each block's row is written once per write, not
/// once per grain.
#[test]
fn rewriting_duplicates_writes_each_shared_block_row_once() {
    let tmp = temp_dir("test", "rewrite");
    let engine = open(tmp.path());
    let distinct_blocks = 4u64;
    let contents = |grains: u64| -> Vec<u8> {
        (0..grains)
            .flat_map(|grain| fill(7, (grain % distinct_blocks) as u8, 0, 4096))
            .collect()
    };
    let mut extra_records = Vec::new();
    for grains in [64u64, 256] {
        let name = format!("v{grains}");
        engine.create_volume(&name, grains * 4096).unwrap();
        let vol = engine.open_volume(&name).unwrap();
        let data = contents(grains);
        vol.write(0, &data).unwrap();
        let before = engine
            .stats
            .foreground_records_written
            .load(Ordering::SeqCst);
        vol.write(0, &data).unwrap();
        let after = engine
            .stats
            .foreground_records_written
            .load(Ordering::SeqCst);
        // Each grain's mapping is removed and inserted; what is left is
        // block rows.
        extra_records.push(after - before - 2 * grains);
        let mut back = vec![0u8; data.len()];
        vol.read(0, &mut back).unwrap();
        assert_eq!(back, data);
    }
    // The first volume's rewrite lets its blocks' last references go and
    // takes them up again; the second's leaves them referenced by the first.
    assert_eq!(
        extra_records,
        vec![distinct_blocks; 2],
        "block rows written per rewrite of 64 and 256 grains"
    );
    engine.check_consistency().unwrap();
    engine.close().unwrap();
}

/// Writing a volume's data again over itself (a copy or restore run twice)
/// stores nothing new: the blocks the write lets go are the ones it needs.
#[test]
fn rewriting_the_same_data_appends_no_records() {
    let tmp = temp_dir("test", "same");
    let engine = open(tmp.path());
    let grains = 256u64;
    engine.create_volume("v", grains * 4096).unwrap();
    let vol = engine.open_volume("v").unwrap();
    let data: Vec<u8> = (0..grains)
        .flat_map(|grain| fill(3, grain as u8, grain * 4096, 4096))
        .collect();
    vol.write(0, &data).unwrap();
    let appended = || engine.stats.media_written_bytes.load(Ordering::SeqCst);
    let live = || {
        let space = engine.space();
        (space.live_physical_bytes, space.volume_unique_bytes)
    };
    let (appended_before, live_before) = (appended(), live());
    assert!(live_before.0 > 0 && live_before.0 == live_before.1);
    vol.write(0, &data).unwrap();
    assert_eq!(appended(), appended_before, "bytes appended by the rewrite");
    assert_eq!(live(), live_before, "live bytes after the rewrite");
    let mut back = vec![0u8; data.len()];
    vol.read(0, &mut back).unwrap();
    assert_eq!(back, data);
    engine.check_consistency().unwrap();
    engine.close().unwrap();
}

#[test]
fn space_returns_after_unmap_and_delete() {
    let tmp = temp_dir("test", "space");
    let dir = tmp.path();
    let engine = open(dir);
    engine.create_volume("a", 8 << 20).unwrap();
    engine.create_volume("b", 8 << 20).unwrap();
    let a = engine.open_volume("a").unwrap();
    let b = engine.open_volume("b").unwrap();
    let data = fill(3, 7, 0, 8 << 20);
    a.write(0, &data).unwrap();
    b.write(0, &data).unwrap(); // dedups entirely against a
    let space = engine.space();
    assert!(space.data_reduction_ratio > 1.9, "{space:?}");
    let ia = engine.volume_info("a").unwrap();
    assert_eq!(ia.unique_physical_bytes, 0);
    assert!(ia.shared_physical_bytes > 0);
    a.unmap(0, 8 << 20).unwrap();
    engine.delete_volume("b").unwrap();
    assert_eq!(engine.space().destroyed_volume_count, 1);
    engine.eradicate_volume("b").unwrap();
    drain_reclaim(&engine);
    engine.flush().unwrap();
    let bytes_in = |suffix: &str| -> u64 {
        std::fs::read_dir(dir.join("segments"))
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
            .map(|e| e.metadata().unwrap().len())
            .sum()
    };
    // A flush may return on another thread's durable commit while that
    // thread still retires the freed segments: wait for both to settle.
    // Freed segment files may wait a while for reuse (as `.free` files);
    // no segment is left, and releasing now gives everything back.
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.space().physical_used_bytes > 0 || bytes_in(".seg") > 0 {
        assert!(
            Instant::now() < deadline,
            "space not returned: {:?}, {} bytes in segments",
            engine.space(),
            bytes_in(".seg")
        );
        std::thread::sleep(Duration::from_millis(10));
        engine.flush().unwrap();
    }
    engine.flush_freeing().unwrap();
    assert_eq!(bytes_in(""), 0);
    engine.check_consistency().unwrap();
    drop((a, b));
    engine.close().unwrap();
    drop(engine);
}

#[test]
fn read_beyond_end_is_refused_and_names_are_validated() {
    let tmp = temp_dir("test", "errors");
    let dir = tmp.path();
    let engine = open(dir);
    engine.create_volume("v", 1 << 20).unwrap();
    assert!(engine.create_volume("v", 1 << 20).is_err());
    assert!(engine.create_volume("bad/name", 1 << 20).is_err());
    assert!(engine.create_volume("odd", 1000).is_err());
    let vol = engine.open_volume("v").unwrap();
    let mut buf = [0u8; 512];
    assert!(vol.read((1 << 20) - 256, &mut buf).is_err());
    assert!(vol.write(u64::MAX - 10, &buf).is_err());
    assert!(vol.unmap(1 << 20, 1).is_err());
    engine.resize_volume("v", 2 << 20).unwrap();
    vol.read((1 << 20) - 256, &mut buf).unwrap();
    drop(vol);
    engine.close().unwrap();
    drop(engine);
}

/// Flips a bit of the byte at `at(file length)` in the first segment file of
/// the (closed) array in `dir`.
fn flip_segment_bit(dir: &std::path::Path, at: impl Fn(usize) -> usize) {
    let seg = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&seg).unwrap();
    let i = at(bytes.len());
    bytes[i] ^= 0x10;
    std::fs::write(&seg, bytes).unwrap();
}

#[test]
fn corrupt_record_reads_as_an_error_never_data() {
    let tmp = temp_dir("test", "corrupt");
    let dir = tmp.path();
    let engine = open(dir);
    engine.create_volume("v", 1 << 20).unwrap();
    let vol = engine.open_volume("v").unwrap();
    vol.write(0, &fill(3, 1, 0, 4096)).unwrap();
    vol.flush().unwrap();
    drop(vol);
    engine.close().unwrap();
    drop(engine);
    flip_segment_bit(dir, |len| len - 100);
    let engine = open(dir);
    let vol = engine.open_volume("v").unwrap();
    let mut buf = vec![0u8; 4096];
    let err = vol.read(0, &mut buf).unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
    drop(vol);
    engine.close().unwrap();
    drop(engine);
}

/// A read of many grains reads their records, adjacent in one segment, in one
/// go: a corrupt record among them fails every read that covers it and no
/// other, and never turns into data.
#[test]
fn a_corrupt_record_among_adjacent_ones_fails_only_the_reads_that_cover_it() {
    const GRAINS: u64 = 16;
    let tmp = temp_dir("test", "corrupt-adjacent");
    let dir = tmp.path();
    let engine = open(dir);
    engine.create_volume("v", 1 << 20).unwrap();
    let vol = engine.open_volume("v").unwrap();
    let data = fill(3, 7, 0, GRAINS * 4096);
    vol.write(0, &data).unwrap();
    vol.flush().unwrap();
    let mut all = vec![0u8; data.len()];
    vol.read(0, &mut all).unwrap();
    assert!(all == data);
    drop(vol);
    engine.close().unwrap();
    drop(engine);
    flip_segment_bit(dir, |len| len / 2);
    let engine = open(dir);
    let vol = engine.open_volume("v").unwrap();
    let err = vol.read(0, &mut all).unwrap_err();
    assert!(err.to_string().contains("block "), "{err}");
    let mut failed = Vec::new();
    let mut grain = vec![0u8; 4096];
    for g in 0..GRAINS {
        match vol.read(g * 4096, &mut grain) {
            Ok(()) => assert!(
                grain[..] == data[(g * 4096) as usize..][..4096],
                "grain {g}"
            ),
            Err(err) => {
                assert!(err.to_string().contains("block "), "{err}");
                failed.push(g);
            }
        }
    }
    assert_eq!(failed.len(), 1, "{failed:?}");
    // Reads of the grains on either side, together, still succeed.
    let bad = failed[0];
    if bad > 1 {
        let mut before = vec![0u8; (bad * 4096) as usize];
        vol.read(0, &mut before).unwrap();
        assert!(before[..] == data[..before.len()]);
    }
    let mut after = vec![0u8; ((GRAINS - bad - 1) * 4096) as usize];
    vol.read((bad + 1) * 4096, &mut after).unwrap();
    assert!(after[..] == data[((bad + 1) * 4096) as usize..]);
    drop(vol);
    engine.close().unwrap();
    drop(engine);
}

/// Threads writing, unmapping and reading their own regions of one volume at once
/// (batched commits, the reclaimer running): every read matches each thread's
/// model and the metadata stays consistent.
#[test]
fn concurrent_writers_and_unmaps_read_back_exactly() {
    const THREADS: u64 = 4;
    const REGION_GRAINS: u64 = 64;
    let tmp = temp_dir("test", "concurrent");
    let dir = tmp.path();
    let engine = open(dir);
    engine
        .create_volume("v", THREADS * REGION_GRAINS * 4096)
        .unwrap();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let vol = engine.open_volume("v").unwrap();
            scope.spawn(move || {
                let base = t * REGION_GRAINS * 4096;
                let mut model = vec![0u8; (REGION_GRAINS * 4096) as usize];
                let mut state = 0x1234_5678u64 + t;
                let mut next = move || {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state
                };
                for i in 0..1500u64 {
                    let offset = next() % (REGION_GRAINS * 4096 - 1);
                    let len = (1 + next() % 20000).min(REGION_GRAINS * 4096 - offset);
                    let (o, l) = (offset as usize, len as usize);
                    match next() % 6 {
                        0 => {
                            vol.unmap(base + offset, len).unwrap();
                            model[o..o + l].fill(0);
                        }
                        1 => {
                            vol.write_zeroes(base + offset, len, i % 2 == 0).unwrap();
                            model[o..o + l].fill(0);
                        }
                        2 => {
                            let mut buf = vec![0u8; l];
                            vol.read(base + offset, &mut buf).unwrap();
                            assert!(buf == model[o..o + l], "thread {t} op {i}: read differs");
                        }
                        _ => {
                            let data = fill((next() % 4) as u8, next() as u8, base + offset, len);
                            vol.write(base + offset, &data).unwrap();
                            model[o..o + l].copy_from_slice(&data);
                        }
                    }
                }
                let mut all = vec![0u8; model.len()];
                vol.read(base, &mut all).unwrap();
                assert!(all == model, "thread {t}: final content differs");
            });
        }
    });
    drain_reclaim(&engine);
    engine.check_consistency().unwrap();
    engine.close().unwrap();
    drop(engine);
}

/// With a metadata cache far smaller than the metadata (`serve
/// --metadata-cache`), pages are evicted and written back between commits:
/// everything written still reads back, before and after a restart.
#[test]
fn a_metadata_cache_smaller_than_the_metadata_loses_nothing() {
    const GRAINS: u64 = 2048;
    let tmp = temp_dir("test", "tiny-cache");
    let open_tiny = || {
        Engine::open(EngineConfig {
            metadata_cache_bytes: 32 * 1024,
            ..EngineConfig::new(tmp.path().to_path_buf(), CAPACITY_BYTES)
        })
        .expect("open engine")
    };
    let engine = open_tiny();
    engine.create_volume("v", GRAINS * 4096).unwrap();
    let vol = engine.open_volume("v").unwrap();
    let grain = |g: u64| fill(3, (g % 251) as u8, g * 4096, 4096);
    for g in 0..GRAINS {
        vol.write(g * 4096, &grain(g)).unwrap();
    }
    let check = |vol: &lacuna_engine::Volume| {
        for g in (0..GRAINS).rev() {
            let mut buf = vec![0u8; 4096];
            vol.read(g * 4096, &mut buf).unwrap();
            assert!(buf == grain(g), "grain {g} differs");
        }
    };
    check(&vol);
    vol.flush().unwrap();
    drop(vol);
    engine.close().unwrap();
    drop(engine);
    let engine = open_tiny();
    let vol = engine.open_volume("v").unwrap();
    check(&vol);
    engine.check_consistency().unwrap();
    drop(vol);
    engine.close().unwrap();
}

/// A grain's bytes for `version` (0 is never written: unwritten grains read as
/// zeroes). Unique per (grain, version), incompressible, with the version in
/// the first 8 bytes so a reader can say which one it got.
fn versioned_grain(grain: u64, version: u64) -> Vec<u8> {
    let mut state = (grain << 32 ^ version).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut bytes: Vec<u8> = (0..4096 / 8)
        .flat_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()
        })
        .collect();
    bytes[..8].copy_from_slice(&version.to_le_bytes());
    bytes
}

/// Reads race the commits of the write batches' shared open transaction: a
/// writer keeps overwriting a few grains (its writes wait in the open
/// transaction), readers read them all the time, and another thread commits
/// the open transaction as often as it can (block status and flushes do).
/// Every read returns exactly one written version, never older than what was
/// acknowledged before the read began and never newer than what had been
/// started when it ended: a grain is never missed between the pending grains
/// and the committed state, nor read from a freed record.
#[test]
fn reads_never_miss_a_write_while_the_open_transaction_commits() {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    const GRAINS: u64 = 8;
    const ROUNDS: u64 = 1500;
    let tmp = temp_dir("test", "pending-race");
    let engine = open(tmp.path());
    engine.create_volume("v", GRAINS * 4096).unwrap();
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..GRAINS).map(|_| AtomicU64::new(0)).collect());
    let started: Arc<Vec<AtomicU64>> = Arc::new((0..GRAINS).map(|_| AtomicU64::new(0)).collect());
    let done = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let writer = engine.open_volume("v").unwrap();
        let (acked_w, started_w, done_w) = (acked.clone(), started.clone(), &done);
        scope.spawn(move || {
            for version in 1..=ROUNDS {
                for grain in 0..GRAINS {
                    started_w[grain as usize].store(version, Ordering::SeqCst);
                    writer
                        .write(grain * 4096, &versioned_grain(grain, version))
                        .unwrap();
                    acked_w[grain as usize].store(version, Ordering::SeqCst);
                }
            }
            done_w.store(true, Ordering::SeqCst);
        });
        for reader_no in 0..2u64 {
            let reader = engine.open_volume("v").unwrap();
            let (acked, started, done, reads) = (acked.clone(), started.clone(), &done, &reads);
            scope.spawn(move || {
                let mut back = vec![0u8; 4096];
                while !done.load(Ordering::SeqCst) {
                    for grain in (0..GRAINS).map(|g| (g + reader_no) % GRAINS) {
                        let floor = acked[grain as usize].load(Ordering::SeqCst);
                        reader.read(grain * 4096, &mut back).unwrap();
                        let ceiling = started[grain as usize].load(Ordering::SeqCst);
                        let version = u64::from_le_bytes(back[..8].try_into().unwrap());
                        let whole = if version == 0 {
                            back.iter().all(|&b| b == 0)
                        } else {
                            back == versioned_grain(grain, version)
                        };
                        assert!(whole, "grain {grain}: bytes of no written version");
                        assert!(
                            (floor..=ceiling).contains(&version),
                            "grain {grain}: read version {version}, acknowledged {floor}, \
                             started {ceiling}"
                        );
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let committer = engine.open_volume("v").unwrap();
        let done = &done;
        scope.spawn(move || {
            let mut round = 0u64;
            while !done.load(Ordering::SeqCst) {
                round += 1;
                if round.is_multiple_of(16) {
                    committer.flush().unwrap();
                } else {
                    committer.extents(0, GRAINS * 4096).unwrap();
                }
            }
        });
    });
    assert!(reads.load(Ordering::SeqCst) > 1000, "the readers ran");
    engine.check_consistency().unwrap();
    engine.close().unwrap();
}
