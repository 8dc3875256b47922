//! The metadata schema in redb and the fixed-width encodings of its values.
//!
//! redb was chosen by measurement (bench/kv-choice). What decided it for the data
//! path: a commit with `Durability::None` never reaches the disk until a later
//! durable commit, so metadata can never become durable before the segment data it
//! points to — FLUSH syncs the segments first, then commits durably.

use redb::{ReadableTable, TableDefinition};

use crate::ids::{BlockId, GrainIndex, SnapshotSeq};
use crate::segment::log::SegmentId;
use crate::EngineError;

/// (volume id, chunk) → the point mappings ([`MapValue`]s) of a chunk of
/// adjacent grains: read and written only through [`crate::meta::point_rows`].
pub const MAPPINGS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("point_rows");
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
/// Doomed volume id → the container its reclaim is charged to.
pub const DOOMED_CONTAINERS: TableDefinition<u64, u64> = TableDefinition::new("doomed_containers");
/// container name → JSON [`crate::space::container::ContainerRec`].
pub const CONTAINERS: TableDefinition<&str, &[u8]> = TableDefinition::new("containers");
/// (volume id, grain, version seq) → [`HistValue`]: point mappings replaced or
/// dropped from the live table while a snapshot could still see them. Live reads
/// never look here, so their cost does not depend on how many snapshots exist.
pub const HISTORY: TableDefinition<(u64, u64, u64), &[u8]> = TableDefinition::new("history");
/// (volume id, first grain, record seq) → [`RangeHistValue`]: pieces of range records
/// cut or dropped from the live range map while a snapshot could still see them.
pub const RANGE_HISTORY: TableDefinition<(u64, u64, u64), &[u8]> =
    TableDefinition::new("range_history");
/// Eradicated volumes kept because pins still need their data: id → JSON
/// [`crate::catalog::VolumeRec`].
pub const RETAINED: TableDefinition<u64, &[u8]> = TableDefinition::new("retained");
/// snapshot id → JSON [`crate::versions::snapshot::SnapshotRec`].
pub const SNAPSHOTS: TableDefinition<u64, &[u8]> = TableDefinition::new("snapshots");
/// Named counters (next ids), and the data directory's format version.
pub const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");

/// The layout of every table and of the segment records (docs/FORMAT.md). A
/// change to any of them raises it; opening a data directory of another
/// version is refused, never misread.
pub const FORMAT_VERSION: u64 = 1;
/// The `COUNTERS` key that holds the format version.
pub const FORMAT_VERSION_KEY: &str = "format_version";

pub fn kv_error(error: impl Into<redb::Error>) -> EngineError {
    EngineError::Metadata(error.into().to_string())
}

/// What a grain maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrainTarget {
    Block(BlockId),
    Pattern(u64),
}

/// A point mapping: the grain's content and the sequence number of the write that
/// set it (compared with range records' sequence numbers; the newer wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapValue {
    pub seq: SnapshotSeq,
    pub target: GrainTarget,
}

impl MapValue {
    pub const BYTES: usize = 17;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..8].copy_from_slice(&self.seq.get().to_le_bytes());
        let (kind, arg) = match self.target {
            GrainTarget::Block(id) => (0u8, id.get()),
            GrainTarget::Pattern(p) => (1u8, p),
        };
        out[8] = kind;
        out[9..17].copy_from_slice(&arg.to_le_bytes());
        debug_assert_eq!(Self::decode(&out).ok(), Some(*self), "a mapping reads back");
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EngineError> {
        if bytes.len() != Self::BYTES {
            return Err(EngineError::Corruption(format!(
                "mapping value of {} bytes",
                bytes.len()
            )));
        }
        let seq = SnapshotSeq::new(u64::from_le_bytes(bytes[0..8].try_into().expect("8")));
        let arg = u64::from_le_bytes(bytes[9..17].try_into().expect("8"));
        let target = match bytes[8] {
            0 => GrainTarget::Block(BlockId::new(arg)),
            1 => GrainTarget::Pattern(arg),
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
    /// How many of `refcount`'s references are history versions (held only for
    /// snapshots).
    pub history_refs: u32,
}

/// Whom a block's physical bytes belong to, for the space report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockClass {
    /// One live mapping of one volume.
    Unique = 0,
    /// Only snapshots' history versions.
    Snapshot = 1,
    /// Several references with at least one live (dedup, copies).
    Shared = 2,
}

impl BlockRec {
    pub const BYTES: usize = 42;
    const LEGACY_BYTES: usize = 38;

