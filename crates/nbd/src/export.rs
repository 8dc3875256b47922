//! The storage-facing traits. The NBD crate knows nothing of storage: the binary
//! adapts its engine to these traits, and tests use an in-memory implementation.
//!
//! Every method is synchronous and may block on disk I/O, so the server calls
//! them from the blocking pool; only small reads, and small writes that
//! [`BlockExport::write_is_quick`] calls quick, run on the connection's task.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::protocol;

/// One entry of `NBD_OPT_LIST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    pub name: String,
    pub description: String,
}

/// The allocation state of a run of bytes, as reported by [`BlockExport::extents`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtentKind {
    /// Allocated and holds data (which may happen to be zero).
    Data,
    /// Allocated, and known to read as zeroes.
    Zero,
    /// Not allocated; reads as zeroes.
    Hole,
}

impl ExtentKind {
    /// The `base:allocation` status flags of this state.
    pub fn base_allocation_flags(self) -> u32 {
        match self {
            ExtentKind::Data => 0,
            ExtentKind::Zero => protocol::NBD_STATE_ZERO,
            ExtentKind::Hole => protocol::NBD_STATE_HOLE | protocol::NBD_STATE_ZERO,
        }
    }

    /// Whether the run reads as zeroes, so a read may answer it with a hole chunk.
    pub fn reads_as_zero(self) -> bool {
        matches!(self, ExtentKind::Zero | ExtentKind::Hole)
    }
}

/// Why an export operation failed. Each maps onto one NBD error value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    #[error("I/O error: {0}")]
    Io(String),
    #[error("no space left: {0}")]
    NoSpace(String),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("not permitted: {0}")]
    ReadOnly(String),
    #[error("value too large: {0}")]
    Overflow(String),
    #[error("not supported: {0}")]
    NotSupported(String),
    #[error("shutting down: {0}")]
    Shutdown(String),
}

impl ExportError {
    /// The NBD error value (an errno as numbered by the protocol, not the host).
    pub fn errno(&self) -> u32 {
        match self {
            ExportError::Io(_) => protocol::NBD_EIO,
            ExportError::NoSpace(_) => protocol::NBD_ENOSPC,
            ExportError::Invalid(_) => protocol::NBD_EINVAL,
            ExportError::ReadOnly(_) => protocol::NBD_EPERM,
            ExportError::Overflow(_) => protocol::NBD_EOVERFLOW,
            ExportError::NotSupported(_) => protocol::NBD_ENOTSUP,
            ExportError::Shutdown(_) => protocol::NBD_ESHUTDOWN,
        }
    }
}

/// Who is asking, as far as the connection can tell: what an [`ExportProvider`]
/// decides access on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Client {
    /// The TLS-PSK identity the client proved it holds the key of; `None` for a
    /// client that did not negotiate TLS (anonymous).
    pub identity: Option<String>,
    /// The peer's address; `None` on a Unix socket or an in-memory stream.
    pub address: Option<SocketAddr>,
}

/// Why an export cannot be opened. Each maps onto one option error reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// No such export, or one this client may not see (providers should not
    /// tell the two apart): `NBD_REP_ERR_UNKNOWN`.
    #[error("no such export")]
    Unknown,
    /// The client may not open exports at all as it is (e.g. anonymous on a
    /// closed server); the message says how to get access: `NBD_REP_ERR_POLICY`.
    #[error("{0}")]
    Denied(String),
}

/// The set of exports a server offers, and who may see which.
pub trait ExportProvider: Send + Sync + 'static {
    /// Exports for `NBD_OPT_LIST`: only those `client` may open.
    fn list(&self, client: &Client) -> Vec<ExportSummary>;
    /// Opens an export for `client`.
    fn open(&self, client: &Client, name: &str) -> Result<Arc<dyn BlockExport>, OpenError>;
}

/// One block device. The server checks every range against the size it read at
/// open time before calling in, so implementations see only in-range requests
/// with nonzero lengths.
pub trait BlockExport: Send + Sync + 'static {
    fn size_bytes(&self) -> Result<u64, ExportError>;
    fn description(&self) -> String;
    fn read_only(&self) -> bool;
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError>;
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), ExportError>;
    /// `write` of data in a shared buffer, which an export may keep slices
    /// of (for as long as it likes) instead of copying what it keeps.
    fn write_shared(&self, offset: u64, data: &bytes::Bytes) -> Result<(), ExportError> {
        self.write(offset, data)
    }
    fn trim(&self, offset: u64, length: u64) -> Result<(), ExportError>;
    fn write_zeroes(&self, offset: u64, length: u64, allow_unmap: bool) -> Result<(), ExportError>;
    /// Makes completed writes durable on every connection of every export
    /// (which is what lets the server advertise multi-conn).
    fn flush(&self) -> Result<(), ExportError>;
    /// Consecutive extents starting at `offset`, as (length, state). They should
    /// cover `[offset, offset + length)`; the server clips any excess, treats an
    /// uncovered tail as data for reads and omits it from block status.
    fn extents(&self, offset: u64, length: u64) -> Result<Vec<(u64, ExtentKind)>, ExportError>;
    /// [`BlockExport::read`] if it can be made without waiting for a disk
    /// (from memory): `Ok(false)` otherwise, with `buf` holding nothing in
    /// particular. The server runs small reads on the connection's own task
    /// this way, and the rest on the blocking pool. The default says no.
    fn read_from_memory(&self, _offset: u64, _buf: &mut [u8]) -> Result<bool, ExportError> {
        Ok(false)
    }
    /// Whether a write of `length` bytes returns in about the time of a read
    /// (it will not wait for background work), so that the server may run it
    /// on the connection's own task. The default says no.
    fn write_is_quick(&self, _length: u64) -> bool {
        false
    }
    /// A hint to prefetch a range (`NBD_CMD_CACHE`). The default does nothing.
    fn cache(&self, _offset: u64, _length: u64) -> Result<(), ExportError> {
        Ok(())
    }
}
