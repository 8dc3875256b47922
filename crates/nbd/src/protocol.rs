//! Wire format of the NBD protocol (fixed newstyle handshake, simple and
//! structured replies): constants, and pure encode/decode functions over byte
//! slices so that they can be unit tested without sockets.
//!
//! All integers are big-endian on the wire.

// Magic numbers.
/// "NBDMAGIC": the first 8 bytes the server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": sent by the server after NBDMAGIC and by the client before each option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Prefix of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server, 16 bits).
pub const NBD_FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const NBD_FLAG_NO_ZEROES: u16 = 1 << 1;

// Client flags (32 bits).
pub const NBD_FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const NBD_FLAG_C_NO_ZEROES: u32 = 1 << 1;
pub const CLIENT_FLAGS_KNOWN: u32 = NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES;

// Transmission flags (16 bits).
pub const NBD_FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
pub const NBD_FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const NBD_FLAG_SEND_FUA: u16 = 1 << 3;
pub const NBD_FLAG_ROTATIONAL: u16 = 1 << 4;
pub const NBD_FLAG_SEND_TRIM: u16 = 1 << 5;
pub const NBD_FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const NBD_FLAG_SEND_DF: u16 = 1 << 7;
pub const NBD_FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const NBD_FLAG_SEND_RESIZE: u16 = 1 << 9;
pub const NBD_FLAG_SEND_CACHE: u16 = 1 << 10;
pub const NBD_FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Options.
pub const NBD_OPT_EXPORT_NAME: u32 = 1;
pub const NBD_OPT_ABORT: u32 = 2;
pub const NBD_OPT_LIST: u32 = 3;
pub const NBD_OPT_STARTTLS: u32 = 5;
pub const NBD_OPT_INFO: u32 = 6;
pub const NBD_OPT_GO: u32 = 7;
pub const NBD_OPT_STRUCTURED_REPLY: u32 = 8;
pub const NBD_OPT_LIST_META_CONTEXT: u32 = 9;
pub const NBD_OPT_SET_META_CONTEXT: u32 = 10;
pub const NBD_OPT_EXTENDED_HEADERS: u32 = 11;

// Option reply types.
pub const NBD_REP_ACK: u32 = 1;
pub const NBD_REP_SERVER: u32 = 2;
pub const NBD_REP_INFO: u32 = 3;
pub const NBD_REP_META_CONTEXT: u32 = 4;
const NBD_REP_FLAG_ERROR: u32 = 1 << 31;
pub const NBD_REP_ERR_UNSUP: u32 = NBD_REP_FLAG_ERROR | 1;
pub const NBD_REP_ERR_POLICY: u32 = NBD_REP_FLAG_ERROR | 2;
pub const NBD_REP_ERR_INVALID: u32 = NBD_REP_FLAG_ERROR | 3;
pub const NBD_REP_ERR_TLS_REQD: u32 = NBD_REP_FLAG_ERROR | 5;
pub const NBD_REP_ERR_UNKNOWN: u32 = NBD_REP_FLAG_ERROR | 6;
pub const NBD_REP_ERR_TOO_BIG: u32 = NBD_REP_FLAG_ERROR | 9;

// Information types of NBD_REP_INFO.
pub const NBD_INFO_EXPORT: u16 = 0;
pub const NBD_INFO_NAME: u16 = 1;
pub const NBD_INFO_DESCRIPTION: u16 = 2;
pub const NBD_INFO_BLOCK_SIZE: u16 = 3;

// Commands.
pub const NBD_CMD_READ: u16 = 0;
pub const NBD_CMD_WRITE: u16 = 1;
pub const NBD_CMD_DISC: u16 = 2;
pub const NBD_CMD_FLUSH: u16 = 3;
pub const NBD_CMD_TRIM: u16 = 4;
pub const NBD_CMD_CACHE: u16 = 5;
pub const NBD_CMD_WRITE_ZEROES: u16 = 6;
pub const NBD_CMD_BLOCK_STATUS: u16 = 7;

// Command flags.
pub const NBD_CMD_FLAG_FUA: u16 = 1 << 0;
pub const NBD_CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const NBD_CMD_FLAG_DF: u16 = 1 << 2;
pub const NBD_CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const NBD_CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply flags and types.
pub const NBD_REPLY_FLAG_DONE: u16 = 1 << 0;
pub const NBD_REPLY_TYPE_NONE: u16 = 0;
pub const NBD_REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const NBD_REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const NBD_REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const NBD_REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;

