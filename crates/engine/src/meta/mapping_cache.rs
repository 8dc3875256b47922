//! Committed point mappings remembered for small reads: a bounded cache of
//! (volume, grain) → mapping, or "no mapping", in front of the mapping table.
//!
//! Why: a 4 KiB read found its grain's mapping by descending redb's mapping
//! tree through its page cache, about a fifth of the daemon's CPU in 4 KiB
//! random reads at queue depth 32 (`bench/iscsi_compare.py`); one hash lookup
//! replaces it.
//!
//! Why it is never staler than the read view it stands in for: unlike block
//! locations (see `locations`), a grain's mapping does change under its key,
//! so the cache holds exactly the mappings of one commit, its `generation`,
//! and is used only by reads whose shared view carries that label (see `kv`).
//! Each commit marks the cache as between generations before its transaction
//! commits; the cache takes the new generation only once every change the
//! transaction made (its [`ChangedMappings`], listed in order by the
//! transaction's tables as it writes) is in, at once or later; a reader
//! inserts what its view found only if the cache is still at its view's
//! generation, checked under the same lock. So an entry read from a view older
//! than a commit is either refused or inserted before that commit overwrites
//! its key. A transaction that changed too many keys to list, or failed,
//! clears it all.
//!
//! Why commits put their mappings in rather than only forgetting the old
//! ones: what was just written is what is most likely read next, and a volume
//! written end to end then reads without a single lookup in the table. A
//! commit of many changes applies them a slice at a time, with the cache
//! marked as between generations (every reader refused, none kept waiting for
//! long), so a commit of a full open transaction never holds readers up.
//!
//! Why a commit of many changes applies them later, once the committer has
//! let go of the writer mutex ([`MapCache::apply_deferred`]; later commits
//! add theirs behind them meanwhile): the background durable commit of 1 MiB
//! writes at 400 MiB/s carried ~80 k changes, and putting them in took
//! 20–35 ms of its ~95 ms hold of the writer mutex, every write in the array
//! waiting meanwhile (the cache is a cold hash table of ~200 k keys: a miss a
//! key). Readers meanwhile find the cache between generations and look in the
//! table, as during the commit.
//!
//! Memory is bounded: at [`MapCache::new`]'s entry count the cache starts
//! over, empty (cheaper than tracking recency on every read, and a working set
//! that fits stays cached between such restarts).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::ids::GrainIndex;
use crate::meta::schema::{GrainTarget, MapValue};

/// Most keys a transaction lists before it counts as having changed everything.
const MAX_LISTED_CHANGES: usize = 1 << 19;
/// Changes a commit applies under one hold of the lock.
const CHANGES_PER_SLICE: usize = 4096;
/// The generation of a cache between two: matches no read view.
const BETWEEN_GENERATIONS: u64 = u64::MAX;
/// Volume ids and grains the compact key holds (larger ones are not cached).
const VOLUME_BITS: u32 = 24;
const GRAIN_BITS: u32 = 64 - VOLUME_BITS;
const _: () = assert!(
    crate::MAX_VOLUME_BYTES / crate::GRAIN_BYTES <= 1 << GRAIN_BITS,
    "every grain of the largest volume has a cache key"
);
/// A cached "no point mapping".
const ABSENT_SEQ: u64 = u64::MAX;
/// The high bit of a cached seq marks a pattern target (seqs stay far below).
const PATTERN_BIT: u64 = 1 << 63;

/// The point-mapping keys a write transaction changed, for the cache.
#[derive(Debug)]
pub(crate) enum ChangedMappings {
    /// (volume, grain, the mapping it was left with), in the order written.
    Keys(Vec<(crate::ids::VolumeId, GrainIndex, Option<MapValue>)>),
    /// Too many to list: the cache forgets everything.
    Everything,
}

impl ChangedMappings {
    /// What a transaction that never writes the mapping table changed.
    pub const NONE: ChangedMappings = ChangedMappings::Keys(Vec::new());

