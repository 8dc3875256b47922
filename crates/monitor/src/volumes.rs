//! Reads and writes per volume, for a volume's own I/O plot.
//!
//! Each opened export or logical unit holds its volume's [`VolumeLane`] (the
//! table hands every opener of one volume the same lane), and counts into it
//! with two relaxed atomic adds per request. The sampler reads the table's
//! totals every interval; a lane no export holds any more leaves the table
//! once it has been read, so the table is as large as the set of volumes in
//! use, never the set of volumes that exist.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::io::Direction;

/// Most volumes the table counts at once; openers beyond it count nothing
/// (the array-wide counters still do).
pub const MAX_TRACKED_VOLUMES: usize = 16_384;

/// One volume's counters.
#[derive(Default)]
pub struct VolumeLane {
    ops: [AtomicU64; 2],
    bytes: [AtomicU64; 2],
}

impl VolumeLane {
    pub fn record(&self, direction: Direction, bytes: u64) {
        let index = direction as usize;
        self.ops[index].fetch_add(1, Ordering::Relaxed);
        self.bytes[index].fetch_add(bytes, Ordering::Relaxed);
    }
}

/// A volume's cumulative counters at one instant (or, as a delta, over an
/// interval).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeTotals {
    pub volume_id: u64,
    pub name: String,
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
}

impl VolumeTotals {
    pub fn ops(&self) -> u64 {
        self.read_ops + self.write_ops
    }

    /// What happened since `earlier` (a lane that restarted counts from zero).
    pub fn since(&self, earlier: Option<&VolumeTotals>) -> VolumeTotals {
        let Some(earlier) = earlier.filter(|e| self.ops() >= e.ops()) else {
            return self.clone();
        };
        VolumeTotals {
            volume_id: self.volume_id,
            name: self.name.clone(),
            read_ops: self.read_ops.saturating_sub(earlier.read_ops),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_ops: self.write_ops.saturating_sub(earlier.write_ops),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
        }
    }
}

/// The lanes of the volumes in use, by volume id.
#[derive(Default)]
pub struct VolumeIo {
    lanes: Mutex<BTreeMap<u64, (String, Arc<VolumeLane>)>>,
}

impl VolumeIo {
    /// The lane of volume `volume_id` (named `name`), shared by every opener;
    /// `None` when the table is full.
    pub fn lane(&self, volume_id: u64, name: &str) -> Option<Arc<VolumeLane>> {
        let mut lanes = self.lanes.lock();
        if let Some((_, lane)) = lanes.get(&volume_id) {
            return Some(lane.clone());
        }
        if lanes.len() >= MAX_TRACKED_VOLUMES {
            return None;
        }
        let lane = Arc::new(VolumeLane::default());
        lanes.insert(volume_id, (name.to_string(), lane.clone()));
        Some(lane)
    }

    /// Every lane's totals, by volume id; lanes no opener holds leave the
    /// table (their counts are in what this returns).
    pub fn totals(&self) -> Vec<VolumeTotals> {
        let mut lanes = self.lanes.lock();
        let totals = lanes
            .iter()
            .map(|(&volume_id, (name, lane))| VolumeTotals {
                volume_id,
                name: name.clone(),
                read_ops: lane.ops[0].load(Ordering::Relaxed),
                read_bytes: lane.bytes[0].load(Ordering::Relaxed),
                write_ops: lane.ops[1].load(Ordering::Relaxed),
                write_bytes: lane.bytes[1].load(Ordering::Relaxed),
            })
            .collect();
        lanes.retain(|_, (_, lane)| Arc::strong_count(lane) > 1);
        totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openers_of_a_volume_share_a_lane_and_idle_lanes_leave_after_a_read() {
        let table = VolumeIo::default();
        let a = table.lane(7, "vol").unwrap();
        let b = table.lane(7, "vol").unwrap();
        a.record(Direction::Write, 4096);
        b.record(Direction::Read, 512);
        let totals = table.totals();
        assert_eq!(totals.len(), 1);
        assert_eq!(
            (
                totals[0].read_ops,
                totals[0].read_bytes,
                totals[0].write_ops,
                totals[0].write_bytes
            ),
            (1, 512, 1, 4096)
        );
        drop((a, b));
        assert_eq!(
            table.totals().len(),
            1,
            "read once more after its last opener"
        );
        assert!(table.totals().is_empty(), "then gone");
    }

    #[test]
    fn a_delta_from_a_restarted_lane_counts_from_zero() {
        let before = VolumeTotals {
            read_ops: 10,
            read_bytes: 100,
            ..VolumeTotals::default()
        };
        let after = VolumeTotals {
            read_ops: 2,
            read_bytes: 20,
            ..VolumeTotals::default()
        };
        assert_eq!(after.since(Some(&before)).read_ops, 2);
        let later = VolumeTotals {
            read_ops: 15,
            read_bytes: 160,
            ..VolumeTotals::default()
        };
        let delta = later.since(Some(&before));
        assert_eq!((delta.read_ops, delta.read_bytes), (5, 60));
    }
}
