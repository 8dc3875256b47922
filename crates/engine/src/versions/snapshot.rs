//! Snapshots: a volume at a seq.
//!
//! Taking one writes one record and freezes the volume's range map by sharing it
//! (copy on write), so it costs the same whatever the volume holds. From then on
//! the write path keeps, in the history table, each live mapping it replaces that
//! the snapshot can still see (see [`crate::meta::schema::visible_to_any`]); reading the
//! snapshot takes the live mapping when it is old enough, else the one history
//! version alive at the snapshot's seq.
//!
//! A group snapshot takes every member at one seq under the writer mutex: writes
//! are ordered by seq, so no member can show a write that another member misses
//! when the writes were ordered. Names are checked before (prepare); the commit
//! holds writes only while it assigns the seq and writes the records.
//!
//! Pins are unnamed snapshots that hold a source version for clones, range copies
//! and reverts; they go when nothing references them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::meta::schema::kv_error;
use crate::names::{validate_name, NameKind};
use crate::space::report::Extent;
use crate::units::now_unix_s;
use crate::versions::range_map::RangeMap;
use crate::{Engine, EngineError, Result, VolumeShared};

/// A snapshot's persistent record (JSON in the `snapshots` table).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotRec {
    pub id: u64,
    pub volume_id: crate::ids::VolumeId,
    pub volume_name: String,
    /// `None` for pins.
    pub name: Option<String>,
    pub seq: crate::ids::SnapshotSeq,
    pub size_bytes: u64,
    pub created_unix_s: u64,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub destroyed_unix_s: Option<u64>,
}

/// What can change in a snapshot after it is taken.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotState {
    pub name: Option<String>,
    pub group: Option<String>,
    pub destroyed_unix_s: Option<u64>,
}

/// A snapshot in memory.
pub(crate) struct SnapshotShared {
    pub id: u64,
    pub volume_id: crate::ids::VolumeId,
    pub volume_name: String,
    pub seq: crate::ids::SnapshotSeq,
    pub size_bytes: u64,
    pub created_unix_s: u64,
    /// The volume's range records as they were at `seq`.
    pub ranges: Arc<RangeMap>,
    pub state: Mutex<SnapshotState>,
    /// Set once eradicated: handles still open fail.
    pub gone: AtomicBool,
}

impl SnapshotShared {
    pub fn from_rec(rec: &SnapshotRec, ranges: Arc<RangeMap>) -> Self {
        SnapshotShared {
            id: rec.id,
            volume_id: rec.volume_id,
            volume_name: rec.volume_name.clone(),
            seq: rec.seq,
            size_bytes: rec.size_bytes,
            created_unix_s: rec.created_unix_s,
            ranges,
            state: Mutex::new(SnapshotState {
                name: rec.name.clone(),
                group: rec.group.clone(),
                destroyed_unix_s: rec.destroyed_unix_s,
            }),
            gone: AtomicBool::new(false),
        }
    }

    pub fn rec(&self) -> SnapshotRec {
        let state = self.state.lock().clone();
        SnapshotRec {
            id: self.id,
            volume_id: self.volume_id,
            volume_name: self.volume_name.clone(),
            name: state.name,
            seq: self.seq,
            size_bytes: self.size_bytes,
            created_unix_s: self.created_unix_s,
            group: state.group,
            destroyed_unix_s: state.destroyed_unix_s,
        }
    }

    /// `VOL@NAME`, or `VOL@#ID` for a pin.
    pub fn display_name(&self) -> String {
        match &self.state.lock().name {
            Some(name) => format!("{}@{name}", self.volume_name),
            None => format!("{}@#{}", self.volume_name, self.id),
        }
    }

    pub fn is_pin(&self) -> bool {
        self.state.lock().name.is_none()
    }
}

/// One named snapshot.
// As the control plane sees it (its doc comments are the API's descriptions,
// see `space::report`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotInfo {
    /// Internal snapshot number, never reused
    pub id: u64,
    /// The volume it is a snapshot of
    pub volume: String,
    pub name: String,
    /// VOL@NAME: the read-only NBD export name and the clone/restore source syntax
    pub full_name: String,
    /// The volume's size when the snapshot was taken
    pub size_bytes: u64,
    /// Creation time, seconds since the Unix epoch
    pub created_unix_s: u64,
    /// Consistency group it was taken in, if any
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub group: Option<String>,
    /// When it was destroyed; null while live
    // Set while destroyed (recoverable).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub destroyed_unix_s: Option<u64>,
    /// When a destroyed snapshot is eradicated automatically; null while live
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub eradicate_at_unix_s: Option<u64>,
}

