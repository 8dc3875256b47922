//! Adapts engine volumes to the NBD server's export traits, and the host
//! registry to its access policy: this is the only place that knows both sides.
//!
//! Who sees what (docs/SECURITY.md):
//! - a client that proved a host's NBD key over TLS (PSK identity = host name)
//!   lists and opens exactly the volumes and snapshots connected to that host;
//!   anything else is "no such export" (`NBD_REP_ERR_UNKNOWN`), so a host cannot
//!   learn what else exists; the vVols bound to the host are among them, under
//!   their volume's name (`vvol-<uuid>`, a snapshot vVol's `vvol-<base>@<uuid>`);
//! - an anonymous client (no TLS) lists and opens everything with
//!   `--nbd-open-access`; without it, it lists nothing and every open is
//!   refused by policy (`NBD_REP_ERR_POLICY`) with a message saying how to get
//!   access — the same answer whether or not the export exists.

use std::collections::BTreeSet;
use std::sync::Arc;

use lacuna_engine::{Engine, EngineError, Extent, ExtentState, Snapshot, Volume};
use lacuna_monitor::{ConnectionGuard, Direction, LiveSession, Meter, Monitor, Protocol};
use lacuna_nbd::{
    BlockExport, Client, ExportError, ExportProvider, ExportSummary, ExtentKind, OpenError, PskKeys,
};

use crate::hosts::{HostRegistry, NBD_PSK_MAX_BYTES, NBD_PSK_MIN_BYTES};

// Every key the registry accepts is one the NBD server accepts.
const _: () = assert!(NBD_PSK_MIN_BYTES >= lacuna_nbd::MIN_PSK_KEY_BYTES);
const _: () = assert!(NBD_PSK_MAX_BYTES <= lacuna_nbd::MAX_PSK_KEY_BYTES);

/// What an anonymous client on a closed array is told when it opens anything.
pub const ANONYMOUS_REFUSED: &str = "anonymous NBD clients may not open exports on this array: \
connect with TLS-PSK as a host the volume is connected to (lacuna host create NAME \
--nbd-psk-key HEX; lacuna host connect NAME VOLUME; PSK identity NAME), or start the daemon \
with --nbd-open-access";

/// Every volume is an export under its name, and every snapshot a read-only one
/// under `VOL@SNAP`; the host registry says which a client may see.
pub struct VolumeExports {
    pub engine: Arc<Engine>,
    pub hosts: Arc<HostRegistry>,
    /// Anonymous clients see every export (`serve --nbd-open-access`).
    pub open_access: bool,
    /// The vVols bound to each host are its exports too.
    pub vvols: Arc<lacuna_vvol::VvolService>,
    /// Where each export counts its reads and writes.
    pub monitor: Arc<Monitor>,
}

/// Which exports a client may use.
enum Allowed {
    Everything,
    /// Exports granted, by (name, object id): a name that now names another
    /// object than the one granted is not among them.
    Only(BTreeSet<(String, u64)>),
    /// Anonymous on a closed array.
    Refused,
}

impl VolumeExports {
    fn allowed(&self, client: &Client) -> Allowed {
        match &client.identity {
            // A host deleted (or whose key was removed) since the handshake sees
            // nothing more.
            Some(host) => Allowed::Only(match self.hosts.nbd_exports(host) {
                Some(granted) => {
                    let bound = self.vvols.bound(host).into_iter();
                    let bound = bound.map(|b| (b.engine_name, b.object_id));
                    granted.into_iter().chain(bound).collect()
                }
                None => BTreeSet::new(),
            }),
            None if self.open_access => Allowed::Everything,
            None => Allowed::Refused,
        }
    }

    /// Every live volume and snapshot, with its object id.
    fn all_exports(&self) -> Vec<(ExportSummary, u64)> {
        let volumes = self.engine.list_volumes().into_iter().map(|v| {
            let summary = ExportSummary {
                description: format!("Lacuna volume {} ({} bytes)", v.name, v.size_bytes),
                name: v.name,
            };
            (summary, v.id)
        });
        let snapshots = self
            .engine
            .list_snapshots(None, false)
            .unwrap_or_default()
            .into_iter()
            .map(|s| {
                let summary = ExportSummary {
                    description: format!("Lacuna snapshot {} (read-only)", s.full_name),
                    name: s.full_name,
                };
                (summary, s.id)
            });
        volumes.chain(snapshots).collect()
    }

