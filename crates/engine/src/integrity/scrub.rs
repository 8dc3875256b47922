//! Scrub: reads back every stored record and verifies it end to end — the
//! record's checksum (header and payload), its decoding, and the fingerprint
//! (XXH3-128, or BLAKE3 for blocks stored before it) of the grain it decodes to — so silent damage (a flipped bit, a
//! failing sector) is found before a host reads it.
//!
//! What is walked is the block table (every record some mapping references),
//! in batches of [`BLOCKS_PER_STEP`] ordered by segment and offset so the reads
//! run through each segment front to back. Each batch is listed in its own read
//! transaction, so a long scrub never holds old metadata pages. A record that
//! fails is checked again against fresh metadata: one the cleaner moved (or a
//! write freed) meanwhile is not damage. A bad record is then mapped to what
//! it costs: the volumes, their snapshots, and the byte ranges that read it.
//!
//! A pass goes as fast as the disks allow, or at a rate (a [`TokenBucket`] in
//! bytes of records read). One pass runs at a time; a background scrub runs
//! passes back to back at its rate until the engine closes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use crate::ids::{GrainIndex, SnapshotSeq};
use crate::meta::schema::{self, kv_error, BlockRec, GrainTarget, HistValue};
use crate::segment::log::{self, RecordHeader};
use crate::space::rate::{Clock, Rate, SystemClock, TokenBucket};
use crate::units::now_unix_s;
use crate::write::classify;
use crate::{Engine, EngineError, Result, GRAIN_BYTES};

/// Block records listed per read transaction.
pub const BLOCKS_PER_STEP: usize = 4096;
/// Bad records listed one by one in a report (all are counted).
pub const MAX_LISTED_BAD_RECORDS: usize = 100;
/// Affected ranges listed in a report.
pub const MAX_LISTED_RANGES: usize = 1000;
/// Burst of a rate-limited scrub: one MiB of records.
const BURST_BYTES: u64 = 1 << 20;
/// Longest single sleep while pacing, so a closing engine is noticed quickly.
const MAX_PACING_SLEEP: Duration = Duration::from_millis(100);
/// Longest a cancel waits for its pass to stop.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// Pause between background passes (an empty array must not spin).
const BACKGROUND_PAUSE: Duration = Duration::from_secs(1);

/// One scrub pass, running or finished.
// This report's doc comments, and those of the others the control plane
// answers with, are the API's descriptions (see `space::report`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScrubReport {
    /// Pass number since the daemon started, from 1
    pub pass: u64,
    /// Started by the background scrub
    // Rather than on request.
    pub background: bool,
    pub running: bool,
    /// Stopped on request (cancel, or a request at another rate) before its end
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub cancelled: bool,
    /// The pass's rate limit; null when unlimited
    #[cfg_attr(feature = "openapi", schema(required = true, minimum = 1))]
    pub rate_bytes_per_s: Option<u64>,
    /// When the pass started
    pub started_unix_s: u64,
    /// When the pass finished; null while running
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub finished_unix_s: Option<u64>,
    /// Records stored when the pass started
    // With `bytes_total`, the progress total.
    pub records_total: u64,
    /// Bytes of those records
    pub bytes_total: u64,
    /// Records read back and verified so far
    pub records_checked: u64,
    /// Bytes of those records
    pub bytes_checked: u64,
    /// Records that failed (checksum, decoding, fingerprint or read error)
    pub bad_records: u64,
    /// The first 100 bad records
    // `MAX_LISTED_BAD_RECORDS`; all are counted in `bad_records`.
    pub bad: Vec<BadRecord>,
    /// What reads the bad records (at most 1000 ranges); complete once the pass finished
    // `MAX_LISTED_RANGES`.
    pub affected: Vec<AffectedRange>,
    /// Why the pass stopped early; null if it did not
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub error: Option<String>,
}

/// A record that failed verification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BadRecord {
    /// The stored block
    pub block_id: u64,
    /// Segment file number
    pub segment: u32,
    /// Where the record starts in the segment
    pub offset_bytes: u64,
    pub reason: String,
}

