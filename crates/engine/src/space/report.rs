//! Reports the engine gives the control plane: per-volume and array-wide space.
//! All byte figures are exact counters maintained by the engine, not estimates, with
//! one exception that says so: the written bytes of a range a clone or copy references
//! count as written until the background job has worked out its source's data bits
//! (`written_settling`), and only then fall to the exact figure.
//!
//! With the `openapi` feature these reports, and the others the control plane
//! answers with, derive their OpenAPI schemas: their doc comments are the API
//! document's descriptions, written of the values as serialised (no trailing
//! period on a field's, as in the API's request bodies). Notes for the
//! engine's readers only are plain comments beside them.

use serde::{Deserialize, Serialize};

/// One volume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VolumeInfo {
    pub name: String,
    /// Internal volume number, never reused
    pub id: u64,
    /// Size the host sees
    pub size_bytes: u64,
    /// Bytes holding data (not holes, not zeroes)
    // What a host wrote and has not unmapped.
    pub written_bytes: u64,
    /// Ranges a clone or copy references still count as written whole while a background job
    /// works out their source's data bits (after a restart, a clone of an older snapshot, a copy
    /// of a copy still settling): written_bytes may yet fall
    // Never set for long: it goes at the job's pace.
    pub written_settling: bool,
    /// Share of the volume never written or unmapped, in percent
    // Seed 000's `thin_provisioning`.
    pub thin_provisioning_percent: f64,
    /// Logical bytes of data the volume references
    // The same as `written_bytes`; kept separate so snapshots can later add to it.
    pub logical_data_bytes: u64,
    /// Physical bytes of blocks only this volume references
    pub unique_physical_bytes: u64,
    /// Physical bytes of deduplicated blocks shared with other volumes, in proportion to this
    /// volume's references
    pub shared_physical_bytes: u64,
    /// logical_data_bytes / (unique + shared physical bytes); 1.0 when empty
    pub data_reduction_ratio: f64,
    /// Creation time, seconds since the Unix epoch
    pub created_unix_s: u64,
    // Described by `Provisioning`'s doc comment, inlined.
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub provisioning: crate::Provisioning,
    /// Physical bytes held in reserve for this (thick) volume's unwritten grains
    pub reserved_bytes: u64,
    /// Named snapshots of the volume
    pub snapshot_count: u64,
    /// When it was destroyed; null while live
    // Set while destroyed (recoverable).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub destroyed_unix_s: Option<u64>,
    /// When a destroyed volume is eradicated automatically; null while live
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub eradicate_at_unix_s: Option<u64>,
    /// The storage container the volume belongs to
    pub container: String,
    // Its unmap and reclaim counters and backlog, described by `ReclaimStats`'s
    // doc comment (a description here would wrap the schema's reference).
    pub reclaim: crate::ReclaimStats,
}

