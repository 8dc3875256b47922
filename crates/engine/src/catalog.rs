//! The volume catalog: create, delete, resize and report volumes.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use crate::ids::GrainIndex;
use crate::meta::schema::{self, kv_error, BlockRec, GrainTarget, RangeKind, RangeRec};
use crate::names::{validate_name, NameKind};
use crate::space::data_bitmap::DataBitmap;
use crate::space::provisioning::Provisioning;
use crate::units::{grains_of, now_unix_s};
use crate::versions::copy::Initial;
use crate::versions::range_map::RangeMap;
use crate::write::transaction::WriterState;
use crate::{
    ArrayHealth, ArrayState, Engine, EngineError, Result, SpaceReport, VolumeInfo, VolumeShared,
    VolumeView, GRAIN_BYTES, MAX_VOLUME_BYTES, SECTOR_BYTES,
};

/// A volume's persistent record (JSON in the `volumes` table: rare writes, easy
/// to extend).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VolumeRec {
    pub id: crate::ids::VolumeId,
    pub name: String,
    pub size_bytes: u64,
    pub created_unix_s: u64,
    #[serde(default)]
    pub provisioning: Provisioning,
    /// Set while destroyed (recoverable until eradicated).
    #[serde(default)]
    pub destroyed_unix_s: Option<u64>,
    /// The storage container it belongs to.
    #[serde(default = "crate::space::container::serde_default_container")]
    pub container: u64,
}

fn validate_size(size_bytes: u64) -> Result<()> {
    if size_bytes == 0 || !size_bytes.is_multiple_of(SECTOR_BYTES) || size_bytes > MAX_VOLUME_BYTES
    {
        return Err(EngineError::InvalidArgument(format!(
            "invalid size {size_bytes}: must be a non-zero multiple of {SECTOR_BYTES} bytes, at most {MAX_VOLUME_BYTES}"
        )));
    }
    Ok(())
}

impl Engine {
    /// Creates a thin volume.
    pub fn create_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo> {
        self.create_volume_with(name, size_bytes, Provisioning::Thin)
    }

    /// Creates a volume of the given provisioning type in the default container.
    pub fn create_volume_with(
        &self,
        name: &str,
        size_bytes: u64,
        provisioning: Provisioning,
    ) -> Result<VolumeInfo> {
        self.create_volume_in(
            name,
            size_bytes,
            provisioning,
            crate::space::container::DEFAULT_CONTAINER,
        )
    }

    /// Creates a volume of the given provisioning type in `container`. Thick
    /// types reserve their size (refused when the array or the container's quota
    /// cannot honour it); eagerzeroedthick also writes one zero range record over
    /// the whole volume.
    pub fn create_volume_in(
        &self,
        name: &str,
        size_bytes: u64,
        provisioning: Provisioning,
        container: &str,
    ) -> Result<VolumeInfo> {
        let container = self.container_named(container)?;
        let initial = (provisioning == Provisioning::EagerZeroedThick).then_some(Initial {
            kind: RangeKind::Pattern(0),
            bits_from: None,
        });
        self.create_volume_inner(name, size_bytes, provisioning, initial, container)
    }

