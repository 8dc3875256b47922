//! Scrub against real damage: a bit flipped in a record on disk is found, and
//! mapped to every volume, snapshot and byte range that reads it; host reads of
//! the damaged range fail (never return the flipped bytes) and are counted.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::{temp_dir, unique_bytes};
use lacuna_engine::segment::log::{read_header, RECORD_HEADER_BYTES};
use lacuna_engine::write::classify as grain;
use lacuna_engine::{Engine, EngineConfig, EngineError, GRAIN_BYTES};

fn open(dir: &Path) -> Arc<Engine> {
    Engine::open(EngineConfig::new(dir, 1 << 30)).expect("open engine")
}

/// Finds the record whose grain decodes to `content` in the segment files and
/// flips one bit of its payload; returns (file, offset of the record).
fn flip_bit_in_record_of(dir: &Path, content: &[u8]) -> (PathBuf, u64) {
    for entry in std::fs::read_dir(dir.join("segments")).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let mut at = 0usize;
        while let Some((header, _)) = read_header(&data[at..]) {
            let end = at + RECORD_HEADER_BYTES + header.payload_len as usize;
            let mut decoded = vec![0u8; GRAIN_BYTES as usize];
            let codec = grain::Codec::of_flags(header.flags).unwrap();
            if grain::decode(&data[at + RECORD_HEADER_BYTES..end], codec, &mut decoded).is_ok()
                && decoded == content
            {
                let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                let target = at + RECORD_HEADER_BYTES + 100;
                file.write_all_at(&[data[target] ^ 0x10], target as u64)
                    .unwrap();
                return (path, at as u64);
            }
            at = end;
        }
    }
    panic!("no record holds the content");
}

#[test]
fn scrub_of_a_clean_array_finds_nothing() {
    let tmp = temp_dir("scrub", "clean");
    let dir = tmp.path();
    let engine = open(dir);
    engine.create_volume("a", 8 << 20).unwrap();
    let volume = engine.open_volume("a").unwrap();
    volume.write(0, &unique_bytes(1 << 20, 1)).unwrap();
    volume.flush().unwrap();
    let report = engine.scrub_now(None).unwrap();
    assert_eq!(report.records_checked, 256);
    assert_eq!(report.records_total, 256);
    assert_eq!(report.bad_records, 0);
    assert!(report.affected.is_empty());
    assert!(report.error.is_none());
    assert!(!report.running);
    assert_eq!(engine.scrub_status().last.unwrap().pass, report.pass);
    engine.close().unwrap();
}

#[test]
fn a_flipped_bit_is_found_and_mapped_to_every_reader() {
    let tmp = temp_dir("scrub", "flip");
    let dir = tmp.path();
    let damaged = unique_bytes(GRAIN_BYTES as usize, 99);
    {
        let engine = open(dir);
        engine.create_volume("a", 8 << 20).unwrap();
        engine.create_volume("b", 8 << 20).unwrap();
        let a = engine.open_volume("a").unwrap();
        let b = engine.open_volume("b").unwrap();
        a.write(0, &unique_bytes(1 << 20, 1)).unwrap();
        // Grain 10 of `a` and (deduplicated) grain 3 of `b` share one record.
        a.write(10 * GRAIN_BYTES, &damaged).unwrap();
        b.write(3 * GRAIN_BYTES, &damaged).unwrap();
        b.write(64 * GRAIN_BYTES, &unique_bytes(1 << 16, 2))
            .unwrap();
        engine.create_snapshots(&["a"], Some("s1"), None).unwrap();
        engine.close().unwrap();
    }
    flip_bit_in_record_of(dir, &damaged);

    let engine = open(dir);
    let report = engine.scrub_now(Some(64 << 20)).unwrap();
    assert_eq!(report.bad_records, 1, "{report:?}");
    assert_eq!(report.records_checked, 256 + 16);
    assert!(report.bad[0].reason.contains("checksum"), "{report:?}");
    let ranges: Vec<_> = report
        .affected
        .iter()
        .map(|r| {
            (
                r.volume.as_str(),
                r.live,
                r.snapshots.clone(),
                r.offset_bytes,
                r.length_bytes,
            )
        })
        .collect();
    assert_eq!(
        ranges,
        vec![
            (
                "a",
                true,
                vec!["a@s1".to_string()],
                10 * GRAIN_BYTES,
                GRAIN_BYTES
            ),
            ("b", true, vec![], 3 * GRAIN_BYTES, GRAIN_BYTES),
        ]
    );

    // Hosts get an error for the damaged grain, never its bytes, and it is counted.
    let a = engine.open_volume("a").unwrap();
    let mut buf = vec![0u8; 3 * GRAIN_BYTES as usize];
    let failed = a.read(9 * GRAIN_BYTES, &mut buf).unwrap_err();
    assert!(matches!(failed, EngineError::Corruption(_)), "{failed}");
    assert_eq!(engine.stats.checksum_errors.load(Ordering::SeqCst), 1);
    assert_eq!(engine.space().checksum_errors, 1);
    // The failure is kept with where it was, once, for the daemon's events.
    let (faults, not_kept) = engine.take_read_faults();
    assert_eq!(not_kept, 0);
    let faults: Vec<_> = faults
        .iter()
        .map(|f| (f.kind, f.volume.as_str(), f.offset_bytes, f.length_bytes))
        .collect();
    assert_eq!(
        faults,
        vec![(
            lacuna_engine::integrity::faults::ReadFaultKind::Checksum,
            "a",
            10 * GRAIN_BYTES,
            GRAIN_BYTES
        )]
    );
    assert!(engine.take_read_faults().0.is_empty());
    let mut fine = vec![0u8; GRAIN_BYTES as usize];
    a.read(11 * GRAIN_BYTES, &mut fine).unwrap();
    assert_eq!(
        fine,
        unique_bytes(1 << 20, 1)[11 * GRAIN_BYTES as usize..12 * GRAIN_BYTES as usize]
    );

    // Rewriting the grain on both volumes leaves only the snapshot reading it.
    a.write(10 * GRAIN_BYTES, &unique_bytes(GRAIN_BYTES as usize, 5))
        .unwrap();
    let b = engine.open_volume("b").unwrap();
    b.write(3 * GRAIN_BYTES, &unique_bytes(GRAIN_BYTES as usize, 6))
        .unwrap();
    let again = engine.scrub_now(None).unwrap();
    assert_eq!(again.bad_records, 1);
    assert_eq!(again.affected.len(), 1, "{again:?}");
    assert_eq!(again.affected[0].volume, "a");
    assert!(!again.affected[0].live);
    assert_eq!(again.affected[0].snapshots, vec!["a@s1".to_string()]);
    engine.close().unwrap();
}

