//! In-process 1 MiB sequential writes, without any protocol: a first pass over a
//! fresh volume (every grain new), then an overwrite pass (every grain replaces
//! one), each from `THREADS` writers on disjoint stripes. Data is random (neither
//! compressible nor duplicate), so the figures are the metadata path's and the
//! reduction's, not the disk's.
//! Run: cargo run --release -p lacuna-engine --example seq_write_bench -- [DIR] [MIB] [THREADS]

use std::time::Instant;

use lacuna_engine::{Engine, EngineConfig};

const CHUNK_BYTES: u64 = 1 << 20;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "/tmp/lacuna-seq-write-bench".into());
    let size_mib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2048);
    let threads: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(2);
    assert!(
        threads > 0 && size_mib.is_multiple_of(threads),
        "MIB must divide by THREADS"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(EngineConfig::new(dir.clone(), 64 << 30)).unwrap();
    engine
        .create_volume("bench", size_mib * CHUNK_BYTES)
        .unwrap();
    let vol = engine.open_volume("bench").unwrap();
    for (pass_id, pass) in [(1u64, "new"), (2, "overwrite")] {
        let started = Instant::now();
        std::thread::scope(|scope| {
            for t in 0..threads {
                let vol = vol.clone();
                scope.spawn(move || {
                    // Random once; then each grain's first word is made unique,
                    // so that no grain repeats and the loop costs next to nothing.
                    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                    let mut buf = vec![0u8; CHUNK_BYTES as usize];
                    for chunk in buf.chunks_mut(8) {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        chunk.copy_from_slice(&state.to_le_bytes());
                    }
                    let per_thread = size_mib / threads;
                    for i in 0..per_thread {
                        let stamp = (pass_id << 48) ^ (t << 40) ^ i;
                        for (g, grain) in buf.chunks_mut(4096).enumerate() {
                            grain[..8].copy_from_slice(&(stamp ^ ((g as u64) << 32)).to_le_bytes());
                        }
                        let mib = t * per_thread + i;
                        vol.write(mib * CHUNK_BYTES, &buf).unwrap();
                    }
                });
            }
        });
        vol.flush().unwrap();
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{pass}: {size_mib} MiB in {secs:.2} s, {:.0} MiB/s",
            size_mib as f64 / secs
        );
    }
}
