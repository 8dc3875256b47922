//! The fixed newstyle handshake: greeting, client flags, then option haggling
//! until the client picks an export (`NBD_OPT_GO` / `NBD_OPT_EXPORT_NAME`),
//! aborts, or asks for TLS (`NBD_OPT_STARTTLS`): then the server runs the TLS
//! handshake and haggling goes on inside TLS, with the options negotiated before
//! forgotten and the client's proven identity known.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::ConnectionError;
use crate::export::{BlockExport, Client, ExportError, ExportSummary, OpenError};
use crate::protocol::{self as p, OptionDataError};
use crate::server::Shared;

/// Option data longer than this is refused: every option we understand needs
/// far less (strings are at most 4 KiB each).
pub const MAX_OPTION_DATA_BYTES: u32 = 64 * 1024;
/// Option data up to this size is read and discarded so that the client gets an
/// error reply; anything larger is treated as hostile and the connection dropped.
pub const MAX_DRAINABLE_OPTION_DATA_BYTES: u32 = 1024 * 1024;
/// Options per connection before we conclude the client is looping.
pub const MAX_OPTIONS_PER_CONNECTION: u32 = 1024;
/// The most metadata-context queries we answer in one option.
pub const MAX_META_CONTEXT_QUERIES: usize = 256;

/// The context ID we hand out for `base:allocation` after `NBD_OPT_SET_META_CONTEXT`.
pub const BASE_ALLOCATION_CONTEXT_ID: u32 = 1;

/// Block sizes advertised in `NBD_INFO_BLOCK_SIZE`: any alignment works, 4 KiB
/// is what the engine prefers, and 32 MiB is the largest payload we accept.
pub const BLOCK_SIZE_MINIMUM_BYTES: u32 = 1;
pub const BLOCK_SIZE_PREFERRED_BYTES: u32 = 4096;
pub const BLOCK_SIZE_MAXIMUM_BYTES: u32 = crate::transmission::MAX_REQUEST_PAYLOAD_BYTES;

/// What transmission needs to know about the negotiated session.
pub struct Session {
    pub export: Arc<dyn BlockExport>,
    pub name: String,
    /// Size read once at open: the protocol gives the client one size per session.
    pub size: u64,
    pub read_only: bool,
    pub structured: bool,
    /// Set when `base:allocation` was selected for this export.
    pub base_allocation_context: Option<u32>,
}

pub enum Outcome {
    Transmission(Session),
    /// The client sent `NBD_OPT_ABORT` (or went away politely).
    Aborted,
    /// `NBD_OPT_STARTTLS` was acknowledged: the TLS handshake comes next.
    StartTls,
}

/// Where a connection stands with TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsPhase {
    /// The server has no TLS: STARTTLS is refused with `NBD_REP_ERR_POLICY`.
    NotOffered,
    /// STARTTLS is possible; plain options are served meanwhile.
    Offered,
    /// STARTTLS is possible and nothing else is served before it.
    Required,
    /// TLS is up.
    Active,
}

/// An export opened for a session, with the facts the handshake reports.
struct Opened {
    export: Arc<dyn BlockExport>,
    size: u64,
    read_only: bool,
    description: String,
}

/// The metadata contexts selected by the last `NBD_OPT_SET_META_CONTEXT`.
struct MetaSelection {
    export_name: String,
    base_allocation: bool,
}

/// Negotiation state carried between options (and across STARTTLS).
pub struct Negotiation {
    no_zeroes: bool,
    structured: bool,
    meta: Option<MetaSelection>,
    tls: TlsPhase,
    client: Client,
    /// Options read on this connection, before and after STARTTLS together.
    options_seen: u32,
}

impl Negotiation {
    pub fn new(client: Client, tls: TlsPhase) -> Negotiation {
        assert!(client.identity.is_none() && tls != TlsPhase::Active);
        Negotiation {
            no_zeroes: false,
            structured: false,
            meta: None,
            tls,
            client,
            options_seen: 0,
        }
    }

