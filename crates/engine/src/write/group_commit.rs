//! Group commit of the write path: concurrent host writes queue their classified
//! grains, and the writer at the head of the queue, once it has the writer
//! mutex, commits the queued writes from the head on in one metadata
//! transaction. Under a deep queue this turns one redb commit per 4 KiB write
//! into one per batch; alone, a writer commits just itself.
//!
//! Waiting costs no wake-ups beyond the one each writer needs: only the head
//! of the queue waits on the writer mutex (and is woken when whoever holds it,
//! a leader or background work, lets go); every other writer sleeps on its own
//! job until the job is committed or it becomes the head. Polling instead (a
//! timed wait of 0.5 ms per follower) cost a sixth of 4 KiB write throughput
//! at queue depth 32 in context switches.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::ids::GrainIndex;
use crate::meta::schema::is_data;
use crate::meta::schema::{GrainTarget, MapValue};
use crate::write::classify::GrainContent;
use crate::write::transaction::WriterState;
use crate::write::uncommitted::PendingGrain;
use crate::{Engine, Result, VolumeShared};

/// Most writes committed in one transaction.
const MAX_BATCH_WRITES: usize = 64;
/// Most grains committed in one transaction (32 MiB of host data).
const MAX_BATCH_GRAINS: usize = 8192;
/// A write of at least this many grains (1 MiB) is committed in a batch of its
/// own. Batched together, a host's few large writes in flight all wait for one
/// long commit, and the host has nothing left to send meanwhile: at 1 MiB and
/// queue depth 4 the cores sat idle 29% of the time. Committed one at a time, the
/// first one's status goes out while the next commits, so the host's next
/// command arrives and is reduced in parallel (1 MiB writes at QD4: 1.04x;
/// bench/RESULTS.md). Small writes still batch up to the limits above: for
/// them one commit a batch is what makes deep queues cheap.
const SOLO_WRITE_GRAINS: usize = 256;
// A batch's payloads are held in memory until it commits (32 MiB at most), it
// fits in the open transaction it joins, and a write committed alone is one
// batch.
const _: () = assert!(MAX_BATCH_GRAINS as u64 * crate::GRAIN_BYTES <= 32 << 20);
const _: () = assert!(MAX_BATCH_GRAINS as u64 <= crate::write::uncommitted::MAX_OPEN_GRAINS);
const _: () = assert!(SOLO_WRITE_GRAINS <= MAX_BATCH_GRAINS);

/// Whether `job` may join `batch` (not empty, holding `grains`).
fn joins_batch(batch: &[Arc<WriteJob>], grains: usize, job: &WriteJob) -> bool {
    let solo = |job: &WriteJob| job.contents.len() >= SOLO_WRITE_GRAINS;
    batch.len() < MAX_BATCH_WRITES
        && grains + job.contents.len() <= MAX_BATCH_GRAINS
        && !solo(job)
        && !batch.iter().any(|queued| solo(queued))
}

/// One host write waiting for a commit.
pub(crate) struct WriteJob {
    volume: Arc<VolumeShared>,
    first_grain: GrainIndex,
    contents: Vec<GrainContent>,
    /// Bytes of segment records its data grains take, if each is stored as a
    /// new block (worked out here, before the writer mutex).
    record_bytes: u64,
    /// How many of its grains are data (each at most one new record).
    data_grains: u64,
    done: Mutex<Option<Result<()>>>,
    completed: Condvar,
}

impl WriteJob {
    fn new(
        volume: Arc<VolumeShared>,
        first_grain: GrainIndex,
        contents: Vec<GrainContent>,
    ) -> Arc<WriteJob> {
        let (mut record_bytes, mut data_grains) = (0, 0);
        for content in &contents {
            if let GrainContent::Data(data) = content {
                record_bytes +=
                    (crate::segment::log::RECORD_HEADER_BYTES + data.payload.len()) as u64;
                data_grains += 1;
            }
        }
        Arc::new(WriteJob {
            volume,
            first_grain,
            contents,
            record_bytes,
            data_grains,
            done: Mutex::new(None),
            completed: Condvar::new(),
        })
    }

    fn complete(&self, result: Result<()>) {
        *self.done.lock() = Some(result);
        self.completed.notify_one();
    }
}

/// Fails a batch's writes if its leader panics while committing them. Why:
/// the other writers of the batch are off the queue and sleep until their
/// jobs complete, which only the leader does; and the shared open transaction
/// may hold part of the batch, so the array is fenced (a restart recovers it
/// to the last flush).
struct FailOnUnwind<'a> {
    engine: &'a Engine,
    batch: &'a [Arc<WriteJob>],
}

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let error = crate::EngineError::Metadata("a write batch's commit panicked".into());
        self.engine.committer.fence(&error);
        for job in self.batch {
            let unanswered = job.done.lock().is_none();
            if unanswered {
                job.complete(Err(crate::EngineError::Fenced(error.to_string())));
            }
        }
    }
}

#[derive(Default)]
pub(crate) struct WriteQueue {
    jobs: Mutex<VecDeque<Arc<WriteJob>>>,
}

impl WriteQueue {
    fn is_head(&self, job: &Arc<WriteJob>) -> bool {
        self.jobs
            .lock()
            .front()
            .is_some_and(|head| Arc::ptr_eq(head, job))
    }
}

impl Engine {
    /// Commits a write of whole, classified grains, batched with whatever other
    /// writes are queued. Returns once this write is committed (or failed).
    pub(crate) fn commit_grains(
        &self,
        volume: Arc<VolumeShared>,
        first_grain: GrainIndex,
        contents: Vec<GrainContent>,
    ) -> Result<()> {
        let job = WriteJob::new(volume, first_grain, contents);
        self.committer
            .write_queue
            .jobs
            .lock()
            .push_back(job.clone());
        self.wait_or_lead(&job)
    }

