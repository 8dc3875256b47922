//! Serving portals: accept connections on every listener into one target, and shut down
//! cleanly (ask initiators to log out, then close).
//!
//! Why one call serves several listeners: sessions, TSIHs and session reinstatement are
//! per target, not per portal, and SendTargets must list every portal. Multipath initiators
//! log in through two portals to the same target and must find the same sessions registry.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use lacuna_scsi::target::ScsiTarget;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::config::TargetConfig;
use crate::connection;
use crate::policy::AccessPolicy;
use crate::session::Registry;
use lacuna_sockpoll::{PollSlots, IDLE_POLL_MAX};

/// Everything connections of one target share.
pub(crate) struct Target {
    pub scsi: Arc<dyn ScsiTarget>,
    pub policy: Arc<dyn AccessPolicy>,
    pub config: Arc<TargetConfig>,
    pub registry: Registry,
    /// Addresses of the listeners served, advertised by SendTargets.
    pub portals: Vec<SocketAddr>,
    pub shutdown: watch::Receiver<bool>,
    /// Connections allowed to poll their sockets at once (`lacuna_sockpoll`).
    pub poll_slots: Arc<PollSlots>,
    /// One permit per connection served (`Limits::max_connections`).
    pub connection_slots: Arc<Semaphore>,
    /// Write data held across sessions (`Limits::write_buffers_max_bytes`).
    pub write_buffers: WriteBuffers,
}

/// A budget of write buffer bytes, counted in KiB permits.
#[derive(Clone)]
pub(crate) struct WriteBuffers(Arc<Semaphore>);

/// Budgets count in KiB.
const WRITE_BUFFER_UNIT_BYTES: u64 = 1024;

impl WriteBuffers {
    pub fn new(max_bytes: u64) -> WriteBuffers {
        let units = (max_bytes / WRITE_BUFFER_UNIT_BYTES) as usize;
        WriteBuffers(Arc::new(Semaphore::new(units)))
    }

    /// Room for `bytes`, if there is some now; given back when dropped.
    pub fn try_take(&self, bytes: u32) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let units = u64::from(bytes).div_ceil(WRITE_BUFFER_UNIT_BYTES);
        let units = u32::try_from(units).expect("a transfer counts below 2^32 KiB");
        self.0.clone().try_acquire_many_owned(units).ok()
    }
}

/// Binds every portal of the configuration.
pub async fn bind_portals(config: &TargetConfig) -> io::Result<Vec<TcpListener>> {
    let mut listeners = Vec::with_capacity(config.portals.len());
    for portal in &config.portals {
        listeners.push(TcpListener::bind(portal).await?);
    }
    Ok(listeners)
}

/// Serves the target on every listener until `shutdown` completes. Then initiators are
/// asked to log out (asynchronous message), connections close after
/// `config.timeouts.shutdown_grace`, and this returns once every connection has finished.
pub async fn serve(
    listeners: Vec<TcpListener>,
    target: Arc<dyn ScsiTarget>,
    policy: Arc<dyn AccessPolicy>,
    config: Arc<TargetConfig>,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    if listeners.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no listener to serve",
        ));
    }
    let limits = &config.limits;
    if limits.max_connections == 0
        || limits.task_management_max == 0
        || limits.session_pool_commands_max == 0
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "max_connections, task_management_max and session_pool_commands_max must be at \
             least 1",
        ));
    }
    let largest_write = u64::from(limits.max_write_transfer_bytes);
    if limits.write_buffers_max_bytes < largest_write
        || limits.session_write_buffers_max_bytes < largest_write
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "write buffer budgets must hold the largest write allowed",
        ));
    }
    if config.idle_poll > IDLE_POLL_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "idle poll {:?} is longer than {IDLE_POLL_MAX:?}",
                config.idle_poll
            ),
        ));
    }
    let portals = listeners
        .iter()
        .map(TcpListener::local_addr)
        .collect::<io::Result<Vec<_>>>()?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let poll_slots = Arc::new(PollSlots::for_current_runtime());
    let connection_slots = Arc::new(Semaphore::new(limits.max_connections));
    let write_buffers = WriteBuffers::new(limits.write_buffers_max_bytes);
    let shared = Arc::new(Target {
        scsi: target,
        policy,
        config,
        registry: Registry::default(),
        portals,
        shutdown: shutdown_rx,
        poll_slots,
        connection_slots,
        write_buffers,
    });
    let mut acceptors = JoinSet::new();
    for listener in listeners {
        acceptors.spawn(accept_loop(listener, shared.clone()));
    }
    shutdown.await;
    shutdown_tx.send_replace(true);
    tracing::info!("iSCSI target shutting down");
    let mut first_error = None;
    while let Some(joined) = acceptors.join_next().await {
        if let Ok(Err(error)) = joined {
            first_error.get_or_insert(error);
        }
    }
    first_error.map_or(Ok(()), Err)
}

async fn accept_loop(listener: TcpListener, target: Arc<Target>) -> io::Result<()> {
    let mut shutdown = target.shutdown.clone();
    let mut connections = JoinSet::new();
    // A connection is accepted only with a permit in hand: past the limit,
    // new ones wait in the listen backlog.
    let mut permit = None;
    loop {
        tokio::select! {
            acquired = target.connection_slots.clone().acquire_owned(), if permit.is_none() => {
                permit = Some(acquired.expect("the semaphore is never closed"));
            }
            accepted = listener.accept(), if permit.is_some() => match accepted {
                Ok((stream, peer)) => {
                    tracing::debug!(%peer, "iSCSI connection");
                    let permit = permit.take();
                    let target = target.clone();
                    connections.spawn(async move {
                        connection::run(stream, target).await;
                        drop(permit);
                    });
                }
                // Per-connection errors (e.g. the peer reset before accept) are not fatal.
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = connection::wait_until_set(&mut shutdown) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
    Ok(())
}
