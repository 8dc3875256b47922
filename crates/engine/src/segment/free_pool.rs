//! Freed segment files kept for reuse, instead of deleted at once.
//!
//! Why: appending to a log writes every byte at a new file offset, and a new
//! offset takes a fresh page-cache page. On virtual machines that hand freed
//! memory back to their host (free page reporting), a fresh page costs a fault
//! in the host as well, many times dearer than overwriting a file's cached
//! pages. A file whose segment died still has its pages cached; renamed
//! to the next segment's name and written from offset 0 again, it takes
//! appends at the speed of cached pages, and its blocks are already allocated.
//!
//! What keeps reuse safe: a reused file holds the dead segment's records past
//! the new segment's write position, but nothing names them. Metadata names a
//! record by (segment, offset), a segment id is never reused, and recovery cuts
//! every segment back to the length its last durable commit gave it. Only the
//! rename that turns a pooled file into a live segment must be durable before
//! metadata naming that segment is: [`FreePool::take`] marks the directory
//! changed, and the durable commit syncs it first.
//!
//! Bounds: at most [`MAX_POOLED_FILES`] files, each kept at most
//! [`POOL_KEEP`]; then it is deleted and the media below learns of the space,
//! as it would have at once (seed 002: freed space must reach the media, it
//! only does so a little later). A filesystem short of room gets its pooled
//! files back at once.

use std::collections::VecDeque;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Most freed segment files kept: a GiB of 32 MiB segments, what a second of
/// large overwrites frees between two background commits.
pub const MAX_POOLED_FILES: usize = 32;
/// How long a freed file waits for reuse before it is deleted.
pub const POOL_KEEP: Duration = Duration::from_secs(10);
/// A pooled file's name ends so; [`crate::segment::log::FileSegmentStore::list`]
/// sees only `.seg` files.
const POOLED_SUFFIX: &str = ".free";

struct Pooled {
    number: u64,
    since: Instant,
    length_bytes: u64,
}

/// The pool of one segment directory.
pub struct FreePool {
    dir: PathBuf,
    files: Mutex<PoolFiles>,
    /// A file was renamed into or created under a live segment's name since
    /// the directory was last synced.
    directory_changed: AtomicBool,
}

#[derive(Default)]
struct PoolFiles {
    /// Oldest first.
    kept: VecDeque<Pooled>,
    next_number: u64,
}

