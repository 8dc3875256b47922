//! `GET /v1/gateways`: the gateways sharing the array's Ceph pool and who
//! owns each shard (docs/SCALE-OUT.md). The API knows nothing of RADOS: the
//! daemon hands it a [`GatewaySource`] when it runs on a pool; on a data
//! directory the route answers 501.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::doc_only::{InternalError, NotImplemented};
use crate::error::ApiError;
use crate::ApiState;

/// Where the gateway answers come from (the daemon's RADOS store).
pub trait GatewaySource: Send + Sync + 'static {
    /// Reads the pool's gateway records and shard owners; blocking.
    fn gateways(&self) -> Result<GatewaysAnswer, String>;
}

/// Body of `GET /v1/gateways`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GatewaysAnswer {
    /// The Ceph pool the array lives in
    pub pool: String,
    /// The gateway that answered
    pub this_gateway: String,
    /// Every gateway that keeps a record in the pool, by id
    pub gateways: Vec<GatewayInfo>,
    /// Every shard and its owner
    pub shards: Vec<ShardInfo>,
}

/// One gateway of the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GatewayInfo {
    pub gateway: String,
    /// `owner`, `standby`, or `gone` (no word from it for two leases: dead,
    /// fenced, or stopped without withdrawing)
    pub state: String,
    /// Its cluster client's address (what fencing blocklists)
    pub address: String,
    /// The shard it serves or stands by for
    pub shard: String,
    /// Where it serves: `api`, `nbd`, `iscsi` → `host:port`
    pub portals: Vec<Portal>,
    pub pid: u32,
    pub started_unix_ms: u64,
    /// Milliseconds since it last rewrote its record
    pub last_seen_ms_ago: u64,
    pub lease_ms: u64,
}

/// A service a gateway offers, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Portal {
    pub service: String,
    pub address: String,
}

/// A shard and who owns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShardInfo {
    pub shard: String,
    /// The owner's gateway id; none: no gateway has taken it
    pub owner: Option<String>,
    /// The owner's cluster client address
    pub owner_address: Option<String>,
}

#[utoipa::path(
    get, path = "/v1/gateways", operation_id = "listGateways",
    responses((status = 200, description = "Gateways and shard owners", body = GatewaysAnswer), (status = 500, response = InternalError), (status = 501, response = NotImplemented))
)]
async fn list_gateways(State(state): State<ApiState>) -> Result<Json<GatewaysAnswer>, ApiError> {
    let source = state
        .gateways
        .clone()
        .ok_or(ApiError::GatewaysUnavailable)?;
    let answer = tokio::task::spawn_blocking(move || source.gateways())
        .await
        .map_err(|e| ApiError::Internal(format!("gateway listing failed: {e}")))?
        .map_err(|e| ApiError::Internal(format!("reading the gateway records: {e}")))?;
    Ok(Json(answer))
}

pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::default().routes(routes!(list_gateways))
}
