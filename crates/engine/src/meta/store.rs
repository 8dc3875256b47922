//! The metadata store (redb) as the engine uses it: every commit goes through
//! [`Kv::commit`], and reads share one read view until the next commit.
//!
//! Why share: a 4 KiB read spent about 5% of the daemon's CPU beginning a read
//! transaction (redb registers each one) and opening the mapping table from its
//! root. Between two commits every read sees the same state, so reads share one
//! view; a commit marks it stale and the next read takes a fresh one.
//!
//! A shared view is exactly as stale as a read transaction begun just before
//! the latest commit, never more: the committing thread bumps the generation as
//! soon as the commit returns, before it does anything that relies on readers
//! seeing the new state (forgetting pending writes, freeing segments), so a
//! reader that sees such an effect sees the bump too. A view is labelled with
//! the generation read *before* its transaction began, so a view begun across a
//! commit is never taken for current. Such a view may see the new state under
//! the old label, so the mapping cache, which answers by label, is closed to
//! every reader from before the transaction commits until the bump. A stale
//! view is dropped from the slot at the commit and its transaction ends with
//! its last reader: no read
//! transaction outlives the reads using it, and redb can reuse freed pages.
//!
//! `clippy.toml` forbids `redb::WriteTransaction::commit` outside this module.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use redb::{ReadOnlyTable, ReadTransaction, ReadableDatabase, WriteTransaction};

use crate::meta::mapping_cache::{ChangedMappings, MapCache};
use crate::meta::schema::{self, kv_error};
use crate::meta::sync_pipeline::SyncPipeline;
use crate::segment::log::SegmentStore;
use crate::Result;

/// The mapping table as reads see it.
pub(crate) type MapsTable = ReadOnlyTable<(u64, u64), &'static [u8]>;

pub(crate) struct Kv {
    /// The view reads share, if one was taken since the last commit (declared
    /// first: dropped before the database).
    shared: Mutex<Option<Arc<ReadView>>>,
    /// Commits so far (bumped after each, failed ones too).
    generation: AtomicU64,
    db: redb::Database,
    /// Written back before every commit (see [`crate::segment::write_buffer`]).
    store: Arc<dyn SegmentStore>,
    /// Point mappings of the latest commit, for reads (see [`crate::meta::mapping_cache`]).
    maps_cache: MapCache,
    /// Under `db`: durable commits' syncs, deferred and finished by the caller.
    syncs: Arc<SyncPipeline>,
}

/// A read transaction with its mapping table open, shared by reads.
pub(crate) struct ReadView {
    generation: u64,
    txn: ReadTransaction,
    maps: MapsTable,
}

impl ReadView {
    pub fn txn(&self) -> &ReadTransaction {
        &self.txn
    }

    pub fn maps(&self) -> &MapsTable {
        &self.maps
    }

