//! The segment log: append-only files of records, each record a block's payload
//! behind a header that carries its length, block id and checksum.
//!
//! Storage sits behind [`SegmentStore`] so the engine can later run on a raw device
//! or another store; [`FileSegmentStore`] keeps one file per segment in the data
//! directory and frees a dead segment by deleting its file, which hands the space
//! (and, on SSD-backed filesystems with discard, the flash) back at once.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

pub use crate::ids::SegmentId;

/// Segments are sealed once they reach this size; a host request never splits
/// a record across segments.
pub const SEGMENT_TARGET_BYTES: u64 = 32 * 1024 * 1024;

pub const RECORD_MAGIC: u32 = 0x4c43_4e52; // "LCNR"
pub const RECORD_HEADER_BYTES: usize = 24;
// A block row keeps a record's offset in a u32: a segment may pass its target
// size by one record at most.
const _: () = assert!(
    SEGMENT_TARGET_BYTES + RECORD_HEADER_BYTES as u64 + crate::GRAIN_BYTES <= u32::MAX as u64,
    "record offsets fit a block row's u32"
);
pub const FLAG_COMPRESSED: u16 = 1;
/// The payload is a Zstandard frame.
pub const FLAG_ZSTD: u16 = 2;
/// The block was stored by a container with dedup off: it is not in the dedup
/// index and never shared through it.
pub const FLAG_UNINDEXED: u16 = 4;
/// The checksum runs over the payload first, then the header (with the crc
/// field zeroed): the payload's part is worked out on the writer's own thread,
/// before the writer mutex, and only the 24 header bytes are added under it.
/// Records written before this flag run header first; both verify.
pub const FLAG_PAYLOAD_CRC_FIRST: u16 = 8;
/// The payload is the raw grain, its compression left to the background
/// reducer (`reclaim::reducer`), which rewrites the record compressed with LZ4.
pub const FLAG_REDUCE_LZ4: u16 = 16;
/// As [`FLAG_REDUCE_LZ4`], with Zstandard.
pub const FLAG_REDUCE_ZSTD: u16 = 32;
/// The flags that say a record waits for the background reducer.
pub const FLAG_REDUCE_LATER: u16 = FLAG_REDUCE_LZ4 | FLAG_REDUCE_ZSTD;

/// Where the engine's records live.
pub trait SegmentStore: Send + Sync {
    /// Positioned write into a segment, creating it if needed.
    fn write_at(&self, segment: SegmentId, offset_bytes: u64, data: &[u8]) -> io::Result<()>;
    /// Positioned write of `pieces`, one after the other, as if concatenated:
    /// a write's records go out as headers and payloads where they lie,
    /// without being copied into one buffer first (that copy was 3% of the
    /// daemon's CPU in 1 MiB writes, under the writer mutex).
    fn write_vectored_at(
        &self,
        segment: SegmentId,
        offset_bytes: u64,
        pieces: &[&[u8]],
    ) -> io::Result<()> {
        self.write_at(segment, offset_bytes, &pieces.concat())
    }
    fn read_at(&self, segment: SegmentId, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Makes everything written to the segment durable.
    fn sync(&self, segment: SegmentId) -> io::Result<()>;
    /// Drops bytes at and after `length_bytes` (torn or unreferenced tails).
    fn truncate(&self, segment: SegmentId, length_bytes: u64) -> io::Result<()>;
    /// Frees the whole segment; the media below learns of it.
    fn remove(&self, segment: SegmentId) -> io::Result<()>;
    /// Frees the whole segment, the store free to keep its storage for a
    /// later segment (see [`crate::segment::free_pool`]) for a while.
    fn retire(&self, segment: SegmentId) -> io::Result<()> {
        self.remove(segment)
    }
    /// Gives up storage kept by [`SegmentStore::retire`] for longer than
    /// `keep` (all of it for `Duration::ZERO`).
    fn expire_retired(&self, keep: std::time::Duration) -> io::Result<()> {
        let _ = keep;
        Ok(())
    }
    /// Makes the names of segments created since the last call durable
    /// (before metadata that names them is).
    fn sync_names(&self) -> io::Result<()> {
        Ok(())
    }
    /// What [`SegmentStore::retire`] keeps now.
    fn retired(&self) -> RetiredFiles {
        RetiredFiles::default()
    }
    /// Where `segment` is kept, for messages that ask a person to look at it.
    fn describe(&self, segment: SegmentId) -> String {
        format!("segment {segment}")
    }
    /// Gives the bytes of a range back to the filesystem (and so to the media
    /// below, seed 002) without changing the segment's length; they read as
    /// zeroes from then on.
    fn punch(&self, segment: SegmentId, offset_bytes: u64, length_bytes: u64) -> io::Result<()>;
    /// Every segment present, with its stored length.
    fn list(&self) -> io::Result<Vec<(SegmentId, u64)>>;
    /// Writes appends the store still holds in memory to their segments (not
    /// durably). Every metadata commit calls it first ([`crate::meta::store::Kv::commit`]):
    /// metadata must never name bytes that only this process holds.
    fn write_back(&self) -> io::Result<()>;
    /// Free and total bytes of the filesystem below the store, when it has one
    /// (the write path keeps room for metadata; see [`crate::segment::fs_space`]).
    fn fs_space(&self) -> io::Result<Option<crate::segment::fs_space::FsSpace>> {
        Ok(None)
    }
    /// Like [`SegmentStore::fs_space`], but it may answer from a reading a few
    /// milliseconds old, less what this store wrote since. Good only for a
    /// "yes, there is room": [`crate::segment::fs_space::check_data`] confirms every
    /// refusal with a fresh reading.
    fn fs_space_recent(&self) -> io::Result<Option<crate::segment::fs_space::FsSpace>> {
        self.fs_space()
    }
}

/// One file per segment under `<data_dir>/segments/`.
pub struct FileSegmentStore {
    dir: PathBuf,
    files: RwLock<HashMap<SegmentId, Arc<File>>>,
    /// Small appends not yet written to their files (`files` may be locked
    /// while this is held, never the other way round).
    tails: RwLock<crate::segment::write_buffer::Tails>,
    /// Which segments may have a tail (changed under `tails`).
    tail_mask: crate::segment::write_buffer::TailMask,
    /// The last `statvfs` of the directory: one per write batch was a
    /// twentieth of the CPU of 4 KiB random writes.
    recent_space: crate::segment::fs_space::RecentSpace,
    /// Freed segment files kept for new segments (their pages cached).
    pool: crate::segment::free_pool::FreePool,
    /// New segments that took a pooled file.
    reused_files: AtomicU64,
}

/// What [`SegmentStore::retire`] kept, and how much of it was reused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetiredFiles {
    pub kept_files: u64,
    pub kept_bytes: u64,
    pub reused_files: u64,
}

