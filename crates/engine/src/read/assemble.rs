//! Filling a read's buffer, piece by piece: holes, patterns and blocks.
//!
//! Why spans: a sequential read finds most of its blocks' records side by
//! side in a segment (they were written together; a duplicate grain names a
//! record elsewhere), and reading them one `pread` a record cost a tenth of the
//! CPU of 1 MiB reads in system calls. A read's whole-grain blocks are gathered,
//! sorted by where their records lie, and each run of records close together
//! is read with one call (a span); then each record is verified and decoded
//! from it. Anything unusual (a failed span read, a record that does not
//! verify, say from a stale cached location) sends that record down the
//! one-record path, which decides what it is; so spans change how many calls
//! are made, never what a read returns or which errors are counted.

use crate::meta::schema::BlockRec;
use crate::versions::resolve::{Content, Reader};
use crate::write::classify;
use crate::write::uncommitted::PendingGrain;
use crate::{Engine, EngineError, Result, GRAIN_BYTES};

/// Most bytes read with one call.
const MAX_SPAN_BYTES: u64 = 1 << 20;

/// What fills a piece of a read: committed content, or a pending grain's.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Fill {
    Hole,
    Pattern(u64),
    /// A block, and where it is stored when it is not committed yet.
    Block(crate::ids::BlockId, Option<BlockRec>),
}

impl From<Content> for Fill {
    fn from(content: Content) -> Self {
        match content {
            Content::Hole => Fill::Hole,
            Content::Pattern(p) => Fill::Pattern(p),
            Content::Block(id) => Fill::Block(id, None),
        }
    }
}

impl From<PendingGrain> for Fill {
    fn from(held: PendingGrain) -> Self {
        match held {
            PendingGrain::Pattern(p) => Fill::Pattern(p),
            PendingGrain::Block { id, rec } => Fill::Block(id, Some(rec)),
        }
    }
}

/// Most whole-grain blocks gathered before they are read.
const MAX_GATHERED_BLOCKS: usize = 4096;
/// Most bytes between two records that one read covers rather than make two.
const MAX_SPAN_GAP_BYTES: u64 = GRAIN_BYTES;

/// How many of `blocks` (sorted by where their records lie) one read
/// covers: records of one segment, each beginning at most
/// [`MAX_SPAN_GAP_BYTES`] after the ones before end, within [`MAX_SPAN_BYTES`].
/// Several grains may name one record (dedup): it is read once.
fn span_len(blocks: &[SpanBlock]) -> usize {
    let first = &blocks[0];
    let mut end = first.end();
    let mut len = 1;
    for block in &blocks[1..] {
        let fits = block.rec.segment == first.rec.segment
            && block.start() <= end + MAX_SPAN_GAP_BYTES
            && block.end().max(end) - first.start() <= MAX_SPAN_BYTES;
        if !fits {
            break;
        }
        end = end.max(block.end());
        len += 1;
    }
    len
}

/// One whole grain waiting to be read.
struct SpanBlock {
    /// Where the grain goes in the caller's buffer.
    out_at: usize,
    id: crate::ids::BlockId,
    rec: BlockRec,
    /// The location came from the block location cache (and may be stale).
    cached: bool,
}

impl SpanBlock {
    fn start(&self) -> u64 {
        u64::from(self.rec.offset_bytes)
    }

    fn end(&self) -> u64 {
        self.start() + self.rec.record_bytes()
    }
}

/// The largest span buffer a thread keeps for its next read.
const KEPT_SPAN_BUF_BYTES: usize = 8 << 20;

thread_local! {
    /// The span buffer of this thread's last read, kept for its next: a 1 MiB
    /// read spans about as many bytes, and allocating and zeroing that for
    /// every read (fresh pages, each faulted in) cost 2% of the CPU of 1 MiB
    /// reads. Its bytes are only ever read after a read into them.
    static SPAN_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Fills one read's buffer. Work buffers are reused across grains: a read of
/// many blocks allocates them once, not once a grain.
pub(crate) struct Filler<'a> {
    engine: &'a Engine,
    label: &'a str,
    offset_bytes: u64,
    buf: &'a mut [u8],
    grain_buf: Vec<u8>,
    record_buf: Vec<u8>,
    gathered: Vec<SpanBlock>,
    span_buf: Vec<u8>,
}

