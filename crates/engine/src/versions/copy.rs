//! Clones, range copies (the engine side of SCSI EXTENDED COPY) and reverts, all
//! as `Ref` range records: "these grains read as those grains of that snapshot".
//! Each writes O(1) records whatever the data beneath; the source version is held
//! by a snapshot (a pin when the caller named none).
//!
//! Only grain-aligned parts can be references. A copy whose source and
//! destination offsets differ in alignment within a grain is copied as data, in
//! bounded chunks, read from the pin so it is still a point-in-time copy.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::ids::{GrainIndex, SnapshotSeq};
use crate::meta::schema::RangeKind;
use crate::units::check_range;
use crate::units::grains_of;
use crate::versions::snapshot::{split_full_name, SnapshotShared};
use crate::{Engine, EngineError, Provisioning, Result, VolumeInfo, VolumeShared, GRAIN_BYTES};

/// What a new volume starts as: empty, or covered by one range record (zeroes
/// for eagerzeroedthick, a reference for a clone).
pub(crate) struct Initial<'a> {
    pub kind: RangeKind,
    pub bits_from: Option<(&'a VolumeShared, GrainIndex)>,
}

/// Bytes moved per step when a copy has to move data.
const DATA_COPY_CHUNK_BYTES: u64 = 1 << 20;

/// What a range copy did.
// Its doc comments are the API's descriptions (see `space::report`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CopyReport {
    /// Bytes copied by reference (metadata only)
    pub referenced_bytes: u64,
    /// Bytes copied as data (unaligned edges or mismatched alignment within a 4 KiB grain)
    pub data_bytes: u64,
}

impl Engine {
    /// The snapshot a clone or restore reads: `VOL@NAME`, or `VOL` pinned now.
    fn resolve_source(
        &self,
        source: &str,
    ) -> Result<(Arc<SnapshotShared>, Option<Arc<VolumeShared>>)> {
        match split_full_name(source) {
            Some((volume, name)) => {
                let snapshot = self.find_snapshot(volume, name)?;
                if self.snapshot_destroyed_unix_s(&snapshot).is_some() {
                    return Err(EngineError::SnapshotNotFound(source.to_string()));
                }
                let live = self.shared_volume(volume).ok();
                let current = live.as_ref().filter(|v| {
                    snapshot.seq >= SnapshotSeq::new(v.last_change_seq.load(Ordering::SeqCst))
                });
                Ok((snapshot.clone(), current.cloned()))
            }
            None => {
                let volume = self.shared_volume(source)?;
                let pin = self.pin_volume(&volume)?;
                Ok((pin, Some(volume)))
            }
        }
    }

    /// Creates `name` as a writable clone of `source` (`VOL` or `VOL@SNAP`):
    /// instant, and independent from then on. It joins the source's container.
    pub fn clone_volume(
        &self,
        source: &str,
        name: &str,
        provisioning: Provisioning,
    ) -> Result<VolumeInfo> {
        self.clone_volume_in(source, name, provisioning, None)
    }

    /// [`Engine::clone_volume`] into a chosen container.
    pub fn clone_volume_in(
        &self,
        source: &str,
        name: &str,
        provisioning: Provisioning,
        container: Option<&str>,
    ) -> Result<VolumeInfo> {
        let container = match container {
            Some(c) => Some(self.container_named(c)?),
            None => None,
        };
        let _pins = self.catalog.pin_lock.lock();
        let (snapshot, current) = self.resolve_source(source)?;
        self.check_ref_depth(&snapshot)?;
        let initial = Initial {
            kind: RangeKind::Ref {
                snapshot: snapshot.id,
                delta: 0,
            },
            bits_from: current.as_deref().map(|v| (v, GrainIndex::new(0))),
        };
        let container = match container {
            Some(c) => c,
            None => self.container_of_volume(snapshot.volume_id),
        };
        self.create_volume_inner(
            name,
            snapshot.size_bytes,
            provisioning,
            Some(initial),
            container,
        )
    }

    /// Refuses a reference that would make reads follow too long a chain.
    fn check_ref_depth(&self, snapshot: &SnapshotShared) -> Result<()> {
        self.check_ref_depth_in(snapshot, GrainIndex::new(0), GrainIndex::MAX)
    }