// base:allocation status flags.
pub const NBD_STATE_HOLE: u32 = 1 << 0;
pub const NBD_STATE_ZERO: u32 = 1 << 1;

/// The one metadata context this server implements.
pub const BASE_ALLOCATION: &str = "base:allocation";
/// The namespace prefix that, as a `NBD_OPT_LIST_META_CONTEXT` query, lists every
/// context in `base:`.
pub const BASE_NAMESPACE: &str = "base:";

// Error values (as numbered by the protocol).
pub const NBD_EPERM: u32 = 1;
pub const NBD_EIO: u32 = 5;
pub const NBD_ENOMEM: u32 = 12;
pub const NBD_EINVAL: u32 = 22;
pub const NBD_ENOSPC: u32 = 28;
pub const NBD_EOVERFLOW: u32 = 75;
pub const NBD_ENOTSUP: u32 = 95;
pub const NBD_ESHUTDOWN: u32 = 108;

// Sizes of fixed wire structures.
pub const SERVER_GREETING_BYTES: usize = 18;
pub const OPTION_HEADER_BYTES: usize = 16;
pub const REQUEST_HEADER_BYTES: usize = 28;
pub const SIMPLE_REPLY_HEADER_BYTES: usize = 16;
pub const CHUNK_HEADER_BYTES: usize = 20;
/// Zero padding after the `NBD_OPT_EXPORT_NAME` reply unless `NO_ZEROES` was agreed.
pub const EXPORT_NAME_PADDING_BYTES: usize = 124;
/// The protocol's upper bound on any string (export names, messages).
pub const MAX_STRING_BYTES: usize = 4096;

/// The server's greeting: NBDMAGIC, IHAVEOPT and the handshake flags.
pub fn encode_greeting() -> [u8; SERVER_GREETING_BYTES] {
    let mut out = [0u8; SERVER_GREETING_BYTES];
    out[0..8].copy_from_slice(&NBD_MAGIC.to_be_bytes());
    out[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    out[16..18].copy_from_slice(&(NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES).to_be_bytes());
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub length: u32,
}

/// Decodes a client option header; `None` if the magic is wrong.
pub fn decode_option_header(bytes: &[u8; OPTION_HEADER_BYTES]) -> Option<OptionHeader> {
    let magic = u64::from_be_bytes(bytes[0..8].try_into().ok()?);
    if magic != IHAVEOPT {
        return None;
    }
    Some(OptionHeader {
        option: u32::from_be_bytes(bytes[8..12].try_into().ok()?),
        length: u32::from_be_bytes(bytes[12..16].try_into().ok()?),
    })
}

/// Appends one option reply. `data` is bounded by the caller (strings are at most
/// `MAX_STRING_BYTES`), so its length always fits the 32-bit field.
pub fn encode_option_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, data: &[u8]) {
    let length = u32::try_from(data.len()).expect("option reply data is bounded");
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(data);
}

/// Data of an `NBD_REP_SERVER` reply: the name, then a human-readable description.
pub fn encode_rep_server(name: &str, description: &str) -> Vec<u8> {
    let name = truncate_string(name);
    let description = truncate_string(description);
    let mut out = Vec::with_capacity(4 + name.len() + description.len());
    out.extend_from_slice(&(name.len() as u32).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(description.as_bytes());
    out
}

/// Data of `NBD_REP_INFO` / `NBD_INFO_EXPORT`.
pub fn encode_info_export(size: u64, transmission_flags: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&NBD_INFO_EXPORT.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&transmission_flags.to_be_bytes());
    out
}

