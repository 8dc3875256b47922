//! Lacuna's storage engine: thin-provisioned, deduplicated, compressed block volumes
//! stored in an append-only segment log, with metadata in an embedded KV engine
//! (redb).
//!
//! The engine knows nothing of NBD, SCSI or sockets. Protocol layers call the
//! synchronous API of [`Engine`] and [`Volume`] from a blocking thread pool.
//!
//! How a host write flows: each 4 KiB grain is classified
//! ([`write::classify`]) — a repeated 8-byte pattern becomes metadata only,
//! anything else is fingerprinted (XXH3-128) and compressed (LZ4), unless its
//! fingerprint is probably in the dedup index ([`dedup`]): a duplicate is
//! stored as a reference and needs no compression. Under the writer mutex the
//! dedup index is consulted (a hit counts only once the stored payload compares
//! equal), new records are appended to the open segment ([`segment`]) and one
//! redb transaction ([`write`]) updates mappings, blocks and reference counts.
//! FLUSH syncs the segments and then commits durably, so metadata never
//! outlives the data it names.
//!
//! Range operations (unmap, write zeroes, copies) write one range record
//! ([`versions`]); a read takes the newer of the point mapping and the
//! covering range record, and the background reclaimer ([`reclaim`]) later
//! drops the point mappings the range shadows and frees segments that become
//! entirely dead.
//!
//! The code is in folders by concern; each folder's `mod.rs` says what it
//! owns and which others it may use, and `tests/layout.rs` holds them to it
//! (no import cycle between them). The [`Engine`]'s state is grouped the same
//! way: the `catalog` of objects, the `committer` of the write path, the read
//! `caches`, the background `scheduler` and the `hosts` it yields to, the
//! `version_jobs` it works off, and the `space_watch` figures.
//!
//! Lock order (outer to inner): a volume's view lock, the writer mutex, the I/O
//! lock. Readers hold the I/O lock shared while they read segment data; freeing a
//! segment takes it exclusively, so a reader never sees a segment vanish under it.

pub mod catalog;
mod containers;
mod data_path;
pub mod dedup;
pub mod error;
pub mod ids;
pub mod integrity;
pub mod meta;
pub mod names;
mod open;
pub mod read;
pub mod reclaim;
pub mod segment;
pub mod space;
mod testing;
pub mod units;
pub mod versions;
pub mod write;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};

pub use crate::space::container::{
    Compression, ContainerInfo, ContainerPolicy, ContainerReclaim, ContainerUpdate, ReclaimPolicy,
    ReclaimStats,
};
pub use crate::space::provisioning::Provisioning;
pub use crate::space::report::{
    ArrayHealth, ArrayState, Extent, ExtentState, SpaceReport, VolumeInfo,
};
pub use crate::versions::copy::CopyReport;
pub use crate::versions::snapshot::{GroupSnapshot, Snapshot, SnapshotInfo};
pub use catalog::VolumeRec;
pub use error::{EngineError, Result};

use crate::segment::log::{FileSegmentStore, SegmentStore};
use crate::space::data_bitmap::DataBitmap;
use crate::versions::range_map::RangeMap;

pub use units::{GRAIN_BYTES, MAX_VOLUME_BYTES, SECTOR_BYTES};

/// Where and how big the array is, and its space and deletion policies.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    /// Physical capacity the array may use in its data directory.
    pub capacity_bytes: u64,
    /// Physical use (percent of capacity) at which the soft-threshold event fires
    /// (SCSI turns it into UNIT ATTENTION 38h/07h).
    pub soft_threshold_percent: u8,
    /// How long a destroyed volume or snapshot stays recoverable before it is
    /// eradicated automatically.
    pub destroy_retention_s: u64,
    /// The clock rate control runs on (tests inject a simulated one).
    pub clock: Arc<dyn crate::space::rate::Clock>,
    /// Whether background work (reclaim, cleaning, sweeps) runs on its own
    /// thread; tests that step it by hand with [`Engine::background_step`] turn
    /// it off.
    pub background: bool,
    /// Most memory the metadata's page cache holds (taken as pages are read,
    /// not up front). Half of it at most buffers pages written since the last
    /// durable commit.
    pub metadata_cache_bytes: u64,
    /// Most block locations remembered for reads (see [`locations`]); 0 turns
    /// the cache off.
    pub block_location_entries: usize,
    /// Most point mappings remembered for small reads (see [`mapcache`]); 0
    /// turns the cache off.
    pub mapping_cache_entries: usize,
    /// Most grains of blocks read again and again kept decoded for reads (see
    /// [`hot`]); 0 turns the cache off.
    pub hot_grains: usize,
    /// When new data is compressed: on the write path, or left to the
    /// background reducer when the write path is short of CPU.
    pub reduction: ReductionMode,
    /// Segments and metadata somewhere other than `data_dir` (Ceph RADOS:
    /// docs/SCALE-OUT.md); `None` keeps them in `data_dir`.
    pub external_store: Option<ExternalStore>,
}

