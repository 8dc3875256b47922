//! Interop tests: a real `lacuna serve` driven by clients nobody here wrote —
//! qemu-img, qemu-io, nbdinfo, nbdcopy, nbdsh and fio — each asserting on what the
//! tool reports or reads back. Each runs twice: on the local store (`::local`)
//! and on the RADOS store (`::rados`, a one-node Ceph cluster of its own).

mod support;

use lacuna_rados::test_cluster::{TestCluster, POOL};
use support::{tool, tool_ok, Daemon};

/// Where a test's daemon keeps its segments and metadata.
#[derive(Clone, Copy)]
enum Store {
    Local,
    Rados,
}

/// A daemon and, on RADOS, its cluster (stopped after the daemon: fields
/// drop in order).
struct Array {
    daemon: Daemon,
    _cluster: Option<TestCluster>,
}

impl std::ops::Deref for Array {
    type Target = Daemon;
    fn deref(&self) -> &Daemon {
        &self.daemon
    }
}

fn daemon_with_volume(store: Store, tag: &str, name: &str, size: &str) -> Array {
    let dir = support::temp_dir(tag);
    let (daemon, cluster) = match store {
        Store::Local => (Daemon::start(dir.path()), None),
        Store::Rados => {
            let cluster = TestCluster::start();
            let conf = cluster.conf.display().to_string();
            let args = ["--store", "rados", "--ceph-conf", &conf, "--pool", POOL];
            (
                Daemon::start_with_args(dir.path(), "2G", &args),
                Some(cluster),
            )
        }
    };
    let daemon = daemon.owning(dir);
    daemon.cli_ok(&["volume", "create", name, "--size", size]);
    Array {
        daemon,
        _cluster: cluster,
    }
}

/// `#[test]`s `name::local` and `name::rados` running `name(store)`.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn local() {
                super::$name(super::Store::Local)
            }
            #[test]
            fn rados() {
                super::$name(super::Store::Rados)
            }
        }
    )*};
}

on_both_stores!(
    nbdinfo_reports_export_and_exact_map,
    qemu_io_write_read_zero_discard_and_aio,
    qemu_img_convert_compare_and_nbdcopy_both_ways,
    nbdsh_script_checks_structured_reads_and_block_status,
    fio_verified_random_and_sequential_mixes,
    cli_reports_volume_and_array_space,
    snapshots_clones_and_copies_through_real_clients,
);

/// Runs qemu-io on a raw NBD export with one `-c` per command; fails on error.
fn qemu_io(uri: &str, commands: &[&str]) -> String {
    let mut args = vec!["-f", "raw", uri];
    for command in commands {
        args.extend(["-c", command]);
    }
    tool_ok("qemu-io", &args)
}

fn map_rows(uri: &str) -> Vec<(u64, u64, String)> {
    tool_ok("nbdinfo", &["--map", uri])
        .lines()
        .map(|line| {
            let mut parts = line.split_whitespace();
            let offset = parts.next().unwrap().parse().unwrap();
            let length = parts.next().unwrap().parse().unwrap();
            let _type_number = parts.next().unwrap();
            (offset, length, parts.collect::<Vec<_>>().join(" "))
        })
        .collect()
}

fn nbdinfo_reports_export_and_exact_map(store: Store) {
    let daemon = daemon_with_volume(store, "nbdinfo", "vol1", "64M");
    let uri = daemon.uri("vol1");
    let info = tool_ok("nbdinfo", &["--json", &uri]);
    let json: serde_json::Value = serde_json::from_str(&info).unwrap();
    let export = &json["exports"][0];
    assert_eq!(export["export-size"], 64 << 20, "{info}");
    assert_eq!(export["can_multi_conn"], true, "{info}");
    assert_eq!(export["can_trim"], true, "{info}");
    assert_eq!(export["can_zero"], true, "{info}");
    assert_eq!(export["can_fast_zero"], true, "{info}");
    assert_eq!(json["protocol"], "newstyle-fixed", "{info}");
    for can in [
        "trim",
        "zero",
        "fast-zero",
        "multi-conn",
        "structured-reply",
    ] {
        let out = tool("nbdinfo", &["--can", can, &uri]);
        assert!(out.status.success(), "nbdinfo --can {can} failed");
    }
    // An empty volume is one hole.
    assert_eq!(map_rows(&uri), vec![(0, 64 << 20, "hole,zero".to_string())]);
    // Data at 1 MiB, written zeroes (kept allocated) at 4 MiB, a trimmed hole in the data.
    qemu_io(
        &uri,
        &["write -P 0xab 1M 2M", "write -z 4M 1M", "discard 2M 512k"],
    );
    let rows = map_rows(&uri);
    let expect = vec![
        (0, 1 << 20, "hole,zero".to_string()),
        (1 << 20, 1 << 20, "data".to_string()),
        (2 << 20, 512 << 10, "hole,zero".to_string()),
        ((2 << 20) + (512 << 10), 512 << 10, "data".to_string()),
        (3 << 20, 1 << 20, "hole,zero".to_string()),
        (4 << 20, 1 << 20, "zero".to_string()),
        (5 << 20, 59 << 20, "hole,zero".to_string()),
    ];
    assert_eq!(rows, expect);
    let list = tool_ok(
        "nbdinfo",
        &["--list", &format!("nbd://127.0.0.1:{}", daemon.nbd_port)],
    );
    assert!(list.contains("vol1"), "{list}");
}

