//! The VASA provider driven by zeep, a SOAP client nobody here wrote, over
//! HTTPS with a client certificate, checked against the REST API's view.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use support::{temp_dir, Daemon, TARGET_IQN};

fn run_ok(command: &mut Command) -> String {
    let out = command.output().expect("run a client tool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{command:?} failed:\n{text}");
    text
}

/// A client directory for the scripts: the provider's certificate to trust,
/// and a client certificate (as vCenter makes one) with its key.
fn client_dir(dir: &Path) -> PathBuf {
    let work = dir.join("client");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::copy(
        dir.join("data/vasa/provider-cert.pem"),
        work.join("provider.pem"),
    )
    .unwrap();
    run_ok(
        Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                "/CN=vcenter",
                "-days",
                "30",
                "-keyout",
            ])
            .arg(work.join("client.key"))
            .arg("-out")
            .arg(work.join("client.pem")),
    );
    work
}

fn token(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("data/api-token"))
        .unwrap()
        .trim()
        .to_string()
}

/// Runs a client script of `support/` with `args`; its output, all checks passed.
fn script(name: &str, args: &[&str]) -> String {
    let path = format!("{}/tests/support/{name}", env!("CARGO_MANIFEST_DIR"));
    let out = run_ok(Command::new("/usr/bin/python3").arg(path).args(args));
    assert!(!out.contains("FAIL"), "{out}");
    out
}

