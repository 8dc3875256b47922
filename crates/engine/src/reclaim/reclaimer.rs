//! The background reclaimer: drops point mappings that range records shadow and
//! the mappings of deleted volumes, releasing their block references, and frees
//! segments left with no live record (at the next durable commit, so a crash can
//! never bring back metadata that points into a freed segment).
//!
//! It works in bounded batches under the writer mutex, so host I/O interleaves
//! between batches, and it yields to host I/O in progress before each batch
//! (boundedly, so it is never starved). A batch joins the write batches' shared
//! open transaction (see [`crate::write::uncommitted`]) rather than committing it and then
//! committing itself: those two redb commits, each copying every B-tree page
//! touched since the last, made a step hold the writer mutex for about 4.5 ms
//! under a 20 k IOPS host workload, against 0.2 ms now, and were what the
//! workload's p99 waited on in seed 001 (bench/RESULTS.md). Nothing it removes
//! is needed by readers meanwhile: the range record that shadows the mappings
//! is committed (and in memory) before reclaim of it starts, and freed blocks
//! and segments are given back only after the durable commit that commits the
//! open transaction. A crash before that commit loses the step, and reclaim
//! starts the record over.
//!
//! Rate control: each storage container has a token bucket in bytes of dead data
//! released (its reclaim policy and burst). A batch takes tokens first and gives
//! back what it did not use; containers with a backlog are served round robin.
//! The backlog itself is exact and O(1) to read per volume: mapping records less
//! the mappings that are still current (see `VolumeShared::live_mapped`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use redb::ReadableTable;

use crate::ids::{GrainIndex, SnapshotSeq};
use crate::meta::schema::{self, kv_error, HistValue, RangeKind};
use crate::space::container::ContainerShared;
use crate::write::transaction::Death;
use crate::{Engine, Result, GRAIN_BYTES};

/// Mappings dropped per transaction while host I/O is in flight: short
/// transactions (a fraction of a millisecond), so host writes never queue long
/// behind the writer mutex.
const BATCH_MAPPINGS: usize = 64;
/// Mappings dropped per transaction when no host I/O is in flight: commits are
/// a large part of the cost, so idle time reclaims in bigger steps.
const IDLE_BATCH_MAPPINGS: usize = 4096;
/// Hosts count as idle (and background work takes big steps) only after no host
/// I/O began for this long: a gap between two requests of a busy host is not
/// idleness, and a big step then would hold the writer mutex for tens of ms.
const HOSTS_QUIET: Duration = Duration::from_millis(100);
/// Longest a background step waits for host I/O to pause, in yields of
/// `FOREGROUND_YIELD`: background work slows under load but never stops.
const MAX_FOREGROUND_YIELDS: u32 = 10;
const FOREGROUND_YIELD: Duration = Duration::from_micros(100);
/// While hosts are doing I/O, background work pauses this many times as long as
/// each step took: it gets at most a thirtieth of a core (and of the writer
/// mutex), the hosts the rest. In the seed 001 benchmark (bench/RESULTS.md) a
/// fifth cost a concurrent 4 KiB write workload up to 20% on its p99, and a
/// tenth still 12-19% once the workload ran at 10 k IOPS. A thirtieth gave
/// 0.99-1.01x in a trial and 1.05-1.15x in the recorded run, where single runs
/// differ by up to 20%: not yet shown within 10% at every size. Under load
/// reclaim still moves, and once hosts are quiet for `HOSTS_QUIET` it runs at
/// full speed again.
const BUSY_BACKOFF_FACTOR: u32 = 29;
/// Longest sleep of such a pause: hosts going quiet end it this soon.
const MAX_BUSY_PAUSE: Duration = Duration::from_millis(50);

/// How far reclaim of one range record has got: every mapping it shadowed
/// below `next_grain` is gone. Mappings newer than the record are left where
/// they are, so without this a record over more newer mappings than one step
/// scans (a host wrote over what it had just unmapped) would be rescanned from
/// its start for ever. Only shadowed mappings are removed, and none can appear
/// behind the cursor (new mappings are newer than the record), so resuming is
/// exact; the cursor lives in memory, and after a restart reclaim starts the
/// record over.
pub(crate) struct RangeCursor {
    start: GrainIndex,
    range: schema::RangeRec,
    next_grain: GrainIndex,
}

