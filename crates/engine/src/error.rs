//! Typed engine errors. Protocol layers map these onto their own error codes
//! (NBD errno values, SCSI sense data); the engine never knows which.

use std::io;

/// Every failure the engine can report to a caller.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("volume '{0}' does not exist")]
    VolumeNotFound(String),
    #[error("volume '{0}' already exists")]
    VolumeExists(String),
    #[error("snapshot '{0}' does not exist")]
    SnapshotNotFound(String),
    #[error("snapshot '{0}' already exists")]
    SnapshotExists(String),
    #[error("container '{0}' does not exist")]
    ContainerNotFound(String),
    #[error("container '{0}' already exists")]
    ContainerExists(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error(
        "range {offset_bytes}+{length_bytes} is beyond the end of the volume ({size_bytes} bytes)"
    )]
    OutOfRange {
        offset_bytes: u64,
        length_bytes: u64,
        size_bytes: u64,
    },
    #[error("out of space: {0}")]
    NoSpace(String),
    #[error("corrupt record: {0}")]
    Corruption(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("metadata store: {0}")]
    Metadata(String),
    /// The data directory was written in a layout this build does not read
    /// (docs/FORMAT.md); nothing in it was read or changed.
    #[error("the data directory has format version {found}; this build reads version {supported}")]
    UnsupportedFormat { found: u64, supported: u64 },
    /// A read asked not to wait for the disk ([`crate::Volume::read_from_memory`])
    /// found data that is not in memory. Not a failure: the caller reads again
    /// where it may wait.
    #[error("{0}: not in memory")]
    WouldBlock(String),
    /// A write batch's shared metadata transaction failed after some of its
    /// writes were acknowledged: the array takes no more I/O until restarted.
    #[error("the array stopped taking I/O after a failed metadata transaction ({0}); restart it to recover to the last flush")]
    Fenced(String),
}

pub type Result<T> = std::result::Result<T, EngineError>;

impl EngineError {
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::WouldBlock {
            return EngineError::WouldBlock(context.into());
        }
        EngineError::Io {
            context: context.into(),
            source,
        }
    }
}