    pub(crate) fn create_volume_inner(
        &self,
        name: &str,
        size_bytes: u64,
        provisioning: Provisioning,
        initial: Option<Initial>,
        container: Arc<crate::space::container::ContainerShared>,
    ) -> Result<VolumeInfo> {
        validate_name(NameKind::Volume, name)?;
        validate_size(size_bytes)?;
        let counted_bytes = match (&initial, provisioning.is_thick()) {
            (_, true) => size_bytes,
            (Some(initial), false) => initial
                .bits_from
                .map(|(source, _)| source.bitmap.lock().count() * GRAIN_BYTES)
                .unwrap_or(0),
            (None, false) => 0,
        };
        container.check_quota(counted_bytes)?;
        let mut volumes = self.catalog.volumes.write();
        if volumes.contains_key(name) || self.catalog.destroyed.read().contains_key(name) {
            return Err(EngineError::VolumeExists(name.to_string()));
        }
        if container.deleting.load(Ordering::SeqCst) {
            return Err(EngineError::ContainerNotFound(container.name.clone()));
        }
        let mut ws = self.committer.writer.lock();
        let grains = grains_of(size_bytes);
        // The grains an initial record covers: the whole volume.
        let (first, end) = (GrainIndex::new(0), GrainIndex::new(grains));
        if provisioning.is_thick() {
            self.check_reservation(&ws, grains)?;
        }
        let (rec, ranges) = self.transact(&mut ws, true, |st, t, _| {
            st.next_volume_id = st.next_volume_id.next();
            let rec = VolumeRec {
                id: st.next_volume_id,
                name: name.to_string(),
                size_bytes,
                created_unix_s: now_unix_s(),
                provisioning,
                destroyed_unix_s: None,
                container: container.id,
            };
            let json = serde_json::to_vec(&rec).expect("volume record serialises");
            t.volumes()?.insert(name, &json[..]).map_err(kv_error)?;
            st.records_written += 1;
            let mut ranges = RangeMap::default();
            if let Some(initial) = &initial {
                let range = RangeRec {
                    end_grain: end,
                    seq: st.take_seq(),
                    kind: initial.kind,
                    reclaimed: true,
                };
                t.ranges()?
                    .insert((rec.id.get(), first.get()), &range.encode()[..])
                    .map_err(kv_error)?;
                st.records_written += 1;
                ranges.load(first, range);
            }
            Ok((rec, ranges))
        })?;
        let shared = Arc::new(volume_shared(&rec, ranges, container));
        if let Some(initial) = &initial {
            self.set_range_bits(&shared, first, end, initial.kind, initial.bits_from);
            let exact = initial
                .bits_from
                .is_some_and(|(source, _)| !self.bits_unsettled(source.id));
            if matches!(initial.kind, RangeKind::Ref { .. }) && !exact {
                let seq = shared
                    .view
                    .read()
                    .ranges
                    .find(first)
                    .expect("initial record")
                    .1
                    .seq;
                self.queue_bits(crate::versions::reference_bits::PendingBits {
                    volume: shared.id,
                    start: first,
                    end,
                    seq,
                });
            }
        }
        if provisioning.is_thick() {
            ws.thick_unwritten_grains += grains - shared.bitmap.lock().count();
        }
        shared.sync_usage(Some(size_bytes));
        drop(ws);
        volumes.insert(name.to_string(), shared.clone());
        self.stats.catalog_generation.fetch_add(1, Ordering::SeqCst);
        drop(volumes);
        // A control-plane change is durable once acknowledged.
        self.flush()?;
        Ok(self.info_of(&shared))
    }

    /// Refuses a new reservation of `grains` the array cannot honour.
    fn check_reservation(&self, ws: &WriterState, grains: u64) -> Result<()> {
        let wanted = grains * crate::space::provisioning::RESERVED_BYTES_PER_GRAIN;
        let committed = ws.live_bytes()
            + ws.reserved_bytes()
            + crate::space::provisioning::headroom_bytes(self.config.capacity_bytes);
        if committed.saturating_add(wanted) > ws.thick_limit_bytes() {
            return Err(EngineError::NoSpace(format!(
                "cannot reserve {wanted} bytes: {} of {} bytes live or reserved",
                committed,
                ws.thick_limit_bytes()
            )));
        }
        Ok(())
    }