impl Drop for Filler<'_> {
    fn drop(&mut self) {
        let span_buf = std::mem::take(&mut self.span_buf);
        if span_buf.capacity() <= KEPT_SPAN_BUF_BYTES {
            SPAN_BUF.with(|kept| *kept.borrow_mut() = span_buf);
        }
    }
}

impl<'a> Filler<'a> {
    pub(crate) fn new(
        engine: &'a Engine,
        label: &'a str,
        offset_bytes: u64,
        buf: &'a mut [u8],
    ) -> Self {
        Filler {
            engine,
            label,
            offset_bytes,
            buf,
            grain_buf: vec![0u8; GRAIN_BYTES as usize],
            record_buf: Vec::new(),
            gathered: Vec::new(),
            span_buf: SPAN_BUF.with(|kept| std::mem::take(&mut *kept.borrow_mut())),
        }
    }

    /// Fills grains [from, to) (clipped to the read) with `content`. A whole
    /// grain's block may be gathered and read later, by [`Filler::finish`] at
    /// the latest.
    pub(crate) fn fill(
        &mut self,
        reader: &mut Reader,
        from: crate::ids::GrainIndex,
        to: crate::ids::GrainIndex,
        content: Fill,
    ) -> Result<()> {
        let end_bytes = self.offset_bytes + self.buf.len() as u64;
        let run_from = (from.get() * GRAIN_BYTES).max(self.offset_bytes);
        let run_to = (to.get() * GRAIN_BYTES).min(end_bytes);
        let out_at = (run_from - self.offset_bytes) as usize;
        let out_len = (run_to - run_from) as usize;
        let in_grain = (run_from % GRAIN_BYTES) as usize;
        let (id, rec) = match content {
            Fill::Hole => {
                self.buf[out_at..out_at + out_len].fill(0);
                return Ok(());
            }
            Fill::Pattern(p) => {
                classify::fill_pattern(p, in_grain, &mut self.buf[out_at..out_at + out_len]);
                return Ok(());
            }
            Fill::Block(id, rec) => (id, rec),
        };
        assert_eq!(to, from + 1, "a block fills one grain");
        let out = &mut self.buf[out_at..out_at + out_len];
        if self.engine.caches.hot.copy_out(id, in_grain, out) {
            self.engine
                .stats
                .hot_grain_reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(());
        }
        // A pending block's location comes with it; a committed one's from
        // the cache, else the block table.
        let (rec, cached) = match rec {
            Some(rec) => (rec, false),
            None => match self.engine.caches.locations.get(id) {
                Some(rec) => (rec, true),
                None => (self.engine.look_up_block(reader, id)?, false),
            },
        };
        if out_len as u64 == GRAIN_BYTES {
            let block = SpanBlock {
                out_at,
                id,
                rec,
                cached,
            };
            self.gathered.push(block);
            if self.gathered.len() >= MAX_GATHERED_BLOCKS {
                self.read_gathered(reader)?;
            }
            return Ok(());
        }
        let mut grain_buf = std::mem::take(&mut self.grain_buf);
        let result = self.read_block(reader, id, rec, cached, run_from, &mut grain_buf);
        if result.is_ok() {
            self.buf[out_at..out_at + out_len]
                .copy_from_slice(&grain_buf[in_grain..in_grain + out_len]);
        }
        self.grain_buf = grain_buf;
        result
    }

    /// Reads the blocks still gathered.
    pub(crate) fn finish(mut self, reader: &mut Reader) -> Result<()> {
        self.read_gathered(reader)
    }

    /// Reads the gathered blocks: sorted by where their records lie, each run
    /// of records close together in one segment with one call.
    fn read_gathered(&mut self, reader: &mut Reader) -> Result<()> {
        let mut blocks = std::mem::take(&mut self.gathered);
        blocks.sort_unstable_by_key(|block| (block.rec.segment, block.rec.offset_bytes));
        let mut rest = &blocks[..];
        while !rest.is_empty() {
            let (span, after) = rest.split_at(span_len(rest));
            self.read_span(reader, span)?;
            rest = after;
        }
        blocks.clear();
        self.gathered = blocks;
        Ok(())
    }