    /// Waits until `job` (already queued) is committed: by a leader's batch,
    /// or by its own once it is the head of the queue and has the writer mutex.
    fn wait_or_lead(&self, job: &Arc<WriteJob>) -> Result<()> {
        // Each turn follows a wake-up: the job committed, the job made head of
        // the queue, the writer mutex had, or a spurious wake-up of the condvar.
        loop {
            {
                let mut done = job.done.lock();
                if let Some(result) = done.take() {
                    return result;
                }
                if !self.committer.write_queue.is_head(job) {
                    // `take_batch` wakes the new head under this lock, so the
                    // wake-up cannot fall between the check and the wait.
                    job.completed.wait(&mut done);
                    continue;
                }
            }
            {
                let mut ws = self.committer.writer.lock();
                // Only the head leads, and the head is taken only by its own batch.
                assert!(job.done.lock().is_none() && self.committer.write_queue.is_head(job));
                self.lead(&mut ws, job);
            }
            // A batch that filled the open transaction committed it.
            self.db.maps_cache().apply_deferred();
        }
    }

    /// Commits one batch from the head of the queue, which is `own`.
    fn lead(&self, ws: &mut WriterState, own: &WriteJob) {
        let batch = self.take_batch();
        assert!(
            batch
                .first()
                .is_some_and(|first| std::ptr::eq(&**first, own)),
            "a leader's batch starts with its own write"
        );
        self.commit_batch(ws, &batch);
        assert!(
            own.done.lock().is_some(),
            "a committed batch completes its jobs"
        );
    }

    /// Commits queued grains under the writer mutex the caller already holds
    /// (read-modify-write of partial grains must not wait behind itself).
    pub(crate) fn commit_grains_locked(
        &self,
        ws: &mut WriterState,
        volume: Arc<VolumeShared>,
        first_grain: GrainIndex,
        contents: Vec<GrainContent>,
    ) -> Result<()> {
        let job = WriteJob::new(volume, first_grain, contents);
        self.commit_batch(ws, std::slice::from_ref(&job));
        let result = job.done.lock().take();
        result.expect("a committed batch completes its jobs")
    }

    /// Takes the next batch off the head of the queue, and wakes the writer of
    /// the new head so that it waits for the writer mutex to lead the next.
    fn take_batch(&self) -> Vec<Arc<WriteJob>> {
        let mut jobs = self.committer.write_queue.jobs.lock();
        let mut batch = Vec::new();
        let mut grains = 0;
        while let Some(job) = jobs.front() {
            if !batch.is_empty() && !joins_batch(&batch, grains, job) {
                break;
            }
            grains += job.contents.len();
            batch.push(jobs.pop_front().expect("front exists"));
        }
        let head = jobs.front().cloned();
        drop(jobs);
        if let Some(head) = head {
            let _done = head.done.lock();
            head.completed.notify_one();
        }
        batch
    }

