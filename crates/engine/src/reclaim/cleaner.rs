//! The segment cleaner: relocates the live records of mostly-dead segments so
//! the segments can be freed.
//!
//! A victim is chosen by cost-benefit (Rosenblum and Ousterhout's rule, with the
//! segment id standing in for age: ids grow with time): the free space gained,
//! 1 − u, against the cost of reading the segment and writing back its live part,
//! 1 + u, weighted by age, so cold, mostly-dead segments go first and hot ones are
//! left to die on their own. Relocated records go to the cleaner's own open
//! segment, so long-lived data collects apart from fresh writes.
//!
//! Relocation moves a record's bytes verbatim (checked first: a corrupt record is
//! never copied) and updates one block row; the mappings, which name block ids,
//! do not change. The victim is freed by the usual rule: once no live record is
//! left, after the next durable commit (so a crash cannot bring back metadata
//! that points into a deleted segment).

use std::sync::atomic::Ordering;

use redb::ReadableTable;

use crate::ids::BlockId;
use crate::meta::schema::{kv_error, BlockRec};
use crate::segment::log::{self, SegmentId, RECORD_HEADER_BYTES};
use crate::{Engine, Result};

/// Records relocated per transaction (each holds the writer mutex briefly).
const BATCH_RECORDS: usize = 256;
/// A segment more live than this is not worth cleaning in the background.
const MAX_BACKGROUND_UTILIZATION: f64 = 0.8;
/// When physical space runs short, segments up to this live are worth it.
const MAX_URGENT_UTILIZATION: f64 = 0.98;
/// Most victims a writer cleans itself before giving up on making room.
const MAX_WRITER_CLEANS: usize = 8;

/// A cleaner's turn (the engine's `cleaner` mutex held): picking a victim
/// needs one. Two writers short of room used to clean at once: either both
/// picked the same victim, and the first to finish freed it (removed its
/// file) while the other still read it, or they picked two, and their
/// relocations together outgrew the reserve, which holds one victim's live
/// records. Each failed a host write (seen at 90% full under 40 k small
/// writes a second).
type Turn<'e> = parking_lot::MutexGuard<'e, ()>;

/// One record found while walking a victim segment.
struct Found {
    block_id: BlockId,
    offset_bytes: u64,
    /// A slice of the segment as read: records are not copied out of it, so
    /// that cleaning a segment holds its bytes once (32 MiB), not twice.
    bytes: bytes::Bytes,
}

impl Engine {
    /// Picks the best victim: sealed, with stale bytes, utilization at most
    /// `max_utilization`, highest cost-benefit score.
    fn pick_victim(&self, _turn: &Turn, max_utilization: f64) -> Option<SegmentId> {
        let ws = self.committer.writer.lock();
        let newest = ws.next_segment_id;
        ws.segments
            .iter()
            .filter(|(id, s)| {
                !ws.is_open(**id)
                    && !ws.pending_free.contains(id)
                    && s.written_bytes > 0
                    && s.live_bytes < s.written_bytes
            })
            .map(|(&id, s)| {
                let u = s.live_bytes as f64 / s.written_bytes as f64;
                let age = f64::from(newest.get().saturating_sub(id.get()).max(1));
                (id, u, (1.0 - u) / (1.0 + u) * age)
            })
            .filter(|&(_, u, _)| u <= max_utilization)
            .max_by(|a, b| a.2.total_cmp(&b.2))
            .map(|(id, _, _)| id)
    }

