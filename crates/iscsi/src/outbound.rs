//! The outbound side of a connection: the socket's write half, StatSN, and the
//! send buffer, shared by the writer task and the processing loop.
//!
//! Why two writers: commands that run on executor tasks queue their completions
//! for the writer task, which may wait for the initiator without holding anyone
//! up. But a small READ runs on the processing loop itself, in microseconds,
//! and waking the writer task for its completion was one more task hand-off for
//! every 4 KiB read. So while nothing is queued for the writer, the processing
//! loop takes the writer's lock and appends its completions to the send buffer
//! itself; it writes the buffer out once no further PDU is waiting to be read
//! (or the buffer is full), and hands the rest to a task of its own if the
//! socket cannot take it at once.
//!
//! Order on the wire: StatSN is stamped as a PDU enters the send buffer, under
//! the writer's lock, so StatSN follows wire order. The processing loop only
//! takes the lock while its own earlier items have all been written (`queued`
//! counts items sent to the writer task and not yet in the buffer) and lets it
//! go before it queues anything itself, so what one side sends stays in its
//! order. Completions of different commands have no order between them.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lacuna_scsi::target::{ScsiStatus, ScsiTarget};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, Mutex, OwnedMutexGuard};

use crate::pdu::{self, Digests, Header, RESERVED_TAG};
use crate::session::Session;

/// Items queued for the writer task before senders wait.
const OUTBOUND_QUEUE_LEN: usize = 64;
/// The send buffer is written out once it holds this much, even while more
/// is queued: completions found queued together go out in one `write`. With
/// one system call per 4 KiB read's Data-In, 4 KiB random reads at queue depth
/// 32 ran at 0.75x the rate of a 64 KiB buffer; 256 KiB gained nothing more.
pub(crate) const SEND_BUFFER_BYTES: usize = 64 * 1024;
/// Longest data segment copied into the send buffer; longer ones go to the
/// socket straight from the command's buffer, after what is buffered. A
/// completion with more Data-In than this sends what is buffered and all its
/// PDUs in one `writev` (`Writer::write_through`): one call per 256 KiB PDU
/// held the socket four times per 1 MiB READ, and the gathered write gave
/// 1 MiB reads at QD4 1.10x (bench/results/HISTORY.md).
pub(crate) const COPY_MAX_BYTES: usize = 64 * 1024;

/// What the processing loop and executors hand to the writer.
pub(crate) enum Outbound {
    /// A PDU whose StatSN/ExpCmdSN/MaxCmdSN the writer fills in.
    Pdu { header: Header, data: Vec<u8> },
    /// A finished command: Data-In PDUs and, unless the status rode on the last Data-In, a
    /// SCSI Response.
    Complete(Completion),
    /// Flush and close the connection (after a Logout Response).
    Close,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Residual {
    pub overflow: bool,
    pub underflow: bool,
    pub bytes: u32,
}

impl Residual {
    /// Residual of a transfer: what the command moved against what the initiator expected.
    pub fn of(transferred_bytes: u64, expected_bytes: u32) -> Residual {
        let expected = u64::from(expected_bytes);
        let bytes = transferred_bytes
            .abs_diff(expected)
            .min(u64::from(u32::MAX)) as u32;
        Residual {
            overflow: transferred_bytes > expected,
            underflow: transferred_bytes < expected,
            bytes,
        }
    }
}

pub(crate) struct Completion {
    pub itt: u32,
    pub lun_field: [u8; 8],
    /// iSCSI service response: 0 completed at target, 1 target failure.
    pub response: u8,
    pub status: u8,
    pub sense: Vec<u8>,
    /// Data-In to send, already cut to the expected length.
    pub data_in: Vec<u8>,
    /// Residual of the main direction (Data-In for reads, Data-Out for writes).
    pub residual: Residual,
    /// Residual of the read direction of a bidirectional command.
    pub bidi_read_residual: Residual,
    /// R2Ts sent for the command (part of ExpDataSN).
    pub r2t_count: u32,
    /// Whether the command had its R bit (only those get Data-In).
    pub read: bool,
}

/// The socket's write half with StatSN and the send buffer.
pub(crate) struct Writer {
    socket: OwnedWriteHalf,
    /// Encoded PDUs not yet written, in wire order.
    buffer: Vec<u8>,
    session: Arc<Session>,
    /// Takes back Data-In buffers once sent.
    scsi: Arc<dyn ScsiTarget>,
    digests: Digests,
    stat_sn: u32,
    /// A write failed or timed out: nothing more goes out, and the writer task ends.
    broken: bool,
}

/// The writer shared by the writer task and the processing loop.
pub(crate) struct Wire {
    writer: Arc<Mutex<Writer>>,
    /// Items sent to the writer task and not yet in the send buffer.
    queued: AtomicUsize,
    write_timeout: Duration,
}

/// The sending end of the writer task's queue; every item is counted in `queued`.
#[derive(Clone)]
pub(crate) struct Outbox {
    tx: mpsc::Sender<Outbound>,
    wire: Arc<Wire>,
}

impl Outbox {
    pub async fn send(&self, item: Outbound) -> Result<(), Outbound> {
        self.wire.queued.fetch_add(1, Ordering::SeqCst);
        self.tx.send(item).await.map_err(|error| {
            self.wire.queued.fetch_sub(1, Ordering::SeqCst);
            error.0
        })
    }

