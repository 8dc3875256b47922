//! Types that only carry parts of the OpenAPI document ([`crate::openapi`]): the
//! shared error responses, the path parameters, and the schemas of what the
//! engine answers (its reports are serialised as they are, see
//! [`lacuna_engine`]), written here because the engine does not depend on the
//! OpenAPI crate. Each struct names the fields its engine type
//! serialises, with the types they serialise as; the crate's tests check every
//! schema against the engine's serialised values, so a field added, removed or
//! renamed there fails here. The doc comments are the document's descriptions
//! (an enum inlined in a field has the enum's: utoipa would describe the field
//! with an `allOf` that no string matches).
//!
//! None of these types is ever built: they only carry schemas.

#![allow(dead_code)]

use utoipa::{IntoParams, ToResponse, ToSchema};

use crate::ErrorBody;

/// One volume.
#[derive(ToSchema)]
pub struct VolumeInfo {
    name: String,
    /// Internal volume number, never reused
    id: u64,
    /// Size the host sees
    size_bytes: u64,
    /// Bytes holding data (not holes, not zeroes)
    written_bytes: u64,
    /// Ranges a clone or copy references still count as written whole while a background job
    /// works out their source's data bits (after a restart, a clone of an older snapshot, a copy
    /// of a copy still settling): written_bytes may yet fall
    written_settling: bool,
    /// Share of the volume never written or unmapped, in percent
    thin_provisioning_percent: f64,
    /// Logical bytes of data the volume references
    logical_data_bytes: u64,
    /// Physical bytes of blocks only this volume references
    unique_physical_bytes: u64,
    /// Physical bytes of deduplicated blocks shared with other volumes, in proportion to this
    /// volume's references
    shared_physical_bytes: u64,
    /// logical_data_bytes / (unique + shared physical bytes); 1.0 when empty
    data_reduction_ratio: f64,
    /// Creation time, seconds since the Unix epoch
    created_unix_s: u64,
    #[schema(inline)]
    provisioning: Provisioning,
    /// Physical bytes held in reserve for this (thick) volume's unwritten grains
    reserved_bytes: u64,
    /// Named snapshots of the volume
    snapshot_count: u64,
    /// When it was destroyed; null while live
    #[schema(required = true)]
    destroyed_unix_s: Option<u64>,
    /// When a destroyed volume is eradicated automatically; null while live
    #[schema(required = true)]
    eradicate_at_unix_s: Option<u64>,
    /// The storage container the volume belongs to
    container: String,
    reclaim: ReclaimStats,
}

/// How a volume's space is provisioned: thin (reserves nothing), zeroedthick (reserves the full
/// size so writes never lack space) or eagerzeroedthick (zeroedthick, created already zeroed
/// with one metadata record).
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Provisioning {
    Thin,
    ZeroedThick,
    EagerZeroedThick,
}

/// The codec new data is stored with: lz4 (cheap), zstd (better ratio, more CPU) or off (stored
/// raw).
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Compression {
    Lz4,
    Zstd,
    Off,
}

/// How fast dead space is reclaimed: off (nothing until POST .../reclaim or a new policy), low
/// (25 MB/s), unlimited, or a rate in decimal units: NMB/s, NGB/s, NB/s (a bare number is MB/s).
#[derive(ToSchema)]
#[schema(example = "low")]
pub struct ReclaimPolicy(String);

/// A volume's unmap and reclaim counters since the daemon started, and its backlog.
#[derive(ToSchema)]
pub struct ReclaimStats {
    /// UNMAP / TRIM / unmapping WRITE SAME and WRITE ZEROES requests received since the daemon
    /// started
    unmap_commands: u64,
    /// Logical bytes those requests covered
    unmapped_bytes: u64,
    /// Bytes of dead data (mappings unmapped, overwritten by a range, or of eradicated volumes)
    /// whose references the reclaimer released
    reclaimed_bytes: u64,
    /// Dead bytes not yet reclaimed
    backlog_bytes: u64,
}