#[test]
fn zeep_registers_makes_a_session_and_manages_a_vvol() {
    let dir = temp_dir("vasa-zeep");
    let daemon = Daemon::start(dir.path());
    let work = client_dir(dir.path());
    let out = script(
        "vasa_client.py",
        &[
            &daemon.vasa_port.to_string(),
            &token(dir.path()),
            work.to_str().unwrap(),
        ],
    );
    let created = out
        .lines()
        .find_map(|l| l.strip_prefix("created "))
        .unwrap_or_else(|| panic!("{out}"));
    // The REST API sees what SOAP did: the vVol came and went, the client is registered.
    let status = daemon.cli_ok(&["--json", "vvol", "list"]);
    assert!(
        !status.contains(created),
        "deleted over SOAP, still listed: {status}"
    );
    let (status_code, vasa) = support::api(&daemon, "GET", "/v1/vasa", None);
    assert_eq!(status_code, 200, "{vasa}");
    assert_eq!(vasa["registered_clients"], 1, "{vasa}");
    assert_eq!(vasa["sessions"], 1, "{vasa}");
    let text = metrics(&daemon);
    for line in [
        "lacuna_vasa_up 1".to_string(),
        "lacuna_vasa_sessions 1".to_string(),
        format!(
            "lacuna_vasa_certificate_expiry_timestamp_seconds {}",
            vasa["certificate"]["not_after_unix_s"]
        ),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
    let status = daemon.cli_ok(&["vasa", "status"]);
    for expected in [
        "register in vCenter:",
        "/vasa/version.xml",
        "sessions:",
        "self-signed",
    ] {
        assert!(status.contains(expected), "{expected} in:\n{status}");
    }
    let pem = daemon.cli_ok(&["vasa", "status", "--certificate"]);
    assert_eq!(
        pem.trim(),
        vasa["certificate"]["pem"].as_str().unwrap().trim(),
        "the PEM a client trusts"
    );
    let restarted = daemon.cli_ok(&["--json", "vasa", "restart"]);
    let restarted: serde_json::Value = serde_json::from_str(&restarted).unwrap();
    assert_eq!(
        restarted["sessions"], 0,
        "a restart ends the sessions: {restarted}"
    );
    let rotated = daemon.cli_ok(&["vasa", "rotate-certificate"]);
    assert!(rotated.starts_with("new certificate "), "{rotated}");
    let (_, after) = support::api(&daemon, "GET", "/v1/vasa", None);
    assert_ne!(
        after["certificate"]["sha256_fingerprint_hex"],
        vasa["certificate"]["sha256_fingerprint_hex"]
    );
    assert!(rotated.contains(
        after["certificate"]["sha256_fingerprint_hex"]
            .as_str()
            .unwrap()
    ));
}

/// A VM's whole life over VASA, with the data over iSCSI through the
/// protocol endpoint the host finds in band (`support/vasa_vm.py`): profiles
/// and compliance, a batch bind, I/O, a two-phase snapshot of two disks,
/// bitmaps, clones, a revert, a resize, metadata, events, tasks, alarms, the
/// unbinds and the deletes; then the REST API sees nothing of it left.
#[test]
fn a_vm_lives_and_dies_over_vasa_with_its_data_over_the_protocol_endpoint() {
    const ESX1: &str = "iqn.1998-01.com.vmware:esx1-vasa";
    let dir = temp_dir("vasa-vm");
    let daemon = Daemon::start(dir.path());
    daemon.cli_ok(&["host", "create", "esx1", "--iqn", ESX1]);
    daemon.cli_ok(&["host", "protocol-endpoint", "esx1", "--lun", "7"]);
    let work = client_dir(dir.path());
    let out = script(
        "vasa_vm.py",
        &[
            &daemon.vasa_port.to_string(),
            &daemon.api_port.to_string(),
            &token(dir.path()),
            work.to_str().unwrap(),
            TARGET_IQN,
            ESX1,
        ],
    );
    assert!(out.lines().any(|l| l == "done"), "{out}");
    let deleted: Vec<&str> = out
        .lines()
        .find_map(|l| l.strip_prefix("deleted "))
        .unwrap_or_else(|| panic!("{out}"))
        .split(' ')
        .collect();
    assert_eq!(deleted.len(), 9, "7 vVols and 2 snapshots: {deleted:?}");
    let listed = daemon.cli_ok(&["--json", "vvol", "list"]);
    for id in &deleted {
        assert!(
            !listed.contains(id),
            "{id} deleted over VASA, still listed: {listed}"
        );
    }
    let (status, volumes) = support::api(&daemon, "GET", "/v1/volumes", None);
    assert_eq!(status, 200, "{volumes}");
    assert_eq!(volumes.as_array().map(Vec::len), Some(0), "{volumes}");
    let (_, esx1) = support::api(&daemon, "GET", "/v1/hosts/esx1", None);
    assert_eq!(esx1["protocol_endpoint_lun"], 7, "{esx1}");
}

/// The certificate a new TLS connection to the provider is presented, as
/// `openssl s_client` prints it (subject and issuer lines).
fn served_names(port: u16) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} </dev/null 2>/dev/null | openssl x509 -noout -subject -issuer"
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The provider's certificates as vCenter's CA manages them
/// (`support/vasa_certs.py`): the CA-signed certificate installed over VASA
/// is what a new connection sees, and stays so across a restart; a rotation
/// over the REST API puts a self-signed one back, with no restart, and ends
/// the sessions made before.
#[test]
fn the_provider_takes_a_ca_signed_certificate_and_a_ca_and_keeps_them() {
    let dir = temp_dir("vasa-certs");
    let mut daemon = Daemon::start(dir.path());
    let work = client_dir(dir.path());
    let out = script(
        "vasa_certs.py",
        &[
            &daemon.vasa_port.to_string(),
            &token(dir.path()),
            work.to_str().unwrap(),
        ],
    );
    assert!(out.lines().any(|l| l == "done"), "{out}");
    let (_, vasa) = support::api(&daemon, "GET", "/v1/vasa", None);
    assert_eq!(vasa["certificate"]["self_signed"], false, "{vasa}");
    assert!(
        vasa["certificate"]["issuer"]
            .as_str()
            .unwrap()
            .contains("Lacuna test VMCA"),
        "{vasa}"
    );
    assert_eq!(vasa["ca_certificates"], 1, "{vasa}");
    assert_eq!(vasa["registered_clients"], 0, "unregistered: {vasa}");

    daemon.stop();
    let daemon = Daemon::start(dir.path());
    let names = served_names(daemon.vasa_port);
    assert!(
        names.contains("issuer=CN = Lacuna test VMCA"),
        "after a restart: {names}"
    );
    let (_, kept) = support::api(&daemon, "GET", "/v1/vasa", None);
    // The same certificate (its days left may have ticked over meanwhile).
    for field in [
        "sha256_fingerprint_hex",
        "not_after_unix_s",
        "issuer",
        "pem",
    ] {
        assert_eq!(
            kept["certificate"][field], vasa["certificate"][field],
            "{kept}"
        );
    }
    assert_eq!(kept["ca_certificates"], 1, "{kept}");

    let (status, rotated) = support::api(&daemon, "POST", "/v1/vasa/certificate/rotate", None);
    assert_eq!(status, 200, "{rotated}");
    assert_eq!(rotated["certificate"]["self_signed"], true, "{rotated}");
    assert_ne!(
        rotated["certificate"]["sha256_fingerprint_hex"],
        vasa["certificate"]["sha256_fingerprint_hex"]
    );
    let names = served_names(daemon.vasa_port);
    assert!(
        !names.contains("Lacuna test VMCA"),
        "rotated, served without a restart: {names}"
    );
}

