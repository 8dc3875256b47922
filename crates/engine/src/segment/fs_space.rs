//! Room on the data directory's filesystem, as opposed to the array's own
//! capacity: the filesystem may fill up first (other files on it, a capacity
//! set larger than the disk).
//!
//! Why a margin: redb latches the first I/O error of a commit and refuses every
//! later transaction until the database is reopened, so a metadata write that
//! meets ENOSPC would leave the daemon up but unable to write. Data writes
//! therefore stop (out of space) while the filesystem still has
//! [`metadata_margin_bytes`] free, and a durable commit goes ahead only while a
//! quarter of that margin is left. A segment write that still meets ENOSPC (the
//! filesystem filled between the check and the write) is out of space as well,
//! never an I/O error: the transaction is dropped and the metadata never names
//! the partial append.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::segment::log::SegmentStore;
use crate::{EngineError, Result};

/// Largest metadata margin, however large the filesystem.
pub const MAX_METADATA_MARGIN_BYTES: u64 = 64 << 20;

/// Free and total bytes of a filesystem, as an unprivileged user may use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSpace {
    pub free_bytes: u64,
    pub total_bytes: u64,
}

/// `statvfs(2)` of the filesystem holding `dir`.
pub fn statvfs(dir: &Path) -> io::Result<FsSpace> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: all-zero is a valid `statvfs` value; it is only an out-parameter.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid C string and `stat` a valid out-pointer.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let unit = stat.f_frsize as u64;
    Ok(FsSpace {
        free_bytes: (stat.f_bavail as u64).saturating_mul(unit),
        total_bytes: (stat.f_blocks as u64).saturating_mul(unit),
    })
}

/// How long a filesystem reading may answer for the store that took it.
/// Short, because other files on the filesystem may grow meanwhile; the margin
/// kept for metadata covers what they can write in that time.
pub const RECENT_SPACE_MAX_AGE: Duration = Duration::from_millis(20);

/// A store's last filesystem reading, aged by what the store wrote since, so
/// that the write path need not make a `statvfs` call per batch. Space the
/// filesystem gains meanwhile (freed segments) is not seen until the next
/// reading, which only makes the answer more cautious.
#[derive(Default)]
pub struct RecentSpace {
    written_bytes: AtomicU64,
    last: Mutex<Option<Reading>>,
}

#[derive(Clone, Copy)]
struct Reading {
    taken: Instant,
    space: FsSpace,
    written_bytes_then: u64,
}

impl RecentSpace {
    /// Counts bytes written to the filesystem by the store (before the write,
    /// so a reading taken meanwhile is never aged too little).
    pub fn note_written(&self, bytes: u64) {
        self.written_bytes.fetch_add(bytes, Ordering::SeqCst);
    }

    /// Remembers a fresh reading.
    pub fn remember(&self, space: FsSpace) {
        let reading = Reading {
            taken: Instant::now(),
            space,
            written_bytes_then: self.written_bytes.load(Ordering::SeqCst),
        };
        *self.last.lock() = Some(reading);
    }

    /// The last reading less what was written since, unless it is older than
    /// [`RECENT_SPACE_MAX_AGE`].
    pub fn get(&self) -> Option<FsSpace> {
        let reading = (*self.last.lock())?;
        if reading.taken.elapsed() > RECENT_SPACE_MAX_AGE {
            return None;
        }
        let written = self.written_bytes.load(Ordering::SeqCst) - reading.written_bytes_then;
        Some(FsSpace {
            free_bytes: reading.space.free_bytes.saturating_sub(written),
            total_bytes: reading.space.total_bytes,
        })
    }
}

/// Room kept free for metadata: 1/16 of the filesystem, at most
/// [`MAX_METADATA_MARGIN_BYTES`].
pub fn metadata_margin_bytes(total_bytes: u64) -> u64 {
    (total_bytes / 16).min(MAX_METADATA_MARGIN_BYTES)
}

/// Refuses (out of space) appending `append_bytes` of records unless the
/// filesystem keeps its metadata margin afterwards.
pub fn check_data(store: &dyn SegmentStore, append_bytes: u64) -> Result<()> {
    let leaves_margin = |space: FsSpace| {
        space.free_bytes >= append_bytes.saturating_add(metadata_margin_bytes(space.total_bytes))
    };
    let recent = store
        .fs_space_recent()
        .map_err(|e| EngineError::io("reading the data directory's free space", e))?;
    if recent.is_none_or(leaves_margin) {
        return Ok(());
    }
    // A refusal is never made on an old reading: segments freed since may
    // have made room.
    let Some(space) = space_of(store)? else {
        return Ok(());
    };
    if !leaves_margin(space) {
        return Err(EngineError::NoSpace(format!(
            "the data directory's filesystem has {} bytes free; appending {append_bytes} bytes \
             would leave less than the {} bytes kept for metadata",
            space.free_bytes,
            metadata_margin_bytes(space.total_bytes)
        )));
    }
    Ok(())
}

/// Refuses (out of space) a durable metadata commit when the filesystem has
/// less than a quarter of its margin free.
pub fn check_metadata(store: &dyn SegmentStore) -> Result<()> {
    let Some(space) = space_of(store)? else {
        return Ok(());
    };
    let needed = metadata_margin_bytes(space.total_bytes) / 4;
    if space.free_bytes < needed {
        return Err(EngineError::NoSpace(format!(
            "the data directory's filesystem has {} bytes free, less than the {needed} bytes a \
             metadata commit may need",
            space.free_bytes
        )));
    }
    Ok(())
}

