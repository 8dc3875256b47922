//! Routing, authentication, body validation and the mapping of every engine error
//! to its status, against an in-memory double of the engine (so failures a real
//! array rarely produces — out of space, I/O errors — can be injected), plus the
//! real listener path through `serve`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use lacuna_api::{router, ApiState, ControlPlane, MAX_BODY_BYTES};
use lacuna_engine::{EngineError, SpaceReport, VolumeInfo};
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// An engine double: volumes in a map, and an optional error every call returns.
#[derive(Default)]
struct FakeArray {
    volumes: Mutex<BTreeMap<String, VolumeInfo>>,
    fail_with: Mutex<Option<fn() -> EngineError>>,
}

impl FakeArray {
    fn check(&self) -> Result<(), EngineError> {
        match *self.fail_with.lock().unwrap() {
            Some(make) => Err(make()),
            None => Ok(()),
        }
    }
}

fn info(name: &str, size_bytes: u64) -> VolumeInfo {
    VolumeInfo {
        name: name.to_string(),
        id: 1,
        size_bytes,
        written_bytes: 0,
        thin_provisioning_percent: 100.0,
        logical_data_bytes: 0,
        unique_physical_bytes: 0,
        shared_physical_bytes: 0,
        data_reduction_ratio: 1.0,
        created_unix_s: 0,
        provisioning: lacuna_engine::Provisioning::Thin,
        reserved_bytes: 0,
        snapshot_count: 0,
        destroyed_unix_s: None,
        eradicate_at_unix_s: None,
    }
}

impl ControlPlane for FakeArray {
    fn list_volumes(&self) -> Result<Vec<VolumeInfo>, EngineError> {
        self.check()?;
        Ok(self.volumes.lock().unwrap().values().cloned().collect())
    }

    fn volume_info(&self, name: &str) -> Result<VolumeInfo, EngineError> {
        self.check()?;
        let volumes = self.volumes.lock().unwrap();
        volumes
            .get(name)
            .cloned()
            .ok_or_else(|| EngineError::VolumeNotFound(name.to_string()))
    }

    fn create_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo, EngineError> {
        self.check()?;
        let mut volumes = self.volumes.lock().unwrap();
        if volumes.contains_key(name) {
            return Err(EngineError::VolumeExists(name.to_string()));
        }
        let v = info(name, size_bytes);
        volumes.insert(name.to_string(), v.clone());
        Ok(v)
    }

    fn resize_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo, EngineError> {
        self.check()?;
        let mut volumes = self.volumes.lock().unwrap();
        let v = volumes
            .get_mut(name)
            .ok_or_else(|| EngineError::VolumeNotFound(name.to_string()))?;
        v.size_bytes = size_bytes;
        Ok(v.clone())
    }

    fn delete_volume(&self, name: &str) -> Result<(), EngineError> {
        self.check()?;
        self.volumes
            .lock()
            .unwrap()
            .remove(name)
            .map(drop)
            .ok_or_else(|| EngineError::VolumeNotFound(name.to_string()))
    }

    fn space(&self) -> Result<SpaceReport, EngineError> {
        self.check()?;
        Ok(space_report())
    }
}

pub fn space_report() -> SpaceReport {
    SpaceReport {
        capacity_bytes: 1 << 30,
        physical_used_bytes: 0,
        live_physical_bytes: 0,
        stale_bytes: 0,
        free_bytes: 1 << 30,
        provisioned_bytes: 0,
        logical_data_bytes: 0,
        reclaim_backlog_bytes: 0,
        data_reduction_ratio: 1.0,
        total_reduction_ratio: 1.0,
        volume_count: 0,
        segment_count: 0,
        volume_unique_bytes: 0,
        snapshot_bytes: 0,
        shared_bytes: 0,
        reserved_bytes: 0,
        thin_available_bytes: 1 << 30,
        soft_threshold_percent: 80,
        soft_threshold_exceeded: false,
        soft_threshold_events: 0,
        snapshot_count: 0,
        destroyed_volume_count: 0,
    }
}

struct Response {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Value,
}

