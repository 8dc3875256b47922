//! One TCP connection: login, then the full feature phase — commands in CmdSN order,
//! Data-Out gathering with R2T, Data-In and status, NOP-In/Out, text, task management,
//! logout and Reject.
//!
//! Why this shape: a processing loop and a writer task per connection. The processing
//! loop frames PDUs itself (one read future kept alive across its `select!`, since reading
//! is not cancel-safe; see `Inbound::next`), owns the connection state (commands gathering
//! data, the CmdSN reorder buffer, R2T bookkeeping) and never waits on the SCSI layer: it
//! runs only small READs whose data is in memory and quick writes itself, which take
//! microseconds (see `runs_inline`; a READ that would wait for a disk goes to the pool).
//! The writer (`outbound`) owns the socket's write half and StatSN, so sequence numbers
//! are stamped in the order PDUs hit the wire: a writer task writes what is queued for
//! it, and the processing loop writes the completions of its own commands while nothing
//! is queued. Every other command runs on the blocking pool from start to
//! finish (`start`) and queues its completion for the writer task from there, after a
//! dispatcher task has taken the ordering lock for it where it could not be had at once.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lacuna_scsi::lun::Lun;
use lacuna_scsi::target::{
    Command, CommandOutcome, ScsiStatus, TaskAttribute, TaskManagementFunction,
    TaskManagementResponse,
};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{
    mpsc, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, OwnedSemaphorePermit, RwLock, Semaphore,
};
use tokio::time::Instant;

use crate::discovery;
use crate::login::{self, Login, LoginOutcome, LoginReply, LoginStatus, LoginStep, SessionType};
use crate::outbound::{self, Completion, HeldWriter, Outbound, Outbox, Residual, Wire};
use crate::pdu::{
    self, Digests, Header, PduError, RawPdu, ReadOutcome, RejectReason, RESERVED_TAG,
};
use crate::placement::{GatherBuffers, LentBuffer};
use crate::server::{Target, WriteBuffers};
use crate::session::{AbortedTasks, Admission, Session, SessionKey, TaskControl};
use crate::text::{self, Pairs};
use lacuna_sockpoll::{IdlePoll, Receive, SocketReader};

/// Task tags remembered after an abort, so late Data-Out for them is dropped quietly.
const ABORTED_TAGS_REMEMBERED: usize = 256;
/// PDUs the processing loop handles back to back while it holds the writer
/// (see `outbound`) before it writes out what it buffered and lets go.
const HOLD_PDUS_MAX: u32 = 32;
/// How long a new login waits for the session it reinstates to close.
const REINSTATEMENT_WAIT: Duration = Duration::from_secs(10);
/// How long a new login waits for the teardown of sessions whose connections
/// have already ended (see `await_ending_sessions`).
const ENDING_SESSIONS_WAIT: Duration = Duration::from_secs(10);

/// The socket's read side: buffered, receiving directly while it polls.
type SocketIn = BufReader<SocketReader<OwnedReadHalf>>;

/// Entry point for an accepted TCP connection.
pub(crate) async fn run(stream: TcpStream, target: Arc<Target>) {
    let peer = stream.peer_addr().ok();
    let _ = stream.set_nodelay(true);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let (read_half, write_half) = stream.into_split();
    let idle_poll = Arc::new(IdlePoll::new(
        target.config.idle_poll,
        target.poll_slots.clone(),
    ));
    let mut reader = BufReader::new(SocketReader::new(
        read_half,
        fd,
        idle_poll.clone(),
        Receive::DirectFirst,
    ));
    let mut writer = BufWriter::new(write_half);
    let login_timeout = target.config.timeouts.login;
    let established = tokio::time::timeout(
        login_timeout,
        login_phase(&mut reader, &mut writer, &target),
    )
    .await;
    let admitted = match established {
        Ok(Ok(Some(admitted))) => admitted,
        Ok(Ok(None)) => return,
        Ok(Err(error)) => {
            tracing::debug!(?peer, %error, "login ended");
            return;
        }
        Err(_) => {
            tracing::info!(?peer, "login timed out");
            return;
        }
    };
    let Some((session, stat_sn)) = complete_login(&mut writer, &target, admitted).await else {
        return;
    };
    tracing::info!(
        ?peer,
        initiator = %session.key.initiator_name,
        tsih = session.tsih,
        session_type = ?session.session_type,
        "iSCSI session established"
    );
    full_feature_phase(
        reader,
        writer,
        target.clone(),
        session.clone(),
        stat_sn,
        idle_poll,
    )
    .await;
    teardown(&target, &session).await;
}

/// A login the target accepted: its session is registered, its final reply
/// not yet sent.
struct Admitted {
    session: Arc<Session>,
    request: pdu::LoginRequest,
    reply: LoginReply,
    stat_sn: u32,
}

/// Runs the login exchange. `Ok(None)` when the login failed and was answered.
async fn login_phase(
    reader: &mut SocketIn,
    writer: &mut BufWriter<OwnedWriteHalf>,
    target: &Arc<Target>,
) -> Result<Option<Admitted>, PduError> {
    let mut login = Login::new(&target.config, target.policy.as_ref());
    let mut stat_sn: Option<u32> = None;
    loop {
        let outcome = pdu::read_pdu(
            reader,
            Digests::default(),
            login::LOGIN_DATA_SEGMENT_MAX_BYTES,
            pdu::Oversized::Fail,
        )
        .await?;
        let raw = match outcome {
            ReadOutcome::Pdu(raw) => raw,
            ReadOutcome::DataSegmentTooLong { len_bytes, .. } => {
                tracing::info!(len_bytes, "login PDU data segment too long");
                return Ok(None);
            }
        };
        let request = match Header::parse(&raw.bhs) {
            Ok(Header::LoginRequest(request)) => request,
            _ => {
                // Anything but a Login Request during login (RFC 7143 §6.10): 02/0B.
                let request = login_request_fallback(&raw);
                let reply = failure_reply(LoginStatus::INVALID_DURING_LOGIN);
                let sn = *stat_sn.get_or_insert(request.exp_stat_sn);
                send_login_reply(writer, &request, &reply, 0, sn, target).await?;
                return Ok(None);
            }
        };
        let sn = *stat_sn.get_or_insert(request.exp_stat_sn);
        stat_sn = Some(sn.wrapping_add(1));
        match login.step(&request, &raw.data) {
            LoginStep::Continue(reply) => {
                send_login_reply(writer, &request, &reply, 0, sn, target).await?;
            }
            LoginStep::Fail(reply, why) => {
                // `why` names the check that failed, never a secret or a CHAP value.
                tracing::info!(
                    status = ?reply.status,
                    initiator = login.initiator_name(),
                    why,
                    "login refused"
                );
                send_login_reply(writer, &request, &reply, 0, sn, target).await?;
                return Ok(None);
            }
            LoginStep::Complete(reply, outcome) => {
                let session = match admit_session(target, &request, *outcome).await {
                    Ok(session) => session,
                    Err(status) => {
                        tracing::info!(?status, "session refused");
                        let failure = failure_reply(status);
                        send_login_reply(writer, &request, &failure, 0, sn, target).await?;
                        return Ok(None);
                    }
                };
                return Ok(Some(Admitted {
                    session,
                    request,
                    reply,
                    stat_sn: sn,
                }));
            }
        }
    }
}

/// Tells the SCSI layer of an admitted session's nexus and sends the login's
/// final reply; the session and the StatSN to go on with, or `None` when the
/// reply could not be sent. Why outside the login timeout: from admission on
/// the session is registered, and every way out must tear it down (a timeout
/// that fired here once left it registered for ever). The reply has the
/// write timeout of every other PDU.
async fn complete_login(
    writer: &mut BufWriter<OwnedWriteHalf>,
    target: &Arc<Target>,
    admitted: Admitted,
) -> Option<(Arc<Session>, u32)> {
    let Admitted {
        session,
        request,
        reply,
        stat_sn,
    } = admitted;
    if session.session_type == SessionType::Normal {
        let scsi = target.scsi.clone();
        let nexus = session.nexus.clone();
        let _ = tokio::task::spawn_blocking(move || scsi.nexus_created(&nexus)).await;
    }
    let sent = tokio::time::timeout(
        target.config.timeouts.write,
        send_login_reply(writer, &request, &reply, session.tsih, stat_sn, target),
    )
    .await;
    if let Ok(Ok(())) = sent {
        return Some((session, stat_sn.wrapping_add(1)));
    }
    tracing::info!(tsih = session.tsih, "final login reply not delivered");
    teardown(target, &session).await;
    None
}

fn login_request_fallback(raw: &RawPdu) -> pdu::LoginRequest {
    let mut isid = [0u8; 6];
    isid.copy_from_slice(&raw.bhs[8..14]);
    pdu::LoginRequest {
        transit: false,
        continue_bit: false,
        current_stage: 0,
        next_stage: 0,
        version_max: 0,
        version_min: 0,
        isid,
        tsih: 0,
        initiator_task_tag: u32::from_be_bytes([
            raw.bhs[16],
            raw.bhs[17],
            raw.bhs[18],
            raw.bhs[19],
        ]),
        cid: 0,
        cmd_sn: u32::from_be_bytes([raw.bhs[24], raw.bhs[25], raw.bhs[26], raw.bhs[27]]),
        exp_stat_sn: u32::from_be_bytes([raw.bhs[28], raw.bhs[29], raw.bhs[30], raw.bhs[31]]),
    }
}

fn failure_reply(status: LoginStatus) -> LoginReply {
    LoginReply {
        transit: false,
        current_stage: 0,
        next_stage: 0,
        status,
        text: Pairs::default(),
    }
}

async fn send_login_reply(
    writer: &mut BufWriter<OwnedWriteHalf>,
    request: &pdu::LoginRequest,
    reply: &LoginReply,
    tsih: u16,
    stat_sn: u32,
    target: &Target,
) -> Result<(), PduError> {
    let data = reply.text.encode();
    let window = target.config.limits.command_window;
    let header = Header::LoginResponse(pdu::LoginResponse {
        transit: reply.transit,
        continue_bit: false,
        current_stage: reply.current_stage,
        next_stage: reply.next_stage,
        version_max: 0,
        version_active: 0,
        isid: request.isid,
        tsih,
        initiator_task_tag: request.initiator_task_tag,
        stat_sn,
        exp_cmd_sn: request.cmd_sn,
        max_cmd_sn: request.cmd_sn.wrapping_add(window).wrapping_sub(1),
        status_class: reply.status.class,
        status_detail: reply.status.detail,
    });
    pdu::write_pdu(writer, &header, &[], &data, Digests::default()).await?;
    writer.flush().await?;
    Ok(())
}

