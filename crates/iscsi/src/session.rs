//! Sessions (RFC 7143 §4.4): the registry keyed by initiator name and ISID (with the TSIH
//! the target assigns), the CmdSN window, and the table of commands handed to the SCSI layer.
//!
//! Why the window lives here and not in the connection: ExpCmdSN and MaxCmdSN are session
//! state that every PDU the target sends carries, and commands complete on executor tasks
//! while the connection's reader admits new ones. The window is also the bound on memory:
//! a session never has more than `command_window` non-immediate commands accepted and
//! unanswered, and the target tells the initiator so through MaxCmdSN.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use lacuna_scsi::lun::Lun;
use lacuna_scsi::target::ItNexus;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};

use crate::login::{SessionParams, SessionType};

/// Serial number arithmetic (RFC 1982) distance from `from` to `to`.
pub fn serial_distance(from: u32, to: u32) -> u32 {
    to.wrapping_sub(from)
}

/// Where a CmdSN falls relative to the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// CmdSN == ExpCmdSN: deliver now.
    Next,
    /// Inside the window but ahead of ExpCmdSN: hold until the gap fills.
    Ahead { distance: u32 },
    /// Outside the window: silently discard (RFC 7143 §4.2.2.1).
    Outside,
}

/// ExpCmdSN/MaxCmdSN bookkeeping.
#[derive(Debug)]
pub struct CommandWindow {
    exp_cmd_sn: u32,
    window: u32,
    /// Accepted non-immediate SCSI commands not yet answered (or aborted).
    outstanding: u32,
}

impl CommandWindow {
    pub fn new(exp_cmd_sn: u32, window: u32) -> CommandWindow {
        assert!(window >= 1);
        CommandWindow {
            exp_cmd_sn,
            window,
            outstanding: 0,
        }
    }

    pub fn exp_cmd_sn(&self) -> u32 {
        self.exp_cmd_sn
    }

    /// MaxCmdSN = ExpCmdSN + free slots - 1; equals ExpCmdSN - 1 when the window is closed.
    pub fn max_cmd_sn(&self) -> u32 {
        assert!(self.outstanding <= self.window);
        self.exp_cmd_sn
            .wrapping_add(self.window - self.outstanding)
            .wrapping_sub(1)
    }

    pub fn admit(&self, cmd_sn: u32) -> Admission {
        let open = self.window - self.outstanding;
        let distance = serial_distance(self.exp_cmd_sn, cmd_sn);
        if open == 0 || distance >= open {
            Admission::Outside
        } else if distance == 0 {
            Admission::Next
        } else {
            Admission::Ahead { distance }
        }
    }

    /// Consumes ExpCmdSN. `occupies_slot` for SCSI commands, which hold a slot until
    /// answered; other command PDUs (NOP-Out, Text, TMF, Logout) are answered at once.
    pub fn advance(&mut self, occupies_slot: bool) {
        self.exp_cmd_sn = self.exp_cmd_sn.wrapping_add(1);
        if occupies_slot {
            self.outstanding += 1;
            assert!(self.outstanding <= self.window);
        }
    }

    /// A SCSI command that occupied a slot was answered or aborted.
    pub fn release(&mut self) {
        assert!(self.outstanding > 0);
        self.outstanding -= 1;
    }
}

/// A command handed to an executor; kept so task management can find and abort it.
#[derive(Debug)]
pub struct TaskControl {
    /// Canonical (`Lun::canonical`), as task management names LUs.
    pub lun: Lun,
    /// `TASK_RUNNING`, then `TASK_ABORTED` or `TASK_ANSWERED`, whichever
    /// comes first. Why one word for both: an abort and a completion race,
    /// and exactly one may win. The initiator must never see a command's
    /// response and also hear that its abort succeeded.
    state: AtomicU8,
}

const TASK_RUNNING: u8 = 0;
const TASK_ABORTED: u8 = 1;
const TASK_ANSWERED: u8 = 2;

impl TaskControl {
    fn new(lun: Lun) -> TaskControl {
        TaskControl {
            lun,
            state: AtomicU8::new(TASK_RUNNING),
        }
    }

    pub fn is_aborted(&self) -> bool {
        self.state.load(Ordering::SeqCst) == TASK_ABORTED
    }

    /// Claims the right to send the command's response: false when it was
    /// aborted first (then nothing may be sent).
    pub fn answer(&self) -> bool {
        match self.state.compare_exchange(
            TASK_RUNNING,
            TASK_ANSWERED,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(_) => true,
            Err(state) => {
                assert_eq!(state, TASK_ABORTED, "a command is answered once");
                false
            }
        }
    }