/// The snapshots taken at one instant, and how long it took.
// The result of taking snapshots: one, or a consistency group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupSnapshot {
    pub snapshots: Vec<SnapshotInfo>,
    /// Checks and name resolution before the commit, in microseconds (writes flow meanwhile)
    pub prepare_us: u64,
    /// How long writes to the member volumes were held, in microseconds
    // From taking the writer mutex to releasing it.
    pub commit_window_us: u64,
}

/// A read-only handle on a snapshot (exported as `VOL@NAME`).
#[derive(Clone)]
pub struct Snapshot {
    engine: Arc<Engine>,
    shared: Arc<SnapshotShared>,
}

impl Snapshot {
    /// Stable id, unique in the array (never reused).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    pub(crate) fn shared(&self) -> &Arc<SnapshotShared> {
        &self.shared
    }

    pub fn full_name(&self) -> String {
        self.shared.display_name()
    }

    fn live(&self) -> Result<()> {
        let destroyed = self.shared.state.lock().destroyed_unix_s.is_some();
        if self.shared.gone.load(Ordering::SeqCst) || destroyed {
            return Err(EngineError::SnapshotNotFound(self.full_name()));
        }
        Ok(())
    }

    pub fn size_bytes(&self) -> Result<u64> {
        self.live()?;
        Ok(self.shared.size_bytes)
    }

    pub fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        self.live()?;
        self.engine.read_snapshot(&self.shared, offset_bytes, buf)
    }

    /// [`Snapshot::read`], unless it would have to wait for the disk (see
    /// [`crate::Volume::read_from_memory`]).
    pub fn read_from_memory(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<bool> {
        crate::from_memory(|| self.read(offset_bytes, buf))
    }

    pub fn extents(&self, offset_bytes: u64, length_bytes: u64) -> Result<Vec<Extent>> {
        self.live()?;
        self.engine
            .snapshot_extents(&self.shared, offset_bytes, length_bytes)
    }
}

/// A batch of snapshots names some volume, and a valid group if any.
fn check_batch(volumes: usize, group: Option<&str>) -> Result<()> {
    if volumes == 0 {
        return Err(EngineError::InvalidArgument("no volume to snapshot".into()));
    }
    if let Some(group) = group {
        validate_name(NameKind::Group, group)?;
    }
    Ok(())
}

/// Splits `VOL@NAME`.
pub fn split_full_name(full: &str) -> Option<(&str, &str)> {
    let (volume, name) = full.split_once('@')?;
    (!volume.is_empty() && !name.is_empty()).then_some((volume, name))
}

impl Engine {
    pub(crate) fn snapshot_by_id(&self, id: u64) -> Option<Arc<SnapshotShared>> {
        self.catalog.snapshots.read().get(&id).cloned()
    }

    /// A named snapshot of a volume, destroyed or not.
    pub(crate) fn find_snapshot(&self, volume: &str, name: &str) -> Result<Arc<SnapshotShared>> {
        self.catalog
            .snapshots
            .read()
            .values()
            .find(|s| s.volume_name == volume && s.state.lock().name.as_deref() == Some(name))
            .cloned()
            .ok_or_else(|| EngineError::SnapshotNotFound(format!("{volume}@{name}")))
    }

    /// Opens `VOL@NAME` for reading.
    pub fn open_snapshot(self: &Arc<Self>, full_name: &str) -> Result<Snapshot> {
        let (volume, name) = split_full_name(full_name)
            .ok_or_else(|| EngineError::SnapshotNotFound(full_name.to_string()))?;
        self.shared_volume(volume)
            .map_err(|_| EngineError::SnapshotNotFound(full_name.to_string()))?;
        let shared = self.find_snapshot(volume, name)?;
        let snapshot = Snapshot {
            engine: self.clone(),
            shared,
        };
        snapshot.live()?;
        Ok(snapshot)
    }