/// Sends one request; `body` is sent as JSON when given.
async fn send(
    app: &axum::Router,
    method: &str,
    uri: &str,
    authorization: Option<&str>,
    body: Option<&str>,
) -> Response {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(value) = authorization {
        request = request.header(header::AUTHORIZATION, value);
    }
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let request = request
        .body(Body::from(body.unwrap_or_default().to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{method} {uri}: body is not JSON ({e}): {bytes:?}"))
    };
    Response {
        status,
        headers,
        body,
    }
}

fn app() -> (axum::Router, Arc<FakeArray>) {
    let fake = Arc::new(FakeArray::default());
    (router(ApiState::new(fake.clone(), TOKEN)), fake)
}

fn bearer() -> Option<&'static str> {
    Some(concat!(
        "Bearer ",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    ))
}

/// Asserts a JSON error with the given status and returns its message.
fn error_message(response: &Response, status: StatusCode) -> String {
    assert_eq!(response.status, status, "{}", response.body);
    response.body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {}", response.body))
        .to_string()
}

#[tokio::test]
async fn token_is_required_everywhere_but_healthz() {
    let (app, _) = app();
    let routes = [
        ("GET", "/v1/volumes"),
        ("POST", "/v1/volumes"),
        ("GET", "/v1/volumes/a"),
        ("PATCH", "/v1/volumes/a"),
        ("DELETE", "/v1/volumes/a"),
        ("GET", "/v1/array/space"),
        ("GET", "/v1/openapi.json"),
        // Unknown paths too: probing without the token learns nothing.
        ("GET", "/v1/nothing"),
        ("PUT", "/v1/volumes"),
    ];
    let wrong = format!("Bearer {}", TOKEN.replace('0', "1"));
    for (method, uri) in routes {
        for authorization in [
            None,
            Some(wrong.as_str()),
            Some("Bearer "),
            Some("Basic dXNlcjpwYXNz"),
            Some(TOKEN), // no scheme
            Some(&TOKEN[..TOKEN.len() - 1]),
        ] {
            let r = send(&app, method, uri, authorization, Some("{}")).await;
            let message = error_message(&r, StatusCode::UNAUTHORIZED);
            assert!(message.contains("token"), "{message}");
            assert!(r.headers.contains_key(header::WWW_AUTHENTICATE));
        }
    }
    let r = send(&app, "GET", "/healthz", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, json!({"status": "ok"}));
    // The scheme is case-insensitive.
    let r = send(
        &app,
        "GET",
        "/v1/volumes",
        Some(&format!("bearer {TOKEN}")),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

#[tokio::test]
async fn volume_lifecycle_statuses() {
    let (app, _) = app();
    let create = r#"{"name":"v1","size_bytes":1048576}"#;
    let r = send(&app, "POST", "/v1/volumes", bearer(), Some(create)).await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.body["name"], "v1");
    let r = send(&app, "POST", "/v1/volumes", bearer(), Some(create)).await;
    assert!(error_message(&r, StatusCode::CONFLICT).contains("already exists"));
    let r = send(&app, "GET", "/v1/volumes", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body.as_array().unwrap().len(), 1);
    let r = send(
        &app,
        "PATCH",
        "/v1/volumes/v1",
        bearer(),
        Some(r#"{"size_bytes":2097152}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["size_bytes"], 2097152);
    let r = send(&app, "DELETE", "/v1/volumes/v1", bearer(), None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(r.body, Value::Null);
    let r = send(&app, "GET", "/v1/volumes/v1", bearer(), None).await;
    assert!(error_message(&r, StatusCode::NOT_FOUND).contains("does not exist"));
    let r = send(&app, "GET", "/v1/array/space", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, serde_json::to_value(space_report()).unwrap());
}

#[tokio::test]
async fn every_engine_error_maps_to_its_status() {
    let (app, fake) = app();
    let cases: [(fn() -> EngineError, StatusCode); 8] = [
        (
            || EngineError::VolumeNotFound("v".into()),
            StatusCode::NOT_FOUND,
        ),
        (
            || EngineError::VolumeExists("v".into()),
            StatusCode::CONFLICT,
        ),
        (
            || EngineError::InvalidArgument("bad size".into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            || EngineError::OutOfRange {
                offset_bytes: 0,
                length_bytes: 1,
                size_bytes: 0,
            },
            StatusCode::BAD_REQUEST,
        ),
        (
            || EngineError::NoSpace("array full".into()),
            StatusCode::INSUFFICIENT_STORAGE,
        ),
        (
            || EngineError::Corruption("bad crc".into()),
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
        (
            || EngineError::io("writing segment 7", std::io::Error::other("disk on fire")),
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
        (
            || EngineError::Metadata("redb".into()),
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
    ];
    for (make, status) in cases {
        *fake.fail_with.lock().unwrap() = Some(make);
        for (method, uri, body) in [
            ("GET", "/v1/volumes", None),
            (
                "POST",
                "/v1/volumes",
                Some(r#"{"name":"v","size_bytes":512}"#),
            ),
            ("GET", "/v1/volumes/v", None),
            ("PATCH", "/v1/volumes/v", Some(r#"{"size_bytes":512}"#)),
            ("DELETE", "/v1/volumes/v", None),
            ("GET", "/v1/array/space", None),
        ] {
            let r = send(&app, method, uri, bearer(), body).await;
            let message = error_message(&r, status);
            // The engine's own message reaches the client unchanged.
            assert_eq!(message, make().to_string(), "{method} {uri}");
        }
    }
}

#[tokio::test]
async fn malformed_bodies_get_json_errors() {
    let (app, fake) = app();
    let bad_request = [
        (r#"{"name":"x""#, "EOF"),
        ("", "EOF"),
        ("not json", "expected"),
        ("[]", "expected struct"),
        (r#"{"name":"x","size_bytes":-1}"#, "invalid value"),
        (r#"{"name":"x","size_bytes":"1G"}"#, "invalid type"),
        (r#"{"name":"x","size_bytes":1.5}"#, "invalid type"),
        (r#"{"name":"x","size_bytes":18446744073709551616}"#, ""),
        (r#"{"name":"x"}"#, "missing field `size_bytes`"),
        (r#"{"name":"x","size":1}"#, "unknown field `size`"),
    ];
    for (body, expected) in bad_request {
        let r = send(&app, "POST", "/v1/volumes", bearer(), Some(body)).await;
        let message = error_message(&r, StatusCode::BAD_REQUEST);
        assert!(message.contains(expected), "{body}: {message}");
    }
    let r = send(&app, "PATCH", "/v1/volumes/x", bearer(), Some("{}")).await;
    assert!(error_message(&r, StatusCode::BAD_REQUEST).contains("size_bytes"));
    // No Content-Type.
    let request = Request::post("/v1/volumes")
        .header(header::AUTHORIZATION, bearer().unwrap())
        .body(Body::from(r#"{"name":"x","size_bytes":512}"#))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // Over the body limit.
    let big = format!(
        r#"{{"name":"{}","size_bytes":512}}"#,
        "x".repeat(MAX_BODY_BYTES)
    );
    let r = send(&app, "POST", "/v1/volumes", bearer(), Some(&big)).await;
    assert!(error_message(&r, StatusCode::PAYLOAD_TOO_LARGE).contains("too large"));
    // Nothing reached the engine.
    assert!(fake.volumes.lock().unwrap().is_empty());
}

#[tokio::test]
async fn unknown_routes_and_methods_get_json_errors() {
    let (app, _) = app();
    let r = send(&app, "GET", "/v1/nothing", bearer(), None).await;
    assert!(error_message(&r, StatusCode::NOT_FOUND).contains("/v1/nothing"));
    let r = send(&app, "GET", "/v1/volumes/a/b", bearer(), None).await;
    error_message(&r, StatusCode::NOT_FOUND);
    let r = send(&app, "PUT", "/v1/volumes/a", bearer(), None).await;
    assert!(error_message(&r, StatusCode::METHOD_NOT_ALLOWED).contains("PUT"));
    assert!(r.headers.contains_key(header::ALLOW));
    let r = send(&app, "POST", "/healthz", None, None).await;
    error_message(&r, StatusCode::METHOD_NOT_ALLOWED);
    // A path parameter that is not UTF-8 once decoded.
    let r = send(&app, "GET", "/v1/volumes/%FF", bearer(), None).await;
    error_message(&r, StatusCode::BAD_REQUEST);
}

/// The OpenAPI document is served, every operation it lists is routed, every
/// route is listed, schemas name exactly the fields the API sends, and every
/// `$ref` resolves.
#[tokio::test]
async fn openapi_document_matches_router_and_types() {
    let (app, _) = app();
    let r = send(&app, "GET", "/v1/openapi.json", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    let doc = r.body;
    assert_eq!(doc, lacuna_api::openapi::document());
    assert_eq!(doc["openapi"], "3.0.3");

    let routes = [
        ("/healthz", "get"),
        ("/v1/volumes", "get"),
        ("/v1/volumes", "post"),
        ("/v1/volumes/{name}", "get"),
        ("/v1/volumes/{name}", "patch"),
        ("/v1/volumes/{name}", "delete"),
        ("/v1/array/space", "get"),
        ("/v1/openapi.json", "get"),
    ];
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if method == "parameters" {
                continue;
            }
            documented.push((path.clone(), method.clone()));
            assert!(operation["responses"].is_object(), "{method} {path}");
            let secured = operation.get("security") != Some(&json!([]));
            assert_eq!(
                secured,
                operation["responses"].get("401").is_some(),
                "{method} {path}: 401 documented exactly when a token is needed"
            );
            // The operation exists: with a token and a valid body it is neither
            // an unknown route nor a wrong method.
            let uri = path.replace("{name}", "v");
            let body = match method.as_str() {
                "post" => Some(r#"{"name":"v","size_bytes":512}"#),
                "patch" => Some(r#"{"size_bytes":512}"#),
                _ => None,
            };
            let r = send(&app, &method.to_uppercase(), &uri, bearer(), body).await;
            assert!(
                r.status.is_success() || r.status == StatusCode::NOT_FOUND,
                "{method} {path}: {} {}",
                r.status,
                r.body
            );
            assert!(
                !r.body["error"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("no such endpoint"),
                "{method} {path} is documented but not routed"
            );
            let status = r.status.as_u16().to_string();
            assert!(
                operation["responses"].get(&status).is_some(),
                "{method} {path} answered {status}, which is not documented"
            );
        }
    }
    let mut expected: Vec<_> = routes
        .iter()
        .map(|(p, m)| (p.to_string(), m.to_string()))
        .collect();
    expected.sort();
    documented.sort();
    assert_eq!(documented, expected);

    let schemas = &doc["components"]["schemas"];
    let check = |schema: &str, example: Value| {
        let mut sent: Vec<String> = example.as_object().unwrap().keys().cloned().collect();
        let mut listed: Vec<String> = schemas[schema]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("schema {schema}"))
            .keys()
            .cloned()
            .collect();
        let mut required: Vec<String> = schemas[schema]["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        sent.sort();
        listed.sort();
        required.sort();
        assert_eq!(listed, sent, "schema {schema}");
        assert_eq!(required, sent, "schema {schema}");
    };
    check("VolumeInfo", serde_json::to_value(info("v", 512)).unwrap());
    check("SpaceReport", serde_json::to_value(space_report()).unwrap());
    check(
        "CreateVolumeRequest",
        serde_json::to_value(lacuna_api::CreateVolumeRequest {
            name: "v".into(),
            size_bytes: 512,
        })
        .unwrap(),
    );
    check(
        "ResizeVolumeRequest",
        serde_json::to_value(lacuna_api::ResizeVolumeRequest { size_bytes: 512 }).unwrap(),
    );
    check(
        "Error",
        serde_json::to_value(lacuna_api::ErrorBody { error: "x".into() }).unwrap(),
    );

    fn refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.push(r.clone());
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let pointer = r.strip_prefix('#').expect("local reference");
        assert!(doc.pointer(pointer).is_some(), "dangling $ref {r}");
    }
}

/// The real listener: `serve` answers plain HTTP/1.1 on a TCP socket.
#[tokio::test]
async fn serve_answers_on_a_socket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = ApiState::new(Arc::new(FakeArray::default()), TOKEN);
    let server = tokio::spawn(lacuna_api::serve(listener, state));
    for (request, expected) in [
        (
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_string(),
            "HTTP/1.1 200",
        ),
        (
            "GET /v1/volumes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_string(),
            "HTTP/1.1 401",
        ),
        (
            format!("GET /v1/volumes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"),
            "HTTP/1.1 200",
        ),
    ] {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with(expected), "{response}");
        assert!(
            response.to_ascii_lowercase().contains("content-type: application/json"),
            "{response}"
        );
    }
    server.abort();
}
