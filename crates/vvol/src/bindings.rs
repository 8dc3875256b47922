//! Bindings: which vVols each host may reach. A bound vVol is a subsidiary
//! LUN of the host's protocol endpoint (its second-level id is the engine
//! object id, never reused, so a stale id reaches nothing) and an NBD export
//! for the host. Binds and unbinds come in batches with a result per item;
//! binding a bound vVol answers its binding again. A swap vVol unbound from
//! its last host is emptied (one metadata-only unmap): a powered-off VM's
//! swap keeps its vVol and costs no space.

use serde::{Deserialize, Serialize};

use crate::admission::check_batch;
use crate::events::EventKind;
use crate::fault::VvolFault;
use crate::model::{VvolId, VvolType};
use crate::store::Changes;
use crate::{ItemResult, Result, VvolService};

/// A host's protocol endpoint, as the daemon presents it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProtocolEndpoint {
    /// The PE's in-band id (`naa.` and its NAA designator in hex).
    pub in_band_id: String,
    /// The PE's LUN in the host's LUN list.
    pub lun: u64,
}

/// Who may be bound to: the daemon's host registry.
pub trait HostDirectory: Send + Sync {
    /// The host's protocol endpoint; NotFound when the host does not exist,
    /// InvalidArgument when it has no protocol endpoint.
    fn protocol_endpoint(&self, host: &str) -> Result<ProtocolEndpoint>;
    /// Every host that has a protocol endpoint, with it.
    fn protocol_endpoints(&self) -> Vec<HostEndpoint>;
}

/// A host's protocol endpoint (VASA `queryProtocolEndpoint`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostEndpoint {
    pub host: String,
    /// SCSI: a conglomerate LU reached over iSCSI.
    pub protocol: String,
    pub protocol_endpoint: ProtocolEndpoint,
    /// vVols bound to the host through it.
    pub bound_vvols: u64,
}

/// One bound vVol, as a bind answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Binding {
    pub vvol: VvolId,
    pub host: String,
    pub protocol_endpoint: ProtocolEndpoint,
    /// The vVol's second-level LUN id under the protocol endpoint.
    pub secondary_id: u64,
    pub read_only: bool,
    pub size_bytes: u64,
}

/// A vVol bound to a host, as the daemon presents it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundVvol {
    pub id: VvolId,
    /// The engine object (also the second-level LUN id).
    pub object_id: u64,
    /// `VOL` or `VOL@SNAP`.
    pub engine_name: String,
    pub read_only: bool,
}

/// Swap vVols marked as being emptied, from [`Emptying::mark`] (which
/// releases the writer mutex) until dropped, on every way out.
struct Emptying<'a> {
    service: &'a VvolService,
    ids: Vec<VvolId>,
}

impl<'a> Emptying<'a> {
    fn mark<'i>(
        service: &'a VvolService,
        mut writer: parking_lot::MutexGuard<'_, crate::Writer>,
        ids: impl Iterator<Item = &'i VvolId>,
    ) -> Emptying<'a> {
        let ids: Vec<VvolId> = ids.cloned().collect();
        writer.emptying.extend(ids.iter().cloned());
        Emptying { service, ids }
    }
}

impl Drop for Emptying<'_> {
    fn drop(&mut self) {
        let mut writer = self.service.writer.lock();
        for id in &self.ids {
            writer.emptying.remove(id);
        }
    }
}

impl VvolService {
    /// Binds each vVol to `host` (VASA `bindVirtualVolume`).
    pub fn bind(&self, host: &str, ids: &[String]) -> Result<Vec<ItemResult<Binding>>> {
        let result = self.bind_inner(host, ids);
        self.counted(result)
    }

    fn bind_inner(&self, host: &str, ids: &[String]) -> Result<Vec<ItemResult<Binding>>> {
        check_batch(ids.len())?;
        let _permit = self.admission.admit(host)?;
        let endpoint = self.hosts.protocol_endpoint(host)?;
        let mut writer = self.writer.lock();
        let mut changes = Changes::default();
        let mut events = Vec::new();
        let mut answers = Vec::with_capacity(ids.len());
        {
            let catalog = self.catalog.read();
            for text in ids {
                let found = VvolId::parse(text).and_then(|id| {
                    let rec = catalog
                        .get(&id)
                        .ok_or_else(|| VvolFault::NotFound(format!("vVol {id}")))?;
                    writer.check_not_emptying(&id)?;
                    let fresh = !catalog.is_bound_to(host, &id)
                        && !changes.bind.iter().any(|(_, b)| b == &id);
                    if fresh {
                        changes.bind.push((host.to_string(), id.clone()));
                        events.push((
                            EventKind::Rebind,
                            id.to_string(),
                            Some(host.to_string()),
                            "bound".to_string(),
                        ));
                    }
                    Ok(Binding {
                        vvol: id,
                        host: host.to_string(),
                        protocol_endpoint: endpoint.clone(),
                        secondary_id: rec.object_id,
                        read_only: rec.read_only(),
                        size_bytes: rec.size_bytes(),
                    })
                });
                answers.push(ItemResult::of(text.as_str(), found));
            }
        }
        self.apply_bindings(&mut writer, changes, events)?;
        Ok(answers)
    }

