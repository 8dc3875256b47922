//! How the content of a grain is found, for reads and block status.
//!
//! A live volume is its point mappings and its range records: the newer of the two
//! wins. A snapshot is the same volume at the snapshot's seq: the live mapping if it
//! is old enough, otherwise the one history entry alive at that seq, together with
//! the range map the snapshot froze. A `Ref` range record (clone, range copy,
//! revert) sends the grain on to another snapshot.
//!
//! Live reads scan only the live mapping table, so their cost does not depend on
//! how many snapshots exist or how much history they hold.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use redb::{ReadOnlyTable, ReadTransaction};

use crate::ids::{GrainIndex, SnapshotSeq};
use crate::meta::schema::{self, kv_error, GrainTarget, HistValue, MapValue, RangeKind, RangeRec};
use crate::meta::store::{MapsTable, ReadView};
use crate::versions::range_map::RangeMap;
use crate::versions::snapshot::SnapshotShared;
use crate::{Engine, EngineError, Result};

/// Longest read (in grains) whose point mappings are looked up in the cache
/// of them (see [`crate::meta::mapping_cache`]) and added to it: a scan of the mapping
/// table costs about one descent however many adjacent grains it returns, so
/// larger reads gain little from it and would crowd small ones out.
const MAX_CACHED_READ_GRAINS: u64 = 8;

/// Deepest chain of references (a clone of a clone of …) a read follows.
pub(crate) const MAX_REF_DEPTH: u32 = 64;

/// What a grain reads as once every reference is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Content {
    Hole,
    Pattern(u64),
    Block(crate::ids::BlockId),
}

/// A run of grains with one content. `Block` runs are always one grain long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub grains: u64,
    pub content: Content,
}

/// Which mappings to read.
pub(crate) enum Source<'v> {
    Live {
        volume: crate::ids::VolumeId,
        ranges: &'v RangeMap,
    },
    Snapshot(Arc<SnapshotShared>),
}

impl Source<'_> {
    fn ranges(&self) -> &RangeMap {
        match self {
            Source::Live { ranges, .. } => ranges,
            Source::Snapshot(s) => &s.ranges,
        }
    }

    /// Grains past the end read as holes (a clone grown beyond its source).
    fn grain_limit(&self) -> GrainIndex {
        match self {
            Source::Live { .. } => GrainIndex::MAX,
            Source::Snapshot(s) => GrainIndex::new(s.size_bytes.div_ceil(crate::GRAIN_BYTES)),
        }
    }
}

/// A grain's content before references are followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effective {
    Hole,
    Pattern(u64),
    Block(crate::ids::BlockId),
    Ref { snapshot: u64, delta: u64 },
}

/// The newer of a point mapping and the range record covering the grain.
fn effective(point: Option<MapValue>, range: Option<RangeRec>) -> Effective {
    let from_point = |v: MapValue| match v.target {
        GrainTarget::Block(id) => Effective::Block(id),
        GrainTarget::Pattern(p) => Effective::Pattern(p),
    };
    let from_range = |r: RangeRec| match r.kind {
        RangeKind::Hole => Effective::Hole,
        RangeKind::Pattern(p) => Effective::Pattern(p),
        RangeKind::Ref { snapshot, delta } => Effective::Ref { snapshot, delta },
    };
    match (point, range) {
        (None, None) => Effective::Hole,
        (Some(v), None) => from_point(v),
        (None, Some(r)) => from_range(r),
        (Some(v), Some(r)) if v.seq > r.seq => from_point(v),
        (Some(_), Some(r)) => from_range(r),
    }
}

/// The history table as a read transaction sees it.
type HistoryTable = ReadOnlyTable<(u64, u64, u64), &'static [u8]>;

/// One read transaction's view of the mapping tables.
///
/// The history and block tables are opened on first use: most reads of a
/// volume without snapshots find their blocks' locations in memory and need
/// neither, and opening them was 5% of the daemon's CPU in 4 KiB reads.
pub(crate) struct Reader<'e> {
    engine: &'e Engine,
    source: ViewSource<'e>,
    history: Option<HistoryTable>,
    blocks: Option<ReadOnlyTable<u64, &'static [u8]>>,
    kv_ops: u64,
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        self.engine
            .stats
            .read_kv_ops
            .fetch_add(self.kv_ops, Ordering::Relaxed);
    }
}

/// The read transaction a reader reads: the caller's own, or the view reads
/// share until the next commit (`kv`).
enum ViewSource<'e> {
    Own {
        txn: &'e ReadTransaction,
        maps: MapsTable,
    },
    Shared(Arc<ReadView>),
}