    /// One transaction for the whole batch; if it fails (say, out of space), each
    /// write is retried alone so only the ones that cannot succeed fail.
    fn commit_batch(&self, ws: &mut WriterState, batch: &[Arc<WriteJob>]) {
        let _unwinding = FailOnUnwind {
            engine: self,
            batch,
        };
        match self.transact_jobs(ws, batch) {
            Ok(()) => {
                self.stats
                    .write_batches
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.stats
                    .write_jobs
                    .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
                for job in batch {
                    job.complete(Ok(()));
                }
            }
            Err(error) if batch.len() == 1 => {
                if matches!(error, crate::EngineError::NoSpace(_)) {
                    self.stats
                        .no_space_errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                batch[0].complete(Err(error))
            }
            Err(_) => {
                for job in batch {
                    let result = self.transact_jobs(ws, std::slice::from_ref(job));
                    if matches!(result, Err(crate::EngineError::NoSpace(_))) {
                        self.stats
                            .no_space_errors
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    job.complete(result);
                }
            }
        }
    }

    /// Refuses a batch whose new data would take a container past its quota
    /// (thin volumes; thick ones count their whole size from creation).
    fn check_batch_quota(batch: &[Arc<WriteJob>]) -> Result<()> {
        let mut wanted: Vec<(&crate::space::container::ContainerShared, u64)> = Vec::new();
        for job in batch {
            let container = &*job.volume.container;
            if job.volume.provisioning.is_thick() || container.policy.read().quota_bytes.is_none() {
                continue;
            }
            let bitmap = job.volume.bitmap.lock();
            let new_grains = job
                .contents
                .iter()
                .enumerate()
                .filter(|(i, content)| {
                    let data = match content {
                        GrainContent::Pattern(p) => *p != 0,
                        GrainContent::Data(_) => true,
                    };
                    data && !bitmap.get(job.first_grain + *i as u64)
                })
                .count() as u64;
            match wanted.iter_mut().find(|(c, _)| c.id == container.id) {
                Some((_, grains)) => *grains += new_grains,
                None => wanted.push((container, new_grains)),
            }
        }
        for (container, grains) in wanted {
            container.check_quota(grains * crate::GRAIN_BYTES)?;
        }
        Ok(())
    }

    fn transact_jobs(&self, ws: &mut WriterState, batch: &[Arc<WriteJob>]) -> Result<()> {
        crate::testing::sync_points::at(crate::testing::sync_points::Point::BatchCommit);
        Self::check_batch_quota(batch)?;
        let grains: u64 = batch.iter().map(|job| job.contents.len() as u64).sum();
        let record_bytes: u64 = batch.iter().map(|job| job.record_bytes).sum();
        let data_grains: u64 = batch.iter().map(|job| job.data_grains).sum();
        let deferred = self.batch_cannot_run_out_of_space(ws, record_bytes);
        let apply = |st: &mut crate::write::transaction::TxState,
                     t: &mut crate::write::transaction::Tables,
                     ws: &WriterState| {
            st.expect_appends(data_grains as usize);
            let mut effects = BatchEffects {
                seq: st.take_seq(),
                pending: deferred.then(|| Vec::with_capacity(grains as usize)),
                stored: Vec::with_capacity(grains as usize),
            };
            let mut bits = Vec::with_capacity(batch.len());
            for job in batch {
                bits.push(transact_job(st, t, ws, &*self.store, job, &mut effects)?);
            }
            let BatchEffects {
                seq,
                pending,
                stored,
            } = effects;
            Ok((bits, seq, pending.unwrap_or_default(), stored))
        };
        let (bits, seq, stored) = if deferred {
            let (bits, seq, pending, stored) = self.transact_deferred(ws, grains, true, apply)?;
            // Before the writes are acknowledged: readers find them here.
            self.committer.pending.insert(pending);
            (bits, seq, stored)
        } else {
            let (bits, seq, _, stored) = self.transact(ws, true, apply)?;
            (bits, seq, stored)
        };
        // Where the blocks are, for reads: data is often read soon after it
        // is written (a VM's own writes, a copy's source), and then no read
        // need look its blocks up in the block table. A location is right from
        // here on: blocks move only by the cleaner, which forgets what it
        // moves. (Measured on 1 MiB reads after 1 MiB writes: no difference
        // beyond the noise; the lookups it saves are counted by a test.)
        for (id, rec) in &stored {
            self.caches.locations.insert(*id, rec);
        }
        // Still under the writer mutex: bitmap updates land in commit order.
        for (job, job_bits) in batch.iter().zip(bits) {
            job.volume
                .last_change_seq
                .store(seq.get(), std::sync::atomic::Ordering::SeqCst);
            job.volume.live_mapped.lock().set_range(
                job.first_grain,
                job.first_grain + job_bits.len() as u64,
                true,
            );
            let mut bitmap = job.volume.bitmap.lock();
            let before = bitmap.count();
            for (i, is_data) in job_bits.into_iter().enumerate() {
                bitmap.set(job.first_grain + i as u64, is_data);
            }
            if job.volume.provisioning.is_thick() {
                ws.thick_unwritten_grains = (ws.thick_unwritten_grains + before)
                    .checked_sub(bitmap.count())
                    .expect("thick reservation never negative");
            }
            drop(bitmap);
            job.volume.sync_usage(None);
        }
        self.commit_pending_if_full(ws)
    }

    /// Whether a batch whose data grains take `most_bytes` of records (every
    /// one counted as a new block, which overstates what dedup leaves to
    /// store) may join the shared open transaction: only if it cannot fail for
    /// want of space (a failure there would take the transaction's earlier,
    /// acknowledged, batches with it). Otherwise the batch commits alone, where
    /// a refusal costs nothing else.
    fn batch_cannot_run_out_of_space(&self, ws: &WriterState, most_bytes: u64) -> bool {
        // The thin limit is the lower one: it answers for thick volumes too.
        let at = crate::write::transaction::Occupancy {
            live_bytes: ws.live_bytes(),
            used_bytes: ws.used_bytes(),
            capacity_bytes: ws.capacity_bytes,
            limit_bytes: ws.thin_limit_bytes(),
        };
        crate::write::transaction::check_room(at, most_bytes, false).is_ok()
            && crate::segment::fs_space::check_data(self.store.as_ref(), most_bytes).is_ok()
    }
}

/// What a batch's transaction leaves for after it commits.
struct BatchEffects {
    /// The sequence number of every write in the batch.
    seq: crate::ids::SnapshotSeq,
    /// When the batch joins the shared open transaction: its grains, listed
    /// for readers until that transaction commits.
    pending: Option<Vec<(u64, GrainIndex, PendingGrain)>>,
    /// The blocks its grains were stored in (new or shared).
    stored: Vec<(crate::ids::BlockId, crate::meta::schema::BlockRec)>,
}

/// One write's part of a batch's transaction: its blocks stored (a dedup hit
/// is checked against `store`), its mappings replaced, both noted in
/// `effects`. Returns which grains hold data.
fn transact_job(
    st: &mut crate::write::transaction::TxState,
    t: &mut crate::write::transaction::Tables,
    ws: &WriterState,
    store: &dyn crate::segment::log::SegmentStore,
    job: &WriteJob,
    effects: &mut BatchEffects,
) -> Result<Vec<bool>> {
    let seq = effects.seq;
    let snapshot_seqs = job.volume.snapshot_seqs.lock().clone();
    st.thick = job.volume.provisioning.is_thick();
    st.dedup = job.volume.container.policy.read().dedup;
    // A write of many grains works in ordered passes: its old mappings come
    // out in one extraction and their blocks are released in one pass over
    // their ids (first, so that the array never holds both at once: near full,
    // that matters), then its blocks' rows and its mappings go in through one
    // cursor each. A write of one grain does it all in place.
    let run = job.contents.len() > 1;
    if run {
        let end = job.first_grain + job.contents.len() as u64;
        let death = crate::write::transaction::Death {
            seq,
            snapshot_seqs: &snapshot_seqs,
        };
        st.begin_held_rows();
        st.remove_mappings_in(
            t,
            job.volume.id,
            (job.first_grain, end),
            usize::MAX,
            death,
            |_| true,
        )?;
        st.begin_new_rows();
    }
    let mut bits = Vec::with_capacity(job.contents.len());
    let mut values = Vec::with_capacity(job.contents.len());
    for (i, content) in job.contents.iter().enumerate() {
        let grain = job.first_grain + i as u64;
        let (target, held) = match content {
            GrainContent::Pattern(p) => (GrainTarget::Pattern(*p), PendingGrain::Pattern(*p)),
            GrainContent::Data(data) => {
                let (id, rec) = st.store_block(ws, t, store, data)?;
                effects.stored.push((id, rec));
                (GrainTarget::Block(id), PendingGrain::Block { id, rec })
            }
        };
        bits.push(is_data(target));
        values.push(MapValue { seq, target });
        if let Some(pending) = effects.pending.as_mut() {
            pending.push((job.volume.id.get(), grain, held));
        }
    }
    if run {
        st.flush_new_rows(t)?;
        st.flush_held_rows(t)?;
        st.insert_mappings(t, job.volume.id, job.first_grain, &values)?;
    } else {
        for (i, value) in values.into_iter().enumerate() {
            let grain = job.first_grain + i as u64;
            st.set_mapping(t, job.volume.id, grain, value, &snapshot_seqs)?;
        }
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::BlockId;
    use crate::write::uncommitted::MAX_OPEN_GRAINS;
    use crate::GRAIN_BYTES;

    fn data_grain(seed: u8) -> GrainContent {
        let grain: Vec<u8> = (0..GRAIN_BYTES).map(|i| (i % 251) as u8 ^ seed).collect();
        crate::write::classify::classify_with(&grain, Default::default())
    }

    /// Queues a one-grain write to `volume` at `grain`, as a writer does
    /// before it waits.
    fn queue_write(engine: &Engine, volume: &Arc<VolumeShared>, grain: u64) -> Arc<WriteJob> {
        let job = WriteJob::new(
            volume.clone(),
            GrainIndex::new(grain),
            vec![data_grain(grain as u8)],
        );
        engine
            .committer
            .write_queue
            .jobs
            .lock()
            .push_back(job.clone());
        job
    }

    fn engine() -> (tempfile::TempDir, Arc<Engine>) {
        engine_of(1 << 30, 64 << 20)
    }

    /// An engine of `capacity_bytes` without the background thread, with one
    /// volume `v` of `volume_bytes`.
    fn engine_of(capacity_bytes: u64, volume_bytes: u64) -> (tempfile::TempDir, Arc<Engine>) {
        let dir = crate::testing::test_data::data_dir("batch");
        let engine = crate::testing::test_data::quiet_engine(dir.path(), capacity_bytes);
        engine.create_volume("v", volume_bytes).unwrap();
        (dir, engine)
    }

    #[test]
    fn the_head_commits_one_batch_and_leaves_the_rest_queued() {
        let (_dir, engine) = engine();
        let volume = engine.shared_volume("v").unwrap();
        let queue_write = |grain: u64| queue_write(&engine, &volume, grain);
        let own = queue_write(0);
        let after: Vec<_> = (1..1 + 2 * MAX_BATCH_WRITES as u64)
            .map(queue_write)
            .collect();

        engine.wait_or_lead(&own).unwrap();

        // One batch, from the head: `own` and the writes right behind it.
        let committed_after = MAX_BATCH_WRITES - 1;
        for (i, job) in after.iter().enumerate() {
            assert_eq!(
                job.done.lock().is_some(),
                i < committed_after,
                "job {i} after own"
            );
        }
        assert_eq!(
            engine.committer.write_queue.jobs.lock().len(),
            after.len() - committed_after
        );
        // The rest is committed by each new head in turn.
        let mut heads = Vec::new();
        for _ in 0..after.len() {
            let Some(head) = engine.committer.write_queue.jobs.lock().front().cloned() else {
                break;
            };
            engine.wait_or_lead(&head).unwrap();
            heads.push(head);
        }
        assert_eq!(heads.len(), 2, "two more batches");
        assert!(engine.committer.write_queue.jobs.lock().is_empty());
        // A writer takes its own result; every other one is still there.
        for job in &after {
            let taken = heads.iter().any(|head| Arc::ptr_eq(head, job));
            assert_eq!(job.done.lock().is_some(), !taken);
        }
        engine.close().unwrap();
    }

    /// A leader that panics mid-commit fails the other writes of its batch
    /// (they waited for ever before) and fences the array.
    #[test]
    fn a_panic_in_a_batch_commit_fails_its_other_writes_and_fences() {
        let (_dir, engine) = engine();
        let volume = engine.shared_volume("v").unwrap();
        let queue_write = |grain: u64| queue_write(&engine, &volume, grain);
        let own = queue_write(0);
        let other = queue_write(1);
        let (result_tx, result_rx) = std::sync::mpsc::channel();
        let follower = {
            let (engine, other) = (engine.clone(), other.clone());
            std::thread::spawn(move || result_tx.send(engine.wait_or_lead(&other)).unwrap())
        };
        crate::testing::sync_points::set(crate::testing::sync_points::Point::BatchCommit, || {
            panic!("injected")
        });

        let led =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.wait_or_lead(&own)));

        assert!(led.is_err(), "the leader panicked");
        let result = result_rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the other write of the batch ended");
        assert!(
            matches!(result, Err(crate::EngineError::Fenced(_))),
            "{result:?}"
        );
        follower.join().unwrap();
        let volume = engine.open_volume("v").unwrap();
        let write = volume.write(0, &[7u8; GRAIN_BYTES as usize]);
        assert!(
            matches!(write, Err(crate::EngineError::Fenced(_))),
            "{write:?}"
        );
    }

    #[test]
    fn a_large_write_is_committed_in_a_batch_of_its_own() {
        let (_dir, engine) = engine();
        let volume = engine.shared_volume("v").unwrap();
        // Queued: small, small, large, large, small, small. Batches: the two
        // small ones, each large one alone, then the two small ones.
        let sizes = [1usize, 1, SOLO_WRITE_GRAINS, SOLO_WRITE_GRAINS, 1, 2];
        let mut first_grain = GrainIndex::new(0);
        for (i, &size) in sizes.iter().enumerate() {
            let contents = (0..size).map(|g| data_grain((i * 7 + g) as u8)).collect();
            let job = WriteJob::new(volume.clone(), first_grain, contents);
            engine.committer.write_queue.jobs.lock().push_back(job);
            first_grain += size as u64;
        }
        let mut batch_sizes = Vec::new();
        for _ in 0..sizes.len() {
            let batch = engine.take_batch();
            if batch.is_empty() {
                break;
            }
            batch_sizes.push(
                batch
                    .iter()
                    .map(|job| job.contents.len())
                    .collect::<Vec<_>>(),
            );
        }
        assert_eq!(
            batch_sizes,
            vec![
                vec![1, 1],
                vec![SOLO_WRITE_GRAINS],
                vec![SOLO_WRITE_GRAINS],
                vec![1, 2]
            ]
        );
        engine.close().unwrap();
    }

    #[test]
    fn every_writer_finishes_when_the_queue_outgrows_a_batch() {
        // Writers sleep without timeouts, so a lost wake-up would leave one
        // waiting for ever. More writers queue (while the writer mutex is held
        // elsewhere, as background work does) than one batch takes: each batch
        // leaves a new head, asleep on its job, that must be woken to lead.
        let (_dir, engine) = engine();
        let volume = engine.shared_volume("v").unwrap();
        const WRITERS: u64 = 2 * MAX_BATCH_WRITES as u64 + 8;
        for round in 0..3u64 {
            let (finished_tx, finished_rx) = std::sync::mpsc::channel();
            let held = engine.committer.writer.lock();
            // Not scoped: a writer left asleep must fail the test, not hang it.
            let writers: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let (engine, volume) = (engine.clone(), volume.clone());
                    let finished_tx = finished_tx.clone();
                    std::thread::spawn(move || {
                        let grain = round * WRITERS + w;
                        let content = data_grain((grain % 251) as u8);
                        let at = GrainIndex::new(grain);
                        engine.commit_grains(volume, at, vec![content]).unwrap();
                        finished_tx.send(grain).unwrap();
                    })
                })
                .collect();
            for _ in 0..10_000 {
                if engine.committer.write_queue.jobs.lock().len() as u64 == WRITERS {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!(
                engine.committer.write_queue.jobs.lock().len() as u64,
                WRITERS
            );
            // Let every writer get to its wait.
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(held);
            for _ in 0..WRITERS {
                finished_rx
                    .recv_timeout(std::time::Duration::from_secs(30))
                    .expect("a queued writer was never woken");
            }
            for writer in writers {
                writer.join().unwrap();
            }
            assert!(engine.committer.write_queue.jobs.lock().is_empty());
        }
        let volume = engine.open_volume("v").unwrap();
        let mut back = vec![0u8; GRAIN_BYTES as usize];
        for grain in 0..3 * WRITERS {
            volume.read(grain * GRAIN_BYTES, &mut back).unwrap();
            let expected: Vec<u8> = (0..GRAIN_BYTES)
                .map(|i| (i % 251) as u8 ^ (grain % 251) as u8)
                .collect();
            assert!(back == expected, "grain {grain}");
        }
        engine.close().unwrap();
    }

    /// A grain of incompressible bytes, different for each seed.
    fn grain_bytes(seed: u64) -> Vec<u8> {
        crate::testing::test_data::unique_bytes(GRAIN_BYTES as usize, seed)
    }

    #[test]
    fn writes_wait_in_the_open_transaction_and_read_back_before_and_after_it_commits() {
        let (dir, engine) = engine();
        let volume = engine.open_volume("v").unwrap();
        let commits = || {
            engine
                .stats
                .pending_commits
                .load(std::sync::atomic::Ordering::SeqCst)
        };
        // Whole grains, one write each; then zeroes over some, and half a grain
        // (read-modify-write, which reads the open transaction's grain).
        for grain in 0..100u64 {
            volume
                .write(grain * GRAIN_BYTES, &grain_bytes(grain))
                .unwrap();
        }
        volume
            .write(10 * GRAIN_BYTES, &vec![0u8; 4 * GRAIN_BYTES as usize])
            .unwrap();
        volume
            .write(50 * GRAIN_BYTES + 100, &[0xabu8; 1000])
            .unwrap();
        let expected = |grain: u64| {
            let mut bytes = grain_bytes(grain);
            if (10..14).contains(&grain) {
                bytes.fill(0);
            }
            if grain == 50 {
                bytes[100..1100].fill(0xab);
            }
            bytes
        };
        let check = |volume: &crate::Volume| {
            let mut all = vec![0u8; 101 * GRAIN_BYTES as usize];
            volume.read(0, &mut all).unwrap();
            for grain in 0..101u64 {
                let got =
                    &all[(grain * GRAIN_BYTES) as usize..((grain + 1) * GRAIN_BYTES) as usize];
                let want = if grain < 100 {
                    expected(grain)
                } else {
                    vec![0; GRAIN_BYTES as usize]
                };
                assert!(got == &want[..], "grain {grain}");
            }
        };
        assert_eq!(commits(), 0, "no write batch committed on its own");
        assert!(engine.committer.writer.lock().open_txn.is_some());
        check(&volume);
        // Block status commits the open transaction and sees every write.
        let extents = volume.extents(0, 101 * GRAIN_BYTES).unwrap();
        assert_eq!(commits(), 1);
        assert!(engine.committer.writer.lock().open_txn.is_none());
        let data: u64 = extents
            .iter()
            .filter(|e| e.state == crate::ExtentState::Data)
            .map(|e| e.length_bytes)
            .sum();
        assert_eq!(data, 96 * GRAIN_BYTES, "{extents:?}");
        check(&volume);
        // More writes, then a flush: they survive a restart.
        for grain in 0..100u64 {
            if grain % 7 == 0 {
                volume
                    .write(grain * GRAIN_BYTES, &grain_bytes(grain))
                    .unwrap();
            }
        }
        volume.flush().unwrap();
        assert_eq!(commits(), 2);
        engine.check_consistency().unwrap();
        engine.close().unwrap();
        drop((volume, engine));
        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        check(&engine.open_volume("v").unwrap());
        engine.check_consistency().unwrap();
        engine.close().unwrap();
    }

    #[test]
    fn the_open_transaction_commits_once_it_holds_the_most_grains() {
        let (_dir, engine) = engine_of(1 << 30, MAX_OPEN_GRAINS * GRAIN_BYTES);
        let volume = engine.open_volume("v").unwrap();
        let write_bytes = 256 * GRAIN_BYTES;
        let writes = MAX_OPEN_GRAINS * GRAIN_BYTES / write_bytes;
        for i in 0..writes {
            let data: Vec<u8> = (0..write_bytes).map(|b| (b / 8 + i) as u8).collect();
            volume.write(i * write_bytes, &data).unwrap();
            let open_grains = engine
                .committer
                .writer
                .lock()
                .open_txn
                .as_ref()
                .map(|o| o.grains);
            if i + 1 < writes {
                assert_eq!(open_grains, Some((i + 1) * 256));
            } else {
                assert_eq!(open_grains, None, "committed at {MAX_OPEN_GRAINS} grains");
            }
        }
        assert_eq!(
            engine
                .stats
                .pending_commits
                .load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        engine.close().unwrap();
    }

    #[test]
    fn a_write_that_may_not_fit_commits_alone_and_refusing_it_loses_no_other() {
        // Near full, a batch that could run out of space must not join the
        // open transaction: its refusal would take the acknowledged batches in
        // it along.
        let (_dir, engine) = engine_of(96 << 20, 256 << 20);
        let volume = engine.open_volume("v").unwrap();
        let chunk_bytes = 256 * GRAIN_BYTES;
        let chunk = |i: u64| -> Vec<u8> {
            (0..chunk_bytes / GRAIN_BYTES)
                .flat_map(|g| grain_bytes(i * 1000 + g))
                .collect()
        };
        let mut written = 0;
        let refused = loop {
            match volume.write(written * chunk_bytes, &chunk(written)) {
                Ok(()) => written += 1,
                Err(error) => break error,
            }
            assert!(written < 256, "never ran out of space");
        };
        assert!(
            matches!(refused, crate::EngineError::NoSpace(_)),
            "{refused}"
        );
        assert!(written > 8, "{written} chunks fitted");
        // Nothing acknowledged is lost, and the array still takes writes.
        let mut back = vec![0u8; chunk_bytes as usize];
        for i in 0..written {
            volume.read(i * chunk_bytes, &mut back).unwrap();
            assert!(back == chunk(i), "chunk {i}");
        }
        volume.write(0, &vec![0u8; chunk_bytes as usize]).unwrap();
        volume.read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0));
        engine.check_consistency().unwrap();
        engine.close().unwrap();
    }

