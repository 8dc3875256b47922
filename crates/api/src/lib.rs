//! Lacuna's control plane: a small REST API (JSON over HTTP/1.1) for creating,
//! resizing and deleting volumes and for reading the array's space figures.
//!
//! Every request except `GET /healthz` must carry `Authorization: Bearer <token>`,
//! where the token lives in `<data_dir>/api-token` (see [`load_or_create_token`]).
//! The API listens on loopback by default and speaks plain HTTP; put a TLS proxy in
//! front of it to expose it further.
//!
//! Routes (the served OpenAPI document at `/v1/openapi.json` is the reference):
//!
//! | method | path                   | does                           |
//! |--------|------------------------|--------------------------------|
//! | GET    | `/healthz`             | liveness, no token needed      |
//! | GET    | `/v1/volumes`          | list volumes (a JSON array)    |
//! | POST   | `/v1/volumes`          | create `{name, size_bytes}`    |
//! | GET    | `/v1/volumes/{name}`   | one volume                     |
//! | PATCH  | `/v1/volumes/{name}`   | resize `{size_bytes}`          |
//! | DELETE | `/v1/volumes/{name}`   | delete                         |
//! | GET    | `/v1/array/space`      | array-wide space report        |
//! | GET    | `/v1/openapi.json`     | this API's OpenAPI 3.0 document|
//!
//! Errors are `{"error": "message"}` with 400 (invalid argument or body), 401
//! (token), 404 (no such volume or route), 409 (volume exists), 413 (body too
//! large), 415 (body not JSON), 507 (out of space) or 500 (I/O, metadata).

mod control;
mod error;
mod extract;
pub mod openapi;
mod token;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use lacuna_engine::{EngineError, SpaceReport, VolumeInfo};
use serde::{Deserialize, Serialize};

pub use control::ControlPlane;
pub use error::{ApiError, ErrorBody};
pub use token::{load_or_create_token, tokens_match, TOKEN_FILE_NAME};

use extract::{JsonBody, PathParam};

/// Largest request body accepted. Control-plane bodies are a few dozen bytes; the
/// limit only stops a client from making the daemon buffer junk.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// What every handler shares: the array and the token requests must present.
#[derive(Clone)]
pub struct ApiState {
    control: Arc<dyn ControlPlane>,
    token: Arc<str>,
}

impl ApiState {
    /// `control` is normally the daemon's `Arc<Engine>`.
    pub fn new<C: ControlPlane>(control: Arc<C>, token: impl Into<String>) -> ApiState {
        ApiState {
            control,
            token: Arc::from(token.into()),
        }
    }
}

/// Body of `POST /v1/volumes`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVolumeRequest {
    pub name: String,
    pub size_bytes: u64,
}

/// Body of `PATCH /v1/volumes/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeVolumeRequest {
    pub size_bytes: u64,
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
        .route("/v1/array/space", get(array_space))
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

async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".to_string(),
    })
}

/// Answers a JSON array of volumes, sorted by name.
async fn list_volumes(State(state): State<ApiState>) -> Result<Json<Vec<VolumeInfo>>, ApiError> {
    Ok(Json(blocking(&state, |c| c.list_volumes()).await?))
}

async fn create_volume(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateVolumeRequest>,
) -> Result<(StatusCode, Json<VolumeInfo>), ApiError> {
    let info = blocking(&state, move |c| {
        c.create_volume(&body.name, body.size_bytes)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(info)))
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

async fn array_space(State(state): State<ApiState>) -> Result<Json<SpaceReport>, ApiError> {
    Ok(Json(blocking(&state, |c| c.space()).await?))
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
