//! iSCSI PDUs (RFC 7143 §11): the 48-byte Basic Header Segment of every opcode, additional
//! header segments, padding and CRC32C digests, and framing on a byte stream.
//!
//! Why a typed header per opcode instead of raw byte offsets everywhere: the connection code
//! then works on named fields (`cmd_sn`, `expected_data_transfer_bytes`) and a field is
//! decoded in exactly one place. Parsing is total: any 48 bytes either become a [`Header`]
//! or a [`PduError`], never a panic, and the data segment length is checked against the
//! negotiated limit before a single byte of it is buffered.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub const BHS_LEN_BYTES: usize = 48;
pub const DIGEST_LEN_BYTES: usize = 4;
/// Tags (ITT/TTT) with this value mean "no tag".
pub const RESERVED_TAG: u32 = 0xffff_ffff;
/// The data segment length field is 24 bits wide.
pub const DATA_SEGMENT_MAX_BYTES: u32 = (1 << 24) - 1;
/// TotalAHSLength is one byte of 4-byte words.
pub const AHS_MAX_BYTES: usize = 255 * 4;

/// Additional header segment type for an extended CDB (CDBs longer than 16 bytes).
pub const AHS_TYPE_EXTENDED_CDB: u8 = 1;
/// Additional header segment type for the expected bidirectional read data length.
pub const AHS_TYPE_BIDI_READ_LENGTH: u8 = 2;

#[derive(Debug, thiserror::Error)]
pub enum PduError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("header digest mismatch (received {received:#010x}, computed {computed:#010x})")]
    HeaderDigest { received: u32, computed: u32 },
    #[error("data digest mismatch (received {received:#010x}, computed {computed:#010x})")]
    DataDigest { received: u32, computed: u32 },
    #[error("data segment of {len_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    DataSegmentTooLong { len_bytes: u32, max_bytes: u32 },
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    #[error("invalid field: {0}")]
    InvalidField(&'static str),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    NopOut = 0x00,
    ScsiCommand = 0x01,
    TaskManagementRequest = 0x02,
    LoginRequest = 0x03,
    TextRequest = 0x04,
    DataOut = 0x05,
    LogoutRequest = 0x06,
    SnackRequest = 0x10,
    NopIn = 0x20,
    ScsiResponse = 0x21,
    TaskManagementResponse = 0x22,
    LoginResponse = 0x23,
    TextResponse = 0x24,
    DataIn = 0x25,
    LogoutResponse = 0x26,
    ReadyToTransfer = 0x31,
    AsyncMessage = 0x32,
    Reject = 0x3f,
}

impl Opcode {
    pub fn from_byte(byte: u8) -> Result<Opcode, PduError> {
        Ok(match byte & 0x3f {
            0x00 => Opcode::NopOut,
            0x01 => Opcode::ScsiCommand,
            0x02 => Opcode::TaskManagementRequest,
            0x03 => Opcode::LoginRequest,
            0x04 => Opcode::TextRequest,
            0x05 => Opcode::DataOut,
            0x06 => Opcode::LogoutRequest,
            0x10 => Opcode::SnackRequest,
            0x20 => Opcode::NopIn,
            0x21 => Opcode::ScsiResponse,
            0x22 => Opcode::TaskManagementResponse,
            0x23 => Opcode::LoginResponse,
            0x24 => Opcode::TextResponse,
            0x25 => Opcode::DataIn,
            0x26 => Opcode::LogoutResponse,
            0x31 => Opcode::ReadyToTransfer,
            0x32 => Opcode::AsyncMessage,
            0x3f => Opcode::Reject,
            other => return Err(PduError::UnknownOpcode(other)),
        })
    }
}

