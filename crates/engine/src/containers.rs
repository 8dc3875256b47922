//! Creating, changing and deleting storage containers (the policies themselves
//! live in [`crate::space::container`]).

use crate::meta::schema::kv_error;
use crate::space::container::{
    insert_rec, validate_container_name, validate_policy, ContainerInfo, ContainerPolicy,
    ContainerRec, ContainerReclaim, ContainerShared, ContainerUpdate, ReclaimPolicy,
    DEFAULT_CONTAINER_ID, MAX_CONTAINERS,
};
use crate::{Engine, EngineError, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Engine {
    /// Writes a container record; durable once this returns.
    fn persist_container(&self, rec: &ContainerRec) -> Result<()> {
        self.commit_container_change(|t| insert_rec(t.containers()?, rec))
    }

    /// Commits a change to the container table in order with every other
    /// commit, then makes it durable as a FLUSH does (control-plane changes
    /// are durable once acknowledged). A commit of its own with durability
    /// set would make every earlier commit durable too, without the segment
    /// sync and the writer's counters a durable commit must carry: after a
    /// crash the array handed out block ids and seqs again.
    fn commit_container_change(
        &self,
        change: impl FnOnce(&mut crate::write::transaction::Tables) -> Result<()>,
    ) -> Result<()> {
        {
            let mut ws = self.committer.writer.lock();
            self.transact(&mut ws, true, |st, t, _| {
                change(t)?;
                st.records_written += 1;
                Ok(())
            })?;
        }
        self.flush()
    }

    pub(crate) fn container_named(&self, name: &str) -> Result<Arc<ContainerShared>> {
        self.catalog
            .containers
            .read()
            .values()
            .find(|c| c.name == name)
            .cloned()
            .ok_or_else(|| EngineError::ContainerNotFound(name.to_string()))
    }

    /// The container of a volume (live, destroyed or retained); the default
    /// one when the volume is gone.
    pub(crate) fn container_of_volume(
        &self,
        volume_id: crate::ids::VolumeId,
    ) -> Arc<ContainerShared> {
        let id = match self.volume_by_id(volume_id.get()) {
            Some(v) => v.container.id,
            None => self
                .catalog
                .retained
                .lock()
                .get(&volume_id)
                .map(|r| r.container)
                .unwrap_or(DEFAULT_CONTAINER_ID),
        };
        let containers = self.catalog.containers.read();
        containers
            .get(&id)
            .or_else(|| containers.get(&DEFAULT_CONTAINER_ID))
            .cloned()
            .expect("the default container always exists")
    }

    /// Creates a container.
    pub fn create_container(&self, name: &str, policy: ContainerPolicy) -> Result<ContainerInfo> {
        validate_container_name(name)?;
        validate_policy(&policy)?;
        let _admin = self.catalog.container_admin.lock();
        let id = {
            let containers = self.catalog.containers.read();
            if containers.values().any(|c| c.name == name) {
                return Err(EngineError::ContainerExists(name.to_string()));
            }
            if containers.len() >= MAX_CONTAINERS {
                return Err(EngineError::InvalidArgument(format!(
                    "an array holds at most {MAX_CONTAINERS} containers"
                )));
            }
            containers.keys().next_back().copied().unwrap_or(0) + 1
        };
        let rec = ContainerRec {
            id,
            name: name.to_string(),
            created_unix_s: crate::units::now_unix_s(),
            policy,
        };
        self.persist_container(&rec)?;
        let shared = Arc::new(ContainerShared::new(&rec, self.clock.now()));
        self.catalog.containers.write().insert(id, shared.clone());
        Ok(self.container_info_of(&shared))
    }

    /// Changes a container's policies. A new reclaim policy applies at once
    /// (tokens accrued so far are kept, up to the new burst).
    pub fn set_container(&self, name: &str, update: &ContainerUpdate) -> Result<ContainerInfo> {
        let _admin = self.catalog.container_admin.lock();
        let shared = self.container_named(name)?;
        let mut changed = *shared.policy.read();
        update.apply(&mut changed);
        validate_policy(&changed)?;
        let mut rec = shared.rec();
        rec.policy = changed;
        self.persist_container(&rec)?;
        *shared.policy.write() = changed;
        shared.bucket.lock().set_policy(
            changed.reclaim.rate(),
            changed.reclaim_burst_bytes,
            self.clock.now(),
        );
        self.scheduler.wake();
        Ok(self.container_info_of(&shared))
    }

    /// Deletes an empty container (not `default`).
    pub fn delete_container(&self, name: &str) -> Result<()> {
        let _admin = self.catalog.container_admin.lock();
        let shared = self.container_named(name)?;
        if shared.id == DEFAULT_CONTAINER_ID {
            return Err(EngineError::InvalidArgument(
                "the default container cannot be deleted".into(),
            ));
        }
        // Flagged before members are counted, under the volume map's lock that
        // a create holds from its flag check to its insert: a volume is either
        // counted here or refused there, never created into a deleted
        // container (where reclaim, which walks the containers, never finds it).
        shared.deleting.store(true, Ordering::SeqCst);
        let result = self.delete_empty_container(&shared);
        if result.is_err() {
            shared.deleting.store(false, Ordering::SeqCst);
        }
        result
    }

    fn delete_empty_container(&self, shared: &ContainerShared) -> Result<()> {
        let name = shared.name.as_str();
        let members = self.container_members(shared.id).len();
        let doomed = self
            .committer
            .writer
            .lock()
            .doomed_containers
            .values()
            .filter(|&&c| c == shared.id)
            .count();
        if members + doomed > 0 {
            return Err(EngineError::InvalidArgument(format!(
                "container '{name}' still holds {members} volume(s) and {doomed} being reclaimed: delete and eradicate them first"
            )));
        }
        self.commit_container_change(|t| {
            t.containers()?.remove(name).map_err(kv_error)?;
            Ok(())
        })?;
        self.catalog.containers.write().remove(&shared.id);
        Ok(())
    }

    /// Works off the container's backlog now, whatever its policy, until empty.
    pub fn reclaim_container_now(&self, name: &str) -> Result<ContainerInfo> {
        let shared = self.container_named(name)?;
        shared.draining.store(true, Ordering::SeqCst);
        self.scheduler.wake();
        Ok(self.container_info_of(&shared))
    }

    pub fn list_containers(&self) -> Vec<ContainerInfo> {
        let containers: Vec<_> = self.catalog.containers.read().values().cloned().collect();
        containers
            .iter()
            .map(|c| self.container_info_of(c))
            .collect()
    }

    pub fn container_info(&self, name: &str) -> Result<ContainerInfo> {
        let shared = self.container_named(name)?;
        Ok(self.container_info_of(&shared))
    }

    fn container_info_of(&self, shared: &ContainerShared) -> ContainerInfo {
        let policy = *shared.policy.read();
        let now = self.clock.now();
        let members = self.container_members(shared.id);
        let provisioned_bytes = members.iter().map(|v| v.view.read().size_bytes).sum();
        let used_bytes = shared.used_bytes();
        let backlog_bytes = self.container_backlog_grains(shared.id, &members) * crate::GRAIN_BYTES;
        let current_bytes_per_s = shared.window.lock().bytes_per_s(now);
        let draining = shared.draining.load(Ordering::SeqCst);
        let eta_s = if backlog_bytes == 0 {
            Some(0.0)
        } else {
            let rate = match (draining, policy.reclaim.bytes_per_s()) {
                (false, Some(rate)) => Some(rate as f64),
                (false, None) if policy.reclaim == ReclaimPolicy::Off => None,
                _ => (current_bytes_per_s > 0.0).then_some(current_bytes_per_s),
            };
            rate.map(|r| backlog_bytes as f64 / r)
        };
        ContainerInfo {
            name: shared.name.clone(),
            id: shared.id,
            created_unix_s: shared.created_unix_s,
            policy,
            volume_count: members.len() as u64,
            provisioned_bytes,
            used_bytes,
            reclaim: ContainerReclaim {
                policy: policy.reclaim,
                rate_bytes_per_s: policy.reclaim.bytes_per_s(),
                burst_bytes: policy.reclaim_burst_bytes,
                stats: shared.counters.snapshot(backlog_bytes),
                current_bytes_per_s,
                eta_s,
                draining,
            },
        }
    }

    /// The named volumes of a container.
    pub(crate) fn container_members(&self, container: u64) -> Vec<Arc<crate::VolumeShared>> {
        let mut members = self.named_volumes();
        members.retain(|v| v.container.id == container);
        members
    }

    /// Dead grains of a container (its `members` and its doomed volumes) not
    /// yet reclaimed.
    pub(crate) fn container_backlog_grains(
        &self,
        container: u64,
        members: &[Arc<crate::VolumeShared>],
    ) -> u64 {
        let ws = self.committer.writer.lock();
        let doomed: u64 = ws
            .doomed_containers
            .iter()
            .filter(|(_, &c)| c == container)
            .map(|(&id, _)| ws.mapping_count(id))
            .sum();
        doomed + members.iter().map(|v| v.backlog_grains(&ws)).sum::<u64>()
    }
}
