//! The VASA provider as the daemon runs it: its certificates in
//! `<data dir>/vasa/`, hosts found by their iSCSI initiators in the host
//! registry, registration with the user `vasa` and the API token as its
//! password, and a check of the certificate's expiry every minute (an alarm
//! and a warning in the log from 30 days before).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lacuna_vasa::{
    Certificates, HostLookup, Provider, ProviderConfig, ProviderServer, ServerLimits,
};
use lacuna_vvol::VvolService;

use crate::hosts::HostRegistry;

/// The user name registration takes.
pub const USER_NAME: &str = "vasa";
/// How often the certificate's expiry is checked.
const EXPIRY_CHECK: Duration = Duration::from_secs(60);

struct RegistryLookup(Arc<HostRegistry>);

impl HostLookup for RegistryLookup {
    fn host_of_initiators(&self, initiators: &[String]) -> Option<String> {
        initiators
            .iter()
            .find_map(|iqn| self.0.host_of(iqn))
            .map(|host| host.name)
    }

    fn host_exists(&self, name: &str) -> bool {
        self.0.get(name).is_ok()
    }
}

/// What the provider is made of.
pub struct VasaSetup<'a> {
    pub data_dir: &'a std::path::Path,
    pub listen: SocketAddr,
    pub vvols: Arc<VvolService>,
    pub hosts: Arc<HostRegistry>,
    pub array_id: [u8; 16],
    pub token: String,
    pub iscsi_portals: Vec<SocketAddr>,
    pub max_connections: usize,
}

/// The names a self-signed provider certificate carries for `listen`.
fn certificate_names(listen: SocketAddr) -> Vec<String> {
    let mut names = vec!["localhost".to_string()];
    if listen.ip().is_unspecified() {
        names.extend(["127.0.0.1".to_string(), "::1".to_string()]);
    } else {
        names.push(listen.ip().to_string());
    }
    names
}

/// Binds the provider's port and starts it.
pub async fn start(setup: VasaSetup<'_>) -> anyhow::Result<Arc<ProviderServer>> {
    let certs = Certificates::open(
        &setup.data_dir.join("vasa"),
        certificate_names(setup.listen),
    )
    .context("opening the VASA provider's certificates")?;
    let listener = tokio::net::TcpListener::bind(setup.listen)
        .await
        .with_context(|| format!("binding the VASA provider to {}", setup.listen))?;
    let local = listener.local_addr()?;
    let config = ProviderConfig {
        array_id: format!("lacuna:{}", hex::encode(setup.array_id)),
        array_name: "lacuna".to_string(),
        service_url: format!("https://{local}{}", lacuna_vasa::wsdl::SERVICE_PATH),
        user_name: USER_NAME.to_string(),
        password: setup.token,
        iscsi_portals: setup.iscsi_portals.iter().map(|p| p.to_string()).collect(),
    };
    let provider = Arc::new(Provider::new(
        setup.vvols,
        Arc::new(RegistryLookup(setup.hosts)),
        certs,
        config,
    ));
    let limits = ServerLimits {
        max_connections: setup.max_connections,
        ..ServerLimits::default()
    };
    let server = Arc::new(ProviderServer::new(provider.clone(), local, limits));
    server.start_on(listener)?;
    tokio::spawn(watch_expiry(provider));
    Ok(server)
}

async fn watch_expiry(provider: Arc<Provider>) {
    let mut tick = tokio::time::interval(EXPIRY_CHECK);
    loop {
        tick.tick().await;
        provider.check_certificate_alarm();
        for alarm in provider.alarms.active() {
            tracing::warn!(message = alarm.message, "VASA provider alarm");
        }
    }
}
