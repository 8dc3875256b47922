//! Durable metadata commits whose sync is not waited for under the writer
//! mutex.
//!
//! Why: a durable commit (a host FLUSH, the background one, a snapshot's)
//! ends in redb's `sync_data`, and commits run under the writer mutex, so every
//! host write waited for the disk's fsync (or, on RADOS, for every stripe's op
//! to answer). What redb needs of a sync is order, not the wait: storage must
//! hold everything written before a sync before it holds anything written
//! after it, so that a crash leaves it as it was at one of the syncs (or
//! later). So a commit may become durable later, outside the mutex, provided
//! that what is written after it stays in memory until it is.
//!
//! How: while no sync is outstanding, writes go straight to the inner backend
//! (the file, or the RADOS stripes). A sync made under
//! [`SyncPipeline::defer_syncs`] seals an epoch instead of syncing, and writes
//! from then on are held in memory; reads lay them over what storage holds.
//! The engine, once it has let go of the writer mutex and synced the segment
//! data the commit names, calls [`SyncPipeline::finish`]: each sealed epoch's
//! pieces are written and synced, oldest first, and when none is left the
//! writes held meanwhile are written through and writes go straight again.
//!
//! Epochs sealed under `defer_syncs` are held until `finish`: metadata must
//! not be durable before the segment bytes it names, which the engine syncs in
//! between. A sync redb asks for on its own (when it grows the file) while a
//! held epoch waits is sealed behind it rather than done; with none held it is
//! done at once, as on a plain file.
//!
//! Length: growing is done at once (new space reads as zeroes, and no durable
//! header names it yet). A shrink while epochs wait lowers only the length
//! redb sees; the file is cut once they are durable (redb cuts only after the
//! smaller layout is durable). Space regrown meanwhile is held as zeroes,
//! since the file still has the old bytes there.

use std::collections::VecDeque;
use std::io;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};
use redb::{BackendError, StorageBackend};

use crate::meta::pieces::{self, Pieces};

/// Most bytes held in memory while epochs wait; a write past it waits for
/// them to be durable. A durable commit's epoch waits for one segment sync
/// and its own sync, so only a stalled disk gets here.
const MAX_HELD_BYTES: usize = 256 << 20;
/// Most zero bytes put in one held piece when regrown space is zeroed.
const ZERO_PIECE_BYTES: usize = 1 << 20;
/// How long a write past [`MAX_HELD_BYTES`] waits before it looks again.
const HELD_WAIT: Duration = Duration::from_millis(10);

/// The ordered syncs of one metadata file, shared by its backend (which redb
/// owns) and the engine (which defers and finishes them).
pub(crate) struct SyncPipeline {
    inner: Box<dyn StorageBackend>,
    state: RwLock<State>,
    /// Held while sealed epochs are written and synced: one at a time, in order.
    flushing: Mutex<()>,
    /// Woken when an epoch is durable (for writes waiting on the memory limit).
    durable: Condvar,
    durable_lock: Mutex<()>,
}

struct State {
    /// Epochs sealed and not yet durable, oldest first.
    sealed: VecDeque<Sealed>,
    /// Writes since the newest seal, while any epoch waits (else empty).
    current: Pieces,
    /// Bytes in `sealed` and `current`.
    held_bytes: usize,
    /// The length redb sees.
    len_bytes: u64,
    /// The inner backend's length: at least `len_bytes` while a shrink waits
    /// for the epochs before it.
    stored_len_bytes: u64,
    /// Syncs seal held epochs (see [`SyncPipeline::defer_syncs`]).
    deferring: bool,
    /// Epochs up to this one wait for [`SyncPipeline::finish`].
    held_through: Option<u64>,
    next_epoch: u64,
    /// Set by the first failure to write or sync: everything after it fails
    /// too (what was held may be lost; a restart recovers the last durable
    /// commit).
    failed: Option<String>,
}

struct Sealed {
    epoch: u64,
    pieces: Arc<Pieces>,
    bytes: usize,
}