/// The segment log and the metadata database's storage, given by the caller.
#[derive(Clone)]
pub struct ExternalStore {
    pub segments: Arc<dyn SegmentStore>,
    /// Makes the metadata database's storage (called at each open).
    #[allow(clippy::type_complexity)]
    pub metadata: Arc<dyn Fn() -> std::io::Result<Box<dyn redb::StorageBackend>> + Send + Sync>,
    /// Where they are, for messages.
    pub description: String,
}

impl std::fmt::Debug for ExternalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ExternalStore({})", self.description)
    }
}

/// When the array compresses new data (pattern removal and deduplication are
/// always inline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReductionMode {
    /// Always on the write path, before the write is acknowledged (the
    /// default until adaptive reduction is measured against the peers).
    #[default]
    Inline,
    /// Small writes on the write path; large ones (where compression is
    /// the write path's largest cost) store raw grains, and the background
    /// reducer compresses them when the cores are free (see
    /// `reclaim::reducer`), within a bounded backlog.
    Adaptive,
    /// Always in the background (what tests use to exercise the reducer).
    Background,
}

impl EngineConfig {
    pub const DEFAULT_SOFT_THRESHOLD_PERCENT: u8 = 80;
    pub const DEFAULT_DESTROY_RETENTION_S: u64 = 24 * 60 * 60;
    /// Large enough for the metadata of a few million written grains (about
    /// 200 bytes each across mappings, blocks and the dedup index): a fully
    /// written 4 GiB volume's is 200-270 MB. With 256 MiB, reclaim walking a
    /// big unmapped volume evicted the pages a concurrent host workload was
    /// using, and that workload lost up to a tenth of its IOPS (seed 001
    /// benchmark, bench/RESULTS.md).
    pub const DEFAULT_METADATA_CACHE_BYTES: u64 = 1 << 30;
    /// 24 MB of memory at most (touched as it fills): the locations of the
    /// 4 GiB of data written last.
    pub const DEFAULT_BLOCK_LOCATION_ENTRIES: usize = 1 << 20;
    /// About 50 MB when full (24 bytes an entry, in a table of 2^21 slots):
    /// the mappings of 7 GiB of 4 KiB reads.
    pub const DEFAULT_MAPPING_CACHE_ENTRIES: usize = (1 << 21) / 8 * 7;
    /// 16 MiB of grains when full.
    pub const DEFAULT_HOT_GRAINS: usize = 4096;

    /// A configuration with the default policies.
    pub fn new(data_dir: impl Into<PathBuf>, capacity_bytes: u64) -> Self {
        EngineConfig {
            data_dir: data_dir.into(),
            capacity_bytes,
            soft_threshold_percent: Self::DEFAULT_SOFT_THRESHOLD_PERCENT,
            destroy_retention_s: Self::DEFAULT_DESTROY_RETENTION_S,
            clock: Arc::new(crate::space::rate::SystemClock::default()),
            background: true,
            metadata_cache_bytes: Self::DEFAULT_METADATA_CACHE_BYTES,
            block_location_entries: Self::DEFAULT_BLOCK_LOCATION_ENTRIES,
            mapping_cache_entries: Self::DEFAULT_MAPPING_CACHE_ENTRIES,
            hot_grains: Self::DEFAULT_HOT_GRAINS,
            reduction: ReductionMode::default(),
            external_store: None,
        }
    }
}

