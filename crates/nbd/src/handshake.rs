//! The fixed-newstyle handshake: option haggling until the client picks an export
//! (GO or EXPORT_NAME) or leaves. Every malformed option gets NBD_REP_ERR_INVALID;
//! anything that loses the framing ends the connection.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::export::{BlockExport, ExportProvider};
use crate::protocol::*;

/// What the handshake agreed on.
pub struct Session {
    pub export: Arc<dyn BlockExport>,
    pub name: String,
    pub structured_replies: bool,
    pub base_allocation: bool,
}

/// Why a handshake ended without a session.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("client left: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("client aborted")]
    Aborted,
}

struct Options {
    structured_replies: bool,
    /// The export name SET_META_CONTEXT selected base:allocation for.
    base_allocation_for: Option<String>,
}

pub async fn negotiate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    provider: &dyn ExportProvider,
) -> Result<Session, HandshakeError> {
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    stream.write_all(&hello).await?;
    stream.flush().await?;
    let client_flags = stream.read_u32().await?;
    if client_flags & !(CLIENT_FIXED_NEWSTYLE | CLIENT_NO_ZEROES) != 0 {
        return Err(HandshakeError::Protocol(format!(
            "unknown client flags {client_flags:#x}"
        )));
    }
    let no_zeroes = client_flags & CLIENT_NO_ZEROES != 0;
    let mut options = Options {
        structured_replies: false,
        base_allocation_for: None,
    };
    loop {
        let magic = stream.read_u64().await?;
        if magic != IHAVEOPT {
            return Err(HandshakeError::Protocol(format!(
                "bad option magic {magic:#x}"
            )));
        }
        let option = stream.read_u32().await?;
        let length = stream.read_u32().await?;
        if length > MAX_OPTION_BYTES {
            return Err(HandshakeError::Protocol(format!(
                "option of {length} bytes"
            )));
        }
        let mut data = vec![0u8; length as usize];
        stream.read_exact(&mut data).await?;
        if let Some(session) =
            handle_option(stream, provider, &mut options, option, &data, no_zeroes).await?
        {
            return Ok(session);
        }
    }
}

async fn reply<S: AsyncWrite + Unpin>(
    stream: &mut S,
    option: u32,
    kind: u32,
    data: &[u8],
) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(20 + data.len());
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    stream.write_all(&out).await?;
    stream.flush().await
}

async fn error_reply<S: AsyncWrite + Unpin>(
    stream: &mut S,
    option: u32,
    kind: u32,
    message: &str,
) -> std::io::Result<()> {
    reply(stream, option, kind, message.as_bytes()).await
}

async fn handle_option<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    provider: &dyn ExportProvider,
    options: &mut Options,
    option: u32,
    data: &[u8],
    no_zeroes: bool,
) -> Result<Option<Session>, HandshakeError> {
    match option {
        OPT_EXPORT_NAME => export_name(stream, provider, options, data, no_zeroes).await,
        OPT_ABORT => {
            let _ = reply(stream, option, REP_ACK, &[]).await;
            Err(HandshakeError::Aborted)
        }
        OPT_LIST => {
            if !data.is_empty() {
                error_reply(stream, option, REP_ERR_INVALID, "LIST takes no data").await?;
                return Ok(None);
            }
            for export in provider.list() {
                let mut entry =
                    Vec::with_capacity(4 + export.name.len() + export.description.len());
                entry.extend_from_slice(&(export.name.len() as u32).to_be_bytes());
                entry.extend_from_slice(export.name.as_bytes());
                entry.extend_from_slice(export.description.as_bytes());
                reply(stream, option, REP_SERVER, &entry).await?;
            }
            reply(stream, option, REP_ACK, &[]).await?;
            Ok(None)
        }
        OPT_INFO | OPT_GO => info_or_go(stream, provider, options, option, data).await,
        OPT_STRUCTURED_REPLY => {
            if !data.is_empty() {
                error_reply(
                    stream,
                    option,
                    REP_ERR_INVALID,
                    "STRUCTURED_REPLY takes no data",
                )
                .await?;
            } else {
                options.structured_replies = true;
                reply(stream, option, REP_ACK, &[]).await?;
            }
            Ok(None)
        }
        OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
            meta_context(stream, provider, options, option, data).await?;
            Ok(None)
        }
        OPT_STARTTLS => {
            error_reply(stream, option, REP_ERR_UNSUP, "TLS is not offered").await?;
            Ok(None)
        }
        _ => {
            error_reply(stream, option, REP_ERR_UNSUP, "unsupported option").await?;
            Ok(None)
        }
    }
}

fn transmission_flags(export: &dyn BlockExport, structured: bool) -> u16 {
    let mut flags = TFLAG_HAS_FLAGS
        | TFLAG_SEND_FLUSH
        | TFLAG_SEND_FUA
        | TFLAG_SEND_TRIM
        | TFLAG_SEND_WRITE_ZEROES
        | TFLAG_SEND_FAST_ZERO
        | TFLAG_CAN_MULTI_CONN
        | TFLAG_SEND_CACHE;
    if structured {
        flags |= TFLAG_SEND_DF;
    }
    if export.read_only() {
        flags |= TFLAG_READ_ONLY;
    }
    flags
}

fn session(export: Arc<dyn BlockExport>, name: String, options: &Options) -> Session {
    Session {
        base_allocation: options.structured_replies
            && options.base_allocation_for.as_deref() == Some(name.as_str()),
        export,
        name,
        structured_replies: options.structured_replies,
    }
}