    /// Rows in the block table, after the open transaction is committed.
    fn block_rows(engine: &Engine) -> u64 {
        engine.check_consistency().unwrap();
        let txn = engine.begin_read().unwrap();
        let blocks = txn.open_table(crate::meta::schema::BLOCKS).unwrap();
        redb::ReadableTableMetadata::len(&blocks).unwrap()
    }

    /// The grains `contents` (by seed) laid end to end, one write.
    fn run_bytes(seeds: &[u64]) -> Vec<u8> {
        seeds.iter().flat_map(|&seed| grain_bytes(seed)).collect()
    }

    fn read_grains(volume: &crate::Volume, first: u64, grains: u64) -> Vec<u8> {
        let mut buf = vec![0u8; (grains * GRAIN_BYTES) as usize];
        volume.read(first * GRAIN_BYTES, &mut buf).unwrap();
        buf
    }

    #[test]
    fn a_write_of_many_grains_shares_its_own_duplicates() {
        let (_dir, engine) = engine();
        let volume = engine.open_volume("v").unwrap();
        // 64 grains: every fourth repeats seed 1000 (dedup against a block of
        // the same write, whose row is not yet in the table), one is zeroes.
        let seeds: Vec<u64> = (0..64).map(|g| if g % 4 == 0 { 1000 } else { g }).collect();
        let mut data = run_bytes(&seeds);
        data[(5 * GRAIN_BYTES) as usize..(6 * GRAIN_BYTES) as usize].fill(0);
        volume.write(3 * GRAIN_BYTES, &data).unwrap();
        assert!(read_grains(&volume, 3, 64) == data);
        // 48 distinct seeds less the zero grain, and seed 1000 once.
        assert_eq!(block_rows(&engine), 48 - 1 + 1);
        let report = engine.space();
        assert!(report.shared_bytes > 0, "seed 1000's block is shared");
    }

