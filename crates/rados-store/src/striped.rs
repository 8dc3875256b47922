//! The metadata database's file as RADOS objects: a `redb::StorageBackend`
//! whose byte `o` is byte `o mod STRIPE_BYTES` of object `PREFIX.(o div
//! STRIPE_BYTES)`, with the file's length in an object of its own.
//!
//! Why this is enough for redb's crash safety (docs/SCALE-OUT.md): redb's
//! commits are copy-on-write and its checksummed one-phase commit asks of the
//! storage only that `sync_data` returns once every earlier write is durable,
//! while writes before it may land in any order or not at all after a crash,
//! as on a disk. Each write op to one object is atomic in RADOS, and librados
//! answers once every replica has it; so `sync_data` sends what is buffered
//! and returns when every op has answered.
//!
//! Writes are buffered until `sync_data` (redb writes pages one by one; one
//! RADOS op per stripe and sync carries them all, the stripes' ops in
//! parallel). Reads overlay the buffer on what the objects hold; a range past
//! an object's end reads as zeroes (a stripe never written is all zeroes, as
//! `set_len` requires of new space).
//!
//! Pages being sent stay readable from memory until every op has answered:
//! redb's readers see the pages of commits not yet durable (the engine's
//! open transaction commits without a sync), so a reader may want a page at
//! the moment a sync sends it, and the objects may still hold the old bytes.
//! A read that overlaps the end of a send (its bytes read from the objects
//! before the send answered, its overlay looked up after) reads again.
//!
//! Length: grown before the data that needs it is sent, shrunk after, so the
//! stored length always covers every byte a committed header can name.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lacuna_engine::meta::pieces::{buffer, overlay};
use lacuna_rados::IoCtx;
use parking_lot::Mutex;

/// Bytes of the file per object: RBD's object size, and a commit's pages
/// cluster in few of them.
pub const STRIPE_BYTES: u64 = 4 << 20;
/// Bytes buffered before a write is sent without waiting for a sync (redb
/// writes out large transactions before their commit; this bounds memory).
const MAX_BUFFERED_BYTES: usize = 64 << 20;

/// The metadata file of one shard, in its RADOS namespace.
pub struct StripedBackend {
    io: Arc<IoCtx>,
    prefix: String,
    state: Mutex<State>,
    /// Test hook: stripes a sync may still write before it fails (usize::MAX:
    /// never fails), to show that a torn commit leaves the previous one.
    fail_after_stripes: Arc<AtomicUsize>,
    /// Called before any page is sent: the segment store's appends must be
    /// on the cluster before metadata that may name them is.
    before_send: Option<BeforeSend>,
    /// Held through a flush: one set of pages in flight at a time.
    flushing: Mutex<()>,
}

/// What [`StripedBackend`] runs before it sends pages.
pub type BeforeSend = Arc<dyn Fn() -> io::Result<()> + Send + Sync>;

#[derive(Default)]
struct State {
    /// The length redb sees.
    len_bytes: u64,
    /// The length the length object holds.
    stored_len_bytes: u64,
    /// Buffered writes: start offset → bytes, never overlapping.
    dirty: BTreeMap<u64, Vec<u8>>,
    dirty_bytes: usize,
    /// Writes being sent (older than `dirty`); kept after a failed send, so
    /// the next one carries them again.
    sending: Arc<BTreeMap<u64, Vec<u8>>>,
    /// Sends answered so far: a read retries when one answered meanwhile.
    sends_answered: u64,
}

impl std::fmt::Debug for StripedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StripedBackend({})", self.prefix)
    }
}

fn stripe_name(prefix: &str, stripe: u64) -> String {
    format!("{prefix}.{stripe:08}")
}

fn length_name(prefix: &str) -> String {
    format!("{prefix}.length")
}

fn out_of_range(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{what} past the end"))
}

