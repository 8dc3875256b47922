//! Where two versions of a volume differ: the live volume and one of its
//! snapshots, two snapshots, or a clone and its source's snapshot — what a
//! backup asks for between two points in time (VASA's unshared bitmaps).
//! Grains are compared by what they resolve to (block, pattern or hole), so a
//! grain rewritten with the same bytes (a dedup hit on the same block) is not
//! a difference. Walks both versions' runs: the cost follows the mappings in
//! the range, not its length.

use std::sync::Arc;

use crate::ids::GrainIndex;
use crate::units::check_range;
use crate::versions::resolve::{Reader, Run, Source};
use crate::versions::snapshot::{split_full_name, SnapshotShared};
use crate::{DataRuns, Engine, EngineError, Result, VolumeShared, GRAIN_BYTES};

/// Most point mappings one step of a comparison reads from each version.
const MAX_DIFF_SCAN_GRAINS: u64 = 1 << 16;

/// A version by name: a live volume or a snapshot.
enum Version {
    Live(Arc<VolumeShared>),
    Snapshot(Arc<SnapshotShared>),
}

impl Engine {
    fn version(&self, name: &str) -> Result<Version> {
        match split_full_name(name) {
            Some((volume, snapshot)) => {
                let snapshot = self.find_snapshot(volume, snapshot)?;
                if self.snapshot_destroyed_unix_s(&snapshot).is_some() {
                    return Err(EngineError::SnapshotNotFound(name.to_string()));
                }
                Ok(Version::Snapshot(snapshot))
            }
            None => Ok(Version::Live(self.shared_volume(name)?)),
        }
    }

    /// The byte runs of `[offset, offset+length)` where `object` reads other
    /// than `base` (each `VOL` or `VOL@SNAP`), in order, complete up to
    /// `reached_bytes` (a step reads a bounded count of mappings; ask again
    /// from there).
    pub fn changed_runs(
        &self,
        object: &str,
        base: &str,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<DataRuns> {
        let object = self.version(object)?;
        let base = self.version(base)?;
        let object_view = match &object {
            Version::Live(v) => Some(v.view.read()),
            Version::Snapshot(_) => None,
        };
        let size_bytes = match (&object, &object_view) {
            (Version::Snapshot(s), _) => s.size_bytes,
            (Version::Live(_), Some(view)) => view.size_bytes,
            (Version::Live(_), None) => unreachable!("a live version holds its view"),
        };
        check_range(size_bytes, offset_bytes, length_bytes)?;
        if length_bytes == 0 {
            return Ok(DataRuns {
                runs: Vec::new(),
                reached_bytes: offset_bytes,
            });
        }
        let base_view = match &base {
            Version::Live(v) => Some(v.view.read()),
            Version::Snapshot(_) => None,
        };
        // Block status is rare next to reads: committing the open
        // transaction is simpler than merging its grains (see `extents_of`).
        self.commit_pending_now()?;
        let txn = self.begin_read()?;
        let mut reader = Reader::new(self, &txn)?;
        let first = GrainIndex::new(offset_bytes / GRAIN_BYTES);
        let end_bytes = offset_bytes + length_bytes;
        let end = GrainIndex::new(end_bytes.div_ceil(GRAIN_BYTES));
        let object_source = source_of(&object, object_view.as_deref());
        let base_source = source_of(&base, base_view.as_deref());
        let (object_runs, object_reached) =
            reader.runs(&object_source, first, end, MAX_DIFF_SCAN_GRAINS, 0)?;
        let (base_runs, base_reached) =
            reader.runs(&base_source, first, end, MAX_DIFF_SCAN_GRAINS, 0)?;
        let reached = object_reached.min(base_reached);
        let changed = differing(first, reached, &object_runs, &base_runs);
        let runs = changed
            .into_iter()
            .map(|(a, b)| {
                let from = (a.get() * GRAIN_BYTES).max(offset_bytes);
                let to = (b.get() * GRAIN_BYTES).min(end_bytes);
                (from, to - from)
            })
            .filter(|&(_, length)| length > 0)
            .collect();
        Ok(DataRuns {
            runs,
            reached_bytes: (reached.get() * GRAIN_BYTES).min(end_bytes),
        })
    }
}

/// What a reader reads of a version (a live one's view held by the caller).
fn source_of<'v>(version: &Version, view: Option<&'v crate::VolumeView>) -> Source<'v> {
    match version {
        Version::Live(v) => Source::Live {
            volume: v.id,
            ranges: &view.expect("a live version holds its view").ranges,
        },
        Version::Snapshot(s) => Source::Snapshot(s.clone()),
    }
}

