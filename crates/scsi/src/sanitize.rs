//! SANITIZE (SBC-4 5.30): BLOCK ERASE, OVERWRITE and EXIT FAILURE MODE.
//!
//! BLOCK ERASE deallocates the whole unit in one `unmap` (thin units only: it is what
//! "erase" means for thin provisioning, and it is metadata-only). OVERWRITE writes the
//! initialization pattern over every block. CRYPTO ERASE is not offered: Lacuna stores no
//! per-volume key that could be destroyed instead of the data.
//!
//! Why a background job: a sanitize covers the whole unit, survives task aborts, resets
//! and nexus loss (SBC-4 4.11), and the unit answers NOT READY, SANITIZE IN PROGRESS (with
//! a progress indication) until it ends. The overwrite proceeds at a bounded rate so it
//! never takes the array's bandwidth from other units' foreground I/O.

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::backend::LogicalUnit;
use crate::block::{be16, storage_failure};
use crate::dispatch::{CommandResult, Failure, Request};
use crate::sense::{AdditionalSense, Sense, SenseKey};
use crate::unit_state::UnitState;

pub(crate) const SERVICE_ACTION_OVERWRITE: u8 = 0x01;
pub(crate) const SERVICE_ACTION_BLOCK_ERASE: u8 = 0x02;
pub(crate) const SERVICE_ACTION_EXIT_FAILURE_MODE: u8 = 0x1f;

/// Overwrite pace: at most this many bytes per second are written.
const OVERWRITE_BYTES_PER_SECOND: u64 = 16 << 20;
/// How often a SANITIZE waiting without IMMED checks whether its task was aborted.
const ABORT_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Overwrite chunk: one backend write per chunk.
const OVERWRITE_CHUNK_BYTES: u64 = 1 << 20;

#[derive(Debug, Default)]
pub(crate) struct SanitizeState {
    running: AtomicBool,
    /// Fraction done, in 65536ths (SKS progress indication).
    progress: AtomicU16,
    /// The outcome of the last sanitize, for a caller waiting without IMMED.
    finished: Mutex<Option<Result<(), Sense>>>,
    ended: Condvar,
}

impl SanitizeState {
    pub(crate) fn in_progress(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }
}

/// NOT READY, SANITIZE IN PROGRESS, with how far it got.
pub(crate) fn in_progress_sense(state: &UnitState) -> Sense {
    let mut sense = Sense::new(
        SenseKey::NotReady,
        AdditionalSense::NOT_READY_SANITIZE_IN_PROGRESS,
    );
    sense.progress = Some(state.sanitize.progress.load(Ordering::SeqCst));
    sense
}

/// What to do, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Job {
    BlockErase,
    /// One block of the final pass's pattern.
    Overwrite {
        block: Vec<u8>,
    },
}

/// SANITIZE.
pub(crate) fn sanitize(request: &Request<'_>, action: u8) -> CommandResult {
    let cdb = request.cdb;
    let immediate = cdb[1] & 0x80 != 0;
    if cdb[1] & 0x40 != 0 {
        return Err(Sense::invalid_cdb_field(1, Some(6)).into());
    }
    if let Some(at) = cdb[2..7].iter().position(|&b| b != 0) {
        return Err(Sense::invalid_cdb_field(2 + at as u16, None).into());
    }
    let parameter_list_len = usize::from(be16(cdb, 7));
    let job = match action {
        SERVICE_ACTION_EXIT_FAILURE_MODE => {
            if parameter_list_len != 0 {
                return Err(Sense::invalid_cdb_field(7, None).into());
            }
            return Ok(Vec::new()); // Lacuna never leaves a unit in sanitize failure mode.
        }
        SERVICE_ACTION_BLOCK_ERASE => {
            if parameter_list_len != 0 || !request.unit.provisioning().is_thin() {
                return Err(Sense::invalid_cdb_field(7, None).into());
            }
            Job::BlockErase
        }
        SERVICE_ACTION_OVERWRITE => overwrite_job(request, parameter_list_len)?,
        _ => return Err(Sense::invalid_cdb_field(1, Some(4)).into()),
    };
    request.check_writable()?;
    let state = request.core.unit_state(request.unit.as_ref());
    if state.sanitize.running.swap(true, Ordering::SeqCst) {
        return Err(in_progress_sense(&state).into());
    }
    state.sanitize.progress.store(0, Ordering::SeqCst);
    *state.sanitize.finished.lock() = None;
    let unit = Arc::clone(request.unit);
    let job_state = Arc::clone(&state);
    let spawned = std::thread::Builder::new()
        .name("scsi-sanitize".to_string())
        .spawn(move || {
            let result = run(unit.as_ref(), &job, &job_state);
            *job_state.sanitize.finished.lock() = Some(result);
            job_state.sanitize.running.store(false, Ordering::SeqCst);
            job_state.sanitize.ended.notify_all();
        });
    if spawned.is_err() {
        state.sanitize.running.store(false, Ordering::SeqCst);
        return Err(Sense::new(
            SenseKey::HardwareError,
            AdditionalSense::INTERNAL_TARGET_FAILURE,
        )
        .into());
    }
    if immediate {
        return Ok(Vec::new());
    }
    // Without IMMED the command ends with the sanitize, unless the task is aborted or
    // reset first: then the command ends and the sanitize carries on (SBC-4 4.11).
    let abort_generation = request.core.abort_generation();
    let mut finished = state.sanitize.finished.lock();
    while finished.is_none() {
        state
            .sanitize
            .ended
            .wait_for(&mut finished, ABORT_POLL_INTERVAL);
        if finished.is_none() && request.core.aborted_since(abort_generation, request) {
            return Err(Sense::new(
                SenseKey::AbortedCommand,
                AdditionalSense::NO_ADDITIONAL_SENSE,
            )
            .into());
        }
    }
    match finished.take() {
        Some(Err(sense)) => Err(Failure::Check(sense)),
        _ => Ok(Vec::new()),
    }
}