/// Reason codes of a Reject PDU (RFC 7143 §11.17.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RejectReason {
    DataDigestError = 0x02,
    SnackReject = 0x03,
    ProtocolError = 0x04,
    CommandNotSupported = 0x05,
    ImmediateCommandReject = 0x06,
    TaskInProgress = 0x07,
    InvalidDataAck = 0x08,
    InvalidPduField = 0x09,
    OutOfResources = 0x0a,
    WaitingForLogout = 0x0c,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NopOut {
    pub immediate: bool,
    pub lun: [u8; 8],
    pub initiator_task_tag: u32,
    pub target_transfer_tag: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScsiCommand {
    pub immediate: bool,
    pub final_bit: bool,
    pub read: bool,
    pub write: bool,
    /// Task attribute, 3 bits (0 untagged, 1 simple, 2 ordered, 3 head of queue, 4 ACA).
    pub attribute: u8,
    pub lun: [u8; 8],
    pub initiator_task_tag: u32,
    pub expected_data_transfer_bytes: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub cdb: [u8; 16],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskManagementRequest {
    pub immediate: bool,
    /// Function code, 7 bits (1 ABORT TASK … 8 TASK REASSIGN).
    pub function: u8,
    pub lun: [u8; 8],
    pub initiator_task_tag: u32,
    pub referenced_task_tag: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub ref_cmd_sn: u32,
    pub exp_data_sn: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginRequest {
    pub transit: bool,
    pub continue_bit: bool,
    pub current_stage: u8,
    pub next_stage: u8,
    pub version_max: u8,
    pub version_min: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub initiator_task_tag: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextRequest {
    pub immediate: bool,
    pub final_bit: bool,
    pub continue_bit: bool,
    pub lun: [u8; 8],
    pub initiator_task_tag: u32,
    pub target_transfer_tag: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataOut {
    pub final_bit: bool,
    pub lun: [u8; 8],
    pub initiator_task_tag: u32,
    pub target_transfer_tag: u32,
    pub exp_stat_sn: u32,
    pub data_sn: u32,
    pub buffer_offset: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogoutRequest {
    pub immediate: bool,
    /// 0 close the session, 1 close the connection, 2 remove the connection for recovery.
    pub reason: u8,
    pub initiator_task_tag: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnackRequest {
    pub snack_type: u8,
    pub lun: [u8; 8],
    pub initiator_task_tag: u32,
    pub target_transfer_tag: u32,
    pub exp_stat_sn: u32,
    pub begin_run: u32,
    pub run_length: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NopIn {
    pub lun: [u8; 8],
    pub initiator_task_tag: u32,
    pub target_transfer_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScsiResponse {
    pub bidi_read_overflow: bool,
    pub bidi_read_underflow: bool,
    pub residual_overflow: bool,
    pub residual_underflow: bool,
    /// iSCSI service response: 0 command completed at target, 1 target failure.
    pub response: u8,
    pub status: u8,
    pub initiator_task_tag: u32,
    pub snack_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub exp_data_sn: u32,
    pub bidi_read_residual_bytes: u32,
    pub residual_bytes: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskManagementResponse {
    pub response: u8,
    pub initiator_task_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginResponse {
    pub transit: bool,
    pub continue_bit: bool,
    pub current_stage: u8,
    pub next_stage: u8,
    pub version_max: u8,
    pub version_active: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub initiator_task_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub status_class: u8,
    pub status_detail: u8,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextResponse {
    pub final_bit: bool,
    pub continue_bit: bool,
    pub lun: [u8; 8],
    pub initiator_task_tag: u32,
    pub target_transfer_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataIn {
    pub final_bit: bool,
    pub acknowledge: bool,
    pub residual_overflow: bool,
    pub residual_underflow: bool,
    /// The S bit: this PDU carries the command's status.
    pub status_present: bool,
    pub status: u8,
    pub lun: [u8; 8],
    pub initiator_task_tag: u32,
    pub target_transfer_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data_sn: u32,
    pub buffer_offset: u32,
    pub residual_bytes: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogoutResponse {
    pub response: u8,
    pub initiator_task_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub time2wait_seconds: u16,
    pub time2retain_seconds: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyToTransfer {
    pub lun: [u8; 8],
    pub initiator_task_tag: u32,
    pub target_transfer_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub r2t_sn: u32,
    pub buffer_offset: u32,
    pub desired_transfer_bytes: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsyncMessage {
    pub lun: [u8; 8],
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub async_event: u8,
    pub async_vcode: u8,
    pub parameter1: u16,
    pub parameter2: u16,
    pub parameter3: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject {
    pub reason: u8,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data_sn: u32,
}

/// A decoded Basic Header Segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Header {
    NopOut(NopOut),
    ScsiCommand(ScsiCommand),
    TaskManagementRequest(TaskManagementRequest),
    LoginRequest(LoginRequest),
    TextRequest(TextRequest),
    DataOut(DataOut),
    LogoutRequest(LogoutRequest),
    SnackRequest(SnackRequest),
    NopIn(NopIn),
    ScsiResponse(ScsiResponse),
    TaskManagementResponse(TaskManagementResponse),
    LoginResponse(LoginResponse),
    TextResponse(TextResponse),
    DataIn(DataIn),
    LogoutResponse(LogoutResponse),
    ReadyToTransfer(ReadyToTransfer),
    AsyncMessage(AsyncMessage),
    Reject(Reject),
}

fn get_u16(bhs: &[u8; BHS_LEN_BYTES], offset: usize) -> u16 {
    u16::from_be_bytes([bhs[offset], bhs[offset + 1]])
}

fn get_u32(bhs: &[u8; BHS_LEN_BYTES], offset: usize) -> u32 {
    u32::from_be_bytes([
        bhs[offset],
        bhs[offset + 1],
        bhs[offset + 2],
        bhs[offset + 3],
    ])
}

fn get_lun(bhs: &[u8; BHS_LEN_BYTES]) -> [u8; 8] {
    let mut lun = [0u8; 8];
    lun.copy_from_slice(&bhs[8..16]);
    lun
}

fn put_u16(bhs: &mut [u8; BHS_LEN_BYTES], offset: usize, value: u16) {
    bhs[offset..offset + 2].copy_from_slice(&value.to_be_bytes());
}

fn put_u32(bhs: &mut [u8; BHS_LEN_BYTES], offset: usize, value: u32) {
    bhs[offset..offset + 4].copy_from_slice(&value.to_be_bytes());
}

fn flag(byte: u8, mask: u8) -> bool {
    byte & mask != 0
}

fn bit(value: bool, mask: u8) -> u8 {
    if value {
        mask
    } else {
        0
    }
}

/// Length of the AHS in bytes, from byte 4 (in 4-byte words).
pub fn ahs_len_bytes(bhs: &[u8; BHS_LEN_BYTES]) -> usize {
    usize::from(bhs[4]) * 4
}

/// DataSegmentLength (bytes 5..8), without padding.
pub fn data_segment_len_bytes(bhs: &[u8; BHS_LEN_BYTES]) -> u32 {
    u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]])
}

/// Bytes of padding after a data segment of `len_bytes` to reach a 4-byte boundary.
pub fn padding_len_bytes(len_bytes: usize) -> usize {
    (4 - len_bytes % 4) % 4
}

/// CRC32C as iSCSI puts it on the wire (RFC 7143 §13.1 and appendix B: least significant
/// byte first). By `crc-fast`, which runs four times the `crc32c` crate's speed on
/// data segments (see the workspace's Cargo.toml).
pub fn digest(parts: &[&[u8]]) -> u32 {
    let mut crc = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    for part in parts {
        crc.update(part);
    }
    u32::try_from(crc.finalize()).expect("a CRC32 fits 32 bits")
}

impl Header {
    pub fn opcode(&self) -> Opcode {
        match self {
            Header::NopOut(_) => Opcode::NopOut,
            Header::ScsiCommand(_) => Opcode::ScsiCommand,
            Header::TaskManagementRequest(_) => Opcode::TaskManagementRequest,
            Header::LoginRequest(_) => Opcode::LoginRequest,
            Header::TextRequest(_) => Opcode::TextRequest,
            Header::DataOut(_) => Opcode::DataOut,
            Header::LogoutRequest(_) => Opcode::LogoutRequest,
            Header::SnackRequest(_) => Opcode::SnackRequest,
            Header::NopIn(_) => Opcode::NopIn,
            Header::ScsiResponse(_) => Opcode::ScsiResponse,
            Header::TaskManagementResponse(_) => Opcode::TaskManagementResponse,
            Header::LoginResponse(_) => Opcode::LoginResponse,
            Header::TextResponse(_) => Opcode::TextResponse,
            Header::DataIn(_) => Opcode::DataIn,
            Header::LogoutResponse(_) => Opcode::LogoutResponse,
            Header::ReadyToTransfer(_) => Opcode::ReadyToTransfer,
            Header::AsyncMessage(_) => Opcode::AsyncMessage,
            Header::Reject(_) => Opcode::Reject,
        }
    }

    /// Decodes a BHS. Reserved fields are ignored; fields whose values the standard fixes
    /// (e.g. the Login Request's I bit) are not enforced here but by the state machines.
    pub fn parse(bhs: &[u8; BHS_LEN_BYTES]) -> Result<Header, PduError> {
        let opcode = Opcode::from_byte(bhs[0])?;
        let immediate = flag(bhs[0], 0x40);
        let b1 = bhs[1];
        let lun = get_lun(bhs);
        let itt = get_u32(bhs, 16);
        Ok(match opcode {
            Opcode::NopOut => Header::NopOut(NopOut {
                immediate,
                lun,
                initiator_task_tag: itt,
                target_transfer_tag: get_u32(bhs, 20),
                cmd_sn: get_u32(bhs, 24),
                exp_stat_sn: get_u32(bhs, 28),
            }),
            Opcode::ScsiCommand => {
                let mut cdb = [0u8; 16];
                cdb.copy_from_slice(&bhs[32..48]);
                Header::ScsiCommand(ScsiCommand {
                    immediate,
                    final_bit: flag(b1, 0x80),
                    read: flag(b1, 0x40),
                    write: flag(b1, 0x20),
                    attribute: b1 & 0x07,
                    lun,
                    initiator_task_tag: itt,
                    expected_data_transfer_bytes: get_u32(bhs, 20),
                    cmd_sn: get_u32(bhs, 24),
                    exp_stat_sn: get_u32(bhs, 28),
                    cdb,
                })
            }
            Opcode::TaskManagementRequest => Header::TaskManagementRequest(TaskManagementRequest {
                immediate,
                function: b1 & 0x7f,
                lun,
                initiator_task_tag: itt,
                referenced_task_tag: get_u32(bhs, 20),
                cmd_sn: get_u32(bhs, 24),
                exp_stat_sn: get_u32(bhs, 28),
                ref_cmd_sn: get_u32(bhs, 32),
                exp_data_sn: get_u32(bhs, 36),
            }),
            Opcode::LoginRequest => {
                let mut isid = [0u8; 6];
                isid.copy_from_slice(&bhs[8..14]);
                Header::LoginRequest(LoginRequest {
                    transit: flag(b1, 0x80),
                    continue_bit: flag(b1, 0x40),
                    current_stage: (b1 >> 2) & 0x03,
                    next_stage: b1 & 0x03,
                    version_max: bhs[2],
                    version_min: bhs[3],
                    isid,
                    tsih: get_u16(bhs, 14),
                    initiator_task_tag: itt,
                    cid: get_u16(bhs, 20),
                    cmd_sn: get_u32(bhs, 24),
                    exp_stat_sn: get_u32(bhs, 28),
                })
            }
            Opcode::TextRequest => Header::TextRequest(TextRequest {
                immediate,
                final_bit: flag(b1, 0x80),
                continue_bit: flag(b1, 0x40),
                lun,
                initiator_task_tag: itt,
                target_transfer_tag: get_u32(bhs, 20),
                cmd_sn: get_u32(bhs, 24),
                exp_stat_sn: get_u32(bhs, 28),
            }),
            Opcode::DataOut => Header::DataOut(DataOut {
                final_bit: flag(b1, 0x80),
                lun,
                initiator_task_tag: itt,
                target_transfer_tag: get_u32(bhs, 20),
                exp_stat_sn: get_u32(bhs, 28),
                data_sn: get_u32(bhs, 36),
                buffer_offset: get_u32(bhs, 40),
            }),
            Opcode::LogoutRequest => Header::LogoutRequest(LogoutRequest {
                immediate,
                reason: b1 & 0x7f,
                initiator_task_tag: itt,
                cid: get_u16(bhs, 20),
                cmd_sn: get_u32(bhs, 24),
                exp_stat_sn: get_u32(bhs, 28),
            }),
            Opcode::SnackRequest => Header::SnackRequest(SnackRequest {
                snack_type: b1 & 0x0f,
                lun,
                initiator_task_tag: itt,
                target_transfer_tag: get_u32(bhs, 20),
                exp_stat_sn: get_u32(bhs, 28),
                begin_run: get_u32(bhs, 40),
                run_length: get_u32(bhs, 44),
            }),
            Opcode::NopIn => Header::NopIn(NopIn {
                lun,
                initiator_task_tag: itt,
                target_transfer_tag: get_u32(bhs, 20),
                stat_sn: get_u32(bhs, 24),
                exp_cmd_sn: get_u32(bhs, 28),
                max_cmd_sn: get_u32(bhs, 32),
            }),
            Opcode::ScsiResponse => Header::ScsiResponse(ScsiResponse {
                bidi_read_overflow: flag(b1, 0x10),
                bidi_read_underflow: flag(b1, 0x08),
                residual_overflow: flag(b1, 0x04),
                residual_underflow: flag(b1, 0x02),
                response: bhs[2],
                status: bhs[3],
                initiator_task_tag: itt,
                snack_tag: get_u32(bhs, 20),
                stat_sn: get_u32(bhs, 24),
                exp_cmd_sn: get_u32(bhs, 28),
                max_cmd_sn: get_u32(bhs, 32),
                exp_data_sn: get_u32(bhs, 36),
                bidi_read_residual_bytes: get_u32(bhs, 40),
                residual_bytes: get_u32(bhs, 44),
            }),
            Opcode::TaskManagementResponse => {
                Header::TaskManagementResponse(TaskManagementResponse {
                    response: bhs[2],
                    initiator_task_tag: itt,
                    stat_sn: get_u32(bhs, 24),
                    exp_cmd_sn: get_u32(bhs, 28),
                    max_cmd_sn: get_u32(bhs, 32),
                })
            }
            Opcode::LoginResponse => {
                let mut isid = [0u8; 6];
                isid.copy_from_slice(&bhs[8..14]);
                Header::LoginResponse(LoginResponse {
                    transit: flag(b1, 0x80),
                    continue_bit: flag(b1, 0x40),
                    current_stage: (b1 >> 2) & 0x03,
                    next_stage: b1 & 0x03,
                    version_max: bhs[2],
                    version_active: bhs[3],
                    isid,
                    tsih: get_u16(bhs, 14),
                    initiator_task_tag: itt,
                    stat_sn: get_u32(bhs, 24),
                    exp_cmd_sn: get_u32(bhs, 28),
                    max_cmd_sn: get_u32(bhs, 32),
                    status_class: bhs[36],
                    status_detail: bhs[37],
                })
            }
            Opcode::TextResponse => Header::TextResponse(TextResponse {
                final_bit: flag(b1, 0x80),
                continue_bit: flag(b1, 0x40),
                lun,
                initiator_task_tag: itt,
                target_transfer_tag: get_u32(bhs, 20),
                stat_sn: get_u32(bhs, 24),
                exp_cmd_sn: get_u32(bhs, 28),
                max_cmd_sn: get_u32(bhs, 32),
            }),
            Opcode::DataIn => Header::DataIn(DataIn {
                final_bit: flag(b1, 0x80),
                acknowledge: flag(b1, 0x40),
                residual_overflow: flag(b1, 0x04),
                residual_underflow: flag(b1, 0x02),
                status_present: flag(b1, 0x01),
                status: bhs[3],
                lun,
                initiator_task_tag: itt,
                target_transfer_tag: get_u32(bhs, 20),
                stat_sn: get_u32(bhs, 24),
                exp_cmd_sn: get_u32(bhs, 28),
                max_cmd_sn: get_u32(bhs, 32),
                data_sn: get_u32(bhs, 36),
                buffer_offset: get_u32(bhs, 40),
                residual_bytes: get_u32(bhs, 44),
            }),
            Opcode::LogoutResponse => Header::LogoutResponse(LogoutResponse {
                response: bhs[2],
                initiator_task_tag: itt,
                stat_sn: get_u32(bhs, 24),
                exp_cmd_sn: get_u32(bhs, 28),
                max_cmd_sn: get_u32(bhs, 32),
                time2wait_seconds: get_u16(bhs, 40),
                time2retain_seconds: get_u16(bhs, 42),
            }),
            Opcode::ReadyToTransfer => Header::ReadyToTransfer(ReadyToTransfer {
                lun,
                initiator_task_tag: itt,
                target_transfer_tag: get_u32(bhs, 20),
                stat_sn: get_u32(bhs, 24),
                exp_cmd_sn: get_u32(bhs, 28),
                max_cmd_sn: get_u32(bhs, 32),
                r2t_sn: get_u32(bhs, 36),
                buffer_offset: get_u32(bhs, 40),
                desired_transfer_bytes: get_u32(bhs, 44),
            }),
            Opcode::AsyncMessage => Header::AsyncMessage(AsyncMessage {
                lun,
                stat_sn: get_u32(bhs, 24),
                exp_cmd_sn: get_u32(bhs, 28),
                max_cmd_sn: get_u32(bhs, 32),
                async_event: bhs[36],
                async_vcode: bhs[37],
                parameter1: get_u16(bhs, 38),
                parameter2: get_u16(bhs, 40),
                parameter3: get_u16(bhs, 42),
            }),
            Opcode::Reject => Header::Reject(Reject {
                reason: bhs[2],
                stat_sn: get_u32(bhs, 24),
                exp_cmd_sn: get_u32(bhs, 28),
                max_cmd_sn: get_u32(bhs, 32),
                data_sn: get_u32(bhs, 36),
            }),
        })
    }

    /// Encodes the BHS with the given AHS and data segment lengths.
    pub fn encode(&self, ahs_len_bytes: usize, data_len_bytes: u32) -> [u8; BHS_LEN_BYTES] {
        assert!(ahs_len_bytes.is_multiple_of(4) && ahs_len_bytes <= AHS_MAX_BYTES);
        assert!(data_len_bytes <= DATA_SEGMENT_MAX_BYTES);
        let mut bhs = [0u8; BHS_LEN_BYTES];
        bhs[0] = self.opcode() as u8;
        bhs[4] = (ahs_len_bytes / 4) as u8;
        bhs[5..8].copy_from_slice(&data_len_bytes.to_be_bytes()[1..4]);
        self.encode_fields(&mut bhs);
        bhs
    }

    fn encode_fields(&self, bhs: &mut [u8; BHS_LEN_BYTES]) {
        match self {
            Header::NopOut(h) => {
                bhs[0] |= bit(h.immediate, 0x40);
                bhs[1] = 0x80;
                bhs[8..16].copy_from_slice(&h.lun);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 20, h.target_transfer_tag);
                put_u32(bhs, 24, h.cmd_sn);
                put_u32(bhs, 28, h.exp_stat_sn);
            }
            Header::ScsiCommand(h) => {
                bhs[0] |= bit(h.immediate, 0x40);
                bhs[1] = bit(h.final_bit, 0x80)
                    | bit(h.read, 0x40)
                    | bit(h.write, 0x20)
                    | (h.attribute & 0x07);
                bhs[8..16].copy_from_slice(&h.lun);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 20, h.expected_data_transfer_bytes);
                put_u32(bhs, 24, h.cmd_sn);
                put_u32(bhs, 28, h.exp_stat_sn);
                bhs[32..48].copy_from_slice(&h.cdb);
            }
            Header::TaskManagementRequest(h) => {
                bhs[0] |= bit(h.immediate, 0x40);
                bhs[1] = 0x80 | (h.function & 0x7f);
                bhs[8..16].copy_from_slice(&h.lun);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 20, h.referenced_task_tag);
                put_u32(bhs, 24, h.cmd_sn);
                put_u32(bhs, 28, h.exp_stat_sn);
                put_u32(bhs, 32, h.ref_cmd_sn);
                put_u32(bhs, 36, h.exp_data_sn);
            }
            Header::LoginRequest(h) => {
                bhs[0] |= 0x40;
                bhs[1] = bit(h.transit, 0x80)
                    | bit(h.continue_bit, 0x40)
                    | ((h.current_stage & 0x03) << 2)
                    | (h.next_stage & 0x03);
                bhs[2] = h.version_max;
                bhs[3] = h.version_min;
                bhs[8..14].copy_from_slice(&h.isid);
                put_u16(bhs, 14, h.tsih);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u16(bhs, 20, h.cid);
                put_u32(bhs, 24, h.cmd_sn);
                put_u32(bhs, 28, h.exp_stat_sn);
            }
            Header::TextRequest(h) => {
                bhs[0] |= bit(h.immediate, 0x40);
                bhs[1] = bit(h.final_bit, 0x80) | bit(h.continue_bit, 0x40);
                bhs[8..16].copy_from_slice(&h.lun);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 20, h.target_transfer_tag);
                put_u32(bhs, 24, h.cmd_sn);
                put_u32(bhs, 28, h.exp_stat_sn);
            }
            Header::DataOut(h) => {
                bhs[1] = bit(h.final_bit, 0x80);
                bhs[8..16].copy_from_slice(&h.lun);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 20, h.target_transfer_tag);
                put_u32(bhs, 28, h.exp_stat_sn);
                put_u32(bhs, 36, h.data_sn);
                put_u32(bhs, 40, h.buffer_offset);
            }
            Header::LogoutRequest(h) => {
                bhs[0] |= bit(h.immediate, 0x40);
                bhs[1] = 0x80 | (h.reason & 0x7f);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u16(bhs, 20, h.cid);
                put_u32(bhs, 24, h.cmd_sn);
                put_u32(bhs, 28, h.exp_stat_sn);
            }
            Header::SnackRequest(h) => {
                bhs[1] = 0x80 | (h.snack_type & 0x0f);
                bhs[8..16].copy_from_slice(&h.lun);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 20, h.target_transfer_tag);
                put_u32(bhs, 28, h.exp_stat_sn);
                put_u32(bhs, 40, h.begin_run);
                put_u32(bhs, 44, h.run_length);
            }
            Header::NopIn(h) => {
                bhs[1] = 0x80;
                bhs[8..16].copy_from_slice(&h.lun);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 20, h.target_transfer_tag);
                put_u32(bhs, 24, h.stat_sn);
                put_u32(bhs, 28, h.exp_cmd_sn);
                put_u32(bhs, 32, h.max_cmd_sn);
            }
            Header::ScsiResponse(h) => {
                bhs[1] = 0x80
                    | bit(h.bidi_read_overflow, 0x10)
                    | bit(h.bidi_read_underflow, 0x08)
                    | bit(h.residual_overflow, 0x04)
                    | bit(h.residual_underflow, 0x02);
                bhs[2] = h.response;
                bhs[3] = h.status;
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 20, h.snack_tag);
                put_u32(bhs, 24, h.stat_sn);
                put_u32(bhs, 28, h.exp_cmd_sn);
                put_u32(bhs, 32, h.max_cmd_sn);
                put_u32(bhs, 36, h.exp_data_sn);
                put_u32(bhs, 40, h.bidi_read_residual_bytes);
                put_u32(bhs, 44, h.residual_bytes);
            }
            Header::TaskManagementResponse(h) => {
                bhs[1] = 0x80;
                bhs[2] = h.response;
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 24, h.stat_sn);
                put_u32(bhs, 28, h.exp_cmd_sn);
                put_u32(bhs, 32, h.max_cmd_sn);
            }
            Header::LoginResponse(h) => {
                bhs[1] = bit(h.transit, 0x80)
                    | bit(h.continue_bit, 0x40)
                    | ((h.current_stage & 0x03) << 2)
                    | (h.next_stage & 0x03);
                bhs[2] = h.version_max;
                bhs[3] = h.version_active;
                bhs[8..14].copy_from_slice(&h.isid);
                put_u16(bhs, 14, h.tsih);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 24, h.stat_sn);
                put_u32(bhs, 28, h.exp_cmd_sn);
                put_u32(bhs, 32, h.max_cmd_sn);
                bhs[36] = h.status_class;
                bhs[37] = h.status_detail;
            }
            Header::TextResponse(h) => {
                bhs[1] = bit(h.final_bit, 0x80) | bit(h.continue_bit, 0x40);
                bhs[8..16].copy_from_slice(&h.lun);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 20, h.target_transfer_tag);
                put_u32(bhs, 24, h.stat_sn);
                put_u32(bhs, 28, h.exp_cmd_sn);
                put_u32(bhs, 32, h.max_cmd_sn);
            }
            Header::DataIn(h) => {
                bhs[1] = bit(h.final_bit, 0x80)
                    | bit(h.acknowledge, 0x40)
                    | bit(h.residual_overflow, 0x04)
                    | bit(h.residual_underflow, 0x02)
                    | bit(h.status_present, 0x01);
                bhs[3] = h.status;
                bhs[8..16].copy_from_slice(&h.lun);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 20, h.target_transfer_tag);
                put_u32(bhs, 24, h.stat_sn);
                put_u32(bhs, 28, h.exp_cmd_sn);
                put_u32(bhs, 32, h.max_cmd_sn);
                put_u32(bhs, 36, h.data_sn);
                put_u32(bhs, 40, h.buffer_offset);
                put_u32(bhs, 44, h.residual_bytes);
            }
            Header::LogoutResponse(h) => {
                bhs[1] = 0x80;
                bhs[2] = h.response;
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 24, h.stat_sn);
                put_u32(bhs, 28, h.exp_cmd_sn);
                put_u32(bhs, 32, h.max_cmd_sn);
                put_u16(bhs, 40, h.time2wait_seconds);
                put_u16(bhs, 42, h.time2retain_seconds);
            }
            Header::ReadyToTransfer(h) => {
                bhs[1] = 0x80;
                bhs[8..16].copy_from_slice(&h.lun);
                put_u32(bhs, 16, h.initiator_task_tag);
                put_u32(bhs, 20, h.target_transfer_tag);
                put_u32(bhs, 24, h.stat_sn);
                put_u32(bhs, 28, h.exp_cmd_sn);
                put_u32(bhs, 32, h.max_cmd_sn);
                put_u32(bhs, 36, h.r2t_sn);
                put_u32(bhs, 40, h.buffer_offset);
                put_u32(bhs, 44, h.desired_transfer_bytes);
            }
            Header::AsyncMessage(h) => {
                bhs[1] = 0x80;
                bhs[8..16].copy_from_slice(&h.lun);
                put_u32(bhs, 16, RESERVED_TAG);
                put_u32(bhs, 24, h.stat_sn);
                put_u32(bhs, 28, h.exp_cmd_sn);
                put_u32(bhs, 32, h.max_cmd_sn);
                bhs[36] = h.async_event;
                bhs[37] = h.async_vcode;
                put_u16(bhs, 38, h.parameter1);
                put_u16(bhs, 40, h.parameter2);
                put_u16(bhs, 42, h.parameter3);
            }
            Header::Reject(h) => {
                bhs[1] = 0x80;
                bhs[2] = h.reason;
                put_u32(bhs, 16, RESERVED_TAG);
                put_u32(bhs, 24, h.stat_sn);
                put_u32(bhs, 28, h.exp_cmd_sn);
                put_u32(bhs, 32, h.max_cmd_sn);
                put_u32(bhs, 36, h.data_sn);
            }
        }
    }
}