impl FreePool {
    /// The pool of `dir`, adopting the files an earlier run left in it (their
    /// pages may still be cached), deleting those past the bound.
    pub fn open(dir: &Path) -> io::Result<FreePool> {
        let pool = FreePool {
            dir: dir.to_path_buf(),
            files: Mutex::new(PoolFiles::default()),
            directory_changed: AtomicBool::new(false),
        };
        let mut found = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(number) = name
                .to_str()
                .and_then(|n| n.strip_suffix(POOLED_SUFFIX))
                .and_then(|stem| stem.parse::<u64>().ok())
            else {
                continue;
            };
            found.push((number, entry.metadata()?.len()));
        }
        found.sort_unstable();
        let mut files = pool.files.lock();
        for (number, length_bytes) in found {
            files.next_number = files.next_number.max(number + 1);
            if files.kept.len() < MAX_POOLED_FILES {
                files.kept.push_back(Pooled {
                    number,
                    since: Instant::now(),
                    length_bytes,
                });
            } else {
                remove_if_present(&pool.path(number))?;
            }
        }
        drop(files);
        Ok(pool)
    }

    fn path(&self, number: u64) -> PathBuf {
        self.dir.join(format!("{number:08}{POOLED_SUFFIX}"))
    }

    /// Keeps the freed segment file `from` for reuse, or deletes it when the
    /// pool is full (or `from` is gone). The caller has closed its handles
    /// to it in the store.
    pub fn keep(&self, from: &Path) -> io::Result<()> {
        let mut files = self.files.lock();
        if files.kept.len() >= MAX_POOLED_FILES {
            drop(files);
            return remove_if_present(from);
        }
        let length_bytes = match fs::metadata(from) {
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let number = files.next_number;
        files.next_number += 1;
        fs::rename(from, self.path(number))?;
        files.kept.push_back(Pooled {
            number,
            since: Instant::now(),
            length_bytes,
        });
        Ok(())
    }

    /// Renames the most recently freed file (the likeliest to be cached) to
    /// `to`, a new segment's name; false if the pool is empty.
    pub fn take(&self, to: &Path) -> io::Result<bool> {
        let mut files = self.files.lock();
        let Some(pooled) = files.kept.pop_back() else {
            return Ok(false);
        };
        fs::rename(self.path(pooled.number), to)?;
        self.directory_changed.store(true, Ordering::SeqCst);
        Ok(true)
    }

    /// Notes a segment file created afresh (its name must be durable too).
    pub fn note_created(&self) {
        self.directory_changed.store(true, Ordering::SeqCst);
    }

    /// Makes renames into and creations of segment names durable, if there
    /// were any since the last call.
    pub fn sync_directory(&self) -> io::Result<()> {
        if !self.directory_changed.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        let synced = fs::File::open(&self.dir).and_then(|dir| dir.sync_all());
        if synced.is_err() {
            self.directory_changed.store(true, Ordering::SeqCst);
        }
        synced
    }

    /// Deletes the files kept longer than `keep` (all of them for
    /// `Duration::ZERO`). Returns how many went.
    pub fn expire(&self, keep: Duration) -> io::Result<usize> {
        let mut expired = Vec::new();
        {
            let mut files = self.files.lock();
            while files
                .kept
                .front()
                .is_some_and(|oldest| keep.is_zero() || oldest.since.elapsed() >= keep)
            {
                expired.extend(files.kept.pop_front());
            }
        }
        for pooled in &expired {
            remove_if_present(&self.path(pooled.number))?;
        }
        Ok(expired.len())
    }

    /// Bytes the pooled files hold on the filesystem.
    pub fn pooled_bytes(&self) -> u64 {
        self.files.lock().kept.iter().map(|p| p.length_bytes).sum()
    }

    pub fn pooled_files(&self) -> usize {
        self.files.lock().kept.len()
    }
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn a_kept_file_is_taken_back_newest_first_under_its_new_name() {
        let tmp = dir();
        let pool = FreePool::open(tmp.path()).unwrap();
        for (name, body) in [("a.seg", "old a"), ("b.seg", "old b")] {
            fs::write(tmp.path().join(name), body).unwrap();
            pool.keep(&tmp.path().join(name)).unwrap();
        }
        assert_eq!(pool.pooled_files(), 2);
        assert_eq!(pool.pooled_bytes(), 10);
        assert!(!tmp.path().join("a.seg").exists());
        let to = tmp.path().join("c.seg");
        assert!(pool.take(&to).unwrap());
        assert_eq!(fs::read_to_string(&to).unwrap(), "old b");
        assert!(pool.take(&tmp.path().join("d.seg")).unwrap());
        assert!(!pool.take(&tmp.path().join("e.seg")).unwrap());
        assert!(!tmp.path().join("e.seg").exists());
    }

    #[test]
    fn the_pool_is_bounded_and_expires_oldest_first() {
        let tmp = dir();
        let pool = FreePool::open(tmp.path()).unwrap();
        for i in 0..MAX_POOLED_FILES + 3 {
            let path = tmp.path().join(format!("{i}.seg"));
            fs::write(&path, b"x").unwrap();
            pool.keep(&path).unwrap();
            assert!(
                !path.exists(),
                "a freed file is kept or deleted, never left"
            );
        }
        assert_eq!(pool.pooled_files(), MAX_POOLED_FILES);
        assert_eq!(pool.expire(Duration::from_secs(3600)).unwrap(), 0);
        assert_eq!(pool.expire(Duration::ZERO).unwrap(), MAX_POOLED_FILES);
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_reopened_pool_adopts_what_the_last_run_left() {
        let tmp = dir();
        let pool = FreePool::open(tmp.path()).unwrap();
        let path = tmp.path().join("1.seg");
        fs::write(&path, b"kept").unwrap();
        pool.keep(&path).unwrap();
        drop(pool);
        let pool = FreePool::open(tmp.path()).unwrap();
        assert_eq!(pool.pooled_files(), 1);
        let to = tmp.path().join("2.seg");
        assert!(pool.take(&to).unwrap());
        assert_eq!(fs::read(&to).unwrap(), b"kept");
        // The next kept file does not reuse the adopted one's number.
        fs::write(&path, b"again").unwrap();
        pool.keep(&path).unwrap();
        assert_eq!(pool.pooled_files(), 1);
    }

    #[test]
    fn the_directory_is_synced_only_after_a_change() {
        let tmp = dir();
        let pool = FreePool::open(tmp.path()).unwrap();
        assert!(!pool.directory_changed.load(Ordering::SeqCst));
        pool.note_created();
        pool.sync_directory().unwrap();
        assert!(!pool.directory_changed.load(Ordering::SeqCst));
    }
}
