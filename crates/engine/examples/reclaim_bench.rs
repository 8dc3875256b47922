//! In-process reclaim speed: fill a volume with unique 4 KiB grains (written
//! sequentially in 1 MiB writes, as a host copying a disk image would), flush,
//! unmap it whole and time the background steps until the backlog is empty —
//! the engine's ceiling for metadata-driven reclaim, without any protocol or
//! rate limit. Then the same for eradicating a deleted volume.
//! Run: cargo run --release -p lacuna-engine --example reclaim_bench -- [DIR] [MIB]

use std::time::Instant;

use lacuna_engine::{Engine, EngineConfig};

const MIB: u64 = 1 << 20;

fn fill(engine: &std::sync::Arc<Engine>, name: &str, mib: u64, salt: u64) {
    engine.create_volume(name, mib * MIB).unwrap();
    let vol = engine.open_volume(name).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ salt;
    let mut buf = vec![0u8; MIB as usize];
    for m in 0..mib {
        for word in buf.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes());
        }
        vol.write(m * MIB, &buf).unwrap();
    }
    engine.flush().unwrap();
}

/// With `PERF_CTL` set to a `perf record --control fifo:` path, only the
/// draining is profiled.
fn perf_control(command: &str) {
    if let Ok(path) = std::env::var("PERF_CTL") {
        std::fs::write(path, format!("{command}\n")).unwrap();
    }
}

fn drain(engine: &Engine, what: &str, mib: u64) {
    perf_control("enable");
    let started = Instant::now();
    let mut steps = 0u64;
    while engine.background_step().unwrap() {
        steps += 1;
    }
    engine.flush().unwrap();
    let seconds = started.elapsed().as_secs_f64();
    perf_control("disable");
    let grains = mib * MIB / 4096;
    println!(
        "{what}: {mib} MiB in {seconds:.3} s = {:.0} MB/s, {:.2} us/grain, {steps} steps",
        (mib * MIB) as f64 / seconds / 1e6,
        seconds * 1e6 / grains as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "/var/tmp/lacuna-reclaim-bench".into());
    let mib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = EngineConfig::new(dir.clone(), 64 << 30);
    config.background = false;
    let engine = Engine::open(config).unwrap();
    fill(&engine, "a", mib, 1);
    fill(&engine, "b", mib, 2);
    while engine.background_step().unwrap() {}
    let vol = engine.open_volume("a").unwrap();
    vol.unmap(0, mib * MIB).unwrap();
    drain(&engine, "unmap", mib);
    engine.delete_volume("b").unwrap();
    engine.eradicate_volume("b").unwrap();
    drain(&engine, "delete", mib);
}