    /// Aborts the command unless its response is already on its way.
    fn abort(&self) -> bool {
        let swapped = self.state.compare_exchange(
            TASK_RUNNING,
            TASK_ABORTED,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        matches!(swapped, Ok(_) | Err(TASK_ABORTED))
    }
}

/// What an abort found among the dispatched commands.
#[derive(Debug, Default)]
pub struct AbortedTasks {
    /// Aborted: no response will be sent for these.
    pub aborted: Vec<u32>,
    /// Answered before the abort: their responses are on their way, and
    /// whoever reports on the abort waits for them to go first.
    pub answering: Vec<u32>,
}

impl AbortedTasks {
    /// Every tag found, aborted or not: the commands to wait for.
    pub fn all(&self) -> Vec<u32> {
        self.aborted
            .iter()
            .chain(&self.answering)
            .copied()
            .collect()
    }
}

/// Registry key: the initiator port is the initiator name plus ISID (RFC 7143 §4.4.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub initiator_name: String,
    pub isid: [u8; 6],
}

pub struct Session {
    pub tsih: u16,
    pub key: SessionKey,
    pub nexus: ItNexus,
    pub session_type: SessionType,
    pub params: SessionParams,
    pub window: Mutex<CommandWindow>,
    tasks: Mutex<HashMap<u32, Arc<TaskControl>>>,
    tasks_changed: Notify,
    /// Set to ask the session's connection to close (reinstatement, cold reset).
    close: watch::Sender<bool>,
    /// Set by the connection once it has torn everything down.
    closed: watch::Sender<bool>,
    /// Set when the connection has ended and its teardown began (see
    /// [`Registry::ending`]).
    ending: std::sync::atomic::AtomicBool,
    /// The SCSI layer has been told the nexus is gone (see
    /// [`Session::take_nexus_drop`]).
    nexus_dropped: std::sync::atomic::AtomicBool,
    /// Commands of this session on the blocking pool at once
    /// (`Limits::session_pool_commands_max`).
    pool_share: Arc<tokio::sync::Semaphore>,
}

impl Session {
    /// The session's commands come through relative target port `port` (1 unless set).
    pub fn with_relative_target_port(mut self, port: u16) -> Session {
        assert!(port != 0, "relative target port 0 is reserved");
        self.nexus.relative_target_port = port;
        self
    }

    pub fn new(
        tsih: u16,
        key: SessionKey,
        session_type: SessionType,
        params: SessionParams,
        exp_cmd_sn: u32,
        command_window: u32,
        pool_share_commands: usize,
    ) -> Session {
        assert!(pool_share_commands > 0);
        let nexus = ItNexus {
            initiator_port: initiator_port(&key.initiator_name, &key.isid),
            initiator_name: key.initiator_name.clone(),
            relative_target_port: 1,
        };
        Session {
            tsih,
            key,
            nexus,
            session_type,
            params,
            window: Mutex::new(CommandWindow::new(exp_cmd_sn, command_window)),
            tasks: Mutex::new(HashMap::new()),
            tasks_changed: Notify::new(),
            close: watch::channel(false).0,
            closed: watch::channel(false).0,
            ending: std::sync::atomic::AtomicBool::new(false),
            nexus_dropped: std::sync::atomic::AtomicBool::new(false),
            pool_share: Arc::new(tokio::sync::Semaphore::new(pool_share_commands)),
        }
    }

    /// Whether the caller is the one to tell the SCSI layer that this
    /// session's nexus is gone: true once, at a logout or at the teardown,
    /// whichever comes first.
    pub fn take_nexus_drop(&self) -> bool {
        self.session_type == SessionType::Normal
            && !self
                .nexus_dropped
                .swap(true, std::sync::atomic::Ordering::SeqCst)
    }

    /// This session's share of the blocking pool: one permit per command
    /// running there. Why: the pool's threads are few and shared by every
    /// session and NBD; one session's slow commands must not take them all.
    pub fn pool_share(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.pool_share
    }

    /// (ExpCmdSN, MaxCmdSN) as of now.
    pub fn window_snapshot(&self) -> (u32, u32) {
        let window = self.window.lock();
        (window.exp_cmd_sn(), window.max_cmd_sn())
    }