/// Most segment files kept open. The engine's descriptors are a constant
/// (these, the metadata file, a few transient ones) whatever the array's size,
/// so the daemon can leave the rest to connections (docs/LIMITS.md); a read of
/// a segment whose file was closed opens it again.
pub const MAX_OPEN_SEGMENT_FILES: usize = 64;

/// Closes files beyond [`MAX_OPEN_SEGMENT_FILES`] that no I/O holds, oldest
/// segments first (the open segments are the newest), never `keep`. A handle
/// still in use stays valid: its descriptor closes with its last user.
fn close_idle_files(files: &mut HashMap<SegmentId, Arc<File>>, keep: SegmentId) {
    if files.len() <= MAX_OPEN_SEGMENT_FILES {
        return;
    }
    let mut idle: Vec<SegmentId> = files
        .iter()
        .filter(|(id, file)| **id != keep && Arc::strong_count(file) == 1)
        .map(|(id, _)| *id)
        .collect();
    idle.sort_unstable();
    let excess = files.len() - MAX_OPEN_SEGMENT_FILES;
    for id in idle.into_iter().take(excess) {
        files.remove(&id);
    }
}

/// Modes of what the engine keeps: the daemon's alone.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// Creates `dir` (and its parents) if needed, and makes it 0700 whatever mode
/// it had.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(PRIVATE_DIR_MODE))
}

/// Makes a file the engine keeps 0600 (one another library created).
pub fn make_private_file(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(PRIVATE_FILE_MODE))
}

impl FileSegmentStore {
    pub fn open(dir: &Path) -> io::Result<Self> {
        create_private_dir(dir)?;
        Ok(FileSegmentStore {
            dir: dir.to_path_buf(),
            files: RwLock::new(HashMap::new()),
            tails: RwLock::new(crate::segment::write_buffer::Tails::default()),
            tail_mask: crate::segment::write_buffer::TailMask::default(),
            recent_space: crate::segment::fs_space::RecentSpace::default(),
            pool: crate::segment::free_pool::FreePool::open(dir)?,
            reused_files: AtomicU64::new(0),
        })
    }

    /// The file holding `segment` (named in recovery and scrub messages).
    pub fn path(&self, segment: SegmentId) -> PathBuf {
        self.dir.join(format!("{segment:08}.seg"))
    }