    /// Grows or shrinks a volume. Shrinking unmaps what falls off the end (one range
    /// record) so a later grow exposes zeroes, never old data.
    pub fn resize_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo> {
        validate_size(size_bytes)?;
        let shared = self.shared_volume(name)?;
        let mut view = shared.view.write();
        let shrinks = size_bytes < view.size_bytes;
        if shrinks {
            self.cut_end(&shared, &mut view, size_bytes)?;
        }
        let mut ws = self.committer.writer.lock();
        let (old_grains, new_grains) = (grains_of(view.size_bytes), grains_of(size_bytes));
        if shared.provisioning.is_thick() && new_grains > old_grains {
            self.check_reservation(&ws, new_grains - old_grains)?;
        }
        let rec = shared.rec(size_bytes);
        self.transact(&mut ws, true, |st, t, _| {
            let json = serde_json::to_vec(&rec).expect("volume record serialises");
            t.volumes()?.insert(name, &json[..]).map_err(kv_error)?;
            st.records_written += 1;
            Ok(())
        })?;
        view.size_bytes = size_bytes;
        let mut bitmap = shared.bitmap.lock();
        let before_unwritten = old_grains - bitmap.count();
        bitmap.resize(new_grains);
        if shared.provisioning.is_thick() {
            ws.thick_unwritten_grains =
                ws.thick_unwritten_grains - before_unwritten + (new_grains - bitmap.count());
        }
        drop(bitmap);
        // Grain by grain like the data bitmap: writes and range records past
        // the old end set their bits here (a shrink's cut cleared the end).
        shared.live_mapped.lock().resize(new_grains);
        shared.sync_usage(Some(size_bytes));
        shared
            .last_change_seq
            .store(ws.next_seq.get(), Ordering::SeqCst);
        drop((ws, view));
        if shrinks {
            self.scheduler.wake();
        }
        self.flush()?;
        Ok(self.info_of(&shared))
    }

    /// Unmaps what falls off the end of a volume shrinking to `size_bytes`:
    /// the sectors past it in its last grain are zeroed, the whole grains past
    /// it get one hole record. Under the volume's view, which every write
    /// holds from its range check to its commit, so no write lands past the
    /// new end between the cut and the new size (cut first and then locked,
    /// such a write survived the cut and came back with a later grow).
    fn cut_end(
        &self,
        vol: &Arc<VolumeShared>,
        view: &mut crate::VolumeView,
        size_bytes: u64,
    ) -> Result<()> {
        assert!(size_bytes < view.size_bytes, "a shrink");
        if !size_bytes.is_multiple_of(GRAIN_BYTES) {
            self.zero_grain_tail_locked(vol, view, size_bytes)?;
        }
        let first_cut = GrainIndex::new(size_bytes.div_ceil(GRAIN_BYTES));
        let old_end = GrainIndex::new(grains_of(view.size_bytes));
        if first_cut < old_end {
            self.insert_range_locked(vol, view, first_cut, old_end, RangeKind::Hole, None)?;
        }
        Ok(())
    }

    /// A volume, live or destroyed.
    pub fn volume_info(&self, name: &str) -> Result<VolumeInfo> {
        let shared = self
            .shared_volume(name)
            .or_else(|e| self.catalog.destroyed.read().get(name).cloned().ok_or(e))?;
        Ok(self.info_of(&shared))
    }

    /// Live volumes, or destroyed ones.
    pub fn list_volumes_in(&self, destroyed: bool) -> Vec<VolumeInfo> {
        let mut all: Vec<_> = if destroyed {
            self.catalog.destroyed.read().values().cloned().collect()
        } else {
            self.catalog.volumes.read().values().cloned().collect()
        };
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all.iter().map(|v| self.info_of(v)).collect()
    }

    /// (id, name) of every live volume: cheap, for protocol layers that map LUNs.
    pub fn list_volume_names(&self) -> Vec<(u64, String)> {
        self.catalog
            .volumes
            .read()
            .values()
            .map(|v| (v.id.get(), v.name.clone()))
            .collect()
    }

    /// The id of the volume, or snapshot (`VOL@SNAP`), of this name, live or
    /// destroyed: what a grant made to the name binds to. Ids are never reused,
    /// so a grant holding one can never reach a later object of the same name.
    pub fn object_id(&self, name: &str) -> Option<u64> {
        match crate::versions::snapshot::split_full_name(name) {
            Some((volume, snapshot)) => self.find_snapshot(volume, snapshot).ok().map(|s| s.id),
            None if name.contains('@') => None,
            None => self.volume_info(name).ok().map(|v| v.id),
        }
    }