impl State {
    fn check(&self) -> io::Result<()> {
        match &self.failed {
            Some(why) => Err(io::Error::other(format!(
                "an earlier metadata write or sync failed: {why}"
            ))),
            None => Ok(()),
        }
    }

    fn seal(&mut self, held: bool) {
        let epoch = self.next_epoch;
        self.next_epoch += 1;
        let pieces = std::mem::take(&mut self.current);
        let bytes = pieces.values().map(Vec::len).sum();
        self.sealed.push_back(Sealed {
            epoch,
            pieces: Arc::new(pieces),
            bytes,
        });
        if held {
            self.held_through = Some(epoch);
        }
        self.assert_invariants();
    }

    /// Holds `data` at `offset` in memory, over what is held there already.
    fn hold(&mut self, offset: u64, data: &[u8]) {
        let delta = pieces::buffer(&mut self.current, offset, data);
        self.held_bytes = self
            .held_bytes
            .checked_add_signed(delta)
            .expect("held bytes");
    }

    fn is_held(&self, epoch: u64) -> bool {
        self.held_through.is_some_and(|through| epoch <= through)
    }

    fn assert_invariants(&self) {
        if self.sealed.is_empty() {
            assert!(self.current.is_empty(), "writes held with no epoch waiting");
            assert_eq!(self.held_bytes, 0);
            assert!(self.held_through.is_none());
        }
        assert!(self.stored_len_bytes >= self.len_bytes || self.sealed.is_empty());
    }
}

impl SyncPipeline {
    pub(crate) fn new(inner: Box<dyn StorageBackend>) -> io::Result<Arc<SyncPipeline>> {
        let len_bytes = inner.len()?;
        Ok(Arc::new(SyncPipeline {
            inner,
            state: RwLock::new(State {
                sealed: VecDeque::new(),
                current: Pieces::new(),
                held_bytes: 0,
                len_bytes,
                stored_len_bytes: len_bytes,
                deferring: false,
                held_through: None,
                next_epoch: 0,
                failed: None,
            }),
            flushing: Mutex::new(()),
            durable: Condvar::new(),
            durable_lock: Mutex::new(()),
        }))
    }

    /// The backend redb is opened on.
    pub(crate) fn backend(self: &Arc<Self>) -> PipelinedBackend {
        PipelinedBackend(self.clone())
    }

