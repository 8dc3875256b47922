//! The transmission phase: requests are read continuously, executed concurrently
//! on the blocking pool (bounded per connection), and answered out of order through
//! one writer task so reply frames never interleave.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, Semaphore};

use crate::export::{BlockExport, ExportError, ExtentKind};
use crate::handshake::Session;
use crate::protocol::*;

/// Requests of one connection executing at once; the reader stops reading while
/// this many are in flight (back-pressure instead of an unbounded queue).
pub const MAX_IN_FLIGHT_PER_CONNECTION: usize = 64;
/// A WRITE payload larger than the advertised maximum is drained (and refused)
/// up to this size; beyond it the connection is dropped.
const MAX_DRAIN_BYTES: u32 = 64 * 1024 * 1024;

struct Context {
    export: Arc<dyn BlockExport>,
    structured: bool,
    base_allocation: bool,
}

pub async fn transmit<S>(stream: S, session: Session) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut reader, writer) = tokio::io::split(stream);
    let (replies, mut outgoing) = mpsc::channel::<Vec<u8>>(MAX_IN_FLIGHT_PER_CONNECTION);
    let writer_task = tokio::spawn(async move {
        let mut writer = BufWriter::with_capacity(256 * 1024, writer);
        while let Some(reply) = outgoing.recv().await {
            writer.write_all(&reply).await?;
            if outgoing.is_empty() {
                writer.flush().await?;
            }
        }
        writer.flush().await?;
        writer.shutdown().await
    });
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONNECTION));
    let context = Arc::new(Context {
        export: session.export,
        structured: session.structured_replies,
        base_allocation: session.base_allocation,
    });
    loop {
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore never closed");
        let mut header = [0u8; REQUEST_BYTES];
        if reader.read_exact(&mut header).await.is_err() {
            break;
        }
        let Some(request) = Request::decode(&header) else {
            tracing::debug!("bad request magic: disconnecting");
            break;
        };
        if request.kind == CMD_DISC {
            break;
        }
        let payload = if request.kind == CMD_WRITE {
            match read_payload(&mut reader, request.length).await? {
                Some(payload) => Some(payload),
                None if request.length <= MAX_DRAIN_BYTES => {
                    let reply = error_reply(
                        &context,
                        request.cookie,
                        EINVAL,
                        "write larger than the maximum block size",
                    );
                    let _ = replies.send(reply).await;
                    continue;
                }
                None => break,
            }
        } else {
            None
        };
        let context = context.clone();
        let replies = replies.clone();
        tokio::spawn(async move {
            let cookie = request.cookie;
            let ctx = context.clone();
            let reply = tokio::task::spawn_blocking(move || execute(&ctx, request, payload))
                .await
                .unwrap_or_else(|_| error_reply(&context, cookie, EIO, "internal error"));
            let _ = replies.send(reply).await;
            drop(slot);
        });
    }
    // Finish what is in flight before closing (DISC semantics).
    let _all = slots
        .acquire_many(MAX_IN_FLIGHT_PER_CONNECTION as u32)
        .await;
    drop(replies);
    writer_task.await.unwrap_or(Ok(()))
}

/// Reads a WRITE payload; None (after draining it) when it is over the maximum
/// but drainable, an error when the stream ends.
async fn read_payload<R: AsyncRead + Unpin>(
    reader: &mut R,
    length: u32,
) -> std::io::Result<Option<Vec<u8>>> {
    if length <= MAX_PAYLOAD_BYTES {
        let mut payload = vec![0u8; length as usize];
        reader.read_exact(&mut payload).await?;
        return Ok(Some(payload));
    }
    if length <= MAX_DRAIN_BYTES {
        let mut remaining = u64::from(length);
        let mut sink = vec![0u8; 64 * 1024];
        while remaining > 0 {
            let chunk = remaining.min(sink.len() as u64) as usize;
            reader.read_exact(&mut sink[..chunk]).await?;
            remaining -= chunk as u64;
        }
    }
    Ok(None)
}

