//! `lacuna serve --store rados`: the array's segments and metadata on a Ceph
//! pool (docs/SCALE-OUT.md). The gateway waits as a standby until it owns the
//! shard (fencing the previous owner if it died), opens the engine on it, and
//! renews its lease for as long as it serves. A gateway that loses the shard
//! (another took it: the cluster refuses this one) stops at once, so that its
//! clients fail over to the new owner; so does one that cannot renew within
//! its lease.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use lacuna_api::gateways::{GatewayInfo, GatewaySource, GatewaysAnswer, Portal, ShardInfo};
use lacuna_rados_store::array_files::{ArrayFiles, Reconciled};
use lacuna_rados_store::membership::{self, GatewayRecord, Role};
use lacuna_rados_store::ownership::{last_owner, lost_ownership, Ownership};

/// Exit status of a gateway that lost its shard.
pub const LOST_SHARD_EXIT: i32 = 75;

/// Where the shard is and who this gateway is.
#[derive(Debug, Clone)]
pub struct RadosStore {
    pub ceph_conf: PathBuf,
    pub pool: String,
    pub gateway: String,
    /// The shard this gateway serves or stands by for (`--shard`): a RADOS
    /// namespace of the pool holding one array.
    pub shard: String,
    pub lease: Duration,
    /// Where this gateway serves (`api`, `nbd`, `iscsi` → `host:port`), for
    /// its membership record.
    pub portals: Vec<(String, String)>,
    /// This gateway's ALUA target port group (`--port-group`).
    pub port_group: Option<u16>,
}

/// The shard, owned.
pub struct OwnedShard {
    pub store: lacuna_engine::ExternalStore,
    ownership: Arc<Ownership>,
    shard: String,
    /// Set (under its lock) when the shard is released: the lease thread
    /// renews only while it is not, so no renewal follows the release.
    released: Arc<parking_lot::Mutex<bool>>,
    membership: Arc<Membership>,
    /// What `GET /v1/gateways` reads.
    view: Arc<PoolView>,
    /// The shard's namespace, for the array's files and vVol store.
    io: Arc<lacuna_rados::IoCtx>,
}

/// The array's files that move with the shard (`lacuna_rados_store::array_files`).
const ARRAY_FILE_NAMES: [&str; 3] = [
    lacuna_api::TOKEN_FILE_NAME,
    crate::scsi_backend::ARRAY_ID_FILE,
    lacuna_hosts::HOSTS_FILE_NAME,
];
/// Prefix of the vVol store's objects in the shard's namespace.
const VVOL_STORE_PREFIX: &str = "vvols";

/// Makes the array's files in `data_dir` the cluster's (or, for those the
/// cluster lacks, sends this gateway's there); returns those neither had.
pub fn reconcile_array_files(
    files: &ArrayFiles,
    data_dir: &Path,
) -> anyhow::Result<Vec<&'static str>> {
    let mut absent = Vec::new();
    for name in ARRAY_FILE_NAMES {
        let way = files
            .reconcile(data_dir, name)
            .with_context(|| format!("taking the array's {name} from the cluster"))?;
        tracing::info!(file = name, ?way, "array file reconciled with the cluster");
        if way == Reconciled::Neither {
            absent.push(name);
        }
    }
    Ok(absent)
}

/// Sends the files of `names` that this start created in `data_dir`.
pub fn publish_created_files(
    files: &ArrayFiles,
    data_dir: &Path,
    names: &[&str],
) -> anyhow::Result<()> {
    for name in names {
        match std::fs::read(data_dir.join(name)) {
            Ok(bytes) => files
                .write(name, &bytes)
                .with_context(|| format!("sending the array's {name} to the cluster"))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {name}")),
        }
    }
    Ok(())
}

/// This gateway's membership record, rewritten every third of the lease by
/// a thread of its own until the gateway stops.
struct Membership {
    io: lacuna_rados::IoCtx,
    record: parking_lot::Mutex<GatewayRecord>,
    /// Set (under its lock) on a clean stop, before the record is withdrawn.
    stopped: parking_lot::Mutex<bool>,
    /// The pool's ALUA groups, read again at every beat (with `--port-group`).
    port_groups: Option<Arc<GatewayPortGroups>>,
}