/// Which digests a connection negotiated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digests {
    pub header: bool,
    pub data: bool,
}

/// One PDU as read from the wire: the raw BHS (kept for Reject PDUs, which echo it), the AHS
/// and the data segment without padding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawPdu {
    pub bhs: [u8; BHS_LEN_BYTES],
    pub ahs: Vec<u8>,
    pub data: Vec<u8>,
    /// Data segment bytes that went straight into their write's buffer (see
    /// [`Placement`]); `data` is then empty.
    pub placed_bytes: u32,
}

/// Where a Data-Out's data segment may go instead of a buffer of its own: the
/// buffer of the write it belongs to, when it holds the next bytes that write
/// expects. Received into a new buffer and copied into the write's, every
/// Data-Out byte was copied once more than needed (4% of the daemon's CPU in
/// 1 MiB writes, three quarters of whose bytes come as Data-Out).
pub trait Placement {
    /// Hands out the buffer of the write `itt` if `offset_bytes` is its
    /// length and `len_bytes` more are within the write's transfer length,
    /// with a token for [`Placement::give_back`].
    fn take(&self, itt: u32, offset_bytes: u32, len_bytes: u32) -> Option<(u64, Vec<u8>)>;
    /// Returns what [`Placement::take`] handed out (dropped if its write is gone).
    fn give_back(&self, itt: u32, token: u64, buffer: Vec<u8>);
}

