//! Opening the array: the tables it needs, and recovery of its state from the
//! last durable commit (volumes, snapshots, segments, the writer's counters).

use crate::catalog::{volume_shared, VolumeRec};
use crate::ids::GrainIndex;
use crate::meta::mapping_cache::ChangedMappings;
use crate::meta::schema::{self, kv_error, BlockRec, RangeKind, RangeRec};
use crate::segment::log::{SegmentId, SegmentStore};
use crate::units::grains_of;
use crate::versions::range_map::RangeMap;
use crate::versions::snapshot::{SnapshotRec, SnapshotShared};
use crate::write::transaction::{SegState, WriterState};
use crate::{EngineError, Result, VolumeShared};
use redb::{Durability, ReadableTable};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) struct Recovered {
    pub volumes: HashMap<String, Arc<VolumeShared>>,
    pub destroyed: HashMap<String, Arc<VolumeShared>>,
    pub retained: BTreeMap<crate::ids::VolumeId, VolumeRec>,
    pub snapshots: BTreeMap<u64, Arc<SnapshotShared>>,
    pub sweep_pending: BTreeMap<crate::ids::VolumeId, crate::versions::lifecycle::SweepCursor>,
    pub writer: WriterState,
}

/// Brings the array back after a clean stop or a crash: redb has already rolled
/// back to its last durable commit; here segment files are reconciled with it
/// (unreferenced tails trimmed, segments it never knew removed) and the in-memory
/// views (range maps, data bitmaps, segment accounting) rebuilt.
pub(crate) fn recover(
    db: &crate::meta::store::Kv,
    store: &dyn SegmentStore,
    capacity_bytes: u64,
    containers: &BTreeMap<u64, Arc<crate::space::container::ContainerShared>>,
) -> Result<Recovered> {
    let txn = db.begin_read()?;
    let counters = txn.open_table(schema::COUNTERS).map_err(kv_error)?;
    let mut ws = WriterState {
        next_block_id: crate::ids::BlockId::new(schema::read_counter(&counters, "next_block_id")?),
        next_seq: crate::ids::SnapshotSeq::new(schema::read_counter(&counters, "next_seq")?),
        next_volume_id: crate::ids::VolumeId::new(schema::read_counter(
            &counters,
            "next_volume_id",
        )?),
        next_segment_id: SegmentId::new(
            schema::read_counter(&counters, "next_segment_id")?
                .try_into()
                .map_err(|_| EngineError::Corruption("segment counter".into()))?,
        ),
        capacity_bytes,
        ..WriterState::default()
    };
    for item in txn
        .open_table(schema::SEGMENTS)
        .map_err(kv_error)?
        .iter()
        .map_err(kv_error)?
    {
        let (id, value) = item.map_err(kv_error)?;
        let (written_bytes, live_bytes) = value.value();
        ws.load_segment(
            SegmentId::new(id.value()),
            SegState {
                written_bytes,
                live_bytes,
            },
        );
    }
    for item in txn
        .open_table(schema::DOOMED)
        .map_err(kv_error)?
        .iter()
        .map_err(kv_error)?
    {
        let (id, grains) = item.map_err(kv_error)?;
        ws.doomed
            .insert(crate::ids::VolumeId::new(id.value()), grains.value());
    }
    for item in txn
        .open_table(schema::DOOMED_CONTAINERS)
        .map_err(kv_error)?
        .iter()
        .map_err(kv_error)?
    {
        let (id, container) = item.map_err(kv_error)?;
        ws.doomed_containers
            .insert(crate::ids::VolumeId::new(id.value()), container.value());
    }
    // Volumes doomed before containers existed are charged to the default one.
    for id in ws.doomed.keys() {
        ws.doomed_containers
            .entry(*id)
            .or_insert(crate::space::container::DEFAULT_CONTAINER_ID);
    }
    ws.mapping_counts = count_mappings(&txn)?;
    for item in txn
        .open_table(schema::BLOCKS)
        .map_err(kv_error)?
        .iter()
        .map_err(kv_error)?
    {
        let (id, value) = item.map_err(kv_error)?;
        let rec = BlockRec::decode(value.value())?;
        if rec.flags & crate::segment::log::FLAG_UNINDEXED == 0 {
            let key = crate::write::transaction::dedup_key(&rec.fingerprint);
            ws.dedup.insert(key, crate::ids::BlockId::new(id.value()));
            ws.hints.insert(key);
        }
        ws.class_bytes[rec.class() as usize] += rec.record_bytes();
        if rec.flags & crate::segment::log::FLAG_REDUCE_LATER != 0 {
            let record_bytes = rec.record_bytes();
            ws.reduction_backlog
                .insert(crate::ids::BlockId::new(id.value()), record_bytes as u32);
            ws.reduction_backlog_bytes += record_bytes;
        }
    }
    reconcile_segments(store, &mut ws)?;
    // New writes always go to a fresh segment: nothing is ever appended after a
    // tail that a crash may have torn.
    ws.open_segment = ws.next_segment_id;
    ws.next_segment_id = ws.next_segment_id.next();
    persist_segment_counter(db, ws.next_segment_id)?;
    for (&id, state) in &ws.segments {
        if state.live_bytes == 0 {
            ws.pending_free.insert(id);
        }
    }
    let loaded = load_volumes(&txn, containers)?;
    let snapshots = load_snapshots(&txn)?;
    let mut sweep_pending = BTreeMap::new();
    let history = txn.open_table(schema::HISTORY).map_err(kv_error)?;
    let range_history = txn.open_table(schema::RANGE_HISTORY).map_err(kv_error)?;
    let all_volumes = loaded.live.values().chain(loaded.destroyed.values());
    let ids: Vec<crate::ids::VolumeId> = all_volumes
        .clone()
        .map(|v| v.id)
        .chain(loaded.retained.keys().copied())
        .collect();
    for v in all_volumes {
        let mut seqs: Vec<crate::ids::SnapshotSeq> = snapshots
            .values()
            .filter(|s| s.volume_id == v.id)
            .map(|s| s.seq)
            .collect();
        seqs.sort_unstable();
        *v.snapshot_seqs.lock() = seqs;
        v.last_change_seq.store(ws.next_seq.get(), Ordering::SeqCst);
        if v.provisioning.is_thick() {
            let grains = grains_of(v.view.read().size_bytes);
            ws.thick_unwritten_grains += grains - v.bitmap.lock().count().min(grains);
        }
    }
    for id in ids {
        let has_history = history
            .range((id.get(), 0, 0)..=(id.get(), u64::MAX, u64::MAX))
            .map_err(kv_error)?
            .next()
            .is_some()
            || range_history
                .range((id.get(), 0, 0)..=(id.get(), u64::MAX, u64::MAX))
                .map_err(kv_error)?
                .next()
                .is_some();
        if has_history {
            sweep_pending.insert(id, crate::versions::lifecycle::SweepCursor::START);
        }
    }
    Ok(Recovered {
        volumes: loaded.live,
        destroyed: loaded.destroyed,
        retained: loaded.retained,
        snapshots,
        sweep_pending,
        writer: ws,
    })
}

