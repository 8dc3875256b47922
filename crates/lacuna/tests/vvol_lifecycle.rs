//! A VM's lifecycle on vVols as a VMware host drives it, end to end: the
//! control path over the REST API (what the VASA provider does for vCenter),
//! the data path over iSCSI through the host's protocol endpoint with a raw
//! initiator (`support/vvol_host.py` on `support/raw_iscsi.py`, one session
//! held like an ESXi HBA holds it), and the daemon killed and restarted on
//! the way.
//!
//! 1. The VM's Config, two Data and a Swap vVol, made with VMware's metadata,
//!    bound in one batch: the answers name each vVol's second-level id (its
//!    object id) under the PE, and after the unit attention the PE's REPORT
//!    LUNS (SELECT REPORT 12h) lists exactly them.
//! 2. A file system on the Config vVol: an ext4 image made here (mke2fs -d),
//!    written through the subsidiary LUN and read back, checked by e2fsck and
//!    by the files debugfs reads out of it; known data on the Data disks, and
//!    on the Swap.
//! 3. The VM's disks snapshotted in one batch under dependent writes across
//!    the two Data disks (block i of A, then block i of B) from a second
//!    session: the snapshot lands in the middle of the stream and holds a
//!    prefix of it, crash-consistently across the disks; the snapshot vVols
//!    bind read-only and refuse a write with DATA PROTECT. Then a host FLUSH
//!    and SIGKILL: vVols, metadata, bindings and data are all back.
//! 4. Power off: every vVol unbound in one batch; the Swap vVol stays, emptied;
//!    the PE lists nothing beneath it. A clean restart keeps it so.
//! 5. Power on: the same Swap vVol (found by its metadata) and the other vVols
//!    bound again at the same second-level ids; the data is intact.
//! 6. Fast clones of the VM, bound: the clone's Config holds the same file
//!    system; writes to a clone do not reach its source, nor the other way.
//! 7. The VMs deleted (refused while bound; snapshots go with their base):
//!    no vVol and no engine volume or snapshot of one is left, and a SIGKILL
//!    and restart bring none back.
//!
//! Needs python3 and e2fsprogs (mke2fs, e2fsck, debugfs).

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{temp_dir, tool, Daemon, TARGET_IQN};

const CAPACITY: &str = "4G";
const ESX1: &str = "iqn.1998-01.com.vmware:esx1-lifecycle";
const PE_LUN: u64 = 3;
const MIB: u64 = 1 << 20;
const CONFIG_MIB: u64 = 256;
const DATA_MIB: u64 = 512;
const SWAP_MIB: u64 = 128;
/// The VMs' `VMW_VmID`s.
const VM: &str = "5003e2d1-7a4b-4c1e-9f00-00000000a001";
const CLONE_VM: &str = "5003e2d1-7a4b-4c1e-9f00-00000000a002";

/// Where the dependent writes go on each Data disk, in 4 KiB blocks 1, 2, …
const WRITER_OFFSET: u64 = 64 * MIB;
const WRITER_MAX_BLOCKS: u64 = 16384;
const PATTERN_BLOCK_BYTES: u64 = 4096;
// The writer's blocks lie between the known data at the head and the tail.
const _: () = assert!(
    WRITER_OFFSET >= KNOWN_HEAD_BYTES
        && WRITER_OFFSET + (WRITER_MAX_BLOCKS + 16) * PATTERN_BLOCK_BYTES <= (DATA_MIB - 1) * MIB
);
/// Pairs written before the snapshot is committed, and after it returned.
const PAIRS_AROUND_SNAPSHOT: u64 = 200;
/// Known data on the Data disks: at the start and in the last MiB.
const KNOWN_HEAD_BYTES: u64 = 4 * MIB;
const SWAP_DATA_BYTES: u64 = 8 * MIB;

// ---------------------------------------------------------------------------
// The control path: the REST API.

/// The API of one daemon run (made again after each restart: ports change).
struct Api {
    port: u16,
    dir: std::path::PathBuf,
}

impl Api {
    fn new(daemon: &Daemon) -> Api {
        Api {
            port: daemon.api_port,
            dir: daemon.dir.clone(),
        }
    }

