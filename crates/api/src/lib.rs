//! Lacuna's control plane: a small REST API (JSON over HTTP/1.1) for volumes (create,
//! clone, resize, destroy, recover, restore, range copy), snapshots and consistency
//! groups, storage containers (quota, reclaim rate, data reduction), the array's
//! space figures and Prometheus metrics, and hosts (LUN masking for iSCSI, access for NBD).
//!
//! Every request except `GET /healthz` must carry `Authorization: Bearer <token>`,
//! where the token lives in `<data_dir>/api-token` (see [`load_or_create_token`]).
//! The API listens on loopback by default and speaks plain HTTP; put a TLS proxy in
//! front of it to expose it further.
//!
//! The routes, their bodies, answers and statuses are described by the OpenAPI
//! document the API serves at `GET /v1/openapi.json` ([`openapi::document`]). It is
//! derived from the same list of routes the router is built from
//! ([`openapi::operations`] lists them), so the two cannot disagree.
//!
//! Errors are `{"error": "message"}` with 400 (invalid argument, body or query),
//! 401 (token), 404 (no such volume, snapshot, container, host or route), 409
//! (volume, snapshot, container or host exists), 413 (body too large), 415 (body
//! not JSON), 507 (out of space, a container's quota reached, or a thick
//! reservation the array cannot honour), 500 (I/O, metadata) or 501 (a host route
//! on a server without host management).
//!
//! Hosts: connecting a volume or snapshot that does not exist (or is destroyed)
//! is refused with 404, so a typo cannot make a LUN that never appears. A volume
//! destroyed after it was connected keeps its LUN in the host's list but is not
//! presented until it is recovered. CHAP secrets are accepted on create only and
//! never appear in an answer, an error message or the log.

mod control;
pub mod dashboard;
mod doc_only;
mod error;
mod extract;
pub mod gateways;
mod hosts;
mod listener;
pub mod metrics;
pub mod monitor;
pub mod openapi;
mod requests;
pub mod size;
mod token;
pub mod vasa;
pub mod vvols;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use lacuna_engine::integrity::scrub::{ScrubReport, ScrubStart, ScrubStatus};
use lacuna_engine::{
    ContainerInfo, CopyReport, EngineError, GroupSnapshot, Provisioning, SnapshotInfo, SpaceReport,
    VolumeInfo,
};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use doc_only::{
    BadRequest, Conflict, ContainerPath, HostPath, InsufficientStorage, InternalError, NotFound,
    NotImplemented, SnapshotPath, VolumePath,
};

pub use control::ControlPlane;
pub use error::{ApiError, ErrorBody};
pub use hosts::{
    ChapCredentials, ConnectVolumeRequest, CreateHostRequest, DisconnectVolumeRequest, HostControl,
    HostControlError, HostInfo, LunInfo, NewHost, NewLun, ProtocolEndpointRequest,
    SetNbdPskRequest, BLOCK_SIZES, DEFAULT_BLOCK_SIZE_BYTES,
};
pub use listener::{serve, serve_with_limits, ApiLimits};
pub use requests::{
    CopyRangeRequest, CreateContainerRequest, CreateSnapshotsRequest, CreateVolumeRequest,
    ListSnapshotsQuery, ListVolumesQuery, ResizeVolumeRequest, RestoreVolumeRequest, ScrubRequest,
    UpdateContainerRequest,
};
pub use token::{load_or_create_token, tokens_match, TOKEN_FILE_NAME};

use extract::{JsonBody, PathParam, QueryParams};

/// Largest request body accepted. Control-plane bodies are a few dozen bytes; the
/// limit only stops a client from making the daemon buffer junk.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What every handler shares: the array, its hosts, and the token requests must
/// present.
#[derive(Clone)]
pub struct ApiState {
    control: Arc<dyn ControlPlane>,
    hosts: Option<Arc<dyn HostControl>>,
    vvols: Option<Arc<lacuna_vvol::VvolService>>,
    vasa: Option<Arc<lacuna_vasa::ProviderServer>>,
    monitor: Option<Arc<lacuna_monitor::Monitor>>,
    /// The iSCSI sessions and NBD connections open now.
    live: Option<Arc<dyn monitor::LiveSessionSource>>,
    /// The pool's gateways, when the array runs on Ceph RADOS.
    gateways: Option<Arc<dyn gateways::GatewaySource>>,
    /// Signed-in dashboard sessions.
    sessions: Arc<dashboard::session::Sessions>,
    /// What the dashboard's volume pages read, shared for a few seconds.
    pages: Arc<dashboard::cache::PageCache>,
    token: Arc<str>,
}

