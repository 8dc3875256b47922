//! Accept loops and the per-connection driver.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use lacuna_sockpoll::PollSlots;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ConnectionError;
use crate::export::{Client, ExportProvider};
use crate::handshake::{self, Negotiation, Outcome, TlsPhase};
use crate::tls::{PskKeys, TlsAcceptor, TlsMode, TlsSetupError};
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
    /// Payload and reply bytes buffered across all connections (each also
    /// has its own budget, `MAX_IN_FLIGHT_BYTES_PER_CONNECTION`). At least
    /// one maximal request must fit.
    pub max_buffered_bytes: usize,
    /// Writing one batch of replies: a client that reads nothing for this
    /// long is dropped, and what its requests held is freed.
    pub reply_write_timeout: Duration,
    /// How long a plain TCP connection that has answered everything polls its
    /// socket before it sleeps (see `lacuna_sockpoll`); zero never polls, at
    /// most [`lacuna_sockpoll::IDLE_POLL_MAX`].
    pub idle_poll: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            handshake_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_blocking_operations: 128,
            max_buffered_bytes: 1 << 30,
            reply_write_timeout: Duration::from_secs(60),
            idle_poll: lacuna_sockpoll::DEFAULT_IDLE_POLL,
        }
    }
}

/// What a connection on a plain socket needs to poll it when idle.
pub(crate) struct SocketPoll {
    /// The socket's descriptor, open as long as its stream lives.
    pub fd: RawFd,
    /// Connections allowed to poll at once.
    pub slots: Arc<PollSlots>,
}

/// State shared by all connections of a server.
pub struct Shared {
    pub provider: Arc<dyn ExportProvider>,
    pub config: ServerConfig,
    blocking: Arc<Semaphore>,
    /// Bytes buffered across connections (`ServerConfig::max_buffered_bytes`).
    pub(crate) buffers: Arc<Semaphore>,
    /// None: the server does not offer TLS.
    tls: Option<TlsAcceptor>,
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

    /// A place among the `max_blocking_operations`, if one is free now.
    pub(crate) fn try_blocking_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.blocking.clone().try_acquire_owned().ok()
    }
}

/// An NBD server over an export provider.
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

impl Server {
    /// A server without TLS: every client is anonymous.
    pub fn new(provider: Arc<dyn ExportProvider>, config: ServerConfig) -> Server {
        Server::build(provider, config, None)
    }

    /// A server that offers (or requires) TLS with the pre-shared keys of `keys`;
    /// clients that use it are known to the provider by their PSK identity.
    pub fn with_tls(
        provider: Arc<dyn ExportProvider>,
        config: ServerConfig,
        mode: TlsMode,
        keys: Arc<dyn PskKeys>,
    ) -> Result<Server, TlsSetupError> {
        let acceptor = TlsAcceptor::new(mode, keys)?;
        Ok(Server::build(provider, config, Some(acceptor)))
    }

    fn build(
        provider: Arc<dyn ExportProvider>,
        config: ServerConfig,
        tls: Option<TlsAcceptor>,
    ) -> Server {
        assert!(config.max_connections > 0 && config.max_blocking_operations > 0);
        assert!(config.idle_poll <= lacuna_sockpoll::IDLE_POLL_MAX);
        assert!(
            config.max_buffered_bytes >= crate::transmission::MAX_REQUEST_PAYLOAD_BYTES as usize
        );
        let blocking = Arc::new(Semaphore::new(config.max_blocking_operations));
        let buffers = Arc::new(Semaphore::new(config.max_buffered_bytes));
        Server {
            shared: Arc::new(Shared {
                provider,
                config,
                blocking,
                buffers,
                tls,
            }),
        }
    }

    /// Accepts TCP connections forever, one task per connection.
    pub async fn serve_tcp(&self, listener: TcpListener) -> std::io::Result<()> {
        let connections = Arc::new(Semaphore::new(self.shared.config.max_connections));
        let poll_slots = Arc::new(PollSlots::for_current_runtime());
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
            let poll = SocketPoll {
                fd: stream.as_raw_fd(),
                slots: poll_slots.clone(),
            };
            tokio::spawn(async move {
                let _permit = permit;
                let served = server.serve_polled(stream, Some(peer), Some(poll)).await;
                if let Err(error) = served {
                    log_ended(&error, Some(peer));
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
                if let Err(error) = server.serve_client(stream, None).await {
                    log_ended(&error, None);
                }
            });
        }
    }

