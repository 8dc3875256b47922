//! Segment tails: small appends gathered in memory and written to their
//! segment file [`TAIL_WRITE_BYTES`] at a time.
//!
//! Why: a 4 KiB host write appends one record of about 2 KiB (compressed), and
//! writing each with its own `pwrite` cost 8% of the daemon's CPU at 4 KiB
//! writes (perf: the system call, and ext4 allocating each new page cache page
//! and zeroing the part of it the record does not fill). Gathered, a 64 KiB
//! write covers about thirty records in whole pages.
//!
//! What keeps it invisible and safe (the rules live in the store and in
//! [`crate::meta::store::Kv::commit`]):
//! - a read of a segment sees a tail's bytes over the file's, so nothing that
//!   reads records (host reads, dedup compares, cleaning, scrub) can tell;
//! - syncing a segment writes its tail first, so the durable commit's segment
//!   sync covers it as before;
//! - every metadata commit first writes every tail to its file
//!   ([`crate::segment::log::SegmentStore::write_back`]): no commit may name record
//!   bytes that exist only in this process, because a later durable commit
//!   would make the commit durable and a crash (SIGKILL) would lose the bytes.
//!
//! Until then the bytes are as safe as the open write transaction that names
//! them (also in memory only): acknowledged, not yet flushed. A tail that
//! cannot be written fails what wrote it out — the append that filled it, a
//! sync or a commit — and stays in memory, still read by reads.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::segment::log::SegmentId;

/// A tail is written out once it holds this much; appends this large or
/// larger bypass the tail.
pub const TAIL_WRITE_BYTES: usize = 64 * 1024;
/// Most segments with a tail at once (appends go to the open segment and the
/// cleaner's; more would mean a caller appending all over the place).
const MAX_TAILS: usize = 8;
// Appends below the write size gather; a whole record of one grain always can.
const _: () = assert!(
    crate::segment::log::RECORD_HEADER_BYTES + (crate::GRAIN_BYTES as usize) < TAIL_WRITE_BYTES
);

/// Bytes appended to a segment and not yet written to its file.
struct Tail {
    start_bytes: u64,
    bytes: Vec<u8>,
}

impl Tail {
    fn end_bytes(&self) -> u64 {
        self.start_bytes + self.bytes.len() as u64
    }

    fn write_to(&self, file: &File) -> io::Result<()> {
        file.write_all_at(&self.bytes, self.start_bytes)
    }
}

/// Which segments may have a tail, readable without the lock around
/// [`Tails`]: bit `segment % 64` is set while a segment with that remainder has
/// one. A read of a segment whose bit is clear reads the file alone, taking no
/// lock (at 4 KiB reads on both cores that shared lock is not free).
///
/// Why a read can trust a clear bit: it reads where metadata says a record is,
/// and metadata names a record only after `write_at` returned, which set the
/// bit first; the bit clears only after the tail is in the file.
#[derive(Default)]
pub struct TailMask(AtomicU64);

impl TailMask {
    fn bit(segment: SegmentId) -> u64 {
        1 << (segment.get() % 64)
    }

    pub fn may_have_tail(&self, segment: SegmentId) -> bool {
        self.0.load(Ordering::SeqCst) & Self::bit(segment) != 0
    }
}

/// The tails of one store.
#[derive(Default)]
pub struct Tails {
    by_segment: HashMap<SegmentId, Tail>,
    /// Buffers of tails written out, for the next tails (a fresh 64 KiB buffer
    /// is a fresh page fault per 4 KiB of it).
    spare: Vec<Vec<u8>>,
}

