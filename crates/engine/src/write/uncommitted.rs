//! Host writes acknowledged but not yet committed to the metadata store.
//!
//! Write batches share one open metadata transaction (see `tx::run_deferred`)
//! instead of committing one each: a redb commit copies every B-tree page the
//! batch touched and checksums it, and with 4 KiB random writes that was most
//! of a write's cost (21 k writes/s on one core with a commit per batch of 30,
//! against 43–49 k with a transaction per 16 k writes). The transaction is
//! committed before any other metadata change, before every
//! durable commit (host FLUSH, and the background one every five seconds), and when
//! it has taken [`MAX_OPEN_GRAINS`] grains. Reclaim steps join it too (they
//! only remove mappings that committed range records already shadow; see
//! `reclaim`), and count towards that limit.
//!
//! Until it is committed, readers (who see only committed state) find the
//! batches' mappings here. A reader looks here first and opens its read
//! transaction after: an entry is removed only once its commit is visible, so a
//! grain missing here is either committed or written after the read began.
//! Block locations are kept with the entries because the blocks they name may
//! not be committed either.
//!
//! Crash semantics do not change: only durable commits ever survived a crash,
//! and each commits the open transaction first.

use std::collections::{BTreeMap, HashMap};

use parking_lot::RwLock;

use crate::ids::GrainIndex;
use crate::meta::schema::BlockRec;

/// Most grains one open transaction takes before it is committed: bounds the
/// uncommitted pages redb holds in memory (three B-tree leaves a write at most,
/// and redb's write buffer is capped at half its cache) and the entries kept
/// here. Random 4 KiB overwrites dirty leaves all over the mapping and block
/// tables, and every commit copies and checksums each one: 65536 rather than
/// 8192 took 1.16x the writes a second at queue depth 32 (`bench/ab_iscsi.py
/// ... randwrite 4096 32 10 --rounds 3 --reps 2`), and left 1 MiB writes and
/// 4 KiB reads as they were; 262144 with the background durable commit every
/// five seconds rather than every second took 1.21x again (`... randwrite 4096
/// 32 30 --rounds 2 --reps 1`; either change alone gained nothing). Below
/// about 52 k writes a second the durable commit comes first anyway. Memory
/// stays bounded by redb's write buffer, not by this: past half its cache redb
/// writes uncommitted pages out to its file.
pub const MAX_OPEN_GRAINS: u64 = 262144;

/// A grain's content as set by a write still in the open transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingGrain {
    Pattern(u64),
    /// The block and where it is stored.
    Block {
        id: crate::ids::BlockId,
        rec: BlockRec,
    },
}

/// The grains written in the open transaction: volume id → grain → content.
#[derive(Debug, Default)]
pub struct PendingWrites {
    volumes: RwLock<HashMap<u64, BTreeMap<GrainIndex, PendingGrain>>>,
}

impl PendingWrites {
    /// Records a batch's grains (under the writer mutex, before the writes are
    /// acknowledged).
    pub fn insert(&self, grains: impl IntoIterator<Item = (u64, GrainIndex, PendingGrain)>) {
        let mut volumes = self.volumes.write();
        for (volume, grain, content) in grains {
            volumes.entry(volume).or_default().insert(grain, content);
        }
    }

    /// Forgets everything, once the open transaction's commit is visible.
    pub fn clear(&self) {
        self.volumes.write().clear();
    }

    /// The pending grains of `volume` in `[first, end)`, in order.
    pub fn range(
        &self,
        volume: crate::ids::VolumeId,
        first: GrainIndex,
        end: GrainIndex,
    ) -> Vec<(GrainIndex, PendingGrain)> {
        let volumes = self.volumes.read();
        let Some(grains) = volumes.get(&volume.get()) else {
            return Vec::new();
        };
        grains
            .range(first..end)
            .map(|(&grain, &content)| (grain, content))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::VolumeId;

    fn g(grain: u64) -> GrainIndex {
        GrainIndex::new(grain)
    }

    #[test]
    fn range_returns_only_the_volumes_grains_in_order() {
        let pending = PendingWrites::default();
        pending.insert([
            (1, g(9), PendingGrain::Pattern(9)),
            (1, g(3), PendingGrain::Pattern(3)),
            (2, g(4), PendingGrain::Pattern(4)),
            (1, g(10), PendingGrain::Pattern(10)),
        ]);
        assert_eq!(
            pending.range(VolumeId::new(1), g(3), g(10)),
            vec![
                (g(3), PendingGrain::Pattern(3)),
                (g(9), PendingGrain::Pattern(9))
            ]
        );
        assert!(pending
            .range(VolumeId::new(3), g(0), GrainIndex::MAX)
            .is_empty());
        // A later write of the same grain replaces the earlier one.
        pending.insert([(1, g(3), PendingGrain::Pattern(33))]);
        assert_eq!(
            pending.range(VolumeId::new(1), g(3), g(4)),
            vec![(g(3), PendingGrain::Pattern(33))]
        );
        pending.clear();
        assert!(pending
            .range(VolumeId::new(1), g(0), GrainIndex::MAX)
            .is_empty());
    }
}
