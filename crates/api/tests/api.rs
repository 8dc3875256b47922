//! The API over a real engine in a temporary directory: authentication,
//! validation, JSON errors for malformed bodies, and an OpenAPI document that
//! names every route.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use lacuna_api::{load_or_create_token, router, ApiState};
use lacuna_engine::{Engine, EngineConfig};
use serde_json::Value;
use tower::ServiceExt;

struct Fixture {
    app: axum::Router,
    token: String,
    dir: std::path::PathBuf,
    engine: std::sync::Arc<Engine>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.engine.close();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fixture(tag: &str) -> Fixture {
    let dir = std::env::temp_dir().join(format!("lacuna-api-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(EngineConfig::new(dir.clone(), 1 << 30)).unwrap();
    let token = load_or_create_token(&dir).unwrap();
    Fixture {
        app: router(ApiState::new(engine.clone(), token.clone())),
        token,
        dir,
        engine,
    }
}

async fn call(
    f: &Fixture,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    if body.is_some() {
        request = request.header("Content-Type", "application/json");
    }
    let request = request
        .body(Body::from(body.unwrap_or("").to_string()))
        .unwrap();
    let response = f.app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, value)
}

#[tokio::test]
async fn every_route_needs_the_token() {
    let f = fixture("auth");
    for (method, uri) in [
        ("GET", "/v1/volumes"),
        ("GET", "/v1/array/space"),
        ("DELETE", "/v1/volumes/x"),
        ("GET", "/v1/openapi.json"),
    ] {
        let (status, body) = call(&f, method, uri, None, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri}");
        assert!(body["error"].is_string());
        let (status, _) = call(&f, method, uri, Some("wrong"), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri}");
    }
    let (status, _) = call(&f, "GET", "/healthz", None, None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn volumes_lifecycle_and_errors() {
    let f = fixture("volumes");
    let t = Some(f.token.as_str());
    let (status, body) = call(
        &f,
        "POST",
        "/v1/volumes",
        t,
        Some(r#"{"name":"v1","size_bytes":1048576}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["size_bytes"], 1048576);
    assert_eq!(body["thin_provisioning_percent"], 100.0);
    let (status, _) = call(
        &f,
        "POST",
        "/v1/volumes",
        t,
        Some(r#"{"name":"v1","size_bytes":1048576}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = call(
        &f,
        "POST",
        "/v1/volumes",
        t,
        Some(r#"{"name":"bad name","size_bytes":1048576}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("invalid volume name"));
    let (status, _) = call(
        &f,
        "POST",
        "/v1/volumes",
        t,
        Some(r#"{"name":"odd","size_bytes":1000}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    for malformed in [
        r#"{"name":"x""#,
        r#"{"name":"x","size_bytes":-1}"#,
        r#"{"name":"x","size_bytes":1,"extra":1}"#,
        "[]",
        "",
    ] {
        let (status, body) = call(&f, "POST", "/v1/volumes", t, Some(malformed)).await;
        assert!(status.is_client_error(), "{malformed}: {status}");
        assert!(body["error"].is_string(), "{malformed}: {body}");
    }
    let (status, body) = call(
        &f,
        "PATCH",
        "/v1/volumes/v1",
        t,
        Some(r#"{"size_bytes":2097152}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["size_bytes"], 2097152);
    let (status, body) = call(&f, "GET", "/v1/volumes", t, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.as_array().unwrap().len(), 1);
    let (status, body) = call(&f, "GET", "/v1/array/space", t, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["provisioned_bytes"], 2097152);
    let (status, _) = call(&f, "DELETE", "/v1/volumes/v1", t, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // Destroyed, not gone: still visible with its destruction time, not listed.
    let (status, body) = call(&f, "GET", "/v1/volumes/v1", t, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body["destroyed_unix_s"].is_u64(), "{body}");
    let (_, body) = call(&f, "GET", "/v1/volumes", t, None).await;
    assert_eq!(body.as_array().unwrap().len(), 0);
    let (status, _) = call(&f, "GET", "/v1/nothing", t, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let big = format!(r#"{{"name":"{}","size_bytes":1}}"#, "x".repeat(100_000));
    let (status, _) = call(&f, "POST", "/v1/volumes", t, Some(&big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn openapi_document_lists_every_route() {
    let f = fixture("openapi");
    let (status, doc) = call(&f, "GET", "/v1/openapi.json", Some(f.token.as_str()), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.0.3");
    let paths = doc["paths"].as_object().unwrap();
    for (path, methods) in [
        ("/healthz", vec!["get"]),
        ("/v1/volumes", vec!["get", "post"]),
        ("/v1/volumes/{name}", vec!["get", "patch", "delete"]),
        ("/v1/array/space", vec!["get"]),
        ("/v1/openapi.json", vec!["get"]),
    ] {
        for method in methods {
            assert!(paths[path][method].is_object(), "{method} {path} missing");
        }
    }
}