impl Membership {
    fn start(
        cluster: &Arc<lacuna_rados::Cluster>,
        config: &RadosStore,
    ) -> anyhow::Result<Arc<Membership>> {
        let io = cluster
            .io(&config.pool, membership::NAMESPACE)
            .with_context(|| format!("opening pool {}", config.pool))?;
        let now = membership::now_unix_ms();
        let record = GatewayRecord {
            gateway: config.gateway.clone(),
            address: cluster.address().context("reading this client's address")?,
            role: Role::Standby,
            shard: config.shard.clone(),
            portals: config.portals.clone(),
            pid: std::process::id(),
            started_unix_ms: now,
            seen_unix_ms: now,
            lease_ms: config.lease.as_millis() as u64,
            port_group: config.port_group,
        };
        let membership = Arc::new(Membership {
            io,
            record: parking_lot::Mutex::new(record),
            stopped: parking_lot::Mutex::new(false),
            port_groups: config
                .port_group
                .map(|group| GatewayPortGroups::new(group, &config.shard)),
        });
        membership
            .announce()
            .context("writing this gateway's record")?;
        let beating = membership.clone();
        let every = config.lease / 3;
        std::thread::Builder::new()
            .name("lacuna-members".into())
            .spawn(move || beating.beat_until_stopped(every))
            .context("spawning the membership thread")?;
        Ok(membership)
    }

    fn announce(&self) -> lacuna_rados::Result<()> {
        let mut record = self.record.lock();
        membership::announce(&self.io, &mut record)
    }

    fn became_owner(&self) {
        self.record.lock().role = Role::Owner;
        if let Err(e) = self.announce() {
            tracing::warn!("writing this gateway's record: {e}");
        }
    }

    fn beat_until_stopped(&self, every: Duration) {
        let mut failing = false;
        loop {
            std::thread::sleep(every);
            let stopped = self.stopped.lock();
            if *stopped {
                return;
            }
            self.refresh_port_groups();
            match self.announce() {
                Ok(()) => failing = false,
                // Fenced gateways are refused too; they stop soon after.
                Err(e) if !failing => {
                    tracing::warn!("rewriting this gateway's record: {e}");
                    failing = true;
                }
                Err(_) => {}
            }
        }
    }

    /// Reads the pool's gateways into this one's ALUA groups (with
    /// `--port-group`); a failed read keeps the groups last read.
    fn refresh_port_groups(&self) -> Option<Arc<GatewayPortGroups>> {
        let groups = self.port_groups.clone()?;
        match membership::members(&self.io) {
            Ok(records) => groups.update(&records, membership::now_unix_ms()),
            Err(e) => tracing::debug!("reading the pool's gateways: {e}"),
        }
        Some(groups)
    }

    /// Stops the rewrites and removes the record (a clean stop).
    fn withdraw(&self) -> lacuna_rados::Result<()> {
        let mut stopped = self.stopped.lock();
        *stopped = true;
        let gateway = self.record.lock().gateway.clone();
        membership::withdraw(&self.io, &gateway)
    }
}

/// The target port groups of the shard's gateways, as this gateway (serving
/// iSCSI only as the shard's owner) reports them: its own active/optimized,
/// other live ones standby, gone ones offline. Gateways without a group, and
/// those of other shards (other arrays), are not reported.
#[derive(Debug)]
pub struct GatewayPortGroups {
    own: u16,
    shard: String,
    others: parking_lot::RwLock<Vec<lacuna_scsi::port_groups::PortGroup>>,
}

impl GatewayPortGroups {
    fn new(own: u16, shard: &str) -> Arc<GatewayPortGroups> {
        Arc::new(GatewayPortGroups {
            own,
            shard: shard.to_string(),
            others: parking_lot::RwLock::new(Vec::new()),
        })
    }

    fn update(&self, records: &[GatewayRecord], now_unix_ms: u64) {
        use lacuna_scsi::port_groups::{AccessState, PortGroup};
        let mut others: Vec<PortGroup> = records
            .iter()
            .filter(|record| record.shard == self.shard)
            .filter_map(|record| {
                let id = record.port_group.filter(|&id| id != self.own)?;
                let state = if record.is_alive(now_unix_ms) {
                    AccessState::Standby
                } else {
                    AccessState::Offline
                };
                Some(PortGroup { id, state })
            })
            .collect();
        // Two records naming one group (a gateway restarted under a new id):
        // the live one wins.
        others.sort_by_key(|group| (group.id, group.state != AccessState::Standby));
        others.dedup_by_key(|group| group.id);
        *self.others.write() = others;
    }
}