    #[test]
    fn a_write_of_many_grains_over_its_own_old_contents_reads_back() {
        let (dir, engine) = engine();
        let volume = engine.open_volume("v").unwrap();
        let old: Vec<u64> = (0..64).collect();
        volume.write(0, &run_bytes(&old)).unwrap();
        assert_eq!(block_rows(&engine), 64);
        // Shifted by one grain: grain g now holds what grain g + 1 held. The
        // write releases the old blocks before it stores its own, so these
        // are stored anew rather than shared with blocks about to go.
        let new: Vec<u64> = (1..65).collect();
        volume.write(0, &run_bytes(&new)).unwrap();
        assert!(read_grains(&volume, 0, 64) == run_bytes(&new));
        assert_eq!(block_rows(&engine), 64, "seed 0 freed, seed 64 stored");
        let report = engine.space();
        assert_eq!(report.shared_bytes, 0);
        volume.flush().unwrap();
        engine.close().unwrap();
        drop((volume, engine));
        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        let volume = engine.open_volume("v").unwrap();
        assert!(read_grains(&volume, 0, 64) == run_bytes(&new));
        engine.check_consistency().unwrap();
    }

    #[test]
    fn a_write_of_many_grains_keeps_what_a_snapshot_sees_and_frees_the_rest() {
        let (_dir, engine) = engine();
        let volume = engine.open_volume("v").unwrap();
        // Grains 0..32 before the snapshot; 32..48 after it (no snapshot sees
        // them); a pool block shared by every eighth grain of both.
        let seeds = |base: u64, n: u64| -> Vec<u64> {
            (0..n)
                .map(|g| if g % 8 == 7 { 7 } else { base + g })
                .collect()
        };
        let before = seeds(100, 32);
        volume.write(0, &run_bytes(&before)).unwrap();
        engine.create_snapshots(&["v"], Some("s"), None).unwrap();
        let unseen = seeds(200, 16);
        volume.write(32 * GRAIN_BYTES, &run_bytes(&unseen)).unwrap();
        let rows = block_rows(&engine);
        // One write over all 48: the snapshot's 32 stay, the unseen 16 go.
        let after = seeds(300, 48);
        volume.write(0, &run_bytes(&after)).unwrap();
        assert!(read_grains(&volume, 0, 48) == run_bytes(&after));
        let snapshot = engine.open_snapshot("v@s").unwrap();
        let mut seen = vec![0u8; 48 * GRAIN_BYTES as usize];
        snapshot.read(0, &mut seen).unwrap();
        assert!(seen[..(32 * GRAIN_BYTES) as usize] == run_bytes(&before)[..]);
        assert!(seen[(32 * GRAIN_BYTES) as usize..].iter().all(|&b| b == 0));
        // Unseen blocks freed (14 of them; seed 7 stays), new ones stored (42
        // distinct, seed 7 again shared).
        assert_eq!(block_rows(&engine), rows - 14 + 42);
    }

