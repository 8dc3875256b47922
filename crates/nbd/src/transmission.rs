//! The transmission phase. One reader reads requests continuously. Small reads
//! and quick small writes it runs itself, gathering their replies while
//! requests arrive back to back and writing them once none is waiting (see
//! `runs_inline`); every other request runs on the blocking pool, which hands
//! its encoded reply to the writer task. Whoever writes holds the socket's
//! write half for whole replies, so frames never interleave; replies go out in
//! completion order, as NBD allows.
//!
//! Back-pressure: a request needs a slot (at most `MAX_IN_FLIGHT_PER_CONNECTION`)
//! and a share of a byte budget before the reader reads its payload, so a client
//! cannot make the server buffer more than the budget per connection. Replies
//! the reader gathered hold theirs until written, so it writes them before it
//! waits for anything.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, Mutex, OwnedSemaphorePermit, Semaphore};

use crate::error::ConnectionError;
use crate::export::{BlockExport, ExportError, ExtentKind};
use crate::handshake::{drain, Session};
use crate::protocol::{self as p, RequestHeader};
use crate::server::{Shared, SocketPoll};
use lacuna_sockpoll::{IdlePoll, Receive, SocketReader};

/// Largest read or write payload we serve; also advertised as the maximum block size.
pub const MAX_REQUEST_PAYLOAD_BYTES: u32 = 32 * 1024 * 1024;
/// Oversized write payloads up to this are read and discarded so the client gets
/// `EINVAL`; beyond it the stream is dropped rather than spend the bandwidth.
pub const MAX_DRAINABLE_PAYLOAD_BYTES: u32 = 64 * 1024 * 1024;
/// Requests executing or awaiting their reply, per connection.
pub const MAX_IN_FLIGHT_PER_CONNECTION: usize = 64;
/// Payload and reply bytes buffered per connection. At least one maximal request
/// always fits, so a single request can never wait forever.
pub const MAX_IN_FLIGHT_BYTES_PER_CONNECTION: u32 = 128 * 1024 * 1024;
/// Descriptors in one block-status reply (the export's view is summarised if longer).
pub const MAX_BLOCK_STATUS_EXTENTS: usize = 1024;
/// Content chunks in one structured read reply; the tail is sent as data.
pub const MAX_READ_CHUNKS: usize = 1024;
const READ_BUFFER_BYTES: usize = 256 * 1024;
const WRITE_BUFFER_BYTES: usize = 256 * 1024;

const _: () = assert!(MAX_REQUEST_PAYLOAD_BYTES <= MAX_DRAINABLE_PAYLOAD_BYTES);
const _: () = assert!(MAX_REQUEST_PAYLOAD_BYTES <= MAX_IN_FLIGHT_BYTES_PER_CONNECTION);

/// A validated request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read {
        offset: u64,
        length: u32,
        dont_fragment: bool,
    },
    Write {
        offset: u64,
        fua: bool,
    },
    Flush,
    Trim {
        offset: u64,
        length: u32,
        fua: bool,
    },
    WriteZeroes {
        offset: u64,
        length: u32,
        fua: bool,
        allow_unmap: bool,
    },
    BlockStatus {
        offset: u64,
        length: u32,
        req_one: bool,
    },
    Cache {
        offset: u64,
        length: u32,
    },
}

/// A request refused before reaching the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    pub errno: u32,
    pub message: &'static str,
}

const fn reject(errno: u32, message: &'static str) -> Rejection {
    Rejection { errno, message }
}

/// What `validate` needs to know about the session.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub size: u64,
    pub read_only: bool,
    pub structured: bool,
    pub block_status: bool,
}

impl Limits {
    pub fn of(session: &Session) -> Limits {
        Limits {
            size: session.size,
            read_only: session.read_only,
            structured: session.structured,
            block_status: session.base_allocation_context.is_some(),
        }
    }
}

