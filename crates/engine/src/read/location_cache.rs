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

use parking_lot::Mutex;

use crate::ids::BlockId;
use crate::ids::SegmentId;
use crate::meta::schema::BlockRec;

/// Shards, so concurrent readers seldom take the same lock (consecutive ids
/// fall in different shards).
const SHARDS: usize = 64;
/// Words a slot: the block id (0: empty; ids start at 1), then its location
/// packed in two.
const SLOT_WORDS: usize = 3;
// A slot packs a record's payload length in 16 bits, its offset in 32.
const _: () = assert!(
    crate::GRAIN_BYTES <= u16::MAX as u64,
    "a payload length fits 16 bits"
);

/// Direct-mapped: block `id` can only be in slot `id / SHARDS % slots` of
/// shard `id % SHARDS`, and a newer block there replaces it. Ids are handed
/// out in sequence, so the most recent `max_entries` blocks never collide, a
/// lookup is one memory access with no hashing, and neighbouring blocks (a
/// sequential read) share cache lines. Slots are zeroed memory, so the pages
/// of a table nobody has filled yet cost nothing.
pub(crate) struct BlockLocations {
    shards: Vec<Mutex<Vec<u64>>>,
    slots_per_shard: u64,
}

impl BlockLocations {
    /// A cache of at most `max_entries` locations (rounded up to whole shards;
    /// 0 turns it off).
    pub(crate) fn new(max_entries: usize) -> Self {
        let slots_per_shard = max_entries.div_ceil(SHARDS);
        BlockLocations {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(vec![0u64; slots_per_shard * SLOT_WORDS]))
                .collect(),
            slots_per_shard: slots_per_shard as u64,
        }
    }

    /// The shard and the first word of block `id`'s slot.
    fn slot(&self, id: u64) -> Option<(&Mutex<Vec<u64>>, usize)> {
        if self.slots_per_shard == 0 {
            return None;
        }
        let shard = &self.shards[(id % SHARDS as u64) as usize];
        let slot = (id / SHARDS as u64) % self.slots_per_shard;
        Some((shard, slot as usize * SLOT_WORDS))
    }

    /// Where block `id` was stored when last looked up, as a block row fit for
    /// reading (its reference counts and fingerprint are not kept: zero).
    pub(crate) fn get(&self, id: BlockId) -> Option<BlockRec> {
        let id = id.get();
        let (shard, at) = self.slot(id)?;
        let words: [u64; SLOT_WORDS] = shard.lock()[at..at + SLOT_WORDS]
            .try_into()
            .expect("a slot is SLOT_WORDS words");
        if words[0] != id || id == 0 {
            return None;
        }
        Some(BlockRec {
            segment: SegmentId::new(words[1] as u32),
            offset_bytes: (words[1] >> 32) as u32,
            payload_len: u32::from(words[2] as u16),
            flags: (words[2] >> 16) as u16,
            crc: (words[2] >> 32) as u32,
            refcount: 0,
            fingerprint: [0; 16],
            history_refs: 0,
        })
    }

    /// Remembers a committed block's location (replacing whichever block had
    /// its slot).
    pub(crate) fn insert(&self, id: BlockId, rec: &BlockRec) {
        let id = id.get();
        assert!(id != 0, "block ids start at 1");
        let Some((shard, at)) = self.slot(id) else {
            return;
        };
        // A record's payload is at most one grain: it packs in 16 bits.
        let Ok(payload_len) = u16::try_from(rec.payload_len) else {
            return;
        };
        let words = [
            id,
            u64::from(rec.segment.get()) | u64::from(rec.offset_bytes) << 32,
            u64::from(payload_len) | u64::from(rec.flags) << 16 | u64::from(rec.crc) << 32,
        ];
        shard.lock()[at..at + SLOT_WORDS].copy_from_slice(&words);
    }

    /// Forgets block `id` (moved, freed, or found stale).
    pub(crate) fn forget(&self, id: BlockId) {
        let id = id.get();
        if let Some((shard, at)) = self.slot(id) {
            let mut slots = shard.lock();
            if slots[at] == id {
                slots[at] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(segment: u32, offset_bytes: u32) -> BlockRec {
        BlockRec {
            segment: SegmentId::new(segment),
            offset_bytes,
            payload_len: 4096,
            flags: 0x8001,
            crc: 0xdead_beef,
            refcount: 3,
            fingerprint: [9; 16],
            history_refs: 1,
        }
    }

    #[test]
    fn a_location_reads_back_until_forgotten() {
        let cache = BlockLocations::new(1024);
        assert!(cache.get(BlockId::new(5)).is_none());
        cache.insert(BlockId::new(5), &rec(u32::MAX, u32::MAX - 1));
        let got = cache.get(BlockId::new(5)).expect("cached");
        assert_eq!(
            (got.segment, got.offset_bytes),
            (SegmentId::new(u32::MAX), u32::MAX - 1)
        );
        assert_eq!(
            (got.payload_len, got.flags, got.crc),
            (4096, 0x8001, 0xdead_beef)
        );
        assert_eq!(got.record_bytes(), rec(0, 0).record_bytes());
        cache.insert(BlockId::new(5), &rec(3, 0));
        assert_eq!(
            cache.get(BlockId::new(5)).expect("cached").segment,
            SegmentId::new(3)
        );
        cache.forget(BlockId::new(5));
        assert!(cache.get(BlockId::new(5)).is_none());
    }

    #[test]
    fn the_most_recent_ids_are_kept_and_a_newer_one_takes_an_older_ones_slot() {
        let limit = SHARDS as u64 * 16;
        let cache = BlockLocations::new(limit as usize);
        for id in 1..=10 * limit {
            cache.insert(BlockId::new(id), &rec(1, id as u32));
        }
        for id in 1..=10 * limit {
            let kept = cache.get(BlockId::new(id)).map(|r| r.offset_bytes);
            let recent = id > 9 * limit;
            assert_eq!(kept, recent.then_some(id as u32), "id {id}");
        }
        // Forgetting an id whose slot a newer one took leaves the newer one.
        cache.forget(BlockId::new(1));
        assert!(cache.get(BlockId::new(1 + 9 * limit)).is_some());
    }

    #[test]
    fn a_zero_limit_turns_the_cache_off() {
        let cache = BlockLocations::new(0);
        cache.insert(BlockId::new(1), &rec(1, 0));
        assert!(cache.get(BlockId::new(1)).is_none());
        cache.forget(BlockId::new(1));
    }
}

#[cfg(test)]
mod engine_tests {
    use crate::ids::BlockId;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use crate::{Engine, Volume, GRAIN_BYTES};

    const GRAINS: u64 = 64;

    fn data(seed: u64) -> Vec<u8> {
        crate::testing::test_data::unique_bytes((GRAINS * GRAIN_BYTES) as usize, seed)
    }

    /// An engine (no background thread) whose volume holds `data(seed)`,
    /// committed and read once.
    fn written(seed: u64) -> (tempfile::TempDir, Arc<Engine>, Volume, Vec<u8>) {
        let dir = crate::testing::test_data::data_dir("loc");
        // Reads of blocks read before would not look them up at all.
        let engine = crate::testing::test_data::quiet_engine_reading_segments(dir.path(), 1 << 30);
        engine.create_volume("v", 2 * GRAINS * GRAIN_BYTES).unwrap();
        let volume = engine.open_volume("v").unwrap();
        let written = data(seed);
        volume.write(0, &written).unwrap();
        volume.flush().unwrap();
        assert_eq!(read_all(&volume), written);
        (dir, engine, volume, written)
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

    /// A write leaves its blocks' locations in the cache: reading them back
    /// looks up no block in the block table (with the cache emptied, the same
    /// read looks up every one).
    #[test]
    fn written_blocks_are_read_without_block_table_lookups() {
        let (_dir, engine, volume, written) = written(4);
        let kv_ops = || engine.stats.read_kv_ops.load(Ordering::Relaxed);
        let before = kv_ops();
        assert_eq!(read_all(&volume), written);
        let cached_ops = kv_ops() - before;
        let rows = crate::testing::test_data::block_rows(&engine);
        for (id, _) in &rows {
            engine.caches.locations.forget(BlockId::new(*id));
        }
        let before = kv_ops();
        assert_eq!(read_all(&volume), written);
        let uncached_ops = kv_ops() - before;
        assert_eq!(uncached_ops - cached_ops, GRAINS, "one lookup a block");
        // An overwrite, never read before: reading it back looks up nothing.
        let second = data(5);
        volume.write(0, &second).unwrap();
        volume.flush().unwrap();
        let before = kv_ops();
        assert_eq!(read_all(&volume), second);
        assert_eq!(kv_ops() - before, cached_ops, "no block looked up");
        engine.close().unwrap();
    }

    /// A cached location that no longer holds the block (here: every entry
    /// pointing somewhere wrong, past the end of its segment or into another
    /// record) reads the right bytes, counts no error, and is replaced by the
    /// block table's.
    #[test]
    fn a_stale_location_reads_the_block_from_the_table() {
        let (_dir, engine, volume, written) = written(1);
        let rows = crate::testing::test_data::block_rows(&engine);
        assert_eq!(rows.len() as u64, GRAINS);
        for (id, rec) in &rows {
            let cached = engine
                .caches
                .locations
                .get(BlockId::new(*id))
                .expect("cached by the write or the read");
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
            engine.caches.locations.insert(BlockId::new(*id), &wrong);
        }
        assert_eq!(read_all(&volume), written);
        assert_eq!(errors(&engine), before, "a stale entry is not an error");
        for (id, rec) in &rows {
            let cached = engine
                .caches
                .locations
                .get(BlockId::new(*id))
                .expect("looked up again");
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
        let old_rows = crate::testing::test_data::block_rows(&engine);
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
        let moved: Vec<_> = crate::testing::test_data::block_rows(&engine)
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
                engine.caches.locations.get(BlockId::new(*id)).is_none(),
                "the cleaner forgets what it moves"
            );
        }
        let before = errors(&engine);
        assert_eq!(read_all(&volume), expected);
        // An old location put back: its segment is gone.
        for (id, _) in &moved {
            let (_, was) = old_rows.iter().find(|(old, _)| old == id).unwrap();
            engine.caches.locations.insert(BlockId::new(*id), was);
        }
        assert_eq!(read_all(&volume), expected);
        assert_eq!(errors(&engine), before);
        engine.check_consistency().unwrap();
        engine.close().unwrap();
    }
}