impl Tails {
    /// Appends `data` at `offset_bytes` of `segment` to its tail, writing the
    /// tail out first if `data` does not continue it, and after if it is full.
    /// `data` must be shorter than [`TAIL_WRITE_BYTES`].
    pub fn append(
        &mut self,
        mask: &TailMask,
        segment: SegmentId,
        file: &File,
        offset_bytes: u64,
        data: &[u8],
    ) -> io::Result<()> {
        assert!(data.len() < TAIL_WRITE_BYTES);
        let continues = self
            .by_segment
            .get(&segment)
            .is_some_and(|tail| tail.end_bytes() == offset_bytes);
        if !continues {
            self.write_out(mask, segment, file)?;
            if self.by_segment.len() >= MAX_TAILS {
                // Never expected; written through rather than grow the list.
                return file.write_all_at(data, offset_bytes);
            }
            let mut bytes = self.spare.pop().unwrap_or_default();
            bytes.clear();
            bytes.reserve(TAIL_WRITE_BYTES * 2);
            let tail = Tail {
                start_bytes: offset_bytes,
                bytes,
            };
            mask.0.fetch_or(TailMask::bit(segment), Ordering::SeqCst);
            self.by_segment.insert(segment, tail);
        }
        let tail = self.by_segment.get_mut(&segment).expect("the tail exists");
        tail.bytes.extend_from_slice(data);
        if tail.bytes.len() >= TAIL_WRITE_BYTES {
            self.write_out(mask, segment, file)?;
        }
        assert!(self.by_segment.len() <= MAX_TAILS);
        Ok(())
    }

    /// Writes `segment`'s tail, if it has one, to its file. On failure the
    /// tail stays (reads still see it).
    pub fn write_out(
        &mut self,
        mask: &TailMask,
        segment: SegmentId,
        file: &File,
    ) -> io::Result<()> {
        let Some(tail) = self.by_segment.get(&segment) else {
            return Ok(());
        };
        tail.write_to(file)?;
        let tail = self.by_segment.remove(&segment).expect("the tail exists");
        self.clear_bit_if_unused(mask, segment);
        if self.spare.len() < MAX_TAILS {
            self.spare.push(tail.bytes);
        }
        Ok(())
    }

    /// Bytes held in tails: they will land on the filesystem, so its free
    /// space is counted without them (see `room`).
    pub fn held_bytes(&self) -> u64 {
        self.by_segment
            .values()
            .map(|tail| tail.bytes.len() as u64)
            .sum()
    }

    /// Segments that have a tail.
    pub fn segments(&self) -> Vec<SegmentId> {
        self.by_segment.keys().copied().collect()
    }

    /// Forgets `segment`'s tail unwritten (the segment is being removed).
    pub fn discard(&mut self, mask: &TailMask, segment: SegmentId) {
        self.by_segment.remove(&segment);
        self.clear_bit_if_unused(mask, segment);
    }

    fn clear_bit_if_unused(&self, mask: &TailMask, segment: SegmentId) {
        let bit = TailMask::bit(segment);
        if !self
            .by_segment
            .keys()
            .any(|&other| TailMask::bit(other) == bit)
        {
            mask.0.fetch_and(!bit, Ordering::SeqCst);
        }
    }

    /// Whether a read of `len_bytes` at `offset_bytes` of `segment` touches
    /// its tail.
    pub fn overlaps(&self, segment: SegmentId, offset_bytes: u64, len_bytes: usize) -> bool {
        self.by_segment.get(&segment).is_some_and(|tail| {
            offset_bytes < tail.end_bytes() && tail.start_bytes < offset_bytes + len_bytes as u64
        })
    }