/// Every data segment into a buffer of its own.
pub struct NoPlacement;

impl Placement for NoPlacement {
    fn take(&self, _itt: u32, _offset_bytes: u32, _len_bytes: u32) -> Option<(u64, Vec<u8>)> {
        None
    }

    fn give_back(&self, _itt: u32, _token: u64, _buffer: Vec<u8>) {
        unreachable!("nothing is handed out")
    }
}

/// A PDU whose data segment was too long: its bytes were read and dropped so the stream
/// stays in sync, and the connection can answer with a Reject.
#[derive(Debug)]
pub enum ReadOutcome {
    Pdu(RawPdu),
    DataSegmentTooLong {
        bhs: [u8; BHS_LEN_BYTES],
        len_bytes: u32,
    },
}

/// What to do with a data segment above the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Oversized {
    /// Skip it in bounded chunks and report it, keeping the stream in sync (full feature
    /// phase, where the target answers with a Reject).
    Skip,
    /// Fail at once, reading nothing more (login, where the connection just closes).
    Fail,
}

/// Reads one PDU. `max_data_bytes` is the connection's MaxRecvDataSegmentLength: longer data
/// segments are never buffered.
pub async fn read_pdu<R: AsyncRead + Unpin>(
    reader: &mut R,
    digests: Digests,
    max_data_bytes: u32,
    oversized: Oversized,
) -> Result<ReadOutcome, PduError> {
    read_pdu_placing(reader, digests, max_data_bytes, oversized, &NoPlacement).await
}

