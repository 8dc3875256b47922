//! Named moments between two steps of the engine where another thread's work
//! could fall, and where a test can make it fall.
//!
//! Why: the engine's worst bugs were windows, a value read under one lock and
//! used under another, with something else changing it in between (the crash
//! torture found one; reviews found more). Such a window is hit by chance in a
//! soak, seldom and not twice alike. A test that runs the other work exactly
//! there fails every time on the old code and says which window it guards.
//!
//! A hook is set by the test thread for itself (thread-local) and runs once,
//! when that thread next passes the point. Outside tests [`at`] is empty.

/// The moments a test can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Point {
    /// A history sweep step, before it takes the writer mutex.
    SweepBeforeWriterLock,
    /// A copy of a range, after its size checks and before it pins the source.
    CopyBeforePin,
    /// `volume_by_id`, as it looks the volume up.
    VolumeLookup,
    /// A metadata commit, once its transaction committed and before readers
    /// are told.
    KvCommitted,
    /// A cleaning, after its victim was picked and before its records are read.
    CleanBeforeRead,
    /// A segment's removal, once its handle is forgotten and before its file
    /// goes.
    SegmentRemoveBeforeUnlink,
    /// A segment sync, which a test can make fail (see [`fails`]).
    SegmentSync,
    /// A revert to a snapshot, after its resize and before its record.
    RevertBeforeRecord,
    /// A metadata commit's write of segment tails, which a test can make
    /// fail (see [`fails`]).
    WriteBack,
    /// A write batch's commit, under the writer mutex, before its transaction.
    BatchCommit,
    /// A durable commit, visible and the writer mutex released, before the
    /// segment bytes it names and the commit itself are synced.
    DurableBeforeSync,
}

/// Runs the hook set for `point` on this thread, if any (once).
#[inline]
pub(crate) fn at(point: Point) {
    #[cfg(test)]
    hooks::run(point);
    #[cfg(not(test))]
    let _ = point;
}

/// Whether a failure a test armed for `point` on this thread is due now
/// (see [`fail_after`]). Outside tests, never.
#[inline]
pub(crate) fn fails(point: Point) -> bool {
    #[cfg(test)]
    return hooks::fails(point);
    #[cfg(not(test))]
    {
        let _ = point;
        false
    }
}

#[cfg(test)]
pub(crate) use hooks::{fail_after, set};

#[cfg(test)]
mod hooks {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use super::Point;

    type Hook = Box<dyn FnOnce()>;

    thread_local! {
        static HOOKS: RefCell<HashMap<Point, Hook>> = RefCell::new(HashMap::new());
        /// Points armed to fail, with the passes still to go before.
        static FAILURES: RefCell<HashMap<Point, u32>> = RefCell::new(HashMap::new());
    }

    /// Makes `point` fail once on this thread, after `passes` passes succeed.
    pub(crate) fn fail_after(point: Point, passes: u32) {
        FAILURES.with(|failures| failures.borrow_mut().insert(point, passes));
    }

    pub(super) fn fails(point: Point) -> bool {
        FAILURES.with(|failures| {
            let mut failures = failures.borrow_mut();
            match failures.get_mut(&point) {
                Some(0) => {
                    failures.remove(&point);
                    true
                }
                Some(passes) => {
                    *passes -= 1;
                    false
                }
                None => false,
            }
        })
    }

    /// Makes `hook` run when this thread next reaches `point`.
    pub(crate) fn set(point: Point, hook: impl FnOnce() + 'static) {
        let replaced = HOOKS.with(|hooks| hooks.borrow_mut().insert(point, Box::new(hook)));
        assert!(replaced.is_none(), "one hook at a time at {point:?}");
    }

    pub(super) fn run(point: Point) {
        // Taken out before it runs: the hook may pass the point again.
        let hook = HOOKS.with(|hooks| hooks.borrow_mut().remove(&point));
        if let Some(hook) = hook {
            hook();
        }
    }
}