/// Creates the session a completed login asked for, reinstating an older one with the same
/// initiator port.
async fn admit_session(
    target: &Target,
    request: &pdu::LoginRequest,
    outcome: LoginOutcome,
) -> Result<Arc<Session>, LoginStatus> {
    let key = SessionKey {
        initiator_name: outcome.initiator_name.clone(),
        isid: outcome.isid,
    };
    let existing = target.registry.get(&key);
    if outcome.tsih != 0 {
        // A second connection or connection reinstatement: MaxConnections is 1 here.
        return Err(match existing {
            Some(session) if session.tsih == outcome.tsih => LoginStatus::TOO_MANY_CONNECTIONS,
            _ => LoginStatus::SESSION_DOES_NOT_EXIST,
        });
    }
    let limits = &target.config.limits;
    let session = Arc::new(
        Session::new(
            target.registry.allocate_tsih(),
            key,
            outcome.session_type,
            outcome.params,
            request.cmd_sn,
            limits.command_window,
            limits.session_pool_commands_max,
        )
        .with_relative_target_port(target.config.relative_target_port),
    );
    if outcome.session_type == SessionType::Discovery {
        return Ok(session);
    }
    if let Some(old) = existing {
        tracing::info!(tsih = old.tsih, "reinstating session");
        old.request_close();
        if tokio::time::timeout(REINSTATEMENT_WAIT, old.wait_closed())
            .await
            .is_err()
        {
            return Err(LoginStatus::TARGET_ERROR);
        }
    }
    await_ending_sessions(target).await;
    target
        .registry
        .insert(session.clone(), limits.max_sessions)
        .map_err(|_| LoginStatus::OUT_OF_RESOURCES)?;
    Ok(session)
}

/// Waits (bounded) until every session whose connection has ended is torn
/// down. Why: an initiator that drops a connection and logs in again, from
/// another initiator port, must find the old nexus lost (its PREVENT MEDIUM
/// REMOVAL and SPC-2 reservation gone), as it would with a target whose
/// teardown were instant; without this its first command races the old
/// connection's teardown.
async fn await_ending_sessions(target: &Target) {
    let deadline = tokio::time::Instant::now() + ENDING_SESSIONS_WAIT;
    for ending in target.registry.ending() {
        if tokio::time::timeout_at(deadline, ending.wait_closed())
            .await
            .is_err()
        {
            tracing::warn!(
                tsih = ending.tsih,
                "login proceeds before an ended session's teardown"
            );
            return;
        }
    }
}

/// After the full feature phase: wait for running commands, tell the SCSI
/// layer the nexus is gone, forget the session. The session stays in the
/// registry, marked ending, until its nexus is dropped, so that a new login
/// can wait for that (`await_ending_sessions`).
async fn teardown(target: &Target, session: &Arc<Session>) {
    session.mark_ending();
    end_all_tasks(target, session).await;
    drop_nexus(target, session).await;
    if session.session_type == SessionType::Normal {
        target.registry.remove(session);
    }
    session.mark_closed();
    tracing::info!(tsih = session.tsih, "iSCSI session closed");
}

/// Tells the SCSI layer that the session's nexus is gone (its reservations
/// released, its unit attentions forgotten), unless that was done already.
async fn drop_nexus(target: &Target, session: &Session) {
    if !session.take_nexus_drop() {
        return;
    }
    let scsi = target.scsi.clone();
    let nexus = session.nexus.clone();
    let _ = tokio::task::spawn_blocking(move || scsi.nexus_dropped(&nexus)).await;
}

/// Aborts every command of the session, here and in the SCSI layer (where a
/// command may be waiting on a long operation, a SANITIZE without IMMED), and
/// waits for them all to end.
async fn end_all_tasks(target: &Target, session: &Session) {
    session.abort_tasks(|_, _| true);
    if session.session_type == SessionType::Normal {
        target.scsi.nexus_closing(&session.nexus);
    }
    session.wait_for_all_tasks().await;
}

// ---------------------------------------------------------------------------------------
// Full feature phase.

/// A SCSI command as accepted, before its data is complete.
struct PendingCommand {
    itt: u32,
    /// As it arrived: the SCSI layer decodes it, and responses carry it back.
    lun: Lun,
    cdb: Vec<u8>,
    attribute: TaskAttribute,
    read: bool,
    write: bool,
    expected_data_transfer_bytes: u32,
    expected_data_in_bytes: u32,
    /// Non-immediate commands hold a CmdSN window slot until answered.
    holds_slot: bool,
}

/// A command ready for the SCSI layer (or already answered by the transport).
struct ReadyCommand {
    command: PendingCommand,
    /// Shared: a write's unit may keep slices of it (see `LogicalUnit::write_shared`).
    data_out: bytes::Bytes,
    r2t_count: u32,
    /// Set when the transport answers itself (e.g. a write above the transfer limit).
    answer: Option<CommandOutcome>,
    /// The write buffer budget `data_out` holds, given back with it.
    _buffers: Option<BufferPermits>,
}

/// A write's share of the target's and its session's write buffer budgets.
struct BufferPermits {
    _target: OwnedSemaphorePermit,
    _session: OwnedSemaphorePermit,
}

/// Why a write's data is received but not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// Above the transfer limit: CHECK CONDITION, INVALID FIELD IN CDB.
    TooLarge,
    /// No room in the write buffer budgets: TASK SET FULL, to retry.
    BuffersFull,
}

struct R2tState {
    target_transfer_tag: u32,
    buffer_offset: u32,
    desired_bytes: u32,
    received_bytes: u32,
    next_data_sn: u32,
}

/// Data-Out gathering of one write.
struct WriteGather {
    command: PendingCommand,
    /// Where the data goes; `None` when it is not kept (`refused`).
    buffer: Option<LentBuffer>,
    received_bytes: u32,
    /// Unsolicited Data-Out still expected (command F bit was 0).
    unsolicited_open: bool,
    unsolicited_next_data_sn: u32,
    /// Unsolicited bytes allowed: min(FirstBurstLength, EDTL).
    unsolicited_limit_bytes: u32,
    r2ts: Vec<R2tState>,
    next_r2t_offset: u32,
    r2t_count: u32,
    /// Set when the data is checked but not kept, and the command answered
    /// without the SCSI layer.
    refused: Option<Refusal>,
    buffers: Option<BufferPermits>,
}

#[derive(Debug, thiserror::Error)]
enum FatalError {
    #[error("{0}")]
    Pdu(#[from] PduError),
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("writer gone")]
    WriterGone,
}

enum Flow {
    Continue,
    Close,
}

/// One slot of the in-order dispatch queue.
enum Slot {
    Gathering,
    Ready(Box<ReadyCommand>),
}

struct Connection {
    target: Arc<Target>,
    session: Arc<Session>,
    out: Outbox,
    wire: Arc<Wire>,
    /// The writer, while the processing loop writes its own completions (see
    /// `outbound`): taken for a run of PDUs that arrive back to back, let go
    /// before the loop waits for anything.
    wire_hold: parking_lot::Mutex<Option<HeldWriter>>,
    dispatch: mpsc::UnboundedSender<Dispatch>,
    /// Commands handed to the dispatcher that have not yet taken the ordering
    /// lock: while there are any, later commands must queue behind them.
    dispatch_backlog: Arc<AtomicUsize>,
    order_lock: Arc<RwLock<()>>,
    gathering: HashMap<u32, WriteGather>,
    /// The buffers of `gathering`, which the reader fills (see `placement`).
    gather_buffers: Arc<GatherBuffers>,
    /// Non-immediate commands in CmdSN order; dispatched from the front.
    order: VecDeque<(u32, Slot)>,
    /// Command PDUs that arrived ahead of ExpCmdSN, keyed by CmdSN.
    held: BTreeMap<u32, RawPdu>,
    aborted_tags: VecDeque<u32>,
    next_transfer_tag: u32,
    /// Pending Text Response continuation: (ITT, TTT, remaining bytes).
    text_out: Option<(u32, u32, Vec<u8>)>,
    /// Text Request continuation from the initiator: (ITT, bytes so far).
    text_in: Option<(u32, Vec<u8>)>,
    /// One permit per task management function of this connection still
    /// running (`Limits::task_management_max`).
    task_management_slots: Arc<Semaphore>,
    /// Write data this session holds (`Limits::session_write_buffers_max_bytes`).
    session_write_buffers: WriteBuffers,
    /// Armed before the loop waits for the initiator with nothing running.
    idle_poll: Arc<IdlePoll>,
}

/// A command handed to the dispatcher, which takes the ordering lock in CmdSN order.
struct Dispatch {
    ready: ReadyCommand,
    control: Arc<TaskControl>,
    unstarted: Unstarted,
}

/// Unregisters a command dropped before it started. Why: a command waiting at
/// the dispatcher (behind an ORDERED one, say) is already registered with the
/// session, and the dispatcher is aborted when its connection closes; the
/// command never reaches the SCSI layer, and without this its registration
/// would keep the session's teardown waiting for ever.
struct Unstarted {
    session: Arc<Session>,
    itt: Option<u32>,
}

impl Unstarted {
    fn new(session: Arc<Session>, itt: u32) -> Unstarted {
        Unstarted {
            session,
            itt: Some(itt),
        }
    }

    /// The command starts: whoever runs it unregisters it when done.
    fn started(mut self) {
        self.itt = None;
    }
}

impl Drop for Unstarted {
    fn drop(&mut self) {
        if let Some(itt) = self.itt.take() {
            self.session.remove_task(itt);
        }
    }
}