/// Checks a request header against the session: command, flags, permissions,
/// length and range. Pure, so that every rule is unit tested.
pub fn validate(limits: &Limits, header: &RequestHeader) -> Result<Command, Rejection> {
    use p::*;
    let writes = matches!(
        header.command,
        NBD_CMD_WRITE | NBD_CMD_TRIM | NBD_CMD_WRITE_ZEROES
    );
    let allowed_flags = NBD_CMD_FLAG_FUA
        | match header.command {
            NBD_CMD_READ if limits.structured => NBD_CMD_FLAG_DF,
            NBD_CMD_WRITE_ZEROES => NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO,
            NBD_CMD_BLOCK_STATUS => NBD_CMD_FLAG_REQ_ONE,
            NBD_CMD_READ | NBD_CMD_WRITE | NBD_CMD_FLUSH | NBD_CMD_TRIM | NBD_CMD_CACHE => 0,
            _ => return Err(reject(NBD_EINVAL, "unknown command")),
        };
    if header.flags & !allowed_flags != 0 {
        return Err(reject(NBD_EINVAL, "flag not valid for this command"));
    }
    if writes && limits.read_only {
        return Err(reject(NBD_EPERM, "export is read-only"));
    }
    if header.command == NBD_CMD_BLOCK_STATUS && !limits.block_status {
        return Err(reject(NBD_EINVAL, "no metadata context negotiated"));
    }
    let (offset, length) = (header.offset, header.length);
    let fua = header.flags & NBD_CMD_FLAG_FUA != 0;
    if header.command == NBD_CMD_FLUSH {
        if offset != 0 || length != 0 {
            return Err(reject(NBD_EINVAL, "flush offset and length must be zero"));
        }
        return Ok(Command::Flush);
    }
    if length == 0 {
        return Err(reject(NBD_EINVAL, "zero length"));
    }
    if matches!(header.command, NBD_CMD_READ | NBD_CMD_WRITE) && length > MAX_REQUEST_PAYLOAD_BYTES
    {
        // With structured replies a client may split a read refused with
        // EOVERFLOW and try again (NBD protocol, "Block size constraints").
        let errno = if header.command == NBD_CMD_READ && limits.structured {
            NBD_EOVERFLOW
        } else {
            NBD_EINVAL
        };
        return Err(reject(errno, "request exceeds the maximum payload"));
    }
    let Some(end) = offset.checked_add(u64::from(length)) else {
        return Err(reject(NBD_EINVAL, "offset plus length overflows"));
    };
    if end > limits.size {
        // The protocol asks for ENOSPC on writes past the end, EINVAL on
        // reads and trims.
        let errno = if matches!(header.command, NBD_CMD_WRITE | NBD_CMD_WRITE_ZEROES) {
            NBD_ENOSPC
        } else {
            NBD_EINVAL
        };
        return Err(reject(
            errno,
            "request extends beyond the end of the export",
        ));
    }
    Ok(match header.command {
        NBD_CMD_READ => Command::Read {
            offset,
            length,
            dont_fragment: header.flags & NBD_CMD_FLAG_DF != 0,
        },
        NBD_CMD_WRITE => Command::Write { offset, fua },
        NBD_CMD_TRIM => Command::Trim {
            offset,
            length,
            fua,
        },
        NBD_CMD_WRITE_ZEROES => Command::WriteZeroes {
            offset,
            length,
            fua,
            allow_unmap: header.flags & NBD_CMD_FLAG_NO_HOLE == 0,
        },
        NBD_CMD_BLOCK_STATUS => Command::BlockStatus {
            offset,
            length,
            req_one: header.flags & NBD_CMD_FLAG_REQ_ONE != 0,
        },
        NBD_CMD_CACHE => Command::Cache { offset, length },
        _ => unreachable!("unknown commands were rejected above"),
    })
}

/// The resources a request holds until its reply has been written.
struct InFlight {
    _slot: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
    /// Its share of the server-wide budget.
    _shared_bytes: OwnedSemaphorePermit,
}

/// Encoded replies (each whole, all its chunks), written as a unit, and what
/// their requests hold until then.
struct Outgoing {
    frames: Vec<u8>,
    _in_flight: Vec<InFlight>,
}

/// The socket's write half, taken by whoever writes: the writer task for
/// replies made on the blocking pool, the reader for its own.
type Wire<W> = Arc<Mutex<BufWriter<W>>>;

/// Runs the transmission phase until the client disconnects; `poll`: the
/// socket may be polled when the connection is idle (see `lacuna_sockpoll`).
pub(crate) async fn run<S>(
    stream: S,
    session: Session,
    shared: Arc<Shared>,
    poll: Option<SocketPoll>,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read_half, write_half) = tokio::io::split(stream);
    let budget = shared.config.idle_poll;
    match poll {
        Some(poll) if !budget.is_zero() => {
            let idle = Arc::new(IdlePoll::new(budget, poll.slots));
            let reader = SocketReader::new(read_half, poll.fd, idle.clone(), Receive::WhilePolling);
            let reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
            serve(reader, write_half, session, shared, Some(idle)).await
        }
        _ => {
            let reader = BufReader::with_capacity(READ_BUFFER_BYTES, read_half);
            serve(reader, write_half, session, shared, None).await
        }
    }
}

async fn serve<R, W>(
    mut reader: R,
    write_half: W,
    session: Session,
    shared: Arc<Shared>,
    idle: Option<Arc<IdlePoll>>,
) -> Result<(), ConnectionError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let wire = Arc::new(Mutex::new(BufWriter::with_capacity(
        WRITE_BUFFER_BYTES,
        write_half,
    )));
    let (sender, receiver) = mpsc::channel(MAX_IN_FLIGHT_PER_CONNECTION);
    let write_timeout = shared.config.reply_write_timeout;
    let mut writer = tokio::spawn(write_replies(wire.clone(), receiver, write_timeout));
    let session = Arc::new(session);
    let mut replies = Replies {
        wire,
        sender,
        frames: Vec::new(),
        held: Vec::new(),
        write_timeout,
    };
    // The reader holds a sender, so the writer ends first only when it
    // failed (the client is gone, or read nothing in time): then the reader,
    // perhaps waiting for a request that never comes, stops too.
    let (read_result, written) = {
        let reading = read_requests(
            &mut reader,
            &session,
            &shared,
            &mut replies,
            idle.as_deref(),
        );
        tokio::pin!(reading);
        tokio::select! {
            result = &mut reading => (Some(result), None),
            written = &mut writer => (None, Some(written)),
        }
    };
    // Every request running on the pool holds a sender: the writer finishes
    // once all of them replied.
    drop(replies);
    let written = match written {
        Some(written) => written,
        None => writer.await,
    };
    let write_result = written.map_err(|_| ConnectionError::BlockingTask)?;
    if let Some(read_result) = read_result {
        read_result?;
    }
    write_result?;
    Ok(())
}

