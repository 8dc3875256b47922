//! The vVol routes: every operation of the vVol service (seed 003; VASA's
//! names in the operation ids), batch calls with a result per item. They only
//! translate: [`lacuna_vvol::VvolService`] holds the behaviour, the limits and
//! the faults, which map to statuses as `error.rs` says (Busy is 429, an
//! incompatible revert or a bound vVol's delete 409, a batch over the limit
//! 507, lost events 410).

#![allow(dead_code)] // the path parameter types only carry the document

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use lacuna_vvol::{
    AllocatedBitmap, Binding, CloneSpec, ContainerSpace, Event, HostEndpoint, ItemResult, Metadata,
    NewVvol, PreparedSnapshot, ProviderInfo, Segment, SnapshotCommit, SnapshotKind,
    SnapshotRequest, TaskInfo, UnsharedChunks, VvolId, VvolInfo, VvolQuery, VvolService, VvolSpace,
    VvolType,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::doc_only::{BadRequest, ContainerPath, InternalError, NotFound, NotImplemented};
use crate::extract::{JsonBody, PathParam, QueryParams};
use crate::{ApiError, ApiState};

/// The vVol in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct VvolPath {
    /// vVol id: rfc4122. and a UUID
    id: String,
}

/// Body of `POST /v1/vvols/query`: every constraint given must hold.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryVvolsRequest {
    pub container: Option<String>,
    pub vvol_type: Option<VvolType>,
    /// Pairs that must all be in a vVol's metadata
    #[serde(default)]
    pub metadata: Metadata,
}

/// The ids a query matched.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VvolIds {
    pub ids: Vec<VvolId>,
}

/// A batch of vVol ids.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IdsRequest {
    pub ids: Vec<String>,
}