async fn full_feature_phase(
    reader: SocketIn,
    writer: BufWriter<OwnedWriteHalf>,
    target: Arc<Target>,
    session: Arc<Session>,
    stat_sn: u32,
    idle_poll: Arc<IdlePoll>,
) {
    let params = &session.params;
    let digests = Digests {
        header: params.header_digest,
        data: params.data_digest,
    };
    // The login phase wrote each reply out before it returned.
    assert!(writer.buffer().is_empty(), "login replies were flushed");
    let (wire, out_tx, out_rx) = Wire::new(
        writer.into_inner(),
        session.clone(),
        target.scsi.clone(),
        digests,
        stat_sn,
        target.config.timeouts.write,
    );
    let (dispatch_tx, dispatch_rx) = mpsc::unbounded_channel();
    let dispatch_backlog = Arc::new(AtomicUsize::new(0));
    let order_lock = Arc::new(RwLock::new(()));
    let writer_task = tokio::spawn(outbound::write_loop(wire.clone(), out_rx));
    let dispatcher_task = tokio::spawn(dispatch_loop(
        dispatch_rx,
        dispatch_backlog.clone(),
        order_lock.clone(),
        target.clone(),
        session.clone(),
        out_tx.clone(),
    ));
    let gather_buffers = Arc::new(GatherBuffers::default());
    let mut connection = Connection {
        target: target.clone(),
        session: session.clone(),
        out: out_tx,
        wire,
        wire_hold: parking_lot::Mutex::new(None),
        dispatch: dispatch_tx,
        dispatch_backlog,
        order_lock,
        gathering: HashMap::new(),
        gather_buffers: gather_buffers.clone(),
        order: VecDeque::new(),
        held: BTreeMap::new(),
        aborted_tags: VecDeque::new(),
        next_transfer_tag: 1,
        text_out: None,
        text_in: None,
        task_management_slots: Arc::new(Semaphore::new(target.config.limits.task_management_max)),
        session_write_buffers: WriteBuffers::new(
            target.config.limits.session_write_buffers_max_bytes,
        ),
        idle_poll,
    };
    let inbound = Inbound {
        digests,
        max_data_bytes: params.max_recv_data_segment_bytes,
        placement: gather_buffers,
    };
    let result = connection.serve(reader, inbound).await;
    session.mark_ending();
    connection.release_wire();
    if let Err(error) = &result {
        tracing::info!(tsih = session.tsih, %error, "connection closing");
    }
    // Commands still gathering data never reached the SCSI layer: just drop them.
    drop(connection);
    dispatcher_task.abort();
    let _ = dispatcher_task.await;
    // Executors still running hold senders; the writer ends when they are done or gone.
    end_all_tasks(&target, &session).await;
    let _ = writer_task.await;
}

/// How the processing loop frames inbound PDUs.
struct Inbound {
    digests: Digests,
    max_data_bytes: u32,
    /// Where Data-Out goes (the connection's gathering writes).
    placement: Arc<GatherBuffers>,
}

impl Inbound {
    /// Reads the next PDU, owning the socket's read half meanwhile. Why it
    /// owns it: the processing loop keeps this one future alive across its
    /// `select!` until a whole PDU is in (reading a PDU is not cancel-safe),
    /// then starts the next with the half it gets back. The loop frames PDUs
    /// itself: a reader task of its own cost a task hand-off for every PDU.
    async fn next(&self, mut reader: SocketIn) -> (SocketIn, Result<ReadOutcome, PduError>) {
        let result = pdu::read_pdu_placing(
            &mut reader,
            self.digests,
            self.max_data_bytes,
            pdu::Oversized::Skip,
            &*self.placement,
        )
        .await;
        (reader, result)
    }
}

impl Connection {
    /// The processing loop. Why its futures live outside the loop: a PDU
    /// arrives every few microseconds, and building a fresh timer and fresh
    /// watch futures for each one (registering the timer, reading the clock)
    /// cost more than the protocol work of a 4 KiB read. The idle timer is
    /// armed once per interval instead: a PDU only marks the connection
    /// active, and when the timer fires an active connection is simply
    /// re-armed (so a silent initiator is pinged between one and two intervals
    /// after its last PDU).
    async fn serve(&mut self, reader: SocketIn, inbound: Inbound) -> Result<(), FatalError> {
        let timeouts = self.target.config.timeouts.clone();
        let mut shutdown = self.target.shutdown.clone();
        let mut close_requested = self.session.close_requested();
        let shutdown_started = wait_until_set(&mut shutdown);
        let closing = wait_until_set(&mut close_requested);
        let timer = tokio::time::sleep(timeouts.nop_in_interval);
        let reading = inbound.next(reader);
        tokio::pin!(shutdown_started, closing, timer, reading);
        let mut active = false;
        let mut ping: Option<u32> = None;
        let mut shutdown_deadline: Option<Instant> = None;
        let mut pdus_under_hold: u32 = 0;
        loop {
            if self.holds_wire() {
                // While PDUs arrive back to back, their completions gather in
                // the send buffer; it goes out once none is waiting, or after
                // a bounded run (the writer task's queue waits meanwhile).
                let next = if pdus_under_hold < HOLD_PDUS_MAX {
                    // Completions wait in the send buffer: no polling now.
                    self.idle_poll.disarm();
                    tokio::select! {
                        biased;
                        next = &mut reading => Some(next),
                        () = std::future::ready(()) => None,
                    }
                } else {
                    None
                };
                if let Some((reader, received)) = next {
                    pdus_under_hold += 1;
                    reading.set(inbound.next(reader));
                    active = true;
                    if let Flow::Close = self.on_received(received?).await? {
                        return Ok(());
                    }
                    continue;
                }
                self.release_wire();
            }
            pdus_under_hold = 0;
            if self.session.task_count() == 0 {
                // Everything is answered and out: the next command is the
                // initiator's move, worth polling for (see `lacuna_sockpoll`).
                self.idle_poll.arm();
            } else {
                // An answer is on its way from elsewhere.
                self.idle_poll.disarm();
            }
            tokio::select! {
                (reader, received) = &mut reading => {
                    reading.set(inbound.next(reader));
                    active = true;
                    if let Flow::Close = self.on_received(received?).await? {
                        return Ok(());
                    }
                }
                () = &mut timer => {
                    let now = Instant::now();
                    if shutdown_deadline.is_some_and(|at| now >= at) {
                        return Ok(());
                    }
                    let wait = if std::mem::take(&mut active) {
                        ping = None;
                        timeouts.nop_in_interval
                    } else if ping.is_some() {
                        return Err(FatalError::Protocol("NOP-In ping not answered".into()));
                    } else {
                        let tag = self.allocate_transfer_tag();
                        self.send_nop_in_ping(tag).await?;
                        ping = Some(tag);
                        timeouts.nop_in_timeout
                    };
                    let at = now + wait;
                    timer.as_mut().reset(shutdown_deadline.map_or(at, |end| end.min(at)));
                }
                () = &mut shutdown_started, if shutdown_deadline.is_none() => {
                    let end = Instant::now() + timeouts.shutdown_grace;
                    shutdown_deadline = Some(end);
                    let at = timer.deadline().min(end);
                    timer.as_mut().reset(at);
                    self.send_logout_request(timeouts.shutdown_grace).await?;
                }
                () = &mut closing => {
                    return Ok(());
                }
            }
        }
    }

    async fn on_received(&mut self, received: ReadOutcome) -> Result<Flow, FatalError> {
        match received {
            ReadOutcome::Pdu(raw) => {
                let opcode = pdu::Opcode::from_byte(raw.bhs[0]).ok();
                if !matches!(
                    opcode,
                    Some(pdu::Opcode::ScsiCommand | pdu::Opcode::DataOut)
                ) {
                    // Only SCSI commands (and their data) complete on this
                    // loop; anything else may wait (a logout for running
                    // commands, say): the writer must not be held meanwhile.
                    self.release_wire();
                }
                self.on_pdu(raw).await
            }
            ReadOutcome::DataSegmentTooLong { bhs, len_bytes } => {
                self.release_wire();
                self.on_oversized(bhs, len_bytes).await
            }
        }
    }

    fn allocate_transfer_tag(&mut self) -> u32 {
        let tag = self.next_transfer_tag;
        self.next_transfer_tag = self.next_transfer_tag.wrapping_add(1);
        if self.next_transfer_tag == RESERVED_TAG {
            self.next_transfer_tag = 1;
        }
        tag
    }

    /// Queues a PDU of the processing loop's own for the writer task, after
    /// letting go of the writer (its order with what the loop wrote itself).
    async fn send(&self, header: Header, data: Vec<u8>) -> Result<(), FatalError> {
        self.release_wire();
        self.out
            .send(Outbound::Pdu { header, data })
            .await
            .map_err(|_| FatalError::WriterGone)
    }

    /// Whether the processing loop holds the writer.
    fn holds_wire(&self) -> bool {
        self.wire_hold.lock().is_some()
    }

    /// Writes out what the processing loop buffered and lets the writer go.
    fn release_wire(&self) {
        let held = self.wire_hold.lock().take();
        if let Some(writer) = held {
            self.wire.release(writer);
        }
    }

