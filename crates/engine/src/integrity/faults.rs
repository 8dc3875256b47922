//! The read failures hosts met, with the volume and offset, kept for whoever
//! reports them (the daemon turns them into events) until taken.
//!
//! Why bounded and lossy: a failing disk can fail every read; the counters in
//! [`crate::EngineStats`] count them all, while this journal keeps the first
//! [`MAX_KEPT_FAULTS`] since it was last taken and counts the rest.

use parking_lot::Mutex;

/// Faults kept between two takes.
pub const MAX_KEPT_FAULTS: usize = 64;

/// What failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFaultKind {
    /// The filesystem failed the read (EIO and the like).
    Io,
    /// The record was not what its block row says (checksum, decoding).
    Checksum,
}

/// One failed host read of one grain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadFault {
    pub kind: ReadFaultKind,
    /// The volume (or `VOL@SNAP`) the host read.
    pub volume: String,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    pub message: String,
}

/// Faults since the last take, and how many more were not kept.
#[derive(Debug, Default)]
pub struct ReadFaults {
    inner: Mutex<(Vec<ReadFault>, u64)>,
}

impl ReadFaults {
    pub(crate) fn note(&self, fault: ReadFault) {
        let mut inner = self.inner.lock();
        if inner.0.len() < MAX_KEPT_FAULTS {
            inner.0.push(fault);
        } else {
            inner.1 += 1;
        }
    }

    /// The faults kept since the last take, and the number not kept.
    pub fn take(&self) -> (Vec<ReadFault>, u64) {
        std::mem::take(&mut *self.inner.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_kept_up_to_the_bound_and_the_rest_counted() {
        let faults = ReadFaults::default();
        for i in 0..(MAX_KEPT_FAULTS as u64 + 5) {
            faults.note(ReadFault {
                kind: ReadFaultKind::Checksum,
                volume: "v".into(),
                offset_bytes: i * 4096,
                length_bytes: 4096,
                message: "mismatch".into(),
            });
        }
        let (kept, more) = faults.take();
        assert_eq!((kept.len(), more), (MAX_KEPT_FAULTS, 5));
        assert_eq!(kept[1].offset_bytes, 4096);
        assert_eq!(faults.take(), (Vec::new(), 0));
    }
}