    #[test]
    fn a_write_of_many_grains_over_unmapped_ones_reads_back() {
        let (_dir, engine) = engine();
        let volume = engine.open_volume("v").unwrap();
        let first: Vec<u64> = (0..40).collect();
        volume.write(0, &run_bytes(&first)).unwrap();
        volume.unmap(8 * GRAIN_BYTES, 16 * GRAIN_BYTES).unwrap();
        // Over the middle of the unmapped range and past it.
        let second: Vec<u64> = (500..520).collect();
        volume.write(12 * GRAIN_BYTES, &run_bytes(&second)).unwrap();
        let mut want = run_bytes(&first);
        want[(8 * GRAIN_BYTES) as usize..(24 * GRAIN_BYTES) as usize].fill(0);
        want[(12 * GRAIN_BYTES) as usize..(32 * GRAIN_BYTES) as usize]
            .copy_from_slice(&run_bytes(&second));
        assert!(read_grains(&volume, 0, 40) == want);
        engine.check_consistency().unwrap();
    }

    /// `seed`'s grain, classified, but carrying `fingerprint`: what a grain
    /// crafted to collide with another's fingerprint looks like.
    fn colliding(seed: u64, fingerprint: crate::write::classify::Fingerprint) -> GrainContent {
        let GrainContent::Data(mut data) = crate::write::classify::classify(&grain_bytes(seed))
        else {
            unreachable!("test grains are data")
        };
        data.fingerprint = fingerprint;
        GrainContent::Data(data)
    }

