//! Every failure the API reports, and how each becomes an HTTP status with a JSON
//! body `{"error": "..."}`. Clients (the CLI among them) print the message as is,
//! so messages are written for a person, not for a parser.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use lacuna_engine::EngineError;

use crate::hosts::HostControlError;

/// A failed request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// What the engine refused or failed to do; the status follows the variant.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// What the host registry refused or failed to do.
    #[error(transparent)]
    Hosts(#[from] HostControlError),
    /// What the vVol service refused or failed to do, by its VASA fault.
    #[error(transparent)]
    Vvol(#[from] lacuna_vvol::VvolFault),
    /// A vVol route on an API state built without the vVol service: 501.
    #[error("virtual volumes are not available on this server")]
    VvolsUnavailable,
    /// A history or event route on an API state built without the monitor: 501.
    #[error("history, events and sessions are not available on this server")]
    MonitorUnavailable,
    /// `POST /v1/events/{id}/acknowledge` of an event the log does not hold: 404.
    #[error("no event {0} (it may be older than the log keeps)")]
    NoSuchEvent(u64),
    /// `GET /v1/gateways` on an array that does not run on a Ceph pool: 501.
    #[error("this array runs on its data directory: it has no gateways (serve --store rados)")]
    GatewaysUnavailable,
    /// A VASA route on an API state built without the provider: 501.
    #[error("the VASA provider is not running on this server")]
    VasaUnavailable,
    /// A host route on an API state built without host management (see
    /// `ApiState::with_hosts`): 501, the server does not offer it.
    #[error("host management is not available on this server")]
    HostsUnavailable,
    /// The request body or path could not be understood (malformed JSON, a missing
    /// or unknown field, a wrong type).
    #[error("{0}")]
    BadRequest(String),
    /// The request body is larger than the API accepts.
    #[error("request body too large (limit {limit_bytes} bytes)")]
    BodyTooLarge { limit_bytes: usize },
    /// The request body did not arrive in time.
    #[error("the request body did not arrive within {timeout_s} s")]
    BodyTimeout { timeout_s: u64 },
    /// A body was sent without `Content-Type: application/json`.
    #[error("expected a JSON body with 'Content-Type: application/json'")]
    UnsupportedMediaType,
    #[error("missing or invalid bearer token (see <data-dir>/api-token)")]
    Unauthorized,
    #[error("no such endpoint: {method} {path}")]
    NoRoute { method: String, path: String },
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// A bug or a crashed worker, not the caller's fault.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Engine(e) => engine_status(e),
            ApiError::Hosts(e) => match e {
                HostControlError::HostNotFound(_) => StatusCode::NOT_FOUND,
                HostControlError::HostExists(_) => StatusCode::CONFLICT,
                HostControlError::Invalid(_) => StatusCode::BAD_REQUEST,
                HostControlError::Engine(e) => engine_status(e),
                HostControlError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            ApiError::HostsUnavailable
            | ApiError::VvolsUnavailable
            | ApiError::VasaUnavailable
            | ApiError::MonitorUnavailable
            | ApiError::GatewaysUnavailable => StatusCode::NOT_IMPLEMENTED,
            ApiError::NoSuchEvent(_) => StatusCode::NOT_FOUND,
            ApiError::Vvol(fault) => vvol_status(fault),
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

fn engine_status(e: &EngineError) -> StatusCode {
    match e {
        EngineError::VolumeNotFound(_)
        | EngineError::SnapshotNotFound(_)
        | EngineError::ContainerNotFound(_) => StatusCode::NOT_FOUND,
        EngineError::VolumeExists(_)
        | EngineError::SnapshotExists(_)
        | EngineError::ContainerExists(_) => StatusCode::CONFLICT,
        EngineError::InvalidArgument(_) | EngineError::OutOfRange { .. } => StatusCode::BAD_REQUEST,
        EngineError::NoSpace(_) => StatusCode::INSUFFICIENT_STORAGE,
        EngineError::Corruption(_)
        | EngineError::Io { .. }
        | EngineError::Metadata(_)
        | EngineError::UnsupportedFormat { .. }
        | EngineError::WouldBlock(_) => StatusCode::INTERNAL_SERVER_ERROR,
        EngineError::Fenced(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

fn vvol_status(fault: &lacuna_vvol::VvolFault) -> StatusCode {
    use lacuna_vvol::VvolFault as F;
    match fault {
        F::NotFound(_) => StatusCode::NOT_FOUND,
        F::InvalidArgument(_) => StatusCode::BAD_REQUEST,
        F::IncompatibleVolume(_) | F::ResourceInUse(_) => StatusCode::CONFLICT,
        F::OutOfResource(_) => StatusCode::INSUFFICIENT_STORAGE,
        F::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
        F::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
        F::LostEvent(_) => StatusCode::GONE,
        F::StorageFault(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The JSON body of every error response.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// What went wrong, for a person to read
    pub error: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            // The caller only sees the message; keep the details in the daemon log.
            tracing::error!(error = ?self, "API request failed");
        }
        let mut response = (
            status,
            Json(ErrorBody {
                error: self.to_string(),
            }),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"lacuna\""),
            );
        }
        response
    }
}
