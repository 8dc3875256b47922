//! The background reducer: compresses the grains that host writes stored raw
//! when the write path was short of CPU (`ReductionMode`, and
//! `segment::log::FLAG_REDUCE_LATER` on their records), reaching the footprint
//! inline compression gives.
//!
//! A step takes the oldest waiting blocks, reads and verifies their records
//! without the writer mutex, compresses them with the codec their flag names,
//! and rewrites each into the cleaner's stream in one transaction: one block
//! row changes (place, length, flags, checksum), no mapping does. A block
//! that moved or went meanwhile is left for the next step or gone from the
//! backlog with its row. The raw record becomes stale space: punched after the
//! next durable commit, and its segment cleaned or freed by the usual rules.
//! What a crash interrupts is still flagged in the block table, and the
//! backlog is rebuilt from it at open.

use std::sync::atomic::Ordering;

use redb::ReadableTable;

use crate::ids::BlockId;
use crate::meta::schema::{kv_error, BlockRec};
use crate::segment::log;
use crate::write::classify::{self, Codec, DataGrain, GrainContent};
use crate::{Engine, Result, GRAIN_BYTES};

/// Blocks reduced per step (each step holds the writer mutex twice, briefly).
const BATCH_BLOCKS: usize = 256;

/// One waiting block, read and reduced.
struct Reduced {
    id: BlockId,
    /// The row as it was read: the rewrite happens only if it is unchanged.
    rec: BlockRec,
    grain: DataGrain,
}

impl Engine {
    /// Reduces one batch of the blocks waiting for it; false when none wait
    /// (or there is no room to write the reduced records yet).
    pub(crate) fn reduce_step(&self) -> Result<bool> {
        let (waiting, io) = {
            let mut ws = self.committer.writer.lock();
            let ids: Vec<BlockId> = ws
                .reduction_backlog
                .keys()
                .take(BATCH_BLOCKS)
                .copied()
                .collect();
            if ids.is_empty() {
                return Ok(false);
            }
            // Read in the open transaction (which may hold the newest rows),
            // changing nothing. A waiting block always has its row; were one
            // missing, it is passed over here rather than failing the
            // transaction (which would fence the array).
            let rows = self.transact_deferred(&mut ws, 0, false, |_, t, _| {
                let mut rows = Vec::with_capacity(ids.len());
                for &id in &ids {
                    let Some(value) = t.blocks.get(id.get()).map_err(kv_error)? else {
                        debug_assert!(false, "waiting block {id} has no row");
                        continue;
                    };
                    rows.push((id, BlockRec::decode(value.value())?));
                }
                Ok(rows)
            })?;
            // Before the mutex goes: no segment holding a waiting record can
            // be removed until the reads below are done.
            (rows, self.io_lock.read())
        };
        let mut reduced = Vec::with_capacity(waiting.len());
        let mut damaged = Vec::new();
        let mut record = Vec::new();
        let mut grain = vec![0u8; GRAIN_BYTES as usize];
        for (id, rec) in waiting {
            match self.read_record(id, rec, &mut record, &mut grain) {
                Ok(()) => reduced.push(Reduced {
                    id,
                    rec,
                    grain: reduce(&grain, rec.flags),
                }),
                Err(error) => {
                    tracing::error!("reducer: block {id} left raw: {error}");
                    self.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
                    damaged.push(id);
                }
            }
        }
        drop(io);
        let output_bytes: u64 = reduced
            .iter()
            .map(|r| (log::RECORD_HEADER_BYTES + r.grain.payload.len()) as u64)
            .sum();
        let mut ws = self.committer.writer.lock();
        // A damaged record stays where it is (scrub reports it, a host read
        // fails cleanly); the reducer stops trying it until the next open.
        for id in damaged {
            if let Some(bytes) = ws.reduction_backlog.remove(&id) {
                ws.reduction_backlog_bytes -= u64::from(bytes);
            }
        }
        let fits = ws.used_bytes() + output_bytes <= ws.capacity_bytes
            && crate::segment::fs_space::check_data(self.store.as_ref(), output_bytes).is_ok();
        if !fits {
            return Ok(false);
        }
        let grains = reduced.len() as u64;
        let input_bytes = self.transact_deferred(&mut ws, grains, false, |st, t, ws| {
            for r in &reduced {
                let Some(value) = t.blocks.get(r.id.get()).map_err(kv_error)? else {
                    continue; // freed meanwhile: gone from the backlog with its row
                };
                let now = BlockRec::decode(value.value())?;
                drop(value);
                let unchanged = now.segment == r.rec.segment
                    && now.offset_bytes == r.rec.offset_bytes
                    && now.flags == r.rec.flags;
                if unchanged {
                    st.rewrite_reduced(ws, t, r.id, now, &r.grain)?;
                }
            }
            Ok(st.reduced_bytes)
        })?;
        self.commit_pending_if_full(&mut ws)?;
        drop(ws);
        for r in &reduced {
            self.caches.locations.forget(r.id);
        }
        self.stats
            .reduced_input_bytes
            .fetch_add(input_bytes, Ordering::Relaxed);
        Ok(true)
    }
}