/// One named snapshot.
#[derive(ToSchema)]
pub struct SnapshotInfo {
    /// Internal snapshot number, never reused
    id: u64,
    /// The volume it is a snapshot of
    volume: String,
    name: String,
    /// VOL@NAME: the read-only NBD export name and the clone/restore source syntax
    full_name: String,
    /// The volume's size when the snapshot was taken
    size_bytes: u64,
    /// Creation time, seconds since the Unix epoch
    created_unix_s: u64,
    /// Consistency group it was taken in, if any
    #[schema(required = true)]
    group: Option<String>,
    /// When it was destroyed; null while live
    #[schema(required = true)]
    destroyed_unix_s: Option<u64>,
    /// When a destroyed snapshot is eradicated automatically; null while live
    #[schema(required = true)]
    eradicate_at_unix_s: Option<u64>,
}

/// The snapshots taken at one instant, and how long it took.
#[derive(ToSchema)]
pub struct GroupSnapshot {
    snapshots: Vec<SnapshotInfo>,
    /// Checks and name resolution before the commit, in microseconds (writes flow meanwhile)
    prepare_us: u64,
    /// How long writes to the member volumes were held, in microseconds
    commit_window_us: u64,
}

/// What a range copy did.
#[derive(ToSchema)]
pub struct CopyReport {
    /// Bytes copied by reference (metadata only)
    referenced_bytes: u64,
    /// Bytes copied as data (unaligned edges or mismatched alignment within a 4 KiB grain)
    data_bytes: u64,
}

/// A storage container's policies.
#[derive(ToSchema)]
pub struct ContainerPolicy {
    /// Most bytes the volumes may hold (written data plus thick reservations); null: no quota
    #[schema(required = true)]
    quota_bytes: Option<u64>,
    #[schema(inline)]
    reclaim: ReclaimPolicy,
    /// Reclaim allowance spent before the rate applies, refilled while idle
    reclaim_burst_bytes: u64,
    #[schema(inline)]
    compression: Compression,
    /// New data is deduplicated
    dedup: bool,
}

/// A storage container's reclaim policy, counters and backlog.
#[derive(ToSchema)]
pub struct ContainerReclaim {
    // The policy in force.
    #[schema(inline)]
    policy: ReclaimPolicy,
    /// The policy's rate in bytes per second; null for off and unlimited
    #[schema(required = true)]
    rate_bytes_per_s: Option<u64>,
    /// Reclaim allowance spent before the rate applies
    burst_bytes: u64,
    /// UNMAP / TRIM / unmapping WRITE SAME and WRITE ZEROES requests the container's volumes
    /// received since the daemon started
    unmap_commands: u64,
    /// Logical bytes those requests covered
    unmapped_bytes: u64,
    /// Bytes of dead data (unmapped, overwritten by a range, of eradicated volumes) the reclaimer
    /// released since the daemon started
    reclaimed_bytes: u64,
    /// Dead bytes not yet reclaimed
    backlog_bytes: u64,
    /// Bytes reclaimed per second over the last 2 seconds (sliding window)
    current_bytes_per_s: f64,
    /// Seconds until the backlog is empty at the policy's rate (or, unlimited or draining, at the
    /// current rate); 0 when empty; null when it never will be (off) or cannot be told yet
    #[schema(required = true)]
    eta_s: Option<f64>,
    /// Set by POST .../reclaim until the backlog is empty
    draining: bool,
}

/// A storage container: the quota, reclaim rate and data reduction its volumes share.
#[derive(ToSchema)]
pub struct ContainerInfo {
    name: String,
    /// Internal container number, never reused; 'default' is 1
    id: u64,
    /// Creation time, seconds since the Unix epoch
    created_unix_s: u64,
    policy: ContainerPolicy,
    /// Volumes in the container, live and destroyed (recoverable)
    volume_count: u64,
    /// Sum of those volumes' sizes
    provisioned_bytes: u64,
    /// What counts against the quota: written data plus thick reservations
    used_bytes: u64,
    reclaim: ContainerReclaim,
}