    /// Unbinds each vVol from `host` (VASA `unbindVirtualVolume`); a vVol
    /// not bound there is NotFound for its item.
    pub fn unbind(&self, host: &str, ids: &[String]) -> Result<Vec<ItemResult<()>>> {
        let result = self.unbind_inner(host, Some(ids));
        self.counted(result)
    }

    /// Unbinds every vVol from `host` (VASA `unbindAllVirtualVolumesFromHost`),
    /// answering how many were.
    pub fn unbind_all(&self, host: &str) -> Result<usize> {
        let result = self.unbind_inner(host, None).map(|answers| answers.len());
        self.counted(result)
    }

    fn unbind_inner(&self, host: &str, ids: Option<&[String]>) -> Result<Vec<ItemResult<()>>> {
        let ids: Vec<String> = match ids {
            Some(ids) => {
                check_batch(ids.len())?;
                ids.to_vec()
            }
            None => self
                .catalog
                .read()
                .bound_to(host)
                .iter()
                .map(|i| i.to_string())
                .collect(),
        };
        let _permit = self.admission.admit(host)?;
        let mut writer = self.writer.lock();
        let mut changes = Changes::default();
        let mut events = Vec::new();
        let mut answers = Vec::with_capacity(ids.len());
        let mut emptied = Vec::new();
        {
            let catalog = self.catalog.read();
            for text in &ids {
                let found = VvolId::parse(text).and_then(|id| {
                    let bound = catalog.is_bound_to(host, &id)
                        && !changes.unbind.iter().any(|(_, u)| u == &id);
                    if !bound {
                        return Err(VvolFault::NotFound(format!(
                            "vVol {id} is not bound to host '{host}'"
                        )));
                    }
                    let rec = catalog.get(&id).expect("a bound vVol is recorded");
                    // A snapshot of a swap vVol is a point in time: kept as it is.
                    let swap = rec.vvol_type == VvolType::Swap && rec.snapshot.is_none();
                    if swap && catalog.hosts_of(&id).len() == 1 {
                        emptied.push((id.clone(), rec.engine_name(), rec.size_bytes()));
                    }
                    changes.unbind.push((host.to_string(), id.clone()));
                    events.push((
                        EventKind::Rebind,
                        id.to_string(),
                        Some(host.to_string()),
                        "unbound".to_string(),
                    ));
                    Ok(())
                });
                answers.push(ItemResult::of(text.as_str(), found));
            }
        }
        // Unreachable first, then emptied: no host writes into the discard.
        // The discard (an engine commit) runs after the mutex is released, so
        // other hosts' binds and unbinds do not wait for it; until it is done
        // the swap vVol cannot be bound, reverted or deleted.
        self.apply_bindings(&mut writer, changes, events)?;
        let _emptying = Emptying::mark(self, writer, emptied.iter().map(|(id, _, _)| id));
        for (_, name, size_bytes) in &emptied {
            self.engine.open_volume(name)?.unmap(0, *size_bytes)?;
        }
        // Not flushed: a durable commit per power-off tripled its time (bench
        // vvols.py); the background flush makes the unmap durable within its
        // interval, and a crash before it only brings back an old swap.
        Ok(answers)
    }

    /// Applies binds and unbinds, counts them and tells the LUN maps.
    fn apply_bindings(
        &self,
        writer: &mut crate::Writer,
        changes: Changes,
        events: Vec<crate::PendingEvent>,
    ) -> Result<()> {
        let (bind, unbind) = (changes.bind.clone(), changes.unbind.clone());
        self.apply(writer, changes, events, |c| {
            bind.iter().for_each(|(host, id)| c.bind(host, id));
            unbind.iter().for_each(|(host, id)| c.unbind(host, id));
        })?;
        let ordering = std::sync::atomic::Ordering::Relaxed;
        self.stats.binds.fetch_add(bind.len() as u64, ordering);
        self.stats.unbinds.fetch_add(unbind.len() as u64, ordering);
        if !bind.is_empty() || !unbind.is_empty() {
            self.generation
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(())
    }

    /// The protocol endpoints, host by host, with their binding counts.
    pub fn protocol_endpoints(&self) -> Vec<HostEndpoint> {
        let catalog = self.catalog.read();
        let mut endpoints = self.hosts.protocol_endpoints();
        for endpoint in &mut endpoints {
            endpoint.bound_vvols = catalog.bound_to(&endpoint.host).len() as u64;
        }
        endpoints
    }

    /// The vVols bound to `host`, for the daemon's LUN map and NBD exports.
    pub fn bound(&self, host: &str) -> Vec<BoundVvol> {
        let catalog = self.catalog.read();
        catalog
            .bound_to(host)
            .into_iter()
            .filter_map(|id| {
                let rec = catalog.get(&id)?;
                Some(BoundVvol {
                    id,
                    object_id: rec.object_id,
                    engine_name: rec.engine_name(),
                    read_only: rec.read_only(),
                })
            })
            .collect()
    }
}