/// Data of `NBD_REP_INFO` with a string payload (`NBD_INFO_NAME`, `NBD_INFO_DESCRIPTION`).
pub fn encode_info_string(info: u16, text: &str) -> Vec<u8> {
    let text = truncate_string(text);
    let mut out = Vec::with_capacity(2 + text.len());
    out.extend_from_slice(&info.to_be_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

/// Data of `NBD_REP_INFO` / `NBD_INFO_BLOCK_SIZE`.
pub fn encode_info_block_size(minimum: u32, preferred: u32, maximum: u32) -> Vec<u8> {
    assert!(minimum.is_power_of_two() && preferred.is_power_of_two());
    assert!(minimum <= preferred && preferred <= maximum);
    let mut out = Vec::with_capacity(14);
    out.extend_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
    out.extend_from_slice(&minimum.to_be_bytes());
    out.extend_from_slice(&preferred.to_be_bytes());
    out.extend_from_slice(&maximum.to_be_bytes());
    out
}

/// Data of `NBD_REP_META_CONTEXT`.
pub fn encode_meta_context(context_id: u32, name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    out.extend_from_slice(&context_id.to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

/// The reply to `NBD_OPT_EXPORT_NAME`: size, flags and (unless the client opted
/// out) 124 bytes of zeroes.
pub fn encode_export_name_reply(size: u64, transmission_flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + EXPORT_NAME_PADDING_BYTES);
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&transmission_flags.to_be_bytes());
    if !no_zeroes {
        out.resize(out.len() + EXPORT_NAME_PADDING_BYTES, 0);
    }
    out
}

/// Why an option's data could not be parsed; the option is answered with
/// `NBD_REP_ERR_INVALID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OptionDataError {
    #[error("option data truncated")]
    Truncated,
    #[error("option data has trailing bytes")]
    TrailingBytes,
    #[error("string is longer than 4096 bytes")]
    StringTooLong,
    #[error("string is not UTF-8 or contains NUL")]
    StringNotUtf8,
}

/// A bounds-checked cursor over option data: every read either succeeds or
/// reports truncation, so client-supplied lengths can never index out of range.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], OptionDataError> {
        if count > self.bytes.len() {
            return Err(OptionDataError::Truncated);
        }
        let (head, tail) = self.bytes.split_at(count);
        self.bytes = tail;
        Ok(head)
    }

    fn u16(&mut self) -> Result<u16, OptionDataError> {
        let bytes = self.take(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    fn u32(&mut self) -> Result<u32, OptionDataError> {
        let bytes = self.take(4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// A string preceded by its 32-bit length.
    fn string(&mut self) -> Result<String, OptionDataError> {
        let length = self.u32()? as usize;
        if length > MAX_STRING_BYTES {
            return Err(OptionDataError::StringTooLong);
        }
        decode_string(self.take(length)?)
    }

    fn finish(self) -> Result<(), OptionDataError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(OptionDataError::TrailingBytes)
        }
    }
}

/// A protocol string: UTF-8, no NUL, at most 4096 bytes.
pub fn decode_string(bytes: &[u8]) -> Result<String, OptionDataError> {
    if bytes.len() > MAX_STRING_BYTES {
        return Err(OptionDataError::StringTooLong);
    }
    if bytes.contains(&0) {
        return Err(OptionDataError::StringNotUtf8);
    }
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| OptionDataError::StringNotUtf8)
}

/// Cuts a string we send to the protocol's maximum, on a character boundary.
fn truncate_string(text: &str) -> &str {
    if text.len() <= MAX_STRING_BYTES {
        return text;
    }
    let mut end = MAX_STRING_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The data of `NBD_OPT_INFO` and `NBD_OPT_GO`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    pub name: String,
    pub requests: Vec<u16>,
}

pub fn decode_info_request(data: &[u8]) -> Result<InfoRequest, OptionDataError> {
    let mut cursor = Cursor { bytes: data };
    let name = cursor.string()?;
    let count = cursor.u16()?;
    // Each request takes two bytes, so the count is bounded by the (bounded) data.
    let mut requests = Vec::new();
    for _ in 0..count {
        requests.push(cursor.u16()?);
    }
    cursor.finish()?;
    Ok(InfoRequest { name, requests })
}

/// The data of `NBD_OPT_LIST_META_CONTEXT` and `NBD_OPT_SET_META_CONTEXT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaContextRequest {
    pub export_name: String,
    pub queries: Vec<String>,
}

pub fn decode_meta_context_request(data: &[u8]) -> Result<MetaContextRequest, OptionDataError> {
    let mut cursor = Cursor { bytes: data };
    let export_name = cursor.string()?;
    let count = cursor.u32()?;
    // Each query takes at least four bytes, so the loop is bounded by the data.
    let mut queries = Vec::new();
    for _ in 0..count {
        queries.push(cursor.string()?);
    }
    cursor.finish()?;
    Ok(MetaContextRequest {
        export_name,
        queries,
    })
}

/// A transmission-phase request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub command: u16,
    pub handle: u64,
    pub offset: u64,
    pub length: u32,
}