    /// Registers a dispatched command. False when the initiator reused a tag that is still
    /// in use.
    pub fn add_task(&self, itt: u32, lun: Lun) -> Option<Arc<TaskControl>> {
        let mut tasks = self.tasks.lock();
        if tasks.contains_key(&itt) {
            return None;
        }
        let control = Arc::new(TaskControl::new(lun));
        tasks.insert(itt, control.clone());
        Some(control)
    }

    pub fn remove_task(&self, itt: u32) {
        self.tasks.lock().remove(&itt);
        self.tasks_changed.notify_waiters();
    }

    pub fn has_task(&self, itt: u32) -> bool {
        self.tasks.lock().contains_key(&itt)
    }

    pub fn task_count(&self) -> usize {
        self.tasks.lock().len()
    }

    /// Aborts the matching dispatched commands, those not already answered.
    pub fn abort_tasks(&self, matches: impl Fn(u32, &TaskControl) -> bool) -> AbortedTasks {
        let tasks = self.tasks.lock();
        let mut found = AbortedTasks::default();
        for (itt, control) in tasks.iter() {
            if matches(*itt, control) {
                if control.abort() {
                    found.aborted.push(*itt);
                } else {
                    found.answering.push(*itt);
                }
            }
        }
        found
    }

    /// Waits until none of `itts` is still registered (their executors have finished).
    pub async fn wait_for_tasks(&self, itts: &[u32]) {
        loop {
            let notified = self.tasks_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !itts.iter().any(|itt| self.has_task(*itt)) {
                return;
            }
            notified.await;
        }
    }

    /// Waits until every dispatched command has finished.
    pub async fn wait_for_all_tasks(&self) {
        loop {
            let notified = self.tasks_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.task_count() == 0 {
                return;
            }
            notified.await;
        }
    }

    pub fn request_close(&self) {
        self.close.send_replace(true);
    }

    pub fn close_requested(&self) -> watch::Receiver<bool> {
        self.close.subscribe()
    }

    /// The connection is gone (hang-up, error, close request); the nexus
    /// will be dropped once its commands have ended.
    pub fn mark_ending(&self) {
        self.ending.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn is_ending(&self) -> bool {
        self.ending.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn mark_closed(&self) {
        self.closed.send_replace(true);
    }

    pub async fn wait_closed(&self) {
        let mut closed = self.closed.subscribe();
        // An error means the sender is gone, which only happens with the session itself.
        let _ = closed.wait_for(|closed| *closed).await;
    }
}

/// `"<iqn>,i,0x<ISID as 12 hex digits>"` (RFC 7143 §13.? / SPC-4 iSCSI TransportID).
pub fn initiator_port(initiator_name: &str, isid: &[u8; 6]) -> String {
    let mut port = format!("{initiator_name},i,0x");
    for byte in isid {
        port.push_str(&format!("{byte:02x}"));
    }
    port
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("the target already has {0} sessions")]
    TooManySessions(usize),
}

/// All sessions of the target, across portals.
#[derive(Default)]
pub struct Registry {
    inner: Mutex<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    sessions: HashMap<SessionKey, Arc<Session>>,
    next_tsih: u16,
}

impl Registry {
    /// Allocates a TSIH not in use (never 0).
    pub fn allocate_tsih(&self) -> u16 {
        let mut inner = self.inner.lock();
        loop {
            inner.next_tsih = inner.next_tsih.wrapping_add(1);
            let candidate = inner.next_tsih;
            if candidate != 0 && inner.sessions.values().all(|s| s.tsih != candidate) {
                return candidate;
            }
        }
    }

    /// The session an initiator port already has (reinstatement when a new login reuses it).
    pub fn get(&self, key: &SessionKey) -> Option<Arc<Session>> {
        self.inner.lock().sessions.get(key).cloned()
    }

    /// Sessions whose connection has ended but whose teardown (the nexus loss
    /// in the SCSI layer) has not finished.
    pub fn ending(&self) -> Vec<Arc<Session>> {
        let inner = self.inner.lock();
        let ending: Vec<Arc<Session>> = inner
            .sessions
            .values()
            .filter(|s| s.is_ending())
            .cloned()
            .collect();
        assert!(ending.len() <= inner.sessions.len());
        ending
    }

    /// Inserts a new session; the caller has closed any session with the same key first.
    pub fn insert(&self, session: Arc<Session>, max_sessions: usize) -> Result<(), RegistryError> {
        let mut inner = self.inner.lock();
        let replacing = inner.sessions.contains_key(&session.key);
        if !replacing && inner.sessions.len() >= max_sessions {
            return Err(RegistryError::TooManySessions(inner.sessions.len()));
        }
        inner.sessions.insert(session.key.clone(), session);
        Ok(())
    }