/// Body of bind and unbind.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BindRequest {
    pub host: String,
    pub ids: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MetadataRequest {
    /// Pairs to set; an empty value removes its key
    pub metadata: Metadata,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeVvolRequest {
    pub size_mib: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RevertRequest {
    /// A snapshot vVol of this vVol
    pub snapshot: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PrepareSnapshotRequest {
    #[serde(default)]
    pub kind: SnapshotKind,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitSnapshotsRequest {
    pub snapshots: Vec<SnapshotRequest>,
    /// Most time the commit may take, in milliseconds
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_timeout_ms() -> u64 {
    10_000
}

/// One id's answer in a batch: its vVol, or its fault.
#[derive(ToSchema)]
pub struct VvolInfoItem {
    id: String,
    result: Option<VvolInfo>,
    fault: Option<lacuna_vvol::FaultBody>,
}

/// One id's answer in a bind: its binding, or its fault.
#[derive(ToSchema)]
pub struct BindingItem {
    id: String,
    result: Option<Binding>,
    fault: Option<lacuna_vvol::FaultBody>,
}

/// One id's answer in an unbind: true, or its fault.
#[derive(ToSchema)]
pub struct UnbindItem {
    id: String,
    result: Option<bool>,
    fault: Option<lacuna_vvol::FaultBody>,
}

/// A host, by name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HostRequest {
    pub host: String,
}

/// How many vVols an unbind-all unbound.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UnboundCount {
    pub unbound: u64,
}

/// Query of `GET /v1/vvol-events`.
#[derive(Debug, Clone, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// The last event id seen (0: from the oldest kept)
    #[serde(default)]
    pub since: u64,
}

pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::default()
        .routes(routes!(create_vvol))
        .routes(routes!(show_vvol, delete_vvol))
        .routes(routes!(query_vvols))
        .routes(routes!(vvol_info))
        .routes(routes!(update_vvol_metadata))
        .routes(routes!(resize_vvol))
        .routes(routes!(clone_vvol))
        .routes(routes!(revert_vvol))
        .routes(routes!(prepare_snapshot))
        .routes(routes!(commit_snapshots))
        .routes(routes!(bind_vvols))
        .routes(routes!(unbind_vvols))
        .routes(routes!(unbind_all))
        .routes(routes!(allocated_bitmap))
        .routes(routes!(unshared_bitmap))
        .routes(routes!(unshared_chunks))
        .routes(routes!(vvol_space))
        .routes(routes!(container_vvol_space))
        .routes(routes!(vvol_containers))
        .routes(routes!(protocol_endpoints))
        .routes(routes!(provider_info))
        .routes(routes!(list_tasks))
        .routes(routes!(show_task, cancel_task))
        .routes(routes!(vvol_events))
}

/// Runs a vVol service call on the blocking pool; 501 without the service.
async fn vvols_blocking<T, F>(state: &ApiState, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&VvolService) -> lacuna_vvol::Result<T> + Send + 'static,
{
    let vvols: Arc<VvolService> = state.vvols.clone().ok_or(ApiError::VvolsUnavailable)?;
    tokio::task::spawn_blocking(move || f(&vvols))
        .await
        .map_err(|e| ApiError::Internal(format!("vVol task failed: {e}")))?
        .map_err(ApiError::from)
}

fn vvol_id(text: &str) -> Result<VvolId, ApiError> {
    Ok(VvolId::parse(text)?)
}

/// Create a vVol (createVirtualVolume): thin or thick, in whole MiB, with its metadata
#[utoipa::path(
    post, path = "/v1/vvols", operation_id = "createVirtualVolume",
    request_body(content = NewVvol, example = json!({"container": "default", "vvol_type": "Data", "size_mib": 10240, "metadata": {"VMW_VmID": "vm1"}})),
    responses(
        (status = 201, description = "The vVol made", body = VvolInfo),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 501, response = NotImplemented),
    )
)]
async fn create_vvol(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<NewVvol>,
) -> Result<(StatusCode, Json<VvolInfo>), ApiError> {
    let info = vvols_blocking(&state, move |v| v.create(body)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// A vVol: its record, size and the hosts it is bound to
#[utoipa::path(
    get, path = "/v1/vvols/{id}", operation_id = "getVirtualVolume", params(VvolPath),
    responses((status = 200, description = "The vVol", body = VvolInfo), (status = 404, response = NotFound))
)]
async fn show_vvol(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
) -> Result<Json<VvolInfo>, ApiError> {
    let id = vvol_id(&id)?;
    Ok(Json(vvols_blocking(&state, move |v| v.get(&id)).await?))
}

/// Delete a vVol and its snapshot vVols, freeing their space (deleteVirtualVolume; 409 while bound)
#[utoipa::path(
    delete, path = "/v1/vvols/{id}", operation_id = "deleteVirtualVolume", params(VvolPath),
    responses((status = 204, description = "Deleted"), (status = 404, response = NotFound), (status = 409, description = "Bound to a host"))
)]
async fn delete_vvol(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
) -> Result<StatusCode, ApiError> {
    let id = vvol_id(&id)?;
    vvols_blocking(&state, move |v| v.delete(&id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The ids of the vVols matching every constraint (queryVirtualVolume); costs what it matches
#[utoipa::path(
    post, path = "/v1/vvols/query", operation_id = "queryVirtualVolume",
    request_body(content = QueryVvolsRequest, example = json!({"container": "default", "metadata": {"VMW_VVolType": "Config"}})),
    responses((status = 200, description = "The matching ids", body = VvolIds), (status = 400, response = BadRequest))
)]
async fn query_vvols(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<QueryVvolsRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let query = VvolQuery {
        container: body.container,
        vvol_type: body.vvol_type,
        metadata: body.metadata,
    };
    let body = vvols_blocking(&state, move |v| v.query_json(&query)).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body))
}