async fn write_replies<W: AsyncWrite + Unpin>(
    wire: Wire<W>,
    mut receiver: mpsc::Receiver<Outgoing>,
    write_timeout: Duration,
) -> std::io::Result<()> {
    while let Some(reply) = receiver.recv().await {
        let mut writer = wire.lock().await;
        within(write_timeout, writer.write_all(&reply.frames)).await?;
        drop(reply);
        // Coalesce replies that are already waiting into one flush. Bounded: the
        // channel holds at most MAX_IN_FLIGHT_PER_CONNECTION replies.
        while let Ok(reply) = receiver.try_recv() {
            within(write_timeout, writer.write_all(&reply.frames)).await?;
        }
        within(write_timeout, writer.flush()).await?;
    }
    wire.lock().await.shutdown().await
}

/// `write`, failed with `TimedOut` if it takes longer than `timeout`. Why:
/// a client that stops reading would otherwise keep its replies, and the
/// server-wide buffer budget they hold, for ever.
async fn within(
    timeout: Duration,
    write: impl Future<Output = std::io::Result<()>>,
) -> std::io::Result<()> {
    match tokio::time::timeout(timeout, write).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client read no reply in time",
        )),
    }
}

/// Replies of the requests the reader ran itself, gathered while requests
/// arrive back to back and written once none is waiting.
struct Replies<W> {
    wire: Wire<W>,
    sender: mpsc::Sender<Outgoing>,
    frames: Vec<u8>,
    held: Vec<InFlight>,
    write_timeout: Duration,
}

/// The writer task has stopped: the client is gone.
struct WriterGone;

impl<W: AsyncWrite + Unpin> Replies<W> {
    fn add(&mut self, in_flight: InFlight) {
        assert!(self.held.len() < MAX_IN_FLIGHT_PER_CONNECTION);
        self.held.push(in_flight);
    }

    /// Writes the gathered replies: straight to the socket when the writer task
    /// is not using it, else through that task.
    async fn flush(&mut self) -> Result<Result<(), WriterGone>, ConnectionError> {
        if self.held.is_empty() {
            assert!(self.frames.is_empty(), "every reply belongs to a request");
            return Ok(Ok(()));
        }
        if let Ok(mut writer) = self.wire.try_lock() {
            within(self.write_timeout, writer.write_all(&self.frames)).await?;
            within(self.write_timeout, writer.flush()).await?;
            drop(writer);
            self.frames.clear();
            self.held.clear();
            return Ok(Ok(()));
        }
        let reply = Outgoing {
            frames: std::mem::take(&mut self.frames),
            _in_flight: std::mem::take(&mut self.held),
        };
        Ok(self.sender.send(reply).await.map_err(|_| WriterGone))
    }
}

/// `future`'s output: at once if it is ready, else once the gathered replies
/// are written and it is done; `None` if the writer task is gone.
async fn after_replies<F: Future + Unpin, W: AsyncWrite + Unpin>(
    replies: &mut Replies<W>,
    mut future: F,
    before_waiting: impl FnOnce(),
) -> Result<Option<F::Output>, ConnectionError> {
    let now = std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut future).poll(cx) {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        })
    })
    .await;
    if let Some(output) = now {
        return Ok(Some(output));
    }
    if replies.flush().await?.is_err() {
        return Ok(None);
    }
    before_waiting();
    Ok(Some(future.await))
}

