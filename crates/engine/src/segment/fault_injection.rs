//! Test-only fault injection: make reads of one segment fail with EIO.
//!
//! A failing disk cannot be had on every test machine (device-mapper's `error`
//! and `flakey` targets need a kernel driver that containers often lack), so the
//! daemon tests inject the OS error here instead, one layer above the file: the
//! error is a real `io::Error` with `EIO` and goes through exactly the path a
//! failing disk's would (record read, scrub, cleaner).
//!
//! It is off unless the environment variable [`READ_EIO_ENV`] names a segment
//! when the engine opens; the engine then logs a warning saying so. Nothing else
//! (no API, no flag) can turn it on.

use std::io;
use std::sync::Arc;

use crate::segment::fs_space::FsSpace;
#[cfg(test)]
use crate::segment::log::FileSegmentStore;
use crate::segment::log::{SegmentId, SegmentStore};

/// `LACUNA_FAULT_READ_EIO=<segment id>`: every read of that segment fails with EIO.
pub const READ_EIO_ENV: &str = "LACUNA_FAULT_READ_EIO";

/// The store the engine uses: `store` itself, or wrapped when a fault is asked for.
pub(crate) fn wrap(store: Arc<dyn SegmentStore>) -> Arc<dyn SegmentStore> {
    match std::env::var(READ_EIO_ENV) {
        Ok(value) => {
            let segment: SegmentId = value.trim().parse().unwrap_or_else(|_| {
                panic!("{READ_EIO_ENV}={value:?}: expected a segment id (test fault injection)")
            });
            tracing::warn!(
                %segment,
                "fault injection on: every read of this segment fails with EIO ({READ_EIO_ENV})"
            );
            Arc::new(ReadEio {
                inner: store,
                segment,
            })
        }
        Err(_) => store,
    }
}

/// A store whose reads of one segment fail with EIO.
struct ReadEio {
    inner: Arc<dyn SegmentStore>,
    segment: SegmentId,
}

impl SegmentStore for ReadEio {
    fn write_at(&self, segment: SegmentId, offset_bytes: u64, data: &[u8]) -> io::Result<()> {
        self.inner.write_at(segment, offset_bytes, data)
    }

    fn read_at(&self, segment: SegmentId, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        if segment == self.segment {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.read_at(segment, offset_bytes, buf)
    }

    fn sync(&self, segment: SegmentId) -> io::Result<()> {
        self.inner.sync(segment)
    }

    fn truncate(&self, segment: SegmentId, length_bytes: u64) -> io::Result<()> {
        self.inner.truncate(segment, length_bytes)
    }

    fn remove(&self, segment: SegmentId) -> io::Result<()> {
        self.inner.remove(segment)
    }

    fn punch(&self, segment: SegmentId, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.inner.punch(segment, offset_bytes, length_bytes)
    }

    fn retire(&self, segment: SegmentId) -> io::Result<()> {
        self.inner.retire(segment)
    }

    fn expire_retired(&self, keep: std::time::Duration) -> io::Result<()> {
        self.inner.expire_retired(keep)
    }

    fn sync_names(&self) -> io::Result<()> {
        self.inner.sync_names()
    }

    fn retired(&self) -> crate::segment::log::RetiredFiles {
        self.inner.retired()
    }

    fn describe(&self, segment: SegmentId) -> String {
        self.inner.describe(segment)
    }

    fn list(&self) -> io::Result<Vec<(SegmentId, u64)>> {
        self.inner.list()
    }

    fn write_back(&self) -> io::Result<()> {
        self.inner.write_back()
    }

    fn fs_space(&self) -> io::Result<Option<FsSpace>> {
        self.inner.fs_space()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_segment_fails_and_with_eio() {
        let dir = tempfile::Builder::new()
            .prefix("lacuna-fault-")
            .tempdir()
            .unwrap();
        let inner = FileSegmentStore::open(dir.path()).unwrap();
        inner.write_at(SegmentId::new(1), 0, b"one").unwrap();
        inner.write_at(SegmentId::new(2), 0, b"two").unwrap();
        let store = ReadEio {
            inner: Arc::new(inner),
            segment: SegmentId::new(2),
        };
        let mut buf = [0u8; 3];
        store.read_at(SegmentId::new(1), 0, &mut buf).unwrap();
        assert_eq!(&buf, b"one");
        let error = store.read_at(SegmentId::new(2), 0, &mut buf).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
    }
}