/// Counters for tests and metrics.
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Metadata rows inserted or removed by host-facing operations (not by the
    /// background reclaimer): the complexity tests count these.
    pub foreground_records_written: AtomicU64,
    /// Commits of the write batches' shared transaction (see [`pending`]).
    pub pending_commits: AtomicU64,
    pub reclaimed_mappings: AtomicU64,
    pub freed_segments: AtomicU64,
    /// Bytes of freed records punched out of segment files (fallocate).
    pub punched_bytes: AtomicU64,
    pub durable_commits: AtomicU64,
    pub checksum_errors: AtomicU64,
    /// Segment reads the filesystem failed (EIO and the like).
    pub read_errors: AtomicU64,
    /// Host writes committed, and the transactions that committed them (their
    /// ratio is the group-commit batch size).
    pub write_jobs: AtomicU64,
    pub write_batches: AtomicU64,
    /// Grains of host writes left uncompressed because the dedup index
    /// probably held them (see [`hints`]).
    pub hinted_duplicates: AtomicU64,
    /// Key-value operations (lookups, range scans and entries visited) done by
    /// reads: the snapshot-depth test compares these.
    pub read_kv_ops: AtomicU64,
    /// Segment reads made for host reads: one per record read alone, one per
    /// span of adjacent records (see `fill`). The span test counts these.
    pub record_reads: AtomicU64,
    /// Grains host reads took from the kept grains of blocks read again and
    /// again (see `hot`), with no segment read.
    pub hot_grain_reads: AtomicU64,
    /// Unmap requests (UNMAP, TRIM, WRITE SAME / WRITE ZEROES that may unmap)
    /// and the logical bytes they covered.
    pub unmap_commands: AtomicU64,
    pub unmapped_bytes: AtomicU64,
    /// Bytes hosts asked to write, and bytes appended to segments for them and for
    /// the cleaner: their ratio is the write amplification (metadata excluded).
    pub host_written_bytes: AtomicU64,
    pub media_written_bytes: AtomicU64,
    /// Segments the cleaner emptied, and the bytes it relocated to do so.
    pub cleaned_segments: AtomicU64,
    /// Victims host writers cleaned themselves because background cleaning fell
    /// behind (each one a write that waited on cleaning).
    pub writer_cleans: AtomicU64,
    pub relocated_bytes: AtomicU64,
    /// Record bytes the background reducer read and rewrote (raw ones).
    pub reduced_input_bytes: AtomicU64,
    /// Bytes of raw records waiting for the background reducer, as of the
    /// last commit (the writer state's figure, readable without its mutex).
    pub reduction_backlog_bytes: AtomicU64,
    /// Grains whose data bits the background job settled (reference ranges).
    pub bits_settled_grains: AtomicU64,
    /// Bumped whenever the set of live volumes changes (create, clone, destroy,
    /// recover): protocol layers compare it to know when to re-read the list.
    pub catalog_generation: AtomicU64,
    /// Times physical use crossed the soft threshold upwards.
    pub soft_threshold_events: AtomicU64,
    /// Writes refused for lack of space.
    pub no_space_errors: AtomicU64,
}

/// A volume as the engine keeps it in memory.
pub(crate) struct VolumeShared {
    pub id: crate::ids::VolumeId,
    pub name: String,
    pub created_unix_s: u64,
    pub provisioning: Provisioning,
    /// Set when destroyed (or eradicated): I/O through old handles fails.
    pub deleted: AtomicBool,
    /// Set under the writer mutex when eradicated: its records are no longer
    /// its own (doomed, or retained for its snapshots), though it stays listed
    /// among the destroyed volumes for a moment after.
    pub eradicated: AtomicBool,
    /// When it was destroyed, if it is in the recoverable destroyed state.
    pub destroyed_unix_s: Mutex<Option<u64>>,
    pub view: RwLock<VolumeView>,
    pub bitmap: Mutex<DataBitmap>,
    /// Seqs of the snapshots (named and pins) of this volume, ascending. Changed
    /// only under the writer mutex; the write path reads it there to decide which
    /// replaced versions a snapshot still needs.
    pub snapshot_seqs: Mutex<Vec<crate::ids::SnapshotSeq>>,
    /// Seq ([`crate::ids::SnapshotSeq`]) of the last committed change: a pin
    /// taken after it can be reused.
    pub last_change_seq: AtomicU64,
    pub container: Arc<crate::space::container::ContainerShared>,
    /// Grains whose point mapping is their current content (not shadowed by a
    /// newer range record): the volume's mappings beyond these are its reclaim
    /// backlog. Changed under the writer mutex.
    pub live_mapped: Mutex<DataBitmap>,
    pub reclaim: crate::space::container::ReclaimCounters,
    /// Where reclaim of the volume's first pending range record goes on.
    pub reclaim_cursor: Mutex<Option<crate::reclaim::reclaimer::RangeCursor>>,
    /// Grains this volume currently counts in its container's usage.
    pub counted_grains: AtomicU64,
}

