//! Request bodies and query strings. Bodies reject unknown fields, so a misspelt
//! field is an error rather than silently ignored.

use lacuna_engine::Provisioning;
use serde::{Deserialize, Serialize};

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