    /// Hands a command's completion to the wire: appended to the send buffer
    /// by this loop when it holds (or can take) the writer, else queued for
    /// the writer task.
    fn complete(&self, itt: u32, completion: Completion) {
        if completion.data_in.len() <= outbound::COPY_MAX_BYTES {
            let mut hold = self.wire_hold.lock();
            if hold.is_none() {
                *hold = self.wire.try_hold();
            }
            if let Some(writer) = hold.as_mut() {
                writer.append_completion(completion);
                let full = writer.buffered_bytes() >= outbound::SEND_BUFFER_BYTES;
                drop(hold);
                self.session.remove_task(itt);
                if full {
                    self.release_wire();
                }
                return;
            }
        }
        match self.out.try_send(Outbound::Complete(completion)) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => self.session.remove_task(itt),
            Err(mpsc::error::TrySendError::Full(outbound)) => {
                // The writer is behind: wait for it elsewhere, not here.
                let (out, session) = (self.out.clone(), self.session.clone());
                tokio::spawn(async move {
                    let _ = out.send(outbound).await;
                    session.remove_task(itt);
                });
            }
        }
    }

    async fn reject(
        &self,
        reason: RejectReason,
        bhs: &[u8; pdu::BHS_LEN_BYTES],
    ) -> Result<(), FatalError> {
        tracing::debug!(?reason, opcode = bhs[0] & 0x3f, "reject");
        let header = Header::Reject(pdu::Reject {
            reason: reason as u8,
            stat_sn: 0,
            exp_cmd_sn: 0,
            max_cmd_sn: 0,
            data_sn: 0,
        });
        self.send(header, bhs.to_vec()).await
    }

    async fn send_nop_in_ping(&self, tag: u32) -> Result<(), FatalError> {
        let header = Header::NopIn(pdu::NopIn {
            lun: [0; 8],
            initiator_task_tag: RESERVED_TAG,
            target_transfer_tag: tag,
            stat_sn: 0,
            exp_cmd_sn: 0,
            max_cmd_sn: 0,
        });
        self.send(header, Vec::new()).await
    }

    async fn send_logout_request(&self, grace: Duration) -> Result<(), FatalError> {
        let header = Header::AsyncMessage(pdu::AsyncMessage {
            lun: [0; 8],
            stat_sn: 0,
            exp_cmd_sn: 0,
            max_cmd_sn: 0,
            // Event 1: the target requests a logout within Parameter3 seconds.
            async_event: 1,
            async_vcode: 0,
            parameter1: 0,
            parameter2: 0,
            parameter3: grace.as_secs().clamp(1, 3600) as u16,
        });
        self.send(header, Vec::new()).await
    }

    /// A PDU whose data segment exceeded MaxRecvDataSegmentLength (already skipped).
    async fn on_oversized(
        &mut self,
        bhs: [u8; pdu::BHS_LEN_BYTES],
        len_bytes: u32,
    ) -> Result<Flow, FatalError> {
        tracing::info!(len_bytes, "data segment above MaxRecvDataSegmentLength");
        let header = Header::parse(&bhs).ok();
        // A rejected command still consumes its CmdSN so later commands are not stuck.
        if let Some(cmd_sn) = header.as_ref().and_then(non_immediate_cmd_sn) {
            let mut window = self.session.window.lock();
            if window.admit(cmd_sn) == Admission::Next {
                window.advance(false);
            }
        }
        self.reject(RejectReason::ProtocolError, &bhs).await?;
        // A write whose data was refused can never get it all: it ends as
        // after any other Data-Out sequence error, rather than wait for ever.
        if let Some(Header::DataOut(data_out)) = header {
            let itt = data_out.initiator_task_tag;
            if self.gathering.contains_key(&itt) {
                return self.end_with_sequence_error(itt).await;
            }
        }
        Ok(Flow::Continue)
    }

    async fn on_pdu(&mut self, raw: RawPdu) -> Result<Flow, FatalError> {
        let header = match Header::parse(&raw.bhs) {
            Ok(header) => header,
            Err(_) => {
                self.reject(RejectReason::CommandNotSupported, &raw.bhs)
                    .await?;
                return Ok(Flow::Continue);
            }
        };
        let Some(cmd_sn) = non_immediate_cmd_sn(&header) else {
            return self.process(header, raw).await;
        };
        let admission = self.session.window.lock().admit(cmd_sn);
        match admission {
            Admission::Next => {
                let flow = self.process(header, raw).await?;
                if let Flow::Close = flow {
                    return Ok(flow);
                }
                self.process_held().await
            }
            Admission::Ahead { .. } => {
                self.held.insert(cmd_sn, raw);
                Ok(Flow::Continue)
            }
            Admission::Outside => {
                tracing::debug!(cmd_sn, "CmdSN outside the window: discarded");
                Ok(Flow::Continue)
            }
        }
    }

    /// Processes held PDUs whose CmdSN is now next.
    async fn process_held(&mut self) -> Result<Flow, FatalError> {
        loop {
            let exp_cmd_sn = self.session.window.lock().exp_cmd_sn();
            let Some(raw) = self.held.remove(&exp_cmd_sn) else {
                return Ok(Flow::Continue);
            };
            let header = Header::parse(&raw.bhs).expect("held PDUs were parsed before");
            let cmd_sn = non_immediate_cmd_sn(&header).expect("only command PDUs are held");
            if self.session.window.lock().admit(cmd_sn) != Admission::Next {
                continue;
            }
            if let Flow::Close = self.process(header, raw).await? {
                return Ok(Flow::Close);
            }
        }
    }

    /// Handles one PDU whose CmdSN (if any) is ExpCmdSN. Consumes the CmdSN.
    async fn process(&mut self, header: Header, raw: RawPdu) -> Result<Flow, FatalError> {
        match header {
            Header::ScsiCommand(command) => self.on_scsi_command(command, raw).await,
            Header::DataOut(data_out) => self.on_data_out(data_out, raw).await,
            Header::NopOut(nop) => self.on_nop_out(nop, raw).await,
            Header::TextRequest(request) => {
                self.consume_cmd_sn(request.immediate, request.cmd_sn);
                self.on_text(request, raw).await
            }
            Header::TaskManagementRequest(request) => {
                self.consume_cmd_sn(request.immediate, request.cmd_sn);
                self.on_task_management(request).await
            }
            Header::LogoutRequest(request) => {
                self.consume_cmd_sn(request.immediate, request.cmd_sn);
                self.on_logout(request).await
            }
            Header::LoginRequest(_) => {
                // Login in full feature phase is a protocol error (RFC 7143 §6).
                self.reject(RejectReason::ProtocolError, &raw.bhs).await?;
                Ok(Flow::Continue)
            }
            Header::SnackRequest(_) => {
                // ErrorRecoveryLevel 0 has no SNACK.
                self.reject(RejectReason::ProtocolError, &raw.bhs).await?;
                Ok(Flow::Continue)
            }
            _ => {
                // Target opcodes sent by the initiator.
                self.reject(RejectReason::ProtocolError, &raw.bhs).await?;
                Ok(Flow::Continue)
            }
        }
    }

    fn consume_cmd_sn(&self, immediate: bool, cmd_sn: u32) {
        if immediate {
            return;
        }
        let mut window = self.session.window.lock();
        assert_eq!(window.admit(cmd_sn), Admission::Next);
        window.advance(false);
    }

    // -- NOP ------------------------------------------------------------------------------

    async fn on_nop_out(&mut self, nop: pdu::NopOut, raw: RawPdu) -> Result<Flow, FatalError> {
        if nop.initiator_task_tag == RESERVED_TAG {
            // Answer to a ping of ours (or a bare keepalive): nothing to send.
            return Ok(Flow::Continue);
        }
        self.consume_cmd_sn(nop.immediate, nop.cmd_sn);
        let header = Header::NopIn(pdu::NopIn {
            lun: nop.lun,
            initiator_task_tag: nop.initiator_task_tag,
            target_transfer_tag: RESERVED_TAG,
            stat_sn: 0,
            exp_cmd_sn: 0,
            max_cmd_sn: 0,
        });
        // The ping data is echoed; it is already bounded by MaxRecvDataSegmentLength, and
        // cut to what the initiator accepts.
        let mut data = raw.data;
        data.truncate(self.session.params.max_send_data_segment_bytes as usize);
        self.send(header, data).await?;
        Ok(Flow::Continue)
    }

    // -- SCSI commands ------------------------------------------------------------------

    async fn on_scsi_command(
        &mut self,
        command: pdu::ScsiCommand,
        raw: RawPdu,
    ) -> Result<Flow, FatalError> {
        let verdict = self.check_scsi_command(&command, &raw);
        let pending = match verdict {
            Ok(pending) => pending,
            Err(reason) => {
                self.consume_cmd_sn(command.immediate, command.cmd_sn);
                self.reject(reason, &raw.bhs).await?;
                return Ok(Flow::Continue);
            }
        };
        if pending.holds_slot {
            let mut window = self.session.window.lock();
            assert_eq!(window.admit(command.cmd_sn), Admission::Next);
            window.advance(true);
        }
        let itt = pending.itt;
        self.aborted_tags.retain(|tag| *tag != itt);
        if pending.holds_slot {
            self.order.push_back((itt, Slot::Gathering));
        }
        let wants_data = pending.write && pending.expected_data_transfer_bytes > 0;
        if !wants_data {
            let ready = ReadyCommand {
                command: pending,
                data_out: bytes::Bytes::new(),
                r2t_count: 0,
                answer: None,
                _buffers: None,
            };
            return self.on_ready(ready).await;
        }
        let params = &self.session.params;
        let edtl = pending.expected_data_transfer_bytes;
        let (refused, buffers) = self.write_buffers_for(edtl);
        let mut gather = WriteGather {
            buffer: refused
                .is_none()
                .then(|| LentBuffer::new(&self.gather_buffers, itt, edtl as usize)),
            received_bytes: 0,
            unsolicited_open: !command.final_bit,
            unsolicited_next_data_sn: 0,
            unsolicited_limit_bytes: params.first_burst_bytes.min(edtl),
            r2ts: Vec::new(),
            next_r2t_offset: 0,
            r2t_count: 0,
            refused,
            buffers,
            command: pending,
        };
        gather.accept(0, &raw.data, 0);
        if !gather.unsolicited_open {
            gather.next_r2t_offset = gather.received_bytes;
        }
        self.gathering.insert(itt, gather);
        self.progress_write(itt).await
    }

    /// Room for a write of `edtl` bytes in the write buffer budgets, or why
    /// its data is not kept.
    fn write_buffers_for(&self, edtl: u32) -> (Option<Refusal>, Option<BufferPermits>) {
        if edtl > self.target.config.limits.max_write_transfer_bytes {
            return (Some(Refusal::TooLarge), None);
        }
        let taken = self
            .session_write_buffers
            .try_take(edtl)
            .and_then(|session| {
                let target = self.target.write_buffers.try_take(edtl)?;
                Some(BufferPermits {
                    _target: target,
                    _session: session,
                })
            });
        match taken {
            Some(buffers) => (None, Some(buffers)),
            None => (Some(Refusal::BuffersFull), None),
        }
    }

    /// Validates a SCSI Command PDU; the error is the Reject reason.
    fn check_scsi_command(
        &self,
        command: &pdu::ScsiCommand,
        raw: &RawPdu,
    ) -> Result<PendingCommand, RejectReason> {
        let params = &self.session.params;
        if self.session.session_type == SessionType::Discovery {
            return Err(RejectReason::ProtocolError);
        }
        let itt = command.initiator_task_tag;
        if itt == RESERVED_TAG {
            return Err(RejectReason::InvalidPduField);
        }
        let queued = self.order.iter().any(|(tag, _)| *tag == itt);
        if queued || self.gathering.contains_key(&itt) || self.session.has_task(itt) {
            return Err(RejectReason::TaskInProgress);
        }
        let edtl = command.expected_data_transfer_bytes;
        let immediate_bytes = raw.data.len() as u32;
        if immediate_bytes > 0
            && (!command.write
                || !params.immediate_data
                || immediate_bytes > params.first_burst_bytes.min(edtl))
        {
            return Err(RejectReason::ProtocolError);
        }
        let unsolicited_follows = command.write && !command.final_bit;
        if unsolicited_follows
            && (params.initial_r2t || immediate_bytes >= edtl.min(params.first_burst_bytes))
        {
            return Err(RejectReason::ProtocolError);
        }
        if !command.write && !command.final_bit {
            return Err(RejectReason::ProtocolError);
        }
        let limits = &self.target.config.limits;
        let in_flight = self.gathering.len() + self.session.task_count();
        if command.immediate
            && in_flight >= (limits.command_window + limits.immediate_commands_max) as usize
        {
            return Err(RejectReason::ImmediateCommandReject);
        }
        let (cdb, bidi_read_bytes) = command_cdb(command, &raw.ahs)?;
        let expected_data_in_bytes = match (command.read, command.write) {
            (true, true) => bidi_read_bytes.unwrap_or(0),
            (true, false) => edtl,
            _ => 0,
        };
        Ok(PendingCommand {
            itt,
            lun: Lun(command.lun),
            cdb,
            attribute: task_attribute(command.attribute),
            read: command.read,
            write: command.write,
            expected_data_transfer_bytes: edtl,
            expected_data_in_bytes,
            holds_slot: !command.immediate,
        })
    }

    /// Sends R2Ts that may go out now and hands the command on once all data arrived.
    async fn progress_write(&mut self, itt: u32) -> Result<Flow, FatalError> {
        let params = self.session.params.clone();
        let mut r2ts = Vec::new();
        {
            let Some(gather) = self.gathering.get_mut(&itt) else {
                return Ok(Flow::Continue);
            };
            let edtl = gather.command.expected_data_transfer_bytes;
            if gather.received_bytes == edtl && gather.r2ts.is_empty() && !gather.unsolicited_open {
                let gather = self.gathering.remove(&itt).expect("present");
                let ready = gather.into_ready(&self.target);
                return self.on_ready(ready).await;
            }
            while !gather.unsolicited_open
                && gather.r2ts.len() < usize::from(params.max_outstanding_r2t)
                && gather.next_r2t_offset < edtl
            {
                let offset = gather.next_r2t_offset;
                let desired_bytes = params.max_burst_bytes.min(edtl - offset);
                let tag = self.next_transfer_tag;
                self.next_transfer_tag = match self.next_transfer_tag.wrapping_add(1) {
                    RESERVED_TAG => 1,
                    next => next,
                };
                gather.r2ts.push(R2tState {
                    target_transfer_tag: tag,
                    buffer_offset: offset,
                    desired_bytes,
                    received_bytes: 0,
                    next_data_sn: 0,
                });
                r2ts.push(Header::ReadyToTransfer(pdu::ReadyToTransfer {
                    lun: gather.command.lun.0,
                    initiator_task_tag: itt,
                    target_transfer_tag: tag,
                    stat_sn: 0,
                    exp_cmd_sn: 0,
                    max_cmd_sn: 0,
                    r2t_sn: gather.r2t_count,
                    buffer_offset: offset,
                    desired_transfer_bytes: desired_bytes,
                }));
                gather.r2t_count += 1;
                gather.next_r2t_offset = offset + desired_bytes;
            }
        }
        for r2t in r2ts {
            self.send(r2t, Vec::new()).await?;
        }
        Ok(Flow::Continue)
    }

    async fn on_data_out(
        &mut self,
        data_out: pdu::DataOut,
        raw: RawPdu,
    ) -> Result<Flow, FatalError> {
        let itt = data_out.initiator_task_tag;
        let Some(gather) = self.gathering.get_mut(&itt) else {
            if self.aborted_tags.contains(&itt) {
                return Ok(Flow::Continue);
            }
            self.reject(RejectReason::ProtocolError, &raw.bhs).await?;
            return Ok(Flow::Continue);
        };
        if let Err(why) = gather.on_data_out(&data_out, &raw.data, raw.placed_bytes) {
            // No recovery within a command at ErrorRecoveryLevel 0: end the command with
            // CHECK CONDITION and keep the session (RFC 7143 §11.4.7.2 sense codes).
            tracing::info!(why, "Data-Out sequence error");
            return self.end_with_sequence_error(itt).await;
        }
        self.progress_write(itt).await
    }

    /// Ends the gathering write `itt` with CHECK CONDITION for a Data-Out
    /// sequence error: no recovery within a command at ErrorRecoveryLevel 0.
    async fn end_with_sequence_error(&mut self, itt: u32) -> Result<Flow, FatalError> {
        let gather = self.gathering.remove(&itt).expect("a gathering write");
        self.remember_aborted(itt);
        let ready = gather.fail(data_sequence_error_sense());
        self.on_ready(ready).await
    }

    /// A command has all its data: queue it in CmdSN order or, if immediate, dispatch.
    async fn on_ready(&mut self, ready: ReadyCommand) -> Result<Flow, FatalError> {
        let itt = ready.command.itt;
        if !ready.command.holds_slot || ready.command.attribute == TaskAttribute::HeadOfQueue {
            // Immediate and HEAD OF QUEUE commands do not wait for earlier ones (SAM-5 §8.6).
            self.order.retain(|(tag, _)| *tag != itt);
            self.dispatch(ready);
            self.drain_order();
            return Ok(Flow::Continue);
        }
        let slot = self
            .order
            .iter_mut()
            .find(|(tag, slot)| *tag == itt && matches!(slot, Slot::Gathering))
            .expect("a slot for every command that holds one");
        slot.1 = Slot::Ready(Box::new(ready));
        self.drain_order();
        Ok(Flow::Continue)
    }

    fn drain_order(&mut self) {
        while matches!(self.order.front(), Some((_, Slot::Ready(_)))) {
            let Some((_, Slot::Ready(ready))) = self.order.pop_front() else {
                unreachable!("checked above");
            };
            self.dispatch(*ready);
        }
    }

    fn dispatch(&mut self, ready: ReadyCommand) {
        let itt = ready.command.itt;
        let Some(control) = self.session.add_task(itt, ready.command.lun.canonical()) else {
            // Checked at admission; a duplicate here would be a bug in this module.
            unreachable!("task tag {itt:#x} dispatched twice");
        };
        let guard = match ready.command.attribute {
            TaskAttribute::HeadOfQueue => Some(OrderGuard::None),
            attribute => self.order_guard_now(attribute),
        };
        let Some(guard) = guard else {
            // The dispatcher lives as long as the connection; a send error means it is ending.
            self.dispatch_backlog.fetch_add(1, Ordering::SeqCst);
            let unstarted = Unstarted::new(self.session.clone(), itt);
            let _ = self.dispatch.send(Dispatch {
                ready,
                control,
                unstarted,
            });
            return;
        };
        let small_read = runs_inline(&ready.command);
        let inline = small_read
            || self.target.scsi.runs_quickly(
                &self.session.nexus,
                ready.command.lun,
                &ready.command.cdb,
                &ready.data_out,
            );
        if ready.answer.is_none() && inline {
            let fetch = if small_read {
                Fetch::FromMemory
            } else {
                Fetch::Wait
            };
            self.execute_here(control, ready, guard, fetch);
            return;
        }
        self.start(control, ready, guard);
    }

    /// Hands a command to the blocking pool (see `start`).
    fn start(&self, control: Arc<TaskControl>, ready: ReadyCommand, guard: OrderGuard) {
        let (target, session) = (self.target.clone(), self.session.clone());
        start(target, session, control, ready, guard, self.out.clone());
    }

    /// The ordering lock for a command, if it can be had without waiting and
    /// without passing a command queued at the dispatcher (commands take it in
    /// CmdSN order). Most commands start this way, one task hand-off sooner.
    fn order_guard_now(&self, attribute: TaskAttribute) -> Option<OrderGuard> {
        if self.dispatch_backlog.load(Ordering::SeqCst) > 0 {
            return None;
        }
        match attribute {
            TaskAttribute::Ordered => self
                .order_lock
                .clone()
                .try_write_owned()
                .ok()
                .map(OrderGuard::Exclusive),
            _ => self
                .order_lock
                .clone()
                .try_read_owned()
                .ok()
                .map(OrderGuard::Shared),
        }
    }

    /// Runs a small command to completion on this task and queues its
    /// response: no hand-off to another task or thread at all (see
    /// `runs_inline`). A read whose data is not in memory goes to the
    /// blocking pool instead, so a disk does not hold up the connection.
    fn execute_here(
        &self,
        control: Arc<TaskControl>,
        ready: ReadyCommand,
        guard: OrderGuard,
        fetch: Fetch,
    ) {
        match run_ready(&self.target, &self.session, &control, ready, guard, fetch) {
            Ran::Settled(itt, Some(completion)) => self.complete(itt, completion),
            Ran::Settled(itt, None) => self.session.remove_task(itt),
            Ran::WouldWait(ready, guard) => self.start(control, ready, guard),
        }
    }

    // -- Text ---------------------------------------------------------------------------

    async fn on_text(
        &mut self,
        request: pdu::TextRequest,
        raw: RawPdu,
    ) -> Result<Flow, FatalError> {
        let itt = request.initiator_task_tag;
        let max_send = self.session.params.max_send_data_segment_bytes as usize;
        // The initiator asks for the next part of a long answer.
        if request.target_transfer_tag != RESERVED_TAG {
            let Some((pending_itt, tag, rest)) = self.text_out.take() else {
                self.reject(RejectReason::InvalidPduField, &raw.bhs).await?;
                return Ok(Flow::Continue);
            };
            if pending_itt != itt || tag != request.target_transfer_tag {
                self.reject(RejectReason::InvalidPduField, &raw.bhs).await?;
                return Ok(Flow::Continue);
            }
            return self.send_text_part(itt, &request.lun, rest, max_send).await;
        }
        self.text_out = None;
        let text_max = self.target.config.limits.text_max_bytes;
        let mut text = match self.text_in.take() {
            Some((pending_itt, text)) if pending_itt == itt => text,
            _ => Vec::new(),
        };
        if text.len() + raw.data.len() > text_max {
            self.reject(RejectReason::ProtocolError, &raw.bhs).await?;
            return Ok(Flow::Continue);
        }
        text.extend_from_slice(&raw.data);
        if request.continue_bit {
            self.text_in = Some((itt, text));
            let tag = self.allocate_transfer_tag();
            let header = text_response(itt, request.lun, tag, false, false);
            self.send(header, Vec::new()).await?;
            return Ok(Flow::Continue);
        }
        let answer = match text::parse(&text, text_max) {
            Ok(offered) => self.answer_text(&offered),
            Err(error) => {
                tracing::debug!(%error, "text request");
                self.reject(RejectReason::ProtocolError, &raw.bhs).await?;
                return Ok(Flow::Continue);
            }
        };
        self.send_text_part(itt, &request.lun, answer.encode(), max_send)
            .await
    }

    fn answer_text(&self, offered: &Pairs) -> Pairs {
        let mut answer = Pairs::default();
        for (key, value) in &offered.0 {
            if key == "SendTargets" {
                let targets = discovery::send_targets(
                    value,
                    &self.target.config.target_name,
                    &self.target.portals,
                );
                answer.0.extend(targets.0);
            } else if key.starts_with("X-") || key.starts_with("X#") {
                answer.push(key, text::NOT_UNDERSTOOD);
            } else {
                // Renegotiation in full feature phase is not offered.
                answer.push(key, text::REJECT);
            }
        }
        answer
    }

    async fn send_text_part(
        &mut self,
        itt: u32,
        lun: &[u8; 8],
        mut text: Vec<u8>,
        max_send_bytes: usize,
    ) -> Result<Flow, FatalError> {
        if text.len() <= max_send_bytes {
            let header = text_response(itt, *lun, RESERVED_TAG, true, false);
            self.send(header, text).await?;
            return Ok(Flow::Continue);
        }
        let rest = text.split_off(max_send_bytes);
        let tag = self.allocate_transfer_tag();
        self.text_out = Some((itt, tag, rest));
        let header = text_response(itt, *lun, tag, false, true);
        self.send(header, text).await?;
        Ok(Flow::Continue)
    }

    // -- Task management ----------------------------------------------------------------

    async fn on_task_management(
        &mut self,
        request: pdu::TaskManagementRequest,
    ) -> Result<Flow, FatalError> {
        // Canonical, to match tasks that named the same LU in another form.
        let lun = Lun(request.lun).canonical();
        let function = match request.function {
            1 => TaskManagementFunction::AbortTask {
                referenced_task_tag: request.referenced_task_tag,
            },
            2 => TaskManagementFunction::AbortTaskSet,
            3 => TaskManagementFunction::ClearAca,
            4 => TaskManagementFunction::ClearTaskSet,
            5 => TaskManagementFunction::LogicalUnitReset,
            6 => TaskManagementFunction::TargetWarmReset,
            7 => TaskManagementFunction::TargetColdReset,
            // TASK REASSIGN needs ErrorRecoveryLevel 2.
            8 => {
                return self
                    .send_tmf_response(request.initiator_task_tag, TMF_REASSIGN_NOT_SUPPORTED)
                    .await
            }
            _ => {
                return self
                    .send_tmf_response(request.initiator_task_tag, TMF_NOT_SUPPORTED)
                    .await
            }
        };
        if self.session.session_type == SessionType::Discovery {
            return self
                .send_tmf_response(request.initiator_task_tag, TMF_NOT_SUPPORTED)
                .await;
        }
        // Each one runs until the commands it aborts end; TMF requests are
        // immediate, outside the CmdSN window, so this is their only bound.
        let Ok(running) = self.task_management_slots.clone().try_acquire_owned() else {
            return self
                .send_tmf_response(request.initiator_task_tag, TMF_FUNCTION_REJECTED)
                .await;
        };
        let (local_found, dispatched) = match function {
            TaskManagementFunction::AbortTask {
                referenced_task_tag,
            } => self.abort_local(|itt, _| itt == referenced_task_tag, referenced_task_tag),
            TaskManagementFunction::AbortTaskSet
            | TaskManagementFunction::ClearTaskSet
            | TaskManagementFunction::LogicalUnitReset => {
                self.abort_local(|_, task_lun| task_lun == lun, RESERVED_TAG)
            }
            TaskManagementFunction::TargetWarmReset | TaskManagementFunction::TargetColdReset => {
                self.abort_local(|_, _| true, RESERVED_TAG)
            }
            TaskManagementFunction::ClearAca => (false, AbortedTasks::default()),
        };
        let cold_reset = function == TaskManagementFunction::TargetColdReset;
        // Waiting for running commands must not stall this loop: finish in a task.
        let session = self.session.clone();
        let target = self.target.clone();
        let out = self.out.clone();
        let itt = request.initiator_task_tag;
        tokio::spawn(async move {
            // The SCSI layer hears of the function before the transport waits for the
            // running tasks it aborts: a task blocked inside the SCSI layer (a waiting
            // SANITIZE, say) can only end once the layer knows it was aborted.
            let scsi = target.scsi.clone();
            let nexus = session.nexus.clone();
            let scsi_response =
                tokio::task::spawn_blocking(move || scsi.task_management(&nexus, lun, function))
                    .await;
            // Commands answered before the abort send their responses first.
            session.wait_for_tasks(&dispatched.all()).await;
            let response = match (function, scsi_response) {
                (TaskManagementFunction::AbortTask { .. }, _) => {
                    if local_found || !dispatched.aborted.is_empty() {
                        TMF_FUNCTION_COMPLETE
                    } else {
                        TMF_TASK_DOES_NOT_EXIST
                    }
                }
                (_, Ok(response)) => tmf_code(response),
                (_, Err(_)) => TMF_FUNCTION_REJECTED,
            };
            let header = Header::TaskManagementResponse(pdu::TaskManagementResponse {
                response,
                initiator_task_tag: itt,
                stat_sn: 0,
                exp_cmd_sn: 0,
                max_cmd_sn: 0,
            });
            let _ = out
                .send(Outbound::Pdu {
                    header,
                    data: Vec::new(),
                })
                .await;
            if cold_reset {
                // A cold reset ends every connection of the session after the response.
                let _ = out.send(Outbound::Close).await;
                session.request_close();
            }
            drop(running);
        });
        Ok(Flow::Continue)
    }

    /// Aborts matching commands of this connection: those still gathering data are dropped
    /// here; dispatched ones are flagged and their tags returned to wait for.
    fn abort_local(
        &mut self,
        matches: impl Fn(u32, Lun) -> bool,
        _hint: u32,
    ) -> (bool, AbortedTasks) {
        let doomed: Vec<u32> = self
            .gathering
            .iter()
            .filter(|(itt, gather)| matches(**itt, gather.command.lun.canonical()))
            .map(|(itt, _)| *itt)
            .collect();
        let mut found = !doomed.is_empty();
        for itt in doomed {
            let gather = self.gathering.remove(&itt).expect("listed above");
            self.forget_aborted(itt, gather.command.holds_slot);
        }
        let queued: Vec<u32> = self
            .order
            .iter()
            .filter_map(|(itt, slot)| match slot {
                Slot::Ready(ready) if matches(*itt, ready.command.lun.canonical()) => Some(*itt),
                _ => None,
            })
            .collect();
        for itt in queued {
            found = true;
            self.order.retain(|(tag, _)| *tag != itt);
            self.forget_aborted(itt, true);
        }
        self.drain_order();
        let dispatched = self
            .session
            .abort_tasks(|itt, control| matches(itt, control.lun));
        (found, dispatched)
    }

    fn forget_aborted(&mut self, itt: u32, holds_slot: bool) {
        self.order.retain(|(tag, _)| *tag != itt);
        if holds_slot {
            self.session.window.lock().release();
        }
        self.remember_aborted(itt);
    }

    /// Late Data-Out for a command that ended early is dropped without a Reject.
    fn remember_aborted(&mut self, itt: u32) {
        if self.aborted_tags.len() == ABORTED_TAGS_REMEMBERED {
            self.aborted_tags.pop_front();
        }
        self.aborted_tags.push_back(itt);
    }

    async fn send_tmf_response(&self, itt: u32, response: u8) -> Result<Flow, FatalError> {
        let header = Header::TaskManagementResponse(pdu::TaskManagementResponse {
            response,
            initiator_task_tag: itt,
            stat_sn: 0,
            exp_cmd_sn: 0,
            max_cmd_sn: 0,
        });
        self.send(header, Vec::new()).await?;
        Ok(Flow::Continue)
    }

    // -- Logout -------------------------------------------------------------------------

    async fn on_logout(&mut self, request: pdu::LogoutRequest) -> Result<Flow, FatalError> {
        // 0 close the session, 1 close this connection (the only one), 2 recovery (ERL 2).
        let response = match request.reason {
            0 | 1 => 0,
            _ => 2,
        };
        if response == 0 {
            // Commands still gathering data are dropped; dispatched ones finish first so
            // their responses precede the Logout Response.
            let tags: Vec<u32> = self.gathering.keys().copied().collect();
            for itt in tags {
                let gather = self.gathering.remove(&itt).expect("listed above");
                self.forget_aborted(itt, gather.command.holds_slot);
            }
            self.session.wait_for_all_tasks().await;
            // Before the response: an initiator that logs in again at once
            // (another ISID, or another initiator it coordinates with) must
            // find the old nexus's reservations released. Told at the
            // teardown instead, a RESERVE sent right after a relogin met the
            // old reservation now and then on a loaded host (libiscsi's
            // SCSI.Reserve6.Logout).
            drop_nexus(&self.target, &self.session).await;
        }
        let header = Header::LogoutResponse(pdu::LogoutResponse {
            response,
            initiator_task_tag: request.initiator_task_tag,
            stat_sn: 0,
            exp_cmd_sn: 0,
            max_cmd_sn: 0,
            time2wait_seconds: 0,
            time2retain_seconds: 0,
        });
        self.send(header, Vec::new()).await?;
        if response != 0 {
            return Ok(Flow::Continue);
        }
        self.release_wire();
        self.out
            .send(Outbound::Close)
            .await
            .map_err(|_| FatalError::WriterGone)?;
        Ok(Flow::Close)
    }
}