/// [`read_pdu`], with a Data-Out's data segment received straight into its
/// write's buffer when `placement` hands that out.
pub async fn read_pdu_placing<R: AsyncRead + Unpin>(
    reader: &mut R,
    digests: Digests,
    max_data_bytes: u32,
    oversized: Oversized,
    placement: &(impl Placement + ?Sized),
) -> Result<ReadOutcome, PduError> {
    let mut bhs = [0u8; BHS_LEN_BYTES];
    reader.read_exact(&mut bhs).await?;
    let data_len_bytes = data_segment_len_bytes(&bhs);
    if data_len_bytes > max_data_bytes && oversized == Oversized::Fail {
        return Err(PduError::DataSegmentTooLong {
            len_bytes: data_len_bytes,
            max_bytes: max_data_bytes,
        });
    }
    let mut ahs = vec![0u8; ahs_len_bytes(&bhs)];
    reader.read_exact(&mut ahs).await?;
    if digests.header {
        let received = read_digest(reader).await?;
        let computed = digest(&[&bhs, &ahs]);
        if received != computed {
            return Err(PduError::HeaderDigest { received, computed });
        }
    }
    let padded_len_bytes = data_len_bytes as usize + padding_len_bytes(data_len_bytes as usize);
    if data_len_bytes > max_data_bytes {
        let digest_len_bytes = if digests.data && data_len_bytes > 0 {
            DIGEST_LEN_BYTES
        } else {
            0
        };
        skip_bytes(reader, padded_len_bytes + digest_len_bytes).await?;
        return Ok(ReadOutcome::DataSegmentTooLong {
            bhs,
            len_bytes: data_len_bytes,
        });
    }
    if data_len_bytes > 0 && Opcode::from_byte(bhs[0]).ok() == Some(Opcode::DataOut) {
        let itt = get_u32(&bhs, 16);
        let offset_bytes = get_u32(&bhs, 40);
        if let Some((token, mut buffer)) = placement.take(itt, offset_bytes, data_len_bytes) {
            let result = read_placed(reader, &mut buffer, data_len_bytes, digests).await;
            if result.is_err() {
                buffer.truncate(offset_bytes as usize);
            }
            placement.give_back(itt, token, buffer);
            result?;
            return Ok(ReadOutcome::Pdu(RawPdu {
                bhs,
                ahs,
                data: Vec::new(),
                placed_bytes: data_len_bytes,
            }));
        }
    }
    let mut data = read_data_segment(reader, padded_len_bytes).await?;
    if digests.data && data_len_bytes > 0 {
        let received = read_digest(reader).await?;
        let computed = digest(&[&data]);
        if received != computed {
            return Err(PduError::DataDigest { received, computed });
        }
    }
    data.truncate(data_len_bytes as usize);
    Ok(ReadOutcome::Pdu(RawPdu {
        bhs,
        ahs,
        data,
        placed_bytes: 0,
    }))
}

/// Appends a data segment of `len_bytes` to `buffer` (which has room for it:
/// nothing is reallocated), then reads its padding and checks its digest.
async fn read_placed<R: AsyncRead + Unpin>(
    reader: &mut R,
    buffer: &mut Vec<u8>,
    len_bytes: u32,
    digests: Digests,
) -> Result<(), PduError> {
    let start = buffer.len();
    let end = start + len_bytes as usize;
    assert!(
        end <= buffer.capacity(),
        "a placement has room for its data"
    );
    let mut segment = (&mut *reader).take(u64::from(len_bytes));
    while buffer.len() < end {
        if segment.read_buf(buffer).await? == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
    }
    assert_eq!(buffer.len(), end);
    let mut padding = [0u8; 3];
    let padding = &mut padding[..padding_len_bytes(len_bytes as usize)];
    reader.read_exact(padding).await?;
    if digests.data {
        let received = read_digest(reader).await?;
        let computed = digest(&[&buffer[start..], padding]);
        if received != computed {
            return Err(PduError::DataDigest { received, computed });
        }
    }
    Ok(())
}