fn overwrite_job(request: &Request<'_>, parameter_list_len: usize) -> Result<Job, Failure> {
    let block_size_bytes = request.geometry.block_size_bytes as usize;
    if !(5..=block_size_bytes + 4).contains(&parameter_list_len) {
        return Err(Sense::invalid_cdb_field(7, None).into());
    }
    if request.data_out.len() < parameter_list_len {
        return Err(Sense::parameter_list_length_error().into());
    }
    let list = &request.data_out[..parameter_list_len];
    let invert = list[0] & 0x80 != 0;
    let passes = list[0] & 0x1f;
    if passes == 0 {
        return Err(Sense::invalid_parameter_field(0, Some(4)).into());
    }
    let pattern_len = usize::from(be16(list, 2));
    if pattern_len == 0 || pattern_len > block_size_bytes || pattern_len > parameter_list_len - 4 {
        return Err(Sense::invalid_parameter_field(2, None).into());
    }
    let pattern = &list[4..4 + pattern_len];
    // Only the last pass is visible: with INVERT, even-numbered passes are inverted.
    let inverted = invert && passes.is_multiple_of(2);
    let block: Vec<u8> = pattern
        .iter()
        .cycle()
        .take(block_size_bytes)
        .map(|&b| if inverted { !b } else { b })
        .collect();
    Ok(Job::Overwrite { block })
}

fn run(unit: &dyn LogicalUnit, job: &Job, state: &UnitState) -> Result<(), Sense> {
    let size_bytes = unit.size_bytes();
    let failure = |e| match storage_failure(e, true) {
        Failure::Check(sense) => sense,
        Failure::ReservationConflict | Failure::WouldWait => {
            unreachable!("storage errors are sense conditions")
        }
    };
    match job {
        Job::BlockErase => unit.unmap(0, size_bytes).map_err(failure),
        Job::Overwrite { block } => {
            let chunk: Vec<u8> = block.repeat((OVERWRITE_CHUNK_BYTES as usize) / block.len());
            let started = Instant::now();
            let mut done_bytes = 0u64;
            while done_bytes < size_bytes {
                let piece_bytes = (size_bytes - done_bytes).min(chunk.len() as u64);
                {
                    let _range = state.range_lock.lock(done_bytes, piece_bytes);
                    unit.write(done_bytes, &chunk[..piece_bytes as usize], false)
                        .map_err(failure)?;
                }
                done_bytes += piece_bytes;
                let progress = done_bytes * u64::from(u16::MAX) / size_bytes;
                state
                    .sanitize
                    .progress
                    .store(progress as u16, Ordering::SeqCst);
                let due =
                    Duration::from_secs_f64(done_bytes as f64 / OVERWRITE_BYTES_PER_SECOND as f64);
                if let Some(ahead) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(ahead);
                }
            }
            unit.flush().map_err(failure)
        }
    }
}