async fn export_name<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    provider: &dyn ExportProvider,
    options: &Options,
    data: &[u8],
    no_zeroes: bool,
) -> Result<Option<Session>, HandshakeError> {
    let name = String::from_utf8(data.to_vec())
        .map_err(|_| HandshakeError::Protocol("export name is not UTF-8".into()))?;
    // EXPORT_NAME has no error reply: an unknown export ends the connection.
    let export = provider
        .open(&name)
        .ok_or_else(|| HandshakeError::Protocol(format!("unknown export '{name}'")))?;
    let size = export
        .size_bytes()
        .map_err(|e| HandshakeError::Protocol(e.to_string()))?;
    let mut out = Vec::with_capacity(10 + 124);
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(
        &transmission_flags(export.as_ref(), options.structured_replies).to_be_bytes(),
    );
    if !no_zeroes {
        out.extend_from_slice(&[0u8; 124]);
    }
    stream.write_all(&out).await?;
    stream.flush().await?;
    Ok(Some(session(export, name, options)))
}

/// Parses `u32 length, name` at the start of `data`, returning the name and rest.
fn parse_name(data: &[u8]) -> Option<(String, &[u8])> {
    let length = u32::from_be_bytes(data.get(0..4)?.try_into().ok()?) as usize;
    let name = data.get(4..4usize.checked_add(length)?)?;
    Some((String::from_utf8(name.to_vec()).ok()?, &data[4 + length..]))
}

async fn info_or_go<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    provider: &dyn ExportProvider,
    options: &Options,
    option: u32,
    data: &[u8],
) -> Result<Option<Session>, HandshakeError> {
    let parsed = parse_name(data).and_then(|(name, rest)| {
        let count = u16::from_be_bytes(rest.get(0..2)?.try_into().ok()?) as usize;
        let requests = rest.get(2..)?;
        if requests.len() != count * 2 {
            return None;
        }
        let infos: Vec<u16> = requests
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        Some((name, infos))
    });
    let Some((name, infos)) = parsed else {
        error_reply(stream, option, REP_ERR_INVALID, "malformed INFO/GO request").await?;
        return Ok(None);
    };
    let Some(export) = provider.open(&name) else {
        error_reply(stream, option, REP_ERR_UNKNOWN, "no such export").await?;
        return Ok(None);
    };
    let size = match export.size_bytes() {
        Ok(size) => size,
        Err(e) => {
            error_reply(stream, option, REP_ERR_UNKNOWN, &e.to_string()).await?;
            return Ok(None);
        }
    };
    let mut info = Vec::with_capacity(12);
    info.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    info.extend_from_slice(&size.to_be_bytes());
    info.extend_from_slice(
        &transmission_flags(export.as_ref(), options.structured_replies).to_be_bytes(),
    );
    reply(stream, option, REP_INFO, &info).await?;
    if infos.contains(&INFO_NAME) {
        let mut payload = INFO_NAME.to_be_bytes().to_vec();
        payload.extend_from_slice(name.as_bytes());
        reply(stream, option, REP_INFO, &payload).await?;
    }
    if infos.contains(&INFO_DESCRIPTION) {
        let mut payload = INFO_DESCRIPTION.to_be_bytes().to_vec();
        payload.extend_from_slice(export.description().as_bytes());
        reply(stream, option, REP_INFO, &payload).await?;
    }
    let mut block = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
    block.extend_from_slice(&1u32.to_be_bytes());
    block.extend_from_slice(&PREFERRED_BLOCK_BYTES.to_be_bytes());
    block.extend_from_slice(&MAX_PAYLOAD_BYTES.to_be_bytes());
    reply(stream, option, REP_INFO, &block).await?;
    reply(stream, option, REP_ACK, &[]).await?;
    if option == OPT_GO {
        return Ok(Some(session(export, name, options)));
    }
    Ok(None)
}

async fn meta_context<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    provider: &dyn ExportProvider,
    options: &mut Options,
    option: u32,
    data: &[u8],
) -> std::io::Result<()> {
    let parsed = parse_name(data).and_then(|(name, rest)| {
        let count = u32::from_be_bytes(rest.get(0..4)?.try_into().ok()?) as usize;
        let mut queries = Vec::new();
        let mut rest = rest.get(4..)?;
        for _ in 0..count {
            let (query, tail) = parse_name(rest)?;
            queries.push(query);
            rest = tail;
        }
        rest.is_empty().then_some((name, queries))
    });
    let Some((name, queries)) = parsed else {
        return error_reply(
            stream,
            option,
            REP_ERR_INVALID,
            "malformed meta context request",
        )
        .await;
    };
    if option == OPT_SET_META_CONTEXT && !options.structured_replies {
        return error_reply(
            stream,
            option,
            REP_ERR_INVALID,
            "SET_META_CONTEXT needs structured replies",
        )
        .await;
    }
    if provider.open(&name).is_none() {
        return error_reply(stream, option, REP_ERR_UNKNOWN, "no such export").await;
    }
    let matches = |q: &str| match option {
        OPT_LIST_META_CONTEXT => q == BASE_ALLOCATION || q == "base:",
        _ => q == BASE_ALLOCATION,
    };
    let selected = if option == OPT_LIST_META_CONTEXT && queries.is_empty() {
        true
    } else {
        queries.iter().any(|q| matches(q))
    };
    if option == OPT_SET_META_CONTEXT {
        options.base_allocation_for = selected.then(|| name.clone());
    }
    if selected {
        let mut payload = BASE_ALLOCATION_ID.to_be_bytes().to_vec();
        payload.extend_from_slice(BASE_ALLOCATION.as_bytes());
        reply(stream, option, REP_META_CONTEXT, &payload).await?;
    }
    reply(stream, option, REP_ACK, &[]).await
}
