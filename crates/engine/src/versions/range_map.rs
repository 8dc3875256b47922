//! The in-memory interval structure of a volume's range records (the persisted
//! copy lives in the `ranges` table). Intervals never overlap: inserting a range
//! cuts whatever it covers, so a lookup is one ordered-map probe.
//!
//! Why the side indices: a volume copied into by many EXTENDED COPY commands
//! holds one record a command (12800 for 50 GiB in 4 MiB commands), and the
//! reclaimer asks for the first unreclaimed record, the backlog and the
//! snapshots the records pin after every step. Answered by scanning every
//! record, that made a long copy quadratic and held up the copy itself (the
//! pin lock is shared with it). The indices answer each in O(log n) or O(1).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use crate::ids::GrainIndex;
use crate::meta::schema::RangeRec;

#[derive(Debug, Default, Clone)]
pub struct RangeMap {
    /// start grain → record (end grain inside).
    by_start: BTreeMap<GrainIndex, RangeRec>,
    /// Starts of the records not yet reclaimed.
    unreclaimed: BTreeSet<GrainIndex>,
    /// Grains those records cover.
    unreclaimed_grains: u64,
    /// Snapshot id → how many records reference it.
    pins: BTreeMap<u64, u64>,
}

/// What an insert changed, so the caller can mirror it in the KV store.
#[derive(Debug, Default)]
pub struct RangeEdits {
    pub removed_starts: Vec<GrainIndex>,
    pub upserted: Vec<(GrainIndex, RangeRec)>,
}

impl RangeMap {
    /// Puts `rec` at `start` (replacing what was there) and keeps the indices.
    fn put(&mut self, start: GrainIndex, rec: RangeRec) -> Option<RangeRec> {
        assert!(start < rec.end_grain);
        let old = self.by_start.insert(start, rec);
        if let Some(old) = old {
            self.unindex(start, &old);
        }
        if !rec.reclaimed {
            self.unreclaimed.insert(start);
            self.unreclaimed_grains += rec.end_grain - start;
        }
        if let Some(id) = rec.kind.pinned_snapshot() {
            *self.pins.entry(id).or_insert(0) += 1;
        }
        old
    }

    /// Takes the record at `start` out and keeps the indices.
    fn take(&mut self, start: GrainIndex) -> Option<RangeRec> {
        let old = self.by_start.remove(&start)?;
        self.unindex(start, &old);
        Some(old)
    }

    fn unindex(&mut self, start: GrainIndex, old: &RangeRec) {
        if !old.reclaimed {
            assert!(
                self.unreclaimed.remove(&start),
                "an unreclaimed record is indexed"
            );
            self.unreclaimed_grains -= old.end_grain - start;
        }
        if let Some(id) = old.kind.pinned_snapshot() {
            let count = self.pins.get_mut(&id).expect("a pinning record is counted");
            *count -= 1;
            if *count == 0 {
                self.pins.remove(&id);
            }
        }
    }

