//! Serving the API's connections, with bounds: a hostile or broken client can
//! hold at most one of [`ApiLimits::max_connections`] connections, and none for
//! long without sending a request (`header_timeout`, also the keep-alive idle
//! time) or while trickling a body ([`crate::extract::BODY_TIMEOUT`]). Past the
//! bound, new connections wait in the listen backlog; a failed accept (out of
//! descriptors, say) is retried, never the end of the server.
//!
//! Why not `axum::serve`: it sets no header-read timeout and accepts without
//! bound, so 300 idle sockets once took every descriptor of the daemon.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;

use crate::ApiState;

/// How long to wait before accepting again after a failed accept.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Bounds of the API listener (docs/SECURITY.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// A request's head must arrive within this; an idle keep-alive
    /// connection is closed after it.
    pub header_timeout: Duration,
}

impl Default for ApiLimits {
    fn default() -> Self {
        ApiLimits {
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
        }
    }
}

/// Serves the API on `listener` with the default limits.
pub async fn serve(listener: tokio::net::TcpListener, state: ApiState) -> std::io::Result<()> {
    serve_with_limits(listener, state, ApiLimits::default()).await
}

/// Serves the API on `listener` until the task is dropped.
pub async fn serve_with_limits(
    listener: tokio::net::TcpListener,
    state: ApiState,
    limits: ApiLimits,
) -> std::io::Result<()> {
    assert!(
        limits.max_connections > 0,
        "the API serves at least one connection"
    );
    let app = crate::router(state);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    loop {
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "api: accept failed");
                tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(app.clone());
        let connection = http.serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(error) = connection.await {
                tracing::debug!(%error, "api: connection ended");
            }
        });
    }
}