    /// Whether a volume or snapshot of this id exists, live or destroyed:
    /// false once it is eradicated (and forever after: ids are never reused).
    pub fn object_exists(&self, id: u64) -> bool {
        let volume_id = crate::ids::VolumeId::new(id);
        let is_volume = |volumes: &HashMap<String, Arc<VolumeShared>>| {
            volumes.values().any(|v| v.id == volume_id)
        };
        let snapshot = self.catalog.snapshots.read().get(&id).cloned();
        match snapshot {
            Some(s) => !s.is_pin() && !s.gone.load(Ordering::SeqCst),
            None => {
                is_volume(&self.catalog.volumes.read()) || is_volume(&self.catalog.destroyed.read())
            }
        }
    }

    pub fn list_volumes(&self) -> Vec<VolumeInfo> {
        self.list_volumes_in(false)
    }

    fn info_of(&self, shared: &VolumeShared) -> VolumeInfo {
        let destroyed_unix_s = *shared.destroyed_unix_s.lock();
        let snapshot_count = self
            .catalog
            .snapshots
            .read()
            .values()
            .filter(|s| s.volume_id == shared.id && !s.is_pin())
            .count() as u64;
        let size_bytes = shared.view.read().size_bytes;
        // Asked before the count: once no job holds the volume, its bits are final.
        let written_settling = self.bits_unsettled(shared.id);
        let written_bytes = (shared.bitmap.lock().count() * GRAIN_BYTES).min(size_bytes);
        let (unique, shared_bytes) = self.physical_of(shared.id).unwrap_or((0, 0));
        let physical = unique + shared_bytes;
        VolumeInfo {
            name: shared.name.clone(),
            id: shared.id.get(),
            size_bytes,
            written_bytes,
            written_settling,
            thin_provisioning_percent: 100.0 * (1.0 - written_bytes as f64 / size_bytes as f64),
            logical_data_bytes: written_bytes,
            unique_physical_bytes: unique,
            shared_physical_bytes: shared_bytes,
            data_reduction_ratio: if physical == 0 {
                1.0
            } else {
                written_bytes as f64 / physical as f64
            },
            created_unix_s: shared.created_unix_s,
            provisioning: shared.provisioning,
            reserved_bytes: if shared.provisioning.is_thick() {
                (grains_of(size_bytes) - shared.bitmap.lock().count().min(grains_of(size_bytes)))
                    * crate::space::provisioning::RESERVED_BYTES_PER_GRAIN
            } else {
                0
            },
            snapshot_count,
            destroyed_unix_s,
            eradicate_at_unix_s: destroyed_unix_s
                .map(|at| at.saturating_add(self.config.destroy_retention_s)),
            container: shared.container.name.clone(),
            reclaim: shared
                .reclaim
                .snapshot(self.volume_backlog_grains(shared) * GRAIN_BYTES),
        }
    }

    /// Dead grains of a volume the reclaimer has not released yet.
    pub(crate) fn volume_backlog_grains(&self, shared: &VolumeShared) -> u64 {
        shared.backlog_grains(&self.committer.writer.lock())
    }

    /// Live and destroyed (recoverable) volumes: every volume that still has a
    /// name, a view and data bits.
    pub(crate) fn named_volumes(&self) -> Vec<Arc<VolumeShared>> {
        self.catalog
            .volumes
            .read()
            .values()
            .chain(self.catalog.destroyed.read().values())
            .cloned()
            .collect()
    }

