//! Grains of blocks that reads keep coming back to, kept decoded in memory.
//!
//! Why: a grain that dedup shares (a block many mappings name) is stored once,
//! wherever it was first written, so a sequential read of data with
//! duplicates finds most records side by side in one span and each duplicate
//! somewhere else, read with a call of its own. With a third of the grains
//! duplicates, 1 MiB reads made 35 segment reads a MiB (`perf stat`; one span
//! for the unique records, the rest for the shared ones), and decoded the same
//! few blocks over and over.
//!
//! Why it is always right (the argument of the location cache, `locations`):
//! a block's content never changes under its id and ids are never reused, so a
//! grain kept here is the block's content for as long as anything can name the
//! block; once nothing does, nothing looks it up. A grain is kept only after
//! its record verified (id, length, checksum) and decoded, so what comes from
//! here was read from the media and checked, like what comes from the kernel's
//! page cache.
//!
//! Which grains: those read again soon. A block read from a segment is first
//! only noted (its id in a direct-mapped table of recent reads); read again
//! while still noted, its grain is kept. A sequential pass over a large volume
//! reads each block once and keeps nothing; the blocks dedup shares are read
//! again within the next megabyte. Kept grains are evicted by the clock
//! algorithm (a grain read since the hand last passed gets another turn), so
//! the grains reads keep using stay while one-off repeats pass through.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::ids::BlockId;
use crate::GRAIN_BYTES;

/// Shards, so concurrent readers seldom take the same lock.
const SHARDS: usize = 16;
/// Slots of the table of recently read block ids (8 bytes each).
const NOTED_SLOTS: usize = 1 << 16;

type Grain = Box<[u8; GRAIN_BYTES as usize]>;

struct Slot {
    id: u64,
    /// Read since the clock's hand last passed.
    referenced: bool,
    grain: Grain,
}

/// One shard's kept grains and the clock hand over them.
#[derive(Default)]
struct Shard {
    /// Block id → its slot.
    index: std::collections::HashMap<u64, usize>,
    slots: Vec<Slot>,
    hand: usize,
}

pub(crate) struct HotGrains {
    shards: Vec<Mutex<Shard>>,
    slots_per_shard: usize,
    /// Block ids read from segments lately, each at a slot its hash picks
    /// (0: empty; block ids start at 1). Lock-free: a lost update only delays
    /// keeping a grain.
    noted: Vec<AtomicU64>,
}

impl HotGrains {
    /// Keeps at most `max_grains` grains (rounded up to whole shards; 0 turns
    /// the cache off).
    pub(crate) fn new(max_grains: usize) -> Self {
        let slots_per_shard = max_grains.div_ceil(SHARDS);
        HotGrains {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            slots_per_shard,
            noted: if slots_per_shard == 0 {
                Vec::new()
            } else {
                (0..NOTED_SLOTS).map(|_| AtomicU64::new(0)).collect()
            },
        }
    }

    fn shard(&self, id: u64) -> &Mutex<Shard> {
        &self.shards[(id % SHARDS as u64) as usize]
    }

    /// Copies bytes [`in_grain`, `in_grain + out.len()`) of block `id`'s grain
    /// into `out` if it is kept; returns whether it was.
    pub(crate) fn copy_out(&self, id: BlockId, in_grain: usize, out: &mut [u8]) -> bool {
        let id = id.get();
        assert!(in_grain + out.len() <= GRAIN_BYTES as usize);
        if self.slots_per_shard == 0 {
            return false;
        }
        let mut shard = self.shard(id).lock();
        let Some(&at) = shard.index.get(&id) else {
            return false;
        };
        let slot = &mut shard.slots[at];
        assert_eq!(slot.id, id);
        slot.referenced = true;
        out.copy_from_slice(&slot.grain[in_grain..in_grain + out.len()]);
        true
    }

    /// Block `id`'s whole grain, just read from its segment and verified:
    /// noted, or kept if it was noted already.
    pub(crate) fn offer(&self, id: BlockId, grain: &[u8]) {
        let id = id.get();
        assert!(id != 0, "block ids start at 1");
        assert_eq!(grain.len() as u64, GRAIN_BYTES);
        if self.slots_per_shard == 0 {
            return;
        }
        let noted = &self.noted[noted_slot(id)];
        if noted.load(Ordering::Relaxed) != id {
            noted.store(id, Ordering::Relaxed);
            return;
        }
        self.keep(id, grain);
    }