/// What readers need to interpret a volume's mappings. The range map is shared
/// with the snapshots taken since it last changed (copy on write), which is what
/// makes a snapshot O(1).
pub(crate) struct VolumeView {
    pub size_bytes: u64,
    pub ranges: Arc<RangeMap>,
}

/// The array: volumes, the segment log and the metadata store.
pub struct Engine {
    config: EngineConfig,
    db: crate::meta::store::Kv,
    store: Arc<dyn SegmentStore>,
    catalog: crate::catalog::Catalog,
    clock: Arc<dyn crate::space::rate::Clock>,
    hosts: crate::reclaim::scheduler::HostActivity,
    space_watch: crate::space::watch::SpaceWatch,
    scheduler: crate::reclaim::scheduler::Scheduler,
    version_jobs: crate::versions::jobs::VersionJobs,
    committer: crate::write::committer::Committer,
    caches: crate::read::caches::ReadCaches,
    /// Held for reading from looking up a record to reading it; taken for
    /// writing once before freed records are cut out of their files, so no
    /// reader that could still see them is left.
    io_lock: RwLock<()>,
    pub stats: EngineStats,
    /// Host reads that failed, with where (see [`Engine::take_read_faults`]).
    read_faults: crate::integrity::faults::ReadFaults,
    scrubs: crate::integrity::scrub::Scrubs,
}

/// A handle for I/O on one volume. Cheap to clone.
#[derive(Clone)]
pub struct Volume {
    engine: Arc<Engine>,
    shared: Arc<VolumeShared>,
}

impl Engine {
    /// Opens (or creates) the array in `config.data_dir`, recovering from a crash if
    /// there was one, and starts the background reclaimer.
    pub fn open(config: EngineConfig) -> Result<Arc<Engine>> {
        let locations =
            crate::read::location_cache::BlockLocations::new(config.block_location_entries);
        let hot = crate::read::grain_cache::HotGrains::new(config.hot_grains);
        // The data directory and everything in it is the daemon's alone: the
        // directory is 0700 (which guards files an older version made 0644), and
        // every file is made 0600.
        crate::segment::log::create_private_dir(&config.data_dir)
            .map_err(|e| EngineError::io(format!("creating {}", config.data_dir.display()), e))?;
        let (store, metadata): (Arc<dyn SegmentStore>, _) = match &config.external_store {
            None => {
                let store = FileSegmentStore::open(&config.data_dir.join("segments"))
                    .map_err(|e| EngineError::io("opening the segment directory", e))?;
                let metadata_path = config.data_dir.join("metadata.redb");
                let (metadata, syncs) =
                    crate::meta::file::open(&metadata_path, config.metadata_cache_bytes)?;
                crate::segment::log::make_private_file(&metadata_path).map_err(|e| {
                    EngineError::io(format!("protecting {}", metadata_path.display()), e)
                })?;
                (Arc::new(store), (metadata, syncs))
            }
            Some(external) => {
                let backend = (external.metadata)()
                    .map_err(|e| EngineError::io("opening the metadata backend", e))?;
                let metadata =
                    crate::meta::file::open_backend(backend, config.metadata_cache_bytes)?;
                (external.segments.clone(), metadata)
            }
        };
        let (metadata, syncs) = metadata;
        let db = crate::meta::store::Kv::new(
            metadata,
            syncs,
            store.clone(),
            config.mapping_cache_entries,
        );
        crate::open::ensure_tables(&db)?;
        let containers = crate::space::container::load(&db, config.clock.now())?;
        let recovered = open::recover(&db, store.as_ref(), config.capacity_bytes, &containers)?;
        let engine = Arc::new(Engine {
            clock: config.clock.clone(),
            catalog: crate::catalog::Catalog {
                volumes: RwLock::new(recovered.volumes),
                containers: RwLock::new(containers),
                container_admin: Mutex::new(()),
                destroyed: RwLock::new(recovered.destroyed),
                retained: Mutex::new(recovered.retained),
                snapshots: RwLock::new(recovered.snapshots),
                pin_lock: Mutex::new(()),
            },
            hosts: crate::reclaim::scheduler::HostActivity {
                foreground_inflight: AtomicU64::new(0),
                foreground_ops: AtomicU64::new(0),
                foreground_seen: Mutex::new((0, std::time::Instant::now())),
            },
            space_watch: crate::space::watch::SpaceWatch {
                free_bytes_hint: AtomicU64::new(0),
                above_soft_threshold: AtomicBool::new(false),
            },
            scheduler: crate::reclaim::scheduler::Scheduler {
                reclaim_cursor: AtomicU64::new(0),
                reclaim_token_wait: Mutex::new(None),
                reclaim_wake: (Mutex::new(false), Condvar::new()),
                shutdown: AtomicBool::new(false),
                reclaimer: Mutex::new(None),
                cleaner: Mutex::new(()),
            },
            version_jobs: crate::versions::jobs::VersionJobs {
                sweep_pending: Mutex::new(recovered.sweep_pending),
                bits_pending: Mutex::new(std::collections::VecDeque::new()),
                bits_in_progress: Mutex::new(None),
            },
            committer: crate::write::committer::Committer {
                dedup_hints: recovered.writer.hints.clone(),
                writer: Mutex::new(recovered.writer),
                write_queue: crate::write::group_commit::WriteQueue::default(),
                pending: crate::write::uncommitted::PendingWrites::default(),
                fenced: Mutex::new(None),
                flush_lock: Mutex::new(()),
                files_lock: Mutex::new(()),
                deferred_holes: Mutex::new(Default::default()),
                last_durable: Mutex::new(std::time::Instant::now()),
                commit_count: AtomicU64::new(0),
                durable_count: AtomicU64::new(0),
            },
            caches: crate::read::caches::ReadCaches { locations, hot },
            config,
            db,
            store: crate::segment::fault_injection::wrap(store),
            io_lock: RwLock::new(()),
            stats: EngineStats::default(),
            read_faults: crate::integrity::faults::ReadFaults::default(),
            scrubs: crate::integrity::scrub::Scrubs::default(),
        });
        {
            let ws = engine.committer.writer.lock();
            engine.space_watch.free_bytes_hint.store(
                ws.capacity_bytes.saturating_sub(ws.used_bytes()),
                Ordering::Relaxed,
            );
        }
        engine.queue_reference_bits();
        if engine.config.background {
            let handle = crate::reclaim::reclaimer::start(Arc::downgrade(&engine));
            *engine.scheduler.reclaimer.lock() = Some(handle);
        }
        Ok(engine)
    }

