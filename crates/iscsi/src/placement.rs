//! The buffers of writes gathering Data-Out, shared by a connection's
//! processing loop with its PDU reader, which receives each Data-Out's data
//! straight into its write's buffer (see [`crate::pdu::Placement`]).
//!
//! Who holds a buffer when: it lives here, under its write's initiator task
//! tag, from the write's first PDU until the write is ready or dropped. The
//! reader takes it out only for the time it reads one data segment into it,
//! and nothing that touches a gathering write runs meanwhile (the loop
//! processes a PDU only once the read of that PDU is over, and polls the next
//! read only after; what else it does while a read waits, pings and shutdown,
//! leaves writes alone), so the loop always finds its buffers here. A write
//! dropped while the reader holds its buffer (the connection ending) is simply
//! not given it back: each buffer carries the token of the write it belongs
//! to, so a later write under the same tag never receives an earlier one's
//! buffer.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::pdu::Placement;

/// One gathering write's buffer, and how far it may grow.
struct Entry {
    token: u64,
    /// Expected data transfer length: no placement past it.
    limit_bytes: usize,
    /// `None` while the reader holds it.
    buffer: Option<Vec<u8>>,
}

/// The buffers of a connection's gathering writes, by initiator task tag.
#[derive(Default)]
pub struct GatherBuffers {
    entries: Mutex<HashMap<u32, Entry>>,
    next_token: std::sync::atomic::AtomicU64,
}

impl Placement for GatherBuffers {
    fn take(&self, itt: u32, offset_bytes: u32, len_bytes: u32) -> Option<(u64, Vec<u8>)> {
        let mut entries = self.entries.lock();
        let entry = entries.get_mut(&itt)?;
        let buffer = entry.buffer.as_ref()?;
        let end_bytes = u64::from(offset_bytes) + u64::from(len_bytes);
        // Only the next bytes in order, within the write: anything else goes
        // the long way, where the loop checks it and answers for it.
        if buffer.len() as u64 != u64::from(offset_bytes) || end_bytes > entry.limit_bytes as u64 {
            return None;
        }
        assert!(buffer.capacity() >= entry.limit_bytes);
        Some((entry.token, entry.buffer.take().expect("checked above")))
    }

    fn give_back(&self, itt: u32, token: u64, buffer: Vec<u8>) {
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.get_mut(&itt).filter(|entry| entry.token == token) {
            assert!(entry.buffer.is_none(), "a buffer is handed out once");
            entry.buffer = Some(buffer);
        }
    }
}

/// A gathering write's buffer, kept in its connection's [`GatherBuffers`];
/// taken out with [`LentBuffer::take`] when the write is ready, and dropped
/// from there with the write if it never is (an entry under its tag with
/// another token, or none, is not its own: taken, or a later write's).
pub struct LentBuffer {
    buffers: Arc<GatherBuffers>,
    itt: u32,
    token: u64,
}

impl LentBuffer {
    /// An empty buffer with room for `limit_bytes`, for the write `itt`
    /// (whose previous buffer, if it had one, is gone).
    pub fn new(buffers: &Arc<GatherBuffers>, itt: u32, limit_bytes: usize) -> LentBuffer {
        let token = buffers
            .next_token
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let entry = Entry {
            token,
            limit_bytes,
            buffer: Some(Vec::with_capacity(limit_bytes)),
        };
        let previous = buffers.entries.lock().insert(itt, entry);
        assert!(previous.is_none(), "one gathering write per task tag");
        LentBuffer {
            buffers: buffers.clone(),
            itt,
            token,
        }
    }

    /// Runs `f` on the buffer.
    pub fn with<T>(&self, f: impl FnOnce(&mut Vec<u8>) -> T) -> T {
        let mut entries = self.buffers.entries.lock();
        let entry = entries.get_mut(&self.itt).expect("kept until taken");
        assert_eq!(entry.token, self.token);
        f(entry
            .buffer
            .as_mut()
            .expect("the reader holds no buffer while the loop runs"))
    }

    /// The buffer, out of the shared table for good.
    pub fn take(self) -> Vec<u8> {
        let entry = self
            .buffers
            .entries
            .lock()
            .remove(&self.itt)
            .expect("kept until taken");
        assert_eq!(entry.token, self.token);
        entry
            .buffer
            .expect("the reader holds no buffer while the loop runs")
    }
}

impl Drop for LentBuffer {
    fn drop(&mut self) {
        let mut entries = self.buffers.entries.lock();
        if entries
            .get(&self.itt)
            .is_some_and(|e| e.token == self.token)
        {
            entries.remove(&self.itt);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_next_bytes_within_the_write_are_placed() {
        let buffers = Arc::new(GatherBuffers::default());
        let lent = LentBuffer::new(&buffers, 7, 100);
        lent.with(|buffer| buffer.extend_from_slice(&[1; 40]));
        assert!(buffers.take(7, 0, 10).is_none(), "not the next bytes");
        assert!(buffers.take(7, 40, 61).is_none(), "past the write");
        assert!(buffers.take(8, 40, 10).is_none(), "another write");
        let (token, mut buffer) = buffers.take(7, 40, 60).unwrap();
        assert!(buffers.take(7, 40, 60).is_none(), "handed out once");
        buffer.extend_from_slice(&[2; 60]);
        buffers.give_back(7, token, buffer);
        let buffer = lent.take();
        assert_eq!(buffer.len(), 100);
        assert_eq!(&buffer[38..42], &[1, 1, 2, 2]);
        assert!(buffers.entries.lock().is_empty());
    }

    #[test]
    fn a_buffer_given_back_after_its_write_is_gone_is_dropped() {
        let buffers = Arc::new(GatherBuffers::default());
        let lent = LentBuffer::new(&buffers, 7, 100);
        let (token, buffer) = buffers.take(7, 0, 10).unwrap();
        drop(lent);
        // A new write under the same tag: it must not receive the old buffer.
        let again = LentBuffer::new(&buffers, 7, 50);
        buffers.give_back(7, token, buffer);
        assert!(again.with(|buffer| buffer.capacity()) < 100);
        assert!(again.take().is_empty());
        assert!(buffers.entries.lock().is_empty());
    }
}
