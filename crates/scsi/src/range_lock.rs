//! Exclusive locks on block ranges of one logical unit.
//!
//! Why: COMPARE AND WRITE must read, compare and write with no other write landing in
//! between (VMware's ATS heartbeat depends on it), while writes to other ranges proceed.
//! Every command that changes data takes the range it changes here, so a CAW excludes
//! exactly the writes that overlap it. Reads take no lock.

use parking_lot::{Condvar, Mutex};

/// A half-open byte range `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    start_bytes: u64,
    end_bytes: u64,
    ticket: u64,
}

#[derive(Default)]
pub(crate) struct RangeLock {
    held: Mutex<(Vec<Held>, u64)>,
    released: Condvar,
}

/// Holds a range until dropped.
pub(crate) struct RangeGuard<'a> {
    lock: &'a RangeLock,
    ticket: u64,
}

impl RangeLock {
    /// Blocks until `[offset_bytes, offset_bytes + len_bytes)` overlaps no held range.
    pub(crate) fn lock(&self, offset_bytes: u64, len_bytes: u64) -> RangeGuard<'_> {
        let start_bytes = offset_bytes;
        let end_bytes = offset_bytes.saturating_add(len_bytes.max(1));
        let mut state = self.held.lock();
        while state
            .0
            .iter()
            .any(|h| h.start_bytes < end_bytes && start_bytes < h.end_bytes)
        {
            self.released.wait(&mut state);
        }
        state.1 += 1;
        let ticket = state.1;
        state.0.push(Held {
            start_bytes,
            end_bytes,
            ticket,
        });
        RangeGuard { lock: self, ticket }
    }
}

impl Drop for RangeGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.lock.held.lock();
        let before = state.0.len();
        state.0.retain(|h| h.ticket != self.ticket);
        assert_eq!(state.0.len() + 1, before, "range guard released twice");
        drop(state);
        self.lock.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn disjoint_ranges_do_not_block() {
        let lock = RangeLock::default();
        let _a = lock.lock(0, 512);
        let _b = lock.lock(512, 512);
    }

    #[test]
    fn overlapping_range_waits_for_release() {
        let lock = Arc::new(RangeLock::default());
        let entered = Arc::new(AtomicBool::new(false));
        let guard = lock.lock(0, 4096);
        let thread = {
            let lock = Arc::clone(&lock);
            let entered = Arc::clone(&entered);
            std::thread::spawn(move || {
                let _g = lock.lock(1024, 512);
                entered.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!entered.load(Ordering::SeqCst));
        drop(guard);
        thread.join().unwrap();
        assert!(entered.load(Ordering::SeqCst));
    }
}