/// Decodes a request header; `None` if the magic is wrong (the connection is
/// then dropped, as the stream can no longer be framed).
pub fn decode_request_header(bytes: &[u8; REQUEST_HEADER_BYTES]) -> Option<RequestHeader> {
    let magic = u32::from_be_bytes(bytes[0..4].try_into().ok()?);
    if magic != REQUEST_MAGIC {
        return None;
    }
    Some(RequestHeader {
        flags: u16::from_be_bytes(bytes[4..6].try_into().ok()?),
        command: u16::from_be_bytes(bytes[6..8].try_into().ok()?),
        handle: u64::from_be_bytes(bytes[8..16].try_into().ok()?),
        offset: u64::from_be_bytes(bytes[16..24].try_into().ok()?),
        length: u32::from_be_bytes(bytes[24..28].try_into().ok()?),
    })
}

pub fn encode_request_header(header: &RequestHeader) -> [u8; REQUEST_HEADER_BYTES] {
    let mut out = [0u8; REQUEST_HEADER_BYTES];
    out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&header.flags.to_be_bytes());
    out[6..8].copy_from_slice(&header.command.to_be_bytes());
    out[8..16].copy_from_slice(&header.handle.to_be_bytes());
    out[16..24].copy_from_slice(&header.offset.to_be_bytes());
    out[24..28].copy_from_slice(&header.length.to_be_bytes());
    out
}

pub fn encode_simple_reply(out: &mut Vec<u8>, handle: u64, error: u32) {
    out.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&handle.to_be_bytes());
}

pub fn encode_chunk_header(
    out: &mut Vec<u8>,
    flags: u16,
    reply_type: u16,
    handle: u64,
    length: u32,
) {
    out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&handle.to_be_bytes());
    out.extend_from_slice(&length.to_be_bytes());
}

/// Sets `NBD_REPLY_FLAG_DONE` on the chunk whose header starts at `header_start`.
pub fn mark_chunk_done(out: &mut [u8], header_start: usize) {
    let magic = &out[header_start..header_start + 4];
    assert_eq!(magic, STRUCTURED_REPLY_MAGIC.to_be_bytes());
    let flags = &mut out[header_start + 4..header_start + 6];
    let value = u16::from_be_bytes([flags[0], flags[1]]) | NBD_REPLY_FLAG_DONE;
    flags.copy_from_slice(&value.to_be_bytes());
}

/// Longest message carried in an error chunk: messages are for humans, and short.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 256;

/// A final `NBD_REPLY_TYPE_ERROR` chunk.
pub fn encode_error_chunk(out: &mut Vec<u8>, handle: u64, error: u32, message: &str) {
    assert_ne!(error, 0);
    let mut end = message.len().min(MAX_ERROR_MESSAGE_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let message = &message.as_bytes()[..end];
    let length = 6 + message.len() as u32;
    encode_chunk_header(
        out,
        NBD_REPLY_FLAG_DONE,
        NBD_REPLY_TYPE_ERROR,
        handle,
        length,
    );
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message);
}

