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
//! Routes (the served OpenAPI document at `/v1/openapi.json` is the reference):
//!
//! | method | path                              | does                                  |
//! |--------|-----------------------------------|---------------------------------------|
//! | GET    | `/healthz`                        | liveness, no token needed             |
//! | GET    | `/v1/volumes[?destroyed=true]`    | list live (or destroyed) volumes      |
//! | POST   | `/v1/volumes`                     | create `{name, size_bytes, provisioning?, container?}` or clone `{name, source, provisioning?, container?}` |
//! | GET    | `/v1/volumes/{name}`              | one volume, live or destroyed         |
//! | PATCH  | `/v1/volumes/{name}`              | resize `{size_bytes}`                 |
//! | DELETE | `/v1/volumes/{name}`              | destroy (recoverable for a while)     |
//! | POST   | `/v1/volumes/{name}/recover`      | bring a destroyed volume back         |
//! | POST   | `/v1/volumes/{name}/eradicate`    | eradicate a destroyed volume now      |
//! | POST   | `/v1/volumes/{name}/restore`      | revert to a snapshot `{snapshot}`     |
//! | POST   | `/v1/volumes/{name}/copy`         | range copy to a volume                |
//! | GET    | `/v1/snapshots[?volume=V&destroyed=true]` | list snapshots                |
//! | POST   | `/v1/snapshots`                   | snapshot `{volumes, name?, group?}`   |
//! | GET    | `/v1/snapshots/{VOL@S}`           | one snapshot, live or destroyed       |
//! | DELETE | `/v1/snapshots/{VOL@S}`           | destroy (recoverable for a while)     |
//! | POST   | `/v1/snapshots/{VOL@S}/recover`   | bring a destroyed snapshot back       |
//! | POST   | `/v1/snapshots/{VOL@S}/eradicate` | eradicate a destroyed snapshot now    |
//! | GET    | `/v1/containers`                  | list storage containers (`default` first) |
//! | POST   | `/v1/containers`                  | create `{name, quota_bytes?, reclaim?, reclaim_burst_bytes?, compression?, dedup?}` |
//! | GET    | `/v1/containers/{container}`      | one container: policy, usage, reclaim counters |
//! | PATCH  | `/v1/containers/{container}`      | change policies (same fields but `name`; `"quota_bytes": null` removes the quota) |
//! | DELETE | `/v1/containers/{container}`      | delete an empty container (not `default`) |
//! | POST   | `/v1/containers/{container}/reclaim` | work the reclaim backlog off now, whatever the policy |
//! | GET    | `/v1/array/space`                 | array-wide space report               |
//! | GET    | `/metrics`                        | Prometheus text: array, per-container and per-volume figures |
//! | POST   | `/v1/array/scrub`                 | start a scrub pass `{rate_bytes_per_s?}` (or join the running one) |
//! | GET    | `/v1/array/scrub`                 | the running and the last scrub pass   |
//! | GET    | `/v1/hosts`                       | list hosts (never their CHAP secrets) |
//! | POST   | `/v1/hosts`                       | create `{name, iqns, chap_user?, chap_secret?, mutual_chap_user?, mutual_chap_secret?, nbd_psk_key?}` |
//! | GET    | `/v1/hosts/{host}`                | one host, with its LUNs               |
//! | DELETE | `/v1/hosts/{host}`                | delete (its initiators lose every LUN)|
//! | POST   | `/v1/hosts/{host}/connect`        | map `{volume, lun?, block_size_bytes?, removable?}`, answers the LUN |
//! | POST   | `/v1/hosts/{host}/disconnect`     | unmap `{volume}`                      |
//! | PUT    | `/v1/hosts/{host}/nbd-psk`        | set the NBD TLS key `{key}` (hex)     |
//! | DELETE | `/v1/hosts/{host}/nbd-psk`        | remove the NBD TLS key                |
//! | GET    | `/v1/openapi.json`                | this API's OpenAPI 3.0 document       |
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

// The OpenAPI document is one large `json!` literal.
#![recursion_limit = "256"]

mod control;
mod error;
mod extract;
mod hosts;
pub mod metrics;
pub mod openapi;
mod requests;
mod token;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lacuna_engine::scrub::{ScrubStart, ScrubStatus};
use lacuna_engine::{
    ContainerInfo, CopyReport, EngineError, GroupSnapshot, Provisioning, SnapshotInfo, SpaceReport,
    VolumeInfo,
};
use serde::{Deserialize, Serialize};