impl lacuna_scsi::port_groups::PortGroups for GatewayPortGroups {
    fn own_group(&self) -> u16 {
        self.own
    }

    fn groups(&self) -> Vec<lacuna_scsi::port_groups::PortGroup> {
        let mut groups = self.others.read().clone();
        groups.push(lacuna_scsi::port_groups::PortGroup {
            id: self.own,
            state: lacuna_scsi::port_groups::AccessState::ActiveOptimized,
        });
        groups
    }
}

/// The pool's gateways and each shard's owner, read from the cluster.
pub struct PoolView {
    cluster: Arc<lacuna_rados::Cluster>,
    members: lacuna_rados::IoCtx,
    /// A shard listed even when no gateway names it (this gateway's).
    shard: String,
    pool: String,
    this_gateway: String,
}

impl PoolView {
    fn read(&self) -> lacuna_rados::Result<GatewaysAnswer> {
        let now = membership::now_unix_ms();
        let records = membership::members(&self.members)?;
        // Every shard a gateway serves or waits for, and this one's.
        let mut shard_names: Vec<String> = records.iter().map(|r| r.shard.clone()).collect();
        shard_names.push(self.shard.clone());
        shard_names.sort();
        shard_names.dedup();
        let mut shards = Vec::with_capacity(shard_names.len());
        for shard in shard_names {
            let owner = last_owner(&self.cluster.io(&self.pool, &shard)?)?;
            shards.push(ShardInfo {
                shard,
                owner: owner.as_ref().map(|o| o.gateway.clone()),
                owner_address: owner.map(|o| o.address),
            });
        }
        let gateways = records
            .into_iter()
            .map(|record| GatewayInfo {
                state: match (record.is_alive(now), record.role) {
                    (false, _) => "gone",
                    (true, Role::Owner) => "owner",
                    (true, Role::Standby) => "standby",
                }
                .to_string(),
                last_seen_ms_ago: now.saturating_sub(record.seen_unix_ms),
                portals: record
                    .portals
                    .iter()
                    .map(|(service, address)| Portal {
                        service: service.clone(),
                        address: address.clone(),
                    })
                    .collect(),
                gateway: record.gateway,
                address: record.address,
                shard: record.shard,
                pid: record.pid,
                started_unix_ms: record.started_unix_ms,
                lease_ms: record.lease_ms,
            })
            .collect();
        Ok(GatewaysAnswer {
            pool: self.pool.clone(),
            this_gateway: self.this_gateway.clone(),
            gateways,
            shards,
        })
    }
}

impl GatewaySource for PoolView {
    fn gateways(&self) -> Result<GatewaysAnswer, String> {
        self.read().map_err(|e| e.to_string())
    }
}

/// `lacuna gateway list --ceph-conf --pool`: the same answer, read by a
/// client of its own (`this_gateway` is `this_gateway` or empty).
pub fn read_gateways(
    ceph_conf: &std::path::Path,
    pool: &str,
    this_gateway: Option<&str>,
) -> anyhow::Result<GatewaysAnswer> {
    let cluster = lacuna_rados::Cluster::connect(ceph_conf)
        .with_context(|| format!("connecting to the cluster of {}", ceph_conf.display()))?;
    let view = PoolView {
        members: cluster
            .io(pool, membership::NAMESPACE)
            .with_context(|| format!("opening pool {pool}"))?,
        cluster,
        shard: membership::DEFAULT_SHARD.to_string(),
        pool: pool.to_string(),
        this_gateway: this_gateway.unwrap_or_default().to_string(),
    };
    view.read().context("reading the gateway records")
}