/// Bytes of a volume (or only of its snapshots) that read a bad record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AffectedRange {
    pub volume: String,
    /// The volume itself reads the range (false: only its snapshots do)
    pub live: bool,
    /// Snapshots (VOL@NAME) that read the range
    pub snapshots: Vec<String>,
    /// Start of the range in the volume
    pub offset_bytes: u64,
    /// Length of the range
    pub length_bytes: u64,
}

/// The running scrub pass, the last finished one and the background schedule.
// The scrub as the control plane sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScrubStatus {
    /// The running pass; null when none runs
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub current: Option<ScrubReport>,
    /// The last finished pass; null before the first
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub last: Option<ScrubReport>,
    /// Rate of the background scrub; null when none is scheduled
    #[cfg_attr(feature = "openapi", schema(required = true, minimum = 1))]
    pub background_rate_bytes_per_s: Option<u64>,
}

/// A scrub pass begun, or the one running already.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScrubStart {
    pub report: ScrubReport,
    /// false: a pass was running already and this is it
    pub started: bool,
}

/// The engine's scrub state.
#[derive(Default)]
pub(crate) struct Scrubs {
    inner: Mutex<ScrubsInner>,
}

#[derive(Default)]
struct ScrubsInner {
    /// The pass asked to stop, until it has.
    cancel: Option<u64>,
    current: Option<ScrubReport>,
    last: Option<ScrubReport>,
    passes: u64,
    background_rate_bytes_per_s: Option<u64>,
}

/// What a pass found, before it is mapped to volumes.
#[derive(Default)]
struct Findings {
    bad: BTreeMap<u64, BadRecord>,
}

fn rate_of(rate_bytes_per_s: Option<u64>) -> Result<Rate> {
    match rate_bytes_per_s {
        None => Ok(Rate::Unlimited),
        Some(0) => Err(EngineError::InvalidArgument(
            "a scrub rate must be above zero".into(),
        )),
        Some(rate) => Ok(Rate::BytesPerSecond(rate)),
    }
}

impl Engine {
    /// Runs one scrub pass now, on this thread, and returns its report. Refused
    /// while another pass runs.
    pub fn scrub_now(&self, rate_bytes_per_s: Option<u64>) -> Result<ScrubReport> {
        let rate = rate_of(rate_bytes_per_s)?;
        let start = self.begin_pass(rate_bytes_per_s, false)?;
        if !start.started {
            return Err(EngineError::InvalidArgument(format!(
                "scrub pass {} is running already",
                start.report.pass
            )));
        }
        Ok(self.run_pass(start.report.pass, rate))
    }

    /// Begins a pass, or answers the one running (`started` false) when it
    /// runs at the rate asked; one at another rate is cancelled and replaced.
    /// The caller then runs a begun pass with [`Engine::run_scrub`], on a
    /// thread of its own.
    pub fn begin_scrub(&self, rate_bytes_per_s: Option<u64>) -> Result<ScrubStart> {
        rate_of(rate_bytes_per_s)?;
        let running_rate = self
            .scrubs
            .inner
            .lock()
            .current
            .as_ref()
            .map(|c| c.rate_bytes_per_s);
        if running_rate.is_some_and(|rate| rate != rate_bytes_per_s) {
            self.cancel_scrub()?;
        }
        self.begin_pass(rate_bytes_per_s, false)
    }

