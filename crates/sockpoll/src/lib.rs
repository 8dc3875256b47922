//! Polling an idle connection's socket for a few tens of microseconds before
//! sleeping. Shared by the transports (iSCSI, NBD), which know nothing of
//! each other; this crate knows nothing of either protocol.
//!
//! Why: at queue depth one a client sends its next request a few tens of
//! microseconds after it read our answer. If the connection's task sleeps in
//! the reactor meanwhile, the next request costs a wake-up of a sleeping thread,
//! often on a halted core; on virtual machines whose idle vCPUs halt at once
//! (no guest halt polling), that wake-up costs as much as the whole command.
//! Polling the socket for a short budget keeps the core awake across that gap,
//! as SPDK's poll loop and the kernel's socket busy polling do.
//!
//! Why it is bounded three ways: (1) a budget per idle period, so a quiet
//! connection burns one budget and then sleeps; (2) a backoff after periods in
//! which nothing came, so a client that always thinks longer than the budget
//! does not cost a budget per command; (3) a limit on connections polling at
//! once ([`PollSlots`]), so polling never occupies every runtime worker.
//!
//! A connection only polls when everything it was asked is answered and
//! nothing runs elsewhere: an answer that a pool thread will hand to the
//! writer task would otherwise wait for a worker that is busy polling. The
//! transport decides that, and arms the poll (`IdlePoll::arm`) accordingly.

use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, ReadBuf};

/// Least time one receive attempt is taken to cost, to bound the attempts in
/// a budget whatever the clock says (a non-blocking receive costs a few
/// hundred nanoseconds, so the clock ends a poll first).
const ATTEMPT_NANOS_MIN: u128 = 100;
/// Longest budget accepted.
pub const IDLE_POLL_MAX: Duration = Duration::from_secs(1);
/// The transports' default budget: longer than a client at queue depth one
/// usually takes between reading an answer and sending its next request,
/// short enough that a connection going quiet wastes little.
pub const DEFAULT_IDLE_POLL: Duration = Duration::from_micros(50);
/// Doublings of the backoff after idle periods in which nothing came: at
/// most 2^6 - 1 = 63 periods are then slept through without polling.
const BACKOFF_DOUBLINGS_MAX: u32 = 6;

/// Connections allowed to poll at the same time, across the target.
#[derive(Debug)]
pub struct PollSlots {
    polling: AtomicUsize,
    max: usize,
}

impl PollSlots {
    /// `max` connections may poll at once. Why the caller sizes it one below
    /// the runtime's workers: a worker always stays free for everything else.
    pub fn new(max: usize) -> PollSlots {
        PollSlots {
            polling: AtomicUsize::new(0),
            max,
        }
    }

    /// Slots for the connections of the current Tokio runtime: one below its
    /// workers, so that one worker always stays free of polling (a runtime
    /// with one worker never polls).
    pub fn for_current_runtime() -> PollSlots {
        let workers = tokio::runtime::Handle::current().metrics().num_workers();
        PollSlots::new(workers.saturating_sub(1))
    }

    fn try_take(&self) -> bool {
        self.polling
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |polling| {
                (polling < self.max).then_some(polling + 1)
            })
            .is_ok()
    }

    fn put_back(&self) {
        let before = self.polling.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "a poll slot was returned that was never taken");
    }
}

/// One connection's polling state, shared between its reading task (which
/// arms a poll when it is about to wait) and its [`SocketReader`] (which
/// polls). Both live in the same task; atomics only make it `Sync`.
#[derive(Debug)]
pub struct IdlePoll {
    budget: Duration,
    /// Receive attempts in one poll at most: the loop's bound.
    attempts_max: u32,
    slots: Arc<PollSlots>,
    armed: AtomicBool,
    /// Idle periods in a row in which the poll found nothing.
    misses: AtomicU32,
    /// Idle periods still to sleep through without polling (the backoff).
    skip: AtomicU32,
}

