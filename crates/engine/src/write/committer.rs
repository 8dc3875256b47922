//! The committer's state: what the write path shares between the host
//! writers that queue for group commit, the batch leader that commits them and
//! the durable commits (host FLUSH, the background one). Its methods live with
//! the steps that use it (`group_commit`, `transaction`, the crate root's
//! flush and durable commit).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::write::transaction::WriterState;
use crate::{EngineError, Result};

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
