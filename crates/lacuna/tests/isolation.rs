//! Security negatives against a real `lacuna serve`, with real clients: an HTTP
//! client (ureq) for the API, libiscsi's tools (`iscsi-ls`, `iscsi-inq`,
//! `iscsi-readcapacity16`) and qemu-io for iSCSI. What the in-process router tests
//! (crates/api/tests/routing.rs) and the conformance run (iscsi.rs) already cover
//! is not repeated; this file adds the end-to-end view:
//!
//! - every protected route of the daemon's own OpenAPI document, with a body that
//!   would succeed, is refused (401) without a token or with a wrong one, over
//!   TCP, and the array's state (volumes, snapshots, containers, hosts, scrub)
//!   is unchanged afterwards;
//! - two hosts with overlapping LUN numbers: each initiator's REPORT LUNS lists
//!   exactly its own LUNs, each LUN number leads to its own host's volume (sizes
//!   and data tell them apart), the other host's LUN numbers do not exist for it,
//!   and an initiator of no host cannot log in (and is logged by name);
//! - a wrong CHAP secret fails the login; the daemon's log names the initiator
//!   and the failure but holds neither the configured secret, nor the wrong one,
//!   nor the CHAP response the initiator sent (captured by a relay between
//!   initiator and daemon).
//!
//! NBD access control (TLS-PSK hosts) is tested in nbd_access.rs and
//! crates/nbd/tests/tls.rs.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{call, temp_dir, token, tool, tool_ok, Daemon, TARGET_IQN};