    /// (unique, shared) physical bytes of a volume's references: a block referenced
    /// once counts whole; a shared block counts its size divided by its references,
    /// so the figures of all volumes add up to the live bytes. One scan of the
    /// volume's mappings.
    fn physical_of(&self, volume: crate::ids::VolumeId) -> Result<(u64, u64)> {
        self.commit_pending_now()?;
        let txn = self.begin_read()?;
        let maps = txn.open_table(schema::MAPPINGS).map_err(kv_error)?;
        let blocks = txn.open_table(schema::BLOCKS).map_err(kv_error)?;
        let (mut unique, mut shared) = (0u64, 0f64);
        for item in
            crate::meta::point_rows::range(&maps, volume, GrainIndex::new(0), GrainIndex::MAX)?
        {
            let (_, _, value) = item?;
            let GrainTarget::Block(id) = value.target else {
                continue;
            };
            let Some(rec) = blocks.get(id.get()).map_err(kv_error)? else {
                continue;
            };
            let rec = BlockRec::decode(rec.value())?;
            if rec.refcount == 1 {
                unique += rec.record_bytes();
            } else {
                shared += rec.record_bytes() as f64 / f64::from(rec.refcount);
            }
        }
        Ok((unique, shared.round() as u64))
    }

    pub fn space(&self) -> SpaceReport {
        let (used, live, segment_count, classes, reserved, thin_limit) = {
            // Thin availability is about live data: stale space is the cleaner's.
            let ws = self.committer.writer.lock();
            (
                ws.used_bytes(),
                ws.live_bytes(),
                ws.segments.len() as u64,
                ws.class_bytes,
                ws.reserved_bytes(),
                ws.thin_limit_bytes(),
            )
        };
        let retired = self.store.retired();
        let snapshot_count = self
            .catalog
            .snapshots
            .read()
            .values()
            .filter(|s| !s.is_pin())
            .count() as u64;
        let host_written = self.stats.host_written_bytes.load(Ordering::Relaxed);
        let media_written = self.stats.media_written_bytes.load(Ordering::Relaxed);
        let volumes: Vec<_> = self.catalog.volumes.read().values().cloned().collect();
        let mut provisioned = 0;
        let mut logical = 0;
        // Asked before the counts, as in info_of.
        let unsettled = self.unsettled_volumes();
        let mut settling = 0;
        let backlog_grains: u64 = {
            let named = self.named_volumes();
            let ws = self.committer.writer.lock();
            let doomed: u64 = ws.doomed.keys().map(|&id| ws.mapping_count(id)).sum();
            doomed + named.iter().map(|v| v.backlog_grains(&ws)).sum::<u64>()
        };
        for v in &volumes {
            let view = v.view.read();
            provisioned += view.size_bytes;
            settling += u64::from(unsettled.contains(&v.id));
            logical += (v.bitmap.lock().count() * GRAIN_BYTES).min(view.size_bytes);
        }
        let capacity = self.config.capacity_bytes;
        let mut report = SpaceReport {
            capacity_bytes: capacity,
            physical_used_bytes: used,
            live_physical_bytes: live,
            stale_bytes: used - live,
            volume_unique_bytes: classes[0],
            snapshot_bytes: classes[1],
            shared_bytes: classes[2],
            reserved_bytes: reserved,
            thin_available_bytes: thin_limit.saturating_sub(live),
            soft_threshold_percent: self.config.soft_threshold_percent,
            soft_threshold_exceeded: used >= self.soft_threshold_bytes(),
            soft_threshold_events: self.stats.soft_threshold_events.load(Ordering::SeqCst),
            snapshot_count,
            destroyed_volume_count: self.catalog.destroyed.read().len() as u64,
            host_written_bytes: host_written,
            media_written_bytes: media_written,
            write_amplification: if host_written == 0 {
                0.0
            } else {
                media_written as f64 / host_written as f64
            },
            unmap_commands: self.stats.unmap_commands.load(Ordering::Relaxed),
            unmapped_bytes: self.stats.unmapped_bytes.load(Ordering::Relaxed),
            reclaimed_bytes: self
                .catalog
                .containers
                .read()
                .values()
                .map(|c| c.counters.reclaimed_bytes.load(Ordering::Relaxed))
                .sum(),
            free_bytes: capacity.saturating_sub(used),
            provisioned_bytes: provisioned,
            logical_data_bytes: logical,
            written_settling_volumes: settling,
            reclaim_backlog_bytes: backlog_grains * GRAIN_BYTES,
            reduction_backlog_bytes: self.stats.reduction_backlog_bytes.load(Ordering::Relaxed),
            reduced_bytes: self.stats.reduced_input_bytes.load(Ordering::Relaxed),
            data_reduction_ratio: if live == 0 {
                1.0
            } else {
                logical as f64 / live as f64
            },
            total_reduction_ratio: if used == 0 {
                1.0
            } else {
                provisioned as f64 / used as f64
            },
            volume_count: volumes.len() as u64,
            segment_count,
            cleaned_segments: self.stats.cleaned_segments.load(Ordering::Relaxed),
            relocated_bytes: self.stats.relocated_bytes.load(Ordering::Relaxed),
            writer_cleans: self.stats.writer_cleans.load(Ordering::Relaxed),
            punched_bytes: self.stats.punched_bytes.load(Ordering::Relaxed),
            reusable_freed_bytes: retired.kept_bytes,
            reused_segment_files: retired.reused_files,
            checksum_errors: self.stats.checksum_errors.load(Ordering::Relaxed),
            read_errors: self.stats.read_errors.load(Ordering::Relaxed),
            health: ArrayHealth::default(),
        };
        report.health = self.health_of(&report);
        report
    }