pub use control::ControlPlane;
pub use error::{ApiError, ErrorBody};
pub use hosts::{
    ChapCredentials, ConnectVolumeRequest, CreateHostRequest, DisconnectVolumeRequest, HostControl,
    HostControlError, HostInfo, LunInfo, NewHost, NewLun, SetNbdPskRequest, BLOCK_SIZES,
    DEFAULT_BLOCK_SIZE_BYTES,
};
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
            token: Arc::from(token.into()),
        }
    }

    /// Serves the host routes from `hosts` (the daemon's host registry).
    pub fn with_hosts(mut self, hosts: Arc<dyn HostControl>) -> ApiState {
        self.hosts = Some(hosts);
        self
    }
}

/// Body of `GET /healthz`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Health {
    pub status: String,
}

/// The API as an axum router, state applied.
pub fn router(state: ApiState) -> Router {
    let authenticated = Router::new()
        .route("/v1/volumes", get(list_volumes).post(create_volume))
        .route(
            "/v1/volumes/{name}",
            get(show_volume).patch(resize_volume).delete(delete_volume),
        )
        .route("/v1/volumes/{name}/recover", post(recover_volume))
        .route("/v1/volumes/{name}/eradicate", post(eradicate_volume))
        .route("/v1/volumes/{name}/restore", post(restore_volume))
        .route("/v1/volumes/{name}/copy", post(copy_range))
        .route("/v1/snapshots", get(list_snapshots).post(create_snapshots))
        .route(
            "/v1/snapshots/{snapshot}",
            get(show_snapshot).delete(delete_snapshot),
        )
        .route("/v1/snapshots/{snapshot}/recover", post(recover_snapshot))
        .route(
            "/v1/snapshots/{snapshot}/eradicate",
            post(eradicate_snapshot),
        )
        .route(
            "/v1/containers",
            get(list_containers).post(create_container),
        )
        .route(
            "/v1/containers/{container}",
            get(show_container)
                .patch(update_container)
                .delete(delete_container),
        )
        .route(
            "/v1/containers/{container}/reclaim",
            post(reclaim_container),
        )
        .route("/v1/array/space", get(array_space))
        .route("/v1/array/scrub", get(scrub_status).post(start_scrub))
        .route("/metrics", get(prometheus_metrics))
        .route("/v1/hosts", get(list_hosts).post(create_host))
        .route("/v1/hosts/{host}", get(show_host).delete(delete_host))
        .route("/v1/hosts/{host}/connect", post(connect_volume))
        .route("/v1/hosts/{host}/disconnect", post(disconnect_volume))
        .route(
            "/v1/hosts/{host}/nbd-psk",
            axum::routing::put(set_nbd_psk).delete(remove_nbd_psk),
        )
        .route("/v1/openapi.json", get(openapi_document))
        .method_not_allowed_fallback(method_not_allowed)
        // Unknown paths also need the token, so probing reveals nothing.
        .fallback(no_route)
        .layer(middleware::from_fn_with_state(state.clone(), require_token));
    let open = Router::new()
        .route("/healthz", get(healthz))
        .method_not_allowed_fallback(method_not_allowed);
    open.merge(authenticated)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Serves the API on `listener` until the task is dropped or accepting fails.
pub async fn serve(listener: tokio::net::TcpListener, state: ApiState) -> std::io::Result<()> {
    axum::serve(listener, router(state)).await
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

async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".to_string(),
    })
}

/// Answers a JSON array of live (or destroyed) volumes, sorted by name.
async fn list_volumes(
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<ListVolumesQuery>,
) -> Result<Json<Vec<VolumeInfo>>, ApiError> {
    let destroyed = query.destroyed;
    Ok(Json(
        blocking(&state, move |c| c.list_volumes(destroyed)).await?,
    ))
}

/// Creates a volume, or clones one when `source` is given (then `size_bytes`, if
/// sent, must equal the source's size: a clone has its source's size).
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

