//! Load: 64 concurrent connections — 32 NBD (python3-libnbd, `support/load_nbd.py`)
//! and 32 iSCSI sessions (libiscsi, `support/load_iscsi.c`, built with gcc here) —
//! each doing verified I/O on its own 4 MiB region for a bounded time against one
//! `lacuna serve` child. 16 volumes of 16 MiB, each shared by two NBD connections
//! and two iSCSI sessions on disjoint regions, so connections contend inside a
//! volume as well as across volumes.
//!
//! Asserted:
//! - no errors: every client exits 0 — every request succeeded and every read
//!   (random ranges during the run, the whole region at the end) returned exactly
//!   the bytes its connection last wrote there (see the clients for the layout);
//! - no stalls: no single request took longer than 1 s, in the fill (where all
//!   connections write at once, timed and reported apart) or after it (each
//!   connection reports its slowest request, overall and per kind). Clients
//!   connect first and start together, so logins and process start-up are not
//!   timed;
//! - memory flat: the daemon's VmRSS at the end of the timed run exceeds its
//!   VmRSS at a third of it by at most 10% + 32 MiB (`RSS_GROWTH_*` say why);
//! - the daemon is still up, logged no panic, and its space report adds up.
//!
//! LOAD_SECONDS (default 30) sets the run; LOAD_SEED replays the workload's choices.
//! Figures (ops, bytes, latencies, the RSS series) go to stderr for the report:
//! `cargo test -p lacuna --test load -- --nocapture`.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use support::{build_iscsi_client, Daemon, TARGET_IQN};

const VOLUMES: u64 = 16;
const REGIONS_PER_VOLUME: u64 = 4;
const REGION_SECTORS: u64 = 8192; // 4 MiB
const SECTOR_BYTES: u64 = 512;
const NBD_CONNECTIONS: u64 = 32;
const ISCSI_SESSIONS: u64 = 32;
/// NBD connections per Python process: a few processes, so the threads of one
/// do not queue behind each other on the interpreter lock for long.
const NBD_PER_PROCESS: u64 = 4;
const INITIATOR: &str = "iqn.2026-01.org.lacuna.test:load";
/// The longest a single request may take, in the fill or after it. The fill
/// (all 64 connections writing 64 KiB at once into fresh volumes) once held the
/// slowest requests: a writer that became the engine's write leader stayed on
/// to commit everyone's batches and waited 1-1.9 s itself; since a leader stops
/// at its own write, the fill's slowest request is 0.09-0.18 s.
const STALL_LIMIT_US: u64 = 1_000_000;
/// How much the daemon's RSS may grow from a third of the run to its end.
/// The relative part covers allocator fragmentation and per-connection buffers
/// that grow to their high-water mark as request sizes vary; the absolute part
/// covers caches that are still warming (redb's page cache, bounded at 256 MiB,
/// fills with metadata pages the reclaimer and cleaner touch for the first time
/// late in the run) and the scheduling slack of a 2-core machine. A leak per
/// request (about 10^5 requests a run) or per write generation grows past it.
const RSS_GROWTH_PERCENT: u64 = 10;
const RSS_GROWTH_SLACK_BYTES: u64 = 32 << 20;
const RSS_SAMPLE_INTERVAL: Duration = Duration::from_millis(250);
/// Beyond the run itself: region fill, final read-back, logout.
const CLIENT_GRACE: Duration = Duration::from_secs(120);

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// (volume, first sector) of connection `conn`'s region: NBD connections take
/// regions 0 and 1 of each volume, iSCSI sessions regions 2 and 3.
fn region_of(conn: u64) -> (u64, u64) {
    let (slot, base) = if conn < NBD_CONNECTIONS {
        (conn, 0)
    } else {
        (conn - NBD_CONNECTIONS, 2)
    };
    let volume = slot / 2;
    let region = base + slot % 2;
    assert!(volume < VOLUMES && region < REGIONS_PER_VOLUME);
    (volume, region * REGION_SECTORS)
}

fn volume_name(volume: u64) -> String {
    format!("load{volume:02}")
}

fn setup(daemon: &Daemon) {
    daemon.cli_ok(&["host", "create", "load", "--iqn", INITIATOR]);
    let size_bytes = REGIONS_PER_VOLUME * REGION_SECTORS * SECTOR_BYTES;
    for volume in 0..VOLUMES {
        let name = volume_name(volume);
        daemon.cli_ok(&["volume", "create", &name, &size_bytes.to_string()]);
        daemon.cli_ok(&[
            "host",
            "connect",
            "load",
            &name,
            "--lun",
            &volume.to_string(),
        ]);
    }
}

