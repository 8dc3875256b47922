//! The vVols in memory, indexed so that a query costs what it matches: by
//! container, by type and by each metadata pair; the bindings both ways
//! (host → vVols, vVol → hosts). One writer at a time changes it, after the
//! store has committed the change.
//!
//! Each vVol's answer to an info request is kept serialised, made again when
//! its record or its bindings change: the datastore browser asks for the
//! metadata of every VM's Config vVol at once (1,024 of them), and serialising
//! that many records on every browse was most of its cost.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::value::RawValue;

use crate::model::{VvolId, VvolRec, VvolType};
use crate::VvolInfo;

/// What a query asks: every constraint must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VvolQuery {
    pub container: Option<String>,
    pub vvol_type: Option<VvolType>,
    /// Pairs that must all be in the vVol's metadata.
    pub metadata: BTreeMap<String, String>,
}

#[derive(Debug, Default)]
pub struct Catalog {
    vvols: HashMap<VvolId, VvolRec>,
    by_container: HashMap<String, BTreeSet<VvolId>>,
    by_type: HashMap<VvolType, BTreeSet<VvolId>>,
    by_pair: HashMap<(String, String), BTreeSet<VvolId>>,
    /// Snapshot vVols of each vVol.
    snapshots_of: HashMap<VvolId, BTreeSet<VvolId>>,
    bound: BTreeMap<String, BTreeSet<VvolId>>,
    hosts_of: HashMap<VvolId, BTreeSet<String>>,
    /// Each vVol's [`VvolInfo`] as JSON, kept equal to [`Catalog::info`].
    info_json: HashMap<VvolId, Box<RawValue>>,
}

impl Catalog {
    pub fn len(&self) -> usize {
        self.vvols.len()
    }

