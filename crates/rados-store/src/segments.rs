//! The engine's segment log as RADOS objects: segment N is object
//! `seg.NNNNNNNN` of the shard's namespace, written at the same offsets as a
//! `.seg` file, so the records, their checksums and recovery are the engine's
//! own (docs/FORMAT.md).
//!
//! A write returns once every replica has it, so `sync` has nothing left to
//! do: the engine's rule (segment data durable before the metadata that names
//! it) holds by construction. Buffering small appends and sending them
//! asynchronously (the FLUSH path's one round trip of docs/SCALE-OUT.md) is
//! the next step; this store is the simple, correct one.

use std::io;
use std::sync::Arc;

use lacuna_engine::segment::log::{SegmentId, SegmentStore};
use lacuna_rados::IoCtx;

/// Most segment objects a shard's namespace may list at open.
const MAX_SEGMENTS: usize = 1 << 22;
const PREFIX: &str = "seg.";

pub struct RadosSegmentStore {
    io: Arc<IoCtx>,
}

impl RadosSegmentStore {
    pub fn new(io: Arc<IoCtx>) -> RadosSegmentStore {
        RadosSegmentStore { io }
    }

    fn object(segment: SegmentId) -> String {
        format!("{PREFIX}{:08}", segment.get())
    }
}

impl SegmentStore for RadosSegmentStore {
    fn write_at(&self, segment: SegmentId, offset_bytes: u64, data: &[u8]) -> io::Result<()> {
        Ok(self.io.write(&Self::object(segment), offset_bytes, data)?)
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
        Ok(self.io.write_pieces(&Self::object(segment), &placed)?)
    }

    fn read_at(&self, segment: SegmentId, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
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

    fn sync(&self, _segment: SegmentId) -> io::Result<()> {
        Ok(())
    }

    fn truncate(&self, segment: SegmentId, length_bytes: u64) -> io::Result<()> {
        Ok(self.io.truncate(&Self::object(segment), length_bytes)?)
    }

    fn remove(&self, segment: SegmentId) -> io::Result<()> {
        Ok(self.io.remove(&Self::object(segment))?)
    }

    /// Zeroed ranges are given back to the OSD's store.
    fn punch(&self, segment: SegmentId, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        match self
            .io
            .zero(&Self::object(segment), offset_bytes, length_bytes)
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => Ok(other?),
        }
    }

    fn list(&self) -> io::Result<Vec<(SegmentId, u64)>> {
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

    fn write_back(&self) -> io::Result<()> {
        Ok(())
    }

    fn describe(&self, segment: SegmentId) -> String {
        format!("RADOS object {}", Self::object(segment))
    }
}
