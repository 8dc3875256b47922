//! Group commit of the vVol store: changes are committed under the writer
//! mutex without a sync, and made durable after it is released, by one sync
//! for every change committed before it.
//!
//! Why: every vVol change (a bind, an unbind, a create) is one store commit,
//! and a durable commit is an fsync (or, on RADOS, a round trip to every
//! stripe it wrote). Taken under the writer mutex, a host's 16 power-offs in
//! flight waited for 16 fsyncs one after the other; now they wait for about
//! two: the one in progress when they arrive and the one that covers them.
//!
//! What holds: an operation answers only once its change is durable, and its
//! events are polled only then ([`crate::events`]). A change is in the
//! catalog from its commit on, so a reader may see it up to one sync before it
//! is durable; a crash in that window loses it, as it loses any change not yet
//! answered. When a sync fails, the service refuses every change after it
//! (its memory is ahead of its store); a restart recovers the last durable
//! commit and reconciles the engine with it ([`crate::store`]).
//!
//! Which change an operation waits for is kept per thread: the service's
//! calls are synchronous, so the commit and the wait after the writer is
//! released happen on one thread, in one call.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::fault::VvolFault;

thread_local! {
    /// The newest change this thread committed and has not yet waited for.
    static UNSYNCED: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Numbers the store's commits and makes them durable in groups.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    /// The newest change committed (without its sync); written under the
    /// service's writer mutex, in commit order.
    committed: AtomicU64,
    /// Every change up to this one is durable.
    durable: AtomicU64,
    /// Held by the one thread syncing; the others wait behind it and most
    /// find their change made durable by it.
    syncing: Mutex<()>,
    /// A sync failed: nothing more is committed.
    failed: AtomicBool,
}

impl GroupCommit {
    /// Refuses a change once a sync has failed.
    pub(crate) fn check(&self) -> Result<(), VvolFault> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(VvolFault::StorageFault(
                "vVol store: an earlier sync failed; restart the daemon to recover".into(),
            ));
        }
        Ok(())
    }

    /// Numbers a change just committed without its sync (under the writer
    /// mutex) and notes it as this thread's to wait for.
    pub(crate) fn committed(&self) -> u64 {
        let change = self.committed.fetch_add(1, Ordering::SeqCst) + 1;
        UNSYNCED.with(|c| c.set(Some(change)));
        change
    }

    /// Every change up to this one is durable.
    pub(crate) fn durable_through(&self) -> u64 {
        self.durable.load(Ordering::SeqCst)
    }

    /// Waits until the change this thread committed last is durable, running
    /// `sync` (the store's) if no other thread's sync has covered it (call with
    /// the writer mutex released).
    pub(crate) fn wait_for_own(
        &self,
        sync: impl FnOnce() -> Result<(), VvolFault>,
    ) -> Result<(), VvolFault> {
        let Some(change) = UNSYNCED.with(Cell::take) else {
            return Ok(());
        };
        let _syncing = self.syncing.lock();
        self.check()?;
        if self.durable.load(Ordering::SeqCst) >= change {
            return Ok(());
        }
        // Every change numbered up to `through` finished its commit before
        // it was numbered, so the sync that starts now covers it.
        let through = self.committed.load(Ordering::SeqCst);
        assert!(through >= change);
        if let Err(fault) = sync() {
            self.failed.store(true, Ordering::SeqCst);
            return Err(fault);
        }
        self.durable.store(through, Ordering::SeqCst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Barrier;

    use super::*;

    #[test]
    fn one_sync_covers_every_change_committed_before_it() {
        let group = GroupCommit::default();
        let syncs = AtomicUsize::new(0);
        let both_committed = Barrier::new(2);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    group.committed();
                    both_committed.wait();
                    group
                        .wait_for_own(|| {
                            syncs.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        })
                        .unwrap();
                });
            }
        });
        assert_eq!(syncs.load(Ordering::SeqCst), 1);
        assert_eq!(group.durable_through(), 2);
    }

    #[test]
    fn a_change_after_a_sync_gets_a_sync_of_its_own_and_a_thread_with_none_waits_for_none() {
        let group = GroupCommit::default();
        let syncs = AtomicUsize::new(0);
        let sync = || {
            syncs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        group.wait_for_own(sync).unwrap();
        assert_eq!(syncs.load(Ordering::SeqCst), 0);
        group.committed();
        group.wait_for_own(sync).unwrap();
        group.committed();
        assert_eq!(group.durable_through(), 1);
        group.wait_for_own(sync).unwrap();
        assert_eq!(syncs.load(Ordering::SeqCst), 2);
        assert_eq!(group.durable_through(), 2);
    }

    #[test]
    fn after_a_failed_sync_nothing_more_is_durable_or_committed() {
        let group = GroupCommit::default();
        group.committed();
        let failed = group.wait_for_own(|| Err(VvolFault::StorageFault("disk gone".into())));
        assert!(matches!(failed, Err(VvolFault::StorageFault(_))));
        assert_eq!(group.durable_through(), 0);
        assert!(matches!(group.check(), Err(VvolFault::StorageFault(_))));
        group.committed();
        let again = group.wait_for_own(|| panic!("no sync after a failed one"));
        assert!(matches!(again, Err(VvolFault::StorageFault(_))));
    }
}
