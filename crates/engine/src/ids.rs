//! Typed ids: what a number names is part of its type, so a block id cannot be
//! passed where a volume id is meant. Each is a plain integer inside (the
//! width it has in the tables, docs/FORMAT.md); `.get()` gives it back at the
//! edges where it is encoded or printed. Grain indexes alone do arithmetic,
//! with counts of grains: an index plus a count, an index less one, and the
//! count between two indexes.

use std::fmt;
use std::num::ParseIntError;
use std::ops::{Add, AddAssign, Sub};
use std::str::FromStr;

/// Defines an id type over an integer: ordered, hashable, printed and parsed
/// as the integer. With the `openapi` feature its schema is the integer's (it
/// serialises as one), described by the id's doc comment.
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($int:ty)) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default,
            serde::Serialize, serde::Deserialize,
        )]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(transparent)]
        pub struct $name($int);

        impl $name {
            pub const fn new(value: $int) -> Self {
                $name(value)
            }

            pub const fn get(self) -> $int {
                self.0
            }

            /// The id handed out after this one.
            pub fn next(self) -> Self {
                $name(self.0.checked_add(1).expect(concat!(stringify!($name), " overflow")))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = ParseIntError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                text.parse().map($name)
            }
        }
    };
}

id_type!(
    /// A segment file of the log (`segments/<id>.seg`), never reused.
    SegmentId(u32)
);

id_type!(
    /// A volume, from creation to eradication; never reused (snapshots take
    /// their ids from the same counter).
    VolumeId(u64)
);

id_type!(
    /// A stored block: one record's payload, shared by every mapping that
    /// names it. Never reused, so a block's content never changes under its id.
    BlockId(u64)
);

id_type!(
    /// A point in the array's order of changes (the `next_seq` counter): each
    /// write batch, range record and snapshot takes the next one. A snapshot
    /// records the seq it was taken at; point mappings, range records and the
    /// history versions kept for snapshots carry the seq that made them and
    /// the one that displaced them. A snapshot sees the versions alive at its
    /// seq, and of a point mapping and a range record the newer seq wins.
    SnapshotSeq(u64)
);

impl SnapshotSeq {
    /// Later than any seq handed out: a version that dies "at the end" is
    /// visible to every snapshot at or after its seq.
    pub const MAX: SnapshotSeq = SnapshotSeq(u64::MAX);
}

id_type!(
    /// A grain of a volume: its number from the volume's start, in grains of
    /// `GRAIN_BYTES` (4 KiB), so it begins `index × GRAIN_BYTES` bytes in.
    /// Indexes do not add: an index plus a count of grains is an index, and
    /// the distance between two indexes is a count (a plain `u64`, named
    /// `..._grains`).
    GrainIndex(u64)
);

impl GrainIndex {
    /// Past every grain of every volume: the end of a range that runs to the
    /// end, whatever the size.
    pub const MAX: GrainIndex = GrainIndex(u64::MAX);

    /// The grains from this one up to `end`, not including it, in order.
    pub fn range_to(self, end: GrainIndex) -> impl DoubleEndedIterator<Item = GrainIndex> {
        (self.0..end.0).map(GrainIndex)
    }

    /// The grain `delta` after this one, wrapping past the largest index: how
    /// a reference record's delta maps its grains onto its source's.
    pub const fn wrapping_add(self, delta: u64) -> GrainIndex {
        GrainIndex(self.0.wrapping_add(delta))
    }

    /// The grain `delta` before this one, wrapping below 0: undoes
    /// [`GrainIndex::wrapping_add`].
    pub const fn wrapping_sub(self, delta: u64) -> GrainIndex {
        GrainIndex(self.0.wrapping_sub(delta))
    }
}

/// An index `grains` further on.
impl Add<u64> for GrainIndex {
    type Output = GrainIndex;

    fn add(self, grains: u64) -> GrainIndex {
        GrainIndex(self.0.checked_add(grains).expect("GrainIndex overflow"))
    }
}

impl AddAssign<u64> for GrainIndex {
    fn add_assign(&mut self, grains: u64) {
        *self = *self + grains;
    }
}

/// An index `grains` back.
impl Sub<u64> for GrainIndex {
    type Output = GrainIndex;

    fn sub(self, grains: u64) -> GrainIndex {
        GrainIndex(self.0.checked_sub(grains).expect("GrainIndex underflow"))
    }
}

/// The grains from `start` up to this index: a count, never negative.
impl Sub for GrainIndex {
    type Output = u64;

    fn sub(self, start: GrainIndex) -> u64 {
        self.0
            .checked_sub(start.0)
            .unwrap_or_else(|| panic!("grain {start} lies past grain {self}"))
    }
}

#[cfg(test)]
mod tests {
    use super::{GrainIndex, SegmentId, SnapshotSeq};

    #[test]
    fn an_id_prints_parses_and_orders_as_its_integer() {
        let id = SegmentId::new(41);
        assert_eq!(id.to_string(), "41");
        assert_eq!("41".parse::<SegmentId>(), Ok(id));
        assert!("x".parse::<SegmentId>().is_err());
        assert_eq!(id.next().get(), 42);
        assert!(id < id.next());
    }

    #[test]
    #[should_panic(expected = "SegmentId overflow")]
    fn the_last_id_has_no_next() {
        let _ = SegmentId::new(u32::MAX).next();
    }

    #[test]
    fn an_id_serialises_as_its_integer() {
        let seq = SnapshotSeq::new(7);
        assert_eq!(serde_json::to_string(&seq).unwrap(), "7");
        assert_eq!(serde_json::from_str::<SnapshotSeq>("7").unwrap(), seq);
        assert!(seq < SnapshotSeq::MAX);
    }

    #[test]
    fn grain_indexes_move_by_counts_and_differ_by_counts() {
        let first = GrainIndex::new(10);
        let end = first + 4;
        assert_eq!(end, GrainIndex::new(14));
        assert_eq!(end - first, 4);
        assert_eq!(end - 4, first);
        let mut at = first;
        at += 2;
        assert_eq!(at.get(), 12);
        let grains: Vec<u64> = first.range_to(end).map(GrainIndex::get).collect();
        assert_eq!(grains, vec![10, 11, 12, 13]);
        assert_eq!(end.range_to(first).count(), 0);
        let delta = 3u64.wrapping_sub(10);
        assert_eq!(first.wrapping_add(delta), GrainIndex::new(3));
        assert_eq!(GrainIndex::new(3).wrapping_sub(delta), first);
        assert_eq!(serde_json::to_string(&end).unwrap(), "14");
    }

    #[test]
    #[should_panic(expected = "grain 14 lies past grain 10")]
    fn the_distance_to_an_earlier_grain_is_refused() {
        let _ = GrainIndex::new(10) - GrainIndex::new(14);
    }
}
