//! vVols end to end on the daemon: the protocol endpoint and second-level
//! addressing as a raw iSCSI initiator (`support/raw_iscsi.py`, written from
//! RFC 7143) meets them, the bytes decoded by sg3_utils; a host reaches only
//! what is bound to it, and a bind shows in REPORT LUNS after the unit
//! attention.

mod support;

use serde_json::Value;
use support::{tool_ok, Daemon, TARGET_IQN};

const ESX1: &str = "iqn.1998-01.com.vmware:esx1";
const ESX2: &str = "iqn.1998-01.com.vmware:esx2";
const ESX1_PE_LUN: u64 = 5;

/// Runs `body` (Python, with `s` a logged-in `raw_iscsi.Session` as
/// `initiator`, and `lun(first, second)` building a two-level LUN) and
/// returns what it printed as JSON.
fn raw_session(daemon: &Daemon, initiator: &str, body: &str) -> Value {
    let support = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support");
    let cli = daemon.cli_command_line();
    let script = format!(
        r#"
import json, subprocess, sys
sys.path.insert(0, "{support}")
from raw_iscsi import Session, sense_key, additional_sense

def lun(first, second=None):
    head = bytes([0, first]) if first < 256 else bytes([0x40 | (first >> 8), first & 0xff])
    if second is None:
        return head + bytes(6)
    return head + bytes([0xe2]) + second.to_bytes(5, "big")

def cli(*args):
    return subprocess.run({cli:?} + list(args), check=True, capture_output=True, text=True).stdout

def status(result):
    if result.status == 0:
        return "good"
    return "%d %02x/%02x/%02x" % ((result.status, sense_key(result.sense)) + additional_sense(result.sense))

out = {{}}
with Session({port}, "{TARGET_IQN}", "{initiator}") as s:
{body}
print(json.dumps(out))
"#,
        port = daemon.iscsi_ports[0],
    );
    let text = tool_ok("python3", &["-c", &script]);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// sg3_utils' decoding of `hex` bytes given to `tool` (`--inhex`).
fn decoded(daemon: &Daemon, tool: &str, name: &str, hex: &str, extra: &[&str]) -> String {
    let file = daemon.dir.join(name);
    // Bytes as sg3_utils reads them: two hex digits each, 16 to a line.
    let bytes: Vec<&str> = (0..hex.len()).step_by(2).map(|i| &hex[i..i + 2]).collect();
    let lines: Vec<String> = bytes.chunks(16).map(|line| line.join(" ")).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let mut args = vec![format!("--inhex={}", file.display())];
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    tool_ok(tool, &args)
}

fn vvol(daemon: &Daemon, kind: &str) -> (String, u64) {
    let text = daemon.cli_ok(&["--json", "vvol", "create", "--type", kind, "--size", "16M"]);
    let v: Value = serde_json::from_str(&text).unwrap();
    (
        v["id"].as_str().unwrap().to_string(),
        v["object_id"].as_u64().unwrap(),
    )
}

#[test]
fn the_protocol_endpoint_presents_each_hosts_bound_vvols_and_nothing_else() {
    let dir = support::temp_dir("vvol-pe");
    let daemon = Daemon::start(dir.path()).owning(dir);
    daemon.cli_ok(&["host", "create", "esx1", "--iqn", ESX1]);
    daemon.cli_ok(&["host", "create", "esx2", "--iqn", ESX2]);
    daemon.cli_ok(&[
        "host",
        "protocol-endpoint",
        "esx1",
        "--lun",
        &ESX1_PE_LUN.to_string(),
    ]);
    daemon.cli_ok(&["host", "protocol-endpoint", "esx2"]);
    let (disk, disk_lun) = vvol(&daemon, "data");
    let (other, other_lun) = vvol(&daemon, "data");
    daemon.cli_ok(&["vvol", "bind", "esx1", &disk]);

    let pe = ESX1_PE_LUN;
    let seen = raw_session(
        &daemon,
        ESX1,
        &format!(
            r#"
    s.clear_unit_attentions(lun({pe}))
    out["inquiry"] = s.command(lun({pe}), bytes.fromhex("12000000ff00"), data_in_length=255).data.hex()
    out["vpd86"] = s.command(lun({pe}), bytes.fromhex("12018600ff00"), data_in_length=255).data.hex()
    out["vpd83"] = s.command(lun({pe}), bytes.fromhex("12018300ff00"), data_in_length=255).data.hex()
    report = bytes.fromhex("a0001200000000001000" "0000")
    out["report12"] = s.command(lun({pe}), report, data_in_length=4096).data.hex()
    out["report00"] = s.command(lun({pe}), bytes.fromhex("a0000000000000001000" "0000"), data_in_length=4096).data.hex()
    s.clear_unit_attentions(lun({pe}, {disk_lun}))
    write = bytes.fromhex("2a00" "00000010" "00" "0008" "00")
    out["write"] = status(s.command(lun({pe}, {disk_lun}), write, data_out=b"\x5a" * 4096))
    read = bytes.fromhex("2800" "00000010" "00" "0008" "00")
    r = s.command(lun({pe}, {disk_lun}), read, data_in_length=4096)
    out["read"] = r.data == b"\x5a" * 4096
    out["unbound"] = status(s.command(lun({pe}, {other_lun}), bytes(6)))
    out["unbound_inquiry"] = s.command(lun({pe}, {other_lun}), bytes.fromhex("120000006000"), data_in_length=96).data[:1].hex()
    out["pe_read"] = status(s.command(lun({pe}), read, data_in_length=4096))
    cli("vvol", "bind", "esx1", "{other}")
    out["after_bind"] = status(s.command(lun({pe}), bytes(6)))
    out["report12_after"] = s.command(lun({pe}), report, data_in_length=4096).data.hex()
    out["bound_now"] = status(s.command(lun({pe}, {other_lun}), bytes.fromhex("120000006000"), data_in_length=96))
"#
        ),
    );

    let inquiry = decoded(
        &daemon,
        "sg_inq",
        "inquiry.hex",
        seen["inquiry"].as_str().unwrap(),
        &[],
    );
    assert!(inquiry.contains("LU_CONG=1"), "{inquiry}");
    let vpd = decoded(
        &daemon,
        "sg_vpd",
        "vpd86.hex",
        seen["vpd86"].as_str().unwrap(),
        &["--page=0x86"],
    );
    assert!(vpd.contains("LU_COLL_TYPE=1"), "{vpd}");

    // The in-band id the API gives hosts (VASA's) is the PE's NAA designator.
    let (_, endpoints) = support::api(&daemon, "GET", "/v1/protocol-endpoints", None);
    let esx1 = endpoints
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["host"] == "esx1")
        .unwrap();
    assert_eq!(esx1["protocol_endpoint"]["lun"], pe);
    assert_eq!(esx1["bound_vvols"], 2, "both bound by now");
    let vpd83 = hex::decode(seen["vpd83"].as_str().unwrap()).unwrap();
    assert_eq!(vpd83[5] & 0x0f, 3, "the first designator is an NAA one");
    assert_eq!(
        esx1["protocol_endpoint"]["in_band_id"],
        format!("naa.{}", hex::encode(&vpd83[8..24]))
    );

    let luns = |hex: &str| -> Vec<String> {
        let bytes = hex::decode(hex).unwrap();
        bytes[8..].chunks(8).map(hex::encode).collect()
    };
    let report12 = luns(seen["report12"].as_str().unwrap());
    assert_eq!(
        report12.len(),
        2,
        "the PE and the one vVol bound: {report12:?}"
    );
    let subsidiary = tool_ok(
        "sg_luns",
        &[&format!("--test={}", report12[1]), "--decode", "--lu_cong"],
    );
    assert!(
        subsidiary.contains(&format!("Simple lu addressing: {pe}")),
        "{subsidiary}"
    );
    assert!(subsidiary.contains(">>Subsidiary element:"), "{subsidiary}");
    assert!(
        subsidiary.contains(&format!(
            "Long extended flat space addressing: lun={disk_lun}"
        )),
        "{subsidiary}"
    );
    let report00 = luns(seen["report00"].as_str().unwrap());
    assert_eq!(
        report00,
        vec![format!("{:016x}", pe << 48)],
        "subsidiaries are not ordinary LUNs"
    );

    assert_eq!(seen["write"], "good");
    assert_eq!(seen["read"], true);
    assert_eq!(
        seen["unbound"], "2 05/25/00",
        "an unbound vVol is not a LUN"
    );
    assert_eq!(seen["unbound_inquiry"], "7f");
    assert_eq!(seen["pe_read"], "2 05/21/00", "the PE holds no blocks");
    assert_eq!(
        seen["after_bind"], "2 06/3f/0e",
        "REPORTED LUNS DATA HAS CHANGED on the PE"
    );
    assert_eq!(luns(seen["report12_after"].as_str().unwrap()).len(), 3);
    assert_eq!(seen["bound_now"], "good");

    // The other host's PE lists nothing of esx1's, and esx1's vVols are not
    // reachable through it.
    let seen = raw_session(
        &daemon,
        ESX2,
        &format!(
            r#"
    s.clear_unit_attentions(lun(0))
    report = bytes.fromhex("a0001200000000001000" "0000")
    out["report12"] = s.command(lun(0), report, data_in_length=4096).data.hex()
    out["other_host"] = status(s.command(lun(0, {disk_lun}), bytes(6)))
    out["other_pe"] = status(s.command(lun({pe}, {disk_lun}), bytes(6)))
"#
        ),
    );
    assert_eq!(luns(seen["report12"].as_str().unwrap()).len(), 1);
    assert_eq!(seen["other_host"], "2 05/25/00");
    assert_eq!(seen["other_pe"], "2 05/25/00");
}