    fn file(&self, segment: SegmentId, create: bool) -> io::Result<Arc<File>> {
        if let Some(file) = self.files.read().get(&segment) {
            return Ok(file.clone());
        }
        let mut files = self.files.write();
        if let Some(file) = files.get(&segment) {
            return Ok(file.clone());
        }
        let file = Arc::new(self.open_file(segment, create)?);
        files.insert(segment, file.clone());
        close_idle_files(&mut files, segment);
        Ok(file)
    }

    /// Opens `segment`'s file; a new one (`create`) is a pooled file renamed,
    /// if the pool has one, else created.
    fn open_file(&self, segment: SegmentId, create: bool) -> io::Result<File> {
        let path = self.path(segment);
        let open = |create: bool| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .mode(PRIVATE_FILE_MODE)
                .open(&path)
        };
        match open(false) {
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
                if self.pool.take(&path)? {
                    self.reused_files.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.pool.note_created();
                }
                open(true)
            }
            other => other,
        }
    }

    /// Whether the filesystem is too short of room to keep freed files: less
    /// free than four metadata margins.
    fn short_of_room(&self, space: crate::segment::fs_space::FsSpace) -> bool {
        space.free_bytes < 4 * crate::segment::fs_space::metadata_margin_bytes(space.total_bytes)
    }

    /// Writes `segment`'s tail, if it has one, to `file` (before anything that
    /// must find the segment's bytes in the file: a sync, a truncation, a
    /// punch, an append that bypasses the tail).
    fn write_out_tail(&self, segment: SegmentId, file: &File) -> io::Result<()> {
        if !self.tail_mask.may_have_tail(segment) {
            return Ok(());
        }
        self.tails.write().write_out(&self.tail_mask, segment, file)
    }
}

impl Drop for FileSegmentStore {
    /// Appends still in memory go to their files (a clean close has written
    /// them already, with its final commit).
    fn drop(&mut self) {
        if let Err(error) = self.write_back() {
            tracing::warn!("writing segment tails at close: {error}");
        }
    }
}

impl SegmentStore for FileSegmentStore {
    fn write_at(&self, segment: SegmentId, offset_bytes: u64, data: &[u8]) -> io::Result<()> {
        self.write_vectored_at(segment, offset_bytes, &[data])
    }

    /// A run shorter than a tail joins the segment's tail; a longer one
    /// writes the tail out first, then goes to the file in place.
    fn write_vectored_at(
        &self,
        segment: SegmentId,
        offset_bytes: u64,
        pieces: &[&[u8]],
    ) -> io::Result<()> {
        let total_bytes: usize = pieces.iter().map(|piece| piece.len()).sum();
        self.recent_space.note_written(total_bytes as u64);
        let file = self.file(segment, true)?;
        if total_bytes < crate::segment::write_buffer::TAIL_WRITE_BYTES {
            let mut tails = self.tails.write();
            let mut at_bytes = offset_bytes;
            for piece in pieces.iter().filter(|piece| !piece.is_empty()) {
                tails.append(&self.tail_mask, segment, &file, at_bytes, piece)?;
                at_bytes += piece.len() as u64;
            }
            return Ok(());
        }
        self.write_out_tail(segment, &file)?;
        write_all_vectored_at(&file, offset_bytes, pieces)
    }

    fn read_at(&self, segment: SegmentId, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        let file = self.file(segment, false)?;
        if self.tail_mask.may_have_tail(segment) {
            let tails = self.tails.read();
            if tails.overlaps(segment, offset_bytes, buf.len()) {
                return tails.read(segment, &file, offset_bytes, buf);
            }
        }
        if reads_wait() {
            file.read_exact_at(buf, offset_bytes)
        } else {
            read_exact_at_cached(&file, buf, offset_bytes)
        }
    }

    fn sync(&self, segment: SegmentId) -> io::Result<()> {
        let file = self.file(segment, false)?;
        self.write_out_tail(segment, &file)?;
        file.sync_data()
    }

    fn truncate(&self, segment: SegmentId, length_bytes: u64) -> io::Result<()> {
        let file = self.file(segment, false)?;
        self.write_out_tail(segment, &file)?;
        file.set_len(length_bytes)?;
        file.sync_all()
    }

