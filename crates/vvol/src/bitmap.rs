//! Allocation bitmaps (VASA `allocatedBitmapVirtualVolume`): one bit a chunk
//! of a segment of a vVol, set where some grain of the chunk holds data, and
//! the VASA 3.5 hint of where the next data after the segment lies, so a host
//! scanning a sparse disk skips what holds none. Worked out from the
//! volume's data bits in memory: the cost follows the data runs in the
//! segment, not its length (a snapshot vVol walks its block status instead).
//!
//! Bit order: bit `i` of the answer is chunk `i` of the segment, most
//! significant bit first within each byte (bit 7 of byte 0 is chunk 0).

use serde::{Deserialize, Serialize};

use crate::fault::VvolFault;
use crate::model::VvolId;
use crate::{Result, VvolService};

/// Largest bitmap one call answers (VASA's limit).
pub const MAX_BITMAP_BYTES: u64 = 4 << 20;
/// Smallest and largest chunk.
pub const MIN_CHUNK_BYTES: u64 = 512;
pub const MAX_CHUNK_BYTES: u64 = 1 << 30;
/// Most data runs read from a volume's bits in one step.
const RUNS_PER_STEP: usize = 4096;
/// Most block status calls a snapshot vVol's bitmap makes (each covers up to
/// the engine's scan limit of mappings).
const MAX_SNAPSHOT_STEPS: usize = 1 << 16;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AllocatedBitmap {
    pub offset_bytes: u64,
    pub length_bytes: u64,
    pub chunk_bytes: u64,
    /// One bit a chunk in base64, most significant bit first; the last byte's unused bits clear.
    #[serde(with = "base64_bytes")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub bitmap: Vec<u8>,
    /// Where the first data at or after the segment's end lies; null when
    /// nothing after it holds data.
    pub next_allocated_offset_bytes: Option<u64>,
}

/// Bitmaps travel as base64 (VASA's `chunkBitmap` is `base64Binary`): a 4 MiB
/// bitmap is 5.6 MB of text, encoded at memory speed.
mod base64_bytes {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// What `unsharedChunksVirtualVolume` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UnsharedChunks {
    pub chunk_bytes: u64,
    pub scanned_chunks: u64,
    pub unshared_chunks: u64,
}

/// The part of a vVol a bitmap covers, and its chunk size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Segment {
    pub offset_bytes: u64,
    pub length_bytes: u64,
    pub chunk_bytes: u64,
}

/// A bitmap being filled.
struct Bits {
    segment: Segment,
    end_bytes: u64,
    bytes: Vec<u8>,
}

impl Bits {
    /// An empty bitmap of `segment` of a vVol of `size_bytes`, once the
    /// segment is checked.
    fn new(segment: Segment, size_bytes: u64) -> Result<Bits> {
        check_segment(size_bytes, segment)?;
        let chunks = segment.length_bytes.div_ceil(segment.chunk_bytes);
        Ok(Bits {
            segment,
            end_bytes: segment.offset_bytes + segment.length_bytes,
            bytes: vec![0; chunks.div_ceil(8) as usize],
        })
    }

    /// Marks what `runs` answers, step after step, for the whole segment:
    /// `runs(at, length)` gives (offset, length) runs complete up to its
    /// `reached_bytes` (the engine's data runs or changed runs).
    fn mark_runs(
        &mut self,
        mut runs: impl FnMut(u64, u64) -> lacuna_engine::Result<lacuna_engine::DataRuns>,
    ) -> Result<()> {
        let mut at = self.segment.offset_bytes;
        while at < self.end_bytes {
            let found = runs(at, self.end_bytes - at)?;
            for &(from, length) in &found.runs {
                self.mark(from, length);
            }
            assert!(found.reached_bytes > at, "a step moves on");
            at = found.reached_bytes;
        }
        Ok(())
    }

    /// Marks the chunks that [from, from + length) touches.
    fn mark(&mut self, from: u64, length: u64) {
        let (offset, chunk_bytes) = (self.segment.offset_bytes, self.segment.chunk_bytes);
        let to = from.saturating_add(length).min(self.end_bytes);
        let from = from.max(offset);
        if from >= to {
            return;
        }
        let first = (from - offset) / chunk_bytes;
        let end = (to - offset).div_ceil(chunk_bytes);
        let mut chunk = first;
        while chunk < end {
            if chunk.is_multiple_of(8) && end - chunk >= 8 {
                let whole = (end - chunk) / 8;
                let at = (chunk / 8) as usize;
                self.bytes[at..at + whole as usize].fill(0xff);
                chunk += whole * 8;
            } else {
                self.bytes[(chunk / 8) as usize] |= 0x80 >> (chunk % 8);
                chunk += 1;
            }
        }
    }

    fn answer(self, next_allocated_offset_bytes: Option<u64>) -> AllocatedBitmap {
        AllocatedBitmap {
            offset_bytes: self.segment.offset_bytes,
            length_bytes: self.segment.length_bytes,
            chunk_bytes: self.segment.chunk_bytes,
            bitmap: self.bytes,
            next_allocated_offset_bytes,
        }
    }
}

impl VvolService {
    pub fn allocated_bitmap(&self, id: &VvolId, segment: Segment) -> Result<AllocatedBitmap> {
        let result = self.bitmap_inner(id, segment);
        self.counted(result)
    }