/// Many vVols at once (queryVirtualVolumeInfo): a result or a fault for each id
#[utoipa::path(
    post, path = "/v1/vvols/info", operation_id = "queryVirtualVolumeInfo",
    request_body(content = IdsRequest),
    responses((status = 200, description = "One item per id, in order", body = Vec<VvolInfoItem>), (status = 507, description = "More ids than a batch takes"))
)]
async fn vvol_info(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<IdsRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let body = vvols_blocking(&state, move |v| v.info_json(&body.ids)).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body))
}

/// Set or remove metadata pairs (updateVirtualVolumeMetaData)
#[utoipa::path(
    patch, path = "/v1/vvols/{id}/metadata", operation_id = "updateVirtualVolumeMetaData", params(VvolPath),
    request_body(content = MetadataRequest),
    responses((status = 200, description = "The vVol", body = VvolInfo), (status = 400, response = BadRequest), (status = 404, response = NotFound))
)]
async fn update_vvol_metadata(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
    JsonBody(body): JsonBody<MetadataRequest>,
) -> Result<Json<VvolInfo>, ApiError> {
    let id = vvol_id(&id)?;
    Ok(Json(
        vvols_blocking(&state, move |v| v.update_metadata(&id, &body.metadata)).await?,
    ))
}

/// Grow a vVol (resizeVirtualVolume)
#[utoipa::path(
    post, path = "/v1/vvols/{id}/resize", operation_id = "resizeVirtualVolume", params(VvolPath),
    request_body(content = ResizeVvolRequest),
    responses((status = 200, description = "The vVol", body = VvolInfo), (status = 400, response = BadRequest), (status = 404, response = NotFound))
)]
async fn resize_vvol(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
    JsonBody(body): JsonBody<ResizeVvolRequest>,
) -> Result<Json<VvolInfo>, ApiError> {
    let id = vvol_id(&id)?;
    Ok(Json(
        vvols_blocking(&state, move |v| v.resize(&id, body.size_mib)).await?,
    ))
}

/// Clone a vVol or snapshot vVol (cloneVirtualVolume, fastCloneVirtualVolume with "fast"); instant
#[utoipa::path(
    post, path = "/v1/vvols/{id}/clone", operation_id = "cloneVirtualVolume", params(VvolPath),
    request_body(content = CloneSpec),
    responses((status = 201, description = "The clone", body = VvolInfo), (status = 400, response = BadRequest), (status = 404, response = NotFound))
)]
async fn clone_vvol(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
    JsonBody(body): JsonBody<CloneSpec>,
) -> Result<(StatusCode, Json<VvolInfo>), ApiError> {
    let id = vvol_id(&id)?;
    let info = vvols_blocking(&state, move |v| v.clone_vvol(&id, body)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// Revert a vVol to one of its snapshot vVols (revertVirtualVolume; 409 for another's snapshot)
#[utoipa::path(
    post, path = "/v1/vvols/{id}/revert", operation_id = "revertVirtualVolume", params(VvolPath),
    request_body(content = RevertRequest),
    responses((status = 200, description = "The vVol", body = VvolInfo), (status = 404, response = NotFound), (status = 409, description = "Incompatible volume"))
)]
async fn revert_vvol(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
    JsonBody(body): JsonBody<RevertRequest>,
) -> Result<Json<VvolInfo>, ApiError> {
    let id = vvol_id(&id)?;
    let snapshot = vvol_id(&body.snapshot)?;
    Ok(Json(
        vvols_blocking(&state, move |v| v.revert(&id, &snapshot)).await?,
    ))
}

/// Prepare a snapshot of a vVol (prepareToSnapshotVirtualVolume): its id once committed
#[utoipa::path(
    post, path = "/v1/vvols/{id}/prepare-snapshot", operation_id = "prepareToSnapshotVirtualVolume", params(VvolPath),
    request_body(content = PrepareSnapshotRequest),
    responses((status = 200, description = "The prepared snapshot", body = PreparedSnapshot), (status = 404, response = NotFound))
)]
async fn prepare_snapshot(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
    JsonBody(body): JsonBody<PrepareSnapshotRequest>,
) -> Result<Json<PreparedSnapshot>, ApiError> {
    let id = vvol_id(&id)?;
    Ok(Json(
        vvols_blocking(&state, move |v| v.prepare_snapshot(&id, body.kind)).await?,
    ))
}

