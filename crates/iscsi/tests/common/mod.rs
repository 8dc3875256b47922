//! Shared by the integration tests: an in-memory SCSI disk (a test double of the SCSI layer,
//! which is built separately) and a target served on loopback in a background runtime.
//!
//! The double answers just enough of SPC/SBC for the initiator tools: INQUIRY (standard and
//! VPD 00h/80h/83h/B0h), READ CAPACITY 10/16, TEST UNIT READY, REPORT LUNS, READ/WRITE
//! 6/10/12/16, WRITE AND VERIFY 10/12/16, SYNCHRONIZE CACHE 10/16, MODE SENSE 6, and
//! ILLEGAL REQUEST for everything else.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use lacuna_iscsi::{AccessPolicy, ChapRequirement, OpenAccess, TargetConfig};
use lacuna_scsi::lun::Lun;
use lacuna_scsi::target::{
    Command, CommandOutcome, ItNexus, ScsiStatus, ScsiTarget, TaskManagementFunction,
    TaskManagementResponse,
};
use parking_lot::Mutex;

/// The only LUN the test target serves.
const LUN_0: Lun = Lun([0; 8]);

pub const BLOCK_BYTES: usize = 512;
pub const TARGET_IQN: &str = "iqn.2024-01.org.lacuna:test-double";
pub const INITIATOR_IQN: &str = "iqn.2024-01.org.lacuna:initiator";

/// An in-memory disk at LUN 0.
pub struct MemoryDisk {
    data: Mutex<Vec<u8>>,
    pub nexus_created: AtomicUsize,
    pub nexus_dropped: AtomicUsize,
    pub commands: AtomicUsize,
    /// Sleep before answering each command (for abort tests).
    pub delay: Mutex<Duration>,
    /// Sleep in `nexus_created` (for login tests).
    pub nexus_created_delay: Mutex<Duration>,
    /// Sleep in `nexus_dropped` before it counts (a slow teardown).
    pub nexus_dropped_delay: Mutex<Duration>,
    /// Each command waits (for up to ten seconds) until its nexus is closing,
    /// like a SANITIZE without IMMED.
    pub hold_until_closing: AtomicBool,
    pub closing: AtomicBool,
    /// Commands in `execute` now, and the most there at once.
    pub running: AtomicUsize,
    pub most_running: AtomicUsize,
    /// LBAs [start, end) whose data stands for data on a slow disk: a read
    /// from memory of them gives up, and `execute` of a read touching them
    /// sleeps `cold_read_delay` first.
    pub cold: Mutex<Option<(u64, u64)>>,
    pub cold_read_delay: Mutex<Duration>,
    /// READs answered by `execute_from_memory`.
    pub reads_from_memory: AtomicUsize,
}

impl MemoryDisk {
    pub fn new(blocks: usize) -> MemoryDisk {
        MemoryDisk {
            data: Mutex::new(vec![0u8; blocks * BLOCK_BYTES]),
            nexus_created: AtomicUsize::new(0),
            nexus_dropped: AtomicUsize::new(0),
            commands: AtomicUsize::new(0),
            delay: Mutex::new(Duration::ZERO),
            nexus_created_delay: Mutex::new(Duration::ZERO),
            nexus_dropped_delay: Mutex::new(Duration::ZERO),
            hold_until_closing: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            most_running: AtomicUsize::new(0),
            cold: Mutex::new(None),
            cold_read_delay: Mutex::new(Duration::ZERO),
            reads_from_memory: AtomicUsize::new(0),
        }
    }

    pub fn blocks(&self) -> u64 {
        (self.data.lock().len() / BLOCK_BYTES) as u64
    }

    pub fn read_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        self.data.lock()[offset..offset + len].to_vec()
    }
}

fn good(data_in: Vec<u8>) -> CommandOutcome {
    CommandOutcome {
        status: ScsiStatus::Good,
        data_in,
        sense: Vec::new(),
    }
}

fn check_condition(key: u8, asc: u8, ascq: u8) -> CommandOutcome {
    let mut sense = vec![0u8; 18];
    sense[0] = 0x70;
    sense[2] = key;
    sense[7] = 10;
    sense[12] = asc;
    sense[13] = ascq;
    CommandOutcome {
        status: ScsiStatus::CheckCondition,
        data_in: Vec::new(),
        sense,
    }
}