    /// Serves one connection, handshake then transmission, over any byte
    /// stream, from a client of unknown address.
    pub async fn serve_connection<S>(&self, stream: S) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.serve_client(stream, None).await
    }

    /// Serves one connection from `address`: the handshake (with the TLS upgrade
    /// when the client asks for it) within the handshake timeout, then
    /// transmission over whichever stream the handshake ended on.
    pub async fn serve_client<S>(
        &self,
        stream: S,
        address: Option<SocketAddr>,
    ) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.serve_polled(stream, address, None).await
    }

    /// [`Server::serve_client`], with `poll` when `stream` is a plain socket
    /// that transmission may poll (not once TLS is up: its bytes need
    /// decrypting).
    async fn serve_polled<S>(
        &self,
        mut stream: S,
        address: Option<SocketAddr>,
        poll: Option<SocketPoll>,
    ) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let deadline = tokio::time::Instant::now() + self.shared.config.handshake_timeout;
        let phase = match &self.shared.tls {
            None => TlsPhase::NotOffered,
            Some(tls) if tls.mode == TlsMode::Required => TlsPhase::Required,
            Some(_) => TlsPhase::Offered,
        };
        let client = Client {
            identity: None,
            address,
        };
        let mut state = Negotiation::new(client, phase);
        let shared = &self.shared;
        let outcome = within(deadline, async {
            handshake::greet(&mut stream, &mut state).await?;
            handshake::haggle(&mut stream, shared, &mut state).await
        })
        .await?;
        let session = match outcome {
            Outcome::Aborted => return Ok(()),
            Outcome::Transmission(session) => session,
            Outcome::StartTls => return self.serve_tls(stream, state, deadline).await,
        };
        self.transmit(stream, session, &state, poll).await
    }

    /// After an acknowledged STARTTLS: the TLS handshake, then haggling and
    /// transmission inside TLS, as the client whose key was proven.
    async fn serve_tls<S>(
        &self,
        stream: S,
        mut state: Negotiation,
        deadline: tokio::time::Instant,
    ) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let shared = &self.shared;
        let tls = shared
            .tls
            .as_ref()
            .expect("STARTTLS is acknowledged only with TLS");
        let (mut stream, identity) =
            within(deadline, async { Ok(tls.accept(stream).await?) }).await?;
        tracing::debug!(address = ?state.client().address, identity, "nbd: TLS up");
        state.tls_started(identity);
        let outcome = within(deadline, handshake::haggle(&mut stream, shared, &mut state)).await?;
        match outcome {
            Outcome::Aborted => Ok(()),
            Outcome::Transmission(session) => self.transmit(stream, session, &state, None).await,
            Outcome::StartTls => unreachable!("STARTTLS is refused once TLS is up"),
        }
    }

    async fn transmit<S>(
        &self,
        stream: S,
        session: handshake::Session,
        state: &Negotiation,
        poll: Option<SocketPoll>,
    ) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let identity = state.client().identity.as_deref();
        tracing::debug!(export = %session.name, ?identity, "nbd: transmission");
        transmission::run(stream, session, self.shared.clone(), poll).await
    }
}

/// Runs one handshake phase, failing it when the handshake's deadline passes.
async fn within<T>(
    deadline: tokio::time::Instant,
    phase: impl std::future::Future<Output = Result<T, ConnectionError>>,
) -> Result<T, ConnectionError> {
    tokio::time::timeout_at(deadline, phase)
        .await
        .map_err(|_| ConnectionError::HandshakeTimeout)?
}

/// A failed TLS handshake is worth an operator's attention (a wrong key or an
/// unknown identity); other ends of connections are routine.
fn log_ended(error: &ConnectionError, peer: Option<SocketAddr>) {
    match error {
        ConnectionError::Tls(error) => tracing::info!(?peer, %error, "nbd: TLS refused"),
        error => tracing::debug!(?peer, %error, "nbd: connection ended"),
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
