//! The API over a real engine in a temporary directory: authentication,
//! validation, JSON errors for malformed bodies, snapshots, clones, range copies,
//! restores, provisioning types, destroy/recover/eradicate, hosts against the
//! daemon's real host registry, and an OpenAPI document that names every route.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use lacuna_api::{load_or_create_token, router, ApiState};
use lacuna_engine::{Engine, EngineConfig};
use serde_json::Value;
use tower::ServiceExt;

// The daemon's host registry and its `HostControl`: the host routes run against
// the real thing, persisting to the fixture's directory.
use lacuna_hosts as hosts;

struct Fixture {
    app: axum::Router,
    token: String,
    engine: std::sync::Arc<Engine>,
    /// Last field: fields drop in order, so the data directory goes after
    /// the engine handles (and after `drop` has closed the engine).
    dir: tempfile::TempDir,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.engine.close();
    }
}

fn fixture(tag: &str) -> Fixture {
    let dir = tempfile::Builder::new()
        .prefix(&format!("lacuna-api-{tag}-"))
        .tempdir()
        .unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path(), 1 << 30)).unwrap();
    let token = load_or_create_token(dir.path()).unwrap();
    let registry = std::sync::Arc::new(hosts::HostRegistry::open(dir.path(), false).unwrap());
    let host_control = std::sync::Arc::new(hosts::RegistryHosts {
        registry,
        engine: engine.clone(),
        on_delete: None,
    });
    Fixture {
        app: router(ApiState::new(engine.clone(), token.clone()).with_hosts(host_control)),
        token,
        engine,
        dir,
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
    let routes = lacuna_api::openapi::operations();
    // The routes the router serves, `GET /healthz` and the document's own among them.
    for path in ["/healthz", "/v1/openapi.json"] {
        assert!(
            routes.iter().any(|(m, p)| m == "GET" && p == path),
            "{path}"
        );
    }
    for (method, path) in routes {
        let method = method.as_str().to_ascii_lowercase();
        assert!(paths[&path][&method].is_object(), "{method} {path} missing");
    }
}