    /// Until the guard drops, redb's syncs seal epochs that wait for
    /// [`SyncPipeline::finish`] instead of syncing.
    pub(crate) fn defer_syncs(&self) -> DeferredSyncs<'_> {
        let mut state = self.state.write();
        assert!(!state.deferring, "syncs deferred twice");
        state.deferring = true;
        DeferredSyncs(self)
    }

    /// Makes every sealed epoch durable, in order, and lets writes go straight
    /// to storage again.
    pub(crate) fn finish(&self) -> io::Result<()> {
        {
            let mut state = self.state.write();
            assert!(!state.deferring, "finish inside defer_syncs");
            state.held_through = None;
        }
        self.flush_unheld()
    }

    /// Bytes held in memory now (for tests).
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        self.state.read().held_bytes
    }

    /// Writes and syncs sealed epochs, oldest first, up to the first held one.
    fn flush_unheld(&self) -> io::Result<()> {
        let _flushing = self.flushing.lock();
        loop {
            let (epoch, pieces) = {
                let state = self.state.read();
                state.check()?;
                match state.sealed.front() {
                    None => return Ok(()),
                    Some(sealed) if state.is_held(sealed.epoch) => return Ok(()),
                    Some(sealed) => (sealed.epoch, sealed.pieces.clone()),
                }
            };
            if let Err(e) = self.store_epoch(&pieces) {
                return Err(self.fail(e));
            }
            let mut state = self.state.write();
            let sealed = state.sealed.pop_front().expect("the epoch just stored");
            assert_eq!(sealed.epoch, epoch);
            state.held_bytes -= sealed.bytes;
            if state.sealed.is_empty() {
                if let Err(e) = self.write_through(&mut state) {
                    drop(state);
                    return Err(self.fail(e));
                }
            }
            state.assert_invariants();
            drop(state);
            let _woken = self.durable_lock.lock();
            self.durable.notify_all();
        }
    }

    fn store_epoch(&self, pieces: &Pieces) -> io::Result<()> {
        for (offset, bytes) in pieces {
            self.inner.write(*offset, bytes)?;
        }
        self.inner.sync_data()
    }

    /// With no epoch left: the writes held since the last one go to storage
    /// (unsynced, as any write after a sync) and a waiting shrink is done.
    fn write_through(&self, state: &mut State) -> io::Result<()> {
        let held = std::mem::take(&mut state.current);
        for (offset, bytes) in &held {
            self.inner.write(*offset, bytes)?;
        }
        state.held_bytes -= held.values().map(Vec::len).sum::<usize>();
        if state.stored_len_bytes > state.len_bytes {
            self.inner.set_len(state.len_bytes)?;
            state.stored_len_bytes = state.len_bytes;
        }
        Ok(())
    }

    fn fail(&self, error: io::Error) -> io::Error {
        let mut state = self.state.write();
        if state.failed.is_none() {
            state.failed = Some(error.to_string());
        }
        error
    }

    /// Waits while more than [`MAX_HELD_BYTES`] are held and epochs wait.
    fn wait_for_room(&self) {
        loop {
            {
                let state = self.state.read();
                if state.held_bytes <= MAX_HELD_BYTES
                    || state.sealed.is_empty()
                    || state.failed.is_some()
                {
                    return;
                }
            }
            let mut woken = self.durable_lock.lock();
            self.durable.wait_for(&mut woken, HELD_WAIT);
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        {
            // A seal takes the write lock, so none comes between this look
            // and the write.
            let state = self.state.read();
            state.check()?;
            if state.sealed.is_empty() {
                return self.inner.write(offset, data);
            }
        }
        let mut state = self.state.write();
        state.check()?;
        if state.sealed.is_empty() {
            return self.inner.write(offset, data);
        }
        state.hold(offset, data);
        drop(state);
        self.wait_for_room();
        Ok(())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let state = self.state.read();
        state.check()?;
        // An epoch being stored meanwhile leaves storage with its bytes or the
        // old ones; its overlay, kept until it is durable, gives the right ones.
        self.inner.read(offset, out)?;
        for sealed in &state.sealed {
            pieces::overlay(&sealed.pieces, offset, out);
        }
        pieces::overlay(&state.current, offset, out);
        Ok(())
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        let mut state = self.state.write();
        state.check()?;
        if state.sealed.is_empty() {
            self.inner.set_len(len_bytes)?;
            state.len_bytes = len_bytes;
            state.stored_len_bytes = len_bytes;
            return Ok(());
        }
        if len_bytes <= state.len_bytes {
            let dropped = pieces::cut_past(&mut state.current, len_bytes);
            state.held_bytes -= dropped;
            state.len_bytes = len_bytes;
            return Ok(());
        }
        // Regrown space still holding the old bytes in storage reads as zeroes.
        let mut zero_from = state.len_bytes;
        let zero_to = len_bytes.min(state.stored_len_bytes);
        while zero_from < zero_to {
            let piece_bytes = (zero_to - zero_from).min(ZERO_PIECE_BYTES as u64);
            let zeroes = vec![0u8; piece_bytes as usize];
            state.hold(zero_from, &zeroes);
            zero_from += piece_bytes;
        }
        if len_bytes > state.stored_len_bytes {
            self.inner.set_len(len_bytes)?;
            state.stored_len_bytes = len_bytes;
        }
        state.len_bytes = len_bytes;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        {
            let mut state = self.state.write();
            state.check()?;
            if state.deferring {
                state.seal(true);
                return Ok(());
            }
            if state.held_through.is_some() {
                // Ordered behind the held epoch; stored after it.
                state.seal(false);
                return Ok(());
            }
            if !state.sealed.is_empty() {
                // Behind epochs a finish is storing now: stored after them.
                state.seal(false);
                drop(state);
                return self.flush_unheld();
            }
        }
        if let Err(e) = self.inner.sync_data() {
            return Err(self.fail(e));
        }
        Ok(())
    }
}

