//! The data path: reads, writes, range operations and block status.

use std::sync::Arc;

use redb::ReadOnlyTable;

use crate::grain::{self, GrainContent};
use crate::meta::{self, kv_error, BlockRec, MapValue, RangeKind, RangeRec, Target};
use crate::segment::{self, RecordHeader};
use crate::{
    Engine, EngineError, Extent, ExtentState, Result, VolumeShared, VolumeView, GRAIN_BYTES,
};

/// Most mappings one block-status call examines before answering with a prefix.
const MAX_EXTENT_SCAN_GRAINS: u64 = 1 << 16;

/// Whether a mapping target counts as data (for `written_bytes`).
pub(crate) fn is_data(target: Target) -> bool {
    !matches!(target, Target::Pattern(0))
}

/// What a grain reads as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effective {
    Hole,
    Pattern(u64),
    Block(u64),
}

impl Effective {
    fn state(self) -> ExtentState {
        match self {
            Effective::Hole => ExtentState::Hole,
            Effective::Pattern(0) => ExtentState::Zero,
            _ => ExtentState::Data,
        }
    }
}

/// The newer of a point mapping and the range record covering the grain.
fn effective(point: Option<MapValue>, range: Option<RangeRec>) -> Effective {
    let from_point = |v: MapValue| match v.target {
        Target::Block(id) => Effective::Block(id),
        Target::Pattern(p) => Effective::Pattern(p),
    };
    let from_range = |r: RangeRec| match r.kind {
        RangeKind::Hole => Effective::Hole,
        RangeKind::Pattern(p) => Effective::Pattern(p),
    };
    match (point, range) {
        (None, None) => Effective::Hole,
        (Some(v), None) => from_point(v),
        (None, Some(r)) => from_range(r),
        (Some(v), Some(r)) if v.seq > r.seq => from_point(v),
        (Some(_), Some(r)) => from_range(r),
    }
}

fn check_range(view: &VolumeView, offset_bytes: u64, length_bytes: u64) -> Result<()> {
    match offset_bytes.checked_add(length_bytes) {
        Some(end) if end <= view.size_bytes => Ok(()),
        _ => Err(EngineError::OutOfRange {
            offset_bytes,
            length_bytes,
            size_bytes: view.size_bytes,
        }),
    }
}

/// Point mappings of grains [first, end) of a volume, in order.
fn scan_points(
    maps: &ReadOnlyTable<(u64, u64), &'static [u8]>,
    volume: u64,
    first: u64,
    end: u64,
    limit: u64,
) -> Result<Vec<(u64, MapValue)>> {
    let mut out = Vec::new();
    if first >= end {
        return Ok(out);
    }
    for item in maps
        .range((volume, first)..(volume, end))
        .map_err(kv_error)?
    {
        let (key, value) = item.map_err(kv_error)?;
        out.push((key.value().1, MapValue::decode(value.value())?));
        if out.len() as u64 >= limit {
            break;
        }
    }
    Ok(out)
}