/// The array's space figures and counters.
// All in bytes: `physical_used + free == capacity`, `physical_used == live +
// stale` and `live == volume_unique + snapshot + shared`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpaceReport {
    /// Physical capacity of the array
    pub capacity_bytes: u64,
    /// Bytes occupied in segments: live + stale
    pub physical_used_bytes: u64,
    /// Bytes of referenced records
    pub live_physical_bytes: u64,
    /// Bytes of dead records awaiting reclaim
    // They still occupy segments.
    pub stale_bytes: u64,
    /// Live bytes referenced once, by one volume
    pub volume_unique_bytes: u64,
    /// Live bytes only snapshots hold (what eradicating them would free)
    pub snapshot_bytes: u64,
    /// Live bytes referenced more than once (dedup, clones, copies, snapshots sharing with their
    /// volume); volume_unique + snapshot + shared = live
    pub shared_bytes: u64,
    /// Physical bytes promised to thick volumes and not yet used
    pub reserved_bytes: u64,
    /// Space thin volumes may still use: free less reservations and headroom
    // Live data thin volumes may still add: capacity less live data, the
    // reservations, the thick headroom and the cleaner's reserve.
    pub thin_available_bytes: u64,
    /// Physical use, in percent of capacity, at which the soft-threshold event is raised
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100))]
    pub soft_threshold_percent: u8,
    /// Physical use is at or above the soft threshold
    pub soft_threshold_exceeded: bool,
    /// Times physical use crossed the soft threshold upwards since the daemon started
    pub soft_threshold_events: u64,
    /// Named snapshots, live and destroyed
    pub snapshot_count: u64,
    /// Destroyed volumes awaiting eradication
    pub destroyed_volume_count: u64,
    /// Bytes hosts wrote since the daemon started
    pub host_written_bytes: u64,
    /// Bytes appended to segments since the daemon started: records of host writes plus records
    /// the cleaner relocated (metadata excluded)
    pub media_written_bytes: u64,
    /// media_written / host_written (below 1 when data reduction saves more than cleaning
    /// costs); 0 before any host write
    pub write_amplification: f64,
    /// Unmap requests received since the daemon started (UNMAP, TRIM, WRITE SAME or WRITE ZEROES
    /// allowed to unmap)
    pub unmap_commands: u64,
    /// Logical bytes those requests covered
    pub unmapped_bytes: u64,
    /// Logical bytes whose old mappings the background reclaimer has dropped since the daemon
    /// started
    pub reclaimed_bytes: u64,
    /// capacity - physical used
    pub free_bytes: u64,
    /// Sum of the volumes' sizes
    pub provisioned_bytes: u64,
    /// Sum of the volumes' written bytes
    pub logical_data_bytes: u64,
    /// Volumes whose written bytes are still settling (see VolumeInfo.written_settling):
    /// logical_data_bytes may yet fall
    pub written_settling_volumes: u64,
    /// Logical bytes unmapped or zeroed whose old mappings the background reclaimer has not yet
    /// dropped
    // The bytes of dead data (mappings shadowed by unmaps, write-zeroes and
    // copies, or of eradicated volumes) not yet released: the sum of the
    // containers' backlogs.
    pub reclaim_backlog_bytes: u64,
    /// Bytes of records stored raw while the write path was short of CPU, waiting for the
    /// background reducer to compress them
    // Part of live_physical_bytes until reduced; bounded (a write past the
    // bound reduces inline).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub reduction_backlog_bytes: u64,
    /// Bytes of raw records the background reducer compressed since the daemon started
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub reduced_bytes: u64,
    /// logical data / live physical (dedup, compression, pattern removal)
    pub data_reduction_ratio: f64,
    /// provisioned / physical used (adds thin provisioning)
    pub total_reduction_ratio: f64,
    /// Live volumes
    pub volume_count: u64,
    /// Segment files
    pub segment_count: u64,
    /// Segments the cleaner emptied since the daemon started
    pub cleaned_segments: u64,
    /// Live bytes the cleaner relocated since the daemon started
    pub relocated_bytes: u64,
    /// Cleaning passes host writes ran themselves because background cleaning had fallen behind
    // Each one a write that waited on cleaning.
    pub writer_cleans: u64,
    /// Bytes of freed records punched out of segment files since the daemon started
    // Ten seconds after they were freed (or at once when the filesystem is
    // short of room): see `write::durable`.
    pub punched_bytes: u64,
    /// Bytes of freed segment files kept for reuse by new segments (free space of the array,
    /// given back to the filesystem within seconds, at once when it runs short)
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub reusable_freed_bytes: u64,
    /// New segments written into a freed segment's file since the daemon started
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub reused_segment_files: u64,
    /// Records that failed verification when read since the daemon started (the host got an
    /// error, never the bytes)
    // Host reads and the cleaner's. Always serialised, so required in the
    // schema; `default` is for reading an answer without it.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub checksum_errors: u64,
    /// Segment reads the filesystem failed (EIO) since the daemon started
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub read_errors: u64,
    /// What hosts can do with the array now, and why
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub health: ArrayHealth,
}

/// What hosts can do with the array now, from worst to best.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ArrayState {
    /// A write could not be kept: no I/O until a restart recovers the array to its last flush
    Fenced,
    /// No space for new data: reads work, writes of new data fail (thick volumes' reserved
    /// grains excepted)
    ReadOnly,
    /// Serving, with something to look at (checksum or read errors, the soft threshold passed)
    Degraded,
    /// Serving, nothing to report
    #[default]
    Ok,
}

/// The array's state with the reasons for it, worst first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArrayHealth {
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub state: ArrayState,
    /// One line per reason; empty when ok
    pub reasons: Vec<String>,
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
