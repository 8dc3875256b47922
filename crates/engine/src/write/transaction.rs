//! One metadata transaction of the write path: the tables it touches, the block
//! reference counting, and the segment space it allocates.
//!
//! Everything a transaction changes outside redb (segment cursor, counters, live
//! bytes) is kept in [`TxState`] as local copies and applied to the shared
//! [`WriterState`] only after the commit succeeded, so an aborted transaction (say,
//! out of space) leaves no trace.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::BuildHasherDefault;

use redb::{Durability, ReadableTable, Table, WriteTransaction};

use crate::ids::{BlockId, GrainIndex, SnapshotSeq};
use crate::meta::mapping_cache::ChangedMappings;
use crate::meta::schema::{
    self, kv_error, BlockRec, GrainTarget, HistValue, MapValue, RangeHistValue, RangeRec,
};
use crate::segment::log::{self, RecordHeader, SegmentId, SEGMENT_TARGET_BYTES};
use crate::write::classify::{self, DataGrain};
use crate::{EngineError, Result, GRAIN_BYTES};

/// Most freed records remembered for punching between durable commits.
const MAX_PENDING_PUNCH: usize = 1 << 20;

/// Space accounting of one segment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegState {
    /// Bytes appended (records and their headers).
    pub written_bytes: u64,
    /// Bytes of records still referenced.
    pub live_bytes: u64,
}

/// State shared by every writer, guarded by the engine's writer mutex.
#[derive(Debug, Default)]
pub struct WriterState {
    /// Per-segment accounting; change it only through the methods below, which
    /// keep `totals` equal to its sum (the write path needs the sum per
    /// transaction and must not walk every segment for it).
    pub segments: BTreeMap<SegmentId, SegState>,
    pub(crate) totals: SegState,
    pub open_segment: SegmentId,
    /// The open segment of the cleaner's own stream: relocated (long-lived) data
    /// collects apart from fresh host writes.
    pub clean_segment: Option<SegmentId>,
    pub next_block_id: BlockId,
    pub next_seq: SnapshotSeq,
    pub next_volume_id: crate::ids::VolumeId,
    pub next_segment_id: SegmentId,
    /// Segments written since the last sync.
    pub dirty_segments: BTreeSet<SegmentId>,
    /// Sealed segments with no live record, freed after the next durable commit.
    pub pending_free: BTreeSet<SegmentId>,
    /// Byte ranges (segment, offset, length) of records freed since the last
    /// durable commit: punched out of their files after it.
    pub pending_punch: Vec<(SegmentId, u64, u64)>,
    /// The dedup index: a 64-bit fingerprint prefix → block id, kept in memory
    /// (rebuilt from the block table at open). A random-key B-tree insert per new
    /// block was the largest cost of the write path; a hit is still verified
    /// against the block record's full 128-bit fingerprint.
    pub dedup: DedupIndex,
    /// The keys of `dedup` that writes may look up without this state's
    /// mutex (shared with [`crate::Engine`]).
    pub hints: std::sync::Arc<crate::dedup::index_hints::DedupHints>,
    /// Payloads of blocks recently proven to hold a write's grain.
    pub(crate) proven: crate::dedup::proven_payloads::ProvenPayloads,
    /// Segments whose accounting changed since the last durable commit.
    pub changed_segments: BTreeSet<SegmentId>,
    /// Deleted volumes still holding mappings: id → grains.
    pub doomed: BTreeMap<crate::ids::VolumeId, u64>,
    /// Doomed volume id → the container their reclaim is charged to.
    pub doomed_containers: BTreeMap<crate::ids::VolumeId, u64>,
    /// Point-mapping records per volume (exact; rebuilt at open): what the
    /// reclaim backlog is worked out from.
    pub mapping_counts: std::collections::HashMap<crate::ids::VolumeId, u64>,
    pub capacity_bytes: u64,
    /// Grains of thick volumes not yet holding data: each holds a reservation of
    /// [`crate::space::provisioning::RESERVED_BYTES_PER_GRAIN`].
    pub thick_unwritten_grains: u64,
    /// Live bytes by [`schema::BlockClass`] (unique, snapshot-only, shared): kept
    /// exact per commit, recomputed from the block table at open.
    pub class_bytes: [u64; 3],
    /// Blocks stored raw whose compression waits for the background reducer
    /// (flagged [`log::FLAG_REDUCE_LATER`]), with their record bytes: rebuilt
    /// from the block table at open, so it survives crashes with the rows.
    /// Bounded by what writes may leave ([`crate::data_path::MAX_REDUCTION_BACKLOG_BYTES`]).
    pub reduction_backlog: BTreeMap<BlockId, u32>,
    /// The sum of `reduction_backlog`'s record bytes.
    pub reduction_backlog_bytes: u64,
    /// The transaction write batches share until it is committed (see
    /// [`crate::write::uncommitted`]). Everything above already includes its batches.
    pub(crate) open_txn: Option<OpenTxn>,
}

self_cell::self_cell!(
    /// A write transaction with its tables held open: opening the mapping and
    /// block tables (and closing them, which stages their roots) was a twentieth
    /// of a 4 KiB write's CPU when every batch did it, and a transaction that
    /// stays open across batches (see [`crate::write::uncommitted`]) need do it only once.
    struct TxnWithTables {
        owner: WriteTransaction,
        #[not_covariant]
        dependent: Tables,
    }
);

/// The write batches' shared metadata transaction, not yet committed.
pub(crate) struct OpenTxn {
    cell: TxnWithTables,
    /// Grains written in it so far.
    pub grains: u64,
}

impl OpenTxn {
    fn begin(db: &crate::meta::store::Kv) -> Result<Self> {
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::None).map_err(kv_error)?;
        Ok(OpenTxn {
            cell: TxnWithTables::try_new(txn, |txn| Tables::open(txn))?,
            grains: 0,
        })
    }

    /// Closes the tables (staging their roots in the transaction) and commits.
    fn commit(mut self, db: &crate::meta::store::Kv) -> Result<()> {
        let changed = self
            .cell
            .with_dependent_mut(|_, tables| tables.take_changed());
        db.commit(self.cell.into_owner(), changed)
    }
}

impl std::fmt::Debug for OpenTxn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenTxn")
            .field("grains", &self.grains)
            .finish_non_exhaustive()
    }
}

impl WriterState {
    pub fn mapping_count(&self, volume: crate::ids::VolumeId) -> u64 {
        self.mapping_counts.get(&volume).copied().unwrap_or(0)
    }

    pub fn used_bytes(&self) -> u64 {
        self.totals.written_bytes
    }

    pub fn live_bytes(&self) -> u64 {
        self.totals.live_bytes
    }

    /// Physical bytes promised to thick volumes and not yet used.
    pub fn reserved_bytes(&self) -> u64 {
        self.thick_unwritten_grains * crate::space::provisioning::RESERVED_BYTES_PER_GRAIN
    }

    /// How much live data thin volumes may hold: capacity less the thick
    /// reservations, the headroom kept for overwrites of thick volumes and the
    /// cleaner's reserve.
    pub fn thin_limit_bytes(&self) -> u64 {
        self.thick_limit_bytes()
            .saturating_sub(self.reserved_bytes())
            .saturating_sub(crate::space::provisioning::headroom_bytes(
                self.capacity_bytes,
            ))
    }

    /// How much live data the array holds at most: capacity less the cleaner's
    /// reserve.
    pub fn thick_limit_bytes(&self) -> u64 {
        self.capacity_bytes
            .saturating_sub(crate::space::provisioning::cleaning_reserve_bytes(
                self.capacity_bytes,
            ))
    }

    /// Adds a segment's accounting as loaded at recovery.
    pub fn load_segment(&mut self, id: SegmentId, state: SegState) {
        assert!(
            state.live_bytes <= state.written_bytes,
            "segment {id}: {state:?}"
        );
        let previous = self.segments.insert(id, state);
        assert!(previous.is_none(), "segment {id} loaded twice");
        self.totals.written_bytes += state.written_bytes;
        self.totals.live_bytes += state.live_bytes;
    }

    /// Forgets a freed segment; it must hold no live record.
    pub fn remove_segment(&mut self, id: SegmentId) {
        let state = self.segments.remove(&id).unwrap_or_default();
        assert_eq!(state.live_bytes, 0, "freeing segment {id} with live data");
        self.totals.written_bytes -= state.written_bytes;
        self.changed_segments.insert(id);
    }