impl ApiState {
    /// `control` is normally the daemon's `Arc<Engine>`. The state has no host
    /// management until [`ApiState::with_hosts`]: the host routes then answer 501
    /// (they stay routed and behind the token, so the API's shape does not change).
    pub fn new<C: ControlPlane>(control: Arc<C>, token: impl Into<String>) -> ApiState {
        ApiState {
            control,
            hosts: None,
            vvols: None,
            vasa: None,
            monitor: None,
            live: None,
            gateways: None,
            sessions: Arc::default(),
            pages: Arc::default(),
            token: Arc::from(token.into()),
        }
    }

    /// Serves the vVol routes from `vvols`; without it they answer 501.
    pub fn with_vvols(mut self, vvols: Arc<lacuna_vvol::VvolService>) -> ApiState {
        self.vvols = Some(vvols);
        self
    }

    /// Serves the VASA provider's control routes; without it they answer 501.
    pub fn with_vasa(mut self, vasa: Arc<lacuna_vasa::ProviderServer>) -> ApiState {
        self.vasa = Some(vasa);
        self
    }

    /// Serves the history and event routes from `monitor`; without it they answer 501.
    pub fn with_monitor(mut self, monitor: Arc<lacuna_monitor::Monitor>) -> ApiState {
        self.monitor = Some(monitor);
        self
    }

    /// Serves the host routes from `hosts` (the daemon's host registry).
    pub fn with_live_sessions(mut self, live: Arc<dyn monitor::LiveSessionSource>) -> ApiState {
        self.live = Some(live);
        self
    }

    /// Serves `GET /v1/gateways` from `gateways`; without it the route answers 501.
    pub fn with_gateways(mut self, gateways: Arc<dyn gateways::GatewaySource>) -> ApiState {
        self.gateways = Some(gateways);
        self
    }

    pub fn with_hosts(mut self, hosts: Arc<dyn HostControl>) -> ApiState {
        self.hosts = Some(hosts);
        self
    }
}

/// Body of `GET /healthz`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    #[schema(inline)]
    pub status: lacuna_engine::ArrayState,
    /// Why the array is not ok, worst first; empty when ok
    pub reasons: Vec<String>,
}

/// The routes anyone may call. With [`authenticated_routes`], the one list of
/// the API's routes: the router and the OpenAPI document are both built from it.
fn open_routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::default().routes(routes!(healthz))
}

/// The routes behind the token; each `routes!` serves one path.
fn authenticated_routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::default()
        .routes(routes!(list_volumes, create_volume))
        .routes(routes!(show_volume, resize_volume, delete_volume))
        .routes(routes!(recover_volume))
        .routes(routes!(eradicate_volume))
        .routes(routes!(restore_volume))
        .routes(routes!(copy_range))
        .routes(routes!(list_snapshots, create_snapshots))
        .routes(routes!(show_snapshot, delete_snapshot))
        .routes(routes!(recover_snapshot))
        .routes(routes!(eradicate_snapshot))
        .routes(routes!(list_containers, create_container))
        .routes(routes!(show_container, update_container, delete_container))
        .routes(routes!(reclaim_container))
        .routes(routes!(array_space))
        .routes(routes!(scrub_status, start_scrub, cancel_scrub))
        .routes(routes!(prometheus_metrics))
        .routes(routes!(list_hosts, create_host))
        .routes(routes!(show_host, delete_host))
        .routes(routes!(connect_volume))
        .routes(routes!(disconnect_volume))
        .routes(routes!(set_nbd_psk, remove_nbd_psk))
        .routes(routes!(add_protocol_endpoint, remove_protocol_endpoint))
        .routes(routes!(openapi_document))
        .merge(vvols::routes())
        .merge(vasa::routes())
        .merge(monitor::routes())
        .merge(gateways::routes())
}

