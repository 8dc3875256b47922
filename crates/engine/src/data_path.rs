//! The data path: reads, writes, range operations and block status.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use redb::ReadOnlyTable;

use crate::ids::{GrainIndex, SnapshotSeq};
use crate::meta::schema::{self, kv_error, BlockRec, RangeKind, RangeRec};
use crate::read::assemble::{Fill, Filler};
use crate::segment::log::{self, RecordHeader};
use crate::space::data_bitmap::DataBitmap;
use crate::units::check_range;
use crate::versions::resolve::{Content, Reader, Source};
use crate::versions::snapshot::SnapshotShared;
use crate::write::classify::{self, GrainContent};
use crate::{
    Engine, EngineError, Extent, ExtentState, Result, VolumeShared, VolumeView, GRAIN_BYTES,
};

/// Most mappings one block-status call examines before answering with a prefix.
const MAX_EXTENT_SCAN_GRAINS: u64 = 1 << 16;

fn state_of(content: Content) -> ExtentState {
    match content {
        Content::Hole => ExtentState::Hole,
        Content::Pattern(0) => ExtentState::Zero,
        _ => ExtentState::Data,
    }
}

/// Most bytes of raw records waiting for the background reducer: what a
/// burst may leave behind before writes reduce inline again. Bounds the
/// backlog's memory (an entry per waiting block: 1 Mi of them, about 40 MB)
/// and the room raw data takes meanwhile.
pub const MAX_REDUCTION_BACKLOG_BYTES: u64 = 4 << 30;
/// Under [`crate::ReductionMode::Adaptive`], writes this large store raw
/// grains for the background reducer, smaller ones reduce inline. Large
/// writes are where compression is the write path's largest cost, and a host
/// streaming them waits on it whether one write is in flight or many; small
/// writes are bound by their metadata, not by compression.
pub const ADAPTIVE_MIN_WRITE_BYTES: u64 = 128 << 10;

impl Engine {
    pub(crate) fn read(&self, vol: &VolumeShared, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        let view = vol.view.read();
        check_range(view.size_bytes, offset_bytes, buf.len() as u64)?;
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
        let source = Source::Live {
            volume: vol.id,
            ranges: &view.ranges,
        };
        self.read_source(&source, &vol.name, offset_bytes, buf)
    }