    fn fingerprint_of(seed: u64) -> crate::write::classify::Fingerprint {
        crate::write::classify::fingerprint(&grain_bytes(seed))
    }

    #[test]
    fn a_fingerprint_hit_shares_a_block_only_if_its_bytes_are_equal() {
        let (_dir, engine) = engine();
        let shared = engine.shared_volume("v").unwrap();
        let volume = engine.open_volume("v").unwrap();
        volume.write(0, &grain_bytes(1)).unwrap();
        let rows = block_rows(&engine);
        // A grain with grain 0's fingerprint but other bytes, alone (the
        // candidate's record is read from its segment) ...
        let one = vec![colliding(2, fingerprint_of(1))];
        engine
            .commit_grains(shared.clone(), GrainIndex::new(1), one)
            .unwrap();
        // ... and in one write after the grain it collides with (the
        // candidate's record is still in the transaction's appends).
        let run = vec![
            crate::write::classify::classify(&grain_bytes(3)),
            colliding(4, fingerprint_of(3)),
        ];
        engine
            .commit_grains(shared.clone(), GrainIndex::new(2), run)
            .unwrap();
        assert!(read_grains(&volume, 0, 4) == run_bytes(&[1, 2, 3, 4]));
        assert_eq!(block_rows(&engine), rows + 3, "no collision was shared");
        // Equal bytes still share, alone and within one write.
        volume.write(4 * GRAIN_BYTES, &grain_bytes(1)).unwrap();
        volume
            .write(5 * GRAIN_BYTES, &run_bytes(&[5, 5, 3]))
            .unwrap();
        assert!(read_grains(&volume, 0, 8) == run_bytes(&[1, 2, 3, 4, 1, 5, 5, 3]));
        assert_eq!(block_rows(&engine), rows + 4, "only grain 5 is new");
        engine.check_consistency().unwrap();
    }

