//! Payloads of blocks that writes were recently proven to duplicate.
//!
//! A fingerprint hit counts only once the block's stored payload compares equal
//! to the write's (see `TxState::store_block`). Reading that payload back is a
//! syscall under the writer mutex, and duplicates concentrate on a few hot
//! blocks (a template's common files, a guest's recurring pages), so the
//! payloads of the blocks last proven are kept here and compared in memory.
//!
//! Nothing here goes stale on its own: ids are not reused while the process
//! runs, the cleaner moves records unchanged, and a freed block is no longer
//! in the dedup index, so its entry is never asked for. The one change of a
//! block's stored bytes under its id, the background reducer's rewrite of a
//! raw record compressed, takes the entry out ([`ProvenPayloads::forget`]):
//! kept, the raw bytes would be read with the new record's codec, and every
//! write of that grain would miss its duplicate. Only transactions that
//! committed add or take out entries.

use crate::ids::BlockId;
use std::collections::{HashMap, VecDeque};

/// How many payloads are kept: at most 4 KiB each, so at most 4 MiB.
pub const PROVEN_PAYLOADS_MAX: usize = 1024;

/// Block id → stored payload, the oldest entry evicted first.
#[derive(Debug, Default)]
pub struct ProvenPayloads {
    payloads: HashMap<BlockId, Box<[u8]>>,
    /// Ids in the order they were added.
    order: VecDeque<BlockId>,
}

impl ProvenPayloads {
    pub fn get(&self, id: BlockId) -> Option<&[u8]> {
        self.payloads.get(&id).map(|payload| &payload[..])
    }

    /// Keeps `payload` as block `id`'s, evicting the oldest entry when full.
    pub fn insert(&mut self, id: BlockId, payload: Box<[u8]>) {
        assert!(payload.len() <= crate::GRAIN_BYTES as usize);
        if self.payloads.insert(id, payload).is_some() {
            return;
        }
        self.order.push_back(id);
        if self.order.len() > PROVEN_PAYLOADS_MAX {
            let oldest = self.order.pop_front().expect("over the limit");
            self.payloads.remove(&oldest);
        }
        assert_eq!(self.order.len(), self.payloads.len());
    }

    /// Forgets block `id`'s payload (its record was rewritten).
    pub fn forget(&mut self, id: BlockId) {
        if self.payloads.remove(&id).is_some() {
            self.order.retain(|kept| *kept != id);
        }
        assert_eq!(self.order.len(), self.payloads.len());
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.payloads.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BlockId;

    #[test]
    fn holds_at_most_the_limit_and_evicts_the_oldest() {
        let mut proven = ProvenPayloads::default();
        for id in 0..(PROVEN_PAYLOADS_MAX as u64 + 10) {
            proven.insert(BlockId::new(id), vec![id as u8; 8].into_boxed_slice());
        }
        assert_eq!(proven.len(), PROVEN_PAYLOADS_MAX);
        assert!(proven.get(BlockId::new(9)).is_none());
        assert_eq!(proven.get(BlockId::new(10)), Some(&[10u8; 8][..]));
        // Adding a kept id again neither duplicates nor evicts.
        proven.insert(BlockId::new(10), vec![10u8; 8].into_boxed_slice());
        assert_eq!(proven.len(), PROVEN_PAYLOADS_MAX);
        assert!(proven.get(BlockId::new(11)).is_some());
    }
}