fn error_reply(context: &Context, cookie: u64, errno: u32, message: &str) -> Vec<u8> {
    if context.structured {
        let mut out = Vec::with_capacity(32 + message.len());
        structured_error(&mut out, cookie, errno, message);
        out
    } else {
        simple_reply(cookie, errno)
    }
}

fn allowed_flags(kind: u16) -> Option<u16> {
    Some(match kind {
        CMD_READ => CMD_FLAG_DF,
        CMD_WRITE | CMD_TRIM => CMD_FLAG_FUA,
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        CMD_BLOCK_STATUS => CMD_FLAG_REQ_ONE,
        CMD_FLUSH | CMD_CACHE => 0,
        _ => return None,
    })
}

/// Executes one request and encodes its reply.
fn execute(context: &Context, request: Request, payload: Option<Vec<u8>>) -> Vec<u8> {
    match execute_checked(context, request, payload) {
        Ok(reply) => reply,
        Err((errno, message)) => error_reply(context, request.cookie, errno, &message),
    }
}

type Failure = (u32, String);

fn failure(error: ExportError) -> Failure {
    (error.errno(), error.to_string())
}

fn execute_checked(
    context: &Context,
    request: Request,
    payload: Option<Vec<u8>>,
) -> Result<Vec<u8>, Failure> {
    let Some(allowed) = allowed_flags(request.kind) else {
        return Err((EINVAL, format!("unknown command {}", request.kind)));
    };
    if request.flags & !allowed != 0 || (request.flags & CMD_FLAG_DF != 0 && !context.structured) {
        return Err((
            EINVAL,
            format!(
                "flags {:#x} not valid for command {}",
                request.flags, request.kind
            ),
        ));
    }
    let export = context.export.as_ref();
    let size = export.size_bytes().map_err(failure)?;
    let length = u64::from(request.length);
    let in_range = request
        .offset
        .checked_add(length)
        .is_some_and(|end| end <= size);
    let writes = matches!(request.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if !in_range && request.kind != CMD_FLUSH {
        let errno = if writes { ENOSPC } else { EINVAL };
        return Err((
            errno,
            format!(
                "range {}+{} beyond the export's {} bytes",
                request.offset, length, size
            ),
        ));
    }
    if writes && export.read_only() {
        return Err((EPERM, "read-only export".into()));
    }
    let fua = request.flags & CMD_FLAG_FUA != 0;
    match request.kind {
        CMD_READ => read(context, request),
        CMD_WRITE => {
            let payload = payload.expect("writes carry a payload");
            export.write(request.offset, &payload).map_err(failure)?;
            finish_write(context, request, fua)
        }
        CMD_TRIM => {
            export.trim(request.offset, length).map_err(failure)?;
            finish_write(context, request, fua)
        }
        CMD_WRITE_ZEROES => {
            let allow_unmap = request.flags & CMD_FLAG_NO_HOLE == 0;
            export
                .write_zeroes(request.offset, length, allow_unmap)
                .map_err(failure)?;
            finish_write(context, request, fua)
        }
        CMD_FLUSH => {
            export.flush().map_err(failure)?;
            Ok(done(context, request.cookie))
        }
        CMD_CACHE => Ok(done(context, request.cookie)),
        CMD_BLOCK_STATUS => block_status(context, request),
        _ => unreachable!("command checked by allowed_flags"),
    }
}

fn finish_write(context: &Context, request: Request, fua: bool) -> Result<Vec<u8>, Failure> {
    if fua {
        context.export.flush().map_err(failure)?;
    }
    Ok(done(context, request.cookie))
}

/// A successful reply with no data.
fn done(context: &Context, cookie: u64) -> Vec<u8> {
    if context.structured {
        let mut out = Vec::with_capacity(20);
        structured_chunk(&mut out, cookie, REPLY_FLAG_DONE, REPLY_TYPE_NONE, &[]);
        out
    } else {
        simple_reply(cookie, 0)
    }
}

fn read(context: &Context, request: Request) -> Result<Vec<u8>, Failure> {
    let export = context.export.as_ref();
    let length = request.length as usize;
    if !context.structured || request.flags & CMD_FLAG_DF != 0 || length == 0 {
        let mut data = vec![0u8; length];
        export.read(request.offset, &mut data).map_err(failure)?;
        if !context.structured {
            let mut out = simple_reply(request.cookie, 0);
            out.extend_from_slice(&data);
            return Ok(out);
        }
        let mut payload = request.offset.to_be_bytes().to_vec();
        payload.extend_from_slice(&data);
        let mut out = Vec::with_capacity(payload.len() + 20);
        structured_chunk(
            &mut out,
            request.cookie,
            REPLY_FLAG_DONE,
            REPLY_TYPE_OFFSET_DATA,
            &payload,
        );
        return Ok(out);
    }
    // Structured: holes and zeroes travel as OFFSET_HOLE chunks, without data.
    let mut out = Vec::with_capacity(length + 64);
    let end = request.offset + length as u64;
    let mut at = request.offset;
    let mut rounds = 0;
    while at < end {
        rounds += 1;
        assert!(rounds <= length + 1, "extents make progress");
        let extents = export.extents(at, end - at).map_err(failure)?;
        if extents.is_empty() {
            return Err((EIO, "export reported no extents".into()));
        }
        for (extent_length, kind) in extents {
            let extent_length = extent_length.min(end - at);
            if extent_length == 0 {
                continue;
            }
            if kind == ExtentKind::Data {
                let mut payload = at.to_be_bytes().to_vec();
                payload.resize(8 + extent_length as usize, 0);
                export.read(at, &mut payload[8..]).map_err(failure)?;
                structured_chunk(
                    &mut out,
                    request.cookie,
                    0,
                    REPLY_TYPE_OFFSET_DATA,
                    &payload,
                );
            } else {
                let mut payload = at.to_be_bytes().to_vec();
                payload.extend_from_slice(&(extent_length as u32).to_be_bytes());
                structured_chunk(
                    &mut out,
                    request.cookie,
                    0,
                    REPLY_TYPE_OFFSET_HOLE,
                    &payload,
                );
            }
            at += extent_length;
        }
    }
    structured_chunk(
        &mut out,
        request.cookie,
        REPLY_FLAG_DONE,
        REPLY_TYPE_NONE,
        &[],
    );
    Ok(out)
}

fn block_status(context: &Context, request: Request) -> Result<Vec<u8>, Failure> {
    if !context.base_allocation {
        return Err((EINVAL, "no metadata context negotiated".into()));
    }
    if request.length == 0 {
        return Err((EINVAL, "zero-length block status".into()));
    }
    let extents = context
        .export
        .extents(request.offset, u64::from(request.length))
        .map_err(failure)?;
    let mut payload = BASE_ALLOCATION_ID.to_be_bytes().to_vec();
    let mut count = 0;
    'outer: for (mut length, kind) in extents {
        let flags = match kind {
            ExtentKind::Data => 0,
            ExtentKind::Zero => STATE_ZERO,
            ExtentKind::Hole => STATE_HOLE | STATE_ZERO,
        };
        while length > 0 {
            let piece = length.min(MAX_EXTENT_BYTES);
            payload.extend_from_slice(&(piece as u32).to_be_bytes());
            payload.extend_from_slice(&flags.to_be_bytes());
            length -= piece;
            count += 1;
            if count >= MAX_STATUS_EXTENTS || request.flags & CMD_FLAG_REQ_ONE != 0 {
                break 'outer;
            }
        }
    }
    if count == 0 {
        return Err((EIO, "export reported no extents".into()));
    }
    let mut out = Vec::with_capacity(payload.len() + 20);
    structured_chunk(
        &mut out,
        request.cookie,
        REPLY_FLAG_DONE,
        REPLY_TYPE_BLOCK_STATUS,
        &payload,
    );
    Ok(out)
}