    /// The array's state: fenced, read-only, degraded or ok, with the reasons.
    pub fn health(&self) -> ArrayHealth {
        self.space().health
    }

    fn health_of(&self, space: &SpaceReport) -> ArrayHealth {
        // Less room than one large host write: new data is refused.
        const READ_ONLY_BELOW_BYTES: u64 = 1 << 20;
        let mut reasons: Vec<(ArrayState, String)> = Vec::new();
        if let Some(why) = self.committer.fenced.lock().clone() {
            reasons.push((
                ArrayState::Fenced,
                format!("a write could not be kept ({why}); restart the daemon to recover to the last flush"),
            ));
        }
        if space.thin_available_bytes < READ_ONLY_BELOW_BYTES {
            reasons.push((
                ArrayState::ReadOnly,
                format!(
                    "less than 1 MiB left for new data ({} free of {}, {} reserved): free some (eradicate, unmap) or add capacity",
                    space.free_bytes, space.capacity_bytes, space.reserved_bytes
                ),
            ));
        }
        if space.checksum_errors > 0 || space.read_errors > 0 {
            reasons.push((
                ArrayState::Degraded,
                format!(
                    "{} records failed their checksum and {} segment reads failed since the daemon started (run a scrub)",
                    space.checksum_errors, space.read_errors
                ),
            ));
        }
        if space.soft_threshold_exceeded {
            reasons.push((
                ArrayState::Degraded,
                format!(
                    "physical use is past the soft threshold of {}% of capacity",
                    space.soft_threshold_percent
                ),
            ));
        }
        reasons.sort_by_key(|(state, _)| *state);
        ArrayHealth {
            state: reasons.first().map_or(ArrayState::Ok, |(state, _)| *state),
            reasons: reasons.into_iter().map(|(_, why)| why).collect(),
        }
    }
}

pub(crate) fn volume_shared(
    rec: &VolumeRec,
    ranges: RangeMap,
    container: Arc<crate::space::container::ContainerShared>,
) -> VolumeShared {
    assert_eq!(rec.container, container.id);
    VolumeShared {
        id: rec.id,
        name: rec.name.clone(),
        created_unix_s: rec.created_unix_s,
        provisioning: rec.provisioning,
        deleted: AtomicBool::new(rec.destroyed_unix_s.is_some()),
        eradicated: AtomicBool::new(false),
        destroyed_unix_s: Mutex::new(rec.destroyed_unix_s),
        view: RwLock::new(VolumeView {
            size_bytes: rec.size_bytes,
            ranges: Arc::new(ranges),
        }),
        bitmap: Mutex::new(DataBitmap::new(grains_of(rec.size_bytes))),
        snapshot_seqs: Mutex::new(Vec::new()),
        last_change_seq: AtomicU64::new(0),
        container,
        live_mapped: Mutex::new(DataBitmap::new(grains_of(rec.size_bytes))),
        reclaim: Default::default(),
        reclaim_cursor: Mutex::new(None),
        counted_grains: AtomicU64::new(0),
    }
}

