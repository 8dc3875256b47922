//! `lacuna serve`: opens the engine on the data directory and serves NBD and the
//! control API until SIGINT / SIGTERM, then flushes and closes cleanly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use lacuna_engine::{Engine, EngineConfig};

use crate::hosts::{HostRegistry, RegistryHosts};
use crate::nbd_export::{HostKeys, VolumeExports};
use crate::scsi_backend::{self, EngineBackend, HostAccess};

/// Capacity used when none is given: 16 GiB, or half the free space of the data
/// directory's filesystem if that is less, so a default start never fills a
/// small disk.
pub const DEFAULT_CAPACITY_BYTES: u64 = 16 << 30;

pub struct ServeConfig {
    pub data_dir: PathBuf,
    pub capacity_bytes: Option<u64>,
    pub nbd_listen: SocketAddr,
    pub api_listen: SocketAddr,
    /// The VASA provider's HTTPS address; none: no provider.
    pub vasa_listen: Option<SocketAddr>,
    pub iscsi_listen: Vec<SocketAddr>,
    pub iscsi_target_name: Option<String>,
    pub iscsi_open_access: bool,
    /// How long an answered iSCSI connection polls before it sleeps.
    pub iscsi_poll_us: u32,
    /// How long an answered NBD connection polls before it sleeps.
    pub nbd_poll_us: u32,
    /// Anonymous (non-TLS) NBD clients see every volume.
    pub nbd_open_access: bool,
    pub nbd_tls: NbdTls,
    pub soft_threshold_percent: u8,
    pub destroy_retention_s: u64,
    /// Most memory the metadata page cache may take.
    pub metadata_cache_bytes: u64,
    /// When new data is compressed.
    pub reduction: lacuna_engine::ReductionMode,
    /// Rate of the background scrub; none without one.
    pub scrub_rate_bytes_per_s: Option<u64>,
    /// Segments and metadata on a Ceph pool instead of the data directory.
    pub rados: Option<crate::rados_shard::RadosStore>,
}

/// Whether the NBD server offers TLS (`serve --nbd-tls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NbdTls {
    /// No TLS: every client is anonymous.
    Off,
    /// STARTTLS offered: hosts authenticate with their pre-shared key; plain
    /// clients are anonymous.
    On,
    /// Only STARTTLS (and abort) before TLS: plain clients get nothing.
    Require,
}

fn free_bytes_of(dir: &std::path::Path) -> Option<u64> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: path is a valid C string and stat a valid out-pointer.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    (rc == 0).then(|| stat.f_bavail as u64 * stat.f_frsize as u64)
}

pub fn default_capacity(data_dir: &std::path::Path) -> u64 {
    let half_free = free_bytes_of(data_dir)
        .map(|f| f / 2)
        .unwrap_or(DEFAULT_CAPACITY_BYTES);
    let capacity = DEFAULT_CAPACITY_BYTES.min(half_free);
    capacity - capacity % (1 << 20)
}