    /// Stops the running pass and answers its report (finished, `cancelled`).
    /// Waits for it to stop: it checks between records and while it paces,
    /// at least every [`MAX_PACING_SLEEP`].
    pub fn cancel_scrub(&self) -> Result<ScrubReport> {
        let pass = {
            let mut inner = self.scrubs.inner.lock();
            let Some(current) = &inner.current else {
                return Err(EngineError::InvalidArgument(
                    "no scrub pass is running".into(),
                ));
            };
            let pass = current.pass;
            inner.cancel = Some(pass);
            pass
        };
        let deadline = std::time::Instant::now() + CANCEL_WAIT;
        loop {
            {
                let inner = self.scrubs.inner.lock();
                let stopped = inner.current.as_ref().is_none_or(|c| c.pass != pass);
                if stopped {
                    let last = inner.last.clone().filter(|l| l.pass == pass);
                    return last.ok_or_else(|| {
                        EngineError::InvalidArgument(format!("scrub pass {pass} did not report"))
                    });
                }
            }
            if std::time::Instant::now() >= deadline {
                return Err(EngineError::InvalidArgument(format!(
                    "scrub pass {pass} did not stop within {} s",
                    CANCEL_WAIT.as_secs()
                )));
            }
            std::thread::sleep(MAX_PACING_SLEEP / 4);
        }
    }

    /// Whether pass `pass` was asked to stop.
    fn scrub_cancelled(&self, pass: u64) -> bool {
        self.scrubs.inner.lock().cancel == Some(pass)
    }

    /// Runs pass `pass`, begun by [`Engine::begin_scrub`], to its end.
    pub fn run_scrub(&self, pass: u64) -> Result<ScrubReport> {
        let rate = {
            let inner = self.scrubs.inner.lock();
            match &inner.current {
                Some(current) if current.pass == pass => rate_of(current.rate_bytes_per_s)?,
                _ => {
                    return Err(EngineError::InvalidArgument(format!(
                        "scrub pass {pass} is not the one begun"
                    )))
                }
            }
        };
        Ok(self.run_pass(pass, rate))
    }

    /// Begins a pass and runs it on a thread of its own (or answers the one
    /// running).
    pub fn start_scrub(self: &Arc<Self>, rate_bytes_per_s: Option<u64>) -> Result<ScrubReport> {
        let start = self.begin_scrub(rate_bytes_per_s)?;
        if start.started {
            let engine = self.clone();
            let pass = start.report.pass;
            std::thread::Builder::new()
                .name("lacuna-scrub".into())
                .spawn(move || engine.run_scrub(pass))
                .map_err(|e| EngineError::io("starting the scrub thread", e))?;
        }
        Ok(start.report)
    }

    /// The running pass, the last finished one, and the background schedule.
    pub fn scrub_status(&self) -> ScrubStatus {
        let inner = self.scrubs.inner.lock();
        ScrubStatus {
            current: inner.current.clone(),
            last: inner.last.clone(),
            background_rate_bytes_per_s: inner.background_rate_bytes_per_s,
        }
    }

    /// Scrubs continuously at `rate_bytes_per_s` until the engine closes: passes
    /// back to back, a pause between them.
    pub fn start_background_scrub(
        self: &Arc<Self>,
        rate_bytes_per_s: u64,
    ) -> Result<JoinHandle<()>> {
        let rate = rate_of(Some(rate_bytes_per_s))?;
        self.scrubs.inner.lock().background_rate_bytes_per_s = Some(rate_bytes_per_s);
        let weak: Weak<Engine> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("lacuna-scrub-bg".into())
            .spawn(move || background_loop(weak, rate_bytes_per_s, rate))
            .map_err(|e| EngineError::io("starting the background scrub", e))
    }

    /// Files a new running pass, unless one runs already (then answers that one).
    fn begin_pass(&self, rate_bytes_per_s: Option<u64>, background: bool) -> Result<ScrubStart> {
        let (records_total, bytes_total) = self.stored_totals()?;
        let mut inner = self.scrubs.inner.lock();
        if let Some(current) = &inner.current {
            return Ok(ScrubStart {
                report: current.clone(),
                started: false,
            });
        }
        inner.passes += 1;
        let report = ScrubReport {
            pass: inner.passes,
            background,
            running: true,
            cancelled: false,
            rate_bytes_per_s,
            started_unix_s: now_unix_s(),
            finished_unix_s: None,
            records_total,
            bytes_total,
            records_checked: 0,
            bytes_checked: 0,
            bad_records: 0,
            bad: Vec::new(),
            affected: Vec::new(),
            error: None,
        };
        inner.current = Some(report.clone());
        Ok(ScrubStart {
            report,
            started: true,
        })
    }

