//! Crash mid-cleaning: random 64 KiB overwrites of a volume keep the segment
//! cleaner busy; once it has emptied a segment in this round the daemon is
//! SIGKILLed a random moment later, restarted, and every 4 KiB grain must hold
//! what the last completed flush left there or a later write of it — never
//! anything else. The metadata check runs on the crashed data directory.
//!
//! CLEAN_CRASH_ROUNDS (default 6) sets the number of kills; CLEAN_CRASH_SEED
//! replays a run.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{tool_ok, Daemon};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/clean_crash.py");
/// 64 KiB blocks in the volume (256 MiB).
const BLOCKS: u64 = 4096;

fn python(args: &[&str]) -> Command {
    let mut command = Command::new("/usr/bin/python3");
    command.arg(SCRIPT).args(args).env("LIBNBD_DEBUG", "0");
    command
}

fn space_figure(daemon: &Daemon, name: &str) -> u64 {
    let space: serde_json::Value =
        serde_json::from_str(&daemon.cli_ok(&["--json", "array", "space"])).unwrap();
    space[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} in {space}"))
}

fn cleaned_segments(daemon: &Daemon) -> u64 {
    space_figure(daemon, "cleaned_segments")
}

#[test]
fn killing_the_daemon_mid_cleaning_loses_nothing_flushed() {
    let rounds: u64 = std::env::var("CLEAN_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let seed: u64 = std::env::var("CLEAN_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                % 1_000_000_007
        });
    eprintln!("clean_crash seed {seed} (CLEAN_CRASH_SEED={seed} replays the workload)");
    let tmp = support::temp_dir("clean-crash");
    let dir = tmp.path();
    let state = dir.join("state.json");
    let state = state.to_str().unwrap();
    let blocks = BLOCKS.to_string();
    let mut daemon = Daemon::start_with(dir, "1G");
    daemon.cli_ok(&["volume", "create", "v", "--size", "256M"]);
    let status = python(&["fill", &daemon.uri("v"), &blocks, state])
        .status()
        .unwrap();
    assert!(status.success(), "fill failed");
    let mut delays = seed;
    // Kills that came after new segments had been written into freed
    // segments' files (whose old records lie past the new segments' ends).
    let mut kills_after_reuse = 0;
    for round in 0..rounds {
        let round_seed = (seed + round).to_string();
        let base = ((round + 1) * 1_000_000).to_string();
        let before = cleaned_segments(&daemon);
        let mut work = python(&["work", &daemon.uri("v"), &blocks, &round_seed, &base])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = work.stdout.take().unwrap();
        let flushed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let reader = {
            let flushed = flushed.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(i) = line.strip_prefix("F ").and_then(|i| i.parse().ok()) {
                        flushed.store(i, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            })
        };
        // Wait until the cleaner has emptied a segment in this round, then
        // kill at a random moment shortly after, while it is still at work.
        let deadline = Instant::now() + Duration::from_secs(120);
        while cleaned_segments(&daemon) == before {
            assert!(
                Instant::now() < deadline,
                "round {round}: the cleaner never ran (seed {seed})"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        delays = delays
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis((delays >> 33) % 400));
        let reused = space_figure(&daemon, "reused_segment_files");
        daemon.kill();
        kills_after_reuse += u64::from(reused > 0);
        let _ = work.kill();
        let _ = work.wait();
        reader.join().unwrap();
        let flushed = flushed.load(std::sync::atomic::Ordering::SeqCst);
        // The engine's own metadata check on the crashed image.
        let copy = dir.join("crashed");
        let _ = std::fs::remove_dir_all(&copy);
        tool_ok(
            "cp",
            &[
                "-a",
                dir.join("data").to_str().unwrap(),
                copy.to_str().unwrap(),
            ],
        );
        let engine = lacuna_engine::Engine::open(lacuna_engine::EngineConfig::new(&copy, 1 << 30))
            .expect("crashed image opens");
        engine
            .check_consistency()
            .unwrap_or_else(|e| panic!("round {round} (seed {seed}): {e}"));
        engine.close().unwrap();
        drop(engine);
        std::fs::remove_dir_all(&copy).unwrap();
        daemon = Daemon::start_with(dir, "1G");
        let out = python(&[
            "verify",
            &daemon.uri("v"),
            &blocks,
            &round_seed,
            &base,
            &flushed.to_string(),
            state,
        ])
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "round {round} (seed {seed}, flushed up to write {flushed}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("round {round}: killed after write {flushed}+, just after the cleaner emptied a segment; all grains intact");
    }
    eprintln!("{kills_after_reuse} of {rounds} kills came after freed segment files were reused");
    assert!(
        rounds < 3 || kills_after_reuse > 0,
        "no kill came after a freed segment's file was reused (seed {seed})"
    );
}