/// Malformed requests over HTTPS (`support/vasa_bad_input.py`, with
/// python-requests): each gets its SOAP fault or HTTP error, the provider
/// keeps answering, and nothing was made.
#[test]
fn bad_requests_get_soap_faults_and_change_nothing() {
    let dir = temp_dir("vasa-bad");
    let daemon = Daemon::start(dir.path());
    let work = client_dir(dir.path());
    let out = script(
        "vasa_bad_input.py",
        &[
            &daemon.vasa_port.to_string(),
            &token(dir.path()),
            work.to_str().unwrap(),
        ],
    );
    assert!(out.lines().any(|l| l == "done"), "{out}");
    let listed = daemon.cli_ok(&["--json", "vvol", "list"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
    let (status, vasa) = support::api(&daemon, "GET", "/v1/vasa", None);
    assert_eq!(status, 200, "{vasa}");
    assert_eq!(vasa["running"], true, "{vasa}");
}

/// The text of `GET /metrics`.
fn metrics(daemon: &Daemon) -> String {
    let token = support::token_in(&daemon.dir);
    let (status, text) = support::call_at(daemon.api_port, "GET", "/metrics", Some(&token), None);
    assert_eq!(status, 200, "{text}");
    text
}

const STORM_HOSTS: usize = 64;

/// A boot storm (`support/vasa_storm.py`): 64 hosts make their sessions and
/// bind their VMs' vVols at once; one session flooded past its limit gets
/// answers or VasaProviderBusy only, as `/metrics` counts them; a provider
/// restart under iSCSI writes to a bound vVol fails no write and keeps
/// every binding.
#[test]
fn a_boot_storm_a_flood_and_a_provider_restart_under_io() {
    let dir = temp_dir("vasa-storm");
    let daemon = Daemon::start(dir.path());
    for i in 0..STORM_HOSTS {
        let host = json!({"name": format!("esx{i}"),
            "iqns": [format!("iqn.1998-01.com.vmware:storm-{i}")]});
        let (status, body) = support::api(&daemon, "POST", "/v1/hosts", Some(&host));
        assert_eq!(status, 201, "{body}");
        let (status, body) = support::api(
            &daemon,
            "PUT",
            &format!("/v1/hosts/esx{i}/protocol-endpoint"),
            Some(&json!({"lun": 1})),
        );
        assert_eq!(status, 200, "{body}");
    }
    let work = client_dir(dir.path());
    let out = script(
        "vasa_storm.py",
        &[
            &daemon.vasa_port.to_string(),
            &daemon.api_port.to_string(),
            &token(dir.path()),
            work.to_str().unwrap(),
            TARGET_IQN,
            &STORM_HOSTS.to_string(),
        ],
    );
    assert!(out.lines().any(|l| l == "done"), "{out}");
    let busy: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("busy "))
        .unwrap_or_else(|| panic!("{out}"))
        .parse()
        .unwrap();
    let metrics = metrics(&daemon);
    assert!(
        metrics
            .lines()
            .any(|l| l == format!("lacuna_vasa_busy_total {busy}")),
        "{busy} Busy answers seen:\n{metrics}"
    );
    let bound: Vec<&str> = out
        .lines()
        .find_map(|l| l.strip_prefix("bound "))
        .unwrap()
        .split(' ')
        .collect();
    let (status, infos) = support::api(
        &daemon,
        "POST",
        "/v1/vvols/info",
        Some(&json!({ "ids": bound })),
    );
    assert_eq!(status, 200, "{infos}");
    for item in infos.as_array().unwrap() {
        assert_eq!(item["result"]["bound_hosts"], json!(["esx0"]), "{item}");
    }
    let (_, vvols) = support::api(&daemon, "POST", "/v1/vvols/query", Some(&json!({})));
    assert_eq!(
        vvols["ids"].as_array().map(Vec::len),
        Some(STORM_HOSTS * 4),
        "4 vVols a host"
    );
}
