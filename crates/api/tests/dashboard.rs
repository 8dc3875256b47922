//! The dashboard over HTTP against a real engine: sign-in with the token, the
//! session cookie's flags, pages refused without a session, figures equal to
//! the API's, and acknowledging an event with (and only with) the session's
//! anti-forgery token. (The browser tests are in crates/lacuna/tests.)

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use lacuna_api::{router, ApiState};
use lacuna_monitor::{EventKind, Monitor, NewEvent, Severity};
use tower::ServiceExt;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

async fn send(
    app: &axum::Router,
    method: &str,
    uri: &str,
    cookie: Option<&str>,
    form: Option<&str>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    if form.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let request = request
        .body(Body::from(form.unwrap_or_default().to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 4 << 20)
        .await
        .unwrap();
    Answer {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

fn location(answer: &Answer) -> &str {
    answer.headers[header::LOCATION].to_str().unwrap()
}

/// The value of the page's first `name="csrf"` input.
fn csrf_of(page: &str) -> String {
    let at = page
        .find(r#"name="csrf" value=""#)
        .expect("a form with the token")
        + 19;
    page[at..at + 64].to_string()
}

/// The exact bytes a page shows for figure `name`.
fn figure_bytes(page: &str, name: &str) -> u64 {
    let key = format!(r#"data-figure="{name}" data-bytes=""#);
    let at = page
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in {page}"))
        + key.len();
    page[at..].split('"').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn sign_in_pages_figures_and_acknowledge_with_the_session_token() {
    let dir = tempfile::tempdir().unwrap();
    let engine =
        lacuna_engine::Engine::open(lacuna_engine::EngineConfig::new(dir.path(), 1 << 30)).unwrap();
    engine.create_volume("vm1", 64 << 20).unwrap();
    engine
        .open_volume("vm1")
        .unwrap()
        .write(0, &vec![7u8; 1 << 20])
        .unwrap();
    let monitor = Arc::new(Monitor::open(dir.path()).unwrap());
    let app = router(ApiState::new(engine.clone(), TOKEN).with_monitor(monitor.clone()));

    // Without a session every page sends to the sign-in page, which is open.
    for (method, uri) in [
        ("GET", "/"),
        ("GET", "/volumes"),
        ("GET", "/events"),
        ("POST", "/events/1/acknowledge"),
    ] {
        let r = send(&app, method, uri, None, Some("csrf=x")).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{method} {uri}");
        assert_eq!(location(&r), "/login");
    }
    let r = send(&app, "GET", "/", Some("lacuna_session=forged"), None).await;
    assert_eq!(location(&r), "/login", "an unknown session is none");
    let r = send(&app, "GET", "/login", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.contains(r#"name="token""#), "{}", r.body);
    let csp = r.headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    // The API still wants its bearer token: a session cookie is not one.
    let r = send(&app, "GET", "/v1/array/space", None, None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    let r = send(&app, "POST", "/login", None, Some("token=wrong")).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.body.contains("not the API token") && r.headers.get(header::SET_COOKIE).is_none());
    let r = send(
        &app,
        "POST",
        "/login",
        None,
        Some(&format!("token={TOKEN}")),
    )
    .await;
    assert_eq!((r.status, location(&r)), (StatusCode::SEE_OTHER, "/"));
    let set_cookie = r.headers[header::SET_COOKIE].to_str().unwrap().to_string();
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"),
        "{set_cookie}"
    );
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    assert!(!cookie.contains(TOKEN));

    // The overview's figures are the API's.
    let space = engine.space();
    let r = send(&app, "GET", "/", Some(&cookie), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(figure_bytes(&r.body, "capacity"), space.capacity_bytes);
    assert_eq!(figure_bytes(&r.body, "free"), space.free_bytes);
    assert_eq!(
        figure_bytes(&r.body, "volume-unique"),
        space.volume_unique_bytes
    );
    assert!(r.body.contains("<svg") && r.body.contains(r#"data-title="IOPS""#));
    assert!(!r.body.contains(TOKEN), "no secret on a page");
    let r = send(&app, "GET", "/volumes", Some(&cookie), None).await;
    assert!(r.body.contains(r#"data-volume="vm1""#), "{}", r.body);
    assert!(r.body.contains(&format!(r#"data-bytes="{}""#, 64u64 << 20)));

    // An event, acknowledged from the events page: a wrong or missing
    // anti-forgery token is refused and changes nothing.
    monitor
        .events
        .raise(
            1,
            vec![NewEvent {
                severity: Severity::Critical,
                kind: EventKind::ChecksumError,
                subject: Some("vm1".into()),
                message: "checksum error reading 4096 bytes at offset 8192 of vm1".into(),
            }],
        )
        .unwrap();
    let r = send(&app, "GET", "/events", Some(&cookie), None).await;
    assert!(
        r.body.contains("offset 8192 of vm1")
            && r.body.contains(r#"action="/events/1/acknowledge""#),
        "{}",
        r.body
    );
    let csrf = csrf_of(&r.body);
    let r = send(
        &app,
        "POST",
        "/events/1/acknowledge",
        Some(&cookie),
        Some("csrf=0000"),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = send(
        &app,
        "POST",
        "/events/1/acknowledge",
        Some(&cookie),
        Some(""),
    )
    .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    assert!(monitor.events.list(0, true, 10).len() == 1, "still open");
    let r = send(
        &app,
        "POST",
        "/events/1/acknowledge",
        Some(&cookie),
        Some(&format!("csrf={csrf}")),
    )
    .await;
    assert_eq!((r.status, location(&r)), (StatusCode::SEE_OTHER, "/events"));
    assert!(monitor.events.list(0, true, 10).is_empty(), "acknowledged");
    let r = send(&app, "GET", "/", Some(&cookie), None).await;
    assert!(r.body.contains("None."), "no open alerts left");

    // Signing out ends the session.
    let r = send(
        &app,
        "POST",
        "/logout",
        Some(&cookie),
        Some(&format!("csrf={csrf}")),
    )
    .await;
    assert_eq!(location(&r), "/login");
    let r = send(&app, "GET", "/", Some(&cookie), None).await;
    assert_eq!(location(&r), "/login");
    engine.close().unwrap();
}