    /// The file goes while its handle's entry is locked out: a read that
    /// missed the entry between the two (a reader with a stale location may
    /// still aim at a freed segment) opened the file again and kept the
    /// handle, and the space of the deleted file never came back while the
    /// daemon ran.
    fn remove(&self, segment: SegmentId) -> io::Result<()> {
        self.tails.write().discard(&self.tail_mask, segment);
        let mut files = self.files.write();
        files.remove(&segment);
        crate::testing::sync_points::at(
            crate::testing::sync_points::Point::SegmentRemoveBeforeUnlink,
        );
        let removed = fs::remove_file(self.path(segment));
        drop(files);
        match removed {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// As [`FileSegmentStore::remove`], the file renamed into the pool
    /// instead of deleted, unless the filesystem is short of room.
    fn retire(&self, segment: SegmentId) -> io::Result<()> {
        // A reading of the last 20 ms, else a fresh one (once per 32 MiB
        // freed): the durable commit's own reading is older than that when
        // its metadata fsync was slow, and freed files were deleted then.
        let space = match self.recent_space.get() {
            Some(space) => space,
            None => crate::segment::fs_space::statvfs(&self.dir)?,
        };
        if self.short_of_room(space) {
            return self.remove(segment);
        }
        self.tails.write().discard(&self.tail_mask, segment);
        let mut files = self.files.write();
        files.remove(&segment);
        let kept = self.pool.keep(&self.path(segment));
        drop(files);
        kept
    }

    fn expire_retired(&self, keep: std::time::Duration) -> io::Result<()> {
        self.pool.expire(keep).map(|_| ())
    }

    fn sync_names(&self) -> io::Result<()> {
        self.pool.sync_directory()
    }

    fn describe(&self, segment: SegmentId) -> String {
        self.path(segment).display().to_string()
    }

    fn retired(&self) -> RetiredFiles {
        RetiredFiles {
            kept_files: self.pool.pooled_files() as u64,
            kept_bytes: self.pool.pooled_bytes(),
            reused_files: self.reused_files.load(Ordering::Relaxed),
        }
    }

    fn punch(&self, segment: SegmentId, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let file = match self.file(segment, false) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => other?,
        };
        self.write_out_tail(segment, &file)?;
        let (Ok(offset), Ok(length)) = (
            libc::off_t::try_from(offset_bytes),
            libc::off_t::try_from(length_bytes),
        ) else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        // SAFETY: fallocate on a file descriptor we own, with plain integers.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset,
                length,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    fn list(&self) -> io::Result<Vec<(SegmentId, u64)>> {
        self.write_back()?;
        let mut segments = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".seg")) else {
                continue;
            };
            let Ok(id) = stem.parse::<SegmentId>() else {
                continue;
            };
            segments.push((id, entry.metadata()?.len()));
        }
        segments.sort_unstable();
        Ok(segments)
    }

    fn write_back(&self) -> io::Result<()> {
        let mut tails = self.tails.write();
        for segment in tails.segments() {
            let file = self.file(segment, false)?;
            tails.write_out(&self.tail_mask, segment, &file)?;
        }
        Ok(())
    }

    /// Pooled files go back to the filesystem as soon as it is short of room.
    fn fs_space(&self) -> io::Result<Option<crate::segment::fs_space::FsSpace>> {
        let mut space = crate::segment::fs_space::statvfs(&self.dir)?;
        if self.short_of_room(space) && self.pool.pooled_files() > 0 {
            self.pool.expire(std::time::Duration::ZERO)?;
            space = crate::segment::fs_space::statvfs(&self.dir)?;
        }
        let held_bytes = self.tails.read().held_bytes();
        space.free_bytes = space.free_bytes.saturating_sub(held_bytes);
        self.recent_space.remember(space);
        Ok(Some(space))
    }

    fn fs_space_recent(&self) -> io::Result<Option<crate::segment::fs_space::FsSpace>> {
        match self.recent_space.get() {
            Some(space) => Ok(Some(space)),
            None => self.fs_space(),
        }
    }
}

/// Most pieces one `pwritev` takes (Linux's `IOV_MAX`).
const MAX_IOVECS: usize = 1024;