    /// Whether stale space is worth a background cleaning pass (more than a
    /// quarter of what is used, and more than one segment's worth), and whether
    /// it is urgent: physical free space below twice the cleaner's reserve, so
    /// the reserve is never eaten by stale space while there is any to clean.
    ///
    /// Segments already cleaned and waiting for the durable commit that frees
    /// them count as free, not stale: cleaning more because of them would
    /// clean more than is due.
    fn cleaning_due(&self) -> (bool, bool) {
        let ws = self.committer.writer.lock();
        let used = ws.used_bytes() - Self::freeing_bytes(&ws);
        let stale = used - ws.live_bytes();
        let free = ws.capacity_bytes.saturating_sub(used);
        let reserve = crate::space::provisioning::cleaning_reserve_bytes(ws.capacity_bytes);
        let urgent = stale > 0 && free < 2 * reserve;
        let due = urgent || (stale > log::SEGMENT_TARGET_BYTES && stale * 4 > used);
        (due, urgent)
    }

    /// Bytes of the segments cleaned and waiting to be freed.
    fn freeing_bytes(ws: &crate::write::transaction::WriterState) -> u64 {
        ws.pending_free
            .iter()
            .filter_map(|id| ws.segments.get(id))
            .map(|s| s.written_bytes - s.live_bytes)
            .sum()
    }

    /// Whether cleaned segments must be freed now rather than by the background
    /// durable commit: when free space (not counting them) would leave no
    /// room for another victim's live records above the cleaner's reserve.
    fn must_free_now(&self) -> bool {
        let ws = self.committer.writer.lock();
        let free = ws.capacity_bytes.saturating_sub(ws.used_bytes());
        let reserve = crate::space::provisioning::cleaning_reserve_bytes(ws.capacity_bytes);
        ws.has_space_to_free() && free < reserve + log::SEGMENT_TARGET_BYTES
    }

    /// One background cleaning pass over one victim, when due. Returns whether
    /// it did anything.
    pub(crate) fn clean_step(&self) -> Result<bool> {
        let (due, urgent) = self.cleaning_due();
        if !due {
            return Ok(false);
        }
        let max_utilization = if urgent {
            MAX_URGENT_UTILIZATION
        } else {
            MAX_BACKGROUND_UTILIZATION
        };
        let turn = self.scheduler.cleaner.lock();
        let Some(victim) = self.pick_victim(&turn, max_utilization) else {
            return Ok(false);
        };
        self.clean_segment(victim)?;
        // The victim is freed by the next durable commit: the background one
        // (never later: cleaning commits, so one is due), or at once when
        // space is short. A durable commit of its own for every victim held
        // host writes for 35-60 ms (the metadata fsync) each time, several
        // times a second near full.
        if self.must_free_now() {
            self.flush_freeing()?;
        }
        Ok(true)
    }

    /// Before a write of `bytes`: if stale space has eaten into the cleaner's
    /// reserve (the background cleaner fell behind), clean here until the
    /// reserve is free again. Live data never needs this — its limit keeps
    /// the reserve free — so a writer only waits when overwrites outpace
    /// cleaning.
    pub(crate) fn make_room(&self, bytes: u64) -> Result<()> {
        if !self.write_may_clean(bytes) {
            return Ok(());
        }
        let reserve =
            crate::space::provisioning::cleaning_reserve_bytes(self.config.capacity_bytes);
        let wanted = bytes.saturating_add(reserve);
        for _ in 0..MAX_WRITER_CLEANS {
            // Another cleaner may make the room meanwhile: checked after.
            let turn = self.scheduler.cleaner.lock();
            let cleaned_waiting = {
                let ws = self.committer.writer.lock();
                let free = ws.capacity_bytes.saturating_sub(ws.used_bytes());
                let stale = ws.used_bytes() - ws.live_bytes();
                if free >= wanted || stale == 0 {
                    return Ok(());
                }
                !ws.pending_free.is_empty()
            };
            if cleaned_waiting {
                // Segments the background cleaner emptied: freeing them is
                // cheaper than cleaning another.
                self.flush_freeing()?;
                continue;
            }
            let Some(victim) = self.pick_victim(&turn, MAX_URGENT_UTILIZATION) else {
                return Ok(());
            };
            self.stats.writer_cleans.fetch_add(1, Ordering::Relaxed);
            self.clean_segment(victim)?;
            // A cleaned victim is freed by the next durable commit.
            self.flush_freeing()?;
        }
        Ok(())
    }