    /// TLS is up with `identity` proven: what was negotiated in plain text is
    /// forgotten (a man in the middle could have chosen it).
    pub fn tls_started(&mut self, identity: String) {
        assert!(matches!(self.tls, TlsPhase::Offered | TlsPhase::Required));
        self.tls = TlsPhase::Active;
        self.client.identity = Some(identity);
        self.structured = false;
        self.meta = None;
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
}

enum Step {
    Continue,
    Abort,
    Go(Session),
    StartTls,
}

/// Why an export was not opened for an option.
enum Refusal {
    Open(OpenError),
    Unavailable(ExportError),
}

pub fn transmission_flags(read_only: bool, structured: bool) -> u16 {
    let mut flags = p::NBD_FLAG_HAS_FLAGS
        | p::NBD_FLAG_SEND_FLUSH
        | p::NBD_FLAG_SEND_FUA
        | p::NBD_FLAG_CAN_MULTI_CONN
        | p::NBD_FLAG_SEND_CACHE;
    if read_only {
        flags |= p::NBD_FLAG_READ_ONLY;
    } else {
        flags |= p::NBD_FLAG_SEND_TRIM | p::NBD_FLAG_SEND_WRITE_ZEROES | p::NBD_FLAG_SEND_FAST_ZERO;
    }
    if structured {
        flags |= p::NBD_FLAG_SEND_DF;
    }
    flags
}

/// Sends the greeting and reads the client's flags.
pub async fn greet<S>(stream: &mut S, state: &mut Negotiation) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    stream.write_all(&p::encode_greeting()).await?;
    stream.flush().await?;
    let client_flags = stream.read_u32().await?;
    if client_flags & !p::CLIENT_FLAGS_KNOWN != 0 {
        return Err(ConnectionError::UnknownClientFlags(client_flags));
    }
    state.no_zeroes = client_flags & p::NBD_FLAG_C_NO_ZEROES != 0;
    Ok(())
}

/// Answers options until the client picks an export, aborts or starts TLS.
pub async fn haggle<S>(
    stream: &mut S,
    shared: &Shared,
    state: &mut Negotiation,
) -> Result<Outcome, ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while state.options_seen < MAX_OPTIONS_PER_CONNECTION {
        state.options_seen += 1;
        match option(stream, shared, state).await? {
            Step::Continue => {}
            Step::Abort => return Ok(Outcome::Aborted),
            Step::Go(session) => return Ok(Outcome::Transmission(session)),
            Step::StartTls => return Ok(Outcome::StartTls),
        }
    }
    Err(ConnectionError::TooManyOptions)
}

/// Reads and answers one option.
async fn option<S>(
    stream: &mut S,
    shared: &Shared,
    state: &mut Negotiation,
) -> Result<Step, ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut raw = [0u8; p::OPTION_HEADER_BYTES];
    stream.read_exact(&mut raw).await?;
    let header = p::decode_option_header(&raw).ok_or(ConnectionError::BadMagic)?;
    if header.length > MAX_OPTION_DATA_BYTES {
        return oversized_option(stream, header).await;
    }
    let mut data = vec![0u8; header.length as usize];
    stream.read_exact(&mut data).await?;

    let mut out = Vec::new();
    let plain_refused = state.tls == TlsPhase::Required
        && !matches!(header.option, p::NBD_OPT_STARTTLS | p::NBD_OPT_ABORT);
    let step = match header.option {
        // It has no error reply: the protocol says to end the connection.
        p::NBD_OPT_EXPORT_NAME if plain_refused => return Err(ConnectionError::TlsRequired),
        _ if plain_refused => {
            reply_error(
                &mut out,
                header.option,
                p::NBD_REP_ERR_TLS_REQD,
                "TLS is required: send NBD_OPT_STARTTLS and authenticate with a pre-shared key",
            );
            Step::Continue
        }
        p::NBD_OPT_EXPORT_NAME => return export_name(stream, shared, state, &data).await,
        p::NBD_OPT_ABORT => {
            p::encode_option_reply(&mut out, header.option, p::NBD_REP_ACK, &[]);
            Step::Abort
        }
        p::NBD_OPT_LIST => list(shared, state, header.option, &data, &mut out).await?,
        p::NBD_OPT_INFO | p::NBD_OPT_GO => {
            info_or_go(shared, state, header.option, &data, &mut out).await?
        }
        p::NBD_OPT_STRUCTURED_REPLY => structured_reply(state, &data, &mut out),
        p::NBD_OPT_LIST_META_CONTEXT | p::NBD_OPT_SET_META_CONTEXT => {
            meta_context(shared, state, header.option, &data, &mut out).await?
        }
        p::NBD_OPT_STARTTLS => start_tls(state, &data, &mut out),
        _ => {
            reply_error(
                &mut out,
                header.option,
                p::NBD_REP_ERR_UNSUP,
                "option not supported",
            );
            Step::Continue
        }
    };
    stream.write_all(&out).await?;
    stream.flush().await?;
    Ok(step)
}