async fn read_requests<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    reader: &mut R,
    session: &Arc<Session>,
    shared: &Arc<Shared>,
    replies: &mut Replies<W>,
    idle: Option<&IdlePoll>,
) -> Result<(), ConnectionError> {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONNECTION));
    let budget = Arc::new(Semaphore::new(MAX_IN_FLIGHT_BYTES_PER_CONNECTION as usize));
    let limits = Limits::of(session);
    let mut requests_since_wait: u32 = 0;
    loop {
        // Before any wait, the gathered replies go out (`after_replies`): they
        // hold slots and budget, and the client may be waiting for them.
        let acquire = std::pin::pin!(slots.clone().acquire_owned());
        let Some(slot) = after_replies(replies, acquire, || ()).await? else {
            return Ok(());
        };
        let slot = slot.expect("semaphore never closed");
        let mut raw = [0u8; p::REQUEST_HEADER_BYTES];
        let read = std::pin::pin!(reader.read_exact(&mut raw));
        // With every reply written and nothing running elsewhere (this
        // request's slot is the only one taken), the next request is the
        // client's move: worth polling for, if the client is one that waits
        // for each reply (one request came since the reader last waited). A
        // client keeping many requests in flight sends the next ones without
        // waiting for us, and a poll would only take a core from it.
        let mut waits = false;
        let quiet = || {
            waits = true;
            let alone = slots.available_permits() + 1 == MAX_IN_FLIGHT_PER_CONNECTION;
            match idle {
                Some(idle) if alone && requests_since_wait <= MAX_REQUESTS_TO_POLL => idle.arm(),
                _ => {}
            }
        };
        let Some(read) = after_replies(replies, read, quiet).await? else {
            return Ok(());
        };
        if let Some(idle) = idle {
            idle.disarm();
        }
        if waits {
            requests_since_wait = 0;
        }
        requests_since_wait += 1;
        match read {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                // The connection ends whether or not the writer is still there.
                let _ = replies.flush().await?;
                return Ok(());
            }
            Err(error) => return Err(error.into()),
        }
        let header = p::decode_request_header(&raw).ok_or(ConnectionError::BadMagic)?;
        if header.command == p::NBD_CMD_DISC {
            let _ = replies.flush().await?;
            return Ok(());
        }
        let cost = buffer_cost(&header);
        let acquire = std::pin::pin!(budget.clone().acquire_many_owned(cost));
        let Some(bytes) = after_replies(replies, acquire, || ()).await? else {
            return Ok(());
        };
        let bytes = bytes.expect("semaphore never closed");
        let acquire = std::pin::pin!(shared.buffers.clone().acquire_many_owned(cost));
        let Some(shared_bytes) = after_replies(replies, acquire, || ()).await? else {
            return Ok(());
        };
        let shared_bytes = shared_bytes.expect("semaphore never closed");
        let read = std::pin::pin!(read_payload(reader, &header));
        let Some(payload) = after_replies(replies, read, || ()).await? else {
            return Ok(());
        };
        let payload = payload?;
        let in_flight = InFlight {
            _slot: slot,
            _bytes: bytes,
            _shared_bytes: shared_bytes,
        };
        match validate(&limits, &header) {
            Ok(command)
                if runs_inline(session, command, payload.len())
                    && execute_caught(
                        &mut replies.frames,
                        session,
                        header.handle,
                        (command, &payload),
                        Fetch::Cached,
                    ) =>
            {
                replies.add(in_flight);
            }
            Ok(command) => dispatch(
                session,
                shared,
                &replies.sender,
                header.handle,
                command,
                payload,
                in_flight,
            ),
            Err(rejection) => {
                encode_error(
                    &mut replies.frames,
                    session.structured,
                    header.handle,
                    rejection.errno,
                    rejection.message,
                );
                replies.add(in_flight);
            }
        }
        if replies.frames.len() >= REPLY_BATCH_BYTES && replies.flush().await?.is_err() {
            return Ok(());
        }
    }
}

/// Most requests read since the reader last waited for the socket for it to
/// poll before it waits again (see `read_requests`).
const MAX_REQUESTS_TO_POLL: u32 = 1;
/// Largest read the reader runs itself.
const MAX_INLINE_READ_BYTES: u32 = 128 * 1024;
/// Largest write the reader runs itself, when the export says it is quick.
const MAX_INLINE_WRITE_BYTES: u32 = 64 * 1024;
/// Gathered replies are written once they reach this much, even while more
/// requests are waiting.
const REPLY_BATCH_BYTES: usize = 64 * 1024;

/// Whether a request runs on the reader's own task, with no hand-off. Why:
/// a small read takes microseconds (the volume's metadata, the page cache)
/// and a small write without FUA little more when the export says it will
/// not wait for background work; two trips through the blocking pool and a
/// wake-up of the writer task cost more than that, and at queue depth one
/// they are most of a request's latency (as in the iSCSI target, which
/// runs the same commands on its processing loop). Everything else (flushes
/// and FUA sync the disks; trims, zeroing and block status may cover
/// gigabytes) goes to the pool, so the reader keeps reading meanwhile.
fn runs_inline(session: &Session, command: Command, payload_bytes: usize) -> bool {
    match command {
        // A structured read large enough to look for holes asks the export
        // for its extents, which is not memory-only work (the engine
        // commits the writes waiting for a batch first).
        Command::Read {
            length,
            dont_fragment,
            ..
        } => {
            let sparse = session.structured && !dont_fragment && length >= MIN_SPARSE_READ_BYTES;
            length <= MAX_INLINE_READ_BYTES && !sparse
        }
        Command::Write { fua: false, .. } => {
            payload_bytes <= MAX_INLINE_WRITE_BYTES as usize
                && session.export.write_is_quick(payload_bytes as u64)
        }
        _ => false,
    }
}

