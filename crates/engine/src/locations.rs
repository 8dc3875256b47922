//! Where committed blocks are stored, remembered for reads: a bounded cache of
//! block id → record location in front of the block table.
//!
//! Why: a read of a block looked its row up in the block table, a descent of
//! redb's tree through its page cache, which was about a fifth of the CPU of
//! 1 MiB reads and of deep-queue 4 KiB reads (`bench/iscsi_compare.py`).
//!
//! Why the cache may be stale without harm: a block's content never changes
//! under its id, ids are never reused, and every record read is verified
//! against the id, length and checksum it was looked up with. An entry the
//! cleaner made stale (it moved the block) still names the old record until its
//! segment is freed, and after that the read fails verification. Either way no
//! wrong byte is returned: the reader drops the entry, looks the block up in the
//! table and reads again. Only rows of committed blocks, as a read transaction
//! sees them, are cached; the engine also forgets a block wherever it moves or
//! frees it, so stale entries are rare, not relied on.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::meta::BlockRec;
use crate::segment::SegmentId;

/// Shards, so concurrent readers seldom take the same lock.
const SHARDS: usize = 64;
/// When a shard is full, one entry in this many is evicted at once (a pass
/// over the shard each `1/EVICT_ONE_IN` of its size in inserts: amortised
/// O(1) a lookup).
const EVICT_ONE_IN: u64 = 8;

/// What a read needs to find and verify a block's record (24 bytes an entry
/// with its key, against 42 for a whole block row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Location {
    segment: SegmentId,
    offset_bytes: u32,
    payload_len: u32,
    crc: u32,
    flags: u16,
}

struct Shard {
    entries: HashMap<u64, Location>,
    /// Varies which entries an eviction pass takes.
    evictions: u64,
}

pub(crate) struct BlockLocations {
    shards: Vec<Mutex<Shard>>,
    shard_limit: usize,
}

impl BlockLocations {
    /// A cache of at most `max_entries` locations (rounded up to whole shards;
    /// 0 turns it off).
    pub(crate) fn new(max_entries: usize) -> Self {
        BlockLocations {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        entries: HashMap::new(),
                        evictions: 0,
                    })
                })
                .collect(),
            shard_limit: max_entries.div_ceil(SHARDS),
        }
    }

    fn shard(&self, id: u64) -> &Mutex<Shard> {
        // Ids are sequential: the low bits spread them evenly.
        &self.shards[(id % SHARDS as u64) as usize]
    }

    /// Where block `id` was stored when last looked up, as a block row fit for
    /// reading (its reference counts and fingerprint are not kept: zero).
    pub(crate) fn get(&self, id: u64) -> Option<BlockRec> {
        let location = *self.shard(id).lock().entries.get(&id)?;
        Some(BlockRec {
            segment: location.segment,
            offset_bytes: location.offset_bytes,
            payload_len: location.payload_len,
            flags: location.flags,
            crc: location.crc,
            refcount: 0,
            fingerprint: [0; 16],
            history_refs: 0,
        })
    }

    /// Remembers a committed block's location.
    pub(crate) fn insert(&self, id: u64, rec: &BlockRec) {
        if self.shard_limit == 0 {
            return;
        }
        let mut shard = self.shard(id).lock();
        if shard.entries.len() >= self.shard_limit && !shard.entries.contains_key(&id) {
            shard.evictions += 1;
            let salt = shard.evictions;
            shard.entries.retain(|&key, _| {
                !(key / SHARDS as u64)
                    .wrapping_add(salt)
                    .is_multiple_of(EVICT_ONE_IN)
            });
            if shard.entries.len() >= self.shard_limit {
                // Every key fell in the kept classes: make room regardless.
                shard.entries.clear();
            }
        }
        shard.entries.insert(
            id,
            Location {
                segment: rec.segment,
                offset_bytes: rec.offset_bytes,
                payload_len: rec.payload_len,
                crc: rec.crc,
                flags: rec.flags,
            },
        );
        assert!(shard.entries.len() <= self.shard_limit);
    }

    /// Forgets block `id` (moved, freed, or found stale).
    pub(crate) fn forget(&self, id: u64) {
        self.shard(id).lock().entries.remove(&id);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().entries.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(segment: SegmentId, offset_bytes: u32) -> BlockRec {
        BlockRec {
            segment,
            offset_bytes,
            payload_len: 100,
            flags: 1,
            crc: 7,
            refcount: 3,
            fingerprint: [9; 16],
            history_refs: 1,
        }
    }

    #[test]
    fn a_location_reads_back_until_forgotten() {
        let cache = BlockLocations::new(1024);
        assert!(cache.get(5).is_none());
        cache.insert(5, &rec(2, 4096));
        let got = cache.get(5).expect("cached");
        assert_eq!((got.segment, got.offset_bytes), (2, 4096));
        assert_eq!((got.payload_len, got.flags, got.crc), (100, 1, 7));
        assert_eq!(got.record_bytes(), rec(2, 4096).record_bytes());
        cache.insert(5, &rec(3, 0));
        assert_eq!(cache.get(5).expect("cached").segment, 3);
        cache.forget(5);
        assert!(cache.get(5).is_none());
    }

    #[test]
    fn the_cache_never_outgrows_its_limit() {
        let limit = 64 * 16;
        let cache = BlockLocations::new(limit);
        for id in 0..100_000u64 {
            cache.insert(id, &rec(1, id as u32));
            assert!(cache.len() <= limit);
        }
        // Eviction takes a part, not all: the cache stays mostly full.
        assert!(cache.len() > limit / 2, "{} of {limit}", cache.len());
        // The newest entry is always there.
        assert_eq!(cache.get(99_999).expect("newest").offset_bytes, 99_999);
    }

    #[test]
    fn a_zero_limit_turns_the_cache_off() {
        let cache = BlockLocations::new(0);
        cache.insert(1, &rec(1, 0));
        assert!(cache.get(1).is_none());
    }
}