impl RangeCursor {
    /// Where to go on with record `range` at `start`: its start unless a
    /// cursor for this very record says otherwise.
    fn resume(
        cursor: &parking_lot::Mutex<Option<RangeCursor>>,
        start: GrainIndex,
        range: schema::RangeRec,
    ) -> GrainIndex {
        match &*cursor.lock() {
            Some(c) if c.start == start && c.range == range => {
                assert!(start <= c.next_grain && c.next_grain < range.end_grain);
                c.next_grain
            }
            _ => start,
        }
    }

    /// Records how far a step got (`None`: the record is finished).
    fn save(
        cursor: &parking_lot::Mutex<Option<RangeCursor>>,
        start: GrainIndex,
        range: schema::RangeRec,
        next_grain: Option<GrainIndex>,
    ) {
        *cursor.lock() = next_grain.map(|next_grain| RangeCursor {
            start,
            range,
            next_grain,
        });
    }
}

/// What one container's reclaim step did.
enum ContainerStep {
    Worked,
    Idle,
    /// Backlog but no tokens: tokens for a grain accrue after this long.
    Waiting(Duration),
}
/// How long the reclaimer sleeps when idle before checking again.
const IDLE_WAIT: Duration = Duration::from_millis(500);
/// How long the reclaimer sleeps, out of reach of wake-ups, each time it runs
/// out of work before it waits to be woken. Why: every range a host writes
/// (EXTENDED COPY, WRITE SAME, UNMAP) wakes the reclaimer, and a host issuing
/// them one after another (ESXi copies in 4 MiB commands) then paid a thread
/// wake-up per command, dear where idle cores halt; asked while the reclaimer
/// lingers, a wake-up is a flag it finds when the linger ends. Reclaim starts
/// at most this much later.
const LINGER: Duration = Duration::from_millis(1);
/// Writes not flushed by a host are made durable in the background after this
/// long anyway: it bounds what a crash can lose from hosts that never flush, and
/// keeps redb's chain of non-durable commits short. Five seconds, as ZFS's
/// transaction groups and ext4's journal commits: every commit writes each
/// B-tree leaf dirtied since the last one, and random overwrites dirty leaves
/// all over the mapping and block tables, so a leaf written once per five
/// seconds instead of once per second took 1.21x the 4 KiB random writes a
/// second at queue depth 32 over 30 s runs, together with a larger open
/// transaction ([`crate::write::uncommitted::MAX_OPEN_GRAINS`]; either alone gained
/// nothing). Hosts that flush (every file system does, on fsync and on its own
/// commits) are not affected.
const BACKGROUND_FLUSH_INTERVAL: Duration = Duration::from_secs(5);

pub(crate) fn start(engine: Weak<Engine>) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name("lacuna-reclaim".into())
        .spawn(move || run(engine))
        .expect("spawning the reclaimer thread")
}

fn run(weak: Weak<Engine>) {
    // Pause still owed to busy hosts for background work done meanwhile.
    let mut owed = Duration::ZERO;
    loop {
        let Some(engine) = weak.upgrade() else {
            return;
        };
        if engine.scheduler.shutdown.load(Ordering::SeqCst) {
            return;
        }
        // Its steps commit under the writer mutex, and leave large changes
        // to the map cache for after it (see `mapcache`).
        engine.db.maps_cache().apply_deferred();
        if !owed.is_zero() {
            owed = engine.pay_pause(owed);
            // Never postponed by the pause: it bounds what a crash can lose.
            engine.background_flush_if_due();
            continue;
        }
        engine.yield_to_foreground();
        let host_ops_before = engine.hosts.ops();
        let started = std::time::Instant::now();
        match engine.background_step() {
            Ok(true) => {
                owed = engine.pause_owed(started.elapsed(), host_ops_before);
                continue;
            }
            Ok(false) => {
                if engine.committer.writer.lock().has_space_to_free() {
                    if let Err(e) = engine.flush_freeing_in_background() {
                        tracing::error!("reclaimer flush failed: {e}");
                    }
                }
                if engine.holds_freed_storage() {
                    engine.release_freed(crate::write::durable::Release::Due);
                }
                let token_wait = *engine.scheduler.reclaim_token_wait.lock();
                wait(&engine, token_wait.map_or(IDLE_WAIT, |d| d.min(IDLE_WAIT)));
            }
            Err(e) => {
                tracing::error!("reclaim step failed: {e}");
                wait(&engine, IDLE_WAIT);
            }
        }
    }
}

