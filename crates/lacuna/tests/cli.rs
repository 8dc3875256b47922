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
        "created volume db (100 GiB)\n"
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

    assert_eq!(
        api.cli_ok(&["volume", "delete", "logs"]),
        "deleted volume logs\n"
    );
    assert_eq!(
        json(&api.cli_ok(&["--json", "volume", "delete", "db"])),
        serde_json::json!({"deleted": "db"})
    );
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
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size"));
    let out = lacuna(&["volume", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}