    /// The snapshots this map's records reference (pins and named snapshots).
    pub fn pinned_snapshots(&self) -> impl Iterator<Item = u64> + '_ {
        self.pins.keys().copied()
    }

    pub fn len(&self) -> usize {
        self.by_start.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }

    /// Loads a record as stored (used at recovery; must not overlap).
    pub fn load(&mut self, start: GrainIndex, rec: RangeRec) {
        self.put(start, rec);
    }

    /// The record covering `grain`, with its start.
    pub fn find(&self, grain: GrainIndex) -> Option<(GrainIndex, RangeRec)> {
        let (&start, rec) = self.by_start.range(..=grain).next_back()?;
        (grain < rec.end_grain).then_some((start, *rec))
    }

    /// Records overlapping [start, end), in order, clipped to it.
    pub fn overlapping(&self, start: GrainIndex, end: GrainIndex) -> Vec<(GrainIndex, RangeRec)> {
        let mut out = Vec::new();
        if let Some((s, rec)) = self.find(start) {
            out.push((
                s.max(start),
                RangeRec {
                    end_grain: rec.end_grain.min(end),
                    ..rec
                },
            ));
        }
        for (&s, rec) in self
            .by_start
            .range((Bound::Excluded(start), Bound::Excluded(end)))
        {
            out.push((
                s,
                RangeRec {
                    end_grain: rec.end_grain.min(end),
                    ..*rec
                },
            ));
        }
        out
    }

    /// Inserts [start, rec.end_grain), cutting what it covers. Cost is proportional
    /// to the number of records it overlaps, never to the grains it covers.
    pub fn insert(&mut self, start: GrainIndex, rec: RangeRec) -> RangeEdits {
        let end = rec.end_grain;
        assert!(start < end);
        let mut edits = RangeEdits::default();
        // A record starting before `start` and reaching into it: keep its head, and
        // its tail if it extends past `end`.
        if let Some((s, old)) = self.find(start) {
            if s < start {
                let head = RangeRec {
                    end_grain: start,
                    ..old
                };
                self.put(s, head);
                edits.upserted.push((s, head));
                if old.end_grain > end {
                    self.put(end, old);
                    edits.upserted.push((end, old));
                }
            }
        }
        let covered: Vec<GrainIndex> = self.by_start.range(start..end).map(|(&s, _)| s).collect();
        for s in covered {
            let old = self.take(s).expect("present");
            edits.removed_starts.push(s);
            if old.end_grain > end {
                self.put(end, old);
                edits.upserted.push((end, old));
            }
        }
        self.put(start, rec);
        edits.upserted.push((start, rec));
        edits
            .removed_starts
            .retain(|s| !edits.upserted.iter().any(|(u, _)| u == s));
        edits
    }

    /// Applies edits planned (by [`RangeMap::insert`] on a copy holding the
    /// affected records) once they are committed.
    pub fn apply(&mut self, edits: RangeEdits) {
        for start in edits.removed_starts {
            self.take(start);
        }
        for (start, rec) in edits.upserted {
            self.put(start, rec);
        }
    }

    /// Removes the record starting at `start`.
    pub fn remove(&mut self, start: GrainIndex) -> Option<RangeRec> {
        self.take(start)
    }

    /// Replaces the record at `start` (same extent).
    pub fn replace(&mut self, start: GrainIndex, rec: RangeRec) {
        let old = self.put(start, rec).expect("replacing a present record");
        assert_eq!(old.end_grain, rec.end_grain);
    }

    /// The first record not yet reclaimed.
    pub fn first_unreclaimed(&self) -> Option<(GrainIndex, RangeRec)> {
        let start = *self.unreclaimed.first()?;
        let rec = self.by_start[&start];
        debug_assert!(!rec.reclaimed);
        Some((start, rec))
    }

    /// Grains covered by records not yet reclaimed (the reclaim backlog).
    pub fn unreclaimed_grains(&self) -> u64 {
        self.unreclaimed_grains
    }

    pub fn iter(&self) -> impl Iterator<Item = (GrainIndex, &RangeRec)> {
        self.by_start.iter().map(|(&s, r)| (s, r))
    }
}

impl RangeMap {
    /// A map holding only the records overlapping [start, end) (and the one just
    /// before, which an insert may cut): enough to plan an insert's edits without
    /// touching the live map until the commit succeeded.
    pub fn clone_overlapping(&self, start: GrainIndex, end: GrainIndex) -> RangeMap {
        let mut out = RangeMap::default();
        if let Some((s, rec)) = self.find(start) {
            out.put(s, rec);
        }
        for (&s, rec) in self.by_start.range(start..end) {
            out.put(s, *rec);
        }
        out
    }

