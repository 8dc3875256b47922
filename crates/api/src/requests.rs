//! Request bodies and query strings. Bodies reject unknown fields, so a misspelt
//! field is an error rather than silently ignored.

use lacuna_engine::{Compression, ContainerPolicy, ContainerUpdate, Provisioning, ReclaimPolicy};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Body of `POST /v1/volumes`: a new volume (`size_bytes` required), or a clone of
/// `source` (`VOL` or `VOL@SNAP`; `size_bytes` may be omitted and, if sent, must
/// equal the source's size).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVolumeRequest {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// `thin` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<Provisioning>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The container the new volume (or clone) joins: `default` for a new
    /// volume, the source's container for a clone, when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

/// Body of `POST /v1/array/scrub`: the pass's rate limit in bytes per second
/// (unlimited when absent).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrubRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bytes_per_s: Option<u64>,
}

/// Body of `PATCH /v1/volumes/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeVolumeRequest {
    pub size_bytes: u64,
}

/// Body of `POST /v1/volumes/{name}/restore`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreVolumeRequest {
    /// A snapshot of the volume by its name, or `VOL@NAME`.
    pub snapshot: String,
}

/// Body of `POST /v1/volumes/{name}/copy`: copies `length_bytes` from the path's
/// volume at `offset_bytes` to `destination` at `destination_offset_bytes`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyRangeRequest {
    pub offset_bytes: u64,
    pub length_bytes: u64,
    pub destination: String,
    pub destination_offset_bytes: u64,
}

/// Body of `POST /v1/snapshots`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshotsRequest {
    pub volumes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// Query of `GET /v1/volumes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListVolumesQuery {
    #[serde(default)]
    pub destroyed: bool,
}

/// Query of `GET /v1/snapshots`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListSnapshotsQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    #[serde(default)]
    pub destroyed: bool,
}

/// Body of `POST /v1/containers`: a container and its policies; every policy
/// left out takes the array's default (no quota, `unlimited` reclaim with a
/// 256 MiB burst, lz4, dedup on).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateContainerRequest {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_bytes: Option<u64>,
    /// `off`, `low` (25 MB/s), `unlimited`, or a rate such as `2000MB/s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_burst_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateContainerRequest {
    /// Absent: keep; `null`: remove the quota; a number: the new quota.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_quota_change",
        deserialize_with = "deserialize_quota_change"
    )]
    pub quota_bytes: Option<Option<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_burst_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
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
