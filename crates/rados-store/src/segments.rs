//! The engine's segment log as RADOS objects: segment N is object
//! `seg.NNNNNNNN` of the shard's namespace, written at the same offsets as a
//! `.seg` file, so the records, their checksums and recovery are the engine's
//! own (docs/FORMAT.md).
//!
//! Small appends are gathered in a tail buffer (at most [`TAIL_BYTES`], one
//! segment's consecutive bytes) and sent as one op when the next append does
//! not follow on, when it is full, or when something must see them: the
//! cluster serves a few large ops far sooner than many small ones. Appends
//! are sent without waiting (`rados_aio_write_op_operate`) and kept in
//! flight, at most [`MAX_IN_FLIGHT_BYTES`] of them: a host write costs the
//! writer a copy, not a round trip under the writer mutex. A read of bytes in
//! the tail is answered from it.
//! Everything that must see them waits first: `sync` (the engine's rule,
//! segment data durable before the metadata that names it), a read of a
//! range still in flight, a truncate or removal of its segment, the
//! listing, and [`RadosSegmentStore::drain`], which the metadata backend calls
//! before it sends pages (so no metadata on the cluster names bytes that only
//! this process holds). A failed append makes every later call fail: the
//! engine fences the array, and a restart recovers to the last durable
//! commit.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

use lacuna_engine::segment::log::{SegmentId, SegmentStore};
use lacuna_rados::{IoCtx, PendingWrite, RadosError};
use parking_lot::Mutex;

/// Most segment objects a shard's namespace may list at open.
const MAX_SEGMENTS: usize = 1 << 22;
const PREFIX: &str = "seg.";
/// Bytes of appends in flight before a new one waits for the oldest.
pub const MAX_IN_FLIGHT_BYTES: u64 = 64 << 20;
/// Ops in flight before a new one waits for the oldest (below librados's
/// own throttle, so that waits happen here, where they are bounded).
const MAX_IN_FLIGHT_WRITES: usize = 512;
/// Freed ranges of one segment zeroed by one op: a freed 4 KiB record per
/// host overwrite would otherwise double the ops the cluster serves.
const HOLES_PER_ZEROING: usize = 256;
/// Freed ranges held for later zeroing, over all segments.
const MAX_HELD_HOLES: usize = 16 * HOLES_PER_ZEROING;
/// Most bytes the tail buffer gathers, large appends too: an OSD's cost is
/// mostly per op (a 1 MiB host write's compressed run alone in an op cost
/// it several times its share of one 4 MiB op, and the cores it took were
/// the gateway's), and the bytes wait for nothing but a sync or a read.
pub const TAIL_BYTES: usize = 4 << 20;
/// An append this large starts a tail sized for [`TAIL_BYTES`] at once (a
/// stream of large writes fills it without reallocating); a smaller one
/// starts a tail of this size, grown as it fills.
const LARGE_APPEND_BYTES: usize = 64 << 10;

pub struct RadosSegmentStore {
    io: Arc<IoCtx>,
    in_flight: Mutex<InFlight>,
    /// Freed ranges not yet zeroed, by segment: best effort (a crash loses
    /// them, and the cleaner frees their segment whole in the end).
    holes: Mutex<Holes>,
    /// Appends not yet sent. Held while its bytes are sent and listed in
    /// flight, so that a reader finds them in one place or the other.
    tail: Mutex<Option<Tail>>,
    /// Append ops sent.
    appends_sent: std::sync::atomic::AtomicU64,
}

struct Tail {
    segment: SegmentId,
    start_bytes: u64,
    bytes: Vec<u8>,
}

impl Tail {
    fn end_bytes(&self) -> u64 {
        self.start_bytes + self.bytes.len() as u64
    }
}

#[derive(Default)]
struct Holes {
    by_segment: std::collections::HashMap<SegmentId, Vec<(u64, u64)>>,
    count: usize,
}

#[derive(Default)]
struct InFlight {
    /// Oldest first.
    writes: VecDeque<Append>,
    bytes: u64,
    /// The first append the cluster refused; sticky.
    failed: Option<RadosError>,
}

