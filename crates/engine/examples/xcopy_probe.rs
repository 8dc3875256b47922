//! Probe (not a benchmark): range copies within one volume against copies to
//! another volume, over a range written with data, timing each copy.
//! Run: cargo run --release -p lacuna-engine --example xcopy_probe -- DIR WRITTEN_GIB CHUNK_GIB
use std::time::Instant;

use lacuna_engine::{Engine, EngineConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "/var/tmp/lacuna-xcopy-probe".into());
    let written_gib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    let chunk_gib: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let _ = std::fs::remove_dir_all(&dir);
    let engine = Engine::open(EngineConfig::new(dir.clone(), 1 << 40)).unwrap();
    let size = (4 * written_gib) << 30;
    engine.create_volume("a", size).unwrap();
    engine.create_volume("b", size).unwrap();
    let vol = engine.open_volume("a").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let started = Instant::now();
    for mib in 0..written_gib << 10 {
        for (j, chunk) in buf.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&(mib.wrapping_mul(0x9e37_79b9) ^ j as u64).to_le_bytes());
        }
        vol.write(mib << 20, &buf).unwrap();
    }
    vol.flush().unwrap();
    eprintln!(
        "wrote {written_gib} GiB in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(std::time::Duration::from_secs(2));
    let chunk = chunk_gib << 30;
    for (label, dst, base) in [
        ("other", "b", 0u64),
        ("within", "a", (2 * written_gib) << 30),
    ] {
        let started = Instant::now();
        let mut off = 0;
        while off < written_gib << 30 {
            let t = Instant::now();
            engine.copy_range("a", off, chunk, dst, base + off).unwrap();
            eprintln!(
                "  {label} copy at {} GiB: {:.2} ms",
                off >> 30,
                t.elapsed().as_secs_f64() * 1e3
            );
            off += chunk;
        }
        eprintln!("{label}: {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    }
    engine.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