    /// Reads a span's records with one call and decodes each into place; a
    /// record that cannot be had that way is read alone.
    fn read_span(&mut self, reader: &mut Reader, span: &[SpanBlock]) -> Result<()> {
        let start = span[0].start();
        let end = span
            .iter()
            .map(SpanBlock::end)
            .max()
            .expect("a span is never empty");
        let span_bytes = (end - start) as usize;
        let spanned = span.len() > 1 && {
            // Grown only: bytes past the span are left as they are, unread.
            if self.span_buf.len() < span_bytes {
                self.span_buf.resize(span_bytes, 0);
            }
            self.engine
                .stats
                .record_reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.engine
                .store
                .read_at(span[0].rec.segment, start, &mut self.span_buf[..span_bytes])
                .is_ok()
        };
        for block in span {
            let out = &mut self.buf[block.out_at..block.out_at + GRAIN_BYTES as usize];
            if spanned {
                let at = (block.start() - start) as usize;
                let record = &self.span_buf[at..at + block.rec.record_bytes() as usize];
                if self
                    .engine
                    .decode_record(block.id, block.rec, record, out)
                    .is_ok()
                {
                    self.engine.caches.hot.offer(block.id, out);
                    continue;
                }
            }
            // Alone, straight into the caller's buffer (lent out for the call).
            let grain_at = self.offset_bytes + block.out_at as u64;
            let buf = std::mem::take(&mut self.buf);
            let out = &mut buf[block.out_at..block.out_at + GRAIN_BYTES as usize];
            let result = self.read_block(reader, block.id, block.rec, block.cached, grain_at, out);
            self.buf = buf;
            result?;
        }
        Ok(())
    }

