//! Test support: a `lacuna serve` child process on ephemeral loopback ports, and
//! helpers to run the real client tools against it.

#![allow(dead_code)]

pub mod damage;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub const BIN: &str = env!("CARGO_BIN_EXE_lacuna");

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh, empty directory `lacuna-it-<tag>-<random>` under the system temp
/// dir. The guard removes it when dropped (test passed or failed), so it must
/// outlive every daemon and client using it: declare it before them in the
/// test, or hand it to the one daemon that uses it with [`Daemon::owning`].
pub fn temp_dir(tag: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("lacuna-it-{tag}-"))
        .tempdir()
        .expect("create a temporary directory")
}

/// A running daemon. Killed (SIGKILL) on drop.
pub struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
    pub nbd_port: u16,
    pub api_port: u16,
    /// The VASA provider (HTTPS).
    pub vasa_port: u16,
    /// Two iSCSI portals (multipath tests need a second one).
    pub iscsi_ports: [u16; 2],
    /// `dir`'s guard when this daemon is the directory's only user (see
    /// [`Daemon::owning`]). A field drops after `Drop::drop` has killed the
    /// child, so the directory never goes away under a live daemon.
    owned_dir: Option<TempDir>,
}

/// Set in a daemon's environment (`start_with_env`), the descriptor limit it
/// runs under (`prlimit --nofile`).
pub const NOFILE_ENV: &str = "LACUNA_TEST_NOFILE";

/// The target name `lacuna serve` derives by default.
pub const TARGET_IQN: &str = "iqn.2024-01.org.lacuna:lacuna";

impl Daemon {
    pub fn start(dir: &Path) -> Daemon {
        Self::start_with(dir, "2G")
    }

    pub fn start_with(dir: &Path, capacity: &str) -> Daemon {
        Self::start_with_args(dir, capacity, &[])
    }

    /// Starts with extra `serve` arguments. Ports are picked free and then
    /// bound by the daemon, so another process can take one in between: a start
    /// that fails only because an address is in use is retried on fresh ports.
    pub fn start_with_args(dir: &Path, capacity: &str, extra: &[&str]) -> Daemon {
        Self::start_with_env(dir, capacity, extra, &[])
    }

    /// Starts with extra `serve` arguments and environment variables, with
    /// `--nbd-open-access` (anonymous NBD clients see every volume), which is
    /// what every test but the access tests relies on.
    pub fn start_with_env(
        dir: &Path,
        capacity: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        let mut args = vec!["--nbd-open-access"];
        args.extend_from_slice(extra);
        Self::start_exactly(dir, capacity, &args, env)
    }

    /// Starts with exactly these extra `serve` arguments (no open access unless
    /// they ask for it).
    pub fn start_exactly(
        dir: &Path,
        capacity: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        const ATTEMPTS: u32 = 5;
        for attempt in 1..=ATTEMPTS {
            match Self::try_start(dir, capacity, extra, env) {
                Ok(daemon) => return daemon,
                Err(log) if log.contains("Address already in use") && attempt < ATTEMPTS => {
                    eprintln!("daemon start: a port was taken, retrying ({attempt})");
                }
                Err(log) => panic!("daemon did not start; log:\n{log}"),
            }
        }
        unreachable!("the last attempt panics or returns")
    }