    /// Opens the export `name`, if it is the object `granted` (any object
    /// with open access).
    fn open_export(
        &self,
        client: &Client,
        name: &str,
        granted: Option<u64>,
    ) -> Result<Arc<dyn BlockExport>, OpenError> {
        let is_granted = |id: u64| granted.is_none_or(|g| g == id);
        let connection = self.monitor.connections.open(LiveSession {
            protocol: Protocol::Nbd,
            host: client.identity.clone(),
            initiator: client
                .address
                .map_or_else(|| "local".to_string(), |a| a.to_string()),
            export: Some(name.to_string()),
            since_unix_s: Some(crate::sampler::unix_now_s()),
        });
        if name.contains('@') {
            let snapshot = self
                .engine
                .open_snapshot(name)
                .ok()
                .filter(|s| is_granted(s.id()))
                .ok_or(OpenError::Unknown)?;
            return Ok(Arc::new(SnapshotExport {
                snapshot,
                meter: Meter::new(self.monitor.clone(), Protocol::Nbd),
                _connection: connection,
            }));
        }
        let volume = self
            .engine
            .open_volume(name)
            .ok()
            .filter(|v| is_granted(v.id()))
            .ok_or(OpenError::Unknown)?;
        let meter = Meter::for_volume(self.monitor.clone(), Protocol::Nbd, volume.id(), name);
        Ok(Arc::new(VolumeExport {
            volume,
            meter,
            _connection: connection,
        }))
    }
}

impl ExportProvider for VolumeExports {
    fn list(&self, client: &Client) -> Vec<ExportSummary> {
        match self.allowed(client) {
            Allowed::Everything => self.all_exports().into_iter().map(|(e, _)| e).collect(),
            Allowed::Only(granted) if granted.is_empty() => Vec::new(),
            Allowed::Only(granted) => self
                .all_exports()
                .into_iter()
                .filter(|(e, id)| granted.contains(&(e.name.clone(), *id)))
                .map(|(e, _)| e)
                .collect(),
            Allowed::Refused => Vec::new(),
        }
    }

    fn open(&self, client: &Client, name: &str) -> Result<Arc<dyn BlockExport>, OpenError> {
        match self.allowed(client) {
            Allowed::Everything => self.open_export(client, name, None),
            Allowed::Only(granted) => match granted.iter().find(|(n, _)| n == name) {
                Some((_, id)) => self.open_export(client, name, Some(*id)),
                None => Err(OpenError::Unknown),
            },
            Allowed::Refused => {
                let who = client
                    .address
                    .map_or_else(|| "an anonymous client".to_string(), |a| a.ip().to_string());
                self.monitor.refusals.refused(
                    "NBD",
                    &who,
                    "anonymous clients may not open exports",
                    crate::sampler::unix_now_s(),
                );
                Err(OpenError::Denied(ANONYMOUS_REFUSED.to_string()))
            }
        }
    }
}

/// The NBD server's PSK lookup: a host's name is its identity.
pub struct HostKeys {
    pub hosts: Arc<HostRegistry>,
}

impl PskKeys for HostKeys {
    fn key(&self, identity: &str) -> Option<Vec<u8>> {
        self.hosts.nbd_key(identity)
    }
}

/// A snapshot: reads and block status; every change is refused as read-only.
struct SnapshotExport {
    snapshot: Snapshot,
    meter: Meter,
    /// Listed among the live sessions while the export is open.
    _connection: ConnectionGuard,
}

impl BlockExport for SnapshotExport {
    fn size_bytes(&self) -> Result<u64, ExportError> {
        self.snapshot.size_bytes().map_err(export_error)
    }

    fn description(&self) -> String {
        format!("Lacuna snapshot {} (read-only)", self.snapshot.full_name())
    }

    fn read_only(&self) -> bool {
        true
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        let bytes = buf.len();
        timed(&self.meter, Direction::Read, bytes, || {
            self.snapshot.read(offset, buf)
        })
    }

    fn write(&self, _offset: u64, _data: &[u8]) -> Result<(), ExportError> {
        Err(self.read_only_error())
    }

