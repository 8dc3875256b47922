//! Durable commits: what a host FLUSH and the background flush do. Segment
//! data is synced first, then the writer state is committed with durability,
//! and only after that are freed segments retired and freed pages punched out
//! of their files, so metadata never outlives the data it names and never
//! names data already cut.
//!
//! Freed storage goes back to the filesystem a little later, not at once
//! ([`RELEASE_DELAY`]): a freed segment's file is kept for a new segment
//! (`segment::free_pool`), and the pages of freed records wait before they are
//! punched, so that the file a segment leaves behind still has its pages when
//! it is reused: appends into cached pages are far cheaper than into fresh
//! ones on hosts that return freed memory to their hypervisor.
//! Callers about to measure the data directory, and a closing array, release
//! everything at once ([`Engine::flush_freeing`]).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use redb::Durability;

use crate::meta::schema::kv_error;
use crate::segment::log::SegmentId;
use crate::write::transaction::WriterState;
use crate::{Engine, EngineError, Result};

/// Most passes of the segment sync that a background durable commit makes
/// before it takes the writer mutex.
const MAX_UNLOCKED_SYNC_PASSES: usize = 3;
/// A sync pass this quick leaves little for the pass under the writer mutex.
const QUICK_SYNC_PASS: std::time::Duration = std::time::Duration::from_millis(10);
/// How long freed pages wait to be punched, and freed segment files to be
/// reused, before they go back to the filesystem.
pub(crate) const RELEASE_DELAY: std::time::Duration = crate::segment::free_pool::POOL_KEEP;
/// Most freed page ranges waiting to be punched; past it, the oldest go at once.
const MAX_DEFERRED_HOLES: usize = 1 << 20;

/// When freed storage goes back to the filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// Everything freed so far, before returning.
    Now,
    /// What was freed [`RELEASE_DELAY`] ago or more.
    Due,
}

type Hole = (SegmentId, u64, u64);

/// Page ranges of freed records, waiting to be punched; in commit order.
#[derive(Default)]
pub(crate) struct DeferredHoles {
    batches: std::collections::VecDeque<(std::time::Instant, Vec<Hole>)>,
    holes: usize,
}

impl DeferredHoles {
    fn add(&mut self, holes: Vec<Hole>) {
        if !holes.is_empty() {
            self.holes += holes.len();
            self.batches.push_back((std::time::Instant::now(), holes));
        }
    }

