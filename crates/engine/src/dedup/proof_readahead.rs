//! Segment bytes read ahead while a transaction proves dedup hits.
//!
//! A dedup hit is proven by comparing the stored payload with the new grain,
//! and a payload not yet proven is read from its segment: one `pread` per
//! grain. When a write repeats data stored in order (a volume rewritten with
//! what it holds, an image copied again, a template deployed by a host-side
//! copy), the records it hits lie one after another, and one read of the run
//! ahead serves the next few dozen proofs. Random hits do not read ahead: a
//! window is read only when a proof starts just after the previous one.

use crate::segment::log::{SegmentId, SegmentStore};

/// Bytes read ahead at once: about 30 records of 4 KiB grains compressed
/// 2:1, small enough that a window read in vain costs little.
pub const READ_AHEAD_BYTES: u64 = 64 * 1024;

/// The gap allowed between one proof's record and the next for the second
/// to count as following the first (other records may lie between them:
/// blocks of the same write that were not duplicates).
const FOLLOW_GAP_BYTES: u64 = 16 * 1024;

/// The last window read, and where the last proof's payload ended.
#[derive(Default)]
pub struct ReadAhead {
    window: Option<Window>,
    last_end: Option<(SegmentId, u64)>,
}

struct Window {
    segment: SegmentId,
    start_bytes: u64,
    bytes: Vec<u8>,
}

impl ReadAhead {
    /// The payload at `[at, at + len)` of `segment`: from the window when it
    /// holds it, else read — with the window refilled from `at` (up to
    /// `limit_bytes`, where the segment's bytes in the file end) when the
    /// payload follows the previous one, else into `buf` alone. `None` if the
    /// read fails.
    pub fn payload<'a>(
        &'a mut self,
        store: &dyn SegmentStore,
        segment: SegmentId,
        (at, len): (u64, usize),
        limit_bytes: u64,
        buf: &'a mut [u8],
    ) -> Option<&'a [u8]> {
        let end = at + len as u64;
        let follows = self.last_end.is_some_and(|(last, last_end)| {
            last == segment && at >= last_end && at - last_end <= FOLLOW_GAP_BYTES
        });
        self.last_end = Some((segment, end));
        let held = self
            .window
            .as_ref()
            .is_some_and(|w| w.holds(segment, at, end))
            || (follows && limit_bytes >= end && self.refill(store, segment, at, limit_bytes));
        if !held {
            let stored = &mut buf[..len];
            store.read_at(segment, at, stored).ok()?;
            return Some(stored);
        }
        let window = self.window.as_ref().expect("the window holds the payload");
        assert!(window.holds(segment, at, end));
        let from = (at - window.start_bytes) as usize;
        Some(&window.bytes[from..from + len])
    }
}

impl ReadAhead {
    /// Reads the window from `at` up to `limit_bytes` (at most
    /// [`READ_AHEAD_BYTES`]); whether it could be read. A window that cannot
    /// (a shorter file than the accounting says, say) leaves the payload to
    /// be read alone.
    fn refill(
        &mut self,
        store: &dyn SegmentStore,
        segment: SegmentId,
        at: u64,
        limit_bytes: u64,
    ) -> bool {
        let window_end = (at + READ_AHEAD_BYTES).min(limit_bytes);
        let mut bytes = self.window.take().map(|w| w.bytes).unwrap_or_default();
        bytes.resize((window_end - at) as usize, 0);
        if store.read_at(segment, at, &mut bytes).is_err() {
            return false;
        }
        self.window = Some(Window {
            segment,
            start_bytes: at,
            bytes,
        });
        true
    }
}

impl Window {
    fn holds(&self, segment: SegmentId, at: u64, end: u64) -> bool {
        self.segment == segment
            && at >= self.start_bytes
            && end <= self.start_bytes + self.bytes.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A segment of known bytes that counts its reads.
    struct Counting {
        bytes: Vec<u8>,
        reads: AtomicUsize,
    }

    impl SegmentStore for Counting {
        fn write_at(&self, _: SegmentId, _: u64, _: &[u8]) -> std::io::Result<()> {
            unreachable!("read only")
        }
        fn read_at(&self, _: SegmentId, offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let from = offset_bytes as usize;
            let source = self.bytes.get(from..from + buf.len()).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "past the end")
            })?;
            buf.copy_from_slice(source);
            Ok(())
        }
        fn sync(&self, _: SegmentId) -> std::io::Result<()> {
            Ok(())
        }
        fn truncate(&self, _: SegmentId, _: u64) -> std::io::Result<()> {
            Ok(())
        }
        fn remove(&self, _: SegmentId) -> std::io::Result<()> {
            Ok(())
        }
        fn punch(&self, _: SegmentId, _: u64, _: u64) -> std::io::Result<()> {
            Ok(())
        }
        fn list(&self) -> std::io::Result<Vec<(SegmentId, u64)>> {
            Ok(Vec::new())
        }
        fn write_back(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn store(len: usize) -> Counting {
        Counting {
            bytes: (0..len).map(|i| (i * 7 % 251) as u8).collect(),
            reads: AtomicUsize::new(0),
        }
    }

    /// Reads `len` bytes at `at` of segment 1 through `ahead` and checks them.
    fn check(ahead: &mut ReadAhead, store: &Counting, at: u64, len: usize) {
        let mut buf = [0u8; 4096];
        let limit = store.bytes.len() as u64;
        let got = ahead
            .payload(store, SegmentId::new(1), (at, len), limit, &mut buf)
            .unwrap();
        assert!(
            got == &store.bytes[at as usize..at as usize + len],
            "{len} bytes at {at}"
        );
    }

    #[test]
    fn payloads_in_order_are_read_a_window_at_a_time_and_random_ones_alone() {
        let store = store(1 << 20);
        let mut ahead = ReadAhead::default();
        let mut buf = [0u8; 4096];
        // 100 records of 2000 bytes each, one after another (24-byte headers
        // between them).
        let record_bytes = 2024u64;
        for i in 0..100u64 {
            check(&mut ahead, &store, 4096 + i * record_bytes, 2000);
        }
        // The first alone, then a window per ~32 records.
        let reads = store.reads.load(Ordering::SeqCst);
        let windows = (99 * record_bytes).div_ceil(READ_AHEAD_BYTES - record_bytes) as usize;
        assert!(
            reads <= 1 + windows + 1,
            "{reads} reads for 100 records in order"
        );

        // Far apart: each read alone.
        store.reads.store(0, Ordering::SeqCst);
        for at in [900_000u64, 10_000, 500_000, 30_000] {
            check(&mut ahead, &store, at, 3000);
        }
        assert_eq!(store.reads.load(Ordering::SeqCst), 4);

        // A window stops at the limit (the rest of the segment is not in the
        // file yet), and a read past the segment fails as None.
        let limit = 40_000u64;
        ahead
            .payload(&store, SegmentId::new(2), (30_000, 1000), limit, &mut buf)
            .unwrap();
        let got = ahead
            .payload(&store, SegmentId::new(2), (31_000, 1000), limit, &mut buf)
            .unwrap();
        assert_eq!(got, &store.bytes[31_000..32_000]);
        assert_eq!(
            ahead.window.as_ref().unwrap().bytes.len(),
            (limit - 31_000) as usize
        );
        let near_end = store.bytes.len() as u64 - 100;
        assert!(ahead
            .payload(
                &store,
                SegmentId::new(3),
                (near_end, 1000),
                u64::MAX,
                &mut buf
            )
            .is_none());
    }
}
