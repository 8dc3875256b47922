//! The VASA provider's control routes: its state (listener, certificate and
//! its expiry, sessions, registered clients, active alarms), a restart of
//! the provider alone, and a new self-signed provider certificate. The SOAP
//! service itself is the provider's own HTTPS port, not these routes.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use lacuna_vasa::ProviderServer;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::doc_only::{InternalError, NotImplemented};
use crate::{ApiError, ApiState};

/// The provider certificate.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VasaCertificate {
    pub subject: String,
    pub issuer: String,
    pub serial_hex: String,
    pub not_before_unix_s: i64,
    pub not_after_unix_s: i64,
    /// Whole days until it expires (negative once expired)
    pub days_left: i64,
    pub sha256_fingerprint_hex: String,
    pub self_signed: bool,
    /// The chain, PEM (what a client should trust)
    pub pem: String,
}

/// Body of `GET /v1/vasa`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VasaStatus {
    pub running: bool,
    /// Where it listens, while it runs
    pub listen: Option<String>,
    /// What an administrator registers in vCenter
    pub version_url: String,
    pub service_url: String,
    /// When it last started, seconds since the Unix epoch
    pub started_unix_s: u64,
    pub sessions: u64,
    pub calls_in_flight: u64,
    /// Client certificates registered (registerVASACertificate)
    pub registered_clients: u64,
    /// CA certificates registered (registerCACertificatesAndCRLs)
    pub ca_certificates: u64,
    pub certificate: VasaCertificate,
    /// Alarms raised and not cleared, as messages
    pub alarms: Vec<String>,
    /// The user name registration takes (the password is the API token)
    pub user_name: String,
}

fn vasa(state: &ApiState) -> Result<Arc<ProviderServer>, ApiError> {
    state.vasa.clone().ok_or(ApiError::VasaUnavailable)
}

fn status_of(server: &ProviderServer) -> VasaStatus {
    let provider = server.provider();
    let info = provider.certs.info();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let config = provider.config();
    VasaStatus {
        running: server.local_addr().is_some(),
        listen: server.local_addr().map(|a| a.to_string()),
        version_url: config.service_url.replace(
            lacuna_vasa::wsdl::SERVICE_PATH,
            lacuna_vasa::wsdl::VERSION_PATH,
        ),
        service_url: config.service_url.clone(),
        started_unix_s: server.started_unix_s(),
        sessions: provider.sessions.len() as u64,
        calls_in_flight: u64::from(provider.sessions.in_flight()),
        registered_clients: provider.certs.client_count() as u64,
        ca_certificates: provider.certs.ca_certificates_pem().len() as u64,
        certificate: VasaCertificate {
            days_left: (info.not_after_unix_s - now).div_euclid(86_400),
            subject: info.subject,
            issuer: info.issuer,
            serial_hex: info.serial_hex,
            not_before_unix_s: info.not_before_unix_s,
            not_after_unix_s: info.not_after_unix_s,
            sha256_fingerprint_hex: info.sha256_fingerprint_hex,
            self_signed: info.self_signed,
            pem: provider.certs.provider_certificate_pem(),
        },
        alarms: provider
            .alarms
            .active()
            .into_iter()
            .map(|a| a.message)
            .collect(),
        user_name: config.user_name.clone(),
    }
}

/// The VASA provider: where to register it, its certificate and expiry, its sessions
#[utoipa::path(
    get, path = "/v1/vasa", operation_id = "showVasaProvider",
    responses((status = 200, description = "The provider", body = VasaStatus), (status = 501, response = NotImplemented))
)]
async fn show_vasa(State(state): State<ApiState>) -> Result<Json<VasaStatus>, ApiError> {
    let server = vasa(&state)?;
    Ok(Json(status_of(&server)))
}

/// Restart the VASA provider alone: every session ends, I/O to bound vVols goes on
#[utoipa::path(
    post, path = "/v1/vasa/restart", operation_id = "restartVasaProvider",
    responses((status = 200, description = "Restarted", body = VasaStatus), (status = 500, response = InternalError), (status = 501, response = NotImplemented))
)]
async fn restart_vasa(State(state): State<ApiState>) -> Result<Json<VasaStatus>, ApiError> {
    let server = vasa(&state)?;
    server
        .restart()
        .await
        .map_err(|e| ApiError::Internal(format!("restarting the VASA provider: {e}")))?;
    Ok(Json(status_of(&server)))
}

/// A new key and self-signed provider certificate, at once: new connections get it, sessions made before end
#[utoipa::path(
    post, path = "/v1/vasa/certificate/rotate", operation_id = "rotateVasaCertificate",
    responses((status = 200, description = "Rotated", body = VasaStatus), (status = 500, response = InternalError), (status = 501, response = NotImplemented))
)]
async fn rotate_vasa_certificate(
    State(state): State<ApiState>,
) -> Result<Json<VasaStatus>, ApiError> {
    let server = vasa(&state)?;
    let rotating = server.clone();
    tokio::task::spawn_blocking(move || {
        let result = rotating.provider().certs.rotate_self_signed();
        rotating.provider().check_certificate_alarm();
        result
    })
    .await
    .map_err(|e| ApiError::Internal(format!("rotation task failed: {e}")))?
    .map_err(|f| ApiError::Internal(format!("rotating the certificate: {}", f.message)))?;
    Ok(Json(status_of(&server)))
}

pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::default()
        .routes(routes!(show_vasa))
        .routes(routes!(restart_vasa))
        .routes(routes!(rotate_vasa_certificate))
}