/// Bytes of buffer a request will hold: its payload, or the data it reads.
fn buffer_cost(header: &RequestHeader) -> u32 {
    match header.command {
        p::NBD_CMD_READ | p::NBD_CMD_WRITE if header.length <= MAX_REQUEST_PAYLOAD_BYTES => {
            header.length
        }
        _ => 0,
    }
}

/// Reads a write's payload; an oversized one is drained (the request is then
/// rejected by `validate`) or, if absurd, ends the connection.
async fn read_payload<R: AsyncRead + Unpin>(
    reader: &mut R,
    header: &RequestHeader,
) -> Result<bytes::Bytes, ConnectionError> {
    if header.command != p::NBD_CMD_WRITE {
        return Ok(bytes::Bytes::new());
    }
    if header.length > MAX_DRAINABLE_PAYLOAD_BYTES {
        return Err(ConnectionError::PayloadTooLarge(header.length));
    }
    if header.length > MAX_REQUEST_PAYLOAD_BYTES {
        drain(reader, u64::from(header.length)).await?;
        return Ok(bytes::Bytes::new());
    }
    // Received into memory not zeroed first (`read_exact` wants initialised
    // bytes: a memset of every payload for nothing).
    let length_bytes = header.length as usize;
    let mut payload = bytes::BytesMut::with_capacity(length_bytes);
    while payload.len() < length_bytes {
        let missing_bytes = length_bytes - payload.len();
        let mut room = bytes::BufMut::limit(&mut payload, missing_bytes);
        if reader.read_buf(&mut room).await? == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
    }
    assert_eq!(payload.len(), length_bytes);
    Ok(payload.freeze())
}

/// Runs a request on the blocking pool, which hands its reply to the writer
/// task itself (one hand-off; an executor task waiting for the pool was two).
/// When the pool is at its bound, a task waits for room instead.
fn dispatch(
    session: &Arc<Session>,
    shared: &Arc<Shared>,
    sender: &mpsc::Sender<Outgoing>,
    handle: u64,
    command: Command,
    payload: bytes::Bytes,
    in_flight: InFlight,
) {
    let structured = session.structured;
    let session = session.clone();
    let sender = sender.clone();
    let run = move || {
        let mut frames = Vec::new();
        let fetch = Fetch::Wait;
        let answered = execute_caught(&mut frames, &session, handle, (command, &payload), fetch);
        assert!(answered, "a request that may wait is always answered");
        frames
    };
    let reply = move |frames: Vec<u8>| Outgoing {
        frames,
        _in_flight: vec![in_flight],
    };
    match shared.try_blocking_permit() {
        Some(permit) => {
            tokio::task::spawn_blocking(move || {
                let frames = run();
                drop(permit);
                // A send error means the client is gone; the reply has nowhere to go.
                let _ = sender.blocking_send(reply(frames));
            });
        }
        None => {
            let shared = shared.clone();
            tokio::spawn(async move {
                let frames = shared.run_blocking(run).await.unwrap_or_else(|| {
                    let mut frames = Vec::new();
                    encode_error(&mut frames, structured, handle, p::NBD_EIO, EXPORT_FAILED);
                    frames
                });
                let _ = sender.send(reply(frames)).await;
            });
        }
    }
}

const EXPORT_FAILED: &str = "export call failed";

/// [`execute`], with a panic in the export answered as an I/O error (and the
/// reply's partial frames taken back) rather than ending the connection.
fn execute_caught(
    frames: &mut Vec<u8>,
    session: &Session,
    handle: u64,
    (command, payload): (Command, &bytes::Bytes),
    fetch: Fetch,
) -> bool {
    let start = frames.len();
    let call = || execute(frames, session, handle, (command, payload), fetch);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or_else(|_| {
        frames.truncate(start);
        encode_error(
            frames,
            session.structured,
            handle,
            p::NBD_EIO,
            EXPORT_FAILED,
        );
        true
    })
}

/// How a read gets its bytes from the export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// Waiting for the disk if need be (on the pool).
    Wait,
    /// From memory only (on the reader).
    Cached,
}