    /// Runs pass `pass` (already begun) to its end and files its report.
    fn run_pass(&self, pass: u64, rate: Rate) -> ScrubReport {
        let mut findings = Findings::default();
        let walked = self.walk_blocks(pass, rate, &mut findings);
        let bad_ids: BTreeSet<u64> = findings.bad.keys().copied().collect();
        let affected = if bad_ids.is_empty() {
            Ok(Vec::new())
        } else {
            self.affected_ranges(&bad_ids)
        };
        let mut inner = self.scrubs.inner.lock();
        let mut report = inner.current.take().expect("a running pass has a report");
        assert_eq!(report.pass, pass);
        report.cancelled = inner.cancel.take() == Some(pass);
        report.running = false;
        report.finished_unix_s = Some(now_unix_s());
        report.bad_records = findings.bad.len() as u64;
        report.bad = findings
            .bad
            .into_values()
            .take(MAX_LISTED_BAD_RECORDS)
            .collect();
        match (walked, affected) {
            (Ok(()), Ok(affected)) => report.affected = affected,
            (Err(e), _) | (_, Err(e)) => report.error = Some(e.to_string()),
        }
        if report.cancelled {
            report.error = Some("cancelled on request".into());
        }
        if report.bad_records > 0 {
            tracing::error!(
                pass,
                bad_records = report.bad_records,
                affected_ranges = report.affected.len(),
                "scrub found damaged records"
            );
        } else {
            tracing::info!(
                pass,
                records = report.records_checked,
                "scrub pass finished clean"
            );
        }
        inner.last = Some(report.clone());
        report
    }

    /// Records and bytes in the block table now.
    fn stored_totals(&self) -> Result<(u64, u64)> {
        let live_bytes = {
            let mut ws = self.committer.writer.lock();
            self.commit_pending(&mut ws)?;
            ws.live_bytes()
        };
        let txn = self.begin_read()?;
        let blocks = txn.open_table(schema::BLOCKS).map_err(kv_error)?;
        let records = redb::ReadableTableMetadata::len(&blocks).map_err(kv_error)?;
        Ok((records, live_bytes))
    }

    /// Verifies every record in the block table, in batches.
    fn walk_blocks(&self, pass: u64, rate: Rate, findings: &mut Findings) -> Result<()> {
        let clock = SystemClock::default();
        let mut bucket = TokenBucket::new(rate, BURST_BYTES, clock.now());
        let mut next_id = 0u64;
        loop {
            let mut batch = self.list_blocks(next_id)?;
            let Some(&(last_id, _)) = batch.last() else {
                return Ok(());
            };
            next_id = last_id + 1;
            batch.sort_unstable_by_key(|(_, rec)| (rec.segment, rec.offset_bytes));
            for (id, rec) in batch {
                self.pace(pass, &mut bucket, &clock, rec.record_bytes())?;
                if let Err(reason) = self.verify_stored(id, &rec) {
                    if self.still_stored_at(id, &rec)? {
                        tracing::error!(
                            block = id,
                            segment = %rec.segment,
                            offset_bytes = rec.offset_bytes,
                            "scrub: bad record: {reason}"
                        );
                        findings.bad.insert(
                            id,
                            BadRecord {
                                block_id: id,
                                segment: rec.segment.get(),
                                offset_bytes: u64::from(rec.offset_bytes),
                                reason,
                            },
                        );
                    }
                }
                let mut inner = self.scrubs.inner.lock();
                let report = inner.current.as_mut().expect("a running pass");
                report.records_checked += 1;
                report.bytes_checked += rec.record_bytes();
                report.bad_records = findings.bad.len() as u64;
            }
        }
    }

