//! Accept loops and the per-connection driver.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;

use crate::error::ConnectionError;
use crate::export::ExportProvider;
use crate::handshake::{self, Outcome};
use crate::transmission;

/// Exports named in one `NBD_OPT_LIST` reply.
pub const MAX_LISTED_EXPORTS: usize = 4096;
/// Pause after a failed accept (e.g. out of file descriptors) before retrying.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// A client must finish option haggling within this time.
    pub handshake_timeout: Duration,
    /// Connections served at once; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// Export calls running at once on the blocking pool, across all connections.
    pub max_blocking_operations: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            handshake_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_blocking_operations: 128,
        }
    }
}

/// State shared by all connections of a server.
pub struct Shared {
    pub provider: Arc<dyn ExportProvider>,
    pub config: ServerConfig,
    blocking: Arc<Semaphore>,
}

impl Shared {
    /// Runs a (possibly blocking) export call on the blocking pool, bounded by
    /// `max_blocking_operations`. `None` if the call panicked.
    pub async fn run_blocking<T, F>(&self, call: F) -> Option<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let _permit = self
            .blocking
            .acquire()
            .await
            .expect("semaphore never closed");
        tokio::task::spawn_blocking(call).await.ok()
    }
}

/// An NBD server over an export provider.
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

impl Server {
    pub fn new(provider: Arc<dyn ExportProvider>, config: ServerConfig) -> Server {
        assert!(config.max_connections > 0 && config.max_blocking_operations > 0);
        let blocking = Arc::new(Semaphore::new(config.max_blocking_operations));
        Server {
            shared: Arc::new(Shared {
                provider,
                config,
                blocking,
            }),
        }
    }

    /// Accepts TCP connections forever, one task per connection.
    pub async fn serve_tcp(&self, listener: TcpListener) -> std::io::Result<()> {
        let connections = Arc::new(Semaphore::new(self.shared.config.max_connections));
        loop {
            let permit = connections
                .clone()
                .acquire_owned()
                .await
                .expect("semaphore never closed");
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "nbd: accept failed");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                    continue;
                }
            };
            // Replies are latency-bound and written whole: never delay them.
            let _ = stream.set_nodelay(true);
            let server = self.clone();
            tokio::spawn(async move {
                let _permit = permit;
                if let Err(error) = server.serve_connection(stream).await {
                    tracing::debug!(%peer, %error, "nbd: connection ended");
                }
            });
        }
    }

    /// Accepts Unix-socket connections forever, one task per connection.
    pub async fn serve_unix(&self, listener: UnixListener) -> std::io::Result<()> {
        let connections = Arc::new(Semaphore::new(self.shared.config.max_connections));
        loop {
            let permit = connections
                .clone()
                .acquire_owned()
                .await
                .expect("semaphore never closed");
            let (stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "nbd: accept failed");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                    continue;
                }
            };
            let server = self.clone();
            tokio::spawn(async move {
                let _permit = permit;
                if let Err(error) = server.serve_connection(stream).await {
                    tracing::debug!(%error, "nbd: unix connection ended");
                }
            });
        }
    }

    /// Serves one connection, handshake then transmission, over any byte stream.
    pub async fn serve_connection<S>(&self, mut stream: S) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let timeout = self.shared.config.handshake_timeout;
        let negotiated =
            tokio::time::timeout(timeout, handshake::negotiate(&mut stream, &self.shared))
                .await
                .map_err(|_| ConnectionError::HandshakeTimeout)??;
        match negotiated {
            Outcome::Aborted => Ok(()),
            Outcome::Transmission(session) => {
                tracing::debug!(export = %session.name, "nbd: transmission");
                transmission::run(stream, session, self.shared.clone()).await
            }
        }
    }
}

/// Serves NBD on `listener` forever.
pub async fn serve(
    listener: TcpListener,
    provider: Arc<dyn ExportProvider>,
    config: ServerConfig,
) -> std::io::Result<()> {
    Server::new(provider, config).serve_tcp(listener).await
}

/// Serves NBD on a Unix-domain socket forever.
pub async fn serve_unix(
    listener: UnixListener,
    provider: Arc<dyn ExportProvider>,
    config: ServerConfig,
) -> std::io::Result<()> {
    Server::new(provider, config).serve_unix(listener).await
}

/// Serves a single connection over any byte stream (tests, fuzzing, proxies).
pub async fn serve_connection<S>(
    stream: S,
    provider: Arc<dyn ExportProvider>,
    config: ServerConfig,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    Server::new(provider, config).serve_connection(stream).await
}