    fn trim(&self, _offset: u64, _length: u64) -> Result<(), ExportError> {
        Err(self.read_only_error())
    }

    fn write_zeroes(&self, _offset: u64, _length: u64, _unmap: bool) -> Result<(), ExportError> {
        Err(self.read_only_error())
    }

    fn flush(&self) -> Result<(), ExportError> {
        Ok(())
    }

    fn extents(&self, offset: u64, length: u64) -> Result<Vec<(u64, ExtentKind)>, ExportError> {
        let extents = self
            .snapshot
            .extents(offset, length)
            .map_err(export_error)?;
        Ok(extents.into_iter().map(extent_kind).collect())
    }
}

impl SnapshotExport {
    fn read_only_error(&self) -> ExportError {
        ExportError::ReadOnly(format!(
            "snapshot {} is read-only",
            self.snapshot.full_name()
        ))
    }
}

fn extent_kind(e: Extent) -> (u64, ExtentKind) {
    let kind = match e.state {
        ExtentState::Data => ExtentKind::Data,
        ExtentState::Zero => ExtentKind::Zero,
        ExtentState::Hole => ExtentKind::Hole,
    };
    (e.length_bytes, kind)
}

struct VolumeExport {
    volume: Volume,
    meter: Meter,
    /// Listed among the live sessions while the export is open.
    _connection: ConnectionGuard,
}

/// Counts an NBD request when it succeeds.
fn timed<T>(
    meter: &Meter,
    direction: Direction,
    bytes: usize,
    request: impl FnOnce() -> Result<T, EngineError>,
) -> Result<T, ExportError> {
    meter
        .time(direction, bytes as u64, request)
        .map_err(export_error)
}

fn export_error(error: EngineError) -> ExportError {
    match error {
        EngineError::NoSpace(m) => ExportError::NoSpace(m),
        EngineError::OutOfRange { .. } | EngineError::InvalidArgument(_) => {
            ExportError::Invalid(error.to_string())
        }
        other => {
            tracing::error!("volume I/O failed: {other}");
            ExportError::Io(other.to_string())
        }
    }
}

impl BlockExport for VolumeExport {
    fn size_bytes(&self) -> Result<u64, ExportError> {
        self.volume.size_bytes().map_err(export_error)
    }

    fn description(&self) -> String {
        format!("Lacuna volume {}", self.volume.name())
    }

    fn read_only(&self) -> bool {
        false
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        let bytes = buf.len();
        timed(&self.meter, Direction::Read, bytes, || {
            self.volume.read(offset, buf)
        })
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), ExportError> {
        timed(&self.meter, Direction::Write, data.len(), || {
            self.volume.write(offset, data)
        })
    }

    fn write_shared(&self, offset: u64, data: &bytes::Bytes) -> Result<(), ExportError> {
        timed(&self.meter, Direction::Write, data.len(), || {
            self.volume.write_shared(offset, data)
        })
    }

    /// Counted only when answered from memory (otherwise `read` follows).
    fn read_from_memory(&self, offset: u64, buf: &mut [u8]) -> Result<bool, ExportError> {
        let bytes = buf.len();
        let started = std::time::Instant::now();
        let answered = self
            .volume
            .read_from_memory(offset, buf)
            .map_err(export_error)?;
        if answered {
            let elapsed = started.elapsed();
            self.meter.record(Direction::Read, bytes as u64, elapsed);
        }
        Ok(answered)
    }

    fn write_is_quick(&self, length: u64) -> bool {
        self.volume.write_is_quick(length)
    }

    fn trim(&self, offset: u64, length: u64) -> Result<(), ExportError> {
        self.volume.unmap(offset, length).map_err(export_error)
    }

    fn write_zeroes(&self, offset: u64, length: u64, allow_unmap: bool) -> Result<(), ExportError> {
        self.volume
            .write_zeroes(offset, length, allow_unmap)
            .map_err(export_error)
    }

    fn flush(&self) -> Result<(), ExportError> {
        self.volume.flush().map_err(export_error)
    }

    fn extents(&self, offset: u64, length: u64) -> Result<Vec<(u64, ExtentKind)>, ExportError> {
        let extents = self.volume.extents(offset, length).map_err(export_error)?;
        Ok(extents.into_iter().map(extent_kind).collect())
    }
}
