//! The CLI binary end to end: against a live API (engine in a temporary
//! directory, served in-process), against a real `lacuna serve` (hosts, whose
//! registry lives in the daemon) and against nothing at all.

mod support;

use std::net::TcpListener;
use std::process::{Command, Output};
use std::sync::Arc;

use lacuna_engine::{Engine, EngineConfig};
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_lacuna");

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs the CLI with a clean environment (no LACUNA_* from the caller's shell).
fn lacuna(args: &[&str]) -> Output {
    Command::new(BIN)
        .env_remove("LACUNA_API")
        .env_remove("LACUNA_TOKEN")
        .env_remove("LACUNA_DATA_DIR")
        .env_remove("LACUNA_CHAP_SECRET")
        .env_remove("LACUNA_MUTUAL_CHAP_SECRET")
        .args(args)
        .output()
        .expect("run lacuna")
}

fn stderr_line(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        err.lines().count(),
        1,
        "expected one line on stderr: {err:?}"
    );
    assert!(err.ends_with('\n'));
    err.trim_end().to_string()
}

/// The API over a real engine, served on a background runtime.
struct LiveApi {
    url: String,
    engine: Arc<Engine>,
    runtime: Option<tokio::runtime::Runtime>,
    /// Removed when this field drops, after `drop` has stopped the runtime
    /// and closed the engine.
    data_dir: TempDir,
}

impl LiveApi {
    fn start(tag: &str) -> LiveApi {
        let data_dir = support::temp_dir(&format!("cli-{tag}"));
        let engine = Engine::open(EngineConfig::new(data_dir.path(), 1 << 30)).unwrap();
        let token = lacuna_api::load_or_create_token(data_dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = lacuna_api::ApiState::new(engine.clone(), token);
        runtime.spawn(lacuna_api::serve(listener, state));
        LiveApi {
            url,
            engine,
            runtime: Some(runtime),
            data_dir,
        }
    }

    /// Runs the CLI against this API; the token comes from the data directory.
    fn cli(&self, args: &[&str]) -> Output {
        let mut all = vec!["--api", &self.url, "--data-dir"];
        all.push(self.data_dir.path().to_str().unwrap());
        all.extend_from_slice(args);
        lacuna(&all)
    }

    fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "lacuna {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stderr.is_empty());
        String::from_utf8(out.stdout).unwrap()
    }

    fn cli_err(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert_eq!(out.status.code(), Some(1), "lacuna {args:?}");
        assert!(out.stdout.is_empty());
        stderr_line(&out)
    }
}