    /// Point mapping (volume, grain) is now `value` (`None`: removed).
    pub fn add(
        &mut self,
        volume: crate::ids::VolumeId,
        grain: GrainIndex,
        value: Option<MapValue>,
    ) {
        if let ChangedMappings::Keys(keys) = self {
            if keys.len() >= MAX_LISTED_CHANGES {
                *self = ChangedMappings::Everything;
            } else {
                keys.push((volume, grain, value));
            }
        }
    }
}

/// FxHash-style mixing of the one-word key: hashbrown takes the bucket from
/// the low bits and the tag from the high ones, and the multiply spreads the
/// grain's bits into both.
#[derive(Default)]
struct KeyMix(u64);

impl Hasher for KeyMix {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, _: &[u8]) {
        unreachable!("keys are hashed as one u64")
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = (key ^ (key >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A cached mapping: its seq (the pattern bit set for a pattern target;
/// [`ABSENT_SEQ`] for none) and its block id or pattern.
type Slot = (u64, u64);

struct Inner {
    generation: u64,
    entries: HashMap<u64, Slot, BuildHasherDefault<KeyMix>>,
}

/// A committed transaction's changes not yet put in, and the generation the
/// cache reaches once they are.
struct Deferred {
    keys: Vec<(crate::ids::VolumeId, GrainIndex, Option<MapValue>)>,
    generation: u64,
}

/// A commit under way in the cache, from [`MapCache::begin_commit`] to
/// [`MapCache::committed`].
pub(crate) struct CacheCommit<'a> {
    /// Commits apply their changes one after the other, never interleaved.
    one_at_a_time: parking_lot::MutexGuard<'a, Option<Deferred>>,
    /// The generation before this commit.
    previous: u64,
}

pub(crate) struct MapCache {
    inner: Mutex<Inner>,
    /// Held by a commit through all of its part, and by whoever applies the
    /// changes a commit left (see [`MapCache::apply_deferred`]): changes are
    /// applied one commit after the other, never interleaved.
    committing: Mutex<Option<Deferred>>,
    /// `committing` holds changes (a hint read without the lock, so that the
    /// callers of [`MapCache::apply_deferred`] pay nothing when it holds none).
    has_deferred: AtomicBool,
    max_entries: usize,
}

fn key(volume: crate::ids::VolumeId, grain: GrainIndex) -> Option<u64> {
    let (volume, grain) = (volume.get(), grain.get());
    (volume < 1 << VOLUME_BITS && grain < 1 << GRAIN_BITS).then_some(volume << GRAIN_BITS | grain)
}

fn slot_of(value: Option<MapValue>) -> Slot {
    match value {
        None => (ABSENT_SEQ, 0),
        Some(MapValue { seq, target }) => {
            let seq = seq.get();
            // Below the pattern bit, and never all ones with it (absent).
            assert!(
                seq < PATTERN_BIT - 1,
                "seq {seq} fits beside the pattern bit"
            );
            match target {
                GrainTarget::Block(id) => (seq, id.get()),
                GrainTarget::Pattern(p) => (seq | PATTERN_BIT, p),
            }
        }
    }
}

fn value_of((seq, arg): Slot) -> Option<MapValue> {
    if seq == ABSENT_SEQ {
        return None;
    }
    let target = if seq & PATTERN_BIT != 0 {
        GrainTarget::Pattern(arg)
    } else {
        GrainTarget::Block(crate::ids::BlockId::new(arg))
    };
    Some(MapValue {
        seq: crate::ids::SnapshotSeq::new(seq & !PATTERN_BIT),
        target,
    })
}

impl MapCache {
    /// A cache of at most `max_entries` keys (0 turns it off).
    pub fn new(max_entries: usize) -> Self {
        MapCache {
            inner: Mutex::new(Inner {
                generation: 0,
                entries: HashMap::default(),
            }),
            committing: Mutex::new(None),
            has_deferred: AtomicBool::new(false),
            max_entries,
        }
    }

    /// The point mappings of grains [first, end) of `volume` as of commit
    /// `generation`, in grain order (grains with none left out), if every
    /// grain is cached at that generation.
    pub fn get(
        &self,
        generation: u64,
        volume: crate::ids::VolumeId,
        (first, end): (GrainIndex, GrainIndex),
    ) -> Option<Vec<(GrainIndex, MapValue)>> {
        let inner = self.inner.lock();
        if inner.generation != generation || inner.entries.is_empty() {
            return None;
        }
        let mut out = Vec::new();
        for grain in first.range_to(end) {
            let slot = *inner.entries.get(&key(volume, grain)?)?;
            if let Some(value) = value_of(slot) {
                out.push((grain, value));
            }
        }
        Some(out)
    }

    /// Remembers what a read view of commit `generation` found in grains
    /// [first, end) of `volume`: `found`, in grain order, and no mapping for
    /// every other grain. Refused if a commit came since.
    pub fn insert(
        &self,
        generation: u64,
        volume: crate::ids::VolumeId,
        (first, end): (GrainIndex, GrainIndex),
        found: &[(GrainIndex, MapValue)],
    ) {
        let mut inner = self.inner.lock();
        if inner.generation != generation {
            return;
        }
        let mut found = found.iter().peekable();
        for grain in first.range_to(end) {
            let value = match found.peek() {
                Some(&&(at, value)) if at == grain => {
                    found.next();
                    Some(value)
                }
                _ => None,
            };
            self.put(&mut inner, volume, grain, value);
        }
        assert!(found.next().is_none(), "found mappings lie in the range");
    }

    fn put(
        &self,
        inner: &mut Inner,
        volume: crate::ids::VolumeId,
        grain: GrainIndex,
        value: Option<MapValue>,
    ) {
        let Some(key) = key(volume, grain) else {
            return;
        };
        if self.max_entries == 0 {
            return;
        }
        if inner.entries.len() >= self.max_entries {
            inner.entries.clear();
        }
        inner.entries.insert(key, slot_of(value));
    }

    /// A commit's part begins before its transaction commits: from here on
    /// no reader finds or adds anything. Why before: a reader that takes its
    /// view as the transaction commits labels the view with the generation it
    /// read before, yet may see the new state; the cache still at that label
    /// would give it mappings of the old state (a block the commit freed, say)
    /// to mix with the new, and the read failed on a block "mapped but
    /// missing".
    pub fn begin_commit(&self) -> CacheCommit<'_> {
        let one_at_a_time = self.committing.lock();
        let mut inner = self.inner.lock();
        let previous = match &*one_at_a_time {
            Some(deferred) => {
                assert_eq!(inner.generation, BETWEEN_GENERATIONS);
                deferred.generation
            }
            None => inner.generation,
        };
        assert_ne!(previous, BETWEEN_GENERATIONS, "commits never interleave");
        inner.generation = BETWEEN_GENERATIONS;
        CacheCommit {
            one_at_a_time,
            previous,
        }
    }

    /// A commit's part ends once its transaction committed (`succeeded`) or
    /// failed, with the changes it made or tried, and before readers can see
    /// the next generation: applies them after those earlier commits left, if
    /// any (or, after a failure, forgets everything) and moves on to
    /// `next_generation` — or, with more changes than one slice in all,
    /// leaves them for [`MapCache::apply_deferred`] (see the module's docs),
    /// the cache between generations until then. A commit that changed no
    /// mapping (a durable commit of the writer's state) thus leaves what the
    /// one before it left, rather than putting it in under the writer mutex.
    pub fn committed(
        &self,
        mut commit: CacheCommit<'_>,
        changed: ChangedMappings,
        succeeded: bool,
        next_generation: impl FnOnce() -> u64,
    ) {
        assert_eq!(self.inner.lock().generation, BETWEEN_GENERATIONS);
        // Readers of the next generation may come before the cache is at it:
        // until then they find nothing and add nothing.
        let generation = next_generation();
        assert!(generation > commit.previous, "generations only grow");
        let earlier = commit.one_at_a_time.take().map(|deferred| deferred.keys);
        let keys = match changed {
            ChangedMappings::Keys(keys) if succeeded => match earlier {
                Some(mut earlier) => {
                    // In commit order, so that each key ends with its last change.
                    earlier.extend(keys);
                    Some(earlier)
                }
                None => Some(keys),
            },
            _ => None,
        };
        match keys {
            Some(keys) if keys.len() > MAX_LISTED_CHANGES => self.start_over(generation),
            Some(keys) if keys.len() > CHANGES_PER_SLICE => {
                *commit.one_at_a_time = Some(Deferred { keys, generation });
                self.has_deferred.store(true, Ordering::Release);
            }
            Some(keys) => self.apply(Deferred { keys, generation }),
            None => self.start_over(generation),
        }
    }

    /// Forgets every entry and moves on to `generation` (a failed commit, or
    /// one that changed too many keys to list).
    fn start_over(&self, generation: u64) {
        self.has_deferred.store(false, Ordering::Release);
        let mut inner = self.inner.lock();
        inner.entries.clear();
        inner.generation = generation;
    }

    /// Puts in the changes a commit left, if any: what a committer calls once
    /// it has let go of the writer mutex.
    pub fn apply_deferred(&self) {
        if !self.has_deferred.load(Ordering::Acquire) {
            return;
        }
        let mut one_at_a_time = self.committing.lock();
        if let Some(deferred) = one_at_a_time.take() {
            self.apply(deferred);
        }
    }

    /// Puts in a committed transaction's changes a slice at a time and moves
    /// the cache to its generation; the caller holds `committing`.
    fn apply(&self, deferred: Deferred) {
        assert_eq!(self.inner.lock().generation, BETWEEN_GENERATIONS);
        self.has_deferred.store(false, Ordering::Release);
        for slice in deferred.keys.chunks(CHANGES_PER_SLICE) {
            let mut inner = self.inner.lock();
            for &(volume, grain, value) in slice {
                self.put(&mut inner, volume, grain, value);
            }
        }
        self.inner.lock().generation = deferred.generation;
    }

    /// Keys cached.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{BlockId, SnapshotSeq, VolumeId};

    fn g(grain: u64) -> GrainIndex {
        GrainIndex::new(grain)
    }

    fn block(seq: u64, id: u64) -> MapValue {
        MapValue {
            seq: SnapshotSeq::new(seq),
            target: GrainTarget::Block(BlockId::new(id)),
        }
    }

    #[test]
    fn holds_mappings_patterns_and_absences() {
        let cache = MapCache::new(100);
        let pattern = MapValue {
            seq: SnapshotSeq::new(9),
            target: GrainTarget::Pattern(u64::MAX),
        };
        cache.insert(
            0,
            VolumeId::new(3),
            (g(10), g(14)),
            &[(g(10), block(5, 77)), (g(13), pattern)],
        );
        assert_eq!(
            cache.get(0, VolumeId::new(3), (g(10), g(14))),
            Some(vec![(g(10), block(5, 77)), (g(13), pattern)])
        );
        assert_eq!(
            cache.get(0, VolumeId::new(3), (g(11), g(13))),
            Some(vec![]),
            "known absent"
        );
        assert_eq!(
            cache.get(0, VolumeId::new(3), (g(12), g(15))),
            None,
            "grain 14 unknown"
        );
        assert_eq!(
            cache.get(0, VolumeId::new(4), (g(10), g(11))),
            None,
            "another volume"
        );
    }

    /// A read of an older generation neither finds nor adds entries; a commit
    /// leaves its keys with what it wrote last, the others as they were; a
    /// failed one forgets everything.
    #[test]
    fn a_commit_applies_its_changes_and_refuses_older_views() {
        let cache = MapCache::new(100);
        cache.insert(
            0,
            VolumeId::new(1),
            (g(0), g(4)),
            &[(g(0), block(1, 1)), (g(1), block(1, 2))],
        );
        let mut changed = ChangedMappings::NONE;
        changed.add(VolumeId::new(1), g(1), Some(block(2, 3)));
        changed.add(VolumeId::new(1), g(1), Some(block(3, 4)));
        changed.add(VolumeId::new(1), g(2), Some(block(3, 5)));
        changed.add(VolumeId::new(1), g(0), None);
        changed.add(VolumeId::new(1), g(7), Some(block(3, 6)));
        cache.committed(cache.begin_commit(), changed, true, || 1);
        assert_eq!(
            cache.get(0, VolumeId::new(1), (g(0), g(1))),
            None,
            "older view"
        );
        assert_eq!(
            cache.get(1, VolumeId::new(1), (g(0), g(4))),
            Some(vec![(g(1), block(3, 4)), (g(2), block(3, 5))]),
            "the last change of each key; grain 3 as it was"
        );
        assert_eq!(
            cache.get(1, VolumeId::new(1), (g(7), g(8))),
            Some(vec![(g(7), block(3, 6))])
        );
        cache.insert(0, VolumeId::new(1), (g(1), g(2)), &[(g(1), block(1, 2))]);
        assert_eq!(
            cache.get(1, VolumeId::new(1), (g(1), g(2))),
            Some(vec![(g(1), block(3, 4))]),
            "stale insert refused"
        );
        let mut changed = ChangedMappings::NONE;
        changed.add(VolumeId::new(1), g(9), Some(block(4, 9)));
        cache.committed(cache.begin_commit(), changed, false, || 2);
        assert_eq!(cache.len(), 0, "a failed commit forgets everything");
        cache.committed(
            cache.begin_commit(),
            ChangedMappings::Everything,
            true,
            || 3,
        );
        assert_eq!(cache.len(), 0);
    }

    /// A commit of more changes than one slice leaves them for later, and
    /// refuses every reader until all of them are in: put in by
    /// `apply_deferred`, with those of the commits that came meanwhile.
    #[test]
    fn a_large_commit_is_applied_whole_later_before_readers_come_back() {
        let cache = MapCache::new(1 << 20);
        let grains = 3 * CHANGES_PER_SLICE as u64 + 1;
        let large = |seq: u64| {
            let mut changed = ChangedMappings::NONE;
            for grain in 0..grains {
                changed.add(VolumeId::new(1), g(grain), Some(block(seq, grain + 1)));
            }
            changed
        };
        cache.insert(0, VolumeId::new(1), (g(0), g(grains)), &[]);
        cache.committed(cache.begin_commit(), large(5), true, || 1);
        assert_eq!(cache.inner.lock().generation, BETWEEN_GENERATIONS);
        assert_eq!(
            cache.get(1, VolumeId::new(1), (g(0), g(1))),
            None,
            "not yet applied"
        );
        cache.insert(1, VolumeId::new(1), (g(0), g(1)), &[]);
        assert_eq!(
            cache.get(1, VolumeId::new(1), (g(0), g(1))),
            None,
            "nor added to"
        );
        cache.apply_deferred();
        let all = cache
            .get(1, VolumeId::new(1), (g(0), g(grains)))
            .expect("all cached");
        assert_eq!(all.len() as u64, grains);
        assert!(all.iter().all(|&(grain, v)| v == block(5, grain.get() + 1)));
        cache.apply_deferred();
        assert_eq!(
            cache.get(1, VolumeId::new(1), (g(0), g(1))),
            Some(vec![(g(0), block(5, 1))])
        );

        // Left unapplied, they wait through later commits, which add theirs
        // behind them; then each key has its last change.
        cache.committed(cache.begin_commit(), large(6), true, || 2);
        cache.committed(cache.begin_commit(), ChangedMappings::NONE, true, || 3);
        let mut small = ChangedMappings::NONE;
        small.add(VolumeId::new(1), g(0), Some(block(7, 70)));
        cache.committed(cache.begin_commit(), small, true, || 4);
        assert_eq!(
            cache.get(4, VolumeId::new(1), (g(0), g(1))),
            None,
            "not yet applied"
        );
        cache.apply_deferred();
        assert_eq!(
            cache.get(3, VolumeId::new(1), (g(0), g(1))),
            None,
            "an older view"
        );
        assert_eq!(
            cache.get(4, VolumeId::new(1), (g(0), g(1))),
            Some(vec![(g(0), block(7, 70))])
        );
        assert_eq!(
            cache.get(4, VolumeId::new(1), (g(1), g(2))),
            Some(vec![(g(1), block(6, 2))])
        );
        assert_eq!(
            cache
                .get(4, VolumeId::new(1), (g(0), g(grains)))
                .map(|all| all.len() as u64),
            Some(grains)
        );

        // A failed commit forgets them with everything else.
        cache.committed(cache.begin_commit(), large(8), true, || 5);
        cache.committed(cache.begin_commit(), ChangedMappings::NONE, false, || 6);
        cache.apply_deferred();
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.get(6, VolumeId::new(1), (g(0), g(1))), None);
        cache.insert(6, VolumeId::new(1), (g(0), g(1)), &[]);
        assert_eq!(
            cache.get(6, VolumeId::new(1), (g(0), g(1))),
            Some(vec![]),
            "at the new generation"
        );
    }

    #[test]
    fn starts_over_when_full_and_skips_keys_it_cannot_hold() {
        let cache = MapCache::new(8);
        cache.insert(0, VolumeId::new(1), (g(0), g(8)), &[]);
        assert_eq!(cache.len(), 8);
        cache.insert(0, VolumeId::new(1), (g(8), g(10)), &[]);
        assert_eq!(cache.len(), 2, "started over");
        cache.insert(0, VolumeId::new(1 << VOLUME_BITS), (g(0), g(1)), &[]);
        assert_eq!(
            cache.get(0, VolumeId::new(1 << VOLUME_BITS), (g(0), g(1))),
            None
        );
        let off = MapCache::new(0);
        off.insert(0, VolumeId::new(1), (g(0), g(1)), &[]);
        assert_eq!(off.len(), 0);
    }

    const GRAINS: u64 = 32;
    const GRAIN: usize = crate::GRAIN_BYTES as usize;

    fn kv_ops(engine: &crate::Engine) -> u64 {
        engine
            .stats
            .read_kv_ops
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads `volume` a grain at a time; returns its bytes and the metadata
    /// lookups it took.
    fn read_grains(engine: &crate::Engine, volume: &crate::Volume) -> (Vec<u8>, u64) {
        let before = kv_ops(engine);
        let mut out = vec![0u8; GRAINS as usize * GRAIN];
        for (grain, chunk) in out.chunks_mut(GRAIN).enumerate() {
            volume.read(grain as u64 * GRAIN as u64, chunk).unwrap();
        }
        (out, kv_ops(engine) - before)
    }

    /// Small reads find committed mappings in the cache — the ones a commit
    /// wrote from the start, the others once read — and every kind of change
    /// (an overwrite, an UNMAP and its reclaim, a write of zeros) reads back
    /// at once.
    #[test]
    fn reads_hit_the_cache_and_see_every_change() {
        let dir = crate::testing::test_data::data_dir("mapcache");
        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        engine.create_volume("v", GRAINS * GRAIN as u64).unwrap();
        let volume = engine.open_volume("v").unwrap();
        let mut expected = crate::testing::test_data::unique_bytes(GRAINS as usize * GRAIN, 1);
        volume.write(0, &expected).unwrap();
        volume.flush().unwrap();
        assert_eq!(
            read_grains(&engine, &volume),
            (expected.clone(), 0),
            "the commit left its mappings, the write its locations"
        );
        drop(volume);
        engine.close().unwrap();
        drop(engine);

        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        let volume = engine.open_volume("v").unwrap();
        let (first, first_ops) = read_grains(&engine, &volume);
        assert_eq!(first, expected);
        assert!(first_ops >= GRAINS, "one mapping lookup a grain at least");
        assert_eq!(
            read_grains(&engine, &volume),
            (expected.clone(), 0),
            "every mapping and location cached"
        );

        // An overwrite, committed.
        let new = crate::testing::test_data::unique_bytes(GRAIN, 2);
        volume.write(5 * GRAIN as u64, &new).unwrap();
        volume.flush().unwrap();
        expected[5 * GRAIN..6 * GRAIN].copy_from_slice(&new);
        assert_eq!(read_grains(&engine, &volume), (expected.clone(), 0));

        // UNMAP, then the reclaim that removes the mappings beneath it.
        volume.unmap(8 * GRAIN as u64, 8 * GRAIN as u64).unwrap();
        expected[8 * GRAIN..16 * GRAIN].fill(0);
        assert_eq!(read_grains(&engine, &volume).0, expected);
        while engine.background_step().unwrap() {}
        volume.flush().unwrap();
        assert_eq!(read_grains(&engine, &volume).0, expected);
        // Written again where the reclaim removed mappings, uncommitted and
        // then committed.
        let again = crate::testing::test_data::unique_bytes(2 * GRAIN, 3);
        volume.write(9 * GRAIN as u64, &again).unwrap();
        expected[9 * GRAIN..11 * GRAIN].copy_from_slice(&again);
        assert_eq!(read_grains(&engine, &volume).0, expected);
        volume.flush().unwrap();
        assert_eq!(read_grains(&engine, &volume).0, expected);
        // Zeros written as data: a pattern mapping replaces a block.
        volume.write(20 * GRAIN as u64, &vec![0u8; GRAIN]).unwrap();
        volume.flush().unwrap();
        expected[20 * GRAIN..21 * GRAIN].fill(0);
        assert_eq!(read_grains(&engine, &volume).0, expected);
        engine.close().unwrap();
    }

    /// A flush whose commit carries more changes than one slice leaves the
    /// cache with all of them once it returns, put in after the writer mutex.
    #[test]
    fn a_large_write_reads_from_the_cache_after_its_flush() {
        let grains = CHANGES_PER_SLICE as u64 + 100;
        let dir = crate::testing::test_data::data_dir("mapcache-large");
        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        engine.create_volume("v", grains * GRAIN as u64).unwrap();
        let volume = engine.open_volume("v").unwrap();
        let expected = crate::testing::test_data::unique_bytes(grains as usize * GRAIN, 4);
        volume.write(0, &expected).unwrap();
        volume.flush().unwrap();
        assert!(!engine.db.maps_cache().has_deferred.load(Ordering::Acquire));
        let before = kv_ops(&engine);
        let mut out = vec![0u8; GRAIN];
        for grain in (0..grains).step_by(97) {
            volume.read(grain * GRAIN as u64, &mut out).unwrap();
            let at = grain as usize * GRAIN;
            assert_eq!(out, expected[at..at + GRAIN]);
        }
        assert_eq!(kv_ops(&engine) - before, 0, "every mapping cached");
        engine.close().unwrap();
    }

    #[test]
    fn too_many_changes_count_as_everything() {
        let mut changed = ChangedMappings::NONE;
        for grain in 0..=MAX_LISTED_CHANGES as u64 {
            changed.add(VolumeId::new(1), g(grain), None);
        }
        assert!(matches!(changed, ChangedMappings::Everything));
    }
}