/// Reads exactly `len_bytes` into a new buffer, without zeroing it first: the
/// zeroing of each data segment (a whole MiB for large writes) cost about 3% of
/// the daemon's CPU in 1 MiB writes.
async fn read_data_segment<R: AsyncRead + Unpin>(
    reader: &mut R,
    len_bytes: usize,
) -> Result<Vec<u8>, PduError> {
    let mut data = Vec::with_capacity(len_bytes);
    let read_bytes = (&mut *reader)
        .take(len_bytes as u64)
        .read_to_end(&mut data)
        .await?;
    if read_bytes != len_bytes {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    Ok(data)
}

async fn read_digest<R: AsyncRead + Unpin>(reader: &mut R) -> Result<u32, PduError> {
    let mut bytes = [0u8; DIGEST_LEN_BYTES];
    reader.read_exact(&mut bytes).await?;
    Ok(u32::from_le_bytes(bytes))
}

async fn skip_bytes<R: AsyncRead + Unpin>(
    reader: &mut R,
    len_bytes: usize,
) -> Result<(), PduError> {
    const CHUNK_BYTES: usize = 64 * 1024;
    let mut chunk = vec![0u8; CHUNK_BYTES.min(len_bytes)];
    let mut left_bytes = len_bytes;
    while left_bytes > 0 {
        let step_bytes = left_bytes.min(chunk.len());
        reader.read_exact(&mut chunk[..step_bytes]).await?;
        left_bytes -= step_bytes;
    }
    Ok(())
}

/// Writes one PDU with padding and the negotiated digests. `data` may be a slice of a larger
/// buffer (Data-In splitting) so nothing is copied.
pub async fn write_pdu<W: AsyncWrite + Unpin>(
    writer: &mut W,
    header: &Header,
    ahs: &[u8],
    data: &[u8],
    digests: Digests,
) -> std::io::Result<()> {
    let framing = Framing::of(header, ahs, data, digests);
    write_all_vectored(writer, &framing.parts(ahs, data)).await
}

/// Most PDUs [`write_pdus`] puts in one `writev` (six parts each, under the
/// kernel's limit of 1024 parts a call).
pub const PDUS_PER_WRITE_MAX: usize = 128;

/// Writes `buffered` bytes and then whole PDUs (no AHS) with as few `writev`
/// calls as the socket takes: a long READ's Data-In PDUs leave together
/// rather than one system call each.
pub async fn write_pdus<W: AsyncWrite + Unpin>(
    writer: &mut W,
    buffered: &[u8],
    pdus: &[(&Header, &[u8])],
    digests: Digests,
) -> std::io::Result<()> {
    assert!(pdus.len() <= PDUS_PER_WRITE_MAX);
    let framings: Vec<Framing> = pdus
        .iter()
        .map(|(header, data)| Framing::of(header, &[], data, digests))
        .collect();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + 6 * pdus.len());
    parts.push(buffered);
    for (framing, (_, data)) in framings.iter().zip(pdus) {
        parts.extend(framing.parts(&[], data));
    }
    write_all_vectored(writer, &parts).await
}

/// What a PDU puts around its AHS and data segment on the wire: the encoded
/// BHS, the digests (each a CRC32C over what it covers, only when negotiated)
/// and the data segment's padding. One place for both ways a PDU leaves
/// ([`write_pdu`] and [`append_pdu`]), so they cannot disagree.
struct Framing {
    bhs: [u8; BHS_LEN_BYTES],
    header_digest: Option<[u8; 4]>,
    padding_bytes: usize,
    data_digest: Option<[u8; 4]>,
}

impl Framing {
    fn of(header: &Header, ahs: &[u8], data: &[u8], digests: Digests) -> Self {
        let data_len_bytes = u32::try_from(data.len()).expect("data segment length fits in u32");
        assert!(data_len_bytes <= DATA_SEGMENT_MAX_BYTES);
        let bhs = header.encode(ahs.len(), data_len_bytes);
        let padding_bytes = padding_len_bytes(data.len());
        let header_digest = digests.header.then(|| digest(&[&bhs, ahs]).to_le_bytes());
        let data_digest = (digests.data && !data.is_empty())
            .then(|| digest(&[data, &PADDING[..padding_bytes]]).to_le_bytes());
        Framing {
            bhs,
            header_digest,
            padding_bytes,
            data_digest,
        }
    }

    /// The PDU's bytes in wire order (empty parts included).
    fn parts<'a>(&'a self, ahs: &'a [u8], data: &'a [u8]) -> [&'a [u8]; 6] {
        [
            &self.bhs,
            ahs,
            self.header_digest.as_ref().map_or(&[], |d| &d[..]),
            data,
            &PADDING[..self.padding_bytes],
            self.data_digest.as_ref().map_or(&[], |d| &d[..]),
        ]
    }
}

/// Zero bytes a data segment is padded with, up to a multiple of four.
const PADDING: [u8; 3] = [0; 3];

/// Writes `parts` in order with as few calls as the writer allows: one
/// `writev` for a PDU's header and data, where `write_all` of each would put
/// the 48-byte header in a TCP segment of its own (the socket has Nagle off).
async fn write_all_vectored<W: AsyncWrite + Unpin>(
    writer: &mut W,
    parts: &[&[u8]],
) -> std::io::Result<()> {
    let mut slices: Vec<std::io::IoSlice> = parts
        .iter()
        .filter(|part| !part.is_empty())
        .map(|part| std::io::IoSlice::new(part))
        .collect();
    let mut slices = &mut slices[..];
    while !slices.is_empty() {
        let written = writer.write_vectored(slices).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut slices, written);
    }
    Ok(())
}

/// Encodes a whole PDU into one buffer (tests and raw clients).
pub fn encode_pdu(header: &Header, ahs: &[u8], data: &[u8], digests: Digests) -> Vec<u8> {
    let mut out = Vec::with_capacity(BHS_LEN_BYTES + ahs.len() + data.len() + 12);
    append_pdu(&mut out, header, ahs, data, digests);
    out
}

/// Appends a whole PDU, padding and digests included, to `out` (the target's
/// send buffer: several PDUs leave in one write).
pub fn append_pdu(out: &mut Vec<u8>, header: &Header, ahs: &[u8], data: &[u8], digests: Digests) {
    let framing = Framing::of(header, ahs, data, digests);
    for part in framing.parts(ahs, data) {
        out.extend_from_slice(part);
    }
}

/// An additional header segment: type and the bytes after its 3-byte header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ahs<'a> {
    pub ahs_type: u8,
    pub specific: &'a [u8],
}

/// Splits the AHS area into segments (RFC 7143 §11.2.2); each segment is padded to 4 bytes.
pub fn parse_ahs(ahs: &[u8]) -> Result<Vec<Ahs<'_>>, PduError> {
    let mut segments = Vec::new();
    let mut rest = ahs;
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err(PduError::InvalidField("AHS shorter than its header"));
        }
        let len_bytes = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let ahs_type = rest[2] & 0x3f;
        // The AHSLength counts the bytes after the type byte, including the reserved byte.
        if len_bytes == 0 || 3 + len_bytes > rest.len() {
            return Err(PduError::InvalidField("AHS length"));
        }
        segments.push(Ahs {
            ahs_type,
            specific: &rest[4..3 + len_bytes],
        });
        let padded_bytes = 3 + len_bytes + padding_len_bytes(3 + len_bytes);
        rest = &rest[padded_bytes.min(rest.len())..];
    }
    Ok(segments)
}