impl Engine {
    pub(crate) fn read(&self, vol: &VolumeShared, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        let view = vol.view.read();
        check_range(&view, offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let _io = self.io_lock.read();
        self.read_locked(vol, &view, offset_bytes, buf)
    }

    /// Reads with the view and the I/O lock held by the caller.
    fn read_locked(
        &self,
        vol: &VolumeShared,
        view: &VolumeView,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let txn = self.begin_read()?;
        let maps = txn.open_table(meta::MAPPINGS).map_err(kv_error)?;
        let blocks = txn.open_table(meta::BLOCKS).map_err(kv_error)?;
        let first = offset_bytes / GRAIN_BYTES;
        let end = (offset_bytes + buf.len() as u64).div_ceil(GRAIN_BYTES);
        let points = scan_points(&maps, vol.id, first, end, u64::MAX)?;
        let mut points = points.into_iter().peekable();
        let mut grain_buf = vec![0u8; GRAIN_BYTES as usize];
        for grain in first..end {
            let point = points.next_if(|(g, _)| *g == grain).map(|(_, v)| v);
            let range = view.ranges.find(grain).map(|(_, r)| r);
            let grain_start = grain * GRAIN_BYTES;
            let from = offset_bytes.max(grain_start);
            let to = (offset_bytes + buf.len() as u64).min(grain_start + GRAIN_BYTES);
            let out = &mut buf[(from - offset_bytes) as usize..(to - offset_bytes) as usize];
            let in_grain = (from - grain_start) as usize;
            match effective(point, range) {
                Effective::Hole => out.fill(0),
                Effective::Pattern(p) => grain::fill_pattern(p, in_grain, out),
                Effective::Block(id) => {
                    self.read_block(&blocks, id, &mut grain_buf).inspect_err(
                        |e| tracing::error!(volume = %vol.name, grain, "read failed: {e}"),
                    )?;
                    out.copy_from_slice(&grain_buf[in_grain..in_grain + out.len()]);
                }
            }
        }
        Ok(())
    }

    /// Reads and verifies one block's record; a mismatch is an error, never data.
    fn read_block(
        &self,
        blocks: &ReadOnlyTable<u64, &'static [u8]>,
        id: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let rec = blocks
            .get(id)
            .map_err(kv_error)?
            .ok_or_else(|| EngineError::Corruption(format!("block {id} is mapped but missing")))?;
        let rec = BlockRec::decode(rec.value())?;
        let mut record = vec![0u8; rec.record_bytes() as usize];
        self.store
            .read_at(rec.segment, u64::from(rec.offset_bytes), &mut record)
            .map_err(|e| {
                EngineError::io(
                    format!("reading block {id} from segment {}", rec.segment),
                    e,
                )
            })?;
        let expected = RecordHeader {
            flags: rec.flags,
            payload_len: rec.payload_len,
            block_id: id,
        };
        let corrupt = |why: String| {
            self.stats
                .checksum_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            EngineError::Corruption(format!(
                "block {id} in segment {} at {}: {why}",
                rec.segment, rec.offset_bytes
            ))
        };
        let payload = segment::verify_record(&mut record, expected, rec.crc).map_err(corrupt)?;
        grain::decode(payload, rec.flags & segment::FLAG_COMPRESSED != 0, out).map_err(corrupt)
    }

    pub(crate) fn write(
        &self,
        vol: &Arc<VolumeShared>,
        offset_bytes: u64,
        data: &[u8],
    ) -> Result<()> {
        let view = vol.view.read();
        check_range(&view, offset_bytes, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        // Classify whole grains before taking the writer mutex: hashing and
        // compression are the expensive part and need no shared state.
        let first = offset_bytes / GRAIN_BYTES;
        let end = (offset_bytes + data.len() as u64).div_ceil(GRAIN_BYTES);
        let end_bytes = offset_bytes + data.len() as u64;
        let whole = |grain: u64| {
            grain * GRAIN_BYTES >= offset_bytes && (grain + 1) * GRAIN_BYTES <= end_bytes
        };
        if (first..end).all(whole) {
            let contents = data
                .chunks_exact(GRAIN_BYTES as usize)
                .map(grain::classify)
                .collect();
            return self.commit_grains(vol.clone(), first, contents);
        }
        let mut contents: Vec<Option<GrainContent>> = (first..end)
            .map(|grain| {
                whole(grain).then(|| {
                    let at = (grain * GRAIN_BYTES - offset_bytes) as usize;
                    grain::classify(&data[at..at + GRAIN_BYTES as usize])
                })
            })
            .collect();
        let mut ws = self.writer.lock();
        // Partial grains: read-modify-write under the writer mutex, so no other
        // write to the grain can slip between the read and the write.
        for (i, content) in contents.iter_mut().enumerate() {
            if content.is_some() {
                continue;
            }
            let grain = first + i as u64;
            let start = grain * GRAIN_BYTES;
            let mut merged = vec![0u8; GRAIN_BYTES as usize];
            {
                let _io = self.io_lock.read();
                self.read_locked(vol, &view, start, &mut merged)?;
            }
            let from = offset_bytes.max(start);
            let to = end_bytes.min(start + GRAIN_BYTES);
            merged[(from - start) as usize..(to - start) as usize].copy_from_slice(
                &data[(from - offset_bytes) as usize..(to - offset_bytes) as usize],
            );
            *content = Some(grain::classify(&merged));
        }
        let contents = contents
            .into_iter()
            .map(|c| c.expect("every grain classified"))
            .collect();
        self.commit_grains_locked(&mut ws, vol.clone(), first, contents)
    }

    /// Unmap or write-zeroes of a byte range: partial grains at the edges are
    /// written as zeroes, whole grains get one range record.
    pub(crate) fn write_range(
        &self,
        vol: &Arc<VolumeShared>,
        offset_bytes: u64,
        length_bytes: u64,
        kind: RangeKind,
    ) -> Result<()> {
        {
            let view = vol.view.read();
            check_range(&view, offset_bytes, length_bytes)?;
        }
        if length_bytes == 0 {
            return Ok(());
        }
        let end_bytes = offset_bytes + length_bytes;
        let first_whole = offset_bytes.div_ceil(GRAIN_BYTES);
        let end_whole = end_bytes / GRAIN_BYTES;
        if first_whole >= end_whole {
            return self.write_zero_bytes(vol, offset_bytes, end_bytes);
        }
        if offset_bytes < first_whole * GRAIN_BYTES {
            self.write_zero_bytes(vol, offset_bytes, first_whole * GRAIN_BYTES)?;
        }
        if end_whole * GRAIN_BYTES < end_bytes {
            self.write_zero_bytes(vol, end_whole * GRAIN_BYTES, end_bytes)?;
        }
        self.insert_range(vol, first_whole, end_whole, kind)
    }

    fn write_zero_bytes(&self, vol: &Arc<VolumeShared>, from: u64, to: u64) -> Result<()> {
        let zeroes = vec![0u8; (to - from) as usize];
        self.write(vol, from, &zeroes)
    }

    /// Writes one range record (plus the cuts of records it overlaps): O(1) in the
    /// grains covered.
    fn insert_range(
        &self,
        vol: &VolumeShared,
        start: u64,
        end: u64,
        kind: RangeKind,
    ) -> Result<()> {
        let mut view = vol.view.write();
        let mut ws = self.writer.lock();
        let mut planned = view.ranges.clone_overlapping(start, end);
        self.transact(&mut ws, true, |st, t, _| {
            let rec = RangeRec {
                end_grain: end,
                seq: st.take_seq(),
                kind,
                reclaimed: false,
            };
            let edits = planned.insert(start, rec);
            for s in &edits.removed_starts {
                t.ranges()?.remove((vol.id, *s)).map_err(kv_error)?;
            }
            for (s, r) in &edits.upserted {
                t.ranges()?
                    .insert((vol.id, *s), &r.encode()[..])
                    .map_err(kv_error)?;
            }
            st.records_written += (edits.removed_starts.len() + edits.upserted.len()) as u64;
            Ok(edits)
        })
        .map(|edits| view.ranges.apply(edits))?;
        drop(ws);
        let data = matches!(kind, RangeKind::Pattern(p) if p != 0);
        vol.bitmap
            .lock()
            .set_range(start, end.min(view.size_bytes.div_ceil(GRAIN_BYTES)), data);
        drop(view);
        self.wake_reclaimer();
        Ok(())
    }

    pub(crate) fn extents(
        &self,
        vol: &VolumeShared,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<Extent>> {
        let view = vol.view.read();
        check_range(&view, offset_bytes, length_bytes)?;
        if length_bytes == 0 {
            return Ok(Vec::new());
        }
        let txn = self.begin_read()?;
        let maps = txn.open_table(meta::MAPPINGS).map_err(kv_error)?;
        let first = offset_bytes / GRAIN_BYTES;
        let end_bytes = offset_bytes + length_bytes;
        let mut end = end_bytes.div_ceil(GRAIN_BYTES);
        let points = scan_points(&maps, vol.id, first, end, MAX_EXTENT_SCAN_GRAINS)?;
        if points.len() as u64 >= MAX_EXTENT_SCAN_GRAINS {
            // Answer for the prefix examined; the client asks again for the rest.
            end = points.last().expect("non-empty").0 + 1;
        }
        let mut extents: Vec<Extent> = Vec::new();
        let mut push = |from: u64, to: u64, state: ExtentState| {
            let from = from.max(offset_bytes);
            let to = to.min(end_bytes);
            if from >= to {
                return;
            }
            match extents.last_mut() {
                Some(last) if last.state == state => last.length_bytes += to - from,
                _ => extents.push(Extent {
                    length_bytes: to - from,
                    state,
                }),
            }
        };
        // Walk the grains in runs: between point mappings the state is the range
        // records' (or a hole), so a sparse terabyte costs a few steps.
        let mut grain = first;
        let mut points = points.into_iter().peekable();
        while grain < end {
            if let Some(&(g, value)) = points.peek() {
                if g == grain {
                    points.next();
                    let range = view.ranges.find(grain).map(|(_, r)| r);
                    push(
                        grain * GRAIN_BYTES,
                        (grain + 1) * GRAIN_BYTES,
                        effective(Some(value), range).state(),
                    );
                    grain += 1;
                    continue;
                }
            }
            let next_point = points.peek().map(|&(g, _)| g).unwrap_or(end).min(end);
            // Within [grain, next_point) only range records matter.
            let run_end = match view.ranges.find(grain) {
                Some((_, r)) => {
                    push(
                        grain * GRAIN_BYTES,
                        r.end_grain.min(next_point) * GRAIN_BYTES,
                        effective(None, Some(r)).state(),
                    );
                    r.end_grain.min(next_point)
                }
                None => {
                    let next_range = view.ranges.next_start_after(grain).unwrap_or(u64::MAX);
                    let run_end = next_range.min(next_point);
                    push(
                        grain * GRAIN_BYTES,
                        run_end * GRAIN_BYTES,
                        ExtentState::Hole,
                    );
                    run_end
                }
            };
            assert!(run_end > grain);
            grain = run_end;
        }
        assert!(!extents.is_empty());
        Ok(extents)
    }
}