impl WriteGather {
    /// Keeps data at `offset` (already validated by the caller: no byte is
    /// received twice): `data`, or `placed_bytes` the reader put in the
    /// buffer already.
    fn accept(&mut self, offset: u32, data: &[u8], placed_bytes: u32) {
        assert!(data.is_empty() || placed_bytes == 0);
        let len = data.len() as u32 + placed_bytes;
        let end = offset as usize + len as usize;
        assert!(end <= self.command.expected_data_transfer_bytes as usize);
        if let Some(buffer) = &self.buffer {
            buffer.with(|buffer| {
                if placed_bytes == 0 {
                    place(buffer, offset as usize, data);
                }
                assert!(buffer.len() >= end, "placed where it belongs");
            });
        }
        self.received_bytes += len;
    }

    /// Checks one Data-Out against the unsolicited burst or its R2T (DataSN, offset,
    /// length) and keeps its data. Errors are fatal at ErrorRecoveryLevel 0.
    fn on_data_out(
        &mut self,
        data_out: &pdu::DataOut,
        data: &[u8],
        placed_bytes: u32,
    ) -> Result<(), String> {
        let len = data.len() as u32 + placed_bytes;
        let itt = data_out.initiator_task_tag;
        if data_out.target_transfer_tag == RESERVED_TAG {
            if !self.unsolicited_open {
                return Err(format!("unsolicited Data-Out for {itt:#x} not expected"));
            }
            if data_out.data_sn != self.unsolicited_next_data_sn {
                return Err(format!(
                    "DataSN {} for {itt:#x}, expected {}",
                    data_out.data_sn, self.unsolicited_next_data_sn
                ));
            }
            let end = u64::from(data_out.buffer_offset) + u64::from(len);
            if data_out.buffer_offset != self.received_bytes
                || end > u64::from(self.unsolicited_limit_bytes)
            {
                return Err(format!("unsolicited Data-Out offset/length for {itt:#x}"));
            }
            self.accept(data_out.buffer_offset, data, placed_bytes);
            self.unsolicited_next_data_sn += 1;
            if data_out.final_bit {
                self.unsolicited_open = false;
                self.next_r2t_offset = self.received_bytes;
            }
            return Ok(());
        }
        let Some(index) = self
            .r2ts
            .iter()
            .position(|r2t| r2t.target_transfer_tag == data_out.target_transfer_tag)
        else {
            return Err(format!("Data-Out for {itt:#x} with unknown TTT"));
        };
        let r2t = &mut self.r2ts[index];
        if data_out.data_sn != r2t.next_data_sn {
            return Err(format!(
                "DataSN {} for {itt:#x}, expected {}",
                data_out.data_sn, r2t.next_data_sn
            ));
        }
        let expected_offset = r2t.buffer_offset + r2t.received_bytes;
        if data_out.buffer_offset != expected_offset || r2t.received_bytes + len > r2t.desired_bytes
        {
            return Err(format!(
                "Data-Out offset/length for {itt:#x} outside its R2T"
            ));
        }
        r2t.received_bytes += len;
        r2t.next_data_sn += 1;
        let done = r2t.received_bytes == r2t.desired_bytes;
        if data_out.final_bit != done {
            return Err(format!(
                "F bit of Data-Out for {itt:#x} does not end its R2T"
            ));
        }
        self.accept(data_out.buffer_offset, data, placed_bytes);
        if done {
            self.r2ts.remove(index);
        }
        Ok(())
    }