    fn keep(&self, id: u64, grain: &[u8]) {
        let mut shard = self.shard(id).lock();
        let shard = &mut *shard;
        if shard.index.contains_key(&id) {
            return;
        }
        if shard.slots.len() < self.slots_per_shard {
            shard.index.insert(id, shard.slots.len());
            shard.slots.push(Slot {
                id,
                referenced: false,
                grain: Box::new(grain.try_into().expect("a whole grain")),
            });
            return;
        }
        // Each pass of the hand clears what it passes: a victim turns up
        // within two turns of the clock.
        for _ in 0..2 * shard.slots.len() {
            let at = shard.hand;
            shard.hand = (at + 1) % shard.slots.len();
            let slot = &mut shard.slots[at];
            if slot.referenced {
                slot.referenced = false;
                continue;
            }
            let evicted = std::mem::replace(&mut slot.id, id);
            slot.grain.copy_from_slice(grain);
            shard.index.remove(&evicted);
            shard.index.insert(id, at);
            return;
        }
        unreachable!("the clock finds a victim within two turns");
    }

    /// Grains kept now (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().slots.len())
            .sum()
    }
}

/// Where block `id` is noted: ids spread by a multiplicative hash (ids come
/// in sequence; neighbours land far apart).
fn noted_slot(id: u64) -> usize {
    (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - NOTED_SLOTS.trailing_zeros())) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BlockId;

    fn grain(seed: u8) -> Vec<u8> {
        (0..GRAIN_BYTES as usize)
            .map(|i| (i as u8).wrapping_mul(seed))
            .collect()
    }

    fn kept(cache: &HotGrains, id: u64) -> Option<Vec<u8>> {
        let mut out = vec![0u8; GRAIN_BYTES as usize];
        cache.copy_out(BlockId::new(id), 0, &mut out).then_some(out)
    }

    #[test]
    fn a_grain_is_kept_when_read_a_second_time_and_copies_out_any_part() {
        let cache = HotGrains::new(64);
        cache.offer(BlockId::new(7), &grain(3));
        assert_eq!(kept(&cache, 7), None, "read once: only noted");
        cache.offer(BlockId::new(7), &grain(3));
        assert_eq!(kept(&cache, 7), Some(grain(3)));
        let mut part = vec![0u8; 100];
        assert!(cache.copy_out(BlockId::new(7), 3990, &mut part));
        assert_eq!(part, grain(3)[3990..4090]);
        assert_eq!(kept(&cache, 8), None);
    }

    #[test]
    fn the_clock_evicts_unread_grains_first_and_never_grows_past_its_size() {
        // One shard's worth: ids that are multiples of SHARDS share shard 0,
        // which holds 2 grains.
        let cache = HotGrains::new(2 * SHARDS);
        let id = |n: u64| n * SHARDS as u64;
        for n in 1..=2 {
            cache.offer(BlockId::new(id(n)), &grain(n as u8));
            cache.offer(BlockId::new(id(n)), &grain(n as u8));
        }
        assert!(kept(&cache, id(1)).is_some());
        // Block 1 was just read (referenced), block 2 was not: 3 replaces 2.
        cache.offer(BlockId::new(id(3)), &grain(3));
        cache.offer(BlockId::new(id(3)), &grain(3));
        assert_eq!(kept(&cache, id(2)), None);
        assert_eq!(kept(&cache, id(1)), Some(grain(1)));
        assert_eq!(kept(&cache, id(3)), Some(grain(3)));
        assert_eq!(cache.len(), 2);
        // Every kept grain referenced: the hand clears them all and takes one.
        cache.offer(BlockId::new(id(4)), &grain(4));
        cache.offer(BlockId::new(id(4)), &grain(4));
        assert_eq!(kept(&cache, id(4)), Some(grain(4)));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_cache_of_size_zero_keeps_nothing() {
        let cache = HotGrains::new(0);
        cache.offer(BlockId::new(5), &grain(1));
        cache.offer(BlockId::new(5), &grain(1));
        assert_eq!(kept(&cache, 5), None);
        assert_eq!(cache.len(), 0);
    }
}