    /// Applies a committed change of a segment's written and live bytes.
    fn adjust_segment(&mut self, id: SegmentId, written_delta: i64, live_delta: i64) {
        let state = self.segments.entry(id).or_default();
        state.written_bytes = state
            .written_bytes
            .checked_add_signed(written_delta)
            .expect("written bytes");
        state.live_bytes = state
            .live_bytes
            .checked_add_signed(live_delta)
            .expect("live bytes");
        assert!(
            state.live_bytes <= state.written_bytes,
            "segment {id}: {state:?}"
        );
        self.totals.written_bytes = self
            .totals
            .written_bytes
            .checked_add_signed(written_delta)
            .expect("total written");
        self.totals.live_bytes = self
            .totals
            .live_bytes
            .checked_add_signed(live_delta)
            .expect("total live");
        self.changed_segments.insert(id);
    }

    /// The open segment holds records but none is live: seal it so it can be freed.
    pub fn open_segment_dead(&self) -> bool {
        self.segment_dead(self.open_segment)
    }

    /// The cleaner's open segment holds records but none is live.
    pub fn clean_segment_dead(&self) -> bool {
        self.clean_segment.is_some_and(|id| self.segment_dead(id))
    }

    fn segment_dead(&self, id: SegmentId) -> bool {
        self.segments
            .get(&id)
            .is_some_and(|s| s.written_bytes > 0 && s.live_bytes == 0)
    }

    /// A segment still being appended to (never a cleaning victim, never freed).
    pub fn is_open(&self, id: SegmentId) -> bool {
        id == self.open_segment || self.clean_segment == Some(id)
    }

    /// Whether a durable commit would free anything.
    pub fn has_space_to_free(&self) -> bool {
        !self.pending_free.is_empty() || self.open_segment_dead() || self.clean_segment_dead()
    }
}

/// A table keyed by (volume, grain or start, seq): the history tables.
type VersionTable<'t> = Table<'t, (u64, u64, u64), &'static [u8]>;

/// The tables of one write transaction: the data path's two are opened at
/// once, the rest only when a transaction touches them (opening a table is a
/// measurable share of a small transaction). The write batches' shared
/// transaction keeps them open from its first batch to its commit.
pub struct Tables<'t> {
    txn: &'t WriteTransaction,
    /// Written only through [`TxState`]'s mapping methods, which list every
    /// key they change in `changed` (the commit hands the list to the cache
    /// of committed mappings, `mapcache`).
    maps: Table<'t, (u64, u64), &'static [u8]>,
    changed: ChangedMappings,
    pub blocks: Table<'t, u64, &'static [u8]>,
    ranges: Option<Table<'t, (u64, u64), &'static [u8]>>,
    volumes: Option<Table<'t, &'static str, &'static [u8]>>,
    doomed: Option<Table<'t, u64, u64>>,
    doomed_containers: Option<Table<'t, u64, u64>>,
    history: Option<VersionTable<'t>>,
    range_history: Option<VersionTable<'t>>,
    snapshots: Option<Table<'t, u64, &'static [u8]>>,
    retained: Option<Table<'t, u64, &'static [u8]>>,
    containers: Option<Table<'t, &'static str, &'static [u8]>>,
}

impl<'t> Tables<'t> {
    pub fn open(txn: &'t WriteTransaction) -> Result<Self> {
        Ok(Tables {
            txn,
            maps: txn.open_table(schema::MAPPINGS).map_err(kv_error)?,
            changed: ChangedMappings::NONE,
            blocks: txn.open_table(schema::BLOCKS).map_err(kv_error)?,
            ranges: None,
            volumes: None,
            doomed: None,
            doomed_containers: None,
            history: None,
            range_history: None,
            snapshots: None,
            retained: None,
            containers: None,
        })
    }

    /// The mapping table, to read.
    pub fn maps(&self) -> &Table<'t, (u64, u64), &'static [u8]> {
        &self.maps
    }

    /// The point-mapping keys written so far; the list starts over.
    fn take_changed(&mut self) -> ChangedMappings {
        std::mem::replace(&mut self.changed, ChangedMappings::NONE)
    }

    pub fn retained(&mut self) -> Result<&mut Table<'t, u64, &'static [u8]>> {
        if self.retained.is_none() {
            self.retained = Some(self.txn.open_table(schema::RETAINED).map_err(kv_error)?);
        }
        Ok(self.retained.as_mut().expect("opened"))
    }

    pub fn history(&mut self) -> Result<&mut VersionTable<'t>> {
        if self.history.is_none() {
            self.history = Some(self.txn.open_table(schema::HISTORY).map_err(kv_error)?);
        }
        Ok(self.history.as_mut().expect("opened"))
    }

    pub fn range_history(&mut self) -> Result<&mut VersionTable<'t>> {
        if self.range_history.is_none() {
            self.range_history = Some(
                self.txn
                    .open_table(schema::RANGE_HISTORY)
                    .map_err(kv_error)?,
            );
        }
        Ok(self.range_history.as_mut().expect("opened"))
    }

    pub fn snapshots(&mut self) -> Result<&mut Table<'t, u64, &'static [u8]>> {
        if self.snapshots.is_none() {
            self.snapshots = Some(self.txn.open_table(schema::SNAPSHOTS).map_err(kv_error)?);
        }
        Ok(self.snapshots.as_mut().expect("opened"))
    }

    pub fn ranges(&mut self) -> Result<&mut Table<'t, (u64, u64), &'static [u8]>> {
        if self.ranges.is_none() {
            self.ranges = Some(self.txn.open_table(schema::RANGES).map_err(kv_error)?);
        }
        Ok(self.ranges.as_mut().expect("opened"))
    }

    pub fn volumes(&mut self) -> Result<&mut Table<'t, &'static str, &'static [u8]>> {
        if self.volumes.is_none() {
            self.volumes = Some(self.txn.open_table(schema::VOLUMES).map_err(kv_error)?);
        }
        Ok(self.volumes.as_mut().expect("opened"))
    }

    pub fn doomed(&mut self) -> Result<&mut Table<'t, u64, u64>> {
        if self.doomed.is_none() {
            self.doomed = Some(self.txn.open_table(schema::DOOMED).map_err(kv_error)?);
        }
        Ok(self.doomed.as_mut().expect("opened"))
    }

    pub fn containers(&mut self) -> Result<&mut Table<'t, &'static str, &'static [u8]>> {
        if self.containers.is_none() {
            self.containers = Some(self.txn.open_table(schema::CONTAINERS).map_err(kv_error)?);
        }
        Ok(self.containers.as_mut().expect("opened"))
    }

    pub fn doomed_containers(&mut self) -> Result<&mut Table<'t, u64, u64>> {
        if self.doomed_containers.is_none() {
            self.doomed_containers = Some(
                self.txn
                    .open_table(schema::DOOMED_CONTAINERS)
                    .map_err(kv_error)?,
            );
        }
        Ok(self.doomed_containers.as_mut().expect("opened"))
    }
}

/// Creates every table (a read transaction cannot open a missing one).
pub fn create_tables(txn: &WriteTransaction) -> Result<()> {
    txn.open_table(schema::MAPPINGS).map_err(kv_error)?;
    txn.open_table(schema::BLOCKS).map_err(kv_error)?;
    txn.open_table(schema::RANGES).map_err(kv_error)?;
    txn.open_table(schema::VOLUMES).map_err(kv_error)?;
    txn.open_table(schema::SEGMENTS).map_err(kv_error)?;
    txn.open_table(schema::DOOMED).map_err(kv_error)?;
    txn.open_table(schema::COUNTERS).map_err(kv_error)?;
    txn.open_table(schema::HISTORY).map_err(kv_error)?;
    txn.open_table(schema::RANGE_HISTORY).map_err(kv_error)?;
    txn.open_table(schema::SNAPSHOTS).map_err(kv_error)?;
    txn.open_table(schema::RETAINED).map_err(kv_error)?;
    txn.open_table(schema::DOOMED_CONTAINERS)
        .map_err(kv_error)?;
    txn.open_table(schema::CONTAINERS).map_err(kv_error)?;
    Ok(())
}