impl VolumeShared {
    /// Refuses anything aimed at a destroyed volume. Under the volume's view
    /// (writes, range records, snapshots and pins check it there) it also
    /// keeps out of a volume that eradication, which holds the view for
    /// writing, is handing to the reclaimer: its mappings would never be
    /// freed, its snapshots' data would be, and a thick volume's reservation
    /// would be given back twice.
    pub(crate) fn ensure_live(&self) -> Result<()> {
        if self.deleted.load(Ordering::SeqCst) {
            return Err(EngineError::VolumeNotFound(self.name.clone()));
        }
        Ok(())
    }

    /// The persistent record of this volume at `size_bytes`.
    pub(crate) fn rec(&self, size_bytes: u64) -> VolumeRec {
        VolumeRec {
            id: self.id,
            name: self.name.clone(),
            size_bytes,
            created_unix_s: self.created_unix_s,
            provisioning: self.provisioning,
            destroyed_unix_s: *self.destroyed_unix_s.lock(),
            container: self.container.id,
        }
    }

    /// Brings its container's usage (what the quota counts) up to date: a thin
    /// volume counts its data grains, a thick one its whole size (`size_bytes`,
    /// passed by callers that may hold the view lock; `None` leaves a thick
    /// volume's count as it is). Called after every change of data bits; none
    /// once eradicated, when its usage left the container for good (a step
    /// settling its bits, begun before, put it back).
    pub(crate) fn sync_usage(&self, size_bytes: Option<u64>) {
        if self.eradicated.load(Ordering::SeqCst) {
            return;
        }
        let counted = if self.provisioning.is_thick() {
            match size_bytes {
                Some(size) => grains_of(size),
                None => return,
            }
        } else {
            self.bitmap.lock().count()
        };
        let before = self.counted_grains.swap(counted, Ordering::SeqCst);
        self.container.add_used_grains(counted, before);
    }

    /// Dead grains not yet reclaimed: its mapping records less those still
    /// current (both changed only under the writer mutex, held by the caller).
    /// None once it is eradicated: it stays listed among the destroyed
    /// volumes for a moment after the writer mutex hands its records to the
    /// reclaimer (or to its snapshots), which may remove them meanwhile, and
    /// they count as the doomed volume's (a reclaim step that counted them
    /// here too found fewer records than live grains, and its thread died of
    /// the overflow).
    pub(crate) fn backlog_grains(&self, ws: &WriterState) -> u64 {
        if self.eradicated.load(Ordering::SeqCst) {
            return 0;
        }
        let live_grains = self.live_mapped.lock().count();
        ws.mapping_count(self.id)
            .checked_sub(live_grains)
            .expect("a volume's live grains all have mapping records")
    }

    /// Takes the volume out of its container's usage (eradicated).
    pub(crate) fn release_usage(&self) {
        let before = self.counted_grains.swap(0, Ordering::SeqCst);
        self.container.add_used_grains(0, before);
    }
}

/// The objects the array holds: volumes (live and destroyed), the data eradicated
/// volumes leave for snapshots, snapshots and storage containers.
pub(crate) struct Catalog {
    pub volumes: RwLock<HashMap<String, Arc<VolumeShared>>>,
    /// Storage containers by id (lock before `volumes`).
    pub containers: RwLock<BTreeMap<u64, Arc<crate::space::container::ContainerShared>>>,
    /// Serialises container create/set/delete. Their durable writes take the
    /// writer mutex (the write batches' open transaction is committed first:
    /// redb has one writer at a time); lock this one first.
    pub container_admin: Mutex<()>,
    /// Destroyed volumes, recoverable until eradicated.
    pub destroyed: RwLock<HashMap<String, Arc<VolumeShared>>>,
    /// Eradicated volumes whose data snapshots (pins) still need: id → record.
    pub retained: Mutex<BTreeMap<crate::ids::VolumeId, VolumeRec>>,
    pub snapshots: RwLock<BTreeMap<u64, Arc<crate::versions::snapshot::SnapshotShared>>>,
    /// Serialises taking pins with dropping unreferenced ones.
    pub pin_lock: Mutex<()>,
}

