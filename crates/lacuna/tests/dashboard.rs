//! The dashboard in a real browser: headless Chromium (Debian `chromium`,
//! `chromium-driver`, driven by `python3-selenium`) against a real
//! `lacuna serve` that holds volumes, a snapshot, a host with CHAP, a
//! container whose quota is full and a flipped bit found by scrub.
//! `support/dashboard_browser.py` does the browsing and compares every figure
//! with the REST API; its checks are listed at the top of that file.
//!
//! Screenshots of every page at a desktop and a narrow width are kept in
//! `$CARGO_TARGET_TMPDIR/dashboard-screenshots/` (the CI keeps them).

mod support;

use std::path::PathBuf;

use support::damage::{find_record, flip_bit, RECORD_HEADER_BYTES};
use support::{temp_dir, token, tool, Daemon};

const CHAP_SECRET: &str = "a-secret-never-shown-1";

/// Writes `length` bytes at `offset` of `export` through libnbd: grains that
/// start with `GRAIN-<n>` and are otherwise random (neither compressible nor
/// duplicates). Errors are printed, not raised (a full quota refuses writes).
fn nbd_write(daemon: &Daemon, export: &str, offset: u64, length: u64) -> String {
    let script = r#"
import os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
off, length = int(sys.argv[2]), int(sys.argv[3])
try:
    for at in range(off, off + length, 1 << 20):
        data = b"".join(b"GRAIN-%010d" % (at // 4096 + i) + os.urandom(4080) for i in range(256))
        h.pwrite(data, at)
    h.flush()
    print("OK")
except nbd.Error as e:
    print("ERR", e.string)
"#;
    let out = tool(
        "/usr/bin/python3",
        &[
            "-c",
            script,
            &daemon.uri(export),
            &offset.to_string(),
            &length.to_string(),
        ],
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn screenshot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots")
}

#[test]
fn the_dashboard_shows_what_the_api_says_and_its_actions_and_acknowledgements_reach_it() {
    let tmp = temp_dir("dashboard");
    let dir = tmp.path();
    let mut daemon = Daemon::start(dir);
    daemon.cli_ok(&["volume", "create", "v1", "--size", "64M"]);
    daemon.cli_ok(&[
        "volume",
        "create",
        "v2",
        "--size",
        "32M",
        "--type",
        "zeroedthick",
    ]);
    assert_eq!(nbd_write(&daemon, "v1", 0, 1 << 20).trim(), "OK");
    daemon.cli_ok(&["snapshot", "create", "v1", "--name", "s1"]);
    daemon.cli_ok(&[
        "host",
        "create",
        "alpha",
        "--iqn",
        "iqn.2024-01.org.example:alpha",
        "--chap-user",
        "alpha-user",
        "--chap-secret",
        CHAP_SECRET,
    ]);
    daemon.cli_ok(&["host", "connect", "alpha", "v1"]);
    daemon.cli_ok(&[
        "container",
        "create",
        "cold",
        "--quota",
        "8M",
        "--reclaim",
        "off",
    ]);
    daemon.cli_ok(&[
        "volume",
        "create",
        "q1",
        "--size",
        "32M",
        "--container",
        "cold",
    ]);
    // Two VMs' vVols and one of no VM.
    for (vm, kind, name) in [
        ("vm-a", "config", "vm-a.vmx"),
        ("vm-a", "data", "vm-a.vmdk"),
        ("vm-b", "config", "vm-b.vmx"),
        ("", "other", "loose"),
    ] {
        let name_pair = format!("VMW_VVolName={name}");
        let vm_pair = format!("VMW_VmID={vm}");
        let mut args = vec!["vvol", "create", "--type", kind, "--size", "8M"];
        args.extend(["--meta", &name_pair]);
        if !vm.is_empty() {
            args.extend(["--meta", &vm_pair]);
        }
        daemon.cli_ok(&args);
    }

    // A flipped bit in grain 5 of v1 (its snapshot shares it), found by scrub.
    daemon.kill();
    let (segment, record) = find_record(dir, 5);
    flip_bit(&segment, record + RECORD_HEADER_BYTES as u64 + 1000);
    let daemon = Daemon::start(dir);
    let scrub = daemon.cli(&["scrub"]);
    assert!(!scrub.status.success(), "scrub finds the flipped bit");
    // The quota of `cold` fills up.
    let filled = nbd_write(&daemon, "q1", 0, 16 << 20);
    assert!(
        filled.starts_with("ERR"),
        "the quota refuses writes: {filled}"
    );

    let shots = screenshot_dir();
    let _ = std::fs::remove_dir_all(&shots);
    let base = format!("http://127.0.0.1:{}", daemon.api_port);
    let auth = token(&daemon);
    let bare = auth.trim_start_matches("Bearer ");
    let out = tool(
        "/usr/bin/python3",
        &[
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/support/dashboard_browser.py"
            ),
            &base,
            bare,
            shots.to_str().unwrap(),
            &daemon.uri("v1"),
            CHAP_SECRET,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the browser checks failed:\n{stdout}\n{stderr}\n{}",
        daemon.log()
    );
    let checked: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CHECKED "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(checked > 100, "{checked} checks ran:\n{stdout}");
    let mut taken: Vec<String> = std::fs::read_dir(&shots)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    taken.sort();
    assert_eq!(taken.len(), 14, "7 pages at 2 widths: {taken:?}");
    for name in &taken {
        let bytes = std::fs::read(shots.join(name)).unwrap();
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
            "{name}"
        );
    }
}