/// Commit prepared snapshots at one instant (snapshotVirtualVolume): all or none, a result each
#[utoipa::path(
    post, path = "/v1/vvols/snapshot", operation_id = "snapshotVirtualVolume",
    request_body(content = CommitSnapshotsRequest),
    responses((status = 200, description = "A result per snapshot and the commit window", body = SnapshotCommit), (status = 504, description = "Not committed within the timeout"))
)]
async fn commit_snapshots(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CommitSnapshotsRequest>,
) -> Result<Json<SnapshotCommit>, ApiError> {
    Ok(Json(
        vvols_blocking(&state, move |v| {
            v.commit_snapshots(&body.snapshots, body.timeout_ms)
        })
        .await?,
    ))
}

/// Bind vVols to a host (bindVirtualVolume): a subsidiary LUN of its protocol endpoint each
#[utoipa::path(
    post, path = "/v1/vvols/bind", operation_id = "bindVirtualVolume",
    request_body(content = BindRequest),
    responses((status = 200, description = "A binding or a fault per id", body = Vec<BindingItem>), (status = 429, description = "Too many requests in flight for the host"))
)]
async fn bind_vvols(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<BindRequest>,
) -> Result<Json<Vec<ItemResult<Binding>>>, ApiError> {
    Ok(Json(
        vvols_blocking(&state, move |v| v.bind(&body.host, &body.ids)).await?,
    ))
}

/// Unbind vVols from a host (unbindVirtualVolume); a swap vVol unbound from its last host is emptied
#[utoipa::path(
    post, path = "/v1/vvols/unbind", operation_id = "unbindVirtualVolume",
    request_body(content = BindRequest),
    responses((status = 200, description = "A result or a fault per id", body = Vec<UnbindItem>), (status = 429, description = "Too many requests in flight for the host"))
)]
async fn unbind_vvols(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<BindRequest>,
) -> Result<Json<Vec<ItemResult<bool>>>, ApiError> {
    let answers = vvols_blocking(&state, move |v| v.unbind(&body.host, &body.ids)).await?;
    Ok(Json(
        answers
            .into_iter()
            .map(|a| ItemResult {
                id: a.id,
                result: a.result.map(|()| true),
                fault: a.fault,
            })
            .collect(),
    ))
}

/// Unbind every vVol from a host (unbindAllVirtualVolumesFromHost)
#[utoipa::path(
    post, path = "/v1/vvols/unbind-all", operation_id = "unbindAllVirtualVolumesFromHost",
    request_body(content = HostRequest, example = json!({"host": "esx1"})),
    responses((status = 200, description = "How many were unbound", body = UnboundCount))
)]
async fn unbind_all(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<HostRequest>,
) -> Result<Json<UnboundCount>, ApiError> {
    let unbound = vvols_blocking(&state, move |v| v.unbind_all(&body.host)).await? as u64;
    Ok(Json(UnboundCount { unbound }))
}

/// Which chunks of a segment hold data (allocatedBitmapVirtualVolume), and where data lies next
///
/// A bit per chunk, most significant bit first; at most 4 MiB of bitmap. The cost follows the data in
/// the segment, not its length.
#[utoipa::path(
    post, path = "/v1/vvols/{id}/allocated-bitmap", operation_id = "allocatedBitmapVirtualVolume", params(VvolPath),
    request_body(content = Segment, example = json!({"offset_bytes": 0, "length_bytes": 1048576, "chunk_bytes": 4096})),
    responses((status = 200, description = "The bitmap", body = AllocatedBitmap), (status = 400, response = BadRequest), (status = 507, description = "A bitmap over 4 MiB"))
)]
async fn allocated_bitmap(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
    JsonBody(segment): JsonBody<Segment>,
) -> Result<Json<AllocatedBitmap>, ApiError> {
    let id = vvol_id(&id)?;
    Ok(Json(
        vvols_blocking(&state, move |v| v.allocated_bitmap(&id, segment)).await?,
    ))
}