    /// Runs `lacuna serve` on `dir` expecting it to refuse to start (within 60 s;
    /// a daemon that starts instead is killed and the test fails); answers its
    /// exit status and everything it printed.
    pub fn start_refused(dir: &Path, capacity: &str) -> (std::process::ExitStatus, String) {
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--capacity", capacity])
            .args(["--nbd-listen", "127.0.0.1:0"])
            .args(["--api-listen", "127.0.0.1:0"])
            .args(["--vasa-listen", "127.0.0.1:0"])
            .args(["--iscsi-listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run lacuna serve");
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().expect("poll lacuna serve").is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let out = child.wait_with_output().expect("reap lacuna serve");
                panic!(
                    "lacuna serve started although it should have refused:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child
            .wait_with_output()
            .expect("collect lacuna serve output");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status, text)
    }

    fn try_start(
        dir: &Path,
        capacity: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Daemon, String> {
        let nbd_port = free_port();
        let api_port = free_port();
        let vasa_port = free_port();
        let iscsi_ports = [free_port(), free_port()];
        let log_path = dir.join("daemon.log");
        let log_before = std::fs::read_to_string(&log_path).unwrap_or_default().len();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        // The descriptor limit a test asks for, set by prlimit (which then
        // runs the daemon in its place, under the same pid).
        let nofile = env.iter().find(|(key, _)| *key == NOFILE_ENV);
        let mut command = match nofile {
            Some((_, limit)) => {
                let mut prlimit = Command::new("prlimit");
                prlimit
                    .arg(format!("--nofile={limit}:{limit}"))
                    .arg("--")
                    .arg(BIN);
                prlimit
            }
            None => Command::new(BIN),
        };
        let child = command
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--capacity", capacity])
            .args(["--nbd-listen", &format!("127.0.0.1:{nbd_port}")])
            .args(["--api-listen", &format!("127.0.0.1:{api_port}")])
            .args(["--vasa-listen", &format!("127.0.0.1:{vasa_port}")])
            .args(["--iscsi-listen", &format!("127.0.0.1:{}", iscsi_ports[0])])
            .args(["--iscsi-listen", &format!("127.0.0.1:{}", iscsi_ports[1])])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn lacuna serve");
        let mut daemon = Daemon {
            child,
            dir: dir.to_path_buf(),
            nbd_port,
            api_port,
            vasa_port,
            iscsi_ports,
            owned_dir: None,
        };
        match daemon.wait_ready() {
            Ok(()) => Ok(daemon),
            Err(()) => {
                daemon.kill();
                let log = daemon.log();
                Err(log.get(log_before..).unwrap_or(&log).to_string())
            }
        }
    }

    /// Takes `dir`'s guard (the directory this daemon was started on), so that
    /// a helper can hand out the daemon alone and the directory is removed once
    /// the daemon is dropped and killed. Not for a directory that outlives this
    /// daemon (restarts after a crash): keep that guard in the test instead.
    pub fn owning(mut self, dir: TempDir) -> Daemon {
        assert_eq!(dir.path(), self.dir, "the guard of another directory");
        assert!(self.owned_dir.is_none(), "a daemon owns one directory");
        self.owned_dir = Some(dir);
        self
    }

    /// Waits until every port accepts; `Err` if the daemon exited first.
    fn wait_ready(&mut self) -> Result<(), ()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        for port in [
            self.nbd_port,
            self.api_port,
            self.vasa_port,
            self.iscsi_ports[0],
            self.iscsi_ports[1],
        ] {
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return Err(());
                }
                assert!(
                    Instant::now() < deadline,
                    "daemon did not start in 60 s; log:\n{}",
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    pub fn uri(&self, export: &str) -> String {
        format!("nbd://127.0.0.1:{}/{export}", self.nbd_port)
    }

    /// `iscsi://` URL of a LUN through portal 0 or 1.
    pub fn iscsi_url(&self, portal: usize, lun: u64) -> String {
        format!(
            "iscsi://127.0.0.1:{}/{TARGET_IQN}/{lun}",
            self.iscsi_ports[portal]
        )
    }

    /// Runs the CLI against this daemon.
    /// The CLI's command line for this daemon, for scripts that call it.
    pub fn cli_command_line(&self) -> Vec<String> {
        vec![
            BIN.to_string(),
            "--api".to_string(),
            format!("http://127.0.0.1:{}", self.api_port),
            "--data-dir".to_string(),
            self.dir.join("data").display().to_string(),
        ]
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(["--api", &format!("http://127.0.0.1:{}", self.api_port)])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(args)
            .output()
            .expect("run lacuna CLI")
    }

    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "lacuna {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// SIGTERM, and waits (at most 30 s) for the daemon to close the array.
    pub fn stop(&mut self) {
        let pid = i32::try_from(self.child.id()).expect("a pid fits");
        // SAFETY: a signal to our own child, which has not been reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().expect("poll lacuna serve").is_none() {
            assert!(
                Instant::now() < deadline,
                "the daemon did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs a client tool with Debian's Python first on PATH (nbdsh needs it).
pub fn tool(program: &str, args: &[&str]) -> Output {
    let path = format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default());
    Command::new(program)
        .args(args)
        .env("PATH", path)
        .env("LIBNBD_DEBUG", "0")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (is it installed? see README): {e}"))
}

/// Builds a test's libiscsi C client (`tests/support/SOURCE`, with pthreads)
/// into `dir/NAME` with gcc, and returns the binary's path.
pub fn build_iscsi_client(dir: &Path, source: &str, name: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(source);
    let binary = dir.join(name);
    tool_ok(
        "gcc",
        &[
            "-O2",
            "-Wall",
            "-pthread",
            "-o",
            binary.to_str().unwrap(),
            source.to_str().unwrap(),
            "-liscsi",
        ],
    );
    binary
}

pub fn tool_ok(program: &str, args: &[&str]) -> String {
    let out = tool(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// One HTTP call to the daemon's API; answers the status and the body text.
pub fn call(
    daemon: &Daemon,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: Option<&str>,
) -> (u16, String) {
    call_at(daemon.api_port, method, path, authorization, body)
}

/// [`call`] to the API on `api_port`.
pub fn call_at(
    api_port: u16,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: Option<&str>,
) -> (u16, String) {
    let url = format!("http://127.0.0.1:{api_port}{path}");
    let agent = agent();
    let with_auth =
        |request: ureq::RequestBuilder<ureq::typestate::WithoutBody>| match authorization {
            Some(a) => request.header("Authorization", a),
            None => request,
        };
    let with_auth_body = |request: ureq::RequestBuilder<ureq::typestate::WithBody>| {
        let request = request.header("Content-Type", "application/json");
        match authorization {
            Some(a) => request.header("Authorization", a),
            None => request,
        }
    };
    let body = body.unwrap_or("");
    let result = match method {
        "GET" => with_auth(agent.get(&url)).call(),
        "DELETE" => with_auth(agent.delete(&url)).call(),
        "POST" => with_auth_body(agent.post(&url)).send(body),
        "PATCH" => with_auth_body(agent.patch(&url)).send(body),
        "PUT" => with_auth_body(agent.put(&url)).send(body),
        other => panic!("no method {other}"),
    };
    let mut response = result.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    (status, text)
}

/// The daemon's API token as an Authorization header value.
pub fn token(daemon: &Daemon) -> String {
    token_in(&daemon.dir)
}

/// The API token of the daemon whose directory is `dir`, as a header value.
pub fn token_in(dir: &Path) -> String {
    let token = std::fs::read_to_string(dir.join("data/api-token")).unwrap();
    format!("Bearer {}", token.trim())
}

/// A call with the daemon's token, its answer as JSON (null when empty).
pub fn api(
    daemon: &Daemon,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    api_at(daemon.api_port, &daemon.dir, method, path, body)
}

/// [`api`] to the API on `api_port` of the daemon whose directory is `dir`.
pub fn api_at(
    api_port: u16,
    dir: &Path,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    let text = body.map(|b| b.to_string());
    let token = token_in(dir);
    let (status, answer) = call_at(api_port, method, path, Some(&token), text.as_deref());
    let value = if answer.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{method} {path}: {e}: {answer}"))
    };
    (status, value)
}

/// The event log's events once `done` holds for them (polled for up to 20 s:
/// the daemon raises events at its 5 s samples).
pub fn events_until(
    daemon: &Daemon,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let mut events = Vec::new();
    for _ in 0..40 {
        let answer: serde_json::Value =
            serde_json::from_str(&daemon.cli_ok(&["--json", "event", "list"])).unwrap();
        events = answer["events"].as_array().unwrap().clone();
        if done(&events) {
            return events;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("the events never got there: {events:?}");
}