impl IdlePoll {
    /// A zero `budget` never polls.
    pub fn new(budget: Duration, slots: Arc<PollSlots>) -> IdlePoll {
        assert!(budget <= IDLE_POLL_MAX, "idle poll budget {budget:?}");
        let attempts_max = u32::try_from(budget.as_nanos() / ATTEMPT_NANOS_MIN + 1)
            .expect("a budget of at most a second");
        IdlePoll {
            budget,
            attempts_max,
            slots,
            armed: AtomicBool::new(false),
            misses: AtomicU32::new(0),
            skip: AtomicU32::new(0),
        }
    }

    /// Called when the connection's task is about to wait for the socket: the
    /// next read that would block polls first, unless polling is off or
    /// backing off.
    pub fn arm(&self) {
        if self.budget.is_zero() {
            return;
        }
        let skip = self.skip.load(Ordering::Relaxed);
        if skip > 0 {
            self.skip.store(skip - 1, Ordering::Relaxed);
            return;
        }
        self.armed.store(true, Ordering::Relaxed);
    }

    /// Called when the loop will not wait for the socket after all.
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::Relaxed);
    }

    fn take_armed(&self) -> bool {
        self.armed.swap(false, Ordering::Relaxed)
    }

    fn record(&self, outcome: Outcome) {
        match outcome {
            Outcome::Hit => {
                self.misses.store(0, Ordering::Relaxed);
                self.skip.store(0, Ordering::Relaxed);
            }
            Outcome::Miss => {
                let misses = self.misses.load(Ordering::Relaxed).saturating_add(1);
                self.misses.store(misses, Ordering::Relaxed);
                // 1, 3, 7, ... idle periods without polling, up to the cap.
                let skip = (1u32 << misses.min(BACKOFF_DOUBLINGS_MAX)) - 1;
                self.skip.store(skip, Ordering::Relaxed);
            }
        }
    }

    #[cfg(test)]
    fn skipping(&self) -> u32 {
        self.skip.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    fn misses(&self) -> u32 {
        self.misses.load(Ordering::Relaxed)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Hit,
    Miss,
}

/// The read half of a connection's socket that receives directly when it
/// can. Why directly: the reactor only learns that data arrived when some
/// worker next waits on it, and the whole point of a poll is that no worker
/// waited; so every read first tries a non-blocking receive itself and only
/// falls back to the reactor (which then wakes the task) when nothing is
/// there.
pub struct SocketReader<R> {
    inner: R,
    /// The socket `inner` reads from.
    fd: RawFd,
    poll: Arc<IdlePoll>,
    receive: Receive,
}

/// When a [`SocketReader`] receives directly rather than through the reactor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receive {
    /// Every read tries a non-blocking receive first: what a poll left in the
    /// socket is read at once even though the reactor has not seen it. The
    /// iSCSI target, whose PDUs often take more than one read.
    DirectFirst,
    /// Only an armed poll receives directly. The NBD server: a request and
    /// its payload come in one read of its 256 KiB buffer, and a receive
    /// that found nothing before every reactor read took a fifth of 4 KiB
    /// random writes at queue depth 32 (fio's NBD engine).
    WhilePolling,
}

impl<R: AsyncRead + Unpin> SocketReader<R> {
    /// `inner` reads from the socket `fd` and keeps it open as long as it
    /// lives (a read half of the socket's stream).
    pub fn new(inner: R, fd: RawFd, poll: Arc<IdlePoll>, receive: Receive) -> SocketReader<R> {
        SocketReader {
            inner,
            fd,
            poll,
            receive,
        }
    }

