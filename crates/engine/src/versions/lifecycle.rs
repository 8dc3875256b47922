//! Destroy, recover, eradicate — for volumes and snapshots.
//!
//! Deleting destroys: the volume (or snapshot) disappears from hosts and lists at
//! once but keeps its data, recoverable, for the configured retention. Eradication
//! (explicit, or automatic when the retention has passed) hands the data to the
//! background reclaimer.
//!
//! What clones and copies still read is kept alive rather than refused: an
//! eradicated snapshot that a `Ref` still points at becomes an unnamed pin, and an
//! eradicated volume whose pins are still needed is retained (hidden, data kept)
//! until the last one goes. Nothing a host can read ever disappears under it.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use redb::ReadableTable;

use crate::ids::{GrainIndex, SnapshotSeq};
use crate::meta::schema::{self, kv_error, HistValue, RangeHistValue};
use crate::units::{grains_of, now_unix_s};
use crate::versions::snapshot::SnapshotShared;
use crate::{Engine, EngineError, Result, VolumeShared};

/// Entries examined per sweep step.
const SWEEP_BATCH: usize = 256;

/// Where a history sweep of one volume has got to: the next (grain, seq) key of
/// the point history and of the range history, `None` once that table is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SweepCursor {
    pub points: Option<(GrainIndex, SnapshotSeq)>,
    pub ranges: Option<(GrainIndex, SnapshotSeq)>,
}

impl SweepCursor {
    pub const START: SweepCursor = SweepCursor {
        points: Some((GrainIndex::new(0), SnapshotSeq::new(0))),
        ranges: Some((GrainIndex::new(0), SnapshotSeq::new(0))),
    };
}

impl Engine {
    /// Destroys a volume: hosts lose it at once, its data stays recoverable for the
    /// retention period. Its snapshots go with it (and come back with it).
    pub fn delete_volume(&self, name: &str) -> Result<()> {
        let mut volumes = self.catalog.volumes.write();
        let shared = volumes
            .get(name)
            .cloned()
            .ok_or_else(|| EngineError::VolumeNotFound(name.to_string()))?;
        let now = now_unix_s();
        self.persist_volume_state(&shared, Some(now))?;
        *shared.destroyed_unix_s.lock() = Some(now);
        shared.deleted.store(true, Ordering::SeqCst);
        volumes.remove(name);
        self.catalog
            .destroyed
            .write()
            .insert(name.to_string(), shared);
        self.stats.catalog_generation.fetch_add(1, Ordering::SeqCst);
        drop(volumes);
        self.flush()
    }