fn space_of(store: &dyn SegmentStore) -> Result<Option<FsSpace>> {
    store
        .fs_space()
        .map_err(|e| EngineError::io("reading the data directory's free space", e))
}

/// The engine error for a failed segment write or sync: a full filesystem (or
/// quota) is out of space, anything else an I/O error.
pub fn segment_error(context: String, error: io::Error) -> EngineError {
    match error.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
            EngineError::NoSpace(format!("{context}: {error}"))
        }
        _ => EngineError::io(context, error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_filesystem_is_out_of_space_and_other_errors_stay_io() {
        let full = segment_error("writing".into(), io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(matches!(full, EngineError::NoSpace(_)), "{full}");
        let quota = segment_error("writing".into(), io::Error::from_raw_os_error(libc::EDQUOT));
        assert!(matches!(quota, EngineError::NoSpace(_)), "{quota}");
        let eio = segment_error("writing".into(), io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(eio, EngineError::Io { .. }), "{eio}");
    }

    /// A store whose recent and fresh readings are set by the test, counting
    /// the fresh ones.
    struct Readings {
        recent: FsSpace,
        fresh: FsSpace,
        fresh_calls: std::sync::atomic::AtomicU32,
    }

    impl SegmentStore for Readings {
        fn write_at(&self, _: crate::segment::log::SegmentId, _: u64, _: &[u8]) -> io::Result<()> {
            unreachable!()
        }
        fn read_at(
            &self,
            _: crate::segment::log::SegmentId,
            _: u64,
            _: &mut [u8],
        ) -> io::Result<()> {
            unreachable!()
        }
        fn sync(&self, _: crate::segment::log::SegmentId) -> io::Result<()> {
            unreachable!()
        }
        fn truncate(&self, _: crate::segment::log::SegmentId, _: u64) -> io::Result<()> {
            unreachable!()
        }
        fn remove(&self, _: crate::segment::log::SegmentId) -> io::Result<()> {
            unreachable!()
        }
        fn punch(&self, _: crate::segment::log::SegmentId, _: u64, _: u64) -> io::Result<()> {
            unreachable!()
        }
        fn list(&self) -> io::Result<Vec<(crate::segment::log::SegmentId, u64)>> {
            unreachable!()
        }
        fn write_back(&self) -> io::Result<()> {
            unreachable!()
        }
        fn fs_space(&self) -> io::Result<Option<FsSpace>> {
            self.fresh_calls.fetch_add(1, Ordering::SeqCst);
            Ok(Some(self.fresh))
        }
        fn fs_space_recent(&self) -> io::Result<Option<FsSpace>> {
            Ok(Some(self.recent))
        }
    }

    const MIB: u64 = 1 << 20;

    fn readings(recent_free_mib: u64, fresh_free_mib: u64) -> Readings {
        let space = |free_mib: u64| FsSpace {
            free_bytes: free_mib * MIB,
            total_bytes: 1 << 40,
        };
        Readings {
            recent: space(recent_free_mib),
            fresh: space(fresh_free_mib),
            fresh_calls: Default::default(),
        }
    }

    #[test]
    fn room_on_a_recent_reading_needs_no_fresh_one() {
        let store = readings(MAX_METADATA_MARGIN_BYTES / MIB + 10, 0);
        check_data(&store, 4096).unwrap();
        assert_eq!(store.fresh_calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_refusal_is_confirmed_by_a_fresh_reading() {
        // Segments freed since the recent reading made room: no refusal.
        let store = readings(1, MAX_METADATA_MARGIN_BYTES / MIB + 10);
        check_data(&store, 4096).unwrap();
        assert_eq!(store.fresh_calls.load(Ordering::SeqCst), 1);
        // Both readings short: out of space.
        let store = readings(1, 1);
        let refused = check_data(&store, 4096).unwrap_err();
        assert!(matches!(refused, EngineError::NoSpace(_)), "{refused}");
    }

    #[test]
    fn a_recent_reading_is_aged_by_writes_and_expires() {
        let recent = RecentSpace::default();
        assert_eq!(recent.get(), None, "no reading yet");
        let space = FsSpace {
            free_bytes: 100 * MIB,
            total_bytes: 1 << 30,
        };
        recent.remember(space);
        recent.note_written(30 * MIB);
        let aged = recent.get().expect("a reading just taken answers");
        assert_eq!(aged.free_bytes, 70 * MIB);
        assert_eq!(aged.total_bytes, space.total_bytes);
        recent.note_written(200 * MIB);
        assert_eq!(recent.get().unwrap().free_bytes, 0, "never below zero");
        std::thread::sleep(RECENT_SPACE_MAX_AGE + Duration::from_millis(5));
        assert_eq!(recent.get(), None, "an old reading does not answer");
    }

    #[test]
    fn margin_is_a_sixteenth_capped() {
        assert_eq!(metadata_margin_bytes(64 << 20), 4 << 20);
        assert_eq!(metadata_margin_bytes(1 << 40), MAX_METADATA_MARGIN_BYTES);
        assert_eq!(metadata_margin_bytes(0), 0);
    }

    #[test]
    fn statvfs_of_a_real_directory_is_sane() {
        let space = statvfs(&std::env::temp_dir()).unwrap();
        assert!(space.total_bytes > 0);
        assert!(space.free_bytes <= space.total_bytes);
    }
}