    /// The commits before this view's transaction began (it may see more).
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl Kv {
    /// `cached_mappings`: most point mappings kept for reads (0: none).
    /// `syncs`: the pipeline `db` was opened on.
    pub fn new(
        db: redb::Database,
        syncs: Arc<SyncPipeline>,
        store: Arc<dyn SegmentStore>,
        cached_mappings: usize,
    ) -> Self {
        Kv {
            shared: Mutex::new(None),
            generation: AtomicU64::new(0),
            db,
            store,
            maps_cache: MapCache::new(cached_mappings),
            syncs,
        }
    }

    /// Commits a durable `txn` without waiting for its sync: visible at
    /// once, durable after [`Kv::finish_syncs`], which the caller must call
    /// (after the segment bytes the commit names are synced) before it
    /// reports anything durable, and before its next durable commit.
    pub fn commit_deferring_sync(
        &self,
        txn: WriteTransaction,
        changed: ChangedMappings,
    ) -> Result<()> {
        let _deferred = self.syncs.defer_syncs();
        self.commit(txn, changed)
    }

    /// Makes the commits whose syncs were deferred durable, in order.
    pub fn finish_syncs(&self) -> Result<()> {
        self.syncs
            .finish()
            .map_err(|e| crate::EngineError::io("syncing the metadata", e))
    }

    /// The point mappings of the latest commit that reads have found.
    pub fn maps_cache(&self) -> &MapCache {
        &self.maps_cache
    }

    /// A read transaction of the caller's own (scans, checks, background jobs).
    pub fn begin_read(&self) -> Result<ReadTransaction> {
        self.db.begin_read().map_err(kv_error)
    }

    pub fn begin_write(&self) -> Result<WriteTransaction> {
        self.db.begin_write().map_err(kv_error)
    }

    /// Commits `txn`, after writing back the segment store's tails: metadata
    /// must never name record bytes held only in this process (a later durable
    /// commit would make it durable; a crash would lose the bytes). If they
    /// cannot be written, `txn` is dropped uncommitted. Shared read views
    /// taken before are stale from here on. `changed`: every point-mapping
    /// key `txn` wrote (see [`crate::meta::mapping_cache`]); only the transactions'
    /// [`crate::write::transaction::Tables`] write the mapping table, and they keep the list.
    #[allow(clippy::disallowed_methods)] // the one place that commits
    pub fn commit(&self, txn: WriteTransaction, changed: ChangedMappings) -> Result<()> {
        // The cache answers no reader from before the transaction commits
        // until the generation moves on (see `MapCache::begin_commit`).
        let cache_commit = self.maps_cache.begin_commit();
        let written =
            if crate::testing::sync_points::fails(crate::testing::sync_points::Point::WriteBack) {
                Err(std::io::Error::from_raw_os_error(libc::EIO))
            } else {
                self.store.write_back()
            };
        let committed = match written {
            Ok(()) => txn.commit().map_err(kv_error),
            Err(e) => Err(crate::segment::fs_space::segment_error(
                "writing segment tails before a commit".into(),
                e,
            )),
        };
        crate::testing::sync_points::at(crate::testing::sync_points::Point::KvCommitted);
        // The cache moves to the next generation before any reader can
        // take a view labelled with it.
        self.maps_cache
            .committed(cache_commit, changed, committed.is_ok(), || {
                self.generation.fetch_add(1, Ordering::SeqCst) + 1
            });
        self.shared.lock().take();
        committed
    }

    /// The read view of the latest commit, shared with other reads.
    pub fn read_view(&self) -> Result<Arc<ReadView>> {
        let generation = self.generation.load(Ordering::SeqCst);
        if let Some(view) = self.shared.lock().as_ref() {
            if view.generation == generation {
                return Ok(view.clone());
            }
        }
        let txn = self.begin_read()?;
        let maps = txn.open_table(schema::MAPPINGS).map_err(kv_error)?;
        let view = Arc::new(ReadView {
            generation,
            txn,
            maps,
        });
        let mut slot = self.shared.lock();
        // Kept only if no commit came since the generation was read.
        if self.generation.load(Ordering::SeqCst) == generation {
            *slot = Some(view.clone());
        }
        Ok(view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{BlockId, GrainIndex, VolumeId};
    use crate::meta::schema::MapValue;

    fn kv() -> (tempfile::TempDir, Kv) {
        let dir = crate::testing::test_data::data_dir("kv");
        let (db, syncs) = crate::meta::file::open(&dir.path().join("meta.redb"), 1 << 20).unwrap();
        let store =
            crate::segment::log::FileSegmentStore::open(&dir.path().join("segments")).unwrap();
        let kv = Kv::new(db, syncs, Arc::new(store), 0);
        let txn = kv.begin_write().unwrap();
        txn.open_table(schema::MAPPINGS).unwrap();
        kv.commit(txn, ChangedMappings::Everything).unwrap();
        (dir, kv)
    }

    fn put(kv: &Kv, grain: GrainIndex, seq: u64) {
        let txn = kv.begin_write().unwrap();
        {
            let mut maps = txn.open_table(schema::MAPPINGS).unwrap();
            let value = MapValue {
                target: crate::meta::schema::GrainTarget::Pattern(seq),
                seq: crate::ids::SnapshotSeq::new(seq),
            };
            crate::meta::point_rows::set(&mut maps, VolumeId::new(1), grain, value).unwrap();
        }
        kv.commit(txn, ChangedMappings::Everything).unwrap();
    }

    fn seq_of(view: &ReadView, grain: GrainIndex) -> Option<u64> {
        let found = crate::meta::point_rows::range(view.maps(), VolumeId::new(1), grain, grain + 1)
            .unwrap()
            .next()?;
        Some(found.unwrap().2.seq.get())
    }

    /// A read whose view is taken as a transaction commits (labelled with the
    /// generation before, seeing the state after) never mixes the cache's
    /// mappings of the state before with the blocks of the state after.
    /// (Before the fix the cache still answered for the old generation there:
    /// the read was given a block the commit had freed, and failed with
    /// "block … is mapped but missing".)
    #[test]
    fn a_read_as_a_commit_lands_never_finds_a_freed_block_through_the_cache() {
        use crate::meta::schema::GrainTarget;
        use crate::testing::sync_points::{self, Point};
        use crate::testing::test_data::{
            block_rows, data_dir, quiet_engine_reading_segments, unique_bytes,
        };
        use crate::GRAIN_BYTES;

        let dir = data_dir("cache-commit-race");
        let engine = quiet_engine_reading_segments(dir.path(), 1 << 30);
        engine.create_volume("v", 64 * GRAIN_BYTES).unwrap();
        let volume = engine.open_volume("v").unwrap();
        let grain = GRAIN_BYTES as usize;
        volume.write(0, &unique_bytes(grain, 1)).unwrap();
        engine.flush().unwrap();
        let old_block = block_rows(&engine)[0].0;
        let mut read = vec![0u8; grain];
        volume.read(0, &mut read).unwrap();
        // A commit after: the shared view goes, the cache keeps grain 0.
        volume
            .write(5 * GRAIN_BYTES, &unique_bytes(grain, 2))
            .unwrap();
        engine.flush().unwrap();
        engine.caches.locations.forget(BlockId::new(old_block));
        let reader = volume.clone();
        sync_points::set(Point::KvCommitted, move || {
            let mut read = vec![0u8; grain];
            reader.read(0, &mut read).unwrap();
        });

        let id = engine.shared_volume("v").unwrap().id;
        let mut ws = engine.committer.writer.lock();
        engine
            .transact(&mut ws, true, |st, t, _| {
                let value = MapValue {
                    seq: st.take_seq(),
                    target: GrainTarget::Pattern(7),
                };
                st.set_mapping(t, id, GrainIndex::new(0), value, &[])
            })
            .unwrap();
        drop(ws);

        assert!(
            block_rows(&engine).iter().all(|(id, _)| *id != old_block),
            "the commit freed the old block"
        );
        volume.read(0, &mut read).unwrap();
        assert!(read.chunks(8).all(|word| word == 7u64.to_le_bytes()));
        engine.check_consistency().unwrap();
    }

    /// Reads between two commits share one view; a commit makes the next read
    /// take a fresh one that sees it, while a view already held keeps its state.
    #[test]
    fn a_commit_ends_the_shared_view() {
        let (_dir, kv) = kv();
        let grain = GrainIndex::new(7);
        put(&kv, grain, 1);
        let first = kv.read_view().unwrap();
        let again = kv.read_view().unwrap();
        assert!(Arc::ptr_eq(&first, &again), "shared between commits");
        assert_eq!(seq_of(&first, grain), Some(1));
        put(&kv, grain, 2);
        let after = kv.read_view().unwrap();
        assert!(
            !Arc::ptr_eq(&first, &after),
            "a fresh view after the commit"
        );
        assert_eq!(
            seq_of(&after, grain),
            Some(2),
            "the fresh view sees the commit"
        );
        assert_eq!(
            seq_of(&first, grain),
            Some(1),
            "a held view keeps its state"
        );
    }
}