    /// Reads `buf` at `offset_bytes` of `segment`: the tail's bytes where it
    /// has them, the file's elsewhere.
    pub fn read(
        &self,
        segment: SegmentId,
        file: &File,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> io::Result<()> {
        let tail = self
            .by_segment
            .get(&segment)
            .expect("the read overlaps a tail");
        let end_bytes = offset_bytes + buf.len() as u64;
        let from = tail.start_bytes.max(offset_bytes);
        let to = tail.end_bytes().min(end_bytes);
        assert!(from < to, "the read overlaps the tail");
        let before = (from - offset_bytes) as usize;
        let after = (to - offset_bytes) as usize;
        if before > 0 {
            file.read_exact_at(&mut buf[..before], offset_bytes)?;
        }
        let in_tail = (from - tail.start_bytes) as usize;
        buf[before..after].copy_from_slice(&tail.bytes[in_tail..in_tail + (after - before)]);
        if after < buf.len() {
            file.read_exact_at(&mut buf[after..], to)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::log::{FileSegmentStore, SegmentStore};

    fn store() -> (tempfile::TempDir, FileSegmentStore) {
        let dir = crate::testing::test_data::data_dir("tail");
        let store = FileSegmentStore::open(dir.path()).unwrap();
        (dir, store)
    }

    fn file_len(dir: &tempfile::TempDir, segment: SegmentId) -> u64 {
        let path = dir.path().join(format!("{segment:08}.seg"));
        std::fs::metadata(path).unwrap().len()
    }

    fn record(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(seed) ^ seed)
            .collect()
    }

    #[test]
    fn small_appends_gather_and_read_back_before_and_after_they_are_written() {
        let (dir, store) = store();
        let records: Vec<Vec<u8>> = (1..=40).map(|seed| record(seed, 2100)).collect();
        let mut at = 0u64;
        let mut written_out_at = None;
        for (i, bytes) in records.iter().enumerate() {
            store.write_at(SegmentId::new(1), at, bytes).unwrap();
            at += bytes.len() as u64;
            let on_disk = file_len(&dir, SegmentId::new(1));
            if on_disk > 0 && written_out_at.is_none() {
                written_out_at = Some(i);
                assert!(on_disk >= TAIL_WRITE_BYTES as u64, "whole tails go out");
            }
        }
        let first_out = written_out_at.expect("a full tail was written out");
        assert!(
            first_out > 20,
            "about 64 KiB gathered first, not {first_out} records"
        );
        assert!(
            file_len(&dir, SegmentId::new(1)) < at,
            "the last records are still in the tail"
        );
        // Every record reads back, and so does a range across file and tail.
        let mut start = 0u64;
        for bytes in &records {
            let mut back = vec![0u8; bytes.len()];
            store.read_at(SegmentId::new(1), start, &mut back).unwrap();
            assert_eq!(&back, bytes);
            start += bytes.len() as u64;
        }
        let mut all = vec![0u8; at as usize];
        store.read_at(SegmentId::new(1), 0, &mut all).unwrap();
        assert_eq!(all, records.concat());
        // Reading past what was appended fails as a file read would.
        let mut past = vec![0u8; 10];
        assert!(store.read_at(SegmentId::new(1), at - 5, &mut past).is_err());
        store.sync(SegmentId::new(1)).unwrap();
        assert_eq!(
            file_len(&dir, SegmentId::new(1)),
            at,
            "sync writes the tail"
        );
    }

    #[test]
    fn write_back_writes_every_tail_and_a_removed_segment_forgets_its_own() {
        let (dir, store) = store();
        store
            .write_at(SegmentId::new(1), 0, &record(1, 100))
            .unwrap();
        store
            .write_at(SegmentId::new(2), 0, &record(2, 200))
            .unwrap();
        store
            .write_at(SegmentId::new(3), 0, &record(3, 300))
            .unwrap();
        store.remove(SegmentId::new(3)).unwrap();
        assert_eq!(
            (
                file_len(&dir, SegmentId::new(1)),
                file_len(&dir, SegmentId::new(2))
            ),
            (0, 0)
        );
        store.write_back().unwrap();
        assert_eq!(
            (
                file_len(&dir, SegmentId::new(1)),
                file_len(&dir, SegmentId::new(2))
            ),
            (100, 200)
        );
        assert!(!dir.path().join(format!("{:08}.seg", 3)).exists());
        assert_eq!(
            store.list().unwrap(),
            vec![(SegmentId::new(1), 100), (SegmentId::new(2), 200)]
        );
    }

    #[test]
    fn held_bytes_and_the_mask_follow_the_tails() {
        let dir = crate::testing::test_data::data_dir("tail-held");
        let file = File::create(dir.path().join("f")).unwrap();
        let (mut tails, mask) = (Tails::default(), TailMask::default());
        tails
            .append(&mask, SegmentId::new(1), &file, 0, &[1u8; 100])
            .unwrap();
        tails
            .append(&mask, SegmentId::new(65), &file, 0, &[2u8; 200])
            .unwrap();
        tails
            .append(&mask, SegmentId::new(1), &file, 100, &[1u8; 50])
            .unwrap();
        assert_eq!(tails.held_bytes(), 350);
        assert!(
            mask.may_have_tail(SegmentId::new(1))
                && mask.may_have_tail(SegmentId::new(65))
                && !mask.may_have_tail(SegmentId::new(2))
        );
        tails.write_out(&mask, SegmentId::new(1), &file).unwrap();
        assert_eq!(tails.held_bytes(), 200);
        assert!(
            mask.may_have_tail(SegmentId::new(1)),
            "segment 65 shares the bit"
        );
        tails.discard(&mask, SegmentId::new(65));
        assert_eq!(tails.held_bytes(), 0);
        assert!(!mask.may_have_tail(SegmentId::new(1)) && !mask.may_have_tail(SegmentId::new(65)));
    }

    #[test]
    fn an_append_elsewhere_or_a_large_one_keeps_the_order_of_writes() {
        let (dir, store) = store();
        store.write_at(SegmentId::new(1), 0, &[1u8; 1000]).unwrap();
        // Not continuing the tail: the tail goes out first, then this one
        // (which overwrites part of it) starts a new tail.
        store
            .write_at(SegmentId::new(1), 500, &[2u8; 1000])
            .unwrap();
        assert_eq!(file_len(&dir, SegmentId::new(1)), 1000);
        // A large append writes the tail out first, then goes straight to the file.
        store
            .write_at(SegmentId::new(1), 1500, &vec![3u8; TAIL_WRITE_BYTES])
            .unwrap();
        let end = 1500 + TAIL_WRITE_BYTES as u64;
        assert_eq!(file_len(&dir, SegmentId::new(1)), end);
        let mut all = vec![0u8; end as usize];
        store.read_at(SegmentId::new(1), 0, &mut all).unwrap();
        assert!(all[..500].iter().all(|&b| b == 1));
        assert!(all[500..1500].iter().all(|&b| b == 2));
        assert!(all[1500..].iter().all(|&b| b == 3));
        // Truncation writes the tail first, so it cuts what was appended.
        store.write_at(SegmentId::new(1), end, &[4u8; 100]).unwrap();
        store.truncate(SegmentId::new(1), end + 50).unwrap();
        assert_eq!(store.list().unwrap(), vec![(SegmentId::new(1), end + 50)]);
    }

    #[test]
    fn a_metadata_commit_never_leaves_bytes_in_a_tail() {
        let dir = crate::testing::test_data::data_dir("tail-kv");
        let store =
            std::sync::Arc::new(FileSegmentStore::open(&dir.path().join("segments")).unwrap());
        let (db, syncs) = crate::meta::file::open(&dir.path().join("meta.redb"), 1 << 20).unwrap();
        let kv = crate::meta::store::Kv::new(db, syncs, store.clone(), 0);
        store
            .write_at(SegmentId::new(7), 0, &record(7, 3000))
            .unwrap();
        let segment = dir.path().join("segments").join(format!("{:08}.seg", 7));
        assert_eq!(std::fs::metadata(&segment).unwrap().len(), 0);
        let txn = kv.begin_write().unwrap();
        kv.commit(txn, crate::meta::mapping_cache::ChangedMappings::NONE)
            .unwrap();
        assert_eq!(std::fs::metadata(&segment).unwrap().len(), 3000);
    }
}
