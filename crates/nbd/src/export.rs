//! What the NBD server needs from storage. The server knows nothing of volumes or
//! engines: the binary adapts its storage to these traits.

use std::sync::Arc;

/// The export catalogue.
pub trait ExportProvider: Send + Sync + 'static {
    /// Exports for NBD_OPT_LIST.
    fn list(&self) -> Vec<ExportSummary>;
    /// None if no such export (or the client may not open it).
    fn open(&self, name: &str) -> Option<Arc<dyn BlockExport>>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    pub name: String,
    pub description: String,
}

/// State of a run of bytes for `base:allocation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtentKind {
    Data,
    /// Allocated, reads as zeroes.
    Zero,
    /// Unallocated, reads as zeroes.
    Hole,
}

/// Failures an export reports; each maps to an NBD errno.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    #[error("I/O error: {0}")]
    Io(String),
    #[error("no space: {0}")]
    NoSpace(String),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("read-only export")]
    ReadOnly,
}

impl ExportError {
    pub fn errno(&self) -> u32 {
        use crate::protocol::*;
        match self {
            ExportError::Io(_) => EIO,
            ExportError::NoSpace(_) => ENOSPC,
            ExportError::Invalid(_) => EINVAL,
            ExportError::ReadOnly => EPERM,
        }
    }
}

/// One block device behind an export. Methods block (they do disk I/O); the
/// server calls them from a blocking thread pool.
pub trait BlockExport: Send + Sync + 'static {
    fn size_bytes(&self) -> Result<u64, ExportError>;
    fn description(&self) -> String;
    fn read_only(&self) -> bool;
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError>;
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), ExportError>;
    fn trim(&self, offset: u64, length: u64) -> Result<(), ExportError>;
    fn write_zeroes(&self, offset: u64, length: u64, allow_unmap: bool) -> Result<(), ExportError>;
    /// Makes completed writes durable on every connection of every export
    /// (which is what lets the server advertise multi-conn).
    fn flush(&self) -> Result<(), ExportError>;
    /// Consecutive extents covering a non-empty prefix of [offset, offset+length).
    fn extents(&self, offset: u64, length: u64) -> Result<Vec<(u64, ExtentKind)>, ExportError>;
}