    /// [`Outbox::send`] from a thread outside the runtime (the blocking pool).
    pub fn blocking_send(&self, item: Outbound) -> Result<(), Outbound> {
        self.wire.queued.fetch_add(1, Ordering::SeqCst);
        self.tx.blocking_send(item).map_err(|error| {
            self.wire.queued.fetch_sub(1, Ordering::SeqCst);
            error.0
        })
    }

    pub fn try_send(&self, item: Outbound) -> Result<(), mpsc::error::TrySendError<Outbound>> {
        self.wire.queued.fetch_add(1, Ordering::SeqCst);
        self.tx.try_send(item).inspect_err(|_| {
            self.wire.queued.fetch_sub(1, Ordering::SeqCst);
        })
    }
}

/// The writer's lock as the processing loop holds it between PDUs.
pub(crate) type HeldWriter = OwnedMutexGuard<Writer>;

impl Wire {
    /// The shared writer, its queue and the receiving end for `write_loop`.
    pub fn new(
        socket: OwnedWriteHalf,
        session: Arc<Session>,
        scsi: Arc<dyn ScsiTarget>,
        digests: Digests,
        stat_sn: u32,
        write_timeout: Duration,
    ) -> (Arc<Wire>, Outbox, mpsc::Receiver<Outbound>) {
        let writer = Writer {
            socket,
            buffer: Vec::with_capacity(SEND_BUFFER_BYTES),
            session,
            scsi,
            digests,
            stat_sn,
            broken: false,
        };
        let wire = Arc::new(Wire {
            writer: Arc::new(Mutex::new(writer)),
            queued: AtomicUsize::new(0),
            write_timeout,
        });
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE_LEN);
        let outbox = Outbox {
            tx,
            wire: wire.clone(),
        };
        (wire, outbox, rx)
    }

    /// The writer for the processing loop, if nothing is queued for the writer
    /// task and no one else holds it (see the module doc).
    pub fn try_hold(&self) -> Option<HeldWriter> {
        if self.queued.load(Ordering::SeqCst) != 0 {
            return None;
        }
        let writer = self.writer.clone().try_lock_owned().ok()?;
        (!writer.broken).then_some(writer)
    }

    /// Lets the processing loop's hold go: writes out what it buffered, at
    /// once if the socket takes it, else on a task of its own that keeps the
    /// lock until done (so nothing overtakes it).
    pub fn release(&self, mut writer: HeldWriter) {
        match writer.try_flush() {
            Ok(true) => {}
            Ok(false) => {
                let write_timeout = self.write_timeout;
                tokio::spawn(async move {
                    let flushed = tokio::time::timeout(write_timeout, writer.flush()).await;
                    if !matches!(flushed, Ok(Ok(()))) {
                        tracing::info!("write failed or timed out");
                        writer.broken = true;
                    }
                });
            }
            Err(error) => {
                tracing::debug!(%error, "write failed");
                writer.broken = true;
            }
        }
    }
}