/// `pieces` written at `offset_bytes` of `file` as one run of bytes, in as
/// few `pwritev` calls as `IOV_MAX` and short writes allow.
fn write_all_vectored_at(file: &File, offset_bytes: u64, pieces: &[&[u8]]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut at_bytes = offset_bytes;
    let mut index = 0;
    // A piece partly written: the part still to go.
    let mut first: &[u8] = pieces.first().copied().unwrap_or_default();
    // Each pass writes at least one byte or fails; pieces and bytes are finite.
    while index < pieces.len() {
        if first.is_empty() {
            index += 1;
            first = pieces.get(index).copied().unwrap_or_default();
            continue;
        }
        let iovecs: Vec<libc::iovec> = std::iter::once(first)
            .chain(pieces[index + 1..].iter().copied())
            .take(MAX_IOVECS)
            .map(|piece| libc::iovec {
                iov_base: piece.as_ptr() as *mut libc::c_void,
                iov_len: piece.len(),
            })
            .collect();
        let offset = libc::off_t::try_from(at_bytes)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: every iovec points into a live slice of `pieces` (or `first`,
        // a part of one) for the length given, and the kernel only reads them.
        let written = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iovecs.as_ptr(),
                iovecs.len() as libc::c_int,
                offset,
            )
        };
        if written < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        if written == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        let mut left_bytes = written as usize;
        at_bytes += left_bytes as u64;
        while left_bytes > 0 {
            let taken = left_bytes.min(first.len());
            first = &first[taken..];
            left_bytes -= taken;
            if first.is_empty() {
                index += 1;
                first = pieces.get(index).copied().unwrap_or_default();
            }
        }
    }
    Ok(())
}

/// Filesystem page size punched holes are aligned to.
pub const PUNCH_ALIGN_BYTES: u64 = 4096;

/// The page-aligned ranges inside freed byte ranges of one segment: adjacent
/// and overlapping ranges are merged first (consecutive dead records free whole
/// pages between them), and only whole pages are punched, so a live record
/// sharing a page with a dead one is never touched.
pub fn punchable(mut freed: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    freed.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (offset, length) in freed {
        let end = offset + length;
        match merged.last_mut() {
            Some((_, last_end)) if offset <= *last_end => *last_end = (*last_end).max(end),
            _ => merged.push((offset, end)),
        }
    }
    merged
        .into_iter()
        .filter_map(|(start, end)| {
            let start = start.next_multiple_of(PUNCH_ALIGN_BYTES);
            let end = end / PUNCH_ALIGN_BYTES * PUNCH_ALIGN_BYTES;
            (end > start).then(|| (start, end - start))
        })
        .collect()
}

/// Header fields of one record. Layout (little endian): magic u32, flags u16,
/// reserved u16, payload_len u32, crc32c u32, block_id u64. The checksum covers the
/// header (with the crc field zeroed) and the payload (in the order
/// [`FLAG_PAYLOAD_CRC_FIRST`] says), so a record read from the wrong place or
/// torn by a crash is detected, never returned as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub flags: u16,
    pub payload_len: u32,
    pub block_id: crate::ids::BlockId,
}

