//! A control-plane change that commits durably by itself (a container's
//! create, policy change or delete) makes every write before it durable too.
//! After a SIGKILL those writes are back, and so must be the counters that
//! hand out block ids and seqs: the array goes on from them, and nothing it
//! writes later may take the ids of blocks that came back.

mod support;

use std::hash::BuildHasher;
use std::io::Write;
use std::process::{Command, Stdio};

use support::{temp_dir, Daemon};

const CAPACITY: &str = "1G";
const CAPACITY_BYTES: u64 = 1 << 30;
const MIB: usize = 1 << 20;

/// NBD through libnbd: `write OFFSET` writes stdin there, `flush` flushes.
/// Neither a write nor the disconnect makes anything durable.
const NBD_SCRIPT: &str = r#"
import sys, nbd
uri, op, offset = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = nbd.NBD()
h.connect_uri(uri)
if op == "write":
    h.pwrite(sys.stdin.buffer.read(), offset)
elif op == "flush":
    h.flush()
h.shutdown()
"#;

fn nbd(daemon: &Daemon, op: &str, offset: usize, data: &[u8]) {
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", NBD_SCRIPT, &daemon.uri("v"), op, &offset.to_string()])
        .stdin(Stdio::piped())
        .spawn()
        .expect("python3 with libnbd");
    child.stdin.take().unwrap().write_all(data).unwrap();
    assert!(child.wait().unwrap().success(), "nbd {op} at {offset}");
}

/// Incompressible bytes, different at each call: no grain deduplicates.
fn unique_bytes(len: usize) -> Vec<u8> {
    let hasher = std::hash::RandomState::new();
    (0..len as u64 / 8)
        .flat_map(|i| hasher.hash_one(i).to_le_bytes())
        .collect()
}

#[test]
fn writes_a_container_change_made_durable_survive_a_crash_and_later_writes() {
    let dir = temp_dir("control-crash");
    let mut daemon = Daemon::start_with(dir.path(), CAPACITY);
    daemon.cli_ok(&["volume", "create", "v", "--size", "16M"]);
    // Everything durable so far, and the background flush (every few seconds)
    // not due for a while: what follows is made durable by the container
    // change alone.
    nbd(&daemon, "flush", 0, &[]);
    let before = unique_bytes(MIB);
    nbd(&daemon, "write", 0, &before);
    daemon.cli_ok(&["container", "create", "c1"]);
    daemon.kill();

    let engine = lacuna_engine::Engine::open(lacuna_engine::EngineConfig::new(
        dir.path().join("data"),
        CAPACITY_BYTES,
    ))
    .expect("the crashed array opens");
    engine
        .check_consistency()
        .expect("metadata check after the crash");
    let volume = engine.open_volume("v").unwrap();
    let mut read = vec![0u8; MIB];
    volume.read(0, &mut read).unwrap();
    assert!(
        read == before,
        "the write before the container change is back"
    );
    // New blocks after the restart: with stale counters they took the ids of
    // the blocks above, and the first write read back as this one.
    let after = unique_bytes(MIB);
    volume.write(MIB as u64, &after).unwrap();
    volume.flush().unwrap();
    volume.read(0, &mut read).unwrap();
    assert!(read == before, "the first write, after another");
    volume.read(MIB as u64, &mut read).unwrap();
    assert!(read == after, "the write after the restart");
    engine
        .check_consistency()
        .expect("metadata check after more writes");
    drop(volume);
    engine.close().unwrap();
}