/// The writer task: writes what is queued, in order, as many items per write
/// as it finds queued.
pub(crate) async fn write_loop(wire: Arc<Wire>, mut rx: mpsc::Receiver<Outbound>) {
    let mut ended = None;
    while let Some(first) = rx.recv().await {
        let mut writer = wire.writer.clone().lock_owned().await;
        if writer.broken {
            ended = Some(writer);
            break;
        }
        let outcome = {
            let batch = async {
                let mut next = Some(first);
                while let Some(outbound) = next {
                    let open = writer.write(outbound).await;
                    let before = wire.queued.fetch_sub(1, Ordering::SeqCst);
                    assert!(before > 0, "every queued item was counted");
                    if !open? {
                        return Ok::<bool, std::io::Error>(false);
                    }
                    next = rx.try_recv().ok();
                }
                writer.flush().await?;
                Ok(true)
            };
            tokio::pin!(batch);
            // Most batches finish at once (the socket has room): only a batch that
            // has to wait for the initiator arms the write timer.
            let at_once = tokio::select! {
                biased;
                outcome = &mut batch => Some(outcome),
                () = std::future::ready(()) => None,
            };
            match at_once {
                Some(outcome) => Ok(outcome),
                None => tokio::time::timeout(wire.write_timeout, batch).await,
            }
        };
        match outcome {
            Ok(Ok(true)) => continue,
            Ok(Ok(false)) => {}
            Ok(Err(error)) => {
                tracing::debug!(%error, "write failed");
                writer.broken = true;
            }
            Err(_) => {
                tracing::info!("write timed out");
                writer.broken = true;
            }
        }
        ended = Some(writer);
        break;
    }
    let mut writer = match ended {
        Some(writer) => writer,
        None => wire.writer.clone().lock_owned().await,
    };
    if !writer.broken {
        let _ = tokio::time::timeout(wire.write_timeout, writer.flush()).await;
    }
    writer.broken = true;
    let _ = writer.socket.shutdown().await;
}