    /// Whether a write of `bytes` may have to clean first (`make_room`): not
    /// while the last commit left the cleaner's reserve and the write free.
    pub(crate) fn write_may_clean(&self, bytes: u64) -> bool {
        let reserve =
            crate::space::provisioning::cleaning_reserve_bytes(self.config.capacity_bytes);
        self.space_watch.free_bytes_hint.load(Ordering::Relaxed) < bytes.saturating_add(reserve)
    }

    /// Cleans every segment holding stale bytes, however live (tests run it
    /// between operations to exercise relocation hard). Returns the segments
    /// cleaned.
    pub fn clean_now(&self) -> Result<u64> {
        {
            // Seal both open segments so everything written so far is eligible.
            let mut ws = self.committer.writer.lock();
            let open = ws.open_segment;
            if ws.segments.get(&open).is_some_and(|s| s.written_bytes > 0) {
                ws.open_segment = ws.next_segment_id;
                ws.next_segment_id = ws.next_segment_id.next();
                if ws.segments.get(&open).is_some_and(|s| s.live_bytes == 0) {
                    ws.pending_free.insert(open);
                }
            }
            if let Some(clean) = ws.clean_segment.take() {
                if ws.segments.get(&clean).is_some_and(|s| s.live_bytes == 0) {
                    ws.pending_free.insert(clean);
                }
            }
        }
        let mut cleaned = 0;
        let mut tried = std::collections::BTreeSet::new();
        let turn = self.scheduler.cleaner.lock();
        while let Some(victim) = self.pick_victim(&turn, 1.0) {
            if !tried.insert(victim) {
                break; // a record that cannot move (corrupt) keeps it alive
            }
            self.clean_segment(victim)?;
            cleaned += 1;
        }
        self.flush_freeing()?;
        Ok(cleaned)
    }