/// Waits `timeout` (at least 100 µs), or less if woken after the linger.
fn wait(engine: &Arc<Engine>, timeout: Duration) {
    let timeout = timeout.max(Duration::from_micros(100));
    // Not waiting on the condition variable meanwhile, so a wake-up asked for
    // in this time costs the asker nothing (see `LINGER`). Part of the wait,
    // so a reclaim waiting for rate tokens waits no longer than before.
    let lingered = LINGER.min(timeout);
    std::thread::sleep(lingered);
    let (flag, condvar) = &engine.scheduler.reclaim_wake;
    let mut woken = flag.lock();
    let rest = timeout.saturating_sub(lingered);
    if !*woken && !rest.is_zero() {
        condvar.wait_for(&mut woken, rest);
    }
    *woken = false;
}

impl Engine {
    /// Runs one step of background work (reclaim, history sweep, settling of
    /// data bits, cleaning, deferred reduction, lifecycle), in that priority;
    /// false when there was none. The background thread loops on it; tests
    /// that turn that thread off (`EngineConfig::background`) call it
    /// themselves.
    pub fn background_step(&self) -> Result<bool> {
        self.background_flush_if_due();
        Ok(self.reclaim_step()?
            || self.sweep_step()?
            || self.bits_step()?
            || self.clean_step()?
            || self.reduce_step()?
            || self.lifecycle_step()?)
    }

    /// Waits (boundedly) while host I/O is in progress — unless physical space
    /// is short, when cleaning is what host writes need most.
    fn yield_to_foreground(&self) {
        if self.space_short() {
            return;
        }
        for _ in 0..MAX_FOREGROUND_YIELDS {
            if self.hosts.in_flight() == 0 {
                return;
            }
            std::thread::sleep(FOREGROUND_YIELD);
        }
    }

    /// Physical free space below twice the cleaner's reserve (as of the last
    /// commit): cleaning is then what host writes need most.
    fn space_short(&self) -> bool {
        let reserve =
            crate::space::provisioning::cleaning_reserve_bytes(self.config.capacity_bytes);
        self.space_watch.free_bytes_hint.load(Ordering::Relaxed) < 2 * reserve
    }

    /// After a step of `took`: if hosts did I/O meanwhile (and space is not
    /// short), the pause owed in proportion, so background work cannot take
    /// the CPU and the writer mutex from them however much of it there is.
    /// Owed in full, not cut at [`MAX_BUSY_PAUSE`]: cleaning a segment is one
    /// step of tens of ms, and a pause cut at 50 ms after it let the cleaner
    /// take a third of the daemon's CPU from 1 MiB writes.
    fn pause_owed(&self, took: Duration, host_ops_before: u64) -> Duration {
        if self.hosts_owed_pause(host_ops_before) {
            took * BUSY_BACKOFF_FACTOR
        } else {
            Duration::ZERO
        }
    }

    /// Sleeps up to [`MAX_BUSY_PAUSE`] of the pause `owed` and returns what is
    /// still owed: nothing once the hosts went quiet meanwhile (background
    /// work then runs at full speed again) or space is short.
    fn pay_pause(&self, owed: Duration) -> Duration {
        let host_ops_before = self.hosts.ops();
        let paid = owed.min(MAX_BUSY_PAUSE);
        std::thread::sleep(paid);
        if self.hosts_owed_pause(host_ops_before) {
            owed - paid
        } else {
            Duration::ZERO
        }
    }

    /// Hosts began I/O since `host_ops_before` or have some in flight, and
    /// space is not short: background work pauses for them.
    fn hosts_owed_pause(&self, host_ops_before: u64) -> bool {
        self.hosts.busy_since(host_ops_before) && !self.space_short()
    }

    fn background_flush_if_due(&self) {
        let due = self.committer.last_durable.lock().elapsed() >= BACKGROUND_FLUSH_INTERVAL;
        let pending = self.committer.commit_count.load(Ordering::SeqCst)
            > self.committer.durable_count.load(Ordering::SeqCst);
        if due && pending {
            if let Err(e) = self.flush_in_background() {
                tracing::error!("background flush failed: {e}");
            }
        }
    }

