//! Typed ids: what a number names is part of its type, so a block id cannot be
//! passed where a volume id is meant. Each is a plain integer inside (the
//! width it has in the tables, docs/FORMAT.md); `.get()` gives it back at the
//! edges where it is encoded or printed.

use std::fmt;
use std::num::ParseIntError;
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

#[cfg(test)]
mod tests {
    use super::{SegmentId, SnapshotSeq};

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
}
