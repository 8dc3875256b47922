//! Opening the metadata file (redb), so that a damaged one stops the array with
//! a message naming the file instead of a panic or an anonymous error.
//!
//! redb checks its file at open and repairs what a crash can leave behind, but
//! some damage a crash cannot cause (a file cut short by hand or by a failing
//! disk) trips an assertion inside it. That panic is caught here and reported as
//! what it is: the metadata file is damaged and the array will not start on it.

use std::panic::{catch_unwind, AssertUnwindSafe, PanicHookInfo};
use std::path::Path;
use std::sync::Arc;

use crate::meta::sync_pipeline::SyncPipeline;
use crate::{EngineError, Result};

/// Opens (or creates) the metadata database at `path`, with a page cache of at
/// most `cache_bytes` (see `EngineConfig::metadata_cache_bytes`), on the sync
/// pipeline that lets durable commits finish outside the writer mutex.
pub(crate) fn open(path: &Path, cache_bytes: u64) -> Result<(redb::Database, Arc<SyncPipeline>)> {
    let opening = |e: &dyn std::fmt::Display| {
        EngineError::Metadata(format!("opening {}: {e}", path.display()))
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| opening(&e))?;
    let backend = redb::backends::FileBackend::new(file).map_err(|e| opening(&e))?;
    open_pipelined(Box::new(backend), cache_bytes, path)
}

/// Opens (or creates) the metadata database on `backend` (storage other than
/// a local file: see `EngineConfig::external_store`), as [`open`] does.
pub(crate) fn open_backend(
    backend: Box<dyn redb::StorageBackend>,
    cache_bytes: u64,
) -> Result<(redb::Database, Arc<SyncPipeline>)> {
    let name = format!("{backend:?}");
    open_pipelined(backend, cache_bytes, Path::new(&name))
}

fn open_pipelined(
    backend: Box<dyn redb::StorageBackend>,
    cache_bytes: u64,
    name: &Path,
) -> Result<(redb::Database, Arc<SyncPipeline>)> {
    let cache_bytes = usize::try_from(cache_bytes).unwrap_or(usize::MAX);
    let pipeline = SyncPipeline::new(backend)
        .map_err(|e| EngineError::Metadata(format!("opening {}: {e}", name.display())))?;
    let opened = quietly(|| {
        catch_unwind(AssertUnwindSafe(|| {
            redb::Builder::new()
                .set_cache_size(cache_bytes)
                .create_with_backend(pipeline.backend())
        }))
    });
    match opened {
        Ok(Ok(db)) => Ok((db, pipeline)),
        Ok(Err(e)) if is_damage(&e) => Err(damaged(name, &e.to_string())),
        Ok(Err(e)) => Err(EngineError::Metadata(format!(
            "opening {}: {e}",
            name.display()
        ))),
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            Err(damaged(name, &why))
        }
    }
}

/// Whether redb refused the file for what is in it (as opposed to, say, a lock
/// held by another process): corrupt structures, or a read past its end.
fn is_damage(error: &redb::DatabaseError) -> bool {
    match error {
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(_)) => true,
        redb::DatabaseError::Storage(redb::StorageError::Io(e)) => {
            e.kind() == std::io::ErrorKind::UnexpectedEof
        }
        _ => false,
    }
}

fn damaged(path: &Path, why: &str) -> EngineError {
    EngineError::Metadata(format!(
        "the metadata file {} is damaged (truncated or overwritten: {why}); the array will \
         not start on it — restore the data directory from a copy",
        path.display()
    ))
}

type Hook = Box<dyn Fn(&PanicHookInfo<'_>) + Sync + Send + 'static>;

/// Runs `f` with the panic message of this thread suppressed (the caught panic
/// is reported as an error instead); other threads' panics print as before.
fn quietly<T>(f: impl FnOnce() -> T) -> T {
    let me = std::thread::current().id();
    let previous: Arc<Hook> = Arc::new(std::panic::take_hook());
    let others = previous.clone();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() != me {
            others(info);
        }
    }));
    let value = f();
    drop(std::panic::take_hook()); // ours, with its clone of `previous`
                                   // Fails only if another hook was installed meanwhile: that one stays.
    if let Ok(hook) = Arc::try_unwrap(previous) {
        std::panic::set_hook(hook);
    }
    value
}