/// Snapshots with their range maps as they were at their seq: the live records
/// no newer than it, and the displaced pieces alive at it.
fn load_snapshots(txn: &redb::ReadTransaction) -> Result<BTreeMap<u64, Arc<SnapshotShared>>> {
    let table = txn.open_table(schema::SNAPSHOTS).map_err(kv_error)?;
    let range_table = txn.open_table(schema::RANGES).map_err(kv_error)?;
    let range_history = txn.open_table(schema::RANGE_HISTORY).map_err(kv_error)?;
    let mut snapshots = BTreeMap::new();
    for item in table.iter().map_err(kv_error)? {
        let (_, json) = item.map_err(kv_error)?;
        let rec: SnapshotRec = serde_json::from_slice(json.value())
            .map_err(|e| EngineError::Corruption(format!("snapshot record: {e}")))?;
        let mut ranges = RangeMap::default();
        for item in range_table
            .range((rec.volume_id.get(), 0)..=(rec.volume_id.get(), u64::MAX))
            .map_err(kv_error)?
        {
            let (key, value) = item.map_err(kv_error)?;
            let range = RangeRec::decode(value.value())?;
            if range.seq <= rec.seq {
                ranges.load(GrainIndex::new(key.value().1), range);
            }
        }
        for item in range_history
            .range((rec.volume_id.get(), 0, 0)..=(rec.volume_id.get(), u64::MAX, u64::MAX))
            .map_err(kv_error)?
        {
            let (key, value) = item.map_err(kv_error)?;
            let kept = schema::RangeHistValue::decode(value.value())?;
            if kept.rec.seq <= rec.seq && rec.seq < kept.died_seq {
                ranges.load(GrainIndex::new(key.value().1), kept.rec);
            }
        }
        snapshots.insert(
            rec.id,
            Arc::new(SnapshotShared::from_rec(&rec, Arc::new(ranges))),
        );
    }
    Ok(snapshots)
}

