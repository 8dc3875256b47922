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

    /// The ids matching `query`, in id order. Each constraint names one index
    /// set holding exactly the vVols that meet it, so the answer is their
    /// intersection: the smallest set's members found in every other set. No
    /// record is read.
    pub fn query(&self, query: &VvolQuery) -> Vec<VvolId> {
        let empty = BTreeSet::new();
        let mut sets: Vec<&BTreeSet<VvolId>> = Vec::new();
        if let Some(container) = &query.container {
            sets.push(self.by_container.get(container).unwrap_or(&empty));
        }
        if let Some(vvol_type) = query.vvol_type {
            sets.push(self.by_type.get(&vvol_type).unwrap_or(&empty));
        }
        for (k, v) in &query.metadata {
            sets.push(self.by_pair.get(&(k.clone(), v.clone())).unwrap_or(&empty));
        }
        sets.sort_by_key(|set| set.len());
        let Some((smallest, others)) = sets.split_first() else {
            let mut all: Vec<VvolId> = self.vvols.keys().cloned().collect();
            all.sort();
            return all;
        };
        let mut walks: Vec<SetWalk> = others
            .iter()
            .map(|set| SetWalk::new(set, smallest.len()))
            .collect();
        smallest
            .iter()
            .filter(|id| walks.iter_mut().all(|walk| walk.holds(id)))
            .cloned()
            .collect()
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

/// Membership in an index set for ids asked in increasing order: a set not
/// much larger than the ids asked is walked alongside them (one comparison a
/// step, in memory order), a much larger one is searched for each id.
enum SetWalk<'a> {
    Alongside(std::iter::Peekable<std::collections::btree_set::Iter<'a, VvolId>>),
    Search(&'a BTreeSet<VvolId>),
}

impl<'a> SetWalk<'a> {
    /// Past this many members per id asked, a search beats a walk.
    const WALK_MEMBERS_PER_ID: usize = 8;

    fn new(set: &'a BTreeSet<VvolId>, ids_asked: usize) -> SetWalk<'a> {
        if set.len() <= ids_asked.saturating_mul(Self::WALK_MEMBERS_PER_ID) {
            SetWalk::Alongside(set.iter().peekable())
        } else {
            SetWalk::Search(set)
        }
    }

    /// Whether the set holds `id`; each id asked is greater than the last.
    fn holds(&mut self, id: &VvolId) -> bool {
        match self {
            SetWalk::Search(set) => set.contains(id),
            SetWalk::Alongside(members) => {
                while members.next_if(|member| *member < id).is_some() {}
                members.peek() == Some(&id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Metadata;
    use lacuna_engine::Provisioning;

    const CONTAINERS: [&str; 3] = ["a", "b", "c"];
    const VALUES: [&str; 3] = ["x", "y", "z"];

    fn rec(id: &VvolId, seed: u32) -> VvolRec {
        let pick = |shift: u32, n: usize| (seed >> shift) as usize % n;
        let mut metadata = Metadata::new();
        for (at, key) in ["k1", "k2"].iter().enumerate() {
            let v = pick(4 + 3 * at as u32, 4);
            if v < VALUES.len() {
                metadata.insert(key.to_string(), VALUES[v].to_string());
            }
        }
        VvolRec {
            id: id.clone(),
            vvol_type: VvolType::ALL[pick(0, VvolType::ALL.len())],
            container: CONTAINERS[pick(2, CONTAINERS.len())].to_string(),
            size_mib: 1,
            provisioning: Provisioning::Thin,
            metadata,
            parent: None,
            snapshot: None,
            object_id: u64::from(seed),
            created_unix_s: 0,
        }
    }

    #[test]
    fn a_set_walked_alongside_or_searched_answers_membership_alike() {
        let mut all: Vec<VvolId> = (0..40).map(|_| VvolId::random()).collect();
        all.sort();
        let set: BTreeSet<VvolId> = all.iter().step_by(3).cloned().collect();
        let asked: Vec<&VvolId> = all.iter().step_by(2).collect();
        for ids_asked in [asked.len(), 1] {
            let mut walk = SetWalk::new(&set, ids_asked);
            assert_eq!(matches!(walk, SetWalk::Search(_)), ids_asked == 1);
            for id in &asked {
                assert_eq!(walk.holds(id), set.contains(*id), "{id}");
            }
        }
    }

    proptest::proptest! {
        /// After any puts and removes, a query answers exactly the records that
        /// meet every constraint, in id order, as a scan of all of them would.
        #[test]
        fn a_query_answers_what_a_scan_finds(
            changes in proptest::collection::vec((0usize..12, proptest::prelude::any::<u32>()), 0..60),
            asks in proptest::collection::vec(proptest::prelude::any::<u32>(), 1..20),
        ) {
            let ids: Vec<VvolId> = (0..12).map(|_| VvolId::random()).collect();
            let mut catalog = Catalog::default();
            for (at, seed) in changes {
                if seed % 5 == 0 {
                    catalog.remove(&ids[at]);
                } else {
                    catalog.put(rec(&ids[at], seed));
                }
            }
            for ask in asks {
                let pick = |shift: u32, n: usize| (ask >> shift) as usize % n;
                let mut query = VvolQuery::default();
                if pick(0, 2) == 1 {
                    query.container = Some(CONTAINERS[pick(1, 3)].to_string());
                }
                if pick(3, 2) == 1 {
                    query.vvol_type = Some(VvolType::ALL[pick(4, 5)]);
                }
                for (at, key) in ["k1", "k2"].iter().enumerate() {
                    if pick(8 + 3 * at as u32, 2) == 1 {
                        query.metadata.insert(key.to_string(), VALUES[pick(9 + 3 * at as u32, 3)].to_string());
                    }
                }
                let mut scanned: Vec<VvolId> = catalog
                    .iter()
                    .filter(|r| {
                        query.container.as_ref().is_none_or(|c| &r.container == c)
                            && query.vvol_type.is_none_or(|t| r.vvol_type == t)
                            && query.metadata.iter().all(|(k, v)| r.metadata.get(k) == Some(v))
                    })
                    .map(|r| r.id.clone())
                    .collect();
                scanned.sort();
                proptest::prop_assert_eq!(catalog.query(&query), scanned);
            }
        }
    }
}