    /// Reads a snapshot (its size checked by the caller).
    pub(crate) fn read_snapshot(
        &self,
        snapshot: &Arc<SnapshotShared>,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        check_range(snapshot.size_bytes, offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let _io = self.io_lock.read();
        let source = Source::Snapshot(snapshot.clone());
        self.read_source(&source, &snapshot.display_name(), offset_bytes, buf)
    }

    fn read_source(
        &self,
        source: &Source,
        label: &str,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let first = GrainIndex::new(offset_bytes / GRAIN_BYTES);
        let end_bytes = offset_bytes + buf.len() as u64;
        let end = GrainIndex::new(end_bytes.div_ceil(GRAIN_BYTES));
        // Grains of the open write transaction first, the read transaction
        // after (see `pending`). Snapshots never see them: every snapshot is
        // older than the open transaction.
        let pending = match source {
            Source::Live { volume, .. } => self.committer.pending.range(*volume, first, end),
            Source::Snapshot(_) => Vec::new(),
        };
        let mut reader = Reader::shared(self)?;
        let (runs, reached) = reader.runs(source, first, end, u64::MAX, 0)?;
        assert_eq!(reached, end, "reads are never cut short");
        let mut filler = Filler::new(self, label, offset_bytes, buf);
        let mut pending = pending.into_iter().peekable();
        let mut grain = first;
        for run in runs {
            let run_end = grain + run.grains;
            while grain < run_end {
                // A pending grain's own content, or the committed content up
                // to the next pending grain.
                let (to, content) = match pending.peek() {
                    Some(&(at, held)) if at == grain => {
                        pending.next();
                        (grain + 1, Fill::from(held))
                    }
                    Some(&(at, _)) if at < run_end => (at, Fill::from(run.content)),
                    _ => (run_end, Fill::from(run.content)),
                };
                filler.fill(&mut reader, grain, to, content)?;
                grain = to;
            }
        }
        assert!(pending.next().is_none(), "pending grains lie in the read");
        assert_eq!(grain, end);
        filler.finish(&mut reader)
    }

    /// Where a committed block is stored, from the block table; remembered.
    pub(crate) fn look_up_block(
        &self,
        reader: &mut Reader,
        id: crate::ids::BlockId,
    ) -> Result<BlockRec> {
        reader.count_block_lookup();
        let rec = Self::block_rec(reader.blocks()?, id)?;
        self.caches.locations.insert(id, &rec);
        Ok(rec)
    }

    /// Where a committed block is stored.
    fn block_rec(
        blocks: &ReadOnlyTable<u64, &'static [u8]>,
        id: crate::ids::BlockId,
    ) -> Result<BlockRec> {
        let rec = blocks
            .get(id.get())
            .map_err(kv_error)?
            .ok_or_else(|| EngineError::Corruption(format!("block {id} is mapped but missing")))?;
        BlockRec::decode(rec.value())
    }

    /// Counts a failed host read of a grain as a read error (I/O) or a
    /// checksum error (the record is not what its block row says), and keeps
    /// where it was for [`Engine::take_read_faults`].
    pub(crate) fn note_read_failure(&self, volume: &str, at_bytes: u64, error: &EngineError) {
        use crate::integrity::faults::{ReadFault, ReadFaultKind};
        let (counter, kind) = match error {
            EngineError::Io { .. } => (&self.stats.read_errors, ReadFaultKind::Io),
            EngineError::Corruption(_) => (&self.stats.checksum_errors, ReadFaultKind::Checksum),
            _ => return,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.read_faults.note(ReadFault {
            kind,
            volume: volume.to_string(),
            offset_bytes: at_bytes,
            length_bytes: crate::GRAIN_BYTES,
            message: error.to_string(),
        });
    }

    /// The host reads that failed since the last call (at most
    /// [`crate::integrity::faults::MAX_KEPT_FAULTS`]), and how many more did.
    pub fn take_read_faults(&self) -> (Vec<crate::integrity::faults::ReadFault>, u64) {
        self.read_faults.take()
    }

    /// Reads and verifies one block's record (into `record`, a work buffer
    /// the caller may reuse); a mismatch is an error, never data. The caller
    /// counts a failure: one read at a location from the cache may just have
    /// been stale.
    pub(crate) fn read_record(
        &self,
        id: crate::ids::BlockId,
        rec: BlockRec,
        record: &mut Vec<u8>,
        out: &mut [u8],
    ) -> Result<()> {
        // Every byte is overwritten by the read below (or the read fails).
        record.resize(rec.record_bytes() as usize, 0);
        self.stats
            .record_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.store
            .read_at(rec.segment, u64::from(rec.offset_bytes), record)
            .map_err(|e| {
                EngineError::io(
                    format!(
                        "reading block {id} from segment {} at {}",
                        rec.segment, rec.offset_bytes
                    ),
                    e,
                )
            })?;
        self.decode_record(id, rec, record, out)
    }

    /// Verifies a record read from `rec`'s location against it and decodes
    /// its payload into `out` (a whole grain).
    pub(crate) fn decode_record(
        &self,
        id: crate::ids::BlockId,
        rec: BlockRec,
        record: &[u8],
        out: &mut [u8],
    ) -> Result<()> {
        let expected = RecordHeader {
            flags: rec.flags,
            payload_len: rec.payload_len,
            block_id: id,
        };
        let corrupt = |why: String| {
            EngineError::Corruption(format!(
                "block {id} in segment {} at {}: {why}",
                rec.segment, rec.offset_bytes
            ))
        };
        let payload = log::verify_record(record, expected, rec.crc).map_err(corrupt)?;
        let codec = classify::Codec::of_flags(rec.flags).map_err(corrupt)?;
        classify::decode(payload, codec, out).map_err(corrupt)
    }

    /// `shared`, if given, is the buffer `data` is: the grains kept raw are
    /// slices of it, not copies (see [`classify::classify_shared`]).
    pub(crate) fn write(
        &self,
        vol: &Arc<VolumeShared>,
        offset_bytes: u64,
        data: &[u8],
        shared: Option<&bytes::Bytes>,
    ) -> Result<()> {
        assert!(shared.is_none_or(|shared| std::ptr::eq(&shared[..], data)));
        self.make_room(data.len() as u64)?;
        let view = vol.view.read();
        vol.ensure_live()?;
        check_range(view.size_bytes, offset_bytes, data.len() as u64)?;
        if data.is_empty() {
            return Ok(());
        }
        // Classify whole grains before taking the writer mutex: hashing and
        // compression are the expensive part and need no shared state.
        let (compression, dedup) = {
            let policy = vol.container.policy.read();
            (policy.compression, policy.dedup)
        };
        let hints = &self.committer.dedup_hints;
        let when = self.reduce_when(data.len() as u64);
        // The whole grain at `at` bytes into `data`.
        let classify = |at: usize| {
            let grain = &data[at..at + GRAIN_BYTES as usize];
            let raw = || match shared {
                Some(shared) => shared.slice(at..at + GRAIN_BYTES as usize),
                None => bytes::Bytes::copy_from_slice(grain),
            };
            classify::classify_shared(grain, raw, compression, when, |fingerprint| {
                let hinted =
                    dedup && hints.contains(crate::write::transaction::dedup_key(fingerprint));
                if hinted {
                    self.stats
                        .hinted_duplicates
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                hinted
            })
        };
        let first = GrainIndex::new(offset_bytes / GRAIN_BYTES);
        let end = GrainIndex::new((offset_bytes + data.len() as u64).div_ceil(GRAIN_BYTES));
        let end_bytes = offset_bytes + data.len() as u64;
        let whole = |grain: GrainIndex| {
            grain.get() * GRAIN_BYTES >= offset_bytes
                && (grain.get() + 1) * GRAIN_BYTES <= end_bytes
        };
        if first.range_to(end).all(whole) {
            let contents = (0..data.len())
                .step_by(GRAIN_BYTES as usize)
                .map(classify)
                .collect();
            return self.commit_grains(vol.clone(), first, contents);
        }
        let mut contents: Vec<Option<GrainContent>> = first
            .range_to(end)
            .map(|grain| {
                whole(grain).then(|| {
                    let at = (grain.get() * GRAIN_BYTES - offset_bytes) as usize;
                    classify(at)
                })
            })
            .collect();
        let mut ws = self.committer.writer.lock();
        // Partial grains: read-modify-write under the writer mutex, so no other
        // write to the grain can slip between the read and the write.
        for (i, content) in contents.iter_mut().enumerate() {
            if content.is_some() {
                continue;
            }
            let grain = first + i as u64;
            let start = grain.get() * GRAIN_BYTES;
            let from = offset_bytes.max(start);
            let to = end_bytes.min(start + GRAIN_BYTES);
            *content = Some(self.edited_grain(vol, &view, grain, |merged| {
                merged[(from - start) as usize..(to - start) as usize].copy_from_slice(
                    &data[(from - offset_bytes) as usize..(to - offset_bytes) as usize],
                )
            })?);
        }
        let contents = contents
            .into_iter()
            .map(|c| c.expect("every grain classified"))
            .collect();
        self.commit_grains_locked(&mut ws, vol.clone(), first, contents)
    }

    /// When this write's grains are compressed (see [`crate::ReductionMode`]).
    /// Never in the background once the backlog holds
    /// [`MAX_REDUCTION_BACKLOG_BYTES`], nor with less than a quarter of the
    /// capacity free (raw grains take more room until reduced): then writes
    /// reduce inline again.
    fn reduce_when(&self, length_bytes: u64) -> classify::ReduceWhen {
        use classify::ReduceWhen::{Background, Inline};
        let backlog_bytes = self.stats.reduction_backlog_bytes.load(Ordering::Relaxed);
        let free_bytes = self.space_watch.free_bytes_hint.load(Ordering::Relaxed);
        if backlog_bytes >= MAX_REDUCTION_BACKLOG_BYTES
            || free_bytes < self.config.capacity_bytes / 4
        {
            return Inline;
        }
        match self.config.reduction {
            crate::ReductionMode::Inline => Inline,
            crate::ReductionMode::Background => Background,
            crate::ReductionMode::Adaptive if length_bytes >= ADAPTIVE_MIN_WRITE_BYTES => {
                Background
            }
            crate::ReductionMode::Adaptive => Inline,
        }
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
            check_range(view.size_bytes, offset_bytes, length_bytes)?;
        }
        if length_bytes == 0 {
            return Ok(());
        }
        let end_bytes = offset_bytes + length_bytes;
        let first_whole = GrainIndex::new(offset_bytes.div_ceil(GRAIN_BYTES));
        let end_whole = GrainIndex::new(end_bytes / GRAIN_BYTES);
        if first_whole >= end_whole {
            return self.write_zero_bytes(vol, offset_bytes, end_bytes);
        }
        let (whole_from_bytes, whole_to_bytes) = (
            first_whole.get() * GRAIN_BYTES,
            end_whole.get() * GRAIN_BYTES,
        );
        if offset_bytes < whole_from_bytes {
            self.write_zero_bytes(vol, offset_bytes, whole_from_bytes)?;
        }
        if whole_to_bytes < end_bytes {
            self.write_zero_bytes(vol, whole_to_bytes, end_bytes)?;
        }
        self.insert_range(vol, first_whole, end_whole, kind, None)?;
        Ok(())
    }

    /// Zeroes `from_bytes`'s grain from there to its end, under the volume's
    /// view, which the caller holds (a shrink: see `resize_volume`).
    pub(crate) fn zero_grain_tail_locked(
        &self,
        vol: &Arc<VolumeShared>,
        view: &VolumeView,
        from_bytes: u64,
    ) -> Result<()> {
        vol.ensure_live()?;
        let grain = GrainIndex::new(from_bytes / GRAIN_BYTES);
        let start = grain.get() * GRAIN_BYTES;
        let mut ws = self.committer.writer.lock();
        let content = self.edited_grain(vol, view, grain, |merged| {
            merged[(from_bytes - start) as usize..].fill(0)
        })?;
        self.commit_grains_locked(&mut ws, vol.clone(), grain, vec![content])
    }

    /// A grain as it holds now with `edit` applied, classified: the read half
    /// of a read-modify-write, under the writer mutex the caller holds so no
    /// other write to the grain can slip between the read and the write.
    fn edited_grain(
        &self,
        vol: &VolumeShared,
        view: &VolumeView,
        grain: GrainIndex,
        edit: impl FnOnce(&mut [u8]),
    ) -> Result<GrainContent> {
        let mut merged = vec![0u8; GRAIN_BYTES as usize];
        {
            let _io = self.io_lock.read();
            self.read_locked(vol, view, grain.get() * GRAIN_BYTES, &mut merged)?;
        }
        edit(&mut merged);
        let compression = vol.container.policy.read().compression;
        Ok(classify::classify_with(&merged, compression))
    }

    fn write_zero_bytes(&self, vol: &Arc<VolumeShared>, from: u64, to: u64) -> Result<()> {
        let zeroes = vec![0u8; (to - from) as usize];
        self.write(vol, from, &zeroes, None)
    }

    /// Writes one range record (plus the cuts of records it overlaps): O(1) in the
    /// grains covered. Pieces it displaces that a snapshot still sees go to the
    /// range history. `bits_from` names the volume whose data bits a `Ref` inherits
    /// (with the source grain of `start`); without it a `Ref` counts as data.
    pub(crate) fn insert_range(
        &self,
        vol: &VolumeShared,
        start: GrainIndex,
        end: GrainIndex,
        kind: RangeKind,
        bits_from: Option<(&VolumeShared, GrainIndex)>,
    ) -> Result<SnapshotSeq> {
        Self::check_range_quota(vol, start, end, kind)?;
        let mut view = vol.view.write();
        let seq = self.insert_range_locked(vol, &mut view, start, end, kind, bits_from)?;
        drop(view);
        self.scheduler.wake();
        Ok(seq)
    }

    /// Refuses a range record that would take `vol`'s container past its
    /// quota: conservatively, the whole range counts, written before or not.
    pub(crate) fn check_range_quota(
        vol: &VolumeShared,
        start: GrainIndex,
        end: GrainIndex,
        kind: RangeKind,
    ) -> Result<()> {
        let adds_data = match kind {
            RangeKind::Hole => false,
            RangeKind::Pattern(p) => p != 0,
            RangeKind::Ref { .. } => true,
        };
        if adds_data && !vol.provisioning.is_thick() {
            vol.container.check_quota((end - start) * GRAIN_BYTES)?;
        }
        Ok(())
    }

    /// [`Engine::insert_range`] under the volume's view, which the caller
    /// holds for writing (quota checked). A range past the volume's end is
    /// refused here, under the view, whatever the caller checked before it:
    /// a copy checked against a size that a shrink then cut would leave a
    /// record past the new end, and a later grow would expose what it names
    /// (another volume's data) where zeroes belong.
    pub(crate) fn insert_range_locked(
        &self,
        vol: &VolumeShared,
        view: &mut VolumeView,
        start: GrainIndex,
        end: GrainIndex,
        kind: RangeKind,
        bits_from: Option<(&VolumeShared, GrainIndex)>,
    ) -> Result<SnapshotSeq> {
        vol.ensure_live()?;
        assert!(start < end, "a range record covers a grain at least");
        if end > GrainIndex::new(view.size_bytes.div_ceil(GRAIN_BYTES)) {
            return Err(EngineError::OutOfRange {
                offset_bytes: start.get() * GRAIN_BYTES,
                length_bytes: (end - start) * GRAIN_BYTES,
                size_bytes: view.size_bytes,
            });
        }
        let mut ws = self.committer.writer.lock();
        let snapshot_seqs = vol.snapshot_seqs.lock().clone();
        let mut planned = view.ranges.clone_overlapping(start, end);
        let displaced = planned.overlapping(start, end);
        let (edits, seq) = self.transact(&mut ws, true, |st, t, _| {
            let seq = st.take_seq();
            // With no point mapping beneath, the record has nothing for the
            // reclaimer to drop: it is born reclaimed, and a copy into an
            // empty volume in many small commands (or an UNMAP of a range
            // never written) costs no background transaction per command.
            let beneath = crate::meta::point_rows::any_in(t.maps(), vol.id, start, end)?;
            let rec = RangeRec {
                end_grain: end,
                seq,
                kind,
                reclaimed: !beneath,
            };
            for (piece_start, piece) in &displaced {
                if schema::visible_to_any(&snapshot_seqs, piece.seq, seq) {
                    st.keep_range_history(t, vol.id, *piece_start, *piece, seq)?;
                }
            }
            let edits = planned.insert(start, rec);
            for s in &edits.removed_starts {
                t.ranges()?
                    .remove((vol.id.get(), s.get()))
                    .map_err(kv_error)?;
            }
            for (s, r) in &edits.upserted {
                t.ranges()?
                    .insert((vol.id.get(), s.get()), &r.encode()[..])
                    .map_err(kv_error)?;
            }
            st.records_written += (edits.removed_starts.len() + edits.upserted.len()) as u64;
            Ok((edits, seq))
        })?;
        Arc::make_mut(&mut view.ranges).apply(edits);
        vol.last_change_seq
            .store(seq.get(), std::sync::atomic::Ordering::SeqCst);
        let volume_end = GrainIndex::new(view.size_bytes.div_ceil(GRAIN_BYTES));
        let before = vol.bitmap.lock().count();
        // Copied bits are exact only if the source's own bits are settled.
        let exact = bits_from.is_some_and(|(source, _)| !self.bits_unsettled(source.id));
        if matches!(kind, RangeKind::Ref { .. }) && start < volume_end && !exact {
            self.queue_bits(crate::versions::reference_bits::PendingBits {
                volume: vol.id,
                start,
                end: end.min(volume_end),
                seq,
            });
        }
        self.set_range_bits(vol, start, end.min(volume_end), kind, bits_from);
        // Point mappings under the new record are now dead: the reclaim backlog.
        vol.live_mapped
            .lock()
            .set_range(start.min(volume_end), end.min(volume_end), false);
        vol.sync_usage(Some(view.size_bytes));
        if vol.provisioning.is_thick() {
            let after = vol.bitmap.lock().count();
            ws.thick_unwritten_grains = (ws.thick_unwritten_grains + before)
                .checked_sub(after)
                .expect("thick reservation never negative");
        }
        Ok(seq)
    }

    pub(crate) fn set_range_bits(
        &self,
        vol: &VolumeShared,
        start: GrainIndex,
        end: GrainIndex,
        kind: RangeKind,
        bits_from: Option<(&VolumeShared, GrainIndex)>,
    ) {
        if start >= end {
            return;
        }
        match (kind, bits_from) {
            (RangeKind::Ref { .. }, Some((source, source_start))) if source.id == vol.id => {
                let mut bits = vol.bitmap.lock();
                let piece_grains = end - start;
                let mut piece = DataBitmap::new(piece_grains);
                piece.copy_from(&bits, source_start, GrainIndex::new(0), piece_grains);
                bits.copy_from(&piece, GrainIndex::new(0), start, piece_grains);
            }
            (RangeKind::Ref { .. }, Some((source, source_start))) => {
                // Two bitmaps: lock in id order so two opposite copies cannot deadlock.
                let (mut dst, src) = if vol.id < source.id {
                    let dst = vol.bitmap.lock();
                    (dst, source.bitmap.lock())
                } else {
                    let src = source.bitmap.lock();
                    (vol.bitmap.lock(), src)
                };
                dst.copy_from(&src, source_start, start, end - start);
            }
            _ => {
                let data = match kind {
                    RangeKind::Hole => false,
                    RangeKind::Pattern(p) => p != 0,
                    RangeKind::Ref { .. } => true,
                };
                vol.bitmap.lock().set_range(start, end, data);
            }
        }
    }

    pub(crate) fn extents(
        &self,
        vol: &VolumeShared,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<Extent>> {
        let view = vol.view.read();
        check_range(view.size_bytes, offset_bytes, length_bytes)?;
        let source = Source::Live {
            volume: vol.id,
            ranges: &view.ranges,
        };
        self.extents_of(&source, offset_bytes, length_bytes)
    }

    pub(crate) fn snapshot_extents(
        &self,
        snapshot: &Arc<SnapshotShared>,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<Extent>> {
        check_range(snapshot.size_bytes, offset_bytes, length_bytes)?;
        self.extents_of(
            &Source::Snapshot(snapshot.clone()),
            offset_bytes,
            length_bytes,
        )
    }

    /// Walks runs, not grains: between point mappings the state is the range
    /// records', so a sparse terabyte costs a few steps.
    fn extents_of(
        &self,
        source: &Source,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<Extent>> {
        if length_bytes == 0 {
            return Ok(Vec::new());
        }
        // Block status is rare next to reads: committing the write batches'
        // open transaction is simpler than merging its grains into extents.
        self.commit_pending_now()?;
        let txn = self.begin_read()?;
        let mut reader = Reader::new(self, &txn)?;
        let first = GrainIndex::new(offset_bytes / GRAIN_BYTES);
        let end_bytes = offset_bytes + length_bytes;
        let end = GrainIndex::new(end_bytes.div_ceil(GRAIN_BYTES));
        let (runs, _) = reader.runs(source, first, end, MAX_EXTENT_SCAN_GRAINS, 0)?;
        let mut extents: Vec<Extent> = Vec::new();
        let mut grain = first;
        for run in runs {
            let from = (grain.get() * GRAIN_BYTES).max(offset_bytes);
            let to = ((grain + run.grains).get() * GRAIN_BYTES).min(end_bytes);
            grain += run.grains;
            if from >= to {
                continue;
            }
            let state = state_of(run.content);
            match extents.last_mut() {
                Some(last) if last.state == state => last.length_bytes += to - from,
                _ => extents.push(Extent {
                    length_bytes: to - from,
                    state,
                }),
            }
        }
        assert!(!extents.is_empty());
        Ok(extents)
    }
}
