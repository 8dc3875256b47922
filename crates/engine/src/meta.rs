//! The metadata schema in redb and the fixed-width encodings of its values.
//!
//! redb was chosen by measurement (bench/kv-choice). What decided it for the data
//! path: a commit with `Durability::None` never reaches the disk until a later
//! durable commit, so metadata can never become durable before the segment data it
//! points to — FLUSH syncs the segments first, then commits durably.

use redb::{ReadableTable, TableDefinition};

use crate::segment::SegmentId;
use crate::EngineError;

/// (volume id, grain) → [`MapValue`]: the point mappings.
pub const MAPPINGS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("mappings");
/// block id → [`BlockRec`]: where a block's record lives and who references it.
pub const BLOCKS: TableDefinition<u64, &[u8]> = TableDefinition::new("blocks");
/// (volume id, first grain) → [`RangeRec`]: unmap / zero / pattern range records.
pub const RANGES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("ranges");
/// volume name → JSON [`crate::catalog::VolumeRec`].
pub const VOLUMES: TableDefinition<&str, &[u8]> = TableDefinition::new("volumes");
/// segment id → (written bytes, live bytes).
pub const SEGMENTS: TableDefinition<u32, (u64, u64)> = TableDefinition::new("segments");
/// Deleted volumes whose mappings the reclaimer still has to drop: id → size.
pub const DOOMED: TableDefinition<u64, u64> = TableDefinition::new("doomed");
/// Named counters (next ids).
pub const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");

pub fn kv_error(error: impl Into<redb::Error>) -> EngineError {
    EngineError::Metadata(error.into().to_string())
}

/// What a grain maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Block(u64),
    Pattern(u64),
}

/// A point mapping: the grain's content and the sequence number of the write that
/// set it (compared with range records' sequence numbers; the newer wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapValue {
    pub seq: u64,
    pub target: Target,
}

impl MapValue {
    pub const BYTES: usize = 17;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..8].copy_from_slice(&self.seq.to_le_bytes());
        let (kind, arg) = match self.target {
            Target::Block(id) => (0u8, id),
            Target::Pattern(p) => (1u8, p),
        };
        out[8] = kind;
        out[9..17].copy_from_slice(&arg.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EngineError> {
        if bytes.len() != Self::BYTES {
            return Err(EngineError::Corruption(format!(
                "mapping value of {} bytes",
                bytes.len()
            )));
        }
        let seq = u64::from_le_bytes(bytes[0..8].try_into().expect("8"));
        let arg = u64::from_le_bytes(bytes[9..17].try_into().expect("8"));
        let target = match bytes[8] {
            0 => Target::Block(arg),
            1 => Target::Pattern(arg),
            kind => return Err(EngineError::Corruption(format!("mapping kind {kind}"))),
        };
        Ok(MapValue { seq, target })
    }
}

/// A stored block: its record's location and checksum, and its reference count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRec {
    pub segment: SegmentId,
    pub offset_bytes: u32,
    pub payload_len: u32,
    pub flags: u16,
    pub crc: u32,
    pub refcount: u32,
    pub fingerprint: [u8; 16],
}

impl BlockRec {
    pub const BYTES: usize = 38;

    /// Bytes the record occupies in its segment, header included.
    pub fn record_bytes(&self) -> u64 {
        crate::segment::RECORD_HEADER_BYTES as u64 + u64::from(self.payload_len)
    }

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..4].copy_from_slice(&self.segment.to_le_bytes());
        out[4..8].copy_from_slice(&self.offset_bytes.to_le_bytes());
        out[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        out[12..14].copy_from_slice(&self.flags.to_le_bytes());
        out[14..18].copy_from_slice(&self.crc.to_le_bytes());
        out[18..22].copy_from_slice(&self.refcount.to_le_bytes());
        out[22..38].copy_from_slice(&self.fingerprint);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EngineError> {
        if bytes.len() != Self::BYTES {
            return Err(EngineError::Corruption(format!(
                "block value of {} bytes",
                bytes.len()
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4"));
        Ok(BlockRec {
            segment: u32_at(0),
            offset_bytes: u32_at(4),
            payload_len: u32_at(8),
            flags: u16::from_le_bytes(bytes[12..14].try_into().expect("2")),
            crc: u32_at(14),
            refcount: u32_at(18),
            fingerprint: bytes[22..38].try_into().expect("16"),
        })
    }
}

/// What a range record makes its grains read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeKind {
    /// Unmapped: reads zero, reported as a hole.
    Hole,
    /// Allocated, every 8-byte word equal to the pattern (0 = written zeroes).
    Pattern(u64),
}

/// A range record: grains [start, end) read as `kind` unless a point mapping with a
/// newer sequence number says otherwise. `reclaimed` once the reclaimer has dropped
/// every older point mapping beneath it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeRec {
    pub end_grain: u64,
    pub seq: u64,
    pub kind: RangeKind,
    pub reclaimed: bool,
}

impl RangeRec {
    pub const BYTES: usize = 26;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..8].copy_from_slice(&self.end_grain.to_le_bytes());
        out[8..16].copy_from_slice(&self.seq.to_le_bytes());
        let (kind, pattern) = match self.kind {
            RangeKind::Hole => (0u8, 0),
            RangeKind::Pattern(p) => (1u8, p),
        };
        out[16] = kind;
        out[17..25].copy_from_slice(&pattern.to_le_bytes());
        out[25] = u8::from(self.reclaimed);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EngineError> {
        if bytes.len() != Self::BYTES {
            return Err(EngineError::Corruption(format!(
                "range value of {} bytes",
                bytes.len()
            )));
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8"));
        let kind = match bytes[16] {
            0 => RangeKind::Hole,
            1 => RangeKind::Pattern(u64_at(17)),
            k => return Err(EngineError::Corruption(format!("range kind {k}"))),
        };
        Ok(RangeRec {
            end_grain: u64_at(0),
            seq: u64_at(8),
            kind,
            reclaimed: bytes[25] != 0,
        })
    }
}

/// Reads a counter, 0 when absent.
pub fn read_counter(
    table: &impl ReadableTable<&'static str, u64>,
    name: &str,
) -> Result<u64, EngineError> {
    Ok(table
        .get(name)
        .map_err(kv_error)?
        .map(|v| v.value())
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_round_trip() {
        for target in [Target::Block(7), Target::Pattern(u64::MAX)] {
            let v = MapValue { seq: 99, target };
            assert_eq!(MapValue::decode(&v.encode()).unwrap(), v);
        }
        let b = BlockRec {
            segment: 3,
            offset_bytes: 1 << 20,
            payload_len: 4096,
            flags: 1,
            crc: 0xdead_beef,
            refcount: 5,
            fingerprint: [9; 16],
        };
        assert_eq!(BlockRec::decode(&b.encode()).unwrap(), b);
        for kind in [RangeKind::Hole, RangeKind::Pattern(0x55)] {
            let r = RangeRec {
                end_grain: 1 << 40,
                seq: 12,
                kind,
                reclaimed: true,
            };
            assert_eq!(RangeRec::decode(&r.encode()).unwrap(), r);
        }
        assert!(MapValue::decode(&[0u8; 3]).is_err());
    }
}
