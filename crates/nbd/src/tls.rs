//! TLS for `NBD_OPT_STARTTLS`, with pre-shared keys only (no certificates), the
//! way qemu (`tls-creds-psk`), nbdkit (`--tls-psk`) and libnbd (`tls-psk-file`)
//! do it: the client names an identity and proves it holds that identity's key.
//! The proven identity is what the export provider decides access on.
//!
//! TLS 1.3 (PSK with (EC)DHE) and TLS 1.2 PSK ciphersuites are accepted; nothing
//! older. Session tickets are off, so every connection runs the PSK callback and
//! a resumed session can never stand in for a key lookup.

use std::sync::Arc;

use openssl::error::ErrorStack;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslSessionCacheMode, SslVersion,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_openssl::SslStream;

/// Longest PSK identity we look up (RFC 4279 allows 2^16 - 1; names are short).
pub const MAX_PSK_IDENTITY_BYTES: usize = 256;
/// Key sizes accepted from a [`PskKeys`] lookup: at least 128 bits, at most the
/// 512 bits psktool makes with `-s 64`.
pub const MIN_PSK_KEY_BYTES: usize = 16;
pub const MAX_PSK_KEY_BYTES: usize = 64;

/// TLS 1.2 ciphersuites: PSK key exchanges only, forward-secret (ECDHE) ones
/// first. (DHE-PSK would need DH parameters; GnuTLS and OpenSSL clients offer
/// ECDHE-PSK.)
const TLS12_CIPHERS: &str = "ECDHE-PSK:PSK:!NULL:!3DES:!RC4";

/// Where the keys come from: identity → key bytes. Called during TLS handshakes,
/// so it must answer quickly; it must never log the key.
pub trait PskKeys: Send + Sync + 'static {
    /// The key of `identity`, `None` if the identity is unknown (the handshake
    /// then fails).
    fn key(&self, identity: &str) -> Option<Vec<u8>>;
}

/// How a server treats TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// STARTTLS is offered; plain clients may go on without it.
    Offered,
    /// Every option but STARTTLS and ABORT is refused with `NBD_REP_ERR_TLS_REQD`
    /// until TLS is up (the protocol's FORCEDTLS mode).
    Required,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("setting up the TLS context: {0}")]
    OpenSsl(#[from] ErrorStack),
}

/// The server side of TLS-PSK: one context shared by all connections.
pub struct TlsAcceptor {
    pub mode: TlsMode,
    context: SslContext,
    identity_index: openssl::ex_data::Index<Ssl, String>,
}

impl TlsAcceptor {
    pub fn new(mode: TlsMode, keys: Arc<dyn PskKeys>) -> Result<TlsAcceptor, TlsSetupError> {
        let identity_index = identity_index()?;
        let mut builder = SslContextBuilder::new(SslMethod::tls_server())?;
        builder.set_min_proto_version(Some(SslVersion::TLS1_2))?;
        builder.set_cipher_list(TLS12_CIPHERS)?;
        builder.set_options(SslOptions::NO_TICKET | SslOptions::NO_RENEGOTIATION);
        builder.set_session_cache_mode(SslSessionCacheMode::OFF);
        builder.set_num_tickets(0)?;
        builder.set_psk_server_callback(move |ssl, identity, key_out| {
            Ok(psk_lookup(keys.as_ref(), identity, key_out)
                .map(|(identity, length)| {
                    // Remembered on the connection: the provider's access check
                    // needs the identity whose key was proven.
                    ssl.set_ex_data(identity_index, identity);
                    length
                })
                .unwrap_or(0))
        });
        Ok(TlsAcceptor {
            mode,
            context: builder.build(),
            identity_index,
        })
    }

    /// Runs the TLS handshake over `stream`; answers the TLS stream and the
    /// identity the client proved.
    pub async fn accept<S>(&self, stream: S) -> Result<(SslStream<S>, String), TlsError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let ssl = Ssl::new(&self.context).map_err(TlsError::Setup)?;
        let mut tls = SslStream::new(ssl, stream).map_err(TlsError::Setup)?;
        std::pin::Pin::new(&mut tls)
            .accept()
            .await
            .map_err(|e| TlsError::Handshake(e.to_string()))?;
        let identity = tls
            .ssl()
            .ex_data(self.identity_index)
            .cloned()
            .ok_or(TlsError::NoIdentity)?;
        Ok((tls, identity))
    }
}

/// The per-connection slot for the proven identity. OpenSSL never frees an
/// index, so one is made per process, not per server.
fn identity_index() -> Result<openssl::ex_data::Index<Ssl, String>, ErrorStack> {
    static INDEX: std::sync::OnceLock<openssl::ex_data::Index<Ssl, String>> =
        std::sync::OnceLock::new();
    if let Some(index) = INDEX.get() {
        return Ok(*index);
    }
    let index = Ssl::new_ex_index::<String>()?;
    Ok(*INDEX.get_or_init(|| index))
}

/// Why a TLS upgrade failed (the connection is closed: after the ACK there is
/// no way back to plain text).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS setup failed: {0}")]
    Setup(ErrorStack),
    /// A wrong key, an unknown identity, or no TLS at all from the client.
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
    #[error("TLS handshake finished without a pre-shared key identity")]
    NoIdentity,
}

/// Looks `identity` up and copies its key into `key_out`. `None` (no key, and
/// the handshake fails) for an unknown, over-long or non-UTF-8 identity, or a
/// key of a size outside the accepted range.
fn psk_lookup(
    keys: &dyn PskKeys,
    identity: Option<&[u8]>,
    key_out: &mut [u8],
) -> Option<(String, usize)> {
    let identity = identity?;
    if identity.is_empty() || identity.len() > MAX_PSK_IDENTITY_BYTES {
        return None;
    }
    let identity = std::str::from_utf8(identity).ok()?;
    let key = keys.key(identity)?;
    if key.len() < MIN_PSK_KEY_BYTES || key.len() > MAX_PSK_KEY_BYTES || key.len() > key_out.len() {
        tracing::warn!(
            identity,
            "nbd: the PSK of this identity has an unusable size"
        );
        return None;
    }
    key_out[..key.len()].copy_from_slice(&key);
    Some((identity.to_owned(), key.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct OneKey;

    impl PskKeys for OneKey {
        fn key(&self, identity: &str) -> Option<Vec<u8>> {
            match identity {
                "alice" => Some(vec![7u8; 32]),
                "short" => Some(vec![7u8; 8]),
                _ => None,
            }
        }
    }

    #[test]
    fn lookup_copies_known_keys_and_refuses_the_rest() {
        let mut out = [0u8; 256];
        let (identity, length) = psk_lookup(&OneKey, Some(b"alice"), &mut out).unwrap();
        assert_eq!((identity.as_str(), length), ("alice", 32));
        assert_eq!(&out[..32], &[7u8; 32]);
        assert!(psk_lookup(&OneKey, Some(b"bob"), &mut out).is_none());
        assert!(psk_lookup(&OneKey, Some(b"short"), &mut out).is_none());
        assert!(psk_lookup(&OneKey, None, &mut out).is_none());
        assert!(psk_lookup(&OneKey, Some(b""), &mut out).is_none());
        assert!(psk_lookup(&OneKey, Some(&[0xff, 0xfe]), &mut out).is_none());
        assert!(psk_lookup(&OneKey, Some(&[b'a'; 300]), &mut out).is_none());
        let mut small = [0u8; 16];
        assert!(psk_lookup(&OneKey, Some(b"alice"), &mut small).is_none());
    }
}