fn reply_error(out: &mut Vec<u8>, option: u32, reply_type: u32, message: &str) {
    assert!(reply_type & (1 << 31) != 0);
    p::encode_option_reply(out, option, reply_type, message.as_bytes());
}

/// Too long to be a real option: drain it and refuse, or drop a hostile client.
async fn oversized_option<S>(
    stream: &mut S,
    header: p::OptionHeader,
) -> Result<Step, ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // NBD_OPT_EXPORT_NAME cannot be answered with an error.
    if header.length > MAX_DRAINABLE_OPTION_DATA_BYTES || header.option == p::NBD_OPT_EXPORT_NAME {
        return Err(ConnectionError::OptionTooLong(header.length));
    }
    drain(stream, u64::from(header.length)).await?;
    let mut out = Vec::new();
    reply_error(
        &mut out,
        header.option,
        p::NBD_REP_ERR_TOO_BIG,
        "option data too long",
    );
    stream.write_all(&out).await?;
    stream.flush().await?;
    Ok(Step::Continue)
}

/// Reads and discards `length` bytes through a fixed scratch buffer.
pub async fn drain<R: AsyncRead + Unpin>(reader: &mut R, length: u64) -> std::io::Result<()> {
    const DRAIN_BUFFER_BYTES: usize = 64 * 1024;
    let mut scratch = vec![0u8; DRAIN_BUFFER_BYTES];
    let mut remaining = length;
    while remaining > 0 {
        let step = remaining.min(DRAIN_BUFFER_BYTES as u64) as usize;
        reader.read_exact(&mut scratch[..step]).await?;
        remaining -= step as u64;
    }
    Ok(())
}

/// `NBD_OPT_STARTTLS`: acknowledged when TLS is offered and not yet up.
fn start_tls(state: &Negotiation, data: &[u8], out: &mut Vec<u8>) -> Step {
    let option = p::NBD_OPT_STARTTLS;
    if !data.is_empty() {
        reply_error(
            out,
            option,
            p::NBD_REP_ERR_INVALID,
            "NBD_OPT_STARTTLS takes no data",
        );
        return Step::Continue;
    }
    match state.tls {
        TlsPhase::NotOffered => {
            reply_error(out, option, p::NBD_REP_ERR_POLICY, "TLS is not offered");
            Step::Continue
        }
        TlsPhase::Active => {
            reply_error(out, option, p::NBD_REP_ERR_INVALID, "TLS is already active");
            Step::Continue
        }
        TlsPhase::Offered | TlsPhase::Required => {
            p::encode_option_reply(out, option, p::NBD_REP_ACK, &[]);
            Step::StartTls
        }
    }
}

/// Opens `name` for the connection's client on the blocking pool.
async fn open(
    shared: &Shared,
    client: &Client,
    name: &str,
) -> Result<Result<Opened, Refusal>, ConnectionError> {
    let provider = shared.provider.clone();
    let name = name.to_owned();
    let client = client.clone();
    shared
        .run_blocking(move || -> Result<Opened, Refusal> {
            let export = provider.open(&client, &name).map_err(Refusal::Open)?;
            let size = export.size_bytes().map_err(Refusal::Unavailable)?;
            Ok(Opened {
                size,
                read_only: export.read_only(),
                description: export.description(),
                export,
            })
        })
        .await
        .ok_or(ConnectionError::BlockingTask)
}

/// The option error reply for an export that was not opened. A client
/// refused before it upgraded to the TLS the server offers is told TLS is
/// required (the protocol's selective TLS: a client that upgrades only on
/// `NBD_REP_ERR_TLS_REQD` would otherwise give up).
fn reply_refusal(out: &mut Vec<u8>, option: u32, refusal: &Refusal, tls: TlsPhase) {
    match refusal {
        Refusal::Open(OpenError::Unknown) => {
            reply_error(out, option, p::NBD_REP_ERR_UNKNOWN, "no such export")
        }
        Refusal::Open(OpenError::Denied(message)) if tls == TlsPhase::Offered => {
            reply_error(out, option, p::NBD_REP_ERR_TLS_REQD, message)
        }
        Refusal::Open(OpenError::Denied(message)) => {
            reply_error(out, option, p::NBD_REP_ERR_POLICY, message)
        }
        Refusal::Unavailable(error) => reply_error(
            out,
            option,
            p::NBD_REP_ERR_UNKNOWN,
            &format!("export unavailable: {error}"),
        ),
    }
}