#[cfg(test)]
mod tests {
    use crate::testing::test_data::{data_dir, quiet_engine, unique_bytes};
    use crate::GRAIN_BYTES;
    use std::sync::atomic::Ordering;

    const G: u64 = GRAIN_BYTES;

    /// The health says what the array can do: ok, degraded past the soft
    /// threshold, read-only when full, fenced (worst first) once a write could
    /// not be kept, and I/O is then refused.
    #[test]
    fn health_names_the_worst_state_first_with_its_reasons() {
        use crate::ArrayState;
        let dir = data_dir("health");
        let engine = quiet_engine(dir.path(), 64 << 20);
        assert_eq!(engine.health().state, ArrayState::Ok);
        assert!(engine.health().reasons.is_empty());
        engine.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
        let degraded = engine.health();
        assert_eq!(degraded.state, ArrayState::Degraded, "{degraded:?}");
        assert!(
            degraded.reasons[0].contains("1 records failed"),
            "{degraded:?}"
        );
        engine.create_volume("v", 256 << 20).unwrap();
        let volume = engine.open_volume("v").unwrap();
        let mut offset = 0;
        while volume.write(offset, &unique_bytes(1 << 20, offset)).is_ok() {
            offset += 1 << 20;
            assert!(offset < 256 << 20, "the array never filled");
        }
        let full = engine.health();
        assert_eq!(full.state, ArrayState::ReadOnly, "{full:?}");
        assert!(full.reasons[0].contains("left for new data"), "{full:?}");
        assert!(
            full.reasons.iter().any(|r| r.contains("checksum")),
            "{full:?}"
        );
        engine
            .committer
            .fence(&crate::EngineError::InvalidArgument("test".into()));
        let fenced = engine.health();
        assert_eq!(fenced.state, ArrayState::Fenced, "{fenced:?}");
        assert!(fenced.reasons[0].contains("restart"), "{fenced:?}");
        assert_eq!(engine.space().health, fenced);
    }

    /// A volume grown takes writes, unmaps and a shrink in what it gained,
    /// and its counts stay right. (Before the fix the grow left the bitmap of
    /// its live mappings at the old size, and the first write past the old
    /// end panicked under the writer mutex.)
    #[test]
    fn a_grown_volume_takes_writes_and_range_records_past_its_old_end() {
        let dir = data_dir("grown");
        let engine = quiet_engine(dir.path(), 1 << 30);
        engine.create_volume("v", 64 * G).unwrap();
        let volume = engine.open_volume("v").unwrap();
        volume.write(0, &unique_bytes(64 * G as usize, 1)).unwrap();
        engine.resize_volume("v", 256 * G).unwrap();

        let gained = unique_bytes(128 * G as usize, 2);
        volume.write(64 * G, &gained).unwrap();
        volume.write(200 * G, &unique_bytes(G as usize, 3)).unwrap();
        volume.unmap(100 * G, 50 * G).unwrap();
        engine.resize_volume("v", 120 * G).unwrap();

        let mut read = vec![0u8; 56 * G as usize];
        volume.read(64 * G, &mut read).unwrap();
        let (kept, unmapped) = read.split_at(36 * G as usize);
        assert!(kept == &gained[..36 * G as usize]);
        assert!(unmapped.iter().all(|&b| b == 0));
        engine.resize_volume("v", 256 * G).unwrap();
        let mut tail = vec![0xFFu8; 136 * G as usize];
        volume.read(120 * G, &mut tail).unwrap();
        assert!(
            tail.iter().all(|&b| b == 0),
            "a grow after a shrink shows zeroes"
        );
        engine.check_consistency().unwrap();
    }
}