fn qemu_io_write_read_zero_discard_and_aio(store: Store) {
    let daemon = daemon_with_volume(store, "qemuio", "disk", "32M");
    let uri = daemon.uri("disk");
    qemu_io(
        &uri,
        &[
            "write -P 0x5a 0 1M",
            "write -P 0x11 1000 3000", // unaligned, inside one grain
            "aio_write -P 0x22 2M 64k",
            "aio_write -P 0x33 3M 64k",
            "aio_flush",
            "write -z 8M 1M",
            "write -z -u 9M 1M",
            "discard 512k 512k",
        ],
    );
    let out = qemu_io(
        &uri,
        &[
            "read -P 0x5a 0 1000",
            "read -P 0x11 1000 3000",
            "read -P 0x5a 4000 520288",
            "read -P 0 512k 512k",
            "read -P 0x22 2M 64k",
            "read -P 0x33 3M 64k",
            "read -P 0 8M 2M",
            "aio_read -P 0x22 2M 4k",
        ],
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    let out = tool("qemu-io", &["-f", "raw", &uri, "-c", "read -P 0x99 0 4k"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("Pattern verification failed"),
        "the negative check must fail: {text}"
    );
    let vread = qemu_io(&uri, &["read -v 2M 16"]);
    assert!(vread.contains("22 22 22 22"), "{vread}");
}

fn qemu_img_convert_compare_and_nbdcopy_both_ways(store: Store) {
    let daemon = daemon_with_volume(store, "qemuimg", "img", "64M");
    let dir = &daemon.dir;
    let src = dir.join("src.raw");
    // A source with data, zeroes and repeated blocks.
    let mut bytes = vec![0u8; 48 << 20];
    for (i, chunk) in bytes.chunks_mut(4096).enumerate() {
        if i % 5 != 0 {
            for (j, b) in chunk.iter_mut().enumerate() {
                *b = ((i % 97) as u8).wrapping_mul(31) ^ (j as u8);
            }
        }
    }
    std::fs::write(&src, &bytes).unwrap();
    let qcow = dir.join("src.qcow2");
    tool_ok(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "qcow2",
            src.to_str().unwrap(),
            qcow.to_str().unwrap(),
        ],
    );
    let uri = daemon.uri("img");
    tool_ok(
        "qemu-img",
        &[
            "convert",
            "-n",
            "-f",
            "qcow2",
            "-O",
            "raw",
            qcow.to_str().unwrap(),
            &uri,
        ],
    );
    let cmp = tool(
        "qemu-img",
        &[
            "compare",
            "-f",
            "qcow2",
            "-F",
            "raw",
            qcow.to_str().unwrap(),
            &uri,
        ],
    );
    // compare reports a size mismatch only if the extra 16 MiB were not zero.
    assert!(
        cmp.status.success(),
        "{}",
        String::from_utf8_lossy(&cmp.stdout)
    );
    let info = tool_ok("qemu-img", &["info", "-f", "raw", &uri]);
    assert!(info.contains("64 MiB"), "{info}");
    // nbdcopy out to a file and back into a second volume.
    let out = dir.join("out.raw");
    tool_ok("nbdcopy", &[&uri, out.to_str().unwrap()]);
    let copied = std::fs::read(&out).unwrap();
    assert_eq!(&copied[..bytes.len()], &bytes[..]);
    assert!(copied[bytes.len()..].iter().all(|&b| b == 0));
    daemon.cli_ok(&["volume", "create", "img2", "--size", "64M"]);
    tool_ok(
        "nbdcopy",
        &["--flush", out.to_str().unwrap(), &daemon.uri("img2")],
    );
    let cmp = tool(
        "qemu-img",
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            out.to_str().unwrap(),
            &daemon.uri("img2"),
        ],
    );
    assert!(
        cmp.status.success(),
        "{}",
        String::from_utf8_lossy(&cmp.stdout)
    );
    // Dedup: the second copy added almost nothing physical.
    let show = daemon.cli_ok(&["--json", "volume", "show", "img2"]);
    let v: serde_json::Value = serde_json::from_str(&show).unwrap();
    assert_eq!(v["unique_physical_bytes"], 0, "{show}");
    let space: serde_json::Value =
        serde_json::from_str(&daemon.cli_ok(&["--json", "array", "space"])).unwrap();
    assert!(
        space["data_reduction_ratio"].as_f64().unwrap() > 2.0,
        "{space}"
    );
}