/// The header's bytes, with the crc field zeroed.
fn header_bytes(header: RecordHeader) -> [u8; RECORD_HEADER_BYTES] {
    let mut bytes = [0u8; RECORD_HEADER_BYTES];
    bytes[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
    bytes[4..6].copy_from_slice(&header.flags.to_le_bytes());
    bytes[8..12].copy_from_slice(&header.payload_len.to_le_bytes());
    bytes[16..24].copy_from_slice(&header.block_id.get().to_le_bytes());
    bytes
}

/// The CRC32C of a record's payload (see the workspace's `crc-fast`: the
/// same checksum as the `crc32c` crate's, four times as fast on payloads).
pub fn payload_crc(payload: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(payload)
}

/// The CRC32C of `bytes` continued from `crc`, the CRC32C of what precedes
/// them: the checksum of the two together.
fn crc_append(crc: u32, bytes: &[u8]) -> u32 {
    // crc-fast's state is the register before the final inversion.
    let mut digest =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(bytes);
    let crc = digest.finalize();
    debug_assert!(crc <= u64::from(u32::MAX));
    crc as u32
}

/// The checksum of a record: its header bytes (`header`'s flags say in which
/// order) with the crc field zeroed, and its payload, whose own CRC32C is
/// `payload_crc` when known.
fn record_crc(
    header: RecordHeader,
    mut bytes: [u8; RECORD_HEADER_BYTES],
    payload: &[u8],
    payload_crc: Option<u32>,
) -> u32 {
    bytes[12..16].fill(0);
    if header.flags & FLAG_PAYLOAD_CRC_FIRST != 0 {
        let payload_crc = payload_crc.unwrap_or_else(|| self::payload_crc(payload));
        crc_append(payload_crc, &bytes)
    } else {
        crc_append(self::payload_crc(&bytes), payload)
    }
}

/// The header bytes of a record whose checksum starts with its payload's
/// ([`FLAG_PAYLOAD_CRC_FIRST`]), `payload_crc`, and the record's checksum: all
/// a record needs besides its payload, which can then be written from
/// wherever it lies.
pub fn encode_header(header: RecordHeader, payload_crc: u32) -> ([u8; RECORD_HEADER_BYTES], u32) {
    assert!(header.flags & FLAG_PAYLOAD_CRC_FIRST != 0);
    let mut bytes = header_bytes(header);
    let crc = crc_append(payload_crc, &bytes);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(
        read_header(&bytes),
        Some((header, crc)),
        "a header reads back as written"
    );
    (bytes, crc)
}

/// Appends one encoded record (header + payload) to `out`; returns its checksum.
/// `payload_crc`: the payload's CRC32C, when the header's flags say the
/// checksum starts with it and it is already known. The write path keeps
/// payloads where they lie ([`encode_header`]); tests encode whole records,
/// in either checksum order, with this.
#[cfg(test)]
pub fn encode_record(
    header: RecordHeader,
    payload: &[u8],
    payload_crc: Option<u32>,
    out: &mut Vec<u8>,
) -> u32 {
    assert_eq!(header.payload_len as usize, payload.len());
    debug_assert!(payload_crc.is_none_or(|crc| crc == self::payload_crc(payload)));
    let (bytes, crc) = if header.flags & FLAG_PAYLOAD_CRC_FIRST != 0 {
        encode_header(
            header,
            payload_crc.unwrap_or_else(|| self::payload_crc(payload)),
        )
    } else {
        // Header first, as records were written before the flag.
        let mut bytes = header_bytes(header);
        let crc = record_crc(header, bytes, payload, None);
        bytes[12..16].copy_from_slice(&crc.to_le_bytes());
        (bytes, crc)
    };
    out.extend_from_slice(&bytes);
    out.extend_from_slice(payload);
    crc
}

/// The header at the start of `record` and its stored checksum; `None` when the
/// bytes are too short or do not start with the record magic.
pub fn read_header(record: &[u8]) -> Option<(RecordHeader, u32)> {
    let header = record.get(..RECORD_HEADER_BYTES)?;
    let magic = u32::from_le_bytes(header[0..4].try_into().expect("4"));
    if magic != RECORD_MAGIC {
        return None;
    }
    let found = RecordHeader {
        flags: u16::from_le_bytes(header[4..6].try_into().expect("2")),
        payload_len: u32::from_le_bytes(header[8..12].try_into().expect("4")),
        block_id: crate::ids::BlockId::new(u64::from_le_bytes(
            header[16..24].try_into().expect("8"),
        )),
    };
    Some((
        found,
        u32::from_le_bytes(header[12..16].try_into().expect("4")),
    ))
}

/// Verifies a record read back from a segment against what the metadata expects,
/// returning the payload.
pub fn verify_record(
    record: &[u8],
    expected: RecordHeader,
    expected_crc: u32,
) -> Result<&[u8], String> {
    if record.len() != RECORD_HEADER_BYTES + expected.payload_len as usize {
        return Err("record length mismatch".into());
    }
    let (found, crc) = read_header(record).ok_or_else(|| "bad magic".to_string())?;
    if found != expected {
        return Err(format!("header {found:?} where {expected:?} was expected"));
    }
    let (stored_header, payload) = record.split_at(RECORD_HEADER_BYTES);
    let stored_header = stored_header.try_into().expect("a header's bytes");
    let computed = record_crc(found, stored_header, payload, None);
    if computed != crc || crc != expected_crc {
        return Err(format!(
            "checksum mismatch (stored {crc:#x}, computed {computed:#x}, expected {expected_crc:#x})"
        ));
    }
    Ok(payload)
}

thread_local! {
    /// Set while this thread runs a read that must not wait for the disk.
    static NO_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with this thread's segment reads refusing to wait for the disk:
/// a record not wholly in the page cache fails with `WouldBlock` instead.
/// Why a thread-local rather than a parameter: the flag concerns only the
/// innermost `pread`, many calls below the volume's read, and only the
/// thread that asks (a transport running a read on its own task).
pub(crate) fn without_waiting<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            NO_WAIT.with(|flag| flag.set(false));
        }
    }
    let was = NO_WAIT.with(|flag| flag.replace(true));
    assert!(!was, "no-wait reads do not nest");
    let _reset = Reset;
    f()
}

fn reads_wait() -> bool {
    !NO_WAIT.with(|flag| flag.get())
}