#[cfg(test)]
mod engine_tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use redb::ReadableTable;

    use crate::meta::{self, BlockRec};
    use crate::{Engine, EngineConfig, Volume, GRAIN_BYTES};

    const GRAINS: u64 = 64;

    fn data(seed: u64) -> Vec<u8> {
        crate::testdata::unique_bytes((GRAINS * GRAIN_BYTES) as usize, seed)
    }

    /// An engine (no background thread) whose volume holds `data(seed)`,
    /// committed and read once (so its block locations are cached).
    fn written(seed: u64) -> (tempfile::TempDir, Arc<Engine>, Volume, Vec<u8>) {
        let dir = tempfile::Builder::new()
            .prefix("lacuna-loc-")
            .tempdir()
            .unwrap();
        let mut config = EngineConfig::new(dir.path(), 1 << 30);
        config.background = false;
        let engine = Engine::open(config).unwrap();
        engine.create_volume("v", 2 * GRAINS * GRAIN_BYTES).unwrap();
        let volume = engine.open_volume("v").unwrap();
        let written = data(seed);
        volume.write(0, &written).unwrap();
        volume.flush().unwrap();
        assert_eq!(read_all(&volume), written);
        (dir, engine, volume, written)
    }

    fn block_rows(engine: &Engine) -> Vec<(u64, BlockRec)> {
        let txn = engine.begin_read().unwrap();
        let blocks = txn.open_table(meta::BLOCKS).unwrap();
        blocks
            .iter()
            .unwrap()
            .map(|item| {
                let (id, value) = item.unwrap();
                (id.value(), BlockRec::decode(value.value()).unwrap())
            })
            .collect()
    }

    fn errors(engine: &Engine) -> (u64, u64) {
        (
            engine.stats.checksum_errors.load(Ordering::Relaxed),
            engine.stats.read_errors.load(Ordering::Relaxed),
        )
    }

    fn read_all(volume: &Volume) -> Vec<u8> {
        let mut back = vec![0u8; (GRAINS * GRAIN_BYTES) as usize];
        volume.read(0, &mut back).unwrap();
        back
    }

    /// A cached location that no longer holds the block (here: every entry
    /// pointing somewhere wrong, past the end of its segment or into another
    /// record) reads the right bytes, counts no error, and is replaced by the
    /// block table's.
    #[test]
    fn a_stale_location_reads_the_block_from_the_table() {
        let (_dir, engine, volume, written) = written(1);
        let rows = block_rows(&engine);
        assert_eq!(rows.len() as u64, GRAINS);
        for (id, rec) in &rows {
            let cached = engine
                .locations
                .get(*id)
                .expect("a read caches what it looked up");
            assert_eq!(
                (cached.segment, cached.offset_bytes),
                (rec.segment, rec.offset_bytes)
            );
        }
        let before = errors(&engine);
        for (i, (id, rec)) in rows.iter().enumerate() {
            let mut wrong = *rec;
            if i % 2 == 0 {
                wrong.offset_bytes += 1 << 30; // past the end of the segment
            } else {
                // Another block's record: a different id in its header.
                let other = &rows[(i + 1) % rows.len()].1;
                wrong.offset_bytes = other.offset_bytes;
            }
            engine.locations.insert(*id, &wrong);
        }
        assert_eq!(read_all(&volume), written);
        assert_eq!(errors(&engine), before, "a stale entry is not an error");
        for (id, rec) in &rows {
            let cached = engine.locations.get(*id).expect("looked up again");
            assert_eq!(cached.offset_bytes, rec.offset_bytes);
        }
        engine.close().unwrap();
    }

    /// Cleaning moves blocks and frees their old segment: reads find the new
    /// records, also when a reader put an old location back in the cache
    /// after the move (a read transaction older than the cleaning).
    #[test]
    fn reads_follow_blocks_the_cleaner_moved() {
        let (_dir, engine, volume, first) = written(2);
        let old_rows = block_rows(&engine);
        // Overwrite every other grain: their old records go stale, and the
        // segment is worth cleaning.
        let mut expected = first.clone();
        let second = data(3);
        for grain in (0..GRAINS).step_by(2) {
            let at = (grain * GRAIN_BYTES) as usize;
            let grain_bytes = &second[at..at + GRAIN_BYTES as usize];
            volume.write(at as u64, grain_bytes).unwrap();
            expected[at..at + GRAIN_BYTES as usize].copy_from_slice(grain_bytes);
        }
        volume.flush().unwrap();
        assert!(engine.clean_now().unwrap() > 0);
        let moved: Vec<_> = block_rows(&engine)
            .into_iter()
            .filter(|(id, rec)| {
                old_rows
                    .iter()
                    .any(|(old, was)| old == id && was.segment != rec.segment)
            })
            .collect();
        assert_eq!(moved.len() as u64, GRAINS / 2, "the surviving blocks moved");
        for (id, _) in &moved {
            assert!(
                engine.locations.get(*id).is_none(),
                "the cleaner forgets what it moves"
            );
        }
        let before = errors(&engine);
        assert_eq!(read_all(&volume), expected);
        // An old location put back: its segment is gone.
        for (id, _) in &moved {
            let (_, was) = old_rows.iter().find(|(old, _)| old == id).unwrap();
            engine.locations.insert(*id, was);
        }
        assert_eq!(read_all(&volume), expected);
        assert_eq!(errors(&engine), before);
        engine.check_consistency().unwrap();
        engine.close().unwrap();
    }
}