/// The API as an axum router, state applied.
pub fn router(state: ApiState) -> Router {
    let (authenticated, _) = authenticated_routes().split_for_parts();
    let authenticated = authenticated
        .method_not_allowed_fallback(method_not_allowed)
        // Unknown paths also need the token, so probing reveals nothing.
        .fallback(no_route)
        .layer(middleware::from_fn_with_state(state.clone(), require_token));
    let (open, _) = open_routes().split_for_parts();
    let open = open
        .merge(dashboard::routes(state.clone()))
        .method_not_allowed_fallback(method_not_allowed);
    open.merge(authenticated)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn require_token(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        // The scheme name is case-insensitive (RFC 9110 §11.1).
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match presented {
        Some(token) if tokens_match(token.as_bytes(), state.token.as_bytes()) => {
            next.run(request).await
        }
        _ => ApiError::Unauthorized.into_response(),
    }
}

/// Runs a blocking engine call on the blocking pool. The call runs to completion
/// even if the client goes away, so an operation is never cut off half-way.
async fn blocking<T, F>(state: &ApiState, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&dyn ControlPlane) -> Result<T, EngineError> + Send + 'static,
{
    let control = state.control.clone();
    tokio::task::spawn_blocking(move || f(control.as_ref()))
        .await
        .map_err(|e| ApiError::Internal(format!("control-plane task failed: {e}")))?
        .map_err(ApiError::from)
}

/// Runs a blocking host-registry call on the blocking pool; 501 when the state
/// has no host management.
async fn hosts_blocking<T, F>(state: &ApiState, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&dyn HostControl) -> Result<T, HostControlError> + Send + 'static,
{
    let hosts = state.hosts.clone().ok_or(ApiError::HostsUnavailable)?;
    tokio::task::spawn_blocking(move || f(hosts.as_ref()))
        .await
        .map_err(|e| ApiError::Internal(format!("host-registry task failed: {e}")))?
        .map_err(ApiError::from)
}

/// Health check: whether the array serves I/O, and if not fully, why
///
/// 200 while hosts can use the array (ok, degraded, read_only), 503 when it is fenced.
#[utoipa::path(
    get, path = "/healthz", operation_id = "health",
    responses(
        (status = 200, description = "The array serves I/O (ok, degraded or read_only)", body = Health),
        (status = 503, description = "The array is fenced: no I/O until a restart", body = Health),
    )
)]
async fn healthz(State(state): State<ApiState>) -> Response {
    let control = state.control.clone();
    let health = tokio::task::spawn_blocking(move || control.health()).await;
    let health = match health {
        Ok(health) => health,
        Err(e) => return ApiError::Internal(format!("health task failed: {e}")).into_response(),
    };
    let status = if health.state == lacuna_engine::ArrayState::Fenced {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = Health {
        status: health.state,
        reasons: health.reasons,
    };
    (status, Json(body)).into_response()
}

/// List live volumes (or destroyed ones), sorted by name
#[utoipa::path(
    get, path = "/v1/volumes", operation_id = "listVolumes", params(ListVolumesQuery),
    responses(
        (status = 200, description = "The volumes, sorted by name", body = Vec<VolumeInfo>),
        (status = 500, response = InternalError),
    )
)]
async fn list_volumes(
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<ListVolumesQuery>,
) -> Result<Json<Vec<VolumeInfo>>, ApiError> {
    let destroyed = query.destroyed;
    Ok(Json(
        blocking(&state, move |c| c.list_volumes(destroyed)).await?,
    ))
}

/// Create a volume, or clone one
///
/// Without 'source': a new volume of 'size_bytes' (required). With 'source' (VOL or VOL@SNAP): an
/// instant, writable clone that is independent from then on; it has the source's size, so
/// 'size_bytes' is best omitted and, if sent, must equal the source's size (else 400).
/// 'provisioning' (default thin) applies to either; a thick type the array cannot reserve gets 507.
/// 'container' (default: 'default' for a new volume, the source's container for a clone) must exist
/// (else 404); a thick volume its quota cannot hold gets 507.
#[utoipa::path(
    post, path = "/v1/volumes", operation_id = "createVolume",
    request_body(content = CreateVolumeRequest, example = json!({"name": "v", "size_bytes": 512})),
    responses(
        (status = 201, description = "The new volume", body = VolumeInfo),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 500, response = InternalError),
        (status = 507, response = InsufficientStorage),
    )
)]
async fn create_volume(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateVolumeRequest>,
) -> Result<(StatusCode, Json<VolumeInfo>), ApiError> {
    let provisioning = body.provisioning.unwrap_or(Provisioning::Thin);
    let info = match (body.source, body.size_bytes) {
        (None, None) => {
            return Err(ApiError::BadRequest(
                "invalid request body: size_bytes is required unless source is given (a clone)"
                    .to_string(),
            ))
        }
        (None, Some(size_bytes)) => {
            blocking(&state, move |c| {
                c.create_volume(
                    &body.name,
                    size_bytes,
                    provisioning,
                    body.container.as_deref(),
                )
            })
            .await?
        }
        (Some(source), size_bytes) => {
            blocking(&state, move |c| {
                if let Some(wanted) = size_bytes {
                    check_clone_size(c, &source, wanted)?;
                }
                c.clone_volume(&source, &body.name, provisioning, body.container.as_deref())
            })
            .await?
        }
    };
    Ok((StatusCode::CREATED, Json(info)))
}

/// A clone takes its source's size; a `size_bytes` that says otherwise is refused
/// rather than silently ignored. A source that does not exist (or is destroyed)
/// is left for the clone itself to report.
fn check_clone_size(c: &dyn ControlPlane, source: &str, wanted: u64) -> Result<(), EngineError> {
    let size_bytes = if source.contains('@') {
        c.snapshot_info(source)
            .ok()
            .filter(|s| s.destroyed_unix_s.is_none())
            .map(|s| s.size_bytes)
    } else {
        c.volume_info(source)
            .ok()
            .filter(|v| v.destroyed_unix_s.is_none())
            .map(|v| v.size_bytes)
    };
    match size_bytes {
        Some(size_bytes) if size_bytes != wanted => Err(EngineError::InvalidArgument(format!(
            "a clone has its source's size: '{source}' is {size_bytes} bytes, not {wanted} \
             (omit size_bytes, or resize the clone afterwards)"
        ))),
        _ => Ok(()),
    }
}