/// The grain of a record flagged `flags`, encoded as inline reduction would
/// have stored it: compressed with the codec the flag names when that saves
/// enough, else raw.
fn reduce(grain: &[u8], flags: u16) -> DataGrain {
    let compression = if flags & log::FLAG_REDUCE_ZSTD != 0 {
        crate::Compression::Zstd
    } else {
        crate::Compression::Lz4
    };
    match classify::classify_with(grain, compression) {
        GrainContent::Data(data) => data,
        // Inline pattern removal kept patterns out of the backlog; were one
        // there, it is stored as the raw grain it is.
        GrainContent::Pattern(_) => DataGrain {
            fingerprint: classify::fingerprint(grain),
            payload: bytes::Bytes::copy_from_slice(grain),
            payload_crc: log::payload_crc(grain),
            codec: Codec::Raw,
            deferred: None,
            background: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::test_data::{block_rows, data_dir, unique_bytes};
    use crate::{Engine, EngineConfig, ReductionMode, GRAIN_BYTES};

    const CAPACITY_BYTES: u64 = 1 << 30;
    const DATA_BYTES: usize = 4 << 20;

    fn open(dir: &std::path::Path, reduction: ReductionMode) -> std::sync::Arc<Engine> {
        let mut config = EngineConfig::new(dir, CAPACITY_BYTES);
        config.background = false;
        config.hot_grains = 0;
        config.reduction = reduction;
        Engine::open(config).unwrap()
    }

    /// Grains that compress about 2:1, each different, and some repeated.
    fn data() -> Vec<u8> {
        let mut data = unique_bytes(DATA_BYTES, 7);
        for (g, grain) in data.chunks_mut(GRAIN_BYTES as usize).enumerate() {
            grain[2048..].fill((g % 251) as u8);
        }
        let (head, tail) = data.split_at_mut(DATA_BYTES / 2);
        tail[..1 << 20].copy_from_slice(&head[..1 << 20]);
        data
    }

    fn write_and_flush(engine: &std::sync::Arc<Engine>, data: &[u8]) {
        engine.create_volume("v", DATA_BYTES as u64).unwrap();
        let volume = engine.open_volume("v").unwrap();
        for (i, chunk) in data.chunks(1 << 20).enumerate() {
            volume.write((i << 20) as u64, chunk).unwrap();
        }
        volume.flush().unwrap();
    }

    fn read_all(engine: &std::sync::Arc<Engine>) -> Vec<u8> {
        let volume = engine.open_volume("v").unwrap();
        let mut out = vec![0u8; DATA_BYTES];
        volume.read(0, &mut out).unwrap();
        out
    }

    fn waiting_blocks(engine: &Engine) -> usize {
        engine.commit_pending_now().unwrap();
        block_rows(engine)
            .iter()
            .filter(|(_, rec)| rec.flags & crate::segment::log::FLAG_REDUCE_LATER != 0)
            .count()
    }

    fn run_background(engine: &Engine) {
        for _ in 0..10_000 {
            if !engine.background_step().unwrap() {
                return;
            }
        }
        panic!("background work never ran out");
    }

    /// Stored raw for the background, the data reads back at once, is
    /// deduplicated inline, survives a reopen with its backlog, and once the
    /// reducer has run takes what inline reduction takes, to the byte.
    #[test]
    fn background_reduction_reaches_the_inline_footprint_and_survives_a_reopen() {
        let data = data();
        let inline_dir = data_dir("reduce-inline");
        let inline = open(inline_dir.path(), ReductionMode::Inline);
        write_and_flush(&inline, &data);
        assert_eq!(waiting_blocks(&inline), 0);
        let inline_live = inline.space().live_physical_bytes;
        inline.commit_pending_now().unwrap();
        let inline_blocks = block_rows(&inline).len();

        let dir = data_dir("reduce-background");
        let engine = open(dir.path(), ReductionMode::Background);
        write_and_flush(&engine, &data);
        assert_eq!(read_all(&engine), data);
        // Dedup stayed inline: as many blocks as inline, every one raw.
        engine.commit_pending_now().unwrap();
        assert_eq!(block_rows(&engine).len(), inline_blocks);
        assert_eq!(waiting_blocks(&engine), inline_blocks);
        let raw_live = engine.space().live_physical_bytes;
        assert!(
            raw_live > inline_live * 3 / 2,
            "raw {raw_live}, inline {inline_live}"
        );
        let backlog = engine
            .stats
            .reduction_backlog_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(backlog, raw_live);
        engine.check_consistency().unwrap();

        // A crash before any reduction: the backlog comes back from the rows.
        drop(engine);
        let engine = open(dir.path(), ReductionMode::Inline);
        assert_eq!(
            engine.committer.writer.lock().reduction_backlog_bytes,
            backlog
        );
        engine.check_consistency().unwrap();
        // A copy proven against the raw blocks (their payloads kept as proven).
        engine.create_volume("copy", DATA_BYTES as u64).unwrap();
        let copy = engine.open_volume("copy").unwrap();
        copy.write(1 << 20, &data[..1 << 20]).unwrap();

        run_background(&engine);
        assert_eq!(waiting_blocks(&engine), 0);
        assert_eq!(engine.committer.writer.lock().reduction_backlog_bytes, 0);
        assert_eq!(engine.space().live_physical_bytes, inline_live);
        assert_eq!(read_all(&engine), data);
        engine.check_consistency().unwrap();
        let scrub = engine.scrub_now(None).unwrap();
        assert_eq!(scrub.bad_records, 0, "{scrub:?}");
        assert!(scrub.records_checked > 0);
        let input = engine
            .stats
            .reduced_input_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(input, backlog);

        // Grains proven duplicates while raw are still found once reduced:
        // another copy of the data adds no block.
        let blocks = block_rows(&engine).len();
        copy.write(0, &data[..1 << 20]).unwrap();
        engine.commit_pending_now().unwrap();
        assert_eq!(block_rows(&engine).len(), blocks);

        engine.flush_freeing().unwrap();
        drop(copy);
        drop(engine);
        let engine = open(dir.path(), ReductionMode::Inline);
        assert_eq!(read_all(&engine), data);
        assert_eq!(engine.space().live_physical_bytes, inline_live);
        engine.check_consistency().unwrap();
    }

    /// Overwritten or unmapped before the reducer got to them, waiting blocks
    /// leave the backlog with their rows; what is left reduces as usual.
    #[test]
    fn blocks_freed_while_waiting_leave_the_backlog() {
        let data = data();
        let dir = data_dir("reduce-freed");
        let engine = open(dir.path(), ReductionMode::Background);
        write_and_flush(&engine, &data);
        let volume = engine.open_volume("v").unwrap();
        let before = engine.committer.writer.lock().reduction_backlog_bytes;
        volume.write(0, &vec![0u8; 1 << 20]).unwrap();
        volume.write_zeroes(1 << 20, 1 << 20, true).unwrap();
        run_background(&engine);
        let after = engine.committer.writer.lock().reduction_backlog_bytes;
        assert_eq!(after, 0, "from {before}");
        engine.check_consistency().unwrap();
        let mut expected = data.clone();
        expected[..2 << 20].fill(0);
        assert_eq!(read_all(&engine), expected);
    }
}