impl Drop for LiveApi {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        let _ = self.engine.close();
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn volume_commands_against_a_live_api() {
    let api = LiveApi::start("live");
    assert!(api.cli_ok(&["volume", "list"]).starts_with("no volumes"));
    assert_eq!(
        api.cli_ok(&["volume", "create", "db", "--size", "100G"]),
        "created volume db (100 GiB, thin)\n"
    );
    api.cli_ok(&["volume", "create", "logs", "--size", "1.5M"]);

    let list = api.cli_ok(&["volume", "list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    assert!(lines[0].starts_with("NAME"), "{list}");
    assert!(
        lines[1].starts_with("db ") && lines[1].contains("100 GiB"),
        "{list}"
    );
    assert!(
        lines[2].starts_with("logs ") && lines[2].contains("1.5 MiB"),
        "{list}"
    );
    let listed = json(&api.cli_ok(&["--json", "volume", "list"]));
    assert_eq!(listed.as_array().unwrap().len(), 2);

    let show = api.cli_ok(&["volume", "show", "db"]);
    for key in [
        "size:",
        "written:",
        "thin_provisioning:",
        "logical data:",
        "unique physical:",
        "shared physical:",
        "data reduction:",
    ] {
        assert!(show.contains(key), "{key} in\n{show}");
    }
    assert!(show.contains("100.0%") && show.contains("1.00:1"), "{show}");
    let shown = json(&api.cli_ok(&["--json", "volume", "show", "db"]));
    assert_eq!(shown["size_bytes"], 100u64 << 30);

    assert_eq!(
        api.cli_ok(&["volume", "resize", "db", "--size", "200g"]),
        "resized volume db to 200 GiB\n"
    );
    let space = api.cli_ok(&["array", "space"]);
    for key in [
        "capacity:",
        "physical used:",
        "live:",
        "stale awaiting reclaim:",
        "free:",
        "provisioned:",
        "logical data:",
        "reclaim backlog:",
        "data reduction:",
        "total reduction:",
    ] {
        assert!(space.contains(key), "{key} in\n{space}");
    }
    assert!(space.contains("1 GiB"), "capacity\n{space}");
    let space = json(&api.cli_ok(&["--json", "array", "space"]));
    assert_eq!(space["provisioned_bytes"], (200u64 << 30) + (3 << 19));

    assert!(api
        .cli_ok(&["volume", "delete", "logs"])
        .starts_with("destroyed volume logs: recoverable until "));
    let deleted = json(&api.cli_ok(&["--json", "volume", "delete", "db"]));
    assert_eq!(deleted["name"], "db");
    assert!(deleted["eradicate_at_unix_s"].is_u64(), "{deleted}");
    assert!(api.cli_ok(&["volume", "list"]).starts_with("no volumes"));
}

#[test]
fn api_errors_are_one_line_with_the_api_message() {
    let api = LiveApi::start("errors");
    assert_eq!(
        api.cli_err(&["volume", "show", "nope"]),
        "lacuna: volume 'nope' does not exist"
    );
    api.cli_ok(&["volume", "create", "v", "--size", "1M"]);
    assert_eq!(
        api.cli_err(&["volume", "create", "v", "--size", "1M"]),
        "lacuna: volume 'v' already exists"
    );
    // A name with a slash reaches the API as one path segment (the engine answers
    // for that name), not as a request for another route.
    assert_eq!(
        api.cli_err(&["volume", "show", "a/b"]),
        "lacuna: volume 'a/b' does not exist"
    );
    let err = api.cli_err(&["volume", "create", "bad name", "--size", "1M"]);
    assert!(err.contains("invalid volume name"), "{err}");
    let err = api.cli_err(&["volume", "resize", "v", "--size", "1000"]);
    assert!(err.contains("multiple of 512"), "{err}");
    // A wrong token.
    let out = lacuna(&["--api", &api.url, "--token", "wrong", "volume", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_line(&out).contains("token"));
}

#[test]
fn without_a_daemon_one_line_names_the_address() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    for args in [
        vec!["volume", "list"],
        vec!["--json", "array", "space"],
        vec!["volume", "create", "v", "--size", "1G"],
    ] {
        let mut all = vec!["--api", url.as_str(), "--token", "t"];
        all.extend(args);
        let out = lacuna(&all);
        assert_eq!(out.status.code(), Some(1));
        assert!(out.stdout.is_empty());
        assert_eq!(
            stderr_line(&out),
            format!(
                "lacuna: cannot reach the Lacuna API at {url} (is 'lacuna serve' running?): connection refused"
            )
        );
    }
}

#[test]
fn without_a_token_one_line_says_where_it_looked() {
    let tmp = support::temp_dir("cli-notoken");
    let dir = tmp.path();
    let out = lacuna(&["--data-dir", dir.to_str().unwrap(), "volume", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_line(&out);
    let token_path = dir.join("api-token");
    assert!(err.contains(token_path.to_str().unwrap()), "{err}");
    assert!(err.contains("--token"), "{err}");
}

#[test]
fn invalid_arguments_get_clap_messages() {
    let out = lacuna(&["volume", "create", "v", "--size", "12Q"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid size '12Q'"), "{err}");
    let out = lacuna(&["volume", "create", "v"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("<SIZE>"));
    let out = lacuna(&["volume", "create", "v", "1G", "--size", "1G"]);
    assert_eq!(out.status.code(), Some(2));
    let out = lacuna(&["volume", "create", "v", "1G", "--type", "thick"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("eagerzeroedthick"), "{err}");
    let out = lacuna(&["snapshot", "create"]);
    assert_eq!(out.status.code(), Some(2));
    let out = lacuna(&[
        "volume", "copy", "a", "b", "--offset", "0", "--length", "1M",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--to"));
    let out = lacuna(&["volume", "restore", "a"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from-snapshot"));
    let out = lacuna(&["volume", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let out = lacuna(&["serve", "--metadata-cache", "lots"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid size 'lots'"), "{err}");
    assert_usage_error(
        &["serve", "--iscsi-poll-us", "1001"],
        "1001 is not in 0..=1000",
    );
    assert_usage_error(
        &["serve", "--iscsi-poll-us", "soon"],
        "invalid value 'soon'",
    );
    assert_usage_error(
        &["serve", "--nbd-poll-us", "5000"],
        "5000 is not in 0..=1000",
    );
    for shard in ["Shard", "gateways", "a/b", ""] {
        assert_usage_error(
            &[
                "serve",
                "--store",
                "rados",
                "--ceph-conf",
                "c",
                "--pool",
                "p",
                "--shard",
                shard,
            ],
            "a shard is 1 to 64 lowercase letters",
        );
    }
}

impl LiveApi {
    fn write(&self, volume: &str, offset_bytes: u64, data: &[u8]) {
        let v = self.engine.open_volume(volume).unwrap();
        v.write(offset_bytes, data).unwrap();
        v.flush().unwrap();
    }

    fn read(&self, volume: &str, offset_bytes: u64, length_bytes: usize) -> Vec<u8> {
        let v = self.engine.open_volume(volume).unwrap();
        let mut buf = vec![0u8; length_bytes];
        v.read(offset_bytes, &mut buf).unwrap();
        buf
    }
}

/// The number in a "commit window: N µs" line.
fn commit_window_us(text: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with("commit window: "))
        .unwrap_or_else(|| panic!("no commit window in\n{text}"));
    line["commit window: ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("{line}: {e}"))
}

#[test]
fn snapshot_commands_against_a_live_api() {
    let api = LiveApi::start("snapshots");
    api.cli_ok(&["volume", "create", "db", "1M"]);
    assert!(api
        .cli_ok(&["snapshot", "list"])
        .starts_with("no snapshots"));

    let out = api.cli_ok(&["snapshot", "create", "db", "--name", "s1"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "created snapshot db@s1", "{out}");
    assert_eq!(lines.len(), 2, "{out}");
    commit_window_us(&out);
    let taken = json(&api.cli_ok(&["--json", "snapshot", "create", "db", "--name", "s2"]));
    assert_eq!(taken["snapshots"][0]["full_name"], "db@s2");
    assert!(taken["commit_window_us"].is_u64(), "{taken}");

    let list = api.cli_ok(&["snapshot", "list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("CREATED"),
        "{list}"
    );
    assert!(
        lines[1].starts_with("db@s1 ") && lines[1].contains("1 MiB"),
        "{list}"
    );
    assert!(lines[2].starts_with("db@s2 "), "{list}");
    let of_db = json(&api.cli_ok(&["--json", "snapshot", "list", "db"]));
    assert_eq!(of_db.as_array().unwrap().len(), 2);
    assert_eq!(
        api.cli_err(&["snapshot", "list", "nope"]),
        "lacuna: volume 'nope' does not exist"
    );
    assert_eq!(
        api.cli_err(&["snapshot", "create", "db", "--name", "s1"]),
        "lacuna: snapshot 'db@s1' already exists"
    );
    let show = api.cli_ok(&["snapshot", "show", "db@s1"]);
    assert!(show.lines().any(|l| l == "volume:  db"), "{show}");
    assert!(api
        .cli_ok(&["volume", "show", "db"])
        .lines()
        .any(|l| l.starts_with("snapshots:") && l.ends_with(" 2")));

    // Delete: says until when it can come back and how.
    let out = api.cli_ok(&["snapshot", "delete", "db@s1"]);
    let shown = json(&api.cli_ok(&["--json", "snapshot", "show", "db@s1"]));
    let eradicate_at = shown["eradicate_at_unix_s"].as_u64().unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("destroyed snapshot db@s1: recoverable until 20"),
        "{out}"
    );
    assert!(lines[0].ends_with(" UTC"), "{out}");
    assert!(out.contains("lacuna snapshot recover db@s1"), "{out}");
    assert!(out.contains("lacuna snapshot eradicate db@s1"), "{out}");
    let destroyed = api.cli_ok(&["snapshot", "list", "--destroyed"]);
    assert!(
        destroyed.lines().nth(1).unwrap().starts_with("db@s1 "),
        "{destroyed}"
    );
    assert!(destroyed.contains("ERADICATE AT"), "{destroyed}");
    let destroyed = json(&api.cli_ok(&["--json", "snapshot", "list", "--destroyed"]));
    assert_eq!(destroyed[0]["eradicate_at_unix_s"], eradicate_at);
    assert_eq!(
        json(&api.cli_ok(&["--json", "snapshot", "list"]))
            .as_array()
            .unwrap()
            .len(),
        1
    );

    assert_eq!(
        api.cli_ok(&["snapshot", "recover", "db@s1"]),
        "recovered snapshot db@s1\n"
    );
    let err = api.cli_err(&["snapshot", "eradicate", "db@s1"]);
    assert!(err.contains("delete it first"), "{err}");
    api.cli_ok(&["snapshot", "delete", "db@s1"]);
    assert_eq!(
        api.cli_ok(&["snapshot", "eradicate", "db@s1"]),
        "eradicated snapshot db@s1; its space is reclaimed in the background\n"
    );
    assert_eq!(
        api.cli_err(&["snapshot", "show", "db@s1"]),
        "lacuna: snapshot 'db@s1' does not exist"
    );
    // --json for the state changes.
    let deleted = json(&api.cli_ok(&["--json", "snapshot", "delete", "db@s2"]));
    assert_eq!(deleted["full_name"], "db@s2");
    assert!(deleted["destroyed_unix_s"].is_u64(), "{deleted}");
    let recovered = json(&api.cli_ok(&["--json", "snapshot", "recover", "db@s2"]));
    assert_eq!(recovered["destroyed_unix_s"], serde_json::Value::Null);
    api.cli_ok(&["snapshot", "delete", "db@s2"]);
    assert_eq!(
        json(&api.cli_ok(&["--json", "snapshot", "eradicate", "db@s2"])),
        serde_json::json!({"eradicated": "db@s2"})
    );
    assert!(api
        .cli_ok(&["snapshot", "list"])
        .starts_with("no snapshots"));
}

#[test]
fn group_snapshot_reports_its_commit_window() {
    let api = LiveApi::start("group");
    for name in ["a", "b", "c"] {
        api.cli_ok(&["volume", "create", name, "1M"]);
    }
    let out = api.cli_ok(&["snapshot", "create", "a", "b", "c", "--group", "g1"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "created snapshot a@g1",
            "created snapshot b@g1",
            "created snapshot c@g1",
            "consistency group g1: 3 volumes",
        ],
        "{out}"
    );
    assert!(
        lines[4].starts_with("commit window: ") && lines[4].contains(" µs"),
        "{out}"
    );
    commit_window_us(&out);
    let taken = json(&api.cli_ok(&[
        "--json", "snapshot", "create", "a", "b", "--group", "g2", "--name", "n2",
    ]));
    let names: Vec<&str> = taken["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["full_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a@n2", "b@n2"]);
    assert_eq!(taken["snapshots"][0]["group"], "g2");
    assert!(taken["commit_window_us"].is_u64() && taken["prepare_us"].is_u64());
    let list = api.cli_ok(&["snapshot", "list", "a"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with("a@n2 ") && l.ends_with("  g2")),
        "{list}"
    );
    let err = api.cli_err(&["snapshot", "create", "a", "a", "--group", "g3"]);
    assert!(err.contains("named twice"), "{err}");
}

#[test]
fn clone_copy_and_restore_round_trip() {
    let api = LiveApi::start("clone");
    api.cli_ok(&["volume", "create", "src", "1M"]);
    api.write("src", 0, &[1u8; 65536]);
    api.cli_ok(&["snapshot", "create", "src", "--name", "gold"]);
    api.write("src", 0, &[2u8; 4096]);

    // Clone the snapshot and the live volume.
    assert_eq!(
        api.cli_ok(&["volume", "clone", "src@gold", "c1"]),
        "cloned src@gold to volume c1 (1 MiB, thin)\n"
    );
    assert_eq!(api.read("c1", 0, 65536), vec![1u8; 65536]);
    let c2 = json(&api.cli_ok(&[
        "--json",
        "volume",
        "clone",
        "src",
        "c2",
        "--type",
        "zeroedthick",
    ]));
    assert_eq!(c2["provisioning"], "zeroedthick");
    assert_eq!(api.read("c2", 0, 4096), vec![2u8; 4096]);
    assert_eq!(api.read("c2", 4096, 4096), vec![1u8; 4096]);
    assert_eq!(
        api.cli_err(&["volume", "clone", "src@nope", "c3"]),
        "lacuna: snapshot 'src@nope' does not exist"
    );
    assert_eq!(
        api.cli_err(&["volume", "clone", "src", "c1"]),
        "lacuna: volume 'c1' already exists"
    );

    // Range copy with the size syntax: 8 KiB of src at 0 to c1 at 64 KiB.
    assert_eq!(
        api.cli_ok(&[
            "volume", "copy", "src", "c1", "--offset", "0", "--length", "8K", "--to", "64K",
        ]),
        "copied 8 KiB from src at byte 0 to c1 at byte 65536: 8 KiB by reference, 0 B as data\n"
    );
    let mut expected = vec![2u8; 4096];
    expected.extend_from_slice(&[1u8; 4096]);
    assert_eq!(api.read("c1", 65536, 8192), expected);
    assert_eq!(
        api.read("c1", 0, 4096),
        vec![1u8; 4096],
        "the rest untouched"
    );
    // Unaligned: copied as data; --json gives the report.
    let report = json(&api.cli_ok(&[
        "--json", "volume", "copy", "src", "c1", "--offset", "512", "--length", "1K", "--to",
        "1536",
    ]));
    assert_eq!(
        report,
        serde_json::json!({"referenced_bytes": 0, "data_bytes": 1024})
    );
    assert_eq!(api.read("c1", 1536, 1024), vec![2u8; 1024]);
    let err = api.cli_err(&[
        "volume", "copy", "src", "c1", "--offset", "1M", "--length", "4K", "--to", "0",
    ]);
    assert!(err.contains("beyond the end of the volume"), "{err}");

    // Restore src to the snapshot, by name and by VOL@NAME.
    assert_eq!(
        api.cli_ok(&["volume", "restore", "src", "--from-snapshot", "gold"]),
        "restored volume src from snapshot src@gold (1 MiB)\n"
    );
    assert_eq!(api.read("src", 0, 65536), vec![1u8; 65536]);
    api.write("src", 0, &[3u8; 4096]);
    let restored = json(&api.cli_ok(&[
        "--json",
        "volume",
        "restore",
        "src",
        "--from-snapshot",
        "src@gold",
    ]));
    assert_eq!(restored["name"], "src");
    assert_eq!(api.read("src", 0, 4096), vec![1u8; 4096]);
    assert_eq!(
        api.cli_err(&["volume", "restore", "src", "--from-snapshot", "nope"]),
        "lacuna: snapshot 'src@nope' does not exist"
    );
    // Another volume's snapshot is refused, pointing to copy and clone, and
    // the volume keeps its content and size.
    let err = api.cli_err(&["volume", "restore", "c1", "--from-snapshot", "src@gold"]);
    assert!(
        err.contains("not a snapshot of volume c1")
            && err.contains("volume copy")
            && err.contains("volume clone"),
        "{err}"
    );
    assert_eq!(api.read("c1", 1536, 1024), vec![2u8; 1024]);
}

#[test]
fn volume_delete_recover_eradicate() {
    let api = LiveApi::start("destroy");
    api.cli_ok(&["volume", "create", "v", "1M"]);
    api.write("v", 0, &[7u8; 4096]);
    let err = api.cli_err(&["volume", "eradicate", "v"]);
    assert!(
        err.starts_with("lacuna: ") && err.contains("delete it first"),
        "{err}"
    );

    let out = api.cli_ok(&["volume", "delete", "v"]);
    let shown = json(&api.cli_ok(&["--json", "volume", "show", "v"]));
    let at = shown["eradicate_at_unix_s"].as_u64().unwrap();
    assert_eq!(at, shown["destroyed_unix_s"].as_u64().unwrap() + 24 * 3600);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with("destroyed volume v: recoverable until 20"),
        "{out}"
    );
    assert!(lines[1].ends_with("lacuna volume recover v"), "{out}");
    assert!(lines[2].ends_with("lacuna volume eradicate v"), "{out}");
    // The deadline printed is the one the API reports, as a UTC date.
    let show = api.cli_ok(&["volume", "show", "v"]);
    let deadline = show
        .lines()
        .find(|l| l.starts_with("eradicate at:"))
        .unwrap_or_else(|| panic!("{show}"))["eradicate at:".len()..]
        .trim()
        .to_string();
    assert!(lines[0].ends_with(&deadline), "{out}\n{show}");
    assert!(show.lines().any(|l| l.starts_with("destroyed:")), "{show}");

    assert!(api.cli_ok(&["volume", "list"]).starts_with("no volumes"));
    let destroyed = api.cli_ok(&["volume", "list", "--destroyed"]);
    assert!(
        destroyed.lines().nth(1).unwrap().starts_with("v "),
        "{destroyed}"
    );
    assert!(destroyed.lines().next().unwrap().ends_with("ERADICATE AT"));
    assert!(destroyed.contains(&deadline), "{destroyed}");
    assert_eq!(
        api.cli_ok(&["volume", "recover", "v"]),
        "recovered volume v (1 MiB, 0 snapshots)\n"
    );
    assert_eq!(api.read("v", 0, 4096), vec![7u8; 4096]);
    assert_eq!(
        api.cli_ok(&["volume", "list", "--destroyed"]),
        "no destroyed volumes\n"
    );

    api.cli_ok(&["volume", "delete", "v"]);
    assert_eq!(
        api.cli_ok(&["volume", "eradicate", "v"]),
        "eradicated volume v; its space is reclaimed in the background\n"
    );
    assert_eq!(
        api.cli_err(&["volume", "show", "v"]),
        "lacuna: volume 'v' does not exist"
    );
    let err = api.cli_err(&["volume", "recover", "v"]);
    assert!(err.contains("does not exist"), "{err}");
    // --json for the state changes.
    api.cli_ok(&["volume", "create", "w", "1M"]);
    json(&api.cli_ok(&["--json", "volume", "delete", "w"]));
    let recovered = json(&api.cli_ok(&["--json", "volume", "recover", "w"]));
    assert_eq!(recovered["destroyed_unix_s"], serde_json::Value::Null);
    api.cli_ok(&["volume", "delete", "w"]);
    assert_eq!(
        json(&api.cli_ok(&["--json", "volume", "eradicate", "w"])),
        serde_json::json!({"eradicated": "w"})
    );
}

#[test]
fn provisioning_types_and_space_report() {
    let api = LiveApi::start("types");
    assert_eq!(
        api.cli_ok(&["volume", "create", "t", "64M", "--type", "eagerzeroedthick"]),
        "created volume t (64 MiB, eagerzeroedthick, 64.38 MiB reserved)\n"
    );
    let show = api.cli_ok(&["volume", "show", "t"]);
    assert!(
        show.lines()
            .any(|l| l.ends_with(" eagerzeroedthick") && l.starts_with("type:")),
        "{show}"
    );
    assert!(
        show.lines()
            .any(|l| l.starts_with("reserved:") && l.ends_with("64.38 MiB")),
        "{show}"
    );
    let list = api.cli_ok(&["volume", "list"]);
    assert!(
        list.lines().nth(1).unwrap().contains(" eagerzeroedthick "),
        "{list}"
    );
    // A reservation the 1 GiB array cannot honour: one line, nothing created;
    // thin of the same size is fine.
    let err = api.cli_err(&["volume", "create", "big", "4G", "--type", "zeroedthick"]);
    assert!(
        err.starts_with("lacuna: out of space: cannot reserve "),
        "{err}"
    );
    assert_eq!(
        api.cli_err(&["volume", "show", "big"]),
        "lacuna: volume 'big' does not exist"
    );
    api.cli_ok(&["volume", "create", "big", "4G"]);

    let space = api.cli_ok(&["array", "space"]);
    for key in [
        "volume unique:",
        "snapshots only:",
        "shared:",
        "reserved (thick):",
        "thin available:",
        "soft threshold:",
        "soft threshold events:",
        "snapshots:",
    ] {
        assert!(space.contains(key), "{key} in\n{space}");
    }
    assert!(
        space
            .lines()
            .any(|l| l.starts_with("reserved (thick):") && l.ends_with("64.38 MiB")),
        "{space}"
    );
    assert!(space.contains("80% of capacity: not reached"), "{space}");
    let report = json(&api.cli_ok(&["--json", "array", "space"]));
    // 16384 grains, each holding a whole record (4 KiB + 24-byte header) in reserve.
    assert_eq!(report["reserved_bytes"], 16384 * (4096 + 24));
    assert_eq!(report["soft_threshold_exceeded"], false);
    assert_eq!(report["volume_count"], 2);
}

/// The CLI against a real daemon, with a clean environment plus `env`.
fn daemon_cli(daemon: &support::Daemon, env: &[(&str, &str)], args: &[&str]) -> Output {
    let api = format!("http://127.0.0.1:{}", daemon.api_port);
    let data_dir = daemon.dir.join("data");
    let mut all = vec![
        "--api",
        api.as_str(),
        "--data-dir",
        data_dir.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let mut command = Command::new(BIN);
    for name in [
        "LACUNA_API",
        "LACUNA_TOKEN",
        "LACUNA_DATA_DIR",
        "LACUNA_CHAP_SECRET",
        "LACUNA_MUTUAL_CHAP_SECRET",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.args(&all).output().expect("run lacuna")
}

fn daemon_ok(daemon: &support::Daemon, args: &[&str]) -> String {
    let out = daemon_cli(daemon, &[], args);
    assert!(
        out.status.success(),
        "lacuna {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    String::from_utf8(out.stdout).unwrap()
}

fn daemon_err(daemon: &support::Daemon, env: &[(&str, &str)], args: &[&str]) -> String {
    let out = daemon_cli(daemon, env, args);
    assert_eq!(out.status.code(), Some(1), "lacuna {args:?}");
    assert!(out.stdout.is_empty());
    stderr_line(&out)
}

const ESX1: &str = "iqn.1998-01.com.vmware:esx1";
const ESX1B: &str = "iqn.1998-01.com.vmware:esx1-b";
const SECRET: &str = "initiator-secret-from-env";
const MUTUAL_SECRET: &str = "target-secret-on-the-line";

/// Every host command against `lacuna serve`: secrets from the environment or a
/// flag, never printed or logged; connect with defaults and options; refusals as
/// one line; the registry survives a restart.
#[test]
fn host_commands_against_the_daemon() {
    let tmp = support::temp_dir("cli-hosts");
    let dir = tmp.path();
    let mut daemon = support::Daemon::start(dir);
    daemon_ok(&daemon, &["volume", "create", "vm1", "64M"]);
    daemon_ok(&daemon, &["volume", "create", "vm2", "64M"]);
    daemon_ok(&daemon, &["snapshot", "create", "vm1", "--name", "s1"]);
    assert!(daemon_ok(&daemon, &["host", "list"]).starts_with("no hosts"));

    // One-way secret from the environment, mutual secret on the command line.
    let out = daemon_cli(
        &daemon,
        &[("LACUNA_CHAP_SECRET", SECRET)],
        &[
            "host",
            "create",
            "esx1",
            "--iqn",
            ESX1,
            "--iqn",
            ESX1B,
            "--chap-user",
            "esx1",
            "--mutual-chap-user",
            "lacuna",
            "--mutual-chap-secret",
            MUTUAL_SECRET,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "created host esx1 (2 initiators, mutual CHAP (users esx1 / lacuna))\n"
    );
    let created = json(&daemon_ok(
        &daemon,
        &[
            "--json",
            "host",
            "create",
            "plain",
            "--iqn",
            "iqn.2024-01.org.example:plain",
        ],
    ));
    assert_eq!(created["chap_user"], serde_json::Value::Null);
    assert_eq!(created["luns"], serde_json::json!([]));

    assert_eq!(
        daemon_ok(&daemon, &["host", "connect", "esx1", "vm1"]),
        "connected vm1 to host esx1 at LUN 0 (512-byte blocks)\n"
    );
    assert_eq!(
        daemon_ok(
            &daemon,
            &[
                "host",
                "connect",
                "esx1",
                "vm1@s1",
                "--lun",
                "5",
                "--block-size",
                "4096",
                "--removable"
            ]
        ),
        "connected vm1@s1 to host esx1 at LUN 5 (4096-byte blocks, read-only, removable)\n"
    );
    let lun = json(&daemon_ok(
        &daemon,
        &["--json", "host", "connect", "esx1", "vm2"],
    ));
    assert_eq!(
        lun,
        serde_json::json!({"lun": 1, "volume": "vm2", "block_size_bytes": 512, "removable": false, "read_only": false})
    );

    let list = daemon_ok(&daemon, &["host", "list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(
        lines[0], "NAME   CHAP    NBD-PSK  LUNS  INITIATORS",
        "{list}"
    );
    assert_eq!(
        lines[1],
        format!("esx1   mutual  -           3  {ESX1},{ESX1B}"),
        "{list}"
    );
    assert_eq!(
        lines[2], "plain  none    -           0  iqn.2024-01.org.example:plain",
        "{list}"
    );
    let show = daemon_ok(&daemon, &["host", "show", "esx1"]);
    for expected in [
        format!("initiator: {ESX1}"),
        format!("initiator: {ESX1B}"),
        "chap:      mutual CHAP (users esx1 / lacuna)".to_string(),
        "LUN  VOLUME  BLOCK  ACCESS      REMOVABLE".to_string(),
        "  0  vm1       512  read-write  no".to_string(),
        "  1  vm2       512  read-write  no".to_string(),
        "  5  vm1@s1   4096  read-only   yes".to_string(),
    ] {
        assert!(
            show.lines().any(|l| l == expected),
            "{expected:?} in\n{show}"
        );
    }
    let listed = json(&daemon_ok(&daemon, &["--json", "host", "list"]));
    assert_eq!(listed.as_array().unwrap().len(), 2);
    let shown = json(&daemon_ok(&daemon, &["--json", "host", "show", "esx1"]));
    assert_eq!(shown["luns"].as_array().unwrap().len(), 3);

    // Refusals, each one line with the API's message.
    for (env, args, expected) in [
        (
            vec![],
            vec!["host", "connect", "esx1", "nope"],
            "lacuna: volume 'nope' does not exist".to_string(),
        ),
        (
            vec![],
            vec!["host", "connect", "esx1", "vm1@nope"],
            "lacuna: snapshot 'vm1@nope' does not exist".to_string(),
        ),
        (
            vec![],
            vec!["host", "connect", "nobody", "vm1"],
            "lacuna: host 'nobody' does not exist".to_string(),
        ),
        (
            vec![],
            vec!["host", "connect", "plain", "vm1", "--lun", "16384"],
            "lacuna: LUN 16384 is above 16383".to_string(),
        ),
        (
            vec![],
            vec!["host", "connect", "esx1", "vm1"],
            "lacuna: volume 'vm1' is already connected to host 'esx1' at LUN 0".to_string(),
        ),
        (
            vec![],
            vec!["host", "disconnect", "plain", "vm1"],
            "lacuna: volume 'vm1' is not connected to host 'plain'".to_string(),
        ),
        (
            vec![],
            vec![
                "host",
                "create",
                "plain",
                "--iqn",
                "iqn.2024-01.org.example:other",
            ],
            "lacuna: host 'plain' already exists".to_string(),
        ),
        (
            vec![],
            vec!["host", "create", "h3", "--iqn", "esx3"],
            "lacuna: 'esx3' is not an iSCSI name (iqn.…, eui.… or naa.…, at most 223 characters)"
                .to_string(),
        ),
        (
            vec![],
            vec!["host", "create", "h3", "--iqn", ESX1],
            format!("lacuna: initiator {ESX1} already belongs to host 'esx1'"),
        ),
        (
            vec![("LACUNA_CHAP_SECRET", "short")],
            vec![
                "host",
                "create",
                "h3",
                "--iqn",
                "iqn.2024-01.org:h3",
                "--chap-user",
                "u",
            ],
            "lacuna: CHAP secret must be 12 to 255 characters".to_string(),
        ),
        (
            vec![],
            vec![
                "host",
                "create",
                "h3",
                "--iqn",
                "iqn.2024-01.org:h3",
                "--chap-user",
                "u",
            ],
            "lacuna: --chap-user needs a secret: set LACUNA_CHAP_SECRET (or pass the secret flag)"
                .to_string(),
        ),
        (
            vec![],
            vec!["host", "show", "nobody"],
            "lacuna: host 'nobody' does not exist".to_string(),
        ),
    ] {
        assert_eq!(daemon_err(&daemon, &env, &args), expected, "{args:?}");
    }

    // Masking follows the registry at once: the plain host's initiator sees
    // nothing, then the LUN connected to it (on both portals).
    let portal = format!("iscsi://127.0.0.1:{}", daemon.iscsi_ports[0]);
    let luns_seen = || {
        let out = support::tool(
            "iscsi-ls",
            &["-i", "iqn.2024-01.org.example:plain", "-s", &portal],
        );
        String::from_utf8_lossy(&out.stdout).matches("Lun:").count()
    };
    assert_eq!(luns_seen(), 0);
    daemon_ok(&daemon, &["host", "connect", "plain", "vm2", "--lun", "3"]);
    assert_eq!(luns_seen(), 2);
    assert_eq!(
        daemon_ok(&daemon, &["host", "disconnect", "plain", "vm2"]),
        "disconnected vm2 from host plain\n"
    );
    assert_eq!(luns_seen(), 0);

    // The registry is the daemon's: a restart loads it as it was.
    daemon.kill();
    let mut daemon = support::Daemon::start(dir);
    let again = json(&daemon_ok(&daemon, &["--json", "host", "show", "esx1"]));
    assert_eq!(again, shown);
    assert_eq!(
        json(&daemon_ok(
            &daemon,
            &["--json", "host", "disconnect", "esx1", "vm2"]
        )),
        serde_json::json!({"host": "esx1", "disconnected": "vm2"})
    );
    assert_eq!(
        daemon_ok(&daemon, &["host", "delete", "esx1"]),
        "deleted host esx1\n"
    );
    assert_eq!(
        json(&daemon_ok(&daemon, &["--json", "host", "delete", "plain"])),
        serde_json::json!({"deleted": "plain"})
    );
    assert!(daemon_ok(&daemon, &["host", "list"]).starts_with("no hosts"));

    // Secrets: kept by the daemon in a private file, never in its log.
    let file = dir.join("data").join("hosts.json");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    daemon.kill();
    let log = daemon.log();
    assert!(
        !log.contains(SECRET) && !log.contains(MUTUAL_SECRET),
        "{log}"
    );
}

#[test]
fn host_arguments_get_clap_messages() {
    for (args, expected) in [
        (vec!["host", "create", "h"], "--iqn"),
        (
            vec![
                "host",
                "create",
                "h",
                "--iqn",
                "iqn.x:y",
                "--chap-secret",
                "s",
            ],
            "--chap-user",
        ),
        (
            vec![
                "host",
                "create",
                "h",
                "--iqn",
                "iqn.x:y",
                "--mutual-chap-user",
                "t",
            ],
            "--chap-user",
        ),
        (
            vec!["host", "connect", "h", "v", "--block-size", "1024"],
            "must be 512 or 4096",
        ),
        (
            vec!["host", "connect", "h", "v", "--lun=-1"],
            "invalid value '-1' for '--lun <LUN>'",
        ),
        (vec!["host", "connect", "h"], "<VOLUME>"),
        (vec!["host", "disconnect", "h"], "<VOLUME>"),
    ] {
        let out = lacuna(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

/// A line of `key: value` output, found by its key, with its value trimmed.
fn value_of(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no '{key}:' in\n{text}"))
        .trim()
        .to_string()
}

/// Exit status 2 (clap refused the arguments) with `expected` in the message.
fn assert_usage_error(args: &[&str], expected: &str) {
    let out = lacuna(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(expected), "{args:?}: {err}");
}

/// Every container command against `lacuna serve`: create with each option
/// and with none, list, show, set (a quota removed with `none`), volumes and
/// clones in a container, a thick volume past the quota refused, delete; bad
/// arguments refused with clear messages and a non-zero exit.
#[test]
fn container_commands_against_the_daemon() {
    let tmp = support::temp_dir("cli-containers");
    let dir = tmp.path();
    let daemon = support::Daemon::start(dir);
    let list = daemon_ok(&daemon, &["container", "list"]);
    assert!(
        list.lines().nth(1).unwrap().starts_with("default "),
        "{list}"
    );

    assert_eq!(
        daemon_ok(
            &daemon,
            &[
                "container",
                "create",
                "cold",
                "--quota",
                "16M",
                "--reclaim",
                "off",
                "--reclaim-burst",
                "0",
                "--compression",
                "zstd",
                "--dedup",
                "off",
            ],
        ),
        "created container cold (quota 16 MiB, reclaim off, burst 0 B, zstd, dedup off)\n"
    );
    let slow = json(&daemon_ok(
        &daemon,
        &["--json", "container", "create", "slow", "--reclaim", "low"],
    ));
    assert_eq!(slow["policy"]["reclaim"], "low");
    assert_eq!(slow["reclaim"]["rate_bytes_per_s"], 25_000_000);
    let fast = json(&daemon_ok(
        &daemon,
        &[
            "--json",
            "container",
            "create",
            "fast",
            "--reclaim",
            "200MB/s",
        ],
    ));
    assert_eq!(fast["policy"]["reclaim"], "200MB/s");
    assert_eq!(fast["reclaim"]["rate_bytes_per_s"], 200_000_000);
    let plain = json(&daemon_ok(
        &daemon,
        &["--json", "container", "create", "plain"],
    ));
    assert_eq!(
        plain["policy"],
        serde_json::json!({"quota_bytes": null, "reclaim": "unlimited", "reclaim_burst_bytes": 268435456, "compression": "lz4", "dedup": true})
    );

    let list = daemon_ok(&daemon, &["container", "list"]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 6, "{list}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "VOLUMES",
            "USED",
            "QUOTA",
            "RECLAIM",
            "COMPRESSION",
            "DEDUP",
            "BACKLOG"
        ]
    );
    let cold_row: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        cold_row,
        ["cold", "0", "0", "B", "16", "MiB", "off", "zstd", "off", "0", "B"],
        "{list}"
    );
    assert!(lines[3].contains(" low "), "{list}");
    let listed = json(&daemon_ok(&daemon, &["--json", "container", "list"]));
    assert_eq!(listed.as_array().unwrap().len(), 5);

    let show = daemon_ok(&daemon, &["container", "show", "slow"]);
    assert_eq!(value_of(&show, "reclaim"), "low (25.0 MB/s)");
    assert_eq!(value_of(&show, "quota"), "none");
    assert_eq!(value_of(&show, "compression"), "lz4");
    assert_eq!(value_of(&show, "dedup"), "on");
    assert_eq!(value_of(&show, "reclaim burst"), "256 MiB");
    let show = daemon_ok(&daemon, &["container", "show", "cold"]);
    assert_eq!(value_of(&show, "quota"), "16 MiB (0.0% used)");

    // Volumes and clones join containers.
    assert_eq!(
        daemon_ok(
            &daemon,
            &["volume", "create", "v", "8M", "--container", "cold"]
        ),
        "created volume v (8 MiB, thin) in container cold\n"
    );
    assert_eq!(
        daemon_ok(&daemon, &["volume", "create", "d", "1M"]),
        "created volume d (1 MiB, thin)\n"
    );
    let show = daemon_ok(&daemon, &["volume", "show", "v"]);
    assert_eq!(value_of(&show, "container"), "cold");
    assert_eq!(value_of(&show, "unmap commands"), "0");
    assert_eq!(value_of(&show, "reclaim backlog"), "0 B");
    let c1 = json(&daemon_ok(
        &daemon,
        &[
            "--json",
            "volume",
            "clone",
            "v",
            "c1",
            "--container",
            "fast",
        ],
    ));
    assert_eq!(c1["container"], "fast");
    assert!(daemon_ok(&daemon, &["volume", "clone", "v", "c2"]).ends_with("in container cold\n"));
    let err = daemon_err(
        &daemon,
        &[],
        &[
            "volume",
            "create",
            "t",
            "32M",
            "--type",
            "zeroedthick",
            "--container",
            "cold",
        ],
    );
    assert!(
        err.starts_with("lacuna: out of space: container 'cold' quota of"),
        "{err}"
    );
    assert_eq!(
        daemon_err(
            &daemon,
            &[],
            &["volume", "create", "w", "1M", "--container", "nope"]
        ),
        "lacuna: container 'nope' does not exist"
    );

    // set: only what is given changes; --quota none removes the quota.
    let cold = json(&daemon_ok(
        &daemon,
        &[
            "--json",
            "container",
            "set",
            "cold",
            "--quota",
            "none",
            "--dedup",
            "on",
        ],
    ));
    assert_eq!(cold["policy"]["quota_bytes"], serde_json::Value::Null);
    assert_eq!(cold["policy"]["dedup"], true);
    assert_eq!(cold["policy"]["compression"], "zstd", "kept");
    assert_eq!(cold["policy"]["reclaim"], "off", "kept");
    assert_eq!(
        daemon_ok(
            &daemon,
            &[
                "container",
                "set",
                "cold",
                "--quota",
                "64M",
                "--reclaim",
                "5MB/s",
                "--compression",
                "lz4"
            ],
        ),
        "changed container cold (quota 64 MiB, reclaim 5MB/s, burst 0 B, lz4, dedup on)\n"
    );
    let err = daemon_err(&daemon, &[], &["container", "set", "cold"]);
    assert!(err.contains("nothing to change"), "{err}");

    // Refusals from the API: one line, exit 1.
    assert_eq!(
        daemon_err(&daemon, &[], &["container", "show", "nope"]),
        "lacuna: container 'nope' does not exist"
    );
    assert_eq!(
        daemon_err(&daemon, &[], &["container", "create", "cold"]),
        "lacuna: container 'cold' already exists"
    );
    let err = daemon_err(&daemon, &[], &["container", "create", "bad name"]);
    assert!(err.contains("invalid container name"), "{err}");
    let err = daemon_err(&daemon, &[], &["container", "delete", "default"]);
    assert!(err.contains("cannot be deleted"), "{err}");
    let err = daemon_err(&daemon, &[], &["container", "delete", "cold"]);
    assert!(err.contains("still holds"), "{err}");
    assert_eq!(
        daemon_err(&daemon, &[], &["container", "reclaim", "nope", "--now"]),
        "lacuna: container 'nope' does not exist"
    );
    assert_eq!(
        daemon_ok(&daemon, &["container", "delete", "plain"]),
        "deleted container plain\n"
    );
    let listed = json(&daemon_ok(&daemon, &["--json", "container", "list"]));
    assert_eq!(listed.as_array().unwrap().len(), 4);
}

#[test]
fn container_arguments_get_clap_messages() {
    for (args, expected) in [
        (
            vec!["container", "create", "c", "--reclaim", "fast"],
            "invalid reclaim policy 'fast'",
        ),
        (
            vec!["container", "create", "c", "--reclaim", "0MB/s"],
            "a rate of zero is 'off'",
        ),
        (
            vec!["container", "create", "c", "--quota", "12Q"],
            "invalid size '12Q'",
        ),
        (
            vec!["container", "create", "c", "--quota", "0"],
            "use 'none'",
        ),
        (
            vec!["container", "set", "c", "--reclaim-burst", "lots"],
            "invalid size 'lots'",
        ),
        (
            vec!["container", "create", "c", "--compression", "gzip"],
            "invalid compression 'gzip'",
        ),
        (
            vec!["container", "set", "c", "--dedup", "maybe"],
            "use on or off",
        ),
        (vec!["container", "reclaim", "c"], "--now"),
        (vec!["container", "show"], "<NAME>"),
        (
            vec!["volume", "create", "v", "1M", "--container"],
            "--container",
        ),
    ] {
        assert_usage_error(&args, expected);
    }
}

/// A libnbd script run with Debian's Python: `argv[1]` is the export's URI.
fn nbd_python(uri: &str, script: &str) -> String {
    support::tool_ok("/usr/bin/python3", &["-c", script, uri])
}

/// The `/metrics` text of a daemon, fetched with its token.
fn daemon_metrics(daemon: &support::Daemon) -> String {
    let token = std::fs::read_to_string(daemon.dir.join("data/api-token")).unwrap();
    let mut response = ureq::get(&format!("http://127.0.0.1:{}/metrics", daemon.api_port))
        .header("Authorization", &format!("Bearer {}", token.trim()))
        .call()
        .expect("GET /metrics");
    response.body_mut().read_to_string().unwrap()
}

fn metric(text: &str, series: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{series} ")))
        .map(str::to_string)
}

/// Reclaim seen from a real NBD client: writes and TRIMs through libnbd land
/// in a container whose reclaim is `off`, so the backlog waits; `container
/// show --reclaim`, its JSON, `volume show` and `/metrics` all give the same
/// exact counters; `reclaim --now` drains it. A write past a quota gets ENOSPC
/// through NBD.
#[test]
fn container_reclaim_and_quota_through_nbd() {
    let tmp = support::temp_dir("cli-reclaim");
    let dir = tmp.path();
    let daemon = support::Daemon::start(dir);
    daemon_ok(
        &daemon,
        &["container", "create", "cold", "--reclaim", "off"],
    );
    daemon_ok(
        &daemon,
        &["volume", "create", "v", "8M", "--container", "cold"],
    );
    nbd_python(
        &daemon.uri("v"),
        "import nbd, os, sys\n\
         h = nbd.NBD()\n\
         h.connect_uri(sys.argv[1])\n\
         h.pwrite(os.urandom(4 << 20), 0)\n\
         h.flush()\n\
         h.trim(3 << 20, 0)\n\
         h.trim(1 << 20, 3 << 20)\n\
         h.flush()\n\
         h.shutdown()\n",
    );
    let info = json(&daemon_ok(
        &daemon,
        &["--json", "container", "show", "cold", "--reclaim"],
    ));
    let r = &info["reclaim"];
    assert_eq!(r["unmap_commands"], 2, "{info}");
    assert_eq!(r["unmapped_bytes"], 4 << 20, "{info}");
    assert_eq!(r["backlog_bytes"], 4 << 20, "{info}");
    assert_eq!(r["reclaimed_bytes"], 0, "off reclaims nothing: {info}");
    assert_eq!(r["eta_s"], serde_json::Value::Null, "{info}");
    assert_eq!(r["draining"], false);
    let text = daemon_ok(&daemon, &["container", "show", "cold", "--reclaim"]);
    assert_eq!(value_of(&text, "policy"), "off");
    assert_eq!(value_of(&text, "rate limit"), "none: reclaim is off");
    assert_eq!(value_of(&text, "unmap commands"), "2");
    assert_eq!(value_of(&text, "unmapped"), "4 MiB (4194304 B)");
    assert_eq!(value_of(&text, "reclaimed"), "0 B");
    assert_eq!(value_of(&text, "backlog"), "4 MiB (4194304 B)");
    assert!(
        value_of(&text, "time to empty").starts_with("never"),
        "{text}"
    );
    assert_eq!(value_of(&text, "draining"), "no");
    let show = daemon_ok(&daemon, &["volume", "show", "v"]);
    assert_eq!(value_of(&show, "unmap commands"), "2");
    assert_eq!(value_of(&show, "unmapped"), "4 MiB");
    assert_eq!(value_of(&show, "reclaim backlog"), "4 MiB");

    let metrics = daemon_metrics(&daemon);
    let cold = r#"{container="cold"}"#;
    for (name, field) in [
        ("lacuna_container_unmap_commands_total", "unmap_commands"),
        ("lacuna_container_unmapped_bytes_total", "unmapped_bytes"),
        ("lacuna_container_reclaimed_bytes_total", "reclaimed_bytes"),
        ("lacuna_container_reclaim_backlog_bytes", "backlog_bytes"),
    ] {
        assert_eq!(
            metric(&metrics, &format!("{name}{cold}")),
            Some(r[field].to_string()),
            "{name}\n{metrics}"
        );
    }
    assert_eq!(
        metric(
            &metrics,
            &format!("lacuna_container_reclaim_eta_seconds{cold}")
        ),
        None
    );
    assert_eq!(
        metric(
            &metrics,
            &format!("lacuna_container_reclaim_rate_limit_bytes_per_second{cold}")
        ),
        Some("0".into())
    );
    assert_eq!(
        metric(
            &metrics,
            r#"lacuna_container_reclaim_policy{container="cold",policy="off"}"#
        ),
        Some("1".into())
    );
    let volume = r#"{volume="v",container="cold"}"#;
    assert_eq!(
        metric(
            &metrics,
            &format!("lacuna_volume_unmap_commands_total{volume}")
        ),
        Some("2".into())
    );
    assert_eq!(
        metric(
            &metrics,
            &format!("lacuna_volume_reclaim_backlog_bytes{volume}")
        ),
        Some((4u64 << 20).to_string())
    );

    let said = daemon_ok(&daemon, &["container", "reclaim", "cold", "--now"]);
    assert!(
        said.starts_with("reclaiming container cold now, whatever its policy (off): "),
        "{said}"
    );
    // The drain runs in the background; --wait follows it to the end.
    let said = daemon_ok(
        &daemon,
        &["container", "reclaim", "cold", "--now", "--wait"],
    );
    assert_eq!(
        said, "container cold: backlog empty; 4 MiB reclaimed in all\n",
        "{said}"
    );
    let info = json(&daemon_ok(
        &daemon,
        &["--json", "container", "show", "cold"],
    ));
    assert_eq!(info["reclaim"]["backlog_bytes"], 0, "{info}");
    assert_eq!(info["reclaim"]["reclaimed_bytes"], 4 << 20, "{info}");
    assert_eq!(info["policy"]["reclaim"], "off", "the policy is unchanged");
    let metrics = daemon_metrics(&daemon);
    assert_eq!(
        metric(
            &metrics,
            &format!("lacuna_container_reclaimed_bytes_total{cold}")
        ),
        Some((4u64 << 20).to_string())
    );
    assert_eq!(
        metric(
            &metrics,
            &format!("lacuna_container_reclaim_backlog_bytes{cold}")
        ),
        Some("0".into())
    );

    // A quota of 1 MiB: the first MiB goes in, the next write gets ENOSPC.
    daemon_ok(&daemon, &["container", "create", "small", "--quota", "1M"]);
    daemon_ok(
        &daemon,
        &["volume", "create", "q", "8M", "--container", "small"],
    );
    let said = nbd_python(
        &daemon.uri("q"),
        "import nbd, os, sys\n\
         h = nbd.NBD()\n\
         h.connect_uri(sys.argv[1])\n\
         h.pwrite(os.urandom(1 << 20), 0)\n\
         try:\n\
         \x20   h.pwrite(os.urandom(64 << 10), 1 << 20)\n\
         \x20   print('accepted')\n\
         except nbd.Error as e:\n\
         \x20   print('refused:', e)\n\
         h.shutdown()\n",
    );
    // (libnbd's Python binding names the server's errno in the message only.)
    assert!(
        said.starts_with("refused:") && said.contains("(ENOSPC)"),
        "{said}"
    );
    let small = json(&daemon_ok(
        &daemon,
        &["--json", "container", "show", "small"],
    ));
    assert_eq!(small["used_bytes"], 1 << 20);
}

/// `serve --reduction background`: an image copied in with `qemu-img convert`
/// reads back equal at once; its raw grains show as the deferred-reduction
/// backlog in `array space` and `/metrics`; the background reducer then
/// brings the footprint to what inline reduction gives, and the data still
/// compares equal.
#[test]
fn background_reduction_is_visible_and_reaches_the_inline_footprint() {
    // A compressible image (text with a counter, no two grains alike).
    let image_dir = support::temp_dir("reduce-image");
    let image = image_dir.path().join("image.raw");
    let mut text: Vec<u8> = (0..16u64 << 20)
        .map(|i| b"reduced in the background, "[(i % 27) as usize])
        .collect();
    for (n, grain) in text.chunks_mut(4096).enumerate() {
        grain[..8].copy_from_slice(&(n as u64).to_le_bytes());
    }
    std::fs::write(&image, &text).unwrap();
    let image = image.to_str().unwrap();
    let footprint = |reduction: &str| {
        let dir = support::temp_dir("reduce");
        let daemon =
            support::Daemon::start_with_args(dir.path(), "2G", &["--reduction", reduction])
                .owning(dir);
        daemon.cli_ok(&["volume", "create", "img", "--size", "16M"]);
        let uri = daemon.uri("img");
        support::tool_ok(
            "qemu-img",
            &["convert", "-n", "-f", "raw", "-O", "raw", image, &uri],
        );
        support::tool_ok(
            "qemu-img",
            &["compare", "-f", "raw", "-F", "raw", image, &uri],
        );
        let space = |daemon: &support::Daemon| -> serde_json::Value {
            serde_json::from_str(&daemon.cli_ok(&["--json", "array", "space"])).unwrap()
        };
        let first = space(&daemon);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut settled = first.clone();
        while settled["reduction_backlog_bytes"].as_u64().unwrap() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "never reduced: {settled}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
            settled = space(&daemon);
        }
        support::tool_ok(
            "qemu-img",
            &["compare", "-f", "raw", "-F", "raw", image, &uri],
        );
        let table = daemon.cli_ok(&["array", "space"]);
        let metrics = daemon_metrics(&daemon);
        (first, settled, table, metrics)
    };
    let (inline_first, inline, _, _) = footprint("inline");
    assert_eq!(inline_first["reduction_backlog_bytes"], 0);
    assert_eq!(inline["reduced_bytes"], 0);
    let (first, settled, table, metrics) = footprint("background");
    let waiting = first["reduction_backlog_bytes"].as_u64().unwrap();
    let reduced = settled["reduced_bytes"].as_u64().unwrap();
    // Every data grain went in raw: 16 MiB of 4 KiB records (and headers).
    assert!(
        waiting + first["reduced_bytes"].as_u64().unwrap() >= 16 << 20,
        "{first}"
    );
    assert!(reduced >= 16 << 20, "{settled}");
    assert_eq!(
        settled["live_physical_bytes"], inline["live_physical_bytes"],
        "{settled} vs {inline}"
    );
    assert!(
        inline["live_physical_bytes"].as_u64().unwrap() < 8 << 20,
        "{inline}"
    );
    assert!(table.contains("deferred reduction:"), "{table}");
    assert_eq!(
        metric(&metrics, "lacuna_reduction_backlog_bytes").as_deref(),
        Some("0")
    );
    assert_eq!(
        metric(&metrics, "lacuna_reduced_bytes_total"),
        Some(reduced.to_string())
    );
}

/// Polls `lacuna --json ARGS` every half second, for up to 20 s, until
/// `done` holds for its answer; returns that answer.
fn poll_json(
    daemon: &support::Daemon,
    args: &[&str],
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let mut last = serde_json::Value::Null;
    for _ in 0..40 {
        last = json(&daemon_ok(daemon, &full));
        if done(&last) {
            return last;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("lacuna {args:?} never got there; last answer {last}");
}

/// The history records NBD writes as IOPS, bytes and latency; a container's
/// quota reached raises a warning event that names it; events are
/// acknowledged with the CLI and both survive a restart.
#[test]
fn history_shows_io_and_events_are_raised_acknowledged_and_kept() {
    let tmp = support::temp_dir("cli-history");
    let dir = tmp.path();
    let mut daemon = support::Daemon::start(dir);
    daemon_ok(&daemon, &["container", "create", "small", "--quota", "2M"]);
    daemon_ok(
        &daemon,
        &["volume", "create", "v", "8M", "--container", "small"],
    );
    let said = nbd_python(
        &daemon.uri("v"),
        "import nbd, os, sys\n\
         h = nbd.NBD()\n\
         h.connect_uri(sys.argv[1])\n\
         for i in range(32):\n\
         \x20   h.pwrite(os.urandom(64 << 10), i << 16)\n\
         try:\n\
         \x20   h.pwrite(os.urandom(2 << 20), 4 << 20)\n\
         \x20   print('written')\n\
         except nbd.Error as e:\n\
         \x20   print('refused', e.errno)\n\
         h.shutdown()\n",
    );
    assert!(said.starts_with("refused"), "the quota refuses: {said}");
    // Writes in 5 s samples: 32 of 64 KiB each (the refused one is no write).
    let history = poll_json(&daemon, &["array", "history", "--last", "1000"], |h| {
        h["samples"].as_array().unwrap().iter().any(|s| {
            s["io"].as_array().unwrap().iter().any(|f| {
                f["protocol"] == "nbd"
                    && f["direction"] == "write"
                    && f["iops"].as_f64() > Some(0.0)
            })
        })
    });
    // Every byte written is in some sample, at its rate over the interval.
    let writes: Vec<&serde_json::Value> = history["samples"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["io"].as_array().unwrap())
        .filter(|f| f["protocol"] == "nbd" && f["direction"] == "write")
        .collect();
    let bytes: u64 = writes.iter().map(|f| f["bytes"].as_u64().unwrap()).sum();
    let ops: u64 = writes.iter().map(|f| f["ops"].as_u64().unwrap()).sum();
    assert_eq!((ops, bytes), (32, 32 << 16), "{history}");
    let written = writes
        .iter()
        .find(|f| f["iops"].as_f64() > Some(0.0))
        .unwrap();
    let interval_s = 5.0; // at most a second either side, by the clock's seconds
    let rate = written["bytes_per_s"].as_f64().unwrap();
    let in_sample = written["bytes"].as_f64().unwrap();
    assert!(
        rate >= in_sample / (interval_s + 1.0) && rate <= in_sample / (interval_s - 1.0),
        "{history}"
    );
    assert!(written["latency_p99_us"].as_u64() > Some(0), "{history}");
    assert!(written["latency_mean_us"].as_u64() > Some(0), "{history}");
    let last = history["samples"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        last["space"]["physical_used_bytes"].as_u64() > Some(0),
        "{last}"
    );
    assert_eq!(last["containers"][0]["name"], "default", "{last}");
    let table = daemon_ok(&daemon, &["array", "history"]);
    assert!(
        table.starts_with("TIME (UTC)") && table.contains("WRITE P99"),
        "{table}"
    );

    let events = poll_json(&daemon, &["event", "list"], |e| {
        e["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "container_quota_reached")
    });
    let quota = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "container_quota_reached")
        .unwrap()
        .clone();
    assert_eq!(
        (quota["severity"].clone(), quota["subject"].clone()),
        (serde_json::json!("warning"), serde_json::json!("small"))
    );
    assert_eq!(events["open_warnings"], 1, "{events}");
    let id = quota["id"].to_string();
    let acked = daemon_ok(&daemon, &["event", "ack", &id]);
    assert_eq!(acked.trim(), format!("acknowledged {id}"));
    let open = json(&daemon_ok(&daemon, &["--json", "event", "list", "--open"]));
    assert!(
        open["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["id"] != quota["id"]),
        "{open}"
    );
    let listing = daemon_ok(&daemon, &["event", "list"]);
    assert!(
        listing.contains("container_quota_reached") && listing.contains("acknowledged"),
        "{listing}"
    );
    let missing = daemon_cli(&daemon, &[], &["event", "ack", "424242"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no event 424242"));

    // Kept across a crash: the event and its acknowledgement; the quota still
    // full is not raised again as new (the first sample after the start
    // raises it once more, as a daemon starting on a full container should).
    daemon.kill();
    let daemon = support::Daemon::start(dir);
    let after = json(&daemon_ok(&daemon, &["--json", "event", "list"]));
    let kept = after["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == quota["id"])
        .unwrap_or_else(|| panic!("event {id} lost: {after}"));
    assert!(kept["acknowledged_unix_s"].is_u64(), "{after}");
}