pub fn run(config: ServeConfig) -> anyhow::Result<()> {
    // Everything the daemon creates is its own alone (docs/SECURITY.md): the
    // engine makes its files private itself, and this covers the rest (the
    // API token, the array id, the host registry's temporary file).
    // SAFETY: umask only sets the process's file mode creation mask.
    unsafe { libc::umask(0o077) };
    let descriptor_limit = crate::descriptors::raise_limit();
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating the data directory {}", config.data_dir.display()))?;
    let capacity_bytes = config
        .capacity_bytes
        .unwrap_or_else(|| default_capacity(&config.data_dir));
    let shard = config
        .rados
        .as_ref()
        .map(crate::rados_shard::take)
        .transpose()?;
    let engine = Engine::open(EngineConfig {
        soft_threshold_percent: config.soft_threshold_percent,
        destroy_retention_s: config.destroy_retention_s,
        metadata_cache_bytes: config.metadata_cache_bytes,
        reduction: config.reduction,
        external_store: shard.as_ref().map(|s| s.store.clone()),
        ..EngineConfig::new(config.data_dir.clone(), capacity_bytes)
    })
    .with_context(|| format!("opening the array in {}", config.data_dir.display()))?;
    if let Some(shard) = &shard {
        shard.keep();
    }
    if let Some(rate) = config.scrub_rate_bytes_per_s {
        engine
            .start_background_scrub(rate)
            .context("starting the background scrub")?;
        tracing::info!(rate_bytes_per_s = rate, "background scrub on");
    }
    // On RADOS the array's files are the cluster's; the local ones copies.
    let array_files = shard.as_ref().map(|s| s.array_files());
    let absent_files = match &array_files {
        Some(files) => crate::rados_shard::reconcile_array_files(files, &config.data_dir)?,
        None => Vec::new(),
    };
    let token =
        lacuna_api::load_or_create_token(&config.data_dir).context("creating the API token")?;
    let mut registry = HostRegistry::open(&config.data_dir, config.iscsi_open_access)
        .context("loading the host registry")?;
    if let Some(files) = &array_files {
        let files = files.clone();
        registry = registry.with_mirror(Box::new(move |bytes| {
            files.write(lacuna_hosts::HOSTS_FILE_NAME, bytes)
        }));
    }
    let hosts = Arc::new(registry);
    let array_id = scsi_backend::array_id(&config.data_dir).context("loading the array id")?;
    if let Some(files) = &array_files {
        // What this start created (an array's first gateway) goes there too.
        crate::rados_shard::publish_created_files(files, &config.data_dir, &absent_files)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(64)
        .build()
        .context("starting the runtime")?;
    // Counted once the engine, the runtime and the registry are open.
    let connections = crate::descriptors::budget(
        descriptor_limit,
        crate::descriptors::open_now(),
        crate::descriptors::ConnectionBudget {
            nbd: lacuna_nbd::ServerConfig::default().max_connections,
            iscsi: lacuna_iscsi::Limits::default().max_connections,
            api: lacuna_api::ApiLimits::default().max_connections,
            vasa: lacuna_vasa::ServerLimits::default().max_connections,
        },
    )?;
    tracing::info!(
        descriptor_limit,
        engine_reserve = crate::descriptors::ENGINE_RESERVE_FDS,
        nbd = connections.nbd,
        iscsi = connections.iscsi,
        api = connections.api,
        vasa = connections.vasa,
        "connection bounds"
    );
    let result = runtime.block_on(serve_all(
        engine.clone(),
        &config,
        capacity_bytes,
        token,
        Iscsi { hosts, array_id },
        connections,
        shard.as_ref(),
    ));
    let closed = engine.close().context("closing the array");
    let released = match shard {
        Some(shard) => shard.release(),
        None => Ok(()),
    };
    result.and(closed).and(released)
}

/// What the iSCSI target is built from.
struct Iscsi {
    hosts: Arc<HostRegistry>,
    array_id: [u8; 16],
}

/// The sessions open now: the SCSI core's I_T nexuses (iSCSI) and the NBD
/// exports the monitor lists.
struct LiveSessions {
    scsi: Arc<lacuna_scsi::ScsiCore>,
    hosts: Arc<HostRegistry>,
    monitor: Arc<lacuna_monitor::Monitor>,
}

impl lacuna_api::monitor::LiveSessionSource for LiveSessions {
    fn live_sessions(&self) -> Vec<lacuna_monitor::LiveSession> {
        let iscsi = self.scsi.nexuses().into_iter().map(|nexus| {
            let host = self.hosts.host_of(&nexus.initiator_name).map(|h| h.name);
            lacuna_monitor::LiveSession {
                protocol: lacuna_monitor::Protocol::Iscsi,
                host,
                initiator: nexus.initiator_port,
                export: None,
                since_unix_s: None,
            }
        });
        iscsi.chain(self.monitor.connections.list()).collect()
    }
}

/// The NBD server: TLS as configured, keys and access from the host registry.
fn nbd_server(
    engine: Arc<Engine>,
    hosts: Arc<HostRegistry>,
    vvols: Arc<lacuna_vvol::VvolService>,
    monitor: Arc<lacuna_monitor::Monitor>,
    config: &ServeConfig,
    max_connections: usize,
) -> anyhow::Result<lacuna_nbd::Server> {
    let provider = Arc::new(VolumeExports {
        engine,
        hosts: hosts.clone(),
        open_access: config.nbd_open_access,
        vvols,
        monitor,
    });
    let server_config = lacuna_nbd::ServerConfig {
        idle_poll: std::time::Duration::from_micros(u64::from(config.nbd_poll_us)),
        max_connections,
        ..lacuna_nbd::ServerConfig::default()
    };
    let mode = match config.nbd_tls {
        NbdTls::Off => return Ok(lacuna_nbd::Server::new(provider, server_config)),
        NbdTls::On => lacuna_nbd::TlsMode::Offered,
        NbdTls::Require => lacuna_nbd::TlsMode::Required,
    };
    let keys = Arc::new(HostKeys { hosts });
    lacuna_nbd::Server::with_tls(provider, server_config, mode, keys)
        .context("setting up NBD TLS (OpenSSL)")
}

/// One phrase for the start-up banner: who may use NBD.
fn nbd_access_summary(config: &ServeConfig) -> &'static str {
    match (config.nbd_tls, config.nbd_open_access) {
        (NbdTls::Off, true) => "no TLS, open access",
        (NbdTls::Off, false) => {
            "no TLS and no open access: no NBD client can open anything (see --nbd-tls, --nbd-open-access)"
        }
        (NbdTls::On, true) => "TLS-PSK for hosts, open access for anonymous clients",
        (NbdTls::On, false) => "TLS-PSK: hosts see their connected volumes",
        (NbdTls::Require, _) => "TLS-PSK required: hosts see their connected volumes",
    }
}

