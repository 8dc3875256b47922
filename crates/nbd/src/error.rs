//! Why a connection ended abnormally. Protocol violations that leave the stream
//! unframeable end the connection; everything else is answered on the wire.

use crate::export::ExportError;

#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("client sent a bad magic number")]
    BadMagic,
    #[error("client sent unknown handshake flags {0:#x}")]
    UnknownClientFlags(u32),
    #[error("option data of {0} bytes exceeds the limit")]
    OptionTooLong(u32),
    #[error("client sent more than the maximum number of options")]
    TooManyOptions,
    #[error("NBD_OPT_EXPORT_NAME named an unusable export {0:?}")]
    UnknownExport(String),
    #[error("NBD_OPT_EXPORT_NAME carried an invalid name")]
    InvalidExportName,
    #[error("handshake did not finish in time")]
    HandshakeTimeout,
    #[error("write payload of {0} bytes is too large to drain")]
    PayloadTooLarge(u32),
    #[error("export failed during the handshake: {0}")]
    Export(#[from] ExportError),
    #[error("a blocking export call panicked or was cancelled")]
    BlockingTask,
    #[error("NBD_OPT_EXPORT_NAME before the TLS the server requires")]
    TlsRequired,
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}