    /// The ranges to punch now: all for [`Release::Now`], else those past
    /// [`RELEASE_DELAY`] and the oldest beyond [`MAX_DEFERRED_HOLES`].
    fn take(&mut self, release: Release) -> Vec<Hole> {
        let mut due = Vec::new();
        while let Some((since, _)) = self.batches.front() {
            let take = release == Release::Now
                || since.elapsed() >= RELEASE_DELAY
                || self.holes > MAX_DEFERRED_HOLES;
            if !take {
                break;
            }
            let (_, holes) = self.batches.pop_front().expect("a front batch");
            self.holes -= holes.len();
            due.extend(holes);
        }
        due
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

impl Engine {
    /// Makes every write completed so far, on every volume, durable. Concurrent
    /// flushes share one sync and one durable commit (group commit).
    pub fn flush(&self) -> Result<()> {
        self.durable_commit(false, 1, Release::Due)
    }

    /// [`Engine::flush`] when no host waits for it (the background thread's):
    /// its segment sync may take several passes before the writer mutex, each
    /// covering what arrived during the one before, so that writers wait as
    /// little as possible.
    pub(crate) fn flush_in_background(&self) -> Result<()> {
        self.durable_commit(false, MAX_UNLOCKED_SYNC_PASSES, Release::Due)
    }

    /// [`Engine::flush_freeing`] when no host waits for it, in passes as
    /// [`Engine::flush_in_background`].
    pub(crate) fn flush_freeing_in_background(&self) -> Result<()> {
        self.durable_commit(true, MAX_UNLOCKED_SYNC_PASSES, Release::Due)?;
        // Another caller's cuts may still be under way.
        drop(self.committer.files_lock.lock());
        Ok(())
    }

    /// A durable commit even when every write is durable already, if some space
    /// waits for one to be freed, returning once all freed space is out of the
    /// segment files (none kept for reuse, nothing left to punch later): what
    /// a caller about to measure the data directory wants, and what space
    /// short of room needs. Host flushes do not wait for that (see
    /// `durable_commit`).
    pub fn flush_freeing(&self) -> Result<()> {
        self.durable_commit(true, 1, Release::Now)?;
        self.release_freed(Release::Now);
        Ok(())
    }

    /// Gives freed storage back to the filesystem: page ranges waiting to be
    /// punched and files kept for reuse, those due (the background thread
    /// calls it when idle) or all. Failures only cost disk space: logged.
    pub(crate) fn release_freed(&self, release: Release) {
        let _files = self.committer.files_lock.lock();
        let due = self.committer.deferred_holes.lock().take(release);
        if !due.is_empty() {
            let due = self.holes_of_live_segments(due);
            // See `durable_commit`: no reader still aims at these records.
            drop(self.io_lock.write());
            self.punch(due);
        }
        self.expire_retired(release);
    }

    /// Whether freed storage waits to go back to the filesystem.
    pub(crate) fn holds_freed_storage(&self) -> bool {
        !self.committer.deferred_holes.lock().is_empty() || self.store.retired().kept_files > 0
    }

    fn expire_retired(&self, release: Release) {
        let keep = match release {
            Release::Now => std::time::Duration::ZERO,
            Release::Due => RELEASE_DELAY,
        };
        if let Err(e) = self.store.expire_retired(keep) {
            tracing::warn!("deleting freed segment files kept for reuse failed: {e}");
        }
    }

    /// `holes` less those of segments freed since (their files went whole).
    fn holes_of_live_segments(&self, mut holes: Vec<Hole>) -> Vec<Hole> {
        let ws = self.committer.writer.lock();
        holes.retain(|(segment, _, _)| ws.segments.contains_key(segment));
        holes
    }

    /// A host FLUSH returns as soon as a durable commit covers every commit
    /// made before it began: a queue of flushes shares one, even while freed
    /// space is pending (freeing it is background work, not theirs).
    /// `unlocked_passes`: most passes of the segment sync before the writer
    /// mutex is taken (one for a host, which waits for every pass).
    fn durable_commit(
        &self,
        to_free: bool,
        unlocked_passes: usize,
        release: Release,
    ) -> Result<()> {
        assert!((1..=MAX_UNLOCKED_SYNC_PASSES).contains(&unlocked_passes));
        let target = self.committer.commit_count.load(Ordering::SeqCst);
        let flush = self.committer.flush_lock.lock();
        if self.committer.durable_count.load(Ordering::SeqCst) >= target
            && !(to_free && self.committer.writer.lock().has_space_to_free())
        {
            return Ok(());
        }
        // Sync segment data first without holding up writers, then again under the
        // writer mutex (cheap: only what arrived meanwhile) before the commit.
        // Under a stream of large writes a first pass takes long enough for a
        // lot to arrive meanwhile; in the background, passes repeat until one
        // is quick, so that the pass under the mutex stays short. Measured at
        // 600–800 MiB/s of 1 MiB writes, every second: the sync under the
        // mutex took 2–13 ms after one pass, 1–4 ms after up to three; the
        // metadata commit that follows it takes 11–14 ms either way (redb
        // writes the pages its non-durable commits kept in memory, then
        // fsyncs).
        for _ in 0..unlocked_passes {
            let started = std::time::Instant::now();
            let dirty: Vec<_> = self
                .committer
                .writer
                .lock()
                .dirty_segments
                .iter()
                .copied()
                .collect();
            for segment in dirty {
                self.sync_segment(segment)?;
            }
            self.sync_segment_names()?;
            if started.elapsed() < QUICK_SYNC_PASS {
                break;
            }
        }
        let mut ws = self.committer.writer.lock();
        // Synced after the writer mutex goes, before the metadata's sync.
        let dirty = std::mem::take(&mut ws.dirty_segments);
        let upto = self.committer.commit_count.load(Ordering::SeqCst);
        if ws.open_segment_dead() {
            let sealed = ws.open_segment;
            ws.pending_free.insert(sealed);
            ws.open_segment = ws.next_segment_id;
            ws.next_segment_id = ws.next_segment_id.next();
        }
        if ws.clean_segment_dead() {
            let sealed = ws.clean_segment.take().expect("dead clean segment");
            ws.pending_free.insert(sealed);
        }
        crate::segment::fs_space::check_metadata(self.store.as_ref())?;
        self.commit_pending(&mut ws)?;
        let freeing: Vec<_> = std::mem::take(&mut ws.pending_free).into_iter().collect();
        let punching = std::mem::take(&mut ws.pending_punch);
        if let Err(error) = self.commit_durably(&mut ws, &freeing) {
            self.committer.fence(&error);
            return Err(error);
        }
        self.space_watch.free_bytes_hint.store(
            ws.capacity_bytes.saturating_sub(ws.used_bytes()),
            Ordering::Relaxed,
        );
        // Writers go on from here: the commit is visible, and what they write
        // is held in memory until it is durable (see `meta::sync_pipeline`).
        drop(ws);
        crate::testing::sync_points::at(crate::testing::sync_points::Point::DurableBeforeSync);
        // The segment bytes the commit names, then the commit itself. Should
        // a segment sync fail, the commit's sync is never finished: the array
        // is fenced and a restart recovers the commit before it.
        for segment in dirty {
            self.sync_segment(segment)?;
        }
        self.sync_segment_names()?;
        if let Err(error) = self.db.finish_syncs() {
            self.committer.fence(&error);
            return Err(error);
        }
        self.stats.durable_commits.fetch_add(1, Ordering::Relaxed);
        self.committer.durable_count.store(upto, Ordering::SeqCst);
        *self.committer.last_durable.lock() = std::time::Instant::now();
        // Writers and flushes need not wait for the files: what is freed is
        // durable now. Hand over hand, so cuts happen in commit order.
        self.db.maps_cache().apply_deferred();
        let _files = self.committer.files_lock.lock();
        drop(flush);
        let holes = Self::plan_punches(punching, &freeing);
        let due = {
            let mut deferred = self.committer.deferred_holes.lock();
            deferred.add(holes);
            deferred.take(release)
        };
        if !freeing.is_empty() || !due.is_empty() {
            let due = self.holes_of_live_segments(due);
            // Readers look up a record and read it under the I/O lock: once the
            // write lock has been had, every reader that could have seen the
            // freed records is done, and later ones look them up in metadata
            // that no longer has them. Reads are not held up by the cuts
            // themselves (removing 80 segments took 0.8 s). A retired file
            // may be written again at once (as a new segment): it is retired
            // only after that point too.
            drop(self.io_lock.write());
            for id in &freeing {
                let retired = match release {
                    Release::Now => self.store.remove(*id),
                    Release::Due => self.store.retire(*id),
                };
                retired.map_err(|e| EngineError::io(format!("removing segment {id}"), e))?;
                self.stats.freed_segments.fetch_add(1, Ordering::Relaxed);
            }
            self.punch(due);
        }
        self.expire_retired(release);
        Ok(())
    }

    /// Segment files created or reused since the last durable commit keep
    /// their names across a crash (before metadata names them durably). A
    /// failure fences the array, as a failed segment sync does.
    fn sync_segment_names(&self) -> Result<()> {
        self.store.sync_names().map_err(|e| {
            let error = EngineError::io("syncing the segment directory", e);
            self.committer.fence(&error);
            error
        })
    }

    /// The durable commit itself: the writer state without the segments being
    /// freed, made durable. A failure fences the array (see `durable_commit`'s
    /// caller): the writer state has already let go of those segments and
    /// handed its changed rows to the failed transaction, so a retry would
    /// commit a state that misses them. A restart recovers to the last
    /// durable commit.
    fn commit_durably(&self, ws: &mut WriterState, freeing: &[SegmentId]) -> Result<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)
            .map_err(kv_error)?;
        txn.set_quick_repair(true);
        for id in freeing {
            ws.remove_segment(*id);
        }
        crate::write::transaction::persist_writer_state(&txn, ws)?;
        self.db
            .commit_deferring_sync(txn, crate::meta::mapping_cache::ChangedMappings::NONE)
    }

