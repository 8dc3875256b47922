//! Virtual volumes (VMware vVols, seed 003): per-VM volumes in storage
//! containers, with key/value metadata, bound to hosts by the batch, snapshot
//! in two phases with one short commit, cloned, reverted, resized, and
//! answered as allocation bitmaps. A vVol's data is an engine volume
//! (`vvol-<uuid>`), or for a read-only snapshot vVol a snapshot of its base's
//! volume: every operation is the engine's metadata-only one, so each costs
//! the same at any size.
//!
//! What is not the engine's is kept here: which vVols exist and their
//! metadata (indexed, so a query costs what it matches), which are bound to
//! which host (the daemon presents them as subsidiary LUNs of a protocol
//! endpoint and as NBD exports), prepared snapshots, events, and how many
//! requests a host may have in flight. The store is a redb file beside the
//! engine's ([`store`] says how a crash between the two is made whole).
//!
//! The SOAP binding vCenter speaks (VASA) and the REST API are both callers of
//! [`VvolService`]; neither adds behaviour.

pub mod admission;
mod bindings;
mod bitmap;
mod catalog;
mod durability;
pub mod events;
pub mod fault;
pub mod model;
mod snapshots;
pub mod store;
pub mod tasks;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lacuna_engine::{Engine, EngineError, Provisioning};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

pub use admission::{MAX_BATCH, MAX_REQUESTS_PER_HOST};
pub use bindings::{Binding, BoundVvol, HostDirectory, HostEndpoint, ProtocolEndpoint};
pub use bitmap::{AllocatedBitmap, Segment, UnsharedChunks, MAX_BITMAP_BYTES};
pub use catalog::VvolQuery;
pub use events::{Event, EventKind};
pub use fault::{FaultBody, VvolFault};
pub use model::{Metadata, SnapshotKind, SnapshotOf, VvolId, VvolRec, VvolType};
pub use snapshots::{PreparedSnapshot, SnapshotCommit, SnapshotRequest};
pub use tasks::{TaskInfo, TaskState};

use catalog::Catalog;
use events::EventLog;
use store::{Changes, Store};

/// Most vVols the array keeps (the catalog is in memory).
pub const MAX_VVOLS: usize = 100_000;

pub type Result<T> = std::result::Result<T, VvolFault>;

/// One item of a batch's answer: its result or its fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemResult<T> {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultBody>,
}

impl<T> ItemResult<T> {
    pub fn of(id: impl Into<String>, result: Result<T>) -> ItemResult<T> {
        let id = id.into();
        match result {
            Ok(value) => ItemResult {
                id,
                result: Some(value),
                fault: None,
            },
            Err(fault) => ItemResult {
                id,
                result: None,
                fault: Some(fault.body()),
            },
        }
    }
}

/// A vVol as answered: its record, its size in bytes and where it is bound.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VvolInfo {
    #[serde(flatten)]
    pub rec: VvolRec,
    pub size_bytes: u64,
    pub bound_hosts: Vec<String>,
}

/// The outcome of an operation VASA runs as a task, and its task.
#[derive(Debug)]
pub struct Tasked<T> {
    pub task: TaskInfo,
    pub result: Result<T>,
}

/// What `create` takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewVvol {
    pub container: String,
    pub vvol_type: VvolType,
    pub size_mib: u64,
    #[serde(default)]
    pub provisioning: Provisioning,
    #[serde(default)]
    pub metadata: Metadata,
}

/// What `clone` takes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CloneSpec {
    /// Another container (a full clone only); default the source's.
    pub container: Option<String>,
    /// Default the source's.
    pub provisioning: Option<Provisioning>,
    #[serde(default)]
    pub metadata: Metadata,
    /// A fast (linked) clone: same container. Both are metadata-only here.
    #[serde(default)]
    pub fast: bool,
}

/// A vVol's space figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VvolSpace {
    pub id: VvolId,
    pub size_bytes: u64,
    /// Bytes holding data (a read-only snapshot vVol: its volume's figures are
    /// the base's, so only its size is given).
    pub written_bytes: Option<u64>,
    pub unique_physical_bytes: Option<u64>,
    pub shared_physical_bytes: Option<u64>,
}