    /// Brings a destroyed volume back, with its snapshots.
    pub fn recover_volume(&self, name: &str) -> Result<()> {
        let mut volumes = self.catalog.volumes.write();
        let shared = self
            .catalog
            .destroyed
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| EngineError::VolumeNotFound(format!("{name} (destroyed)")))?;
        self.persist_volume_state(&shared, None)?;
        *shared.destroyed_unix_s.lock() = None;
        shared.deleted.store(false, Ordering::SeqCst);
        self.catalog.destroyed.write().remove(name);
        volumes.insert(name.to_string(), shared);
        self.stats.catalog_generation.fetch_add(1, Ordering::SeqCst);
        drop(volumes);
        self.flush()
    }

    fn persist_volume_state(&self, shared: &VolumeShared, destroyed: Option<u64>) -> Result<()> {
        let view = shared.view.read();
        let mut rec = shared.rec(view.size_bytes);
        rec.destroyed_unix_s = destroyed;
        let mut ws = self.committer.writer.lock();
        self.transact(&mut ws, true, |st, t, _| {
            let json = serde_json::to_vec(&rec).expect("volume record serialises");
            t.volumes()?
                .insert(rec.name.as_str(), &json[..])
                .map_err(kv_error)?;
            st.records_written += 1;
            Ok(())
        })
    }

    /// Eradicates a destroyed volume now: its space goes to the reclaimer (or is
    /// retained for clones and copies that still read it).
    pub fn eradicate_volume(&self, name: &str) -> Result<()> {
        let shared = self
            .catalog
            .destroyed
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| {
                if self.catalog.volumes.read().contains_key(name) {
                    EngineError::InvalidArgument(format!(
                        "volume '{name}' is not destroyed: delete it first, then eradicate"
                    ))
                } else {
                    EngineError::VolumeNotFound(format!("{name} (destroyed)"))
                }
            })?;
        let _pins = self.catalog.pin_lock.lock();
        let theirs: Vec<_> = self.snapshots_of(shared.id);
        let needed = self.referenced_snapshots();
        for snapshot in &theirs {
            self.eradicate_snapshot_locked(snapshot, &needed)?;
        }
        let view = shared.view.write();
        let mut ws = self.committer.writer.lock();
        // Retained while any snapshot or pin of it is left: asked of the
        // volume's own list under the writer mutex, which a snapshot joins
        // under that mutex (and under the volume's view, which this holds),
        // so none committed meanwhile is missed.
        let retained = !shared.snapshot_seqs.lock().is_empty();
        let grains = grains_of(view.size_bytes);
        let rec = shared.rec(view.size_bytes);
        self.transact(&mut ws, true, |st, t, _| {
            t.volumes()?.remove(name).map_err(kv_error)?;
            if retained {
                let json = serde_json::to_vec(&rec).expect("volume record serialises");
                t.retained()?
                    .insert(rec.id.get(), &json[..])
                    .map_err(kv_error)?;
            } else {
                t.doomed()?.insert(rec.id.get(), grains).map_err(kv_error)?;
                t.doomed_containers()?
                    .insert(rec.id.get(), rec.container)
                    .map_err(kv_error)?;
            }
            st.records_written += 2;
            Ok(())
        })?;
        if shared.provisioning.is_thick() {
            let unwritten = grains - shared.bitmap.lock().count().min(grains);
            ws.thick_unwritten_grains -= unwritten;
        }
        shared.eradicated.store(true, Ordering::SeqCst);
        shared.release_usage();
        if retained {
            self.catalog
                .retained
                .lock()
                .insert(crate::ids::VolumeId::new(rec.id.get()), rec);
        } else {
            ws.doomed.insert(shared.id, grains);
            ws.doomed_containers.insert(shared.id, rec.container);
        }
        drop((ws, view));
        self.catalog.destroyed.write().remove(name);
        self.flush()?;
        self.scheduler.wake();
        Ok(())
    }

    pub(crate) fn snapshots_of(&self, volume_id: crate::ids::VolumeId) -> Vec<Arc<SnapshotShared>> {
        self.catalog
            .snapshots
            .read()
            .values()
            .filter(|s| s.volume_id == volume_id)
            .cloned()
            .collect()
    }

    /// Destroys a named snapshot (`VOL@NAME`): hidden from hosts and lists,
    /// recoverable for the retention period.
    pub fn delete_snapshot(&self, full_name: &str) -> Result<()> {
        let snapshot = self.named_snapshot(full_name)?;
        if self.snapshot_destroyed_unix_s(&snapshot).is_some() {
            return Err(EngineError::SnapshotNotFound(full_name.to_string()));
        }
        self.set_snapshot_destroyed(&snapshot, Some(now_unix_s()))
    }

    pub fn recover_snapshot(&self, full_name: &str) -> Result<()> {
        let snapshot = self.named_snapshot(full_name)?;
        self.check_volume_live(&snapshot, full_name)?;
        if snapshot.state.lock().destroyed_unix_s.is_none() {
            return Err(EngineError::InvalidArgument(format!(
                "snapshot '{full_name}' is not destroyed"
            )));
        }
        self.set_snapshot_destroyed(&snapshot, None)
    }

    /// Eradicates a destroyed snapshot now.
    pub fn eradicate_snapshot(&self, full_name: &str) -> Result<()> {
        let snapshot = self.named_snapshot(full_name)?;
        self.check_volume_live(&snapshot, full_name)?;
        if snapshot.state.lock().destroyed_unix_s.is_none() {
            return Err(EngineError::InvalidArgument(format!(
                "snapshot '{full_name}' is not destroyed: delete it first, then eradicate"
            )));
        }
        let _pins = self.catalog.pin_lock.lock();
        let needed = self.referenced_snapshots();
        self.eradicate_snapshot_locked(&snapshot, &needed)?;
        self.flush()?;
        self.scheduler.wake();
        Ok(())
    }

    /// A snapshot of a destroyed volume comes and goes with the volume.
    fn check_volume_live(&self, snapshot: &SnapshotShared, full_name: &str) -> Result<()> {
        if self.shared_volume(&snapshot.volume_name).is_ok() {
            return Ok(());
        }
        Err(EngineError::InvalidArgument(format!(
            "the volume of '{full_name}' is destroyed: its snapshots come back with it \
             (volume recover {}) and are eradicated with it",
            snapshot.volume_name
        )))
    }

    fn named_snapshot(&self, full_name: &str) -> Result<Arc<SnapshotShared>> {
        let (volume, name) = crate::versions::snapshot::split_full_name(full_name)
            .ok_or_else(|| EngineError::SnapshotNotFound(full_name.to_string()))?;
        self.find_snapshot(volume, name)
    }

    fn set_snapshot_destroyed(&self, snapshot: &SnapshotShared, at: Option<u64>) -> Result<()> {
        let mut rec = snapshot.rec();
        rec.destroyed_unix_s = at;
        self.write_snapshot_rec(&rec)?;
        snapshot.state.lock().destroyed_unix_s = at;
        self.flush()
    }

    fn write_snapshot_rec(&self, rec: &crate::versions::snapshot::SnapshotRec) -> Result<()> {
        let mut ws = self.committer.writer.lock();
        self.transact(&mut ws, true, |st, t, _| {
            let json = serde_json::to_vec(rec).expect("snapshot record serialises");
            t.snapshots()?.insert(rec.id, &json[..]).map_err(kv_error)?;
            st.records_written += 1;
            Ok(())
        })
    }

    /// Ids of the snapshots some `Ref` record still points at, in any volume's
    /// live range map or any snapshot's frozen one. The caller holds `pin_lock`, so
    /// no new reference to an unreferenced snapshot can appear meanwhile.
    pub(crate) fn referenced_snapshots(&self) -> BTreeSet<u64> {
        // Each map answers from its own index, under its lock, and no map is
        // held past it (holding one would make the next write to it copy it).
        let mut ids = BTreeSet::new();
        for v in self
            .catalog
            .volumes
            .read()
            .values()
            .chain(self.catalog.destroyed.read().values())
        {
            ids.extend(v.view.read().ranges.pinned_snapshots());
        }
        for s in self.catalog.snapshots.read().values() {
            ids.extend(s.ranges.pinned_snapshots());
        }
        ids
    }

    /// Removes a snapshot, or turns it into a pin when a reference needs it.
    fn eradicate_snapshot_locked(
        &self,
        snapshot: &Arc<SnapshotShared>,
        needed: &BTreeSet<u64>,
    ) -> Result<()> {
        if needed.contains(&snapshot.id) {
            if !snapshot.is_pin() {
                let mut rec = snapshot.rec();
                rec.name = None;
                rec.destroyed_unix_s = None;
                self.write_snapshot_rec(&rec)?;
                let mut state = snapshot.state.lock();
                state.name = None;
                state.destroyed_unix_s = None;
            }
            return Ok(());
        }
        // Looked up before the writer mutex: the volume maps rank above it.
        let volume = self.volume_by_id(snapshot.volume_id.get());
        let mut ws = self.committer.writer.lock();
        self.transact(&mut ws, true, |st, t, _| {
            t.snapshots()?.remove(snapshot.id).map_err(kv_error)?;
            st.records_written += 1;
            Ok(())
        })?;
        if let Some(volume) = &volume {
            volume.snapshot_seqs.lock().retain(|&s| s != snapshot.seq);
        }
        snapshot.gone.store(true, Ordering::SeqCst);
        // Out of the map together with its seq (see `commit_snapshots`).
        self.catalog.snapshots.write().remove(&snapshot.id);
        drop(ws);
        self.version_jobs.sweep_pending.lock().insert(
            crate::ids::VolumeId::new(snapshot.volume_id.get()),
            SweepCursor::START,
        );
        self.release_retained_if_unneeded(snapshot.volume_id)?;
        Ok(())
    }

    /// The seqs of a volume's snapshots (pins included), in order.
    fn sorted_snapshot_seqs(&self, volume_id: crate::ids::VolumeId) -> Vec<SnapshotSeq> {
        let mut seqs: Vec<SnapshotSeq> =
            self.snapshots_of(volume_id).iter().map(|s| s.seq).collect();
        seqs.sort_unstable();
        seqs
    }

    /// A live or destroyed volume by id. Both lists under their locks at
    /// once (in their order, live first): looked up one after the other, a
    /// volume being recovered or destroyed in between is in neither, and a
    /// history sweep took it for eradicated and swept with a list of its
    /// snapshots that missed the ones taken after.
    pub(crate) fn volume_by_id(&self, id: u64) -> Option<Arc<VolumeShared>> {
        let volumes = self.catalog.volumes.read();
        let destroyed = self.catalog.destroyed.read();
        crate::testing::sync_points::at(crate::testing::sync_points::Point::VolumeLookup);
        let found = volumes
            .values()
            .chain(destroyed.values())
            .find(|v| v.id == crate::ids::VolumeId::new(id));
        found.cloned()
    }

    /// A retained volume whose last snapshot went is handed to the reclaimer.
    fn release_retained_if_unneeded(&self, volume_id: crate::ids::VolumeId) -> Result<()> {
        if !self.catalog.retained.lock().contains_key(&volume_id)
            || !self.snapshots_of(volume_id).is_empty()
        {
            return Ok(());
        }
        let Some(rec) = self.catalog.retained.lock().remove(&volume_id) else {
            return Ok(());
        };
        let grains = grains_of(rec.size_bytes);
        let container = if self.catalog.containers.read().contains_key(&rec.container) {
            rec.container
        } else {
            crate::space::container::DEFAULT_CONTAINER_ID
        };
        let mut ws = self.committer.writer.lock();
        self.transact(&mut ws, false, |_, t, _| {
            t.retained()?.remove(volume_id.get()).map_err(kv_error)?;
            t.doomed()?
                .insert(volume_id.get(), grains)
                .map_err(kv_error)?;
            t.doomed_containers()?
                .insert(volume_id.get(), container)
                .map_err(kv_error)?;
            Ok(())
        })?;
        ws.doomed.insert(volume_id, grains);
        ws.doomed_containers.insert(volume_id, container);
        Ok(())
    }

    /// Background duties of the lifecycle: eradicate what outlived its retention
    /// and drop pins nothing references. Returns whether it did anything.
    pub(crate) fn lifecycle_step(&self) -> Result<bool> {
        let now = now_unix_s();
        let retention = self.config.destroy_retention_s;
        let expired = |at: Option<u64>| at.is_some_and(|at| at.saturating_add(retention) <= now);
        let volume = self
            .catalog
            .destroyed
            .read()
            .values()
            .find(|v| expired(*v.destroyed_unix_s.lock()))
            .map(|v| v.name.clone());
        if let Some(name) = volume {
            tracing::info!(volume = %name, "retention passed: eradicating");
            self.eradicate_volume(&name)?;
            return Ok(true);
        }
        let snapshot = self
            .catalog
            .snapshots
            .read()
            .values()
            .find(|s| expired(s.state.lock().destroyed_unix_s))
            .map(|s| s.display_name());
        if let Some(name) = snapshot {
            tracing::info!(snapshot = %name, "retention passed: eradicating");
            self.eradicate_snapshot(&name)?;
            return Ok(true);
        }
        let _pins = self.catalog.pin_lock.lock();
        let needed = self.referenced_snapshots();
        let unneeded_pin = self
            .catalog
            .snapshots
            .read()
            .values()
            .find(|s| s.is_pin() && !needed.contains(&s.id))
            .cloned();
        if let Some(pin) = unneeded_pin {
            self.eradicate_snapshot_locked(&pin, &needed)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// No background work is pending: no history to sweep, no deleted volume to
    /// reclaim, no pin left that nothing references (tests wait for this).
    pub fn background_idle(&self) -> bool {
        if !self.version_jobs.sweep_pending.lock().is_empty()
            || !self.committer.writer.lock().doomed.is_empty()
            || !self.version_jobs.bits_pending.lock().is_empty()
            || self.version_jobs.bits_in_progress.lock().is_some()
        {
            return false;
        }
        let _pins = self.catalog.pin_lock.lock();
        let needed = self.referenced_snapshots();
        !self
            .catalog
            .snapshots
            .read()
            .values()
            .any(|s| s.is_pin() && !needed.contains(&s.id))
    }

    /// Drops one batch of history versions of a volume that no remaining snapshot
    /// sees. Returns whether there was work.
    pub(crate) fn sweep_step(&self) -> Result<bool> {
        let Some((volume, cursor)) = self
            .version_jobs
            .sweep_pending
            .lock()
            .iter()
            .next()
            .map(|(v, c)| (*v, *c))
        else {
            return Ok(false);
        };
        // Looked up before the writer mutex: the volume maps rank above it.
        let shared = self.volume_by_id(volume.get());
        let gone_seqs = shared
            .is_none()
            .then(|| self.sorted_snapshot_seqs(crate::ids::VolumeId::new(volume.get())));
        crate::testing::sync_points::at(crate::testing::sync_points::Point::SweepBeforeWriterLock);
        let mut ws = self.committer.writer.lock();
        // Which snapshots there are is read here, under the writer mutex, from
        // the volume's own list (snapshots join and leave it under this mutex).
        // Read before it, a snapshot taken in between would be missed, and so
        // would the history versions later writes keep for it alone: the sweep
        // dropped them and the snapshot read zeroes there (crash torture).
        // A volume no longer in memory takes no writes and no snapshots, so its
        // snapshots' list can only shrink, which keeps more, never less.
        let seqs = match &shared {
            Some(shared) => shared.snapshot_seqs.lock().clone(),
            None => gone_seqs.expect("listed above for a volume not in memory"),
        };
        assert!(seqs.is_sorted(), "snapshot seqs in order");
        let next = self.transact(&mut ws, false, |st, t, _| {
            let mut next = cursor;
            if let Some(from) = cursor.points {
                let mut dead = Vec::new();
                let mut last = None;
                for item in t
                    .history()?
                    .range(
                        (volume.get(), from.0.get(), from.1.get())
                            ..=(volume.get(), u64::MAX, u64::MAX),
                    )
                    .map_err(kv_error)?
                    .take(SWEEP_BATCH)
                {
                    let (key, value) = item.map_err(kv_error)?;
                    let (_, grain, version) = key.value();
                    let (grain, version) = (GrainIndex::new(grain), SnapshotSeq::new(version));
                    let hist = HistValue::decode(value.value())?;
                    last = Some((grain, version));
                    if !schema::visible_to_any(&seqs, version, hist.died_seq) {
                        dead.push((grain, version, hist.target));
                    }
                }
                for (grain, version, target) in &dead {
                    t.history()?
                        .remove((volume.get(), grain.get(), version.get()))
                        .map_err(kv_error)?;
                    st.release_history(t, *target)?;
                }
                next.points = last.and_then(|(g, v)| successor(g, v));
                if last.is_none() {
                    next.points = None;
                }
            } else if let Some(from) = cursor.ranges {
                let mut dead = Vec::new();
                let mut last = None;
                for item in t
                    .range_history()?
                    .range(
                        (volume.get(), from.0.get(), from.1.get())
                            ..=(volume.get(), u64::MAX, u64::MAX),
                    )
                    .map_err(kv_error)?
                    .take(SWEEP_BATCH)
                {
                    let (key, value) = item.map_err(kv_error)?;
                    let (_, start, seq) = key.value();
                    let (start, seq) = (GrainIndex::new(start), SnapshotSeq::new(seq));
                    let kept = RangeHistValue::decode(value.value())?;
                    last = Some((start, seq));
                    if !schema::visible_to_any(&seqs, kept.rec.seq, kept.died_seq) {
                        dead.push((start, seq));
                    }
                }
                for (start, seq) in dead {
                    t.range_history()?
                        .remove((volume.get(), start.get(), seq.get()))
                        .map_err(kv_error)?;
                }
                next.ranges = last.and_then(|(g, v)| successor(g, v));
                if last.is_none() {
                    next.ranges = None;
                }
            }
            Ok(next)
        })?;
        drop(ws);
        let mut pending = self.version_jobs.sweep_pending.lock();
        // A newer request for the same volume (another snapshot went) restarts it.
        if pending.get(&volume) == Some(&cursor) {
            if next.points.is_none() && next.ranges.is_none() {
                pending.remove(&volume);
            } else {
                pending.insert(volume, next);
            }
        }
        Ok(true)
    }
}

/// The key after (grain, seq) in the history tables' order, if any.
fn successor(grain: GrainIndex, seq: SnapshotSeq) -> Option<(GrainIndex, SnapshotSeq)> {
    match seq.get().checked_add(1) {
        Some(seq) => Some((grain, SnapshotSeq::new(seq))),
        None => grain
            .get()
            .checked_add(1)
            .map(|grain| (GrainIndex::new(grain), SnapshotSeq::new(0))),
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::sync_points::{self, Point};
    use crate::testing::test_data::{data_dir, quiet_engine, unique_bytes};
    use crate::GRAIN_BYTES;

    use super::SweepCursor;

    /// A quiet engine with one volume `v` of 1 MiB.
    fn engine_with_volume(tag: &str) -> (tempfile::TempDir, std::sync::Arc<crate::Engine>) {
        let dir = data_dir(tag);
        let engine = quiet_engine(dir.path(), 1 << 30);
        engine.create_volume("v", 1 << 20).unwrap();
        (dir, engine)
    }

    /// A volume destroyed between a caller's lookup and its snapshot, pin or
    /// write: each is refused under the volume's view, so nothing joins a
    /// volume that eradication may be handing to the reclaimer.
    #[test]
    fn a_destroyed_volume_takes_no_snapshot_pin_or_write() {
        let (_dir, engine) = engine_with_volume("destroyed-race");
        let looked_up = engine.shared_volume("v").unwrap();
        engine.delete_volume("v").unwrap();

        let snapshot = engine.commit_snapshots(vec![(looked_up.clone(), Some("s".into()))], None);
        assert!(matches!(
            snapshot,
            Err(crate::EngineError::VolumeNotFound(_))
        ));
        let pin = engine.pin_volume(&looked_up);
        assert!(matches!(pin, Err(crate::EngineError::VolumeNotFound(_))));
        let data = unique_bytes(GRAIN_BYTES as usize, 3);
        let write = engine.write(&looked_up, 0, &data, None);
        assert!(matches!(write, Err(crate::EngineError::VolumeNotFound(_))));
        let unmap = engine.write_range(
            &looked_up,
            0,
            GRAIN_BYTES,
            crate::meta::schema::RangeKind::Hole,
        );
        assert!(matches!(unmap, Err(crate::EngineError::VolumeNotFound(_))));

        engine.eradicate_volume("v").unwrap();
        assert!(
            engine.catalog.snapshots.read().is_empty(),
            "no snapshot or pin left"
        );
        engine.check_consistency().unwrap();
        engine.close().unwrap();
    }

    /// Runs the pending history sweep steps until none is left.
    fn sweep_to_the_end(engine: &crate::Engine) {
        let mut steps = 0;
        while engine.sweep_step().unwrap() {
            steps += 1;
            assert!(steps < 100, "the sweep ends");
        }
    }

    /// Grain 0 of snapshot `name`.
    fn snapshot_grain_0(engine: &std::sync::Arc<crate::Engine>, name: &str) -> Vec<u8> {
        let snapshot = engine.open_snapshot(name).unwrap();
        let mut read = vec![0u8; GRAIN_BYTES as usize];
        snapshot.read(0, &mut read).unwrap();
        read
    }

    /// A sweep that starts while its volume is being recovered finds it, and
    /// keeps what a snapshot taken right after the recovery sees. (Before the
    /// fix the volume was looked up among live volumes, then among destroyed
    /// ones: recovered in between, it was in neither, the sweep took it for
    /// eradicated and dropped the version the snapshot sees.)
    #[test]
    fn a_sweep_finds_a_volume_recovered_as_it_starts() {
        let (_dir, engine) = engine_with_volume("sweep-recover-race");
        let volume = engine.open_volume("v").unwrap();
        let old = unique_bytes(GRAIN_BYTES as usize, 1);
        volume.write(0, &old).unwrap();
        let id = engine.shared_volume("v").unwrap().id;
        engine.delete_volume("v").unwrap();
        engine
            .version_jobs
            .sweep_pending
            .lock()
            .insert(id, SweepCursor::START);
        // The recovery runs on its own thread, given time to finish: it can
        // only once the lookup has let go of the volume lists.
        let recovery = std::sync::Arc::new(parking_lot::Mutex::new(None));
        let (hook_engine, hook_recovery) = (engine.clone(), recovery.clone());
        sync_points::set(Point::VolumeLookup, move || {
            let recovering = std::thread::spawn(move || hook_engine.recover_volume("v"));
            std::thread::sleep(std::time::Duration::from_millis(200));
            *hook_recovery.lock() = Some(recovering);
        });
        let hook_engine = engine.clone();
        sync_points::set(Point::SweepBeforeWriterLock, move || {
            let recovering = recovery.lock().take().expect("the lookup ran first");
            recovering.join().unwrap().unwrap();
            hook_engine
                .create_snapshots(&["v"], Some("s"), None)
                .unwrap();
            let volume = hook_engine.open_volume("v").unwrap();
            volume
                .write(0, &unique_bytes(GRAIN_BYTES as usize, 2))
                .unwrap();
        });

        sweep_to_the_end(&engine);

        assert!(
            snapshot_grain_0(&engine, "v@s") == old,
            "the snapshot reads what the volume held when taken"
        );
        engine.check_consistency().unwrap();
        engine.close().unwrap();
    }

    /// A snapshot taken just as a sweep of its volume starts, and a write after
    /// it: the version the write replaced is the snapshot's, and the sweep
    /// keeps it. (Before the fix the sweep listed the snapshots before taking
    /// the writer mutex, missed this one, and the snapshot read zeroes.)
    #[test]
    fn a_sweep_keeps_what_a_snapshot_taken_as_it_starts_sees() {
        let (_dir, engine) = engine_with_volume("sweep-race");
        let volume = engine.open_volume("v").unwrap();
        let old = unique_bytes(GRAIN_BYTES as usize, 1);
        volume.write(0, &old).unwrap();
        let id = engine.shared_volume("v").unwrap().id;
        // A sweep pending for the volume, as after a snapshot of it went.
        engine
            .version_jobs
            .sweep_pending
            .lock()
            .insert(id, SweepCursor::START);
        let (hook_engine, hook_volume) = (engine.clone(), volume.clone());
        sync_points::set(Point::SweepBeforeWriterLock, move || {
            hook_engine
                .create_snapshots(&["v"], Some("s"), None)
                .unwrap();
            let new = unique_bytes(GRAIN_BYTES as usize, 2);
            hook_volume.write(0, &new).unwrap();
        });

        sweep_to_the_end(&engine);

        assert!(
            snapshot_grain_0(&engine, "v@s") == old,
            "the snapshot reads what the volume held when taken"
        );
        let mut live = vec![0u8; GRAIN_BYTES as usize];
        volume.read(0, &mut live).unwrap();
        assert_eq!(live, unique_bytes(GRAIN_BYTES as usize, 2));
        engine.check_consistency().unwrap();
        engine.close().unwrap();
    }
}
