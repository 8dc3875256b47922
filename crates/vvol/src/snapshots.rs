//! Two-phase snapshots (VASA `prepareToSnapshotVirtualVolume`, then
//! `snapshotVirtualVolume`): a host prepares each disk while the VM runs,
//! then stuns it and commits the batch. Preparing checks and reserves the
//! snapshot's id and costs nothing later; the commit is one engine
//! transaction for every disk of the batch (one consistency point, all or
//! none), so the window writes are held does not grow with the disks' size
//! and barely with their count.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::admission::check_batch;
use crate::events::EventKind;
use crate::fault::VvolFault;
use crate::model::{self, Metadata, SnapshotKind, SnapshotOf, VvolId, VvolRec};
use crate::store::Changes;
use crate::{now_unix_s, ItemResult, Result, VvolService};

/// Most snapshots prepared and not yet committed.
pub const MAX_PREPARED: usize = 4096;
/// A prepared snapshot not committed within this is forgotten.
pub const PREPARED_TTL: Duration = Duration::from_secs(600);

/// A prepared snapshot, as the prepare answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PreparedSnapshot {
    pub snapshot_id: VvolId,
    pub base: VvolId,
    pub kind: SnapshotKind,
}

/// One snapshot of a commit batch: a prepared id and the new vVol's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotRequest {
    pub snapshot_id: String,
    #[serde(default)]
    pub metadata: Metadata,
}

/// What a commit answers: a result per snapshot and how long writes to the
/// batch's vVols were held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotCommit {
    pub results: Vec<ItemResult<crate::VvolInfo>>,
    /// Checks before the commit, in microseconds (writes flow meanwhile).
    pub prepare_us: u64,
    /// How long writes to the batch's vVols were held, in microseconds.
    pub commit_window_us: u64,
}

/// Snapshots prepared and not committed, in memory only: a restart forgets
/// them and the host prepares again.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    by_id: HashMap<VvolId, (PreparedSnapshot, Instant)>,
}

impl Prepared {
    fn expire(&mut self, now: Instant) {
        self.by_id
            .retain(|_, (_, at)| now.duration_since(*at) < PREPARED_TTL);
    }
}

impl VvolService {
    /// Prepares a snapshot of a vVol: answers the id the snapshot vVol will
    /// have once committed.
    pub fn prepare_snapshot(&self, id: &VvolId, kind: SnapshotKind) -> Result<PreparedSnapshot> {
        self.prepare_snapshot_tasked(id, kind).result
    }

    /// [`Self::prepare_snapshot`], with its task.
    pub fn prepare_snapshot_tasked(
        &self,
        id: &VvolId,
        kind: SnapshotKind,
    ) -> crate::Tasked<PreparedSnapshot> {
        let result = self.prepare_inner(id, kind);
        self.tasked("prepareToSnapshotVirtualVolume", Some(id), result, |p| {
            p.snapshot_id.to_string()
        })
    }

    fn prepare_inner(&self, id: &VvolId, kind: SnapshotKind) -> Result<PreparedSnapshot> {
        let rec = self.record(id)?;
        if rec.snapshot.is_some() {
            return Err(VvolFault::InvalidArgument(format!(
                "vVol {id} is a snapshot: snapshot its base instead"
            )));
        }
        // The writes so far made durable now, while the VM runs: the commit,
        // for which ESXi holds the VM's I/O (the stun), then makes durable
        // only what arrived since, not up to five seconds of writes.
        self.engine.flush()?;
        let mut writer = self.writer.lock();
        let now = Instant::now();
        writer.prepared.expire(now);
        if writer.prepared.by_id.len() >= MAX_PREPARED {
            return Err(VvolFault::OutOfResource(format!(
                "{MAX_PREPARED} snapshots are prepared and not committed"
            )));
        }
        let prepared = PreparedSnapshot {
            snapshot_id: VvolId::random(),
            base: id.clone(),
            kind,
        };
        writer
            .prepared
            .by_id
            .insert(prepared.snapshot_id.clone(), (prepared.clone(), now));
        Ok(prepared)
    }

    /// Commits prepared snapshots together, within `timeout_ms`: all or none.
    /// When one item cannot be taken, every item answers a fault (its own, or
    /// that the batch was not taken because of another).
    pub fn commit_snapshots(
        &self,
        requests: &[SnapshotRequest],
        timeout_ms: u64,
    ) -> Result<SnapshotCommit> {
        let result = self.commit_inner(requests, timeout_ms);
        if let Ok(commit) = &result {
            if commit.results.iter().all(|r| r.fault.is_none()) {
                let ordering = std::sync::atomic::Ordering::Relaxed;
                self.stats
                    .snapshots_committed
                    .fetch_add(requests.len() as u64, ordering);
                self.stats
                    .last_commit_window_us
                    .store(commit.commit_window_us, ordering);
            }
        }
        self.counted(result)
    }