/// A storage container's space as vVols see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContainerSpace {
    pub container: String,
    pub vvol_count: u64,
    pub provisioned_bytes: u64,
    pub used_bytes: u64,
    /// The quota, if any: what is left for new vVols.
    pub quota_bytes: Option<u64>,
    /// Largest vVol a container takes, in MiB.
    pub max_vvol_size_mib: u64,
}

/// What the array advertises to hosts about its vVol service (VASA's
/// provider information: the limits a host must keep to).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProviderInfo {
    pub max_batch_size: u64,
    pub max_concurrent_requests_per_host: u64,
    pub max_vvols: u64,
    pub max_metadata_pairs: u64,
    pub max_metadata_key_bytes: u64,
    pub max_metadata_value_bytes: u64,
    pub max_vvol_size_mib: u64,
    pub max_bitmap_bytes: u64,
    pub max_prepared_snapshots: u64,
    pub prepared_snapshot_ttl_s: u64,
    pub max_events_kept: u64,
    pub max_tasks_kept: u64,
}

impl ProviderInfo {
    pub fn current() -> ProviderInfo {
        ProviderInfo {
            max_batch_size: MAX_BATCH as u64,
            max_concurrent_requests_per_host: u64::from(MAX_REQUESTS_PER_HOST),
            max_vvols: MAX_VVOLS as u64,
            max_metadata_pairs: model::MAX_METADATA_PAIRS as u64,
            max_metadata_key_bytes: model::MAX_KEY_BYTES as u64,
            max_metadata_value_bytes: model::MAX_VALUE_BYTES as u64,
            max_vvol_size_mib: model::MAX_SIZE_MIB,
            max_bitmap_bytes: MAX_BITMAP_BYTES,
            max_prepared_snapshots: snapshots::MAX_PREPARED as u64,
            prepared_snapshot_ttl_s: snapshots::PREPARED_TTL.as_secs(),
            max_events_kept: events::MAX_EVENTS as u64,
            max_tasks_kept: tasks::MAX_TASKS as u64,
        }
    }
}

/// The service's counters, for `/metrics`.
#[derive(Debug, Default)]
pub struct VvolStats {
    pub operations: AtomicU64,
    pub faults: AtomicU64,
    pub busy: AtomicU64,
    pub binds: AtomicU64,
    pub unbinds: AtomicU64,
    pub snapshots_committed: AtomicU64,
    /// The last batch snapshot's commit window (writes held), in microseconds.
    pub last_commit_window_us: AtomicU64,
}

/// An event to log once its change is durable: kind, object, host, what.
type PendingEvent = (EventKind, String, Option<String>, String);

/// What changes hold together: the events and prepared snapshots, taken by
/// every change (one change at a time, in store order).
struct Writer {
    events: EventLog,
    prepared: snapshots::Prepared,
    /// Swap vVols unbound from their last host whose contents are being
    /// discarded, outside the mutex: not bound, reverted or deleted meanwhile.
    emptying: std::collections::HashSet<VvolId>,
}

impl Writer {
    /// Refuses a change to a swap vVol while its contents are discarded.
    fn check_not_emptying(&self, id: &VvolId) -> Result<()> {
        if self.emptying.contains(id) {
            return Err(VvolFault::Busy(format!(
                "vVol {id} is being emptied after its unbind; retry"
            )));
        }
        Ok(())
    }
}

pub struct VvolService {
    engine: Arc<Engine>,
    store: Store,
    catalog: RwLock<Catalog>,
    writer: Mutex<Writer>,
    admission: admission::Admission,
    tasks: Mutex<tasks::TaskLog>,
    hosts: Arc<dyn HostDirectory>,
    /// Increases on every bind and unbind: the SCSI layer re-reads LUN maps.
    generation: AtomicU64,
    /// Store commits made durable in groups, outside the writer mutex.
    syncs: durability::GroupCommit,
    pub stats: VvolStats,
}