    /// Up to [`BLOCKS_PER_STEP`] block records from id `from` on.
    fn list_blocks(&self, from: u64) -> Result<Vec<(u64, BlockRec)>> {
        self.commit_pending_now()?;
        let txn = self.begin_read()?;
        let blocks = txn.open_table(schema::BLOCKS).map_err(kv_error)?;
        let mut batch = Vec::with_capacity(BLOCKS_PER_STEP);
        for item in blocks.range(from..).map_err(kv_error)? {
            let (id, value) = item.map_err(kv_error)?;
            batch.push((id.value(), BlockRec::decode(value.value())?));
            if batch.len() == BLOCKS_PER_STEP {
                break;
            }
        }
        Ok(batch)
    }

    /// Waits until the rate allows reading `bytes` more; fails once the engine
    /// is closing.
    fn pace(
        &self,
        pass: u64,
        bucket: &mut TokenBucket,
        clock: &SystemClock,
        bytes: u64,
    ) -> Result<()> {
        loop {
            if self.scheduler.shutdown.load(Ordering::SeqCst) {
                return Err(EngineError::InvalidArgument(
                    "stopped: the array is closing".into(),
                ));
            }
            if self.scrub_cancelled(pass) {
                return Err(EngineError::InvalidArgument("cancelled".into()));
            }
            match bucket.wait_for(bytes, clock.now()) {
                Some(wait) if !wait.is_zero() => std::thread::sleep(wait.min(MAX_PACING_SLEEP)),
                _ => break,
            }
        }
        bucket.take(bytes, clock.now());
        Ok(())
    }

    /// Reads block `id`'s record and checks checksum, decoding and fingerprint.
    fn verify_stored(&self, id: u64, rec: &BlockRec) -> std::result::Result<(), String> {
        let mut record = vec![0u8; rec.record_bytes() as usize];
        {
            // Held while reading: a segment is never freed under a reader.
            let _io = self.io_lock.read();
            self.store
                .read_at(rec.segment, u64::from(rec.offset_bytes), &mut record)
                .map_err(|e| format!("read failed: {e}"))?;
        }
        let expected = RecordHeader {
            flags: rec.flags,
            payload_len: rec.payload_len,
            block_id: crate::ids::BlockId::new(id),
        };
        let payload = log::verify_record(&record, expected, rec.crc)?;
        let mut grain_bytes = vec![0u8; GRAIN_BYTES as usize];
        let codec = classify::Codec::of_flags(rec.flags)?;
        classify::decode(payload, codec, &mut grain_bytes)?;
        if !classify::fingerprint_matches(&grain_bytes, &rec.fingerprint) {
            return Err("decoded grain does not match its fingerprint".into());
        }
        Ok(())
    }

    /// Whether block `id` still lives where `rec` says (not moved or freed since
    /// it was listed).
    fn still_stored_at(&self, id: u64, rec: &BlockRec) -> Result<bool> {
        self.commit_pending_now()?;
        let txn = self.begin_read()?;
        let blocks = txn.open_table(schema::BLOCKS).map_err(kv_error)?;
        let Some(value) = blocks.get(id).map_err(kv_error)? else {
            return Ok(false);
        };
        let now = BlockRec::decode(value.value())?;
        Ok(now.segment == rec.segment && now.offset_bytes == rec.offset_bytes)
    }