/// A final `NBD_REPLY_TYPE_BLOCK_STATUS` chunk of (length, flags) descriptors.
pub fn encode_block_status_chunk(
    out: &mut Vec<u8>,
    handle: u64,
    context_id: u32,
    extents: &[(u32, u32)],
) {
    assert!(!extents.is_empty());
    let length = u32::try_from(4 + 8 * extents.len()).expect("extent count is capped");
    encode_chunk_header(
        out,
        NBD_REPLY_FLAG_DONE,
        NBD_REPLY_TYPE_BLOCK_STATUS,
        handle,
        length,
    );
    out.extend_from_slice(&context_id.to_be_bytes());
    for &(extent_length, flags) in extents {
        assert!(extent_length > 0);
        out.extend_from_slice(&extent_length.to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be32(bytes: &[u8]) -> u32 {
        u32::from_be_bytes(bytes.try_into().unwrap())
    }

    /// Numbers as assigned by the protocol (and used by libnbd and qemu).
    #[test]
    fn assigned_numbers() {
        let options = [
            NBD_OPT_EXPORT_NAME,
            NBD_OPT_ABORT,
            NBD_OPT_LIST,
            NBD_OPT_STARTTLS,
            NBD_OPT_INFO,
            NBD_OPT_GO,
            NBD_OPT_STRUCTURED_REPLY,
            NBD_OPT_LIST_META_CONTEXT,
            NBD_OPT_SET_META_CONTEXT,
            NBD_OPT_EXTENDED_HEADERS,
        ];
        assert_eq!(options, [1, 2, 3, 5, 6, 7, 8, 9, 10, 11]);
        let commands = [
            NBD_CMD_READ,
            NBD_CMD_WRITE,
            NBD_CMD_DISC,
            NBD_CMD_FLUSH,
            NBD_CMD_TRIM,
            NBD_CMD_CACHE,
            NBD_CMD_WRITE_ZEROES,
            NBD_CMD_BLOCK_STATUS,
        ];
        assert_eq!(commands, [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(NBD_REP_ERR_UNSUP, 0x8000_0001);
        assert_eq!(NBD_REP_ERR_TOO_BIG, 0x8000_0009);
        assert_eq!(NBD_REPLY_TYPE_ERROR, 0x8001);
        assert_eq!(NBD_FLAG_SEND_FAST_ZERO, 0x0800);
        assert_eq!(NBD_FLAG_SEND_CACHE, 0x0400);
        assert_eq!(OPTION_REPLY_MAGIC, 0x3e889045565a9);
    }

    #[test]
    fn greeting_layout() {
        let greeting = encode_greeting();
        assert_eq!(&greeting[0..8], b"NBDMAGIC");
        assert_eq!(&greeting[8..16], b"IHAVEOPT");
        assert_eq!(&greeting[16..18], &[0, 3]);
    }

    #[test]
    fn option_header_roundtrip_and_bad_magic() {
        let mut bytes = [0u8; OPTION_HEADER_BYTES];
        bytes[0..8].copy_from_slice(b"IHAVEOPT");
        bytes[8..12].copy_from_slice(&7u32.to_be_bytes());
        bytes[12..16].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(
            decode_option_header(&bytes),
            Some(OptionHeader {
                option: 7,
                length: 9
            })
        );
        bytes[0] = b'X';
        assert_eq!(decode_option_header(&bytes), None);
    }

    #[test]
    fn option_reply_layout() {
        let mut out = Vec::new();
        encode_option_reply(&mut out, NBD_OPT_GO, NBD_REP_ERR_UNKNOWN, b"no");
        assert_eq!(out.len(), 20 + 2);
        assert_eq!(&out[0..8], &OPTION_REPLY_MAGIC.to_be_bytes());
        assert_eq!(be32(&out[8..12]), NBD_OPT_GO);
        assert_eq!(be32(&out[12..16]), 0x8000_0006);
        assert_eq!(be32(&out[16..20]), 2);
        assert_eq!(&out[20..], b"no");
    }

    #[test]
    fn info_payloads() {
        let export = encode_info_export(1 << 40, 0x1234);
        assert_eq!(export.len(), 12);
        assert_eq!(&export[0..2], &[0, 0]);
        assert_eq!(
            u64::from_be_bytes(export[2..10].try_into().unwrap()),
            1 << 40
        );
        assert_eq!(&export[10..12], &[0x12, 0x34]);
        let block = encode_info_block_size(1, 4096, 32 << 20);
        assert_eq!(block.len(), 14);
        assert_eq!(be32(&block[2..6]), 1);
        assert_eq!(be32(&block[6..10]), 4096);
        assert_eq!(be32(&block[10..14]), 32 << 20);
        let name = encode_info_string(NBD_INFO_NAME, "disk");
        assert_eq!(name, [&[0u8, 1][..], b"disk"].concat());
    }

    #[test]
    fn rep_server_and_export_name_reply() {
        let data = encode_rep_server("a", "desc");
        assert_eq!(data, [&[0u8, 0, 0, 1][..], b"a", b"desc"].concat());
        assert_eq!(encode_export_name_reply(5, 1, true).len(), 10);
        let padded = encode_export_name_reply(5, 1, false);
        assert_eq!(padded.len(), 134);
        assert!(padded[10..].iter().all(|&b| b == 0));
    }

    fn info_request_bytes(name: &[u8], requests: &[u16]) -> Vec<u8> {
        let mut data = (name.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(name);
        data.extend_from_slice(&(requests.len() as u16).to_be_bytes());
        for r in requests {
            data.extend_from_slice(&r.to_be_bytes());
        }
        data
    }

    #[test]
    fn info_request_decode() {
        let data = info_request_bytes(b"vol", &[NBD_INFO_NAME, NBD_INFO_BLOCK_SIZE]);
        let request = decode_info_request(&data).unwrap();
        assert_eq!(request.name, "vol");
        assert_eq!(request.requests, vec![1, 3]);
        // Truncated: the count claims two requests but only one follows.
        assert_eq!(
            decode_info_request(&data[..data.len() - 2]),
            Err(OptionDataError::Truncated)
        );
        let mut trailing = data.clone();
        trailing.push(0);
        assert_eq!(
            decode_info_request(&trailing),
            Err(OptionDataError::TrailingBytes)
        );
        // A name length far beyond the data.
        let mut huge = data.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            decode_info_request(&huge),
            Err(OptionDataError::StringTooLong)
        );
        let bad = info_request_bytes(b"\xff", &[]);
        assert_eq!(
            decode_info_request(&bad),
            Err(OptionDataError::StringNotUtf8)
        );
        let nul = info_request_bytes(b"a\0", &[]);
        assert_eq!(
            decode_info_request(&nul),
            Err(OptionDataError::StringNotUtf8)
        );
    }

    #[test]
    fn meta_context_request_decode() {
        let mut data = 3u32.to_be_bytes().to_vec();
        data.extend_from_slice(b"vol");
        data.extend_from_slice(&2u32.to_be_bytes());
        for q in ["base:", "base:allocation"] {
            data.extend_from_slice(&(q.len() as u32).to_be_bytes());
            data.extend_from_slice(q.as_bytes());
        }
        let request = decode_meta_context_request(&data).unwrap();
        assert_eq!(request.export_name, "vol");
        assert_eq!(request.queries, vec!["base:", "base:allocation"]);
        let mut lying = data.clone();
        lying[7..11].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            decode_meta_context_request(&lying),
            Err(OptionDataError::Truncated)
        );
    }

    #[test]
    fn request_header_roundtrip_and_bad_magic() {
        let header = RequestHeader {
            flags: NBD_CMD_FLAG_FUA,
            command: NBD_CMD_WRITE,
            handle: 0xdead_beef_0000_0001,
            offset: 1 << 33,
            length: 4096,
        };
        let bytes = encode_request_header(&header);
        assert_eq!(&bytes[0..4], &[0x25, 0x60, 0x95, 0x13]);
        assert_eq!(decode_request_header(&bytes), Some(header));
        let mut bad = bytes;
        bad[3] ^= 1;
        assert_eq!(decode_request_header(&bad), None);
    }

    #[test]
    fn simple_reply_and_chunks() {
        let mut out = Vec::new();
        encode_simple_reply(&mut out, 7, NBD_EIO);
        assert_eq!(out.len(), SIMPLE_REPLY_HEADER_BYTES);
        assert_eq!(be32(&out[0..4]), SIMPLE_REPLY_MAGIC);
        assert_eq!(be32(&out[4..8]), 5);
        assert_eq!(u64::from_be_bytes(out[8..16].try_into().unwrap()), 7);

        let mut out = Vec::new();
        encode_chunk_header(&mut out, 0, NBD_REPLY_TYPE_OFFSET_HOLE, 9, 12);
        assert_eq!(out.len(), CHUNK_HEADER_BYTES);
        mark_chunk_done(&mut out, 0);
        assert_eq!(&out[4..6], &[0, 1]);
        assert_eq!(&out[6..8], &[0, 2]);
        assert_eq!(be32(&out[16..20]), 12);
    }

    #[test]
    fn error_chunk_truncates_message() {
        let mut out = Vec::new();
        let message = "é".repeat(200);
        encode_error_chunk(&mut out, 1, NBD_EINVAL, &message);
        let length = be32(&out[16..20]) as usize;
        assert_eq!(out.len(), CHUNK_HEADER_BYTES + length);
        let message_length = u16::from_be_bytes(out[24..26].try_into().unwrap()) as usize;
        assert!(message_length <= MAX_ERROR_MESSAGE_BYTES);
        assert_eq!(length, 6 + message_length);
        assert!(std::str::from_utf8(&out[26..]).is_ok());
        assert_eq!(&out[6..8], &NBD_REPLY_TYPE_ERROR.to_be_bytes());
    }

    #[test]
    fn block_status_chunk_layout() {
        let mut out = Vec::new();
        encode_block_status_chunk(&mut out, 3, 1, &[(4096, 3), (512, 0)]);
        assert_eq!(be32(&out[16..20]), 4 + 16);
        assert_eq!(be32(&out[20..24]), 1);
        assert_eq!(be32(&out[24..28]), 4096);
        assert_eq!(be32(&out[28..32]), 3);
        assert_eq!(be32(&out[32..36]), 512);
        assert_eq!(be32(&out[36..40]), 0);
    }
}
