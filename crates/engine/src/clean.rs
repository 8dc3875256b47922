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

use crate::meta::{kv_error, BlockRec};
use crate::segment::{self, SegmentId, RECORD_HEADER_BYTES};
use crate::{Engine, Result};

/// Records relocated per transaction (each holds the writer mutex briefly).
const BATCH_RECORDS: usize = 256;
/// A segment more live than this is not worth cleaning in the background.
const MAX_BACKGROUND_UTILIZATION: f64 = 0.8;
/// When physical space runs short, segments up to this live are worth it.
const MAX_URGENT_UTILIZATION: f64 = 0.98;
/// Most victims a writer cleans itself before giving up on making room.
const MAX_WRITER_CLEANS: usize = 8;

/// One record found while walking a victim segment.
struct Found {
    block_id: u64,
    offset_bytes: u64,
    bytes: Vec<u8>,
}

impl Engine {
    /// Picks the best victim: sealed, with stale bytes, utilization at most
    /// `max_utilization`, highest cost-benefit score.
    fn pick_victim(&self, max_utilization: f64) -> Option<SegmentId> {
        let ws = self.writer.lock();
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
                let age = f64::from(newest.saturating_sub(id).max(1));
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
    fn cleaning_due(&self) -> (bool, bool) {
        let ws = self.writer.lock();
        let stale = ws.used_bytes() - ws.live_bytes();
        let free = ws.capacity_bytes.saturating_sub(ws.used_bytes());
        let reserve = crate::provision::cleaning_reserve_bytes(ws.capacity_bytes);
        let urgent = stale > 0 && free < 2 * reserve;
        let due = urgent || (stale > segment::SEGMENT_TARGET_BYTES && stale * 4 > ws.used_bytes());
        (due, urgent)
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
        let Some(victim) = self.pick_victim(max_utilization) else {
            return Ok(false);
        };
        self.clean_segment(victim)?;
        // Free the victim now (at a durable commit), not when work runs out:
        // under steady overwrites that would be never.
        self.flush_freeing()?;
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
        let reserve = crate::provision::cleaning_reserve_bytes(self.config.capacity_bytes);
        let wanted = bytes.saturating_add(reserve);
        for _ in 0..MAX_WRITER_CLEANS {
            {
                let ws = self.writer.lock();
                let free = ws.capacity_bytes.saturating_sub(ws.used_bytes());
                let stale = ws.used_bytes() - ws.live_bytes();
                if free >= wanted || stale == 0 {
                    return Ok(());
                }
            }
            let Some(victim) = self.pick_victim(MAX_URGENT_UTILIZATION) else {
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
        let reserve = crate::provision::cleaning_reserve_bytes(self.config.capacity_bytes);
        self.free_bytes_hint.load(Ordering::Relaxed) < bytes.saturating_add(reserve)
    }

    /// Cleans every segment holding stale bytes, however live (tests run it
    /// between operations to exercise relocation hard). Returns the segments
    /// cleaned.
    pub fn clean_now(&self) -> Result<u64> {
        {
            // Seal both open segments so everything written so far is eligible.
            let mut ws = self.writer.lock();
            let open = ws.open_segment;
            if ws.segments.get(&open).is_some_and(|s| s.written_bytes > 0) {
                ws.open_segment = ws.next_segment_id;
                ws.next_segment_id += 1;
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
        while let Some(victim) = self.pick_victim(1.0) {
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
        let found = self.read_records(victim)?;
        for batch in found.chunks(BATCH_RECORDS) {
            let mut ws = self.writer.lock();
            let relocated = self.transact(&mut ws, false, |st, t, ws| {
                for record in batch {
                    let Some(value) = t.blocks.get(record.block_id).map_err(kv_error)? else {
                        continue; // freed since the walk
                    };
                    let rec = BlockRec::decode(value.value())?;
                    drop(value);
                    let still_here =
                        rec.segment == victim && u64::from(rec.offset_bytes) == record.offset_bytes;
                    if still_here {
                        st.relocate(ws, t, record.block_id, rec, &record.bytes)?;
                    }
                }
                Ok(st.relocated_bytes)
            })?;
            // Readers would find the old records stale anyway (see
            // `locations`); forgetting them spares a failed read each.
            for record in batch {
                self.locations.forget(record.block_id);
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
    fn read_records(&self, victim: SegmentId) -> Result<Vec<Found>> {
        let written_bytes = self
            .writer
            .lock()
            .segments
            .get(&victim)
            .map(|s| s.written_bytes)
            .unwrap_or(0);
        let mut data = vec![0u8; written_bytes as usize];
        {
            let _io = self.io_lock.read();
            self.store.read_at(victim, 0, &mut data).map_err(|e| {
                crate::EngineError::io(format!("reading segment {victim} to clean it"), e)
            })?;
        }
        let mut found = Vec::new();
        // Headers whose record does not check out: damage if live, else a dead
        // record whose later pages were punched out.
        let mut suspect = Vec::new();
        let mut at = 0usize;
        while at + RECORD_HEADER_BYTES <= data.len() {
            let Some((record, end)) = record_at(&data, at) else {
                if let Some((header, _)) = segment::read_header(&data[at..]) {
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
                block_id: record.0,
                offset_bytes: at as u64,
                bytes: record.1,
            });
            at = end;
        }
        self.report_damaged(victim, &suspect)?;
        Ok(found)
    }

    /// Logs and counts the records among `suspects` (block id, offset) that the
    /// block table still places there: those are damage. The others are dead
    /// records cut short by punching, which is expected.
    fn report_damaged(&self, victim: SegmentId, suspects: &[(u64, u64)]) -> Result<()> {
        if suspects.is_empty() {
            return Ok(());
        }
        self.commit_pending_now()?;
        let txn = self.begin_read()?;
        let blocks = txn.open_table(crate::meta::BLOCKS).map_err(kv_error)?;
        for &(block_id, offset_bytes) in suspects {
            let Some(value) = blocks.get(block_id).map_err(kv_error)? else {
                continue;
            };
            let rec = BlockRec::decode(value.value())?;
            if rec.segment == victim && u64::from(rec.offset_bytes) == offset_bytes {
                tracing::error!(
                    segment = victim,
                    offset = offset_bytes,
                    block = block_id,
                    "corrupt record not relocated"
                );
                self.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// The record starting exactly at `at`, if its header parses and its checksum
/// holds: (block id, bytes) and where it ends. Anything else — zeroes of a
/// punched hole, a torn or corrupt record — is not a record (a corrupt live
/// record is never relocated; its block keeps failing reads as it should).
fn record_at(data: &[u8], at: usize) -> Option<((u64, Vec<u8>), usize)> {
    let (header, crc) = segment::read_header(data.get(at..)?)?;
    let end = at + RECORD_HEADER_BYTES + header.payload_len as usize;
    let mut bytes = data.get(at..end)?.to_vec();
    segment::verify_record(&mut bytes, header, crc).ok()?;
    Some(((header.block_id, bytes), end))
}