    /// Takes a snapshot of each named volume at one instant with respect to writes.
    /// With several volumes (or a group name) it is a consistency group: every
    /// snapshot gets the same name, the group's, unless `name` is given.
    pub fn create_snapshots(
        &self,
        volumes: &[&str],
        name: Option<&str>,
        group: Option<&str>,
    ) -> Result<GroupSnapshot> {
        let prepare_started = Instant::now();
        check_batch(volumes.len(), group)?;
        let name = match (name, group) {
            (Some(n), _) => n.to_string(),
            (None, Some(g)) => g.to_string(),
            (None, None) => format!("snap-{}", now_unix_s()),
        };
        let named: Vec<(&str, &str)> = volumes.iter().map(|v| (*v, name.as_str())).collect();
        self.take_snapshots(&named, group, prepare_started)
    }

    /// Takes a snapshot of each (volume, snapshot name) pair at one instant
    /// with respect to writes, each under its own name: what a batch of vVol
    /// snapshots commits. All or none.
    pub fn create_named_snapshots(
        &self,
        named: &[(&str, &str)],
        group: Option<&str>,
    ) -> Result<GroupSnapshot> {
        check_batch(named.len(), group)?;
        self.take_snapshots(named, group, Instant::now())
    }

    fn take_snapshots(
        &self,
        named: &[(&str, &str)],
        group: Option<&str>,
        prepare_started: Instant,
    ) -> Result<GroupSnapshot> {
        let mut members: Vec<(Arc<VolumeShared>, Option<String>)> = Vec::new();
        for (volume, name) in named {
            validate_name(NameKind::Snapshot, name)?;
            let shared = self.shared_volume(volume)?;
            if members.iter().any(|(m, _)| m.id == shared.id) {
                return Err(EngineError::InvalidArgument(format!(
                    "volume '{volume}' named twice"
                )));
            }
            if self.find_snapshot(volume, name).is_ok() {
                return Err(EngineError::SnapshotExists(format!("{volume}@{name}")));
            }
            members.push((shared, Some(name.to_string())));
        }
        let prepare_us = prepare_started.elapsed().as_micros() as u64;
        let (taken, window) = self.commit_snapshots(members, group.map(str::to_string))?;
        self.flush()?;
        Ok(GroupSnapshot {
            snapshots: taken.iter().map(|s| self.snapshot_info(s)).collect(),
            prepare_us,
            commit_window_us: window.as_micros() as u64,
        })
    }

    /// The commit of a (group) snapshot: one seq and one transaction for all
    /// members, with their views held so no range operation slips in between.
    /// Returns the snapshots and how long writes were held.
    pub(crate) fn commit_snapshots(
        &self,
        mut members: Vec<(Arc<VolumeShared>, Option<String>)>,
        group: Option<String>,
    ) -> Result<(Vec<Arc<SnapshotShared>>, Duration)> {
        members.sort_by_key(|(m, _)| m.id);
        // The host writes' open transaction is committed before the window,
        // not in it: under writes it held the window at milliseconds (bench
        // vvols.py, 16 disks under I/O); what arrives meanwhile is little.
        self.commit_pending_now()?;
        let views: Vec<_> = members.iter().map(|(m, _)| m.view.read()).collect();
        let mut ws = self.committer.writer.lock();
        // Writes are held from here (the writer mutex) until it is released.
        let held_since = Instant::now();
        // Under the members' views: a snapshot either commits before an
        // eradication (and keeps the volume retained) or is refused.
        for (member, _) in &members {
            member.ensure_live()?;
        }
        let created_unix_s = now_unix_s();
        let recs = self.transact(&mut ws, true, |st, t, _| {
            let seq = st.take_seq();
            let mut recs = Vec::with_capacity(members.len());
            for ((volume, name), view) in members.iter().zip(&views) {
                st.next_volume_id = st.next_volume_id.next();
                let rec = SnapshotRec {
                    id: st.next_volume_id.get(),
                    volume_id: volume.id,
                    volume_name: volume.name.clone(),
                    name: name.clone(),
                    seq,
                    size_bytes: view.size_bytes,
                    created_unix_s,
                    group: group.clone(),
                    destroyed_unix_s: None,
                };
                let json = serde_json::to_vec(&rec).expect("snapshot record serialises");
                t.snapshots()?.insert(rec.id, &json[..]).map_err(kv_error)?;
                st.records_written += 1;
                recs.push(rec);
            }
            Ok(recs)
        })?;
        let mut taken = Vec::with_capacity(recs.len());
        for (rec, ((volume, _), view)) in recs.iter().zip(members.iter().zip(&views)) {
            let mut seqs = volume.snapshot_seqs.lock();
            assert!(seqs.last().is_none_or(|&last| last < rec.seq));
            seqs.push(rec.seq);
            taken.push(Arc::new(SnapshotShared::from_rec(rec, view.ranges.clone())));
        }
        // In the map before the writer mutex goes, together with the seqs:
        // whatever decides from the map what is still needed (pins a frozen
        // range map references, a volume's snapshots at eradication) must
        // not see a snapshot's seq without the snapshot.
        let mut all = self.catalog.snapshots.write();
        for s in &taken {
            all.insert(s.id, s.clone());
        }
        drop(all);
        drop(ws);
        let window = held_since.elapsed();
        drop(views);
        Ok((taken, window))
    }