    /// Flushes, stops the reclaimer and waits for it.
    pub fn close(&self) -> Result<()> {
        self.scheduler.shutdown.store(true, Ordering::SeqCst);
        self.scheduler.wake();
        if let Some(handle) = self.scheduler.reclaimer.lock().take() {
            let _ = handle.join();
        }
        self.flush_freeing()
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.config.capacity_bytes
    }

    pub fn data_dir(&self) -> &std::path::Path {
        &self.config.data_dir
    }

    pub(crate) fn shared_volume(&self, name: &str) -> Result<Arc<VolumeShared>> {
        self.catalog
            .volumes
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| EngineError::VolumeNotFound(name.to_string()))
    }

    pub fn open_volume(self: &Arc<Self>, name: &str) -> Result<Volume> {
        let shared = self.shared_volume(name)?;
        Ok(Volume {
            engine: self.clone(),
            shared,
        })
    }

    fn count_unmap(&self, vol: &VolumeShared, length_bytes: u64) {
        self.stats.unmap_commands.fetch_add(1, Ordering::Relaxed);
        self.stats
            .unmapped_bytes
            .fetch_add(length_bytes, Ordering::Relaxed);
        vol.reclaim.count_unmap(length_bytes);
        vol.container.counters.count_unmap(length_bytes);
    }

    pub(crate) fn begin_read(&self) -> Result<redb::ReadTransaction> {
        self.db.begin_read()
    }

    /// The read view reads share until the next commit (see `kv`).
    pub(crate) fn read_view(&self) -> Result<Arc<crate::meta::store::ReadView>> {
        self.db.read_view()
    }
}

impl Volume {
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub(crate) fn shared(&self) -> &Arc<VolumeShared> {
        &self.shared
    }

    /// Stable id, unique in the array (never reused).
    pub fn id(&self) -> u64 {
        self.shared.id.get()
    }

    pub fn provisioning(&self) -> Provisioning {
        self.shared.provisioning
    }

    fn live(&self) -> Result<()> {
        self.engine.committer.check_fence()?;
        self.shared.ensure_live()
    }

    /// Current size (volumes can be resized while open). Fails if deleted.
    pub fn size_bytes(&self) -> Result<u64> {
        self.live()?;
        Ok(self.shared.view.read().size_bytes)
    }