fn spawn_clients(
    daemon: &Daemon,
    dir: &Path,
    iscsi_client: &Path,
    seconds: u64,
    seed: u64,
) -> Vec<Child> {
    let mut children = Vec::new();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/load_nbd.py");
    for first in (0..NBD_CONNECTIONS).step_by(NBD_PER_PROCESS as usize) {
        let mut command = Command::new("/usr/bin/python3");
        command.arg(script).args([
            seconds.to_string(),
            REGION_SECTORS.to_string(),
            seed.to_string(),
        ]);
        for conn in first..first + NBD_PER_PROCESS {
            let (volume, sector) = region_of(conn);
            command.arg(format!(
                "{conn},{},{sector}",
                daemon.uri(&volume_name(volume))
            ));
        }
        children.push(spawn(command, dir, &format!("nbd-{first}")));
    }
    let mut command = Command::new(iscsi_client);
    command.args([
        format!("127.0.0.1:{}", daemon.iscsi_ports[0]),
        TARGET_IQN.to_string(),
        INITIATOR.to_string(),
        seconds.to_string(),
        REGION_SECTORS.to_string(),
        seed.to_string(),
    ]);
    for conn in NBD_CONNECTIONS..NBD_CONNECTIONS + ISCSI_SESSIONS {
        let (volume, sector) = region_of(conn);
        command.arg(format!("{conn}:{volume}:{sector}"));
    }
    children.push(spawn(command, dir, "iscsi"));
    children
}

/// Starts a client; stdin and stdout (`ready`, then one summary line per
/// connection) are piped, stderr goes to `<dir>/<tag>.log`.
fn spawn(mut command: Command, dir: &Path, tag: &str) -> Child {
    let log = std::fs::File::create(dir.join(format!("{tag}.log"))).unwrap();
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn the {tag} load client: {e}"))
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("daemon status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS value");
    kib * 1024
}

/// One connection's summary line.
#[derive(Debug)]
struct Summary {
    line: String,
    ops: u64,
    written_bytes: u64,
    read_bytes: u64,
    max_latency_us: u64,
    /// The slowest request of each kind (write, read, zero, flush), µs.
    max_kind_us: [u64; 4],
    /// The slowest request of the fill, µs.
    max_fill_us: u64,
}

const KINDS: [&str; 4] = ["write", "read", "zero", "flush"];

fn parse_summary(line: &str) -> Summary {
    let field = |key: &str| -> u64 {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{key}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("summary line lacks {key}: {line}"))
    };
    Summary {
        line: line.to_string(),
        ops: field("ops"),
        written_bytes: field("written_bytes"),
        read_bytes: field("read_bytes"),
        max_latency_us: field("max_latency_us"),
        max_kind_us: KINDS.map(|kind| field(&format!("max_{kind}_us"))),
        max_fill_us: field("max_fill_us"),
    }
}

/// Waits for every client while sampling the daemon's RSS; answers the samples
/// (time since start, bytes) and each client's stdout.
fn run_and_sample(
    daemon: &mut Daemon,
    mut children: Vec<Child>,
    limit: Duration,
    dir: &Path,
) -> (Vec<(Duration, u64)>, Vec<String>) {
    // Every client has connected all its connections before any starts.
    let mut readers: Vec<BufReader<ChildStdout>> = Vec::new();
    for child in children.iter_mut() {
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line.trim() != "ready" {
            for other in children.iter_mut() {
                let _ = other.kill();
                let _ = other.wait();
            }
            panic!("a load client did not get ready:\n{}", client_logs(dir));
        }
        readers.push(reader);
    }
    for child in children.iter_mut() {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
    }
    let started = Instant::now();
    let pid = daemon.child.id();
    let mut samples = Vec::new();
    let mut outputs = vec![None; children.len()];
    while outputs.iter().any(Option::is_none) {
        if let Ok(Some(status)) = daemon.child.try_wait() {
            panic!(
                "the daemon exited during the load ({status}); log:\n{}",
                daemon.log()
            );
        }
        samples.push((started.elapsed(), rss_bytes(pid)));
        for (index, child) in children.iter_mut().enumerate() {
            if outputs[index].is_some() {
                continue;
            }
            if let Some(status) = child.try_wait().expect("poll a load client") {
                let mut stdout = String::new();
                readers[index].read_to_string(&mut stdout).unwrap();
                if !status.success() {
                    for other in children.iter_mut() {
                        let _ = other.kill();
                        let _ = other.wait();
                    }
                    panic!(
                        "a load client failed ({status}):\n{}\ndaemon log tail:\n{}",
                        client_logs(dir),
                        tail(&daemon.log(), 40)
                    );
                }
                outputs[index] = Some(stdout);
            }
        }
        if started.elapsed() > limit {
            for child in children.iter_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
            panic!(
                "the load clients did not finish in {limit:?}:\n{}",
                client_logs(dir)
            );
        }
        std::thread::sleep(RSS_SAMPLE_INTERVAL);
    }
    (samples, outputs.into_iter().map(Option::unwrap).collect())
}

