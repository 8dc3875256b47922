//! In-process engine throughput, without any protocol: 4 KiB random writes of
//! partly reducible data, then random reads, unmap of the whole volume, and flush.
//! Run: cargo run --release -p lacuna-engine --example engine_bench -- [DIR] [GRAINS]

use std::time::Instant;

use lacuna_engine::{Engine, EngineConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "/tmp/lacuna-engine-bench".into());
    let grains: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(65536);
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(EngineConfig::new(dir.clone(), 64 << 30)).unwrap();
    engine.create_volume("bench", grains * 4096).unwrap();
    let vol = engine.open_volume("bench").unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let threads: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let mut buf = vec![0u8; 4096];
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let vol = vol.clone();
            scope.spawn(move || {
                let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                let mut next = || {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state
                };
                let mut buf = vec![0u8; 4096];
                for i in 0..grains / threads {
                    let grain = next() % grains;
                    // Half of each block random, half zero (about 2:1 compressible);
                    // every third block repeats an earlier one (dedup).
                    let seed = if i % 3 == 0 { i / 3 % 1000 } else { next() };
                    for (j, chunk) in buf[..2048].chunks_mut(8).enumerate() {
                        chunk.copy_from_slice(&(seed.wrapping_mul(j as u64 + 1)).to_le_bytes());
                    }
                    vol.write(grain * 4096, &buf).unwrap();
                }
            });
        }
    });
    let write_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    vol.flush().unwrap();
    let flush_ms = started.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    for _ in 0..grains {
        let grain = next() % grains;
        vol.read(grain * 4096, &mut buf).unwrap();
    }
    let read_s = started.elapsed().as_secs_f64();
    let space = engine.space();
    let started = Instant::now();
    vol.unmap(0, grains * 4096).unwrap();
    let unmap_ms = started.elapsed().as_secs_f64() * 1e3;
    let jobs = engine
        .stats
        .write_jobs
        .load(std::sync::atomic::Ordering::Relaxed);
    let batches = engine
        .stats
        .write_batches
        .load(std::sync::atomic::Ordering::Relaxed)
        .max(1);
    println!("writes per commit {:.2}", jobs as f64 / batches as f64);
    println!(
        "writes/s {:.0}  reads/s {:.0}  flush {:.1} ms  unmap(all) {:.3} ms  reduction {:.2}:1",
        grains as f64 / write_s,
        grains as f64 / read_s,
        flush_ms,
        unmap_ms,
        space.data_reduction_ratio
    );
}