/// Writes the counters and the accounting of segments changed since the last
/// durable commit. Called only in durable commits: the state a crash returns to
/// is always a durable commit, and this one covers every commit before it, so
/// counters and accounting persisted here match the mappings it makes durable.
pub fn persist_writer_state(txn: &WriteTransaction, ws: &mut WriterState) -> Result<()> {
    let mut counters = txn.open_table(schema::COUNTERS).map_err(kv_error)?;
    for (name, value) in [
        ("next_block_id", ws.next_block_id.get()),
        ("next_seq", ws.next_seq.get()),
        ("next_volume_id", ws.next_volume_id.get()),
        ("next_segment_id", u64::from(ws.next_segment_id.get())),
    ] {
        counters.insert(name, value).map_err(kv_error)?;
    }
    let mut segments = txn.open_table(schema::SEGMENTS).map_err(kv_error)?;
    for id in std::mem::take(&mut ws.changed_segments) {
        match ws.segments.get(&id) {
            Some(s) => segments
                .insert(id.get(), (s.written_bytes, s.live_bytes))
                .map_err(kv_error)?,
            None => segments.remove(id.get()).map_err(kv_error)?,
        };
    }
    Ok(())
}

/// Local copies of what a transaction changes outside redb.
pub struct TxState {
    pub next_block_id: BlockId,
    pub next_seq: SnapshotSeq,
    pub next_volume_id: crate::ids::VolumeId,
    pub next_segment_id: SegmentId,
    pub open_segment: SegmentId,
    pub clean_segment: Option<SegmentId>,
    /// Bytes appended by the cleaner in this transaction.
    pub relocated_bytes: u64,
    /// Changes to segments' accounting: id → (written delta, live delta).
    seg_delta: BTreeMap<SegmentId, (i64, i64)>,
    /// Records to append, per segment.
    appends: BTreeMap<SegmentId, crate::write::appends::SegmentAppends>,
    used_bytes: u64,
    /// Live bytes as this transaction leaves them.
    live_bytes: u64,
    capacity_bytes: u64,
    thin_limit_bytes: u64,
    thick_limit_bytes: u64,
    /// Whether the blocks stored now belong to a thick volume (which may use the
    /// reservations and headroom that thin volumes may not).
    pub thick: bool,
    /// Whether the blocks stored now may share (and be shared) through the
    /// dedup index (their container's policy).
    pub dedup: bool,
    /// Change of point-mapping records per volume.
    mapping_delta: BTreeMap<crate::ids::VolumeId, i64>,
    /// Metadata rows inserted or removed (the complexity tests count these).
    pub records_written: u64,
    /// Segments whose live bytes may have reached zero.
    maybe_dead: BTreeSet<SegmentId>,
    /// Dedup index entries of blocks created in this transaction.
    dedup_added: DedupIndex,
    /// Change of live bytes per block class.
    class_delta: [i64; 3],
    /// Blocks deleted in this transaction, and their index keys.
    freed_blocks: std::collections::HashSet<BlockId>,
    /// Their records: (segment, offset, length).
    freed_records: Vec<(SegmentId, u64, u64)>,
    freed_keys: Vec<(u64, BlockId)>,
    /// Between [`TxState::begin_new_rows`] and [`TxState::flush_new_rows`]: the
    /// rows of blocks created meanwhile, in id order, not yet in the block
    /// table. A write of many grains adds them in one ordered pass at the
    /// table's end (new ids are the largest), not a descent each.
    new_rows: Option<Vec<(BlockId, BlockRec)>>,
    /// Between [`TxState::begin_held_rows`] and [`TxState::flush_held_rows`]:
    /// rows of blocks that existed before, as changed meanwhile, not yet
    /// written back (the table's row is stale, or absent when a release took
    /// it out). A write that replaces duplicates with duplicates drops and
    /// takes references to the same few blocks grain after grain: here each
    /// change is a map update, not one descent of the block tree to read the
    /// row and one to write it. A row without references is a block the run
    /// let go and may take up again (a rewrite of the same data); it is freed
    /// when the run ends unless a grain does.
    held_rows: Option<BTreeMap<BlockId, BlockRec>>,
    /// Records the write path expects to append (see [`TxState::expect_appends`]).
    expected_append_records: usize,
    /// Payloads read back from segments that proved a dedup hit: kept in
    /// [`WriterState::proven`] once this transaction is applied.
    proven: Vec<(BlockId, Box<[u8]>)>,
    /// Segment bytes read ahead to prove dedup hits on data stored in order.
    read_ahead: crate::dedup::proof_readahead::ReadAhead,
    /// Blocks stored raw for the background reducer in this transaction.
    backlog_added: Vec<(BlockId, u32)>,
    /// Blocks leaving the reducer's backlog: freed, or reduced.
    backlog_removed: Vec<BlockId>,
    /// Record bytes the reducer rewrote.
    pub reduced_bytes: u64,
    /// Blocks whose stored payload the reducer rewrote.
    rewritten: Vec<BlockId>,
}

/// The dedup index: fingerprint prefix → block id.
pub type DedupIndex = std::collections::HashMap<u64, BlockId, BuildHasherDefault<KeyIsHash>>;

/// Hashes a dedup key to itself: the key is 64 bits of a grain fingerprint,
/// already uniform, and hashing it again (SipHash) was a measurable part of
/// freeing blocks in bulk. Not for keys that are not hash output.
#[derive(Default)]
pub struct KeyIsHash(u64);

impl std::hash::Hasher for KeyIsHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here (`write_u64`); fold anything else.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// The dedup index key of a fingerprint.
pub fn dedup_key(fingerprint: &[u8; 16]) -> u64 {
    u64::from_le_bytes(fingerprint[..8].try_into().expect("8 bytes"))
}

/// What admission of new records looks at.
#[derive(Debug, Clone, Copy)]
pub struct Occupancy {
    pub live_bytes: u64,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    /// The live bytes allowed to the volume's type (thin or thick).
    pub limit_bytes: u64,
}

/// Refuses `record_bytes` of new records when live data would pass the limit
/// for the volume's type (the array is full), or when stale space the cleaner
/// has not caught up with leaves no physical room. The one admission rule: a
/// write batch asks it before it joins the shared open transaction, where a
/// refusal would be too late (see `Engine::batch_cannot_run_out_of_space`).
pub fn check_room(at: Occupancy, record_bytes: u64, thick: bool) -> Result<()> {
    if at.live_bytes + record_bytes > at.limit_bytes {
        return Err(EngineError::NoSpace(format!(
            "{} bytes of live data of {} capacity, {} allowed to {} volumes",
            at.live_bytes,
            at.capacity_bytes,
            at.limit_bytes,
            if thick { "thick" } else { "thin" }
        )));
    }
    // Half the cleaner's reserve (a segment on any but a tiny array) stays
    // free for it to relocate a victim into.
    let relocation_room = crate::space::provisioning::cleaning_reserve_bytes(at.capacity_bytes) / 2;
    if at.used_bytes + record_bytes + relocation_room > at.capacity_bytes {
        return Err(EngineError::NoSpace(format!(
            "{} of {} bytes occupied: the cleaner has not yet freed the stale space",
            at.used_bytes, at.capacity_bytes
        )));
    }
    Ok(())
}

impl TxState {
    pub fn new(ws: &WriterState) -> Self {
        TxState {
            next_block_id: ws.next_block_id,
            next_seq: ws.next_seq,
            next_volume_id: ws.next_volume_id,
            next_segment_id: ws.next_segment_id,
            open_segment: ws.open_segment,
            clean_segment: ws.clean_segment,
            relocated_bytes: 0,
            seg_delta: BTreeMap::new(),
            appends: BTreeMap::new(),
            used_bytes: ws.used_bytes(),
            live_bytes: ws.live_bytes(),
            capacity_bytes: ws.capacity_bytes,
            thin_limit_bytes: ws.thin_limit_bytes(),
            thick_limit_bytes: ws.thick_limit_bytes(),
            thick: false,
            dedup: true,
            mapping_delta: BTreeMap::new(),
            records_written: 0,
            maybe_dead: BTreeSet::new(),
            dedup_added: DedupIndex::default(),
            class_delta: [0; 3],
            freed_blocks: std::collections::HashSet::new(),
            freed_records: Vec::new(),
            freed_keys: Vec::new(),
            new_rows: None,
            held_rows: None,
            expected_append_records: 0,
            proven: Vec::new(),
            read_ahead: Default::default(),
            backlog_added: Vec::new(),
            backlog_removed: Vec::new(),
            reduced_bytes: 0,
            rewritten: Vec::new(),
        }
    }