    /// Relocates every live record of `victim`.
    fn clean_segment(&self, victim: SegmentId) -> Result<()> {
        crate::testing::sync_points::at(crate::testing::sync_points::Point::CleanBeforeRead);
        let found = self.read_records(victim)?;
        for batch in found.chunks(BATCH_RECORDS) {
            let batch_bytes: u64 = batch.iter().map(|r| r.bytes.len() as u64).sum();
            let mut ws = self.committer.writer.lock();
            let relocate =
                |st: &mut crate::write::transaction::TxState,
                 t: &mut crate::write::transaction::Tables,
                 ws: &crate::write::transaction::WriterState| {
                    for record in batch {
                        let Some(value) = t.blocks.get(record.block_id.get()).map_err(kv_error)?
                        else {
                            continue; // freed since the walk
                        };
                        let rec = BlockRec::decode(value.value())?;
                        drop(value);
                        let still_here = rec.segment == victim
                            && u64::from(rec.offset_bytes) == record.offset_bytes;
                        if still_here {
                            st.relocate(ws, t, record.block_id, rec, &record.bytes)?;
                        }
                    }
                    Ok(st.relocated_bytes)
                };
            // In the write batches' open transaction, as reclaim steps are,
            // when it cannot fail for want of space (a failure there fences
            // the array); two commits a batch of its own held host writes
            // behind it. Safe to defer: the victim is freed only by a durable
            // commit, which commits the open transaction first.
            let fits = ws.used_bytes() + batch_bytes <= ws.capacity_bytes
                && crate::segment::fs_space::check_data(self.store.as_ref(), batch_bytes).is_ok();
            let relocated = if fits {
                let relocated =
                    self.transact_deferred(&mut ws, batch.len() as u64, false, relocate)?;
                self.commit_pending_if_full(&mut ws)?;
                relocated
            } else {
                self.transact(&mut ws, false, relocate)?
            };
            drop(ws);
            // Readers would find the old records stale anyway (see
            // `locations`); forgetting them spares a failed read each.
            for record in batch {
                self.caches.locations.forget(record.block_id);
            }
            self.stats
                .relocated_bytes
                .fetch_add(relocated, Ordering::Relaxed);
        }
        self.stats.cleaned_segments.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Walks a sealed segment's records in order, keeping those whose checksum
    /// holds (a bad one is logged and counted, and left where it is).
    /// Nothing if the victim was emptied and freed (or set to be) since it
    /// was picked: host writes can overwrite its last live records meanwhile, and
    /// a durable commit then removes its file. Checked under the writer
    /// mutex, and the I/O lock taken before that mutex is let go, so that no
    /// removal falls between the check and the read (before, the cleaner
    /// read a removed file and failed, and with it the host write that had
    /// called on it for room).
    fn read_records(&self, victim: SegmentId) -> Result<Vec<Found>> {
        let (written_bytes, io) = {
            let ws = self.committer.writer.lock();
            let state = ws.segments.get(&victim);
            match state {
                Some(state) if !ws.pending_free.contains(&victim) => {
                    (state.written_bytes, self.io_lock.read())
                }
                _ => return Ok(Vec::new()),
            }
        };
        let mut data = vec![0u8; written_bytes as usize];
        self.store.read_at(victim, 0, &mut data).map_err(|e| {
            crate::EngineError::io(format!("reading segment {victim} to clean it"), e)
        })?;
        drop(io);
        let data = bytes::Bytes::from(data);
        let mut found = Vec::new();
        // Headers whose record does not check out: damage if live, else a dead
        // record whose later pages were punched out.
        let mut suspect = Vec::new();
        let mut at = 0usize;
        while at + RECORD_HEADER_BYTES <= data.len() {
            let Some((block_id, end)) = record_at(&data, at) else {
                if let Some((header, _)) = log::read_header(&data[at..]) {
                    suspect.push((header.block_id, at as u64));
                }
                // Pages of dead records are punched out (zeroes): find the next
                // record whose header and checksum hold.
                match (at + 1..data.len()).find(|&next| record_at(&data, next).is_some()) {
                    Some(next) => {
                        at = next;
                        continue;
                    }
                    None => break,
                }
            };
            found.push(Found {
                block_id,
                offset_bytes: at as u64,
                bytes: data.slice(at..end),
            });
            at = end;
        }
        self.report_damaged(victim, &suspect)?;
        Ok(found)
    }

    /// Logs and counts the records among `suspects` (block id, offset) that the
    /// block table still places there: those are damage. The others are dead
    /// records cut short by punching, which is expected.
    fn report_damaged(&self, victim: SegmentId, suspects: &[(BlockId, u64)]) -> Result<()> {
        if suspects.is_empty() {
            return Ok(());
        }
        self.commit_pending_now()?;
        let txn = self.begin_read()?;
        let blocks = txn
            .open_table(crate::meta::schema::BLOCKS)
            .map_err(kv_error)?;
        for &(block_id, offset_bytes) in suspects {
            let Some(value) = blocks.get(block_id.get()).map_err(kv_error)? else {
                continue;
            };
            let rec = BlockRec::decode(value.value())?;
            if rec.segment == victim && u64::from(rec.offset_bytes) == offset_bytes {
                tracing::error!(
                    segment = %victim,
                    offset = offset_bytes,
                    block = %block_id,
                    "corrupt record not relocated"
                );
                self.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// The record starting exactly at `at`, if its header parses and its checksum
/// holds: its block id and where it ends. Anything else — zeroes of a
/// punched hole, a torn or corrupt record — is not a record (a corrupt live
/// record is never relocated; its block keeps failing reads as it should).
fn record_at(data: &[u8], at: usize) -> Option<(BlockId, usize)> {
    let (header, crc) = log::read_header(data.get(at..)?)?;
    let end = at + RECORD_HEADER_BYTES + header.payload_len as usize;
    let bytes = data.get(at..end)?;
    log::verify_record(bytes, header, crc).ok()?;
    Some((header.block_id, end))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use crate::testing::test_data::unique_bytes;
    use crate::{Engine, Volume, GRAIN_BYTES};

    const MIB: u64 = 1 << 20;

    /// An engine of `capacity_bytes` (no background thread) with one volume
    /// written end to end with `written_mib`, and then every other grain of it
    /// written again: every segment half stale, worth a cleaning pass.
    fn with_stale(
        capacity_bytes: u64,
        written_mib: u64,
    ) -> (tempfile::TempDir, Arc<Engine>, Volume, Vec<u8>) {
        let dir = crate::testing::test_data::data_dir("clean");
        let engine = crate::testing::test_data::quiet_engine(dir.path(), capacity_bytes);
        engine.create_volume("v", written_mib * MIB).unwrap();
        let volume = engine.open_volume("v").unwrap();
        let mut expected = unique_bytes((written_mib * MIB) as usize, 1);
        volume.write(0, &expected).unwrap();
        let again = unique_bytes(expected.len(), 2);
        let grain = GRAIN_BYTES as usize;
        for at in (0..expected.len()).step_by(2 * grain) {
            volume.write(at as u64, &again[at..at + grain]).unwrap();
            expected[at..at + grain].copy_from_slice(&again[at..at + grain]);
        }
        volume.flush().unwrap();
        (dir, engine, volume, expected)
    }

    /// Reads back, checks consistency and closes.
    fn check_and_close(engine: &Engine, volume: &Volume, expected: &[u8]) {
        reads_back(volume, expected);
        engine.check_consistency().unwrap();
        engine.close().unwrap();
    }

    fn reads_back(volume: &Volume, expected: &[u8]) {
        let mut back = vec![0u8; expected.len()];
        volume.read(0, &mut back).unwrap();
        assert!(back == expected, "the volume reads back what was written");
    }

    fn durable_commits(engine: &Engine) -> u64 {
        engine.stats.durable_commits.load(Ordering::SeqCst)
    }

    /// A victim whose last live records host writes overwrite, and a durable
    /// commit frees, between its pick and its cleaning: the pass finds nothing
    /// to move and succeeds. (Before the fix it read the removed file and
    /// failed, and so did a host write that had called on it for room.)
    #[test]
    fn a_victim_freed_after_its_pick_is_passed_over() {
        let (_dir, engine, volume, _) = with_stale(1 << 30, 96);
        let rewritten = unique_bytes((96 * MIB) as usize, 3);
        let (hook_engine, hook_volume) = (engine.clone(), volume.clone());
        let left = Arc::new(parking_lot::Mutex::new(None));
        let hook_left = left.clone();
        crate::testing::sync_points::set(
            crate::testing::sync_points::Point::CleanBeforeRead,
            move || {
                let ids = || -> Vec<crate::segment::log::SegmentId> {
                    let listed = hook_engine.store.list().unwrap();
                    listed.into_iter().map(|(id, _)| id).collect()
                };
                // Sealed ones: the open one goes on taking the new data.
                let open = hook_engine.committer.writer.lock().open_segment;
                let before: Vec<_> = ids().into_iter().filter(|id| *id != open).collect();
                hook_volume
                    .write(0, &unique_bytes((96 * MIB) as usize, 3))
                    .unwrap();
                hook_engine.flush().unwrap();
                let after = ids();
                *hook_left.lock() = Some(before.iter().filter(|id| after.contains(id)).count());
            },
        );

        assert!(engine.clean_step().unwrap(), "cleaning was due");

        let left = left.lock().take().expect("the hook ran");
        assert_eq!(
            left, 0,
            "every sealed segment of before, the victim too, is gone"
        );
        check_and_close(&engine, &volume, &rewritten);
    }

    /// With room to spare, a background pass relocates in the host writes'
    /// open transaction and leaves freeing the victim to the background
    /// durable commit: no commit of its own, durable or not (each held host
    /// writes behind it). The data reads back before and after the victim is
    /// freed, and after a restart.
    #[test]
    fn with_room_to_spare_a_pass_leaves_freeing_to_the_next_durable_commit() {
        let (dir, engine, volume, expected) = with_stale(1 << 30, 96);
        let commits = || engine.stats.pending_commits.load(Ordering::SeqCst);
        let (durable_before, commits_before) = (durable_commits(&engine), commits());
        assert!(engine.clean_step().unwrap(), "cleaning is due");
        assert_eq!(
            durable_commits(&engine),
            durable_before,
            "no durable commit"
        );
        assert_eq!(
            commits(),
            commits_before,
            "the open transaction was not committed"
        );
        let waiting: Vec<_> = engine
            .committer
            .writer
            .lock()
            .pending_free
            .iter()
            .copied()
            .collect();
        assert_eq!(waiting.len(), 1, "the victim waits to be freed");
        assert!(engine.committer.writer.lock().open_txn.is_some());
        reads_back(&volume, &expected);
        engine.flush().unwrap();
        assert!(engine.committer.writer.lock().pending_free.is_empty());
        let present = engine.store.list().unwrap();
        assert!(
            !present.iter().any(|(id, _)| *id == waiting[0]),
            "the victim's file is gone"
        );
        check_and_close(&engine, &volume, &expected);
        drop((volume, engine));
        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        check_and_close(&engine, &engine.open_volume("v").unwrap(), &expected);
    }

    /// Near full, a pass frees its victim at once: the space is what writes
    /// are about to need.
    #[test]
    fn with_space_short_a_pass_frees_its_victim_at_once() {
        let (_dir, engine, volume, expected) = with_stale(256 * MIB, 112);
        let (free, reserve) = {
            let ws = engine.committer.writer.lock();
            let reserve = crate::space::provisioning::cleaning_reserve_bytes(ws.capacity_bytes);
            (ws.capacity_bytes - ws.used_bytes(), reserve)
        };
        assert!(
            free < reserve + crate::segment::log::SEGMENT_TARGET_BYTES,
            "space is short: {free} bytes free, {reserve} reserved"
        );
        let before = durable_commits(&engine);
        assert!(engine.clean_step().unwrap(), "cleaning is due");
        assert!(
            durable_commits(&engine) > before,
            "a durable commit freed the victim"
        );
        assert!(engine.committer.writer.lock().pending_free.is_empty());
        check_and_close(&engine, &volume, &expected);
    }

    /// A writer short of room frees segments the background cleaner emptied
    /// before it cleans any itself.
    #[test]
    fn a_writer_short_of_room_frees_cleaned_segments_before_cleaning() {
        let (_dir, engine, volume, expected) = with_stale(1 << 30, 96);
        assert!(engine.clean_step().unwrap());
        assert!(!engine.committer.writer.lock().pending_free.is_empty());
        let before = engine.stats.writer_cleans.load(Ordering::SeqCst);
        // A write just too big for the cleaner's reserve to stay free, unless
        // the victim is freed.
        let bytes = {
            let ws = engine.committer.writer.lock();
            let victim = ws.pending_free.iter().next().copied().unwrap();
            let reserve = crate::space::provisioning::cleaning_reserve_bytes(ws.capacity_bytes);
            ws.capacity_bytes - ws.used_bytes() + ws.segments[&victim].written_bytes - reserve
        };
        assert!(engine.write_may_clean(bytes));
        engine.make_room(bytes).unwrap();
        assert!(
            engine.committer.writer.lock().pending_free.is_empty(),
            "freed"
        );
        assert_eq!(engine.stats.writer_cleans.load(Ordering::SeqCst), before);
        check_and_close(&engine, &volume, &expected);
    }
}
