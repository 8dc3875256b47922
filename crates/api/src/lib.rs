//! Lacuna's control plane: a REST API (JSON over HTTP) in front of the engine.
//! Every route but `/healthz` needs `Authorization: Bearer <token>`; the token is
//! created at first start in the data directory with mode 0600, so a CLI on the
//! same machine finds it and nobody else can read it.

mod auth;
mod openapi;
mod routes;

use std::sync::Arc;

use lacuna_engine::Engine;

pub use auth::load_or_create_token;

/// What every handler needs.
#[derive(Clone)]
pub struct ApiState {
    engine: Arc<Engine>,
    token: Arc<str>,
}

impl ApiState {
    pub fn new(engine: Arc<Engine>, token: String) -> Self {
        ApiState {
            engine,
            token: token.into(),
        }
    }
}

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

pub fn router(state: ApiState) -> axum::Router {
    routes::router(state)
}

/// Serves the API on `listener` until it fails.
pub async fn serve(listener: tokio::net::TcpListener, state: ApiState) -> std::io::Result<()> {
    axum::serve(listener, router(state)).await
}