    /// Start of the first record beginning after `grain`.
    pub fn next_start_after(&self, grain: GrainIndex) -> Option<GrainIndex> {
        self.by_start
            .range((Bound::Excluded(grain), Bound::Unbounded))
            .next()
            .map(|(&s, _)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::schema::RangeKind;

    fn g(index: u64) -> GrainIndex {
        GrainIndex::new(index)
    }

    fn rec(end: u64, seq: u64) -> RangeRec {
        RangeRec {
            end_grain: g(end),
            seq: crate::ids::SnapshotSeq::new(seq),
            kind: RangeKind::Hole,
            reclaimed: false,
        }
    }

    #[test]
    fn insert_cuts_overlaps() {
        let mut map = RangeMap::default();
        map.insert(g(0), rec(100, 1));
        map.insert(g(40), rec(60, 2));
        assert_eq!(map.len(), 3);
        assert_eq!(map.find(g(10)).unwrap().1.seq.get(), 1);
        assert_eq!(map.find(g(50)).unwrap().1.seq.get(), 2);
        assert_eq!(map.find(g(70)), Some((g(60), rec(100, 1))));
        map.insert(g(30), rec(80, 3));
        let got: Vec<_> = map
            .iter()
            .map(|(s, r)| (s.get(), r.end_grain.get(), r.seq.get()))
            .collect();
        assert_eq!(got, vec![(0, 30, 1), (30, 80, 3), (80, 100, 1)]);
        assert_eq!(map.find(g(100)), None);
        let over = map.overlapping(g(20), g(90));
        assert_eq!(over.len(), 3);
        assert_eq!(over[0].0, g(20));
        assert_eq!(over[2].1.end_grain, g(90));
    }

    #[test]
    fn planned_edits_applied_equal_a_direct_insert() {
        let mut live = RangeMap::default();
        for (s, e, q) in [(0, 10, 1), (20, 30, 2), (40, 50, 3), (60, 70, 4)] {
            live.insert(g(s), rec(e, q));
        }
        let mut direct = live.clone();
        direct.insert(g(5), rec(45, 9));
        let edits = live.clone_overlapping(g(5), g(45)).insert(g(5), rec(45, 9));
        live.apply(edits);
        let a: Vec<_> = live.iter().map(|(s, r)| (s, *r)).collect();
        let b: Vec<_> = direct.iter().map(|(s, r)| (s, *r)).collect();
        assert_eq!(a, b);
    }

    /// The indices, recomputed from every record.
    fn scanned(map: &RangeMap) -> (Option<GrainIndex>, u64, Vec<(u64, u64)>) {
        let first = map.iter().find(|(_, r)| !r.reclaimed).map(|(s, _)| s);
        let grains = map
            .iter()
            .filter(|(_, r)| !r.reclaimed)
            .map(|(s, r)| r.end_grain - s)
            .sum();
        let mut pins: BTreeMap<u64, u64> = BTreeMap::new();
        for (_, r) in map.iter() {
            if let Some(id) = r.kind.pinned_snapshot() {
                *pins.entry(id).or_insert(0) += 1;
            }
        }
        (first, grains, pins.into_iter().collect())
    }

    fn indexed(map: &RangeMap) -> (Option<GrainIndex>, u64, Vec<(u64, u64)>) {
        let pins = map.pins.iter().map(|(&id, &n)| (id, n)).collect();
        (
            map.first_unreclaimed().map(|(s, _)| s),
            map.unreclaimed_grains(),
            pins,
        )
    }

    fn any_rec(seed: u64, start: GrainIndex) -> RangeRec {
        let kind = match seed % 3 {
            0 => RangeKind::Hole,
            1 => RangeKind::Pattern(seed),
            _ => RangeKind::Ref {
                snapshot: seed % 5,
                delta: seed,
            },
        };
        RangeRec {
            end_grain: start + 1 + (seed >> 8) % 40,
            seq: crate::ids::SnapshotSeq::new(seed),
            kind,
            reclaimed: (seed >> 4) & 1 == 0,
        }
    }

    proptest::proptest! {
        #[test]
        fn indices_agree_with_the_records_after_any_edits(
            ops in proptest::collection::vec((0u8..5, 0u64..200, proptest::prelude::any::<u64>()), 1..120)
        ) {
            let mut map = RangeMap::default();
            for (op, start, seed) in ops {
                let start = g(start);
                match op {
                    0 => {
                        map.insert(start, any_rec(seed, start));
                    }
                    1 => {
                        let rec = any_rec(seed, start);
                        let edits = map.clone_overlapping(start, rec.end_grain).insert(start, rec);
                        map.apply(edits);
                    }
                    2 => {
                        if let Some((s, _)) = map.find(start) {
                            map.remove(s);
                        }
                    }
                    3 => {
                        if let Some((s, r)) = map.find(start) {
                            map.replace(s, RangeRec { reclaimed: !r.reclaimed, ..r });
                        }
                    }
                    _ => map.load(start + 1000, any_rec(seed, start + 1000)),
                }
                proptest::prop_assert_eq!(indexed(&map), scanned(&map));
            }
        }
    }

    #[test]
    fn edits_mirror_the_change() {
        let mut map = RangeMap::default();
        map.insert(g(10), rec(20, 1));
        map.insert(g(30), rec(40, 1));
        let edits = map.insert(g(0), rec(35, 2));
        assert_eq!(edits.removed_starts, vec![g(10), g(30)]);
        let mut starts: Vec<GrainIndex> = edits.upserted.iter().map(|(s, _)| *s).collect();
        starts.sort();
        assert_eq!(starts, vec![g(0), g(35)]);
    }
}