/// One volume, live or destroyed (then destroyed_unix_s and eradicate_at_unix_s are set)
#[utoipa::path(
    get, path = "/v1/volumes/{name}", operation_id = "getVolume", params(VolumePath),
    responses(
        (status = 200, description = "The volume", body = VolumeInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn show_volume(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<VolumeInfo>, ApiError> {
    Ok(Json(blocking(&state, move |c| c.volume_info(&name)).await?))
}

/// Grow or shrink a volume (shrinking discards the data beyond the new end)
#[utoipa::path(
    patch, path = "/v1/volumes/{name}", operation_id = "resizeVolume", params(VolumePath),
    request_body(content = ResizeVolumeRequest, example = json!({"size_bytes": 512})),
    responses(
        (status = 200, description = "The resized volume", body = VolumeInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 507, response = InsufficientStorage),
    )
)]
async fn resize_volume(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<ResizeVolumeRequest>,
) -> Result<Json<VolumeInfo>, ApiError> {
    let info = blocking(&state, move |c| c.resize_volume(&name, body.size_bytes)).await?;
    Ok(Json(info))
}

/// Destroy a volume: hosts lose it at once; it stays recoverable, with its snapshots, until its
/// eradicate_at_unix_s, then its space is reclaimed in the background
#[utoipa::path(
    delete, path = "/v1/volumes/{name}", operation_id = "deleteVolume", params(VolumePath),
    responses(
        (status = 204, description = "Destroyed"),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn delete_volume(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |c| c.delete_volume(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Bring a destroyed volume back, with its snapshots
#[utoipa::path(
    post, path = "/v1/volumes/{name}/recover", operation_id = "recoverVolume", params(VolumePath),
    responses(
        (status = 200, description = "The recovered volume", body = VolumeInfo),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 500, response = InternalError),
    )
)]
async fn recover_volume(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<VolumeInfo>, ApiError> {
    let info = blocking(&state, move |c| {
        c.recover_volume(&name)?;
        c.volume_info(&name)
    })
    .await?;
    Ok(Json(info))
}

/// Eradicate a destroyed volume now (400 if it is not destroyed); its space goes to the background
/// reclaimer, except what clones and copies still read
#[utoipa::path(
    post, path = "/v1/volumes/{name}/eradicate", operation_id = "eradicateVolume", params(VolumePath),
    responses(
        (status = 204, description = "Eradicated"),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn eradicate_volume(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |c| c.eradicate_volume(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Revert a volume to one of its snapshots (metadata only); the volume takes the snapshot's size
#[utoipa::path(
    post, path = "/v1/volumes/{name}/restore", operation_id = "restoreVolume", params(VolumePath),
    request_body(content = RestoreVolumeRequest, example = json!({"snapshot": "s"})),
    responses(
        (status = 200, description = "The restored volume", body = VolumeInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 507, response = InsufficientStorage),
    )
)]
async fn restore_volume(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<RestoreVolumeRequest>,
) -> Result<Json<VolumeInfo>, ApiError> {
    let info = blocking(&state, move |c| c.restore_volume(&name, &body.snapshot)).await?;
    Ok(Json(info))
}

/// Point-in-time copy of a byte range of this volume to a volume (the same one allowed, ranges may
/// overlap): metadata only where grain-aligned (the engine side of SCSI EXTENDED COPY)
#[utoipa::path(
    post, path = "/v1/volumes/{name}/copy", operation_id = "copyRange", params(VolumePath),
    request_body(
        content = CopyRangeRequest,
        example = json!({"offset_bytes": 0, "length_bytes": 512, "destination": "v", "destination_offset_bytes": 0})
    ),
    responses(
        (status = 200, description = "What was copied by reference and as data", body = CopyReport),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 507, response = InsufficientStorage),
    )
)]
async fn copy_range(
    State(state): State<ApiState>,
    PathParam(source): PathParam,
    JsonBody(body): JsonBody<CopyRangeRequest>,
) -> Result<Json<CopyReport>, ApiError> {
    let report = blocking(&state, move |c| {
        c.copy_range(
            &source,
            body.offset_bytes,
            body.length_bytes,
            &body.destination,
            body.destination_offset_bytes,
        )
    })
    .await?;
    Ok(Json(report))
}