    /// One non-blocking receive into `buf`. `Ok(true)` when it filled
    /// something or saw the end of the stream, `Ok(false)` when nothing was
    /// there.
    ///
    /// Receives into the buffer's unfilled part without zeroing it first (as
    /// tokio's own sockets do): a data segment of a large write arrives in a
    /// buffer of its length left uninitialised, and zeroing it before the
    /// kernel overwrote it cost 1.4% of the daemon's CPU in 1 MiB writes.
    fn try_receive(&self, buf: &mut ReadBuf<'_>) -> io::Result<bool> {
        // SAFETY: only `recv` writes to these bytes, and only what it reports
        // written is marked initialised below.
        let unfilled = unsafe { buf.unfilled_mut() };
        // SAFETY: `unfilled` is memory of `unfilled.len()` bytes that this
        // call borrows mutably, and the descriptor is the socket that
        // `self.inner` keeps open for as long as `self` lives.
        let received = unsafe {
            libc::recv(
                self.fd,
                unfilled.as_mut_ptr().cast(),
                unfilled.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if received < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(false),
                _ => Err(error),
            };
        }
        let received = usize::try_from(received).expect("recv returned a non-negative count");
        assert!(received <= unfilled.len());
        // SAFETY: `recv` wrote these `received` bytes.
        unsafe { buf.assume_init(received) };
        buf.advance(received);
        Ok(true)
    }

