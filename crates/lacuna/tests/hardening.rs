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

/// Writes 1 MiB of random (irreducible) data at the start of `volume`.
fn write_random_mib(daemon: &Daemon, volume: &str) {
    let script = "import os; h.pwrite(os.urandom(1 << 20), 0); h.flush()";
    support::tool_ok("nbdsh", &["-u", &daemon.uri(volume), "-c", script]);
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
    write_random_mib(&daemon, "v");
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

/// Opens up to `count` connections to `port` that send `greeting` and then
/// nothing; each connect gives up after a moment (past a listener's bound the
/// kernel's backlog fills and connects time out).
fn idle_connections(port: u16, count: usize, greeting: &[u8]) -> Vec<std::net::TcpStream> {
    use std::io::Write;
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut held = Vec::new();
    for _ in 0..count {
        match std::net::TcpStream::connect_timeout(&address, Duration::from_millis(100)) {
            Ok(mut stream) => {
                let _ = stream.write_all(greeting);
                held.push(stream);
            }
            Err(_) => break,
        }
    }
    held
}

/// Raises this test process's own descriptor limit (it holds the flood).
fn raise_own_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit pointer.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

/// An NBD client (libnbd) connected before the flood, that writes and reads
/// back a fresh 4 MiB each time it is told to on stdin and answers `ok N`.
const STEADY_CLIENT: &str = r#"
import os, sys, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
print("connected", flush=True)
for n, _ in enumerate(sys.stdin):
    data = os.urandom(4 << 20)
    h.pwrite(data, (n % 8) * (4 << 20))
    h.flush()
    assert h.pread(len(data), (n % 8) * (4 << 20)) == data
    print("ok", n, flush=True)
"#;

/// A flood of idle and half-sent connections on every listener, under a
/// descriptor limit of 256: the listeners refuse or time out what is past
/// their bound, I/O on a connection made before goes on, nothing is fenced,
/// and once the flood ends everything works without a restart. Idle API
/// connections are closed by the server after its header timeout.
#[test]
fn a_connection_flood_on_every_listener_fences_nothing() {
    use std::io::{BufRead, BufReader, Read, Write};
    raise_own_limit();
    let dir = temp_dir("hardening-flood");
    let daemon = Daemon::start_with_env(
        dir.path(),
        "2G",
        &["--iscsi-open-access"],
        &[(support::NOFILE_ENV, "256")],
    );
    daemon.cli_ok(&["volume", "create", "v", "--size", "64M"]);
    let mut steady = std::process::Command::new("/usr/bin/python3")
        .args(["-c", STEADY_CLIENT, &daemon.uri("v")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut tell = steady.stdin.take().unwrap();
    let mut answers = BufReader::new(steady.stdout.take().unwrap()).lines();
    assert_eq!(answers.next().unwrap().unwrap(), "connected");
    let mut round = |tell: &mut std::process::ChildStdin, n: usize| {
        writeln!(tell, "go").unwrap();
        let answer = answers.next().map(|a| a.unwrap_or_default());
        assert_eq!(answer.as_deref(), Some(format!("ok {n}").as_str()));
    };
    round(&mut tell, 0);

    let half_request = b"GET /healthz HTTP/1.1\r\n";
    let mut flood = idle_connections(daemon.api_port, 400, half_request);
    flood.extend(idle_connections(daemon.nbd_port, 400, b""));
    flood.extend(idle_connections(daemon.iscsi_ports[0], 400, b""));
    flood.extend(idle_connections(daemon.iscsi_ports[1], 400, b""));
    assert!(
        flood.len() > 256,
        "the flood held only {} sockets",
        flood.len()
    );
    for n in 1..=3 {
        round(&mut tell, n);
    }
    let log = daemon.log();
    assert!(
        !log.contains("takes no more I/O") && !log.contains("Too many open files"),
        "{log}"
    );

    // The server closes the idle API connections it served (header timeout).
    std::thread::sleep(Duration::from_secs(12));
    let mut closed = 0;
    for stream in flood.iter_mut().take(8) {
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        // End of stream (or a last answer before it), not a read timeout.
        let mut bytes = [0u8; 256];
        if stream.read(&mut bytes).is_ok() {
            closed += 1;
        }
    }
    assert_eq!(closed, 8, "the first API connections were not closed");
    drop(flood);
    std::thread::sleep(Duration::from_millis(500));

    // Everything works again, without a restart.
    round(&mut tell, 4);
    drop(tell);
    assert!(steady.wait().unwrap().success());
    let listed = daemon.cli_ok(&["volume", "list"]);
    assert!(listed.contains("v "), "{listed}");
    let info = support::tool_ok("nbdinfo", &["--size", &daemon.uri("v")]);
    assert_eq!(info.trim(), (64u64 << 20).to_string());
    support::tool_ok(
        "iscsi-inq",
        &["-i", "iqn.2024-01.org:flood", &daemon.iscsi_url(0, 0)],
    );
    let health = daemon.cli_ok(&["array", "space"]);
    assert!(!health.contains("fenced"), "{health}");
}

/// A scrub at 1 byte/s no longer blocks every later one until a restart:
/// `scrub --cancel` stops it (and the command following it says so), and a
/// new pass then runs to its end.
#[test]
fn a_slow_scrub_can_be_cancelled_from_the_cli() {
    let dir = temp_dir("hardening-scrub");
    let daemon = Daemon::start(dir.path()).owning(dir);
    daemon.cli_ok(&["volume", "create", "v", "--size", "16M"]);
    write_random_mib(&daemon, "v");
    let follower = std::process::Command::new(support::BIN)
        .args(["--api", &format!("http://127.0.0.1:{}", daemon.api_port)])
        .arg("--data-dir")
        .arg(daemon.dir.join("data"))
        .args(["scrub", "--rate", "0.000001"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = daemon.cli(&["scrub", "--cancel"]);
        if status.status.success() {
            let text = String::from_utf8_lossy(&status.stdout).into_owned();
            assert!(text.contains("cancelled scrub pass 1"), "{text}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the slow pass never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let followed = follower.wait_with_output().unwrap();
    assert!(
        !followed.status.success(),
        "the cancelled pass's command succeeded"
    );
    let err = String::from_utf8_lossy(&followed.stderr);
    assert!(err.contains("cancelled on request"), "{err}");
    let out = daemon.cli_ok(&["scrub"]);
    assert!(out.contains("pass 2"), "{out}");
    let again = daemon.cli(&["scrub", "--cancel"]);
    assert!(
        !again.status.success(),
        "a cancel with nothing running succeeded"
    );
}
