//! A full consistency check of the metadata: every reference count equals the
//! mappings that hold the block, every segment's live bytes equal its blocks'
//! records, the dedup index names exactly the stored blocks, and no id or seq
//! in the tables is past the counter that hands them out (else it would be
//! handed out again). Tests run it after random workloads and crashes; it is
//! also the core of a future `lacuna scrub`.

use std::collections::{BTreeMap, HashMap};

use redb::ReadableTable;

use crate::ids::{BlockId, GrainIndex, SnapshotSeq};
use crate::meta::schema::{self, kv_error, BlockRec, GrainTarget, HistValue};
use crate::{Engine, EngineError, Result};

/// A volume with its range map and size as they were when the check began.
type VolumeAtCheck = (
    std::sync::Arc<crate::VolumeShared>,
    std::sync::Arc<crate::versions::range_map::RangeMap>,
    u64,
);

impl Engine {
    /// Checks the metadata invariants; returns a description of the first
    /// violations found.
    pub fn check_consistency(&self) -> Result<()> {
        let volumes = self.named_volumes();
        let views: Vec<_> = volumes
            .iter()
            .map(|v| {
                let view = v.view.read();
                (v.clone(), view.ranges.clone(), view.size_bytes)
            })
            .collect();
        let snapshots: Vec<(u64, SnapshotSeq)> = self
            .catalog
            .snapshots
            .read()
            .values()
            .map(|s| (s.id, s.seq))
            .collect();
        let mut ws = self.committer.writer.lock();
        self.commit_pending(&mut ws)?;
        let txn = self.begin_read()?;
        let maps = txn.open_table(schema::MAPPINGS).map_err(kv_error)?;
        let blocks = txn.open_table(schema::BLOCKS).map_err(kv_error)?;
        let history = txn.open_table(schema::HISTORY).map_err(kv_error)?;
        let mut refs: HashMap<BlockId, u64> = HashMap::new();
        let mut history_refs: HashMap<BlockId, u64> = HashMap::new();
        let mut mapping_counts: HashMap<crate::ids::VolumeId, u64> = HashMap::new();
        let mut highest = Highest::default();
        for item in crate::meta::point_rows::all(&maps)? {
            let (volume, _, value) = item?;
            *mapping_counts
                .entry(crate::ids::VolumeId::new(volume))
                .or_default() += 1;
            highest.seq = highest.seq.max(value.seq);
            if let GrainTarget::Block(id) = value.target {
                *refs.entry(id).or_default() += 1;
            }
        }
        let mut problems = self.check_reclaim_accounting(&ws, &maps, &views, &mapping_counts)?;
        for item in history.iter().map_err(kv_error)? {
            let (key, value) = item.map_err(kv_error)?;
            let value = HistValue::decode(value.value())?;
            highest.seq = highest
                .seq
                .max(SnapshotSeq::new(key.value().2))
                .max(value.died_seq);
            if let GrainTarget::Block(id) = value.target {
                *refs.entry(id).or_default() += 1;
                *history_refs.entry(id).or_default() += 1;
            }
        }
        let mut class_bytes = [0u64; 3];
        let mut waiting_bytes = 0u64;
        let mut live: BTreeMap<crate::ids::SegmentId, u64> = BTreeMap::new();
        let mut indexed_blocks = 0u64;
        for item in blocks.iter().map_err(kv_error)? {
            let (id, value) = item.map_err(kv_error)?;
            let (id, rec) = (BlockId::new(id.value()), BlockRec::decode(value.value())?);
            highest.block_id = highest.block_id.max(id.get());
            highest.segment = highest.segment.max(Some(rec.segment));
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
            let indexed = ws
                .dedup
                .get(&crate::write::transaction::dedup_key(&rec.fingerprint))
                == Some(&id);
            if rec.flags & crate::segment::log::FLAG_UNINDEXED == 0 {
                indexed_blocks += 1;
                if !indexed {
                    problems.push(format!("block {id}: not in the dedup index"));
                }
            } else if indexed {
                problems.push(format!("block {id}: stored with dedup off but indexed"));
            }
            *live.entry(rec.segment).or_default() += rec.record_bytes();
            let waits = rec.flags & crate::segment::log::FLAG_REDUCE_LATER != 0;
            let listed = ws.reduction_backlog.get(&id).copied();
            if waits {
                waiting_bytes += rec.record_bytes();
            }
            if waits != listed.is_some()
                || listed.is_some_and(|bytes| u64::from(bytes) != rec.record_bytes())
            {
                problems.push(format!(
                    "block {id}: waits for the reducer {waits}, in its backlog as {listed:?}"
                ));
            }
        }
        if waiting_bytes != ws.reduction_backlog_bytes
            || ws
                .reduction_backlog
                .values()
                .map(|&b| u64::from(b))
                .sum::<u64>()
                != waiting_bytes
        {
            problems.push(format!(
                "reduction backlog of {} bytes, blocks waiting hold {waiting_bytes}",
                ws.reduction_backlog_bytes
            ));
        }
        for (id, count) in refs {
            problems.push(format!("block {id}: {count} mappings but no block"));
        }
        if ws.dedup.len() as u64 != indexed_blocks {
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
        highest.seq = snapshots
            .iter()
            .map(|&(_, seq)| seq)
            .fold(highest.seq, SnapshotSeq::max);
        highest.volume_id = snapshots
            .iter()
            .map(|&(id, _)| id)
            .chain(views.iter().map(|(v, _, _)| v.id.get()))
            .fold(0, u64::max);
        highest.segment = highest.segment.max(ws.segments.keys().next_back().copied());
        problems.extend(highest.past_counters(&ws));
        if problems.is_empty() {
            Ok(())
        } else {
            problems.truncate(20);
            Err(EngineError::Corruption(problems.join("; ")))
        }
    }

    /// The reclaim backlog and container usage the engine keeps in memory
    /// against what the tables say.
    fn check_reclaim_accounting(
        &self,
        ws: &crate::write::transaction::WriterState,
        maps: &redb::ReadOnlyTable<(u64, u64), &'static [u8]>,
        views: &[VolumeAtCheck],
        mapping_counts: &HashMap<crate::ids::VolumeId, u64>,
    ) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let kept: HashMap<crate::ids::VolumeId, u64> = ws.mapping_counts.clone();
        if &kept != mapping_counts {
            problems.push(format!(
                "mapping counts {kept:?} but the table holds {mapping_counts:?}"
            ));
        }
        let mut used: HashMap<u64, u64> = HashMap::new();
        for (vol, ranges, size_bytes) in views {
            let mut shadowed = 0u64;
            let mappings =
                crate::meta::point_rows::range(maps, vol.id, GrainIndex::new(0), GrainIndex::MAX)?;
            for item in mappings {
                let (_, grain, value) = item?;
                let seq = value.seq;
                if ranges.find(grain).is_some_and(|(_, range)| range.seq > seq) {
                    shadowed += 1;
                }
            }
            let backlog = vol.backlog_grains(ws);
            if backlog != shadowed {
                problems.push(format!(
                    "volume {}: backlog {backlog} grains but {shadowed} mappings are shadowed",
                    vol.name
                ));
            }
            let counted = vol.counted_grains.load(std::sync::atomic::Ordering::SeqCst);
            let expected = if vol.provisioning.is_thick() {
                crate::units::grains_of(*size_bytes)
            } else {
                vol.bitmap.lock().count()
            };
            if counted != expected {
                problems.push(format!(
                    "volume {}: counts {counted} grains in its container but holds {expected}",
                    vol.name
                ));
            }
            *used.entry(vol.container.id).or_default() += counted;
        }
        for container in self.catalog.containers.read().values() {
            let expected = used.get(&container.id).copied().unwrap_or(0);
            let kept = container
                .used_grains
                .load(std::sync::atomic::Ordering::SeqCst);
            if kept != expected {
                problems.push(format!(
                    "container {}: usage {kept} grains but its volumes count {expected}",
                    container.name
                ));
            }
        }
        Ok(problems)
    }
}

/// The largest ids and seqs the tables and the catalogue hold.
#[derive(Default)]
struct Highest {
    block_id: u64,
    seq: SnapshotSeq,
    volume_id: u64,
    segment: Option<crate::segment::log::SegmentId>,
}

impl Highest {
    /// Each counter is the last id (seq) handed out, or for segments the next
    /// one: whatever the tables hold is within it.
    fn past_counters(&self, ws: &crate::write::transaction::WriterState) -> Vec<String> {
        let mut problems = Vec::new();
        for (what, highest, counter) in [
            ("block id", self.block_id, ws.next_block_id.get()),
            ("seq", self.seq.get(), ws.next_seq.get()),
            (
                "volume or snapshot id",
                self.volume_id,
                ws.next_volume_id.get(),
            ),
        ] {
            if highest > counter {
                problems.push(format!("{what} {highest} is past its counter {counter}"));
            }
        }
        if let Some(segment) = self.segment.filter(|&s| s >= ws.next_segment_id) {
            problems.push(format!(
                "segment {segment} is past its counter {}",
                ws.next_segment_id
            ));
        }
        problems
    }
}
