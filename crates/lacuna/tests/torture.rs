//! Crash torture: `lacuna serve` runs as a child under a mixed workload over NBD
//! (python3-libnbd) and iSCSI (a libiscsi client built here) at once — writes of
//! many sizes and alignments, FUA writes, trims, write-zeroes and flushes — while a
//! control worker takes snapshots, clones, range copies, resizes of clones and deletes (with
//! eradication, so the reclaimer and the cleaner have work) through the CLI;
//! every other start leaves all compression to the background reducer. The
//! daemon is SIGKILLed at a random moment, restarted, and every volume and
//! snapshot is read back and checked against a model built from the workers'
//! journal (see `support/torture_workload.py` for its format).
//!
//! The rules checked after every crash (docs/RELIABILITY.md, "Crash torture"):
//! - Barriers. A completed FLUSH / SYNCHRONIZE CACHE, a completed FUA write, and a
//!   control operation the API acknowledged (snapshot, clone, resize, delete, eradicate —
//!   the engine commits them durably, array-wide, before answering) make every
//!   I/O that completed before the barrier was issued durable, on every volume. A
//!   completed FUA write is itself durable. A range copy is not a barrier: like
//!   the EXTENDED COPY it implements, it is durable once a later barrier is.
//! - Per grain (4 KiB), the content after restart is the content after some
//!   prefix of the requests that touched it, no shorter than the durable one:
//!   a grain is never torn within one request (a request may be torn *between*
//!   grains), and nothing ever appears that was not written at that address (a
//!   range copy moves content; the model follows it). Exception: a range copy
//!   of different source and destination alignment within a grain is written in
//!   1 MiB steps of the range, so until durable a destination grain at a step
//!   boundary may hold new lower sectors and old upper ones.
//! - A snapshot, a clone (of a volume or a snapshot) and a range copy hold, per
//!   grain, the source's content at some instant between the operation's issue and
//!   its completion; an acknowledged snapshot or clone exists after any crash and,
//!   once observed, never changes. A completed delete is never undone; an object
//!   never created never appears.
//! - Resize (clones only). An answered resize is durable; one under way at the
//!   crash left either size. A grain past the end a shrink cut reads zeroes
//!   once a grow brings it back.
//! - Space: the engine's full metadata check passes on the crashed image, and the
//!   restarted daemon's space report adds up (used + free = capacity, used =
//!   live + stale, live = volume-unique + snapshot + shared, logical data = the
//!   sum of the volumes' written bytes).
//!
//! The same torture runs on the RADOS store (`--store rados`, a one-node Ceph
//! cluster): the killed gateway's shard is taken over once its lease runs out
//! (which fences the dead one at the cluster), checked, and served again by
//! the restarted gateway.
//!
//! TORTURE_ITERATIONS (default 100; on RADOS, TORTURE_RADOS_ITERATIONS,
//! default 16: each crash point waits for a lease) sets the number of crash
//! points; TORTURE_SEED replays a run. `tools/torture.sh` runs it for long.

mod support;

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lacuna_rados::test_cluster::{TestCluster, POOL};
use support::{build_iscsi_client, tool_ok, Daemon};
use tempfile::TempDir;

const SECTOR_BYTES: u64 = 512;
const GRAIN_SECTORS: u64 = 8;
const GRAIN_BYTES: u64 = SECTOR_BYTES * GRAIN_SECTORS;
/// Each base volume: 8 MiB, two I/O workers' stripes (NBD, iSCSI) on the first
/// three quarters, the rest written only by range copies.
const BASE_GRAINS: u64 = 2048;
const WORKER_GRAINS: u64 = BASE_GRAINS * 3 / 8;
const BASES: [&str; 2] = ["base0", "base1"];
const CAPACITY: &str = "1G";
const CAPACITY_BYTES: u64 = 1 << 30;
const INITIATOR: &str = "iqn.2026-01.org.lacuna.test:torture";
const MAGIC: u64 = 0x4C41_4355_5452_5455;
/// Bound on one grain's candidate contents (the product of two source grains'
/// candidates and the destination's, for an unaligned copy, stays far below).
const MAX_CANDIDATES: usize = 4096;

/// A grain's content: the stamp of each 512-byte sector (0 = zeroes).
type GrainState = [u64; 8];

/// One version of a grain: the contents it may have after a request, with the
/// journal positions where the request was issued and completed.
#[derive(Clone, Debug)]
struct Entry {
    states: Vec<GrainState>,
    issued: usize,
    done: Option<usize>,
}