impl Writer {
    /// Writes one outbound item (into the send buffer where it fits); false means close.
    async fn write(&mut self, outbound: Outbound) -> std::io::Result<bool> {
        match outbound {
            Outbound::Pdu { mut header, data } => {
                self.stamp(&mut header);
                self.put(&header, &data).await?;
            }
            Outbound::Complete(mut completion) => {
                let data_in = std::mem::take(&mut completion.data_in);
                let pdus = self.completion_pdus(&completion, data_in.len());
                if data_in.len() <= COPY_MAX_BYTES {
                    for (header, data) in pdus.in_order(&data_in) {
                        self.put(header, data).await?;
                    }
                } else {
                    self.write_through(pdus.in_order(&data_in)).await?;
                }
                self.scsi.recycle_data_in(data_in);
            }
            Outbound::Close => {
                self.flush().await?;
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Appends a completion whose data all fits the send buffer's copy limit
    /// (the processing loop's own commands; see the module doc).
    pub fn append_completion(&mut self, mut completion: Completion) {
        let data_in = std::mem::take(&mut completion.data_in);
        assert!(data_in.len() <= COPY_MAX_BYTES);
        let pdus = self.completion_pdus(&completion, data_in.len());
        for (header, data) in pdus.in_order(&data_in) {
            pdu::append_pdu(&mut self.buffer, header, &[], data, self.digests);
        }
        self.scsi.recycle_data_in(data_in);
    }

    pub fn buffered_bytes(&self) -> usize {
        self.buffer.len()
    }

    /// One stamped PDU: into the send buffer if its data is short, else
    /// straight to the socket after what is buffered.
    async fn put(&mut self, header: &Header, data: &[u8]) -> std::io::Result<()> {
        if data.len() <= COPY_MAX_BYTES {
            pdu::append_pdu(&mut self.buffer, header, &[], data, self.digests);
            if self.buffer.len() >= SEND_BUFFER_BYTES {
                self.flush().await?;
            }
            return Ok(());
        }
        self.flush().await?;
        pdu::write_pdu(&mut self.socket, header, &[], data, self.digests).await
    }

    /// Writes what is buffered and then `pdus` straight from their data, in
    /// as few system calls as the socket takes (see `pdu::write_pdus`).
    async fn write_through<'a>(
        &mut self,
        pdus: impl Iterator<Item = (&'a Header, &'a [u8])>,
    ) -> std::io::Result<()> {
        let pdus: Vec<(&Header, &[u8])> = pdus.collect();
        for group in pdus.chunks(pdu::PDUS_PER_WRITE_MAX) {
            pdu::write_pdus(&mut self.socket, &self.buffer, group, self.digests).await?;
            self.buffer.clear();
        }
        Ok(())
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        self.socket.write_all(&self.buffer).await?;
        self.buffer.clear();
        Ok(())
    }

    /// Writes out the send buffer without waiting: true once it is empty,
    /// false if the socket took only part (the rest stays buffered).
    fn try_flush(&mut self) -> std::io::Result<bool> {
        let mut written_bytes = 0;
        let result = loop {
            if written_bytes == self.buffer.len() {
                break Ok(true);
            }
            match self.socket.try_write(&self.buffer[written_bytes..]) {
                Ok(0) => break Err(std::io::ErrorKind::WriteZero.into()),
                Ok(len_bytes) => written_bytes += len_bytes,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break Ok(false),
                Err(error) => break Err(error),
            }
        };
        self.buffer.drain(..written_bytes);
        result
    }

    /// Fills StatSN (advancing it for status-bearing PDUs), ExpCmdSN and MaxCmdSN.
    fn stamp(&mut self, header: &mut Header) {
        let (exp_cmd_sn, max_cmd_sn) = self.session.window_snapshot();
        let current = self.stat_sn;
        let mut advance = || {
            self.stat_sn = self.stat_sn.wrapping_add(1);
            current
        };
        match header {
            Header::ScsiResponse(h) => {
                (h.stat_sn, h.exp_cmd_sn, h.max_cmd_sn) = (advance(), exp_cmd_sn, max_cmd_sn)
            }
            Header::DataIn(h) => {
                h.stat_sn = if h.status_present { advance() } else { 0 };
                (h.exp_cmd_sn, h.max_cmd_sn) = (exp_cmd_sn, max_cmd_sn);
            }
            Header::NopIn(h) => {
                // A ping of the target's own does not advance StatSN (RFC 7143 §11.19.1).
                h.stat_sn = if h.initiator_task_tag == RESERVED_TAG {
                    current
                } else {
                    advance()
                };
                (h.exp_cmd_sn, h.max_cmd_sn) = (exp_cmd_sn, max_cmd_sn);
            }
            Header::ReadyToTransfer(h) => {
                (h.stat_sn, h.exp_cmd_sn, h.max_cmd_sn) = (current, exp_cmd_sn, max_cmd_sn)
            }
            Header::TaskManagementResponse(h) => {
                (h.stat_sn, h.exp_cmd_sn, h.max_cmd_sn) = (advance(), exp_cmd_sn, max_cmd_sn)
            }
            Header::TextResponse(h) => {
                (h.stat_sn, h.exp_cmd_sn, h.max_cmd_sn) = (advance(), exp_cmd_sn, max_cmd_sn)
            }
            Header::LogoutResponse(h) => {
                (h.stat_sn, h.exp_cmd_sn, h.max_cmd_sn) = (advance(), exp_cmd_sn, max_cmd_sn)
            }
            Header::AsyncMessage(h) => {
                (h.stat_sn, h.exp_cmd_sn, h.max_cmd_sn) = (advance(), exp_cmd_sn, max_cmd_sn)
            }
            Header::Reject(h) => {
                (h.stat_sn, h.exp_cmd_sn, h.max_cmd_sn) = (advance(), exp_cmd_sn, max_cmd_sn)
            }
            _ => unreachable!("the target sends only target opcodes"),
        }
    }

    /// The stamped PDUs of a completion: Data-In PDUs cut at
    /// MaxRecvDataSegmentLength and sequences at MaxBurstLength; the status
    /// rides on the last Data-In when there is no sense data (phase collapse),
    /// else a SCSI Response follows.
    fn completion_pdus(
        &mut self,
        completion: &Completion,
        data_len_bytes: usize,
    ) -> CompletionPdus {
        let params = &self.session.params;
        let segment_max_bytes = params.max_send_data_segment_bytes.max(512) as usize;
        let burst_max_bytes = params.max_burst_bytes.max(512) as usize;
        let collapse = completion.response == 0
            && completion.status == ScsiStatus::Good as u8
            && completion.sense.is_empty()
            && completion.read
            && data_len_bytes > 0
            && completion.bidi_read_residual == Residual::default();
        let mut data_in = Vec::with_capacity(data_len_bytes / segment_max_bytes + 1);
        let mut offset = 0usize;
        let mut data_sn = 0u32;
        while offset < data_len_bytes {
            let burst_end = (offset / burst_max_bytes + 1) * burst_max_bytes;
            let end = data_len_bytes
                .min(offset + segment_max_bytes)
                .min(burst_end);
            let last = end == data_len_bytes;
            let status_present = last && collapse;
            let mut header = Header::DataIn(pdu::DataIn {
                final_bit: last || end == burst_end,
                acknowledge: false,
                residual_overflow: status_present && completion.residual.overflow,
                residual_underflow: status_present && completion.residual.underflow,
                status_present,
                status: if status_present { completion.status } else { 0 },
                lun: completion.lun_field,
                initiator_task_tag: completion.itt,
                target_transfer_tag: RESERVED_TAG,
                stat_sn: 0,
                exp_cmd_sn: 0,
                max_cmd_sn: 0,
                data_sn,
                buffer_offset: offset as u32,
                residual_bytes: if status_present {
                    completion.residual.bytes
                } else {
                    0
                },
            });
            self.stamp(&mut header);
            data_in.push((header, offset..end));
            data_sn += 1;
            offset = end;
        }
        if collapse {
            return CompletionPdus {
                data_in,
                response: None,
            };
        }
        let sense_segment = if completion.sense.is_empty() {
            Vec::new()
        } else {
            let len = completion.sense.len().min(usize::from(u16::MAX)) as u16;
            let mut segment = len.to_be_bytes().to_vec();
            segment.extend_from_slice(&completion.sense[..usize::from(len)]);
            segment
        };
        let mut header = Header::ScsiResponse(pdu::ScsiResponse {
            bidi_read_overflow: completion.bidi_read_residual.overflow,
            bidi_read_underflow: completion.bidi_read_residual.underflow,
            residual_overflow: completion.residual.overflow,
            residual_underflow: completion.residual.underflow,
            response: completion.response,
            status: completion.status,
            initiator_task_tag: completion.itt,
            snack_tag: 0,
            stat_sn: 0,
            exp_cmd_sn: 0,
            max_cmd_sn: 0,
            exp_data_sn: data_sn + completion.r2t_count,
            bidi_read_residual_bytes: completion.bidi_read_residual.bytes,
            residual_bytes: completion.residual.bytes,
        });
        self.stamp(&mut header);
        CompletionPdus {
            data_in,
            response: Some((header, sense_segment)),
        }
    }
}

/// What a completion puts on the wire, stamped, in order.
struct CompletionPdus {
    /// Data-In PDUs with the range of the command's data each carries.
    data_in: Vec<(Header, Range<usize>)>,
    /// The SCSI Response with its data segment (the sense data), unless the
    /// status rode on the last Data-In.
    response: Option<(Header, Vec<u8>)>,
}

impl CompletionPdus {
    /// Each PDU with its data segment, in the order they go on the wire
    /// (`data_in`: the command's data the Data-In ranges cut).
    fn in_order<'a>(&'a self, data_in: &'a [u8]) -> impl Iterator<Item = (&'a Header, &'a [u8])> {
        let data_in_pdus = self
            .data_in
            .iter()
            .map(move |(header, range)| (header, &data_in[range.clone()]));
        let response = self
            .response
            .iter()
            .map(|(header, sense_segment)| (header, &sense_segment[..]));
        data_in_pdus.chain(response)
    }
}