/// Encodes one AHS (used by tests and by clients of this module).
pub fn encode_ahs(ahs_type: u8, specific: &[u8]) -> Vec<u8> {
    let len_bytes = u16::try_from(specific.len() + 1).expect("AHS fits");
    let mut out = Vec::new();
    out.extend_from_slice(&len_bytes.to_be_bytes());
    out.push(ahs_type);
    out.push(0);
    out.extend_from_slice(specific);
    out.resize(out.len() + padding_len_bytes(out.len()), 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_rfc_7143_appendix_b() {
        // 32 bytes of zeros: CRC aa 36 91 8a on the wire.
        assert_eq!(
            digest(&[&[0u8; 32]]).to_le_bytes(),
            [0xaa, 0x36, 0x91, 0x8a]
        );
        // 32 bytes of 0xff: CRC 43 ab a8 62.
        assert_eq!(
            digest(&[&[0xffu8; 32]]).to_le_bytes(),
            [0x43, 0xab, 0xa8, 0x62]
        );
        // Incrementing 0x00..0x1f: CRC 4e 79 dd 46.
        let incrementing: Vec<u8> = (0u8..32).collect();
        assert_eq!(
            digest(&[&incrementing]).to_le_bytes(),
            [0x4e, 0x79, 0xdd, 0x46]
        );
        // Split input gives the same CRC as one piece.
        assert_eq!(
            digest(&[&incrementing[..7], &incrementing[7..]]),
            digest(&[&incrementing])
        );
    }

    #[test]
    fn scsi_command_round_trips_and_sits_at_rfc_offsets() {
        let header = Header::ScsiCommand(ScsiCommand {
            immediate: true,
            final_bit: true,
            read: true,
            write: false,
            attribute: 1,
            lun: lacuna_scsi::lun::Lun::single_level(3).0,
            initiator_task_tag: 0x1122_3344,
            expected_data_transfer_bytes: 4096,
            cmd_sn: 7,
            exp_stat_sn: 9,
            cdb: [0x28, 0, 0, 0, 0, 1, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0],
        });
        let bhs = header.encode(0, 0);
        assert_eq!(bhs[0], 0x41);
        assert_eq!(bhs[1], 0xc1);
        assert_eq!(&bhs[16..20], &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(&bhs[20..24], &4096u32.to_be_bytes());
        assert_eq!(bhs[32], 0x28);
        assert_eq!(Header::parse(&bhs).unwrap(), header);
    }

    #[test]
    fn data_segment_length_is_24_bits() {
        let header = Header::NopIn(NopIn {
            lun: [0; 8],
            initiator_task_tag: 1,
            target_transfer_tag: RESERVED_TAG,
            stat_sn: 1,
            exp_cmd_sn: 2,
            max_cmd_sn: 3,
        });
        let bhs = header.encode(8, 0x00ab_cdef);
        assert_eq!(bhs[4], 2);
        assert_eq!(&bhs[5..8], &[0xab, 0xcd, 0xef]);
        assert_eq!(data_segment_len_bytes(&bhs), 0x00ab_cdef);
        assert_eq!(ahs_len_bytes(&bhs), 8);
    }

    #[test]
    fn unknown_opcode_is_an_error() {
        let mut bhs = [0u8; BHS_LEN_BYTES];
        bhs[0] = 0x1c;
        assert!(matches!(
            Header::parse(&bhs),
            Err(PduError::UnknownOpcode(0x1c))
        ));
    }

    #[test]
    fn ahs_round_trips_and_rejects_bad_lengths() {
        let bidi = encode_ahs(AHS_TYPE_BIDI_READ_LENGTH, &4096u32.to_be_bytes());
        assert_eq!(bidi.len(), 8);
        let parsed = parse_ahs(&bidi).unwrap();
        assert_eq!(
            parsed,
            vec![Ahs {
                ahs_type: 2,
                specific: &4096u32.to_be_bytes()
            }]
        );
        assert!(parse_ahs(&[0, 0, 1, 0]).is_err());
        assert!(parse_ahs(&[0, 9, 1, 0, 0, 0, 0, 0]).is_err());
        assert!(parse_ahs(&[0, 1]).is_err());
    }

    #[tokio::test]
    async fn appended_pdus_are_the_bytes_write_pdu_sends() {
        let header = Header::NopIn(NopIn {
            lun: [0; 8],
            initiator_task_tag: 9,
            target_transfer_tag: RESERVED_TAG,
            stat_sn: 3,
            exp_cmd_sn: 4,
            max_cmd_sn: 5,
        });
        for (header_digest, data_digest) in
            [(false, false), (true, false), (false, true), (true, true)]
        {
            let digests = Digests {
                header: header_digest,
                data: data_digest,
            };
            for data_len in [0usize, 1, 3, 4, 4097] {
                let data: Vec<u8> = (0..data_len).map(|i| (i * 31 % 251) as u8).collect();
                let mut written = Vec::new();
                write_pdu(&mut written, &header, &[], &data, digests)
                    .await
                    .unwrap();
                let mut appended = vec![0xee];
                append_pdu(&mut appended, &header, &[], &data, digests);
                assert_eq!(appended[0], 0xee, "append keeps what was there");
                assert_eq!(&appended[1..], &written[..], "{digests:?} {data_len}");
            }
        }
    }

    /// Takes at most a few bytes a call, as a full socket does.
    struct TrickleWriter(Vec<u8>);

    impl AsyncWrite for TrickleWriter {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let len_bytes = buf.len().min(7);
            self.0.extend_from_slice(&buf[..len_bytes]);
            std::task::Poll::Ready(Ok(len_bytes))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn pdus_written_together_are_the_buffered_bytes_then_each_pdu() {
        let headers: Vec<Header> = (0..3u32)
            .map(|i| {
                Header::NopIn(NopIn {
                    lun: [0; 8],
                    initiator_task_tag: i,
                    target_transfer_tag: RESERVED_TAG,
                    stat_sn: 3 + i,
                    exp_cmd_sn: 4,
                    max_cmd_sn: 5,
                })
            })
            .collect();
        let data: Vec<Vec<u8>> = [4097usize, 0, 6]
            .iter()
            .map(|&len| (0..len).map(|i| (i * 13 % 251) as u8).collect())
            .collect();
        let pdus: Vec<(&Header, &[u8])> = headers
            .iter()
            .zip(&data)
            .map(|(header, data)| (header, &data[..]))
            .collect();
        for (header_digest, data_digest) in [(false, false), (true, true)] {
            let digests = Digests {
                header: header_digest,
                data: data_digest,
            };
            let mut expected = b"buffered".to_vec();
            for (header, data) in &pdus {
                append_pdu(&mut expected, header, &[], data, digests);
            }
            let mut together = Vec::new();
            write_pdus(&mut together, b"buffered", &pdus, digests)
                .await
                .unwrap();
            assert_eq!(together, expected, "{digests:?}");
            let mut trickle = TrickleWriter(Vec::new());
            write_pdus(&mut trickle, b"buffered", &pdus, digests)
                .await
                .unwrap();
            assert_eq!(trickle.0, expected, "a few bytes a call, {digests:?}");
        }
    }

    #[tokio::test]
    async fn pdu_with_digests_round_trips_through_a_stream() {
        let digests = Digests {
            header: true,
            data: true,
        };
        let header = Header::TextRequest(TextRequest {
            immediate: true,
            final_bit: true,
            continue_bit: false,
            lun: [0; 8],
            initiator_task_tag: 5,
            target_transfer_tag: RESERVED_TAG,
            cmd_sn: 1,
            exp_stat_sn: 1,
        });
        let bytes = encode_pdu(&header, &[], b"SendTargets=All\0", digests);
        assert_eq!(bytes.len(), 48 + 4 + 16 + 4);
        let mut reader = &bytes[..];
        let ReadOutcome::Pdu(pdu) = read_pdu(&mut reader, digests, 8192, Oversized::Skip)
            .await
            .unwrap()
        else {
            panic!("expected a PDU");
        };
        assert_eq!(pdu.data, b"SendTargets=All\0");
        assert_eq!(Header::parse(&pdu.bhs).unwrap(), header);
    }

    /// Hands out one buffer for write 9, as a connection's gathering writes do.
    struct OneBuffer(std::sync::Mutex<Option<Vec<u8>>>);

    impl Placement for OneBuffer {
        fn take(&self, itt: u32, offset_bytes: u32, len_bytes: u32) -> Option<(u64, Vec<u8>)> {
            let mut slot = self.0.lock().unwrap();
            let fits = slot.as_ref().is_some_and(|buffer| {
                buffer.len() == offset_bytes as usize
                    && buffer.len() + len_bytes as usize <= buffer.capacity()
            });
            (itt == 9 && fits).then(|| (1, slot.take().unwrap()))
        }

        fn give_back(&self, _itt: u32, token: u64, buffer: Vec<u8>) {
            assert_eq!(token, 1);
            *self.0.lock().unwrap() = Some(buffer);
        }
    }

    fn data_out(itt: u32, offset_bytes: u32) -> Header {
        Header::DataOut(DataOut {
            final_bit: true,
            lun: [0; 8],
            initiator_task_tag: itt,
            target_transfer_tag: RESERVED_TAG,
            exp_stat_sn: 1,
            data_sn: 0,
            buffer_offset: offset_bytes,
        })
    }

    #[tokio::test]
    async fn data_out_is_placed_in_its_write_with_digest_and_padding_checked() {
        let digests = Digests {
            header: true,
            data: true,
        };
        let mut buffer = Vec::with_capacity(16);
        buffer.extend_from_slice(b"abcd");
        let placement = OneBuffer(std::sync::Mutex::new(Some(buffer)));
        // Seven bytes: one of padding follows them on the wire.
        let mut stream = encode_pdu(&data_out(9, 4), &[], b"efghijk", digests);
        stream.extend(encode_pdu(&data_out(8, 11), &[], b"other", digests));
        let mut reader = &stream[..];
        let ReadOutcome::Pdu(placed) =
            read_pdu_placing(&mut reader, digests, 8192, Oversized::Skip, &placement)
                .await
                .unwrap()
        else {
            panic!("expected a PDU");
        };
        assert_eq!((placed.placed_bytes, placed.data.len()), (7, 0));
        assert_eq!(Header::parse(&placed.bhs).unwrap(), data_out(9, 4));
        // Another write's Data-Out: a buffer of its own.
        let ReadOutcome::Pdu(other) =
            read_pdu_placing(&mut reader, digests, 8192, Oversized::Skip, &placement)
                .await
                .unwrap()
        else {
            panic!("expected a PDU");
        };
        assert_eq!((other.placed_bytes, &other.data[..]), (0, &b"other"[..]));
        assert!(reader.is_empty(), "the stream stays in sync");
        assert_eq!(
            placement.0.lock().unwrap().as_deref(),
            Some(&b"abcdefghijk"[..])
        );
        // A bad data digest: an error, and the buffer as it was.
        let mut bad = encode_pdu(&data_out(9, 11), &[], b"lmno", digests);
        bad[48 + 4] ^= 1;
        let result =
            read_pdu_placing(&mut &bad[..], digests, 8192, Oversized::Skip, &placement).await;
        assert!(matches!(result, Err(PduError::DataDigest { .. })));
        assert_eq!(
            placement.0.lock().unwrap().as_deref(),
            Some(&b"abcdefghijk"[..])
        );
    }

    #[tokio::test]
    async fn corrupted_digests_are_detected() {
        let digests = Digests {
            header: true,
            data: true,
        };
        let header = Header::NopOut(NopOut {
            immediate: true,
            lun: [0; 8],
            initiator_task_tag: 1,
            target_transfer_tag: RESERVED_TAG,
            cmd_sn: 1,
            exp_stat_sn: 1,
        });
        let bytes = encode_pdu(&header, &[], b"ping", digests);
        let mut bad_header = bytes.clone();
        bad_header[20] ^= 1;
        let result = read_pdu(&mut &bad_header[..], digests, 8192, Oversized::Skip).await;
        assert!(matches!(result, Err(PduError::HeaderDigest { .. })));
        let mut bad_data = bytes.clone();
        bad_data[48 + 4] ^= 1;
        let result = read_pdu(&mut &bad_data[..], digests, 8192, Oversized::Skip).await;
        assert!(matches!(result, Err(PduError::DataDigest { .. })));
    }

    #[tokio::test]
    async fn oversized_data_segment_is_skipped_and_the_stream_stays_in_sync() {
        let digests = Digests::default();
        let header = Header::NopOut(NopOut {
            immediate: true,
            lun: [0; 8],
            initiator_task_tag: 1,
            target_transfer_tag: RESERVED_TAG,
            cmd_sn: 1,
            exp_stat_sn: 1,
        });
        let mut bytes = encode_pdu(&header, &[], &[7u8; 1001], digests);
        bytes.extend_from_slice(&encode_pdu(&header, &[], b"ok", digests));
        let mut reader = &bytes[..];
        let first = read_pdu(&mut reader, digests, 512, Oversized::Skip)
            .await
            .unwrap();
        assert!(matches!(
            first,
            ReadOutcome::DataSegmentTooLong {
                len_bytes: 1001,
                ..
            }
        ));
        let ReadOutcome::Pdu(second) = read_pdu(&mut reader, digests, 512, Oversized::Skip)
            .await
            .unwrap()
        else {
            panic!("expected a PDU");
        };
        assert_eq!(second.data, b"ok");
        let mut reader = &bytes[..];
        let strict = read_pdu(&mut reader, digests, 512, Oversized::Fail).await;
        assert!(matches!(
            strict,
            Err(PduError::DataSegmentTooLong {
                len_bytes: 1001,
                ..
            })
        ));
        assert_eq!(
            reader.len(),
            bytes.len() - BHS_LEN_BYTES,
            "nothing read past the BHS"
        );
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            /// Any 48 bytes parse or fail cleanly, and what parses re-encodes to a header
            /// that parses to the same value (every opcode round-trips).
            #[test]
            fn bhs_parse_is_total_and_round_trips(bytes in proptest::collection::vec(any::<u8>(), 48)) {
                let bhs: [u8; BHS_LEN_BYTES] = bytes.try_into().unwrap();
                if let Ok(header) = Header::parse(&bhs) {
                    let encoded = header.encode(ahs_len_bytes(&bhs), data_segment_len_bytes(&bhs));
                    prop_assert_eq!(Header::parse(&encoded).unwrap(), header);
                    prop_assert_eq!(&encoded[4..8], &bhs[4..8]);
                }
            }

            /// Framing arbitrary bytes never panics and never returns more data than the
            /// limit allows.
            #[test]
            fn read_pdu_is_bounded(
                bytes in proptest::collection::vec(any::<u8>(), 0..600),
                header_digest in any::<bool>(),
                data_digest in any::<bool>(),
            ) {
                let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
                let digests = Digests { header: header_digest, data: data_digest };
                runtime.block_on(async {
                    let mut reader = &bytes[..];
                    for _ in 0..4 {
                        match read_pdu(&mut reader, digests, 256, Oversized::Skip).await {
                            Ok(ReadOutcome::Pdu(pdu)) => {
                                assert!(pdu.data.len() <= 256);
                                assert!(pdu.ahs.len() <= AHS_MAX_BYTES);
                                let _ = parse_ahs(&pdu.ahs);
                            }
                            Ok(ReadOutcome::DataSegmentTooLong { len_bytes, .. }) => assert!(len_bytes > 256),
                            Err(_) => break,
                        }
                    }
                });
            }

            #[test]
            fn ahs_parse_is_total(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
                if let Ok(segments) = parse_ahs(&bytes) {
                    let total: usize = segments.iter().map(|s| s.specific.len()).sum();
                    prop_assert!(total <= bytes.len());
                }
            }
        }
    }
}
