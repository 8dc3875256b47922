//! The web dashboard, served on the API's address: a sign-in page that takes
//! the API token, then pages rendered on the server (HTML and SVG, no script,
//! nothing fetched from elsewhere) from the same figures the API answers.
//!
//! Why server-rendered: the README's two commands need no toolchain beyond
//! cargo, and a page without script is one a strict Content-Security-Policy
//! (`default-src 'none'`) can hold to. Forms (acknowledge, sign out) carry the
//! session's anti-forgery token; the cookie is `HttpOnly` and
//! `SameSite=Strict`. Every page but the sign-in page needs a session.

mod actions;
pub mod cache;
mod pages;
mod plot;
pub mod session;
mod views;

use axum::extract::{Form, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::Markup;
use serde::Deserialize;

use crate::{tokens_match, ApiState};
use session::{cookie_value, csrf_matches, COOKIE, SESSION_LIFETIME_S};

/// The session's anti-forgery token, for the page being rendered.
#[derive(Clone)]
struct Csrf(String);

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Headers every dashboard answer carries: no script, no framing, no sniffing.
fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn page(markup: Markup) -> Response {
    secure(markup.into_response())
}

/// Lets a request with a live session through (its anti-forgery token in
/// the request's extensions); sends any other to the sign-in page.
async fn require_session(
    State(state): State<ApiState>,
    mut request: Request,
    next: Next,
) -> Response {
    let csrf = request
        .headers()
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|cookies| cookie_value(cookies, COOKIE))
        .and_then(|id| state.sessions.csrf_of(id, now_unix_s()));
    match csrf {
        Some(csrf) => {
            request.extensions_mut().insert(Csrf(csrf));
            next.run(request).await
        }
        None => secure(Redirect::to("/login").into_response()),
    }
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

async fn login_page() -> Response {
    page(pages::login(None))
}

async fn login(State(state): State<ApiState>, Form(form): Form<LoginForm>) -> Response {
    if !tokens_match(form.token.trim().as_bytes(), state.token.as_bytes()) {
        let mut response = page(pages::login(Some("That is not the API token.")));
        *response.status_mut() = StatusCode::UNAUTHORIZED;
        return response;
    }
    let (id, _) = state.sessions.create(now_unix_s());
    let mut response = secure(Redirect::to("/").into_response());
    let cookie =
        format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={SESSION_LIFETIME_S}");
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("hex and ASCII"),
    );
    response
}

/// Refuses a form whose anti-forgery token is not the session's.
fn forged(expected: &Csrf, offered: &str) -> Option<Response> {
    if csrf_matches(offered, &expected.0) {
        return None;
    }
    Some(secure(
        (
            StatusCode::FORBIDDEN,
            "the form is not from this session (sign in again)",
        )
            .into_response(),
    ))
}

async fn logout(
    State(state): State<ApiState>,
    axum::Extension(csrf): axum::Extension<Csrf>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = forged(&csrf, &form.csrf) {
        return refused;
    }
    if let Some(id) = headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|cookies| cookie_value(cookies, COOKIE))
    {
        state.sessions.end(id);
    }
    let mut response = secure(Redirect::to("/login").into_response());
    let expired = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&expired).expect("ASCII"),
    );
    response
}

fn failure(message: String) -> Response {
    secure((StatusCode::INTERNAL_SERVER_ERROR, message).into_response())
}

async fn overview(
    State(state): State<ApiState>,
    axum::Extension(csrf): axum::Extension<Csrf>,
) -> Response {
    let control = state.control.clone();
    let space = match tokio::task::spawn_blocking(move || control.space()).await {
        Ok(Ok(space)) => space,
        Ok(Err(e)) => return failure(format!("reading the space report: {e}")),
        Err(e) => return failure(format!("space task failed: {e}")),
    };
    let (samples, open) = match &state.monitor {
        Some(monitor) => (
            monitor.history.samples(lacuna_monitor::Window::Hour, 0),
            monitor.events.list(0, true, 20),
        ),
        None => (Vec::new(), Vec::new()),
    };
    page(pages::layout(
        "Overview",
        "/",
        &csrf.0,
        pages::overview(&space, &samples, &open, &csrf.0),
    ))
}