#[test]
fn background_scrub_runs_passes_at_its_rate_until_close() {
    let tmp = temp_dir("scrub", "bg");
    let dir = tmp.path();
    let engine = open(dir);
    engine.create_volume("a", 8 << 20).unwrap();
    let volume = engine.open_volume("a").unwrap();
    volume.write(0, &unique_bytes(256 << 10, 3)).unwrap();
    volume.flush().unwrap();
    let handle = engine.start_background_scrub(100 << 20).unwrap();
    assert_eq!(
        engine.scrub_status().background_rate_bytes_per_s,
        Some(100 << 20)
    );
    // Bounded wait for the first finished pass (behaviour, not timing).
    let mut last = None;
    for _ in 0..600 {
        last = engine.scrub_status().last;
        if last.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let last = last.expect("a background pass finished within 30 s");
    assert!(last.background);
    assert_eq!(last.records_checked, 64);
    assert_eq!(last.bad_records, 0);
    engine.close().unwrap();
    handle.join().unwrap();
}

/// A pass can be stopped: a cancel ends a pass at 1 byte/s (which would run
/// for days) and reports it cancelled; a request at another rate replaces the
/// running pass, one at the same rate follows it; and a later pass runs.
#[test]
fn a_scrub_can_be_cancelled_and_replaced() {
    let tmp = temp_dir("scrub", "cancel");
    let engine = open(tmp.path());
    engine.create_volume("a", 8 << 20).unwrap();
    let volume = engine.open_volume("a").unwrap();
    volume.write(0, &unique_bytes(1 << 20, 3)).unwrap();
    volume.flush().unwrap();
    assert!(engine.cancel_scrub().is_err(), "nothing to cancel");

    let slow = engine.start_scrub(Some(1)).unwrap();
    assert!(slow.running);
    let same = engine.begin_scrub(Some(1)).unwrap();
    assert!(!same.started && same.report.pass == slow.pass);
    let cancelled = engine.cancel_scrub().unwrap();
    assert_eq!(cancelled.pass, slow.pass);
    assert!(cancelled.cancelled && !cancelled.running, "{cancelled:?}");
    assert!(cancelled.records_checked < cancelled.records_total);
    assert!(engine.scrub_status().current.is_none());

    let slow = engine.start_scrub(Some(1)).unwrap();
    let replaced = engine.begin_scrub(None).unwrap();
    assert!(replaced.started && replaced.report.pass > slow.pass);
    let report = engine.run_scrub(replaced.report.pass).unwrap();
    assert!(!report.cancelled && report.error.is_none(), "{report:?}");
    assert_eq!(report.records_checked, report.records_total);
    let status = engine.scrub_status();
    assert_eq!(status.last.unwrap().pass, replaced.report.pass);
    engine.close().unwrap();
}