/// Body of the unshared bitmap and chunk calls: a segment and the base vVol.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnsharedRequest {
    /// The vVol to compare with (a snapshot vVol of this one, for a backup)
    pub base: String,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    pub chunk_bytes: u64,
}

impl UnsharedRequest {
    fn parts(self) -> Result<(VvolId, Segment), ApiError> {
        let segment = Segment {
            offset_bytes: self.offset_bytes,
            length_bytes: self.length_bytes,
            chunk_bytes: self.chunk_bytes,
        };
        Ok((vvol_id(&self.base)?, segment))
    }
}

/// Which chunks of a segment read other than the base vVol (unsharedBitmapVirtualVolume)
#[utoipa::path(
    post, path = "/v1/vvols/{id}/unshared-bitmap", operation_id = "unsharedBitmapVirtualVolume", params(VvolPath),
    request_body(content = UnsharedRequest),
    responses((status = 200, description = "The bitmap", body = AllocatedBitmap), (status = 400, response = BadRequest), (status = 404, response = NotFound))
)]
async fn unshared_bitmap(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
    JsonBody(body): JsonBody<UnsharedRequest>,
) -> Result<Json<AllocatedBitmap>, ApiError> {
    let id = vvol_id(&id)?;
    let (base, segment) = body.parts()?;
    Ok(Json(
        vvols_blocking(&state, move |v| v.unshared_bitmap(&id, &base, segment)).await?,
    ))
}

/// How many chunks of a segment are unshared with the base vVol (unsharedChunksVirtualVolume)
#[utoipa::path(
    post, path = "/v1/vvols/{id}/unshared-chunks", operation_id = "unsharedChunksVirtualVolume", params(VvolPath),
    request_body(content = UnsharedRequest),
    responses((status = 200, description = "The counts", body = UnsharedChunks), (status = 400, response = BadRequest), (status = 404, response = NotFound))
)]
async fn unshared_chunks(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
    JsonBody(body): JsonBody<UnsharedRequest>,
) -> Result<Json<UnsharedChunks>, ApiError> {
    let id = vvol_id(&id)?;
    let (base, segment) = body.parts()?;
    Ok(Json(
        vvols_blocking(&state, move |v| v.unshared_chunks(&id, &base, segment)).await?,
    ))
}

/// A vVol's space (spaceStatsForVirtualVolume)
#[utoipa::path(
    get, path = "/v1/vvols/{id}/space", operation_id = "spaceStatsForVirtualVolume", params(VvolPath),
    responses((status = 200, description = "Its space", body = VvolSpace), (status = 404, response = NotFound), (status = 500, response = InternalError))
)]
async fn vvol_space(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
) -> Result<Json<VvolSpace>, ApiError> {
    let id = vvol_id(&id)?;
    Ok(Json(vvols_blocking(&state, move |v| v.space(&id)).await?))
}

/// A storage container's space as vVols see it (spaceStatsForStorageContainer)
#[utoipa::path(
    get, path = "/v1/vvol-containers/{container}", operation_id = "spaceStatsForStorageContainer", params(ContainerPath),
    responses((status = 200, description = "Its space", body = ContainerSpace), (status = 404, response = NotFound))
)]
async fn container_vvol_space(
    State(state): State<ApiState>,
    PathParam(container): PathParam,
) -> Result<Json<ContainerSpace>, ApiError> {
    Ok(Json(
        vvols_blocking(&state, move |v| v.container_space(&container)).await?,
    ))
}