impl StripedBackend {
    /// The file named `prefix` in `io`'s namespace (empty if it is not there).
    pub fn open(io: Arc<IoCtx>, prefix: &str) -> io::Result<StripedBackend> {
        let mut buf = [0u8; 8];
        let len_bytes = match io.read(&length_name(prefix), 0, &mut buf) {
            Ok(8) => u64::from_le_bytes(buf),
            Ok(0) => 0,
            Ok(n) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} holds {n} bytes, not 8", length_name(prefix)),
                ))
            }
            Err(e) if e.is_not_found() => 0,
            Err(e) => return Err(e.into()),
        };
        cut_past(&io, prefix, len_bytes)?;
        Ok(StripedBackend {
            io,
            prefix: prefix.to_string(),
            state: Mutex::new(State {
                len_bytes,
                stored_len_bytes: len_bytes,
                ..State::default()
            }),
            fail_after_stripes: Arc::new(AtomicUsize::new(usize::MAX)),
            before_send: None,
            flushing: Mutex::new(()),
        })
    }

    /// Runs `hook` before every send of pages (see [`BeforeSend`]).
    pub fn with_before_send(mut self, hook: BeforeSend) -> StripedBackend {
        self.before_send = Some(hook);
        self
    }

    /// The count of stripe writes left before syncs fail (tests set it; the
    /// backend itself goes to redb).
    pub fn fault_hook(&self) -> Arc<AtomicUsize> {
        self.fail_after_stripes.clone()
    }

    fn store_length(&self, len_bytes: u64) -> io::Result<()> {
        self.io
            .write_full(&length_name(&self.prefix), &len_bytes.to_le_bytes())
            .map_err(io::Error::from)
    }

    /// Sends `dirty` (offset → bytes), one op per stripe, every stripe at
    /// once; waits for all.
    fn send(&self, dirty: &BTreeMap<u64, Vec<u8>>) -> io::Result<()> {
        let mut by_stripe: BTreeMap<u64, Vec<(u64, &[u8])>> = BTreeMap::new();
        for (offset, bytes) in dirty {
            let mut at = *offset;
            let mut rest: &[u8] = bytes;
            while !rest.is_empty() {
                let stripe = at / STRIPE_BYTES;
                let within = at % STRIPE_BYTES;
                let take = rest.len().min((STRIPE_BYTES - within) as usize);
                by_stripe
                    .entry(stripe)
                    .or_default()
                    .push((within, &rest[..take]));
                at += take as u64;
                rest = &rest[take..];
            }
        }
        let mut sent = Vec::with_capacity(by_stripe.len());
        let mut outcome = Ok(());
        for (stripe, pieces) in &by_stripe {
            let allowed =
                self.fail_after_stripes
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| match left {
                        usize::MAX => Some(left),
                        _ => left.checked_sub(1),
                    });
            if allowed.is_err() {
                outcome = Err(io::Error::other("injected failure"));
                break;
            }
            match self
                .io
                .aio_write_pieces(&stripe_name(&self.prefix, *stripe), pieces)
            {
                Ok(pending) => sent.push(pending),
                Err(e) => {
                    outcome = Err(e.into());
                    break;
                }
            }
        }
        // Every op sent is waited for, also after a failure: none may land
        // after this returns.
        for pending in sent {
            if let Err(e) = pending.wait() {
                if outcome.is_ok() {
                    outcome = Err(e.into());
                }
            }
        }
        outcome
    }

    /// Sends everything buffered and stores the length: grown first, shrunk
    /// last (and the stripes past it cut).
    fn flush(&self) -> io::Result<()> {
        let _flushing = self.flushing.lock();
        if let Some(before_send) = &self.before_send {
            before_send()?;
        }
        let (sending, len_bytes, stored) = {
            let mut state = self.state.lock();
            state.dirty_bytes = 0;
            let dirty = std::mem::take(&mut state.dirty);
            if !dirty.is_empty() {
                let mut sending = (*state.sending).clone();
                for (offset, bytes) in &dirty {
                    buffer(&mut sending, *offset, bytes);
                }
                state.sending = Arc::new(sending);
            }
            (
                state.sending.clone(),
                state.len_bytes,
                state.stored_len_bytes,
            )
        };
        if len_bytes > stored {
            self.store_length(len_bytes)?;
        }
        self.send(&sending)?;
        {
            let mut state = self.state.lock();
            state.sending = Arc::new(BTreeMap::new());
            state.sends_answered += 1;
        }
        if len_bytes < stored {
            self.store_length(len_bytes)?;
            cut_past(&self.io, &self.prefix, len_bytes)?;
        }
        self.state.lock().stored_len_bytes = len_bytes;
        Ok(())
    }

    /// Reads the objects' bytes for `[offset, offset + out.len())` (zeroes
    /// where nothing was written).
    fn read_stored(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let mut done = 0usize;
        while done < out.len() {
            let at = offset + done as u64;
            let within = at % STRIPE_BYTES;
            let take = (out.len() - done).min((STRIPE_BYTES - within) as usize);
            let piece = &mut out[done..done + take];
            let got =
                match self
                    .io
                    .read(&stripe_name(&self.prefix, at / STRIPE_BYTES), within, piece)
                {
                    Ok(got) => got,
                    Err(e) if e.is_not_found() => 0,
                    Err(e) => return Err(e.into()),
                };
            piece[got..].fill(0);
            done += take;
        }
        Ok(())
    }
}

