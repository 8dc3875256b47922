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

use crate::segment::SegmentStore;
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

/// Room kept free for metadata: 1/16 of the filesystem, at most
/// [`MAX_METADATA_MARGIN_BYTES`].
pub fn metadata_margin_bytes(total_bytes: u64) -> u64 {
    (total_bytes / 16).min(MAX_METADATA_MARGIN_BYTES)
}

/// Refuses (out of space) appending `append_bytes` of records unless the
/// filesystem keeps its metadata margin afterwards.
pub fn check_data(store: &dyn SegmentStore, append_bytes: u64) -> Result<()> {
    let Some(space) = space_of(store)? else {
        return Ok(());
    };
    let needed = append_bytes.saturating_add(metadata_margin_bytes(space.total_bytes));
    if space.free_bytes < needed {
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
