//! NBD wire constants and the small encode/decode helpers shared by the handshake
//! and transmission phases (NetworkBlockDevice `doc/proto.md`).

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const CLIENT_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const CLIENT_NO_ZEROES: u32 = 1 << 1;

pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;

pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_SEND_DF: u16 = 1 << 7;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const TFLAG_SEND_CACHE: u16 = 1 << 10;
pub const TFLAG_SEND_FAST_ZERO: u16 = 1 << 11;

pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;

/// The one metadata context served.
pub const BASE_ALLOCATION: &str = "base:allocation";
pub const BASE_ALLOCATION_ID: u32 = 1;

/// Largest option payload accepted during the handshake; longer ones end the
/// connection (nothing legitimate comes close).
pub const MAX_OPTION_BYTES: u32 = 64 * 1024;
/// Largest READ / WRITE payload (advertised as the maximum block size).
pub const MAX_PAYLOAD_BYTES: u32 = 32 * 1024 * 1024;
/// Preferred block size advertised: the engine's grain.
pub const PREFERRED_BLOCK_BYTES: u32 = 4096;
/// Most extents sent in one block-status reply.
pub const MAX_STATUS_EXTENTS: usize = 16 * 1024;
/// Longest extent one block-status descriptor can carry, grain aligned.
pub const MAX_EXTENT_BYTES: u64 = 0xFFFF_F000;

/// Encodes a simple reply header (data for a successful READ follows it).
pub fn simple_reply(cookie: u64, error: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out
}

/// Appends one structured reply chunk.
pub fn structured_chunk(out: &mut Vec<u8>, cookie: u64, flags: u16, kind: u16, payload: &[u8]) {
    out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    let length = u32::try_from(payload.len()).expect("chunk payloads are bounded");
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(payload);
}

/// A structured error chunk (with DONE) carrying a message for the client's log.
pub fn structured_error(out: &mut Vec<u8>, cookie: u64, error: u32, message: &str) {
    let message = &message.as_bytes()[..message.len().min(1024)];
    let mut payload = Vec::with_capacity(6 + message.len());
    payload.extend_from_slice(&error.to_be_bytes());
    payload.extend_from_slice(&(message.len() as u16).to_be_bytes());
    payload.extend_from_slice(message);
    structured_chunk(out, cookie, REPLY_FLAG_DONE, REPLY_TYPE_ERROR, &payload);
}

/// A transmission-phase request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

pub const REQUEST_BYTES: usize = 28;

impl Request {
    /// Decodes a header; None when the magic is wrong (the stream is lost).
    pub fn decode(bytes: &[u8; REQUEST_BYTES]) -> Option<Request> {
        let magic = u32::from_be_bytes(bytes[0..4].try_into().expect("4"));
        if magic != REQUEST_MAGIC {
            return None;
        }
        Some(Request {
            flags: u16::from_be_bytes(bytes[4..6].try_into().expect("2")),
            kind: u16::from_be_bytes(bytes[6..8].try_into().expect("2")),
            cookie: u64::from_be_bytes(bytes[8..16].try_into().expect("8")),
            offset: u64::from_be_bytes(bytes[16..24].try_into().expect("8")),
            length: u32::from_be_bytes(bytes[24..28].try_into().expect("4")),
        })
    }

    pub fn encode(&self) -> [u8; REQUEST_BYTES] {
        let mut out = [0u8; REQUEST_BYTES];
        out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.kind.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..28].copy_from_slice(&self.length.to_be_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_and_rejects_bad_magic() {
        let r = Request {
            flags: CMD_FLAG_FUA,
            kind: CMD_WRITE,
            cookie: 0xdead_beef_0000_0001,
            offset: 1 << 40,
            length: 4096,
        };
        let mut bytes = r.encode();
        assert_eq!(Request::decode(&bytes), Some(r));
        bytes[0] ^= 1;
        assert_eq!(Request::decode(&bytes), None);
    }

    #[test]
    fn structured_error_chunk_layout() {
        let mut out = Vec::new();
        structured_error(&mut out, 7, EINVAL, "bad");
        assert_eq!(out.len(), 20 + 6 + 3);
        assert_eq!(&out[0..4], &STRUCTURED_REPLY_MAGIC.to_be_bytes());
        assert_eq!(u16::from_be_bytes([out[4], out[5]]), REPLY_FLAG_DONE);
        assert_eq!(u16::from_be_bytes([out[6], out[7]]), REPLY_TYPE_ERROR);
        assert_eq!(u32::from_be_bytes(out[16..20].try_into().unwrap()), 9);
        assert_eq!(u32::from_be_bytes(out[20..24].try_into().unwrap()), EINVAL);
    }
}