/// Runs `f` on the control plane, or answers the error page.
async fn read<T: Send + 'static>(
    state: &ApiState,
    f: impl FnOnce(&dyn crate::ControlPlane) -> Result<T, lacuna_engine::EngineError> + Send + 'static,
) -> Result<T, Response> {
    crate::blocking(state, f)
        .await
        .map_err(|e| secure((e.status(), e.to_string()).into_response()))
}

/// The hosts, or none when this server has no host registry.
async fn host_list(state: &ApiState) -> Result<Vec<crate::HostInfo>, Response> {
    if state.hosts.is_none() {
        return Ok(Vec::new());
    }
    crate::hosts_blocking(state, |h| h.list_hosts())
        .await
        .map_err(|e| secure((e.status(), e.to_string()).into_response()))
}

fn live_sessions(state: &ApiState) -> Vec<lacuna_monitor::LiveSession> {
    state
        .live
        .as_ref()
        .map(|l| l.live_sessions())
        .unwrap_or_default()
}

fn hour(state: &ApiState) -> Vec<lacuna_monitor::Sample> {
    state
        .monitor
        .as_ref()
        .map(|m| m.history.samples(lacuna_monitor::Window::Hour, 0))
        .unwrap_or_default()
}

async fn volumes(
    State(state): State<ApiState>,
    axum::Extension(csrf): axum::Extension<Csrf>,
) -> Response {
    let listed = state
        .pages
        .listing(read(&state, |c| {
            Ok((
                c.list_volumes(false)?,
                c.list_volumes(true)?,
                c.list_containers()?,
            ))
        }))
        .await;
    let listed = match listed {
        Ok(listed) => listed,
        Err(response) => return response,
    };
    let (live, destroyed, containers) = &*listed;
    let hosts = match host_list(&state).await {
        Ok(hosts) => hosts,
        Err(response) => return response,
    };
    page(pages::layout(
        "Volumes",
        "/volumes",
        &csrf.0,
        views::volume_list(live, destroyed, containers, &hosts, &csrf.0),
    ))
}

