//! Failover of `lacuna serve --store rados` (docs/SCALE-OUT.md): two gateways
//! on one Ceph pool (a one-node test cluster), separate local directories.
//! The first owns the shard and takes NBD writes; the second waits as a
//! standby. The owner is SIGKILLed; the standby takes the shard over once the
//! lease ends, fencing the dead one at the cluster, and serves the same
//! volume: every write flushed before the kill reads back, nothing else
//! reads back as garbage. The dead gateway, restarted, stays a standby and
//! serves nothing while the other owns the shard. Membership is visible
//! all along (`lacuna gateway list`, through a gateway's API or read from the
//! cluster): owner, standby, and a dead gateway listed as gone.

mod support;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lacuna_rados::test_cluster::{TestCluster, POOL};
use support::{free_port, BIN};

const MIB: usize = 1 << 20;

/// The tests run one at a time: each starts a cluster and up to three
/// gateways with 3 s leases, and four of them at once on two cores can starve
/// a gateway's lease renewal (it then stops, as it must) — a load the tests
/// are not about.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A target port group as REPORT TARGET PORT GROUPS gave it: id, asymmetric
/// access state, relative target ports.
type PortGroup = (u16, u8, Vec<u16>);

struct Gateway {
    child: Child,
    dir: PathBuf,
    nbd_port: u16,
    api_port: u16,
    iscsi_port: u16,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gateway {
    fn start(dir: &Path, conf: &Path, id: &str) -> Gateway {
        Gateway::start_in_group(dir, conf, id, None)
    }

    /// [`Gateway::start`] with an ALUA target port group (`--port-group`).
    fn start_in_group(dir: &Path, conf: &Path, id: &str, group: Option<u16>) -> Gateway {
        Gateway::start_for(dir, conf, id, group, None)
    }

    /// [`Gateway::start_in_group`] for a shard other than the first (`--shard`).
    fn start_for(
        dir: &Path,
        conf: &Path,
        id: &str,
        group: Option<u16>,
        shard: Option<&str>,
    ) -> Gateway {
        std::fs::create_dir_all(dir).unwrap();
        let (nbd_port, api_port, iscsi_port) = (free_port(), free_port(), free_port());
        let log = std::fs::File::create(dir.join("daemon.log")).unwrap();
        let child = Command::new(BIN)
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--store", "rados", "--pool", POOL, "--gateway-id", id])
            .arg("--ceph-conf")
            .arg(conf)
            .args(["--lease-s", "3", "--capacity", "2G", "--no-vasa"])
            .args(["--nbd-open-access"])
            .args(group.map(|g| format!("--port-group={g}")))
            .args(shard.map(|s| format!("--shard={s}")))
            .args(["--nbd-listen", &format!("127.0.0.1:{nbd_port}")])
            .args(["--api-listen", &format!("127.0.0.1:{api_port}")])
            .args(["--iscsi-listen", &format!("127.0.0.1:{iscsi_port}")])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn lacuna serve");
        Gateway {
            child,
            dir: dir.to_path_buf(),
            nbd_port,
            api_port,
            iscsi_port,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// Waits until its NBD and API ports accept (it owns the shard).
    fn wait_serving(&mut self, within: Duration) -> Duration {
        let started = Instant::now();
        for port in [self.nbd_port, self.api_port] {
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                if let Ok(Some(status)) = self.child.try_wait() {
                    panic!("gateway exited ({status}); log:\n{}", self.log());
                }
                assert!(
                    started.elapsed() < within,
                    "gateway not serving after {within:?}; log:\n{}",
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        started.elapsed()
    }

    fn cli_ok(&self, args: &[&str]) -> String {
        self.cli_ok_as(&self.dir.join("data"), args)
    }

    /// The CLI against this gateway's API with the token of `data_dir`.
    fn cli_ok_as(&self, data_dir: &Path, args: &[&str]) -> String {
        let out = Command::new(BIN)
            .args(["--api", &format!("http://127.0.0.1:{}", self.api_port)])
            .arg("--data-dir")
            .arg(data_dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `lacuna gateway list --json` through this gateway's API.
    fn gateways(&self) -> serde_json::Value {
        serde_json::from_str(&self.cli_ok(&["--json", "gateway", "list"])).unwrap()
    }

    /// `iscsi-inq` of LUN 0 as `initiator`: the VPD page `page` (decimal) or,
    /// when it is refused, the tool's error.
    fn iscsi_inquiry(&self, initiator: &str, page: &str) -> Result<String, String> {
        let url = format!(
            "iscsi://127.0.0.1:{}/iqn.2024-01.org.lacuna:lacuna/0",
            self.iscsi_port
        );
        let out = Command::new("iscsi-inq")
            .args(["-i", initiator, "-e", "1", "-c", page, &url])
            .output()
            .expect("iscsi-inq (libiscsi-bin)");
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    }

    /// REPORT TARGET PORT GROUPS and VPD 83h of LUN 0 as `initiator`, over
    /// a raw iSCSI session (`support/raw_iscsi.py`): each group as (id,
    /// asymmetric access state, its relative target ports), and the page's bytes.
    fn port_groups(&self, initiator: &str) -> (Vec<PortGroup>, Vec<u8>) {
        let support = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support");
        let script = format!(
            r#"
import json, sys
sys.path.insert(0, "{support}")
from raw_iscsi import Session
lun = bytes(8)
with Session({port}, "iqn.2024-01.org.lacuna:lacuna", "{initiator}") as s:
    s.clear_unit_attentions(lun)
    rtpg = s.command(lun, bytes.fromhex("a30a00000000000010000000"), b"", 4096)
    vpd = s.command(lun, bytes.fromhex("1201830100" + "00"), b"", 256)
print(json.dumps({{"rtpg": rtpg.data.hex(), "rtpg_status": rtpg.status, "vpd": vpd.data.hex()}}))
"#,
            port = self.iscsi_port
        );
        let out = Command::new("python3")
            .args(["-c", &script])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(answer["rtpg_status"], 0, "{answer}");
        let hex = |key: &str| -> Vec<u8> {
            let text = answer[key].as_str().unwrap();
            (0..text.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
                .collect()
        };
        let data = hex("rtpg");
        let length = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
        assert_eq!(length, data.len() - 4);
        let mut groups = Vec::new();
        let mut at = 4;
        while at < data.len() {
            let count = usize::from(data[at + 7]);
            let ports = (0..count)
                .map(|i| u16::from_be_bytes([data[at + 10 + 4 * i], data[at + 11 + 4 * i]]))
                .collect();
            groups.push((
                u16::from_be_bytes([data[at + 2], data[at + 3]]),
                data[at] & 0x0f,
                ports,
            ));
            at += 8 + 4 * count;
        }
        (groups, hex("vpd"))
    }

    fn uri(&self) -> String {
        format!("nbd://127.0.0.1:{}/v", self.nbd_port)
    }
}

/// Runs a libnbd script (`h` is the connected handle) against `uri`.
fn nbd(uri: &str, script: &str) -> String {
    let program = format!(
        "import nbd, sys\nh = nbd.NBD()\nh.connect_uri(sys.argv[1])\n{script}\nh.shutdown()\n"
    );
    let out = Command::new("/usr/bin/python3")
        .args(["-c", &program, uri])
        .env("LIBNBD_DEBUG", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "nbd script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_killed_owner_is_taken_over_by_the_standby_with_nothing_flushed_lost() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = TestCluster::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut a = Gateway::start(&tmp.path().join("gw-a"), &cluster.conf, "gw-a");
    a.wait_serving(Duration::from_secs(60));
    a.cli_ok(&["volume", "create", "v", "--size", "64M"]);
    // Flushed: A over the first 8 MiB. Not flushed: B over the next 8.
    nbd(
        &a.uri(),
        &format!(
            "h.pwrite(b'A' * {n}, 0)\nh.flush()\nh.pwrite(b'B' * {n}, {n})",
            n = 8 * MIB
        ),
    );
    let mut b = Gateway::start(&tmp.path().join("gw-b"), &cluster.conf, "gw-b");
    wait_standby(&b);
    assert!(
        TcpStream::connect(("127.0.0.1", b.nbd_port)).is_err(),
        "a standby serves nothing"
    );

    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let took = b.wait_serving(Duration::from_secs(60));
    eprintln!("failover: the standby served {took:?} after the owner was killed (lease 3 s)");
    assert!(
        b.log().contains("took shard-0 over from gw-a"),
        "{}",
        b.log()
    );

    let check = format!(
        "a = h.pread({n}, 0)\nassert a == b'A' * {n}, 'flushed data lost'\n\
         b = h.pread({n}, {n})\n\
         for i in range(0, {n}, 4096):\n    g = b[i:i + 4096]\n    \
         assert g in (b'B' * 4096, bytes(4096)), f'garbage at {{i}}'\nprint('ok')",
        n = 8 * MIB
    );
    assert_eq!(nbd(&b.uri(), &check).trim(), "ok");
    // The new owner takes writes.
    nbd(&b.uri(), &format!("h.pwrite(b'C' * {MIB}, 0)\nh.flush()"));
    // The dead owner is listed as gone once two leases pass without a word
    // from it; the new one as the shard's owner.
    let listed = Instant::now();
    loop {
        let answer = b.gateways();
        assert_eq!(answer["shards"][0]["owner"], "gw-b", "{answer}");
        assert_eq!(state_of(&answer, "gw-b"), "owner", "{answer}");
        if state_of(&answer, "gw-a") == "gone" {
            break;
        }
        assert!(listed.elapsed() < Duration::from_secs(30), "{answer}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let space = b.cli_ok(&["--json", "array", "space"]);
    assert!(
        space.contains("\"volume_count\": 1") || space.contains("\"volume_count\":1"),
        "{space}"
    );

    // The killed gateway, restarted, is a standby: it serves nothing.
    let mut a2 = Gateway::start(&tmp.path().join("gw-a"), &cluster.conf, "gw-a");
    wait_standby(&a2);
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        TcpStream::connect(("127.0.0.1", a2.nbd_port)).is_err(),
        "{}",
        a2.log()
    );
    let answer = b.gateways();
    assert_eq!(state_of(&answer, "gw-a"), "standby", "{answer}");
    assert_eq!(state_of(&answer, "gw-b"), "owner", "{answer}");
    let table = b.cli_ok(&["gateway", "list"]);
    assert!(
        table.contains("shard-0: owned by gw-b"),
        "the table names the owner: {table}"
    );
    assert_eq!(
        nbd(
            &b.uri(),
            &format!("print(h.pread({MIB}, 0) == b'C' * {MIB})")
        )
        .trim(),
        "True"
    );

    // A clean stop (SIGTERM) releases the shard: the standby takes it at
    // once, without fencing anyone.
    // SAFETY: kill(2) with a child's pid and a signal number.
    assert_eq!(unsafe { libc::kill(b.child.id() as i32, libc::SIGTERM) }, 0);
    assert!(b.child.wait().unwrap().success(), "{}", b.log());
    a2.wait_serving(Duration::from_secs(60));
    assert!(a2.log().contains("owner of shard-0"), "{}", a2.log());
    assert!(!a2.log().contains("took shard-0 over"), "{}", a2.log());
    let c = format!("print(h.pread({MIB}, 0) == b'C' * {MIB})");
    assert_eq!(nbd(&a2.uri(), &c).trim(), "True");

    // Read from the cluster itself: the cleanly stopped gateway withdrew
    // its record.
    let out = Command::new(BIN)
        .args(["--json", "gateway", "list", "--pool", POOL, "--ceph-conf"])
        .arg(&cluster.conf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(state_of(&answer, "gw-a"), "owner", "{answer}");
    assert_eq!(answer["shards"][0]["owner"], "gw-a", "{answer}");
    let ids: Vec<&str> = answer["gateways"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["gateway"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["gw-a"], "{answer}");
}

/// The state `gateway list` gives `gateway`, or "absent".
fn state_of(answer: &serde_json::Value, gateway: &str) -> String {
    answer["gateways"]
        .as_array()
        .expect("a gateway list")
        .iter()
        .find(|g| g["gateway"] == gateway)
        .map_or("absent".into(), |g| {
            g["state"].as_str().unwrap().to_string()
        })
}

/// What makes the array the same array to its clients moves with the shard:
/// the LUN identities (from the array id), the host registry (who may log
/// in, and which LUNs they see), the API token and the vVols. After the
/// owner is SIGKILLed, the standby presents LUN 0 with the same device
/// identification page to the same initiator, refuses an initiator no host
/// names, answers the old owner's token, and lists the vVol and the host
/// created through the old owner; a host created through the new owner is
/// there for the next one.
#[test]
fn the_array_identity_hosts_token_and_vvols_move_with_the_shard() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const INITIATOR: &str = "iqn.2024-01.org.example:moving-host";
    const STRANGER: &str = "iqn.2024-01.org.example:stranger";
    let cluster = TestCluster::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut a = Gateway::start(&tmp.path().join("gw-a"), &cluster.conf, "gw-a");
    a.wait_serving(Duration::from_secs(60));
    a.cli_ok(&["volume", "create", "v", "--size", "64M"]);
    a.cli_ok(&["host", "create", "esx-1", "--iqn", INITIATOR]);
    a.cli_ok(&["host", "connect", "esx-1", "v", "--lun", "0"]);
    let vvol = a.cli_ok(&[
        "--json", "vvol", "create", "--type", "data", "--size", "16M",
    ]);
    let vvol: serde_json::Value = serde_json::from_str(&vvol).unwrap();
    let vvol_id = vvol["id"].as_str().expect("a vVol id").to_string();
    let identity = a
        .iscsi_inquiry(INITIATOR, "131")
        .unwrap_or_else(|e| panic!("the host's initiator sees LUN 0: {e}"));
    assert!(identity.contains("NAA"), "a NAA designator: {identity}");
    let serial = a.iscsi_inquiry(INITIATOR, "128").unwrap();

    let mut b = Gateway::start(&tmp.path().join("gw-b"), &cluster.conf, "gw-b");
    wait_standby(&b);
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    b.wait_serving(Duration::from_secs(60));
    assert!(
        b.log().contains("took shard-0 over from gw-a"),
        "{}",
        b.log()
    );

    // The same LUN, to the same host; nothing to a stranger.
    assert_eq!(b.iscsi_inquiry(INITIATOR, "131").unwrap(), identity);
    assert_eq!(b.iscsi_inquiry(INITIATOR, "128").unwrap(), serial);
    assert!(
        b.iscsi_inquiry(STRANGER, "131").is_err(),
        "an initiator no host names sees no LUN"
    );
    // The old owner's token works on the new one.
    let hosts = b.cli_ok_as(&a.dir.join("data"), &["--json", "host", "list"]);
    assert!(
        hosts.contains("esx-1") && hosts.contains(INITIATOR),
        "{hosts}"
    );
    let vvols = b.cli_ok(&["--json", "vvol", "list"]);
    assert!(vvols.contains(&vvol_id), "the vVol moved: {vvols}");

    // A change through the new owner is the array's: a third gateway, the
    // next owner, has it.
    b.cli_ok(&["host", "create", "esx-2", "--iqn", STRANGER]);
    let mut c = Gateway::start(&tmp.path().join("gw-c"), &cluster.conf, "gw-c");
    wait_standby(&c);
    // SAFETY: kill(2) with a child's pid and a signal number.
    assert_eq!(unsafe { libc::kill(b.child.id() as i32, libc::SIGTERM) }, 0);
    assert!(b.child.wait().unwrap().success(), "{}", b.log());
    c.wait_serving(Duration::from_secs(60));
    let hosts = c.cli_ok(&["--json", "host", "list"]);
    assert!(
        hosts.contains("esx-1") && hosts.contains("esx-2"),
        "{hosts}"
    );
    assert!(c.cli_ok(&["--json", "vvol", "list"]).contains(&vvol_id));
    assert_eq!(c.iscsi_inquiry(INITIATOR, "131").unwrap(), identity);
}

/// sg3_utils' `sg_vpd` decoding of VPD page 83h bytes (`--inhex`).
fn sg_vpd_83(dir: &Path, page: &[u8]) -> String {
    let file = dir.join("vpd83.hex");
    let text: Vec<String> = page.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&file, text.join(" ") + "\n").unwrap();
    let out = Command::new("sg_vpd")
        .arg(format!("--inhex={}", file.display()))
        .arg("--page=0x83")
        .output()
        .expect("sg_vpd (sg3-utils)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_lowercase()
}

/// ALUA on two gateways (`--port-group 1` and `2`): the owner reports its
/// group active/optimized and the standby's standby; VPD 83h names the port
/// and group of the gateway asked (decoded by sg3_utils). After the owner is
/// killed the new owner reports its own group active/optimized and the dead
/// one offline; the dead one, restarted, is reported standby again.
#[test]
fn the_owners_port_group_is_active_optimized_and_moves_with_the_shard() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const INITIATOR: &str = "iqn.2024-01.org.example:multipath-host";
    const ACTIVE_OPTIMIZED: u8 = 0x0;
    const STANDBY: u8 = 0x2;
    const OFFLINE: u8 = 0xe;
    let cluster = TestCluster::start();
    let tmp = tempfile::tempdir().unwrap();
    let conf = &cluster.conf;
    let mut a = Gateway::start_in_group(&tmp.path().join("gw-a"), conf, "gw-a", Some(1));
    a.wait_serving(Duration::from_secs(60));
    a.cli_ok(&["volume", "create", "v", "--size", "64M"]);
    a.cli_ok(&["host", "create", "esx-1", "--iqn", INITIATOR]);
    a.cli_ok(&["host", "connect", "esx-1", "v", "--lun", "0"]);
    let mut b = Gateway::start_in_group(&tmp.path().join("gw-b"), conf, "gw-b", Some(2));
    let wait_for = |gateway: &Gateway, wanted: &[PortGroup]| {
        let started = Instant::now();
        loop {
            let (groups, page) = gateway.port_groups(INITIATOR);
            if groups == wanted {
                return page;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "{groups:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let page = wait_for(&a, &[(1, ACTIVE_OPTIMIZED, vec![1]), (2, STANDBY, vec![2])]);
    let decoded = sg_vpd_83(tmp.path(), &page);
    assert!(decoded.contains("relative target port: 0x1"), "{decoded}");
    assert!(decoded.contains("target port group: 0x1"), "{decoded}");

    a.child.kill().unwrap();
    a.child.wait().unwrap();
    b.wait_serving(Duration::from_secs(60));
    let page = wait_for(&b, &[(1, OFFLINE, vec![1]), (2, ACTIVE_OPTIMIZED, vec![2])]);
    let decoded = sg_vpd_83(tmp.path(), &page);
    assert!(decoded.contains("relative target port: 0x2"), "{decoded}");
    assert!(decoded.contains("target port group: 0x2"), "{decoded}");

    let _a = Gateway::start_in_group(&tmp.path().join("gw-a"), conf, "gw-a", Some(1));
    wait_for(&b, &[(1, STANDBY, vec![1]), (2, ACTIVE_OPTIMIZED, vec![2])]);
}

/// Waits until `gateway`'s log says it stands by.
fn wait_standby(gateway: &Gateway) {
    let started = Instant::now();
    while !gateway.log().contains("standby") {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{}",
            gateway.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two shards in one pool are two arrays served side by side by their own
/// gateways: each its own volumes and data, its own ALUA groups (a gateway
/// of the other shard is no path to this one's LUNs), listed with its own
/// owner. SIGKILL of one shard's owner is taken over by that shard's standby
/// while the other shard's host keeps writing and flushing, untouched.
#[test]
fn two_shards_serve_side_by_side_and_one_fails_over_without_the_other_noticing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const INITIATOR: &str = "iqn.2024-01.org.example:two-shards";
    const ACTIVE_OPTIMIZED: u8 = 0x0;
    const STANDBY: u8 = 0x2;
    let cluster = TestCluster::start();
    let tmp = tempfile::tempdir().unwrap();
    let conf = &cluster.conf;
    let start = |name: &str, group: u16, shard: &str| {
        Gateway::start_for(&tmp.path().join(name), conf, name, Some(group), Some(shard))
    };
    let mut a = start("gw-a", 1, "alpha");
    let mut b = start("gw-b", 2, "beta");
    a.wait_serving(Duration::from_secs(60));
    b.wait_serving(Duration::from_secs(60));
    assert!(a.log().contains("owner of alpha"), "{}", a.log());
    assert!(b.log().contains("owner of beta"), "{}", b.log());
    for (gateway, fill) in [(&a, "A"), (&b, "B")] {
        gateway.cli_ok(&["volume", "create", "v", "--size", "64M"]);
        gateway.cli_ok(&["host", "create", "esx-1", "--iqn", INITIATOR]);
        gateway.cli_ok(&["host", "connect", "esx-1", "v", "--lun", "0"]);
        nbd(
            &gateway.uri(),
            &format!("h.pwrite(b'{fill}' * {MIB}, 0)\nh.flush()"),
        );
    }
    let first = format!("print(h.pread({MIB}, 0)[:1].decode())");
    assert_eq!(nbd(&a.uri(), &first).trim(), "A", "alpha's own data");
    assert_eq!(nbd(&b.uri(), &first).trim(), "B", "beta's own data");
    let c = start("gw-c", 3, "alpha");
    wait_standby(&c);

    // Each owner reports its own shard's groups only: alpha's standby (3),
    // never beta's owner (2).
    let started = Instant::now();
    loop {
        let (groups, _) = a.port_groups(INITIATOR);
        if groups == [(1, ACTIVE_OPTIMIZED, vec![1]), (3, STANDBY, vec![3])] {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{groups:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(b.port_groups(INITIATOR).0, [(2, ACTIVE_OPTIMIZED, vec![2])]);
    let answer = b.gateways();
    let owners: Vec<(String, String)> = answer["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["shard"].to_string(), s["owner"].to_string()))
        .collect();
    assert_eq!(
        owners,
        [
            ("\"alpha\"".to_string(), "\"gw-a\"".to_string()),
            ("\"beta\"".to_string(), "\"gw-b\"".to_string())
        ],
        "{answer}"
    );
    assert_eq!(state_of(&answer, "gw-c"), "standby", "{answer}");
    let standby = answer["gateways"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["gateway"] == "gw-c")
        .unwrap();
    assert_eq!(standby["shard"], "alpha", "{answer}");

    // Beta's host writes and flushes all along alpha's failover.
    let writer = {
        let uri = b.uri();
        std::thread::spawn(move || {
            nbd(
                &uri,
                &format!(
                    "import time\nend = time.time() + 12\nn = 0\n\
                     while time.time() < end:\n    \
                     h.pwrite(bytes([n % 251]) * 65536, {MIB} + (n % 64) * 65536)\n    \
                     h.flush()\n    n += 1\n\
                     print(n)"
                ),
            )
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let mut c = c;
    c.wait_serving(Duration::from_secs(60));
    assert!(c.log().contains("took alpha over from gw-a"), "{}", c.log());
    assert_eq!(nbd(&c.uri(), &first).trim(), "A", "alpha moved whole");
    let flushes: u64 = writer.join().unwrap().trim().parse().unwrap();
    assert!(flushes > 0, "beta's writes went on");
    assert_eq!(nbd(&b.uri(), &first).trim(), "B", "beta untouched");
    assert!(
        b.child.try_wait().unwrap().is_none(),
        "beta's owner still serves"
    );
    let answer = b.gateways();
    assert_eq!(answer["shards"][0]["owner"], "gw-c", "{answer}");
    assert_eq!(answer["shards"][1]["owner"], "gw-b", "{answer}");
    assert_eq!(state_of(&answer, "gw-b"), "owner", "{answer}");
}