    /// When the snapshot was destroyed: its own deletion, or its volume's. One
    /// rule everywhere: a destroyed volume's snapshots are destroyed with it
    /// (hidden from hosts and live lists, no source for a clone, copy or
    /// restore, eradicated with it) until the volume is recovered.
    pub(crate) fn snapshot_destroyed_unix_s(&self, s: &SnapshotShared) -> Option<u64> {
        let own = s.state.lock().destroyed_unix_s;
        own.or_else(|| {
            let volume = self
                .catalog
                .destroyed
                .read()
                .get(&s.volume_name)
                .filter(|v| v.id == s.volume_id)
                .cloned()?;
            let at = *volume.destroyed_unix_s.lock();
            at
        })
    }

    pub(crate) fn snapshot_info(&self, s: &SnapshotShared) -> SnapshotInfo {
        let mut state = s.state.lock().clone();
        state.destroyed_unix_s = self.snapshot_destroyed_unix_s(s);
        let name = state.name.unwrap_or_else(|| format!("#{}", s.id));
        SnapshotInfo {
            id: s.id,
            volume: s.volume_name.clone(),
            full_name: format!("{}@{name}", s.volume_name),
            name,
            size_bytes: s.size_bytes,
            created_unix_s: s.created_unix_s,
            group: state.group,
            destroyed_unix_s: state.destroyed_unix_s,
            eradicate_at_unix_s: state
                .destroyed_unix_s
                .map(|at| at.saturating_add(self.config.destroy_retention_s)),
        }
    }

    /// Named snapshots, of one volume or all, in creation order. Destroyed ones
    /// only when asked; snapshots of destroyed volumes are listed with them.
    pub fn list_snapshots(
        &self,
        volume: Option<&str>,
        destroyed: bool,
    ) -> Result<Vec<SnapshotInfo>> {
        if let Some(volume) = volume {
            if self.shared_volume(volume).is_err()
                && !self.catalog.destroyed.read().contains_key(volume)
            {
                return Err(EngineError::VolumeNotFound(volume.to_string()));
            }
        }
        let all: Vec<_> = self.catalog.snapshots.read().values().cloned().collect();
        let live_volumes = self.catalog.volumes.read();
        Ok(all
            .iter()
            .filter(|s| !s.is_pin())
            .filter(|s| volume.is_none_or(|v| s.volume_name == v))
            .filter(|s| {
                let hidden = s.state.lock().destroyed_unix_s.is_some()
                    || !live_volumes.contains_key(&s.volume_name);
                hidden == destroyed
            })
            .map(|s| self.snapshot_info(s))
            .collect())
    }

    /// A snapshot of `volume` holding its current content: the newest snapshot if
    /// nothing changed since, else a new pin. The caller holds `pin_lock`.
    pub(crate) fn pin_volume(&self, volume: &Arc<VolumeShared>) -> Result<Arc<SnapshotShared>> {
        let size_bytes = volume.view.read().size_bytes;
        let last_change =
            crate::ids::SnapshotSeq::new(volume.last_change_seq.load(Ordering::SeqCst));
        let newest = self
            .catalog
            .snapshots
            .read()
            .values()
            .filter(|s| s.volume_id == volume.id && !s.gone.load(Ordering::SeqCst))
            .max_by_key(|s| s.seq)
            .cloned();
        if let Some(newest) = newest {
            if newest.seq >= last_change && newest.size_bytes == size_bytes {
                return Ok(newest);
            }
        }
        let (mut taken, _) = self.commit_snapshots(vec![(volume.clone(), None)], None)?;
        Ok(taken.pop().expect("one pin"))
    }
}