/// Most objects a namespace may hold for [`cut_past`] to list it.
const MAX_LISTED_OBJECTS: usize = 1 << 22;

/// Removes the stripes wholly past `len_bytes` and truncates the one it ends
/// in: a shrink a crash interrupted leaves bytes there, and space redb grows
/// into must read as zeroes.
fn cut_past(io: &IoCtx, prefix: &str, len_bytes: u64) -> io::Result<()> {
    let stripe_prefix = format!("{prefix}.");
    for name in io.list(MAX_LISTED_OBJECTS)? {
        let Some(stripe) = name
            .strip_prefix(&stripe_prefix)
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let start = stripe * STRIPE_BYTES;
        if start >= len_bytes {
            io.remove(&name)?;
        } else if start + STRIPE_BYTES > len_bytes && io.size(&name)? > len_bytes - start {
            io.truncate(&name, len_bytes - start)?;
        }
    }
    Ok(())
}

/// Most times a read starts over because a send answered while it read.
const MAX_READ_TRIES: usize = 64;

impl redb::StorageBackend for StripedBackend {
    fn len(&self) -> io::Result<u64> {
        Ok(self.state.lock().len_bytes)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let end = offset + out.len() as u64;
        if end > self.state.lock().len_bytes {
            return Err(out_of_range("read"));
        }
        for _ in 0..MAX_READ_TRIES {
            let answered_before = self.state.lock().sends_answered;
            self.read_stored(offset, out)?;
            // Writes being sent, then buffered ones, over what was read.
            // redb never reads pages it is writing (copy on write), so a
            // write racing this read is elsewhere.
            let state = self.state.lock();
            if state.sends_answered != answered_before {
                continue;
            }
            overlay(&state.sending, offset, out);
            overlay(&state.dirty, offset, out);
            return Ok(());
        }
        Err(io::Error::other(format!(
            "a read of {} bytes at {offset} overlapped {MAX_READ_TRIES} sends",
            out.len()
        )))
    }

    /// Growing is only noted (new space reads as zeroes: no stripe holds
    /// bytes past the stored length). Shrinking is done at once: what is
    /// buffered is sent, the length stored, the stripes past it cut.
    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        let shrinking = {
            let mut state = self.state.lock();
            let shrinking = len_bytes < state.len_bytes;
            if shrinking {
                let cut: Vec<u64> = state.dirty.range(len_bytes..).map(|(s, _)| *s).collect();
                for start in cut {
                    state.dirty.remove(&start);
                }
                let last = state
                    .dirty
                    .range(..len_bytes)
                    .next_back()
                    .map(|(s, b)| (*s, b.len()));
                if let Some((start, len)) = last {
                    if start + len as u64 > len_bytes {
                        let keep = (len_bytes - start) as usize;
                        state.dirty.get_mut(&start).expect("listed").truncate(keep);
                    }
                }
            }
            state.len_bytes = len_bytes;
            state.dirty_bytes = state.dirty.values().map(Vec::len).sum();
            shrinking
        };
        if shrinking {
            self.flush()?;
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.flush()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let full = {
            let mut state = self.state.lock();
            if offset + data.len() as u64 > state.len_bytes {
                return Err(out_of_range("write"));
            }
            let delta = buffer(&mut state.dirty, offset, data);
            state.dirty_bytes = state.dirty_bytes.saturating_add_signed(delta);
            state.dirty_bytes > MAX_BUFFERED_BYTES
        };
        if full {
            self.flush()?;
        }
        Ok(())
    }
}