    /// The page ranges to punch for freed records (segments removed whole are
    /// skipped): worked out before the exclusive I/O lock is taken.
    fn plan_punches(punching: Vec<Hole>, removed: &[SegmentId]) -> Vec<Hole> {
        let mut by_segment: BTreeMap<SegmentId, Vec<(u64, u64)>> = BTreeMap::new();
        for (segment, offset, length) in punching {
            if !removed.contains(&segment) {
                by_segment
                    .entry(segment)
                    .or_default()
                    .push((offset, length));
            }
        }
        by_segment
            .into_iter()
            .flat_map(|(segment, freed)| {
                crate::segment::log::punchable(freed)
                    .into_iter()
                    .map(move |(offset, length)| (segment, offset, length))
            })
            .collect()
    }

    /// Punches freed page ranges out of their segment files. A failure only
    /// costs disk space, so it is logged, not returned.
    fn punch(&self, holes: Vec<Hole>) {
        for (segment, offset, length) in holes {
            match self.store.punch(segment, offset, length) {
                Ok(()) => {
                    self.stats
                        .punched_bytes
                        .fetch_add(length, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!(%segment, offset, length, "punching freed space failed: {e}")
                }
            }
        }
    }

    /// A failed sync fences the array. Why not retry: the caller has taken
    /// the segment off the dirty list, and a later flush would commit
    /// metadata naming records never synced and report success; and putting
    /// it back would not help, since after a failed fsync Linux may drop the
    /// dirty pages and let the next fsync "succeed". Restarting recovers the
    /// array to its last durable commit, which is the truth.
    fn sync_segment(&self, segment: SegmentId) -> Result<()> {
        let synced = if crate::testing::sync_points::fails(
            crate::testing::sync_points::Point::SegmentSync,
        ) {
            Err(std::io::Error::from_raw_os_error(libc::EIO))
        } else {
            self.store.sync(segment)
        };
        match synced {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Ok(()) => Ok(()),
            Err(e) => {
                let error = crate::segment::fs_space::segment_error(
                    format!("syncing segment {segment}"),
                    e,
                );
                self.committer.fence(&error);
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::testing::sync_points::{self, Point};
    use crate::testing::test_data::{data_dir, quiet_engine};
    use crate::GRAIN_BYTES;

    const GRAIN: usize = GRAIN_BYTES as usize;

    /// A host write goes on while a durable commit syncs (the writer mutex
    /// was held across the syncs, so writes waited for the disk), reads back
    /// at once, and is durable after the next flush.
    #[test]
    fn a_write_goes_on_while_a_durable_commit_syncs() {
        let dir = data_dir("durable-window");
        let engine = quiet_engine(dir.path(), 1 << 30);
        engine.create_volume("v", 64 << 20).unwrap();
        engine
            .open_volume("v")
            .unwrap()
            .write(0, &[1u8; GRAIN])
            .unwrap();
        let window_engine = engine.clone();
        sync_points::set(Point::DurableBeforeSync, move || {
            let (done_tx, done_rx) = mpsc::channel();
            std::thread::spawn(move || {
                let volume = window_engine.open_volume("v").unwrap();
                volume.write(GRAIN as u64, &[2u8; GRAIN]).unwrap();
                let mut back = vec![0u8; GRAIN];
                volume.read(GRAIN as u64, &mut back).unwrap();
                done_tx.send(back).unwrap();
            });
            let back = done_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("a write during the commit's sync finished");
            assert_eq!(back, vec![2u8; GRAIN]);
        });

        engine.flush().unwrap();
        engine.flush().unwrap();
        engine.close().unwrap();
        drop(engine);

        let engine = quiet_engine(dir.path(), 1 << 30);
        let volume = engine.open_volume("v").unwrap();
        let mut back = vec![0u8; 2 * GRAIN];
        volume.read(0, &mut back).unwrap();
        assert_eq!(back[..GRAIN], [1u8; GRAIN]);
        assert_eq!(back[GRAIN..], [2u8; GRAIN]);
    }
}
