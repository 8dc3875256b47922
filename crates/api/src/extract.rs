//! Extractors whose rejections are [`ApiError`]s, so a malformed body or path gets
//! the same JSON error shape as every other failure instead of axum's plain text.

use std::fmt::Write as _;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::MAX_BODY_BYTES;

/// How long a request's body may take to arrive once its head has: a client
/// trickling a body holds a connection no longer than this.
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A JSON request body.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let read = Json::<serde_json::Value>::from_request(req, state);
        let value = match tokio::time::timeout(BODY_TIMEOUT, read).await {
            Ok(Ok(Json(value))) => value,
            Ok(Err(rejection)) => return Err(json_rejection(rejection)),
            Err(_) => {
                return Err(ApiError::BodyTimeout {
                    timeout_s: BODY_TIMEOUT.as_secs(),
                })
            }
        };
        check_int64(&value, &mut String::new())?;
        serde_json::from_value(value)
            .map(JsonBody)
            .map_err(|e| ApiError::BadRequest(format!("invalid request body: {e}")))
    }
}

/// The document declares every integer `int64`: a body with a larger one
/// (which a `u64` field would take) is refused for every field alike, saying
/// which. `path` is the JSON pointer of `value`.
fn check_int64(value: &serde_json::Value, path: &mut String) -> Result<(), ApiError> {
    match value {
        serde_json::Value::Number(n) if n.is_u64() && n.as_i64().is_none() => {
            Err(ApiError::BadRequest(format!(
                "invalid request body: {n} at {} is above {}, the largest integer the API takes (int64)",
                if path.is_empty() { "/" } else { path },
                i64::MAX
            )))
        }
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                if !holds_numbers(item) {
                    continue;
                }
                let len = path.len();
                write!(path, "/{i}").expect("a String takes any text");
                check_int64(item, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        serde_json::Value::Object(fields) => {
            for (key, item) in fields {
                let len = path.len();
                path.push('/');
                path.push_str(key);
                check_int64(item, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Whether `value` is or may contain a number: strings, booleans and nulls
/// are skipped without building their path (a batch is a thousand ids).
fn holds_numbers(value: &serde_json::Value) -> bool {
    matches!(
        value,
        serde_json::Value::Number(_) | serde_json::Value::Array(_) | serde_json::Value::Object(_)
    )
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType,
        JsonRejection::JsonDataError(e) => {
            ApiError::BadRequest(format!("invalid request body: {}", error_source_text(&e)))
        }
        JsonRejection::JsonSyntaxError(e) => ApiError::BadRequest(format!(
            "malformed JSON in request body: {}",
            error_source_text(&e)
        )),
        other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::BodyTooLarge {
            limit_bytes: MAX_BODY_BYTES,
        },
        other => ApiError::BadRequest(format!("cannot read request body: {}", other.body_text())),
    }
}

/// axum's rejection text is generic ("Failed to parse the request body as JSON");
/// serde's message underneath says what is wrong and where.
fn error_source_text(e: &dyn std::error::Error) -> String {
    let mut innermost = e;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    innermost.to_string()
}

/// The single path parameter of a route (a volume name, or `VOL@SNAP`).
pub struct PathParam(pub String);

impl<S> FromRequestParts<S> for PathParam
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(PathParam(value)),
            Err(rejection) => Err(path_rejection(rejection)),
        }
    }
}

fn path_rejection(rejection: PathRejection) -> ApiError {
    if rejection.status().is_server_error() {
        ApiError::Internal(rejection.body_text())
    } else {
        ApiError::BadRequest(rejection.body_text())
    }
}

/// The query string of a request. Unknown parameters and values of the wrong type
/// are a 400 with serde's message, like bodies.
pub struct QueryParams<T>(pub T);

impl<S, T> FromRequestParts<S> for QueryParams<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(QueryParams(value)),
            Err(rejection) => Err(ApiError::BadRequest(format!(
                "invalid query string: {}",
                error_source_text(&rejection)
            ))),
        }
    }
}
