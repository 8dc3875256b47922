//! Which fingerprints the dedup index probably holds, readable without the
//! writer mutex.
//!
//! A grain that duplicates a stored block needs no compression: the write
//! shares the block and its own payload is dropped. Compression runs before
//! the writer mutex (where the dedup index lives), so without a hint every
//! duplicate was compressed for nothing; an incompressible one cost an LZ4
//! pass, a copy of its 4 KiB of literals and a CRC of the raw grain it then
//! fell back to (a tenth of the daemon's CPU in 1 MiB writes with a third of
//! the grains duplicates). Writes ask here first and leave a hinted grain raw;
//! the writer compresses it after all if the hint was wrong (the block freed
//! meanwhile, or another key in the slot), which costs what classifying it
//! would have cost, under the mutex instead. One such case is common: a grain
//! rewritten in place with the bytes it held, its block referenced only there
//! (a write releases what it overwrites before it stores its own blocks).
//!
//! One slot per index, no locks: a slot holds the dedup key last put there.
//! A key missing from its slot (overwritten by another) only loses the saving;
//! a key still in a slot after its block was freed only moves the compression
//! under the writer mutex. Neither changes what is stored: the dedup index,
//! not this, decides a hit.

use std::sync::atomic::{AtomicU64, Ordering};

/// Slots: 8 bytes each, so 4 MiB. The duplicates worth the saving are the
/// ones written again and again (a guest's zero-like pages, a template's
/// files), and a hit puts its key back in its slot.
pub const DEDUP_HINT_SLOTS: usize = 1 << 19;

/// Dedup keys, one per slot (0: an empty slot, so key 0 is never hinted).
pub struct DedupHints {
    slots: Box<[AtomicU64]>,
}

impl Default for DedupHints {
    fn default() -> DedupHints {
        DedupHints::with_slots(DEDUP_HINT_SLOTS)
    }
}

impl std::fmt::Debug for DedupHints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DedupHints({} slots)", self.slots.len())
    }
}

impl DedupHints {
    fn with_slots(slots: usize) -> DedupHints {
        assert!(slots.is_power_of_two());
        DedupHints {
            slots: (0..slots).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slot(&self, key: u64) -> &AtomicU64 {
        // Keys are hash output: their low bits are as good as any.
        &self.slots[key as usize & (self.slots.len() - 1)]
    }

    /// Whether `key` was put here since it was last taken out.
    pub fn contains(&self, key: u64) -> bool {
        key != 0 && self.slot(key).load(Ordering::Relaxed) == key
    }

    /// Notes that the dedup index holds `key` (in place of whatever the slot held).
    pub fn insert(&self, key: u64) {
        if key != 0 {
            self.slot(key).store(key, Ordering::Relaxed);
        }
    }

    /// Notes that the dedup index no longer holds `key`.
    pub fn remove(&self, key: u64) {
        // Failure means the slot already holds another key: nothing to take out.
        let _ = self
            .slot(key)
            .compare_exchange(key, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_hinted_from_insert_to_remove() {
        let hints = DedupHints::with_slots(16);
        assert!(!hints.contains(7));
        hints.insert(7);
        assert!(hints.contains(7));
        hints.remove(7);
        assert!(!hints.contains(7));
    }

    #[test]
    fn a_key_in_the_same_slot_replaces_the_hint_and_survives_its_removal() {
        let hints = DedupHints::with_slots(16);
        hints.insert(3);
        hints.insert(3 + 16);
        assert!(!hints.contains(3), "the slot holds the newer key");
        assert!(hints.contains(3 + 16));
        hints.remove(3);
        assert!(
            hints.contains(3 + 16),
            "removing another key leaves the slot"
        );
    }

    #[test]
    fn key_zero_is_never_hinted() {
        let hints = DedupHints::with_slots(16);
        hints.insert(0);
        assert!(!hints.contains(0));
    }
}