    /// Does one batch of reclaim work for the next container that has work and
    /// tokens; false when there is none.
    pub(crate) fn reclaim_step(&self) -> Result<bool> {
        let now = self.clock.now();
        let containers: Vec<_> = self.catalog.containers.read().values().cloned().collect();
        let first = self.scheduler.next_round_start();
        let mut token_wait: Option<Duration> = None;
        for k in 0..containers.len() {
            let container = &containers[(first + k) % containers.len()];
            match self.reclaim_container_step(container, now)? {
                ContainerStep::Worked => return Ok(true),
                ContainerStep::Idle => {}
                ContainerStep::Waiting(d) => {
                    token_wait = Some(token_wait.map_or(d, |w| w.min(d)));
                }
            }
        }
        *self.scheduler.reclaim_token_wait.lock() = token_wait;
        Ok(false)
    }

    fn reclaim_container_step(
        &self,
        container: &ContainerShared,
        now: Duration,
    ) -> Result<ContainerStep> {
        let members = self.container_members(container.id);
        let backlog_grains = self.container_backlog_grains(container.id, &members);
        if backlog_grains == 0 {
            container.draining.store(false, Ordering::SeqCst);
            // Ranges over nothing dead finish without tokens, whatever the policy.
            let worked = self.reclaim_work(container, &members, 0)?.is_some();
            return Ok(if worked {
                ContainerStep::Worked
            } else {
                ContainerStep::Idle
            });
        }
        let draining = container.draining.load(Ordering::SeqCst);
        let batch_grains = if self.hosts.idle(HOSTS_QUIET) {
            IDLE_BATCH_MAPPINGS
        } else {
            BATCH_MAPPINGS
        } as u64;
        let granted_grains = if draining {
            batch_grains
        } else {
            let mut bucket = container.bucket.lock();
            let granted_bytes = bucket.take(batch_grains * GRAIN_BYTES, now);
            bucket.refund(granted_bytes % GRAIN_BYTES);
            let grains = granted_bytes / GRAIN_BYTES;
            if grains == 0 {
                // Wait for a batch's worth (or the whole backlog if smaller):
                // waking per grain at a low rate would spend a core on commits.
                let wanted_grains = backlog_grains.min(BATCH_MAPPINGS as u64);
                return Ok(match bucket.wait_for(wanted_grains * GRAIN_BYTES, now) {
                    Some(wait) => ContainerStep::Waiting(wait),
                    None => ContainerStep::Idle,
                });
            }
            grains
        };
        let released_grains = self
            .reclaim_work(container, &members, granted_grains)?
            .unwrap_or(0);
        assert!(released_grains <= granted_grains);
        if !draining {
            container
                .bucket
                .lock()
                .refund((granted_grains - released_grains) * GRAIN_BYTES);
        }
        container.count_reclaimed(released_grains * GRAIN_BYTES, now);
        Ok(ContainerStep::Worked)
    }

    /// One batch of at most `limit_grains` dead mappings of the container: a
    /// doomed volume's first, then shadowed ones of its volumes. `None` when
    /// there was nothing to do; else the grains released.
    fn reclaim_work(
        &self,
        container: &ContainerShared,
        members: &[std::sync::Arc<crate::VolumeShared>],
        limit_grains: u64,
    ) -> Result<Option<u64>> {
        let doomed = {
            let ws = self.committer.writer.lock();
            ws.doomed_containers
                .iter()
                .find(|(_, &c)| c == container.id)
                .map(|(&id, _)| (id, ws.mapping_count(id)))
        };
        match doomed {
            // Without tokens only what holds no dead data (history, records) goes.
            Some((volume, 0)) => {
                return self
                    .reclaim_doomed_step(volume, IDLE_BATCH_MAPPINGS)
                    .map(Some)
            }
            Some((volume, _)) if limit_grains > 0 => {
                return self
                    .reclaim_doomed_step(volume, limit_grains as usize)
                    .map(Some)
            }
            _ => {}
        }
        for vol in members {
            let pending = vol.view.read().ranges.first_unreclaimed();
            let Some((start, range)) = pending else {
                continue;
            };
            let released = self.reclaim_range_step(vol, start, range, limit_grains as usize)?;
            vol.reclaim
                .reclaimed_bytes
                .fetch_add(released * GRAIN_BYTES, Ordering::Relaxed);
            return Ok(Some(released));
        }
        Ok(None)
    }