/// Every storage container as a vVol datastore (queryStorageContainer)
#[utoipa::path(
    get, path = "/v1/vvol-containers", operation_id = "queryStorageContainer",
    responses((status = 200, description = "The containers", body = Vec<ContainerSpace>))
)]
async fn vvol_containers(
    State(state): State<ApiState>,
) -> Result<Json<Vec<ContainerSpace>>, ApiError> {
    Ok(Json(vvols_blocking(&state, |v| v.containers()).await?))
}

/// The protocol endpoints, host by host (queryProtocolEndpoint)
#[utoipa::path(
    get, path = "/v1/protocol-endpoints", operation_id = "queryProtocolEndpoint",
    responses((status = 200, description = "Each host's protocol endpoint", body = Vec<HostEndpoint>))
)]
async fn protocol_endpoints(
    State(state): State<ApiState>,
) -> Result<Json<Vec<HostEndpoint>>, ApiError> {
    Ok(Json(
        vvols_blocking(&state, |v| Ok(v.protocol_endpoints())).await?,
    ))
}

/// The limits the array advertises to hosts (VASA's provider information)
#[utoipa::path(
    get, path = "/v1/vvol-provider", operation_id = "getProviderInfo",
    responses((status = 200, description = "The vVol service's limits", body = ProviderInfo))
)]
async fn provider_info(State(state): State<ApiState>) -> Result<Json<ProviderInfo>, ApiError> {
    Ok(Json(
        vvols_blocking(&state, |_| Ok(ProviderInfo::current())).await?,
    ))
}

/// The task in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TaskPath {
    /// Task id
    task: u64,
}

/// Tasks after an id: the operations VASA runs as tasks, each with its outcome
#[utoipa::path(
    get, path = "/v1/vvol-tasks", operation_id = "listTasks", params(EventsQuery),
    responses((status = 200, description = "The tasks, oldest first", body = Vec<TaskInfo>))
)]
async fn list_tasks(
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Json<Vec<TaskInfo>>, ApiError> {
    Ok(Json(
        vvols_blocking(&state, move |v| Ok(v.tasks_since(query.since))).await?,
    ))
}

fn task_id(text: &str) -> Result<u64, ApiError> {
    text.parse()
        .map_err(|_| ApiError::BadRequest(format!("'{}' is not a task id", text.escape_debug())))
}

/// A task (getTaskUpdate): every one has finished by the time its call answered
#[utoipa::path(
    get, path = "/v1/vvol-tasks/{task}", operation_id = "getTaskUpdate", params(TaskPath),
    responses((status = 200, description = "The task", body = TaskInfo), (status = 404, response = NotFound))
)]
async fn show_task(
    State(state): State<ApiState>,
    PathParam(task): PathParam,
) -> Result<Json<TaskInfo>, ApiError> {
    let id = task_id(&task)?;
    Ok(Json(vvols_blocking(&state, move |v| v.task(id)).await?))
}

/// Cancel a task (cancelTask): 400, saying how it ended, since every task has finished
#[utoipa::path(
    delete, path = "/v1/vvol-tasks/{task}", operation_id = "cancelTask", params(TaskPath),
    responses((status = 400, response = BadRequest), (status = 404, response = NotFound))
)]
async fn cancel_task(
    State(state): State<ApiState>,
    PathParam(task): PathParam,
) -> Result<Json<TaskInfo>, ApiError> {
    let id = task_id(&task)?;
    Ok(Json(
        vvols_blocking(&state, move |v| v.cancel_task(id)).await?,
    ))
}

/// Events after an id (getEvents): vVols made, changed, bound and unbound; 410 when that id is no longer kept
#[utoipa::path(
    get, path = "/v1/vvol-events", operation_id = "getEvents", params(EventsQuery),
    responses((status = 200, description = "The events, oldest first", body = Vec<Event>), (status = 410, description = "Lost events: read the state again"))
)]
async fn vvol_events(
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Json<Vec<Event>>, ApiError> {
    Ok(Json(
        vvols_blocking(&state, move |v| v.events_since(query.since)).await?,
    ))
}