    /// Same, counting only the references that overlap grains [first, end) of
    /// the snapshot — the ones a copy of that range can reach.
    fn check_ref_depth_in(
        &self,
        snapshot: &SnapshotShared,
        first: GrainIndex,
        end: GrainIndex,
    ) -> Result<()> {
        let mut memo = std::collections::HashMap::new();
        let mut depth = 0;
        for (_, rec) in snapshot.ranges.overlapping(first, end) {
            if let Some(id) = rec.kind.pinned_snapshot() {
                depth = depth.max(self.snapshot_depth(id, &mut memo));
            }
        }
        if depth + 1 >= crate::versions::resolve::MAX_REF_DEPTH {
            return Err(EngineError::InvalidArgument(format!(
                "'{}' is already {depth} references deep (clones of clones or copies of copies); \
                 the limit is {}",
                snapshot.display_name(),
                crate::versions::resolve::MAX_REF_DEPTH
            )));
        }
        Ok(())
    }

    /// The longest chain of references starting at snapshot `id`. Each
    /// snapshot's depth is worked out once (`memo`): repeated copies within one
    /// volume make pins that refer to earlier pins, a graph that, walked as a
    /// tree, doubles its cost with every copy.
    fn snapshot_depth(&self, id: u64, memo: &mut std::collections::HashMap<u64, u32>) -> u32 {
        if let Some(&depth) = memo.get(&id) {
            return depth;
        }
        // At the limit while in progress: a cycle (which versions cannot form)
        // would stop here instead of looping.
        memo.insert(id, crate::versions::resolve::MAX_REF_DEPTH);
        let mut deepest = 0;
        if let Some(target) = self.snapshot_by_id(id) {
            for (_, rec) in target.ranges.iter() {
                if let Some(next) = rec.kind.pinned_snapshot() {
                    deepest = deepest.max(self.snapshot_depth(next, memo));
                    if deepest >= crate::versions::resolve::MAX_REF_DEPTH {
                        break;
                    }
                }
            }
        }
        let depth = (deepest + 1).min(crate::versions::resolve::MAX_REF_DEPTH);
        memo.insert(id, depth);
        depth
    }

    /// Point-in-time copy of `length_bytes` from `source` at `source_offset_bytes`
    /// to `destination` at `destination_offset_bytes` (same volume allowed, ranges
    /// may overlap). Metadata-only for grain-aligned parts.
    pub fn copy_range(
        &self,
        source: &str,
        source_offset_bytes: u64,
        length_bytes: u64,
        destination: &str,
        destination_offset_bytes: u64,
    ) -> Result<CopyReport> {
        let src = self.shared_volume(source)?;
        let dst = self.shared_volume(destination)?;
        for (vol, offset) in [
            (&src, source_offset_bytes),
            (&dst, destination_offset_bytes),
        ] {
            let size_bytes = vol.view.read().size_bytes;
            if offset
                .checked_add(length_bytes)
                .is_none_or(|end| end > size_bytes)
            {
                return Err(EngineError::OutOfRange {
                    offset_bytes: offset,
                    length_bytes,
                    size_bytes,
                });
            }
        }
        let mut report = CopyReport {
            referenced_bytes: 0,
            data_bytes: 0,
        };
        if length_bytes == 0 {
            return Ok(report);
        }
        crate::testing::sync_points::at(crate::testing::sync_points::Point::CopyBeforePin);
        let _pins = self.catalog.pin_lock.lock();
        let pin = self.pin_volume(&src)?;
        // The source may have shrunk since its size was checked: the pin is
        // what is copied, and it must hold the whole range. (The destination
        // is checked again where its record goes in, under its view.)
        check_range(pin.size_bytes, source_offset_bytes, length_bytes)?;
        let same_alignment =
            source_offset_bytes % GRAIN_BYTES == destination_offset_bytes % GRAIN_BYTES;
        if !same_alignment {
            self.copy_data(
                &pin,
                source_offset_bytes,
                &dst,
                destination_offset_bytes,
                length_bytes,
            )?;
            report.data_bytes = length_bytes;
            return Ok(report);
        }
        let source_grains = (
            GrainIndex::new(source_offset_bytes / GRAIN_BYTES),
            GrainIndex::new((source_offset_bytes + length_bytes).div_ceil(GRAIN_BYTES)),
        );
        self.check_ref_depth_in(&pin, source_grains.0, source_grains.1)?;
        let end_bytes = destination_offset_bytes + length_bytes;
        let first_whole = GrainIndex::new(destination_offset_bytes.div_ceil(GRAIN_BYTES));
        let end_whole = GrainIndex::new(end_bytes / GRAIN_BYTES);
        if first_whole >= end_whole {
            self.copy_data(
                &pin,
                source_offset_bytes,
                &dst,
                destination_offset_bytes,
                length_bytes,
            )?;
            report.data_bytes = length_bytes;
            return Ok(report);
        }
        let head_bytes = first_whole.get() * GRAIN_BYTES - destination_offset_bytes;
        let tail_bytes = end_bytes - end_whole.get() * GRAIN_BYTES;
        if head_bytes > 0 {
            self.copy_data(
                &pin,
                source_offset_bytes,
                &dst,
                destination_offset_bytes,
                head_bytes,
            )?;
        }
        if tail_bytes > 0 {
            let tail_from = length_bytes - tail_bytes;
            self.copy_data(
                &pin,
                source_offset_bytes + tail_from,
                &dst,
                destination_offset_bytes + tail_from,
                tail_bytes,
            )?;
        }
        let source_first = GrainIndex::new((source_offset_bytes + head_bytes) / GRAIN_BYTES);
        let kind = RangeKind::Ref {
            snapshot: pin.id,
            delta: source_first.get().wrapping_sub(first_whole.get()),
        };
        let last_change = SnapshotSeq::new(src.last_change_seq.load(Ordering::SeqCst));
        let bits_from = (pin.seq >= last_change).then_some((src.as_ref(), source_first));
        self.insert_range(&dst, first_whole, end_whole, kind, bits_from)?;
        report.referenced_bytes = (end_whole - first_whole) * GRAIN_BYTES;
        report.data_bytes = head_bytes + tail_bytes;
        Ok(report)
    }

