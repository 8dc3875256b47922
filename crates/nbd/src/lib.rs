//! Lacuna's NBD server: fixed newstyle handshake (EXPORT_NAME, ABORT, LIST, INFO,
//! GO, STRUCTURED_REPLY, LIST/SET_META_CONTEXT with `base:allocation`), and the
//! transmission phase with READ (structured, holes as OFFSET_HOLE), WRITE, FLUSH,
//! TRIM, WRITE_ZEROES (NO_HOLE, FAST_ZERO), BLOCK_STATUS, CACHE, DISC and FUA,
//! pipelined and answered out of order, advertising multi-conn.
//!
//! The server knows nothing of storage: it serves whatever implements
//! [`ExportProvider`] and [`BlockExport`].

pub mod export;
pub mod handshake;
pub mod protocol;
pub mod server;
pub mod transmission;

pub use export::{BlockExport, ExportError, ExportProvider, ExportSummary, ExtentKind};
pub use server::{serve, serve_connection, ServerConfig};
