//! Lacuna's storage engine: thin-provisioned, deduplicated, compressed block volumes
//! stored in an append-only segment log, with metadata in an embedded KV engine.
//!
//! The engine knows nothing of NBD, SCSI or sockets. Protocol layers call the
//! synchronous API of [`Engine`] and [`Volume`] (from a blocking thread pool).

pub mod error;
pub mod report;

use std::path::PathBuf;
use std::sync::Arc;

pub use error::{EngineError, Result};
pub use report::{Extent, ExtentState, SpaceReport, VolumeInfo};

/// Bytes per logical sector exposed to hosts.
pub const SECTOR_BYTES: u64 = 512;
/// Bytes per mapping grain: the unit of dedup, compression and mapping.
pub const GRAIN_BYTES: u64 = 4096;

/// Where and how big the array is.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    /// Physical capacity the array may use in its data directory.
    pub capacity_bytes: u64,
}

/// The array: volumes, the segment log and the metadata store.
pub struct Engine {
    _private: (),
}

/// A handle for I/O on one volume. Cheap to clone.
#[derive(Clone)]
pub struct Volume {
    _engine: Arc<Engine>,
    name: String,
}

impl Engine {
    pub fn open(_config: EngineConfig) -> Result<Arc<Engine>> {
        unimplemented!()
    }
    pub fn capacity_bytes(&self) -> u64 {
        unimplemented!()
    }
    /// Volume names are 1..=64 characters of `[A-Za-z0-9._-]`, not starting with `.`.
    pub fn create_volume(&self, _name: &str, _size_bytes: u64) -> Result<VolumeInfo> {
        unimplemented!()
    }
    pub fn delete_volume(&self, _name: &str) -> Result<()> {
        unimplemented!()
    }
    pub fn resize_volume(&self, _name: &str, _size_bytes: u64) -> Result<VolumeInfo> {
        unimplemented!()
    }
    pub fn volume_info(&self, _name: &str) -> Result<VolumeInfo> {
        unimplemented!()
    }
    pub fn list_volumes(&self) -> Vec<VolumeInfo> {
        unimplemented!()
    }
    pub fn open_volume(self: &Arc<Self>, _name: &str) -> Result<Volume> {
        unimplemented!()
    }
    pub fn space(&self) -> SpaceReport {
        unimplemented!()
    }
    /// Makes every write completed so far, on every volume, durable.
    pub fn flush(&self) -> Result<()> {
        unimplemented!()
    }
}

impl Volume {
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Current size (volumes can be resized while open). Fails if deleted.
    pub fn size_bytes(&self) -> Result<u64> {
        unimplemented!()
    }
    /// Reads `buf.len()` bytes at any byte offset. Holes read as zeroes.
    pub fn read(&self, _offset_bytes: u64, _buf: &mut [u8]) -> Result<()> {
        unimplemented!()
    }
    /// Writes at any byte offset (sub-grain writes read-modify-write the grain).
    pub fn write(&self, _offset_bytes: u64, _data: &[u8]) -> Result<()> {
        unimplemented!()
    }
    /// Deallocates a range; it reads back as zeroes. Metadata-only.
    pub fn unmap(&self, _offset_bytes: u64, _length_bytes: u64) -> Result<()> {
        unimplemented!()
    }
    /// Zeroes a range. With `allow_unmap` the range becomes a hole, otherwise it
    /// stays allocated as zeroes. Metadata-only either way.
    pub fn write_zeroes(&self, _offset_bytes: u64, _length_bytes: u64, _allow_unmap: bool) -> Result<()> {
        unimplemented!()
    }
    /// Same as [`Engine::flush`]: durability is array-wide (NBD multi-conn safe).
    pub fn flush(&self) -> Result<()> {
        unimplemented!()
    }
    /// The states of `[offset, offset+length)` as consecutive extents covering it.
    pub fn extents(&self, _offset_bytes: u64, _length_bytes: u64) -> Result<Vec<Extent>> {
        unimplemented!()
    }
}