/// Connects, waits (as a standby) until this gateway owns the shard, and
/// returns the engine's store for it.
pub fn take(config: &RadosStore) -> anyhow::Result<OwnedShard> {
    let cluster = lacuna_rados::Cluster::connect(&config.ceph_conf).with_context(|| {
        format!(
            "connecting to the cluster of {}",
            config.ceph_conf.display()
        )
    })?;
    let shard = config.shard.as_str();
    let io = Arc::new(
        cluster
            .io(&config.pool, shard)
            .with_context(|| format!("opening pool {}", config.pool))?,
    );
    let membership = Membership::start(&cluster, config)?;
    let mut reported = None;
    let ownership = loop {
        match Ownership::try_take(cluster.clone(), io.clone(), &config.gateway, config.lease) {
            Ok(ownership) => break ownership,
            Err(e) if e.is_busy() => {
                let owner = last_owner(&io).ok().flatten().map(|o| o.gateway);
                if reported != owner {
                    println!(
                        "lacuna: standby: {shard} of pool {} is owned by {}; waiting for its lease",
                        config.pool,
                        owner.as_deref().unwrap_or("another gateway")
                    );
                    reported = owner;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(e).context("taking ownership of the shard"),
        }
    };
    match &ownership.fenced {
        Some(previous) => println!(
            "lacuna: took {shard} over from {} ({}), fenced at the cluster",
            previous.gateway, previous.address
        ),
        None => println!("lacuna: owner of {shard} in pool {}", config.pool),
    }
    membership.became_owner();
    let view = Arc::new(PoolView {
        members: cluster
            .io(&config.pool, membership::NAMESPACE)
            .with_context(|| format!("opening pool {}", config.pool))?,
        cluster: cluster.clone(),
        shard: shard.to_string(),
        pool: config.pool.clone(),
        this_gateway: config.gateway.clone(),
    });
    Ok(OwnedShard {
        store: lacuna_rados_store::shard_store(
            io.clone(),
            &format!("pool {} namespace {shard}", config.pool),
        ),
        ownership: Arc::new(ownership),
        shard: shard.to_string(),
        released: Arc::new(parking_lot::Mutex::new(false)),
        membership,
        view,
        io,
    })
}

impl OwnedShard {
    /// Renews the lease every third of it, on a thread of its own; stops the
    /// process when the shard is lost or the lease would run out unrenewed.
    pub fn keep(&self) {
        let ownership = self.ownership.clone();
        let released = self.released.clone();
        let shard = self.shard.clone();
        std::thread::Builder::new()
            .name("lacuna-lease".into())
            .spawn(move || renew_until_released(&ownership, &shard, &released))
            .expect("spawning the lease thread");
    }

    /// Gives the shard up after a clean stop: another gateway takes it at
    /// once and need not fence this one.
    pub fn release(self) -> anyhow::Result<()> {
        let mut released = self.released.lock();
        *released = true;
        self.ownership.release().context("releasing the shard")?;
        self.membership
            .withdraw()
            .context("removing this gateway's record")
    }

    /// The array's files on the cluster.
    pub fn array_files(&self) -> ArrayFiles {
        ArrayFiles::new(self.io.clone())
    }

    /// The vVol store's redb file, as objects of the shard.
    pub fn vvol_store(&self) -> std::io::Result<lacuna_rados_store::StripedBackend> {
        lacuna_rados_store::StripedBackend::open(self.io.clone(), VVOL_STORE_PREFIX)
    }

    /// What `GET /v1/gateways` answers from.
    pub fn gateway_source(&self) -> Arc<dyn GatewaySource> {
        self.view.clone()
    }

    /// The pool's ALUA target port groups for this gateway's iSCSI target,
    /// read now and again at every beat (with `--port-group`; else none).
    pub fn port_groups(&self) -> Option<Arc<GatewayPortGroups>> {
        self.membership.refresh_port_groups()
    }
}

fn renew_until_released(ownership: &Ownership, shard: &str, released: &parking_lot::Mutex<bool>) {
    let lease = ownership.lease();
    let mut renewed = Instant::now();
    loop {
        std::thread::sleep(lease / 3);
        let released = released.lock();
        if *released {
            return;
        }
        match ownership.renew() {
            Ok(()) => renewed = Instant::now(),
            Err(e) if lost_ownership(&e) => {
                tracing::error!("lost {shard} to another gateway ({e}); stopping");
                eprintln!("lacuna: lost {shard} to another gateway ({e}); stopping");
                std::process::exit(LOST_SHARD_EXIT);
            }
            Err(e) if renewed.elapsed() + lease / 3 >= lease => {
                eprintln!("lacuna: could not renew the lease of {shard} in time ({e}); stopping");
                std::process::exit(LOST_SHARD_EXIT);
            }
            Err(e) => tracing::warn!("renewing the lease of {shard}: {e}; retrying"),
        }
    }
}