impl Entry {
    fn baseline(states: Vec<GrainState>) -> Entry {
        Entry {
            states,
            issued: 0,
            done: Some(0),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Existence {
    Certain,
    Maybe,
    Gone,
}

/// A volume: per grain, its versions since the last verification (entry 0 is
/// what was observed then). `grains` always spans the volume's full size; a
/// grain past its current end holds what a later grow would show (zeroes).
struct VolumeModel {
    grains: Vec<Vec<Entry>>,
    /// Its sizes in grains since the last verification (entry 0 observed
    /// then), each with the journal position where its resize completed.
    sizes: Vec<(u64, Option<usize>)>,
    exists: Existence,
}

impl VolumeModel {
    /// A volume of `grains` full-size grains, holding `states` from `size_grains` on.
    fn observed(states: Vec<GrainState>, size_grains: u64) -> VolumeModel {
        VolumeModel {
            grains: states
                .into_iter()
                .map(|s| vec![Entry::baseline(vec![s])])
                .collect(),
            sizes: vec![(size_grains, Some(0))],
            exists: Existence::Certain,
        }
    }
}

/// What a volume may be after a crash: its size in grains, and each grain's
/// contents.
struct Allowed {
    sizes: Vec<u64>,
    grains: Vec<Vec<GrainState>>,
}

struct SnapshotModel {
    grains: Vec<Vec<GrainState>>,
    exists: Existence,
}

#[derive(Default)]
struct Model {
    volumes: BTreeMap<String, VolumeModel>,
    snapshots: BTreeMap<String, SnapshotModel>,
}

/// A parsed journal line.
#[derive(Clone, Debug)]
enum Op {
    Write {
        volume: String,
        sector: u64,
        count: u64,
        write_id: u64,
        fua: bool,
    },
    Fill {
        volume: String,
        sector: u64,
        count: u64,
    },
    Flush,
    Snap {
        volume: String,
        name: String,
    },
    Clone {
        source: String,
        name: String,
    },
    Copy {
        source: String,
        source_sector: u64,
        count: u64,
        destination: String,
        destination_sector: u64,
    },
    /// A clone resized to `sectors` (a whole number of grains).
    Resize {
        volume: String,
        sectors: u64,
    },
    DeleteVolume(String),
    DeleteSnapshot(String),
    Erase,
}

fn parse_op(fields: &[&str]) -> Op {
    let num = |i: usize| -> u64 { fields[i].parse().expect("journal number") };
    match fields[0] {
        "w" | "wf" => Op::Write {
            volume: fields[1].into(),
            sector: num(2),
            count: num(3),
            write_id: num(4),
            fua: fields[0] == "wf",
        },
        "t" | "z" => Op::Fill {
            volume: fields[1].into(),
            sector: num(2),
            count: num(3),
        },
        "f" => Op::Flush,
        "snap" => Op::Snap {
            volume: fields[1].into(),
            name: fields[2].into(),
        },
        "clone" => Op::Clone {
            source: fields[1].into(),
            name: fields[2].into(),
        },
        "copy" => Op::Copy {
            source: fields[1].into(),
            source_sector: num(2),
            count: num(3),
            destination: fields[4].into(),
            destination_sector: num(5),
        },
        "resize" => Op::Resize {
            volume: fields[1].into(),
            sectors: num(2),
        },
        "delvol" => Op::DeleteVolume(fields[1].into()),
        "delsnap" => Op::DeleteSnapshot(format!("{}@{}", fields[1], fields[2])),
        "erase" => Op::Erase,
        other => panic!("unknown journal op {other}"),
    }
}

/// One journalled operation with its positions (lines count from 1; 0 is
/// "before the iteration").
struct Record {
    worker: u32,
    op: Op,
    issued: usize,
    done: Option<usize>,
}

fn parse_journal(text: &str) -> Vec<Record> {
    let mut records: Vec<Record> = Vec::new();
    let mut open: HashMap<(String, String), usize> = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        let position = index + 1;
        let fields: Vec<&str> = line.split(' ').collect();
        // The last line may be cut short by the kill: the worker died mid-write.
        match fields[0] {
            "I" if fields.len() >= 4 => {
                open.insert((fields[1].into(), fields[2].into()), records.len());
                records.push(Record {
                    worker: fields[1].parse().expect("worker number"),
                    op: parse_op(&fields[3..]),
                    issued: position,
                    done: None,
                });
            }
            "D" if fields.len() == 3 => {
                let at = open
                    .remove(&(fields[1].into(), fields[2].into()))
                    .unwrap_or_else(|| panic!("journal line {position}: D without I"));
                records[at].done = Some(position);
            }
            _ => assert!(
                position == text.lines().count(),
                "journal line {position} malformed: {line:?}"
            ),
        }
    }
    records
}

fn apply_fill(
    state: &GrainState,
    first: u64,
    count: u64,
    stamp: impl Fn(u64) -> u64,
) -> GrainState {
    let mut out = *state;
    for i in first..first + count {
        out[i as usize] = stamp(i);
    }
    out
}

/// The grains a sector range touches, with the part of each: (grain, first
/// sector within it, sectors, sector offset of that part within the range).
fn grain_parts(sector: u64, count: u64) -> Vec<(u64, u64, u64, u64)> {
    let mut parts = Vec::new();
    let mut at = sector;
    while at < sector + count {
        let grain = at / GRAIN_SECTORS;
        let within = at % GRAIN_SECTORS;
        let take = (GRAIN_SECTORS - within).min(sector + count - at);
        parts.push((grain, within, take, at - sector));
        at += take;
    }
    parts
}

fn dedup(mut states: Vec<GrainState>) -> Vec<GrainState> {
    states.sort_unstable();
    states.dedup();
    assert!(
        states.len() <= MAX_CANDIDATES,
        "model: a grain has {} candidate contents",
        states.len()
    );
    states
}

/// The contents a grain may have had at some instant between `issued` and
/// `done`: from the last version completed before `issued` to the last issued
/// before `done`.
fn window(entries: &[Entry], issued: usize, done: usize) -> Vec<GrainState> {
    let first = entries
        .iter()
        .rposition(|e| e.done.is_some_and(|d| d < issued))
        .expect("the baseline is done at 0");
    let last = entries
        .iter()
        .rposition(|e| e.issued < done)
        .expect("the baseline is issued at 0");
    dedup(
        entries[first..=last.max(first)]
            .iter()
            .flat_map(|e| e.states.iter().copied())
            .collect(),
    )
}

impl Model {
    /// Grain contents of a source (`VOL` or `VOL@SNAP`) at an instant between
    /// `issued` and `done`.
    fn source_grains(&self, source: &str, issued: usize, done: usize) -> Vec<Vec<GrainState>> {
        if source.contains('@') {
            return self.snapshots[source].grains.clone();
        }
        self.volumes[source]
            .grains
            .iter()
            .map(|entries| window(entries, issued, done))
            .collect()
    }

    /// Replays one iteration's journal and returns what each volume grain may
    /// hold after the crash.
    fn apply(&mut self, records: &[Record], end: usize) -> BTreeMap<String, Allowed> {
        // The latest issue position of a completed barrier, and the versions
        // completed FUA writes made durable themselves.
        let mut barrier = 0usize;
        let mut forced: Vec<(String, u64, usize)> = Vec::new();
        // I/O changes a grain when issued; a snapshot, clone or copy takes its
        // source when it completes (or at the crash), once every request issued
        // before that is in the model.
        let mut events: Vec<(usize, usize)> = records
            .iter()
            .enumerate()
            .map(|(index, record)| {
                let at = match record.op {
                    Op::Snap { .. } | Op::Clone { .. } | Op::Copy { .. } => {
                        record.done.unwrap_or(end)
                    }
                    _ => record.issued,
                };
                (at, index)
            })
            .collect();
        events.sort_unstable();
        for (_, index) in events {
            self.apply_record(&records[index], end, &mut forced);
        }
        for record in records {
            let is_barrier = match &record.op {
                Op::Write { fua, .. } => *fua,
                // A range copy is a host data operation (the engine side of
                // EXTENDED COPY): durable at the next flush, not when answered.
                Op::Fill { .. } | Op::Copy { .. } => false,
                _ => true,
            };
            if is_barrier && record.done.is_some() {
                barrier = barrier.max(record.issued);
            }
        }
        let mut allowed = BTreeMap::new();
        for (name, volume) in &self.volumes {
            let grains = volume
                .grains
                .iter()
                .enumerate()
                .map(|(grain, entries)| {
                    let mut floor = entries
                        .iter()
                        .rposition(|e| e.done.is_some_and(|d| d < barrier || d == 0))
                        .expect("baseline");
                    for (v, g, index) in &forced {
                        if v == name && *g == grain as u64 {
                            floor = floor.max(*index);
                        }
                    }
                    dedup(
                        entries[floor..]
                            .iter()
                            .flat_map(|e| e.states.iter().copied())
                            .collect(),
                    )
                })
                .collect();
            // Resizes run one at a time and are durable once answered: the
            // last answered size, or one asked for since.
            let answered = volume
                .sizes
                .iter()
                .rposition(|(_, done)| done.is_some())
                .expect("the baseline size is answered");
            let sizes = volume.sizes[answered..].iter().map(|(g, _)| *g).collect();
            allowed.insert(name.clone(), Allowed { sizes, grains });
        }
        allowed
    }

    fn apply_record(
        &mut self,
        record: &Record,
        end: usize,
        forced: &mut Vec<(String, u64, usize)>,
    ) {
        let done_or_end = record.done.unwrap_or(end);
        let maybe = |done: Option<usize>| {
            if done.is_some() {
                Existence::Certain
            } else {
                Existence::Maybe
            }
        };
        match &record.op {
            Op::Write {
                volume,
                sector,
                count,
                write_id,
                fua,
            } => {
                let model = self.volumes.get_mut(volume).expect("written volume");
                for (grain, within, take, offset) in grain_parts(*sector, *count) {
                    let entries = &mut model.grains[grain as usize];
                    let states = entries.last().unwrap().states.iter().map(|s| {
                        apply_fill(s, within, take, |i| {
                            (write_id << 12) | (offset + i - within)
                        })
                    });
                    entries.push(Entry {
                        states: dedup(states.collect()),
                        issued: record.issued,
                        done: record.done,
                    });
                    if *fua && record.done.is_some() {
                        forced.push((volume.clone(), grain, entries.len() - 1));
                    }
                }
            }
            Op::Fill {
                volume,
                sector,
                count,
            } => {
                let model = self.volumes.get_mut(volume).expect("trimmed volume");
                for (grain, within, take, _) in grain_parts(*sector, *count) {
                    let entries = &mut model.grains[grain as usize];
                    let states = entries
                        .last()
                        .unwrap()
                        .states
                        .iter()
                        .map(|s| apply_fill(s, within, take, |_| 0));
                    entries.push(Entry {
                        states: dedup(states.collect()),
                        issued: record.issued,
                        done: record.done,
                    });
                }
            }
            Op::Flush | Op::Erase => {}
            Op::Snap { volume, name } => {
                let grains = self.source_grains(volume, record.issued, done_or_end);
                self.snapshots.insert(
                    format!("{volume}@{name}"),
                    SnapshotModel {
                        grains,
                        exists: maybe(record.done),
                    },
                );
            }
            Op::Clone { source, name } => {
                let grains = self.source_grains(source, record.issued, done_or_end);
                let size_grains = grains.len() as u64;
                self.volumes.insert(
                    name.clone(),
                    VolumeModel {
                        grains: grains
                            .into_iter()
                            .map(|s| vec![Entry::baseline(s)])
                            .collect(),
                        sizes: vec![(size_grains, Some(0))],
                        exists: maybe(record.done),
                    },
                );
            }
            Op::Copy {
                source,
                source_sector,
                count,
                destination,
                destination_sector,
            } => {
                let sources = self.source_grains(source, record.issued, done_or_end);
                // Source and destination of different alignment within a grain are
                // copied as data, in steps of the copied range: a step boundary
                // may fall inside a destination grain, whose lower sectors are then
                // written (and may become durable) before its upper ones.
                let stepped = source_sector % GRAIN_SECTORS != destination_sector % GRAIN_SECTORS;
                let model = self.volumes.get_mut(destination).expect("copy target");
                for (grain, within, take, offset) in grain_parts(*destination_sector, *count) {
                    let entries = &mut model.grains[grain as usize];
                    let mut torn = Vec::new();
                    let mut full = Vec::new();
                    for prior in &entries.last().unwrap().states {
                        for new in
                            copied_states(prior, &sources, source_sector + offset, within, take)
                        {
                            if stepped {
                                for split in within + 1..within + take {
                                    let mut state = *prior;
                                    state[within as usize..split as usize]
                                        .copy_from_slice(&new[within as usize..split as usize]);
                                    torn.push(state);
                                }
                            }
                            full.push(new);
                        }
                    }
                    if !torn.is_empty() {
                        entries.push(Entry {
                            states: dedup(torn),
                            issued: record.issued,
                            done: record.done,
                        });
                    }
                    entries.push(Entry {
                        states: dedup(full),
                        issued: record.issued,
                        done: record.done,
                    });
                }
            }
            Op::Resize { volume, sectors } => {
                assert_eq!(sectors % GRAIN_SECTORS, 0, "resizes keep whole grains");
                let size_grains = sectors / GRAIN_SECTORS;
                let model = self.volumes.get_mut(volume).expect("resized volume");
                model.sizes.push((size_grains, record.done));
                // A shrink cuts the grains past the new end: a later grow
                // shows zeroes there. A grow changes no grain.
                for entries in model.grains.iter_mut().skip(size_grains as usize) {
                    entries.push(Entry {
                        states: vec![[0; 8]],
                        issued: record.issued,
                        done: record.done,
                    });
                }
            }
            Op::DeleteVolume(name) => {
                let model = self.volumes.get_mut(name).expect("deleted volume");
                model.exists = if record.done.is_some() {
                    Existence::Gone
                } else {
                    Existence::Maybe
                };
            }
            Op::DeleteSnapshot(name) => {
                let model = self.snapshots.get_mut(name).expect("deleted snapshot");
                model.exists = if record.done.is_some() {
                    Existence::Gone
                } else {
                    Existence::Maybe
                };
            }
        }
    }
}

/// A destination grain's possible contents after its sectors [within,
/// within+take) take the source sectors from `first_source` on (which lie in at
/// most two source grains, each with its own candidates).
fn copied_states(
    prior: &GrainState,
    sources: &[Vec<GrainState>],
    first_source: u64,
    within: u64,
    take: u64,
) -> Vec<GrainState> {
    let mut states = vec![*prior];
    for (sgrain, swithin, stake, soffset) in grain_parts(first_source, take) {
        let mut next = Vec::new();
        for state in &states {
            for src in &sources[sgrain as usize] {
                let mut out = *state;
                for i in 0..stake {
                    out[(within + soffset + i) as usize] = src[(swithin + i) as usize];
                }
                next.push(out);
            }
        }
        states = dedup(next);
    }
    states
}

/// The body of a sector after its 16-byte header: stamp × a fixed 3968-bit odd
/// number, truncated (the workload computes the same with Python integers).
fn sector_body(stamp: u64) -> Vec<u8> {
    const LIMBS: usize = 62;
    let mut out = Vec::with_capacity(LIMBS * 8);
    let mut carry: u128 = 0;
    for i in 0..LIMBS {
        let mut limb = splitmix64(i as u64);
        if i == 0 {
            limb |= 1;
        }
        let product = u128::from(limb) * u128::from(stamp) + carry;
        out.extend_from_slice(&(product as u64).to_le_bytes());
        carry = product >> 64;
    }
    out
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The stamp a sector carries (0 = zeroes), or None for bytes no write produced.
fn decode_sector(bytes: &[u8]) -> Option<u64> {
    if bytes.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let magic = u64::from_le_bytes(bytes[0..8].try_into().unwrap());
    let stamp = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    (magic == MAGIC && stamp != 0 && bytes[16..] == sector_body(stamp)[..]).then_some(stamp)
}

fn decode_grain(bytes: &[u8]) -> Result<GrainState, usize> {
    let mut state = [0u64; 8];
    for (i, slot) in state.iter_mut().enumerate() {
        let at = i * SECTOR_BYTES as usize;
        *slot = decode_sector(&bytes[at..at + SECTOR_BYTES as usize]).ok_or(i)?;
    }
    Ok(state)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const COVERAGE_KINDS: [&str; 13] = [
    "nbd write",
    "nbd fua-write",
    "nbd trim/zero",
    "nbd flush",
    "iscsi write",
    "iscsi fua-write",
    "iscsi trim/zero",
    "iscsi flush",
    "snapshot",
    "clone",
    "copy",
    "resize",
    "delete",
];

/// What a completed operation counts as in the run's coverage summary.
fn coverage_kind(record: &Record) -> &'static str {
    let nbd = matches!(record.worker, 0 | 2);
    match (&record.op, nbd) {
        (Op::Write { fua: false, .. }, true) => "nbd write",
        (Op::Write { fua: true, .. }, true) => "nbd fua-write",
        (Op::Fill { .. }, true) => "nbd trim/zero",
        (Op::Flush, true) => "nbd flush",
        (Op::Write { fua: false, .. }, false) => "iscsi write",
        (Op::Write { fua: true, .. }, false) => "iscsi fua-write",
        (Op::Fill { .. }, false) => "iscsi trim/zero",
        (Op::Flush, false) => "iscsi flush",
        (Op::Snap { .. }, _) => "snapshot",
        (Op::Clone { .. }, _) => "clone",
        (Op::Copy { .. }, _) => "copy",
        (Op::Resize { .. }, _) => "resize",
        (Op::DeleteVolume(_) | Op::DeleteSnapshot(_), _) => "delete",
        (Op::Erase, _) => "eradicate",
    }
}

/// The run's settings and where it keeps its files.
struct Run {
    seed: u64,
    store: Store,
    dir: PathBuf,
    iscsi_client: PathBuf,
    /// `dir`'s guard: removes the directory when the run ends, passed or
    /// failed — except after `fail`, which keeps it for the post-mortem its
    /// message points to.
    dir_guard: RefCell<TempDir>,
}

/// Where the daemon under torture keeps its segments and metadata.
enum Store {
    /// Its data directory.
    Local,
    /// A pool of a one-node Ceph cluster, stopped when the run ends.
    Rados(TestCluster),
}

/// The namespace `lacuna serve --store rados` keeps its shard in.
const SHARD: &str = "shard-0";
/// The torture gateway's ownership lease: the shortest `serve` takes, as
/// every crash point waits for it to run out.
const LEASE_S: &str = "2";

impl Run {
    fn fail(&self, iteration: u64, what: String) -> ! {
        self.dir_guard.borrow_mut().disable_cleanup(true);
        // The cluster goes with the run: on RADOS only the local part stays.
        let (variable, test) = match self.store {
            Store::Local => ("TORTURE_ITERATIONS", "mixed_nbd"),
            Store::Rados(_) => ("TORTURE_RADOS_ITERATIONS", "the_workload_on_rados"),
        };
        panic!(
            "crash torture FAILED at crash point {iteration}: {what}\n  replay: \
             TORTURE_SEED={} {variable}={iteration} cargo test -p lacuna --test torture {test} -- --nocapture\n  \
             (data directory and journals kept in {})",
            self.seed,
            self.dir.display()
        );
    }
}

/// Starts one worker; its stderr goes to `worker-N.log` in the run directory.
fn workload(run: &Run, args: &[String]) -> Child {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/torture_workload.py"
    );
    let log = std::fs::File::create(run.dir.join(format!("worker-{}.log", args[2]))).unwrap();
    Command::new("/usr/bin/python3")
        .arg(script)
        .args(args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn the torture workload (python3-libnbd)")
}

/// Starts the workers of one iteration: per base volume an NBD and an iSCSI
/// worker on their stripes, and one control worker.
fn spawn_workers(
    run: &Run,
    daemon: &Daemon,
    model: &Model,
    iteration: u64,
    journal: &Path,
) -> Vec<Child> {
    let common = |mode: &str, worker: usize| -> Vec<String> {
        vec![
            mode.into(),
            journal.display().to_string(),
            worker.to_string(),
            run.seed.wrapping_add(iteration).to_string(),
            iteration.to_string(),
        ]
    };
    let stripe_sectors = WORKER_GRAINS * GRAIN_SECTORS;
    let mut children = Vec::new();
    for (lun, base) in BASES.iter().enumerate() {
        let mut nbd = common("nbd", 2 * lun);
        nbd.extend([
            daemon.uri(base),
            "0".into(),
            stripe_sectors.to_string(),
            base.to_string(),
        ]);
        children.push(workload(run, &nbd));
        let mut iscsi = common("iscsi", 2 * lun + 1);
        iscsi.extend([
            run.iscsi_client.display().to_string(),
            daemon.iscsi_url(lun % 2, lun as u64),
            INITIATOR.into(),
            stripe_sectors.to_string(),
            stripe_sectors.to_string(),
            base.to_string(),
        ]);
        children.push(workload(run, &iscsi));
    }
    let state = serde_json::json!({
        "bases": BASES.iter().map(|b| (b.to_string(), serde_json::json!({
            "sectors": BASE_GRAINS * GRAIN_SECTORS,
            "worker_sectors": 2 * stripe_sectors,
        }))).collect::<serde_json::Map<_, _>>(),
        // Each clone with its size in sectors, as the last verification found it.
        "clones": model.volumes.iter().filter(|(v, _)| !BASES.contains(&v.as_str())).map(|(v, m)| {
            let (size_grains, _) = *m.sizes.last().expect("a size");
            (v.clone(), serde_json::json!(size_grains * GRAIN_SECTORS))
        }).collect::<serde_json::Map<_, _>>(),
        "snapshots": model.snapshots.keys().collect::<Vec<_>>(),
    });
    let state_path = run.dir.join("state.json");
    std::fs::write(&state_path, state.to_string()).unwrap();
    let mut control = common("control", 9);
    control.extend([
        support::BIN.into(),
        format!("http://127.0.0.1:{}", daemon.api_port),
        run.dir.join("data").display().to_string(),
        state_path.display().to_string(),
    ]);
    children.push(workload(run, &control));
    children
}

fn list_names(daemon: &Daemon, what: &str, key: &str) -> BTreeSet<String> {
    let json: serde_json::Value =
        serde_json::from_str(&daemon.cli_ok(&["--json", what, "list"])).expect("list JSON");
    json.as_array()
        .expect("a list")
        .iter()
        .map(|o| o[key].as_str().expect("name").to_string())
        .collect()
}

/// Reads an export whole with nbdcopy.
fn read_export(run: &Run, daemon: &Daemon, export: &str) -> Vec<u8> {
    let image = run.dir.join("image.raw");
    let _ = std::fs::remove_file(&image);
    tool_ok("nbdcopy", &[&daemon.uri(export), image.to_str().unwrap()]);
    std::fs::read(&image).unwrap()
}

/// Checks one object's bytes against what each grain may hold and returns what
/// it holds.
fn check_grains(
    run: &Run,
    iteration: u64,
    object: &str,
    bytes: &[u8],
    allowed: &[Vec<GrainState>],
) -> Vec<GrainState> {
    assert_eq!(
        bytes.len() as u64,
        allowed.len() as u64 * GRAIN_BYTES,
        "{object}: size"
    );
    let mut observed = Vec::with_capacity(allowed.len());
    for (grain, allowed) in allowed.iter().enumerate() {
        let at = grain * GRAIN_BYTES as usize;
        match decode_grain(&bytes[at..at + GRAIN_BYTES as usize]) {
            Ok(state) if allowed.binary_search(&state).is_ok() => observed.push(state),
            Ok(state) => run.fail(
                iteration,
                format!(
                    "{object} grain {grain} holds sector stamps {state:x?}, which is none of the {} \
                     contents allowed, e.g. {:x?}",
                    allowed.len(),
                    &allowed[..allowed.len().min(4)]
                ),
            ),
            Err(sector) => run.fail(
                iteration,
                format!("{object} grain {grain} sector {sector} holds bytes no write produced"),
            ),
        }
    }
    observed
}

/// After a restart: every object exists as the model says and reads back as
/// allowed; the model then takes what was read as the new baseline.
fn verify(
    run: &Run,
    daemon: &Daemon,
    model: &mut Model,
    allowed: BTreeMap<String, Allowed>,
    iteration: u64,
) {
    let volumes = list_names(daemon, "volume", "name");
    let snapshots = list_names(daemon, "snapshot", "full_name");
    for name in &volumes {
        if !model.volumes.contains_key(name) {
            run.fail(
                iteration,
                format!("volume {name} exists but was never created"),
            );
        }
    }
    for name in &snapshots {
        if !model.snapshots.contains_key(name) {
            run.fail(
                iteration,
                format!("snapshot {name} exists but was never created"),
            );
        }
    }
    let names: Vec<String> = model.volumes.keys().cloned().collect();
    for name in names {
        let exists = model.volumes[&name].exists;
        let listed = volumes.contains(&name);
        match (exists, listed) {
            (Existence::Certain, false) => {
                run.fail(iteration, format!("volume {name}, acknowledged, is lost"))
            }
            (Existence::Gone, true) => {
                run.fail(iteration, format!("volume {name}, deleted, is back"))
            }
            (_, false) => {
                model.volumes.remove(&name);
                continue;
            }
            _ => {}
        }
        let bytes = read_export(run, daemon, &name);
        let allowed = &allowed[&name];
        let size_grains = bytes.len() as u64 / GRAIN_BYTES;
        if !(bytes.len() as u64).is_multiple_of(GRAIN_BYTES)
            || !allowed.sizes.contains(&size_grains)
        {
            run.fail(
                iteration,
                format!(
                    "volume {name} is {} bytes, none of the sizes allowed ({:?} grains)",
                    bytes.len(),
                    allowed.sizes
                ),
            );
        }
        let visible = &allowed.grains[..size_grains as usize];
        let mut observed = check_grains(run, iteration, &name, &bytes, visible);
        // Past the end: what a grow would show.
        observed.resize(allowed.grains.len(), [0; 8]);
        model
            .volumes
            .insert(name, VolumeModel::observed(observed, size_grains));
    }
    let names: Vec<String> = model.snapshots.keys().cloned().collect();
    for name in names {
        let exists = model.snapshots[&name].exists;
        let listed = snapshots.contains(&name);
        match (exists, listed) {
            (Existence::Certain, false) => {
                run.fail(iteration, format!("snapshot {name}, acknowledged, is lost"))
            }
            (Existence::Gone, true) => {
                run.fail(iteration, format!("snapshot {name}, deleted, is back"))
            }
            (_, false) => {
                model.snapshots.remove(&name);
                continue;
            }
            _ => {}
        }
        let bytes = read_export(run, daemon, &name);
        let observed = check_grains(
            run,
            iteration,
            &name,
            &bytes,
            &model.snapshots[&name].grains,
        );
        model.snapshots.insert(
            name,
            SnapshotModel {
                grains: observed.into_iter().map(|s| vec![s]).collect(),
                exists: Existence::Certain,
            },
        );
    }
    check_space(run, daemon, iteration);
}

/// Most tries at a space report with no written bytes still settling, and the
/// pause between tries.
const SETTLED_REPORT_TRIES: u32 = 100;
const SETTLED_REPORT_PAUSE: Duration = Duration::from_millis(100);

/// The sum of the volumes' written bytes.
fn written_sum(daemon: &Daemon) -> u64 {
    let volumes: serde_json::Value =
        serde_json::from_str(&daemon.cli_ok(&["--json", "volume", "list"])).unwrap();
    volumes
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["written_bytes"].as_u64().unwrap())
        .sum()
}

/// A space report whose written bytes are final, and the volumes' written bytes
/// after it. After a restart, copied ranges count as written whole until the
/// background job has worked out their source's bits, and the report says so
/// (`written_settling_volumes`); once it says none are settling, nothing here
/// changes the figures (the workload is stopped), so the two must agree exactly.
fn settled_space(run: &Run, daemon: &Daemon, iteration: u64) -> (serde_json::Value, u64) {
    for _ in 0..SETTLED_REPORT_TRIES {
        let space: serde_json::Value =
            serde_json::from_str(&daemon.cli_ok(&["--json", "array", "space"])).unwrap();
        let settling = space["written_settling_volumes"]
            .as_u64()
            .expect("space report has written_settling_volumes");
        if settling == 0 {
            return (space, written_sum(daemon));
        }
        std::thread::sleep(SETTLED_REPORT_PAUSE);
    }
    run.fail(
        iteration,
        format!(
            "written bytes still settling {:?} after the restart",
            SETTLED_REPORT_PAUSE * SETTLED_REPORT_TRIES
        ),
    )
}

fn check_space(run: &Run, daemon: &Daemon, iteration: u64) {
    let (space, written) = settled_space(run, daemon, iteration);
    let n = |key: &str| {
        space[key]
            .as_u64()
            .unwrap_or_else(|| panic!("space report lacks {key}"))
    };
    let sums = [
        (
            "used + free = capacity",
            n("physical_used_bytes") + n("free_bytes"),
            n("capacity_bytes"),
        ),
        (
            "live + stale = used",
            n("live_physical_bytes") + n("stale_bytes"),
            n("physical_used_bytes"),
        ),
        (
            "unique + snapshot + shared = live",
            n("volume_unique_bytes") + n("snapshot_bytes") + n("shared_bytes"),
            n("live_physical_bytes"),
        ),
        (
            "sum of written = logical data",
            written,
            n("logical_data_bytes"),
        ),
    ];
    for (rule, left, right) in sums {
        if left != right {
            run.fail(
                iteration,
                format!("space report: {rule} fails ({left} != {right}): {space}"),
            );
        }
    }
}

/// Runs the engine's full metadata check on a copy of the crashed data
/// directory (the daemon then recovers the original itself).
fn fsck_copy(run: &Run, iteration: u64) {
    let copy = run.dir.join("fsck");
    let _ = std::fs::remove_dir_all(&copy);
    copy_dir(&run.dir.join("data"), &copy);
    let engine =
        lacuna_engine::Engine::open(lacuna_engine::EngineConfig::new(&copy, CAPACITY_BYTES))
            .unwrap_or_else(|e| {
                run.fail(iteration, format!("the crashed image does not open: {e}"))
            });
    check_crashed(run, iteration, &engine, "image");
    engine.close().expect("close the checked copy");
    drop(engine);
    let _ = std::fs::remove_dir_all(&copy);
}

/// The metadata check and the engine's space classes of a crashed `what`
/// (image or shard), opened.
fn check_crashed(run: &Run, iteration: u64, engine: &lacuna_engine::Engine, what: &str) {
    if let Err(e) = engine.check_consistency() {
        run.fail(
            iteration,
            format!("metadata check of the crashed {what}: {e}"),
        );
    }
    let space = engine.space();
    if space.volume_unique_bytes + space.snapshot_bytes + space.shared_bytes
        != space.live_physical_bytes
    {
        run.fail(
            iteration,
            format!("engine space classes do not add up: {space:?}"),
        );
    }
}

/// The engine's full metadata check on the crashed shard, by a gateway of
/// its own: it takes the shard as any would (once the killed daemon's lease
/// has run out, fencing that one), opens it with nothing in the background,
/// checks it, and hands it back without closing the engine, so the restarted
/// daemon recovers an unclosed shard as after the kill.
fn fsck_shard(run: &Run, cluster: &TestCluster, iteration: u64) {
    let client = cluster.client();
    let io = Arc::new(client.io(POOL, SHARD).expect("the shard's namespace"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let ownership = loop {
        let lease = Duration::from_secs(60);
        match lacuna_rados_store::ownership::Ownership::try_take(
            client.clone(),
            io.clone(),
            "torture-fsck",
            lease,
        ) {
            Ok(ownership) => break ownership,
            Err(e) if e.is_busy() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => run.fail(iteration, format!("the crashed shard cannot be taken: {e}")),
        }
    };
    if ownership.fenced.is_none() {
        run.fail(iteration, "the killed gateway was not fenced".into());
    }
    let local = run.dir.join("fsck");
    let _ = std::fs::remove_dir_all(&local);
    let engine = lacuna_engine::Engine::open(lacuna_engine::EngineConfig {
        background: false,
        external_store: Some(lacuna_rados_store::shard_store(io, "torture fsck")),
        ..lacuna_engine::EngineConfig::new(&local, CAPACITY_BYTES)
    })
    .unwrap_or_else(|e| run.fail(iteration, format!("the crashed shard does not open: {e}")));
    check_crashed(run, iteration, &engine, "shard");
    std::mem::forget(engine);
    ownership.release().expect("handing the checked shard back");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The segment files (`.seg`) present, and how many freed files were kept
/// for reuse (`.free`) at that moment.
fn segment_files(run: &Run) -> (BTreeSet<String>, usize) {
    if let Store::Rados(cluster) = &run.store {
        let objects = cluster
            .client()
            .io(POOL, SHARD)
            .unwrap()
            .list(1 << 20)
            .unwrap();
        let segments = objects
            .into_iter()
            .filter(|o| o.starts_with("seg."))
            .collect();
        return (segments, 0);
    }
    let names: Vec<String> = std::fs::read_dir(run.dir.join("data").join("segments"))
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let kept = names.iter().filter(|n| n.ends_with(".free")).count();
    let segments = names.into_iter().filter(|n| n.ends_with(".seg")).collect();
    (segments, kept)
}

/// Waits until the workers have issued their first request, so the random delay
/// before the kill is measured from a running workload, not from process start.
fn wait_for_workload(run: &Run, iteration: u64, journal: &Path) {
    const LIMIT: Duration = Duration::from_secs(30);
    let started = std::time::Instant::now();
    while std::fs::metadata(journal).map(|m| m.len()).unwrap_or(0) == 0 {
        if started.elapsed() > LIMIT {
            let log = std::fs::read_to_string(run.dir.join("worker-0.log")).unwrap_or_default();
            run.fail(
                iteration,
                format!("no worker issued a request in {LIMIT:?}; worker 0: {log}"),
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// Every other start has the background reducer compress all new data (and
/// so run, and be killed, in the middle of it); the others reduce as the
/// daemon does by default.
fn start(run: &Run) -> Daemon {
    static STARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let reduction = if n.is_multiple_of(2) {
        "background"
    } else {
        "adaptive"
    };
    let mut args = vec!["--reduction", reduction];
    let conf;
    if let Store::Rados(cluster) = &run.store {
        conf = cluster.conf.display().to_string();
        args.extend(["--store", "rados", "--ceph-conf", &conf, "--pool", POOL]);
        args.extend(["--gateway-id", "torture", "--lease-s", LEASE_S]);
    }
    Daemon::start_with_args(&run.dir, CAPACITY, &args)
}

fn setup(run: &Run) -> Model {
    let daemon = start(run);
    daemon.cli_ok(&["host", "create", "torture", "--iqn", INITIATOR]);
    let mut model = Model::default();
    for (lun, base) in BASES.iter().enumerate() {
        daemon.cli_ok(&[
            "volume",
            "create",
            base,
            &(BASE_GRAINS * GRAIN_BYTES).to_string(),
        ]);
        daemon.cli_ok(&[
            "host",
            "connect",
            "torture",
            base,
            "--lun",
            &lun.to_string(),
        ]);
        model.volumes.insert(
            base.to_string(),
            VolumeModel::observed(vec![[0; 8]; BASE_GRAINS as usize], BASE_GRAINS),
        );
    }
    model
}

/// The two runs, one after the other: each loads both cores.
static ONE_RUN_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn mixed_nbd_iscsi_and_control_workload_survives_sigkill() {
    let _alone = ONE_RUN_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    torture(Store::Local, env_u64("TORTURE_ITERATIONS").unwrap_or(100));
}

#[test]
fn the_workload_on_rados_survives_sigkill_of_the_gateway() {
    let _alone = ONE_RUN_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let iterations = env_u64("TORTURE_RADOS_ITERATIONS").unwrap_or(16);
    torture(Store::Rados(TestCluster::start()), iterations);
}

fn torture(store: Store, iterations: u64) {
    // A run long enough to mean something (fewer crash points on RADOS, each
    // a lease long) must cover every kind of operation and free space.
    let thorough = iterations
        >= match store {
            Store::Local => 50,
            Store::Rados(_) => 16,
        };
    let seed = env_u64("TORTURE_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1
    });
    eprintln!("crash torture: {iterations} crash points, TORTURE_SEED={seed}");
    let tmp = support::temp_dir("torture");
    let run = Run {
        seed,
        store,
        iscsi_client: build_iscsi_client(tmp.path(), "torture_iscsi.c", "torture-iscsi"),
        dir: tmp.path().to_path_buf(),
        dir_guard: RefCell::new(tmp),
    };
    let dir = run.dir.as_path();
    let mut rng = Rng(seed);
    let mut model = setup(&run);
    let mut seen_segments: BTreeSet<String> = BTreeSet::new();
    let mut freed_segments = 0usize;
    let mut crashes_with_kept_files = 0usize;
    let mut total_ops = 0usize;
    let mut coverage: BTreeMap<&str, u64> = BTreeMap::new();
    for iteration in 1..=iterations {
        let mut daemon = start(&run);
        let journal = dir.join(format!("journal-{iteration}"));
        let mut workers = spawn_workers(&run, &daemon, &model, iteration, &journal);
        wait_for_workload(&run, iteration, &journal);
        std::thread::sleep(Duration::from_millis(100 + rng.next() % 1100));
        daemon.kill();
        for worker in &mut workers {
            let _ = worker.kill();
            let _ = worker.wait();
        }
        let text = std::fs::read_to_string(&journal).unwrap_or_default();
        let records = parse_journal(&text);
        let end = text.lines().count() + 1;
        let ops = records.iter().filter(|r| r.done.is_some()).count();
        for record in records.iter().filter(|r| r.done.is_some()) {
            *coverage.entry(coverage_kind(record)).or_default() += 1;
        }
        total_ops += ops;
        let allowed = model.apply(&records, end);
        let (segments, kept) = segment_files(&run);
        crashes_with_kept_files += usize::from(kept > 0);
        freed_segments += seen_segments.difference(&segments).count();
        seen_segments = segments;
        match &run.store {
            Store::Local => fsck_copy(&run, iteration),
            Store::Rados(cluster) => fsck_shard(&run, cluster, iteration),
        }
        let daemon = start(&run);
        verify(&run, &daemon, &mut model, allowed, iteration);
        drop(daemon);
        let _ = std::fs::remove_file(&journal);
        eprintln!(
            "crash point {iteration}: survived ({ops} ops completed; {} volumes, {} snapshots; \
             {freed_segments} segments freed so far)",
            model.volumes.len(),
            model.snapshots.len()
        );
    }
    eprintln!(
        "crash torture: survived {iterations} crash points, {total_ops} operations, \
         {freed_segments} segments freed by reclaim or cleaning ({crashes_with_kept_files} \
         crashes with freed files kept for reuse), TORTURE_SEED={seed}"
    );
    eprintln!("completed operations by kind: {coverage:?}");
    assert!(total_ops > iterations as usize, "the workload hardly ran");
    assert!(!seen_segments.is_empty(), "no segment was ever seen");
    // Every kind of operation on both protocols, and reclaim or cleaning
    // must have freed space.
    if thorough {
        for kind in COVERAGE_KINDS {
            assert!(
                coverage.contains_key(kind),
                "no {kind} completed in the whole run"
            );
        }
        assert!(freed_segments > 0, "no segment was ever freed");
    }
}
