//! Request bodies and query strings. Bodies reject unknown fields, so a misspelt
//! field is an error rather than silently ignored.

use lacuna_engine::{Compression, ContainerPolicy, ContainerUpdate, Provisioning, ReclaimPolicy};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use utoipa::{IntoParams, ToSchema};

/// Body of `POST /v1/volumes`: a new volume (`size_bytes` required), or a clone of
/// `source` (`VOL` or `VOL@SNAP`; `size_bytes` may be omitted and, if sent, must
/// equal the source's size).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVolumeRequest {
    /// 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')
    pub name: String,
    /// Volume size: a non-zero multiple of 512, at most 1 PiB. Required without 'source'; with
    /// 'source', omit it or give the source's size
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// thin (default: reserves nothing), zeroedthick (reserves the full size so writes never
    /// lack space) or eagerzeroedthick (zeroedthick, created already zeroed with one metadata
    /// record)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(inline)]
    pub provisioning: Option<Provisioning>,
    /// Clone this: a volume (VOL, as it is now) or a snapshot (VOL@SNAP)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The storage container the volume joins (default: 'default', or for a clone the source's
    /// container)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

/// Body of `POST /v1/array/scrub`: the pass's rate limit in bytes per second
/// (unlimited when absent).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScrubRequest {
    /// Most bytes of records read per second; unlimited when absent
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub rate_bytes_per_s: Option<u64>,
}

/// Body of `PATCH /v1/volumes/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeVolumeRequest {
    /// New volume size: a non-zero multiple of 512, at most 1 PiB
    pub size_bytes: u64,
}

/// Body of `POST /v1/volumes/{name}/restore`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreVolumeRequest {
    /// A snapshot of this volume: its NAME or VOL@NAME
    pub snapshot: String,
}

/// Body of `POST /v1/volumes/{name}/copy`: copies `length_bytes` from the path's
/// volume at `offset_bytes` to `destination` at `destination_offset_bytes`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CopyRangeRequest {
    /// Where the range starts in the source volume (the path's)
    pub offset_bytes: u64,
    /// How many bytes to copy
    pub length_bytes: u64,
    /// Destination volume (may be the source)
    pub destination: String,
    /// Where the copy lands in the destination
    pub destination_offset_bytes: u64,
}

/// Body of `POST /v1/snapshots`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshotsRequest {
    /// Volumes to snapshot at one instant, each named once
    #[schema(min_items = 1)]
    pub volumes: Vec<String>,
    /// Snapshot name for every member (default: the group's name, else snap-<unix time>)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Consistency group name, recorded with each snapshot
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// Query of `GET /v1/volumes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListVolumesQuery {
    /// true: list the destroyed (recoverable) ones instead of the live ones
    #[serde(default)]
    #[param(default = false)]
    pub destroyed: bool,
}

/// Query of `GET /v1/snapshots`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListSnapshotsQuery {
    /// Only this volume's snapshots (404 if no such volume)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(nullable = false)]
    pub volume: Option<String>,
    /// true: list the destroyed (recoverable) ones instead of the live ones
    #[serde(default)]
    #[param(default = false)]
    pub destroyed: bool,
}

/// Body of `POST /v1/containers`: a container and its policies; every policy
/// left out takes the array's default (no quota, `unlimited` reclaim with a
/// 256 MiB burst, lz4, dedup on).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateContainerRequest {
    /// 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')
    pub name: String,
    /// Most bytes the volumes may hold: written data plus thick reservations; a write past it
    /// gets ENOSPC (default: none)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_bytes: Option<u64>,
    /// How fast dead space is reclaimed: off, low (25 MB/s), unlimited or a rate such as
    /// 2000MB/s (default: unlimited)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(inline)]
    pub reclaim: Option<ReclaimPolicy>,
    /// Reclaim allowance spent before the rate applies, refilled while idle (default: 256 MiB)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_burst_bytes: Option<u64>,
    /// Codec of new data: lz4, zstd or off (default: lz4)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(inline)]
    pub compression: Option<Compression>,
    /// Deduplicate new data (default: true)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<bool>,
}

impl CreateContainerRequest {
    /// The policy asked for, defaults filled in.
    pub fn policy(&self) -> ContainerPolicy {
        let default = ContainerPolicy::default();
        ContainerPolicy {
            quota_bytes: self.quota_bytes,
            reclaim: self.reclaim.unwrap_or(default.reclaim),
            reclaim_burst_bytes: self
                .reclaim_burst_bytes
                .unwrap_or(default.reclaim_burst_bytes),
            compression: self.compression.unwrap_or(default.compression),
            dedup: self.dedup.unwrap_or(default.dedup),
        }
    }
}

/// Body of `PATCH /v1/containers/{container}`: the policies to change; fields
/// left out keep their value, and `"quota_bytes": null` removes the quota.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateContainerRequest {
    /// New quota; null removes it; absent keeps it
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_quota_change",
        deserialize_with = "deserialize_quota_change"
    )]
    pub quota_bytes: Option<Option<u64>>,
    /// How fast dead space is reclaimed: off, low (25 MB/s), unlimited or a rate such as
    /// 2000MB/s (absent: kept)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(inline)]
    pub reclaim: Option<ReclaimPolicy>,
    /// Reclaim allowance spent before the rate applies, refilled while idle (absent: kept)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_burst_bytes: Option<u64>,
    /// Codec of new data: lz4, zstd or off (absent: kept)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(inline)]
    pub compression: Option<Compression>,
    /// Deduplicate new data (absent: kept)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<bool>,
}

impl UpdateContainerRequest {
    pub fn update(&self) -> ContainerUpdate {
        ContainerUpdate {
            quota_bytes: self.quota_bytes,
            reclaim: self.reclaim,
            reclaim_burst_bytes: self.reclaim_burst_bytes,
            compression: self.compression,
            dedup: self.dedup,
        }
    }

    /// True when the request changes nothing (refused: it is most likely a
    /// client that misspelt or forgot what it meant to change).
    pub fn is_empty(&self) -> bool {
        *self == UpdateContainerRequest::default()
    }
}

/// `Some(None)` is sent as `null` (absent fields are skipped before this runs).
fn serialize_quota_change<S: Serializer>(
    value: &Option<Option<u64>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(inner) => inner.serialize(s),
        None => s.serialize_none(),
    }
}

/// Present (even as `null`) becomes `Some`; absence is `None` via `default`.
fn deserialize_quota_change<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<u64>>, D::Error> {
    Ok(Some(Option::<u64>::deserialize(d)?))
}
