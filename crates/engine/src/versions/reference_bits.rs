//! Data bits of reference ranges, worked out in the background.
//!
//! A clone, range copy or revert writes one `Ref` record. When the reference is
//! to a volume's current content and that volume's bits are settled, its bitmap
//! is copied and is exact. Otherwise — a clone of an older snapshot, a revert, a
//! copy of a copy still settling, any reference after a restart — the grains
//! first count as data (or as the source's estimate), and this job then reads the
//! source's extents and sets the real bits, a bounded batch at a time, skipping
//! grains written since (their own bits are already right).

use std::sync::atomic::Ordering;

use crate::ids::GrainIndex;
use crate::meta::schema::{self, kv_error, RangeKind};
use crate::versions::resolve::{Content, Reader, Source};
use crate::{Engine, Result};

/// Grains settled per step.
const BATCH_GRAINS: u64 = 1 << 16;

/// A range of a volume whose bits follow a reference record with this seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PendingBits {
    pub volume: crate::ids::VolumeId,
    pub start: GrainIndex,
    pub end: GrainIndex,
    pub seq: crate::ids::SnapshotSeq,
}

impl Engine {
    /// Queues the bits of a reference record for the background job.
    pub(crate) fn queue_bits(&self, pending: PendingBits) {
        assert!(pending.start < pending.end);
        self.version_jobs.bits_pending.lock().push_back(pending);
        self.scheduler.wake();
    }

    /// Whether a volume's bits may still be estimates: a job is queued for it, or
    /// being worked on (the job has left the queue but not yet written its bits).
    pub(crate) fn bits_unsettled(&self, volume: crate::ids::VolumeId) -> bool {
        let pending = self.version_jobs.bits_pending.lock();
        pending.iter().any(|p| p.volume == volume)
            || *self.version_jobs.bits_in_progress.lock() == Some(volume)
    }

    /// Every volume whose bits may still be estimates, in one pass over the queue
    /// (for reports over all volumes).
    pub(crate) fn unsettled_volumes(&self) -> std::collections::HashSet<crate::ids::VolumeId> {
        let pending = self.version_jobs.bits_pending.lock();
        let mut volumes: std::collections::HashSet<crate::ids::VolumeId> =
            pending.iter().map(|p| p.volume).collect();
        volumes.extend(*self.version_jobs.bits_in_progress.lock());
        volumes
    }

    /// At open: every reference record's bits were rebuilt as "data"; queue them.
    pub(crate) fn queue_reference_bits(&self) {
        for volume in self.named_volumes() {
            let view = volume.view.read();
            let volume_end = GrainIndex::new(view.size_bytes.div_ceil(crate::GRAIN_BYTES));
            for (start, rec) in view.ranges.iter() {
                if matches!(rec.kind, RangeKind::Ref { .. }) && start < volume_end {
                    self.version_jobs
                        .bits_pending
                        .lock()
                        .push_back(PendingBits {
                            volume: volume.id,
                            start,
                            end: rec.end_grain.min(volume_end),
                            seq: rec.seq,
                        });
                }
            }
        }
    }

    /// Settles one batch; false when nothing is queued.
    pub(crate) fn bits_step(&self) -> Result<bool> {
        let job = {
            let mut pending = self.version_jobs.bits_pending.lock();
            let Some(job) = pending.pop_front() else {
                return Ok(false);
            };
            *self.version_jobs.bits_in_progress.lock() =
                Some(crate::ids::VolumeId::new(job.volume.get()));
            job
        };
        let result = self.settle(job);
        *self.version_jobs.bits_in_progress.lock() = None;
        result
    }