    /// One call: its status and its body (null when empty).
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        support::api_at(self.port, &self.dir, method, path, body)
    }

    fn expect(&self, method: &str, path: &str, body: Option<&Value>, status: u16) -> Value {
        let (got, value) = self.call(method, path, body);
        assert_eq!(got, status, "{method} {path} {body:?}: {value}");
        value
    }

    fn post(&self, path: &str, body: Value) -> Value {
        self.expect("POST", path, Some(&body), 200)
    }

    fn get(&self, path: &str) -> Value {
        self.expect("GET", path, None, 200)
    }

    /// `POST /v1/vvols/info` of `ids`: each vVol's record, which must exist.
    fn infos(&self, ids: &[&str]) -> Vec<Value> {
        let items = self.post("/v1/vvols/info", json!({ "ids": ids }));
        let items = items.as_array().unwrap();
        assert_eq!(items.len(), ids.len(), "{items:?}");
        items
            .iter()
            .zip(ids)
            .map(|(item, id)| {
                assert_eq!(item["id"], *id);
                assert!(item.get("fault").is_none(), "{item}");
                item["result"].clone()
            })
            .collect()
    }

    fn written_bytes(&self, id: &str) -> Value {
        self.get(&format!("/v1/vvols/{id}/space"))["written_bytes"].clone()
    }

    /// Binds `vvols` to esx1 in one batch and checks each answer.
    fn bind(&self, vvols: &[&Vvol]) {
        let ids: Vec<&str> = vvols.iter().map(|v| v.id.as_str()).collect();
        let answers = self.post("/v1/vvols/bind", json!({ "host": "esx1", "ids": ids }));
        let answers = answers.as_array().unwrap();
        assert_eq!(answers.len(), vvols.len(), "{answers:?}");
        for (answer, vvol) in answers.iter().zip(vvols) {
            assert_eq!(answer["id"], vvol.id.as_str());
            assert!(answer.get("fault").is_none(), "{answer}");
            let binding = &answer["result"];
            assert_eq!(binding["vvol"], vvol.id.as_str(), "{binding}");
            assert_eq!(binding["host"], "esx1", "{binding}");
            assert_eq!(binding["protocol_endpoint"]["lun"], PE_LUN, "{binding}");
            assert_eq!(binding["secondary_id"], vvol.object_id, "{binding}");
            assert_eq!(binding["read_only"], vvol.read_only, "{binding}");
            assert_eq!(binding["size_bytes"], vvol.size_mib * MIB, "{binding}");
        }
    }

    /// Unbinds `vvols` from esx1 in one batch.
    fn unbind(&self, vvols: &[&Vvol]) {
        let ids: Vec<&str> = vvols.iter().map(|v| v.id.as_str()).collect();
        let answers = self.post("/v1/vvols/unbind", json!({ "host": "esx1", "ids": ids }));
        let expected: Vec<Value> = ids
            .iter()
            .map(|id| json!({ "id": id, "result": true }))
            .collect();
        assert_eq!(answers, Value::Array(expected));
    }
}

/// One vVol as the test knows it.
#[derive(Debug, Clone)]
struct Vvol {
    id: String,
    object_id: u64,
    vvol_type: &'static str,
    size_mib: u64,
    read_only: bool,
}

impl Vvol {
    /// Its subsidiary LUN under the PE, as the host agent takes LUNs.
    fn lun(&self) -> Value {
        json!([PE_LUN, self.object_id])
    }

    /// Its entry in REPORT LUNS: the PE's LUN, then long extended flat space
    /// addressing of the second-level id.
    fn lun_hex(&self) -> String {
        format!("{PE_LUN:04x}e2{:010x}", self.object_id)
    }
}

fn pe_hex() -> String {
    format!("{PE_LUN:04x}{:012x}", 0)
}

fn metadata(vm: &str, vvol_type: &str, name: &str) -> Value {
    json!({ "VMW_VmID": vm, "VMW_VVolType": vvol_type, "VMW_VVolName": name })
}

fn create(api: &Api, vvol_type: &'static str, size_mib: u64, name: &str) -> Vvol {
    let meta = metadata(VM, vvol_type, name);
    let body = json!({
        "container": "default", "vvol_type": vvol_type, "size_mib": size_mib, "metadata": meta,
    });
    let info = api.expect("POST", "/v1/vvols", Some(&body), 201);
    assert_eq!(info["vvol_type"], vvol_type, "{info}");
    assert_eq!(info["size_bytes"], size_mib * MIB, "{info}");
    assert_eq!(info["metadata"], meta, "{info}");
    assert_eq!(info["bound_hosts"], json!([]), "{info}");
    Vvol {
        id: info["id"].as_str().unwrap().to_string(),
        object_id: info["object_id"].as_u64().unwrap(),
        vvol_type,
        size_mib,
        read_only: false,
    }
}

// ---------------------------------------------------------------------------
// The data path: the host's iSCSI initiator.