/// List named snapshots in creation order; destroyed ones (and those of destroyed volumes) only
/// with destroyed=true
#[utoipa::path(
    get, path = "/v1/snapshots", operation_id = "listSnapshots", params(ListSnapshotsQuery),
    responses(
        (status = 200, description = "The snapshots, in creation order", body = Vec<SnapshotInfo>),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn list_snapshots(
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<ListSnapshotsQuery>,
) -> Result<Json<Vec<SnapshotInfo>>, ApiError> {
    let list = blocking(&state, move |c| {
        c.list_snapshots(query.volume.as_deref(), query.destroyed)
    })
    .await?;
    Ok(Json(list))
}

/// Snapshot one volume, or several at one instant with respect to writes (a consistency group)
///
/// Two phases: prepare (checks, writes flow) and commit (writes to the members are held). The
/// answer
/// reports both durations; commit_window_us is how long writes were held. Every snapshot gets
/// 'name', else the group's name, else snap-<unix time>.
#[utoipa::path(
    post, path = "/v1/snapshots", operation_id = "createSnapshots",
    request_body(content = CreateSnapshotsRequest, example = json!({"volumes": ["v"], "name": "s"})),
    responses(
        (status = 201, description = "The snapshots taken", body = GroupSnapshot),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 500, response = InternalError),
        (status = 507, response = InsufficientStorage),
    )
)]
async fn create_snapshots(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateSnapshotsRequest>,
) -> Result<(StatusCode, Json<GroupSnapshot>), ApiError> {
    let taken = blocking(&state, move |c| {
        let volumes: Vec<&str> = body.volumes.iter().map(String::as_str).collect();
        c.create_snapshots(&volumes, body.name.as_deref(), body.group.as_deref())
    })
    .await?;
    Ok((StatusCode::CREATED, Json(taken)))
}