    /// Every volume range (live, or seen by snapshots) that reads a block in
    /// `bad`: one scan of the mappings and of the history.
    fn affected_ranges(&self, bad: &BTreeSet<u64>) -> Result<Vec<AffectedRange>> {
        self.commit_pending_now()?;
        let txn = self.begin_read()?;
        let maps = txn.open_table(schema::MAPPINGS).map_err(kv_error)?;
        let history = txn.open_table(schema::HISTORY).map_err(kv_error)?;
        // (volume id, grain, version seq, died seq or None when live)
        let mut hits: Vec<(u64, GrainIndex, SnapshotSeq, Option<SnapshotSeq>)> = Vec::new();
        for item in crate::meta::point_rows::all(&maps)? {
            let (volume, grain, value) = item?;
            if matches!(value.target, GrainTarget::Block(id) if bad.contains(&id.get())) {
                hits.push((volume, grain, value.seq, None));
            }
        }
        for item in history.iter().map_err(kv_error)? {
            let (key, value) = item.map_err(kv_error)?;
            let value = HistValue::decode(value.value())?;
            if matches!(value.target, GrainTarget::Block(id) if bad.contains(&id.get())) {
                let (volume, grain, seq) = key.value();
                let (grain, seq) = (GrainIndex::new(grain), SnapshotSeq::new(seq));
                hits.push((volume, grain, seq, Some(value.died_seq)));
            }
        }
        // (volume name, live, snapshots) → grains
        let mut groups: BTreeMap<(String, bool, Vec<String>), BTreeSet<GrainIndex>> =
            BTreeMap::new();
        for (volume, grain, seq, died) in hits {
            let snapshots: Vec<String> = self
                .snapshots_of(crate::ids::VolumeId::new(volume))
                .iter()
                .filter(|s| s.seq >= seq && died.is_none_or(|died| s.seq < died))
                .map(|s| s.display_name())
                .collect();
            let live = died.is_none();
            if !live && snapshots.is_empty() {
                continue; // a version no snapshot sees any more, awaiting the sweep
            }
            groups
                .entry((self.volume_label(volume), live, snapshots))
                .or_default()
                .insert(grain);
        }
        let mut ranges = Vec::new();
        for ((volume, live, snapshots), grains) in groups {
            for (start, end) in runs(&grains) {
                if ranges.len() == MAX_LISTED_RANGES {
                    return Ok(ranges);
                }
                ranges.push(AffectedRange {
                    volume: volume.clone(),
                    live,
                    snapshots: snapshots.clone(),
                    offset_bytes: start.get() * GRAIN_BYTES,
                    length_bytes: (end - start) * GRAIN_BYTES,
                });
            }
        }
        Ok(ranges)
    }

    /// A volume's name by id (live, destroyed or retained for its snapshots).
    fn volume_label(&self, id: u64) -> String {
        if let Some(volume) = self.volume_by_id(id) {
            return volume.name.clone();
        }
        match self
            .catalog
            .retained
            .lock()
            .get(&crate::ids::VolumeId::new(id))
        {
            Some(rec) => format!("{} (eradicated)", rec.name),
            None => format!("#{id}"),
        }
    }
}

/// Consecutive runs `[start, end)` of a set of grains.
fn runs(grains: &BTreeSet<GrainIndex>) -> Vec<(GrainIndex, GrainIndex)> {
    let mut out: Vec<(GrainIndex, GrainIndex)> = Vec::new();
    for &grain in grains {
        match out.last_mut() {
            Some((_, end)) if *end == grain => *end += 1,
            _ => out.push((grain, grain + 1)),
        }
    }
    out
}

fn background_loop(engine: Weak<Engine>, rate_bytes_per_s: u64, rate: Rate) {
    loop {
        let Some(strong) = engine.upgrade() else {
            return;
        };
        if strong.scheduler.shutdown.load(Ordering::SeqCst) {
            return;
        }
        match strong.begin_pass(Some(rate_bytes_per_s), true) {
            Ok(start) if start.started => {
                strong.run_pass(start.report.pass, rate);
            }
            Ok(_) => {} // a requested pass is running: wait for it
            Err(e) => tracing::warn!("background scrub could not start a pass: {e}"),
        }
        drop(strong);
        std::thread::sleep(BACKGROUND_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_consecutive_grains() {
        let g = GrainIndex::new;
        let grains: BTreeSet<GrainIndex> = [1, 2, 3, 7, 9, 10].into_iter().map(g).collect();
        let expected = vec![(g(1), g(4)), (g(7), g(8)), (g(9), g(11))];
        assert_eq!(runs(&grains), expected);
        assert!(runs(&BTreeSet::new()).is_empty());
    }

    #[test]
    fn a_zero_rate_is_refused() {
        assert!(rate_of(Some(0)).is_err());
        assert_eq!(rate_of(None).unwrap(), Rate::Unlimited);
        assert_eq!(rate_of(Some(5)).unwrap(), Rate::BytesPerSecond(5));
    }
}