/// `support/vvol_host.py`: one logged-in session as esx1, taking requests.
struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Host {
    fn start(daemon: &Daemon) -> Host {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/vvol_host.py");
        let path = format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default());
        let mut child = Command::new("python3")
            .arg(script)
            .args([&daemon.iscsi_ports[0].to_string(), TARGET_IQN, ESX1])
            .env("PATH", path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the host agent");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut host = Host {
            child,
            stdin,
            stdout,
        };
        assert_eq!(host.answer(), json!({ "ready": true }));
        host
    }

    fn answer(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the host agent died");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    fn call(&mut self, request: Value) -> Value {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
        let answer = self.answer();
        assert!(answer.get("error").is_none(), "{request}: {answer}");
        answer
    }

    /// A command's status: "good" or "STATUS KEY/ASC/ASCQ".
    fn status(&mut self, lun: Value, cdb: &str) -> String {
        let answer = self.call(json!({ "op": "command", "lun": lun, "cdb": cdb }));
        answer["status"].as_str().unwrap().to_string()
    }

    fn test_unit_ready(&mut self, lun: Value) -> String {
        self.status(lun, "000000000000")
    }

    fn clear_ua(&mut self, lun: Value) -> Vec<String> {
        let answer = self.call(json!({ "op": "clear_ua", "lun": lun }));
        serde_json::from_value(answer["cleared"].clone()).unwrap()
    }

    /// REPORT LUNS with SELECT REPORT `select`, sent to the PE.
    fn report_luns(&mut self, select: u8) -> Vec<String> {
        let answer = self.call(json!({ "op": "report_luns", "lun": [PE_LUN], "select": select }));
        serde_json::from_value(answer["luns"].clone()).unwrap()
    }

    /// After binds or unbinds: the PE tells of them (REPORTED LUNS DATA HAS
    /// CHANGED) and then lists the PE and exactly `bound` beneath it.
    fn expect_luns_changed_to(&mut self, bound: &[&Vvol]) {
        assert_eq!(
            self.test_unit_ready(json!([PE_LUN])),
            "2 06/3f/0e",
            "REPORTED LUNS DATA HAS CHANGED on the PE"
        );
        self.clear_ua(json!([PE_LUN]));
        self.expect_luns(bound);
    }

    fn expect_luns(&mut self, bound: &[&Vvol]) {
        let listed = self.report_luns(0x12);
        let unique: BTreeSet<String> = listed.iter().cloned().collect();
        assert_eq!(unique.len(), listed.len(), "listed twice: {listed:?}");
        let mut expected: BTreeSet<String> = bound.iter().map(|v| v.lun_hex()).collect();
        expected.insert(pe_hex());
        assert_eq!(unique, expected, "REPORT LUNS (12h) of the PE");
        assert_eq!(
            self.report_luns(0),
            vec![pe_hex()],
            "subsidiaries are no ordinary LUNs"
        );
    }

    fn capacity(&mut self, vvol: &Vvol) -> u64 {
        let answer = self.call(json!({ "op": "capacity", "lun": vvol.lun() }));
        assert_eq!(answer["block_bytes"], 512);
        answer["bytes"].as_u64().unwrap()
    }

    fn write_file(&mut self, vvol: &Vvol, path: &Path, offset: u64) {
        let answer = self.call(json!({
            "op": "write_file", "lun": vvol.lun(), "path": path, "offset": offset,
        }));
        assert_eq!(answer["written"], std::fs::metadata(path).unwrap().len());
    }

    fn read(&mut self, vvol: &Vvol, path: &Path, offset: u64, length: u64) -> Vec<u8> {
        self.call(json!({
            "op": "read_file", "lun": vvol.lun(), "path": path, "offset": offset, "length": length,
        }));
        std::fs::read(path).unwrap()
    }

    fn sync(&mut self, vvol: &Vvol) {
        let answer = self.call(json!({ "op": "sync", "lun": vvol.lun() }));
        assert_eq!(answer["status"], "good", "SYNCHRONIZE CACHE of {}", vvol.id);
    }

    /// The writer's blocks 1..=`count` of `vvol`: the value each holds.
    fn pattern_values(&mut self, vvol: &Vvol, count: u64) -> Vec<i64> {
        let answer = self.call(json!({
            "op": "blocks", "lun": vvol.lun(), "offset": WRITER_OFFSET, "count": count,
        }));
        serde_json::from_value(answer["values"].clone()).unwrap()
    }

    /// How many pairs the writer has written; fails on its error.
    fn writer_done(&mut self) -> u64 {
        let progress = self.call(json!({ "op": "writer_progress" }));
        assert!(
            progress["failure"].is_null(),
            "the writer failed: {progress}"
        );
        assert_eq!(
            progress["running"], true,
            "the writer ended early: {progress}"
        );
        progress["done"].as_u64().unwrap()
    }

    fn wait_writer(&mut self, pairs: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let done = self.writer_done();
            if done >= pairs {
                return done;
            }
            assert!(Instant::now() < deadline, "the writer is stuck at {done}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Logs out and ends, as a host shutting down its HBA.
    fn close(mut self) {
        drop(self.stdin.take());
        assert!(
            self.child.wait().unwrap().success(),
            "the host agent failed"
        );
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// Checks of what the disks hold.

/// Deterministic bytes that differ by `seed` and do not compress.
fn noise(seed: u64, len: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len / 8)
        .flat_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()
        })
        .collect()
}