/// EXTENDED COPY between two vVols through the protocol endpoint is the
/// engine's range copy: the data reads back on the destination and no new
/// physical space is taken.
#[test]
fn an_extended_copy_between_two_bound_vvols_takes_no_space() {
    let dir = support::temp_dir("vvol-xcopy");
    let daemon = Daemon::start(dir.path()).owning(dir);
    daemon.cli_ok(&["host", "create", "esx1", "--iqn", ESX1]);
    daemon.cli_ok(&["host", "protocol-endpoint", "esx1", "--lun", "1"]);
    let (from, from_lun) = vvol(&daemon, "data");
    let (to, to_lun) = vvol(&daemon, "data");
    daemon.cli_ok(&["vvol", "bind", "esx1", &from, &to]);
    let used = || {
        let (_, report) = support::api(&daemon, "GET", "/v1/array/space", None);
        report["physical_used_bytes"].as_u64().unwrap()
    };
    let prelude = format!(
        r#"
    import hashlib
    a, b = lun(1, {from_lun}), lun(1, {to_lun})
    s.clear_unit_attentions(a)
    s.clear_unit_attentions(b)
    def rw10(opcode, lba, blocks):
        return bytes([opcode, 0]) + lba.to_bytes(4, "big") + bytes([0]) + blocks.to_bytes(2, "big") + bytes([0])
    # 8 MiB that neither compress nor dedup, the same in both sessions.
    data = b"".join(hashlib.sha256(i.to_bytes(8, "big")).digest() for i in range(1 << 18))
"#
    );
    let seen = raw_session(
        &daemon,
        ESX1,
        &format!(
            r#"{prelude}
    for i in range(8):
        assert status(s.command(a, rw10(0x2a, i * 2048, 2048), data_out=data[i << 20:(i + 1) << 20])) == "good"
    out["flushed"] = status(s.command(a, bytes.fromhex("35000000000000000000")))
"#
        ),
    );
    assert_eq!(seen["flushed"], "good");
    let before = used();
    assert!(before >= 8 << 20, "the data took space: {before}");
    let seen = raw_session(
        &daemon,
        ESX1,
        &format!(
            r#"{prelude}
    def naa(l):
        return s.command(l, bytes.fromhex("12018300ff00"), data_in_length=255).data[4:24]
    plist = bytearray(16)
    plist[0] = 7
    plist[2:4] = (64).to_bytes(2, "big")
    plist[8:12] = (28).to_bytes(4, "big")
    for designator in (naa(a), naa(b)):
        d = bytearray(32)
        d[0] = 0xe4
        d[4:24] = designator
        d[29:32] = bytes([0, 2, 0])
        plist += d
    seg = bytearray(28)
    seg[0] = 0x02
    seg[3] = 24
    seg[6:8] = (1).to_bytes(2, "big")
    seg[10:12] = (16384).to_bytes(2, "big")
    plist += seg
    cdb = bytearray(16)
    cdb[0] = 0x83
    cdb[10:14] = len(plist).to_bytes(4, "big")
    out["xcopy"] = status(s.command(a, bytes(cdb), data_out=bytes(plist)))
    copied = b"".join(s.command(b, rw10(0x28, i * 2048, 2048), data_in_length=1 << 20).data for i in range(8))
    out["same"] = copied == data
    out["flushed"] = status(s.command(b, bytes.fromhex("35000000000000000000")))
"#
        ),
    );
    assert_eq!(seen["xcopy"], "good");
    assert_eq!(
        seen["same"], true,
        "the destination vVol reads the source's data"
    );
    assert_eq!(seen["flushed"], "good");
    let after = used();
    assert!(
        after < before + (1 << 20),
        "the copy is metadata: {before} bytes used before, {after} after"
    );
    let (_, space) = support::api(&daemon, "GET", &format!("/v1/vvols/{to}/space"), None);
    assert_eq!(space["written_bytes"], 8 << 20);
}