    /// One block's record read alone, into a whole grain `out`: from a stale
    /// cached location it falls back to the block table; a failure is counted
    /// and logged here, once.
    fn read_block(
        &mut self,
        reader: &mut Reader,
        id: crate::ids::BlockId,
        rec: BlockRec,
        cached: bool,
        at_bytes: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let engine = self.engine;
        let result = match engine.read_record(id, rec, &mut self.record_buf, out) {
            // Not in memory, and the caller would rather not wait: neither a
            // failure nor a sign that the location is stale.
            Err(error @ EngineError::WouldBlock(_)) => return Err(error),
            // A stale cache entry (the block moved): never data, and not an
            // error either. Read where the block table says.
            Err(_) if cached => {
                engine.caches.locations.forget(id);
                let rec = engine.look_up_block(reader, id)?;
                engine.read_record(id, rec, &mut self.record_buf, out)
            }
            result => result,
        };
        match result {
            Ok(()) => engine.caches.hot.offer(id, out),
            Err(EngineError::WouldBlock(_)) => return result,
            Err(_) => {}
        }
        result.inspect_err(|e| {
            engine.note_read_failure(self.label, at_bytes, e);
            tracing::error!(
                volume = %self.label,
                offset_bytes = at_bytes,
                length_bytes = GRAIN_BYTES,
                "read failed: {e}"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::ids::BlockId;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use crate::{Engine, Volume, GRAIN_BYTES};

    /// Grains written in one go: their records lie side by side.
    const GRAINS: u64 = 512;

    fn engine() -> (tempfile::TempDir, Arc<Engine>, Volume) {
        let dir = crate::testing::test_data::data_dir("fill");
        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        volume_of(dir, engine)
    }

    /// Every block read goes to its segment: none is kept (see `hot`).
    fn engine_reading_segments() -> (tempfile::TempDir, Arc<Engine>, Volume) {
        let dir = crate::testing::test_data::data_dir("fill");
        let engine = crate::testing::test_data::quiet_engine_reading_segments(dir.path(), 1 << 30);
        volume_of(dir, engine)
    }

    fn volume_of(
        dir: tempfile::TempDir,
        engine: Arc<Engine>,
    ) -> (tempfile::TempDir, Arc<Engine>, Volume) {
        engine.create_volume("v", 4 * GRAINS * GRAIN_BYTES).unwrap();
        let volume = engine.open_volume("v").unwrap();
        (dir, engine, volume)
    }

    fn record_reads(engine: &Engine) -> u64 {
        engine.stats.record_reads.load(Ordering::Relaxed)
    }

    fn read(volume: &Volume, offset_bytes: u64, length_bytes: u64) -> Vec<u8> {
        let mut buf = vec![0u8; length_bytes as usize];
        volume.read(offset_bytes, &mut buf).unwrap();
        buf
    }

    /// Drops the segment files' pages from the page cache (they are clean
    /// after a flush), as memory pressure would.
    fn evict_segments(dir: &std::path::Path) {
        use std::os::fd::AsRawFd;
        for entry in std::fs::read_dir(dir.join("segments")).unwrap() {
            let file = std::fs::File::open(entry.unwrap().path()).unwrap();
            // SAFETY: a plain system call on a descriptor this function owns.
            let rc =
                unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(rc, 0);
        }
    }

    /// Whether `read_from_memory` refuses once the segments' pages are evicted,
    /// in one of a few tries. Why tries: a `RWF_NOWAIT` read of a page that is
    /// not cached starts its readahead before it gives up (Linux ≥ 5.9), and on a fast disk
    /// under load that read can finish before the kernel's second look, which
    /// then finds the page and returns it (seen once in ~60 runs beside two
    /// other test binaries). A read that always waited would never refuse.
    fn refuses_once_evicted(
        dir: &std::path::Path,
        mut read_from_memory: impl FnMut() -> crate::Result<bool>,
    ) -> bool {
        const TRIES: usize = 8;
        (0..TRIES).any(|_| {
            evict_segments(dir);
            !read_from_memory().unwrap()
        })
    }

    #[test]
    fn a_read_that_must_not_wait_refuses_data_out_of_memory_and_counts_no_error() {
        // Grains read again and again would be kept (see `hot`) and read from
        // there, evicted pages or not: this is about the page cache.
        let (dir, engine, volume) = engine_reading_segments();
        let data = crate::testing::test_data::unique_bytes((GRAINS * GRAIN_BYTES) as usize, 3);
        volume.write(0, &data).unwrap();
        volume.flush().unwrap();
        let mut buf = vec![0u8; data.len()];
        assert!(
            volume.read_from_memory(0, &mut buf).unwrap(),
            "just written: in memory"
        );
        assert_eq!(buf, data);
        assert!(
            refuses_once_evicted(dir.path(), || volume.read_from_memory(0, &mut buf)),
            "evicted pages were read without waiting (is the temp dir on tmpfs?)"
        );
        assert_eq!(engine.stats.read_errors.load(Ordering::Relaxed), 0);
        assert_eq!(engine.stats.checksum_errors.load(Ordering::Relaxed), 0);
        // A read that may wait brings the data back, and then it is in memory.
        assert_eq!(read(&volume, 0, GRAINS * GRAIN_BYTES), data);
        buf.fill(0);
        assert!(volume.read_from_memory(0, &mut buf).unwrap());
        assert_eq!(buf, data);
        // A snapshot reads through the same path.
        engine.create_snapshots(&["v"], Some("s"), None).unwrap();
        let snapshot = engine.open_snapshot("v@s").unwrap();
        assert!(refuses_once_evicted(dir.path(), || snapshot.read_from_memory(0, &mut buf)));
        snapshot.read(0, &mut buf).unwrap();
        assert_eq!(buf, data);
        buf.fill(0);
        assert!(snapshot.read_from_memory(0, &mut buf).unwrap());
        assert_eq!(buf, data);
        assert_eq!(engine.stats.read_errors.load(Ordering::Relaxed), 0);
    }

    /// Writes and flushes unique grains where every fourth one (from grain
    /// 0) is a duplicate of grain 1; returns them.
    fn write_sharing_grain_one(volume: &Volume, seed: u64) -> Vec<u8> {
        let mut data =
            crate::testing::test_data::unique_bytes((GRAINS * GRAIN_BYTES) as usize, seed);
        let grain = GRAIN_BYTES as usize;
        let one = data[grain..2 * grain].to_vec();
        for at in (0..data.len()).step_by(4 * grain) {
            data[at..at + grain].copy_from_slice(&one);
        }
        volume.write(0, &data).unwrap();
        volume.flush().unwrap();
        data
    }

    #[test]
    fn adjacent_records_are_read_in_spans_not_one_call_each() {
        let (_dir, engine, volume) = engine();
        // Grains that name grain 1's record, out of the order of the read.
        let data = write_sharing_grain_one(&volume, 7);
        let before = record_reads(&engine);
        assert_eq!(read(&volume, 0, GRAINS * GRAIN_BYTES), data);
        let calls = record_reads(&engine) - before;
        // Under 2 MiB of records: two spans of at most 1 MiB, and a third
        // where the last record did not fit.
        let most_calls = (GRAINS * (GRAIN_BYTES + 64)).div_ceil(super::MAX_SPAN_BYTES) + 1;
        assert!(
            (1..=most_calls).contains(&calls),
            "{calls} calls for {GRAINS} adjacent records"
        );
        // A read that starts and ends inside grains, over holes too.
        let from = 3 * GRAIN_BYTES + 100;
        let to = (GRAINS + 5) * GRAIN_BYTES - 7;
        let mut expected = data[from as usize..].to_vec();
        expected.resize((to - from) as usize, 0);
        assert_eq!(read(&volume, from, to - from), expected);
        engine.close().unwrap();
    }

    #[test]
    fn a_block_reads_keep_coming_back_to_is_read_from_memory_after() {
        let (_dir, engine, volume) = engine();
        // One block, named 129 times: the first read of it keeps its grain.
        let mut data = write_sharing_grain_one(&volume, 9);
        let grain = GRAIN_BYTES as usize;
        let hot_reads = || engine.stats.hot_grain_reads.load(Ordering::Relaxed);
        assert_eq!(read(&volume, 0, GRAINS * GRAIN_BYTES), data);
        let before = hot_reads();
        assert_eq!(read(&volume, 0, GRAINS * GRAIN_BYTES), data);
        let shared = GRAINS / 4 + 1;
        assert_eq!(
            hot_reads() - before,
            shared,
            "only the shared block is kept"
        );
        // Parts of the kept grain, alone and across its neighbours.
        let from = 4 * GRAIN_BYTES + 1000;
        assert_eq!(read(&volume, from, 100), data[from as usize..][..100]);
        let from = 3 * GRAIN_BYTES + 5;
        let to = 5 * GRAIN_BYTES + 9;
        assert_eq!(
            read(&volume, from, to - from),
            data[from as usize..to as usize]
        );
        // Written over, the grains name new blocks: the kept grain is not read.
        let new = crate::testing::test_data::unique_bytes(8 * grain, 10);
        volume.write(0, &new).unwrap();
        data[..new.len()].copy_from_slice(&new);
        assert_eq!(read(&volume, 0, GRAINS * GRAIN_BYTES), data);
        engine.close().unwrap();
    }

    /// A span holding a record that does not verify (a stale cached location,
    /// here another block's record) reads every grain right: that record goes
    /// down the one-record path, which finds the block in the block table.
    #[test]
    fn a_record_in_a_span_that_does_not_verify_is_read_alone() {
        let (_dir, engine, volume) = engine();
        let data = crate::testing::test_data::unique_bytes((GRAINS * GRAIN_BYTES) as usize, 8);
        volume.write(0, &data).unwrap();
        volume.flush().unwrap();
        assert_eq!(read(&volume, 0, GRAINS * GRAIN_BYTES), data);
        let rows = crate::testing::test_data::block_rows(&engine);
        // The 10th block's cached location keeps its place in the span but
        // not its checksum, as if the block had moved and its old place been
        // written again.
        let (id, right) = rows[10];
        let mut wrong = right;
        wrong.crc ^= 1;
        engine.caches.locations.insert(BlockId::new(id), &wrong);
        let errors = engine.stats.checksum_errors.load(Ordering::Relaxed);
        assert_eq!(read(&volume, 0, GRAINS * GRAIN_BYTES), data);
        assert_eq!(
            engine.stats.checksum_errors.load(Ordering::Relaxed),
            errors,
            "a stale location is not an error"
        );
        let cached = engine
            .caches
            .locations
            .get(BlockId::new(id))
            .expect("looked up again");
        assert_eq!(
            cached.crc, right.crc,
            "the block table's location is cached"
        );
        engine.close().unwrap();
    }
}