    /// Removes the session if it is still the registered one for its key.
    pub fn remove(&self, session: &Session) {
        let mut inner = self.inner.lock();
        if inner
            .sessions
            .get(&session.key)
            .is_some_and(|s| s.tsih == session.tsih)
        {
            inner.sessions.remove(&session.key);
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_admits_next_holds_ahead_and_drops_outside() {
        let mut window = CommandWindow::new(10, 4);
        assert_eq!(window.max_cmd_sn(), 13);
        assert_eq!(window.admit(10), Admission::Next);
        assert_eq!(window.admit(12), Admission::Ahead { distance: 2 });
        assert_eq!(window.admit(14), Admission::Outside);
        assert_eq!(window.admit(9), Admission::Outside);
        window.advance(true);
        assert_eq!(window.exp_cmd_sn(), 11);
        // The slot stays taken until the answer: MaxCmdSN does not move.
        assert_eq!(window.max_cmd_sn(), 13);
        window.release();
        assert_eq!(window.max_cmd_sn(), 14);
    }

    #[test]
    fn full_window_admits_nothing_and_wraps_around_zero() {
        let mut window = CommandWindow::new(u32::MAX, 2);
        window.advance(true);
        window.advance(true);
        assert_eq!(window.exp_cmd_sn(), 1);
        assert_eq!(window.max_cmd_sn(), 0);
        assert_eq!(window.admit(1), Admission::Outside);
        window.release();
        assert_eq!(window.admit(1), Admission::Next);
        assert_eq!(window.admit(2), Admission::Outside);
    }

    #[test]
    fn non_scsi_commands_do_not_hold_slots() {
        let mut window = CommandWindow::new(1, 2);
        window.advance(false);
        window.advance(false);
        assert_eq!(window.max_cmd_sn(), 4);
    }

    #[test]
    fn initiator_port_uses_twelve_hex_digits() {
        assert_eq!(
            initiator_port("iqn.a", &[0x80, 0x12, 0x34, 0x56, 0x78, 0x9a]),
            "iqn.a,i,0x80123456789a"
        );
    }

    #[test]
    fn registry_limits_sessions_but_allows_replacement() {
        let registry = Registry::default();
        let key = |n: u8| SessionKey {
            initiator_name: "iqn.a".into(),
            isid: [n; 6],
        };
        let params = crate::login::SessionParams::rfc_defaults(8192);
        let make = |tsih, n| {
            Arc::new(Session::new(
                tsih,
                key(n),
                SessionType::Normal,
                params.clone(),
                1,
                8,
                4,
            ))
        };
        registry.insert(make(1, 1), 1).unwrap();
        assert_eq!(
            registry.insert(make(2, 2), 1),
            Err(RegistryError::TooManySessions(1))
        );
        registry.insert(make(3, 1), 1).unwrap();
        assert_eq!(registry.get(&key(1)).unwrap().tsih, 3);
        // Removing the replaced session leaves the new one in place.
        registry.remove(&make(1, 1));
        assert_eq!(registry.len(), 1);
        assert_ne!(registry.allocate_tsih(), 0);
    }

    /// An abort and a completion race for each command and exactly one wins:
    /// a command answered first is reported as answering (its response goes
    /// out, the abort does not claim it); one aborted first sends nothing.
    #[test]
    fn an_abort_and_an_answer_never_both_win() {
        let params = crate::login::SessionParams::rfc_defaults(8192);
        let key = SessionKey {
            initiator_name: "iqn.a".into(),
            isid: [1; 6],
        };
        let session = Session::new(1, key, SessionType::Normal, params, 1, 8, 4);
        let answered = session.add_task(10, Lun::single_level(0)).unwrap();
        let running = session.add_task(11, Lun::single_level(0)).unwrap();
        assert!(answered.answer());

        let found = session.abort_tasks(|_, _| true);

        let mut aborted = found.aborted.clone();
        aborted.sort_unstable();
        assert_eq!((aborted, found.answering.clone()), (vec![11], vec![10]));
        assert!(running.is_aborted() && !answered.is_aborted());
        assert!(!running.answer(), "an aborted command sends nothing");
        // A second abort finds the aborted one aborted still.
        let again = session.abort_tasks(|itt, _| itt == 11);
        assert_eq!(again.aborted, vec![11]);
        let mut all = found.all();
        all.sort_unstable();
        assert_eq!(all, vec![10, 11]);
    }
}