/// Hosts over the real registry and engine: secrets are stored (mode 0600) and
/// never answered, volumes are checked before they are connected, every refusal
/// has its status, and what was answered is what a restarted daemon loads.
#[tokio::test]
async fn hosts_against_the_real_registry() {
    let f = fixture("hosts");
    let t = Some(f.token.as_str());
    f.engine.create_volume("vm1", 1 << 20).unwrap();
    f.engine.create_volume("vm2", 1 << 20).unwrap();
    f.engine
        .create_snapshots(&["vm1"], Some("s1"), None)
        .unwrap();
    let (status, body) = call(&f, "GET", "/v1/hosts", t, None).await;
    assert_eq!((status, body), (StatusCode::OK, serde_json::json!([])));
    let create = r#"{"name":"esx1","iqns":["iqn.1998-01.com.vmware:esx1","iqn.1998-01.com.vmware:esx1b"],"chap_user":"esx1","chap_secret":"initiator-secret-1","mutual_chap_user":"lacuna","mutual_chap_secret":"target-secret-22"}"#;
    let (status, body) = call(&f, "POST", "/v1/hosts", t, Some(create)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["chap_user"], "esx1");
    assert_eq!(body["mutual_chap_user"], "lacuna");
    assert_eq!(body["luns"], serde_json::json!([]));
    assert!(!body.to_string().contains("secret"), "{body}");
    let file = f.dir.path().join(hosts::HOSTS_FILE_NAME);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("initiator-secret-1"));

    for (body, status, expected) in [
        (create, StatusCode::CONFLICT, "host 'esx1' already exists"),
        (
            r#"{"name":"h2","iqns":["iqn.1998-01.com.vmware:esx1"]}"#,
            StatusCode::BAD_REQUEST,
            "already belongs to host 'esx1'",
        ),
        (
            r#"{"name":"h2","iqns":["esx2"]}"#,
            StatusCode::BAD_REQUEST,
            "is not an iSCSI name",
        ),
        (
            r#"{"name":"h2","iqns":[]}"#,
            StatusCode::BAD_REQUEST,
            "at least one initiator",
        ),
        (
            r#"{"name":"h 2","iqns":["iqn.2024-01.org:h2"]}"#,
            StatusCode::BAD_REQUEST,
            "host name",
        ),
        (
            r#"{"name":"h2","iqns":["iqn.2024-01.org:h2"],"chap_user":"u","chap_secret":"tooshort"}"#,
            StatusCode::BAD_REQUEST,
            "CHAP secret must be 12 to 255 characters",
        ),
        (
            r#"{"name":"h2","iqns":["iqn.2024-01.org:h2"],"mutual_chap_user":"t","mutual_chap_secret":"target-secret-22"}"#,
            StatusCode::BAD_REQUEST,
            "mutual CHAP needs one-way CHAP",
        ),
    ] {
        let (got, answer) = call(&f, "POST", "/v1/hosts", t, Some(body)).await;
        assert_eq!(got, status, "{body}: {answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(message.contains(expected), "{body}: {message}");
        assert!(!message.contains("tooshort"), "{message}");
    }

    let fixture = &f;
    let connect =
        |body: &'static str| call(fixture, "POST", "/v1/hosts/esx1/connect", t, Some(body));
    let (status, body) = connect(r#"{"volume":"vm1"}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"lun": 0, "volume": "vm1", "block_size_bytes": 512, "removable": false, "read_only": false})
    );
    let (status, body) =
        connect(r#"{"volume":"vm1@s1","lun":9,"block_size_bytes":4096,"removable":true}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"lun": 9, "volume": "vm1@s1", "block_size_bytes": 4096, "removable": true, "read_only": true})
    );
    for (body, status, expected) in [
        (
            r#"{"volume":"nope"}"#,
            StatusCode::NOT_FOUND,
            "volume 'nope' does not exist",
        ),
        (
            r#"{"volume":"vm1@nope"}"#,
            StatusCode::NOT_FOUND,
            "vm1@nope",
        ),
        (
            r#"{"volume":"vm1"}"#,
            StatusCode::BAD_REQUEST,
            "already connected to host 'esx1' at LUN 0",
        ),
        (
            r#"{"volume":"vm2","lun":9}"#,
            StatusCode::BAD_REQUEST,
            "LUN 9 of host 'esx1' is taken by 'vm1@s1'",
        ),
        (
            r#"{"volume":"vm2","lun":16384}"#,
            StatusCode::BAD_REQUEST,
            "above 16383",
        ),
        (
            r#"{"volume":"vm2","block_size_bytes":520}"#,
            StatusCode::BAD_REQUEST,
            "512 or 4096",
        ),
    ] {
        let (got, answer) = connect(body).await;
        assert_eq!(got, status, "{body}: {answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(message.contains(expected), "{body}: {message}");
    }
    let (status, body) = call(
        &f,
        "POST",
        "/v1/hosts/nobody/connect",
        t,
        Some(r#"{"volume":"vm2"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"], "host 'nobody' does not exist");
    // A destroyed volume cannot be connected.
    f.engine.delete_volume("vm2").unwrap();
    let (status, _) = connect(r#"{"volume":"vm2"}"#).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, body) = call(&f, "GET", "/v1/hosts/esx1", t, None).await;
    assert_eq!(status, StatusCode::OK);
    let luns: Vec<&str> = body["luns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["volume"].as_str().unwrap())
        .collect();
    assert_eq!(luns, ["vm1", "vm1@s1"]);
    assert_eq!(body["iqns"].as_array().unwrap().len(), 2);
    // A restarted daemon loads what was answered.
    let reloaded = hosts::HostRegistry::open(f.dir.path(), false).unwrap();
    let again = serde_json::to_value(reloaded.get("esx1").unwrap()).unwrap();
    assert_eq!(again, body);

    let disconnect =
        |body: &'static str| call(fixture, "POST", "/v1/hosts/esx1/disconnect", t, Some(body));
    let (status, _) = disconnect(r#"{"volume":"vm1@s1"}"#).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = disconnect(r#"{"volume":"vm1@s1"}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().contains("is not connected"));
    let (status, _) = call(&f, "DELETE", "/v1/hosts/esx1", t, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for (method, uri) in [("GET", "/v1/hosts/esx1"), ("DELETE", "/v1/hosts/esx1")] {
        let (status, body) = call(&f, method, uri, t, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {uri}");
        assert_eq!(body["error"], "host 'esx1' does not exist");
    }
    assert!(!std::fs::read_to_string(&file)
        .unwrap()
        .contains("initiator-secret-1"));
}

/// Writes `data` at `offset_bytes` of a volume through the engine's data path.
fn write(f: &Fixture, volume: &str, offset_bytes: u64, data: &[u8]) {
    let v = f.engine.open_volume(volume).unwrap();
    v.write(offset_bytes, data).unwrap();
    v.flush().unwrap();
}

fn read(f: &Fixture, volume: &str, offset_bytes: u64, length_bytes: usize) -> Vec<u8> {
    let v = f.engine.open_volume(volume).unwrap();
    let mut buf = vec![0u8; length_bytes];
    v.read(offset_bytes, &mut buf).unwrap();
    buf
}

async fn create(f: &Fixture, body: &str) -> (StatusCode, Value) {
    call(f, "POST", "/v1/volumes", Some(f.token.as_str()), Some(body)).await
}

#[tokio::test]
async fn provisioning_types_and_reservations() {
    let f = fixture("provisioning");
    let t = Some(f.token.as_str());
    for (name, kind) in [
        ("thin1", "thin"),
        ("zt", "zeroedthick"),
        ("ezt", "eagerzeroedthick"),
    ] {
        let body = format!(r#"{{"name":"{name}","size_bytes":16777216,"provisioning":"{kind}"}}"#);
        let (status, v) = create(&f, &body).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        assert_eq!(v["provisioning"], kind);
        if kind == "thin" {
            assert_eq!(v["reserved_bytes"], 0, "{v}");
        } else {
            assert!(v["reserved_bytes"].as_u64().unwrap() >= 16 << 20, "{v}");
        }
    }
    // Without a type: thin.
    let (_, v) = create(&f, r#"{"name":"plain","size_bytes":1048576}"#).await;
    assert_eq!(v["provisioning"], "thin");
    // A thick reservation larger than the 1 GiB array: 507, nothing created;
    // the same size thin is fine.
    let (status, body) = create(
        &f,
        r#"{"name":"huge","size_bytes":4294967296,"provisioning":"zeroedthick"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("cannot reserve"),
        "{body}"
    );
    let (status, _) = call(&f, "GET", "/v1/volumes/huge", t, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = create(&f, r#"{"name":"huge","size_bytes":4294967296}"#).await;
    assert_eq!(status, StatusCode::CREATED);
    // The space report shows the reservations and the soft threshold.
    let (_, space) = call(&f, "GET", "/v1/array/space", t, None).await;
    assert!(
        space["reserved_bytes"].as_u64().unwrap() >= 32 << 20,
        "{space}"
    );
    assert_eq!(space["soft_threshold_percent"], 80);
    assert_eq!(space["soft_threshold_exceeded"], false);
    assert!(space["thin_available_bytes"].as_u64().unwrap() < 1 << 30);
}

#[tokio::test]
async fn snapshots_lifecycle() {
    let f = fixture("snapshots");
    let t = Some(f.token.as_str());
    create(&f, r#"{"name":"db","size_bytes":1048576}"#).await;
    create(&f, r#"{"name":"logs","size_bytes":1048576}"#).await;
    write(&f, "db", 0, &[7u8; 4096]);

    let (status, taken) = call(
        &f,
        "POST",
        "/v1/snapshots",
        t,
        Some(r#"{"volumes":["db"],"name":"s1"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{taken}");
    assert_eq!(taken["snapshots"][0]["full_name"], "db@s1");
    assert_eq!(taken["snapshots"][0]["size_bytes"], 1048576);
    assert!(taken["commit_window_us"].is_u64(), "{taken}");
    assert!(taken["prepare_us"].is_u64(), "{taken}");
    // The same name again: 409; an unknown volume: 404; no volume: 400.
    let (status, _) = call(
        &f,
        "POST",
        "/v1/snapshots",
        t,
        Some(r#"{"volumes":["db"],"name":"s1"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = call(
        &f,
        "POST",
        "/v1/snapshots",
        t,
        Some(r#"{"volumes":["nope"],"name":"s1"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&f, "POST", "/v1/snapshots", t, Some(r#"{"volumes":[]}"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // A consistency group: every member, one name, the group recorded.
    let (status, group) = call(
        &f,
        "POST",
        "/v1/snapshots",
        t,
        Some(r#"{"volumes":["db","logs"],"group":"g1"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{group}");
    let names: Vec<&str> = group["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["full_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["db@g1", "logs@g1"]);
    assert_eq!(group["snapshots"][1]["group"], "g1");
    assert!(group["commit_window_us"].is_u64());

    let (_, all) = call(&f, "GET", "/v1/snapshots", t, None).await;
    assert_eq!(all.as_array().unwrap().len(), 3, "{all}");
    let (_, of_db) = call(&f, "GET", "/v1/snapshots?volume=db", t, None).await;
    assert_eq!(of_db.as_array().unwrap().len(), 2, "{of_db}");
    let (status, _) = call(&f, "GET", "/v1/snapshots?volume=nope", t, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, one) = call(&f, "GET", "/v1/snapshots/db@s1", t, None).await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["name"], "s1");
    assert_eq!(one["destroyed_unix_s"], Value::Null);
    for missing in ["db@nope", "nope@s1", "db", "db%40"] {
        let (status, _) = call(&f, "GET", &format!("/v1/snapshots/{missing}"), t, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    }

    // Destroy: gone from the live list, listed as destroyed with its deadline.
    let (status, _) = call(&f, "DELETE", "/v1/snapshots/db%40s1", t, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&f, "DELETE", "/v1/snapshots/db@s1", t, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "already destroyed");
    let (_, of_db) = call(&f, "GET", "/v1/snapshots?volume=db", t, None).await;
    assert_eq!(of_db.as_array().unwrap().len(), 1, "{of_db}");
    let (_, destroyed) = call(&f, "GET", "/v1/snapshots?destroyed=true", t, None).await;
    assert_eq!(destroyed.as_array().unwrap().len(), 1, "{destroyed}");
    let at = destroyed[0]["destroyed_unix_s"].as_u64().unwrap();
    assert_eq!(
        destroyed[0]["eradicate_at_unix_s"].as_u64().unwrap(),
        at + 24 * 3600
    );
    let (_, one) = call(&f, "GET", "/v1/snapshots/db@s1", t, None).await;
    assert_eq!(one["destroyed_unix_s"], at);

    // Recover, then eradicating a live snapshot is refused.
    let (status, recovered) = call(&f, "POST", "/v1/snapshots/db@s1/recover", t, None).await;
    assert_eq!(status, StatusCode::OK, "{recovered}");
    assert_eq!(recovered["destroyed_unix_s"], Value::Null);
    let (status, _) = call(&f, "POST", "/v1/snapshots/db@s1/recover", t, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "not destroyed");
    let (status, body) = call(&f, "POST", "/v1/snapshots/db@s1/eradicate", t, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().contains("delete it first"));
    call(&f, "DELETE", "/v1/snapshots/db@s1", t, None).await;
    let (status, _) = call(&f, "POST", "/v1/snapshots/db@s1/eradicate", t, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&f, "GET", "/v1/snapshots/db@s1", t, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(&f, "POST", "/v1/snapshots/db@s1/recover", t, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn clones_restores_and_range_copies() {
    let f = fixture("clones");
    let t = Some(f.token.as_str());
    create(&f, r#"{"name":"src","size_bytes":1048576}"#).await;
    write(&f, "src", 0, &[1u8; 8192]);
    call(
        &f,
        "POST",
        "/v1/snapshots",
        t,
        Some(r#"{"volumes":["src"],"name":"before"}"#),
    )
    .await;
    write(&f, "src", 0, &[2u8; 8192]);

    // Clone of a snapshot (no size: the source's) and of the live volume.
    let (status, c1) = create(&f, r#"{"name":"c1","source":"src@before"}"#).await;
    assert_eq!(status, StatusCode::CREATED, "{c1}");
    assert_eq!(c1["size_bytes"], 1048576);
    assert_eq!(read(&f, "c1", 0, 8192), vec![1u8; 8192]);
    let (status, c2) = create(
        &f,
        r#"{"name":"c2","source":"src","size_bytes":1048576,"provisioning":"zeroedthick"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{c2}");
    assert_eq!(c2["provisioning"], "zeroedthick");
    assert_eq!(read(&f, "c2", 0, 8192), vec![2u8; 8192]);
    // Independent from then on.
    write(&f, "c2", 0, &[3u8; 4096]);
    assert_eq!(read(&f, "src", 0, 4096), vec![2u8; 4096]);
    // Errors: a size other than the source's, a missing source, an existing name.
    let (status, body) = create(&f, r#"{"name":"c3","source":"src","size_bytes":2097152}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = call(&f, "GET", "/v1/volumes/c3", t, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing created");
    let (status, _) = create(&f, r#"{"name":"c3","source":"src@nope"}"#).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = create(&f, r#"{"name":"c3","source":"nope"}"#).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = create(&f, r#"{"name":"c1","source":"src"}"#).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // Restore: back to the snapshot, by its name or VOL@NAME.
    let (status, restored) = call(
        &f,
        "POST",
        "/v1/volumes/src/restore",
        t,
        Some(r#"{"snapshot":"before"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{restored}");
    assert_eq!(restored["name"], "src");
    assert_eq!(read(&f, "src", 0, 8192), vec![1u8; 8192]);
    write(&f, "src", 0, &[9u8; 4096]);
    let (status, _) = call(
        &f,
        "POST",
        "/v1/volumes/src/restore",
        t,
        Some(r#"{"snapshot":"src@before"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read(&f, "src", 0, 4096), vec![1u8; 4096]);
    let (status, _) = call(
        &f,
        "POST",
        "/v1/volumes/src/restore",
        t,
        Some(r#"{"snapshot":"nope"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Range copy: 8 KiB of src to c1 at 64 KiB, by reference.
    let (status, report) = call(
        &f,
        "POST",
        "/v1/volumes/src/copy",
        t,
        Some(r#"{"offset_bytes":0,"length_bytes":8192,"destination":"c1","destination_offset_bytes":65536}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(
        report,
        serde_json::json!({"referenced_bytes": 8192, "data_bytes": 0})
    );
    assert_eq!(read(&f, "c1", 65536, 8192), vec![1u8; 8192]);
    // Unaligned: copied as data.
    let (_, report) = call(
        &f,
        "POST",
        "/v1/volumes/src/copy",
        t,
        Some(r#"{"offset_bytes":512,"length_bytes":1024,"destination":"c1","destination_offset_bytes":200704}"#),
    )
    .await;
    assert_eq!(report["data_bytes"], 1024, "{report}");
    assert_eq!(read(&f, "c1", 200704, 1024), vec![1u8; 1024]);
    let (status, body) = call(
        &f,
        "POST",
        "/v1/volumes/src/copy",
        t,
        Some(r#"{"offset_bytes":1044480,"length_bytes":8192,"destination":"c1","destination_offset_bytes":0}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].as_str().unwrap().contains("beyond the end"));
    let (status, _) = call(
        &f,
        "POST",
        "/v1/volumes/src/copy",
        t,
        Some(r#"{"offset_bytes":0,"length_bytes":4096,"destination":"nope","destination_offset_bytes":0}"#),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn volumes_destroy_recover_eradicate() {
    let f = fixture("destroy");
    let t = Some(f.token.as_str());
    create(&f, r#"{"name":"v1","size_bytes":1048576}"#).await;
    write(&f, "v1", 0, &[5u8; 4096]);
    let (status, body) = call(&f, "POST", "/v1/volumes/v1/eradicate", t, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().contains("delete it first"));
    let (status, body) = call(&f, "POST", "/v1/volumes/v1/recover", t, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    call(&f, "DELETE", "/v1/volumes/v1", t, None).await;
    let (_, live) = call(&f, "GET", "/v1/volumes", t, None).await;
    assert_eq!(live, serde_json::json!([]));
    let (_, destroyed) = call(&f, "GET", "/v1/volumes?destroyed=true", t, None).await;
    assert_eq!(destroyed[0]["name"], "v1", "{destroyed}");
    let at = destroyed[0]["destroyed_unix_s"].as_u64().unwrap();
    assert_eq!(destroyed[0]["eradicate_at_unix_s"], at + 24 * 3600);
    // The name stays taken while the volume is recoverable.
    let (status, _) = create(&f, r#"{"name":"v1","size_bytes":1048576}"#).await;
    assert_eq!(status, StatusCode::CONFLICT);

    let (status, recovered) = call(&f, "POST", "/v1/volumes/v1/recover", t, None).await;
    assert_eq!(status, StatusCode::OK, "{recovered}");
    assert_eq!(recovered["destroyed_unix_s"], Value::Null);
    assert_eq!(read(&f, "v1", 0, 4096), vec![5u8; 4096]);

    call(&f, "DELETE", "/v1/volumes/v1", t, None).await;
    let (status, _) = call(&f, "POST", "/v1/volumes/v1/eradicate", t, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&f, "GET", "/v1/volumes/v1", t, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, destroyed) = call(&f, "GET", "/v1/volumes?destroyed=true", t, None).await;
    assert_eq!(destroyed, serde_json::json!([]));
    let (status, _) = call(&f, "POST", "/v1/volumes/v1/eradicate", t, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // The name is free again.
    let (status, _) = create(&f, r#"{"name":"v1","size_bytes":1048576}"#).await;
    assert_eq!(status, StatusCode::CREATED);
}

/// Containers over a real engine: policies as created and changed, a volume
/// and a clone in one, its quota refusing a thick volume (507) and a write
/// (ENOSPC from the engine), an unmap counted and, with reclaim off, left as a
/// backlog that `reclaim` works off; `/metrics` says what the JSON says.
#[tokio::test]
async fn containers_against_the_real_engine() {
    let f = fixture("containers");
    let t = Some(f.token.as_str());
    let (status, body) = call(
        &f,
        "POST",
        "/v1/containers",
        t,
        Some(r#"{"name":"cold","quota_bytes":2097152,"reclaim":"off","compression":"off","dedup":false}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["policy"]["reclaim"], "off");
    assert_eq!(body["reclaim"]["rate_bytes_per_s"], Value::Null);
    assert_eq!(body["volume_count"], 0);
    let (status, body) = create(
        &f,
        r#"{"name":"v","size_bytes":8388608,"container":"cold"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["container"], "cold");
    let (status, body) = create(&f, r#"{"name":"w","size_bytes":4096,"container":"nope"}"#).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"], "container 'nope' does not exist");
    let (status, body) = create(
        &f,
        r#"{"name":"t","size_bytes":4194304,"provisioning":"zeroedthick","container":"cold"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
    assert!(body["error"].as_str().unwrap().contains("quota"), "{body}");

    // 1 MiB of unique data, then 2 MiB more: the quota (2 MiB) refuses the rest.
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    write(&f, "v", 0, &data);
    let vol = f.engine.open_volume("v").unwrap();
    let refused = vol.write(1 << 20, &vec![7u8; 2 << 20]);
    assert!(
        matches!(refused, Err(lacuna_engine::EngineError::NoSpace(_))),
        "{refused:?}"
    );
    vol.unmap(0, 1 << 20).unwrap();
    vol.flush().unwrap();
    let (_, body) = call(&f, "GET", "/v1/containers/cold", t, None).await;
    assert_eq!(body["reclaim"]["unmap_commands"], 1);
    assert_eq!(body["reclaim"]["unmapped_bytes"], 1 << 20);
    assert_eq!(
        body["reclaim"]["backlog_bytes"],
        1 << 20,
        "off: nothing reclaimed"
    );
    assert_eq!(body["reclaim"]["eta_s"], Value::Null);
    let (_, volume) = call(&f, "GET", "/v1/volumes/v", t, None).await;
    assert_eq!(volume["reclaim"]["backlog_bytes"], 1 << 20);

    let metrics = metrics_text(&f).await;
    for (name, value) in [
        ("lacuna_container_unmap_commands_total", "1".to_string()),
        (
            "lacuna_container_unmapped_bytes_total",
            (1u64 << 20).to_string(),
        ),
        (
            "lacuna_container_reclaim_backlog_bytes",
            (1u64 << 20).to_string(),
        ),
        ("lacuna_container_quota_bytes", (2u64 << 20).to_string()),
        (
            "lacuna_container_reclaim_rate_limit_bytes_per_second",
            "0".to_string(),
        ),
    ] {
        let line = format!("{name}{{container=\"cold\"}} {value}");
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    assert!(
        metrics.contains(
            "lacuna_volume_reclaim_backlog_bytes{volume=\"v\",container=\"cold\"} 1048576"
        ),
        "{metrics}"
    );
    assert!(
        !metrics.contains("lacuna_container_reclaim_eta_seconds{container=\"cold\"}"),
        "{metrics}"
    );

    // Work the backlog off now: the engine's background thread drains it.
    let (status, body) = call(&f, "POST", "/v1/containers/cold/reclaim", t, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let body = loop {
        let (_, body) = call(&f, "GET", "/v1/containers/cold", t, None).await;
        if body["reclaim"]["backlog_bytes"] == 0 && body["reclaim"]["draining"] == false {
            break body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "backlog never drained: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(body["reclaim"]["reclaimed_bytes"], 1 << 20);

    let (status, body) = call(
        &f,
        "PATCH",
        "/v1/containers/cold",
        t,
        Some(r#"{"quota_bytes":null,"reclaim":"low"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["policy"]["quota_bytes"], Value::Null);
    assert_eq!(body["reclaim"]["rate_bytes_per_s"], 25_000_000);
    let (status, body) = call(&f, "DELETE", "/v1/containers/cold", t, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("still holds"),
        "{body}"
    );
    let (_, list) = call(&f, "GET", "/v1/containers", t, None).await;
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "cold"]);
}

async fn metrics_text(f: &Fixture) -> String {
    let request = Request::builder()
        .uri("/metrics")
        .header("Authorization", format!("Bearer {}", f.token))
        .body(Body::empty())
        .unwrap();
    let response = f.app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A scrub pass started over the API runs on the real engine and its report
/// comes back through `GET /v1/array/scrub`.
#[tokio::test]
async fn scrub_over_the_api_checks_every_record() {
    let f = fixture("scrub");
    let t = Some(f.token.as_str());
    f.engine.create_volume("v", 1 << 20).unwrap();
    let data: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    let volume = f.engine.open_volume("v").unwrap();
    volume.write(0, &data).unwrap();
    volume.flush().unwrap();
    let (status, start) = call(&f, "POST", "/v1/array/scrub", t, Some("{}")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{start}");
    let pass = start["report"]["pass"].as_u64().unwrap();
    // Bounded wait for the pass to finish (behaviour, not timing).
    let mut last = Value::Null;
    for _ in 0..600 {
        let (status, body) = call(&f, "GET", "/v1/array/scrub", t, None).await;
        assert_eq!(status, StatusCode::OK);
        if body["last"]["pass"].as_u64() == Some(pass) {
            last = body["last"].clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(last["records_checked"], 2, "{last}");
    assert_eq!(last["bad_records"], 0);
    assert_eq!(last["running"], false);
}

/// Every integer of a body is an int64, as the document says: a larger one is
/// refused for any field alike, naming where it is, and changes nothing. A bad
/// name is reported as the kind of name it is.
#[tokio::test]
async fn integers_above_int64_and_bad_names_are_refused_as_what_they_are() {
    let f = fixture("int64");
    let t = Some(f.token.as_str());
    let huge = u64::MAX.to_string();
    for (uri, body) in [
        (
            "/v1/containers",
            format!(r#"{{"name":"c","quota_bytes":{huge}}}"#),
        ),
        (
            "/v1/volumes",
            format!(r#"{{"name":"v","size_bytes":{huge}}}"#),
        ),
        (
            "/v1/containers",
            format!(r#"{{"name":"c","reclaim_burst_bytes":{}}}"#, 1u64 << 63),
        ),
    ] {
        let (status, answer) = call(&f, "POST", uri, t, Some(&body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(
            error.contains("int64") && error.contains(" at /"),
            "{error}"
        );
    }
    let in_a_list = format!(r#"{{"name":"c","tags":["a",true,{{"n":[1,{huge}]}}]}}"#);
    let (status, answer) = call(&f, "POST", "/v1/containers", t, Some(&in_a_list)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains(" at /tags/2/n/1 "),
        "the path names the list items: {answer}"
    );
    let (_, containers) = call(&f, "GET", "/v1/containers", t, None).await;
    assert_eq!(containers.as_array().unwrap().len(), 1, "{containers}");
    let fits = format!(r#"{{"name":"c","quota_bytes":{}}}"#, i64::MAX);
    let (status, answer) = call(&f, "POST", "/v1/containers", t, Some(&fits)).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");

    let (status, _) = call(
        &f,
        "POST",
        "/v1/volumes",
        t,
        Some(r#"{"name":"v1","size_bytes":1048576}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    for (uri, body, kind) in [
        (
            "/v1/volumes",
            r#"{"name":"-rf","size_bytes":1048576}"#,
            "volume",
        ),
        (
            "/v1/snapshots",
            r#"{"volumes":["v1"],"name":"a b"}"#,
            "snapshot",
        ),
        (
            "/v1/snapshots",
            r#"{"volumes":["v1"],"group":".g"}"#,
            "group",
        ),
        ("/v1/containers", r#"{"name":"-c"}"#, "container"),
        (
            "/v1/hosts",
            r#"{"name":"-h","iqns":["iqn.2024-01.org:h"]}"#,
            "host",
        ),
    ] {
        let (status, answer) = call(&f, "POST", uri, t, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(&format!("invalid {kind} name")), "{error}");
    }
}
