//! The background worker's state, and the host activity it yields to.
//! The loop itself is `reclaimer::start`; what each step does is in
//! `reclaimer` and `cleaner`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

/// The background worker: its thread and wake-up, where its round over the
/// containers starts, how long until one has tokens again, and the one-cleaner
/// lock.
pub(crate) struct Scheduler {
    /// Round-robin start of the reclaim scheduler over containers.
    pub reclaim_cursor: AtomicU64,
    /// How long until some container with a backlog has tokens again.
    pub reclaim_token_wait: Mutex<Option<std::time::Duration>>,
    pub reclaim_wake: (Mutex<bool>, Condvar),
    pub shutdown: AtomicBool,
    pub reclaimer: Mutex<Option<JoinHandle<()>>>,
    /// One cleaner at a time, background or a writer short of room: the
    /// cleaner's reserve holds one victim's live records (see `clean`).
    pub cleaner: Mutex<()>,
}

/// Host I/O as background work sees it, to yield to it.
pub(crate) struct HostActivity {
    /// Host I/O requests in progress: background work yields while there are any.
    pub foreground_inflight: AtomicU64,
    /// Host I/O requests begun since start: background work backs off while it
    /// moves.
    pub foreground_ops: AtomicU64,
    /// Host ops count when background work last saw it change, and when: big
    /// background steps wait until hosts have been quiet for a while.
    pub foreground_seen: Mutex<(u64, std::time::Instant)>,
}

impl Scheduler {
    /// Wakes the background worker to look for work now.
    pub(crate) fn wake(&self) {
        let (flag, condvar) = &self.reclaim_wake;
        *flag.lock() = true;
        condvar.notify_one();
    }

    /// Where the next reclaim round over the containers starts: each round
    /// one further on, so no container waits behind another with work.
    pub(crate) fn next_round_start(&self) -> usize {
        self.reclaim_cursor.fetch_add(1, Ordering::Relaxed) as usize
    }
}

impl HostActivity {
    /// Counts a host request from now until the guard is dropped.
    pub(crate) fn begin(&self) -> HostRequest<'_> {
        self.foreground_inflight.fetch_add(1, Ordering::SeqCst);
        self.foreground_ops.fetch_add(1, Ordering::Relaxed);
        HostRequest { hosts: self }
    }

    /// Host requests begun since start.
    pub(crate) fn ops(&self) -> u64 {
        self.foreground_ops.load(Ordering::Relaxed)
    }

    /// Host requests in progress.
    pub(crate) fn in_flight(&self) -> u64 {
        self.foreground_inflight.load(Ordering::SeqCst)
    }

    /// Hosts began requests since `ops_before` (a value of [`Self::ops`]) or
    /// have some in progress.
    pub(crate) fn busy_since(&self, ops_before: u64) -> bool {
        self.ops() != ops_before || self.in_flight() > 0
    }

    /// No host request in progress, and none begun for `quiet` (real time:
    /// it is about the hosts' latency, not about rates).
    pub(crate) fn idle(&self, quiet: std::time::Duration) -> bool {
        let ops = self.ops();
        let mut seen = self.foreground_seen.lock();
        let now = std::time::Instant::now();
        if seen.0 != ops {
            *seen = (ops, now);
        }
        self.in_flight() == 0 && now.duration_since(seen.1) >= quiet
    }
}

/// A host request in progress (see [`HostActivity::begin`]).
pub(crate) struct HostRequest<'a> {
    hosts: &'a HostActivity,
}

impl Drop for HostRequest<'_> {
    fn drop(&mut self) {
        self.hosts
            .foreground_inflight
            .fetch_sub(1, Ordering::SeqCst);
    }
}