fn assert_same(got: &[u8], expected: &[u8], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: length");
    if let Some(at) = got.iter().zip(expected).position(|(a, b)| a != b) {
        panic!("{what}: the first difference is at byte {at}");
    }
}

/// e2fsprogs live in sbin, which a test's PATH may lack.
fn e2fsprogs(name: &str) -> String {
    ["/usr/sbin", "/sbin", "/usr/bin"]
        .iter()
        .map(|dir| format!("{dir}/{name}"))
        .find(|path| Path::new(path).exists())
        .unwrap_or_else(|| name.to_string())
}

fn run_ok(program: &str, args: &[&str]) -> Vec<u8> {
    let out = tool(&e2fsprogs(program), args);
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}; e2fsprogs installed?):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The VM's home: an ext4 image of the Config vVol's size holding `FILES`.
struct VmHome {
    image: PathBuf,
    bytes: Vec<u8>,
    files: Vec<(&'static str, Vec<u8>)>,
}

impl VmHome {
    fn make(work: &Path) -> VmHome {
        let vmx = b".encoding = \"UTF-8\"\nconfig.version = \"8\"\nvirtualHW.version = \"19\"\n\
            displayName = \"vm-life\"\nmemSize = \"4096\"\nscsi0:0.fileName = \"vm-life.vmdk\"\n\
            scsi0:1.fileName = \"vm-life_1.vmdk\"\nsched.swap.derivedName = \"vm-life.vswp\"\n";
        let files: Vec<(&'static str, Vec<u8>)> = vec![
            ("vm-life.vmx", vmx.to_vec()),
            ("vm-life.nvram", noise(11, 270_336)),
            ("vm-life.vmsd", Vec::new()),
            ("logs/vmware.log", noise(12, 3 * MIB + 4096)),
        ];
        let tree = work.join("vm-home");
        for (name, bytes) in &files {
            let path = tree.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        let image = work.join("config.img");
        let file = std::fs::File::create(&image).unwrap();
        file.set_len(CONFIG_MIB * MIB).unwrap();
        drop(file);
        run_ok(
            "mke2fs",
            &[
                "-q",
                "-F",
                "-t",
                "ext4",
                "-L",
                "vm-life",
                "-d",
                tree.to_str().unwrap(),
                image.to_str().unwrap(),
            ],
        );
        let home = VmHome {
            bytes: std::fs::read(&image).unwrap(),
            image,
            files,
        };
        home.check_file_system(&home.image);
        home
    }

    /// e2fsck finds the file system in `image` clean, and debugfs reads each
    /// file out of it as it was made.
    fn check_file_system(&self, image: &Path) {
        let image = image.to_str().unwrap();
        run_ok("e2fsck", &["-fn", image]);
        for (name, bytes) in &self.files {
            let cat = format!("cat /{name}");
            let got = run_ok("debugfs", &["-R", &cat, image]);
            assert_same(&got, bytes, &format!("{name} in {image}"));
        }
    }

    /// Reads a Config vVol whole through its LUN and checks it holds this.
    fn check_on(&self, host: &mut Host, vvol: &Vvol, work: &Path, what: &str) {
        let copy = work.join(format!("{what}.img"));
        let read = host.read(vvol, &copy, 0, CONFIG_MIB * MIB);
        assert_same(&read, &self.bytes, what);
        drop(read);
        self.check_file_system(&copy);
        std::fs::remove_file(copy).unwrap();
    }
}

/// Known data of a Data disk: its head and its last MiB.
struct Known {
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl Known {
    fn new(seed: u64) -> Known {
        Known {
            head: noise(seed, KNOWN_HEAD_BYTES),
            tail: noise(seed + 1000, MIB),
        }
    }

    fn write_to(&self, host: &mut Host, vvol: &Vvol, work: &Path) {
        let file = work.join("known");
        std::fs::write(&file, &self.head).unwrap();
        host.write_file(vvol, &file, 0);
        std::fs::write(&file, &self.tail).unwrap();
        host.write_file(vvol, &file, DATA_MIB * MIB - MIB);
    }

    fn check_on(&self, host: &mut Host, vvol: &Vvol, work: &Path, what: &str) {
        let file = work.join("known-read");
        let head = host.read(vvol, &file, 0, KNOWN_HEAD_BYTES);
        assert_same(&head, &self.head, &format!("{what}: the head"));
        let tail = host.read(vvol, &file, DATA_MIB * MIB - MIB, MIB);
        assert_same(&tail, &self.tail, &format!("{what}: the last MiB"));
    }
}

/// How many of the writer's blocks `values` holds: blocks 1..=n hold 1..=n
/// and every block after them is unwritten.
fn written_prefix(values: &[i64], what: &str) -> u64 {
    let n = values
        .iter()
        .enumerate()
        .take_while(|(k, v)| **v == *k as i64 + 1)
        .count();
    if let Some(k) = values[n..].iter().position(|v| *v != 0) {
        panic!(
            "{what}: blocks 1..={n} written, then block {} holds {} (a hole or a torn write)",
            n + k + 1,
            values[n + k]
        );
    }
    n as u64
}

fn cli_json(daemon: &Daemon, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let text = daemon.cli_ok(&all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
}

/// SIGKILL, then a start on the same directory.
fn crash_and_restart(daemon: Daemon, dir: &Path) -> Daemon {
    let mut daemon = daemon;
    daemon.kill();
    drop(daemon);
    Daemon::start_with(dir, CAPACITY)
}

/// SIGTERM (the daemon flushes and stops), then a start on the same directory.
fn stop_and_restart(daemon: Daemon, dir: &Path) -> Daemon {
    let mut daemon = daemon;
    let pid = daemon.child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    let exit = loop {
        if let Some(exit) = daemon.child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "a clean stop: {exit}\n{}", daemon.log());
    drop(daemon);
    Daemon::start_with(dir, CAPACITY)
}

#[test]
fn a_vms_lifecycle_as_a_host_drives_it_over_the_api_and_iscsi() {
    let started = Instant::now();
    let dir = temp_dir("vvol-life");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let home = VmHome::make(&work);
    let mut daemon = Daemon::start_with(dir.path(), CAPACITY);
    daemon.cli_ok(&["host", "create", "esx1", "--iqn", ESX1]);
    daemon.cli_ok(&[
        "host",
        "protocol-endpoint",
        "esx1",
        "--lun",
        &PE_LUN.to_string(),
    ]);
    let mut api = Api::new(&daemon);
    let mut host = Host::start(&daemon);
    host.clear_ua(json!([PE_LUN]));
    host.expect_luns(&[]);

    // 1. The VM's vVols, bound in one batch.
    let config = create(&api, "Config", CONFIG_MIB, "vm-life");
    let disk_a = create(&api, "Data", DATA_MIB, "vm-life.vmdk");
    let disk_b = create(&api, "Data", DATA_MIB, "vm-life_1.vmdk");
    let swap = create(&api, "Swap", SWAP_MIB, "vm-life.vswp");
    let vm = [&config, &disk_a, &disk_b, &swap];
    let object_ids: BTreeSet<u64> = vm.iter().map(|v| v.object_id).collect();
    assert_eq!(object_ids.len(), 4, "an object id each: {vm:?}");
    api.bind(&vm);
    host.expect_luns_changed_to(&vm);
    for vvol in vm {
        assert_eq!(host.capacity(vvol), vvol.size_mib * MIB, "{vvol:?}");
    }
    for info in api.infos(&[&config.id, &disk_a.id, &disk_b.id, &swap.id]) {
        assert_eq!(info["bound_hosts"], json!(["esx1"]), "{info}");
    }
    eprintln!("[{:?}] 1. bound", started.elapsed());

    // 2. A file system on the Config vVol, data on the others.
    host.write_file(&config, &home.image, 0);
    home.check_on(&mut host, &config, &work, "config");
    let known_a = Known::new(1);
    let known_b = Known::new(2);
    known_a.write_to(&mut host, &disk_a, &work);
    known_b.write_to(&mut host, &disk_b, &work);
    known_a.check_on(&mut host, &disk_a, &work, "disk A");
    known_b.check_on(&mut host, &disk_b, &work, "disk B");
    let swap_data = noise(3, SWAP_DATA_BYTES);
    let swap_file = work.join("swap");
    std::fs::write(&swap_file, &swap_data).unwrap();
    host.write_file(&swap, &swap_file, 0);
    let read = host.read(&swap, &work.join("swap-read"), 0, SWAP_DATA_BYTES);
    assert_same(&read, &swap_data, "the swap");
    let swap_written = api.written_bytes(&swap.id).as_u64().unwrap();
    assert!(swap_written >= SWAP_DATA_BYTES, "{swap_written}");
    eprintln!("[{:?}] 2. file system installed", started.elapsed());

    // 3. The disks snapshotted in one batch while a second session writes
    // block i of A, then block i of B.
    host.call(json!({
        "op": "writer_start", "lun_a": disk_a.lun(), "lun_b": disk_b.lun(),
        "offset": WRITER_OFFSET, "count": WRITER_MAX_BLOCKS,
    }));
    let before_prepare = host.wait_writer(PAIRS_AROUND_SNAPSHOT);
    let disks = [&config, &disk_a, &disk_b];
    let prepared: Vec<String> = disks
        .iter()
        .map(|vvol| {
            let path = format!("/v1/vvols/{}/prepare-snapshot", vvol.id);
            let prepared = api.post(&path, json!({}));
            assert_eq!(prepared["base"], vvol.id.as_str(), "{prepared}");
            assert_eq!(prepared["kind"], "ReadOnly", "{prepared}");
            prepared["snapshot_id"].as_str().unwrap().to_string()
        })
        .collect();
    let snapshot_meta = |vvol: &Vvol| json!({ "VMW_VmID": VM, "VMW_VVolType": vvol.vvol_type, "VMW_SnapshotOf": vvol.id });
    let batch: Vec<Value> = prepared
        .iter()
        .zip(disks)
        .map(|(id, vvol)| json!({ "snapshot_id": id, "metadata": snapshot_meta(vvol) }))
        .collect();
    let before_commit = host.writer_done();
    let commit = api.post(
        "/v1/vvols/snapshot",
        json!({ "snapshots": batch, "timeout_ms": 10_000 }),
    );
    let after_commit = host.writer_done();
    let results = commit["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{commit}");
    let snapshots: Vec<Vvol> = results
        .iter()
        .zip(disks)
        .zip(&prepared)
        .map(|((item, base), id)| {
            assert!(item.get("fault").is_none(), "{item}");
            let info = &item["result"];
            assert_eq!(info["id"], id.as_str(), "{info}");
            assert_eq!(
                info["snapshot"],
                json!({ "base": base.id, "kind": "ReadOnly" })
            );
            assert_eq!(info["parent"], base.id.as_str(), "{info}");
            assert_eq!(info["vvol_type"], base.vvol_type, "{info}");
            assert_eq!(info["size_bytes"], base.size_mib * MIB, "{info}");
            assert_eq!(info["metadata"], snapshot_meta(base), "{info}");
            Vvol {
                id: id.clone(),
                object_id: info["object_id"].as_u64().unwrap(),
                vvol_type: base.vvol_type,
                size_mib: base.size_mib,
                read_only: true,
            }
        })
        .collect();
    host.wait_writer(after_commit + PAIRS_AROUND_SNAPSHOT);
    let stopped = host.call(json!({ "op": "writer_stop" }));
    assert!(stopped["failure"].is_null(), "{stopped}");
    assert_eq!(stopped["running"], false, "{stopped}");
    let written = stopped["done"].as_u64().unwrap();
    assert!(written >= after_commit + PAIRS_AROUND_SNAPSHOT, "{stopped}");
    assert!(written < WRITER_MAX_BLOCKS, "the writer ran out of blocks");
    eprintln!(
        "[{:?}] 3. snapshot committed after pair {before_commit} (prepared after \
         {before_prepare}), returned at {after_commit}, {} µs held; {written} pairs written",
        started.elapsed(),
        commit["commit_window_us"]
    );

    let [config_snap, snap_a, snap_b] = [&snapshots[0], &snapshots[1], &snapshots[2]];
    api.bind(&[config_snap, snap_a, snap_b]);
    let all_bound: Vec<&Vvol> = vm.iter().copied().chain(&snapshots).collect();
    host.expect_luns_changed_to(&all_bound);
    host.clear_ua(snap_a.lun());
    let write = host.call(json!({
        "op": "command", "lun": snap_a.lun(), "cdb": "8a000000000000000000000000080000",
        "data_out": "00".repeat(4096),
    }));
    assert_eq!(
        write["status"], "2 07/27/00",
        "a snapshot vVol is write protected (DATA PROTECT)"
    );
    for snapshot in &snapshots {
        assert_eq!(host.capacity(snapshot), snapshot.size_mib * MIB);
    }
    // The snapshot holds a prefix of the write stream: every B block it has,
    // A's block too, and no write acknowledged before the commit is missing,
    // none issued after it returned is there.
    let read_blocks = written + 16;
    let in_snapshot_a = written_prefix(&host.pattern_values(snap_a, read_blocks), "snapshot A");
    let in_snapshot_b = written_prefix(&host.pattern_values(snap_b, read_blocks), "snapshot B");
    assert!(
        in_snapshot_b <= in_snapshot_a && in_snapshot_a <= in_snapshot_b + 1,
        "not crash-consistent: A up to {in_snapshot_a}, B up to {in_snapshot_b}"
    );
    assert!(
        before_commit <= in_snapshot_b && in_snapshot_a <= after_commit + 1,
        "snapshot at A {in_snapshot_a} / B {in_snapshot_b}, committed between pairs \
         {before_commit} and {after_commit}"
    );
    assert!(
        in_snapshot_a > 0 && in_snapshot_b < written,
        "the snapshot saw some of the writes, not all"
    );
    eprintln!("    the snapshot holds A 1..={in_snapshot_a}, B 1..={in_snapshot_b}");
    home.check_on(&mut host, config_snap, &work, "config snapshot");
    known_a.check_on(&mut host, snap_a, &work, "snapshot A");
    known_b.check_on(&mut host, snap_b, &work, "snapshot B");

    // The host flushes, then the array dies; everything is back after it.
    for vvol in vm {
        host.sync(vvol);
    }
    let all_ids: Vec<&str> = all_bound.iter().map(|v| v.id.as_str()).collect();
    let before_crash = api.infos(&all_ids);
    drop(host);
    daemon = crash_and_restart(daemon, dir.path());
    api = Api::new(&daemon);
    assert_eq!(api.infos(&all_ids), before_crash, "vVols after a SIGKILL");
    let query = api.post("/v1/vvols/query", json!({ "metadata": { "VMW_VmID": VM } }));
    let found: BTreeSet<&str> = query["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(found, all_ids.iter().copied().collect(), "by VMW_VmID");
    let mut host = Host::start(&daemon);
    host.clear_ua(json!([PE_LUN]));
    host.expect_luns(&all_bound);
    home.check_on(&mut host, &config, &work, "config after the crash");
    for (disk, snapshot, in_snapshot, name) in [
        (&disk_a, snap_a, in_snapshot_a, "A"),
        (&disk_b, snap_b, in_snapshot_b, "B"),
    ] {
        let values = host.pattern_values(disk, read_blocks);
        assert_eq!(
            written_prefix(&values, name),
            written,
            "disk {name} after the crash"
        );
        let values = host.pattern_values(snapshot, read_blocks);
        assert_eq!(
            written_prefix(&values, name),
            in_snapshot,
            "snapshot {name} after the crash"
        );
    }
    let read = host.read(&swap, &work.join("swap-read"), 0, SWAP_DATA_BYTES);
    assert_same(&read, &swap_data, "the swap after the crash");
    eprintln!("[{:?}] 3. crash survived", started.elapsed());

    // 4. Power off: everything unbound in one batch; the swap is emptied.
    api.unbind(&all_bound);
    host.expect_luns_changed_to(&[]);
    assert_eq!(
        host.test_unit_ready(disk_a.lun()),
        "2 05/25/00",
        "an unbound vVol is no LUN"
    );
    assert_eq!(api.written_bytes(&swap.id), 0, "the swap is emptied");
    for vvol in [&config, &disk_a, &disk_b] {
        let bytes = api.written_bytes(&vvol.id).as_u64().unwrap();
        assert!(bytes > MIB, "{} keeps its data: {bytes}", vvol.vvol_type);
    }
    let powered_off = api.infos(&all_ids);
    for info in &powered_off {
        assert_eq!(info["bound_hosts"], json!([]), "{info}");
    }
    host.close();
    daemon = stop_and_restart(daemon, dir.path());
    api = Api::new(&daemon);
    assert_eq!(api.infos(&all_ids), powered_off, "after a clean restart");
    assert_eq!(api.written_bytes(&swap.id), 0);
    let mut host = Host::start(&daemon);
    host.clear_ua(json!([PE_LUN]));
    host.expect_luns(&[]);
    eprintln!("[{:?}] 4. powered off", started.elapsed());

    // 5. Power on: the same swap vVol, found by its metadata; the same LUNs.
    let swap_query = json!({ "metadata": { "VMW_VmID": VM, "VMW_VVolType": "Swap" } });
    assert_eq!(
        api.post("/v1/vvols/query", swap_query)["ids"],
        json!([swap.id])
    );
    api.bind(&vm);
    host.expect_luns_changed_to(&vm);
    home.check_on(&mut host, &config, &work, "config after power on");
    for (disk, known, name) in [(&disk_a, &known_a, "A"), (&disk_b, &known_b, "B")] {
        known.check_on(
            &mut host,
            disk,
            &work,
            &format!("disk {name} after power on"),
        );
        let values = host.pattern_values(disk, read_blocks);
        assert_eq!(written_prefix(&values, name), written, "disk {name}");
    }
    let read = host.read(&swap, &work.join("swap-read"), 0, SWAP_DATA_BYTES);
    assert!(read.iter().all(|b| *b == 0), "the swap reads empty");
    assert_eq!(host.capacity(&swap), SWAP_MIB * MIB);
    eprintln!("[{:?}] 5. powered on", started.elapsed());

    // 6. Fast clones of the VM, bound and used.
    let clones: Vec<Vvol> = vm
        .iter()
        .map(|source| {
            let name = format!("clone of {}", source.id);
            let meta = metadata(CLONE_VM, source.vvol_type, &name);
            let info = api.expect(
                "POST",
                &format!("/v1/vvols/{}/clone", source.id),
                Some(&json!({ "fast": true, "metadata": meta })),
                201,
            );
            assert_eq!(info["parent"], source.id.as_str(), "{info}");
            assert_eq!(info["vvol_type"], source.vvol_type, "{info}");
            assert_eq!(info["size_bytes"], source.size_mib * MIB, "{info}");
            assert_eq!(info["metadata"], meta, "{info}");
            assert!(info["snapshot"].is_null(), "{info}");
            Vvol {
                id: info["id"].as_str().unwrap().to_string(),
                object_id: info["object_id"].as_u64().unwrap(),
                vvol_type: source.vvol_type,
                size_mib: source.size_mib,
                read_only: false,
            }
        })
        .collect();
    let query = api.post(
        "/v1/vvols/query",
        json!({ "metadata": { "VMW_VmID": CLONE_VM } }),
    );
    let found: BTreeSet<&str> = query["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let clone_ids: BTreeSet<&str> = clones.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(found, clone_ids, "the clone VM by its VMW_VmID");
    let clone_vm: Vec<&Vvol> = clones.iter().collect();
    api.bind(&clone_vm);
    let both_vms: Vec<&Vvol> = vm.iter().copied().chain(&clones).collect();
    host.expect_luns_changed_to(&both_vms);
    let (clone_config, clone_a, clone_b) = (&clones[0], &clones[1], &clones[2]);
    home.check_on(&mut host, clone_config, &work, "the clone's config");
    known_a.check_on(&mut host, clone_a, &work, "clone A");
    let values = host.pattern_values(clone_b, read_blocks);
    assert_eq!(written_prefix(&values, "clone B"), written);
    // A write to a clone does not reach its source, nor one to a source its clone.
    let changed = Known::new(4);
    changed.write_to(&mut host, clone_a, &work);
    changed.check_on(&mut host, clone_a, &work, "clone A written");
    known_a.check_on(
        &mut host,
        &disk_a,
        &work,
        "disk A after its clone was written",
    );
    changed.write_to(&mut host, &disk_b, &work);
    known_b.check_on(
        &mut host,
        clone_b,
        &work,
        "clone B after its source was written",
    );
    eprintln!("[{:?}] 6. cloned", started.elapsed());

    // 7. Both VMs deleted.
    let (status, answer) = api.call("DELETE", &format!("/v1/vvols/{}", config.id), None);
    assert_eq!(status, 409, "a bound vVol is not deleted: {answer}");
    api.unbind(&both_vms);
    host.expect_luns_changed_to(&[]);
    for vvol in vm {
        api.expect("DELETE", &format!("/v1/vvols/{}", vvol.id), None, 204);
    }
    for gone in vm.iter().copied().chain(&snapshots) {
        let (status, answer) = api.call("GET", &format!("/v1/vvols/{}", gone.id), None);
        assert_eq!(status, 404, "{} deleted: {answer}", gone.id);
    }
    let clone_id_list: Vec<&str> = clones.iter().map(|c| c.id.as_str()).collect();
    api.infos(&clone_id_list);
    for clone in &clones {
        api.expect("DELETE", &format!("/v1/vvols/{}", clone.id), None, 204);
    }
    let nothing_left = |daemon: &Daemon, when: &str| {
        assert_eq!(cli_json(daemon, &["vvol", "list"]), json!([]), "{when}");
        for args in [
            &["volume", "list"][..],
            &["volume", "list", "--destroyed"],
            &["snapshot", "list"],
            &["snapshot", "list", "--destroyed"],
        ] {
            let listed = cli_json(daemon, args);
            assert!(listed.is_array(), "{args:?}: {listed}");
            assert!(
                !listed.to_string().contains("vvol-"),
                "{when}: {args:?} names a vVol's volume: {listed}"
            );
        }
    };
    nothing_left(&daemon, "after the deletes");
    drop(host);
    daemon = crash_and_restart(daemon, dir.path());
    nothing_left(&daemon, "after a SIGKILL");
    let api = Api::new(&daemon);
    let (status, _) = api.call("GET", &format!("/v1/vvols/{}", swap.id), None);
    assert_eq!(status, 404);
    let mut host = Host::start(&daemon);
    host.clear_ua(json!([PE_LUN]));
    host.expect_luns(&[]);
    host.close();
    eprintln!("[{:?}] 7. deleted", started.elapsed());
}