pub(crate) fn ensure_tables(db: &crate::meta::store::Kv) -> Result<()> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)
        .map_err(kv_error)?;
    txn.set_quick_repair(true);
    check_format_version(&txn)?;
    crate::write::transaction::create_tables(&txn)?;
    let converted = crate::meta::point_rows::convert_legacy(&txn)?;
    txn.open_table(schema::COUNTERS)
        .map_err(kv_error)?
        .insert(schema::FORMAT_VERSION_KEY, schema::FORMAT_VERSION)
        .map_err(kv_error)?;
    if converted == 0 {
        return db.commit(txn, ChangedMappings::NONE);
    }
    tracing::info!(
        mappings = converted,
        "point mappings converted to rows of {} grains",
        crate::meta::point_rows::ROW_GRAINS
    );
    db.commit(txn, ChangedMappings::Everything)
}

/// Refuses a data directory written in another format, before anything in it
/// is read or changed. No version at all is a directory from before versions
/// were written (or a new one): its tables are upgraded by the caller.
fn check_format_version(txn: &redb::WriteTransaction) -> Result<()> {
    let found = txn
        .open_table(schema::COUNTERS)
        .map_err(kv_error)?
        .get(schema::FORMAT_VERSION_KEY)
        .map_err(kv_error)?
        .map(|v| v.value());
    match found {
        None => Ok(()),
        Some(found) if found == schema::FORMAT_VERSION => Ok(()),
        Some(found) => Err(EngineError::UnsupportedFormat {
            found,
            supported: schema::FORMAT_VERSION,
        }),
    }
}

/// The fresh open segment's id must never be handed out again, even if the next
/// crash comes before any other durable commit.
fn persist_segment_counter(db: &crate::meta::store::Kv, next_segment_id: SegmentId) -> Result<()> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)
        .map_err(kv_error)?;
    txn.set_quick_repair(true);
    txn.open_table(schema::COUNTERS)
        .map_err(kv_error)?
        .insert("next_segment_id", u64::from(next_segment_id.get()))
        .map_err(kv_error)?;
    db.commit(txn, ChangedMappings::NONE)
}

fn reconcile_segments(store: &dyn SegmentStore, ws: &mut WriterState) -> Result<()> {
    let on_disk = store
        .list()
        .map_err(|e| EngineError::io("listing segments", e))?;
    for (id, length_bytes) in on_disk {
        match ws.segments.get(&id) {
            None => {
                tracing::info!(
                    segment = %id,
                    "removing a segment the metadata never committed"
                );
                store
                    .remove(id)
                    .map_err(|e| EngineError::io(format!("removing segment {id}"), e))?;
            }
            Some(state) if length_bytes > state.written_bytes => {
                tracing::info!(
                    segment = %id,
                    length_bytes,
                    kept = state.written_bytes,
                    "trimming a segment tail"
                );
                store
                    .truncate(id, state.written_bytes)
                    .map_err(|e| EngineError::io(format!("trimming segment {id}"), e))?;
            }
            Some(state) if length_bytes < state.written_bytes => {
                return Err(EngineError::Corruption(format!(
                    "segment {id} ({}) holds {length_bytes} bytes but the metadata references {}: \
                     the segment lost committed records (truncated or torn); restore it or the \
                     data directory from a copy",
                    store.describe(id),
                    state.written_bytes
                )));
            }
            Some(_) => {}
        }
    }
    let present: std::collections::BTreeSet<_> = store
        .list()
        .map_err(|e| EngineError::io("listing segments", e))?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    for (&id, state) in &ws.segments {
        if state.written_bytes > 0 && !present.contains(&id) {
            return Err(EngineError::Corruption(format!(
                "segment {id} ({}) is missing but the metadata references {} bytes in it",
                store.describe(id),
                state.written_bytes
            )));
        }
    }
    Ok(())
}

