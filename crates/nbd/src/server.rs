//! Accepting connections: one task per client, a bound on how many are served at
//! once, and a deadline on the handshake so idle sockets cannot hold slots.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::export::ExportProvider;
use crate::{handshake, transmission};

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Connections served at once; more are closed at accept.
    pub max_connections: usize,
    /// Time a client has to finish the handshake.
    pub handshake_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 256,
            handshake_timeout: Duration::from_secs(30),
        }
    }
}

/// Serves NBD on `listener` until the listener fails.
pub async fn serve(
    listener: TcpListener,
    provider: Arc<dyn ExportProvider>,
    config: ServerConfig,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(config.max_connections));
    loop {
        let (socket, peer) = listener.accept().await?;
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "NBD connection refused: {} connections already", config.max_connections);
            continue;
        };
        let _ = socket.set_nodelay(true);
        let provider = provider.clone();
        let config = config.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(socket, provider, &config).await {
                tracing::debug!(%peer, "NBD connection ended: {e}");
            }
            drop(slot);
        });
    }
}

/// Runs one connection (any byte stream: TCP, Unix socket, an in-memory duplex
/// in tests) through handshake and transmission.
pub async fn serve_connection<S>(
    mut stream: S,
    provider: Arc<dyn ExportProvider>,
    config: &ServerConfig,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let negotiated = tokio::time::timeout(
        config.handshake_timeout,
        handshake::negotiate(&mut stream, provider.as_ref()),
    )
    .await;
    let session = match negotiated {
        Ok(Ok(session)) => session,
        Ok(Err(e)) => {
            tracing::debug!("NBD handshake ended: {e}");
            return Ok(());
        }
        Err(_) => {
            tracing::debug!("NBD handshake timed out");
            return Ok(());
        }
    };
    tracing::debug!(export = %session.name, structured = session.structured_replies, "NBD client attached");
    transmission::transmit(stream, session).await
}