    /// Copies bytes read from a snapshot into a volume, a bounded chunk at a time.
    fn copy_data(
        &self,
        source: &Arc<SnapshotShared>,
        source_offset_bytes: u64,
        destination: &Arc<VolumeShared>,
        destination_offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<()> {
        let mut done = 0;
        let mut buf = Vec::new();
        while done < length_bytes {
            let chunk = (length_bytes - done).min(DATA_COPY_CHUNK_BYTES);
            buf.resize(chunk as usize, 0);
            self.read_snapshot(source, source_offset_bytes + done, &mut buf)?;
            self.write(destination, destination_offset_bytes + done, &buf, None)?;
            done += chunk;
        }
        Ok(())
    }

    /// Copies a range of a snapshot into a volume as data (a snapshot is not a
    /// source of the metadata-only path): what a SCSI copy out of a snapshot LUN
    /// does.
    pub fn copy_from_snapshot(
        &self,
        source: &crate::Snapshot,
        source_offset_bytes: u64,
        destination: &crate::Volume,
        destination_offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<()> {
        source.size_bytes()?;
        destination.size_bytes()?;
        self.copy_data(
            source.shared(),
            source_offset_bytes,
            destination.shared(),
            destination_offset_bytes,
            length_bytes,
        )
    }

    /// Reverts a volume to a snapshot (`NAME` of this volume, or `VOL@NAME`): one
    /// reference record over the whole volume; the volume takes the snapshot's size.
    pub fn restore_volume(&self, volume: &str, snapshot: &str) -> Result<VolumeInfo> {
        let full = if snapshot.contains('@') {
            snapshot.to_string()
        } else {
            format!("{volume}@{snapshot}")
        };
        let vol = self.shared_volume(volume)?;
        if split_full_name(&full).is_some_and(|(of, _)| of != volume) {
            return Err(EngineError::InvalidArgument(format!(
                "{full} is not a snapshot of volume {volume}: a volume is restored only from its \
                 own snapshots; to put another volume's snapshot into {volume} use a range copy \
                 (volume copy), or clone it to a new volume (volume clone)"
            )));
        }
        let _pins = self.catalog.pin_lock.lock();
        let (source, _) = self.resolve_source(&full)?;
        self.check_ref_depth(&source)?;
        if vol.view.read().size_bytes != source.size_bytes {
            self.resize_volume(volume, source.size_bytes)?;
        }
        let (first, end) = (
            GrainIndex::new(0),
            GrainIndex::new(grains_of(source.size_bytes)),
        );
        let kind = RangeKind::Ref {
            snapshot: source.id,
            delta: 0,
        };
        crate::testing::sync_points::at(crate::testing::sync_points::Point::RevertBeforeRecord);
        Self::check_range_quota(&vol, first, end, kind)?;
        // The size and the record under one hold of the view: a resize in
        // between would leave the volume reverted at another size.
        let mut view = vol.view.write();
        if view.size_bytes != source.size_bytes {
            return Err(EngineError::InvalidArgument(format!(
                "volume {volume} was resized while being reverted to {full}; try again"
            )));
        }
        self.insert_range_locked(&vol, &mut view, first, end, kind, None)?;
        drop(view);
        self.scheduler.wake();
        self.flush()?;
        self.volume_info(volume)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::sync_points::{self, Point};
    use crate::testing::test_data::{data_dir, quiet_engine};
    use crate::{EngineError, GRAIN_BYTES};

    const G: u64 = GRAIN_BYTES;

    /// An engine with `src` of 128 grains all written (0xAB) and an empty
    /// `dst` of 100 grains.
    fn engine_with_source(tag: &str) -> (tempfile::TempDir, std::sync::Arc<crate::Engine>) {
        let dir = data_dir(tag);
        let engine = quiet_engine(dir.path(), 1 << 30);
        engine.create_volume("src", 128 * G).unwrap();
        engine.create_volume("dst", 100 * G).unwrap();
        let src = engine.open_volume("src").unwrap();
        src.write(0, &vec![0xAB; 128 * G as usize]).unwrap();
        (dir, engine)
    }

    fn read(
        engine: &std::sync::Arc<crate::Engine>,
        volume: &str,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Vec<u8> {
        let mut buf = vec![0u8; len_bytes as usize];
        let volume = engine.open_volume(volume).unwrap();
        volume.read(offset_bytes, &mut buf).unwrap();
        buf
    }

    /// A volume is restored only from its own snapshots: another volume's is
    /// refused with a pointer to copy and clone, and the volume is unchanged.
    #[test]
    fn restore_refuses_another_volumes_snapshot() {
        let (_dir, engine) = engine_with_source("restore-other");
        engine
            .create_snapshots(&["src"], Some("base"), None)
            .unwrap();
        let refused = engine.restore_volume("dst", "src@base").unwrap_err();
        let message = refused.to_string();
        assert!(
            matches!(refused, EngineError::InvalidArgument(_)),
            "{refused:?}"
        );
        assert!(
            message.contains("volume copy") && message.contains("clone"),
            "{message}"
        );
        assert_eq!(engine.volume_info("dst").unwrap().size_bytes, 100 * G);
        assert!(read(&engine, "dst", 0, 100 * G).iter().all(|&b| b == 0));
        engine
            .create_snapshots(&["dst"], Some("own"), None)
            .unwrap();
        engine.restore_volume("dst", "dst@own").unwrap();
        engine.restore_volume("dst", "own").unwrap();
    }

    /// One rule for a destroyed volume's snapshots: destroyed with it (shown so,
    /// no source for a clone or copy, not deleted or recovered on their own),
    /// back when the volume is recovered.
    #[test]
    fn a_destroyed_volumes_snapshots_are_destroyed_with_it() {
        let (_dir, engine) = engine_with_source("destroyed-snapshots");
        engine.create_snapshots(&["src"], Some("s"), None).unwrap();
        engine.delete_volume("src").unwrap();
        let listed = engine.list_snapshots(Some("src"), true).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].destroyed_unix_s.is_some(), "{listed:?}");
        assert!(engine
            .list_snapshots(Some("src"), false)
            .unwrap()
            .is_empty());
        let clone = engine.clone_volume("src@s", "c", crate::Provisioning::Thin);
        assert!(
            matches!(clone, Err(EngineError::SnapshotNotFound(_))),
            "{clone:?}"
        );
        let copy = engine.copy_range("src", 0, G, "dst", 0);
        assert!(copy.is_err(), "{copy:?}");
        assert!(engine.open_snapshot("src@s").is_err());
        assert!(engine.delete_snapshot("src@s").is_err());
        assert!(engine.recover_snapshot("src@s").is_err());
        assert!(engine.eradicate_snapshot("src@s").is_err());
        engine.recover_volume("src").unwrap();
        let listed = engine.list_snapshots(Some("src"), false).unwrap();
        assert!(listed[0].destroyed_unix_s.is_none());
        engine
            .clone_volume("src@s", "c", crate::Provisioning::Thin)
            .unwrap();
        engine.check_consistency().unwrap();
    }

    /// A copy into the tail of a volume that a shrink cuts while the copy
    /// runs: refused, and a later grow shows zeroes there. (Before the fix the
    /// copy's record went in past the new end, and the grow showed the source
    /// volume's data in a volume that never held it.)
    #[test]
    fn a_copy_into_a_volume_shrunk_meanwhile_leaves_nothing_past_its_end() {
        let (_dir, engine) = engine_with_source("copy-shrunk-destination");
        let hook_engine = engine.clone();
        sync_points::set(Point::CopyBeforePin, move || {
            hook_engine.resize_volume("dst", 60 * G).unwrap();
        });

        let copied = engine.copy_range("src", 0, 50 * G, "dst", 50 * G);

        assert!(
            matches!(copied, Err(EngineError::OutOfRange { .. })),
            "{copied:?}"
        );
        engine.resize_volume("dst", 100 * G).unwrap();
        assert!(read(&engine, "dst", 0, 100 * G).iter().all(|&b| b == 0));
        engine.check_consistency().unwrap();
    }

    /// A copy out of a volume that a shrink cuts while the copy runs is
    /// refused, as it would be had the shrink come first. (Before the fix it
    /// succeeded and the copy read zeroes where the source had been cut.)
    #[test]
    fn a_copy_out_of_a_volume_shrunk_meanwhile_is_refused() {
        let (_dir, engine) = engine_with_source("copy-shrunk-source");
        let hook_engine = engine.clone();
        sync_points::set(Point::CopyBeforePin, move || {
            hook_engine.resize_volume("src", 20 * G).unwrap();
        });

        let copied = engine.copy_range("src", 0, 50 * G, "dst", 0);

        assert!(
            matches!(copied, Err(EngineError::OutOfRange { .. })),
            "{copied:?}"
        );
        assert!(read(&engine, "dst", 0, 100 * G).iter().all(|&b| b == 0));
        engine.check_consistency().unwrap();
    }

    /// A revert whose volume is resized between the revert's own resize and
    /// its record is refused, rather than leaving the volume reverted at a
    /// size the snapshot never had.
    #[test]
    fn a_revert_refuses_a_volume_resized_meanwhile() {
        let (_dir, engine) = engine_with_source("revert-resized");
        engine.create_snapshots(&["src"], Some("s"), None).unwrap();
        engine.resize_volume("src", 150 * G).unwrap();
        let hook_engine = engine.clone();
        sync_points::set(Point::RevertBeforeRecord, move || {
            hook_engine.resize_volume("src", 120 * G).unwrap();
        });

        let reverted = engine.restore_volume("src", "s");

        assert!(
            matches!(reverted, Err(EngineError::InvalidArgument(_))),
            "{reverted:?}"
        );
        engine.check_consistency().unwrap();
        // Tried again, the revert takes the snapshot's size and data.
        let info = engine.restore_volume("src", "s").unwrap();
        assert_eq!(info.size_bytes, 128 * G);
        assert!(read(&engine, "src", 0, 128 * G).iter().all(|&b| b == 0xAB));
    }

    /// A copy is quick (metadata only) exactly when source and destination lie
    /// alike within a grain, and not once the array is fenced.
    #[test]
    fn a_copy_is_quick_only_between_offsets_alike_within_a_grain() {
        let dir = crate::testing::test_data::data_dir("copy-quick");
        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        engine.create_volume("v", 64 * GRAIN_BYTES).unwrap();
        let volume = engine.open_volume("v").unwrap();
        assert!(volume.copy_is_quick(0, 8 * GRAIN_BYTES));
        assert!(volume.copy_is_quick(512, 3 * GRAIN_BYTES + 512));
        assert!(!volume.copy_is_quick(0, 512));
        assert!(!volume.copy_is_quick(GRAIN_BYTES + 1024, 2048));
        engine
            .committer
            .fence(&crate::EngineError::InvalidArgument("test".into()));
        assert!(!volume.copy_is_quick(0, 8 * GRAIN_BYTES));
    }
}