/// One snapshot, live or destroyed
#[utoipa::path(
    get, path = "/v1/snapshots/{snapshot}", operation_id = "getSnapshot", params(SnapshotPath),
    responses(
        (status = 200, description = "The snapshot", body = SnapshotInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn show_snapshot(
    State(state): State<ApiState>,
    PathParam(full_name): PathParam,
) -> Result<Json<SnapshotInfo>, ApiError> {
    Ok(Json(
        blocking(&state, move |c| c.snapshot_info(&full_name)).await?,
    ))
}

/// Destroy a snapshot: hidden from hosts and lists, recoverable until its eradicate_at_unix_s
#[utoipa::path(
    delete, path = "/v1/snapshots/{snapshot}", operation_id = "deleteSnapshot", params(SnapshotPath),
    responses(
        (status = 204, description = "Destroyed"),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn delete_snapshot(
    State(state): State<ApiState>,
    PathParam(full_name): PathParam,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |c| c.delete_snapshot(&full_name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Bring a destroyed snapshot back (400 if it is not destroyed)
#[utoipa::path(
    post, path = "/v1/snapshots/{snapshot}/recover", operation_id = "recoverSnapshot", params(SnapshotPath),
    responses(
        (status = 200, description = "The recovered snapshot", body = SnapshotInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn recover_snapshot(
    State(state): State<ApiState>,
    PathParam(full_name): PathParam,
) -> Result<Json<SnapshotInfo>, ApiError> {
    let info = blocking(&state, move |c| {
        c.recover_snapshot(&full_name)?;
        c.snapshot_info(&full_name)
    })
    .await?;
    Ok(Json(info))
}

/// Eradicate a destroyed snapshot now (400 if it is not destroyed); what clones and copies still
/// read is kept
#[utoipa::path(
    post, path = "/v1/snapshots/{snapshot}/eradicate", operation_id = "eradicateSnapshot", params(SnapshotPath),
    responses(
        (status = 204, description = "Eradicated"),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn eradicate_snapshot(
    State(state): State<ApiState>,
    PathParam(full_name): PathParam,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |c| c.eradicate_snapshot(&full_name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// List storage containers by creation ('default' first), with policies, usage and reclaim counters
#[utoipa::path(
    get, path = "/v1/containers", operation_id = "listContainers",
    responses(
        (status = 200, description = "The containers", body = Vec<ContainerInfo>),
        (status = 500, response = InternalError),
    )
)]
async fn list_containers(
    State(state): State<ApiState>,
) -> Result<Json<Vec<ContainerInfo>>, ApiError> {
    Ok(Json(blocking(&state, |c| c.list_containers()).await?))
}

/// Create a storage container: the quota, reclaim rate and data reduction its volumes share
///
/// Policies left out take the defaults: no quota, reclaim 'unlimited' with a 256 MiB burst, lz4
/// compression, dedup on. A quota of 0 is refused (400). Volumes join with 'container' on create or
/// clone.
#[utoipa::path(
    post, path = "/v1/containers", operation_id = "createContainer",
    request_body(content = CreateContainerRequest, example = json!({"name": "c", "reclaim": "low"})),
    responses(
        (status = 201, description = "The new container", body = ContainerInfo),
        (status = 409, response = Conflict),
        (status = 500, response = InternalError),
    )
)]
async fn create_container(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateContainerRequest>,
) -> Result<(StatusCode, Json<ContainerInfo>), ApiError> {
    let policy = body.policy();
    let info = blocking(&state, move |c| c.create_container(&body.name, policy)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// One container: policy, usage and the reclaim counters (UNMAP/TRIM commands, bytes unmapped and
/// reclaimed, current rate, backlog, ETA)
#[utoipa::path(
    get, path = "/v1/containers/{container}", operation_id = "getContainer", params(ContainerPath),
    responses(
        (status = 200, description = "The container", body = ContainerInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn show_container(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<ContainerInfo>, ApiError> {
    Ok(Json(
        blocking(&state, move |c| c.container_info(&name)).await?,
    ))
}

/// Change a container's policies; fields left out are kept, "quota_bytes": null removes the quota
///
/// A new reclaim policy applies at once. A new codec or dedup setting applies to data written from
/// then on. A lower quota than what is used refuses new data until usage falls below it. An empty
/// body is refused (400).
#[utoipa::path(
    patch, path = "/v1/containers/{container}", operation_id = "updateContainer", params(ContainerPath),
    request_body(content = UpdateContainerRequest, example = json!({"quota_bytes": null})),
    responses(
        (status = 200, description = "The changed container", body = ContainerInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn update_container(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<UpdateContainerRequest>,
) -> Result<Json<ContainerInfo>, ApiError> {
    // An empty change is a client that meant to change something.
    if body.is_empty() {
        return Err(ApiError::BadRequest(
            "invalid request body: nothing to change (give quota_bytes, reclaim, reclaim_burst_bytes, compression or dedup)"
                .to_string(),
        ));
    }
    let update = body.update();
    let info = blocking(&state, move |c| c.set_container(&name, &update)).await?;
    Ok(Json(info))
}

/// Delete an empty container (400 for 'default' or while it holds volumes, destroyed ones included,
/// or space still being reclaimed)
#[utoipa::path(
    delete, path = "/v1/containers/{container}", operation_id = "deleteContainer", params(ContainerPath),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn delete_container(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |c| c.delete_container(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Work the container's reclaim backlog off now, whatever its policy (even 'off'); answers at once
/// with reclaim.draining set until the backlog is empty
#[utoipa::path(
    post, path = "/v1/containers/{container}/reclaim", operation_id = "reclaimContainer", params(ContainerPath),
    responses(
        (status = 200, description = "The container as the drain starts", body = ContainerInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
    )
)]
async fn reclaim_container(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<ContainerInfo>, ApiError> {
    Ok(Json(
        blocking(&state, move |c| c.reclaim_container_now(&name)).await?,
    ))
}

/// Array-wide space report
#[utoipa::path(
    get, path = "/v1/array/space", operation_id = "getArraySpace",
    responses(
        (status = 200, description = "Space figures", body = SpaceReport),
        (status = 500, response = InternalError),
    )
)]
async fn array_space(State(state): State<ApiState>) -> Result<Json<SpaceReport>, ApiError> {
    Ok(Json(blocking(&state, |c| c.space()).await?))
}

/// Start a scrub pass: read back and verify every stored record, at a rate if given; answers the
/// pass running already if it runs at that rate, and replaces one running at another rate
#[utoipa::path(
    post, path = "/v1/array/scrub", operation_id = "startScrub",
    request_body(content = ScrubRequest, example = json!({"rate_bytes_per_s": 1000000})),
    responses(
        (
            status = 202,
            description = "The pass begun (started: true) or the one running already (started: false)",
            body = ScrubStart
        ),
        (status = 500, response = InternalError),
    )
)]
async fn start_scrub(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<ScrubRequest>,
) -> Result<(StatusCode, Json<ScrubStart>), ApiError> {
    let start = blocking(&state, move |c| c.begin_scrub(body.rate_bytes_per_s)).await?;
    // The pass runs on the blocking pool: it outlives the request.
    if start.started {
        let control = state.control.clone();
        let pass = start.report.pass;
        tokio::task::spawn_blocking(move || {
            if let Err(e) = control.run_scrub(pass) {
                tracing::error!(pass, "scrub pass failed: {e}");
            }
        });
    }
    Ok((StatusCode::ACCEPTED, Json(start)))
}

/// The running scrub pass (progress), the last finished one (its findings) and the background
/// schedule
#[utoipa::path(
    get, path = "/v1/array/scrub", operation_id = "getScrub",
    responses(
        (status = 200, description = "Scrub status", body = ScrubStatus),
        (status = 400, response = BadRequest),
        (status = 500, response = InternalError),
    )
)]
async fn scrub_status(State(state): State<ApiState>) -> Result<Json<ScrubStatus>, ApiError> {
    Ok(Json(blocking(&state, |c| c.scrub_status()).await?))
}

/// Cancel the running scrub pass; answers its report once it has stopped
#[utoipa::path(
    delete, path = "/v1/array/scrub", operation_id = "cancelScrub",
    responses(
        (status = 200, description = "The cancelled pass, stopped", body = ScrubReport),
        (status = 400, response = BadRequest),
        (status = 500, response = InternalError),
    )
)]
async fn cancel_scrub(State(state): State<ApiState>) -> Result<Json<ScrubReport>, ApiError> {
    Ok(Json(blocking(&state, |c| c.cancel_scrub()).await?))
}

/// List hosts, sorted by name (CHAP users, never secrets)
#[utoipa::path(
    get, path = "/v1/hosts", operation_id = "listHosts",
    responses(
        (status = 200, description = "The hosts, sorted by name", body = Vec<HostInfo>),
        (status = 500, response = InternalError),
        (status = 501, response = NotImplemented),
    )
)]
async fn list_hosts(State(state): State<ApiState>) -> Result<Json<Vec<HostInfo>>, ApiError> {
    Ok(Json(hosts_blocking(&state, |h| h.list_hosts()).await?))
}

/// Create a host: initiator names that share access, optionally with CHAP, and/or an NBD TLS
/// pre-shared key
///
/// Each initiator name belongs to at most one host (else 400). CHAP secrets are 12 to 255
/// characters; a user needs its secret and a secret its user; mutual CHAP needs one-way CHAP.
/// Secrets are stored by the daemon (mode 0600) and never returned. The host sees nothing until
/// volumes are connected to it.
#[utoipa::path(
    post, path = "/v1/hosts", operation_id = "createHost",
    request_body(
        content = CreateHostRequest,
        example = json!({"name": "h", "iqns": ["iqn.2024-01.org.example:h"]})
    ),
    responses(
        (status = 201, description = "The new host", body = HostInfo),
        (status = 409, response = Conflict),
        (status = 500, response = InternalError),
        (status = 501, response = NotImplemented),
    )
)]
async fn create_host(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateHostRequest>,
) -> Result<(StatusCode, Json<HostInfo>), ApiError> {
    let host = body.into_new_host()?;
    let info = hosts_blocking(&state, move |h| h.create_host(host)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// One host, with its LUNs
#[utoipa::path(
    get, path = "/v1/hosts/{host}", operation_id = "getHost", params(HostPath),
    responses(
        (status = 200, description = "The host", body = HostInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 501, response = NotImplemented),
    )
)]
async fn show_host(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(
        hosts_blocking(&state, move |h| h.host_info(&name)).await?,
    ))
}

/// Delete a host: its initiators lose every LUN at once (live sessions get REPORTED LUNS DATA HAS
/// CHANGED); the volumes are untouched
#[utoipa::path(
    delete, path = "/v1/hosts/{host}", operation_id = "deleteHost", params(HostPath),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 501, response = NotImplemented),
    )
)]
async fn delete_host(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<StatusCode, ApiError> {
    hosts_blocking(&state, move |h| h.delete_host(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Connect a volume (or a snapshot VOL@SNAP, read-only) to a host at a LUN
///
/// The lowest free LUN unless 'lun' is given (0 to 16383). 400 if the LUN is taken, the volume is
/// already connected to this host, the block size is not 512 or 4096, or the host has 1024 LUNs;
/// 404
/// if the host, or the volume or snapshot, does not exist (a destroyed one counts as absent). Live
/// sessions of the host's initiators see the new LUN at once.
#[utoipa::path(
    post, path = "/v1/hosts/{host}/connect", operation_id = "connectVolume", params(HostPath),
    request_body(content = ConnectVolumeRequest, example = json!({"volume": "v"})),
    responses(
        (status = 200, description = "The LUN made", body = LunInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 501, response = NotImplemented),
    )
)]
async fn connect_volume(
    State(state): State<ApiState>,
    PathParam(host): PathParam,
    JsonBody(body): JsonBody<ConnectVolumeRequest>,
) -> Result<Json<LunInfo>, ApiError> {
    let lun = body.into_new_lun()?;
    Ok(Json(
        hosts_blocking(&state, move |h| h.connect(&host, lun)).await?,
    ))
}

/// Take a volume (or snapshot) away from a host, whatever its LUN (400 if it is not connected)
#[utoipa::path(
    post, path = "/v1/hosts/{host}/disconnect", operation_id = "disconnectVolume", params(HostPath),
    request_body(content = DisconnectVolumeRequest, example = json!({"volume": "v"})),
    responses(
        (status = 204, description = "Disconnected"),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 501, response = NotImplemented),
    )
)]
async fn disconnect_volume(
    State(state): State<ApiState>,
    PathParam(host): PathParam,
    JsonBody(body): JsonBody<DisconnectVolumeRequest>,
) -> Result<StatusCode, ApiError> {
    hosts_blocking(&state, move |h| h.disconnect(&host, &body.volume)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Set (or replace) the host's NBD TLS pre-shared key; its PSK identity is the host's name
///
/// NBD clients that start TLS with this identity and key may list and open the volumes and
/// snapshots connected to the host. Open NBD connections keep running; new ones need the new key.
/// 400 for a key that is not 16 to 64 bytes of hex.
#[utoipa::path(
    put, path = "/v1/hosts/{host}/nbd-psk", operation_id = "setHostNbdPsk", params(HostPath),
    request_body(
        content = SetNbdPskRequest,
        example = json!({"key": "00112233445566778899aabbccddeeff"})
    ),
    responses(
        (status = 200, description = "The host", body = HostInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 501, response = NotImplemented),
    )
)]
async fn set_nbd_psk(
    State(state): State<ApiState>,
    PathParam(host): PathParam,
    JsonBody(body): JsonBody<SetNbdPskRequest>,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(
        hosts_blocking(&state, move |h| h.set_nbd_psk(&host, Some(body.key))).await?,
    ))
}

