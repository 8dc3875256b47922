//! What the dashboard's forms do: create, resize, snapshot, destroy and
//! recover a volume, connect it to a host. Each calls the control plane the
//! REST routes call, after the form's anti-forgery token is checked, then
//! sends the browser to the page that shows the result (or shows why not).

use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use lacuna_engine::Provisioning;
use serde::Deserialize;

use super::{forged, page, pages, secure, Csrf, CsrfForm};
use crate::size::parse_size;
use crate::{blocking, hosts_blocking, ApiError, ApiState, NewLun, DEFAULT_BLOCK_SIZE_BYTES};

/// The page that says why an action was refused.
fn refused(csrf: &Csrf, status: StatusCode, message: &str, back: &str) -> Response {
    let body = maud::html! {
        section #refused {
            p.critical role="alert" { (message) }
            p { a href=(back) { "Back" } }
        }
    };
    let mut response = page(pages::layout("Not done", "", &csrf.0, body));
    *response.status_mut() = status;
    response
}

/// Where the browser goes after an action: `then` when it was done (the
/// pages' cache emptied, so they show it), the refusal page otherwise.
async fn answer<T>(
    state: &ApiState,
    csrf: &Csrf,
    result: Result<T, ApiError>,
    then: &str,
    back: &str,
) -> Response {
    match result {
        Ok(_) => {
            state.pages.clear().await;
            secure(Redirect::to(then).into_response())
        }
        Err(error) => refused(csrf, error.status(), &error.to_string(), back),
    }
}

#[derive(Deserialize)]
pub struct CreateForm {
    csrf: String,
    name: String,
    size: String,
    container: Option<String>,
    provisioning: Option<Provisioning>,
}

pub async fn create_volume(
    State(state): State<ApiState>,
    Extension(csrf): Extension<Csrf>,
    Form(form): Form<CreateForm>,
) -> Response {
    if let Some(refusal) = forged(&csrf, &form.csrf) {
        return refusal;
    }
    let size_bytes = match parse_size(&form.size) {
        Ok(size) => size,
        Err(message) => return refused(&csrf, StatusCode::BAD_REQUEST, &message, "/volumes"),
    };
    let name = form.name.clone();
    let result = blocking(&state, move |c| {
        c.create_volume(
            &form.name,
            size_bytes,
            form.provisioning.unwrap_or_default(),
            form.container.as_deref().filter(|c| !c.is_empty()),
        )
    })
    .await;
    answer(
        &state,
        &csrf,
        result,
        &format!("/volumes/{name}"),
        "/volumes",
    )
    .await
}

#[derive(Deserialize)]
pub struct SizeForm {
    csrf: String,
    size: String,
}

pub async fn resize_volume(
    State(state): State<ApiState>,
    Extension(csrf): Extension<Csrf>,
    Path(name): Path<String>,
    Form(form): Form<SizeForm>,
) -> Response {
    if let Some(refusal) = forged(&csrf, &form.csrf) {
        return refusal;
    }
    let back = format!("/volumes/{name}");
    let size_bytes = match parse_size(&form.size) {
        Ok(size) => size,
        Err(message) => return refused(&csrf, StatusCode::BAD_REQUEST, &message, &back),
    };
    let result = blocking(&state, move |c| c.resize_volume(&name, size_bytes)).await;
    answer(&state, &csrf, result, &back, &back).await
}

#[derive(Deserialize)]
pub struct SnapshotForm {
    csrf: String,
    snapshot: Option<String>,
}

pub async fn snapshot_volume(
    State(state): State<ApiState>,
    Extension(csrf): Extension<Csrf>,
    Path(name): Path<String>,
    Form(form): Form<SnapshotForm>,
) -> Response {
    if let Some(refusal) = forged(&csrf, &form.csrf) {
        return refusal;
    }
    let back = format!("/volumes/{name}");
    let snapshot = form.snapshot.filter(|s| !s.trim().is_empty());
    let result = blocking(&state, move |c| {
        c.create_snapshots(&[name.as_str()], snapshot.as_deref(), None)
    })
    .await;
    answer(&state, &csrf, result, &back, &back).await
}

#[derive(Deserialize)]
pub struct ConfirmForm {
    csrf: String,
    confirm: Option<String>,
}

pub async fn delete_volume(
    State(state): State<ApiState>,
    Extension(csrf): Extension<Csrf>,
    Path(name): Path<String>,
    Form(form): Form<ConfirmForm>,
) -> Response {
    if let Some(refusal) = forged(&csrf, &form.csrf) {
        return refusal;
    }
    let back = format!("/volumes/{name}");
    if form.confirm.as_deref() != Some("yes") {
        let message = "tick the box to confirm the destroy";
        return refused(&csrf, StatusCode::BAD_REQUEST, message, &back);
    }
    let result = blocking(&state, move |c| c.delete_volume(&name)).await;
    answer(&state, &csrf, result, "/volumes", &back).await
}

pub async fn recover_volume(
    State(state): State<ApiState>,
    Extension(csrf): Extension<Csrf>,
    Path(name): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refusal) = forged(&csrf, &form.csrf) {
        return refusal;
    }
    let then = format!("/volumes/{name}");
    let result = blocking(&state, move |c| c.recover_volume(&name)).await;
    answer(&state, &csrf, result, &then, "/volumes").await
}

#[derive(Deserialize)]
pub struct ConnectForm {
    csrf: String,
    host: String,
    lun: Option<String>,
}

pub async fn connect_volume(
    State(state): State<ApiState>,
    Extension(csrf): Extension<Csrf>,
    Path(name): Path<String>,
    Form(form): Form<ConnectForm>,
) -> Response {
    if let Some(refusal) = forged(&csrf, &form.csrf) {
        return refusal;
    }
    let back = format!("/volumes/{name}");
    let lun = match form.lun.as_deref().map(str::trim).filter(|l| !l.is_empty()) {
        None => None,
        Some(text) => match text.parse::<u64>() {
            Ok(lun) => Some(lun),
            Err(_) => {
                let message = format!("LUN {text:?} is not a number");
                return refused(&csrf, StatusCode::BAD_REQUEST, &message, &back);
            }
        },
    };
    let new_lun = NewLun {
        volume: name,
        lun,
        block_size_bytes: DEFAULT_BLOCK_SIZE_BYTES,
        removable: false,
    };
    let host = form.host;
    let result = hosts_blocking(&state, move |h| h.connect(&host, new_lun)).await;
    answer(&state, &csrf, result, &back, &back).await
}