    pub fn get(&self, id: &VvolId) -> Option<&VvolRec> {
        self.vvols.get(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &VvolRec> {
        self.vvols.values()
    }

    /// A vVol as answered: its record, size and the hosts it is bound to.
    pub fn info(&self, rec: &VvolRec) -> VvolInfo {
        VvolInfo {
            rec: rec.clone(),
            size_bytes: rec.size_bytes(),
            bound_hosts: self.hosts_of(&rec.id),
        }
    }

    /// [`Catalog::info`] of a vVol, serialised.
    pub fn info_json(&self, id: &VvolId) -> Option<&RawValue> {
        self.info_json.get(id).map(Box::as_ref)
    }

    fn refresh_info_json(&mut self, id: &VvolId) {
        let Some(rec) = self.vvols.get(id) else {
            self.info_json.remove(id);
            return;
        };
        let json = serde_json::value::to_raw_value(&self.info(rec)).expect("a vVol serialises");
        self.info_json.insert(id.clone(), json);
    }

    /// Adds or replaces a record, keeping the indexes.
    pub fn put(&mut self, rec: VvolRec) {
        if let Some(old) = self.vvols.remove(&rec.id) {
            self.unindex(&old);
        }
        self.index(&rec);
        let id = rec.id.clone();
        self.vvols.insert(id.clone(), rec);
        self.refresh_info_json(&id);
    }

    /// Removes a record and its bindings.
    pub fn remove(&mut self, id: &VvolId) -> Option<VvolRec> {
        let rec = self.vvols.remove(id)?;
        self.unindex(&rec);
        self.info_json.remove(id);
        for host in self.hosts_of.remove(id).unwrap_or_default() {
            self.forget_binding(&host, id);
        }
        Some(rec)
    }

    fn index(&mut self, rec: &VvolRec) {
        let id = rec.id.clone();
        self.by_container
            .entry(rec.container.clone())
            .or_default()
            .insert(id.clone());
        self.by_type
            .entry(rec.vvol_type)
            .or_default()
            .insert(id.clone());
        for (k, v) in &rec.metadata {
            self.by_pair
                .entry((k.clone(), v.clone()))
                .or_default()
                .insert(id.clone());
        }
        if let Some(snapshot) = &rec.snapshot {
            self.snapshots_of
                .entry(snapshot.base.clone())
                .or_default()
                .insert(id);
        }
    }

    fn unindex(&mut self, rec: &VvolRec) {
        fn drop_from<K: std::hash::Hash + Eq>(
            map: &mut HashMap<K, BTreeSet<VvolId>>,
            key: K,
            id: &VvolId,
        ) {
            if let Some(set) = map.get_mut(&key) {
                set.remove(id);
                if set.is_empty() {
                    map.remove(&key);
                }
            }
        }
        drop_from(&mut self.by_container, rec.container.clone(), &rec.id);
        drop_from(&mut self.by_type, rec.vvol_type, &rec.id);
        for (k, v) in &rec.metadata {
            drop_from(&mut self.by_pair, (k.clone(), v.clone()), &rec.id);
        }
        if let Some(snapshot) = &rec.snapshot {
            drop_from(&mut self.snapshots_of, snapshot.base.clone(), &rec.id);
        }
    }

    /// The ids matching `query`, in id order. Starts from the smallest index
    /// set a constraint names and checks the others on its members only.
    pub fn query(&self, query: &VvolQuery) -> Vec<VvolId> {
        let empty = BTreeSet::new();
        let mut candidates: Vec<&BTreeSet<VvolId>> = Vec::new();
        if let Some(container) = &query.container {
            candidates.push(self.by_container.get(container).unwrap_or(&empty));
        }
        if let Some(vvol_type) = query.vvol_type {
            candidates.push(self.by_type.get(&vvol_type).unwrap_or(&empty));
        }
        for (k, v) in &query.metadata {
            candidates.push(self.by_pair.get(&(k.clone(), v.clone())).unwrap_or(&empty));
        }
        let matches = |rec: &VvolRec| {
            query.container.as_ref().is_none_or(|c| &rec.container == c)
                && query.vvol_type.is_none_or(|t| rec.vvol_type == t)
                && query
                    .metadata
                    .iter()
                    .all(|(k, v)| rec.metadata.get(k) == Some(v))
        };
        match candidates.into_iter().min_by_key(|set| set.len()) {
            Some(smallest) => smallest
                .iter()
                .filter(|id| self.vvols.get(id).is_some_and(matches))
                .cloned()
                .collect(),
            None => {
                let mut all: Vec<VvolId> = self.vvols.keys().cloned().collect();
                all.sort();
                all
            }
        }
    }

    pub fn snapshots_of(&self, id: &VvolId) -> Vec<VvolId> {
        self.snapshots_of
            .get(id)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn bind(&mut self, host: &str, id: &VvolId) {
        assert!(self.vvols.contains_key(id), "binding an unknown vVol");
        self.bound
            .entry(host.to_string())
            .or_default()
            .insert(id.clone());
        self.hosts_of
            .entry(id.clone())
            .or_default()
            .insert(host.to_string());
        self.refresh_info_json(id);
    }

    pub fn unbind(&mut self, host: &str, id: &VvolId) {
        self.forget_binding(host, id);
        if let Some(hosts) = self.hosts_of.get_mut(id) {
            hosts.remove(host);
            if hosts.is_empty() {
                self.hosts_of.remove(id);
            }
        }
        self.refresh_info_json(id);
    }

    fn forget_binding(&mut self, host: &str, id: &VvolId) {
        if let Some(set) = self.bound.get_mut(host) {
            set.remove(id);
            if set.is_empty() {
                self.bound.remove(host);
            }
        }
    }

    pub fn is_bound_to(&self, host: &str, id: &VvolId) -> bool {
        self.bound.get(host).is_some_and(|s| s.contains(id))
    }

    /// The hosts a vVol is bound to.
    pub fn hosts_of(&self, id: &VvolId) -> Vec<String> {
        self.hosts_of
            .get(id)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The vVols bound to a host.
    pub fn bound_to(&self, host: &str) -> Vec<VvolId> {
        self.bound
            .get(host)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn binding_count(&self) -> usize {
        self.bound.values().map(BTreeSet::len).sum()
    }
}
