//! Routes, request bodies and the mapping of engine errors to HTTP statuses.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{middleware, Json, Router};
use lacuna_engine::EngineError;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{auth, openapi, ApiState, MAX_BODY_BYTES};

pub fn error_body(message: &str) -> Json<Value> {
    Json(json!({ "error": message }))
}

/// An error answered as JSON with the right status.
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, error_body(&self.1)).into_response()
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        let status = match &error {
            EngineError::VolumeNotFound(_) => StatusCode::NOT_FOUND,
            EngineError::VolumeExists(_) => StatusCode::CONFLICT,
            EngineError::InvalidArgument(_) | EngineError::OutOfRange { .. } => {
                StatusCode::BAD_REQUEST
            }
            EngineError::NoSpace(_) => StatusCode::INSUFFICIENT_STORAGE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, error.to_string())
    }
}

/// JSON body extractor whose rejections are JSON errors too.
pub struct Body<T>(T);

impl<S, T> FromRequest<S> for Body<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(Body(value)),
            Err(rejection) => Err(ApiError(rejection.status(), rejection.body_text())),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    name: String,
    size_bytes: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResizeVolume {
    size_bytes: u64,
}

/// Runs a blocking engine call off the async runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| {
            ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal error: {e}"),
            )
        })?
        .map_err(ApiError::from)
}

pub fn router(state: ApiState) -> Router {
    let protected = Router::new()
        .route("/v1/volumes", get(list_volumes).post(create_volume))
        .route(
            "/v1/volumes/{name}",
            get(show_volume).patch(resize_volume).delete(delete_volume),
        )
        .route("/v1/array/space", get(array_space))
        .route("/v1/openapi.json", get(openapi_document))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(json!({ "status": "ok" })) }),
        )
        .merge(protected)
        .fallback(|| async { ApiError(StatusCode::NOT_FOUND, "no such route".into()) })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn list_volumes(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let engine = state.engine.clone();
    let volumes = blocking(move || Ok(engine.list_volumes())).await?;
    Ok(Json(json!(volumes)))
}

async fn create_volume(
    State(state): State<ApiState>,
    Body(body): Body<CreateVolume>,
) -> Result<impl IntoResponse, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.create_volume(&body.name, body.size_bytes)).await?;
    Ok((StatusCode::CREATED, Json(json!(info))))
}

async fn show_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(json!(
        blocking(move || engine.volume_info(&name)).await?
    )))
}

async fn resize_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    Body(body): Body<ResizeVolume>,
) -> Result<Json<Value>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(json!(
        blocking(move || engine.resize_volume(&name, body.size_bytes)).await?
    )))
}

async fn delete_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.delete_volume(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn array_space(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(json!(blocking(move || Ok(engine.space())).await?)))
}

async fn openapi_document() -> Json<Value> {
    Json(openapi::document())
}