    /// Says how many records this transaction will most likely append, so
    /// that the list they collect in is allocated once, not grown (and
    /// copied) as a large write fills it.
    pub fn expect_appends(&mut self, records: usize) {
        self.expected_append_records = records;
    }

    pub fn take_seq(&mut self) -> SnapshotSeq {
        self.next_seq = self.next_seq.next();
        self.next_seq
    }

    fn segment_state(&self, ws: &WriterState, id: SegmentId) -> SegState {
        let base = ws.segments.get(&id).copied().unwrap_or_default();
        let (dw, dl) = self.seg_delta.get(&id).copied().unwrap_or((0, 0));
        SegState {
            written_bytes: base
                .written_bytes
                .checked_add_signed(dw)
                .expect("written bytes stay positive"),
            live_bytes: base
                .live_bytes
                .checked_add_signed(dl)
                .expect("live bytes stay positive"),
        }
    }

    /// Allocates room for a record in the open segment, rolling to a new segment
    /// when the open one is full. Refuses when live data would pass the limit for
    /// the volume's type (the array is full), or when stale space the cleaner has
    /// not caught up with leaves no physical room (rare: writers make room first,
    /// see `Engine::make_room`).
    fn allocate(&mut self, ws: &WriterState, record_bytes: u64) -> Result<(SegmentId, u64)> {
        let limit_bytes = if self.thick {
            self.thick_limit_bytes
        } else {
            self.thin_limit_bytes
        };
        check_room(
            Occupancy {
                live_bytes: self.live_bytes,
                used_bytes: self.used_bytes,
                capacity_bytes: self.capacity_bytes,
                limit_bytes,
            },
            record_bytes,
            self.thick,
        )?;
        let mut offset = self.segment_state(ws, self.open_segment).written_bytes;
        if offset + record_bytes > SEGMENT_TARGET_BYTES {
            self.maybe_dead.insert(self.open_segment);
            self.open_segment = self.next_segment_id;
            self.next_segment_id = self.next_segment_id.next();
            offset = 0;
        }
        let delta = self.seg_delta.entry(self.open_segment).or_default();
        delta.0 += record_bytes as i64;
        delta.1 += record_bytes as i64;
        self.used_bytes += record_bytes;
        self.live_bytes += record_bytes;
        Ok((self.open_segment, offset))
    }

    /// Moves a live record to the cleaner's stream: the same bytes (header and
    /// checksum unchanged) at a new place, and one block row updated — no mapping
    /// that references the block changes.
    pub fn relocate(
        &mut self,
        ws: &WriterState,
        t: &mut Tables,
        id: BlockId,
        rec: BlockRec,
        record: &[u8],
    ) -> Result<()> {
        self.assert_rows_in_table();
        let record_bytes = record.len() as u64;
        assert_eq!(record_bytes, rec.record_bytes());
        // The cleaner may use the whole capacity: it is what gives space back.
        if self.used_bytes + record_bytes > self.capacity_bytes {
            return Err(EngineError::NoSpace("no room left to relocate into".into()));
        }
        let (segment, offset) = self.clean_slot(ws, record_bytes);
        self.appends
            .get_mut(&segment)
            .expect("a slot's appends")
            .push_encoded(record);
        let moved = BlockRec {
            segment,
            offset_bytes: u32::try_from(offset).expect("segment offsets fit u32"),
            ..rec
        };
        self.account_moved_record((rec.segment, record_bytes), (segment, record_bytes));
        self.relocated_bytes += record_bytes;
        self.put_block(t, id, Some(&rec), &moved)
    }

    /// Accounts a live record of `from.1` bytes in segment `from.0` that is
    /// written anew as `to.1` bytes in segment `to.0`: the old one is stale.
    fn account_moved_record(&mut self, from: (SegmentId, u64), to: (SegmentId, u64)) {
        let appended = self.seg_delta.entry(to.0).or_default();
        appended.0 += to.1 as i64;
        appended.1 += to.1 as i64;
        self.seg_delta.entry(from.0).or_default().1 -= from.1 as i64;
        self.maybe_dead.insert(from.0);
        self.used_bytes += to.1;
    }

    /// Where the next record of `record_bytes` goes in the cleaner's stream
    /// (a fresh segment when the open one is full), with its appends ready.
    fn clean_slot(&mut self, ws: &WriterState, record_bytes: u64) -> (SegmentId, u64) {
        let segment = match self.clean_segment {
            Some(open)
                if self.segment_state(ws, open).written_bytes + record_bytes
                    <= SEGMENT_TARGET_BYTES =>
            {
                open
            }
            full => {
                if let Some(full) = full {
                    self.maybe_dead.insert(full);
                }
                let fresh = self.next_segment_id;
                self.next_segment_id = self.next_segment_id.next();
                self.clean_segment = Some(fresh);
                fresh
            }
        };
        let offset = self.segment_state(ws, segment).written_bytes;
        let appends = self
            .appends
            .entry(segment)
            .or_insert_with(|| crate::write::appends::SegmentAppends::new(offset));
        assert_eq!(appends.end_bytes(), offset, "appends are contiguous");
        (segment, offset)
    }

    /// Rewrites a block stored raw for the background reducer as `reduced`
    /// (its grain, compressed when that paid, else raw) in the cleaner's
    /// stream, without the flag: one block row changes, no mapping does, and
    /// the raw record becomes stale space for the cleaner. `rec` is the row
    /// as it is now.
    pub fn rewrite_reduced(
        &mut self,
        ws: &WriterState,
        t: &mut Tables,
        id: BlockId,
        rec: BlockRec,
        reduced: &DataGrain,
    ) -> Result<()> {
        self.assert_rows_in_table();
        assert!(
            rec.flags & log::FLAG_REDUCE_LATER != 0,
            "block {id} waits for no reduction"
        );
        assert!(reduced.deferred.is_none() && reduced.background.is_none());
        assert_eq!(
            reduced.fingerprint, rec.fingerprint,
            "block {id}: another grain"
        );
        let header = RecordHeader {
            flags: reduced.codec.flags()
                | log::FLAG_PAYLOAD_CRC_FIRST
                | (rec.flags & log::FLAG_UNINDEXED),
            payload_len: reduced.payload.len() as u32,
            block_id: id,
        };
        let old_bytes = rec.record_bytes();
        let new_bytes = (log::RECORD_HEADER_BYTES + reduced.payload.len()) as u64;
        if self.used_bytes + new_bytes > self.capacity_bytes {
            return Err(EngineError::NoSpace("no room left to reduce into".into()));
        }
        let (segment, offset) = self.clean_slot(ws, new_bytes);
        let (header_bytes, crc) = log::encode_header(header, reduced.payload_crc);
        self.appends
            .get_mut(&segment)
            .expect("a slot's appends")
            .push_record(header_bytes, reduced.payload.clone());
        let rewritten = BlockRec {
            segment,
            offset_bytes: u32::try_from(offset).expect("segment offsets fit u32"),
            payload_len: header.payload_len,
            flags: header.flags,
            crc,
            ..rec
        };
        self.account_moved_record((rec.segment, old_bytes), (segment, new_bytes));
        self.live_bytes = self.live_bytes + new_bytes - old_bytes;
        self.freed_records
            .push((rec.segment, u64::from(rec.offset_bytes), old_bytes));
        self.backlog_removed.push(id);
        self.rewritten.push(id);
        self.reduced_bytes += old_bytes;
        self.put_block(t, id, Some(&rec), &rewritten)
    }