fn nbdsh_script_checks_structured_reads_and_block_status(store: Store) {
    let daemon = daemon_with_volume(store, "nbdsh", "sh", "16M");
    let script = r#"
import nbd
assert h.get_structured_replies_negotiated()
assert h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
assert h.can_multi_conn() and h.can_flush() and h.can_fua()
h.pwrite(b"\x77" * 65536, 1 << 20, nbd.CMD_FLAG_FUA)
assert h.pread(65536, 1 << 20) == b"\x77" * 65536
assert h.pread(4096, 0) == bytes(4096)
h.zero(4096, (1 << 20) + 4096, nbd.CMD_FLAG_NO_HOLE)
assert h.pread(4096, (1 << 20) + 4096) == bytes(4096)
seen = []
def cb(metacontext, offset, entries, err):
    seen.extend(entries)
h.block_status(2 << 20, 0, cb)
# hole|zero for the first MiB, then data, zero (allocated), data
assert seen[0:2] == [1 << 20, 3], seen
assert seen[2:4] == [4096, 0], seen
assert seen[4:6] == [4096, 2], seen
try:
    h.pread(4096, 16 << 20)
    raise SystemExit("read beyond the end succeeded")
except nbd.Error as e:
    assert e.errno is not None
h.flush()
print("ok")
"#;
    let out = tool_ok(
        "nbdsh",
        &["--base-allocation", "-u", &daemon.uri("sh"), "-c", script],
    );
    assert_eq!(out.trim(), "ok");
}

