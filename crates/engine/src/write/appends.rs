//! The records one transaction appends to one segment, kept where they lie
//! until the transaction writes them.
//!
//! Why not one buffer: a new block's payload was made (compressed, or copied
//! from the host's data) on the writer's own thread before the writer mutex,
//! and copying it again into a segment-sized buffer under the mutex was 3% of
//! the daemon's CPU in 1 MiB writes. Here a new block costs its 24 header
//! bytes and a reference to its payload; the pieces go to the segment in one
//! vectored write ([`crate::segment::log::SegmentStore::write_vectored_at`]).

use bytes::Bytes;

use crate::segment::log::RECORD_HEADER_BYTES;

/// One record, or a run of bytes already encoded as records (the cleaner
/// moves records as they were read).
enum Piece {
    Record {
        header: [u8; RECORD_HEADER_BYTES],
        payload: Bytes,
    },
    Encoded(Vec<u8>),
}

impl Piece {
    fn len_bytes(&self) -> u64 {
        match self {
            Piece::Record { payload, .. } => (RECORD_HEADER_BYTES + payload.len()) as u64,
            Piece::Encoded(bytes) => bytes.len() as u64,
        }
    }
}

/// Records appended to one segment from `start_bytes` on, contiguous.
pub struct SegmentAppends {
    start_bytes: u64,
    end_bytes: u64,
    /// Each piece with the segment offset it starts at, in offset order.
    pieces: Vec<(u64, Piece)>,
}

impl SegmentAppends {
    pub fn new(start_bytes: u64) -> Self {
        SegmentAppends {
            start_bytes,
            end_bytes: start_bytes,
            pieces: Vec::new(),
        }
    }

    pub fn start_bytes(&self) -> u64 {
        self.start_bytes
    }

    /// The offset the next piece goes to.
    pub fn end_bytes(&self) -> u64 {
        self.end_bytes
    }

    pub fn len_bytes(&self) -> u64 {
        self.end_bytes - self.start_bytes
    }

    /// Makes room for `count` more pieces.
    pub fn reserve(&mut self, count: usize) {
        self.pieces.reserve(count);
    }

    /// Appends a record of `header` (its final bytes, checksum included) and
    /// `payload`.
    pub fn push_record(&mut self, header: [u8; RECORD_HEADER_BYTES], payload: Bytes) {
        self.push(Piece::Record { header, payload });
    }

    /// Appends bytes already encoded as whole records.
    pub fn push_encoded(&mut self, records: &[u8]) {
        self.push(Piece::Encoded(records.to_vec()));
    }

    fn push(&mut self, piece: Piece) {
        let at_bytes = self.end_bytes;
        self.end_bytes += piece.len_bytes();
        self.pieces.push((at_bytes, piece));
    }

    /// The `len` bytes at segment offset `at_bytes`, if they lie within one
    /// piece's payload or encoded bytes (a record's payload always does).
    pub fn bytes_at(&self, at_bytes: u64, len: usize) -> Option<&[u8]> {
        if at_bytes < self.start_bytes || at_bytes >= self.end_bytes {
            return None;
        }
        let index = self.pieces.partition_point(|(start, _)| *start <= at_bytes);
        let (start, piece) = self.pieces.get(index.checked_sub(1)?)?;
        let from = usize::try_from(at_bytes - start).ok()?;
        match piece {
            Piece::Record { payload, .. } => {
                let from = from.checked_sub(RECORD_HEADER_BYTES)?;
                payload.get(from..from.checked_add(len)?)
            }
            Piece::Encoded(bytes) => bytes.get(from..from.checked_add(len)?),
        }
    }

    /// The pieces' bytes in order, ready for a vectored write.
    pub fn slices(&self) -> Vec<&[u8]> {
        let mut slices = Vec::with_capacity(self.pieces.len() * 2);
        for (_, piece) in &self.pieces {
            match piece {
                Piece::Record { header, payload } => {
                    slices.push(&header[..]);
                    slices.push(&payload[..]);
                }
                Piece::Encoded(bytes) => slices.push(&bytes[..]),
            }
        }
        slices
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_contiguous_and_read_back_where_they_were_put() {
        let mut appends = SegmentAppends::new(100);
        appends.push_record([1; RECORD_HEADER_BYTES], Bytes::from_static(b"hello"));
        appends.push_encoded(b"0123456789");
        appends.push_record([2; RECORD_HEADER_BYTES], Bytes::from_static(b"world!"));
        let header = RECORD_HEADER_BYTES as u64;
        assert_eq!(appends.len_bytes(), 2 * header + 5 + 10 + 6);
        assert_eq!(appends.end_bytes(), 100 + appends.len_bytes());
        assert_eq!(appends.bytes_at(100 + header, 5), Some(&b"hello"[..]));
        assert_eq!(appends.bytes_at(100 + header + 1, 3), Some(&b"ell"[..]));
        let encoded_at = 100 + header + 5;
        assert_eq!(appends.bytes_at(encoded_at + 2, 4), Some(&b"2345"[..]));
        let world_at = encoded_at + 10 + header;
        assert_eq!(appends.bytes_at(world_at, 6), Some(&b"world!"[..]));
        // Header bytes, bytes across two pieces, and bytes outside: none.
        assert_eq!(appends.bytes_at(100, 4), None);
        assert_eq!(appends.bytes_at(100 + header + 3, 4), None);
        assert_eq!(appends.bytes_at(99, 1), None);
        assert_eq!(appends.bytes_at(appends.end_bytes(), 1), None);
        let joined = appends.slices().concat();
        assert_eq!(joined.len() as u64, appends.len_bytes());
        assert_eq!(&joined[..RECORD_HEADER_BYTES], &[1; RECORD_HEADER_BYTES]);
        assert_eq!(&joined[joined.len() - 6..], b"world!");
    }
}
