//! Interop tests: the server, in-process on an ephemeral port over an in-memory
//! export, driven by real clients (nbdinfo, nbdsh, nbdcopy, qemu-io, qemu-img).
//! Each asserts on what the tool reports or on the bytes it left in the export.

mod common;

use common::{map_rows, nbdsh, pattern, temp_dir, tool, tool_ok, MemoryExport, TestServer};

const MIB: u64 = 1 << 20;

#[test]
fn nbdinfo_json_reports_size_flags_and_block_sizes() {
    let disk = MemoryExport::new("disk", 64 * MIB, false);
    let server = TestServer::start(vec![disk]);
    let uri = server.uri("disk");
    let info = tool_ok("nbdinfo", &["--json", &uri]);
    let json: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(json["protocol"], "newstyle-fixed", "{info}");
    let export = &json["exports"][0];
    assert_eq!(export["export-name"], "disk", "{info}");
    assert_eq!(export["export-size"], 64 * MIB, "{info}");
    assert_eq!(
        export["description"], "in-memory test export disk",
        "{info}"
    );
    for flag in [
        "can_cache",
        "can_df",
        "can_fast_zero",
        "can_flush",
        "can_fua",
        "can_multi_conn",
        "can_trim",
        "can_zero",
    ] {
        assert_eq!(export[flag], true, "{flag}: {info}");
    }
    assert_eq!(export["is_read_only"], false, "{info}");
    assert_eq!(export["block_size_minimum"], 1, "{info}");
    assert_eq!(export["block_size_preferred"], 4096, "{info}");
    assert_eq!(export["block_size_maximum"], 32 * MIB, "{info}");
    let contexts = export["contexts"].as_array().unwrap();
    assert!(contexts.iter().any(|c| c == "base:allocation"), "{info}");

    for can in [
        "trim",
        "zero",
        "fast-zero",
        "multi-conn",
        "structured-reply",
        "cache",
        "df",
        "fua",
        "flush",
    ] {
        let out = tool("nbdinfo", &["--can", can, &uri]);
        assert_eq!(out.status.code(), Some(0), "nbdinfo --can {can}");
    }
    let out = tool("nbdinfo", &["--is", "read-only", &uri]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a writable export is not read-only"
    );
    assert_eq!(
        tool_ok("nbdinfo", &["--size", &uri]).trim(),
        (64 * MIB).to_string()
    );
}

#[test]
fn read_only_export_refuses_writes() {
    let disk = MemoryExport::new("ro", 4 * MIB, true);
    disk.fill(0, &[0x5a; 4096]);
    let server = TestServer::start(vec![disk.clone()]);
    let uri = server.uri("ro");
    assert_eq!(
        tool("nbdinfo", &["--is", "read-only", &uri]).status.code(),
        Some(0)
    );
    assert_eq!(
        tool("nbdinfo", &["--can", "trim", &uri]).status.code(),
        Some(2)
    );
    assert_eq!(
        tool("nbdinfo", &["--can", "write", &uri]).status.code(),
        Some(2)
    );
    // Reads work; a write is refused with EPERM even if a client tries.
    nbdsh(
        Some(&uri),
        r#"
import errno
# Bypass libnbd's own checks so that the server's are exercised.
h.set_strict_mode(0)
assert h.pread(4096, 0) == b"\x5a" * 4096
try:
    h.pwrite(b"x" * 512, 0)
    raise AssertionError("write to a read-only export succeeded")
except nbd.Error as e:
    assert e.errnum == errno.EPERM, e
"#,
    );
    assert_eq!(disk.contents(0, 4096), vec![0x5a; 4096]);
}

