//! Model-based tests of versions: random sequences of writes, unmaps, snapshots
//! (single and group), clones (of volumes and of snapshots), range copies (within
//! and across volumes, aligned or not), reverts, destroy / recover / eradicate of
//! volumes and snapshots, reclaim and restarts — every volume and every snapshot
//! checked byte for byte against plain in-memory copies, then the metadata
//! checked for consistency and the space figures for adding up.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::temp_dir;
use lacuna_engine::{Engine, EngineConfig, EngineError, ExtentState, Provisioning};
use proptest::prelude::*;

const VOLUME_BYTES: u64 = 64 * 1024;
const MAX_VOLUMES: usize = 6;

fn open(dir: &Path) -> Arc<Engine> {
    Engine::open(EngineConfig::new(dir, 1 << 30)).expect("open engine")
}

#[derive(Debug, Clone)]
enum Op {
    /// volume pick, offset, length, seed (0 = zeroes)
    Write(u8, u64, u64, u8),
    Unmap(u8, u64, u64),
    Snapshot(u8),
    GroupSnapshot,
    /// source pick (volume or snapshot), with the snapshot flag
    Clone(u8, bool),
    /// source pick, source offset, length, destination pick, destination offset
    Copy(u8, u64, u64, u8, u64),
    /// volume pick, snapshot pick
    Restore(u8, u8),
    DeleteSnapshot(u8),
    RecoverSnapshot(u8),
    EradicateSnapshot(u8),
    DeleteVolume(u8),
    RecoverVolume(u8),
    EradicateVolume(u8),
    Restart,
    Reclaim,
    /// Runs the segment cleaner over every segment holding stale bytes.
    Clean,
}

fn op() -> impl Strategy<Value = Op> {
    let span = (0..VOLUME_BYTES, 1u64..32 * 1024).prop_map(|(o, l)| (o, l.min(VOLUME_BYTES - o)));
    let aligned = (0..VOLUME_BYTES / 4096, 1u64..8)
        .prop_map(|(g, n)| (g * 4096, (n * 4096).min(VOLUME_BYTES - g * 4096)));
    let copy_span = prop_oneof![aligned.clone(), span.clone()];
    prop_oneof![
        6 => (any::<u8>(), prop_oneof![aligned.clone(), span.clone()], any::<u8>())
            .prop_map(|(v, (o, l), s)| Op::Write(v, o, l, s)),
        2 => (any::<u8>(), span).prop_map(|(v, (o, l))| Op::Unmap(v, o, l)),
        3 => any::<u8>().prop_map(Op::Snapshot),
        1 => Just(Op::GroupSnapshot),
        2 => (any::<u8>(), any::<bool>()).prop_map(|(s, f)| Op::Clone(s, f)),
        3 => (any::<u8>(), copy_span, any::<u8>(), any::<bool>(), 0..VOLUME_BYTES / 4096)
            .prop_map(|(s, (o, l), d, same_alignment, g)| {
                let to = if same_alignment { g * 4096 + o % 4096 } else { g * 4096 + 512 };
                let l = l.min(VOLUME_BYTES - to.min(VOLUME_BYTES));
                Op::Copy(s, o, l, d, to.min(VOLUME_BYTES - l))
            }),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(v, s)| Op::Restore(v, s)),
        1 => any::<u8>().prop_map(Op::DeleteSnapshot),
        1 => any::<u8>().prop_map(Op::RecoverSnapshot),
        1 => any::<u8>().prop_map(Op::EradicateSnapshot),
        1 => any::<u8>().prop_map(Op::DeleteVolume),
        1 => any::<u8>().prop_map(Op::RecoverVolume),
        1 => any::<u8>().prop_map(Op::EradicateVolume),
        1 => Just(Op::Restart),
        1 => Just(Op::Reclaim),
        1 => Just(Op::Clean),
    ]
}

