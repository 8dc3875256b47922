//! The in-memory interval structure of a volume's range records (the persisted
//! copy lives in the `ranges` table). Intervals never overlap: inserting a range
//! cuts whatever it covers, so a lookup is one ordered-map probe.

use std::collections::BTreeMap;

use crate::meta::RangeRec;

#[derive(Debug, Default, Clone)]
pub struct RangeMap {
    /// start grain → record (end grain inside).
    by_start: BTreeMap<u64, RangeRec>,
}

/// What an insert changed, so the caller can mirror it in the KV store.
#[derive(Debug, Default)]
pub struct RangeEdits {
    pub removed_starts: Vec<u64>,
    pub upserted: Vec<(u64, RangeRec)>,
}

impl RangeMap {
    pub fn len(&self) -> usize {
        self.by_start.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_start.is_empty()
    }

    /// Loads a record as stored (used at recovery; must not overlap).
    pub fn load(&mut self, start: u64, rec: RangeRec) {
        assert!(start < rec.end_grain);
        self.by_start.insert(start, rec);
    }

    /// The record covering `grain`, with its start.
    pub fn find(&self, grain: u64) -> Option<(u64, RangeRec)> {
        let (&start, rec) = self.by_start.range(..=grain).next_back()?;
        (grain < rec.end_grain).then_some((start, *rec))
    }

    /// Records overlapping [start, end), in order, clipped to it.
    pub fn overlapping(&self, start: u64, end: u64) -> Vec<(u64, RangeRec)> {
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
        for (&s, rec) in self.by_start.range(start.saturating_add(1)..end) {
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
    pub fn insert(&mut self, start: u64, rec: RangeRec) -> RangeEdits {
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
                self.by_start.insert(s, head);
                edits.upserted.push((s, head));
                if old.end_grain > end {
                    self.by_start.insert(end, old);
                    edits.upserted.push((end, old));
                }
            }
        }
        let covered: Vec<u64> = self.by_start.range(start..end).map(|(&s, _)| s).collect();
        for s in covered {
            let old = self.by_start.remove(&s).expect("present");
            edits.removed_starts.push(s);
            if old.end_grain > end {
                self.by_start.insert(end, old);
                edits.upserted.push((end, old));
            }
        }
        self.by_start.insert(start, rec);
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
            self.by_start.remove(&start);
        }
        for (start, rec) in edits.upserted {
            assert!(start < rec.end_grain);
            self.by_start.insert(start, rec);
        }
    }

    /// Removes the record starting at `start`.
    pub fn remove(&mut self, start: u64) -> Option<RangeRec> {
        self.by_start.remove(&start)
    }

    /// Replaces the record at `start` (same extent).
    pub fn replace(&mut self, start: u64, rec: RangeRec) {
        let old = self
            .by_start
            .insert(start, rec)
            .expect("replacing a present record");
        assert_eq!(old.end_grain, rec.end_grain);
    }

    /// The first record not yet reclaimed.
    pub fn first_unreclaimed(&self) -> Option<(u64, RangeRec)> {
        self.by_start
            .iter()
            .find(|(_, r)| !r.reclaimed)
            .map(|(&s, r)| (s, *r))
    }

    /// Grains covered by records not yet reclaimed (the reclaim backlog).
    pub fn unreclaimed_grains(&self) -> u64 {
        self.by_start
            .iter()
            .filter(|(_, r)| !r.reclaimed)
            .map(|(&s, r)| r.end_grain - s)
            .sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, &RangeRec)> {
        self.by_start.iter().map(|(&s, r)| (s, r))
    }
}

impl RangeMap {
    /// A map holding only the records overlapping [start, end) (and the one just
    /// before, which an insert may cut): enough to plan an insert's edits without
    /// touching the live map until the commit succeeded.
    pub fn clone_overlapping(&self, start: u64, end: u64) -> RangeMap {
        let mut out = RangeMap::default();
        if let Some((s, rec)) = self.find(start) {
            out.by_start.insert(s, rec);
        }
        for (&s, rec) in self.by_start.range(start..end) {
            out.by_start.insert(s, *rec);
        }
        out
    }

    /// Start of the first record beginning after `grain`.
    pub fn next_start_after(&self, grain: u64) -> Option<u64> {
        self.by_start
            .range(grain.saturating_add(1)..)
            .next()
            .map(|(&s, _)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::RangeKind;

    fn rec(end: u64, seq: u64) -> RangeRec {
        RangeRec {
            end_grain: end,
            seq,
            kind: RangeKind::Hole,
            reclaimed: false,
        }
    }

    #[test]
    fn insert_cuts_overlaps() {
        let mut map = RangeMap::default();
        map.insert(0, rec(100, 1));
        map.insert(40, rec(60, 2));
        assert_eq!(map.len(), 3);
        assert_eq!(map.find(10).unwrap().1.seq, 1);
        assert_eq!(map.find(50).unwrap().1.seq, 2);
        assert_eq!(map.find(70), Some((60, rec(100, 1))));
        map.insert(30, rec(80, 3));
        let got: Vec<_> = map.iter().map(|(s, r)| (s, r.end_grain, r.seq)).collect();
        assert_eq!(got, vec![(0, 30, 1), (30, 80, 3), (80, 100, 1)]);
        assert_eq!(map.find(100), None);
        let over = map.overlapping(20, 90);
        assert_eq!(over.len(), 3);
        assert_eq!(over[0].0, 20);
        assert_eq!(over[2].1.end_grain, 90);
    }

    #[test]
    fn planned_edits_applied_equal_a_direct_insert() {
        let mut live = RangeMap::default();
        for (s, e, q) in [(0, 10, 1), (20, 30, 2), (40, 50, 3), (60, 70, 4)] {
            live.insert(s, rec(e, q));
        }
        let mut direct = live.clone();
        direct.insert(5, rec(45, 9));
        let edits = live.clone_overlapping(5, 45).insert(5, rec(45, 9));
        live.apply(edits);
        let a: Vec<_> = live.iter().map(|(s, r)| (s, *r)).collect();
        let b: Vec<_> = direct.iter().map(|(s, r)| (s, *r)).collect();
        assert_eq!(a, b);
    }

    #[test]
    fn edits_mirror_the_change() {
        let mut map = RangeMap::default();
        map.insert(10, rec(20, 1));
        map.insert(30, rec(40, 1));
        let edits = map.insert(0, rec(35, 2));
        assert_eq!(edits.removed_starts, vec![10, 30]);
        let mut starts: Vec<u64> = edits.upserted.iter().map(|(s, _)| *s).collect();
        starts.sort();
        assert_eq!(starts, vec![0, 35]);
    }
}