    /// Drops up to `limit` mappings a pending range record shadows, going on
    /// from where the previous step on the record stopped; finishes the record
    /// once its end is reached. Returns the mappings dropped.
    fn reclaim_range_step(
        &self,
        vol: &crate::VolumeShared,
        start: GrainIndex,
        range: schema::RangeRec,
        limit: usize,
    ) -> Result<u64> {
        let from = RangeCursor::resume(&vol.reclaim_cursor, start, range);
        let (done_until, released) = {
            let mut ws = self.committer.writer.lock();
            let snapshot_seqs = vol.snapshot_seqs.lock().clone();
            let stepped = self.transact_deferred(&mut ws, limit as u64, false, |st, t, _| {
                // Where this batch ends: after `limit` shadowed mappings, or
                // after scanning a bounded number of newer ones.
                let mut shadowed = 0;
                let mut scanned = 0;
                let mut batch_end = range.end_grain;
                for item in crate::meta::point_rows::range(t.maps(), vol.id, from, range.end_grain)?
                {
                    let (_, grain, value) = item?;
                    scanned += 1;
                    if value.seq < range.seq {
                        if shadowed >= limit {
                            batch_end = grain;
                            break;
                        }
                        shadowed += 1;
                    }
                    if scanned >= 16 * limit.max(BATCH_MAPPINGS) {
                        batch_end = grain + 1;
                        break;
                    }
                }
                let removed = st.remove_mappings_in(
                    t,
                    vol.id,
                    (from, batch_end),
                    limit,
                    Death {
                        seq: range.seq,
                        snapshot_seqs: &snapshot_seqs,
                    },
                    |value| value.seq < range.seq,
                )?;
                assert_eq!(removed.len(), shadowed);
                self.stats
                    .reclaimed_mappings
                    .fetch_add(shadowed as u64, Ordering::Relaxed);
                Ok((batch_end, shadowed as u64))
            })?;
            self.commit_pending_if_full(&mut ws)?;
            stepped
        };
        let done = done_until == range.end_grain;
        RangeCursor::save(
            &vol.reclaim_cursor,
            start,
            range,
            (!done).then_some(done_until),
        );
        if done {
            self.finish_range(vol, start, range)?;
        }
        Ok(released)
    }

    /// Marks a fully reclaimed range; a hole with nothing beneath it is the same as
    /// no record at all, so it is dropped.
    fn finish_range(
        &self,
        vol: &crate::VolumeShared,
        start: GrainIndex,
        range: schema::RangeRec,
    ) -> Result<()> {
        let mut view = vol.view.write();
        if view.ranges.find(start) != Some((start, range)) {
            return Ok(()); // cut or replaced meanwhile; its pieces come round again
        }
        let mut ws = self.committer.writer.lock();
        let snapshot_seqs = vol.snapshot_seqs.lock().clone();
        let finished = schema::RangeRec {
            reclaimed: true,
            ..range
        };
        self.transact(&mut ws, false, |st, t, _| {
            if range.kind == RangeKind::Hole {
                if schema::visible_to_any(&snapshot_seqs, range.seq, SnapshotSeq::MAX) {
                    let died = st.take_seq();
                    st.keep_range_history(t, vol.id, start, range, died)?;
                }
                t.ranges()?
                    .remove((vol.id.get(), start.get()))
                    .map_err(kv_error)?;
            } else {
                t.ranges()?
                    .insert((vol.id.get(), start.get()), &finished.encode()[..])
                    .map_err(kv_error)?;
            }
            Ok(())
        })?;
        let ranges = std::sync::Arc::make_mut(&mut view.ranges);
        if range.kind == RangeKind::Hole {
            ranges.remove(start);
        } else {
            ranges.replace(start, finished);
        }
        Ok(())
    }