    /// Ends the command without the SCSI layer: CHECK CONDITION with `sense`.
    fn fail(self, sense: Vec<u8>) -> ReadyCommand {
        let answer = CommandOutcome {
            status: ScsiStatus::CheckCondition,
            data_in: Vec::new(),
            sense,
        };
        ReadyCommand {
            command: self.command,
            data_out: bytes::Bytes::new(),
            r2t_count: self.r2t_count,
            answer: Some(answer),
            _buffers: None,
        }
    }

    fn into_ready(self, target: &Target) -> ReadyCommand {
        let edtl = self.command.expected_data_transfer_bytes;
        assert_eq!(self.received_bytes, edtl, "only a complete write is ready");
        let data_out = bytes::Bytes::from(self.buffer.map(LentBuffer::take).unwrap_or_default());
        assert!(self.refused.is_some() || data_out.len() == edtl as usize);
        let answer = self.refused.map(|refusal| match refusal {
            Refusal::TooLarge => {
                tracing::info!(
                    edtl,
                    max = target.config.limits.max_write_transfer_bytes,
                    "write above the transfer limit"
                );
                CommandOutcome {
                    status: ScsiStatus::CheckCondition,
                    data_in: Vec::new(),
                    sense: invalid_field_in_cdb_sense(),
                }
            }
            Refusal::BuffersFull => {
                tracing::debug!(edtl, "write buffers full: TASK SET FULL");
                CommandOutcome {
                    status: ScsiStatus::TaskSetFull,
                    data_in: Vec::new(),
                    sense: Vec::new(),
                }
            }
        });
        ReadyCommand {
            command: self.command,
            data_out,
            r2t_count: self.r2t_count,
            answer,
            _buffers: self.buffers,
        }
    }
}