/// Remove the host's NBD TLS key (400 if the host has no initiator either: it would have no way in)
#[utoipa::path(
    delete, path = "/v1/hosts/{host}/nbd-psk", operation_id = "removeHostNbdPsk", params(HostPath),
    responses(
        (status = 200, description = "The host", body = HostInfo),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 501, response = NotImplemented),
    )
)]
async fn remove_nbd_psk(
    State(state): State<ApiState>,
    PathParam(host): PathParam,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(
        hosts_blocking(&state, move |h| h.set_nbd_psk(&host, None)).await?,
    ))
}

/// Give the host the array's vVol protocol endpoint (or move it) at a LUN
///
/// The lowest free LUN unless 'lun' is given; 400 if that LUN is taken. vVols bound to the host are
/// its subsidiary LUNs (second-level ids under this LUN).
#[utoipa::path(
    put, path = "/v1/hosts/{host}/protocol-endpoint", operation_id = "addProtocolEndpoint", params(HostPath),
    request_body(content = ProtocolEndpointRequest, example = json!({"lun": 255})),
    responses(
        (status = 200, description = "The host", body = HostInfo),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 501, response = NotImplemented),
    )
)]
async fn add_protocol_endpoint(
    State(state): State<ApiState>,
    PathParam(host): PathParam,
    JsonBody(body): JsonBody<ProtocolEndpointRequest>,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(
        hosts_blocking(&state, move |h| h.add_protocol_endpoint(&host, body.lun)).await?,
    ))
}

