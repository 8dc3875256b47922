//! The VASA provider driven by zeep, a SOAP client nobody here wrote, over
//! HTTPS with a client certificate, checked against the REST API's view.

mod support;

use std::process::Command;

use support::{temp_dir, Daemon};

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

#[test]
fn zeep_registers_makes_a_session_and_manages_a_vvol() {
    let dir = temp_dir("vasa-zeep");
    let daemon = Daemon::start(dir.path());
    let work = dir.path().join("client");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::copy(
        dir.path().join("data/vasa/provider-cert.pem"),
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
    let token = std::fs::read_to_string(dir.path().join("data/api-token")).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/vasa_client.py");
    let out = run_ok(
        Command::new("/usr/bin/python3")
            .arg(script)
            .arg(daemon.vasa_port.to_string())
            .arg(token.trim())
            .arg(&work),
    );
    assert!(!out.contains("FAIL"), "{out}");
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
}