async fn serve_all(
    engine: Arc<Engine>,
    config: &ServeConfig,
    capacity_bytes: u64,
    token: String,
    iscsi: Iscsi,
    connections: crate::descriptors::ConnectionBudget,
    shard: Option<&crate::rados_shard::OwnedShard>,
) -> anyhow::Result<()> {
    let mut target_config = lacuna_iscsi::TargetConfig::for_array("lacuna");
    if let Some(name) = &config.iscsi_target_name {
        target_config.target_name = name.clone();
    }
    target_config.portals = config.iscsi_listen.clone();
    target_config.allow_unknown_initiators = config.iscsi_open_access;
    target_config.limits.max_connections = connections.iscsi;
    target_config.idle_poll = std::time::Duration::from_micros(u64::from(config.iscsi_poll_us));
    let port_groups = shard.and_then(|shard| shard.port_groups());
    if let Some(groups) = &port_groups {
        use lacuna_scsi::port_groups::PortGroups;
        target_config.relative_target_port = groups.own_group();
    }
    let mut portals = Vec::new();
    for addr in &config.iscsi_listen {
        portals.push(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding iSCSI to {addr}"))?,
        );
    }
    target_config.portals = portals
        .iter()
        .map(|l| l.local_addr())
        .collect::<std::io::Result<_>>()?;
    let nbd_listener = tokio::net::TcpListener::bind(config.nbd_listen)
        .await
        .with_context(|| format!("binding NBD to {}", config.nbd_listen))?;
    let api_listener = tokio::net::TcpListener::bind(config.api_listen)
        .await
        .with_context(|| format!("binding the API to {}", config.api_listen))?;
    println!(
        "lacuna: data directory {}, capacity {} bytes ({:.1} GiB)\nlacuna: NBD on {} (nbd://{}/VOLUME, {})\nlacuna: API on http://{} (token in {})\nlacuna: dashboard on http://{}/ (sign in with that token)",
        config.data_dir.display(),
        capacity_bytes,
        capacity_bytes as f64 / (1u64 << 30) as f64,
        nbd_listener.local_addr()?,
        nbd_listener.local_addr()?,
        nbd_access_summary(config),
        api_listener.local_addr()?,
        config.data_dir.join("api-token").display(),
        api_listener.local_addr()?,
    );
    for portal in &target_config.portals {
        println!(
            "lacuna: iSCSI on {portal} (iscsi://{portal}/{}/LUN)",
            target_config.target_name
        );
    }
    let vvol_hosts = Arc::new(crate::protocol_endpoint::VvolHosts {
        hosts: iscsi.hosts.clone(),
        unit_id: crate::protocol_endpoint::unit_id(iscsi.array_id),
    });
    let vvols = match shard {
        Some(shard) => lacuna_vvol::VvolService::open_on(
            engine.clone(),
            shard
                .vvol_store()
                .context("opening the vVol store's objects")?,
            vvol_hosts,
        ),
        None => lacuna_vvol::VvolService::open(engine.clone(), &config.data_dir, vvol_hosts),
    }
    .context("opening the vVol store")?;
    let unbind_deleted = vvols.clone();
    let host_control = Arc::new(RegistryHosts {
        registry: iscsi.hosts.clone(),
        engine: engine.clone(),
        on_delete: Some(Arc::new(move |host: &str| {
            if let Err(e) = unbind_deleted.unbind_all(host) {
                tracing::error!(host, "unbinding the vVols of a deleted host: {e}");
            }
        })),
    });
    host_control
        .reconcile()
        .context("binding the host registry's grants to volumes")?;
    let monitor =
        Arc::new(lacuna_monitor::Monitor::open(&config.data_dir).context("opening the event log")?);
    let backend = Arc::new(EngineBackend::new(
        engine.clone(),
        iscsi.hosts.clone(),
        vvols.clone(),
        iscsi.array_id,
        monitor.clone(),
    ));
    let mut scsi = lacuna_scsi::ScsiCore::new(backend);
    if let Some(groups) = port_groups {
        scsi = scsi.with_port_groups(groups);
    }
    let scsi = Arc::new(scsi);
    let live_sessions = Arc::new(LiveSessions {
        scsi: scsi.clone(),
        hosts: iscsi.hosts.clone(),
        monitor: monitor.clone(),
    });
    let policy = Arc::new(HostAccess {
        hosts: iscsi.hosts.clone(),
        monitor: monitor.clone(),
    });
    let (stop_iscsi, iscsi_stopped) = tokio::sync::oneshot::channel::<()>();
    let iscsi_target = tokio::spawn(lacuna_iscsi::serve(
        portals,
        scsi,
        policy,
        Arc::new(target_config),
        async move {
            let _ = iscsi_stopped.await;
        },
    ));
    let nbd = nbd_server(
        engine.clone(),
        iscsi.hosts.clone(),
        vvols.clone(),
        monitor.clone(),
        config,
        connections.nbd,
    )?;
    let nbd = nbd.serve_tcp(nbd_listener);
    let vasa = match config.vasa_listen {
        Some(listen) => {
            let server = crate::vasa_provider::start(crate::vasa_provider::VasaSetup {
                data_dir: &config.data_dir,
                listen,
                vvols: vvols.clone(),
                hosts: iscsi.hosts.clone(),
                array_id: iscsi.array_id,
                token: token.clone(),
                iscsi_portals: config.iscsi_listen.clone(),
                max_connections: connections.vasa,
            })
            .await?;
            if let Some(addr) = server.local_addr() {
                println!(
                    "lacuna: VASA provider on https://{addr}{} (register https://{addr}{} in vCenter; user {}, password the API token)",
                    lacuna_vasa::wsdl::SERVICE_PATH,
                    lacuna_vasa::wsdl::VERSION_PATH,
                    crate::vasa_provider::USER_NAME
                );
            }
            Some(server)
        }
        None => None,
    };
    let sampler = tokio::spawn(crate::sampler::run(
        engine.clone(),
        monitor.clone(),
        vasa.clone(),
    ));
    let mut api_state = lacuna_api::ApiState::new(engine, token)
        .with_hosts(host_control)
        .with_live_sessions(live_sessions)
        .with_vvols(vvols)
        .with_monitor(monitor);
    if let Some(shard) = shard {
        api_state = api_state.with_gateways(shard.gateway_source());
    }
    if let Some(server) = &vasa {
        api_state = api_state.with_vasa(server.clone());
    }
    let api_limits = lacuna_api::ApiLimits {
        max_connections: connections.api,
        ..lacuna_api::ApiLimits::default()
    };
    let api = lacuna_api::serve_with_limits(api_listener, api_state, api_limits);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = nbd => r.context("NBD server failed")?,
        r = api => r.context("API server failed")?,
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
        _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
    }
    sampler.abort();
    if let Some(server) = &vasa {
        server.stop().await;
    }
    // iSCSI sessions are asked to log out before the array closes.
    let _ = stop_iscsi.send(());
    match tokio::time::timeout(std::time::Duration::from_secs(5), iscsi_target).await {
        Ok(Ok(result)) => result.context("iSCSI target failed")?,
        Ok(Err(e)) => tracing::error!("iSCSI target task failed: {e}"),
        Err(_) => tracing::warn!("iSCSI sessions did not close within 5 s"),
    }
    Ok(())
}