fn illegal_request(asc: u8) -> CommandOutcome {
    check_condition(0x05, asc, 0)
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

fn truncate(mut data: Vec<u8>, allocation_bytes: usize) -> Vec<u8> {
    data.truncate(allocation_bytes);
    data
}

impl MemoryDisk {
    fn inquiry(&self, cdb: &[u8]) -> CommandOutcome {
        let allocation = be(&cdb[3..5]) as usize;
        if cdb[1] & 1 == 0 {
            if cdb[2] != 0 {
                return illegal_request(0x24);
            }
            let mut data = vec![0u8; 36];
            data[2] = 0x06; // SPC-4
            data[3] = 0x02;
            data[4] = 31;
            data[7] = 0x02; // CmdQue
            data[8..16].copy_from_slice(b"LACUNA  ");
            data[16..32].copy_from_slice(b"TEST DOUBLE     ");
            data[32..36].copy_from_slice(b"0001");
            return good(truncate(data, allocation));
        }
        let page: Vec<u8> = match cdb[2] {
            0x00 => vec![0x00, 0x80, 0x83, 0xb0, 0xb1],
            0x80 => b"LACUNA0001".to_vec(),
            0x83 => {
                let mut naa = vec![0x01, 0x03, 0x00, 0x08];
                naa.extend_from_slice(&[0x60, 0x01, 0x40, 0x5a, 0xc0, 0xff, 0xee, 0x01]);
                naa
            }
            0xb0 => {
                let mut limits = vec![0u8; 0x3c];
                // MAXIMUM TRANSFER LENGTH in blocks (bytes 8..12): 8 MiB.
                limits[8..12].copy_from_slice(&16384u32.to_be_bytes());
                limits
            }
            0xb1 => {
                let mut characteristics = vec![0u8; 0x3c];
                characteristics[1] = 1; // non-rotating medium
                characteristics
            }
            _ => return illegal_request(0x24),
        };
        let mut data = vec![0x00, cdb[2]];
        data.extend_from_slice(&(page.len() as u16).to_be_bytes());
        data.extend_from_slice(&page);
        good(truncate(data, allocation))
    }

    fn read_capacity_10(&self) -> CommandOutcome {
        let last = (self.blocks() - 1).min(u64::from(u32::MAX)) as u32;
        let mut data = last.to_be_bytes().to_vec();
        data.extend_from_slice(&(BLOCK_BYTES as u32).to_be_bytes());
        good(data)
    }

    fn read_capacity_16(&self, cdb: &[u8]) -> CommandOutcome {
        let allocation = be(&cdb[10..14]) as usize;
        let mut data = vec![0u8; 32];
        data[0..8].copy_from_slice(&(self.blocks() - 1).to_be_bytes());
        data[8..12].copy_from_slice(&(BLOCK_BYTES as u32).to_be_bytes());
        good(truncate(data, allocation))
    }

    fn report_luns(&self, cdb: &[u8]) -> CommandOutcome {
        let allocation = be(&cdb[6..10]) as usize;
        let mut data = vec![0, 0, 0, 8, 0, 0, 0, 0];
        data.extend_from_slice(&[0u8; 8]);
        good(truncate(data, allocation))
    }

    fn mode_sense_6(&self, cdb: &[u8]) -> CommandOutcome {
        let allocation = usize::from(cdb[4]);
        good(truncate(vec![3, 0, 0, 0], allocation))
    }

    /// (LBA, blocks) of a READ/WRITE/WRITE AND VERIFY CDB.
    fn lba_and_blocks(cdb: &[u8]) -> (u64, u64) {
        match cdb[0] {
            0x08 | 0x0a => {
                let lba = be(&cdb[1..4]) & 0x1f_ffff;
                let blocks = if cdb[4] == 0 { 256 } else { u64::from(cdb[4]) };
                (lba, blocks)
            }
            0x28 | 0x2a | 0x2e => (be(&cdb[2..6]), be(&cdb[7..9])),
            0xa8 | 0xaa | 0xae => (be(&cdb[2..6]), be(&cdb[6..10])),
            _ => (be(&cdb[2..10]), be(&cdb[10..14])),
        }
    }

    fn check_range(&self, lba: u64, blocks: u64) -> Option<CommandOutcome> {
        let end = lba.checked_add(blocks)?;
        if end > self.blocks() {
            return Some(illegal_request(0x21));
        }
        None
    }

    /// Whether a READ CDB touches the cold range.
    fn touches_cold(&self, cdb: &[u8]) -> bool {
        let (lba, blocks) = Self::lba_and_blocks(cdb);
        let cold = *self.cold.lock();
        cold.is_some_and(|(start, end)| lba < end && lba.saturating_add(blocks) > start)
    }

    fn read(&self, cdb: &[u8]) -> CommandOutcome {
        let (lba, blocks) = Self::lba_and_blocks(cdb);
        if let Some(error) = self.check_range(lba, blocks) {
            return error;
        }
        let offset = lba as usize * BLOCK_BYTES;
        good(self.read_bytes(offset, blocks as usize * BLOCK_BYTES))
    }

    /// Writes at most what the CDB asks for and at most what arrived.
    fn write(&self, cdb: &[u8], data_out: &[u8]) -> CommandOutcome {
        let (lba, blocks) = Self::lba_and_blocks(cdb);
        if let Some(error) = self.check_range(lba, blocks) {
            return error;
        }
        let offset = lba as usize * BLOCK_BYTES;
        let len = data_out.len().min(blocks as usize * BLOCK_BYTES);
        self.data.lock()[offset..offset + len].copy_from_slice(&data_out[..len]);
        good(Vec::new())
    }
}

impl MemoryDisk {
    /// `execute` proper, once counted as running.
    fn execute_counted(&self, _nexus: &ItNexus, command: Command<'_>) -> CommandOutcome {
        self.commands.fetch_add(1, Ordering::SeqCst);
        let delay = *self.delay.lock();
        if !delay.is_zero() {
            thread::sleep(delay);
        }
        if self.hold_until_closing.load(Ordering::SeqCst) {
            for _ in 0..1000 {
                if self.closing.load(Ordering::SeqCst) {
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
        let cdb = command.cdb;
        if cdb.is_empty() {
            return illegal_request(0x20);
        }
        if command.lun != LUN_0 && cdb[0] != 0x12 && cdb[0] != 0xa0 {
            return illegal_request(0x25);
        }
        match cdb[0] {
            0x00 => good(Vec::new()),
            0x12 => self.inquiry(cdb),
            0x25 => self.read_capacity_10(),
            0x9e if cdb[1] & 0x1f == 0x10 => self.read_capacity_16(cdb),
            0xa0 => self.report_luns(cdb),
            0x1a => self.mode_sense_6(cdb),
            0x35 | 0x91 => good(Vec::new()),
            // PERSISTENT RESERVE IN: no keys, no reservation (the harness asks at setup).
            0x5e => good(truncate(vec![0u8; 8], be(&cdb[7..9]) as usize)),
            // REPORT SUPPORTED OPERATION CODES, all commands: an empty list.
            0xa3 if cdb[1] & 0x1f == 0x0c && cdb[2] & 0x07 == 0 => {
                good(truncate(vec![0u8; 4], be(&cdb[6..10]) as usize))
            }
            0x08 | 0x28 | 0xa8 | 0x88 => {
                if self.touches_cold(cdb) {
                    thread::sleep(*self.cold_read_delay.lock());
                }
                self.read(cdb)
            }
            0x0a | 0x2a | 0xaa | 0x8a | 0x2e | 0xae | 0x8e => self.write(cdb, command.data_out),
            _ => illegal_request(0x20),
        }
    }
}

impl ScsiTarget for MemoryDisk {
    fn nexus_created(&self, _nexus: &ItNexus) {
        thread::sleep(*self.nexus_created_delay.lock());
        self.nexus_created.fetch_add(1, Ordering::SeqCst);
    }

    fn nexus_closing(&self, _nexus: &ItNexus) {
        self.closing.store(true, Ordering::SeqCst);
    }

    fn nexus_dropped(&self, _nexus: &ItNexus) {
        thread::sleep(*self.nexus_dropped_delay.lock());
        self.nexus_dropped.fetch_add(1, Ordering::SeqCst);
    }

    fn execute(&self, nexus: &ItNexus, command: Command<'_>) -> CommandOutcome {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_running.fetch_max(now, Ordering::SeqCst);
        let outcome = self.execute_counted(nexus, command);
        self.running.fetch_sub(1, Ordering::SeqCst);
        outcome
    }

    fn execute_from_memory(&self, nexus: &ItNexus, command: Command<'_>) -> Option<CommandOutcome> {
        let read = matches!(command.cdb.first(), Some(0x08 | 0x28 | 0xa8 | 0x88));
        if !read || command.lun != LUN_0 || self.touches_cold(command.cdb) {
            return None;
        }
        self.reads_from_memory.fetch_add(1, Ordering::SeqCst);
        Some(self.execute(nexus, command))
    }

    fn data_out_bytes(&self, _nexus: &ItNexus, _lun: Lun, cdb: &[u8]) -> Option<u64> {
        match cdb.first()? {
            0x0a | 0x2a | 0xaa | 0x8a | 0x2e | 0xae | 0x8e => {
                Some(Self::lba_and_blocks(cdb).1 * BLOCK_BYTES as u64)
            }
            _ => None,
        }
    }

    fn task_management(
        &self,
        _nexus: &ItNexus,
        lun: Lun,
        function: TaskManagementFunction,
    ) -> TaskManagementResponse {
        match function {
            TaskManagementFunction::TargetWarmReset | TaskManagementFunction::TargetColdReset => {
                TaskManagementResponse::FunctionComplete
            }
            _ if lun.canonical() != LUN_0 => TaskManagementResponse::LunDoesNotExist,
            _ => TaskManagementResponse::FunctionComplete,
        }
    }
}

/// A policy for tests: optionally CHAP for everyone, optionally only known initiators.
pub struct TestPolicy {
    pub chap: ChapRequirement,
    pub known: Vec<String>,
}

impl AccessPolicy for TestPolicy {
    fn chap_for(&self, _initiator_name: &str) -> ChapRequirement {
        self.chap.clone()
    }

    fn initiator_known(&self, initiator_name: &str) -> bool {
        self.known.iter().any(|known| known == initiator_name)
    }
}

/// A target served on loopback from a background runtime; shut down on drop.
pub struct TestServer {
    pub portals: Vec<SocketAddr>,
    pub disk: Arc<MemoryDisk>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl TestServer {
    pub fn start() -> TestServer {
        TestServer::start_with(test_config(), Arc::new(OpenAccess), 1)
    }

    pub fn start_with(
        config: TargetConfig,
        policy: Arc<dyn AccessPolicy>,
        portal_count: usize,
    ) -> TestServer {
        let disk = Arc::new(MemoryDisk::new(128 * 1024));
        let (portals_tx, portals_rx) = std::sync::mpsc::channel();
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let scsi: Arc<dyn ScsiTarget> = disk.clone();
        let thread = thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let mut listeners = Vec::new();
                for _ in 0..portal_count {
                    listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
                }
                let portals: Vec<SocketAddr> =
                    listeners.iter().map(|l| l.local_addr().unwrap()).collect();
                portals_tx.send(portals).unwrap();
                let shutdown = async move {
                    let _ = shutdown_rx.await;
                };
                lacuna_iscsi::serve(listeners, scsi, policy, Arc::new(config), shutdown)
                    .await
                    .expect("serve");
            });
        });
        let portals = portals_rx.recv().expect("server started");
        TestServer {
            portals,
            disk,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        }
    }

    /// Starts shutdown without waiting for it.
    pub fn begin_shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    pub fn port(&self) -> u16 {
        self.portals[0].port()
    }

    pub fn url(&self, lun: u32) -> String {
        format!("iscsi://127.0.0.1:{}/{}/{}", self.port(), TARGET_IQN, lun)
    }

    pub fn portal_url(&self, index: usize, lun: u32) -> String {
        format!(
            "iscsi://127.0.0.1:{}/{}/{}",
            self.portals[index].port(),
            TARGET_IQN,
            lun
        )
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub fn test_config() -> TargetConfig {
    let mut config = TargetConfig::for_array("test-double");
    config.allow_unknown_initiators = true;
    config.timeouts.shutdown_grace = Duration::from_millis(200);
    assert_eq!(config.target_name, TARGET_IQN);
    config
}

/// Runs a tool and returns (success, stdout + stderr).
pub fn run_tool(program: &str, args: &[&str]) -> (bool, String) {
    run_tool_env(program, args, &[])
}

pub fn run_tool_env(program: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut command = std::process::Command::new(program);
    command.args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{program}: {error}"));
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

pub fn tool_available(program: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A blocking raw iSCSI client for negative tests: sends hand-built PDUs, reads replies.
pub struct RawClient {
    pub stream: std::net::TcpStream,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub itt: u32,
    /// Digests in use (set after a login that negotiated them).
    pub digests: lacuna_iscsi::pdu::Digests,
}

/// One received PDU: parsed header, raw BHS and data segment.
pub struct Received {
    pub header: lacuna_iscsi::pdu::Header,
    pub bhs: [u8; 48],
    pub data: Vec<u8>,
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> RawClient {
        let stream = std::net::TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        RawClient {
            stream,
            cmd_sn: 1,
            exp_stat_sn: 0,
            itt: 1,
            digests: Default::default(),
        }
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.stream.write_all(bytes).expect("send");
    }

    pub fn send(&mut self, header: &lacuna_iscsi::pdu::Header, data: &[u8]) {
        let bytes = lacuna_iscsi::pdu::encode_pdu(header, &[], data, self.digests);
        self.send_bytes(&bytes);
    }

    /// Reads one PDU; `None` on EOF or timeout.
    pub fn receive(&mut self) -> Option<Received> {
        use std::io::Read;
        let mut bhs = [0u8; 48];
        self.stream.read_exact(&mut bhs).ok()?;
        let ahs_len = lacuna_iscsi::pdu::ahs_len_bytes(&bhs);
        let data_len = lacuna_iscsi::pdu::data_segment_len_bytes(&bhs) as usize;
        let padded = data_len + lacuna_iscsi::pdu::padding_len_bytes(data_len);
        let header_digest = if self.digests.header { 4 } else { 0 };
        let data_digest = if self.digests.data && data_len > 0 {
            4
        } else {
            0
        };
        let mut rest = vec![0u8; ahs_len + header_digest + padded + data_digest];
        self.stream.read_exact(&mut rest).ok()?;
        if self.digests.header {
            let received = u32::from_le_bytes(rest[ahs_len..ahs_len + 4].try_into().unwrap());
            let computed = lacuna_iscsi::pdu::digest(&[&bhs, &rest[..ahs_len]]);
            assert_eq!(received, computed, "target sent a bad header digest");
        }
        let data_start = ahs_len + header_digest;
        if data_digest > 0 {
            let end = data_start + padded;
            let received = u32::from_le_bytes(rest[end..end + 4].try_into().unwrap());
            let computed = lacuna_iscsi::pdu::digest(&[&rest[data_start..end]]);
            assert_eq!(received, computed, "target sent a bad data digest");
        }
        let data = rest[data_start..data_start + data_len].to_vec();
        let header = lacuna_iscsi::pdu::Header::parse(&bhs).expect("target sends valid PDUs");
        Some(Received { header, bhs, data })
    }

    /// True when the target closed the connection (EOF within the read timeout).
    pub fn closed_by_target(&mut self) -> bool {
        use std::io::Read;
        let mut byte = [0u8; 1];
        matches!(self.stream.read(&mut byte), Ok(0))
            || {
                matches!(self.stream.read(&mut byte), Err(ref e) if e.kind() == std::io::ErrorKind::ConnectionReset)
            }
    }

    pub fn next_itt(&mut self) -> u32 {
        self.itt += 1;
        self.itt
    }

    /// One Login Request; returns the Login Response and its text.
    pub fn login_step(
        &mut self,
        isid: [u8; 6],
        csg: u8,
        nsg: u8,
        transit: bool,
        text: &[(&str, &str)],
    ) -> (lacuna_iscsi::pdu::LoginResponse, lacuna_iscsi::text::Pairs) {
        let mut pairs = lacuna_iscsi::text::Pairs::default();
        for (key, value) in text {
            pairs.push(key, value);
        }
        let header = lacuna_iscsi::pdu::Header::LoginRequest(lacuna_iscsi::pdu::LoginRequest {
            transit,
            continue_bit: false,
            current_stage: csg,
            next_stage: nsg,
            version_max: 0,
            version_min: 0,
            isid,
            tsih: 0,
            initiator_task_tag: self.itt,
            cid: 0,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
        });
        self.send(&header, &pairs.encode());
        let received = self.receive().expect("login response");
        let lacuna_iscsi::pdu::Header::LoginResponse(response) = received.header else {
            panic!("expected a Login Response, got {:?}", received.header);
        };
        self.exp_stat_sn = response.stat_sn.wrapping_add(1);
        let text = lacuna_iscsi::text::parse(&received.data, 65536).expect("valid text");
        (response, text)
    }

    /// Logs in to a normal session without authentication, straight to full feature phase.
    pub fn login_normal(
        &mut self,
        initiator: &str,
        isid: [u8; 6],
    ) -> lacuna_iscsi::pdu::LoginResponse {
        self.login_normal_receiving(initiator, isid, 65536)
    }

    /// `login_normal`, declaring the longest data segment this client takes
    /// (the target's Data-In are cut to it).
    pub fn login_normal_receiving(
        &mut self,
        initiator: &str,
        isid: [u8; 6],
        max_recv_data_segment_bytes: u32,
    ) -> lacuna_iscsi::pdu::LoginResponse {
        let max_recv = max_recv_data_segment_bytes.to_string();
        let (response, _) = self.login_step(
            isid,
            1,
            3,
            true,
            &[
                ("InitiatorName", initiator),
                ("TargetName", TARGET_IQN),
                ("SessionType", "Normal"),
                ("MaxRecvDataSegmentLength", &max_recv),
            ],
        );
        assert_eq!(
            (response.status_class, response.status_detail),
            (0, 0),
            "login failed"
        );
        response
    }

    /// A non-immediate NOP-Out ping; returns the NOP-In answer.
    pub fn ping(&mut self) -> Option<lacuna_iscsi::pdu::NopIn> {
        let itt = self.next_itt();
        let header = lacuna_iscsi::pdu::Header::NopOut(lacuna_iscsi::pdu::NopOut {
            immediate: false,
            lun: [0; 8],
            initiator_task_tag: itt,
            target_transfer_tag: lacuna_iscsi::pdu::RESERVED_TAG,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
        });
        self.send(&header, b"ping");
        self.cmd_sn += 1;
        loop {
            let received = self.receive()?;
            if let lacuna_iscsi::pdu::Header::NopIn(nop) = received.header {
                if nop.initiator_task_tag == itt {
                    assert_eq!(received.data, b"ping");
                    self.exp_stat_sn = nop.stat_sn.wrapping_add(1);
                    return Some(nop);
                }
            }
        }
    }

    /// A SCSI command with optional immediate data; returns every PDU up to the status.
    pub fn scsi_command(
        &mut self,
        cdb: &[u8],
        read_bytes: u32,
        write_data: &[u8],
    ) -> Vec<Received> {
        let mut cdb16 = [0u8; 16];
        cdb16[..cdb.len()].copy_from_slice(cdb);
        let itt = self.next_itt();
        let header = lacuna_iscsi::pdu::Header::ScsiCommand(lacuna_iscsi::pdu::ScsiCommand {
            immediate: false,
            final_bit: true,
            read: read_bytes > 0,
            write: !write_data.is_empty(),
            attribute: 1,
            lun: [0; 8],
            initiator_task_tag: itt,
            expected_data_transfer_bytes: read_bytes.max(write_data.len() as u32),
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            cdb: cdb16,
        });
        self.send(&header, write_data);
        self.cmd_sn += 1;
        let mut replies = Vec::new();
        while let Some(received) = self.receive() {
            let done = match &received.header {
                lacuna_iscsi::pdu::Header::ScsiResponse(_) => true,
                lacuna_iscsi::pdu::Header::DataIn(data_in) => data_in.status_present,
                _ => false,
            };
            replies.push(received);
            if done {
                break;
            }
        }
        replies
    }
}