    fn commit_inner(
        &self,
        requests: &[SnapshotRequest],
        timeout_ms: u64,
    ) -> Result<SnapshotCommit> {
        let started = Instant::now();
        check_batch(requests.len())?;
        let mut writer = self.writer.lock();
        self.check_room(requests.len())?;
        let mut bases = std::collections::HashSet::new();
        let mut checked = Vec::with_capacity(requests.len());
        for request in requests {
            let check = self
                .check_request(&writer.prepared, request)
                .and_then(|item| {
                    if bases.insert(item.0.base.clone()) {
                        Ok(item)
                    } else {
                        Err(VvolFault::InvalidArgument(format!(
                            "vVol {} is snapshotted twice in one batch",
                            item.0.base
                        )))
                    }
                });
            checked.push(check);
        }
        if checked.iter().any(Result::is_err) {
            return Ok(refused(requests, checked));
        }
        let items: Vec<_> = checked.into_iter().map(|c| c.expect("checked")).collect();
        if started.elapsed() > Duration::from_millis(timeout_ms) {
            return Err(VvolFault::Timeout(format!(
                "the batch's checks took longer than its {timeout_ms} ms"
            )));
        }
        let names: Vec<(String, String)> = items
            .iter()
            .map(|(p, base, _)| (base.id.volume_name(), p.snapshot_id.uuid().to_string()))
            .collect();
        let pairs: Vec<(&str, &str)> = names
            .iter()
            .map(|(v, s)| (v.as_str(), s.as_str()))
            .collect();
        let taken = self.engine.create_named_snapshots(&pairs, None)?;
        let recs = match self.snapshot_records(&items, &taken) {
            Ok(recs) => recs,
            Err(fault) => {
                // All or none: what the batch made goes again.
                for (prepared, base, _) in &items {
                    let _ = self.eradicate_volume(&prepared.snapshot_id.volume_name());
                    let _ = self
                        .eradicate_snapshot(&model::snapshot_name(&base.id, &prepared.snapshot_id));
                }
                return Err(fault);
            }
        };
        let changes = Changes {
            put: recs.clone(),
            ..Changes::default()
        };
        let events = recs
            .iter()
            .map(|r| {
                (
                    EventKind::Config,
                    r.id.to_string(),
                    None,
                    "snapshot taken".to_string(),
                )
            })
            .collect();
        for rec in &recs {
            writer.prepared.by_id.remove(&rec.id);
        }
        if let Err(fault) = self.apply(&mut writer, changes, events, |c| {
            for rec in &recs {
                c.put(rec.clone());
            }
        }) {
            for rec in &recs {
                let _ = self.remove_object(rec);
            }
            return Err(fault);
        }
        let catalog = self.catalog.read();
        Ok(SnapshotCommit {
            results: recs
                .iter()
                .map(|r| ItemResult::of(r.id.as_str(), Ok(catalog.info(r))))
                .collect(),
            prepare_us: taken.prepare_us,
            commit_window_us: taken.commit_window_us,
        })
    }

    fn check_request(
        &self,
        prepared: &Prepared,
        request: &SnapshotRequest,
    ) -> Result<(PreparedSnapshot, VvolRec, Metadata)> {
        let id = VvolId::parse(&request.snapshot_id)?;
        model::check_metadata(&request.metadata)?;
        let (snapshot, _) = prepared
            .by_id
            .get(&id)
            .cloned()
            .ok_or_else(|| VvolFault::NotFound(format!("prepared snapshot {id}")))?;
        let base = self.record(&snapshot.base)?;
        Ok((snapshot, base, request.metadata.clone()))
    }

    /// The records of a batch's snapshots, making the writable ones' clones.
    fn snapshot_records(
        &self,
        items: &[(PreparedSnapshot, VvolRec, Metadata)],
        taken: &lacuna_engine::GroupSnapshot,
    ) -> Result<Vec<VvolRec>> {
        let mut recs = Vec::with_capacity(items.len());
        for (prepared, base, metadata) in items {
            // The engine answers its snapshots in its own order: by name.
            let full_name = model::snapshot_name(&base.id, &prepared.snapshot_id);
            let info = taken
                .snapshots
                .iter()
                .find(|s| s.full_name == full_name)
                .ok_or_else(|| {
                    VvolFault::StorageFault(format!("snapshot {full_name} was not taken"))
                })?;
            let object_id = match prepared.kind {
                SnapshotKind::ReadOnly => info.id,
                SnapshotKind::ReadWrite => {
                    self.engine
                        .clone_volume_in(
                            &info.full_name,
                            &prepared.snapshot_id.volume_name(),
                            base.provisioning,
                            Some(&base.container),
                        )?
                        .id
                }
            };
            recs.push(VvolRec {
                id: prepared.snapshot_id.clone(),
                vvol_type: base.vvol_type,
                container: base.container.clone(),
                size_mib: base.size_mib,
                provisioning: base.provisioning,
                metadata: metadata.clone(),
                parent: Some(base.id.clone()),
                snapshot: Some(SnapshotOf {
                    base: base.id.clone(),
                    kind: prepared.kind,
                }),
                object_id,
                created_unix_s: now_unix_s(),
            });
        }
        Ok(recs)
    }
}

/// The answer to a batch refused whole: each item's own fault, or that
/// another item's kept it from being taken.
fn refused(
    requests: &[SnapshotRequest],
    checked: Vec<Result<(PreparedSnapshot, VvolRec, Metadata)>>,
) -> SnapshotCommit {
    let results = requests
        .iter()
        .zip(checked)
        .map(|(request, check)| {
            let fault = match check {
                Err(fault) => fault,
                Ok(_) => VvolFault::InvalidArgument(
                    "not taken: another snapshot of the batch was refused".into(),
                ),
            };
            ItemResult::of(request.snapshot_id.as_str(), Err(fault))
        })
        .collect();
    SnapshotCommit {
        results,
        prepare_us: 0,
        commit_window_us: 0,
    }
}