/// Puts `data` at `offset` of a write's buffer, which holds what arrived so
/// far. Data nearly always arrives in order and is appended; a gap (R2Ts
/// answered out of order) is zeroed until its own data fills it. Not zeroing
/// the whole buffer up front spares a memset of every written byte.
fn place(buffer: &mut Vec<u8>, offset: usize, data: &[u8]) {
    if offset >= buffer.len() {
        buffer.resize(offset, 0);
        buffer.extend_from_slice(data);
        return;
    }
    let filled = (offset + data.len()).min(buffer.len()) - offset;
    buffer[offset..offset + filled].copy_from_slice(&data[..filled]);
    buffer.extend_from_slice(&data[filled..]);
}

/// Fixed-format sense data with a sense key and ASC/ASCQ.
fn fixed_sense(key: u8, asc: u8, ascq: u8) -> Vec<u8> {
    let mut sense = vec![0u8; 18];
    sense[0] = 0x70;
    sense[2] = key;
    sense[7] = 10;
    sense[12] = asc;
    sense[13] = ascq;
    sense
}

/// ILLEGAL REQUEST, INVALID FIELD IN CDB (24h/00h).
fn invalid_field_in_cdb_sense() -> Vec<u8> {
    fixed_sense(0x05, 0x24, 0x00)
}

/// ABORTED COMMAND, iSCSI "incorrect amount of data" (0Ch/0Dh, RFC 7143 §11.4.7.2): a
/// Data-Out out of sequence, outside its R2T, or with the wrong F bit.
fn data_sequence_error_sense() -> Vec<u8> {
    fixed_sense(0x0b, 0x0c, 0x0d)
}

fn text_response(itt: u32, lun: [u8; 8], tag: u32, final_bit: bool, continue_bit: bool) -> Header {
    Header::TextResponse(pdu::TextResponse {
        final_bit,
        continue_bit,
        lun,
        initiator_task_tag: itt,
        target_transfer_tag: tag,
        stat_sn: 0,
        exp_cmd_sn: 0,
        max_cmd_sn: 0,
    })
}

/// Resolves once the flag is true (or its sender is gone), holding no borrow across awaits.
pub(crate) async fn wait_until_set(flag: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = flag.wait_for(|set| *set).await.map(|_| ());
}

/// CmdSN of a command PDU that is not immediate; `None` for everything else (including
/// NOP-Out answers to pings, which carry no new CmdSN).
fn non_immediate_cmd_sn(header: &Header) -> Option<u32> {
    match header {
        Header::ScsiCommand(h) if !h.immediate => Some(h.cmd_sn),
        Header::NopOut(h) if !h.immediate && h.initiator_task_tag != RESERVED_TAG => Some(h.cmd_sn),
        Header::TextRequest(h) if !h.immediate => Some(h.cmd_sn),
        Header::TaskManagementRequest(h) if !h.immediate => Some(h.cmd_sn),
        Header::LogoutRequest(h) if !h.immediate => Some(h.cmd_sn),
        _ => None,
    }
}

fn task_attribute(attribute: u8) -> TaskAttribute {
    match attribute {
        2 => TaskAttribute::Ordered,
        3 => TaskAttribute::HeadOfQueue,
        4 => TaskAttribute::Aca,
        _ => TaskAttribute::Simple,
    }
}

/// The CDB (with an extended-CDB AHS appended) and the bidirectional read length, if given.
fn command_cdb(
    command: &pdu::ScsiCommand,
    ahs: &[u8],
) -> Result<(Vec<u8>, Option<u32>), RejectReason> {
    let mut cdb = command.cdb.to_vec();
    let mut bidi_read_bytes = None;
    for segment in pdu::parse_ahs(ahs).map_err(|_| RejectReason::InvalidPduField)? {
        match segment.ahs_type {
            pdu::AHS_TYPE_EXTENDED_CDB => cdb.extend_from_slice(segment.specific),
            pdu::AHS_TYPE_BIDI_READ_LENGTH if segment.specific.len() == 4 => {
                let bytes = segment.specific;
                bidi_read_bytes =
                    Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]));
            }
            _ => return Err(RejectReason::InvalidPduField),
        }
    }
    Ok((cdb, bidi_read_bytes))
}

const TMF_FUNCTION_COMPLETE: u8 = 0;
const TMF_TASK_DOES_NOT_EXIST: u8 = 1;
const TMF_LUN_DOES_NOT_EXIST: u8 = 2;
const TMF_REASSIGN_NOT_SUPPORTED: u8 = 4;
const TMF_NOT_SUPPORTED: u8 = 5;
const TMF_FUNCTION_REJECTED: u8 = 255;

fn tmf_code(response: TaskManagementResponse) -> u8 {
    match response {
        TaskManagementResponse::FunctionComplete => TMF_FUNCTION_COMPLETE,
        TaskManagementResponse::TaskDoesNotExist => TMF_TASK_DOES_NOT_EXIST,
        TaskManagementResponse::LunDoesNotExist => TMF_LUN_DOES_NOT_EXIST,
        TaskManagementResponse::FunctionNotSupported => TMF_NOT_SUPPORTED,
        TaskManagementResponse::FunctionRejected => TMF_FUNCTION_REJECTED,
    }
}

// ---------------------------------------------------------------------------------------
// Dispatch and execution.

