//! The committer's state: what the write path shares between the host
//! writers that queue for group commit, the batch leader that commits them and
//! the durable commits (host FLUSH, the background one). Its methods live with
//! the steps that use it: here the transactions under the writer mutex,
//! `group_commit` for queued host writes, `durable` for flushes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::write::transaction::{Tables, TxState, WriterState};
use crate::{Engine, EngineError, Result};

/// The write side of the metadata: the writer state behind its mutex, the
/// queue of host writes waiting for group commit, the writes acknowledged but
/// not yet committed, and the locks and counters of durable commits.
pub(crate) struct Committer {
    pub writer: Mutex<WriterState>,
    /// The writer state's dedup hints: writes look here before compressing.
    pub dedup_hints: Arc<crate::dedup::index_hints::DedupHints>,
    pub write_queue: crate::write::group_commit::WriteQueue,
    /// Grains of the write batches' open transaction, for readers.
    pub pending: crate::write::uncommitted::PendingWrites,
    /// Why the array stopped taking I/O, if it did: a write batch's shared
    /// transaction failed after some of its writes were acknowledged, and only
    /// a restart (back to the last durable commit) makes the state whole.
    pub fenced: Mutex<Option<String>>,
    pub flush_lock: Mutex<()>,
    /// Held while freed space is cut out of the segment files, after the durable
    /// commit that freed it: later commits (and host flushes) need not wait for
    /// the files, but callers that free space wait for each other's cuts.
    pub files_lock: Mutex<()>,
    /// Freed page ranges waiting to be punched (see `durable`).
    pub deferred_holes: Mutex<crate::write::durable::DeferredHoles>,
    pub last_durable: Mutex<std::time::Instant>,
    pub commit_count: AtomicU64,
    pub durable_count: AtomicU64,
}

impl Committer {
    /// Stops the array taking I/O: a write batch's shared transaction failed
    /// after some of its writes were acknowledged (only a restart, back to the
    /// last durable commit, makes the state whole).
    pub(crate) fn fence(&self, error: &EngineError) {
        let mut fenced = self.fenced.lock();
        if fenced.is_none() {
            tracing::error!(
                "a write could not be kept ({error}); the array takes no more I/O until it is \
                 restarted, which recovers it to the last flush"
            );
            *fenced = Some(error.to_string());
        }
        self.pending.clear();
    }

    /// Refuses I/O once the array is fenced.
    pub(crate) fn check_fence(&self) -> Result<()> {
        match &*self.fenced.lock() {
            Some(why) => Err(EngineError::Fenced(why.clone())),
            None => Ok(()),
        }
    }
}

/// The transactions of the write path, under the writer mutex.
impl Engine {
    /// Runs one write transaction under the writer mutex (which the caller holds).
    pub(crate) fn transact<T>(
        &self,
        ws: &mut WriterState,
        foreground: bool,
        f: impl FnOnce(&mut TxState, &mut Tables, &WriterState) -> Result<T>,
    ) -> Result<T> {
        self.commit_pending(ws)?;
        let (value, records, appended_bytes) =
            crate::write::transaction::run(&self.db, self.store.as_ref(), ws, f)?;
        self.after_commit(ws, foreground, records, appended_bytes);
        Ok(value)
    }

    /// A write batch (`foreground`) or a reclaim step in the batches' shared
    /// open transaction (see [`pending`]), which the caller must make sure
    /// cannot run out of space; `grains` is what it adds to the transaction's
    /// size. A failure fences the array: writes acknowledged in the
    /// transaction are gone. Past [`pending::MAX_OPEN_GRAINS`] the transaction
    /// is committed.
    pub(crate) fn transact_deferred<T>(
        &self,
        ws: &mut WriterState,
        grains: u64,
        foreground: bool,
        f: impl FnOnce(&mut TxState, &mut Tables, &WriterState) -> Result<T>,
    ) -> Result<T> {
        self.committer.check_fence()?;
        match crate::write::transaction::run_deferred(&self.db, self.store.as_ref(), ws, grains, f)
        {
            Ok((value, records, appended_bytes)) => {
                self.after_commit(ws, foreground, records, appended_bytes);
                Ok(value)
            }
            Err(error) => {
                self.committer.fence(&error);
                Err(error)
            }
        }
    }

    /// Commits the shared open transaction once it has taken
    /// [`pending::MAX_OPEN_GRAINS`] grains.
    pub(crate) fn commit_pending_if_full(&self, ws: &mut WriterState) -> Result<()> {
        if ws
            .open_txn
            .as_ref()
            .is_some_and(|open| open.grains >= crate::write::uncommitted::MAX_OPEN_GRAINS)
        {
            self.commit_pending(ws)?;
        }
        Ok(())
    }

    fn after_commit(&self, ws: &WriterState, foreground: bool, records: u64, appended_bytes: u64) {
        self.stats
            .media_written_bytes
            .fetch_add(appended_bytes, Ordering::Relaxed);
        self.stats
            .reduction_backlog_bytes
            .store(ws.reduction_backlog_bytes, Ordering::Relaxed);
        self.committer.commit_count.fetch_add(1, Ordering::SeqCst);
        self.space_watch.free_bytes_hint.store(
            ws.capacity_bytes.saturating_sub(ws.used_bytes()),
            Ordering::Relaxed,
        );
        self.check_soft_threshold(ws.used_bytes());
        if foreground {
            self.stats
                .foreground_records_written
                .fetch_add(records, Ordering::Relaxed);
        }
    }

    /// Commits the write batches' open transaction, if any, and forgets its
    /// pending grains (readers find them committed from now on).
    pub(crate) fn commit_pending(&self, ws: &mut WriterState) -> Result<()> {
        self.committer.check_fence()?;
        if ws.open_txn.is_none() {
            return Ok(());
        }
        if let Err(error) = crate::write::transaction::commit_open(&self.db, ws) {
            self.committer.fence(&error);
            return Err(error);
        }
        self.committer.pending.clear();
        self.stats.pending_commits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// [`Engine::commit_pending`] for callers about to read metadata without the
    /// writer mutex.
    pub(crate) fn commit_pending_now(&self) -> Result<()> {
        self.commit_pending(&mut self.committer.writer.lock())
    }
}