/// While alive, redb's syncs seal held epochs (see [`SyncPipeline::defer_syncs`]).
pub(crate) struct DeferredSyncs<'a>(&'a SyncPipeline);

impl Drop for DeferredSyncs<'_> {
    fn drop(&mut self) {
        self.0.state.write().deferring = false;
    }
}

/// The metadata file as redb sees it: the inner backend behind the pipeline.
pub(crate) struct PipelinedBackend(Arc<SyncPipeline>);

impl std::fmt::Debug for PipelinedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0.inner)
    }
}

impl StorageBackend for PipelinedBackend {
    fn len(&self) -> io::Result<u64> {
        let state = self.0.state.read();
        state.check()?;
        Ok(state.len_bytes)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.0.set_len(len_bytes)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write(offset, data)
    }
    fn close(&self) -> io::Result<()> {
        // Epochs a finish never came for stay unstored: as after a crash.
        let flushed = self.0.flush_unheld();
        self.0.inner.close()?;
        flushed
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.inner.try_lock_range(start, end)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.0.inner.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.inner.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.inner.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.inner.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.inner.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file in memory that keeps what it held at each sync.
    #[derive(Debug, Default)]
    struct MemFile {
        bytes: Mutex<Vec<u8>>,
        syncs: Mutex<Vec<Vec<u8>>>,
    }

    #[derive(Debug)]
    struct Mem(Arc<MemFile>);

    impl StorageBackend for Mem {
        fn len(&self) -> io::Result<u64> {
            Ok(self.0.bytes.lock().len() as u64)
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
            let bytes = self.0.bytes.lock();
            let end = offset as usize + out.len();
            if end > bytes.len() {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            out.copy_from_slice(&bytes[offset as usize..end]);
            Ok(())
        }
        fn set_len(&self, len_bytes: u64) -> io::Result<()> {
            self.0.bytes.lock().resize(len_bytes as usize, 0);
            Ok(())
        }
        fn sync_data(&self) -> io::Result<()> {
            let image = self.0.bytes.lock().clone();
            self.0.syncs.lock().push(image);
            Ok(())
        }
        fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
            let mut bytes = self.0.bytes.lock();
            let end = offset as usize + data.len();
            if end > bytes.len() {
                bytes.resize(end, 0);
            }
            bytes[offset as usize..end].copy_from_slice(data);
            Ok(())
        }
    }

    fn pipeline() -> (Arc<MemFile>, Arc<SyncPipeline>, PipelinedBackend) {
        let file = Arc::new(MemFile::default());
        let pipeline = SyncPipeline::new(Box::new(Mem(file.clone()))).unwrap();
        let backend = pipeline.backend();
        (file, pipeline, backend)
    }

    fn read_all(backend: &PipelinedBackend) -> Vec<u8> {
        let mut out = vec![0u8; backend.len().unwrap() as usize];
        backend.read(0, &mut out).unwrap();
        out
    }

    #[test]
    fn writes_after_a_deferred_sync_stay_out_of_storage_until_it_is_finished() {
        let (file, pipeline, backend) = pipeline();
        backend.set_len(8).unwrap();
        backend.write(0, b"aaaa").unwrap();
        {
            let _deferred = pipeline.defer_syncs();
            backend.sync_data().unwrap();
        }
        assert!(file.syncs.lock().is_empty(), "the sync is deferred");
        backend.write(2, b"bbbb").unwrap();
        assert_eq!(&file.bytes.lock()[..], b"aaaa\0\0\0\0", "held");
        assert_eq!(read_all(&backend), b"aabbbb\0\0", "reads see what is held");
        assert_eq!(pipeline.held_bytes(), 4);

        pipeline.finish().unwrap();

        assert_eq!(file.syncs.lock().as_slice(), [b"aaaa\0\0\0\0".to_vec()]);
        assert_eq!(&file.bytes.lock()[..], b"aabbbb\0\0", "written through");
        assert_eq!(pipeline.held_bytes(), 0);
        backend.write(0, b"c").unwrap();
        assert_eq!(
            &file.bytes.lock()[..],
            b"cabbbb\0\0",
            "straight to storage again"
        );
    }

    #[test]
    fn a_sync_while_an_epoch_is_held_is_ordered_behind_it() {
        let (file, pipeline, backend) = pipeline();
        backend.set_len(4).unwrap();
        backend.write(0, b"1111").unwrap();
        {
            let _deferred = pipeline.defer_syncs();
            backend.sync_data().unwrap();
        }
        backend.write(0, b"22").unwrap();
        backend.sync_data().unwrap(); // redb's own, when it grows the file
        backend.write(0, b"3").unwrap();
        assert!(file.syncs.lock().is_empty());

        pipeline.finish().unwrap();

        let syncs = file.syncs.lock().clone();
        assert_eq!(syncs, vec![b"1111".to_vec(), b"2211".to_vec()]);
        assert_eq!(&file.bytes.lock()[..], b"3211");
    }

    #[test]
    fn a_shrink_while_epochs_wait_cuts_the_file_once_they_are_durable() {
        let (file, pipeline, backend) = pipeline();
        backend.set_len(8).unwrap();
        backend.write(0, b"abcdefgh").unwrap();
        {
            let _deferred = pipeline.defer_syncs();
            backend.sync_data().unwrap();
            backend.set_len(4).unwrap();
        }
        assert_eq!(backend.len().unwrap(), 4);
        assert_eq!(
            file.bytes.lock().len(),
            8,
            "not cut before the epoch is durable"
        );
        backend.set_len(6).unwrap(); // regrown before that
        assert_eq!(
            read_all(&backend),
            b"abcd\0\0",
            "regrown space reads as zeroes"
        );

        pipeline.finish().unwrap();

        assert_eq!(file.syncs.lock().as_slice(), [b"abcdefgh".to_vec()]);
        assert_eq!(&file.bytes.lock()[..], b"abcd\0\0");
    }

    /// Random writes, length changes, syncs and deferred syncs against a
    /// model file: reads always see the model, and storage at its n-th sync
    /// holds exactly what the model held at the n-th sync redb asked for.
    #[test]
    fn storage_at_each_sync_is_the_file_at_that_sync() {
        let (file, pipeline, backend) = pipeline();
        let mut model: Vec<u8> = Vec::new();
        let mut asked: Vec<Vec<u8>> = Vec::new();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |bound: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % bound.max(1)
        };
        let mut deferred: Option<DeferredSyncs<'_>> = None;
        let mut held = false;
        for step in 0..4_000u64 {
            match next(20) {
                0..=10 if !model.is_empty() => {
                    let offset = next(model.len() as u64);
                    let len = 1 + next((model.len() as u64 - offset).min(300));
                    let data: Vec<u8> = (0..len).map(|i| (step + i) as u8 | 1).collect();
                    backend.write(offset, &data).unwrap();
                    model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
                }
                0..=13 => {
                    let len = next(4_096);
                    backend.set_len(len).unwrap();
                    model.resize(len as usize, 0);
                }
                14..=16 => {
                    backend.sync_data().unwrap();
                    asked.push(model.clone());
                }
                17 | 18 if deferred.is_none() => {
                    deferred = Some(pipeline.defer_syncs());
                    held = true;
                }
                _ => {
                    deferred = None;
                    if held {
                        pipeline.finish().unwrap();
                        held = false;
                    }
                }
            }
            assert_eq!(backend.len().unwrap(), model.len() as u64);
            assert_eq!(read_all(&backend), model, "step {step}");
            let syncs = file.syncs.lock();
            if !held {
                assert_eq!(syncs.len(), asked.len(), "every sync done at step {step}");
            }
            for (stored, wanted) in syncs.iter().zip(&asked) {
                assert!(stored.len() >= wanted.len());
                assert_eq!(&stored[..wanted.len()], &wanted[..], "step {step}");
            }
        }
        drop(deferred);
        pipeline.finish().unwrap();
        assert_eq!(file.syncs.lock().len(), asked.len());
    }
}