    /// Stores a data grain: a reference to an existing block that holds the
    /// same grain, or a new block appended to the open segment. Returns the
    /// block and its record.
    pub fn store_block(
        &mut self,
        ws: &WriterState,
        t: &mut Tables,
        store: &dyn log::SegmentStore,
        data: &DataGrain,
    ) -> Result<(BlockId, BlockRec)> {
        if !self.dedup {
            return self.store_new_block(ws, t, data, false);
        }
        let key = dedup_key(&data.fingerprint);
        let candidate = self.dedup_lookup(ws, key);
        if let Some(id) = candidate {
            let mut rec = self.block(t, id)?;
            if rec.fingerprint != data.fingerprint || !self.holds_grain(ws, store, id, &rec, data) {
                // A 64-bit prefix collision, or a fingerprint collision (the
                // fingerprint is fast, not collision-resistant): a new block,
                // left out of the index, whose key stays with the block that
                // has it (one block per key, so a collision cannot unindex it).
                return self.store_new_block(ws, t, data, false);
            }
            let Some(refcount) = rec.refcount.checked_add(1) else {
                // A block shared by every reference it can count: the grain
                // gets a block of its own, left out of the index (the key
                // stays with the full one). An error here would fail the
                // batch's shared transaction, and with it the array.
                return self.store_new_block(ws, t, data, false);
            };
            let before = rec;
            rec.refcount = refcount;
            self.put_block(t, id, Some(&before), &rec)?;
            // A block written again is likely written again after this.
            ws.hints.insert(key);
            return Ok((id, rec));
        }
        self.store_new_block(ws, t, data, true)
    }

    /// Whether block `id` (`rec`) holds `data`'s grain: its stored payload
    /// equals `data`'s byte for byte when both have the same codec (one grain
    /// encodes to one payload), else the two decode to the same grain
    /// (containers with different compression, rare, or a grain left raw as a
    /// likely duplicate, see [`crate::dedup::index_hints`]). The payload comes from
    /// [`WriterState::proven`], this transaction's appends, or the block's
    /// segment; the writer mutex is held, so the block (live: it is indexed)
    /// cannot be freed or moved meanwhile. The record's checksum is not
    /// needed: bytes that are (or decode to) `data`'s grain hold that grain,
    /// and a damaged record fails the equality, not the write. A failed read
    /// says "not the same", and the write stores its own block.
    fn holds_grain(
        &mut self,
        ws: &WriterState,
        store: &dyn log::SegmentStore,
        id: BlockId,
        rec: &BlockRec,
        data: &DataGrain,
    ) -> bool {
        let Ok(codec) = classify::Codec::of_flags(rec.flags) else {
            return false;
        };
        let mut buf = [0u8; GRAIN_BYTES as usize];
        let (stored, read) = match ws.proven.get(id) {
            Some(payload) => (payload, false),
            None => match self.stored_payload(ws, store, rec, &mut buf) {
                Some(stored) => stored,
                None => return false,
            },
        };
        let same = if codec == data.codec {
            stored == &data.payload[..]
        } else if data.codec == classify::Codec::Raw {
            // A grain left raw as a likely duplicate (see `crate::dedup::index_hints`).
            let mut theirs = [0u8; GRAIN_BYTES as usize];
            classify::decode(stored, codec, &mut theirs).is_ok() && theirs[..] == data.payload[..]
        } else {
            let mut theirs = [0u8; GRAIN_BYTES as usize];
            let mut ours = [0u8; GRAIN_BYTES as usize];
            classify::decode(stored, codec, &mut theirs).is_ok()
                && classify::decode(&data.payload, data.codec, &mut ours).is_ok()
                && theirs == ours
        };
        let proven: Option<Box<[u8]>> = (same && read).then(|| stored.into());
        if let Some(payload) = proven {
            self.proven.push((id, payload));
        }
        same
    }