/// Zeroes, a one-byte pattern, grains that repeat (the same few 4 KiB
/// contents wherever they are written: duplicates within a write, across
/// volumes and over themselves), or bytes that depend on where they lie.
fn fill(seed: u8, offset: u64, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let at = offset + i;
            match seed % 4 {
                0 => 0,
                1 => seed,
                2 => ((at % 4096).wrapping_mul(2654435761) >> 8) as u8 ^ (seed >> 6),
                _ => (at.wrapping_mul(2654435761) >> 8) as u8 ^ seed,
            }
        })
        .collect()
}

/// The model: live and destroyed volumes, and named snapshots, as plain bytes.
#[derive(Default)]
struct Model {
    volumes: BTreeMap<String, Vec<u8>>,
    destroyed_volumes: BTreeMap<String, Vec<u8>>,
    /// full name → (content, destroyed)
    snapshots: BTreeMap<String, (Vec<u8>, bool)>,
    next_name: u32,
}

impl Model {
    fn pick_volume(&self, pick: u8) -> Option<String> {
        let names: Vec<_> = self.volumes.keys().cloned().collect();
        (!names.is_empty()).then(|| names[pick as usize % names.len()].clone())
    }

    fn pick_snapshot(&self, pick: u8, destroyed: bool) -> Option<String> {
        let names: Vec<_> = self
            .snapshots
            .iter()
            .filter(|(full, (_, d))| {
                *d == destroyed && self.volumes.contains_key(full.split('@').next().unwrap())
            })
            .map(|(n, _)| n.clone())
            .collect();
        (!names.is_empty()).then(|| names[pick as usize % names.len()].clone())
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        format!("{prefix}{}", self.next_name)
    }
}