struct Append {
    /// A punch's zeroing, not an append: refused for a segment already
    /// gone, which is no failure.
    zeroing: bool,
    segment: SegmentId,
    start_bytes: u64,
    end_bytes: u64,
    pending: Arc<PendingWrite>,
}

impl RadosSegmentStore {
    pub fn new(io: Arc<IoCtx>) -> RadosSegmentStore {
        RadosSegmentStore {
            io,
            in_flight: Mutex::new(InFlight::default()),
            holes: Mutex::new(Holes::default()),
            tail: Mutex::new(None),
            appends_sent: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn object(segment: SegmentId) -> String {
        format!("{PREFIX}{:08}", segment.get())
    }

    /// Sends the tail and waits for every append in flight; the first
    /// refusal if there was one.
    pub fn drain(&self) -> io::Result<()> {
        self.send_tail(None)?;
        self.wait_for(|_| true)
    }

    /// Sends the tail if it holds bytes of `segment` (of any, for `None`).
    fn send_tail(&self, segment: Option<SegmentId>) -> io::Result<()> {
        let mut tail = self.tail.lock();
        match tail.as_ref() {
            Some(t) if segment.is_none_or(|s| s == t.segment) => self.send_tail_locked(&mut tail),
            _ => Ok(()),
        }
    }

    fn send_tail_locked(&self, tail: &mut Option<Tail>) -> io::Result<()> {
        match tail.take() {
            Some(t) => self.send_append(t.segment, t.start_bytes, &t.bytes),
            None => Ok(()),
        }
    }

    /// Sends one append as one op with one extent, without waiting.
    fn send_append(&self, segment: SegmentId, offset_bytes: u64, run: &[u8]) -> io::Result<()> {
        let len_bytes = run.len() as u64;
        self.make_room(len_bytes)?;
        let pending = self
            .io
            .aio_write_pieces(&Self::object(segment), &[(offset_bytes, run)])?;
        self.appends_sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.track(Append {
            zeroing: false,
            segment,
            start_bytes: offset_bytes,
            end_bytes: offset_bytes + len_bytes,
            pending: Arc::new(pending),
        });
        Ok(())
    }

    /// Lists a sent op as in flight.
    fn track(&self, append: Append) {
        let mut in_flight = self.in_flight.lock();
        in_flight.bytes += append.end_bytes - append.start_bytes;
        in_flight.writes.push_back(append);
    }

    /// Append ops sent so far.
    pub fn appends_sent(&self) -> u64 {
        self.appends_sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes of appends not yet answered.
    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight.lock().bytes
    }

    /// Waits for the appends in flight that `wanted` picks; fails if any of
    /// them (or any append before) was refused.
    fn wait_for(&self, wanted: impl Fn(&Append) -> bool) -> io::Result<()> {
        let waiting: Vec<(bool, Arc<PendingWrite>)> = {
            let in_flight = self.in_flight.lock();
            in_flight
                .writes
                .iter()
                .filter(|append| wanted(append))
                .map(|append| (append.zeroing, append.pending.clone()))
                .collect()
        };
        let refused = waiting
            .iter()
            .find_map(|(zeroing, pending)| refusal(*zeroing, pending.wait()));
        if let Some(error) = refused {
            let mut in_flight = self.in_flight.lock();
            in_flight.failed.get_or_insert(error);
        }
        self.reap()
    }

    /// Forgets the answered appends at the front (they mostly answer in
    /// order; one answered behind an unanswered one goes with it later);
    /// fails if any append was ever refused.
    fn reap(&self) -> io::Result<()> {
        let mut in_flight = self.in_flight.lock();
        while let Some(append) = in_flight.writes.front() {
            if !append.pending.is_complete() {
                break;
            }
            let append = in_flight.writes.pop_front().expect("a front");
            in_flight.bytes -= append.end_bytes - append.start_bytes;
            if let Some(e) = refusal(append.zeroing, append.pending.wait()) {
                in_flight.failed.get_or_insert(e);
            }
        }
        match &in_flight.failed {
            Some(error) => Err(error.clone().into()),
            None => Ok(()),
        }
    }

    /// Keeps what is in flight under its bounds, waiting for the oldest.
    fn make_room(&self, bytes: u64) -> io::Result<()> {
        loop {
            let oldest = {
                let in_flight = self.in_flight.lock();
                let over = in_flight.bytes + bytes > MAX_IN_FLIGHT_BYTES
                    || in_flight.writes.len() >= MAX_IN_FLIGHT_WRITES;
                match in_flight.writes.front() {
                    Some(append) if over => Some(append.pending.clone()),
                    _ => None,
                }
            };
            let Some(oldest) = oldest else {
                return self.reap();
            };
            let _ = oldest.wait();
            self.reap()?;
        }
    }

    fn wait_for_segment(&self, segment: SegmentId) -> io::Result<()> {
        self.wait_for(|append| append.segment == segment)
    }

    /// Sends one op zeroing `ranges` of `segment`, without waiting.
    fn zero(&self, segment: SegmentId, ranges: &[(u64, u64)]) -> io::Result<()> {
        self.send_tail(Some(segment))?;
        self.make_room(0)?;
        let pending = self.io.aio_zero(&Self::object(segment), ranges)?;
        // Bounded by count; it holds no bytes.
        self.track(Append {
            zeroing: true,
            segment,
            start_bytes: 0,
            end_bytes: 0,
            pending: Arc::new(pending),
        });
        Ok(())
    }

    /// Forgets the freed ranges held for `segment` (it is going whole).
    fn forget_holes(&self, segment: SegmentId) {
        let mut holes = self.holes.lock();
        if let Some(list) = holes.by_segment.remove(&segment) {
            holes.count -= list.len();
        }
    }
}

/// The error an answer carries, if it is one.
fn refusal(zeroing: bool, answer: Result<(), RadosError>) -> Option<RadosError> {
    match answer {
        Err(e) if zeroing && e.is_not_found() => None,
        Err(e) => Some(e),
        Ok(()) => None,
    }
}

impl Drop for RadosSegmentStore {
    fn drop(&mut self) {
        if let Err(e) = self.drain() {
            eprintln!("segment writes in flight at close: {e}");
        }
    }
}

impl SegmentStore for RadosSegmentStore {
    fn write_at(&self, segment: SegmentId, offset_bytes: u64, data: &[u8]) -> io::Result<()> {
        self.write_vectored_at(segment, offset_bytes, &[data])
    }

    /// Gathered in the tail when it follows on from it; otherwise the tail
    /// is sent, and this run becomes the tail, or is sent by itself when
    /// larger than a tail. A tail is one op with one extent: its pieces land together or
    /// not at all (an OSD applies each extent of an op on its own, so a run
    /// of grain headers and payloads sent as pieces cost it several times
    /// one extent).
    fn write_vectored_at(
        &self,
        segment: SegmentId,
        offset_bytes: u64,
        pieces: &[&[u8]],
    ) -> io::Result<()> {
        let len_bytes: usize = pieces.iter().map(|piece| piece.len()).sum();
        if len_bytes == 0 {
            return Ok(());
        }
        let mut tail = self.tail.lock();
        if let Some(t) = tail.as_mut() {
            if t.segment == segment
                && t.end_bytes() == offset_bytes
                && t.bytes.len() + len_bytes <= TAIL_BYTES
            {
                for piece in pieces {
                    t.bytes.extend_from_slice(piece);
                }
                return Ok(());
            }
        }
        self.send_tail_locked(&mut tail)?;
        let capacity_bytes = if len_bytes >= LARGE_APPEND_BYTES {
            TAIL_BYTES.max(len_bytes)
        } else {
            LARGE_APPEND_BYTES
        };
        let mut run = Vec::with_capacity(capacity_bytes);
        for piece in pieces {
            run.extend_from_slice(piece);
        }
        if run.len() >= TAIL_BYTES {
            return self.send_append(segment, offset_bytes, &run);
        }
        self.reap()?;
        *tail = Some(Tail {
            segment,
            start_bytes: offset_bytes,
            bytes: run,
        });
        Ok(())
    }

    fn read_at(&self, segment: SegmentId, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        let end_bytes = offset_bytes + buf.len() as u64;
        {
            let mut tail = self.tail.lock();
            if let Some(t) = tail.as_ref() {
                if t.segment == segment && offset_bytes < t.end_bytes() && t.start_bytes < end_bytes
                {
                    if t.start_bytes <= offset_bytes && end_bytes <= t.end_bytes() {
                        let from = (offset_bytes - t.start_bytes) as usize;
                        buf.copy_from_slice(&t.bytes[from..from + buf.len()]);
                        return Ok(());
                    }
                    self.send_tail_locked(&mut tail)?;
                }
            }
        }
        self.wait_for(|append| {
            append.segment == segment
                && append.start_bytes < end_bytes
                && offset_bytes < append.end_bytes
        })?;
        let got = self.io.read(&Self::object(segment), offset_bytes, buf)?;
        if got < buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{} holds {got} of the {} bytes at {offset_bytes}",
                    Self::object(segment),
                    buf.len()
                ),
            ));
        }
        Ok(())
    }

    /// Waits for the segment's appends: each is on every replica once answered.
    fn sync(&self, segment: SegmentId) -> io::Result<()> {
        self.send_tail(Some(segment))?;
        self.wait_for_segment(segment)
    }

    fn truncate(&self, segment: SegmentId, length_bytes: u64) -> io::Result<()> {
        self.send_tail(Some(segment))?;
        self.wait_for_segment(segment)?;
        Ok(self.io.truncate(&Self::object(segment), length_bytes)?)
    }

    fn remove(&self, segment: SegmentId) -> io::Result<()> {
        self.forget_holes(segment);
        // The tail's bytes of a segment going whole need never be sent.
        let mut tail = self.tail.lock();
        if tail.as_ref().is_some_and(|t| t.segment == segment) {
            *tail = None;
        }
        drop(tail);
        self.wait_for_segment(segment)?;
        Ok(self.io.remove(&Self::object(segment))?)
    }

    /// Zeroed ranges are given back to the OSD's store, up to
    /// [`HOLES_PER_ZEROING`] of a segment at a time, in one op sent without
    /// waiting, and without waiting for the segment's appends: the cluster
    /// applies one client's ops to an object in the order they were sent,
    /// and a freed range is never written again.
    fn punch(&self, segment: SegmentId, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        let due = {
            let mut holes = self.holes.lock();
            let list = holes.by_segment.entry(segment).or_default();
            list.push((offset_bytes, length_bytes));
            let full = list.len() >= HOLES_PER_ZEROING;
            holes.count += 1;
            let due_segment = if full {
                Some(segment)
            } else if holes.count > MAX_HELD_HOLES {
                holes
                    .by_segment
                    .iter()
                    .max_by_key(|(_, list)| list.len())
                    .map(|(segment, _)| *segment)
            } else {
                None
            };
            due_segment.map(|segment| {
                let list = holes.by_segment.remove(&segment).expect("listed");
                holes.count -= list.len();
                (segment, list)
            })
        };
        match due {
            Some((segment, ranges)) => self.zero(segment, &ranges),
            None => Ok(()),
        }
    }

    fn list(&self) -> io::Result<Vec<(SegmentId, u64)>> {
        self.drain()?;
        let mut segments = Vec::new();
        for name in self.io.list(MAX_SEGMENTS)? {
            let Some(id) = name
                .strip_prefix(PREFIX)
                .and_then(|n| n.parse::<SegmentId>().ok())
            else {
                continue;
            };
            segments.push((id, self.io.size(&name)?));
        }
        segments.sort_unstable();
        Ok(segments)
    }

    /// Nothing to write: appends are already sent. Reports a refused one.
    fn write_back(&self) -> io::Result<()> {
        self.reap()
    }

    fn describe(&self, segment: SegmentId) -> String {
        format!("RADOS object {}", Self::object(segment))
    }
}
