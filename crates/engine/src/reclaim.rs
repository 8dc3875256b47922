//! The background reclaimer: drops point mappings that range records shadow and
//! the mappings of deleted volumes, releasing their block references, and frees
//! segments left with no live record (at the next durable commit, so a crash can
//! never bring back metadata that points into a freed segment).
//!
//! It works in bounded batches, each one short transaction under the writer mutex,
//! so host I/O interleaves between batches. Rate control per container is a later
//! layer on top of `step`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use redb::ReadableTable;

use crate::meta::{self, kv_error, HistValue, MapValue, RangeKind};
use crate::{Engine, Result};

/// Mappings dropped per transaction.
const BATCH_MAPPINGS: usize = 256;
/// How long the reclaimer sleeps when idle before checking again.
const IDLE_WAIT: Duration = Duration::from_millis(500);
/// Writes not flushed by a host are made durable in the background after this
/// long anyway: it bounds what a crash can lose from hosts that never flush, and
/// keeps redb's chain of non-durable commits short.
const BACKGROUND_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

pub(crate) fn start(engine: Weak<Engine>) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name("lacuna-reclaim".into())
        .spawn(move || run(engine))
        .expect("spawning the reclaimer thread")
}

fn run(weak: Weak<Engine>) {
    loop {
        let Some(engine) = weak.upgrade() else {
            return;
        };
        if engine.shutdown.load(Ordering::SeqCst) {
            return;
        }
        engine.background_flush_if_due();
        let step = engine
            .reclaim_step()
            .and_then(|worked| Ok(worked || engine.sweep_step()?))
            .and_then(|worked| Ok(worked || engine.bits_step()?))
            .and_then(|worked| Ok(worked || engine.clean_step()?))
            .and_then(|worked| Ok(worked || engine.lifecycle_step()?));
        match step {
            Ok(true) => continue,
            Ok(false) => {
                if engine.writer.lock().has_space_to_free() {
                    if let Err(e) = engine.flush() {
                        tracing::error!("reclaimer flush failed: {e}");
                    }
                }
                wait(&engine);
            }
            Err(e) => {
                tracing::error!("reclaim step failed: {e}");
                wait(&engine);
            }
        }
    }
}

fn wait(engine: &Arc<Engine>) {
    let (flag, condvar) = &engine.reclaim_wake;
    let mut woken = flag.lock();
    if !*woken {
        condvar.wait_for(&mut woken, IDLE_WAIT);
    }
    *woken = false;
}

impl Engine {
    fn background_flush_if_due(&self) {
        let due = self.last_durable.lock().elapsed() >= BACKGROUND_FLUSH_INTERVAL;
        let pending =
            self.commit_count.load(Ordering::SeqCst) > self.durable_count.load(Ordering::SeqCst);
        if due && pending {
            if let Err(e) = self.flush() {
                tracing::error!("background flush failed: {e}");
            }
        }
    }

