//! The engine's segment log as RADOS objects: segment N is object
//! `seg.NNNNNNNN` of the shard's namespace, written at the same offsets as a
//! `.seg` file, so the records, their checksums and recovery are the engine's
//! own (docs/FORMAT.md).
//!
//! Appends are sent without waiting (`rados_aio_write_op_operate`) and kept
//! in flight, at most [`MAX_IN_FLIGHT_BYTES`] of them: a host write costs the
//! writer the copy into librados, not a round trip under the writer mutex.
//! Everything that must see them waits first: `sync` (the engine's rule,
//! segment data durable before the metadata that names it), a read of a
//! range still in flight, a truncate, punch or removal of its segment, the
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
/// Appends in flight before a new one waits for the oldest.
const MAX_IN_FLIGHT_WRITES: usize = 4096;

pub struct RadosSegmentStore {
    io: Arc<IoCtx>,
    in_flight: Mutex<InFlight>,
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
        }
    }

    fn object(segment: SegmentId) -> String {
        format!("{PREFIX}{:08}", segment.get())
    }

    /// Waits for every append in flight; the first refusal if there was one.
    pub fn drain(&self) -> io::Result<()> {
        self.wait_for(|_| true)
    }

    /// Bytes of appends not yet answered.
    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight.lock().bytes
    }

    /// Waits for the appends in flight that `wanted` picks; fails if any of
    /// them (or any append before) was refused.
    fn wait_for(&self, wanted: impl Fn(&Append) -> bool) -> io::Result<()> {
        let waiting: Vec<Arc<PendingWrite>> = {
            let in_flight = self.in_flight.lock();
            in_flight
                .writes
                .iter()
                .filter(|append| wanted(append))
                .map(|append| append.pending.clone())
                .collect()
        };
        let refused = waiting.iter().find_map(|pending| pending.wait().err());
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
            if let Err(e) = append.pending.wait() {
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

    /// One op for the whole run: its pieces land together or not at all.
    fn write_vectored_at(
        &self,
        segment: SegmentId,
        offset_bytes: u64,
        pieces: &[&[u8]],
    ) -> io::Result<()> {
        let mut at = offset_bytes;
        let placed: Vec<(u64, &[u8])> = pieces
            .iter()
            .filter(|piece| !piece.is_empty())
            .map(|piece| {
                let placed = (at, *piece);
                at += piece.len() as u64;
                placed
            })
            .collect();
        if placed.is_empty() {
            return Ok(());
        }
        self.make_room(at - offset_bytes)?;
        let pending = self.io.aio_write_pieces(&Self::object(segment), &placed)?;
        let mut in_flight = self.in_flight.lock();
        in_flight.bytes += at - offset_bytes;
        in_flight.writes.push_back(Append {
            segment,
            start_bytes: offset_bytes,
            end_bytes: at,
            pending: Arc::new(pending),
        });
        Ok(())
    }

    fn read_at(&self, segment: SegmentId, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        let end_bytes = offset_bytes + buf.len() as u64;
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
        self.wait_for_segment(segment)
    }

    fn truncate(&self, segment: SegmentId, length_bytes: u64) -> io::Result<()> {
        self.wait_for_segment(segment)?;
        Ok(self.io.truncate(&Self::object(segment), length_bytes)?)
    }

    fn remove(&self, segment: SegmentId) -> io::Result<()> {
        self.wait_for_segment(segment)?;
        Ok(self.io.remove(&Self::object(segment))?)
    }

    /// Zeroed ranges are given back to the OSD's store.
    fn punch(&self, segment: SegmentId, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.wait_for_segment(segment)?;
        match self
            .io
            .zero(&Self::object(segment), offset_bytes, length_bytes)
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => Ok(other?),
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