#[test]
fn nbdinfo_lists_exports() {
    let a = MemoryExport::new("alpha", MIB, false);
    let b = MemoryExport::new("beta", 2 * MIB, true);
    let server = TestServer::start(vec![a, b]);
    let out = tool_ok("nbdinfo", &["--list", "--json", &server.uri("")]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let exports = json["exports"].as_array().unwrap();
    let names: Vec<_> = exports
        .iter()
        .map(|e| e["export-name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta"], "{out}");
    assert_eq!(exports[1]["export-size"], 2 * MIB, "{out}");
    assert_eq!(exports[1]["is_read_only"], true, "{out}");
    assert_eq!(
        exports[0]["description"], "in-memory test export alpha",
        "{out}"
    );
    let text = tool_ok("nbdinfo", &["--list", &server.uri("")]);
    assert!(text.contains("alpha") && text.contains("beta"), "{text}");
}

#[test]
fn unknown_export_is_refused() {
    let server = TestServer::start(vec![MemoryExport::new("disk", MIB, false)]);
    let out = tool("nbdinfo", &[&server.uri("nope")]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("No such file") && stderr.contains("nope"),
        "{stderr}"
    );
}

#[test]
fn nbdinfo_map_shows_exact_extents() {
    let disk = MemoryExport::new("disk", 16 * MIB, false);
    let server = TestServer::start(vec![disk.clone()]);
    let uri = server.uri("disk");
    assert_eq!(
        map_rows(&tool_ok("nbdinfo", &["--map", &uri])),
        vec![(0, 16 * MIB, "hole,zero".to_string())]
    );
    // Data at [1 MiB, 3 MiB), allocated zeroes at [4 MiB, 5 MiB), a trimmed hole in the data.
    tool_ok(
        "qemu-io",
        &[
            "-f",
            "raw",
            &uri,
            "-c",
            "write -P 0xab 1M 2M",
            "-c",
            "write -z 4M 1M",
            "-c",
            "discard 2M 512k",
        ],
    );
    let rows = map_rows(&tool_ok("nbdinfo", &["--map", &uri]));
    let expect = vec![
        (0, MIB, "hole,zero".to_string()),
        (MIB, MIB, "data".to_string()),
        (2 * MIB, MIB / 2, "hole,zero".to_string()),
        (2 * MIB + MIB / 2, MIB / 2, "data".to_string()),
        (3 * MIB, MIB, "hole,zero".to_string()),
        (4 * MIB, MIB, "zero".to_string()),
        (5 * MIB, 11 * MIB, "hole,zero".to_string()),
    ];
    // qemu-io's write -z without -u sends NO_HOLE, so those blocks stay allocated.
    assert_eq!(rows, expect);
    // The map of a sub-range, and totals.
    let totals = tool_ok("nbdinfo", &["--map", "--totals", &uri]);
    assert!(totals.contains("data"), "{totals}");
}

#[test]
fn qemu_io_writes_reads_zeroes_and_discards() {
    let disk = MemoryExport::new("disk", 32 * MIB, false);
    let server = TestServer::start(vec![disk.clone()]);
    let uri = server.uri("disk");
    let out = tool_ok(
        "qemu-io",
        &[
            "-f",
            "raw",
            &uri,
            "-c",
            "write -P 0xab 0 1M",
            "-c",
            "read -P 0xab 0 1M",
            "-c",
            "write -P 0xcd 1M 3M",
            "-c",
            "read -P 0xcd 1M 3M",
            "-c",
            "write -z 512k 64k",
            "-c",
            "read -P 0 512k 64k",
            "-c",
            "read -P 0xab 0 512k",
            "-c",
            "write -z -u 2M 1M",
            "-c",
            "read -P 0 2M 1M",
            "-c",
            "discard 8M 1M",
            "-c",
            "read -P 0 8M 1M",
            "-c",
            "aio_write -P 0x11 16M 64k",
            "-c",
            "aio_write -P 0x22 17M 64k",
            "-c",
            "aio_flush",
            "-c",
            "aio_read -P 0x11 16M 64k",
            "-c",
            "aio_read -P 0x22 17M 64k",
            "-c",
            "aio_flush",
            "-c",
            "write -P 0x33 -f 20M 4k",
            "-c",
            "flush",
            "-c",
            "read -P 0x33 20M 4k",
            // An unaligned write inside a block.
            "-c",
            "write -P 0x44 12345 100",
            "-c",
            "read -P 0x44 12345 100",
        ],
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    assert!(!out.contains("failed"), "{out}");
    assert_eq!(disk.contents(0, 4096), vec![0xab; 4096]);
    assert_eq!(disk.contents(512 * 1024, 64 * 1024), vec![0; 64 * 1024]);
    assert_eq!(disk.contents(MIB, MIB), vec![0xcd; MIB as usize]);
    assert_eq!(disk.contents(2 * MIB, MIB), vec![0; MIB as usize]);
    assert_eq!(disk.contents(3 * MIB, 4096), vec![0xcd; 4096]);
    assert_eq!(disk.contents(17 * MIB, 64 * 1024), vec![0x22; 64 * 1024]);
    assert_eq!(disk.contents(20 * MIB, 4096), vec![0x33; 4096]);
    assert_eq!(disk.contents(12345, 100), vec![0x44; 100]);
    assert_eq!(
        disk.block((2 * MIB / 4096) as usize),
        common::Block::Hole,
        "write -z -u unmaps"
    );
    assert!(
        disk.flushes.load(std::sync::atomic::Ordering::Relaxed) >= 2,
        "flush and FUA reached the export"
    );

    // A wrong pattern must be detected (the check above can fail).
    let out = tool("qemu-io", &["-f", "raw", &uri, "-c", "read -P 0xee 0 4k"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Pattern verification failed"), "{text}");
}

#[test]
fn qemu_img_info_convert_and_compare() {
    let disk = MemoryExport::new("disk", 8 * MIB, false);
    let server = TestServer::start(vec![disk.clone()]);
    let uri = server.uri("disk");
    let info = tool_ok("qemu-img", &["info", "--output=json", "-f", "raw", &uri]);
    let json: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(json["virtual-size"], 8 * MIB, "{info}");

    let dir = temp_dir("qemu-img");
    let source = dir.path().join("source.raw");
    let mut image = vec![0u8; (8 * MIB) as usize];
    image[..MIB as usize].copy_from_slice(&pattern(MIB as usize, 1));
    image[(5 * MIB) as usize..(5 * MIB + 12345) as usize].copy_from_slice(&pattern(12345, 2));
    std::fs::write(&source, &image).unwrap();
    let source = source.to_str().unwrap();
    tool_ok(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", source, &uri],
    );
    assert_eq!(disk.contents(0, 8 * MIB), image);
    let out = tool_ok(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", source, &uri],
    );
    assert!(out.contains("Images are identical"), "{out}");
    // A difference is reported.
    disk.fill(7 * MIB, b"different");
    let out = tool(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", source, &uri],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn nbdcopy_round_trips_through_the_export() {
    let size = 24 * MIB;
    let disk = MemoryExport::new("disk", size, false);
    let server = TestServer::start(vec![disk.clone()]);
    let uri = server.uri("disk");
    let dir = temp_dir("nbdcopy");
    let source = dir.path().join("in.raw");
    let back = dir.path().join("out.raw");
    let mut image = vec![0u8; size as usize];
    for (index, chunk) in image.chunks_mut((3 * MIB) as usize).enumerate() {
        if index % 2 == 0 {
            let fill = pattern(chunk.len(), index as u64 + 10);
            chunk.copy_from_slice(&fill);
        }
    }
    std::fs::write(&source, &image).unwrap();
    // Several connections and many requests in flight on each.
    tool_ok(
        "nbdcopy",
        &[
            "--connections=4",
            "--requests=32",
            "--request-size=262144",
            source.to_str().unwrap(),
            &uri,
        ],
    );
    assert!(
        disk.contents(0, size) == image,
        "export differs from the source"
    );
    tool_ok(
        "nbdcopy",
        &["--connections=4", &uri, back.to_str().unwrap()],
    );
    assert!(std::fs::read(&back).unwrap() == image, "copy back differs");
    // nbdcopy detects zeroes and leaves holes: the zero ranges read back as zero.
    let rows = map_rows(&tool_ok("nbdinfo", &["--map", &uri]));
    assert!(rows.iter().any(|(_, _, kind)| kind == "data"), "{rows:?}");
}

#[test]
fn unix_socket_serves_the_same_export() {
    let disk = MemoryExport::new("disk", 2 * MIB, false);
    disk.fill(4096, &[7; 4096]);
    let server = TestServer::start(vec![disk]);
    let uri = server.unix_uri("disk");
    assert_eq!(
        tool_ok("nbdinfo", &["--size", &uri]).trim(),
        (2 * MIB).to_string()
    );
    let rows = map_rows(&tool_ok("nbdinfo", &["--map", &uri]));
    assert_eq!(
        rows,
        vec![
            (0, 4096, "hole,zero".to_string()),
            (4096, 4096, "data".to_string()),
            (8192, 2 * MIB - 8192, "hole,zero".to_string()),
        ]
    );
}

#[test]
fn nbdsh_structured_reads_block_status_and_errors() {
    let disk = MemoryExport::new("disk", 4 * MIB, false);
    disk.fill(MIB, &pattern(8192, 3));
    let server = TestServer::start(vec![disk.clone()]);
    let expected = pattern(8192, 3);
    let script = format!(
        r#"
import errno
h.add_meta_context("base:allocation")
h.connect_uri("{uri}")
h.set_strict_mode(0)
assert h.get_structured_replies_negotiated()
assert h.can_meta_context("base:allocation")
expected = bytes.fromhex("{hex}")
# A read spanning hole, data, hole: structured chunks reassemble exactly.
buf = h.pread(3 * 4096 + 8192, 1048576 - 4096 * 3 + 0)
assert buf == b"\0" * (3 * 4096) + expected, "structured read mismatch"
# Chunks seen by a pread_structured callback (count, offset): holes for the
# zero runs of a read of 64 KiB or more ...
seen = []
def chunk(subbuf, offset, status, err):
    seen.append((status, offset, len(subbuf)))
    return 0
h.pread_structured(128 * 1024, 1048576 - 64 * 1024, chunk)
assert sorted(seen, key=lambda c: c[1]) == [
    (nbd.READ_HOLE, 1048576 - 64 * 1024, 64 * 1024),
    (nbd.READ_DATA, 1048576, 8192),
    (nbd.READ_HOLE, 1048576 + 8192, 56 * 1024),
], seen
# ... and one data chunk for a shorter one, holes and all.
seen.clear()
h.pread_structured(3 * 4096 + 8192 + 4096, 1048576 - 3 * 4096, chunk)
assert seen == [(nbd.READ_DATA, 1048576 - 3 * 4096, 24576)], seen
# With DF the server sends exactly one data chunk.
seen.clear()
h.pread_structured(3 * 4096 + 8192, 1048576 - 3 * 4096, chunk, nbd.CMD_FLAG_DF)
assert len(seen) == 1 and seen[0][0] == nbd.READ_DATA, seen
# Block status, with and without REQ_ONE.
entries = []
def extent(metacontext, offset, e, err):
    entries.extend(zip(e[0::2], e[1::2]))
    return 0
h.block_status(2 * 1048576, 0, extent)
assert entries == [(1048576, 3), (8192, 0), (1048576 - 8192, 3)], entries
entries.clear()
h.block_status(2 * 1048576, 0, extent, nbd.CMD_FLAG_REQ_ONE)
assert entries == [(1048576, 3)], entries
# Write with FUA, zero with FAST_ZERO and NO_HOLE, cache, flush.
h.pwrite(b"\x99" * 4096, 2 * 1048576, nbd.CMD_FLAG_FUA)
h.zero(4096, 3 * 1048576, nbd.CMD_FLAG_FAST_ZERO | nbd.CMD_FLAG_NO_HOLE)
h.cache(4096, 0)
h.flush()
entries.clear()
h.block_status(8192, 3 * 1048576 - 4096, extent)
assert entries == [(4096, 3), (4096, 2)], entries
# Errors come back as structured error chunks with the right errno.
def expect_errno(number, f):
    try:
        f()
    except nbd.Error as e:
        assert e.errnum == number, (e, number)
        return
    raise AssertionError("expected errno %d" % number)
size = h.get_size()
expect_errno(errno.EINVAL, lambda: h.pread(4096, size - 1024))
expect_errno(errno.ENOSPC, lambda: h.pwrite(b"x" * 4096, size - 1024))
expect_errno(errno.EINVAL, lambda: h.trim(8192, size - 4096))
expect_errno(errno.EINVAL, lambda: h.block_status(4096, size, extent))
# The connection survives the errors.
assert h.pread(4096, 2 * 1048576) == b"\x99" * 4096
"#,
        hex = expected
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        uri = server.uri("disk"),
    );
    nbdsh(None, &script);
    assert_eq!(disk.contents(2 * MIB, 4096), vec![0x99; 4096]);
    assert_eq!(disk.block((3 * MIB / 4096) as usize), common::Block::Zero);
}

#[test]
fn nbdsh_pipelines_many_requests_out_of_order() {
    let disk = MemoryExport::new("disk", 16 * MIB, false);
    let server = TestServer::start(vec![disk.clone()]);
    nbdsh(
        Some(&server.uri("disk")),
        r#"
# 200 writes in flight, then 200 reads, completed in whatever order they finish.
count = 200
bufs = [nbd.Buffer.from_bytearray(bytearray([i % 251]) * 65536) for i in range(count)]
cookies = [h.aio_pwrite(bufs[i], i * 65536) for i in range(count)]
while h.aio_in_flight() > 0:
    h.poll(-1)
for c in cookies:
    assert h.aio_command_completed(c) or True
reads = [nbd.Buffer(65536) for i in range(count)]
cookies = [h.aio_pread(reads[i], i * 65536) for i in range(count)]
while h.aio_in_flight() > 0:
    h.poll(-1)
for i in range(count):
    assert reads[i].to_bytearray() == bytearray([i % 251]) * 65536, i
"#,
    );
    for i in [0u64, 57, 199] {
        assert_eq!(
            disk.contents(i * 65536, 65536),
            vec![(i % 251) as u8; 65536]
        );
    }
}

#[test]
fn nbdsh_simple_replies_and_export_name_handshake() {
    let disk = MemoryExport::new("disk", 4 * MIB, false);
    disk.fill(0, &[0x42; 8192]);
    let server = TestServer::start(vec![disk.clone()]);
    let uri = server.uri("disk");
    // Without structured replies: simple replies, no block status, no DF.
    nbdsh(
        None,
        &format!(
            r#"
import errno
h.set_request_structured_replies(False)
h.connect_uri("{uri}")
h.set_strict_mode(0)
assert not h.get_structured_replies_negotiated()
assert not h.can_meta_context("base:allocation")
assert h.pread(8192, 0) == b"\x42" * 8192
h.pwrite(b"\x43" * 4096, 4096)
try:
    h.pread(4096, h.get_size())
    raise AssertionError("out of range read succeeded")
except nbd.Error as e:
    assert e.errnum == errno.EINVAL, e
h.shutdown()
"#
        ),
    );
    assert_eq!(disk.contents(4096, 4096), vec![0x43; 4096]);
    // Old (non-fixed) newstyle: the client can only use NBD_OPT_EXPORT_NAME,
    // and gets the 124 bytes of padding.
    nbdsh(
        None,
        &format!(
            r#"
h.set_handshake_flags(0)
h.set_request_structured_replies(False)
h.connect_uri("{uri}")
assert h.get_protocol() == "newstyle", h.get_protocol()
assert h.get_size() == 4 * 1048576
assert h.pread(4096, 4096) == b"\x43" * 4096
h.shutdown()
"#
        ),
    );
}

#[test]
fn nbdsh_option_negotiation() {
    let disk = MemoryExport::new("disk", MIB, false);
    let other = MemoryExport::new("other", 2 * MIB, false);
    let server = TestServer::start(vec![disk, other]);
    let uri = server.uri("disk");
    nbdsh(
        None,
        &format!(
            r#"
h.set_opt_mode(True)
h.add_meta_context("base:")
h.connect_uri("{uri}")
# LIST_META_CONTEXT with the namespace query "base:" lists base:allocation.
found = []
n = h.opt_list_meta_context(lambda name: found.append(name) or 0)
assert found == ["base:allocation"], found
# NBD_OPT_LIST
names = []
h.opt_list(lambda name, description: names.append((name, description)) or 0)
assert [n for n, d in names] == ["disk", "other"], names
# NBD_OPT_INFO on another export, then on an unknown one.
h.set_export_name("other")
h.opt_info()
assert h.get_size() == 2 * 1048576
h.set_export_name("missing")
try:
    h.opt_info()
    raise AssertionError("info on a missing export succeeded")
except nbd.Error:
    pass
h.set_export_name("disk")
h.clear_meta_contexts()
h.add_meta_context("base:allocation")
h.opt_go()
assert h.get_size() == 1048576
assert h.can_meta_context("base:allocation")
h.shutdown()
"#
        ),
    );
}