    /// Reads `buf.len()` bytes at any byte offset. Holes read as zeroes.
    pub fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<()> {
        self.live()?;
        let _busy = self.engine.hosts.begin();
        self.engine.read(&self.shared, offset_bytes, buf)
    }

    /// [`Volume::read`], unless it would have to wait for the disk: `Ok(false)`
    /// then, with `buf` holding nothing in particular. For transports that
    /// run small reads on their own task and hand the rest to threads that
    /// may block (a read from the page cache takes microseconds, one from a
    /// disk may take milliseconds, and meanwhile the task would read no
    /// further requests).
    pub fn read_from_memory(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<bool> {
        from_memory(|| self.read(offset_bytes, buf))
    }

    /// Writes at any byte offset (sub-grain writes read-modify-write the grain).
    pub fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<()> {
        self.write_from(offset_bytes, data, None)
    }

    /// [`Volume::write`] of data held in a shared buffer: the grains stored
    /// raw keep slices of it instead of copies (the buffer lives on until the
    /// last of them is written to its segment).
    pub fn write_shared(&self, offset_bytes: u64, data: &bytes::Bytes) -> Result<()> {
        self.write_from(offset_bytes, data, Some(data))
    }

    fn write_from(
        &self,
        offset_bytes: u64,
        data: &[u8],
        shared: Option<&bytes::Bytes>,
    ) -> Result<()> {
        self.live()?;
        let _busy = self.engine.hosts.begin();
        self.engine
            .write(&self.shared, offset_bytes, data, shared)?;
        self.engine
            .stats
            .host_written_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Whether a write of `length_bytes` will return without cleaning segments
    /// first (see `make_room`): it then waits at most for the writer mutex,
    /// which write batches hold for microseconds and a durable commit for
    /// milliseconds. Transports use it to run small writes on their own task.
    pub fn write_is_quick(&self, length_bytes: u64) -> bool {
        self.engine.committer.check_fence().is_ok() && !self.engine.write_may_clean(length_bytes)
    }

    /// Whether a range copy into this volume, from `source_offset_bytes` of a
    /// volume to `destination_offset_bytes` of this one, changes metadata only
    /// (both offsets lie alike within a grain, so at most the partial grains
    /// at its two edges move as data) and returns as quickly as a small write.
    pub fn copy_is_quick(&self, source_offset_bytes: u64, destination_offset_bytes: u64) -> bool {
        source_offset_bytes % GRAIN_BYTES == destination_offset_bytes % GRAIN_BYTES
            && self.write_is_quick(2 * GRAIN_BYTES)
    }

    /// Deallocates a range; it reads back as zeroes. Metadata-only.
    pub fn unmap(&self, offset_bytes: u64, length_bytes: u64) -> Result<()> {
        self.live()?;
        self.engine.write_range(
            &self.shared,
            offset_bytes,
            length_bytes,
            crate::meta::schema::RangeKind::Hole,
        )?;
        self.engine.count_unmap(&self.shared, length_bytes);
        Ok(())
    }

    /// Zeroes a range. With `allow_unmap` the range becomes a hole, otherwise it
    /// stays allocated as zeroes. Metadata-only either way.
    pub fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        allow_unmap: bool,
    ) -> Result<()> {
        self.live()?;
        let kind = if allow_unmap {
            self.engine.count_unmap(&self.shared, length_bytes);
            crate::meta::schema::RangeKind::Hole
        } else {
            crate::meta::schema::RangeKind::Pattern(0)
        };
        self.engine
            .write_range(&self.shared, offset_bytes, length_bytes, kind)
    }

    /// Same as [`Engine::flush`]: durability is array-wide (NBD multi-conn safe).
    pub fn flush(&self) -> Result<()> {
        self.live()?;
        self.engine.flush()
    }

    /// The states of a prefix of `[offset, offset+length)` as consecutive extents;
    /// the prefix is never empty and is the whole range unless the range holds
    /// more mappings than one call examines.
    pub fn extents(&self, offset_bytes: u64, length_bytes: u64) -> Result<Vec<Extent>> {
        self.live()?;
        self.engine
            .extents(&self.shared, offset_bytes, length_bytes)
    }

    /// The byte runs of `[offset, offset+length)` that hold data, from the
    /// volume's data bits in memory: at most `max_runs`, whole up to
    /// `reached_bytes`. Never misses data; may name as data what a clone or
    /// copy still settling references (see [`VolumeInfo::written_settling`]).
    /// Costs what is written, not what is provisioned.
    pub fn data_runs(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        max_runs: usize,
    ) -> Result<DataRuns> {
        self.live()?;
        let size_bytes = self.size_bytes()?;
        let end_bytes = offset_bytes
            .checked_add(length_bytes)
            .filter(|&end| end <= size_bytes)
            .ok_or_else(|| {
                EngineError::InvalidArgument(format!(
                    "range {offset_bytes}+{length_bytes} is past the volume's end ({size_bytes})"
                ))
            })?;
        let first = ids::GrainIndex::new(offset_bytes / GRAIN_BYTES);
        let end = ids::GrainIndex::new(end_bytes.div_ceil(GRAIN_BYTES));
        let found = self.shared.bitmap.lock().set_runs(first, end, max_runs);
        let runs = found
            .runs
            .iter()
            .map(|&(a, b)| {
                let from = (a * GRAIN_BYTES).max(offset_bytes);
                let to = (b * GRAIN_BYTES).min(end_bytes);
                (from, to - from)
            })
            .collect();
        Ok(DataRuns {
            runs,
            reached_bytes: (found.reached.get() * GRAIN_BYTES).min(end_bytes),
        })
    }

    /// The offset of the first grain at or after `from_bytes` that holds data
    /// (as [`Volume::data_runs`] sees it), if any.
    pub fn next_data_offset(&self, from_bytes: u64) -> Result<Option<u64>> {
        self.live()?;
        let from = ids::GrainIndex::new(from_bytes / GRAIN_BYTES);
        let next = self.shared.bitmap.lock().next_set(from);
        Ok(next.map(|grain| (grain.get() * GRAIN_BYTES).max(from_bytes)))
    }
}

/// What [`Volume::data_runs`] answers: (offset, length) byte runs holding data,
/// complete up to `reached_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRuns {
    pub runs: Vec<(u64, u64)>,
    pub reached_bytes: u64,
}

