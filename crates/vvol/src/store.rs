//! Where vVols, their bindings and the event counter are kept: a redb file of
//! its own (`<data_dir>/vvols.redb`, or objects beside the shard's on RADOS),
//! beside the engine's metadata. Every
//! change is one transaction, made durable before it is answered (in groups:
//! [`crate::durability`]); the whole catalog is loaded into memory
//! at open (it grows with the count of vVols, never with their sizes).
//!
//! Two stores, no shared transaction: the engine is the truth for data, this
//! store for which vVols exist. Each operation orders its steps so a crash
//! between them leaves only what [`crate::VvolService::open`] reconciles:
//! an engine volume or snapshot no record names (made, then the crash before
//! its record: eradicated), or a record whose object is gone (eradicated,
//! then the crash before the record went: dropped).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use crate::fault::VvolFault;
use crate::model::{VvolId, VvolRec};

/// File name of the store inside the data directory.
pub const STORE_FILE_NAME: &str = "vvols.redb";

const VVOLS: TableDefinition<&str, &[u8]> = TableDefinition::new("vvols");
/// (host, vVol id) → nothing: the vVols bound to each host.
const BINDINGS: TableDefinition<(&str, &str), ()> = TableDefinition::new("bindings");
const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
const NEXT_EVENT_ID: &str = "next_event_id";

/// What the store holds, as loaded.
#[derive(Debug, Default)]
pub struct Loaded {
    pub vvols: Vec<VvolRec>,
    pub bindings: BTreeMap<String, BTreeSet<VvolId>>,
    pub next_event_id: u64,
}

/// One durable transaction's changes.
#[derive(Debug, Default)]
pub struct Changes {
    pub put: Vec<VvolRec>,
    pub remove: Vec<VvolId>,
    pub bind: Vec<(String, VvolId)>,
    pub unbind: Vec<(String, VvolId)>,
    pub next_event_id: Option<u64>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.put.is_empty()
            && self.remove.is_empty()
            && self.bind.is_empty()
            && self.unbind.is_empty()
            && self.next_event_id.is_none()
    }
}

pub struct Store {
    db: Database,
}

impl Store {
    pub fn open(data_dir: &Path) -> Result<Store, VvolFault> {
        Store::with_tables(Database::create(data_dir.join(STORE_FILE_NAME))?)
    }

    /// The store on another medium than a file (on RADOS: objects of the
    /// array's shard, so that the vVols move with it to another gateway).
    pub fn open_on(backend: impl redb::StorageBackend) -> Result<Store, VvolFault> {
        Store::with_tables(Database::builder().create_with_backend(backend)?)
    }

    // The engine's rule (commit through its `Kv`) is about the engine's
    // database; this is another one, with no shared read views to mark.
    #[allow(clippy::disallowed_methods)]
    fn with_tables(db: Database) -> Result<Store, VvolFault> {
        let txn = db.begin_write()?;
        txn.open_table(VVOLS)?;
        txn.open_table(BINDINGS)?;
        txn.open_table(COUNTERS)?;
        txn.commit()?;
        Ok(Store { db })
    }

    pub fn load(&self) -> Result<Loaded, VvolFault> {
        let txn = self.db.begin_read()?;
        let mut loaded = Loaded::default();
        for entry in txn.open_table(VVOLS)?.iter()? {
            let (id, bytes) = entry?;
            let rec: VvolRec = serde_json::from_slice(bytes.value()).map_err(|e| {
                VvolFault::StorageFault(format!(
                    "vVol store: record {} is corrupt: {e}",
                    id.value()
                ))
            })?;
            loaded.vvols.push(rec);
        }
        for entry in txn.open_table(BINDINGS)?.iter()? {
            let (key, _) = entry?;
            let (host, id) = key.value();
            loaded
                .bindings
                .entry(host.to_string())
                .or_default()
                .insert(VvolId::parse(id)?);
        }
        loaded.next_event_id = txn
            .open_table(COUNTERS)?
            .get(NEXT_EVENT_ID)?
            .map_or(1, |v| v.value());
        Ok(loaded)
    }

    /// Applies `changes` in one durable transaction.
    pub fn commit(&self, changes: &Changes) -> Result<(), VvolFault> {
        self.write(changes, Durability::Immediate)
    }

    /// Applies `changes` in one transaction that is durable only after the
    /// next [`Store::sync`] (redb keeps a commit without durability from the
    /// disk until a durable one follows it).
    pub fn commit_without_sync(&self, changes: &Changes) -> Result<(), VvolFault> {
        self.write(changes, Durability::None)
    }

    /// Makes every commit before it durable (one empty durable commit).
    #[allow(clippy::disallowed_methods)] // see `open`
    pub fn sync(&self) -> Result<(), VvolFault> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)
            .map_err(|e| VvolFault::StorageFault(format!("vVol store: {e}")))?;
        txn.commit()?;
        Ok(())
    }

    #[allow(clippy::disallowed_methods)] // see `open`
    fn write(&self, changes: &Changes, durability: Durability) -> Result<(), VvolFault> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut txn = self.db.begin_write()?;
        txn.set_durability(durability)
            .map_err(|e| VvolFault::StorageFault(format!("vVol store: {e}")))?;
        {
            let mut vvols = txn.open_table(VVOLS)?;
            for rec in &changes.put {
                let bytes = serde_json::to_vec(rec).expect("a record serialises");
                vvols.insert(rec.id.as_str(), bytes.as_slice())?;
            }
            for id in &changes.remove {
                vvols.remove(id.as_str())?;
            }
            let mut bindings = txn.open_table(BINDINGS)?;
            for (host, id) in &changes.bind {
                bindings.insert((host.as_str(), id.as_str()), ())?;
            }
            for (host, id) in &changes.unbind {
                bindings.remove((host.as_str(), id.as_str()))?;
            }
            if let Some(next) = changes.next_event_id {
                txn.open_table(COUNTERS)?.insert(NEXT_EVENT_ID, next)?;
            }
        }
        txn.commit()?;
        Ok(())
    }
}
