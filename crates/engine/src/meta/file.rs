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

use crate::{EngineError, Result};

/// Opens (or creates) the metadata database at `path`, with a page cache of at
/// most `cache_bytes` (see `EngineConfig::metadata_cache_bytes`).
pub(crate) fn open(path: &Path, cache_bytes: u64) -> Result<redb::Database> {
    let cache_bytes = usize::try_from(cache_bytes).unwrap_or(usize::MAX);
    let opened = quietly(|| {
        catch_unwind(AssertUnwindSafe(|| {
            redb::Builder::new()
                .set_cache_size(cache_bytes)
                .create(path)
        }))
    });
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) if is_damage(&e) => Err(damaged(path, &e.to_string())),
        Ok(Err(e)) => Err(EngineError::Metadata(format!(
            "opening {}: {e}",
            path.display()
        ))),
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            Err(damaged(path, &why))
        }
    }
}

/// Opens (or creates) the metadata database on `backend` (storage other than
/// a local file: see `EngineConfig::external_store`), as [`open`] does.
pub(crate) fn open_backend(
    backend: Box<dyn redb::StorageBackend>,
    cache_bytes: u64,
) -> Result<redb::Database> {
    let cache_bytes = usize::try_from(cache_bytes).unwrap_or(usize::MAX);
    let name = format!("{backend:?}");
    let opened = quietly(|| {
        catch_unwind(AssertUnwindSafe(|| {
            redb::Builder::new()
                .set_cache_size(cache_bytes)
                .create_with_backend(BoxedBackend(backend))
        }))
    });
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) if is_damage(&e) => Err(damaged(Path::new(&name), &e.to_string())),
        Ok(Err(e)) => Err(EngineError::Metadata(format!("opening {name}: {e}"))),
        Err(_) => Err(damaged(Path::new(&name), "redb stopped on it")),
    }
}

/// A boxed backend as the concrete one redb's builder takes.
#[derive(Debug)]
struct BoxedBackend(Box<dyn redb::StorageBackend>);

impl redb::StorageBackend for BoxedBackend {
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.0.write(offset, data)
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