struct LoadedVolumes {
    live: HashMap<String, Arc<VolumeShared>>,
    destroyed: HashMap<String, Arc<VolumeShared>>,
    retained: BTreeMap<crate::ids::VolumeId, VolumeRec>,
}

/// Point-mapping records per volume.
fn count_mappings(txn: &redb::ReadTransaction) -> Result<HashMap<crate::ids::VolumeId, u64>> {
    let maps = txn.open_table(schema::MAPPINGS).map_err(kv_error)?;
    let mut counts: HashMap<crate::ids::VolumeId, u64> = HashMap::new();
    for item in crate::meta::point_rows::all(&maps)? {
        let (volume, _, _) = item?;
        *counts.entry(crate::ids::VolumeId::new(volume)).or_default() += 1;
    }
    Ok(counts)
}

fn load_volumes(
    txn: &redb::ReadTransaction,
    containers: &BTreeMap<u64, Arc<crate::space::container::ContainerShared>>,
) -> Result<LoadedVolumes> {
    let vol_table = txn.open_table(schema::VOLUMES).map_err(kv_error)?;
    let range_table = txn.open_table(schema::RANGES).map_err(kv_error)?;
    let maps = txn.open_table(schema::MAPPINGS).map_err(kv_error)?;
    let mut loaded = LoadedVolumes {
        live: HashMap::new(),
        destroyed: HashMap::new(),
        retained: BTreeMap::new(),
    };
    for item in txn
        .open_table(schema::RETAINED)
        .map_err(kv_error)?
        .iter()
        .map_err(kv_error)?
    {
        let (id, json) = item.map_err(kv_error)?;
        let rec: VolumeRec = serde_json::from_slice(json.value())
            .map_err(|e| EngineError::Corruption(format!("retained volume record: {e}")))?;
        loaded
            .retained
            .insert(crate::ids::VolumeId::new(id.value()), rec);
    }
    for item in vol_table.iter().map_err(kv_error)? {
        let (_, json) = item.map_err(kv_error)?;
        let rec: VolumeRec = serde_json::from_slice(json.value())
            .map_err(|e| EngineError::Corruption(format!("volume record: {e}")))?;
        let mut ranges = RangeMap::default();
        for item in range_table
            .range((rec.id.get(), 0)..=(rec.id.get(), u64::MAX))
            .map_err(kv_error)?
        {
            let (key, value) = item.map_err(kv_error)?;
            ranges.load(
                GrainIndex::new(key.value().1),
                RangeRec::decode(value.value())?,
            );
        }
        let container = containers.get(&rec.container).cloned().ok_or_else(|| {
            EngineError::Corruption(format!(
                "volume '{}' belongs to container {} which does not exist",
                rec.name, rec.container
            ))
        })?;
        let shared = volume_shared(&rec, ranges, container);
        rebuild_bitmap(&shared, &maps)?;
        shared.sync_usage(Some(rec.size_bytes));
        let into = if rec.destroyed_unix_s.is_some() {
            &mut loaded.destroyed
        } else {
            &mut loaded.live
        };
        into.insert(rec.name.clone(), Arc::new(shared));
    }
    Ok(loaded)
}

