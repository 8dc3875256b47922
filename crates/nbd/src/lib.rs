//! An NBD server (fixed newstyle handshake, structured replies, `base:allocation`
//! block status, multi-connection) over a storage-agnostic export trait.
//!
//! The crate knows nothing of storage: [`ExportProvider`] and [`BlockExport`]
//! are implemented by the binary over the engine. Export calls may block, so the
//! server makes them on Tokio's blocking pool, except small reads and quick
//! small writes, which the connection's reader runs itself.
//!
//! Access: the server learns who a client is only from TLS. With TLS on
//! ([`Server::with_tls`]), a client that sends `NBD_OPT_STARTTLS` and proves a
//! pre-shared key is known by that key's identity; everyone else is anonymous.
//! The provider decides, per [`Client`], what to list and what to open.
//!
//! Layout: [`protocol`] is the wire format, `handshake` negotiates options,
//! `tls` upgrades a connection to TLS-PSK, `transmission` serves requests,
//! `server` accepts connections.

mod error;
mod export;
mod handshake;
pub mod protocol;
mod server;
mod tls;
mod transmission;

pub use error::ConnectionError;
pub use export::{
    BlockExport, Client, ExportError, ExportProvider, ExportSummary, ExtentKind, OpenError,
};
pub use handshake::{
    BLOCK_SIZE_MAXIMUM_BYTES, BLOCK_SIZE_MINIMUM_BYTES, BLOCK_SIZE_PREFERRED_BYTES,
    MAX_OPTIONS_PER_CONNECTION, MAX_OPTION_DATA_BYTES,
};
pub use server::{serve, serve_connection, serve_unix, Server, ServerConfig};
pub use tls::{
    PskKeys, TlsError, TlsMode, TlsSetupError, MAX_PSK_IDENTITY_BYTES, MAX_PSK_KEY_BYTES,
    MIN_PSK_KEY_BYTES,
};
pub use transmission::{
    MAX_BLOCK_STATUS_EXTENTS, MAX_DRAINABLE_PAYLOAD_BYTES, MAX_IN_FLIGHT_BYTES_PER_CONNECTION,
    MAX_IN_FLIGHT_PER_CONNECTION, MAX_REQUEST_PAYLOAD_BYTES,
};