fn client_logs(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".log") && name != "daemon.log" {
            let content = std::fs::read_to_string(entry.path()).unwrap_or_default();
            if !content.is_empty() {
                text.push_str(&format!("{name}: {content}\n"));
            }
        }
    }
    text
}

/// The clients' reports of requests over 250 ms, sorted by when they started.
fn slow_requests(dir: &Path) -> Vec<String> {
    let mut lines: Vec<(f64, String)> = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".log") || name == "daemon.log" {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines().filter(|l| l.starts_with("slow: ")) {
            let at_s = line
                .split_whitespace()
                .find_map(|f| f.strip_prefix("at_s="))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            lines.push((at_s, line.to_string()));
        }
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    lines.into_iter().map(|(_, line)| line).collect()
}

fn field_f64(line: &str, key: &str) -> f64 {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(key))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// The slow requests that started within 2 s of a request over `limit_us`.
fn around_stalls(slow: &[String], limit_us: u64) -> String {
    let limit_ms = (limit_us / 1000) as f64;
    let stalls: Vec<f64> = slow
        .iter()
        .filter(|l| field_f64(l, "latency_ms=") > limit_ms)
        .map(|l| field_f64(l, "at_s="))
        .collect();
    slow.iter()
        .filter(|l| {
            let at_s = field_f64(l, "at_s=");
            stalls.iter().any(|s| (at_s - s).abs() <= 2.0)
        })
        .take(200)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n")
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// The daemon's space report adds up after the load (the same sums the crash
/// torture test checks).
fn check_space(daemon: &Daemon) {
    let space: serde_json::Value =
        serde_json::from_str(&daemon.cli_ok(&["--json", "array", "space"])).unwrap();
    let n = |key: &str| {
        space[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {key}: {space}"))
    };
    assert_eq!(
        n("physical_used_bytes") + n("free_bytes"),
        n("capacity_bytes"),
        "{space}"
    );
    assert_eq!(
        n("live_physical_bytes") + n("stale_bytes"),
        n("physical_used_bytes"),
        "{space}"
    );
    assert_eq!(
        n("volume_unique_bytes") + n("snapshot_bytes") + n("shared_bytes"),
        n("live_physical_bytes"),
        "{space}"
    );
}

#[test]
fn sixty_four_connections_verified_io_no_stall_memory_flat() {
    let seconds = env_u64("LOAD_SECONDS").unwrap_or(30);
    let seed = env_u64("LOAD_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    });
    assert!(seconds >= 3, "LOAD_SECONDS must leave room for a warm-up");
    eprintln!(
        "load: {NBD_CONNECTIONS} NBD + {ISCSI_SESSIONS} iSCSI connections, {seconds} s, \
         LOAD_SEED={seed}"
    );
    let tmp = support::temp_dir("load");
    let dir = tmp.path();
    let iscsi_client = build_iscsi_client(dir, "load_iscsi.c", "load-iscsi");
    let mut daemon = Daemon::start_with(dir, "4G");
    setup(&daemon);
    let children = spawn_clients(&daemon, dir, &iscsi_client, seconds, seed);
    let limit = Duration::from_secs(seconds) + CLIENT_GRACE;
    let (samples, outputs) = run_and_sample(&mut daemon, children, limit, dir);

    let summaries: Vec<Summary> = outputs
        .iter()
        .flat_map(|o| o.lines())
        .filter(|l| !l.trim().is_empty())
        .map(parse_summary)
        .collect();
    assert_eq!(
        summaries.len() as u64,
        NBD_CONNECTIONS + ISCSI_SESSIONS,
        "one summary per connection: {outputs:?}"
    );
    let total_ops: u64 = summaries.iter().map(|s| s.ops).sum();
    let written: u64 = summaries.iter().map(|s| s.written_bytes).sum();
    let read: u64 = summaries.iter().map(|s| s.read_bytes).sum();
    let slowest = summaries.iter().max_by_key(|s| s.max_latency_us).unwrap();
    let mut latencies: Vec<u64> = summaries.iter().map(|s| s.max_latency_us).collect();
    latencies.sort_unstable();
    let elapsed = samples.last().unwrap().0;
    eprintln!(
        "load: {total_ops} requests in {:.1} s ({:.0}/s), {:.0} MiB written, {:.0} MiB read \
         and checked",
        elapsed.as_secs_f64(),
        total_ops as f64 / elapsed.as_secs_f64(),
        mib(written),
        mib(read)
    );
    eprintln!(
        "load: slowest request {} ms ({}); per-connection maxima: median {} ms, min {} ms",
        slowest.max_latency_us / 1000,
        slowest.line,
        latencies[latencies.len() / 2] / 1000,
        latencies[0] / 1000
    );

    let slowest_fill = summaries.iter().max_by_key(|s| s.max_fill_us).unwrap();
    eprintln!(
        "load: slowest request of the fill {} ms ({})",
        slowest_fill.max_fill_us / 1000,
        slowest_fill.line
    );
    for protocol in ["nbd", "iscsi"] {
        let by_kind: Vec<String> = KINDS
            .iter()
            .enumerate()
            .map(|(k, kind)| {
                let max = summaries
                    .iter()
                    .filter(|s| s.line.starts_with(protocol))
                    .map(|s| s.max_kind_us[k])
                    .max()
                    .unwrap_or(0);
                format!("{kind} {} ms", max / 1000)
            })
            .collect();
        eprintln!("load: {protocol} slowest by kind: {}", by_kind.join(", "));
    }

    let slow = slow_requests(dir);
    let mut slow_kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for line in &slow {
        let fields: Vec<&str> = line.split_whitespace().collect();
        *slow_kinds
            .entry(format!(
                "{} {} ({})",
                fields[1],
                fields[3],
                fields[6].trim_start_matches("phase=")
            ))
            .or_default() += 1;
    }
    eprintln!(
        "load: {} requests over 250 ms ({:.2}%): {slow_kinds:?}",
        slow.len(),
        slow.len() as f64 * 100.0 / total_ops as f64
    );

    // Memory, over the timed run only (the read-back after it is another
    // workload): the sample nearest a third of it against its last one.
    let run = Duration::from_secs(seconds);
    let in_run: Vec<(Duration, u64)> = samples.iter().copied().filter(|s| s.0 <= run).collect();
    let at_third = in_run
        .iter()
        .min_by_key(|(t, _)| t.abs_diff(run / 3))
        .unwrap()
        .1;
    let at_end = in_run.last().unwrap().1;
    let peak = in_run.iter().map(|s| s.1).max().unwrap();
    let peak_after = samples.iter().map(|s| s.1).max().unwrap();
    let bound = at_third + at_third * RSS_GROWTH_PERCENT / 100 + RSS_GROWTH_SLACK_BYTES;
    let series: Vec<String> = samples
        .iter()
        .step_by((samples.len() / 30).max(1))
        .map(|(t, rss)| format!("{:.0}s:{:.0}", t.as_secs_f64(), mib(*rss)))
        .collect();
    eprintln!("load: daemon RSS MiB over time: {}", series.join(" "));
    eprintln!(
        "load: RSS at a third {:.1} MiB, at the end {:.1} MiB (bound {:.1} MiB), peak {:.1} MiB; \
         peak including the final read-back {:.1} MiB",
        mib(at_third),
        mib(at_end),
        mib(bound),
        mib(peak),
        mib(peak_after)
    );

    for summary in &summaries {
        assert!(
            summary.ops > 0,
            "a connection did nothing: {}",
            summary.line
        );
        assert!(
            summary.max_latency_us <= STALL_LIMIT_US,
            "a request stalled longer than 1 s: {}\nrequests over 250 ms around it:\n{}",
            summary.line,
            around_stalls(&slow, STALL_LIMIT_US)
        );
        assert!(
            summary.max_fill_us <= STALL_LIMIT_US,
            "a request of the fill stalled longer than 1 s: {}\nrequests over 250 ms around it:\n{}",
            summary.line,
            around_stalls(&slow, STALL_LIMIT_US)
        );
    }
    assert!(
        at_end <= bound,
        "daemon memory grew from {:.1} MiB at a third of the run to {:.1} MiB at its end \
         (bound {:.1} MiB)",
        mib(at_third),
        mib(at_end),
        mib(bound)
    );
    let log = daemon.log();
    assert!(!log.contains("panicked"), "the daemon panicked:\n{log}");
    check_space(&daemon);
    drop(daemon);
}
