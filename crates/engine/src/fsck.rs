//! A full consistency check of the metadata: every reference count equals the
//! mappings that hold the block, every segment's live bytes equal its blocks'
//! records, and the dedup index names exactly the stored blocks. Tests run it
//! after random workloads; it is also the core of a future `lacuna scrub`.

use std::collections::{BTreeMap, HashMap};

use redb::{ReadableTable, ReadableTableMetadata};

use crate::meta::{self, kv_error, BlockRec, HistValue, MapValue, Target};
use crate::{Engine, EngineError, Result};

impl Engine {
    /// Checks the metadata invariants; returns a description of the first
    /// violations found.
    pub fn check_consistency(&self) -> Result<()> {
        let ws = self.writer.lock();
        let txn = self.begin_read()?;
        let maps = txn.open_table(meta::MAPPINGS).map_err(kv_error)?;
        let blocks = txn.open_table(meta::BLOCKS).map_err(kv_error)?;
        let history = txn.open_table(meta::HISTORY).map_err(kv_error)?;
        let mut refs: HashMap<u64, u64> = HashMap::new();
        let mut history_refs: HashMap<u64, u64> = HashMap::new();
        for item in maps.iter().map_err(kv_error)? {
            let (_, value) = item.map_err(kv_error)?;
            if let Target::Block(id) = MapValue::decode(value.value())?.target {
                *refs.entry(id).or_default() += 1;
            }
        }
        for item in history.iter().map_err(kv_error)? {
            let (_, value) = item.map_err(kv_error)?;
            if let Target::Block(id) = HistValue::decode(value.value())?.target {
                *refs.entry(id).or_default() += 1;
                *history_refs.entry(id).or_default() += 1;
            }
        }
        let mut class_bytes = [0u64; 3];
        let mut problems = Vec::new();
        let mut live: BTreeMap<u32, u64> = BTreeMap::new();
        for item in blocks.iter().map_err(kv_error)? {
            let (id, value) = item.map_err(kv_error)?;
            let (id, rec) = (id.value(), BlockRec::decode(value.value())?);
            let held = refs.remove(&id).unwrap_or(0);
            if u64::from(rec.refcount) != held {
                problems.push(format!(
                    "block {id}: refcount {} but {held} mappings",
                    rec.refcount
                ));
            }
            let held_by_history = history_refs.remove(&id).unwrap_or(0);
            if u64::from(rec.history_refs) != held_by_history {
                problems.push(format!(
                    "block {id}: {} history references recorded but {held_by_history} history entries",
                    rec.history_refs
                ));
            }
            class_bytes[rec.class() as usize] += rec.record_bytes();
            if ws.dedup.get(&crate::tx::dedup_key(&rec.fingerprint)) != Some(&id) {
                problems.push(format!("block {id}: not in the dedup index"));
            }
            *live.entry(rec.segment).or_default() += rec.record_bytes();
        }
        for (id, count) in refs {
            problems.push(format!("block {id}: {count} mappings but no block"));
        }
        if ws.dedup.len() as u64 != blocks.len().map_err(kv_error)? {
            problems.push("dedup index and block table differ in size".into());
        }
        for (id, state) in &ws.segments {
            let expected = live.remove(id).unwrap_or(0);
            if state.live_bytes != expected {
                problems.push(format!(
                    "segment {id}: live {} but blocks hold {expected}",
                    state.live_bytes
                ));
            }
        }
        let written_sum: u64 = ws.segments.values().map(|s| s.written_bytes).sum();
        let live_sum: u64 = ws.segments.values().map(|s| s.live_bytes).sum();
        if (written_sum, live_sum) != (ws.used_bytes(), ws.live_bytes()) {
            problems.push(format!(
                "segment totals {}/{} but segments sum to {written_sum}/{live_sum}",
                ws.used_bytes(),
                ws.live_bytes()
            ));
        }
        if class_bytes != ws.class_bytes {
            problems.push(format!(
                "class totals {:?} but blocks sum to {class_bytes:?}",
                ws.class_bytes
            ));
        }
        for (id, bytes) in live {
            problems.push(format!(
                "segment {id}: unknown but blocks hold {bytes} bytes"
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            problems.truncate(20);
            Err(EngineError::Corruption(problems.join("; ")))
        }
    }
}
