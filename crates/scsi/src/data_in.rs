//! Data-In buffers, recycled between READs.
//!
//! Why: a READ's buffer is as long as its transfer (1 MiB for a sequential
//! host), and a fresh zeroed allocation of that size cost 6% of the target's
//! CPU in 1 MiB reads (perf: the allocator's memset), for bytes that the
//! storage overwrites at once. A transport that has sent a READ's Data-In gives
//! the buffer back ([`crate::target::ScsiTarget::recycle_data_in`]) and the
//! next READ fills it again.
//!
//! A recycled buffer still holds the bytes of an earlier read, perhaps of
//! another volume and another initiator. That is safe only because a backend's
//! `read` writes every byte of the buffer it is given or fails (then the buffer
//! is dropped, never sent): [`crate::backend::LogicalUnit::read`] says so, and
//! the engine's and the reference backend's tests read into buffers full of
//! garbage to hold them to it.

use parking_lot::Mutex;

/// Most buffers kept for reuse: one per READ in flight at a few queue depths.
const MAX_KEPT_BUFFERS: usize = 32;
/// Smaller buffers are not kept: allocating and zeroing them costs little.
const MIN_KEPT_CAPACITY_BYTES: usize = 64 * 1024;
/// Larger buffers are not kept, so the free list holds at most
/// `MAX_KEPT_BUFFERS × MAX_KEPT_CAPACITY_BYTES` (128 MiB) of memory.
const MAX_KEPT_CAPACITY_BYTES: usize = 4 << 20;

/// A bounded free list of Data-In buffers.
#[derive(Default)]
pub(crate) struct DataInBuffers {
    kept: Mutex<Vec<Vec<u8>>>,
}

impl DataInBuffers {
    /// A buffer of `len_bytes` whose contents are unspecified (an earlier
    /// read's): the caller must overwrite every byte before it is sent.
    pub(crate) fn take(&self, len_bytes: usize) -> Vec<u8> {
        if len_bytes < MIN_KEPT_CAPACITY_BYTES {
            return vec![0u8; len_bytes];
        }
        let kept = {
            let mut kept = self.kept.lock();
            let fitting = kept.iter().rposition(|buf| buf.capacity() >= len_bytes);
            fitting.map(|at| kept.swap_remove(at))
        };
        match kept {
            Some(mut buf) => {
                // Only bytes beyond the buffer's last length are zeroed.
                buf.resize(len_bytes, 0);
                buf
            }
            None => vec![0u8; len_bytes],
        }
    }

    /// Keeps `buf` for a later [`DataInBuffers::take`], if it is worth keeping
    /// and there is room.
    pub(crate) fn give_back(&self, buf: Vec<u8>) {
        let capacity = buf.capacity();
        if !(MIN_KEPT_CAPACITY_BYTES..=MAX_KEPT_CAPACITY_BYTES).contains(&capacity) {
            return;
        }
        let mut kept = self.kept.lock();
        if kept.len() < MAX_KEPT_BUFFERS {
            kept.push(buf);
        }
        assert!(kept.len() <= MAX_KEPT_BUFFERS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_back_buffer_is_reused_and_the_list_stays_bounded() {
        let buffers = DataInBuffers::default();
        let mut first = buffers.take(1 << 20);
        assert_eq!(first.len(), 1 << 20);
        first[0] = 0xa5;
        let first_ptr = first.as_ptr();
        buffers.give_back(first);
        let again = buffers.take(512 * 1024);
        assert_eq!(again.len(), 512 * 1024);
        assert_eq!(again.as_ptr(), first_ptr, "the kept buffer is reused");
        assert_eq!(again[0], 0xa5, "its bytes are not cleared");
        let longer = {
            buffers.give_back(again);
            buffers.take(1 << 20)
        };
        assert_eq!(longer.len(), 1 << 20);
        assert!(longer[512 * 1024..].iter().all(|&b| b == 0));

        for _ in 0..2 * MAX_KEPT_BUFFERS {
            buffers.give_back(vec![0u8; 1 << 20]);
        }
        assert_eq!(buffers.kept.lock().len(), MAX_KEPT_BUFFERS);

        let fresh = DataInBuffers::default();
        fresh.give_back(vec![0u8; 8 << 20]);
        fresh.give_back(vec![0u8; 4096]);
        assert!(fresh.kept.lock().is_empty(), "too large or too small");
        assert_eq!(buffers.take(100).len(), 100);
    }
}