/// `read_exact_at` with `RWF_NOWAIT`: the kernel returns what the page cache
/// holds and `EAGAIN` rather than start a disk read. A short read means the
/// rest is not cached: `WouldBlock` too.
fn read_exact_at_cached(file: &File, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut done = 0usize;
    // Bounded: each turn reads at least one byte or returns.
    while done < buf.len() {
        let iov = libc::iovec {
            iov_base: buf[done..].as_mut_ptr().cast(),
            iov_len: buf.len() - done,
        };
        let offset = i64::try_from(offset_bytes + done as u64)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `iov` points into `buf`, which outlives the call, and the
        // kernel writes at most `iov_len` bytes there.
        let n = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
        match n {
            n if n > 0 => {
                done += n as usize;
                if done < buf.len() {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
            }
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            _ => {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BlockId;
    use proptest::prelude::*;

    /// However many segments there are, at most `MAX_OPEN_SEGMENT_FILES`
    /// files stay open, and every segment still reads back.
    #[test]
    fn open_files_are_bounded_and_closed_ones_reopen() {
        let dir = crate::testing::test_data::data_dir("segment-files");
        let store = FileSegmentStore::open(dir.path()).unwrap();
        let segments = 2 * MAX_OPEN_SEGMENT_FILES as u32 + 5;
        for id in 1..=segments {
            let byte = id as u8;
            store
                .write_at(SegmentId::new(id), 0, &[byte; 8192])
                .unwrap();
            assert!(store.files.read().len() <= MAX_OPEN_SEGMENT_FILES);
        }
        store.write_back().unwrap();
        for id in (1..=segments).rev() {
            let mut buf = [0u8; 8192];
            store.read_at(SegmentId::new(id), 0, &mut buf).unwrap();
            assert!(buf.iter().all(|&b| b == id as u8), "segment {id}");
        }
        assert!(store.files.read().len() <= MAX_OPEN_SEGMENT_FILES);
    }

    /// A read that comes as a segment is removed does not open its file again
    /// and keep it. The read runs on a thread of its own, given time to: it
    /// can only once the removal lets the handles go.
    #[test]
    fn a_read_racing_a_removal_keeps_no_handle_to_the_removed_file() {
        let dir = crate::testing::test_data::data_dir("segment-remove");
        let store = Arc::new(FileSegmentStore::open(dir.path()).unwrap());
        store.write_at(SegmentId::new(7), 0, &[1u8; 4096]).unwrap();
        store.write_back().unwrap();
        let reading = Arc::new(parking_lot::Mutex::new(None));
        let (hook_store, hook_reading) = (store.clone(), reading.clone());
        crate::testing::sync_points::set(
            crate::testing::sync_points::Point::SegmentRemoveBeforeUnlink,
            move || {
                let reader = std::thread::spawn(move || {
                    hook_store.read_at(SegmentId::new(7), 0, &mut [0u8; 512])
                });
                std::thread::sleep(std::time::Duration::from_millis(200));
                *hook_reading.lock() = Some(reader);
            },
        );

        store.remove(SegmentId::new(7)).unwrap();

        let reader = reading.lock().take().expect("the hook ran");
        let read = reader.join().unwrap();
        assert!(
            !store.files.read().contains_key(&SegmentId::new(7)),
            "no handle kept"
        );
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::NotFound);
        assert!(!store.path(SegmentId::new(7)).exists());
    }

    proptest! {
        /// Records written with either implementation verify with the other:
        /// both are CRC32C (Castagnoli), at every length and alignment.
        #[test]
        fn payload_crc_is_crc32c(bytes in proptest::collection::vec(any::<u8>(), 0..9000), skip in 0usize..16) {
            let payload = &bytes[skip.min(bytes.len())..];
            prop_assert_eq!(payload_crc(payload), crc32c::crc32c(payload));
        }

        /// Continuing a checksum is the checksum of both parts together.
        #[test]
        fn crc_append_continues_crc32c(
            first in proptest::collection::vec(any::<u8>(), 0..300),
            second in proptest::collection::vec(any::<u8>(), 0..5000),
        ) {
            let whole: Vec<u8> = first.iter().chain(&second).copied().collect();
            prop_assert_eq!(crc_append(crc32c::crc32c(&first), &second), crc32c::crc32c(&whole));
        }
    }

    #[test]
    fn payload_crc_has_the_crc32c_check_value() {
        assert_eq!(payload_crc(b"123456789"), 0xE306_9283);
        assert_eq!(payload_crc(b""), 0);
    }

    #[test]
    fn only_whole_pages_inside_freed_ranges_are_punched() {
        // Two adjacent dead records merge; a page shared with a live record is
        // never punched.
        let freed = vec![(8200, 4120), (100, 4120), (4220, 3980)];
        assert_eq!(punchable(freed), vec![(4096, 8192)]);
        assert_eq!(punchable(vec![(10, 4000)]), vec![]);
        assert_eq!(punchable(vec![(0, 4096), (4096, 4096)]), vec![(0, 8192)]);
    }

    #[test]
    fn record_round_trips_and_detects_a_flipped_bit() {
        let payload_crc = crc32c::crc32c(b"hello");
        for (flags, known_crc) in [
            (FLAG_COMPRESSED, None),
            (FLAG_COMPRESSED | FLAG_PAYLOAD_CRC_FIRST, None),
            (FLAG_COMPRESSED | FLAG_PAYLOAD_CRC_FIRST, Some(payload_crc)),
        ] {
            let header = RecordHeader {
                flags,
                payload_len: 5,
                block_id: BlockId::new(42),
            };
            let mut out = Vec::new();
            let crc = encode_record(header, b"hello", known_crc, &mut out);
            assert_eq!(out.len(), RECORD_HEADER_BYTES + 5);
            assert_eq!(verify_record(&out, header, crc).unwrap(), b"hello");
            for bit in 0..out.len() * 8 {
                let mut bad = out.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                assert!(verify_record(&bad, header, crc).is_err(), "bit {bit}");
            }
        }
    }

    #[test]
    fn both_checksum_orders_are_crc32c_of_the_record_bytes() {
        // Header first: records written before FLAG_PAYLOAD_CRC_FIRST still verify.
        let mut zeroed = Vec::new();
        let header = RecordHeader {
            flags: 0,
            payload_len: 3,
            block_id: BlockId::new(7),
        };
        let crc = encode_record(header, b"abc", None, &mut zeroed);
        zeroed[12..16].fill(0);
        assert_eq!(crc, crc32c::crc32c(&zeroed));
        // Payload first: the payload's CRC32C continued over the header.
        let mut out = Vec::new();
        let header = RecordHeader {
            flags: FLAG_PAYLOAD_CRC_FIRST,
            ..header
        };
        let crc = encode_record(header, b"abc", None, &mut out);
        out[12..16].fill(0);
        let mut reordered = out[RECORD_HEADER_BYTES..].to_vec();
        reordered.extend_from_slice(&out[..RECORD_HEADER_BYTES]);
        assert_eq!(crc, crc32c::crc32c(&reordered));
    }

    #[test]
    fn vectored_writes_land_as_one_run_of_bytes() {
        let dir = tempfile::Builder::new()
            .prefix("lacuna-seg-")
            .tempdir()
            .unwrap();
        let store = FileSegmentStore::open(dir.path()).unwrap();
        // More pieces than one pwritev takes, with empty ones among them,
        // past the tail's size; then a small run, which goes through the tail.
        let owned: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| vec![(i % 251) as u8; (i % 7) as usize * 13])
            .collect();
        let pieces: Vec<&[u8]> = owned.iter().map(|piece| &piece[..]).collect();
        let joined = pieces.concat();
        assert!(joined.len() > crate::segment::write_buffer::TAIL_WRITE_BYTES);
        store
            .write_vectored_at(SegmentId::new(5), 100, &pieces)
            .unwrap();
        let small: [&[u8]; 3] = [b"ab", b"", b"cde"];
        let small_at = 100 + joined.len() as u64;
        store
            .write_vectored_at(SegmentId::new(5), small_at, &small)
            .unwrap();
        let mut back = vec![0u8; joined.len() + 5];
        store.read_at(SegmentId::new(5), 100, &mut back).unwrap();
        assert_eq!(&back[..joined.len()], &joined[..]);
        assert_eq!(&back[joined.len()..], b"abcde");
        store.write_back().unwrap();
        assert_eq!(
            store.list().unwrap(),
            vec![(SegmentId::new(5), small_at + 5)]
        );
        let mut again = vec![0u8; back.len()];
        store.read_at(SegmentId::new(5), 100, &mut again).unwrap();
        assert_eq!(again, back);
    }

    #[test]
    fn file_store_writes_reads_truncates_and_removes() {
        let dir = tempfile::Builder::new()
            .prefix("lacuna-seg-")
            .tempdir()
            .unwrap();
        let store = FileSegmentStore::open(dir.path()).unwrap();
        store.write_at(SegmentId::new(3), 0, b"abcdef").unwrap();
        let mut buf = [0u8; 3];
        store.read_at(SegmentId::new(3), 2, &mut buf).unwrap();
        assert_eq!(&buf, b"cde");
        store.truncate(SegmentId::new(3), 4).unwrap();
        assert_eq!(store.list().unwrap(), vec![(SegmentId::new(3), 4)]);
        store.remove(SegmentId::new(3)).unwrap();
        assert!(store.list().unwrap().is_empty());
    }
}