    fn bitmap_inner(&self, id: &VvolId, segment: Segment) -> Result<AllocatedBitmap> {
        let rec = self.record(id)?;
        let size_bytes = rec.size_bytes();
        let mut bits = Bits::new(segment, size_bytes)?;
        let after = bits.end_bytes;
        if rec.read_only() {
            self.mark_snapshot(&rec.engine_name(), &mut bits)?;
            // Not worked out for snapshots: the hint only says "go on".
            return Ok(bits.answer((after < size_bytes).then_some(after)));
        }
        let volume = self.engine.open_volume(&rec.engine_name())?;
        bits.mark_runs(|at, length| volume.data_runs(at, length, RUNS_PER_STEP))?;
        let next = if after < size_bytes {
            volume.next_data_offset(after)?
        } else {
            None
        };
        Ok(bits.answer(next))
    }

    /// Which chunks of a segment of `id` read other than `base` (VASA
    /// `unsharedBitmapVirtualVolume`): what changed since a snapshot, for a
    /// backup. Chunks are compared by what their grains resolve to.
    pub fn unshared_bitmap(
        &self,
        id: &VvolId,
        base: &VvolId,
        segment: Segment,
    ) -> Result<AllocatedBitmap> {
        let result = self.unshared_inner(id, base, segment);
        self.counted(result)
    }

    /// How many chunks of a segment are unshared with `base` (VASA
    /// `unsharedChunksVirtualVolume`).
    pub fn unshared_chunks(
        &self,
        id: &VvolId,
        base: &VvolId,
        segment: Segment,
    ) -> Result<UnsharedChunks> {
        let bitmap = self.unshared_bitmap(id, base, segment)?;
        let chunks = segment.length_bytes.div_ceil(segment.chunk_bytes);
        let unshared = bitmap
            .bitmap
            .iter()
            .map(|b| u64::from(b.count_ones()))
            .sum();
        Ok(UnsharedChunks {
            chunk_bytes: segment.chunk_bytes,
            scanned_chunks: chunks,
            unshared_chunks: unshared,
        })
    }

    fn unshared_inner(
        &self,
        id: &VvolId,
        base: &VvolId,
        segment: Segment,
    ) -> Result<AllocatedBitmap> {
        let rec = self.record(id)?;
        let base_name = self.record(base)?.engine_name();
        let mut bits = Bits::new(segment, rec.size_bytes())?;
        let object = rec.engine_name();
        bits.mark_runs(|at, length| self.engine.changed_runs(&object, &base_name, at, length))?;
        Ok(bits.answer(None))
    }

    fn mark_snapshot(&self, name: &str, bits: &mut Bits) -> Result<()> {
        let snapshot = self.engine.open_snapshot(name)?;
        let mut at = bits.segment.offset_bytes;
        for _ in 0..MAX_SNAPSHOT_STEPS {
            if at >= bits.end_bytes {
                return Ok(());
            }
            let extents = snapshot.extents(at, bits.end_bytes - at)?;
            for extent in extents {
                if extent.state == lacuna_engine::ExtentState::Data {
                    bits.mark(at, extent.length_bytes);
                }
                at += extent.length_bytes;
            }
        }
        Err(VvolFault::OutOfResource(format!(
            "the segment holds more mappings than {MAX_SNAPSHOT_STEPS} block status steps cover: ask for a shorter one"
        )))
    }
}

fn check_segment(size_bytes: u64, segment: Segment) -> Result<()> {
    let Segment {
        offset_bytes,
        length_bytes,
        chunk_bytes,
    } = segment;
    let invalid = |why: String| Err(VvolFault::InvalidArgument(why));
    if !chunk_bytes.is_power_of_two() || !(MIN_CHUNK_BYTES..=MAX_CHUNK_BYTES).contains(&chunk_bytes)
    {
        return invalid(format!(
            "chunk size {chunk_bytes}: a power of two from {MIN_CHUNK_BYTES} to {MAX_CHUNK_BYTES} bytes"
        ));
    }
    if length_bytes == 0 || !offset_bytes.is_multiple_of(chunk_bytes) {
        return invalid(format!(
            "segment {offset_bytes}+{length_bytes}: not empty, and starting on a chunk boundary"
        ));
    }
    let past_end = offset_bytes
        .checked_add(length_bytes)
        .is_none_or(|end| end > size_bytes);
    if past_end {
        return invalid(format!(
            "segment {offset_bytes}+{length_bytes} is past the vVol's end ({size_bytes} bytes)"
        ));
    }
    if length_bytes.div_ceil(chunk_bytes).div_ceil(8) > MAX_BITMAP_BYTES {
        return Err(VvolFault::OutOfResource(format!(
            "segment {length_bytes} bytes in {chunk_bytes}-byte chunks is a bitmap over {MAX_BITMAP_BYTES} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_marks_only_the_chunks_it_touches_inside_the_segment() {
        let segment = Segment {
            offset_bytes: 4096,
            length_bytes: 16 * 4096,
            chunk_bytes: 4096,
        };
        let mut bits = Bits::new(segment, 1 << 20).unwrap();
        bits.mark(0, 2 * 4096); // starts before the segment: its first chunk only
        bits.mark(9 * 4096, 4096 + 1); // touches chunks 8 and 9
        bits.mark(40 * 4096, 4096); // past the segment
        assert_eq!(bits.answer(None).bitmap, vec![0b1000_0000, 0b1100_0000]);
    }
}
