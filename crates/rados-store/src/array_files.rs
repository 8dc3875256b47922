//! The array's small files on the cluster: the API token, the array id (from
//! which every SCSI identity derives) and the host registry, each one whole
//! object `array.<file name>` in the shard's namespace, replaced whole on
//! every change (`write_full`, atomic).
//!
//! Why here and not in each gateway's directory: they belong to the array. A
//! gateway that takes the shard over must present the same LUN identities,
//! let in the same hosts with the same CHAP secrets and answer to the same
//! token, or an initiator that fails over sees a different array. The owner
//! copies them into its data directory before it opens them (the local
//! files are then copies, like its caches), and writes a change to the
//! cluster before its own copy: a fenced gateway's change is refused by the
//! cluster, and the one that took over never sees it.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use lacuna_rados::IoCtx;

const PREFIX: &str = "array.";
/// Largest array file taken from the cluster (the host registry of many
/// hosts stays far below it).
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Which copy of an array file won when a gateway took the shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    /// The cluster's: written over the local file.
    FromCluster,
    /// Only the local file existed (the array's first gateway): sent.
    ToCluster,
    /// Neither exists yet.
    Neither,
}

#[derive(Clone)]
pub struct ArrayFiles {
    io: Arc<IoCtx>,
}

impl ArrayFiles {
    pub fn new(io: Arc<IoCtx>) -> ArrayFiles {
        ArrayFiles { io }
    }

    fn object(name: &str) -> String {
        format!("{PREFIX}{name}")
    }

    /// The cluster's copy of `name`, if there is one.
    pub fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let object = Self::object(name);
        let size_bytes = match self.io.size(&object) {
            Ok(size_bytes) => size_bytes,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if size_bytes > MAX_FILE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{object} holds {size_bytes} bytes, more than an array file may"),
            ));
        }
        let mut bytes = vec![0u8; size_bytes as usize];
        let got = self.io.read(&object, 0, &mut bytes)?;
        bytes.truncate(got);
        Ok(Some(bytes))
    }

    /// Replaces the cluster's copy of `name` (refused once this gateway is
    /// fenced).
    pub fn write(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        assert!(
            bytes.len() as u64 <= MAX_FILE_BYTES,
            "an array file of {} bytes",
            bytes.len()
        );
        Ok(self.io.write_full(&Self::object(name), bytes)?)
    }

    /// Makes `dir/name` agree with the cluster: the cluster's copy wins; a
    /// file only this gateway has is sent (an array's first gateway, or one
    /// whose files predate the cluster's copies, adopts its own).
    pub fn reconcile(&self, dir: &Path, name: &str) -> io::Result<Reconciled> {
        let path = dir.join(name);
        if let Some(bytes) = self.read(name)? {
            write_private(&path, &bytes)?;
            return Ok(Reconciled::FromCluster);
        }
        match std::fs::read(&path) {
            Ok(bytes) => {
                self.write(name, &bytes)?;
                Ok(Reconciled::ToCluster)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Reconciled::Neither),
            Err(e) => Err(e),
        }
    }
}

/// Replaces `path` with `bytes`, readable by this user only, atomically
/// (temporary file, fsync, rename).
fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("from-cluster.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}
