//! The CLI binary end to end: against a live API (engine in a temporary
//! directory, served in-process) and against nothing at all.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use lacuna_engine::{Engine, EngineConfig};

const BIN: &str = env!("CARGO_BIN_EXE_lacuna");

fn temp_dir(tag: &str) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("lacuna-cli-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

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
    data_dir: PathBuf,
    engine: Arc<Engine>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl LiveApi {
    fn start(tag: &str) -> LiveApi {
        let data_dir = temp_dir(tag);
        let engine = Engine::open(EngineConfig::new(data_dir.clone(), 1 << 30)).unwrap();
        let token = lacuna_api::load_or_create_token(&data_dir).unwrap();
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
            data_dir,
            engine,
            runtime: Some(runtime),
        }
    }

    /// Runs the CLI against this API; the token comes from the data directory.
    fn cli(&self, args: &[&str]) -> Output {
        let mut all = vec!["--api", &self.url, "--data-dir"];
        all.push(self.data_dir.to_str().unwrap());
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
        let _ = std::fs::remove_dir_all(&self.data_dir);
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
    let dir = temp_dir("notoken");
    let out = lacuna(&["--data-dir", dir.to_str().unwrap(), "volume", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_line(&out);
    let token_path = Path::new(&dir).join("api-token");
    assert!(err.contains(token_path.to_str().unwrap()), "{err}");
    assert!(err.contains("--token"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
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