/// Host I/O in progress (see [`Engine::foreground`]).
impl Drop for Engine {
    fn drop(&mut self) {
        self.scheduler.shutdown.store(true, Ordering::SeqCst);
    }
}

/// Runs `read` with segment reads that refuse to wait for the disk: `true`
/// when it read everything from memory, `false` when it gave up (see
/// [`Volume::read_from_memory`]).
pub(crate) fn from_memory(read: impl FnOnce() -> Result<()>) -> Result<bool> {
    match crate::segment::log::without_waiting(read) {
        Ok(()) => Ok(true),
        Err(EngineError::WouldBlock(_)) => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::sync_points::{self, Point};
    use crate::testing::test_data::{block_rows, data_dir, quiet_engine, unique_bytes};
    use crate::{EngineError, GRAIN_BYTES};

    /// A dedup hit on a block whose reference count is at its limit stores
    /// the grain in a block of its own. It once failed the write with an
    /// error inside the batch's shared transaction, which fences the array.
    #[test]
    fn a_dedup_hit_on_a_block_at_its_reference_limit_gets_a_new_block() {
        let dir = data_dir("refcount-limit");
        let engine = quiet_engine(dir.path(), 1 << 30);
        engine.create_volume("v", 64 * GRAIN_BYTES).unwrap();
        let volume = engine.open_volume("v").unwrap();
        let grain = unique_bytes(GRAIN_BYTES as usize, 7);
        volume.write(0, &grain).unwrap();
        engine.flush().unwrap();
        let rows = block_rows(&engine);
        assert_eq!(rows.len(), 1);
        let (id, mut rec) = rows[0];
        rec.refcount = u32::MAX;
        {
            let _writer = engine.committer.writer.lock();
            let txn = engine.db.begin_write().unwrap();
            txn.open_table(crate::meta::schema::BLOCKS)
                .unwrap()
                .insert(id, &rec.encode()[..])
                .unwrap();
            engine
                .db
                .commit(txn, crate::meta::mapping_cache::ChangedMappings::NONE)
                .unwrap();
        }

        volume.write(GRAIN_BYTES, &grain).unwrap();
        engine.flush().unwrap();

        let rows = block_rows(&engine);
        assert_eq!(rows.len(), 2, "the second copy has a block of its own");
        assert_eq!((rows[0].1.refcount, rows[1].1.refcount), (u32::MAX, 1));
        let mut back = vec![0u8; 2 * GRAIN_BYTES as usize];
        volume.read(0, &mut back).unwrap();
        assert!(back.chunks(GRAIN_BYTES as usize).all(|c| c == grain));
        // A third copy finds the indexed block still full: a third block.
        volume.write(2 * GRAIN_BYTES, &grain).unwrap();
        engine.flush().unwrap();
        assert_eq!(block_rows(&engine).len(), 3);
    }

    /// A write from a shared buffer stores what a write from a slice stores:
    /// whole grains raw (slices of the buffer), compressed, duplicate and
    /// partial at both ends; it reads back before and after a restart, and
    /// the buffer's owner may drop it as soon as the write returns.
    #[test]
    fn a_write_from_a_shared_buffer_reads_back_as_written() {
        let dir = data_dir("write-shared");
        let grain = GRAIN_BYTES as usize;
        let mut data = unique_bytes(9 * grain, 4);
        data[3 * grain..4 * grain].fill(7);
        data[3 * grain + 100] = 8; // compresses
        let copied = data[..grain].to_vec();
        data[5 * grain..6 * grain].copy_from_slice(&copied); // a duplicate
        let offset_bytes = GRAIN_BYTES + 512; // partial grains at both ends
        let mut expected = vec![0u8; 12 * grain];
        expected[offset_bytes as usize..][..data.len()].copy_from_slice(&data);
        {
            let engine = quiet_engine(dir.path(), 1 << 30);
            engine.create_volume("v", 12 * GRAIN_BYTES).unwrap();
            let volume = engine.open_volume("v").unwrap();
            let shared = bytes::Bytes::from(data);
            volume.write_shared(offset_bytes, &shared).unwrap();
            drop(shared);
            let mut back = vec![0u8; expected.len()];
            volume.read(0, &mut back).unwrap();
            assert!(back == expected, "reads back before the flush");
            engine.flush().unwrap();
            engine.check_consistency().unwrap();
        }
        let engine = quiet_engine(dir.path(), 1 << 30);
        let mut back = vec![0u8; expected.len()];
        engine.open_volume("v").unwrap().read(0, &mut back).unwrap();
        assert!(back == expected, "reads back after a restart");
    }

    /// An engine with volume `v` and one grain written to it, not flushed.
    fn engine_with_one_write(
        name: &str,
    ) -> (
        tempfile::TempDir,
        std::sync::Arc<crate::Engine>,
        crate::Volume,
    ) {
        let dir = data_dir(name);
        let engine = quiet_engine(dir.path(), 1 << 30);
        engine.create_volume("v", 64 * GRAIN_BYTES).unwrap();
        let volume = engine.open_volume("v").unwrap();
        volume
            .write(0, &unique_bytes(GRAIN_BYTES as usize, 1))
            .unwrap();
        (dir, engine, volume)
    }

    /// A flush whose durable metadata commit fails fences the array, like a
    /// failed sync. (Before, the next flush retried with a writer state that
    /// had already handed its changed rows to the failed transaction.)
    #[test]
    fn a_failed_durable_commit_fails_every_later_flush() {
        let (_dir, engine, _volume) = engine_with_one_write("durable-commit-failure");
        // The first write-back is the batches' open transaction's commit,
        // the second the durable commit's.
        sync_points::fail_after(Point::WriteBack, 1);

        assert!(engine.flush().is_err(), "the failed commit is reported");

        let again = engine.flush();
        assert!(matches!(again, Err(EngineError::Fenced(_))), "{again:?}");
    }

    /// A flush whose segment sync fails fences the array: every later flush
    /// fails too, rather than committing metadata that names records never
    /// synced and reporting success. (Before the fix the failed segment had
    /// left the dirty list, and the next flush succeeded without syncing it.)
    #[test]
    fn a_failed_segment_sync_fails_every_later_flush() {
        let (_dir, engine, volume) = engine_with_one_write("sync-failure");
        // The first sync is the pass before the writer mutex, the second
        // the one under it, after which the segment is off the dirty list.
        sync_points::fail_after(Point::SegmentSync, 1);

        assert!(engine.flush().is_err(), "the failed sync is reported");

        let again = engine.flush();
        assert!(matches!(again, Err(EngineError::Fenced(_))), "{again:?}");
        let write = volume.write(GRAIN_BYTES, &unique_bytes(GRAIN_BYTES as usize, 2));
        assert!(write.is_err(), "no more writes until a restart");
    }
}