    /// Receives until something comes or the budget is spent.
    fn poll_socket(&self, buf: &mut ReadBuf<'_>) -> io::Result<Outcome> {
        let start = Instant::now();
        for _ in 0..self.poll.attempts_max {
            if self.try_receive(buf)? {
                return Ok(Outcome::Hit);
            }
            if start.elapsed() >= self.poll.budget {
                break;
            }
            std::hint::spin_loop();
        }
        Ok(Outcome::Miss)
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for SocketReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if this.receive == Receive::DirectFirst {
            match this.try_receive(buf) {
                Ok(true) => return Poll::Ready(Ok(())),
                Ok(false) => {}
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
        if this.poll.take_armed() && this.poll.slots.try_take() {
            let polled = this.poll_socket(buf);
            this.poll.slots.put_back();
            match polled {
                Ok(outcome) => {
                    this.poll.record(outcome);
                    if outcome == Outcome::Hit {
                        return Poll::Ready(Ok(()));
                    }
                }
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(address), listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    fn poll(budget: Duration, slots: usize) -> Arc<IdlePoll> {
        Arc::new(IdlePoll::new(budget, Arc::new(PollSlots::new(slots))))
    }

    #[test]
    fn misses_back_off_and_a_hit_resets() {
        let poll = poll(Duration::from_micros(50), 1);
        poll.record(Outcome::Miss);
        assert_eq!(poll.skipping(), 1);
        poll.record(Outcome::Miss);
        assert_eq!(poll.skipping(), 3);
        for _ in 0..10 {
            poll.record(Outcome::Miss);
        }
        assert_eq!(poll.skipping(), 63);
        // Backing off: the next 63 arms do not arm.
        for _ in 0..63 {
            poll.arm();
            assert!(!poll.take_armed());
        }
        poll.arm();
        assert!(poll.take_armed());
        poll.record(Outcome::Hit);
        assert_eq!(poll.skipping(), 0);
        poll.arm();
        assert!(poll.take_armed());
    }

    #[test]
    fn zero_budget_never_arms() {
        let poll = poll(Duration::ZERO, 1);
        poll.arm();
        assert!(!poll.take_armed());
    }

    #[test]
    fn slots_bound_concurrent_pollers() {
        let slots = PollSlots::new(1);
        assert!(slots.try_take());
        assert!(!slots.try_take());
        slots.put_back();
        assert!(slots.try_take());
    }

    /// A poll that finds nothing falls back to the reactor, and data sent
    /// after the poll gave up still wakes the read (no lost wake-up).
    #[tokio::test]
    async fn a_missed_poll_still_reads_later_data() {
        let (mut client, server) = pair().await;
        let fd = server.as_raw_fd();
        let (half, _write) = server.into_split();
        let poll = poll(Duration::from_micros(20), 1);
        let mut reader = SocketReader::new(half, fd, poll.clone(), Receive::DirectFirst);
        poll.arm();
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            client.write_all(b"late").await.unwrap();
            client
        });
        let mut buf = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(10), reader.read_exact(&mut buf))
            .await
            .expect("the read completes once data arrives")
            .unwrap();
        assert_eq!(&buf, b"late");
        assert_eq!(poll.skipping(), 1, "the poll missed and backs off");
        drop(sender.await.unwrap());
    }

    /// Data that arrives while the poll runs ends the poll as a hit, which
    /// clears the backoff of earlier misses.
    #[tokio::test]
    async fn data_arriving_during_the_poll_is_a_hit() {
        for receive in [Receive::DirectFirst, Receive::WhilePolling] {
            hit_during_poll(receive).await;
        }
    }

    async fn hit_during_poll(receive: Receive) {
        let (client, server) = pair().await;
        let fd = server.as_raw_fd();
        let (half, _write) = server.into_split();
        let poll = poll(IDLE_POLL_MAX, 1);
        let mut reader = SocketReader::new(half, fd, poll.clone(), receive);
        poll.record(Outcome::Miss);
        poll.arm(); // skipped: backing off after the miss
        poll.arm();
        let mut client = client.into_std().unwrap();
        client.set_nonblocking(false).unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            std::io::Write::write_all(&mut client, b"soon").unwrap();
            client
        });
        // The poll blocks this single-threaded runtime: only the poll itself
        // can see the data.
        let mut buf = [0u8; 4];
        reader.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"soon");
        assert_eq!(poll.misses(), 0, "the poll caught the data");
        drop(sender.join().unwrap());
    }

    /// Without a free slot nothing polls; the read waits on the reactor, and
    /// the end of the stream reads as such.
    #[tokio::test]
    async fn no_slot_no_poll_and_eof_ends_the_stream() {
        let (mut client, server) = pair().await;
        let fd = server.as_raw_fd();
        let (half, _write) = server.into_split();
        let poll = poll(IDLE_POLL_MAX, 0);
        let mut reader = SocketReader::new(half, fd, poll.clone(), Receive::DirectFirst);
        poll.record(Outcome::Miss);
        poll.arm();
        poll.arm();
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            client.write_all(b"ready").await.unwrap();
            client.shutdown().await.unwrap();
        });
        let mut received = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut received))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(received, b"ready");
        assert_eq!(poll.misses(), 1, "no poll ran, so none was recorded");
        sender.await.unwrap();
    }

    /// Reads that mix direct receives, polls and reactor waits see the byte
    /// stream exactly as it was sent, whichever way the reader receives.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mixed_reads_keep_the_stream_intact() {
        for receive in [Receive::DirectFirst, Receive::WhilePolling] {
            mixed_reads(receive).await;
        }
    }

    async fn mixed_reads(receive: Receive) {
        const TOTAL_BYTES: usize = 4 << 20;
        let (mut client, server) = pair().await;
        let fd = server.as_raw_fd();
        let (half, _write) = server.into_split();
        let poll = poll(Duration::from_micros(30), 1);
        let mut reader = SocketReader::new(half, fd, poll.clone(), receive);
        let sent: Vec<u8> = (0..TOTAL_BYTES).map(|i| (i * 7 + i / 251) as u8).collect();
        let expected = sent.clone();
        let sender = tokio::spawn(async move {
            let mut offset = 0;
            let mut chunk_bytes = 1;
            while offset < sent.len() {
                let end = (offset + chunk_bytes).min(sent.len());
                client.write_all(&sent[offset..end]).await.unwrap();
                offset = end;
                chunk_bytes = chunk_bytes * 3 % 65_537 + 1;
                if chunk_bytes % 5 == 0 {
                    tokio::time::sleep(Duration::from_micros(100)).await;
                }
            }
        });
        let mut received = vec![0u8; TOTAL_BYTES];
        let mut offset = 0;
        let mut read_bytes = 1;
        while offset < TOTAL_BYTES {
            poll.arm();
            let end = (offset + read_bytes).min(TOTAL_BYTES);
            let n = reader.read(&mut received[offset..end]).await.unwrap();
            assert!(n > 0);
            offset += n;
            read_bytes = read_bytes * 5 % 70_001 + 1;
        }
        sender.await.unwrap();
        assert!(
            received == expected,
            "the stream arrived intact ({receive:?})"
        );
    }
}