/// A result per id of a batch: `found` for each id that parses, NotFound
/// when it finds nothing, the parse fault for one that does not.
fn each_id<T>(ids: &[String], found: impl Fn(&VvolId) -> Option<T>) -> Vec<ItemResult<T>> {
    ids.iter()
        .map(|text| {
            let result = VvolId::parse(text)
                .and_then(|id| found(&id).ok_or_else(|| VvolFault::NotFound(format!("vVol {id}"))));
            ItemResult::of(text.as_str(), result)
        })
        .collect()
}

pub(crate) fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl VvolService {
    /// Opens the store in `data_dir` and makes it agree with the engine: records
    /// whose engine object is gone are dropped, engine objects of vVols no
    /// record names are eradicated (see [`store`]).
    pub fn open(
        engine: Arc<Engine>,
        data_dir: &Path,
        hosts: Arc<dyn HostDirectory>,
    ) -> Result<Arc<VvolService>> {
        VvolService::open_store(engine, Store::open(data_dir)?, hosts)
    }

    /// As [`VvolService::open`], with the store on `backend`.
    pub fn open_on(
        engine: Arc<Engine>,
        backend: impl redb::StorageBackend,
        hosts: Arc<dyn HostDirectory>,
    ) -> Result<Arc<VvolService>> {
        VvolService::open_store(engine, Store::open_on(backend)?, hosts)
    }

    fn open_store(
        engine: Arc<Engine>,
        store: Store,
        hosts: Arc<dyn HostDirectory>,
    ) -> Result<Arc<VvolService>> {
        let loaded = store.load()?;
        let service = VvolService {
            engine,
            store,
            catalog: RwLock::new(Catalog::default()),
            writer: Mutex::new(Writer {
                events: EventLog::new(loaded.next_event_id),
                prepared: snapshots::Prepared::default(),
                emptying: Default::default(),
            }),
            admission: admission::Admission::default(),
            tasks: Mutex::new(tasks::TaskLog::default()),
            hosts,
            generation: AtomicU64::new(1),
            syncs: durability::GroupCommit::default(),
            stats: VvolStats::default(),
        };
        service.reconcile(loaded)?;
        Ok(Arc::new(service))
    }

    fn reconcile(&self, loaded: store::Loaded) -> Result<()> {
        let mut changes = Changes::default();
        let mut catalog = self.catalog.write();
        for rec in loaded.vvols {
            if self.engine.object_id(&rec.engine_name()) == Some(rec.object_id) {
                catalog.put(rec);
            } else {
                tracing::warn!(vvol = %rec.id, "vVol dropped: its data was removed before a crash");
                changes.remove.push(rec.id);
            }
        }
        for (host, ids) in loaded.bindings {
            // A host deleted while the daemon was down takes its bindings along.
            let host_gone = matches!(
                self.hosts.protocol_endpoint(&host),
                Err(VvolFault::NotFound(_))
            );
            for id in ids {
                if catalog.get(&id).is_some() && !host_gone {
                    catalog.bind(&host, &id);
                } else {
                    changes.unbind.push((host.clone(), id));
                }
            }
        }
        let named: BTreeSet<String> = catalog.iter().map(VvolRec::engine_name).collect();
        // A writable snapshot vVol also keeps the snapshot it was cloned from.
        let kept_snapshots: BTreeSet<String> = catalog
            .iter()
            .filter_map(|r| {
                r.snapshot
                    .as_ref()
                    .map(|s| model::snapshot_name(&s.base, &r.id))
            })
            .collect();
        drop(catalog);
        for (_, name) in self.engine.list_volume_names() {
            if name.starts_with(model::VOLUME_PREFIX) && !named.contains(&name) {
                tracing::warn!(volume = %name, "eradicating the volume of a vVol never recorded");
                self.eradicate_volume(&name)?;
            }
        }
        for snapshot in self.engine.list_snapshots(None, false)? {
            let vvol_volume = snapshot.volume.starts_with(model::VOLUME_PREFIX);
            let full = snapshot.full_name;
            if vvol_volume && !named.contains(&full) && !kept_snapshots.contains(&full) {
                tracing::warn!(snapshot = %full, "eradicating the snapshot of a vVol never recorded");
                self.eradicate_snapshot(&full)?;
            }
        }
        self.store.commit(&changes)
    }

    /// Counts an operation's outcome, once its change is durable (called
    /// with the writer mutex released).
    fn counted<T>(&self, result: Result<T>) -> Result<T> {
        let result = self.durable(result);
        self.stats.operations.fetch_add(1, Ordering::Relaxed);
        if let Err(fault) = &result {
            self.stats.faults.fetch_add(1, Ordering::Relaxed);
            if matches!(fault, VvolFault::Busy(_)) {
                self.stats.busy.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// Counts an operation VASA runs as a task ([`Self::counted`]) and records
    /// its outcome as one; `subject` is the vVol it was asked about, if any.
    fn tasked<T>(
        &self,
        operation: &str,
        subject: Option<&VvolId>,
        result: Result<T>,
        object: impl Fn(&T) -> String,
    ) -> Tasked<T> {
        let started = now_unix_s();
        let result = self.counted(result);
        let outcome = result.as_ref().map(&object);
        let task =
            self.tasks
                .lock()
                .record(operation, subject.map(VvolId::to_string), outcome, started);
        Tasked { task, result }
    }

    /// A task by id (VASA `getTaskUpdate`).
    pub fn task(&self, id: u64) -> Result<TaskInfo> {
        self.tasks.lock().get(id)
    }

    /// The tasks after `last_seen`, oldest first.
    pub fn tasks_since(&self, last_seen: u64) -> Vec<TaskInfo> {
        self.tasks.lock().since(last_seen)
    }

    /// VASA `cancelTask`: every task here has finished by the time it is
    /// seen, so this only answers which way it ended.
    pub fn cancel_task(&self, id: u64) -> Result<TaskInfo> {
        let task = self.task(id)?;
        Err(VvolFault::InvalidArgument(format!(
            "task {id} ({}) has finished ({:?}): nothing to cancel",
            task.operation, task.state
        )))
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Increases whenever a binding changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    pub fn count(&self) -> usize {
        self.catalog.read().len()
    }

    pub fn binding_count(&self) -> usize {
        self.catalog.read().binding_count()
    }

    /// Counts of vVols by (container, type), for `/metrics`.
    pub fn counts(&self) -> Vec<(String, VvolType, u64)> {
        let mut counts = std::collections::BTreeMap::new();
        for rec in self.catalog.read().iter() {
            *counts
                .entry((rec.container.clone(), rec.vvol_type))
                .or_insert(0) += 1;
        }
        counts.into_iter().map(|((c, t), n)| (c, t, n)).collect()
    }

    fn record(&self, id: &VvolId) -> Result<VvolRec> {
        self.catalog
            .read()
            .get(id)
            .cloned()
            .ok_or_else(|| VvolFault::NotFound(format!("vVol {id}")))
    }

    /// Applies a change: committed to the store, then in memory, with its
    /// events (polled once it is durable). The operation answers after
    /// [`Self::durable`].
    fn apply(
        &self,
        writer: &mut Writer,
        mut changes: Changes,
        events: Vec<PendingEvent>,
        edit: impl FnOnce(&mut Catalog),
    ) -> Result<()> {
        self.syncs.check()?;
        changes.next_event_id = Some(writer.events.next_id() + events.len() as u64);
        self.store.commit_without_sync(&changes)?;
        let change = self.syncs.committed();
        edit(&mut self.catalog.write());
        for (kind, object, host, what) in events {
            writer.events.push(change, kind, object, host, what);
        }
        Ok(())
    }

    /// `result`, once the change this call applied (if any) is durable; a
    /// failed sync turns it into the sync's fault.
    fn durable<T>(&self, result: Result<T>) -> Result<T> {
        self.syncs.wait_for_own(|| self.store.sync())?;
        result
    }

    pub fn create(&self, new: NewVvol) -> Result<VvolInfo> {
        self.create_tasked(new).result
    }

    /// [`Self::create`], with its task.
    pub fn create_tasked(&self, new: NewVvol) -> Tasked<VvolInfo> {
        self.tasked("createVirtualVolume", None, self.create_inner(new), |v| {
            v.rec.id.to_string()
        })
    }

    fn create_inner(&self, new: NewVvol) -> Result<VvolInfo> {
        model::check_size_mib(new.size_mib)?;
        model::check_metadata(&new.metadata)?;
        let mut writer = self.writer.lock();
        self.check_room(1)?;
        let id = VvolId::random();
        let name = id.volume_name();
        let volume = self.engine.create_volume_in(
            &name,
            new.size_mib * model::MIB,
            new.provisioning,
            &new.container,
        )?;
        let rec = VvolRec {
            id: id.clone(),
            vvol_type: new.vvol_type,
            container: volume.container.clone(),
            size_mib: new.size_mib,
            provisioning: new.provisioning,
            metadata: new.metadata,
            parent: None,
            snapshot: None,
            object_id: volume.id,
            created_unix_s: now_unix_s(),
        };
        self.put_new(&mut writer, rec, "created")
    }

    /// Records a vVol whose engine object was just made; if the record cannot
    /// be kept, the object goes again.
    fn put_new(&self, writer: &mut Writer, rec: VvolRec, what: &str) -> Result<VvolInfo> {
        self.replace(writer, rec.clone(), what).inspect_err(|_| {
            let _ = self.remove_object(&rec);
        })
    }

    fn check_room(&self, more: usize) -> Result<()> {
        let count = self.catalog.read().len();
        if count + more > MAX_VVOLS {
            return Err(VvolFault::OutOfResource(format!(
                "{count} vVols: the array keeps at most {MAX_VVOLS}"
            )));
        }
        Ok(())
    }

    pub fn get(&self, id: &VvolId) -> Result<VvolInfo> {
        let catalog = self.catalog.read();
        let rec = catalog
            .get(id)
            .ok_or_else(|| VvolFault::NotFound(format!("vVol {id}")))?;
        Ok(catalog.info(rec))
    }

    /// The vVols of `ids` (VASA `queryVirtualVolumeInfo`), a result each.
    pub fn info(&self, ids: &[String]) -> Result<Vec<ItemResult<VvolInfo>>> {
        self.counted(admission::check_batch(ids.len()))?;
        let catalog = self.catalog.read();
        Ok(each_id(ids, |id| {
            catalog.get(id).map(|rec| catalog.info(rec))
        }))
    }

    /// [`Self::info`] as its JSON answer (a list of [`ItemResult`]s), from
    /// each vVol's answer kept serialised: what the REST API sends. A found
    /// vVol's item is written as it is (the id asked parsed, so it is ASCII
    /// letters, digits, dots and dashes); a fault's item through serde.
    pub fn info_json(&self, ids: &[String]) -> Result<String> {
        self.counted(admission::check_batch(ids.len()))?;
        let catalog = self.catalog.read();
        let items = each_id(ids, |id| catalog.info_json(id));
        // Sized once: growing a buffer of a thousand answers copies it again
        // at every doubling.
        const ITEM_OVERHEAD_BYTES: usize = 128;
        let answers_bytes: usize = items
            .iter()
            .map(|item| {
                ITEM_OVERHEAD_BYTES + item.id.len() + item.result.map_or(0, |json| json.get().len())
            })
            .sum();
        let mut out = String::with_capacity(answers_bytes);
        out.push('[');
        for (at, item) in items.iter().enumerate() {
            if at > 0 {
                out.push(',');
            }
            match item.result {
                Some(json) => {
                    out.push_str("{\"id\":\"");
                    out.push_str(&item.id);
                    out.push_str("\",\"result\":");
                    out.push_str(json.get());
                    out.push('}');
                }
                None => out.push_str(&serde_json::to_string(item).expect("a fault serialises")),
            }
        }
        out.push(']');
        Ok(out)
    }

    /// The ids of the vVols matching `query` (VASA `queryVirtualVolume`).
    pub fn query(&self, query: &VvolQuery) -> Result<Vec<VvolId>> {
        for (k, v) in &query.metadata {
            model::check_pair(k, v)?;
        }
        Ok(self.catalog.read().query(query))
    }

    /// [`Self::query`] as its JSON answer (`{"ids": [...]}`), written as it
    /// is: an id is ASCII letters, digits, dots and dashes, nothing to escape.
    pub fn query_json(&self, query: &VvolQuery) -> Result<String> {
        let ids = self.query(query)?;
        const QUOTES_AND_COMMA_BYTES: usize = 3;
        let mut out =
            String::with_capacity(16 + ids.len() * (model::ID_LEN + QUOTES_AND_COMMA_BYTES));
        out.push_str("{\"ids\":[");
        for (at, id) in ids.iter().enumerate() {
            debug_assert!(id
                .as_str()
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'));
            if at > 0 {
                out.push(',');
            }
            out.push('"');
            out.push_str(id.as_str());
            out.push('"');
        }
        out.push_str("]}");
        Ok(out)
    }

    /// Sets the pairs given; a pair with an empty value removes its key.
    pub fn update_metadata(&self, id: &VvolId, pairs: &Metadata) -> Result<VvolInfo> {
        self.counted(self.update_metadata_inner(id, pairs))
    }

    /// A metadata update recorded as a task of `operation` (VASA runs a
    /// storage profile change as one).
    pub fn update_metadata_tasked(
        &self,
        id: &VvolId,
        pairs: &Metadata,
        operation: &str,
    ) -> Tasked<VvolInfo> {
        self.tasked(
            operation,
            Some(id),
            self.update_metadata_inner(id, pairs),
            |v| v.rec.id.to_string(),
        )
    }

    fn update_metadata_inner(&self, id: &VvolId, pairs: &Metadata) -> Result<VvolInfo> {
        for (k, v) in pairs {
            model::check_pair(k, v)?;
        }
        let mut writer = self.writer.lock();
        let mut rec = self.record(id)?;
        for (k, v) in pairs {
            if v.is_empty() {
                rec.metadata.remove(k);
            } else {
                rec.metadata.insert(k.clone(), v.clone());
            }
        }
        model::check_metadata(&rec.metadata)?;
        self.replace(&mut writer, rec, "metadata updated")
    }

    fn replace(&self, writer: &mut Writer, rec: VvolRec, what: &str) -> Result<VvolInfo> {
        let changes = Changes {
            put: vec![rec.clone()],
            ..Changes::default()
        };
        let event = (
            EventKind::Config,
            rec.id.to_string(),
            None,
            what.to_string(),
        );
        self.apply(writer, changes, vec![event], |c| c.put(rec.clone()))?;
        Ok(self.catalog.read().info(&rec))
    }

    /// Grows a vVol (VASA resizes only grow).
    pub fn resize(&self, id: &VvolId, size_mib: u64) -> Result<VvolInfo> {
        self.resize_tasked(id, size_mib).result
    }

    /// [`Self::resize`], with its task.
    pub fn resize_tasked(&self, id: &VvolId, size_mib: u64) -> Tasked<VvolInfo> {
        self.tasked(
            "resizeVirtualVolume",
            Some(id),
            self.resize_inner(id, size_mib),
            |v| v.rec.id.to_string(),
        )
    }

    fn resize_inner(&self, id: &VvolId, size_mib: u64) -> Result<VvolInfo> {
        model::check_size_mib(size_mib)?;
        let mut writer = self.writer.lock();
        let mut rec = self.record(id)?;
        if rec.read_only() {
            return Err(VvolFault::InvalidArgument(format!(
                "vVol {id} is a read-only snapshot: it cannot be resized"
            )));
        }
        if size_mib < rec.size_mib {
            return Err(VvolFault::InvalidArgument(format!(
                "vVol {id} is {} MiB: a resize only grows it",
                rec.size_mib
            )));
        }
        self.engine
            .resize_volume(&rec.engine_name(), size_mib * model::MIB)?;
        rec.size_mib = size_mib;
        self.replace(&mut writer, rec, "resized")
    }

    /// Deletes a vVol and its snapshot vVols, and frees their space (not
    /// recoverable: VASA deletes are final). A bound vVol is refused.
    pub fn delete(&self, id: &VvolId) -> Result<()> {
        self.counted(self.delete_inner(id))
    }

    fn delete_inner(&self, id: &VvolId) -> Result<()> {
        let mut writer = self.writer.lock();
        writer.check_not_emptying(id)?;
        let rec = self.record(id)?;
        let (doomed, bound) = {
            let catalog = self.catalog.read();
            let mut doomed = vec![rec.clone()];
            doomed.extend(
                catalog
                    .snapshots_of(id)
                    .iter()
                    .filter_map(|s| catalog.get(s).cloned()),
            );
            let bound: Vec<String> = doomed
                .iter()
                .flat_map(|r| {
                    catalog
                        .hosts_of(&r.id)
                        .into_iter()
                        .map(|h| format!("{} on {h}", r.id))
                })
                .collect();
            (doomed, bound)
        };
        if !bound.is_empty() {
            return Err(VvolFault::ResourceInUse(format!(
                "bound: {}; unbind first",
                bound.join(", ")
            )));
        }
        // Snapshots first (writable ones are volumes of their own), then the vVol.
        for rec in doomed.iter().rev() {
            self.remove_object(rec)?;
        }
        let changes = Changes {
            remove: doomed.iter().map(|r| r.id.clone()).collect(),
            ..Changes::default()
        };
        let events = doomed
            .iter()
            .map(|r| {
                (
                    EventKind::Config,
                    r.id.to_string(),
                    None,
                    "deleted".to_string(),
                )
            })
            .collect();
        self.apply(&mut writer, changes, events, |c| {
            for rec in &doomed {
                c.remove(&rec.id);
            }
        })
    }

    /// Eradicates a vVol's engine objects (gone already counts as done).
    fn remove_object(&self, rec: &VvolRec) -> Result<()> {
        match &rec.snapshot {
            Some(SnapshotOf { base, kind }) => {
                if *kind == SnapshotKind::ReadWrite {
                    self.eradicate_volume(&rec.id.volume_name())?;
                }
                self.eradicate_snapshot(&model::snapshot_name(base, &rec.id))
            }
            None => self.eradicate_volume(&rec.id.volume_name()),
        }
    }

    fn eradicate_volume(&self, name: &str) -> Result<()> {
        match self.engine.delete_volume(name) {
            Ok(()) | Err(EngineError::VolumeNotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        match self.engine.eradicate_volume(name) {
            Ok(()) | Err(EngineError::VolumeNotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn eradicate_snapshot(&self, full_name: &str) -> Result<()> {
        let gone = |e: &EngineError| {
            matches!(
                e,
                EngineError::SnapshotNotFound(_) | EngineError::VolumeNotFound(_)
            )
        };
        match self.engine.delete_snapshot(full_name) {
            Err(e) if !gone(&e) => return Err(e.into()),
            _ => {}
        }
        match self.engine.eradicate_snapshot(full_name) {
            Err(e) if !gone(&e) => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// A writable copy of a vVol (or of a snapshot vVol), instant whatever
    /// its size; a full clone may go to another container.
    pub fn clone_vvol(&self, id: &VvolId, spec: CloneSpec) -> Result<VvolInfo> {
        self.clone_tasked(id, spec).result
    }

    /// [`Self::clone_vvol`], with its task.
    pub fn clone_tasked(&self, id: &VvolId, spec: CloneSpec) -> Tasked<VvolInfo> {
        let operation = if spec.fast {
            "fastCloneVirtualVolume"
        } else {
            "cloneVirtualVolume"
        };
        self.tasked(operation, Some(id), self.clone_inner(id, spec), |v| {
            v.rec.id.to_string()
        })
    }

    fn clone_inner(&self, id: &VvolId, spec: CloneSpec) -> Result<VvolInfo> {
        model::check_metadata(&spec.metadata)?;
        let mut writer = self.writer.lock();
        self.check_room(1)?;
        let source = self.record(id)?;
        let container = spec.container.clone().unwrap_or(source.container.clone());
        if spec.fast && container != source.container {
            return Err(VvolFault::InvalidArgument(format!(
                "a fast clone stays in its source's container '{}'",
                source.container
            )));
        }
        let new_id = VvolId::random();
        let provisioning = spec.provisioning.unwrap_or(source.provisioning);
        let volume = self.engine.clone_volume_in(
            &source.engine_name(),
            &new_id.volume_name(),
            provisioning,
            Some(&container),
        )?;
        let rec = VvolRec {
            id: new_id,
            vvol_type: source.vvol_type,
            container: volume.container.clone(),
            size_mib: source.size_mib,
            provisioning,
            metadata: spec.metadata,
            parent: Some(source.id.clone()),
            snapshot: None,
            object_id: volume.id,
            created_unix_s: now_unix_s(),
        };
        self.put_new(
            &mut writer,
            rec,
            if spec.fast { "fast-cloned" } else { "cloned" },
        )
    }

    /// Reverts a vVol to one of its snapshot vVols; another vVol's snapshot
    /// is an incompatible volume.
    pub fn revert(&self, id: &VvolId, snapshot: &VvolId) -> Result<VvolInfo> {
        self.revert_tasked(id, snapshot).result
    }

    /// [`Self::revert`], with its task.
    pub fn revert_tasked(&self, id: &VvolId, snapshot: &VvolId) -> Tasked<VvolInfo> {
        self.tasked(
            "revertVirtualVolume",
            Some(id),
            self.revert_inner(id, snapshot),
            |v| v.rec.id.to_string(),
        )
    }

    fn revert_inner(&self, id: &VvolId, snapshot: &VvolId) -> Result<VvolInfo> {
        let mut writer = self.writer.lock();
        writer.check_not_emptying(id)?;
        let rec = self.record(id)?;
        let snap = self.record(snapshot)?;
        let of_this = snap.snapshot.as_ref().is_some_and(|s| &s.base == id);
        if !of_this {
            return Err(VvolFault::IncompatibleVolume(format!(
                "{snapshot} is not a snapshot of {id}"
            )));
        }
        let volume = rec.id.volume_name();
        let snap_size = snap.size_bytes();
        match snap.snapshot.as_ref().map(|s| s.kind) {
            Some(SnapshotKind::ReadOnly) => {
                self.engine.restore_volume(&volume, &snap.engine_name())?;
            }
            _ => {
                // As a read-only revert does: back to the snapshot's size.
                if snap_size != rec.size_bytes() {
                    self.engine.resize_volume(&volume, snap_size)?;
                }
                self.engine
                    .copy_range(&snap.engine_name(), 0, snap_size, &volume, 0)?;
            }
        }
        let mut reverted = rec;
        reverted.size_mib = self.engine.volume_info(&volume)?.size_bytes / model::MIB;
        self.replace(&mut writer, reverted, "reverted")
    }

    pub fn space(&self, id: &VvolId) -> Result<VvolSpace> {
        let rec = self.record(id)?;
        if rec.read_only() {
            return Ok(VvolSpace {
                id: rec.id.clone(),
                size_bytes: rec.size_bytes(),
                written_bytes: None,
                unique_physical_bytes: None,
                shared_physical_bytes: None,
            });
        }
        let info = self.engine.volume_info(&rec.engine_name())?;
        Ok(VvolSpace {
            id: rec.id,
            size_bytes: info.size_bytes,
            written_bytes: Some(info.written_bytes),
            unique_physical_bytes: Some(info.unique_physical_bytes),
            shared_physical_bytes: Some(info.shared_physical_bytes),
        })
    }

    /// Every storage container as a vVol datastore (VASA `queryStorageContainer`).
    pub fn containers(&self) -> Result<Vec<ContainerSpace>> {
        let names: Vec<String> = self
            .engine
            .list_containers()
            .into_iter()
            .map(|c| c.name)
            .collect();
        names
            .iter()
            .map(|name| self.container_space(name))
            .collect()
    }

    pub fn container_space(&self, container: &str) -> Result<ContainerSpace> {
        let info = self.engine.container_info(container)?;
        let vvol_count = self
            .catalog
            .read()
            .query(&VvolQuery {
                container: Some(container.to_string()),
                ..VvolQuery::default()
            })
            .len() as u64;
        Ok(ContainerSpace {
            container: info.name,
            vvol_count,
            provisioned_bytes: info.provisioned_bytes,
            used_bytes: info.used_bytes,
            quota_bytes: info.policy.quota_bytes,
            max_vvol_size_mib: model::MAX_SIZE_MIB,
        })
    }

    /// The events after `last_seen` (VASA `getEvents`).
    pub fn events_since(&self, last_seen: u64) -> Result<Vec<Event>> {
        let durable = self.syncs.durable_through();
        self.writer.lock().events.since(last_seen, durable)
    }
}

#[cfg(test)]
mod tests;