/// The array's space figures and counters.
#[derive(ToSchema)]
pub struct SpaceReport {
    /// Physical capacity of the array
    capacity_bytes: u64,
    /// Bytes occupied in segments: live + stale
    physical_used_bytes: u64,
    /// Bytes of referenced records
    live_physical_bytes: u64,
    /// Bytes of dead records awaiting reclaim
    stale_bytes: u64,
    /// capacity - physical used
    free_bytes: u64,
    /// Sum of the volumes' sizes
    provisioned_bytes: u64,
    /// Sum of the volumes' written bytes
    logical_data_bytes: u64,
    /// Volumes whose written bytes are still settling (see VolumeInfo.written_settling):
    /// logical_data_bytes may yet fall
    written_settling_volumes: u64,
    /// Logical bytes unmapped or zeroed whose old mappings the background reclaimer has not yet
    /// dropped
    reclaim_backlog_bytes: u64,
    /// logical data / live physical (dedup, compression, pattern removal)
    data_reduction_ratio: f64,
    /// provisioned / physical used (adds thin provisioning)
    total_reduction_ratio: f64,
    /// Live volumes
    volume_count: u64,
    /// Segment files
    segment_count: u64,
    /// Segments the cleaner emptied since the daemon started
    cleaned_segments: u64,
    /// Live bytes the cleaner relocated since the daemon started
    relocated_bytes: u64,
    /// Cleaning passes host writes ran themselves because background cleaning had fallen behind
    writer_cleans: u64,
    /// Bytes of freed records punched out of segment files since the daemon started
    punched_bytes: u64,
    /// Live bytes referenced once, by one volume
    volume_unique_bytes: u64,
    /// Live bytes only snapshots hold (what eradicating them would free)
    snapshot_bytes: u64,
    /// Live bytes referenced more than once (dedup, clones, copies, snapshots sharing with their
    /// volume); volume_unique + snapshot + shared = live
    shared_bytes: u64,
    /// Physical bytes promised to thick volumes and not yet used
    reserved_bytes: u64,
    /// Space thin volumes may still use: free less reservations and headroom
    thin_available_bytes: u64,
    /// Physical use, in percent of capacity, at which the soft-threshold event is raised
    #[schema(minimum = 1, maximum = 100)]
    soft_threshold_percent: u8,
    /// Physical use is at or above the soft threshold
    soft_threshold_exceeded: bool,
    /// Times physical use crossed the soft threshold upwards since the daemon started
    soft_threshold_events: u64,
    /// Named snapshots, live and destroyed
    snapshot_count: u64,
    /// Destroyed volumes awaiting eradication
    destroyed_volume_count: u64,
    /// Bytes hosts wrote since the daemon started
    host_written_bytes: u64,
    /// Bytes appended to segments since the daemon started: records of host writes plus records
    /// the cleaner relocated (metadata excluded)
    media_written_bytes: u64,
    /// media_written / host_written (below 1 when data reduction saves more than cleaning
    /// costs); 0 before any host write
    write_amplification: f64,
    /// Unmap requests received since the daemon started (UNMAP, TRIM, WRITE SAME or WRITE ZEROES
    /// allowed to unmap)
    unmap_commands: u64,
    /// Logical bytes those requests covered
    unmapped_bytes: u64,
    /// Logical bytes whose old mappings the background reclaimer has dropped since the daemon
    /// started
    reclaimed_bytes: u64,
    /// Records that failed verification when read since the daemon started (the host got an
    /// error, never the bytes)
    checksum_errors: u64,
    /// Segment reads the filesystem failed (EIO) since the daemon started
    read_errors: u64,
}

/// A scrub pass begun, or the one running already.
#[derive(ToSchema)]
pub struct ScrubStart {
    report: ScrubReport,
    /// false: a pass was running already and this is it
    started: bool,
}

