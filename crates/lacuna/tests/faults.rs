//! Fault injection against a running `lacuna serve`, driven by real clients
//! (libnbd from Python, qemu-io over iSCSI, the `lacuna` CLI):
//!
//! - the data directory's filesystem fills up (a real 64 MiB tmpfs, filled by
//!   another file): writes fail with the protocol's out-of-space error, the
//!   daemon stays up, flushed data survives, and writes work again once space
//!   is freed — also after a restart;
//! - a bit flipped in a record on disk: reads fail (NBD EIO, SCSI MEDIUM
//!   ERROR), never return the flipped bytes, are counted and logged with the
//!   volume and offset, and `lacuna scrub` finds and maps the damage;
//! - the disk returns EIO for a segment (the engine's test-only fault hook, as
//!   device-mapper is not available in containers): the same, as I/O errors;
//! - a torn tail past the metadata is trimmed at restart; a segment cut short
//!   of committed records, and a truncated metadata file, make the daemon refuse
//!   to start with a message naming the damaged file.
//!
//! The tests need root (mount) and fail, never skip, without it.

mod support;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::damage::{find_record, flip_bit, segment_files, GRAIN, RECORD_HEADER_BYTES};
use support::{events_until, temp_dir, tool, Daemon};

/// NBD operations through libnbd. Written grains start with `GRAIN-<n>` (their
/// grain number) and are otherwise random, so they neither compress nor
/// deduplicate and a test can find a grain's record in a segment file.
const NBD_SCRIPT: &str = r#"
import errno, hashlib, random, sys, nbd
uri, op, off, length = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
h = nbd.NBD()
h.connect_uri(uri)
try:
    if op == "write":
        rng = random.Random(int(sys.argv[5]))
        data = b"".join(b"GRAIN-%010d" % (off // 4096 + i) + rng.randbytes(4080)
                        for i in range(length // 4096))
        h.pwrite(data, off)
        h.flush()
        print("OK", hashlib.sha256(data).hexdigest())
    else:
        print("OK", hashlib.sha256(h.pread(length, off)).hexdigest())
except nbd.Error as e:
    print("ERR", errno.errorcode.get(e.errno, e.errno), e.string)
"#;

/// Runs one NBD operation; answers "OK <sha256>" or "ERR <ERRNO> <message>".
fn nbd(daemon: &Daemon, op: &str, offset: u64, length: u64, seed: u64) -> String {
    let out = tool(
        "/usr/bin/python3",
        &[
            "-c",
            NBD_SCRIPT,
            &daemon.uri("v"),
            op,
            &offset.to_string(),
            &length.to_string(),
            &seed.to_string(),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && (text.starts_with("OK ") || text.starts_with("ERR ")),
        "nbd {op} failed to run: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn nbd_ok(daemon: &Daemon, op: &str, offset: u64, length: u64, seed: u64) -> String {
    let text = nbd(daemon, op, offset, length, seed);
    assert!(
        text.starts_with("OK "),
        "nbd {op} {offset}+{length}: {text}"
    );
    text
}

/// qemu-io over iSCSI (open access: LUN 0 is the first volume); all output.
fn qemu_io_iscsi(daemon: &Daemon, command: &str) -> String {
    let out = tool(
        "qemu-io",
        &["-f", "raw", &daemon.iscsi_url(0, 0), "-c", command],
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn start(dir: &Path, env: &[(&str, &str)]) -> Daemon {
    Daemon::start_with_env(dir, "1G", &["--iscsi-open-access"], env)
}

/// An authenticated GET of the API, as JSON or text (Python's urllib: no
/// client beyond those the README installs).
fn api_get(daemon: &Daemon, path: &str) -> String {
    let token = std::fs::read_to_string(daemon.dir.join("data/api-token")).unwrap();
    let script = "import sys, urllib.request\n\
        r = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.argv[2]})\n\
        sys.stdout.write(urllib.request.urlopen(r).read().decode())";
    let url = format!("http://127.0.0.1:{}{path}", daemon.api_port);
    let out = tool("/usr/bin/python3", &["-c", script, &url, token.trim()]);
    assert!(
        out.status.success(),
        "GET {path} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A size-limited tmpfs mounted for the test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount(8)");
        assert!(
            out.status.success(),
            "cannot mount a {size} tmpfs at {} — this test needs root and mount(8): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes a file of zeroes until the filesystem is full; answers its size.
fn fill(path: &Path) -> u64 {
    let file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 << 10];
    let mut written = 0u64;
    loop {
        match file.write_at(&chunk, written) {
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(libc_enospc()) => return written,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
        assert!(written < 1 << 30, "the filesystem never filled");
    }
}

fn libc_enospc() -> i32 {
    28 // ENOSPC on Linux
}

fn space(daemon: &Daemon) -> serde_json::Value {
    serde_json::from_str(&daemon.cli_ok(&["--json", "array", "space"])).unwrap()
}

fn alive(daemon: &mut Daemon) {
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "the daemon exited; log:\n{}",
        daemon.log()
    );
    daemon.cli_ok(&["volume", "show", "v"]);
}

#[test]
fn a_full_filesystem_fails_writes_cleanly_and_recovers() {
    let tmp = temp_dir("enospc");
    let dir = tmp.path();
    let tmpfs = Tmpfs::mount(&dir.join("data"), "64m");
    // Capacity far above the filesystem: the array's own limit is not what stops
    // the writes here, the filesystem is.
    let mut daemon = start(dir, &[]);
    daemon.cli_ok(&["volume", "create", "v", "--size", "512M"]);
    let flushed = nbd_ok(&daemon, "write", 0, 8 << 20, 1);

    let filler = dir.join("data/filler");
    let filled = fill(&filler);
    assert!(filled > 0);

    // NBD: ENOSPC, not EIO; iSCSI: DATA PROTECT / SPACE ALLOCATION FAILED.
    let refused = nbd(&daemon, "write", 16 << 20, 1 << 20, 2);
    assert!(refused.starts_with("ERR ENOSPC"), "{refused}");
    let iscsi = qemu_io_iscsi(&daemon, "write -P 0x5a 32M 64k");
    assert!(iscsi.contains("No space left on device"), "{iscsi}");
    // DATA PROTECT (7), SPACE ALLOCATION FAILED WRITE PROTECT (27h/07h).
    assert!(
        iscsi.contains("(7) ASCQ:") && iscsi.contains("(0x2707)"),
        "{iscsi}"
    );
    alive(&mut daemon);
    assert!(space(&daemon)["free_bytes"].as_u64().unwrap() > 0); // the array's view
                                                                 // What was flushed before reads back unchanged.
    assert_eq!(nbd_ok(&daemon, "read", 0, 8 << 20, 0), flushed);

    // Free space: writes work again, and survive a crash and restart.
    std::fs::remove_file(&filler).unwrap();
    let later = nbd_ok(&daemon, "write", 16 << 20, 1 << 20, 3);
    let iscsi = qemu_io_iscsi(&daemon, "write -P 0x5a 32M 64k");
    assert!(iscsi.contains("wrote 65536"), "{iscsi}");
    qemu_io_iscsi(&daemon, "flush");
    daemon.kill();
    let daemon = start(dir, &[]);
    assert_eq!(nbd_ok(&daemon, "read", 0, 8 << 20, 0), flushed);
    assert_eq!(nbd_ok(&daemon, "read", 16 << 20, 1 << 20, 0), later);
    let iscsi = qemu_io_iscsi(&daemon, "read -P 0x5a 32M 64k");
    assert!(iscsi.contains("read 65536"), "{iscsi}");
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
    drop(daemon);
    drop(tmpfs);
}

#[test]
fn a_flipped_bit_is_a_read_error_never_wrong_data() {
    let tmp = temp_dir("bitflip");
    let dir = tmp.path();
    let mut daemon = start(dir, &[]);
    daemon.cli_ok(&["volume", "create", "v", "--size", "64M"]);
    let written = nbd_ok(&daemon, "write", 0, 1 << 20, 7);
    let grain5 = nbd_ok(&daemon, "read", 5 * GRAIN, GRAIN, 0);
    daemon.kill();
    let (segment, record) = find_record(dir, 5);
    flip_bit(&segment, record + RECORD_HEADER_BYTES as u64 + 1000);

    let mut daemon = start(dir, &[]);
    // NBD: EIO for the damaged grain (alone or inside a larger read).
    for (offset, length) in [(5 * GRAIN, GRAIN), (0, 1 << 20), (5 * GRAIN + 512, 512)] {
        let read = nbd(&daemon, "read", offset, length, 0);
        assert!(read.starts_with("ERR EIO"), "{offset}+{length}: {read}");
    }
    assert_ne!(nbd(&daemon, "read", 5 * GRAIN, GRAIN, 0), grain5);
    // Its neighbours are fine.
    nbd_ok(&daemon, "read", 4 * GRAIN, GRAIN, 0);
    nbd_ok(&daemon, "read", 6 * GRAIN, GRAIN, 0);
    // iSCSI: MEDIUM ERROR / UNRECOVERED READ ERROR, which qemu reports as EIO.
    let iscsi = qemu_io_iscsi(&daemon, "read 20480 4096");

    assert!(iscsi.contains("Input/output error"), "{iscsi}");
    // qemu prints the sense: MEDIUM ERROR (3), UNRECOVERED READ ERROR (11h/00h).
    assert!(
        iscsi.contains("(3) ASCQ:") && iscsi.contains("(0x1100)"),
        "{iscsi}"
    );
    assert!(!iscsi.contains("read 4096"), "{iscsi}");
    alive(&mut daemon);

    // Counted (space report and /metrics) and logged with volume and offset.
    let counted = space(&daemon)["checksum_errors"].as_u64().unwrap();
    assert!(counted >= 4, "{counted}");
    let log = daemon.log();
    assert!(
        log.contains("volume=v") && log.contains("offset_bytes=20480"),
        "{log}"
    );

    // lacuna scrub finds the record and maps it to the volume's grain; it fails.
    let scrub = daemon.cli(&["scrub", "--rate", "200"]);
    let out = String::from_utf8_lossy(&scrub.stdout);
    let err = String::from_utf8_lossy(&scrub.stderr);
    assert!(!scrub.status.success(), "{out}{err}");
    assert!(out.contains("256 records"), "{out}");
    assert!(out.contains("1 bad"), "{out}");
    assert!(out.contains("v bytes 20480..24576"), "{out}");
    assert!(err.contains("found 1 bad record"), "{err}");

    // The event log names the failed reads with volume and offset, and the
    // scrub pass that found the record, as critical events.
    let events = events_until(&daemon, |events| {
        events.iter().any(|e| e["kind"] == "scrub_finished")
    });
    let checksum = events
        .iter()
        .find(|e| e["kind"] == "checksum_error")
        .unwrap_or_else(|| panic!("no checksum event: {events:?}"));
    assert_eq!(checksum["severity"], "critical");
    assert_eq!(checksum["subject"], "v");
    let message = checksum["message"].as_str().unwrap();
    assert!(message.contains("offset 20480 of v"), "{message}");
    let scrub = events
        .iter()
        .find(|e| e["kind"] == "scrub_finished")
        .unwrap();
    assert_eq!(scrub["severity"], "critical", "{scrub}");
    assert!(
        scrub["message"]
            .as_str()
            .unwrap()
            .contains("1 records failed"),
        "{scrub}"
    );

    // Rewriting the grain heals it; the rest of the data was never touched.
    nbd_ok(&daemon, "write", 5 * GRAIN, GRAIN, 7);
    let clean = daemon.cli(&["scrub"]);
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    assert_ne!(nbd_ok(&daemon, "read", 0, 1 << 20, 0), written); // grain 5 differs now
    drop(daemon);
}

#[test]
fn eio_from_the_disk_is_a_read_error_counted_and_logged() {
    let tmp = temp_dir("eio");
    let dir = tmp.path();
    let mut daemon = start(dir, &[]);
    daemon.cli_ok(&["volume", "create", "v", "--size", "64M"]);
    nbd_ok(&daemon, "write", 0, 256 << 10, 11);
    daemon.kill();
    let (segment, _) = find_record(dir, 0);
    let id: u64 = segment
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();

    let mut daemon = Daemon::start_with_env(
        dir,
        "1G",
        &["--iscsi-open-access", "--scrub-rate", "100"],
        &[("LACUNA_FAULT_READ_EIO", &id.to_string())],
    );
    let read = nbd(&daemon, "read", 8 * GRAIN, GRAIN, 0);
    assert!(read.starts_with("ERR EIO"), "{read}");
    let iscsi = qemu_io_iscsi(&daemon, "read 0 4096");
    assert!(iscsi.contains("Input/output error"), "{iscsi}");
    // qemu prints the sense: MEDIUM ERROR (3), UNRECOVERED READ ERROR (11h/00h).
    assert!(
        iscsi.contains("(3) ASCQ:") && iscsi.contains("(0x1100)"),
        "{iscsi}"
    );
    // New writes go to a new segment and read back; holes still read.
    let fresh = nbd_ok(&daemon, "write", 1 << 20, 64 << 10, 12);
    assert_eq!(nbd_ok(&daemon, "read", 1 << 20, 64 << 10, 0), fresh);
    nbd_ok(&daemon, "read", 4 << 20, 64 << 10, 0);
    alive(&mut daemon);
    assert!(space(&daemon)["read_errors"].as_u64().unwrap() >= 2);
    let metrics = api_get(&daemon, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("lacuna_read_errors_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );
    let log = daemon.log();
    assert!(log.contains("fault injection on"), "{log}");
    assert!(
        log.contains("volume=v") && log.contains("offset_bytes=32768"),
        "{log}"
    );
    let events = events_until(&daemon, |events| {
        events.iter().any(|e| e["kind"] == "read_error")
    });
    assert!(
        events.iter().any(|e| e["kind"] == "read_error"
            && e["subject"] == "v"
            && e["message"].as_str().unwrap().contains("offset 32768 of v")),
        "{events:?}"
    );
    let scrub = daemon.cli(&["scrub"]);
    let out = String::from_utf8_lossy(&scrub.stdout);
    assert!(!scrub.status.success(), "{out}");
    assert!(out.contains("64 bad"), "{out}");
    assert!(out.contains("read failed"), "{out}");
    assert!(out.contains("v bytes 0..262144"), "{out}");
    // The background scrub (--scrub-rate 100 MB/s) finds the same (bounded wait).
    let mut background = serde_json::Value::Null;
    for _ in 0..300 {
        let status: serde_json::Value =
            serde_json::from_str(&api_get(&daemon, "/v1/array/scrub")).unwrap();
        assert_eq!(status["background_rate_bytes_per_s"], 100_000_000);
        if status["last"]["background"] == true {
            background = status["last"].clone();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(background["bad_records"], 64, "{background}");
    assert_eq!(background["rate_bytes_per_s"], 100_000_000);
    drop(daemon);
}

#[test]
fn a_torn_tail_is_trimmed_and_lost_records_refuse_the_start() {
    let tmp = temp_dir("torn");
    let dir = tmp.path();
    let daemon = start(dir, &[]);
    daemon.cli_ok(&["volume", "create", "v", "--size", "64M"]);
    let flushed = nbd_ok(&daemon, "write", 0, 1 << 20, 21);
    drop(daemon); // SIGKILL
                  // A crash mid-append leaves bytes past what the metadata committed.
    let (newest, length) = segment_files(dir).pop().unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    file.write_all_at(&[0xA5; 3000], length).unwrap();
    drop(file);

    let daemon = start(dir, &[]);
    assert!(
        daemon.log().contains("trimming a segment tail"),
        "{}",
        daemon.log()
    );
    assert_eq!(std::fs::metadata(&newest).unwrap().len(), length);
    assert_eq!(nbd_ok(&daemon, "read", 0, 1 << 20, 0), flushed);
    drop(daemon);

    // A tail cut into committed records: refuse, naming the file.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    file.set_len(length - 100).unwrap();
    drop(file);
    let (status, text) = Daemon::start_refused(dir, "1G");
    assert!(!status.success());
    assert!(
        text.contains(&newest.display().to_string()) && text.contains("truncated or torn"),
        "{text}"
    );
}

#[test]
fn a_truncated_metadata_file_refuses_the_start_naming_it() {
    let tmp = temp_dir("kv");
    let dir = tmp.path();
    let daemon = start(dir, &[]);
    daemon.cli_ok(&["volume", "create", "v", "--size", "64M"]);
    let written = nbd_ok(&daemon, "write", 0, 1 << 20, 31);
    drop(daemon); // SIGKILL
    let db = dir.join("data/metadata.redb");
    let original = std::fs::read(&db).unwrap();
    let length = original.len() as u64;
    // redb reports a truncation as corruption, as a short read, or panics on
    // it, depending on where the cut falls: the engine words each as damage, in
    // one line that names the file, with no panic message.
    for cut_to in [length / 2, length * 3 / 4, length - 1, 4096, 1000] {
        std::fs::write(&db, &original[..cut_to as usize]).unwrap();
        let (status, text) = Daemon::start_refused(dir, "1G");
        assert!(!status.success(), "cut to {cut_to}: {text}");
        assert!(
            text.contains(&format!("the metadata file {} is damaged", db.display())),
            "cut to {cut_to} of {length}: {text}"
        );
        assert!(!text.contains("panicked"), "cut to {cut_to}: {text}");
    }
    // The whole file back: the array starts and serves the data.
    std::fs::write(&db, &original).unwrap();
    let daemon = start(dir, &[]);
    assert_eq!(nbd_ok(&daemon, "read", 0, 1 << 20, 0), written);
    drop(daemon);
}