fn apply(engine: &Arc<Engine>, model: &mut Model, op: Op) {
    match op {
        Op::Write(v, o, l, s) => {
            let Some(name) = model.pick_volume(v) else {
                return;
            };
            let data = fill(s, o, l);
            engine.open_volume(&name).unwrap().write(o, &data).unwrap();
            model.volumes.get_mut(&name).unwrap()[o as usize..(o + l) as usize]
                .copy_from_slice(&data);
        }
        Op::Unmap(v, o, l) => {
            let Some(name) = model.pick_volume(v) else {
                return;
            };
            engine.open_volume(&name).unwrap().unmap(o, l).unwrap();
            model.volumes.get_mut(&name).unwrap()[o as usize..(o + l) as usize].fill(0);
        }
        Op::Snapshot(v) => {
            let Some(name) = model.pick_volume(v) else {
                return;
            };
            let snap = model.fresh("s");
            engine
                .create_snapshots(&[&name], Some(&snap), None)
                .unwrap();
            let content = model.volumes[&name].clone();
            model
                .snapshots
                .insert(format!("{name}@{snap}"), (content, false));
        }
        Op::GroupSnapshot => {
            let names: Vec<String> = model.volumes.keys().cloned().collect();
            if names.is_empty() {
                return;
            }
            let group = model.fresh("g");
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let taken = engine.create_snapshots(&refs, None, Some(&group)).unwrap();
            assert_eq!(taken.snapshots.len(), names.len());
            for name in names {
                let content = model.volumes[&name].clone();
                model
                    .snapshots
                    .insert(format!("{name}@{group}"), (content, false));
            }
        }
        Op::Clone(pick, from_snapshot) => {
            if model.volumes.len() + model.destroyed_volumes.len() >= MAX_VOLUMES {
                return;
            }
            let source = if from_snapshot {
                model.pick_snapshot(pick, false)
            } else {
                model.pick_volume(pick)
            };
            let Some(source) = source else { return };
            let content = if from_snapshot {
                model.snapshots[&source].0.clone()
            } else {
                model.volumes[&source].clone()
            };
            let name = model.fresh("c");
            engine
                .clone_volume(&source, &name, Provisioning::Thin)
                .unwrap();
            model.volumes.insert(name, content);
        }
        Op::Copy(s, from, len, d, to) => {
            let (Some(src), Some(dst)) = (model.pick_volume(s), model.pick_volume(d)) else {
                return;
            };
            engine.copy_range(&src, from, len, &dst, to).unwrap();
            let piece = model.volumes[&src][from as usize..(from + len) as usize].to_vec();
            model.volumes.get_mut(&dst).unwrap()[to as usize..(to + len) as usize]
                .copy_from_slice(&piece);
        }
        Op::Restore(v, s) => {
            let (Some(volume), Some(snap)) = (model.pick_volume(v), model.pick_snapshot(s, false))
            else {
                return;
            };
            // Only from its own snapshots: another volume's is refused, and
            // the volume is left as it was.
            if !snap.starts_with(&format!("{volume}@")) {
                let refused = engine.restore_volume(&volume, &snap).unwrap_err();
                assert!(
                    matches!(refused, EngineError::InvalidArgument(_)),
                    "{refused:?}"
                );
                return;
            }
            engine.restore_volume(&volume, &snap).unwrap();
            let content = model.snapshots[&snap].0.clone();
            model.volumes.insert(volume, content);
        }
        Op::DeleteSnapshot(s) => {
            let Some(snap) = model.pick_snapshot(s, false) else {
                return;
            };
            engine.delete_snapshot(&snap).unwrap();
            model.snapshots.get_mut(&snap).unwrap().1 = true;
        }
        Op::RecoverSnapshot(s) => {
            let Some(snap) = model.pick_snapshot(s, true) else {
                return;
            };
            engine.recover_snapshot(&snap).unwrap();
            model.snapshots.get_mut(&snap).unwrap().1 = false;
        }
        Op::EradicateSnapshot(s) => {
            let Some(snap) = model.pick_snapshot(s, true) else {
                return;
            };
            engine.eradicate_snapshot(&snap).unwrap();
            model.snapshots.remove(&snap);
        }
        Op::DeleteVolume(v) => {
            let Some(name) = model.pick_volume(v) else {
                return;
            };
            engine.delete_volume(&name).unwrap();
            assert!(engine.open_volume(&name).is_err());
            let content = model.volumes.remove(&name).unwrap();
            model.destroyed_volumes.insert(name, content);
        }
        Op::RecoverVolume(v) => {
            let names: Vec<_> = model.destroyed_volumes.keys().cloned().collect();
            if names.is_empty() {
                return;
            }
            let name = names[v as usize % names.len()].clone();
            engine.recover_volume(&name).unwrap();
            let content = model.destroyed_volumes.remove(&name).unwrap();
            model.volumes.insert(name, content);
        }
        Op::EradicateVolume(v) => {
            let names: Vec<_> = model.destroyed_volumes.keys().cloned().collect();
            if names.is_empty() {
                return;
            }
            let name = names[v as usize % names.len()].clone();
            engine.eradicate_volume(&name).unwrap();
            model.destroyed_volumes.remove(&name);
            let prefix = format!("{name}@");
            model.snapshots.retain(|full, _| !full.starts_with(&prefix));
        }
        Op::Restart | Op::Reclaim | Op::Clean => unreachable!("handled by the runner"),
    }
}

fn check_all(engine: &Arc<Engine>, model: &Model) {
    for (name, content) in &model.volumes {
        let vol = engine.open_volume(name).unwrap();
        let mut buf = vec![0xeeu8; VOLUME_BYTES as usize];
        vol.read(0, &mut buf).unwrap();
        assert!(buf == *content, "volume {name} differs");
        let mut at = 0;
        for extent in vol.extents(0, VOLUME_BYTES).unwrap() {
            if extent.state != ExtentState::Data {
                assert!(content[at as usize..(at + extent.length_bytes) as usize]
                    .iter()
                    .all(|&b| b == 0));
            }
            at += extent.length_bytes;
        }
        assert_eq!(at, VOLUME_BYTES);
    }
    for (full, (content, destroyed)) in &model.snapshots {
        let volume_live = model.volumes.contains_key(full.split('@').next().unwrap());
        let opened = engine.open_snapshot(full);
        if *destroyed || !volume_live {
            assert!(opened.is_err(), "{full} should not be exported");
            continue;
        }
        let snap = opened.unwrap();
        let mut buf = vec![0xeeu8; VOLUME_BYTES as usize];
        snap.read(0, &mut buf).unwrap();
        assert!(buf == *content, "snapshot {full} differs");
    }
    let listed: Vec<String> = engine
        .list_snapshots(None, false)
        .unwrap()
        .into_iter()
        .map(|s| s.full_name)
        .collect();
    let expected: Vec<String> = model
        .snapshots
        .iter()
        .filter(|(full, (_, d))| !d && model.volumes.contains_key(full.split('@').next().unwrap()))
        .map(|(n, _)| n.clone())
        .collect();
    let mut listed_sorted = listed.clone();
    listed_sorted.sort();
    assert_eq!(listed_sorted, expected);
}

