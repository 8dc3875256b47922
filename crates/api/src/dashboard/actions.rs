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
use crate::{blocking, hosts_blocking, ApiError, ApiState, NewLun, DEFAULT_BLOCK_SIZE_BYTES};

/// A size as an administrator types it: bytes, or a number with K, M, G, T
/// or P (binary units, an optional `iB`/`B`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (for example 10G or 512M)"))?;
    let shift = match unit.trim().trim_end_matches("iB").trim_end_matches('B') {
        "" => 0,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        "T" | "t" => 40,
        "P" | "p" => 50,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use K, M, G, T or P)"
            ))
        }
    };
    let bytes = number * (1u64 << shift) as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) || bytes.fract() != 0.0 {
        return Err(format!("{text:?} is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

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
    if let Some(refusal) = forged(&csrf, &CsrfForm { csrf: form.csrf }) {
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
    if let Some(refusal) = forged(&csrf, &CsrfForm { csrf: form.csrf }) {
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
    if let Some(refusal) = forged(&csrf, &CsrfForm { csrf: form.csrf }) {
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
    if let Some(refusal) = forged(&csrf, &CsrfForm { csrf: form.csrf }) {
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
    if let Some(refusal) = forged(&csrf, &form) {
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
    if let Some(refusal) = forged(&csrf, &CsrfForm { csrf: form.csrf }) {
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

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_read_as_an_administrator_types_them() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size(" 1.5 GiB "), Ok(3 << 29));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        for bad in ["", "G", "10X", "-1G", "0", "1.3", "99999999999P"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}