    /// Does one batch of reclaim work; false when there is none.
    pub(crate) fn reclaim_step(&self) -> Result<bool> {
        if self.reclaim_doomed_step()? {
            return Ok(true);
        }
        let volumes: Vec<_> = self.volumes.read().values().cloned().collect();
        for vol in volumes {
            let pending = vol.view.read().ranges.first_unreclaimed();
            let Some((start, range)) = pending else {
                continue;
            };
            let done = {
                let mut ws = self.writer.lock();
                let snapshot_seqs = vol.snapshot_seqs.lock().clone();
                self.transact(&mut ws, false, |st, t, _| {
                    let mut shadowed = Vec::new();
                    let mut scanned = 0;
                    for item in t
                        .maps
                        .range((vol.id, start)..(vol.id, range.end_grain))
                        .map_err(kv_error)?
                    {
                        let (key, value) = item.map_err(kv_error)?;
                        scanned += 1;
                        if MapValue::decode(value.value())?.seq < range.seq {
                            shadowed.push(key.value().1);
                            if shadowed.len() >= BATCH_MAPPINGS {
                                break;
                            }
                        }
                        if scanned >= 16 * BATCH_MAPPINGS {
                            break;
                        }
                    }
                    for grain in &shadowed {
                        st.remove_mapping(t, vol.id, *grain, range.seq, &snapshot_seqs)?;
                    }
                    self.stats
                        .reclaimed_mappings
                        .fetch_add(shadowed.len() as u64, Ordering::Relaxed);
                    Ok(shadowed.is_empty() && scanned < 16 * BATCH_MAPPINGS)
                })?
            };
            if done {
                self.finish_range(&vol, start, range)?;
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Marks a fully reclaimed range; a hole with nothing beneath it is the same as
    /// no record at all, so it is dropped.
    fn finish_range(
        &self,
        vol: &crate::VolumeShared,
        start: u64,
        range: meta::RangeRec,
    ) -> Result<()> {
        let mut view = vol.view.write();
        if view.ranges.find(start) != Some((start, range)) {
            return Ok(()); // cut or replaced meanwhile; its pieces come round again
        }
        let mut ws = self.writer.lock();
        let snapshot_seqs = vol.snapshot_seqs.lock().clone();
        let finished = meta::RangeRec {
            reclaimed: true,
            ..range
        };
        self.transact(&mut ws, false, |st, t, _| {
            if range.kind == RangeKind::Hole {
                if meta::visible_to_any(&snapshot_seqs, range.seq, u64::MAX) {
                    let died = st.take_seq();
                    st.keep_range_history(t, vol.id, start, range, died)?;
                }
                t.ranges()?.remove((vol.id, start)).map_err(kv_error)?;
            } else {
                t.ranges()?
                    .insert((vol.id, start), &finished.encode()[..])
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
    fn reclaim_doomed_step(&self) -> Result<bool> {
        let mut ws = self.writer.lock();
        let Some(volume) = ws.doomed.keys().next().copied() else {
            return Ok(false);
        };
        let finished = self.transact(&mut ws, false, |st, t, _| {
            let mut grains = Vec::new();
            for item in t
                .maps
                .range((volume, 0)..=(volume, u64::MAX))
                .map_err(kv_error)?
            {
                let (key, _) = item.map_err(kv_error)?;
                grains.push(key.value().1);
                if grains.len() >= BATCH_MAPPINGS {
                    break;
                }
            }
            for grain in &grains {
                st.remove_mapping(t, volume, *grain, u64::MAX, &[])?;
            }
            self.stats
                .reclaimed_mappings
                .fetch_add(grains.len() as u64, Ordering::Relaxed);
            let mut versions = Vec::new();
            if grains.len() < BATCH_MAPPINGS {
                for item in t
                    .history()?
                    .range((volume, 0, 0)..=(volume, u64::MAX, u64::MAX))
                    .map_err(kv_error)?
                    .take(BATCH_MAPPINGS - grains.len())
                {
                    let (key, value) = item.map_err(kv_error)?;
                    versions.push((key.value(), HistValue::decode(value.value())?.target));
                }
                for (key, target) in &versions {
                    t.history()?.remove(*key).map_err(kv_error)?;
                    st.release_history(t, *target)?;
                }
            }
            if grains.len() + versions.len() < BATCH_MAPPINGS {
                let kept: Vec<(u64, u64, u64)> = t
                    .range_history()?
                    .range((volume, 0, 0)..=(volume, u64::MAX, u64::MAX))
                    .map_err(kv_error)?
                    .map(|item| item.map(|(k, _)| k.value()))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(kv_error)?;
                for key in kept {
                    t.range_history()?.remove(key).map_err(kv_error)?;
                }
                let starts: Vec<u64> = t
                    .ranges()?
                    .range((volume, 0)..=(volume, u64::MAX))
                    .map_err(kv_error)?
                    .map(|item| item.map(|(k, _)| k.value().1))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(kv_error)?;
                for s in starts {
                    t.ranges()?.remove((volume, s)).map_err(kv_error)?;
                }
                t.doomed()?.remove(volume).map_err(kv_error)?;
                return Ok(true);
            }
            Ok(false)
        })?;
        if finished {
            ws.doomed.remove(&volume);
        }
        Ok(true)
    }
}