    /// Block `rec`'s stored payload, from this transaction's appends or read
    /// from its segment (then `true`: into `buf`, or into a window read
    /// ahead); `None` if it cannot be read.
    fn stored_payload<'a>(
        &'a mut self,
        ws: &WriterState,
        store: &dyn log::SegmentStore,
        rec: &BlockRec,
        buf: &'a mut [u8; GRAIN_BYTES as usize],
    ) -> Option<(&'a [u8], bool)> {
        let payload_bytes = rec.payload_len as usize;
        if payload_bytes > buf.len() {
            return None;
        }
        let at = u64::from(rec.offset_bytes) + log::RECORD_HEADER_BYTES as u64;
        if let Some(appends) = self.appends.get(&rec.segment) {
            if at >= appends.start_bytes() {
                return Some((appends.bytes_at(at, payload_bytes)?, false));
            }
        }
        // What lies in the file: this transaction's appends are not there yet.
        let in_file_bytes = match self.appends.get(&rec.segment) {
            Some(appends) => appends.start_bytes(),
            None => self.segment_state(ws, rec.segment).written_bytes,
        };
        let stored =
            self.read_ahead
                .payload(store, rec.segment, (at, payload_bytes), in_file_bytes, buf)?;
        Some((stored, true))
    }

    fn dedup_lookup(&self, ws: &WriterState, key: u64) -> Option<BlockId> {
        self.dedup_added
            .get(&key)
            .or_else(|| ws.dedup.get(&key))
            .copied()
            .filter(|id| !self.freed_blocks.contains(id))
    }

    /// Appends `data` as a new block; `indexed`: it goes into the dedup index
    /// (else its record says it is not there, so that recovery and fsck agree).
    fn store_new_block(
        &mut self,
        ws: &WriterState,
        t: &mut Tables,
        data: &DataGrain,
        indexed: bool,
    ) -> Result<(BlockId, BlockRec)> {
        let reduced;
        let data = match data.reduced() {
            Some(grain) => {
                reduced = grain;
                &reduced
            }
            None => data,
        };
        assert!(data.deferred.is_none(), "a stored grain is reduced");
        self.next_block_id = self.next_block_id.next();
        let id = self.next_block_id;
        let reduce_later = match data.background {
            None => 0,
            Some(crate::Compression::Lz4) => log::FLAG_REDUCE_LZ4,
            Some(crate::Compression::Zstd) => log::FLAG_REDUCE_ZSTD,
            Some(crate::Compression::Off) => unreachable!("nothing waits for no compression"),
        };
        assert!(reduce_later == 0 || data.codec == classify::Codec::Raw);
        let header = RecordHeader {
            flags: data.codec.flags()
                | log::FLAG_PAYLOAD_CRC_FIRST
                | reduce_later
                | if indexed { 0 } else { log::FLAG_UNINDEXED },
            payload_len: data.payload.len() as u32,
            block_id: id,
        };
        let record_bytes = (log::RECORD_HEADER_BYTES + data.payload.len()) as u64;
        let (segment_id, offset) = self.allocate(ws, record_bytes)?;
        if reduce_later != 0 {
            self.backlog_added.push((id, record_bytes as u32));
        }
        let expected_records = self.expected_append_records;
        let appends = self.appends.entry(segment_id).or_insert_with(|| {
            let mut appends = crate::write::appends::SegmentAppends::new(offset);
            appends.reserve(expected_records);
            appends
        });
        assert_eq!(appends.end_bytes(), offset, "appends are contiguous");
        debug_assert_eq!(data.payload_crc, log::payload_crc(&data.payload));
        let (header_bytes, crc) = log::encode_header(header, data.payload_crc);
        appends.push_record(header_bytes, data.payload.clone());
        let rec = BlockRec {
            segment: segment_id,
            offset_bytes: u32::try_from(offset).expect("segment offsets fit u32"),
            payload_len: header.payload_len,
            flags: header.flags,
            crc,
            refcount: 1,
            fingerprint: data.fingerprint,
            history_refs: 0,
        };
        match &mut self.new_rows {
            Some(rows) => {
                if let Some(&(last, _)) = rows.last() {
                    assert_eq!(last.next(), id, "new rows are buffered in id order");
                }
                rows.push((id, rec));
                self.account_block_change(None, Some(&rec));
                self.records_written += 1;
            }
            None => self.put_block(t, id, None, &rec)?,
        }
        if indexed {
            let previous = self.dedup_added.insert(dedup_key(&data.fingerprint), id);
            // One live indexed block per key: only a block freed in this
            // transaction can have had the key (the lookup passed it over).
            assert!(
                previous.is_none_or(|id| self.freed_blocks.contains(&id)),
                "one indexed block per key"
            );
        }
        Ok((id, rec))
    }

    /// Writes a block row and moves its bytes between classes.
    fn put_block(
        &mut self,
        t: &mut Tables,
        id: BlockId,
        before: Option<&BlockRec>,
        after: &BlockRec,
    ) -> Result<()> {
        let revived = before.filter(|before| before.refcount == 0);
        if let Some(before) = revived {
            assert!(
                self.held_rows
                    .as_ref()
                    .is_some_and(|held| held.contains_key(&id)),
                "block {id}: only a held block waits without references"
            );
            self.block_revived(before);
        }
        self.account_block_change(before.filter(|before| before.refcount > 0), Some(after));
        if let (Some(index), Some(rows)) = (self.new_row_index(id), self.new_rows.as_mut()) {
            // A block created in this run and referenced again (dedup within
            // the run): only its buffered row changes.
            rows[index].1 = *after;
            return Ok(());
        }
        if let Some(held) = self.held_rows.as_mut() {
            held.insert(id, *after);
            return Ok(());
        }
        t.blocks
            .insert(id.get(), &after.encode()[..])
            .map_err(kv_error)?;
        self.records_written += 1;
        Ok(())
    }

    /// Moves a block's bytes between classes as its row changes from `before`
    /// to `after`. The row is counted written where it reaches the table.
    fn account_block_change(&mut self, before: Option<&BlockRec>, after: Option<&BlockRec>) {
        if let Some(b) = before {
            self.class_delta[b.class() as usize] -= b.record_bytes() as i64;
        }
        if let Some(a) = after {
            assert!(a.history_refs <= a.refcount && a.refcount > 0);
            self.class_delta[a.class() as usize] += a.record_bytes() as i64;
        }
    }

    /// Where block `id`'s row is in `new_rows`, if it is buffered there.
    fn new_row_index(&self, id: BlockId) -> Option<usize> {
        let rows = self.new_rows.as_ref()?;
        let &(first, _) = rows.first()?;
        let index = usize::try_from(id.get().checked_sub(first.get())?).ok()?;
        let &(found, _) = rows.get(index)?;
        assert_eq!(found, id, "buffered ids are consecutive");
        Some(index)
    }

    /// From here until [`TxState::flush_new_rows`], rows of new blocks wait in
    /// memory. Only storing blocks may happen meanwhile: nothing else reads
    /// the block table past them.
    pub fn begin_new_rows(&mut self) {
        assert!(self.new_rows.is_none());
        self.new_rows = Some(Vec::new());
    }

    /// Adds the buffered rows to the block table in one ordered pass at its
    /// end: redb applies a run of cursor inserts as one splice per leaf.
    pub fn flush_new_rows(&mut self, t: &mut Tables) -> Result<()> {
        let rows = self.new_rows.take().expect("rows are being buffered");
        if rows.is_empty() {
            return Ok(());
        }
        let mut cursor = t
            .blocks
            .upper_bound_mut(std::ops::Bound::<u64>::Unbounded)
            .map_err(kv_error)?;
        for (id, rec) in &rows {
            cursor
                .insert_before(id.get(), &rec.encode()[..])
                .map_err(|error| {
                    crate::meta::schema::cursor_insert_error(error, || {
                        format!("block {id} is new, but the block table holds an id as large")
                    })
                })?;
        }
        cursor.close().map_err(kv_error)
    }

    /// From here until [`TxState::flush_held_rows`], changed rows of existing
    /// blocks wait in memory. Only releasing references (of mappings removed
    /// or retired) and storing blocks may happen meanwhile: everything else
    /// that reads the block table would miss them.
    pub fn begin_held_rows(&mut self) {
        assert!(self.held_rows.is_none() && self.new_rows.is_none());
        self.held_rows = Some(BTreeMap::new());
    }

    /// Writes the held rows back to the block table, in id order.
    pub fn flush_held_rows(&mut self, t: &mut Tables) -> Result<()> {
        assert!(self.new_rows.is_none(), "new rows are flushed first");
        let held = self.held_rows.take().expect("rows are being held");
        for (id, rec) in &held {
            assert!(
                !self.freed_blocks.contains(id),
                "a held block is not freed twice"
            );
            if rec.refcount == 0 {
                // Its row came out when its last reference was dropped.
                self.block_forgotten(*id, rec);
            } else {
                t.blocks
                    .insert(id.get(), &rec.encode()[..])
                    .map_err(kv_error)?;
                self.records_written += 1;
            }
        }
        Ok(())
    }

    /// Whether every block row is in the table (none held or buffered): what
    /// a transaction must reach before it commits.
    fn rows_flushed(&self) -> bool {
        self.new_rows.is_none() && self.held_rows.is_none()
    }

    /// Asserts that no new block row waits outside the table: everything that
    /// reads or removes rows other than storing blocks needs them there.
    fn assert_rows_in_table(&self) {
        assert!(
            self.new_rows.is_none(),
            "block rows of a run are still buffered"
        );
    }

    pub fn block(&self, t: &Tables, id: BlockId) -> Result<BlockRec> {
        if let (Some(index), Some(rows)) = (self.new_row_index(id), &self.new_rows) {
            return Ok(rows[index].1);
        }
        if let Some(rec) = self.held_rows.as_ref().and_then(|held| held.get(&id)) {
            return Ok(*rec);
        }
        let value = t.blocks.get(id.get()).map_err(kv_error)?;
        let value = value.ok_or_else(|| {
            EngineError::Corruption(format!("block {id} is referenced but missing"))
        })?;
        BlockRec::decode(value.value())
    }

    /// Drops one reference held by a mapping; a block with none left is deleted
    /// and its record becomes stale space in its segment.
    pub fn release(&mut self, t: &mut Tables, target: GrainTarget) -> Result<()> {
        self.release_ref(t, target, false)
    }

    /// Drops one reference held by a history version.
    pub fn release_history(&mut self, t: &mut Tables, target: GrainTarget) -> Result<()> {
        self.release_ref(t, target, true)
    }

    fn release_ref(
        &mut self,
        t: &mut Tables,
        target: GrainTarget,
        from_history: bool,
    ) -> Result<()> {
        let GrainTarget::Block(id) = target else {
            return Ok(());
        };
        self.assert_rows_in_table();
        // Removed first and put back if still referenced: most released blocks
        // are freed, and this way they cost one descent of the tree, not two.
        let before = self.take_block(t, id)?;
        self.drop_references(t, id, before, 1, from_history)
    }

    /// Removes a block's row, which a reference says exists (the held row,
    /// if there is one, being the current one).
    fn take_block(&mut self, t: &mut Tables, id: BlockId) -> Result<BlockRec> {
        let in_table = t
            .blocks
            .remove(id.get())
            .map_err(kv_error)?
            .map(|value| BlockRec::decode(value.value()))
            .transpose()?;
        let held = self.held_rows.as_mut().and_then(|held| held.remove(&id));
        held.or(in_table)
            .ok_or_else(|| EngineError::Corruption(format!("block {id} is referenced but missing")))
    }

    /// Drops `count` references of block `id`, whose row (`before`) the caller
    /// has removed: puts the row back if references remain, frees the block if
    /// none do. `from_history`: the one reference dropped was held by history.
    fn drop_references(
        &mut self,
        t: &mut Tables,
        id: BlockId,
        before: BlockRec,
        count: u32,
        from_history: bool,
    ) -> Result<()> {
        let mut rec = before;
        assert!(
            rec.refcount >= count && count > 0,
            "block {id}: fewer references than dropped"
        );
        rec.refcount -= count;
        if from_history {
            assert_eq!(count, 1, "history references are dropped one at a time");
            assert!(rec.history_refs > 0, "block {id}: no history reference");
            rec.history_refs -= 1;
        }
        assert!(
            rec.history_refs <= rec.refcount,
            "block {id}: history references left"
        );
        if rec.refcount > 0 {
            return self.put_block(t, id, Some(&before), &rec);
        }
        self.block_unlive(&before);
        match self.held_rows.as_mut() {
            // In a run, the write that let the block go may store the same
            // grain again (a rewrite of the same data, as a copy or a restore
            // does): the block waits, no longer live, and is freed when the
            // run ends unless a grain takes it up again — rather than freed
            // now and its grain appended a second time.
            Some(held) => {
                held.insert(id, rec);
            }
            None => self.block_forgotten(id, &before),
        }
        Ok(())
    }

    /// Drops the references of many mappings at once (`targets`, one per
    /// mapping, not held by history). Ids that lie close together — data
    /// written in order, as a volume deleted or unmapped whole, or a large
    /// write replacing one — are taken out of the table in one pass over their
    /// id range; ids on their own (a block shared through dedup, say) one by
    /// one.
    fn release_many(&mut self, t: &mut Tables, targets: &[GrainTarget]) -> Result<()> {
        // (block id, references dropped), sorted by id.
        let mut ids: Vec<BlockId> = targets
            .iter()
            .filter_map(|target| match target {
                GrainTarget::Block(id) => Some(*id),
                GrainTarget::Pattern(_) => None,
            })
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        self.assert_rows_in_table();
        ids.sort_unstable();
        let mut counts: Vec<(BlockId, u32)> = Vec::with_capacity(ids.len());
        for id in ids {
            match counts.last_mut() {
                Some((last, count)) if *last == id => *count += 1,
                _ => counts.push((id, 1)),
            }
        }
        if let Some(held) = self.held_rows.as_ref().filter(|held| !held.is_empty()) {
            // A held row (a block retired to the history just before) is
            // newer than the table's: released one by one, where
            // `take_block` looks at both.
            let (held_counts, rest): (Vec<_>, Vec<_>) = counts
                .into_iter()
                .partition(|(id, _)| held.contains_key(id));
            for (id, count) in held_counts {
                let before = self.take_block(t, id)?;
                self.drop_references(t, id, before, count, false)?;
            }
            counts = rest;
        }
        let mut rest = &counts[..];
        while !rest.is_empty() {
            let cluster = dense_prefix(rest);
            if cluster.len() >= MIN_EXTRACTED_BLOCKS {
                self.release_dense(t, cluster)?;
            } else {
                for &(id, count) in cluster {
                    let before = self.take_block(t, id)?;
                    self.drop_references(t, id, before, count, false)?;
                }
            }
            rest = &rest[cluster.len()..];
        }
        Ok(())
    }

    /// Drops the references `counts` (sorted by id, close together) in one
    /// extraction over their id range.
    fn release_dense(&mut self, t: &mut Tables, counts: &[(BlockId, u32)]) -> Result<()> {
        let (Some(&(first, _)), Some(&(last, _))) = (counts.first(), counts.last()) else {
            return Ok(());
        };
        // The extraction visits ids in ascending order: a cursor over `counts`
        // answers each in O(1).
        let mut cursor = 0;
        let mut taken = Vec::with_capacity(counts.len());
        for item in t
            .blocks
            .extract_from_if(first.get()..=last.get(), |id, _| {
                let id = BlockId::new(id);
                while cursor < counts.len() && counts[cursor].0 < id {
                    cursor += 1;
                }
                cursor < counts.len() && counts[cursor].0 == id
            })
            .map_err(kv_error)?
        {
            let (key, value) = item.map_err(kv_error)?;
            taken.push((BlockId::new(key.value()), BlockRec::decode(value.value())?));
        }
        if taken.len() != counts.len() {
            let missing = counts
                .iter()
                .map(|(id, _)| *id)
                .find(|id| !taken.iter().any(|(taken_id, _)| taken_id == id))
                .expect("fewer taken than wanted");
            return Err(EngineError::Corruption(format!(
                "block {missing} is referenced but missing"
            )));
        }
        for ((id, before), &(counted_id, count)) in taken.into_iter().zip(counts) {
            assert_eq!(id, counted_id, "taken in id order");
            self.drop_references(t, id, before, count, false)?;
        }
        Ok(())
    }

    /// Accounts for a block whose last reference went (`rec` as it was
    /// before): its record's bytes are no longer live.
    fn block_unlive(&mut self, rec: &BlockRec) {
        self.class_delta[rec.class() as usize] -= rec.record_bytes() as i64;
        self.seg_delta.entry(rec.segment).or_default().1 -= rec.record_bytes() as i64;
        self.live_bytes -= rec.record_bytes();
    }

    /// Undoes [`TxState::block_unlive`] for a block a grain takes up again
    /// before its run ends (its class is accounted with its new row).
    fn block_revived(&mut self, rec: &BlockRec) {
        self.seg_delta.entry(rec.segment).or_default().1 += rec.record_bytes() as i64;
        self.live_bytes += rec.record_bytes();
    }

    /// Frees a block no longer live, whose row is out of the table: its
    /// record becomes stale space, its dedup entry goes.
    fn block_forgotten(&mut self, id: BlockId, rec: &BlockRec) {
        if rec.flags & log::FLAG_REDUCE_LATER != 0 {
            self.backlog_removed.push(id);
        }
        self.records_written += 1;
        self.freed_blocks.insert(id);
        self.freed_keys.push((dedup_key(&rec.fingerprint), id));
        self.freed_records
            .push((rec.segment, u64::from(rec.offset_bytes), rec.record_bytes()));
        self.maybe_dead.insert(rec.segment);
    }

    /// Sets a point mapping. What it replaces is released, or moved to the history
    /// when a snapshot (seqs in `snapshot_seqs`) can still see it.
    pub fn set_mapping(
        &mut self,
        t: &mut Tables,
        volume: crate::ids::VolumeId,
        grain: GrainIndex,
        value: MapValue,
        snapshot_seqs: &[SnapshotSeq],
    ) -> Result<()> {
        let old = crate::meta::point_rows::set(&mut t.maps, volume, grain, value)?;
        t.changed.add(volume, grain, Some(value));
        self.records_written += 1;
        match old {
            Some(old) => self.retire(t, volume, grain, old, value.seq, snapshot_seqs)?,
            None => *self.mapping_delta.entry(volume).or_default() += 1,
        }
        Ok(())
    }

    /// Inserts the point mappings of the adjacent grains `[first, first + n)` of
    /// `volume`, which hold none (the caller removed them with
    /// [`TxState::remove_mappings_in`]): through one cursor, whose run of
    /// inserts redb applies a leaf at a time rather than a descent each.
    pub fn insert_mappings(
        &mut self,
        t: &mut Tables,
        volume: crate::ids::VolumeId,
        first: GrainIndex,
        values: &[MapValue],
    ) -> Result<()> {
        let end = first + values.len() as u64;
        crate::meta::point_rows::insert_run(&mut t.maps, volume, first, values)?;
        for (grain, value) in first.range_to(end).zip(values) {
            t.changed.add(volume, grain, Some(*value));
        }
        *self.mapping_delta.entry(volume).or_default() += values.len() as i64;
        self.records_written += values.len() as u64;
        Ok(())
    }

    /// Removes point mappings that died at `died_seq` (a range record shadows
    /// them, their volume is gone, or a write of many grains replaces them), in
    /// one pass over the mapping table: the mappings of `volume` in grains
    /// `[first, end)` that `dies(value)` selects, at most `limit` of them:
    /// released, or kept in the history for snapshots. Cheaper per mapping
    /// than one removal each (no descent of the tree per key), which is what
    /// makes reclaim of large ranges and large writes fast. Returns the grains
    /// removed.
    pub fn remove_mappings_in(
        &mut self,
        t: &mut Tables,
        volume: crate::ids::VolumeId,
        (first, end): (GrainIndex, GrainIndex),
        limit: usize,
        death: Death,
        dies: impl Fn(&MapValue) -> bool,
    ) -> Result<Vec<GrainIndex>> {
        let removed =
            crate::meta::point_rows::extract_in(&mut t.maps, volume, (first, end), limit, dies)?;
        for (grain, _) in &removed {
            t.changed.add(volume, *grain, None);
        }
        let mut grains = Vec::with_capacity(removed.len());
        let mut released = Vec::with_capacity(removed.len());
        for (grain, old) in removed {
            self.records_written += 1;
            *self.mapping_delta.entry(volume).or_default() -= 1;
            if schema::visible_to_any(death.snapshot_seqs, old.seq, death.seq) {
                self.retire(t, volume, grain, old, death.seq, death.snapshot_seqs)?;
            } else {
                released.push(old.target);
            }
            grains.push(grain);
        }
        self.release_many(t, &released)?;
        Ok(grains)
    }

    /// A version left the live table at `died_seq`: the history keeps its
    /// reference if a snapshot sees it, otherwise the reference is dropped.
    fn retire(
        &mut self,
        t: &mut Tables,
        volume: crate::ids::VolumeId,
        grain: GrainIndex,
        old: MapValue,
        died_seq: SnapshotSeq,
        snapshot_seqs: &[SnapshotSeq],
    ) -> Result<()> {
        if !schema::visible_to_any(snapshot_seqs, old.seq, died_seq) {
            return self.release(t, old.target);
        }
        if let GrainTarget::Block(id) = old.target {
            let before = self.block(t, id)?;
            let after = BlockRec {
                history_refs: before.history_refs + 1,
                ..before
            };
            self.put_block(t, id, Some(&before), &after)?;
        }
        let kept = HistValue {
            died_seq,
            target: old.target,
        };
        t.history()?
            .insert(
                (volume.get(), grain.get(), old.seq.get()),
                &kept.encode()[..],
            )
            .map_err(kv_error)?;
        self.records_written += 1;
        Ok(())
    }

    /// Keeps a displaced range record piece for the snapshots that see it.
    pub fn keep_range_history(
        &mut self,
        t: &mut Tables,
        volume: crate::ids::VolumeId,
        start: GrainIndex,
        rec: RangeRec,
        died_seq: SnapshotSeq,
    ) -> Result<()> {
        let kept = RangeHistValue { rec, died_seq };
        t.range_history()?
            .insert(
                (volume.get(), start.get(), rec.seq.get()),
                &kept.encode()[..],
            )
            .map_err(kv_error)?;
        self.records_written += 1;
        Ok(())
    }
}