/// The grain spans of [first, reached) where two run lists (both starting at
/// `first`) hold different content, merged.
fn differing(
    first: GrainIndex,
    reached: GrainIndex,
    a: &[Run],
    b: &[Run],
) -> Vec<(GrainIndex, GrainIndex)> {
    let mut out: Vec<(GrainIndex, GrainIndex)> = Vec::new();
    let (mut ia, mut ib) = (0, 0);
    // Grains left in the current run of each list.
    let (mut left_a, mut left_b) = (
        a.first().map_or(0, |r| r.grains),
        b.first().map_or(0, |r| r.grains),
    );
    let mut at = first;
    while at < reached && ia < a.len() && ib < b.len() {
        let step = left_a.min(left_b).min(reached - at);
        assert!(step > 0, "runs are never empty");
        if a[ia].content != b[ib].content {
            match out.last_mut() {
                Some(last) if last.1 == at => last.1 = at + step,
                _ => out.push((at, at + step)),
            }
        }
        at += step;
        left_a -= step;
        left_b -= step;
        if left_a == 0 {
            ia += 1;
            left_a = a.get(ia).map_or(0, |r| r.grains);
        }
        if left_b == 0 {
            ib += 1;
            left_b = b.get(ib).map_or(0, |r| r.grains);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EngineConfig;

    #[test]
    fn only_what_changed_since_the_base_differs() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path(), 1 << 30)).unwrap();
        engine.create_volume("v", 64 << 20).unwrap();
        let volume = engine.open_volume("v").unwrap();
        volume.write(0, &vec![1; 64 << 10]).unwrap();
        volume.write(1 << 20, &vec![2; 8192]).unwrap();
        engine.create_snapshots(&["v"], Some("base"), None).unwrap();
        volume.write(1 << 20, &vec![2; 4096]).unwrap(); // the same bytes: not a difference
        volume.write(3 << 20, &vec![3; 4096]).unwrap();
        volume.unmap(0, 8192).unwrap();
        engine
            .create_snapshots(&["v"], Some("later"), None)
            .unwrap();
        volume.write(10 << 20, &vec![4; 4096]).unwrap();
        let live = engine.changed_runs("v", "v@base", 0, 64 << 20).unwrap();
        assert_eq!(
            live.runs,
            vec![(0, 8192), (3 << 20, 4096), (10 << 20, 4096)]
        );
        assert_eq!(live.reached_bytes, 64 << 20);
        let between = engine
            .changed_runs("v@later", "v@base", 0, 64 << 20)
            .unwrap();
        assert_eq!(between.runs, vec![(0, 8192), (3 << 20, 4096)]);
        let none = engine
            .changed_runs("v@base", "v@base", 0, 64 << 20)
            .unwrap();
        assert!(none.runs.is_empty());
        let part = engine.changed_runs("v", "v@base", 4096, 1 << 20).unwrap();
        assert_eq!(part.runs, vec![(4096, 4096)]);
        assert!(engine.changed_runs("v", "v@base", 0, 65 << 20).is_err());
        assert!(engine.changed_runs("v", "v@nothing", 0, 4096).is_err());
    }
}