async fn volume(
    State(state): State<ApiState>,
    axum::Extension(csrf): axum::Extension<Csrf>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Response {
    let wanted = name.clone();
    let info = state
        .pages
        .volume(&name, read(&state, move |c| c.volume_info(&wanted)))
        .await;
    let info = match info {
        Ok(info) => info,
        Err(response) => return response,
    };
    let wanted = name.clone();
    let snapshots = match read(&state, move |c| c.list_snapshots(Some(&wanted), false)).await {
        Ok(snapshots) => snapshots,
        Err(response) => return response,
    };
    if info.destroyed_unix_s.is_some() {
        return secure(Redirect::to("/volumes").into_response());
    }
    let hosts = match host_list(&state).await {
        Ok(hosts) => hosts,
        Err(response) => return response,
    };
    let sessions = live_sessions(&state);
    let reach = views::Reach {
        hosts: &hosts,
        sessions: &sessions,
    };
    page(pages::layout(
        &format!("Volume {name}"),
        "/volumes",
        &csrf.0,
        views::volume_detail(&info, &snapshots, &hour(&state), reach, &csrf.0),
    ))
}

async fn containers(
    State(state): State<ApiState>,
    axum::Extension(csrf): axum::Extension<Csrf>,
) -> Response {
    match read(&state, |c| c.list_containers()).await {
        Ok(list) => page(pages::layout(
            "Containers",
            "/containers",
            &csrf.0,
            views::containers(&list, &hour(&state)),
        )),
        Err(response) => response,
    }
}

async fn hosts(
    State(state): State<ApiState>,
    axum::Extension(csrf): axum::Extension<Csrf>,
) -> Response {
    match host_list(&state).await {
        Ok(list) => page(pages::layout(
            "Hosts",
            "/hosts",
            &csrf.0,
            views::hosts(&list, &live_sessions(&state)),
        )),
        Err(response) => response,
    }
}

/// Most vVols the vVols page lists.
const MAX_VVOLS_SHOWN: usize = 2048;

async fn vvols(
    State(state): State<ApiState>,
    axum::Extension(csrf): axum::Extension<Csrf>,
) -> Response {
    let Some(service) = state.vvols.clone() else {
        let body = views::vvols(&[], false);
        return page(pages::layout("Virtual volumes", "/vvols", &csrf.0, body));
    };
    let listed = tokio::task::spawn_blocking(move || -> lacuna_vvol::Result<_> {
        let mut ids = Vec::new();
        for container in service.containers()? {
            let query = lacuna_vvol::VvolQuery {
                container: Some(container.container),
                ..Default::default()
            };
            ids.extend(service.query(&query)?.into_iter().map(|id| id.to_string()));
        }
        let truncated = ids.len() > MAX_VVOLS_SHOWN;
        ids.truncate(MAX_VVOLS_SHOWN);
        if ids.is_empty() {
            return Ok((Vec::new(), false));
        }
        let found = service.info(&ids)?;
        let infos: Vec<lacuna_vvol::VvolInfo> =
            found.into_iter().filter_map(|item| item.result).collect();
        Ok((infos, truncated))
    })
    .await;
    match listed {
        Ok(Ok((infos, truncated))) => page(pages::layout(
            "Virtual volumes",
            "/vvols",
            &csrf.0,
            views::vvols(&infos, truncated),
        )),
        Ok(Err(fault)) => failure(format!("listing vVols: {fault}")),
        Err(e) => failure(format!("vVol task failed: {e}")),
    }
}

async fn events(
    State(state): State<ApiState>,
    axum::Extension(csrf): axum::Extension<Csrf>,
) -> Response {
    let events = state
        .monitor
        .as_ref()
        .map(|m| m.events.list(0, false, crate::monitor::MAX_EVENTS_PER_PAGE))
        .unwrap_or_default();
    page(pages::layout(
        "Events",
        "/events",
        &csrf.0,
        pages::events(&events, &csrf.0),
    ))
}

async fn acknowledge(
    State(state): State<ApiState>,
    axum::Extension(csrf): axum::Extension<Csrf>,
    axum::extract::Path(id): axum::extract::Path<u64>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = forged(&csrf, &form.csrf) {
        return refused;
    }
    let Some(monitor) = state.monitor.clone() else {
        return secure(
            (StatusCode::NOT_IMPLEMENTED, "no event log on this server").into_response(),
        );
    };
    match tokio::task::spawn_blocking(move || monitor.events.acknowledge(id, now_unix_s())).await {
        Ok(Ok(_)) => secure(Redirect::to("/events").into_response()),
        Ok(Err(lacuna_monitor::EventLogError::NoSuchEvent(id))) => {
            secure((StatusCode::NOT_FOUND, format!("no event {id}")).into_response())
        }
        Ok(Err(e)) => failure(e.to_string()),
        Err(e) => failure(format!("acknowledge task failed: {e}")),
    }
}

/// The dashboard's routes: the sign-in page open, the rest behind a session.
pub(crate) fn routes(state: ApiState) -> Router<ApiState> {
    let behind_session = Router::new()
        .route("/", get(overview))
        .route("/volumes", get(volumes).post(actions::create_volume))
        .route("/volumes/{name}", get(volume))
        .route("/volumes/{name}/resize", post(actions::resize_volume))
        .route("/volumes/{name}/snapshot", post(actions::snapshot_volume))
        .route("/volumes/{name}/delete", post(actions::delete_volume))
        .route("/volumes/{name}/recover", post(actions::recover_volume))
        .route("/volumes/{name}/connect", post(actions::connect_volume))
        .route("/containers", get(containers))
        .route("/hosts", get(hosts))
        .route("/vvols", get(vvols))
        .route("/events", get(events))
        .route("/events/{id}/acknowledge", post(acknowledge))
        .route("/logout", post(logout))
        .layer(middleware::from_fn_with_state(state, require_session));
    Router::new()
        .route("/login", get(login_page).post(login))
        .merge(behind_session)
}