fn session(state: &Negotiation, name: String, opened: Opened) -> Session {
    // Contexts selected for another export do not carry over.
    let base_allocation = state
        .meta
        .as_ref()
        .is_some_and(|meta| meta.export_name == name && meta.base_allocation);
    Session {
        export: opened.export,
        name,
        size: opened.size,
        read_only: opened.read_only,
        structured: state.structured,
        base_allocation_context: (state.structured && base_allocation)
            .then_some(BASE_ALLOCATION_CONTEXT_ID),
    }
}

/// `NBD_OPT_EXPORT_NAME`: no error reply exists, so failure ends the connection.
async fn export_name<S>(
    stream: &mut S,
    shared: &Shared,
    state: &mut Negotiation,
    data: &[u8],
) -> Result<Step, ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let name = p::decode_string(data).map_err(|_| ConnectionError::InvalidExportName)?;
    let Ok(opened) = open(shared, &state.client, &name).await? else {
        return Err(ConnectionError::UnknownExport(name));
    };
    let flags = transmission_flags(opened.read_only, state.structured);
    let reply = p::encode_export_name_reply(opened.size, flags, state.no_zeroes);
    stream.write_all(&reply).await?;
    stream.flush().await?;
    Ok(Step::Go(session(state, name, opened)))
}