async fn show_volume(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<VolumeInfo>, ApiError> {
    Ok(Json(blocking(&state, move |c| c.volume_info(&name)).await?))
}

async fn resize_volume(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<ResizeVolumeRequest>,
) -> Result<Json<VolumeInfo>, ApiError> {
    let info = blocking(&state, move |c| c.resize_volume(&name, body.size_bytes)).await?;
    Ok(Json(info))
}

async fn delete_volume(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |c| c.delete_volume(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Answers the recovered volume.
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

async fn eradicate_volume(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |c| c.eradicate_volume(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn restore_volume(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<RestoreVolumeRequest>,
) -> Result<Json<VolumeInfo>, ApiError> {
    let info = blocking(&state, move |c| c.restore_volume(&name, &body.snapshot)).await?;
    Ok(Json(info))
}

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

async fn show_snapshot(
    State(state): State<ApiState>,
    PathParam(full_name): PathParam,
) -> Result<Json<SnapshotInfo>, ApiError> {
    Ok(Json(
        blocking(&state, move |c| c.snapshot_info(&full_name)).await?,
    ))
}

async fn delete_snapshot(
    State(state): State<ApiState>,
    PathParam(full_name): PathParam,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |c| c.delete_snapshot(&full_name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Answers the recovered snapshot.
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

async fn eradicate_snapshot(
    State(state): State<ApiState>,
    PathParam(full_name): PathParam,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |c| c.eradicate_snapshot(&full_name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_containers(
    State(state): State<ApiState>,
) -> Result<Json<Vec<ContainerInfo>>, ApiError> {
    Ok(Json(blocking(&state, |c| c.list_containers()).await?))
}

async fn create_container(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateContainerRequest>,
) -> Result<(StatusCode, Json<ContainerInfo>), ApiError> {
    let policy = body.policy();
    let info = blocking(&state, move |c| c.create_container(&body.name, policy)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

async fn show_container(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<ContainerInfo>, ApiError> {
    Ok(Json(
        blocking(&state, move |c| c.container_info(&name)).await?,
    ))
}

/// An empty change is refused: it is a client that meant to change something.
async fn update_container(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
    JsonBody(body): JsonBody<UpdateContainerRequest>,
) -> Result<Json<ContainerInfo>, ApiError> {
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

async fn delete_container(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<StatusCode, ApiError> {
    blocking(&state, move |c| c.delete_container(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Answers the container as the drain starts (`reclaim.draining` set).
async fn reclaim_container(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<ContainerInfo>, ApiError> {
    Ok(Json(
        blocking(&state, move |c| c.reclaim_container_now(&name)).await?,
    ))
}

async fn array_space(State(state): State<ApiState>) -> Result<Json<SpaceReport>, ApiError> {
    Ok(Json(blocking(&state, |c| c.space()).await?))
}

/// Begins a scrub pass and runs it on the blocking pool (it outlives the
/// request); answers the pass begun, or the one running already.
async fn start_scrub(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<ScrubRequest>,
) -> Result<(StatusCode, Json<ScrubStart>), ApiError> {
    let start = blocking(&state, move |c| c.begin_scrub(body.rate_bytes_per_s)).await?;
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

async fn scrub_status(State(state): State<ApiState>) -> Result<Json<ScrubStatus>, ApiError> {
    Ok(Json(blocking(&state, |c| c.scrub_status()).await?))
}

async fn list_hosts(State(state): State<ApiState>) -> Result<Json<Vec<HostInfo>>, ApiError> {
    Ok(Json(hosts_blocking(&state, |h| h.list_hosts()).await?))
}

async fn create_host(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateHostRequest>,
) -> Result<(StatusCode, Json<HostInfo>), ApiError> {
    let host = body.into_new_host()?;
    let info = hosts_blocking(&state, move |h| h.create_host(host)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

async fn show_host(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(
        hosts_blocking(&state, move |h| h.host_info(&name)).await?,
    ))
}

async fn delete_host(
    State(state): State<ApiState>,
    PathParam(name): PathParam,
) -> Result<StatusCode, ApiError> {
    hosts_blocking(&state, move |h| h.delete_host(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Answers the LUN made.
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

async fn disconnect_volume(
    State(state): State<ApiState>,
    PathParam(host): PathParam,
    JsonBody(body): JsonBody<DisconnectVolumeRequest>,
) -> Result<StatusCode, ApiError> {
    hosts_blocking(&state, move |h| h.disconnect(&host, &body.volume)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_nbd_psk(
    State(state): State<ApiState>,
    PathParam(host): PathParam,
    JsonBody(body): JsonBody<SetNbdPskRequest>,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(
        hosts_blocking(&state, move |h| h.set_nbd_psk(&host, Some(body.key))).await?,
    ))
}

async fn remove_nbd_psk(
    State(state): State<ApiState>,
    PathParam(host): PathParam,
) -> Result<Json<HostInfo>, ApiError> {
    Ok(Json(
        hosts_blocking(&state, move |h| h.set_nbd_psk(&host, None)).await?,
    ))
}

/// The space report, then every container's and volume's figures, in
/// Prometheus text format (token required, like the rest).
async fn prometheus_metrics(State(state): State<ApiState>) -> Result<Response, ApiError> {
    let (space, containers, volumes) = blocking(&state, |c| {
        let mut volumes = c.list_volumes(false)?;
        volumes.extend(c.list_volumes(true)?);
        Ok((c.space()?, c.list_containers()?, volumes))
    })
    .await?;
    let mut text = metrics::render(&space);
    text.push_str(&metrics::render_containers(&containers, &volumes));
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

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