    pub fn class(&self) -> BlockClass {
        if self.history_refs == self.refcount {
            BlockClass::Snapshot
        } else if self.refcount == 1 {
            BlockClass::Unique
        } else {
            BlockClass::Shared
        }
    }

    /// Bytes the record occupies in its segment, header included.
    pub fn record_bytes(&self) -> u64 {
        crate::segment::log::RECORD_HEADER_BYTES as u64 + u64::from(self.payload_len)
    }

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..4].copy_from_slice(&self.segment.get().to_le_bytes());
        out[4..8].copy_from_slice(&self.offset_bytes.to_le_bytes());
        out[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        out[12..14].copy_from_slice(&self.flags.to_le_bytes());
        out[14..18].copy_from_slice(&self.crc.to_le_bytes());
        out[18..22].copy_from_slice(&self.refcount.to_le_bytes());
        out[22..38].copy_from_slice(&self.fingerprint);
        out[38..42].copy_from_slice(&self.history_refs.to_le_bytes());
        debug_assert_eq!(
            Self::decode(&out).ok(),
            Some(*self),
            "a block row reads back"
        );
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EngineError> {
        if bytes.len() != Self::BYTES && bytes.len() != Self::LEGACY_BYTES {
            return Err(EngineError::Corruption(format!(
                "block value of {} bytes",
                bytes.len()
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4"));
        Ok(BlockRec {
            segment: SegmentId::new(u32_at(0)),
            offset_bytes: u32_at(4),
            payload_len: u32_at(8),
            flags: u16::from_le_bytes(bytes[12..14].try_into().expect("2")),
            crc: u32_at(14),
            refcount: u32_at(18),
            fingerprint: bytes[22..38].try_into().expect("16"),
            history_refs: if bytes.len() == Self::BYTES {
                u32_at(38)
            } else {
                0
            },
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
    /// Reads grain `g` as grain `g + delta` (wrapping) of a snapshot: clones,
    /// range copies (XCOPY) and reverts. The snapshot pins the source version.
    Ref { snapshot: u64, delta: u64 },
}

impl RangeKind {
    /// The snapshot a record pins, if any.
    pub fn pinned_snapshot(&self) -> Option<u64> {
        match self {
            RangeKind::Ref { snapshot, .. } => Some(*snapshot),
            _ => None,
        }
    }
}

/// A range record: grains [start, end) read as `kind` unless a point mapping with a
/// newer sequence number says otherwise. `reclaimed` once the reclaimer has dropped
/// every older point mapping beneath it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeRec {
    pub end_grain: GrainIndex,
    pub seq: SnapshotSeq,
    pub kind: RangeKind,
    pub reclaimed: bool,
}

impl RangeRec {
    pub const BYTES: usize = 34;
    /// Records written before `Ref` existed carry no delta.
    const LEGACY_BYTES: usize = 26;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..8].copy_from_slice(&self.end_grain.get().to_le_bytes());
        out[8..16].copy_from_slice(&self.seq.get().to_le_bytes());
        let (kind, arg, delta) = match self.kind {
            RangeKind::Hole => (0u8, 0, 0),
            RangeKind::Pattern(p) => (1u8, p, 0),
            RangeKind::Ref { snapshot, delta } => (2u8, snapshot, delta),
        };
        out[16] = kind;
        out[17..25].copy_from_slice(&arg.to_le_bytes());
        out[25] = u8::from(self.reclaimed);
        out[26..34].copy_from_slice(&delta.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EngineError> {
        if bytes.len() != Self::BYTES && bytes.len() != Self::LEGACY_BYTES {
            return Err(EngineError::Corruption(format!(
                "range value of {} bytes",
                bytes.len()
            )));
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8"));
        let kind = match bytes[16] {
            0 => RangeKind::Hole,
            1 => RangeKind::Pattern(u64_at(17)),
            2 if bytes.len() == Self::BYTES => RangeKind::Ref {
                snapshot: u64_at(17),
                delta: u64_at(26),
            },
            k => return Err(EngineError::Corruption(format!("range kind {k}"))),
        };
        Ok(RangeRec {
            end_grain: GrainIndex::new(u64_at(0)),
            seq: SnapshotSeq::new(u64_at(8)),
            kind,
            reclaimed: bytes[25] != 0,
        })
    }
}

/// A point mapping kept for snapshots: its target and the seq of the event that
/// replaced it in the live volume (it is visible at seqs in [version seq, died)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistValue {
    pub died_seq: SnapshotSeq,
    pub target: GrainTarget,
}

impl HistValue {
    pub fn encode(&self) -> [u8; MapValue::BYTES] {
        MapValue {
            seq: self.died_seq,
            target: self.target,
        }
        .encode()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EngineError> {
        let v = MapValue::decode(bytes)?;
        Ok(HistValue {
            died_seq: v.seq,
            target: v.target,
        })
    }
}

/// A range record piece kept for snapshots, with the seq that displaced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeHistValue {
    pub rec: RangeRec,
    pub died_seq: SnapshotSeq,
}

impl RangeHistValue {
    pub const BYTES: usize = RangeRec::BYTES + 8;

    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[..RangeRec::BYTES].copy_from_slice(&self.rec.encode());
        out[RangeRec::BYTES..].copy_from_slice(&self.died_seq.get().to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EngineError> {
        if bytes.len() != Self::BYTES {
            return Err(EngineError::Corruption(format!(
                "range history value of {} bytes",
                bytes.len()
            )));
        }
        Ok(RangeHistValue {
            rec: RangeRec::decode(&bytes[..RangeRec::BYTES])?,
            died_seq: SnapshotSeq::new(u64::from_le_bytes(
                bytes[RangeRec::BYTES..].try_into().expect("8"),
            )),
        })
    }
}

/// Whether a version alive at seqs [from, died) is visible to a snapshot among
/// `snapshot_seqs` (sorted ascending).
pub fn visible_to_any(snapshot_seqs: &[SnapshotSeq], from: SnapshotSeq, died: SnapshotSeq) -> bool {
    let first_at_or_after = snapshot_seqs.partition_point(|&s| s < from);
    snapshot_seqs
        .get(first_at_or_after)
        .is_some_and(|&s| s < died)
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

/// Whether a mapping target counts as data (for `written_bytes`).
pub(crate) fn is_data(target: GrainTarget) -> bool {
    !matches!(target, GrainTarget::Pattern(0))
}

/// A cursor insert refused: a key out of order means the table holds what the
/// engine's own bookkeeping says it cannot (`unordered` says what).
pub(crate) fn cursor_insert_error(
    error: redb::CursorError,
    unordered: impl FnOnce() -> String,
) -> EngineError {
    match error {
        redb::CursorError::UnorderedKey => EngineError::Corruption(unordered()),
        other => kv_error(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BlockId;

    fn seq(n: u64) -> SnapshotSeq {
        SnapshotSeq::new(n)
    }

    #[test]
    fn encodings_round_trip() {
        for target in [
            GrainTarget::Block(BlockId::new(7)),
            GrainTarget::Pattern(u64::MAX),
        ] {
            let v = MapValue {
                seq: seq(99),
                target,
            };
            assert_eq!(MapValue::decode(&v.encode()).unwrap(), v);
        }
        let b = BlockRec {
            segment: SegmentId::new(3),
            offset_bytes: 1 << 20,
            payload_len: 4096,
            flags: 1,
            crc: 0xdead_beef,
            refcount: 5,
            fingerprint: [9; 16],
            history_refs: 2,
        };
        assert_eq!(BlockRec::decode(&b.encode()).unwrap(), b);
        for kind in [
            RangeKind::Hole,
            RangeKind::Pattern(0x55),
            RangeKind::Ref {
                snapshot: 4,
                delta: u64::MAX - 3,
            },
        ] {
            let r = RangeRec {
                end_grain: GrainIndex::new(1 << 40),
                seq: seq(12),
                kind,
                reclaimed: true,
            };
            assert_eq!(RangeRec::decode(&r.encode()).unwrap(), r);
        }
        assert!(MapValue::decode(&[0u8; 3]).is_err());
        let h = RangeHistValue {
            rec: RangeRec {
                end_grain: GrainIndex::new(9),
                seq: seq(3),
                kind: RangeKind::Hole,
                reclaimed: false,
            },
            died_seq: seq(7),
        };
        assert_eq!(RangeHistValue::decode(&h.encode()).unwrap(), h);
    }

    #[test]
    fn visibility_is_a_half_open_interval() {
        let seqs = [seq(10), seq(20), seq(30)];
        assert!(visible_to_any(&seqs, seq(10), seq(11)));
        assert!(!visible_to_any(&seqs, seq(11), seq(20)));
        assert!(visible_to_any(&seqs, seq(11), seq(21)));
        assert!(!visible_to_any(&seqs, seq(31), SnapshotSeq::MAX));
        assert!(!visible_to_any(&[], seq(0), SnapshotSeq::MAX));
    }
}
