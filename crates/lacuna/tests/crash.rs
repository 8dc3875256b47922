//! Crash test: `lacuna serve` runs as a child under a concurrent libnbd workload
//! with periodic flushes and is SIGKILLed at random moments, then restarted. After
//! each restart every grain must hold exactly what the journal allows: the value
//! it had at its worker's last completed flush, or the value of an operation
//! issued after that flush — never anything else, never garbage.
//!
//! CRASH_ITERATIONS (default 50) sets the number of kills; CRASH_SEED replays a
//! failing run.

mod support;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::{tool_ok, Daemon};

const GRAINS: u64 = 2048; // 8 MiB volume
const WORKERS: u64 = 3;
const MAGIC: u64 = 0x4C41435553484B54;

/// What one grain may hold, as tags (0 = zeroes).
type Allowed = BTreeSet<u32>;

fn expected_grain(grain: u64, tag: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&(grain as u32).to_le_bytes());
    out.extend_from_slice(&tag.to_le_bytes());
    let base = ((grain & 0xffff_ffff) << 32) | u64::from(tag);
    for i in 0..510u64 {
        let word = base.wrapping_mul(i + 1).wrapping_add(0x9E37_79B9_7F4A_7C15);
        out.extend_from_slice(&word.to_le_bytes());
    }
    out
}

/// The tag a grain's bytes carry, or None for garbage.
fn decode_grain(grain: u64, bytes: &[u8]) -> Option<u32> {
    if bytes.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let tag = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
    (bytes == expected_grain(grain, tag).as_slice()).then_some(tag)
}

/// Applies one worker's journal to the durable state and returns what each grain
/// may hold now.
fn allowed_after(journal: &str, durable: &mut [u32]) -> Vec<(u64, Allowed)> {
    let lines: Vec<&str> = journal.lines().collect();
    let last_flush = lines.iter().rposition(|l| *l == "F");
    let (before, after) = match last_flush {
        Some(i) => (&lines[..i], &lines[i + 1..]),
        None => (&lines[..0], &lines[..]),
    };
    let op = |line: &str| -> Option<(u64, u32)> {
        let parts: Vec<&str> = line.split(' ').collect();
        (parts.len() == 5 && parts[0] == "I")
            .then(|| (parts[2].parse().unwrap(), parts[4].parse().unwrap()))
    };
    for line in before {
        if let Some((grain, tag)) = op(line) {
            durable[grain as usize] = tag;
        }
    }
    let mut allowed: Vec<(u64, Allowed)> = Vec::new();
    for line in after {
        if let Some((grain, tag)) = op(line) {
            match allowed.iter_mut().find(|(g, _)| *g == grain) {
                Some((_, set)) => {
                    set.insert(tag);
                }
                None => allowed.push((grain, [durable[grain as usize], tag].into())),
            }
        }
    }
    allowed
}

fn spawn_worker(daemon: &Daemon, journal: &std::path::Path, worker: u64, seed: u64) -> Child {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/crash_workload.py"
    );
    Command::new("/usr/bin/python3")
        .arg(script)
        .arg(daemon.uri("crash"))
        .arg(journal)
        .args([
            worker.to_string(),
            WORKERS.to_string(),
            GRAINS.to_string(),
            seed.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the python3-libnbd workload")
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn sigkill_at_random_moments_loses_nothing_flushed() {
    let iterations: u64 = std::env::var("CRASH_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("crash test: {iterations} iterations, CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = support::temp_dir("crash");
    let mut durable = vec![0u32; GRAINS as usize];
    {
        let daemon = Daemon::start(&dir);
        daemon.cli_ok(&[
            "volume",
            "create",
            "crash",
            "--size",
            &(GRAINS * 4096).to_string(),
        ]);
    }
    for iteration in 1..=iterations {
        let mut daemon = Daemon::start(&dir);
        let journals: Vec<_> = (0..WORKERS)
            .map(|w| dir.join(format!("journal-{iteration}-{w}")))
            .collect();
        let mut workers: Vec<Child> = (0..WORKERS)
            .map(|w| spawn_worker(&daemon, &journals[w as usize], w, iteration))
            .collect();
        std::thread::sleep(Duration::from_millis(150 + rng.next() % 600));
        daemon.kill();
        for w in &mut workers {
            let _ = w.kill();
            let _ = w.wait();
        }
        let daemon = Daemon::start(&dir);
        let image = dir.join("image.raw");
        let _ = std::fs::remove_file(&image);
        tool_ok("nbdcopy", &[&daemon.uri("crash"), image.to_str().unwrap()]);
        let bytes = std::fs::read(&image).unwrap();
        assert_eq!(bytes.len() as u64, GRAINS * 4096);
        let mut allowed_all: Vec<Option<Allowed>> = vec![None; GRAINS as usize];
        let mut ops = 0;
        for journal in &journals {
            let text = std::fs::read_to_string(journal).unwrap_or_default();
            ops += text.lines().filter(|l| l.starts_with('I')).count();
            for (grain, set) in allowed_after(&text, &mut durable) {
                allowed_all[grain as usize] = Some(set);
            }
        }
        assert!(
            ops > 0,
            "iteration {iteration}: the workload did nothing; daemon log:\n{}",
            daemon.log()
        );
        for grain in 0..GRAINS {
            let at = (grain * 4096) as usize;
            let found = decode_grain(grain, &bytes[at..at + 4096]);
            let allowed = allowed_all[grain as usize]
                .clone()
                .unwrap_or_else(|| [durable[grain as usize]].into());
            match found {
                Some(tag) if allowed.contains(&tag) => durable[grain as usize] = tag,
                other => panic!(
                    "CRASH_SEED={seed} iteration {iteration}: grain {grain} holds {other:?} (None = garbage), allowed {allowed:?}"
                ),
            }
        }
        eprintln!("iteration {iteration}: {ops} ops, verified");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