async fn list(
    shared: &Shared,
    state: &Negotiation,
    option: u32,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<Step, ConnectionError> {
    if !data.is_empty() {
        reply_error(
            out,
            option,
            p::NBD_REP_ERR_INVALID,
            "NBD_OPT_LIST takes no data",
        );
        return Ok(Step::Continue);
    }
    let provider = shared.provider.clone();
    let client = state.client.clone();
    let exports: Vec<ExportSummary> = shared
        .run_blocking(move || provider.list(&client))
        .await
        .ok_or(ConnectionError::BlockingTask)?;
    for export in exports.iter().take(crate::server::MAX_LISTED_EXPORTS) {
        let server = p::encode_rep_server(&export.name, &export.description);
        p::encode_option_reply(out, option, p::NBD_REP_SERVER, &server);
    }
    p::encode_option_reply(out, option, p::NBD_REP_ACK, &[]);
    Ok(Step::Continue)
}

async fn info_or_go(
    shared: &Shared,
    state: &Negotiation,
    option: u32,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<Step, ConnectionError> {
    let request = match p::decode_info_request(data) {
        Ok(request) => request,
        Err(error) => {
            reply_error(out, option, p::NBD_REP_ERR_INVALID, &error.to_string());
            return Ok(Step::Continue);
        }
    };
    let opened = match open(shared, &state.client, &request.name).await? {
        Ok(opened) => opened,
        Err(refusal) => {
            reply_refusal(out, option, &refusal, state.tls);
            return Ok(Step::Continue);
        }
    };
    encode_infos(out, option, state, &request, &opened);
    p::encode_option_reply(out, option, p::NBD_REP_ACK, &[]);
    if option == p::NBD_OPT_GO {
        Ok(Step::Go(session(state, request.name, opened)))
    } else {
        Ok(Step::Continue)
    }
}

/// The `NBD_REP_INFO` replies for one export: the export info always, the block
/// sizes always (any alignment is fine, so sending them unasked is harmless),
/// the name and description when asked for.
fn encode_infos(
    out: &mut Vec<u8>,
    option: u32,
    state: &Negotiation,
    request: &p::InfoRequest,
    opened: &Opened,
) {
    let flags = transmission_flags(opened.read_only, state.structured);
    p::encode_option_reply(
        out,
        option,
        p::NBD_REP_INFO,
        &p::encode_info_export(opened.size, flags),
    );
    let block_size = p::encode_info_block_size(
        BLOCK_SIZE_MINIMUM_BYTES,
        BLOCK_SIZE_PREFERRED_BYTES,
        BLOCK_SIZE_MAXIMUM_BYTES,
    );
    p::encode_option_reply(out, option, p::NBD_REP_INFO, &block_size);
    if request.requests.contains(&p::NBD_INFO_NAME) {
        let name = p::encode_info_string(p::NBD_INFO_NAME, &request.name);
        p::encode_option_reply(out, option, p::NBD_REP_INFO, &name);
    }
    if request.requests.contains(&p::NBD_INFO_DESCRIPTION) && !opened.description.is_empty() {
        let description = p::encode_info_string(p::NBD_INFO_DESCRIPTION, &opened.description);
        p::encode_option_reply(out, option, p::NBD_REP_INFO, &description);
    }
}

fn structured_reply(state: &mut Negotiation, data: &[u8], out: &mut Vec<u8>) -> Step {
    let option = p::NBD_OPT_STRUCTURED_REPLY;
    if !data.is_empty() {
        reply_error(
            out,
            option,
            p::NBD_REP_ERR_INVALID,
            "NBD_OPT_STRUCTURED_REPLY takes no data",
        );
    } else {
        state.structured = true;
        p::encode_option_reply(out, option, p::NBD_REP_ACK, &[]);
    }
    Step::Continue
}

/// Which of our contexts a query names. `list` queries may name a whole
/// namespace ("base:"); `set` queries must name a context exactly.
fn query_matches_base_allocation(query: &str, listing: bool) -> bool {
    query == p::BASE_ALLOCATION || (listing && query == p::BASE_NAMESPACE)
}

async fn meta_context(
    shared: &Shared,
    state: &mut Negotiation,
    option: u32,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<Step, ConnectionError> {
    let listing = option == p::NBD_OPT_LIST_META_CONTEXT;
    if !listing {
        // A SET replaces the selection even when it fails, however it fails.
        state.meta = None;
    }
    if !state.structured {
        reply_error(
            out,
            option,
            p::NBD_REP_ERR_INVALID,
            "structured replies not negotiated",
        );
        return Ok(Step::Continue);
    }
    let request = match p::decode_meta_context_request(data) {
        Ok(request) if request.queries.len() <= MAX_META_CONTEXT_QUERIES => request,
        Ok(_) => {
            reply_error(out, option, p::NBD_REP_ERR_TOO_BIG, "too many queries");
            return Ok(Step::Continue);
        }
        Err(error) => {
            reply_error(out, option, p::NBD_REP_ERR_INVALID, &invalid_message(error));
            return Ok(Step::Continue);
        }
    };
    if let Err(refusal) = open(shared, &state.client, &request.export_name).await? {
        reply_refusal(out, option, &refusal, state.tls);
        return Ok(Step::Continue);
    }
    let selected = if listing && request.queries.is_empty() {
        true
    } else {
        request
            .queries
            .iter()
            .any(|query| query_matches_base_allocation(query, listing))
    };
    if selected {
        // IDs in LIST replies are reserved and sent as zero.
        let id = if listing {
            0
        } else {
            BASE_ALLOCATION_CONTEXT_ID
        };
        let context = p::encode_meta_context(id, p::BASE_ALLOCATION);
        p::encode_option_reply(out, option, p::NBD_REP_META_CONTEXT, &context);
    }
    if !listing {
        state.meta = Some(MetaSelection {
            export_name: request.export_name,
            base_allocation: selected,
        });
    }
    p::encode_option_reply(out, option, p::NBD_REP_ACK, &[]);
    Ok(Step::Continue)
}

fn invalid_message(error: OptionDataError) -> String {
    format!("malformed option: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_for_writable_and_read_only() {
        let writable = transmission_flags(false, true);
        assert_ne!(writable & p::NBD_FLAG_SEND_TRIM, 0);
        assert_ne!(writable & p::NBD_FLAG_SEND_FAST_ZERO, 0);
        assert_ne!(writable & p::NBD_FLAG_SEND_DF, 0);
        assert_eq!(writable & p::NBD_FLAG_READ_ONLY, 0);
        let read_only = transmission_flags(true, false);
        assert_ne!(read_only & p::NBD_FLAG_READ_ONLY, 0);
        assert_eq!(read_only & p::NBD_FLAG_SEND_WRITE_ZEROES, 0);
        assert_eq!(read_only & p::NBD_FLAG_SEND_DF, 0);
        assert_ne!(read_only & p::NBD_FLAG_HAS_FLAGS, 0);
    }

    #[test]
    fn meta_queries() {
        assert!(query_matches_base_allocation("base:allocation", false));
        assert!(query_matches_base_allocation("base:", true));
        assert!(!query_matches_base_allocation("base:", false));
        assert!(!query_matches_base_allocation("qemu:dirty-bitmap:x", true));
    }
}