/// A request body that would succeed for each protected operation (method, path
/// template) on the fixture `api_fixture` builds; `None`: no body.
const OPERATIONS: &[(&str, &str, Option<&str>)] = &[
    ("GET", "/metrics", None),
    ("GET", "/v1/openapi.json", None),
    ("GET", "/v1/volumes", None),
    (
        "POST",
        "/v1/volumes",
        Some(r#"{"name":"intruder","size_bytes":1048576}"#),
    ),
    ("GET", "/v1/volumes/{name}", None),
    (
        "PATCH",
        "/v1/volumes/{name}",
        Some(r#"{"size_bytes":33554432}"#),
    ),
    ("DELETE", "/v1/volumes/{name}", None),
    ("POST", "/v1/volumes/{name}/recover", None),
    ("POST", "/v1/volumes/{name}/eradicate", None),
    (
        "POST",
        "/v1/volumes/{name}/restore",
        Some(r#"{"snapshot":"snap"}"#),
    ),
    (
        "POST",
        "/v1/volumes/{name}/copy",
        Some(
            r#"{"offset_bytes":0,"length_bytes":4096,"destination":"other","destination_offset_bytes":0}"#,
        ),
    ),
    ("GET", "/v1/snapshots", None),
    (
        "POST",
        "/v1/snapshots",
        Some(r#"{"volumes":["vol"],"name":"intruder"}"#),
    ),
    ("GET", "/v1/snapshots/{snapshot}", None),
    ("DELETE", "/v1/snapshots/{snapshot}", None),
    ("POST", "/v1/snapshots/{snapshot}/recover", None),
    ("POST", "/v1/snapshots/{snapshot}/eradicate", None),
    ("GET", "/v1/containers", None),
    (
        "POST",
        "/v1/containers",
        Some(r#"{"name":"intruder","reclaim":"low"}"#),
    ),
    ("GET", "/v1/containers/{container}", None),
    (
        "PATCH",
        "/v1/containers/{container}",
        Some(r#"{"quota_bytes":1048576}"#),
    ),
    ("POST", "/v1/containers/{container}/reclaim", None),
    ("DELETE", "/v1/containers/{container}", None),
    ("GET", "/v1/array/space", None),
    ("GET", "/v1/array/scrub", None),
    (
        "POST",
        "/v1/array/scrub",
        Some(r#"{"rate_bytes_per_s":1000000}"#),
    ),
    ("GET", "/v1/hosts", None),
    (
        "POST",
        "/v1/hosts",
        Some(r#"{"name":"intruder","iqns":["iqn.2024-01.org.example:intruder"]}"#),
    ),
    ("GET", "/v1/hosts/{host}", None),
    ("DELETE", "/v1/hosts/{host}", None),
    (
        "POST",
        "/v1/hosts/{host}/connect",
        Some(r#"{"volume":"other"}"#),
    ),
    (
        "POST",
        "/v1/hosts/{host}/disconnect",
        Some(r#"{"volume":"vol"}"#),
    ),
    (
        "PUT",
        "/v1/hosts/{host}/nbd-psk",
        Some(r#"{"key":"00112233445566778899aabbccddeeff"}"#),
    ),
    ("DELETE", "/v1/hosts/{host}/nbd-psk", None),
    // Last, so the indexes used below stay put.
    ("DELETE", "/v1/array/scrub", None),
    (
        "PUT",
        "/v1/hosts/{host}/protocol-endpoint",
        Some(r#"{"lun":9}"#),
    ),
    ("DELETE", "/v1/hosts/{host}/protocol-endpoint", None),
    (
        "POST",
        "/v1/vvols",
        Some(r#"{"container":"default","vvol_type":"Data","size_mib":16}"#),
    ),
    ("GET", "/v1/vvols/{id}", None),
    ("DELETE", "/v1/vvols/{id}", None),
    ("POST", "/v1/vvols/query", Some("{}")),
    ("POST", "/v1/vvols/info", Some(r#"{"ids":["x"]}"#)),
    (
        "PATCH",
        "/v1/vvols/{id}/metadata",
        Some(r#"{"metadata":{"k":"v"}}"#),
    ),
    ("POST", "/v1/vvols/{id}/resize", Some(r#"{"size_mib":32}"#)),
    ("POST", "/v1/vvols/{id}/clone", Some("{}")),
    ("POST", "/v1/vvols/{id}/revert", Some(r#"{"snapshot":"x"}"#)),
    ("POST", "/v1/vvols/{id}/prepare-snapshot", Some("{}")),
    ("POST", "/v1/vvols/snapshot", Some(r#"{"snapshots":[]}"#)),
    (
        "POST",
        "/v1/vvols/bind",
        Some(r#"{"host":"alpha","ids":["x"]}"#),
    ),
    (
        "POST",
        "/v1/vvols/unbind",
        Some(r#"{"host":"alpha","ids":["x"]}"#),
    ),
    ("POST", "/v1/vvols/unbind-all", Some(r#"{"host":"alpha"}"#)),
    (
        "POST",
        "/v1/vvols/{id}/allocated-bitmap",
        Some(r#"{"offset_bytes":0,"length_bytes":4096,"chunk_bytes":4096}"#),
    ),
    (
        "POST",
        "/v1/vvols/{id}/unshared-bitmap",
        Some(r#"{"base":"x","offset_bytes":0,"length_bytes":4096,"chunk_bytes":4096}"#),
    ),
    (
        "POST",
        "/v1/vvols/{id}/unshared-chunks",
        Some(r#"{"base":"x","offset_bytes":0,"length_bytes":4096,"chunk_bytes":4096}"#),
    ),
    ("GET", "/v1/vvols/{id}/space", None),
    ("GET", "/v1/vvol-containers/{container}", None),
    ("GET", "/v1/vvol-events", None),
    ("GET", "/v1/vvol-containers", None),
    ("GET", "/v1/protocol-endpoints", None),
    ("GET", "/v1/vvol-provider", None),
    ("GET", "/v1/vvol-tasks", None),
    ("GET", "/v1/vvol-tasks/{task}", None),
    ("DELETE", "/v1/vvol-tasks/{task}", None),
    ("GET", "/v1/vasa", None),
    ("POST", "/v1/vasa/restart", None),
    ("POST", "/v1/vasa/certificate/rotate", None),
    ("GET", "/v1/array/history", None),
    ("GET", "/v1/events", None),
    ("GET", "/v1/sessions", None),
    ("GET", "/v1/gateways", None),
    ("POST", "/v1/events/{id}/acknowledge", None),
];

fn concrete(path: &str) -> String {
    path.replace("{name}", "vol")
        .replace("{snapshot}", "vol@snap")
        .replace("{host}", "alpha")
        .replace("{container}", "box")
        .replace("{id}", "rfc4122.00000000-0000-4000-8000-000000000001")
        .replace("{task}", "1")
}

/// Volumes `vol` (with snapshot `snap`) and `other`, container `box`, host
/// `alpha` given `vol`.
fn api_fixture() -> Daemon {
    let dir = temp_dir("isolation-api");
    let daemon = Daemon::start(dir.path()).owning(dir);
    daemon.cli_ok(&["volume", "create", "vol", "--size", "16M"]);
    daemon.cli_ok(&["volume", "create", "other", "--size", "16M"]);
    daemon.cli_ok(&["snapshot", "create", "vol", "--name", "snap"]);
    daemon.cli_ok(&["container", "create", "box"]);
    daemon.cli_ok(&[
        "host",
        "create",
        "alpha",
        "--iqn",
        "iqn.2024-01.org.example:alpha",
    ]);
    daemon.cli_ok(&["host", "connect", "alpha", "vol", "--lun", "0"]);
    daemon
}

/// Everything an unauthorised call could change, read with the token.
fn state(daemon: &Daemon) -> Vec<(String, String)> {
    let auth = token(daemon);
    [
        "/v1/volumes",
        "/v1/volumes?destroyed=true",
        "/v1/snapshots",
        "/v1/snapshots?destroyed=true",
        "/v1/containers",
        "/v1/hosts",
        "/v1/hosts/alpha",
        "/v1/array/scrub",
        "/v1/vvol-events",
        "/v1/events",
    ]
    .iter()
    .map(|path| {
        let (status, body) = call(daemon, "GET", path, Some(&auth), None);
        assert_eq!(status, 200, "GET {path}: {body}");
        (path.to_string(), body)
    })
    .collect()
}

/// (method, path template) of every operation the daemon's OpenAPI document
/// says needs the token (it documents 401 exactly for those).
fn protected_operations(daemon: &Daemon) -> Vec<(String, String)> {
    let (status, text) = call(
        daemon,
        "GET",
        "/v1/openapi.json",
        Some(&token(daemon)),
        None,
    );
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().unwrap() {
            if operation.get("responses").is_some() && operation["responses"].get("401").is_some() {
                out.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn api_without_the_token_is_refused_on_every_route_and_changes_nothing() {
    let daemon = api_fixture();
    let mut listed: Vec<(String, String)> = OPERATIONS
        .iter()
        .map(|(m, p, _)| (m.to_string(), p.to_string()))
        .collect();
    listed.sort();
    assert_eq!(
        protected_operations(&daemon),
        listed,
        "the daemon's protected routes differ from this test's list: add the new ones here"
    );
    let before = state(&daemon);
    let real = token(&daemon);
    let wrong = format!("{}x", &real[..real.len() - 1]);
    let short = real[..real.len() - 1].to_string();
    let bare = real.trim_start_matches("Bearer ").to_string();
    let attempts: [Option<&str>; 6] = [
        None,
        Some(&wrong),
        Some(&short),
        Some("Bearer "),
        Some(&bare),
        Some("Basic YWRtaW46YWRtaW4="),
    ];
    let mut refused = 0;
    for (method, path, body) in OPERATIONS {
        let path = concrete(path);
        for authorization in attempts {
            let (status, text) = call(&daemon, method, &path, authorization, *body);
            assert_eq!(
                status, 401,
                "{method} {path} with {authorization:?} answered {status}: {text}"
            );
            let error: Value = serde_json::from_str(&text).expect("a JSON error");
            assert!(
                error["error"].as_str().is_some_and(|m| m.contains("token")),
                "{text}"
            );
            assert_eq!(
                error.as_object().unwrap().len(),
                1,
                "only the error: {text}"
            );
            refused += 1;
        }
    }
    // Unknown routes too, so probing without the token learns nothing.
    for (method, path) in [("GET", "/v1/secrets"), ("PUT", "/v1/volumes/vol")] {
        let (status, _) = call(&daemon, method, path, None, Some("{}"));
        assert_eq!(status, 401, "{method} {path}");
    }
    assert_eq!(state(&daemon), before, "a refused call changed the array");
    // The bodies are ones that work: with the token the same calls change it.
    for (method, path, body) in [
        ("POST", "/v1/volumes", OPERATIONS[3].2),
        ("PATCH", "/v1/volumes/vol", OPERATIONS[5].2),
        ("POST", "/v1/snapshots", OPERATIONS[12].2),
        ("POST", "/v1/containers", OPERATIONS[18].2),
        ("POST", "/v1/hosts/alpha/connect", OPERATIONS[30].2),
        ("PUT", "/v1/hosts/alpha/nbd-psk", OPERATIONS[32].2),
        ("DELETE", "/v1/snapshots/vol@snap", None),
    ] {
        let (status, text) = call(&daemon, method, path, Some(&real), body);
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {text}"
        );
    }
    assert_ne!(state(&daemon), before);
    eprintln!(
        "api: {} protected operations × {} bad credentials = {refused} calls refused, state unchanged",
        OPERATIONS.len(),
        attempts.len()
    );
}

const ALPHA: &str = "iqn.2024-01.org.example:alpha";
const BETA: &str = "iqn.2024-01.org.example:beta";
const STRANGER: &str = "iqn.2024-01.org.example:stranger";

/// LUN numbers and sizes `iscsi-ls` reports for an initiator (REPORT LUNS, then
/// READ CAPACITY per LUN), from the first portal.
fn luns_seen(daemon: &Daemon, initiator: &str) -> Vec<(u64, u64)> {
    let portal = format!("iscsi://127.0.0.1:{}", daemon.iscsi_ports[0]);
    let text = tool_ok("iscsi-ls", &["-i", initiator, "-s", &portal]);
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("Lun:") else {
            continue;
        };
        // Only the target's first portal: iscsi-ls lists every portal's LUNs.
        let lun: u64 = rest
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("LUN number in {line:?}"));
        out.push((
            lun,
            capacity_bytes(daemon, initiator, lun).expect("a listed LUN answers"),
        ));
    }
    out.sort();
    out.dedup();
    out
}

/// The capacity `iscsi-readcapacity16` reports for a LUN, or its error text.
fn capacity_bytes(daemon: &Daemon, initiator: &str, lun: u64) -> Result<u64, String> {
    let out = tool(
        "iscsi-readcapacity16",
        &["-i", initiator, &daemon.iscsi_url(0, lun)],
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(text);
    }
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Total size:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no total size in {text}"))
}

fn qemu_io(daemon: &Daemon, initiator: &str, lun: u64, command: &str) -> String {
    let opts = format!(
        "driver=iscsi,transport=tcp,portal=127.0.0.1:{},target={TARGET_IQN},lun={lun},\
         initiator-name={initiator}",
        daemon.iscsi_ports[0]
    );
    let out = tool("qemu-io", &["--image-opts", &opts, "-c", command]);
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn an_initiator_sees_and_reaches_only_its_hosts_luns() {
    let dir = temp_dir("isolation-luns");
    let daemon = Daemon::start(dir.path()).owning(dir);
    const MIB: u64 = 1 << 20;
    // Sizes tell the volumes apart; the two hosts both have a LUN 0.
    for (name, size_mib) in [("a0", 16), ("a1", 24), ("b0", 40), ("b3", 48)] {
        daemon.cli_ok(&["volume", "create", name, "--size", &format!("{size_mib}M")]);
    }
    daemon.cli_ok(&["host", "create", "alpha", "--iqn", ALPHA]);
    daemon.cli_ok(&["host", "create", "beta", "--iqn", BETA]);
    for (host, volume, lun) in [
        ("alpha", "a0", "0"),
        ("alpha", "a1", "1"),
        ("beta", "b0", "0"),
        ("beta", "b3", "3"),
    ] {
        daemon.cli_ok(&["host", "connect", host, volume, "--lun", lun]);
    }

    assert_eq!(
        luns_seen(&daemon, ALPHA),
        vec![(0, 16 * MIB), (1, 24 * MIB)]
    );
    assert_eq!(luns_seen(&daemon, BETA), vec![(0, 40 * MIB), (3, 48 * MIB)]);
    // The other host's LUN numbers do not exist for an initiator.
    for (initiator, lun) in [(ALPHA, 3), (BETA, 1), (ALPHA, 2), (BETA, 2)] {
        let error = capacity_bytes(&daemon, initiator, lun).expect_err("an unmapped LUN answered");
        let inq = tool("iscsi-inq", &["-i", initiator, &daemon.iscsi_url(0, lun)]);
        assert!(!inq.status.success(), "{initiator} reached LUN {lun}");
        let text = String::from_utf8_lossy(&inq.stderr).into_owned()
            + &String::from_utf8_lossy(&inq.stdout);
        assert!(
            text.contains("LOGICAL_UNIT_NOT_SUPPORTED"),
            "{initiator} LUN {lun}: {text} / {error}"
        );
    }
    // Data written by beta to its LUN 0 is not what alpha's LUN 0 holds.
    let text = qemu_io(&daemon, BETA, 0, "write -P 0xb0 0 64k");
    assert!(text.contains("wrote 65536"), "{text}");
    let text = qemu_io(&daemon, ALPHA, 0, "write -P 0xa0 64k 64k");
    assert!(text.contains("wrote 65536"), "{text}");
    for (initiator, check) in [
        (ALPHA, "read -P 0 0 64k"),
        (ALPHA, "read -P 0xa0 64k 64k"),
        (BETA, "read -P 0xb0 0 64k"),
        (BETA, "read -P 0 64k 64k"),
    ] {
        let text = qemu_io(&daemon, initiator, 0, check);
        assert!(
            text.contains("read 65536") && !text.contains("Pattern verification failed"),
            "{initiator} {check}: {text}"
        );
    }
    // An initiator of no host cannot log in, and the refusal names it.
    let inq = tool("iscsi-inq", &["-i", STRANGER, &daemon.iscsi_url(0, 0)]);
    assert!(!inq.status.success(), "an unknown initiator logged in");
    assert!(luns_seen_or_refused(&daemon, STRANGER));
    let log = wait_for_log(&daemon, |log| {
        log.lines()
            .any(|l| l.contains("login refused") && l.contains(STRANGER))
    });
    assert!(
        log.is_some(),
        "no refusal naming {STRANGER}:\n{}",
        daemon.log()
    );
}

/// `iscsi-ls` for an unknown initiator: either fails or lists no LUN.
fn luns_seen_or_refused(daemon: &Daemon, initiator: &str) -> bool {
    let portal = format!("iscsi://127.0.0.1:{}", daemon.iscsi_ports[0]);
    let out = tool("iscsi-ls", &["-i", initiator, "-s", &portal]);
    !String::from_utf8_lossy(&out.stdout).contains("Lun:")
}

/// Polls the daemon's log (written asynchronously) until `found` holds, 10 s at most.
fn wait_for_log(daemon: &Daemon, found: impl Fn(&str) -> bool) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = daemon.log();
        if found(&log) {
            return Some(log);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TCP relay to `upstream` on a free loopback port that records everything
/// clients send; runs until the test process ends.
fn recording_relay(upstream: u16) -> (u16, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let record = sent.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                return;
            };
            let (mut client_read, mut server_read) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            let record = record.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = client_read.read(&mut buf) {
                    if n == 0 || server.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    record.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                let _ = server.shutdown(std::net::Shutdown::Both);
            });
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = server_read.read(&mut buf) {
                    if n == 0 || client.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = client.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (port, sent)
}

/// The values of a login text key in recorded initiator bytes (`KEY=value\0`).
fn text_values(bytes: &[u8], key: &str) -> Vec<String> {
    bytes
        .split(|b| *b == 0 || *b == b'\n')
        .filter_map(|field| {
            let at = field
                .windows(key.len() + 1)
                .position(|w| w == format!("{key}=").as_bytes())?;
            Some(String::from_utf8_lossy(&field[at + key.len() + 1..]).into_owned())
        })
        .collect()
}

#[test]
fn a_wrong_chap_secret_fails_and_the_log_names_the_initiator_never_the_secrets() {
    const INITIATOR: &str = "iqn.2024-01.org.example:chap-host";
    const USER: &str = "chapuser";
    const SECRET: &str = "configured-secret-9f3a";
    const WRONG: &str = "wrong-secret-77c1e";
    let dir = temp_dir("isolation-chap");
    let daemon = Daemon::start(dir.path()).owning(dir);
    daemon.cli_ok(&["volume", "create", "g0", "--size", "16M"]);
    daemon.cli_ok(&[
        "host",
        "create",
        "gamma",
        "--iqn",
        INITIATOR,
        "--chap-user",
        USER,
        "--chap-secret",
        SECRET,
    ]);
    daemon.cli_ok(&["host", "connect", "gamma", "g0", "--lun", "0"]);
    let (relay, sent) = recording_relay(daemon.iscsi_ports[0]);
    let url = |secret: &str| format!("iscsi://{USER}%{secret}@127.0.0.1:{relay}/{TARGET_IQN}/0");
    let log_before = daemon.log().len();

    // The right secret logs in through the relay (so the relay is not why the
    // wrong one fails).
    let good = tool("iscsi-inq", &["-i", INITIATOR, &url(SECRET)]);
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    let bad = tool("iscsi-inq", &["-i", INITIATOR, &url(WRONG)]);
    assert!(!bad.status.success(), "a wrong CHAP secret logged in");
    // Without any credentials: CHAP required.
    let none = tool("iscsi-inq", &["-i", INITIATOR, &daemon.iscsi_url(0, 0)]);
    assert!(!none.status.success(), "CHAP was not required");

    let responses = text_values(&sent.lock().unwrap(), "CHAP_R");
    assert_eq!(
        responses.len(),
        2,
        "two CHAP responses relayed: {responses:?}"
    );
    let log = wait_for_log(&daemon, |log| {
        log[log_before..]
            .lines()
            .filter(|l| l.contains("login refused") && l.contains(INITIATOR))
            .count()
            >= 2
    })
    .unwrap_or_else(|| {
        panic!(
            "the failures are not logged with the initiator:\n{}",
            daemon.log()
        )
    });
    let new = log[log_before..].to_lowercase();
    assert!(
        new.lines()
            .any(|l| l.contains("login refused") && l.contains("response does not match")),
        "the wrong response is not logged as such:\n{new}"
    );
    for secret in [SECRET, WRONG] {
        assert!(!log.contains(secret), "the log holds a secret: {secret}");
    }
    for response in &responses {
        let digits = response
            .trim_start_matches("0x")
            .trim_start_matches("0X")
            .to_lowercase();
        assert!(digits.len() >= 32, "a CHAP response: {response}");
        assert!(
            !log.to_lowercase().contains(&digits),
            "the log holds a CHAP response {response}"
        );
    }
    // The two failures (within a minute) are one host_refused event that
    // names the initiator and CHAP, never a secret.
    let refused = |e: &serde_json::Value| e["kind"] == "host_refused";
    let events = support::events_until(&daemon, |events| events.iter().any(refused));
    let refusals: Vec<&serde_json::Value> = events.iter().filter(|e| refused(e)).collect();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0]["subject"], INITIATOR);
    let message = refusals[0]["message"].as_str().unwrap();
    assert!(message.contains("CHAP authentication failed"), "{message}");
    assert!(
        !message.contains(SECRET) && !message.contains(WRONG),
        "{message}"
    );
}

/// A grant names the object, not the name: a destroyed volume's LUNs (its own
/// and its snapshot's) are hidden until it is recovered; once it is eradicated
/// they are gone from REPORT LUNS and `host show`, also across a restart, and a
/// new volume (and snapshot) of the same name is reachable by nobody until it
/// is granted.
#[test]
fn a_grant_ends_with_its_volume_and_never_passes_to_a_namesake() {
    const MIB: u64 = 1 << 20;
    let dir = temp_dir("isolation-grants");
    let mut daemon = Daemon::start(dir.path());
    daemon.cli_ok(&["volume", "create", "r1", "--size", "1M"]);
    daemon.cli_ok(&["snapshot", "create", "r1", "--name", "s"]);
    daemon.cli_ok(&["host", "create", "hostb", "--iqn", BETA]);
    daemon.cli_ok(&["host", "connect", "hostb", "r1"]);
    daemon.cli_ok(&["host", "connect", "hostb", "r1@s"]);
    assert_eq!(luns_seen(&daemon, BETA), vec![(0, MIB), (1, MIB)]);
    daemon.cli_ok(&["volume", "delete", "r1"]);
    assert_eq!(luns_seen(&daemon, BETA), vec![]);
    daemon.cli_ok(&["volume", "recover", "r1"]);
    assert_eq!(luns_seen(&daemon, BETA), vec![(0, MIB), (1, MIB)]);

    daemon.cli_ok(&["volume", "delete", "r1"]);
    daemon.cli_ok(&["volume", "eradicate", "r1"]);
    daemon.cli_ok(&["volume", "create", "r1", "--size", "2M"]);
    daemon.cli_ok(&["snapshot", "create", "r1", "--name", "s"]);
    assert_eq!(
        luns_seen(&daemon, BETA),
        vec![],
        "the namesakes are nobody's"
    );
    let shown = daemon.cli_ok(&["host", "show", "hostb"]);
    assert!(!shown.contains("r1"), "{shown}");
    daemon.kill();
    let daemon = Daemon::start(dir.path()).owning(dir);
    assert_eq!(luns_seen(&daemon, BETA), vec![]);
    let shown = daemon.cli_ok(&["host", "show", "hostb"]);
    assert!(!shown.contains("r1"), "{shown}");
    daemon.cli_ok(&["host", "connect", "hostb", "r1"]);
    assert_eq!(luns_seen(&daemon, BETA), vec![(0, 2 * MIB)]);
}

/// RFC 3722: an initiator name in another case is the same initiator, so it
/// belongs to the same host and sees the same LUNs.
#[test]
fn initiator_names_differing_only_in_case_are_one_initiator() {
    let dir = temp_dir("isolation-case");
    let daemon = Daemon::start(dir.path()).owning(dir);
    daemon.cli_ok(&["volume", "create", "a0", "--size", "16M"]);
    daemon.cli_ok(&["host", "create", "alpha", "--iqn", "iqn.2024-01.TEST:A"]);
    daemon.cli_ok(&["host", "connect", "alpha", "a0"]);
    let out = daemon.cli(&["host", "create", "other", "--iqn", "iqn.2024-01.test:a"]);
    assert!(
        !out.status.success(),
        "a second host for the same initiator"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already belongs to host 'alpha'"), "{err}");
    for spelling in [
        "iqn.2024-01.test:a",
        "iqn.2024-01.TEST:A",
        "IQN.2024-01.Test:a",
    ] {
        assert_eq!(
            luns_seen(&daemon, spelling),
            vec![(0, 16 << 20)],
            "{spelling}"
        );
    }
}
