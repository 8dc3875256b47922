//! `lacuna serve --store rados`: the array's segments and metadata on a Ceph
//! pool (docs/SCALE-OUT.md). The gateway waits as a standby until it owns the
//! shard (fencing the previous owner if it died), opens the engine on it, and
//! renews its lease for as long as it serves. A gateway that loses the shard
//! (another took it: the cluster refuses this one) stops at once, so that its
//! clients fail over to the new owner; so does one that cannot renew within
//! its lease.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use lacuna_rados_store::ownership::{last_owner, lost_ownership, Ownership};

/// The namespace of the array's one shard (docs/SCALE-OUT.md).
pub const SHARD_NAMESPACE: &str = "shard-0";
/// Exit status of a gateway that lost its shard.
pub const LOST_SHARD_EXIT: i32 = 75;

/// Where the shard is and who this gateway is.
#[derive(Debug, Clone)]
pub struct RadosStore {
    pub ceph_conf: PathBuf,
    pub pool: String,
    pub gateway: String,
    pub lease: Duration,
}

/// The shard, owned.
pub struct OwnedShard {
    pub store: lacuna_engine::ExternalStore,
    ownership: Arc<Ownership>,
    /// Set (under its lock) when the shard is released: the lease thread
    /// renews only while it is not, so no renewal follows the release.
    released: Arc<parking_lot::Mutex<bool>>,
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
    let io = Arc::new(
        cluster
            .io(&config.pool, SHARD_NAMESPACE)
            .with_context(|| format!("opening pool {}", config.pool))?,
    );
    let mut reported = None;
    let ownership = loop {
        match Ownership::try_take(cluster.clone(), io.clone(), &config.gateway, config.lease) {
            Ok(ownership) => break ownership,
            Err(e) if e.is_busy() => {
                let owner = last_owner(&io).ok().flatten().map(|o| o.gateway);
                if reported != owner {
                    println!(
                        "lacuna: standby: {SHARD_NAMESPACE} of pool {} is owned by {}; waiting for its lease",
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
            "lacuna: took {SHARD_NAMESPACE} over from {} ({}), fenced at the cluster",
            previous.gateway, previous.address
        ),
        None => println!("lacuna: owner of {SHARD_NAMESPACE} in pool {}", config.pool),
    }
    Ok(OwnedShard {
        store: lacuna_rados_store::shard_store(
            io,
            &format!("pool {} namespace {SHARD_NAMESPACE}", config.pool),
        ),
        ownership: Arc::new(ownership),
        released: Arc::new(parking_lot::Mutex::new(false)),
    })
}

impl OwnedShard {
    /// Renews the lease every third of it, on a thread of its own; stops the
    /// process when the shard is lost or the lease would run out unrenewed.
    pub fn keep(&self) {
        let ownership = self.ownership.clone();
        let released = self.released.clone();
        std::thread::Builder::new()
            .name("lacuna-lease".into())
            .spawn(move || renew_until_released(&ownership, &released))
            .expect("spawning the lease thread");
    }

    /// Gives the shard up after a clean stop: another gateway takes it at
    /// once and need not fence this one.
    pub fn release(self) -> anyhow::Result<()> {
        let mut released = self.released.lock();
        *released = true;
        self.ownership.release().context("releasing the shard")
    }
}

fn renew_until_released(ownership: &Ownership, released: &parking_lot::Mutex<bool>) {
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
                tracing::error!("lost {SHARD_NAMESPACE} to another gateway ({e}); stopping");
                eprintln!("lacuna: lost {SHARD_NAMESPACE} to another gateway ({e}); stopping");
                std::process::exit(LOST_SHARD_EXIT);
            }
            Err(e) if renewed.elapsed() + lease / 3 >= lease => {
                eprintln!("lacuna: could not renew the lease of {SHARD_NAMESPACE} in time ({e}); stopping");
                std::process::exit(LOST_SHARD_EXIT);
            }
            Err(e) => tracing::warn!("renewing the lease of {SHARD_NAMESPACE}: {e}; retrying"),
        }
    }
}