impl Fetch {
    /// Reads `buf` at `offset`: false if `Cached` and the bytes are not in memory.
    fn read(
        self,
        export: &dyn BlockExport,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<bool, ExportError> {
        match self {
            Fetch::Wait => export.read(offset, buf).map(|()| true),
            Fetch::Cached => export.read_from_memory(offset, buf),
        }
    }
}

/// Appends a read's reply (its data, or its error): false, with nothing
/// appended, if `fetch` is `Cached` and the data is not in memory.
fn read_reply(
    frames: &mut Vec<u8>,
    session: &Session,
    handle: u64,
    (offset, length): (u64, u32),
    dont_fragment: bool,
    fetch: Fetch,
) -> bool {
    let export = session.export.as_ref();
    let start = frames.len();
    let result = if session.structured {
        read_structured(frames, export, handle, offset, length, dont_fragment, fetch)
    } else {
        read_simple(frames, export, handle, offset, length, fetch)
    };
    match result {
        Ok(true) => true,
        Ok(false) => {
            assert!(fetch == Fetch::Cached, "a read that may wait always reads");
            frames.truncate(start);
            false
        }
        Err(error) => {
            frames.truncate(start);
            encode_error(
                frames,
                session.structured,
                handle,
                error.errno(),
                &error.to_string(),
            );
            true
        }
    }
}

/// Performs a validated command against the export and appends its reply to
/// `frames`: on the blocking pool (`Fetch::Wait`, always answered), or on the
/// reader (`runs_inline`, `Fetch::Cached`): false then, with nothing
/// appended, for a read the export could make only by waiting for a disk,
/// which the pool then makes.
pub fn execute(
    frames: &mut Vec<u8>,
    session: &Session,
    handle: u64,
    (command, payload): (Command, &bytes::Bytes),
    fetch: Fetch,
) -> bool {
    let export = session.export.as_ref();
    let structured = session.structured;
    let result = match command {
        Command::Read {
            offset,
            length,
            dont_fragment,
        } => {
            return read_reply(
                frames,
                session,
                handle,
                (offset, length),
                dont_fragment,
                fetch,
            );
        }
        Command::Write { offset, fua } => export
            .write_shared(offset, payload)
            .and_then(|()| flush_if(export, fua)),
        Command::Flush => export.flush(),
        Command::Trim {
            offset,
            length,
            fua,
        } => export
            .trim(offset, u64::from(length))
            .and_then(|()| flush_if(export, fua)),
        Command::WriteZeroes {
            offset,
            length,
            fua,
            allow_unmap,
        } => export
            .write_zeroes(offset, u64::from(length), allow_unmap)
            .and_then(|()| flush_if(export, fua)),
        Command::Cache { offset, length } => export.cache(offset, u64::from(length)),
        Command::BlockStatus {
            offset,
            length,
            req_one,
        } => {
            let context = session.base_allocation_context.expect("validated");
            match block_status(export, offset, length, req_one) {
                Ok(extents) => {
                    p::encode_block_status_chunk(frames, handle, context, &extents);
                    return true;
                }
                Err(error) => Err(error),
            }
        }
    };
    match result {
        Ok(()) => p::encode_simple_reply(frames, handle, 0),
        Err(error) => encode_error(
            frames,
            structured,
            handle,
            error.errno(),
            &error.to_string(),
        ),
    }
    true
}

/// FUA is implemented as a flush after the write: the export's flush is grouped.
fn flush_if(export: &dyn BlockExport, fua: bool) -> Result<(), ExportError> {
    if fua {
        export.flush()
    } else {
        Ok(())
    }
}

pub fn encode_error(
    frames: &mut Vec<u8>,
    structured: bool,
    handle: u64,
    errno: u32,
    message: &str,
) {
    assert_ne!(errno, 0);
    if structured {
        p::encode_error_chunk(frames, handle, errno, message);
    } else {
        p::encode_simple_reply(frames, handle, errno);
    }
}

fn read_simple(
    frames: &mut Vec<u8>,
    export: &dyn BlockExport,
    handle: u64,
    offset: u64,
    length: u32,
    fetch: Fetch,
) -> Result<bool, ExportError> {
    frames.reserve_exact(p::SIMPLE_REPLY_HEADER_BYTES + length as usize);
    p::encode_simple_reply(frames, handle, 0);
    let start = frames.len();
    frames.resize(start + length as usize, 0);
    fetch.read(export, offset, &mut frames[start..])
}

/// Shortest read answered with hole chunks where it reads as zero. Why not
/// every read: finding the holes is a second lookup of the same metadata,
/// which for a 4 KiB read cost a third as much as the read itself, to save
/// at most a few KiB on the wire.
const MIN_SPARSE_READ_BYTES: u32 = 64 * 1024;

/// A structured read: hole chunks for runs the export reports as reading zero,
/// data chunks for the rest (one data chunk when the client asked not to
/// fragment, or the read is short). The whole reply is built before sending, so the last content
/// chunk can carry the DONE flag.
fn read_structured(
    frames: &mut Vec<u8>,
    export: &dyn BlockExport,
    handle: u64,
    offset: u64,
    length: u32,
    dont_fragment: bool,
    fetch: Fetch,
) -> Result<bool, ExportError> {
    let runs = if dont_fragment || length < MIN_SPARSE_READ_BYTES {
        vec![(u64::from(length), false)]
    } else {
        read_runs(export, offset, u64::from(length))
    };
    assert!(!runs.is_empty());
    frames.reserve(length as usize + runs.len() * (p::CHUNK_HEADER_BYTES + 12));
    let mut position = offset;
    let mut last_header = 0;
    for (run_length, zero) in runs {
        let run = u32::try_from(run_length).expect("runs lie within a u32 request");
        last_header = frames.len();
        if zero {
            p::encode_chunk_header(frames, 0, p::NBD_REPLY_TYPE_OFFSET_HOLE, handle, 12);
            frames.extend_from_slice(&position.to_be_bytes());
            frames.extend_from_slice(&run.to_be_bytes());
        } else {
            p::encode_chunk_header(frames, 0, p::NBD_REPLY_TYPE_OFFSET_DATA, handle, 8 + run);
            frames.extend_from_slice(&position.to_be_bytes());
            let start = frames.len();
            frames.resize(start + run as usize, 0);
            if !fetch.read(export, position, &mut frames[start..])? {
                return Ok(false);
            }
        }
        position += run_length;
    }
    assert_eq!(position, offset + u64::from(length));
    p::mark_chunk_done(frames, last_header);
    Ok(true)
}

/// Splits a read into (length, reads-as-zero) runs covering it exactly. If the
/// export cannot say, the whole read is data.
fn read_runs(export: &dyn BlockExport, offset: u64, length: u64) -> Vec<(u64, bool)> {
    let extents = export.extents(offset, length).unwrap_or_default();
    let mut runs = merge_extents(
        &extents,
        length,
        MAX_READ_CHUNKS - 1,
        ExtentKind::reads_as_zero,
    );
    let covered: u64 = runs.iter().map(|&(run, _)| run).sum();
    if covered < length {
        match runs.last_mut() {
            Some((run, false)) => *run += length - covered,
            _ => runs.push((length - covered, false)),
        }
    }
    runs
}

/// Block status descriptors for `[offset, offset + length)`: at least one, at most
/// one if `req_one`, merged by state and capped at `MAX_BLOCK_STATUS_EXTENTS`.
fn block_status(
    export: &dyn BlockExport,
    offset: u64,
    length: u32,
    req_one: bool,
) -> Result<Vec<(u32, u32)>, ExportError> {
    let extents = export.extents(offset, u64::from(length))?;
    let max_runs = if req_one { 1 } else { MAX_BLOCK_STATUS_EXTENTS };
    let runs = merge_extents(
        &extents,
        u64::from(length),
        max_runs,
        ExtentKind::base_allocation_flags,
    );
    if runs.is_empty() {
        // The export described nothing: "allocated, contents unknown" is always true.
        return Ok(vec![(length, 0)]);
    }
    let descriptors = runs
        .into_iter()
        .map(|(run, flags)| {
            (
                u32::try_from(run).expect("runs lie within a u32 request"),
                flags,
            )
        })
        .collect();
    Ok(descriptors)
}

/// Clips the export's extents to `length`, drops empty ones and merges
/// neighbours with equal `key`, stopping at `max_runs` runs. The result covers
/// a prefix of the range (all of it when the export covered it).
pub fn merge_extents<K: PartialEq + Copy>(
    extents: &[(u64, ExtentKind)],
    length: u64,
    max_runs: usize,
    key: impl Fn(ExtentKind) -> K,
) -> Vec<(u64, K)> {
    assert!(max_runs > 0);
    let mut runs: Vec<(u64, K)> = Vec::new();
    let mut covered = 0u64;
    for &(extent_length, kind) in extents {
        let extent_length = extent_length.min(length - covered);
        if extent_length == 0 {
            if covered == length {
                break;
            }
            continue;
        }
        let kind = key(kind);
        let full = runs.len() == max_runs;
        match runs.last_mut() {
            Some((run, last)) if *last == kind => *run += extent_length,
            _ if full => break,
            _ => runs.push((extent_length, kind)),
        }
        covered += extent_length;
    }
    assert!(covered <= length && runs.len() <= max_runs);
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use p::*;

    const LIMITS: Limits = Limits {
        size: 1 << 20,
        read_only: false,
        structured: true,
        block_status: true,
    };

    fn header(command: u16, flags: u16, offset: u64, length: u32) -> RequestHeader {
        RequestHeader {
            flags,
            command,
            handle: 1,
            offset,
            length,
        }
    }

    fn errno(limits: &Limits, h: RequestHeader) -> u32 {
        validate(limits, &h).unwrap_err().errno
    }

    /// Hands out its bytes at most `chunk_bytes` per read, as a socket may.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        chunk_bytes: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let end = self.bytes.len().min(self.at + self.chunk_bytes);
            let n = (end - self.at).min(buf.remaining());
            buf.put_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Poll::Ready(Ok(()))
        }
    }

    /// A write's payload arrives whole however the socket splits it, and
    /// nothing after it is taken; one cut short is an error, not a payload.
    #[tokio::test]
    async fn a_payload_is_received_whole_from_pieces() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut reader = Trickle {
            bytes: bytes.clone(),
            at: 0,
            chunk_bytes: 999,
        };
        let write = |length| header(NBD_CMD_WRITE, 0, 0, length);
        let payload = read_payload(&mut reader, &write(6000)).await.unwrap();
        assert_eq!(payload[..], bytes[..6000]);
        assert_eq!(reader.at, 6000, "not a byte of the next request taken");
        let short = read_payload(&mut reader, &write(4001)).await;
        assert!(
            matches!(short, Err(ConnectionError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof)
        );
    }

    #[test]
    fn validate_accepts_good_requests() {
        assert_eq!(
            validate(&LIMITS, &header(NBD_CMD_READ, NBD_CMD_FLAG_DF, 0, 4096)),
            Ok(Command::Read {
                offset: 0,
                length: 4096,
                dont_fragment: true
            })
        );
        assert_eq!(
            validate(
                &LIMITS,
                &header(
                    NBD_CMD_WRITE_ZEROES,
                    NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FUA,
                    4096,
                    4096
                )
            ),
            Ok(Command::WriteZeroes {
                offset: 4096,
                length: 4096,
                fua: true,
                allow_unmap: false
            })
        );
        assert_eq!(
            validate(&LIMITS, &header(NBD_CMD_FLUSH, 0, 0, 0)),
            Ok(Command::Flush)
        );
        // The last byte of the export is in range.
        assert!(validate(&LIMITS, &header(NBD_CMD_WRITE, 0, (1 << 20) - 1, 1)).is_ok());
        // FUA is accepted on every command.
        assert!(validate(&LIMITS, &header(NBD_CMD_READ, NBD_CMD_FLAG_FUA, 0, 1)).is_ok());
    }

    #[test]
    fn validate_rejects_bad_requests() {
        assert_eq!(errno(&LIMITS, header(99, 0, 0, 1)), NBD_EINVAL);
        assert_eq!(
            errno(&LIMITS, header(NBD_CMD_WRITE, NBD_CMD_FLAG_DF, 0, 1)),
            NBD_EINVAL
        );
        assert_eq!(
            errno(&LIMITS, header(NBD_CMD_READ, 1 << 9, 0, 1)),
            NBD_EINVAL
        );
        assert_eq!(errno(&LIMITS, header(NBD_CMD_READ, 0, 0, 0)), NBD_EINVAL);
        assert_eq!(errno(&LIMITS, header(NBD_CMD_FLUSH, 0, 1, 0)), NBD_EINVAL);
        assert_eq!(
            errno(&LIMITS, header(NBD_CMD_READ, 0, 1 << 20, 1)),
            NBD_EINVAL
        );
        assert_eq!(
            errno(&LIMITS, header(NBD_CMD_WRITE, 0, 1 << 20, 1)),
            NBD_ENOSPC
        );
        assert_eq!(
            errno(&LIMITS, header(NBD_CMD_TRIM, 0, u64::MAX, 2)),
            NBD_EINVAL
        );
        assert_eq!(
            errno(
                &LIMITS,
                header(NBD_CMD_READ, 0, 0, MAX_REQUEST_PAYLOAD_BYTES + 1)
            ),
            NBD_EOVERFLOW
        );
        assert_eq!(
            errno(&LIMITS, header(NBD_CMD_TRIM, 0, (1 << 20) - 1, 2)),
            NBD_EINVAL
        );
        assert_eq!(
            errno(&LIMITS, header(NBD_CMD_WRITE_ZEROES, 0, (1 << 20) - 1, 2)),
            NBD_ENOSPC
        );
        let read_only = Limits {
            read_only: true,
            ..LIMITS
        };
        assert_eq!(errno(&read_only, header(NBD_CMD_TRIM, 0, 0, 1)), NBD_EPERM);
        assert!(validate(&read_only, &header(NBD_CMD_READ, 0, 0, 1)).is_ok());
        let simple = Limits {
            structured: false,
            block_status: false,
            ..LIMITS
        };
        assert_eq!(
            errno(&simple, header(NBD_CMD_READ, NBD_CMD_FLAG_DF, 0, 1)),
            NBD_EINVAL
        );
        assert_eq!(
            errno(
                &simple,
                header(NBD_CMD_READ, 0, 0, MAX_REQUEST_PAYLOAD_BYTES + 1)
            ),
            NBD_EINVAL
        );
        assert_eq!(
            errno(&simple, header(NBD_CMD_BLOCK_STATUS, 0, 0, 1)),
            NBD_EINVAL
        );
    }

    #[test]
    fn merge_clips_merges_and_caps() {
        use ExtentKind::*;
        let extents = [
            (10, Data),
            (0, Hole),
            (5, Data),
            (7, Hole),
            (8, Zero),
            (100, Data),
        ];
        let zero = merge_extents(&extents, 40, 16, ExtentKind::reads_as_zero);
        assert_eq!(zero, vec![(15, false), (15, true), (10, false)]);
        let flags = merge_extents(&extents, 40, 16, ExtentKind::base_allocation_flags);
        assert_eq!(flags, vec![(15, 0), (7, 3), (8, 2), (10, 0)]);
        let capped = merge_extents(&extents, 40, 2, ExtentKind::base_allocation_flags);
        assert_eq!(capped, vec![(15, 0), (7, 3)]);
        let short = merge_extents(&[(4, Hole)], 40, 16, ExtentKind::reads_as_zero);
        assert_eq!(short, vec![(4, true)]);
    }
}