/// Fewest blocks taken out of the table by one extraction over their id range
/// rather than one by one (a descent each).
const MIN_EXTRACTED_BLOCKS: usize = 8;

/// Most ids an extraction may visit per id it takes: the gap allowed between
/// neighbours in a cluster.
const MAX_CLUSTER_GAP: u64 = 4;

/// The longest prefix of `counts` (sorted by id) whose neighbours lie at most
/// [`MAX_CLUSTER_GAP`] ids apart: at least one entry.
fn dense_prefix(counts: &[(BlockId, u32)]) -> &[(BlockId, u32)] {
    assert!(!counts.is_empty());
    let end = counts
        .windows(2)
        .position(|pair| pair[1].0.get() - pair[0].0.get() > MAX_CLUSTER_GAP)
        .map_or(counts.len(), |gap| gap + 1);
    &counts[..end]
}

/// When removed mappings died, and which snapshots may still see them.
pub struct Death<'a> {
    pub seq: SnapshotSeq,
    pub snapshot_seqs: &'a [SnapshotSeq],
}

/// Runs `f` in one write transaction (not durable by itself: a later FLUSH makes it
/// so) and applies its effects to `ws` once committed. Segment data is written
/// before the metadata that points to it is committed.
pub fn run<T>(
    db: &crate::meta::store::Kv,
    store: &dyn log::SegmentStore,
    ws: &mut WriterState,
    f: impl FnOnce(&mut TxState, &mut Tables, &WriterState) -> Result<T>,
) -> Result<(T, u64, u64)> {
    assert!(
        ws.open_txn.is_none(),
        "the write batches' open transaction is committed before any other"
    );
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::None).map_err(kv_error)?;
    let mut st = TxState::new(ws);
    let (value, changed) = {
        let mut tables = Tables::open(&txn)?;
        let value = f(&mut st, &mut tables, ws)?;
        assert!(st.rows_flushed(), "every block row is in the table");
        (value, tables.take_changed())
    };
    let appended_bytes = st.write_appends(store, false)?;
    db.commit(txn, changed)?;
    let records_written = st.records_written;
    st.apply_to(ws);
    Ok((value, records_written, appended_bytes))
}