    /// Drops a batch of a deleted volume's mappings; forgets the volume when none
    /// are left.
    fn reclaim_doomed_step(&self, volume: crate::ids::VolumeId, limit: usize) -> Result<u64> {
        assert!(limit > 0 && limit <= IDLE_BATCH_MAPPINGS);
        let mut ws = self.committer.writer.lock();
        let mut released = 0;
        let finished = self.transact_deferred(&mut ws, limit as u64, false, |st, t, _| {
            let everything = Death {
                seq: SnapshotSeq::MAX,
                snapshot_seqs: &[],
            };
            let all = (GrainIndex::new(0), GrainIndex::MAX);
            let grains = st.remove_mappings_in(t, volume, all, limit, everything, |_| true)?;
            released = grains.len() as u64;
            self.stats
                .reclaimed_mappings
                .fetch_add(grains.len() as u64, Ordering::Relaxed);
            let mut versions = Vec::new();
            if grains.len() < limit {
                for item in t
                    .history()?
                    .range((volume.get(), 0, 0)..=(volume.get(), u64::MAX, u64::MAX))
                    .map_err(kv_error)?
                    .take(limit - grains.len())
                {
                    let (key, value) = item.map_err(kv_error)?;
                    versions.push((key.value(), HistValue::decode(value.value())?.target));
                }
                for (key, target) in &versions {
                    t.history()?.remove(*key).map_err(kv_error)?;
                    st.release_history(t, *target)?;
                }
            }
            if grains.len() + versions.len() < limit {
                let kept: Vec<(u64, u64, u64)> = t
                    .range_history()?
                    .range((volume.get(), 0, 0)..=(volume.get(), u64::MAX, u64::MAX))
                    .map_err(kv_error)?
                    .map(|item| item.map(|(k, _)| k.value()))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(kv_error)?;
                for key in kept {
                    t.range_history()?.remove(key).map_err(kv_error)?;
                }
                let starts: Vec<u64> = t
                    .ranges()?
                    .range((volume.get(), 0)..=(volume.get(), u64::MAX))
                    .map_err(kv_error)?
                    .map(|item| item.map(|(k, _)| k.value().1))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(kv_error)?;
                for s in starts {
                    t.ranges()?.remove((volume.get(), s)).map_err(kv_error)?;
                }
                t.doomed()?.remove(volume.get()).map_err(kv_error)?;
                t.doomed_containers()?
                    .remove(volume.get())
                    .map_err(kv_error)?;
                return Ok(true);
            }
            Ok(false)
        })?;
        if finished {
            ws.doomed.remove(&volume);
            ws.doomed_containers.remove(&volume);
        }
        self.commit_pending_if_full(&mut ws)?;
        Ok(released)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use crate::GRAIN_BYTES;

    /// Background work that ran while hosts were busy owes them a pause of
    /// `BUSY_BACKOFF_FACTOR` times its length, all of it however long the
    /// step was, paid at most `MAX_BUSY_PAUSE` at a time, and forgiven as
    /// soon as hosts are quiet for one such sleep.
    #[test]
    fn a_long_step_owes_its_whole_pause_until_hosts_go_quiet() {
        use std::time::Duration;
        let dir = crate::testing::test_data::data_dir("pause");
        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        let step = Duration::from_millis(10);
        let ops = engine.hosts.ops();
        assert_eq!(engine.pause_owed(step, ops), Duration::ZERO, "hosts idle");
        let busy = engine.hosts.begin();
        let owed = engine.pause_owed(step, ops);
        assert_eq!(owed, step * super::BUSY_BACKOFF_FACTOR);
        assert!(owed > 2 * super::MAX_BUSY_PAUSE, "longer than one sleep");
        let left = engine.pay_pause(owed);
        assert_eq!(left, owed - super::MAX_BUSY_PAUSE, "hosts still busy");
        drop(busy);
        assert_eq!(engine.pay_pause(left), Duration::ZERO, "hosts went quiet");
    }

    /// A reclaim step joins the write batches' open transaction instead of
    /// committing it first and then committing itself: two redb commits a
    /// step, under the writer mutex, were what a concurrent 4 KiB write
    /// workload's p99 waited on in seed 001 (bench/results/HISTORY.md).
    /// What it removed reads back right before and after the commit, and
    /// after a restart from the flush.
    #[test]
    fn a_reclaim_step_joins_the_open_transaction() {
        const GRAINS: u64 = 3 * super::IDLE_BATCH_MAPPINGS as u64;
        let dir = crate::testing::test_data::data_dir("reclaim");
        let open = || crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        let engine = open();
        engine.create_volume("v", 2 * GRAINS * GRAIN_BYTES).unwrap();
        let volume = engine.open_volume("v").unwrap();
        // A one-byte pattern per grain: mappings without data blocks.
        let fill = |first: u64, grains: u64, byte: u8| {
            let bytes = vec![byte; (grains * GRAIN_BYTES) as usize];
            volume.write(first * GRAIN_BYTES, &bytes).unwrap();
        };
        fill(0, GRAINS, 0x11);
        volume.unmap(0, GRAINS * GRAIN_BYTES).unwrap();
        let backlog = engine.space().reclaim_backlog_bytes;
        assert_eq!(backlog, GRAINS * GRAIN_BYTES);
        // A host write opens the shared transaction.
        fill(GRAINS, 1, 0x22);
        let commits = || engine.stats.pending_commits.load(Ordering::SeqCst);
        let commits_before = commits();
        assert!(engine.committer.writer.lock().open_txn.is_some());
        assert!(engine.reclaim_step().unwrap());
        let open_grains = engine
            .committer
            .writer
            .lock()
            .open_txn
            .as_ref()
            .map(|o| o.grains);
        assert_eq!(commits(), commits_before, "the step committed");
        assert!(open_grains.is_some_and(|g| g > 1), "{open_grains:?}");
        let after_step = engine.space().reclaim_backlog_bytes;
        assert!(after_step < backlog, "{after_step} of {backlog} left");
        let check = |volume: &crate::Volume| {
            let mut back = vec![0u8; ((GRAINS + 2) * GRAIN_BYTES) as usize];
            volume.read(0, &mut back).unwrap();
            let (unmapped, rest) = back.split_at((GRAINS * GRAIN_BYTES) as usize);
            assert!(unmapped.iter().all(|&b| b == 0));
            assert!(rest[..GRAIN_BYTES as usize].iter().all(|&b| b == 0x22));
            assert!(rest[GRAIN_BYTES as usize..].iter().all(|&b| b == 0));
        };
        check(&volume);
        while engine.reclaim_step().unwrap() {}
        assert_eq!(engine.space().reclaim_backlog_bytes, 0);
        check(&volume);
        volume.flush().unwrap();
        engine.check_consistency().unwrap();
        engine.close().unwrap();
        drop((volume, engine));
        let engine = open();
        assert_eq!(engine.space().reclaim_backlog_bytes, 0);
        check(&engine.open_volume("v").unwrap());
        engine.check_consistency().unwrap();
        engine.close().unwrap();
    }

    /// A range record over grains with no point mapping beneath is born
    /// reclaimed: an EXTENDED COPY into an empty volume in many small
    /// commands, or an UNMAP of a range never written, leaves the reclaimer
    /// nothing to step through. Over written grains it is not, and the
    /// mappings it shadows are still reclaimed.
    #[test]
    fn a_range_over_nothing_is_born_reclaimed() {
        let dir = crate::testing::test_data::data_dir("born-reclaimed");
        let engine = crate::testing::test_data::quiet_engine(dir.path(), 1 << 30);
        for name in ["src", "dst"] {
            engine.create_volume(name, 64 * GRAIN_BYTES).unwrap();
        }
        let src = engine.open_volume("src").unwrap();
        let dst = engine.open_volume("dst").unwrap();
        src.write(0, &vec![0x5a; (8 * GRAIN_BYTES) as usize])
            .unwrap();
        dst.write(40 * GRAIN_BYTES, &vec![0x77; (4 * GRAIN_BYTES) as usize])
            .unwrap();
        let first_unreclaimed = || {
            let shared = engine.shared_volume("dst").unwrap();
            let view = shared.view.read();
            view.ranges
                .first_unreclaimed()
                .map(|(start, _)| start.get())
        };
        for step in 0..4 {
            let at = step * 2 * GRAIN_BYTES;
            engine
                .copy_range("src", at, 2 * GRAIN_BYTES, "dst", at)
                .unwrap();
        }
        dst.unmap(20 * GRAIN_BYTES, 10 * GRAIN_BYTES).unwrap();
        assert_eq!(first_unreclaimed(), None);
        assert_eq!(engine.space().reclaim_backlog_bytes, 0);
        // Over written grains: reclaim work, and after it nothing is left.
        dst.unmap(38 * GRAIN_BYTES, 8 * GRAIN_BYTES).unwrap();
        assert_eq!(first_unreclaimed(), Some(38));
        assert_eq!(engine.space().reclaim_backlog_bytes, 4 * GRAIN_BYTES);
        while engine.reclaim_step().unwrap() {}
        assert_eq!(first_unreclaimed(), None);
        assert_eq!(engine.space().reclaim_backlog_bytes, 0);
        let mut back = vec![0u8; (64 * GRAIN_BYTES) as usize];
        dst.read(0, &mut back).unwrap();
        let (copied, rest) = back.split_at((8 * GRAIN_BYTES) as usize);
        assert!(copied.iter().all(|&b| b == 0x5a));
        assert!(rest.iter().all(|&b| b == 0));
        engine.check_consistency().unwrap();
        engine.close().unwrap();
    }
}