fn fio_verified_random_and_sequential_mixes(store: Store) {
    let daemon = daemon_with_volume(store, "fio", "fio", "256M");
    let uri = format!("--uri={}", daemon.uri("fio"));
    let common = [
        "--name=verify",
        "--ioengine=nbd",
        uri.as_str(),
        "--size=64M",
        "--iodepth=16",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--verify_state_save=0",
        "--buffer_compress_percentage=50",
        "--dedupe_percentage=30",
    ];
    let mixes: [&[&str]; 4] = [
        &["--rw=randwrite", "--bs=4k"],
        &["--rw=write", "--bs=64k"],
        &["--rw=randrw", "--bs=16k", "--rwmixread=30"],
        // Random trims, each followed by a write of the block (fio does not order
        // overlapping requests itself unless asked to).
        &["--rw=randtrimwrite", "--bs=4k", "--serialize_overlap=1"],
    ];
    for mix in mixes {
        let args: Vec<&str> = common.iter().chain(mix.iter()).copied().collect();
        let out = tool("fio", &args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "fio {mix:?} failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("err= 0"), "{text}");
        assert!(!text.contains("verify: bad"), "{text}");
    }
}

fn cli_reports_volume_and_array_space(store: Store) {
    let daemon = daemon_with_volume(store, "cli", "c1", "100M");
    let list = daemon.cli_ok(&["volume", "list"]);
    assert!(list.contains("c1"), "{list}");
    qemu_io(&daemon.uri("c1"), &["write -P 0x31 0 10M"]);
    let v: serde_json::Value =
        serde_json::from_str(&daemon.cli_ok(&["--json", "volume", "show", "c1"])).unwrap();
    assert_eq!(v["written_bytes"], 10 << 20, "{v}");
    assert!(
        (v["thin_provisioning_percent"].as_f64().unwrap() - 90.0).abs() < 0.01,
        "{v}"
    );
    let human = daemon.cli_ok(&["volume", "show", "c1"]);
    assert!(human.contains("thin"), "{human}");
    daemon.cli_ok(&["volume", "resize", "c1", "--size", "200M"]);
    let info = tool_ok("nbdinfo", &["--size", &daemon.uri("c1")]);
    assert_eq!(info.trim(), (200u64 << 20).to_string());
    // What the grow added takes writes and trims (the first write past the
    // old end once panicked in the engine); a shrink below it and a grow
    // again show zeroes there, never the old data.
    let uri = daemon.uri("c1");
    qemu_io(&uri, &["write -P 0x32 150M 2M", "discard 151M 512k"]);
    let out = qemu_io(
        &uri,
        &[
            "read -P 0x32 150M 1M",
            "read -P 0 151M 512k",
            "read -P 0x32 151.5M 512k",
        ],
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    daemon.cli_ok(&["volume", "resize", "c1", "--size", "120M"]);
    daemon.cli_ok(&["volume", "resize", "c1", "--size", "200M"]);
    let out = qemu_io(&uri, &["read -P 0 120M 80M", "read -P 0x31 0 10M"]);
    assert!(!out.contains("Pattern verification failed"), "{out}");
    let space = daemon.cli_ok(&["array", "space"]);
    assert!(space.to_lowercase().contains("capacity"), "{space}");
    daemon.cli_ok(&["volume", "delete", "c1"]);
    let out = tool("nbdinfo", &[&daemon.uri("c1")]);
    assert!(
        !out.status.success(),
        "a deleted volume is no longer exported"
    );
    // Unknown volume: one-line error, non-zero exit.
    let out = daemon.cli(&["volume", "show", "nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn cli_without_a_daemon_prints_one_line_naming_the_address() {
    let tmp = support::temp_dir("nodaemon");
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/api-token"), "x").unwrap();
    let port = support::free_port();
    let out = std::process::Command::new(support::BIN)
        .args(["--api", &format!("http://127.0.0.1:{port}"), "--data-dir"])
        .arg(dir.join("data"))
        .args(["volume", "list"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
}

/// `qemu-img compare` of a raw file with a raw export; fails the test on any
/// difference.
fn compare_raw(file: &std::path::Path, uri: &str) {
    tool_ok(
        "qemu-img",
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            file.to_str().unwrap(),
            uri,
        ],
    );
}

/// A snapshot is a read-only NBD export holding exactly the data of its instant,
/// while the volume moves on; a clone of it is writable and independent; a range
/// copy lands the source's bytes; a restore brings the old content back.
fn snapshots_clones_and_copies_through_real_clients(store: Store) {
    let daemon = daemon_with_volume(store, "snapshots", "vol", "16M");
    let uri = daemon.uri("vol");
    qemu_io(&uri, &["write -P 0x11 0 4M", "write -P 0x22 8M 1M"]);
    let expected = daemon.dir.join("expected.raw");
    tool_ok(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &uri,
            expected.to_str().unwrap(),
        ],
    );
    daemon.cli_ok(&["snapshot", "create", "vol", "--name", "s1"]);
    qemu_io(&uri, &["write -P 0x33 0 2M", "discard 8M 1M"]);
    let snap = daemon.uri("vol@s1");
    // The snapshot still reads as before the overwrite, byte for byte.
    compare_raw(&expected, &snap);
    let info: serde_json::Value =
        serde_json::from_str(&tool_ok("nbdinfo", &["--json", &snap])).unwrap();
    assert_eq!(info["exports"][0]["is_read_only"], true, "{info}");
    let refused = tool("qemu-io", &["-f", "raw", &snap, "-c", "write -P 0x44 0 4k"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(
        !text.contains("wrote 4096"),
        "a snapshot took a write: {text}"
    );
    // A clone of the snapshot starts equal to it and then diverges on its own.
    daemon.cli_ok(&["volume", "clone", "vol@s1", "copy1"]);
    let clone = daemon.uri("copy1");
    compare_raw(&expected, &clone);
    qemu_io(&clone, &["write -P 0x55 0 1M"]);
    tool_ok(
        "qemu-io",
        &["-r", "-f", "raw", &snap, "-c", "read -P 0x11 0 1M"],
    );
    // Range copy from the live volume into the clone, metadata only when aligned.
    daemon.cli_ok(&[
        "volume", "copy", "vol", "copy1", "--offset", "0", "--length", "2M", "--to", "4M",
    ]);
    qemu_io(&clone, &["read -P 0x33 4M 2M", "read -P 0x55 0 1M"]);
    // Restore puts the snapshot's content back into the volume.
    daemon.cli_ok(&["volume", "restore", "vol", "--from-snapshot", "s1"]);
    compare_raw(&expected, &uri);
}