fn run(ops: Vec<Op>) {
    let tmp = temp_dir("snap", "model");
    let dir = tmp.path();
    let mut engine = open(dir);
    let mut model = Model::default();
    for name in ["a", "b"] {
        engine.create_volume(name, VOLUME_BYTES).unwrap();
        model
            .volumes
            .insert(name.into(), vec![0; VOLUME_BYTES as usize]);
    }
    for op in ops {
        match op {
            Op::Restart => {
                engine.close().unwrap();
                drop(engine);
                engine = open(dir);
                check_exact_unless_settling(&engine, &model);
            }
            Op::Reclaim => settle(&engine),
            Op::Clean => {
                engine.clean_now().unwrap();
            }
            op => apply(&engine, &mut model, op),
        }
    }
    check_all(&engine, &model);
    check_exact_unless_settling(&engine, &model);
    engine.check_consistency().unwrap();
    settle(&engine);
    check_all(&engine, &model);
    check_written_bytes(&engine, &model);
    engine.check_consistency().unwrap();
    let space = engine.space();
    assert_eq!(
        space.volume_unique_bytes + space.snapshot_bytes + space.shared_bytes,
        space.live_physical_bytes,
        "{space:?}"
    );
    assert_eq!(
        space.physical_used_bytes,
        space.live_physical_bytes + space.stale_bytes
    );
    engine.close().unwrap();
    drop(engine);
    engine = open(dir);
    check_all(&engine, &model);
    engine.check_consistency().unwrap();
    engine.close().unwrap();
    drop(engine);
}

/// Once background work settled, every volume's written bytes are exactly its
/// grains holding non-zero data — clones, copies and restores included.
fn check_written_bytes(engine: &Engine, model: &Model) {
    for (name, content) in &model.volumes {
        let info = engine.volume_info(name).unwrap();
        assert!(!info.written_settling, "{name}: {info:?}");
        assert_eq!(info.written_bytes, data_bytes(content), "{name}: {info:?}");
    }
}

/// Bytes of the 4 KiB grains of `content` that hold non-zero data.
fn data_bytes(content: &[u8]) -> u64 {
    content
        .chunks(4096)
        .filter(|g| g.iter().any(|&b| b != 0))
        .count() as u64
        * 4096
}

/// Before background work settled: a volume that does not say its written bytes
/// are settling has them exact already (the flag is read before the figure).
fn check_exact_unless_settling(engine: &Engine, model: &Model) {
    for (name, content) in &model.volumes {
        let info = engine.volume_info(name).unwrap();
        if info.written_settling {
            continue;
        }
        assert_eq!(info.written_bytes, data_bytes(content), "{name}: {info:?}");
    }
}

/// Waits until the background work (reclaim, history sweeps, unneeded pins) is done.
fn settle(engine: &Engine) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let before = engine.stats.reclaimed_mappings.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(30));
        let quiet = engine.space().reclaim_backlog_bytes == 0
            && engine.stats.reclaimed_mappings.load(Ordering::SeqCst) == before
            && engine.background_idle();
        if quiet {
            return;
        }
        assert!(Instant::now() < deadline, "background work did not settle");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn versions_match_the_model(ops in proptest::collection::vec(op(), 1..50)) {
        run(ops);
    }
}