/// A grain holds data when its effective content (the newer of its point mapping
/// and covering range record) is a block or a non-zero pattern.
fn rebuild_bitmap(
    shared: &VolumeShared,
    maps: &redb::ReadOnlyTable<(u64, u64), &'static [u8]>,
) -> Result<()> {
    let view = shared.view.read();
    let mut bitmap = shared.bitmap.lock();
    let mut live_mapped = shared.live_mapped.lock();
    let volume_end = GrainIndex::new(grains_of(view.size_bytes));
    for (start, rec) in view.ranges.iter() {
        // A reference counts as data: the source's bits at copy time are not kept.
        let data = match rec.kind {
            RangeKind::Pattern(p) => p != 0,
            RangeKind::Ref { .. } => true,
            RangeKind::Hole => false,
        };
        if data {
            bitmap.set_range(start.min(volume_end), rec.end_grain.min(volume_end), true);
        }
    }
    let mappings =
        crate::meta::point_rows::range(maps, shared.id, GrainIndex::new(0), GrainIndex::MAX)?;
    for item in mappings {
        let (_, grain, value) = item?;
        if grain >= volume_end {
            continue;
        }
        if let Some((_, range)) = view.ranges.find(grain) {
            if range.seq > value.seq {
                continue;
            }
        }
        live_mapped.set(grain, true);
        bitmap.set(grain, crate::meta::schema::is_data(value.target));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // bare databases, no engine: no read views to mark stale
mod tests {
    use std::path::Path;

    use redb::ReadableDatabase;

    use crate::meta::schema::{COUNTERS, FORMAT_VERSION, FORMAT_VERSION_KEY};
    use crate::testing::test_data::{data_dir, quiet_engine};
    use crate::{Engine, EngineConfig, EngineError, GRAIN_BYTES};

    fn stored_version(dir: &Path) -> Option<u64> {
        let db = redb::Database::open(dir.join("metadata.redb")).unwrap();
        let txn = db.begin_read().unwrap();
        let counters = txn.open_table(COUNTERS).unwrap();
        let found = counters.get(FORMAT_VERSION_KEY).unwrap().map(|v| v.value());
        found
    }

    fn store_version(dir: &Path, version: Option<u64>) {
        let db = redb::Database::open(dir.join("metadata.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut counters = txn.open_table(COUNTERS).unwrap();
            match version {
                Some(v) => counters.insert(FORMAT_VERSION_KEY, v).unwrap(),
                None => counters.remove(FORMAT_VERSION_KEY).unwrap(),
            };
        }
        txn.commit().unwrap();
    }

    /// A data directory with one volume whose first grain holds `0x5a`s.
    fn written_data_dir(tag: &str) -> tempfile::TempDir {
        let dir = data_dir(tag);
        let engine = quiet_engine(dir.path(), 64 << 20);
        let volume = {
            engine.create_volume("v", 1 << 20).unwrap();
            engine.open_volume("v").unwrap()
        };
        volume.write(0, &[0x5a; GRAIN_BYTES as usize]).unwrap();
        volume.flush().unwrap();
        drop(volume);
        drop(engine);
        dir
    }

    #[test]
    fn a_data_directory_is_written_at_this_format_version() {
        let dir = written_data_dir("format-new");
        assert_eq!(stored_version(dir.path()), Some(FORMAT_VERSION));
    }

    #[test]
    fn a_data_directory_of_another_format_version_is_refused_and_left_unchanged() {
        let dir = written_data_dir("format-other");
        store_version(dir.path(), Some(FORMAT_VERSION + 6));
        let refused = Engine::open(EngineConfig::new(dir.path(), 64 << 20));
        let Err(error) = refused else {
            panic!("a data directory of another format version was opened");
        };
        assert!(
            matches!(
                error,
                EngineError::UnsupportedFormat { found, supported }
                    if found == FORMAT_VERSION + 6 && supported == FORMAT_VERSION
            ),
            "{error}"
        );
        let line = error.to_string();
        assert!(!line.contains('\n') && line.contains(&(FORMAT_VERSION + 6).to_string()));
        assert_eq!(stored_version(dir.path()), Some(FORMAT_VERSION + 6));
    }

    #[test]
    fn a_data_directory_from_before_versions_gets_the_version_and_reads_as_before() {
        let dir = written_data_dir("format-none");
        store_version(dir.path(), None);
        let engine = quiet_engine(dir.path(), 64 << 20);
        let mut grain = vec![0; GRAIN_BYTES as usize];
        engine
            .open_volume("v")
            .unwrap()
            .read(0, &mut grain)
            .unwrap();
        assert!(grain.iter().all(|&b| b == 0x5a));
        drop(engine);
        assert_eq!(stored_version(dir.path()), Some(FORMAT_VERSION));
    }
}