impl ViewSource<'_> {
    fn txn(&self) -> &ReadTransaction {
        match self {
            ViewSource::Own { txn, .. } => txn,
            ViewSource::Shared(view) => view.txn(),
        }
    }

    fn maps(&self) -> &MapsTable {
        match self {
            ViewSource::Own { maps, .. } => maps,
            ViewSource::Shared(view) => view.maps(),
        }
    }
}

impl<'e> Reader<'e> {
    /// A reader of the caller's own read transaction.
    pub fn new(engine: &'e Engine, txn: &'e ReadTransaction) -> Result<Self> {
        let maps = txn.open_table(schema::MAPPINGS).map_err(kv_error)?;
        Ok(Self::of(engine, ViewSource::Own { txn, maps }))
    }

    /// A reader of the read view reads share until the next commit.
    pub fn shared(engine: &'e Engine) -> Result<Self> {
        Ok(Self::of(engine, ViewSource::Shared(engine.read_view()?)))
    }

    fn of(engine: &'e Engine, source: ViewSource<'e>) -> Self {
        Reader {
            engine,
            source,
            history: None,
            blocks: None,
            kv_ops: 0,
        }
    }

    /// The block table of this read transaction.
    pub fn blocks(&mut self) -> Result<&ReadOnlyTable<u64, &'static [u8]>> {
        if self.blocks.is_none() {
            self.blocks = Some(
                self.source
                    .txn()
                    .open_table(schema::BLOCKS)
                    .map_err(kv_error)?,
            );
        }
        Ok(self.blocks.as_ref().expect("opened above"))
    }

    fn history(&mut self) -> Result<&HistoryTable> {
        if self.history.is_none() {
            self.history = Some(
                self.source
                    .txn()
                    .open_table(schema::HISTORY)
                    .map_err(kv_error)?,
            );
        }
        Ok(self.history.as_ref().expect("opened above"))
    }

    /// Counts one block lookup done by the caller.
    pub fn count_block_lookup(&mut self) {
        self.kv_ops += 1;
    }

    /// Live point mappings of grains [first, end), in order, at most `limit`.
    fn live_points(
        &mut self,
        volume: crate::ids::VolumeId,
        first: GrainIndex,
        end: GrainIndex,
        limit: u64,
    ) -> Result<Vec<(GrainIndex, MapValue)>> {
        let mut out = Vec::new();
        if first >= end {
            return Ok(out);
        }
        // Only where no answer can reach the limit: a cached one is whole.
        let cached = match &self.source {
            ViewSource::Shared(view)
                if end - first <= MAX_CACHED_READ_GRAINS && end - first < limit =>
            {
                Some(view.generation())
            }
            _ => None,
        };
        let cache = self.engine.db.maps_cache();
        if let Some(generation) = cached {
            if let Some(found) = cache.get(generation, volume, (first, end)) {
                assert!((found.len() as u64) <= end - first);
                return Ok(found);
            }
        }
        self.kv_ops += 1;
        for item in crate::meta::point_rows::range(self.source.maps(), volume, first, end)? {
            let (_, grain, value) = item?;
            self.kv_ops += 1;
            out.push((grain, value));
            if out.len() as u64 >= limit {
                return Ok(out);
            }
        }
        if let Some(generation) = cached {
            cache.insert(generation, volume, (first, end), &out);
        }
        Ok(out)
    }

    /// The point mappings a snapshot sees in [first, end): a live mapping no newer
    /// than the snapshot, else the history version alive at its seq.
    fn snapshot_points(
        &mut self,
        snapshot: &SnapshotShared,
        first: GrainIndex,
        end: GrainIndex,
        limit: u64,
    ) -> Result<Vec<(GrainIndex, MapValue)>> {
        let volume = snapshot.volume_id;
        let seq = snapshot.seq;
        let mut out: Vec<(GrainIndex, MapValue)> = self
            .live_points(volume, first, end, u64::MAX)?
            .into_iter()
            .filter(|(_, v)| v.seq <= seq)
            .collect();
        if first < end {
            self.kv_ops += 1;
            let versions = self
                .history()?
                .range((volume.get(), first.get(), 0)..(volume.get(), end.get(), 0))
                .map_err(kv_error)?;
            for item in versions {
                let (key, value) = item.map_err(kv_error)?;
                self.kv_ops += 1;
                let (_, grain, version) = key.value();
                let (grain, version) = (GrainIndex::new(grain), SnapshotSeq::new(version));
                let hist = HistValue::decode(value.value())?;
                if version <= seq && seq < hist.died_seq {
                    out.push((
                        grain,
                        MapValue {
                            seq: version,
                            target: hist.target,
                        },
                    ));
                }
            }
        }
        out.sort_by_key(|(grain, _)| *grain);
        out.dedup_by_key(|(grain, _)| *grain);
        out.truncate(limit.try_into().unwrap_or(usize::MAX));
        Ok(out)
    }

    /// The content of grains [first, end) of `source` as runs, covering a prefix
    /// [first, reached) that is the whole range unless more than `limit` point
    /// mappings lie in it (block status answers for the prefix; reads, which are
    /// bounded far below the limit, always get the whole range).
    pub fn runs(
        &mut self,
        source: &Source,
        first: GrainIndex,
        end: GrainIndex,
        limit: u64,
        depth: u32,
    ) -> Result<(Vec<Run>, GrainIndex)> {
        if depth > MAX_REF_DEPTH {
            return Err(EngineError::Corruption(format!(
                "more than {MAX_REF_DEPTH} nested references"
            )));
        }
        let mut runs = Vec::new();
        let readable_end = end.min(source.grain_limit()).max(first);
        let (mut covered, reached) =
            self.readable_runs(source, first, readable_end, limit, depth, &mut runs)?;
        if reached == readable_end && readable_end < end {
            push(&mut runs, end - readable_end, Content::Hole);
            covered = end;
        }
        assert!(covered > first || first == end);
        Ok((runs, covered.max(reached)))
    }

    fn readable_runs(
        &mut self,
        source: &Source,
        first: GrainIndex,
        end: GrainIndex,
        limit: u64,
        depth: u32,
        runs: &mut Vec<Run>,
    ) -> Result<(GrainIndex, GrainIndex)> {
        let mut points = match source {
            Source::Live { volume, .. } => self.live_points(*volume, first, end, limit)?,
            Source::Snapshot(s) => self.snapshot_points(s, first, end, limit)?,
        };
        let mut end = end;
        if points.len() as u64 >= limit {
            end = points.last().expect("non-empty").0 + 1;
        }
        points.retain(|(g, _)| *g < end);
        let ranges = source.ranges();
        let mut points = points.into_iter().peekable();
        let mut grain = first;
        while grain < end {
            let range = ranges.find(grain);
            let (run_end, eff) = match points.peek() {
                Some(&(g, value)) if g == grain => {
                    points.next();
                    (grain + 1, effective(Some(value), range.map(|(_, r)| r)))
                }
                next => {
                    let next_point = next.map(|&(g, _)| g).unwrap_or(end).min(end);
                    let range_end = match range {
                        Some((_, r)) => r.end_grain,
                        None => ranges.next_start_after(grain).unwrap_or(GrainIndex::MAX),
                    };
                    (
                        next_point.min(range_end),
                        effective(None, range.map(|(_, r)| r)),
                    )
                }
            };
            assert!(run_end > grain);
            let reached = self.push_effective(eff, grain, run_end, limit, depth, runs)?;
            if reached < run_end {
                return Ok((reached, reached));
            }
            grain = run_end;
        }
        Ok((end, end))
    }

    /// Appends the content of [from, to) given its effective value; returns how far
    /// it got (short only when a referenced range hit the scan limit).
    fn push_effective(
        &mut self,
        eff: Effective,
        from: GrainIndex,
        to: GrainIndex,
        limit: u64,
        depth: u32,
        runs: &mut Vec<Run>,
    ) -> Result<GrainIndex> {
        match eff {
            Effective::Hole => push(runs, to - from, Content::Hole),
            Effective::Pattern(p) => push(runs, to - from, Content::Pattern(p)),
            Effective::Block(id) => {
                assert_eq!(to - from, 1);
                push(runs, 1, Content::Block(id));
            }
            Effective::Ref { snapshot, delta } => {
                let target = self.engine.snapshot_by_id(snapshot).ok_or_else(|| {
                    EngineError::Corruption(format!(
                        "snapshot {snapshot} is referenced but missing"
                    ))
                })?;
                let source = Source::Snapshot(target);
                let (sub, reached) = self.runs(
                    &source,
                    from.wrapping_add(delta),
                    to.wrapping_add(delta),
                    limit,
                    depth + 1,
                )?;
                for run in sub {
                    push(runs, run.grains, run.content);
                }
                return Ok(reached.wrapping_sub(delta));
            }
        }
        Ok(to)
    }
}

/// Appends a run, merging it with the previous one when both are the same
/// hole or pattern.
fn push(runs: &mut Vec<Run>, grains: u64, content: Content) {
    if grains == 0 {
        return;
    }
    if let Some(last) = runs.last_mut() {
        if last.content == content && !matches!(content, Content::Block(_)) {
            last.grains += grains;
            return;
        }
    }
    if let Content::Block(_) = content {
        for _ in 0..grains {
            runs.push(Run { grains: 1, content });
        }
        return;
    }
    runs.push(Run { grains, content });
}