    #[test]
    fn a_block_proven_once_is_compared_in_memory_after() {
        use std::os::unix::fs::FileExt;
        let (dir, engine) = engine();
        let volume = engine.open_volume("v").unwrap();
        volume.write(0, &grain_bytes(1)).unwrap();
        assert_eq!(block_rows(&engine), 1);
        let (id, rec) = {
            let txn = engine.begin_read().unwrap();
            let blocks = txn.open_table(crate::meta::schema::BLOCKS).unwrap();
            let (id, value) = redb::ReadableTable::first(&blocks).unwrap().unwrap();
            (
                id.value(),
                crate::meta::schema::BlockRec::decode(value.value()).unwrap(),
            )
        };
        // The first hit reads the block's payload back and keeps it.
        volume.write(GRAIN_BYTES, &grain_bytes(1)).unwrap();
        assert!(engine
            .committer
            .writer
            .lock()
            .proven
            .get(BlockId::new(id))
            .is_some());
        // Damage the stored payload: a later hit is decided in memory, so it
        // still shares (read from the file, the bytes would differ).
        let segment = dir
            .path()
            .join("segments")
            .join(format!("{:08}.seg", rec.segment));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(segment)
            .unwrap();
        let payload_at =
            u64::from(rec.offset_bytes) + crate::segment::log::RECORD_HEADER_BYTES as u64;
        file.write_all_at(&[0xa5; 64], payload_at).unwrap();
        volume.write(2 * GRAIN_BYTES, &grain_bytes(1)).unwrap();
        assert_eq!(block_rows(&engine), 1, "the third copy shares too");
    }

    /// A grain of `seed`'s bytes in its first half and zeroes in the second:
    /// LZ4 halves it.
    fn compressible_grain(seed: u64) -> Vec<u8> {
        let mut grain = grain_bytes(seed);
        grain[GRAIN_BYTES as usize / 2..].fill(0);
        grain
    }

    /// Every stored block's record: (payload bytes, flags).
    fn stored_blocks(engine: &Engine) -> Vec<(u32, u16)> {
        let txn = engine.begin_read().unwrap();
        let blocks = txn.open_table(crate::meta::schema::BLOCKS).unwrap();
        redb::ReadableTable::iter(&blocks)
            .unwrap()
            .map(|row| {
                let rec = crate::meta::schema::BlockRec::decode(row.unwrap().1.value()).unwrap();
                (rec.payload_len, rec.flags)
            })
            .collect()
    }

    fn hinted(engine: &Engine) -> u64 {
        engine
            .stats
            .hinted_duplicates
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn a_duplicate_is_shared_without_being_compressed() {
        let (_dir, engine) = engine();
        let volume = engine.open_volume("v").unwrap();
        volume.write(0, &compressible_grain(1)).unwrap();
        assert_eq!(hinted(&engine), 0, "nothing stored to duplicate");
        // Seed 1 again next to a new grain: only the duplicate is left raw.
        let run = [compressible_grain(1), compressible_grain(2)].concat();
        volume.write(4 * GRAIN_BYTES, &run).unwrap();
        assert_eq!(hinted(&engine), 1);
        assert_eq!(block_rows(&engine), 2, "seed 1 shared, seed 2 stored");
        assert!(read_grains(&volume, 4, 2) == run);
        for (payload_bytes, flags) in stored_blocks(&engine) {
            assert!(flags & crate::segment::log::FLAG_COMPRESSED != 0);
            assert!(u64::from(payload_bytes) < GRAIN_BYTES / 2 + 64);
        }
    }

    #[test]
    fn a_wrong_hint_stores_the_grain_compressed() {
        let (dir, engine) = engine();
        let volume = engine.open_volume("v").unwrap();
        let grain = compressible_grain(3);
        // A hint for a block the index does not hold (as for a slot not yet
        // cleared when its block is freed).
        let key =
            crate::write::transaction::dedup_key(&crate::write::classify::fingerprint(&grain));
        engine.committer.dedup_hints.insert(key);
        volume.write(0, &grain).unwrap();
        assert_eq!(hinted(&engine), 1);
        assert_eq!(block_rows(&engine), 1);
        let [(payload_bytes, flags)] = stored_blocks(&engine)[..] else {
            panic!("one block");
        };
        assert!(
            flags & crate::segment::log::FLAG_COMPRESSED != 0,
            "{flags:#x}"
        );
        assert!(u64::from(payload_bytes) < GRAIN_BYTES / 2 + 64);
        assert!(read_grains(&volume, 0, 1) == grain);
        volume.flush().unwrap();
        engine.close().unwrap();
        drop((volume, engine));
        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        let volume = engine.open_volume("v").unwrap();
        assert!(read_grains(&volume, 0, 1) == grain);
        engine.check_consistency().unwrap();
    }

    #[test]
    fn a_freed_block_is_not_hinted_and_a_reopened_array_hints_its_blocks() {
        let (dir, engine) = engine();
        let volume = engine.open_volume("v").unwrap();
        volume.write(0, &compressible_grain(4)).unwrap();
        volume.write(0, &compressible_grain(5)).unwrap();
        assert_eq!(block_rows(&engine), 1, "seed 4's block freed");
        volume.write(GRAIN_BYTES, &compressible_grain(4)).unwrap();
        assert_eq!(hinted(&engine), 0, "seed 4 was stored anew");
        volume.flush().unwrap();
        engine.close().unwrap();
        drop((volume, engine));
        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        let volume = engine.open_volume("v").unwrap();
        let run = [compressible_grain(5), compressible_grain(4)].concat();
        volume.write(8 * GRAIN_BYTES, &run).unwrap();
        assert_eq!(hinted(&engine), 2, "the index is hinted as it is rebuilt");
        assert_eq!(block_rows(&engine), 2);
        assert!(read_grains(&volume, 8, 2) == run);
    }
}