/// The running scrub pass, the last finished one and the background schedule.
#[derive(ToSchema)]
pub struct ScrubStatus {
    /// The running pass; null when none runs
    #[schema(required = true)]
    current: Option<ScrubReport>,
    /// The last finished pass; null before the first
    #[schema(required = true)]
    last: Option<ScrubReport>,
    /// Rate of the background scrub; null when none is scheduled
    #[schema(required = true, minimum = 1)]
    background_rate_bytes_per_s: Option<u64>,
}

/// One scrub pass, running or finished.
#[derive(ToSchema)]
pub struct ScrubReport {
    /// Pass number since the daemon started, from 1
    pass: u64,
    /// Started by the background scrub
    background: bool,
    running: bool,
    /// The pass's rate limit; null when unlimited
    #[schema(required = true, minimum = 1)]
    rate_bytes_per_s: Option<u64>,
    /// When the pass started
    started_unix_s: u64,
    /// When the pass finished; null while running
    #[schema(required = true)]
    finished_unix_s: Option<u64>,
    /// Records stored when the pass started
    records_total: u64,
    /// Bytes of those records
    bytes_total: u64,
    /// Records read back and verified so far
    records_checked: u64,
    /// Bytes of those records
    bytes_checked: u64,
    /// Records that failed (checksum, decoding, fingerprint or read error)
    bad_records: u64,
    /// The first 100 bad records
    bad: Vec<BadRecord>,
    /// What reads the bad records (at most 1000 ranges); complete once the pass finished
    affected: Vec<AffectedRange>,
    /// Why the pass stopped early; null if it did not
    #[schema(required = true)]
    error: Option<String>,
}

/// A record that failed verification.
#[derive(ToSchema)]
pub struct BadRecord {
    /// The stored block
    block_id: u64,
    /// Segment file number
    segment: u32,
    /// Where the record starts in the segment
    offset_bytes: u64,
    reason: String,
}

/// Bytes of a volume (or only of its snapshots) that read a bad record.
#[derive(ToSchema)]
pub struct AffectedRange {
    volume: String,
    /// The volume itself reads the range (false: only its snapshots do)
    live: bool,
    /// Snapshots (VOL@NAME) that read the range
    snapshots: Vec<String>,
    /// Start of the range in the volume
    offset_bytes: u64,
    /// Length of the range
    length_bytes: u64,
}

/// Invalid argument (name, size, range, state) or malformed body or query
#[derive(ToResponse)]
pub struct BadRequest(ErrorBody);

/// Missing or wrong bearer token
#[derive(ToResponse)]
pub struct Unauthorized(ErrorBody);

/// No such volume, snapshot, container or host
#[derive(ToResponse)]
pub struct NotFound(ErrorBody);

/// A volume, snapshot, container or host with that name exists
#[derive(ToResponse)]
pub struct Conflict(ErrorBody);

/// Request body over 64 KiB
#[derive(ToResponse)]
pub struct PayloadTooLarge(ErrorBody);

/// Body sent without Content-Type: application/json
#[derive(ToResponse)]
pub struct UnsupportedMediaType(ErrorBody);

/// I/O or metadata failure in the array or the host registry
#[derive(ToResponse)]
pub struct InternalError(ErrorBody);

/// Host management is not available on this server
#[derive(ToResponse)]
pub struct NotImplemented(ErrorBody);

/// The array is out of space, a container's quota is reached, or a thick reservation cannot be
/// honoured
#[derive(ToResponse)]
pub struct InsufficientStorage(ErrorBody);

/// The volume in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct VolumePath {
    /// Volume name: 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.'). It is also the NBD
    /// export name.
    #[param(pattern = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$")]
    name: String,
}

/// The snapshot in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SnapshotPath {
    /// Snapshot as VOL@NAME (the '@' may be sent as is or as %40). It is also the read-only NBD
    /// export name.
    #[param(pattern = "^[^@/]+@[^@/]+$")]
    snapshot: String,
}

/// The host in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct HostPath {
    /// Host name: 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')
    #[param(pattern = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$")]
    host: String,
}

/// The container in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ContainerPath {
    /// Container name: 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')
    #[param(pattern = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$")]
    container: String,
}
