//! The array's history and its event log: `GET /v1/array/history` (the last
//! hour at 5 s or the last day at 1 min), `GET /v1/events` and
//! `POST /v1/events/{id}/acknowledge`, and the sessions open now
//! (`GET /v1/sessions`). The figures are what the daemon's sampler recorded
//! (`lacuna_monitor`); nothing here reads the engine.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use lacuna_monitor::{Event, LiveSession, Monitor, Sample, Window};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::doc_only::{BadRequest, InternalError, NotFound, NotImplemented};
use crate::extract::{PathParam, QueryParams};
use crate::{ApiError, ApiState};

/// Where the sessions open now come from (the daemon joins its transports'
/// views: iSCSI nexuses and NBD connections).
pub trait LiveSessionSource: Send + Sync + 'static {
    fn live_sessions(&self) -> Vec<LiveSession>;
}

/// Body of `GET /v1/sessions`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionsAnswer {
    /// iSCSI sessions, then NBD connections, each oldest first
    pub sessions: Vec<LiveSession>,
}

/// Most events one `GET /v1/events` answers.
pub const MAX_EVENTS_PER_PAGE: usize = 1000;

/// Query of `GET /v1/array/history`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// `hour` (5 s samples, the default) or `day` (1 min samples)
    #[serde(default)]
    #[param(inline, nullable = false)]
    pub window: Option<Window>,
    /// Only samples that end after this instant (seconds since the Unix epoch)
    #[serde(default)]
    #[param(nullable = false)]
    pub since_unix_s: Option<u64>,
}

/// Body of `GET /v1/array/history`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HistoryAnswer {
    #[schema(inline)]
    pub window: Window,
    /// Seconds between samples
    pub interval_s: u64,
    /// Oldest first
    pub samples: Vec<Sample>,
}

/// Query of `GET /v1/events`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events with a larger id (to poll for new ones)
    #[serde(default)]
    #[param(nullable = false)]
    pub after_id: Option<u64>,
    /// true: only events not acknowledged
    #[serde(default)]
    #[param(default = false)]
    pub open: bool,
    /// At most this many (the newest), 1 to 1000; default 1000
    #[serde(default)]
    #[param(nullable = false)]
    pub limit: Option<usize>,
}

/// Body of `GET /v1/events`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventsAnswer {
    /// Oldest first
    pub events: Vec<Event>,
    /// Events not acknowledged, of severity warning
    pub open_warnings: u64,
    /// Events not acknowledged, of severity critical
    pub open_critical: u64,
}

/// The event in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct EventPath {
    /// The event's id
    id: u64,
}

fn monitor(state: &ApiState) -> Result<Arc<Monitor>, ApiError> {
    state.monitor.clone().ok_or(ApiError::MonitorUnavailable)
}

/// The array's figures over time: I/O per protocol and direction, space, reclaim per container
#[utoipa::path(
    get, path = "/v1/array/history", operation_id = "arrayHistory", params(HistoryQuery),
    responses((status = 200, description = "Samples, oldest first", body = HistoryAnswer), (status = 400, response = BadRequest), (status = 501, response = NotImplemented))
)]
async fn array_history(
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<HistoryQuery>,
) -> Result<Json<HistoryAnswer>, ApiError> {
    let monitor = monitor(&state)?;
    let window = query.window.unwrap_or(Window::Hour);
    let interval_s = match window {
        Window::Hour => lacuna_monitor::history::FINE_INTERVAL_S,
        Window::Day => lacuna_monitor::history::COARSE_INTERVAL_S,
    };
    Ok(Json(HistoryAnswer {
        window,
        interval_s,
        samples: monitor
            .history
            .samples(window, query.since_unix_s.unwrap_or(0)),
    }))
}

/// The event log, oldest first: soft threshold, space, read and checksum errors, scrub results, fencing, refused hosts, certificate expiry
#[utoipa::path(
    get, path = "/v1/events", operation_id = "listEvents", params(EventsQuery),
    responses((status = 200, description = "Events", body = EventsAnswer), (status = 400, response = BadRequest), (status = 501, response = NotImplemented))
)]
async fn list_events(
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Json<EventsAnswer>, ApiError> {
    let monitor = monitor(&state)?;
    let limit = query.limit.unwrap_or(MAX_EVENTS_PER_PAGE);
    if !(1..=MAX_EVENTS_PER_PAGE).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be 1 to {MAX_EVENTS_PER_PAGE}, not {limit}"
        )));
    }
    let events = monitor
        .events
        .list(query.after_id.unwrap_or(0), query.open, limit);
    let (open_warnings, open_critical) = monitor.events.open_counts();
    Ok(Json(EventsAnswer {
        events,
        open_warnings,
        open_critical,
    }))
}

/// Acknowledge an event (again: no change; the first time is kept)
#[utoipa::path(
    post, path = "/v1/events/{id}/acknowledge", operation_id = "acknowledgeEvent", params(EventPath),
    responses((status = 200, description = "The event", body = Event), (status = 400, response = BadRequest), (status = 404, response = NotFound), (status = 500, response = InternalError), (status = 501, response = NotImplemented))
)]
async fn acknowledge_event(
    State(state): State<ApiState>,
    PathParam(id): PathParam,
) -> Result<Json<Event>, ApiError> {
    let monitor = monitor(&state)?;
    let id: u64 = id
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("event id {id:?} is not a number")))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    tokio::task::spawn_blocking(move || monitor.events.acknowledge(id, now))
        .await
        .map_err(|e| ApiError::Internal(format!("acknowledge task failed: {e}")))?
        .map(Json)
        .map_err(|e| match e {
            lacuna_monitor::EventLogError::NoSuchEvent(id) => ApiError::NoSuchEvent(id),
            other => ApiError::Internal(other.to_string()),
        })
}

/// The iSCSI sessions and NBD connections open now, with the host each belongs to
#[utoipa::path(
    get, path = "/v1/sessions", operation_id = "listSessions",
    responses((status = 200, description = "Open sessions", body = SessionsAnswer), (status = 501, response = NotImplemented))
)]
async fn list_sessions(State(state): State<ApiState>) -> Result<Json<SessionsAnswer>, ApiError> {
    let source = state.live.clone().ok_or(ApiError::MonitorUnavailable)?;
    let sessions = tokio::task::spawn_blocking(move || source.live_sessions())
        .await
        .map_err(|e| ApiError::Internal(format!("session listing failed: {e}")))?;
    Ok(Json(SessionsAnswer { sessions }))
}

pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::default()
        .routes(routes!(list_sessions))
        .routes(routes!(array_history))
        .routes(routes!(list_events))
        .routes(routes!(acknowledge_event))
}