/// Runs a write batch or a reclaim step in the shared open transaction (begun
/// if there is none) and leaves it open; its effects on `ws` apply at once.
/// The caller has made sure it cannot run out of space, the filesystem's room
/// included. On any error the open transaction is dropped — with every batch
/// in it, already acknowledged — so the caller must stop the array from taking
/// further I/O.
pub fn run_deferred<T>(
    db: &crate::meta::store::Kv,
    store: &dyn log::SegmentStore,
    ws: &mut WriterState,
    grains: u64,
    f: impl FnOnce(&mut TxState, &mut Tables, &WriterState) -> Result<T>,
) -> Result<(T, u64, u64)> {
    let mut open = match ws.open_txn.take() {
        Some(open) => open,
        None => OpenTxn::begin(db)?,
    };
    let mut st = TxState::new(ws);
    let value = open
        .cell
        .with_dependent_mut(|_, tables| f(&mut st, tables, ws))?;
    assert!(st.rows_flushed(), "every block row is in the table");
    let appended_bytes = st.write_appends(store, true)?;
    let records_written = st.records_written;
    st.apply_to(ws);
    open.grains += grains;
    ws.open_txn = Some(open);
    Ok((value, records_written, appended_bytes))
}

/// Commits the write batches' open transaction, if there is one.
pub fn commit_open(db: &crate::meta::store::Kv, ws: &mut WriterState) -> Result<()> {
    match ws.open_txn.take() {
        Some(open) => open.commit(db),
        None => Ok(()),
    }
}

impl TxState {
    /// Writes the records this transaction appends to their segments, before its
    /// metadata commits; returns their bytes. `checked`: the caller has already
    /// made sure the filesystem has room for at least these bytes.
    fn write_appends(&self, store: &dyn log::SegmentStore, checked: bool) -> Result<u64> {
        let appended_bytes: u64 = self.appends.values().map(|a| a.len_bytes()).sum();
        if appended_bytes > 0 && !checked {
            crate::segment::fs_space::check_data(store, appended_bytes)?;
        }
        for (segment, appends) in &self.appends {
            store
                .write_vectored_at(*segment, appends.start_bytes(), &appends.slices())
                .map_err(|e| {
                    crate::segment::fs_space::segment_error(format!("writing segment {segment}"), e)
                })?;
        }
        Ok(appended_bytes)
    }

    /// Applies a committed transaction's effects to the shared writer state.
    fn apply_to(self, ws: &mut WriterState) {
        for (&id, &(written_delta, live_delta)) in &self.seg_delta {
            ws.adjust_segment(id, written_delta, live_delta);
        }
        for (class, delta) in self.class_delta.iter().enumerate() {
            ws.class_bytes[class] = ws.class_bytes[class]
                .checked_add_signed(*delta)
                .expect("class bytes never negative");
        }
        for (volume, delta) in self.mapping_delta {
            let count = ws.mapping_counts.entry(volume).or_default();
            *count = count
                .checked_add_signed(delta)
                .expect("mapping count never negative");
            if *count == 0 {
                ws.mapping_counts.remove(&volume);
            }
        }
        ws.next_block_id = self.next_block_id;
        ws.next_seq = self.next_seq;
        ws.next_volume_id = self.next_volume_id;
        ws.next_segment_id = self.next_segment_id;
        ws.open_segment = self.open_segment;
        ws.clean_segment = self.clean_segment;
        ws.dirty_segments.extend(self.appends.keys().copied());
        // Bounded: past the limit, freed space comes back when its segment is
        // cleaned instead.
        let room = MAX_PENDING_PUNCH.saturating_sub(ws.pending_punch.len());
        ws.pending_punch
            .extend(self.freed_records.into_iter().take(room));
        for (key, id) in self.dedup_added {
            ws.dedup.insert(key, id);
            ws.hints.insert(key);
        }
        for (id, payload) in self.proven {
            ws.proven.insert(id, payload);
        }
        for (key, id) in self.freed_keys {
            if let std::collections::hash_map::Entry::Occupied(entry) = ws.dedup.entry(key) {
                if *entry.get() == id {
                    entry.remove();
                    ws.hints.remove(key);
                }
            }
        }
        for id in self.maybe_dead {
            let state = ws.segments.get(&id).copied().unwrap_or_default();
            if !ws.is_open(id) && state.live_bytes == 0 {
                ws.pending_free.insert(id);
            }
        }
        for (id, record_bytes) in self.backlog_added {
            assert!(ws.reduction_backlog.insert(id, record_bytes).is_none());
            ws.reduction_backlog_bytes += u64::from(record_bytes);
        }
        for &id in &self.rewritten {
            ws.proven.forget(id);
        }
        for id in self.backlog_removed {
            let record_bytes = ws
                .reduction_backlog
                .remove(&id)
                .expect("a block leaving the backlog was in it");
            ws.reduction_backlog_bytes -= u64::from(record_bytes);
        }
    }
}