/// Take the protocol endpoint away from the host (400 if it has none)
#[utoipa::path(
    delete, path = "/v1/hosts/{host}/protocol-endpoint", operation_id = "removeProtocolEndpoint", params(HostPath),
    responses(
        (status = 200, description = "The host", body = HostInfo),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 501, response = NotImplemented),
    )
)]
async fn remove_protocol_endpoint(
    State(state): State<ApiState>,
    PathParam(host): PathParam,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(
        hosts_blocking(&state, move |h| h.remove_protocol_endpoint(&host)).await?,
    ))
}

/// The space report in Prometheus text format (0.0.4): gauges for space, counters for writes,
/// unmaps and reclaim; then per container (label container) usage, quota, reclaim counters, current
/// rate, backlog, ETA, rate limit and policy, and per volume (labels volume, container) unmap,
/// reclaim and backlog figures; the vVol service's counts and operations; the VASA provider's
/// sessions, calls, faults, busy refusals and certificate expiry (lacuna_vasa_*)
///
/// lacuna_container_reclaim_eta_seconds has no sample for a container whose backlog never empties
/// (reclaim off) or whose rate cannot be told yet;
/// lacuna_container_reclaim_rate_limit_bytes_per_second
/// is 0 for off and +Inf for unlimited; lacuna_container_quota_bytes has no sample without a quota;
/// lacuna_container_reclaim_policy{container,policy} is always 1.
#[utoipa::path(
    get, path = "/metrics", operation_id = "getMetrics",
    responses(
        (status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"),
        (status = 500, response = InternalError),
    )
)]
async fn prometheus_metrics(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let (space, containers, volumes) = blocking(&state, |c| {
        let mut volumes = c.list_volumes(false)?;
        volumes.extend(c.list_volumes(true)?);
        Ok((c.space()?, c.list_containers()?, volumes))
    })
    .await?;
    let vvols = state.vvols.as_deref().map(metrics::VvolFigures::of);
    let vasa = state.vasa.as_deref().map(metrics::VasaFigures::of);
    let text = metrics::render(&space, &containers, &volumes, vvols.as_ref(), vasa.as_ref());
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

/// This document
#[utoipa::path(
    get, path = "/v1/openapi.json", operation_id = "getOpenApi",
    responses((status = 200, description = "OpenAPI 3.0 document", body = Object))
)]
async fn openapi_document() -> Json<serde_json::Value> {
    Json(openapi::document())
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NoRoute {
        method: method.to_string(),
        path: uri.path().to_string(),
    }
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_string(),
    }
}