    fn settle(&self, job: PendingBits) -> Result<bool> {
        let Some(volume) = self.volume_by_id(job.volume.get()) else {
            return Ok(true); // eradicated meanwhile
        };
        let view = volume.view.read();
        // Eradication marks the volume under its view's write lock, a moment
        // before it leaves the destroyed list.
        if volume.eradicated.load(Ordering::SeqCst) {
            return Ok(true);
        }
        // Only pieces still covered by the same record: anything cut away has had
        // its bits set by whatever replaced it. A cut in the middle leaves pieces
        // on both sides, so the rest of the job goes back in the queue.
        let covering = view
            .ranges
            .find(job.start)
            .filter(|(_, r)| r.seq == job.seq && matches!(r.kind, RangeKind::Ref { .. }));
        let Some((_, record)) = covering else {
            if let Some(next) = view.ranges.next_start_after(job.start) {
                if next < job.end {
                    self.version_jobs
                        .bits_pending
                        .lock()
                        .push_back(PendingBits { start: next, ..job });
                }
            }
            return Ok(true);
        };
        let RangeKind::Ref { snapshot, delta } = record.kind else {
            unreachable!("filtered above");
        };
        let volume_end = GrainIndex::new(view.size_bytes.div_ceil(crate::GRAIN_BYTES));
        let end = job
            .end
            .min(job.start + BATCH_GRAINS)
            .min(record.end_grain)
            .min(volume_end);
        if job.start >= end {
            return Ok(true);
        }
        if end < job.end {
            self.version_jobs
                .bits_pending
                .lock()
                .push_back(PendingBits { start: end, ..job });
        }
        let Some(source) = self.snapshot_by_id(snapshot) else {
            return Ok(true);
        };
        let txn = self.begin_read()?;
        let mut reader = Reader::new(self, &txn)?;
        let source = Source::Snapshot(source);
        let (runs, reached) = reader.runs(
            &source,
            job.start.wrapping_add(delta),
            end.wrapping_add(delta),
            BATCH_GRAINS,
            0,
        )?;
        let settled_end = reached.wrapping_sub(delta).min(end);
        if settled_end < end {
            self.queue_bits(PendingBits {
                start: settled_end,
                end,
                ..job
            });
        }
        let mut data = Vec::with_capacity((settled_end - job.start) as usize);
        for run in runs {
            let is_data = !matches!(run.content, Content::Hole | Content::Pattern(0));
            data.extend(std::iter::repeat_n(is_data, run.grains as usize));
        }
        data.truncate((settled_end - job.start) as usize);
        // Under the writer mutex, so no write's bits land between the check of
        // newer mappings and the update.
        let mut ws = self.committer.writer.lock();
        self.commit_pending(&mut ws)?;
        let current = self.begin_read()?;
        let current_maps = current.open_table(schema::MAPPINGS).map_err(kv_error)?;
        let mut written_since = std::collections::BTreeSet::new();
        for item in
            crate::meta::point_rows::range(&current_maps, job.volume, job.start, settled_end)?
        {
            let (_, grain, value) = item?;
            if value.seq > job.seq {
                written_since.insert(grain);
            }
        }
        let mut bitmap = volume.bitmap.lock();
        let before = bitmap.count();
        for (i, is_data) in data.into_iter().enumerate() {
            let grain = job.start + i as u64;
            if !written_since.contains(&grain) {
                bitmap.set(grain, is_data);
            }
        }
        if volume.provisioning.is_thick() {
            ws.thick_unwritten_grains = (ws.thick_unwritten_grains + before)
                .checked_sub(bitmap.count())
                .expect("thick reservation never negative");
        }
        drop(bitmap);
        volume.sync_usage(None);
        self.stats
            .bits_settled_grains
            .fetch_add(settled_end - job.start, Ordering::Relaxed);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::test_data::{data_dir, quiet_engine};
    use crate::{Provisioning, GRAIN_BYTES};

    const GRAINS: u64 = 64;

    /// After a restart a clone's range counts as written whole and says so; the
    /// background job brings the figure down to the grains that hold data, and
    /// only then is the flag cleared. Whenever it is clear, the figure is exact.
    #[test]
    fn written_bytes_say_when_they_are_still_settling() {
        let dir = data_dir("bits");
        let engine = quiet_engine(dir.path(), 1 << 30);
        engine.create_volume("a", GRAINS * GRAIN_BYTES).unwrap();
        let volume = engine.open_volume("a").unwrap();
        volume
            .write(3 * GRAIN_BYTES, &[7u8; GRAIN_BYTES as usize])
            .unwrap();
        drop(volume);
        let clone = engine.clone_volume("a", "b", Provisioning::Thin).unwrap();
        assert_eq!(
            clone.written_bytes, GRAIN_BYTES,
            "the source's bits, copied"
        );
        assert!(!clone.written_settling);
        engine.close().unwrap();
        drop(engine);

        let engine = quiet_engine(dir.path(), 1 << 30);
        let b = engine.volume_info("b").unwrap();
        assert!(b.written_settling, "{b:?}");
        assert_eq!(
            b.written_bytes,
            GRAINS * GRAIN_BYTES,
            "counted whole at open"
        );
        assert!(!engine.volume_info("a").unwrap().written_settling);
        assert_eq!(engine.space().written_settling_volumes, 1);

        let mut steps = 0;
        while engine.bits_step().unwrap() {
            steps += 1;
            assert!(steps <= GRAINS, "settling ends");
        }
        let b = engine.volume_info("b").unwrap();
        assert!(!b.written_settling, "{b:?}");
        assert_eq!(b.written_bytes, GRAIN_BYTES);
        let space = engine.space();
        assert_eq!(space.written_settling_volumes, 0);
        assert_eq!(space.logical_data_bytes, 2 * GRAIN_BYTES);
        engine.close().unwrap();
    }
}