enum OrderGuard {
    None,
    Shared(#[allow(dead_code)] OwnedRwLockReadGuard<()>),
    Exclusive(#[allow(dead_code)] OwnedRwLockWriteGuard<()>),
}

/// Takes the ordering lock for each command in CmdSN order (shared for SIMPLE, exclusive for
/// ORDERED, SAM-5 §8.6), then starts its executor. Tokio's RwLock is fair, so an ORDERED
/// command waits for every earlier command and every later one waits for it.
async fn dispatch_loop(
    mut rx: mpsc::UnboundedReceiver<Dispatch>,
    backlog: Arc<AtomicUsize>,
    order_lock: Arc<RwLock<()>>,
    target: Arc<Target>,
    session: Arc<Session>,
    out: Outbox,
) {
    while let Some(Dispatch {
        ready,
        control,
        unstarted,
    }) = rx.recv().await
    {
        let guard = match ready.command.attribute {
            TaskAttribute::Ordered => OrderGuard::Exclusive(order_lock.clone().write_owned().await),
            _ => OrderGuard::Shared(order_lock.clone().read_owned().await),
        };
        let before = backlog.fetch_sub(1, Ordering::SeqCst);
        assert!(before > 0, "a dispatched command was counted");
        unstarted.started();
        start(
            target.clone(),
            session.clone(),
            control,
            ready,
            guard,
            out.clone(),
        );
    }
}

/// Starts a command that does not run on the processing loop: one that needs
/// the SCSI layer runs on the blocking pool from start to finish and queues
/// its completion from there (one hand-off, where an executor task waiting for
/// the pool was two); one with its answer ready only queues that.
fn start(
    target: Arc<Target>,
    session: Arc<Session>,
    control: Arc<TaskControl>,
    mut ready: ReadyCommand,
    guard: OrderGuard,
    out: Outbox,
) {
    if let Some(answer) = ready.answer.take() {
        tokio::spawn(send_answer(session, control, ready, answer, guard, out));
        return;
    }
    let share = session.pool_share().clone();
    let run = move |_share: OwnedSemaphorePermit| {
        let itt = ready.command.itt;
        match run_ready(&target, &session, &control, ready, guard, Fetch::Wait) {
            Ran::Settled(_, Some(completion)) => {
                let _ = out.blocking_send(Outbound::Complete(completion));
            }
            Ran::Settled(_, None) => {}
            // Only a read from memory gives up.
            Ran::WouldWait(..) => unreachable!("a command that may wait gave up"),
        }
        session.remove_task(itt);
    };
    // Within the session's share of the pool at once, most of the time; past
    // it the command waits its turn on a task (holding its ordering guard:
    // it counts as started).
    match share.clone().try_acquire_owned() {
        Ok(permit) => {
            tokio::task::spawn_blocking(move || run(permit));
        }
        Err(_) => {
            tokio::spawn(async move {
                let permit = share.acquire_owned().await.expect("never closed");
                tokio::task::spawn_blocking(move || run(permit));
            });
        }
    }
}

/// Queues the completion of a command answered without the SCSI layer
/// (`answer`, made when it was admitted).
async fn send_answer(
    session: Arc<Session>,
    control: Arc<TaskControl>,
    ready: ReadyCommand,
    answer: CommandOutcome,
    guard: OrderGuard,
    out: Outbox,
) {
    let ReadyCommand {
        command, r2t_count, ..
    } = ready;
    let itt = command.itt;
    let outcome = Some(Ok((answer, None)));
    if let Some(completion) = settle(&session, &control, &command, r2t_count, guard, outcome) {
        let _ = out.send(Outbound::Complete(completion)).await;
    }
    session.remove_task(itt);
}

/// Where a command run on the connection's own task may get its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fetch {
    /// Wherever it is: the command may wait for a disk.
    Wait,
    /// From memory only: a READ that would wait gives up (`Ran::WouldWait`).
    FromMemory,
}

/// What `run_ready` did with a command.
enum Ran {
    /// Ran (or was aborted before it started) and settled: its tag, and the
    /// completion to send unless it was aborted.
    Settled(u32, Option<Completion>),
    /// A read from memory found its data on a disk: nothing happened, and
    /// the command and its ordering guard come back to run where it may wait.
    WouldWait(ReadyCommand, OrderGuard),
}

/// Runs a ready command through the SCSI layer on the calling thread, unless
/// it was aborted before it started (a panic in the layer is an outcome too),
/// and settles it.
fn run_ready(
    target: &Target,
    session: &Session,
    control: &TaskControl,
    ready: ReadyCommand,
    guard: OrderGuard,
    fetch: Fetch,
) -> Ran {
    debug_assert!(ready.answer.is_none());
    let outcome = if control.is_aborted() {
        None
    } else {
        let call = || scsi_call(target, session, &ready.command, &ready.data_out, fetch);
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)) {
            Ok(Some(answered)) => Some(Ok(answered)),
            Ok(None) => return Ran::WouldWait(ready, guard),
            Err(_) => Some(Err("the SCSI layer panicked".to_string())),
        }
    };
    let ReadyCommand {
        command, r2t_count, ..
    } = ready;
    let completion = settle(session, control, &command, r2t_count, guard, outcome);
    Ran::Settled(command.itt, completion)
}

/// The SCSI layer's work for a command: its outcome, and how many Data-Out
/// bytes it needed (for the residual); `None` when a read from memory gave up.
fn scsi_call(
    target: &Target,
    session: &Session,
    command: &PendingCommand,
    data_out: &bytes::Bytes,
    fetch: Fetch,
) -> Option<(CommandOutcome, Option<u64>)> {
    debug_assert!(data_out.len() <= u32::MAX as usize);
    // Only a write has a Data-Out residual (see `completion`): a read skips
    // the lookup of its unit this takes.
    let needed = if command.write {
        target
            .scsi
            .data_out_bytes(&session.nexus, command.lun, &command.cdb)
    } else {
        None
    };
    let scsi_command = Command {
        lun: command.lun,
        cdb: &command.cdb,
        data_out,
        expected_data_in_bytes: command.expected_data_in_bytes,
        task_tag: command.itt,
        attribute: command.attribute,
    };
    let outcome = match fetch {
        Fetch::Wait => target.scsi.execute(&session.nexus, scsi_command),
        Fetch::FromMemory => target
            .scsi
            .execute_from_memory(&session.nexus, scsi_command)?,
    };
    Some((outcome, needed))
}

/// After the SCSI layer is done: lets later ordered commands go, frees the
/// command's window slot, and gives the completion to send, unless the task
/// was aborted meanwhile (or never ran).
fn settle(
    session: &Session,
    control: &TaskControl,
    command: &PendingCommand,
    r2t_count: u32,
    guard: OrderGuard,
    outcome: Option<Result<(CommandOutcome, Option<u64>), String>>,
) -> Option<Completion> {
    drop(guard);
    if command.holds_slot {
        session.window.lock().release();
    }
    match outcome {
        Some(outcome) if control.answer() => Some(completion(command, r2t_count, outcome)),
        _ => None,
    }
}

/// Largest READ run on the connection's own task.
const MAX_INLINE_READ_BYTES: u32 = 128 * 1024;

/// Whether a command runs on the connection's task itself, with no hand-off:
/// small READs take microseconds when their data is in memory (the volume's
/// metadata, the page cache; one that is not goes to the pool, see `Fetch`),
/// less than two trips through the blocking pool, which at queue depth 1 are
/// most of their latency. So do small writes the SCSI layer calls quick
/// (`ScsiTarget::runs_quickly`; at queue depth 32 running them here gave
/// 1.3–1.6× the 4 KiB writes per second of the pool). Everything else
/// (SYNCHRONIZE CACHE and FUA writes sync the disks, copies and unmaps may be
/// long) goes to the pool, so the connection keeps reading meanwhile.
fn runs_inline(command: &PendingCommand) -> bool {
    const READ_6: u8 = 0x08;
    const READ_10: u8 = 0x28;
    const READ_12: u8 = 0xa8;
    const READ_16: u8 = 0x88;
    matches!(
        command.cdb.first(),
        Some(&(READ_6 | READ_10 | READ_12 | READ_16))
    ) && command.expected_data_in_bytes <= MAX_INLINE_READ_BYTES
}

/// Turns the SCSI layer's outcome into what goes on the wire, with residuals.
fn completion(
    command: &PendingCommand,
    r2t_count: u32,
    outcome: Result<(CommandOutcome, Option<u64>), String>,
) -> Completion {
    let (outcome, data_out_needed_bytes) = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            tracing::error!(itt = command.itt, %error, "SCSI layer failed a command");
            return Completion {
                itt: command.itt,
                lun_field: command.lun.0,
                response: 1,
                status: 0,
                sense: Vec::new(),
                data_in: Vec::new(),
                residual: Residual::default(),
                bidi_read_residual: Residual::default(),
                r2t_count,
                read: false,
            };
        }
    };
    let mut data_in = outcome.data_in;
    let produced_bytes = data_in.len() as u64;
    let read_residual = Residual::of(produced_bytes, command.expected_data_in_bytes);
    if !command.read {
        data_in.clear();
    }
    data_in.truncate(command.expected_data_in_bytes as usize);
    // Write residuals: the SCSI layer says how much Data-Out the CDB asked for; the
    // difference from ExpectedDataTransferLength is the residual (RFC 7143 11.4.5).
    let write_residual = match data_out_needed_bytes {
        Some(needed) if command.write => Residual::of(needed, command.expected_data_transfer_bytes),
        _ => Residual::default(),
    };
    let (residual, bidi_read_residual) = match (command.read, command.write) {
        (true, true) => (write_residual, read_residual),
        (true, false) => (read_residual, Residual::default()),
        _ => (write_residual, Residual::default()),
    };
    Completion {
        itt: command.itt,
        lun_field: command.lun.0,
        response: 0,
        status: outcome.status as u8,
        sense: outcome.sense,
        data_in,
        residual,
        bidi_read_residual,
        r2t_count,
        read: command.read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residuals_compare_transferred_with_expected() {
        assert_eq!(
            Residual::of(512, 0),
            Residual {
                overflow: true,
                underflow: false,
                bytes: 512
            }
        );
        assert_eq!(
            Residual::of(512, 10000),
            Residual {
                overflow: false,
                underflow: true,
                bytes: 9488
            }
        );
        assert_eq!(Residual::of(512, 512), Residual::default());
    }

    #[test]
    fn write_data_lands_at_its_offset_in_any_order() {
        let mut buffer = Vec::with_capacity(12);
        place(&mut buffer, 0, b"abc");
        place(&mut buffer, 9, b"jkl");
        assert_eq!(buffer, b"abc\0\0\0\0\0\0jkl");
        place(&mut buffer, 6, b"ghi");
        place(&mut buffer, 3, b"def");
        assert_eq!(buffer, b"abcdefghijkl");
        let mut tail_first = Vec::new();
        place(&mut tail_first, 4, b"ef");
        place(&mut tail_first, 0, b"abcd");
        assert_eq!(tail_first, b"abcdef");
    }

    #[test]
    fn sense_for_oversized_writes_is_invalid_field_in_cdb() {
        let sense = invalid_field_in_cdb_sense();
        assert_eq!(
            (sense[0], sense[2] & 0x0f, sense[12], sense[13]),
            (0x70, 0x05, 0x24, 0x00)
        );
    }

    #[test]
    fn ping_answers_carry_no_cmd_sn() {
        let nop = |itt| {
            Header::NopOut(pdu::NopOut {
                immediate: false,
                lun: [0; 8],
                initiator_task_tag: itt,
                target_transfer_tag: 7,
                cmd_sn: 5,
                exp_stat_sn: 0,
            })
        };
        assert_eq!(non_immediate_cmd_sn(&nop(RESERVED_TAG)), None);
        assert_eq!(non_immediate_cmd_sn(&nop(1)), Some(5));
    }
}
