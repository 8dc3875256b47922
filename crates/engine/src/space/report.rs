//! Reports the engine gives the control plane: per-volume and array-wide space.
//! All byte figures are exact counters maintained by the engine, not estimates, with
//! one exception that says so: the written bytes of a range a clone or copy references
//! count as written until the background job has worked out its source's data bits
//! (`written_settling`), and only then fall to the exact figure.

use serde::{Deserialize, Serialize};

/// One volume as the control plane sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeInfo {
    pub name: String,
    pub id: u64,
    pub size_bytes: u64,
    /// Bytes of the volume holding data (not holes, not zeroes): what a host wrote
    /// and has not unmapped.
    pub written_bytes: u64,
    /// Set while ranges the volume references (a clone of an older snapshot, a copy
    /// of a copy still settling, any clone or copy after a restart) still count as
    /// written whole: the background job is working out their source's data bits,
    /// and `written_bytes` may yet fall. Never set for long: it goes at the job's pace.
    pub written_settling: bool,
    /// Share of the volume never written or unmapped, in percent (seed 000's
    /// `thin_provisioning`).
    pub thin_provisioning_percent: f64,
    /// Logical bytes of data the volume references (same as `written_bytes`; kept
    /// separate so snapshots can later add to it).
    pub logical_data_bytes: u64,
    /// Physical bytes of blocks referenced only by this volume.
    pub unique_physical_bytes: u64,
    /// Physical bytes of blocks this volume shares with others (dedup), counted in
    /// proportion to its share of the references.
    pub shared_physical_bytes: u64,
    /// logical_data_bytes ÷ (unique + shared physical bytes); 1.0 when empty.
    pub data_reduction_ratio: f64,
    pub created_unix_s: u64,
    pub provisioning: crate::Provisioning,
    /// Physical bytes held in reserve for this (thick) volume's unwritten grains.
    pub reserved_bytes: u64,
    /// Named snapshots of the volume.
    pub snapshot_count: u64,
    /// Set while destroyed (recoverable).
    pub destroyed_unix_s: Option<u64>,
    /// When a destroyed volume is eradicated automatically.
    pub eradicate_at_unix_s: Option<u64>,
    /// The storage container it belongs to.
    pub container: String,
    /// Its unmap and reclaim counters and backlog.
    pub reclaim: crate::ReclaimStats,
}

/// The whole array's space, in bytes. `physical_used + free == capacity`,
/// `physical_used == live + stale` and `live == volume_unique + snapshot + shared`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpaceReport {
    pub capacity_bytes: u64,
    /// Bytes occupied in segments: live records plus stale ones not yet freed.
    pub physical_used_bytes: u64,
    /// Bytes of live (referenced) records.
    pub live_physical_bytes: u64,
    /// Bytes of dead records still occupying segments, awaiting reclaim.
    pub stale_bytes: u64,
    /// Live bytes referenced once, by one volume.
    pub volume_unique_bytes: u64,
    /// Live bytes only snapshots hold (what eradicating them would free).
    pub snapshot_bytes: u64,
    /// Live bytes referenced more than once (dedup across volumes, snapshots
    /// sharing with their volume, copies).
    pub shared_bytes: u64,
    /// Physical bytes promised to thick volumes and not yet used.
    pub reserved_bytes: u64,
    /// Live data thin volumes may still add (capacity less live data,
    /// reservations, the thick headroom and the cleaner's reserve).
    pub thin_available_bytes: u64,
    pub soft_threshold_percent: u8,
    /// Physical use is at or above the soft threshold.
    pub soft_threshold_exceeded: bool,
    /// Times physical use crossed the soft threshold upwards since start.
    pub soft_threshold_events: u64,
    /// Named snapshots (live and destroyed).
    pub snapshot_count: u64,
    /// Destroyed volumes awaiting eradication.
    pub destroyed_volume_count: u64,
    /// Bytes hosts wrote since the daemon started.
    pub host_written_bytes: u64,
    /// Bytes appended to segments since the daemon started: new records of host
    /// writes plus records the cleaner relocated (metadata not included).
    pub media_written_bytes: u64,
    /// media ÷ host written bytes (below 1 when dedup, compression and pattern
    /// removal save more than cleaning costs); 0 before any host write.
    pub write_amplification: f64,
    /// Unmap requests received since the daemon started (UNMAP, TRIM, WRITE SAME
    /// or WRITE ZEROES allowed to unmap) and the logical bytes they covered.
    pub unmap_commands: u64,
    pub unmapped_bytes: u64,
    /// Logical bytes whose old mappings the background reclaimer has dropped
    /// since the daemon started.
    pub reclaimed_bytes: u64,
    pub free_bytes: u64,
    /// Sum of the volumes' sizes.
    pub provisioned_bytes: u64,
    /// Sum of the volumes' written (data) bytes.
    pub logical_data_bytes: u64,
    /// Volumes whose written bytes are still settling (`VolumeInfo::written_settling`):
    /// while there are any, `logical_data_bytes` may yet fall.
    pub written_settling_volumes: u64,
    /// Bytes of dead data (mappings shadowed by unmaps, write-zeroes and copies,
    /// or of eradicated volumes) the background reclaimer has not yet released;
    /// the sum of the containers' backlogs.
    pub reclaim_backlog_bytes: u64,
    /// logical_data_bytes ÷ live_physical_bytes (dedup + compression + pattern removal).
    pub data_reduction_ratio: f64,
    /// provisioned_bytes ÷ physical_used_bytes (adds thin provisioning).
    pub total_reduction_ratio: f64,
    pub volume_count: u64,
    pub segment_count: u64,
    /// Segments the cleaner emptied, and the live bytes it relocated doing so,
    /// since the daemon started.
    pub cleaned_segments: u64,
    pub relocated_bytes: u64,
    /// Cleaning passes host writers ran themselves because background cleaning
    /// had fallen behind (each one a write that waited on cleaning).
    pub writer_cleans: u64,
    /// Bytes of freed records punched out of segment files (the disk below
    /// learns of them at once) since the daemon started.
    pub punched_bytes: u64,
    /// Records that failed verification when read (host reads and the cleaner)
    /// since the daemon started: the host got an error, never the bytes.
    #[serde(default)]
    pub checksum_errors: u64,
    /// Segment reads the filesystem failed (EIO) since the daemon started.
    #[serde(default)]
    pub read_errors: u64,
}

/// The state of a run of bytes, as NBD `base:allocation` and SCSI GET LBA STATUS
/// report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExtentState {
    /// Holds data.
    Data,
    /// Reads as zeroes, but is allocated (written zeroes).
    Zero,
    /// Never written or unmapped; reads as zeroes.
    Hole,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub length_bytes: u64,
    pub state: ExtentState,
}
