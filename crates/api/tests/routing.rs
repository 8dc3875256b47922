//! Routing, authentication, body validation and the mapping of every engine error
//! to its status, against an in-memory double of the engine (so failures a real
//! array rarely produces — out of space, I/O errors — can be injected), the host
//! routes against a double of the host registry, plus the real listener path
//! through `serve`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use lacuna_api::{
    router, ApiState, ControlPlane, HostControl, HostControlError, HostInfo, LunInfo, NewHost,
    NewLun, MAX_BODY_BYTES,
};
use lacuna_engine::integrity::scrub::{
    AffectedRange, BadRecord, ScrubReport, ScrubStart, ScrubStatus,
};
use lacuna_engine::{
    Compression, ContainerInfo, ContainerPolicy, ContainerReclaim, ContainerUpdate, CopyReport,
    EngineError, GroupSnapshot, Provisioning, ReclaimPolicy, ReclaimStats, SnapshotInfo,
    SpaceReport, VolumeInfo,
};
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// An engine double: volumes (live and destroyed) and snapshots in maps, a log of
/// the calls it received with their arguments, and an optional error every call
/// returns.
#[derive(Default)]
struct FakeArray {
    volumes: Mutex<BTreeMap<String, VolumeInfo>>,
    snapshots: Mutex<BTreeMap<String, SnapshotInfo>>,
    /// Containers other than `default` (which always exists).
    containers: Mutex<BTreeMap<String, ContainerInfo>>,
    calls: Mutex<Vec<String>>,
    fail_with: Mutex<Option<fn() -> EngineError>>,
    /// What `health` answers (and `space` carries).
    health: Mutex<lacuna_engine::ArrayHealth>,
}

impl FakeArray {
    /// A container the fake knows (`default` always).
    fn known_container(&self, name: &str) -> Result<ContainerInfo, EngineError> {
        if name == "default" {
            return Ok(container("default", ContainerPolicy::default()));
        }
        self.containers
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .ok_or_else(|| EngineError::ContainerNotFound(name.to_string()))
    }

    fn check(&self, call: String) -> Result<(), EngineError> {
        self.calls.lock().unwrap().push(call);
        match *self.fail_with.lock().unwrap() {
            Some(make) => Err(make()),
            None => Ok(()),
        }
    }

    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }

    fn live_volume(&self, name: &str) -> Result<VolumeInfo, EngineError> {
        self.volumes
            .lock()
            .unwrap()
            .get(name)
            .filter(|v| v.destroyed_unix_s.is_none())
            .cloned()
            .ok_or_else(|| EngineError::VolumeNotFound(name.to_string()))
    }

    fn set_volume_destroyed(&self, name: &str, destroyed: bool) -> Result<(), EngineError> {
        let mut volumes = self.volumes.lock().unwrap();
        match volumes.get_mut(name) {
            Some(v) if v.destroyed_unix_s.is_some() != destroyed => {
                v.destroyed_unix_s = destroyed.then_some(1000);
                v.eradicate_at_unix_s = destroyed.then_some(1000 + 86400);
                Ok(())
            }
            _ => Err(EngineError::VolumeNotFound(name.to_string())),
        }
    }

    fn set_snapshot_destroyed(&self, full_name: &str, destroyed: bool) -> Result<(), EngineError> {
        let mut snapshots = self.snapshots.lock().unwrap();
        match snapshots.get_mut(full_name) {
            Some(s) if s.destroyed_unix_s.is_some() != destroyed => {
                s.destroyed_unix_s = destroyed.then_some(1000);
                s.eradicate_at_unix_s = destroyed.then_some(1000 + 86400);
                Ok(())
            }
            Some(_) => Err(EngineError::InvalidArgument(format!(
                "snapshot '{full_name}' is in the wrong state"
            ))),
            None => Err(EngineError::SnapshotNotFound(full_name.to_string())),
        }
    }
}

fn info(name: &str, size_bytes: u64) -> VolumeInfo {
    VolumeInfo {
        name: name.to_string(),
        id: 1,
        size_bytes,
        written_bytes: 0,
        written_settling: false,
        thin_provisioning_percent: 100.0,
        logical_data_bytes: 0,
        unique_physical_bytes: 0,
        shared_physical_bytes: 0,
        data_reduction_ratio: 1.0,
        created_unix_s: 0,
        provisioning: Provisioning::Thin,
        reserved_bytes: 0,
        snapshot_count: 0,
        destroyed_unix_s: None,
        eradicate_at_unix_s: None,
        container: "default".into(),
        reclaim: Default::default(),
    }
}

/// A container with every figure distinct, so a test can tell them apart.
fn container(name: &str, policy: ContainerPolicy) -> ContainerInfo {
    ContainerInfo {
        name: name.to_string(),
        id: 7,
        created_unix_s: 1000,
        policy,
        volume_count: 2,
        provisioned_bytes: 1 << 30,
        used_bytes: 3 << 20,
        reclaim: ContainerReclaim {
            policy: policy.reclaim,
            rate_bytes_per_s: policy.reclaim.bytes_per_s(),
            burst_bytes: policy.reclaim_burst_bytes,
            stats: ReclaimStats {
                unmap_commands: 11,
                unmapped_bytes: 12 << 20,
                reclaimed_bytes: 5 << 20,
                backlog_bytes: 7 << 20,
            },
            current_bytes_per_s: 1.5e6,
            eta_s: policy
                .reclaim
                .bytes_per_s()
                .map(|r| (7 << 20) as f64 / r as f64),
            draining: false,
        },
    }
}

fn snapshot(volume: &str, name: &str, group: Option<&str>) -> SnapshotInfo {
    SnapshotInfo {
        id: 2,
        volume: volume.to_string(),
        name: name.to_string(),
        full_name: format!("{volume}@{name}"),
        size_bytes: 512,
        created_unix_s: 0,
        group: group.map(str::to_string),
        destroyed_unix_s: None,
        eradicate_at_unix_s: None,
    }
}

impl ControlPlane for FakeArray {
    fn list_volumes(&self, destroyed: bool) -> Result<Vec<VolumeInfo>, EngineError> {
        self.check(format!("list_volumes {destroyed}"))?;
        Ok(self
            .volumes
            .lock()
            .unwrap()
            .values()
            .filter(|v| v.destroyed_unix_s.is_some() == destroyed)
            .cloned()
            .collect())
    }

    fn volume_info(&self, name: &str) -> Result<VolumeInfo, EngineError> {
        self.check(format!("volume_info {name}"))?;
        let volumes = self.volumes.lock().unwrap();
        volumes
            .get(name)
            .cloned()
            .ok_or_else(|| EngineError::VolumeNotFound(name.to_string()))
    }

    fn create_volume(
        &self,
        name: &str,
        size_bytes: u64,
        provisioning: Provisioning,
        container: Option<&str>,
    ) -> Result<VolumeInfo, EngineError> {
        self.check(format!(
            "create_volume {name} {size_bytes} {provisioning}{}",
            in_container(container)
        ))?;
        let container = self.known_container(container.unwrap_or("default"))?;
        let mut volumes = self.volumes.lock().unwrap();
        if volumes.contains_key(name) {
            return Err(EngineError::VolumeExists(name.to_string()));
        }
        let v = VolumeInfo {
            provisioning,
            container: container.name,
            ..info(name, size_bytes)
        };
        volumes.insert(name.to_string(), v.clone());
        Ok(v)
    }

    fn clone_volume(
        &self,
        source: &str,
        name: &str,
        provisioning: Provisioning,
        container: Option<&str>,
    ) -> Result<VolumeInfo, EngineError> {
        self.check(format!(
            "clone_volume {source} {name} {provisioning}{}",
            in_container(container)
        ))?;
        if let Some(container) = container {
            self.known_container(container)?;
        }
        let size_bytes = match source.split_once('@') {
            Some(_) => self
                .snapshots
                .lock()
                .unwrap()
                .get(source)
                .map(|s| s.size_bytes)
                .ok_or_else(|| EngineError::SnapshotNotFound(source.to_string()))?,
            None => self.live_volume(source)?.size_bytes,
        };
        let mut volumes = self.volumes.lock().unwrap();
        if volumes.contains_key(name) {
            return Err(EngineError::VolumeExists(name.to_string()));
        }
        let v = VolumeInfo {
            provisioning,
            container: container.unwrap_or("default").to_string(),
            ..info(name, size_bytes)
        };
        volumes.insert(name.to_string(), v.clone());
        Ok(v)
    }

    fn resize_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo, EngineError> {
        self.check(format!("resize_volume {name} {size_bytes}"))?;
        self.live_volume(name)?;
        let mut volumes = self.volumes.lock().unwrap();
        let v = volumes.get_mut(name).expect("live");
        v.size_bytes = size_bytes;
        Ok(v.clone())
    }

    fn delete_volume(&self, name: &str) -> Result<(), EngineError> {
        self.check(format!("delete_volume {name}"))?;
        self.set_volume_destroyed(name, true)
    }

    fn recover_volume(&self, name: &str) -> Result<(), EngineError> {
        self.check(format!("recover_volume {name}"))?;
        self.set_volume_destroyed(name, false)
    }

    fn eradicate_volume(&self, name: &str) -> Result<(), EngineError> {
        self.check(format!("eradicate_volume {name}"))?;
        let mut volumes = self.volumes.lock().unwrap();
        match volumes.get(name) {
            Some(v) if v.destroyed_unix_s.is_some() => {
                volumes.remove(name);
                Ok(())
            }
            Some(_) => Err(EngineError::InvalidArgument(format!(
                "volume '{name}' is not destroyed"
            ))),
            None => Err(EngineError::VolumeNotFound(name.to_string())),
        }
    }

    fn restore_volume(&self, volume: &str, snapshot: &str) -> Result<VolumeInfo, EngineError> {
        self.check(format!("restore_volume {volume} {snapshot}"))?;
        self.live_volume(volume)
    }

    fn copy_range(
        &self,
        source: &str,
        source_offset_bytes: u64,
        length_bytes: u64,
        destination: &str,
        destination_offset_bytes: u64,
    ) -> Result<CopyReport, EngineError> {
        self.check(format!(
            "copy_range {source} {source_offset_bytes} {length_bytes} {destination} {destination_offset_bytes}"
        ))?;
        self.live_volume(source)?;
        self.live_volume(destination)?;
        Ok(CopyReport {
            referenced_bytes: length_bytes,
            data_bytes: 0,
        })
    }

    fn create_snapshots(
        &self,
        volumes: &[&str],
        name: Option<&str>,
        group: Option<&str>,
    ) -> Result<GroupSnapshot, EngineError> {
        self.check(format!("create_snapshots {volumes:?} {name:?} {group:?}"))?;
        let name = name.or(group).unwrap_or("snap");
        let mut taken = Vec::new();
        for volume in volumes {
            self.live_volume(volume)?;
            taken.push(snapshot(volume, name, group));
        }
        let mut snapshots = self.snapshots.lock().unwrap();
        for s in &taken {
            if snapshots.contains_key(&s.full_name) {
                return Err(EngineError::SnapshotExists(s.full_name.clone()));
            }
        }
        for s in &taken {
            snapshots.insert(s.full_name.clone(), s.clone());
        }
        Ok(GroupSnapshot {
            snapshots: taken,
            prepare_us: 5,
            commit_window_us: 7,
        })
    }

    fn list_snapshots(
        &self,
        volume: Option<&str>,
        destroyed: bool,
    ) -> Result<Vec<SnapshotInfo>, EngineError> {
        self.check(format!("list_snapshots {volume:?} {destroyed}"))?;
        if let Some(volume) = volume {
            self.live_volume(volume)?;
        }
        Ok(self
            .snapshots
            .lock()
            .unwrap()
            .values()
            .filter(|s| volume.is_none_or(|v| s.volume == v))
            .filter(|s| s.destroyed_unix_s.is_some() == destroyed)
            .cloned()
            .collect())
    }

    fn snapshot_info(&self, full_name: &str) -> Result<SnapshotInfo, EngineError> {
        self.check(format!("snapshot_info {full_name}"))?;
        self.snapshots
            .lock()
            .unwrap()
            .get(full_name)
            .cloned()
            .ok_or_else(|| EngineError::SnapshotNotFound(full_name.to_string()))
    }

    fn delete_snapshot(&self, full_name: &str) -> Result<(), EngineError> {
        self.check(format!("delete_snapshot {full_name}"))?;
        self.set_snapshot_destroyed(full_name, true)
    }

    fn recover_snapshot(&self, full_name: &str) -> Result<(), EngineError> {
        self.check(format!("recover_snapshot {full_name}"))?;
        self.set_snapshot_destroyed(full_name, false)
    }

    fn eradicate_snapshot(&self, full_name: &str) -> Result<(), EngineError> {
        self.check(format!("eradicate_snapshot {full_name}"))?;
        let mut snapshots = self.snapshots.lock().unwrap();
        match snapshots.get(full_name) {
            Some(s) if s.destroyed_unix_s.is_some() => {
                snapshots.remove(full_name);
                Ok(())
            }
            Some(_) => Err(EngineError::InvalidArgument(format!(
                "snapshot '{full_name}' is not destroyed"
            ))),
            None => Err(EngineError::SnapshotNotFound(full_name.to_string())),
        }
    }

    fn space(&self) -> Result<SpaceReport, EngineError> {
        self.check("space".to_string())?;
        Ok(SpaceReport {
            health: self.health(),
            ..space_report()
        })
    }

    fn health(&self) -> lacuna_engine::ArrayHealth {
        self.health.lock().unwrap().clone()
    }

    fn list_containers(&self) -> Result<Vec<ContainerInfo>, EngineError> {
        self.check("list_containers".to_string())?;
        let mut all = vec![self.known_container("default")?];
        all.extend(self.containers.lock().unwrap().values().cloned());
        Ok(all)
    }

    fn container_info(&self, name: &str) -> Result<ContainerInfo, EngineError> {
        self.check(format!("container_info {name}"))?;
        self.known_container(name)
    }

    fn create_container(
        &self,
        name: &str,
        policy: ContainerPolicy,
    ) -> Result<ContainerInfo, EngineError> {
        self.check(format!("create_container {name} {policy:?}"))?;
        if policy.quota_bytes == Some(0) {
            return Err(EngineError::InvalidArgument("a quota of zero bytes".into()));
        }
        let mut containers = self.containers.lock().unwrap();
        if name == "default" || containers.contains_key(name) {
            return Err(EngineError::ContainerExists(name.to_string()));
        }
        let made = container(name, policy);
        containers.insert(name.to_string(), made.clone());
        Ok(made)
    }

    fn set_container(
        &self,
        name: &str,
        update: &ContainerUpdate,
    ) -> Result<ContainerInfo, EngineError> {
        self.check(format!("set_container {name} {update:?}"))?;
        let mut containers = self.containers.lock().unwrap();
        let c = containers
            .get_mut(name)
            .ok_or_else(|| EngineError::ContainerNotFound(name.to_string()))?;
        let mut policy = c.policy;
        if let Some(quota) = update.quota_bytes {
            policy.quota_bytes = quota;
        }
        if let Some(reclaim) = update.reclaim {
            policy.reclaim = reclaim;
        }
        if let Some(burst) = update.reclaim_burst_bytes {
            policy.reclaim_burst_bytes = burst;
        }
        if let Some(compression) = update.compression {
            policy.compression = compression;
        }
        if let Some(dedup) = update.dedup {
            policy.dedup = dedup;
        }
        *c = container(name, policy);
        Ok(c.clone())
    }

    fn delete_container(&self, name: &str) -> Result<(), EngineError> {
        self.check(format!("delete_container {name}"))?;
        if name == "default" {
            return Err(EngineError::InvalidArgument(
                "the default container cannot be deleted".into(),
            ));
        }
        self.containers
            .lock()
            .unwrap()
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| EngineError::ContainerNotFound(name.to_string()))
    }

    fn reclaim_container_now(&self, name: &str) -> Result<ContainerInfo, EngineError> {
        self.check(format!("reclaim_container_now {name}"))?;
        let mut c = self.known_container(name)?;
        c.reclaim.draining = true;
        Ok(c)
    }

    fn begin_scrub(&self, rate_bytes_per_s: Option<u64>) -> Result<ScrubStart, EngineError> {
        self.check(format!("begin_scrub {rate_bytes_per_s:?}"))?;
        Ok(ScrubStart {
            report: scrub_report(rate_bytes_per_s),
            started: true,
        })
    }

    /// Not logged: it runs on the blocking pool after the answer.
    fn run_scrub(&self, _pass: u64) -> Result<ScrubReport, EngineError> {
        Ok(scrub_report(None))
    }

    fn cancel_scrub(&self) -> Result<ScrubReport, EngineError> {
        self.check("cancel_scrub".to_string())?;
        Ok(ScrubReport {
            cancelled: true,
            ..scrub_report(Some(1))
        })
    }

    fn scrub_status(&self) -> Result<ScrubStatus, EngineError> {
        self.check("scrub_status".to_string())?;
        Ok(ScrubStatus {
            current: None,
            last: Some(scrub_report(None)),
            background_rate_bytes_per_s: None,
        })
    }
}

/// A finished pass that found one bad record read by one range.
pub fn scrub_report(rate_bytes_per_s: Option<u64>) -> ScrubReport {
    ScrubReport {
        pass: 1,
        background: false,
        running: false,
        cancelled: false,
        rate_bytes_per_s,
        started_unix_s: 1,
        finished_unix_s: Some(2),
        records_total: 3,
        bytes_total: 300,
        records_checked: 3,
        bytes_checked: 300,
        bad_records: 1,
        bad: vec![BadRecord {
            block_id: 7,
            segment: 1,
            offset_bytes: 100,
            reason: "checksum mismatch".into(),
        }],
        affected: vec![AffectedRange {
            volume: "v".into(),
            live: true,
            snapshots: vec!["v@s".into()],
            offset_bytes: 4096,
            length_bytes: 4096,
        }],
        error: None,
    }
}

/// How the fake logs an optional container argument.
fn in_container(container: Option<&str>) -> String {
    container.map(|c| format!(" in {c}")).unwrap_or_default()
}

/// A host-registry double: hosts in a map (with the secrets they were given, to
/// check they arrive and never come back), a log of calls, an optional error
/// every call returns. Volume "missing" does not exist; the others all do.
#[derive(Default)]
struct FakeHosts {
    hosts: Mutex<BTreeMap<String, HostInfo>>,
    secrets: Mutex<BTreeMap<String, Vec<String>>>,
    calls: Mutex<Vec<String>>,
    fail_with: Mutex<Option<fn() -> HostControlError>>,
}

impl FakeHosts {
    fn check(&self, call: String) -> Result<(), HostControlError> {
        self.calls.lock().unwrap().push(call);
        match *self.fail_with.lock().unwrap() {
            Some(make) => Err(make()),
            None => Ok(()),
        }
    }

    fn calls(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

impl HostControl for FakeHosts {
    fn list_hosts(&self) -> Result<Vec<HostInfo>, HostControlError> {
        self.check("list_hosts".into())?;
        Ok(self.hosts.lock().unwrap().values().cloned().collect())
    }

    fn host_info(&self, name: &str) -> Result<HostInfo, HostControlError> {
        self.check(format!("host_info {name}"))?;
        self.hosts
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .ok_or_else(|| HostControlError::HostNotFound(name.into()))
    }

    fn create_host(&self, host: NewHost) -> Result<HostInfo, HostControlError> {
        self.check(format!("create_host {host:?}"))?;
        if !host.iqns.iter().all(|i| i.starts_with("iqn.")) {
            return Err(HostControlError::Invalid("not an iSCSI name".into()));
        }
        if host.chap.iter().any(|c| c.secret.len() < 12) {
            return Err(HostControlError::Invalid(
                "CHAP secret must be 12 to 255 characters".into(),
            ));
        }
        let mut hosts = self.hosts.lock().unwrap();
        if hosts.contains_key(&host.name) {
            return Err(HostControlError::HostExists(host.name));
        }
        let info = HostInfo {
            name: host.name.clone(),
            iqns: host.iqns.clone(),
            chap_user: host.chap.as_ref().map(|c| c.user.clone()),
            mutual_chap_user: host.mutual_chap.as_ref().map(|c| c.user.clone()),
            nbd_psk: host.nbd_psk_key.is_some(),
            luns: Vec::new(),
            protocol_endpoint_lun: None,
        };
        let secrets = host
            .chap
            .iter()
            .chain(host.mutual_chap.iter())
            .map(|c| c.secret.clone())
            .chain(host.nbd_psk_key.clone())
            .collect();
        self.secrets
            .lock()
            .unwrap()
            .insert(host.name.clone(), secrets);
        hosts.insert(host.name, info.clone());
        Ok(info)
    }

    fn delete_host(&self, name: &str) -> Result<(), HostControlError> {
        self.check(format!("delete_host {name}"))?;
        self.hosts
            .lock()
            .unwrap()
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| HostControlError::HostNotFound(name.into()))
    }

    fn connect(&self, host: &str, lun: NewLun) -> Result<LunInfo, HostControlError> {
        self.check(format!(
            "connect {host} {} {:?} {} {}",
            lun.volume, lun.lun, lun.block_size_bytes, lun.removable
        ))?;
        let mut hosts = self.hosts.lock().unwrap();
        let info = hosts
            .get_mut(host)
            .ok_or_else(|| HostControlError::HostNotFound(host.into()))?;
        if lun.volume == "missing" {
            return Err(EngineError::VolumeNotFound(lun.volume).into());
        }
        if info.luns.iter().any(|l| l.volume == lun.volume) {
            return Err(HostControlError::Invalid(format!(
                "volume '{}' is already connected",
                lun.volume
            )));
        }
        let number = match lun.lun {
            Some(n) if info.luns.iter().any(|l| l.lun == n) => {
                return Err(HostControlError::Invalid(format!("LUN {n} is taken")))
            }
            Some(n) => n,
            None => (0..)
                .find(|n| info.luns.iter().all(|l| l.lun != *n))
                .unwrap(),
        };
        let made = LunInfo::new(number, &lun.volume, lun.block_size_bytes, lun.removable);
        info.luns.push(made.clone());
        info.luns.sort_by_key(|l| l.lun);
        Ok(made)
    }

    fn disconnect(&self, host: &str, volume: &str) -> Result<(), HostControlError> {
        self.check(format!("disconnect {host} {volume}"))?;
        let mut hosts = self.hosts.lock().unwrap();
        let info = hosts
            .get_mut(host)
            .ok_or_else(|| HostControlError::HostNotFound(host.into()))?;
        let before = info.luns.len();
        info.luns.retain(|l| l.volume != volume);
        if info.luns.len() == before {
            return Err(HostControlError::Invalid(format!(
                "volume '{volume}' is not connected"
            )));
        }
        Ok(())
    }

    fn set_nbd_psk(&self, host: &str, key: Option<String>) -> Result<HostInfo, HostControlError> {
        self.check(format!("set_nbd_psk {host} {}", key.is_some()))?;
        let mut hosts = self.hosts.lock().unwrap();
        let info = hosts
            .get_mut(host)
            .ok_or_else(|| HostControlError::HostNotFound(host.into()))?;
        info.nbd_psk = key.is_some();
        if let Some(key) = key {
            self.secrets
                .lock()
                .unwrap()
                .entry(host.into())
                .or_default()
                .push(key);
        }
        Ok(info.clone())
    }

    fn add_protocol_endpoint(
        &self,
        host: &str,
        lun: Option<u64>,
    ) -> Result<HostInfo, HostControlError> {
        self.check(format!("add_protocol_endpoint {host} {lun:?}"))?;
        let mut hosts = self.hosts.lock().unwrap();
        let info = hosts
            .get_mut(host)
            .ok_or_else(|| HostControlError::HostNotFound(host.into()))?;
        info.protocol_endpoint_lun = Some(lun.unwrap_or(0));
        Ok(info.clone())
    }

    fn remove_protocol_endpoint(&self, host: &str) -> Result<HostInfo, HostControlError> {
        self.check(format!("remove_protocol_endpoint {host}"))?;
        let mut hosts = self.hosts.lock().unwrap();
        let info = hosts
            .get_mut(host)
            .ok_or_else(|| HostControlError::HostNotFound(host.into()))?;
        info.protocol_endpoint_lun = None;
        Ok(info.clone())
    }
}

pub fn space_report() -> SpaceReport {
    SpaceReport {
        capacity_bytes: 1 << 30,
        physical_used_bytes: 0,
        live_physical_bytes: 0,
        stale_bytes: 0,
        free_bytes: 1 << 30,
        provisioned_bytes: 0,
        logical_data_bytes: 0,
        written_settling_volumes: 0,
        reclaim_backlog_bytes: 0,
        reduction_backlog_bytes: 0,
        reduced_bytes: 0,
        data_reduction_ratio: 1.0,
        total_reduction_ratio: 1.0,
        volume_count: 0,
        segment_count: 0,
        cleaned_segments: 0,
        relocated_bytes: 0,
        writer_cleans: 0,
        punched_bytes: 0,
        reusable_freed_bytes: 0,
        reused_segment_files: 0,
        checksum_errors: 0,
        read_errors: 0,
        volume_unique_bytes: 0,
        snapshot_bytes: 0,
        shared_bytes: 0,
        reserved_bytes: 0,
        thin_available_bytes: 1 << 30,
        soft_threshold_percent: 80,
        soft_threshold_exceeded: false,
        soft_threshold_events: 0,
        snapshot_count: 0,
        destroyed_volume_count: 0,
        host_written_bytes: 0,
        media_written_bytes: 0,
        write_amplification: 0.0,
        unmap_commands: 0,
        unmapped_bytes: 0,
        reclaimed_bytes: 0,
        health: lacuna_engine::ArrayHealth::default(),
    }
}

struct Response {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Value,
}

/// Sends one request; `body` is sent as JSON when given.
async fn send(
    app: &axum::Router,
    method: &str,
    uri: &str,
    authorization: Option<&str>,
    body: Option<&str>,
) -> Response {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(value) = authorization {
        request = request.header(header::AUTHORIZATION, value);
    }
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let request = request
        .body(Body::from(body.unwrap_or_default().to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let text = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    let body = if bytes.is_empty() {
        Value::Null
    } else if text {
        Value::String(String::from_utf8(bytes.to_vec()).expect("UTF-8 text"))
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{method} {uri}: body is not JSON ({e}): {bytes:?}"))
    };
    Response {
        status,
        headers,
        body,
    }
}

fn app() -> (axum::Router, Arc<FakeArray>) {
    let (app, fake, _) = app_with_hosts();
    (app, fake)
}

fn app_with_hosts() -> (axum::Router, Arc<FakeArray>, Arc<FakeHosts>) {
    let fake = Arc::new(FakeArray::default());
    let hosts = Arc::new(FakeHosts::default());
    let state = ApiState::new(fake.clone(), TOKEN)
        .with_hosts(hosts.clone())
        .with_vvols(vvol_service())
        .with_monitor(monitor())
        .with_live_sessions(Arc::new(OneSession))
        .with_gateways(Arc::new(TwoGateways { fail: false }));
    (router(state), fake, hosts)
}

/// A pool with an owner and a standby; or a cluster that cannot be read.
struct TwoGateways {
    fail: bool,
}

impl lacuna_api::gateways::GatewaySource for TwoGateways {
    fn gateways(&self) -> Result<lacuna_api::gateways::GatewaysAnswer, String> {
        use lacuna_api::gateways::{GatewayInfo, GatewaysAnswer, Portal, ShardInfo};
        if self.fail {
            return Err("listing objects: Connection timed out (errno 110)".into());
        }
        let gateway = |id: &str, state: &str| GatewayInfo {
            gateway: id.into(),
            state: state.into(),
            address: format!("127.0.0.1:0/{}", id.len()),
            shard: "shard-0".into(),
            portals: vec![Portal {
                service: "nbd".into(),
                address: "127.0.0.1:10809".into(),
            }],
            pid: 7,
            started_unix_ms: 1,
            last_seen_ms_ago: 5,
            lease_ms: 6000,
        };
        Ok(GatewaysAnswer {
            pool: "lacuna".into(),
            this_gateway: "gw-a".into(),
            gateways: vec![gateway("gw-a", "owner"), gateway("gw-b", "standby")],
            shards: vec![ShardInfo {
                shard: "shard-0".into(),
                owner: Some("gw-a".into()),
                owner_address: Some("127.0.0.1:0/4".into()),
            }],
        })
    }
}

/// One NBD connection of host `h`, open now.
struct OneSession;

impl lacuna_api::monitor::LiveSessionSource for OneSession {
    fn live_sessions(&self) -> Vec<lacuna_monitor::LiveSession> {
        vec![lacuna_monitor::LiveSession {
            protocol: lacuna_monitor::Protocol::Nbd,
            host: Some("h".to_string()),
            initiator: "127.0.0.1:10809".to_string(),
            export: Some("v".to_string()),
            since_unix_s: Some(1),
        }]
    }
}

/// A real monitor, one for the whole test binary (its event log in a
/// temporary directory).
fn monitor() -> Arc<lacuna_monitor::Monitor> {
    type Kept = (tempfile::TempDir, Arc<lacuna_monitor::Monitor>);
    static MONITOR: std::sync::OnceLock<Kept> = std::sync::OnceLock::new();
    let (_, monitor) = MONITOR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let monitor = Arc::new(lacuna_monitor::Monitor::open(dir.path()).unwrap());
        (dir, monitor)
    });
    monitor.clone()
}

/// The real vVol service on a real engine, one for the whole test binary
/// (the engine's directory lives as long as it).
fn vvol_service() -> Arc<lacuna_vvol::VvolService> {
    struct NoHosts;
    impl lacuna_vvol::HostDirectory for NoHosts {
        fn protocol_endpoint(
            &self,
            host: &str,
        ) -> lacuna_vvol::Result<lacuna_vvol::ProtocolEndpoint> {
            Err(lacuna_vvol::VvolFault::NotFound(format!("host '{host}'")))
        }
        fn protocol_endpoints(&self) -> Vec<lacuna_vvol::HostEndpoint> {
            Vec::new()
        }
    }
    static SERVICE: std::sync::OnceLock<(tempfile::TempDir, Arc<lacuna_vvol::VvolService>)> =
        std::sync::OnceLock::new();
    let (_, service) = SERVICE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let config = lacuna_engine::EngineConfig::new(dir.path(), 1 << 30);
        let engine = lacuna_engine::Engine::open(config).unwrap();
        let service =
            lacuna_vvol::VvolService::open(engine, dir.path(), Arc::new(NoHosts)).unwrap();
        (dir, service)
    });
    service.clone()
}

fn bearer() -> Option<&'static str> {
    Some(concat!(
        "Bearer ",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    ))
}

/// Asserts a JSON error with the given status and returns its message.
fn error_message(response: &Response, status: StatusCode) -> String {
    assert_eq!(response.status, status, "{}", response.body);
    response.body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {}", response.body))
        .to_string()
}

/// Every operation behind the token (all but `GET /healthz`), from the API's one
/// list of routes: method, path template, and the body the OpenAPI document gives
/// as the operation's example (a valid one).
fn operations() -> Vec<(String, String, Option<String>)> {
    let doc = lacuna_api::openapi::document();
    lacuna_api::openapi::operations()
        .into_iter()
        .filter(|(_, path)| path != "/healthz")
        .map(|(method, path)| {
            let operation = &doc["paths"][&path][method.as_str().to_ascii_lowercase()];
            let body = operation
                .pointer("/requestBody/content/application~1json/example")
                .map(Value::to_string);
            (method.to_string(), path, body)
        })
        .collect()
}

fn is_host_route(path: &str) -> bool {
    path.starts_with("/v1/hosts")
}

/// A route of the vVol service (tested against the real one, in `vvols.rs`).
fn is_vvol_route(path: &str) -> bool {
    path.starts_with("/v1/vvol") || path == "/v1/protocol-endpoints"
}

/// A route of the VASA provider's control (tested against the real provider,
/// in the daemon's `vasa.rs`; the fake array has none, so they answer 501).
fn is_vasa_route(path: &str) -> bool {
    path.starts_with("/v1/vasa")
}

/// The history, event and session routes read the monitor, never the engine.
fn is_monitor_route(path: &str) -> bool {
    path == "/v1/array/history" || path.starts_with("/v1/events") || path == "/v1/sessions"
}

/// The gateway route reads the cluster, never the engine.
fn is_gateway_route(path: &str) -> bool {
    path == "/v1/gateways"
}

/// A path template with its parameters filled in.
fn concrete(path: &str) -> String {
    path.replace("{name}", "v")
        .replace("{snapshot}", "v@s")
        .replace("{host}", "h")
        .replace("{container}", "c")
        .replace("{task}", "1")
        .replace("{id}", "1")
}

#[tokio::test]
async fn token_is_required_everywhere_but_healthz() {
    let (app, fake, hosts) = app_with_hosts();
    let mut routes: Vec<(String, String)> = operations()
        .iter()
        .map(|(m, p, _)| (m.clone(), concrete(p)))
        .collect();
    // Unknown paths too: probing without the token learns nothing.
    routes.push(("GET".into(), "/v1/nothing".into()));
    routes.push(("PUT".into(), "/v1/volumes".into()));
    let wrong = format!("Bearer {}", TOKEN.replace('0', "1"));
    for (method, uri) in &routes {
        for authorization in [
            None,
            Some(wrong.as_str()),
            Some("Bearer "),
            Some("Basic dXNlcjpwYXNz"),
            Some(TOKEN), // no scheme
            Some(&TOKEN[..TOKEN.len() - 1]),
        ] {
            let r = send(&app, method, uri, authorization, Some("{}")).await;
            let message = error_message(&r, StatusCode::UNAUTHORIZED);
            assert!(message.contains("token"), "{message}");
            assert!(r.headers.contains_key(header::WWW_AUTHENTICATE));
        }
    }
    assert!(fake.calls().is_empty(), "nothing reached the engine");
    assert!(
        hosts.calls().is_empty(),
        "nothing reached the host registry"
    );
    let r = send(&app, "GET", "/healthz", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, json!({"status": "ok", "reasons": []}));
    // The scheme is case-insensitive.
    let r = send(
        &app,
        "GET",
        "/v1/volumes",
        Some(&format!("bearer {TOKEN}")),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

#[tokio::test]
async fn volume_lifecycle_statuses() {
    let (app, fake) = app();
    let create = r#"{"name":"v1","size_bytes":1048576}"#;
    let r = send(&app, "POST", "/v1/volumes", bearer(), Some(create)).await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.body["name"], "v1");
    assert_eq!(r.body["provisioning"], "thin");
    let r = send(&app, "POST", "/v1/volumes", bearer(), Some(create)).await;
    assert!(error_message(&r, StatusCode::CONFLICT).contains("already exists"));
    let r = send(
        &app,
        "POST",
        "/v1/volumes",
        bearer(),
        Some(r#"{"name":"thick","size_bytes":512,"provisioning":"eagerzeroedthick"}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["provisioning"], "eagerzeroedthick");
    let r = send(&app, "GET", "/v1/volumes", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body.as_array().unwrap().len(), 2);
    let r = send(
        &app,
        "PATCH",
        "/v1/volumes/v1",
        bearer(),
        Some(r#"{"size_bytes":2097152}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["size_bytes"], 2097152);
    let r = send(&app, "DELETE", "/v1/volumes/v1", bearer(), None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(r.body, Value::Null);
    let r = send(&app, "GET", "/v1/volumes?destroyed=true", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body[0]["name"], "v1");
    assert_eq!(r.body.as_array().unwrap().len(), 1);
    let r = send(&app, "POST", "/v1/volumes/v1/recover", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["name"], "v1");
    assert_eq!(r.body["destroyed_unix_s"], Value::Null);
    let r = send(&app, "POST", "/v1/volumes/v1/eradicate", bearer(), None).await;
    assert!(error_message(&r, StatusCode::BAD_REQUEST).contains("not destroyed"));
    send(&app, "DELETE", "/v1/volumes/v1", bearer(), None).await;
    let r = send(&app, "POST", "/v1/volumes/v1/eradicate", bearer(), None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = send(&app, "GET", "/v1/volumes/v1", bearer(), None).await;
    assert!(error_message(&r, StatusCode::NOT_FOUND).contains("does not exist"));
    let r = send(&app, "GET", "/v1/array/space", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, serde_json::to_value(space_report()).unwrap());
    assert!(fake
        .calls()
        .contains(&"create_volume thick 512 eagerzeroedthick".to_string()));
}

/// Each route hands the engine exactly the arguments of the request: path
/// parameters (a snapshot's '@', escaped or not), query strings and body fields.
#[tokio::test]
async fn routes_pass_their_arguments_to_the_engine() {
    let (app, fake) = app();
    /// Method, URI, body, expected status, the engine calls it makes.
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, StatusCode, &'a [&'a str]);
    let cases: &[Case] = &[
        (
            "POST",
            "/v1/volumes",
            Some(r#"{"name":"src","size_bytes":4096,"provisioning":"zeroedthick"}"#),
            StatusCode::CREATED,
            &["create_volume src 4096 zeroedthick"],
        ),
        (
            "POST",
            "/v1/volumes",
            Some(r#"{"name":"dst","size_bytes":8192}"#),
            StatusCode::CREATED,
            &["create_volume dst 8192 thin"],
        ),
        (
            "GET",
            "/v1/volumes?destroyed=false",
            None,
            StatusCode::OK,
            &["list_volumes false"],
        ),
        (
            "GET",
            "/v1/volumes",
            None,
            StatusCode::OK,
            &["list_volumes false"],
        ),
        (
            "POST",
            "/v1/snapshots",
            Some(r#"{"volumes":["src","dst"],"group":"g1"}"#),
            StatusCode::CREATED,
            &[r#"create_snapshots ["src", "dst"] None Some("g1")"#],
        ),
        (
            "POST",
            "/v1/snapshots",
            Some(r#"{"volumes":["src"],"name":"s2"}"#),
            StatusCode::CREATED,
            &[r#"create_snapshots ["src"] Some("s2") None"#],
        ),
        (
            "GET",
            "/v1/snapshots?volume=src&destroyed=true",
            None,
            StatusCode::OK,
            &[r#"list_snapshots Some("src") true"#],
        ),
        (
            "GET",
            "/v1/snapshots",
            None,
            StatusCode::OK,
            &["list_snapshots None false"],
        ),
        (
            "GET",
            "/v1/snapshots/src@g1",
            None,
            StatusCode::OK,
            &["snapshot_info src@g1"],
        ),
        (
            "DELETE",
            "/v1/snapshots/src%40s2",
            None,
            StatusCode::NO_CONTENT,
            &["delete_snapshot src@s2"],
        ),
        (
            "POST",
            "/v1/snapshots/src@s2/recover",
            None,
            StatusCode::OK,
            &["recover_snapshot src@s2", "snapshot_info src@s2"],
        ),
        (
            "POST",
            "/v1/volumes/dst/restore",
            Some(r#"{"snapshot":"g1"}"#),
            StatusCode::OK,
            &["restore_volume dst g1"],
        ),
        (
            "POST",
            "/v1/volumes/src/copy",
            Some(
                r#"{"offset_bytes":512,"length_bytes":1024,"destination":"dst","destination_offset_bytes":4096}"#,
            ),
            StatusCode::OK,
            &["copy_range src 512 1024 dst 4096"],
        ),
        // A clone without a size: the source's.
        (
            "POST",
            "/v1/volumes",
            Some(r#"{"name":"c1","source":"src@g1","provisioning":"thin"}"#),
            StatusCode::CREATED,
            &["clone_volume src@g1 c1 thin"],
        ),
        // With the source's size: looked up, then cloned.
        (
            "POST",
            "/v1/volumes",
            Some(r#"{"name":"c2","source":"src","size_bytes":4096}"#),
            StatusCode::CREATED,
            &["volume_info src", "clone_volume src c2 thin"],
        ),
        // With another size: refused before anything is cloned.
        (
            "POST",
            "/v1/volumes",
            Some(r#"{"name":"c3","source":"src@g1","size_bytes":1024}"#),
            StatusCode::BAD_REQUEST,
            &["snapshot_info src@g1"],
        ),
    ];
    for (method, uri, body, status, calls) in cases {
        let r = send(&app, method, uri, bearer(), *body).await;
        assert_eq!(r.status, *status, "{method} {uri}: {}", r.body);
        assert_eq!(fake.calls(), *calls, "{method} {uri}");
    }
    // The copy answers the engine's report, the group snapshot its timings.
    let r = send(
        &app,
        "POST",
        "/v1/volumes/src/copy",
        bearer(),
        Some(r#"{"offset_bytes":0,"length_bytes":2048,"destination":"dst","destination_offset_bytes":0}"#),
    )
    .await;
    assert_eq!(r.body, json!({"referenced_bytes": 2048, "data_bytes": 0}));
    let r = send(
        &app,
        "POST",
        "/v1/snapshots",
        bearer(),
        Some(r#"{"volumes":["src","dst"],"group":"g2"}"#),
    )
    .await;
    assert_eq!(r.body["commit_window_us"], 7);
    assert_eq!(r.body["prepare_us"], 5);
    assert_eq!(r.body["snapshots"][1]["full_name"], "dst@g2");
    assert_eq!(r.body["snapshots"][1]["group"], "g2");
    let r = send(
        &app,
        "POST",
        "/v1/volumes",
        bearer(),
        Some(r#"{"name":"c4","source":"src","size_bytes":1024}"#),
    )
    .await;
    let message = error_message(&r, StatusCode::BAD_REQUEST);
    assert!(
        message.contains("source's size") && message.contains("4096"),
        "{message}"
    );
}

#[tokio::test]
async fn every_engine_error_maps_to_its_status() {
    let (app, fake) = app();
    let cases: [(fn() -> EngineError, StatusCode); 12] = [
        (
            || EngineError::VolumeNotFound("v".into()),
            StatusCode::NOT_FOUND,
        ),
        (
            || EngineError::ContainerNotFound("c".into()),
            StatusCode::NOT_FOUND,
        ),
        (
            || EngineError::ContainerExists("c".into()),
            StatusCode::CONFLICT,
        ),
        (
            || EngineError::VolumeExists("v".into()),
            StatusCode::CONFLICT,
        ),
        (
            || EngineError::SnapshotNotFound("v@s".into()),
            StatusCode::NOT_FOUND,
        ),
        (
            || EngineError::SnapshotExists("v@s".into()),
            StatusCode::CONFLICT,
        ),
        (
            || EngineError::InvalidArgument("bad size".into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            || EngineError::OutOfRange {
                offset_bytes: 0,
                length_bytes: 1,
                size_bytes: 0,
            },
            StatusCode::BAD_REQUEST,
        ),
        (
            || EngineError::NoSpace("array full".into()),
            StatusCode::INSUFFICIENT_STORAGE,
        ),
        (
            || EngineError::Corruption("bad crc".into()),
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
        (
            || EngineError::io("writing segment 7", std::io::Error::other("disk on fire")),
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
        (
            || EngineError::Metadata("redb".into()),
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
    ];
    let clone = r#"{"name":"c","source":"v@s"}"#;
    for (make, status) in cases {
        *fake.fail_with.lock().unwrap() = Some(make);
        let all = operations();
        let operations = all
            .iter()
            .filter(|(_, path, _)| {
                path != "/v1/openapi.json"
                    && !is_host_route(path)
                    && !is_vvol_route(path)
                    && !is_vasa_route(path)
                    && !is_monitor_route(path)
                    && !is_gateway_route(path)
            })
            .map(|(method, path, body)| (method.as_str(), concrete(path), body.as_deref()))
            .chain([("POST", "/v1/volumes".to_string(), Some(clone))]);
        for (method, uri, body) in operations {
            let r = send(&app, method, &uri, bearer(), body).await;
            let message = error_message(&r, status);
            // The engine's own message reaches the client unchanged.
            assert_eq!(message, make().to_string(), "{method} {uri}");
        }
    }
}

#[tokio::test]
async fn malformed_bodies_get_json_errors() {
    let (app, fake) = app();
    let bad_request = [
        (r#"{"name":"x""#, "EOF"),
        ("", "EOF"),
        ("not json", "expected"),
        ("[]", "expected struct"),
        (r#"{"name":"x","size_bytes":-1}"#, "invalid value"),
        (r#"{"name":"x","size_bytes":"1G"}"#, "invalid type"),
        (r#"{"name":"x","size_bytes":1.5}"#, "invalid type"),
        (r#"{"name":"x","size_bytes":18446744073709551616}"#, ""),
        (
            r#"{"name":"x"}"#,
            "size_bytes is required unless source is given",
        ),
        (r#"{"name":"x","size":1}"#, "unknown field `size`"),
        (
            r#"{"name":"x","size_bytes":512,"provisioning":"thick"}"#,
            "unknown variant `thick`",
        ),
        (
            r#"{"name":"x","size_bytes":512,"provisioning":"Thin"}"#,
            "unknown variant",
        ),
        (r#"{"name":"x","source":7}"#, "invalid type"),
    ];
    for (body, expected) in bad_request {
        let r = send(&app, "POST", "/v1/volumes", bearer(), Some(body)).await;
        let message = error_message(&r, StatusCode::BAD_REQUEST);
        assert!(message.contains(expected), "{body}: {message}");
    }
    for (method, uri, body, expected) in [
        ("PATCH", "/v1/volumes/x", "{}", "size_bytes"),
        (
            "POST",
            "/v1/volumes/x/restore",
            "{}",
            "missing field `snapshot`",
        ),
        (
            "POST",
            "/v1/volumes/x/copy",
            r#"{"offset_bytes":0,"length_bytes":512,"destination":"y"}"#,
            "missing field `destination_offset_bytes`",
        ),
        (
            "POST",
            "/v1/volumes/x/copy",
            r#"{"offset_bytes":0,"length_bytes":512,"destination":"y","destination_offset_bytes":0,"to":1}"#,
            "unknown field `to`",
        ),
        ("POST", "/v1/snapshots", "{}", "missing field `volumes`"),
        (
            "POST",
            "/v1/snapshots",
            r#"{"volumes":"x"}"#,
            "invalid type",
        ),
        (
            "POST",
            "/v1/snapshots",
            r#"{"volumes":["x"],"consistent":true}"#,
            "unknown field `consistent`",
        ),
    ] {
        let r = send(&app, method, uri, bearer(), Some(body)).await;
        let message = error_message(&r, StatusCode::BAD_REQUEST);
        assert!(
            message.contains(expected),
            "{method} {uri} {body}: {message}"
        );
    }
    for uri in [
        "/v1/volumes?destroyed=maybe",
        "/v1/volumes?deleted=true",
        "/v1/snapshots?destroyed=1",
        "/v1/snapshots?vol=x",
    ] {
        let r = send(&app, "GET", uri, bearer(), None).await;
        let message = error_message(&r, StatusCode::BAD_REQUEST);
        assert!(
            message.starts_with("invalid query string"),
            "{uri}: {message}"
        );
    }
    // No Content-Type.
    let request = Request::post("/v1/volumes")
        .header(header::AUTHORIZATION, bearer().unwrap())
        .body(Body::from(r#"{"name":"x","size_bytes":512}"#))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // Over the body limit.
    let big = format!(
        r#"{{"name":"{}","size_bytes":512}}"#,
        "x".repeat(MAX_BODY_BYTES)
    );
    let r = send(&app, "POST", "/v1/volumes", bearer(), Some(&big)).await;
    assert!(error_message(&r, StatusCode::PAYLOAD_TOO_LARGE).contains("too large"));
    // Nothing reached the engine.
    assert!(fake.volumes.lock().unwrap().is_empty());
    assert!(fake.calls().is_empty());
}

#[tokio::test]
async fn unknown_routes_and_methods_get_json_errors() {
    let (app, _) = app();
    let r = send(&app, "GET", "/v1/nothing", bearer(), None).await;
    assert!(error_message(&r, StatusCode::NOT_FOUND).contains("/v1/nothing"));
    let r = send(&app, "GET", "/v1/volumes/a/b", bearer(), None).await;
    error_message(&r, StatusCode::NOT_FOUND);
    let r = send(&app, "PUT", "/v1/volumes/a", bearer(), None).await;
    assert!(error_message(&r, StatusCode::METHOD_NOT_ALLOWED).contains("PUT"));
    assert!(r.headers.contains_key(header::ALLOW));
    let r = send(&app, "GET", "/v1/volumes/a/recover", bearer(), None).await;
    assert!(error_message(&r, StatusCode::METHOD_NOT_ALLOWED).contains("GET"));
    let r = send(&app, "PATCH", "/v1/snapshots/a@b", bearer(), None).await;
    error_message(&r, StatusCode::METHOD_NOT_ALLOWED);
    let r = send(&app, "POST", "/healthz", None, None).await;
    error_message(&r, StatusCode::METHOD_NOT_ALLOWED);
    // A path parameter that is not UTF-8 once decoded.
    let r = send(&app, "GET", "/v1/volumes/%FF", bearer(), None).await;
    error_message(&r, StatusCode::BAD_REQUEST);
    let r = send(&app, "GET", "/v1/snapshots/a@%FF", bearer(), None).await;
    error_message(&r, StatusCode::BAD_REQUEST);
}

/// Hosts end to end through the router: create (secrets reach the registry and
/// never come back), list, show, connect with defaults and options, the main
/// refusals with their statuses, disconnect and delete.
#[tokio::test]
async fn host_lifecycle_statuses() {
    let (app, _, hosts) = app_with_hosts();
    let create = r#"{"name":"esx1","iqns":["iqn.1998-01.com.vmware:esx1"],"chap_user":"esx1","chap_secret":"0123456789abcdef","mutual_chap_user":"array","mutual_chap_secret":"fedcba9876543210"}"#;
    let r = send(&app, "POST", "/v1/hosts", bearer(), Some(create)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(
        r.body,
        json!({
            "name": "esx1",
            "iqns": ["iqn.1998-01.com.vmware:esx1"],
            "chap_user": "esx1",
            "mutual_chap_user": "array",
            "nbd_psk": false,
            "luns": [],
            "protocol_endpoint_lun": null
        })
    );
    assert_eq!(
        hosts.secrets.lock().unwrap()["esx1"],
        ["0123456789abcdef", "fedcba9876543210"]
    );
    let calls = hosts.calls().join("\n");
    assert!(!calls.contains("0123456789abcdef"), "{calls}");
    // The NBD key: set (it reaches the registry, never an answer), then removed.
    let key = r#"{"key":"00112233445566778899aabbccddeeff"}"#;
    let r = send(&app, "PUT", "/v1/hosts/esx1/nbd-psk", bearer(), Some(key)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["nbd_psk"], true);
    assert!(!r.body.to_string().contains("aabbccdd"), "{}", r.body);
    assert_eq!(
        hosts.secrets.lock().unwrap()["esx1"][2],
        "00112233445566778899aabbccddeeff"
    );
    let r = send(&app, "DELETE", "/v1/hosts/esx1/nbd-psk", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["nbd_psk"], false);
    let r = send(&app, "PUT", "/v1/hosts/nobody/nbd-psk", bearer(), Some(key)).await;
    error_message(&r, StatusCode::NOT_FOUND);
    assert_eq!(
        hosts.calls(),
        [
            "set_nbd_psk esx1 true",
            "set_nbd_psk esx1 false",
            "set_nbd_psk nobody true"
        ]
    );
    let r = send(&app, "POST", "/v1/hosts", bearer(), Some(create)).await;
    assert_eq!(
        error_message(&r, StatusCode::CONFLICT),
        "host 'esx1' already exists"
    );
    for (body, expected) in [
        (
            r#"{"name":"h2","iqns":["not-an-iqn"]}"#,
            "not an iSCSI name",
        ),
        (
            r#"{"name":"h2","iqns":["iqn.2024-01.org:h2"],"chap_user":"u","chap_secret":"short"}"#,
            "12 to 255",
        ),
    ] {
        let r = send(&app, "POST", "/v1/hosts", bearer(), Some(body)).await;
        let message = error_message(&r, StatusCode::BAD_REQUEST);
        assert!(message.contains(expected), "{body}: {message}");
        assert!(!message.contains("short"), "{message}");
    }
    // A user without its secret (or the reverse) never reaches the registry.
    for (body, expected) in [
        (
            r#"{"name":"h2","iqns":["iqn.2024-01.org:h2"],"chap_user":"u"}"#,
            "chap_user needs chap_secret",
        ),
        (
            r#"{"name":"h2","iqns":["iqn.2024-01.org:h2"],"mutual_chap_secret":"0123456789abcdef"}"#,
            "mutual_chap_secret needs mutual_chap_user",
        ),
    ] {
        hosts.calls();
        let r = send(&app, "POST", "/v1/hosts", bearer(), Some(body)).await;
        assert_eq!(error_message(&r, StatusCode::BAD_REQUEST), expected);
        assert!(hosts.calls().is_empty());
    }
    let r = send(&app, "GET", "/v1/hosts", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body.as_array().unwrap().len(), 1);
    assert!(!r.body.to_string().contains("secret"), "{}", r.body);

    // Connect: defaults, then every option.
    hosts.calls();
    let r = send(
        &app,
        "POST",
        "/v1/hosts/esx1/connect",
        bearer(),
        Some(r#"{"volume":"vm1"}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"lun": 0, "volume": "vm1", "block_size_bytes": 512, "removable": false, "read_only": false})
    );
    assert_eq!(hosts.calls(), ["connect esx1 vm1 None 512 false"]);
    let r = send(
        &app,
        "POST",
        "/v1/hosts/esx1/connect",
        bearer(),
        Some(r#"{"volume":"vm1@s1","lun":7,"block_size_bytes":4096,"removable":true}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        r.body,
        json!({"lun": 7, "volume": "vm1@s1", "block_size_bytes": 4096, "removable": true, "read_only": true})
    );
    assert_eq!(hosts.calls(), ["connect esx1 vm1@s1 Some(7) 4096 true"]);
    for (uri, body, status, expected) in [
        (
            "/v1/hosts/esx1/connect",
            r#"{"volume":"vm1"}"#,
            StatusCode::BAD_REQUEST,
            "volume 'vm1' is already connected",
        ),
        (
            "/v1/hosts/esx1/connect",
            r#"{"volume":"vm2","lun":7}"#,
            StatusCode::BAD_REQUEST,
            "LUN 7 is taken",
        ),
        (
            "/v1/hosts/esx1/connect",
            r#"{"volume":"missing"}"#,
            StatusCode::NOT_FOUND,
            "volume 'missing' does not exist",
        ),
        (
            "/v1/hosts/nobody/connect",
            r#"{"volume":"vm2"}"#,
            StatusCode::NOT_FOUND,
            "host 'nobody' does not exist",
        ),
        (
            "/v1/hosts/esx1/disconnect",
            r#"{"volume":"vm2"}"#,
            StatusCode::BAD_REQUEST,
            "volume 'vm2' is not connected",
        ),
        (
            "/v1/hosts/nobody/disconnect",
            r#"{"volume":"vm1"}"#,
            StatusCode::NOT_FOUND,
            "host 'nobody' does not exist",
        ),
    ] {
        let r = send(&app, "POST", uri, bearer(), Some(body)).await;
        assert_eq!(error_message(&r, status), expected, "{uri} {body}");
    }
    // A block size the API refuses itself.
    hosts.calls();
    let r = send(
        &app,
        "POST",
        "/v1/hosts/esx1/connect",
        bearer(),
        Some(r#"{"volume":"vm2","block_size_bytes":1024}"#),
    )
    .await;
    assert!(error_message(&r, StatusCode::BAD_REQUEST).contains("512 or 4096"));
    assert!(hosts.calls().is_empty());

    let r = send(&app, "GET", "/v1/hosts/esx1", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    let luns: Vec<u64> = r.body["luns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["lun"].as_u64().unwrap())
        .collect();
    assert_eq!(luns, [0, 7]);
    hosts.calls();
    let r = send(
        &app,
        "POST",
        "/v1/hosts/esx1/disconnect",
        bearer(),
        Some(r#"{"volume":"vm1@s1"}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.body);
    assert_eq!(r.body, Value::Null);
    assert_eq!(hosts.calls(), ["disconnect esx1 vm1@s1"]);
    let r = send(&app, "DELETE", "/v1/hosts/esx1", bearer(), None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = send(&app, "DELETE", "/v1/hosts/esx1", bearer(), None).await;
    error_message(&r, StatusCode::NOT_FOUND);
    let r = send(&app, "GET", "/v1/hosts/esx1", bearer(), None).await;
    assert_eq!(
        error_message(&r, StatusCode::NOT_FOUND),
        "host 'esx1' does not exist"
    );
    let r = send(&app, "GET", "/v1/hosts", bearer(), None).await;
    assert_eq!(r.body, json!([]));
}

#[tokio::test]
async fn every_host_error_maps_to_its_status() {
    let (app, _, hosts) = app_with_hosts();
    let cases: [(fn() -> HostControlError, StatusCode); 7] = [
        (
            || HostControlError::HostNotFound("h".into()),
            StatusCode::NOT_FOUND,
        ),
        (
            || HostControlError::HostExists("h".into()),
            StatusCode::CONFLICT,
        ),
        (
            || HostControlError::Invalid("LUN 7 is taken".into()),
            StatusCode::BAD_REQUEST,
        ),
        (
            || EngineError::VolumeNotFound("v".into()).into(),
            StatusCode::NOT_FOUND,
        ),
        (
            || EngineError::SnapshotNotFound("v@s".into()).into(),
            StatusCode::NOT_FOUND,
        ),
        (
            || EngineError::Metadata("redb".into()).into(),
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
        (
            || HostControlError::Internal("writing hosts.json: disk on fire".into()),
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
    ];
    for (make, status) in cases {
        *hosts.fail_with.lock().unwrap() = Some(make);
        for (method, path, body) in operations().iter().filter(|(_, p, _)| is_host_route(p)) {
            let uri = concrete(path);
            let r = send(&app, method, &uri, bearer(), body.as_deref()).await;
            assert_eq!(
                error_message(&r, status),
                make().to_string(),
                "{method} {uri}"
            );
        }
    }
}

/// A state built without host management keeps the host routes (behind the
/// token) and answers 501 on each.
#[tokio::test]
async fn without_host_management_host_routes_answer_501() {
    let app = router(ApiState::new(Arc::new(FakeArray::default()), TOKEN));
    for (method, path, body) in operations().iter().filter(|(_, p, _)| is_host_route(p)) {
        let uri = concrete(path);
        let r = send(&app, method, &uri, None, body.as_deref()).await;
        error_message(&r, StatusCode::UNAUTHORIZED);
        let r = send(&app, method, &uri, bearer(), body.as_deref()).await;
        assert_eq!(
            error_message(&r, StatusCode::NOT_IMPLEMENTED),
            "host management is not available on this server",
            "{method} {uri}"
        );
    }
    let doc = lacuna_api::openapi::document();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if is_host_route(path) {
            for (method, operation) in item.as_object().unwrap() {
                if method != "parameters" {
                    assert!(
                        operation["responses"].get("501").is_some(),
                        "{method} {path}"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn without_a_vasa_provider_vasa_routes_answer_501() {
    let (app, _) = app();
    let routes: Vec<_> = operations()
        .into_iter()
        .filter(|(_, p, _)| is_vasa_route(p))
        .collect();
    assert_eq!(routes.len(), 3, "status, restart, certificate rotation");
    for (method, path, body) in routes {
        let uri = concrete(&path);
        let r = send(&app, &method, &uri, None, body.as_deref()).await;
        error_message(&r, StatusCode::UNAUTHORIZED);
        let r = send(&app, &method, &uri, bearer(), body.as_deref()).await;
        assert_eq!(
            error_message(&r, StatusCode::NOT_IMPLEMENTED),
            "the VASA provider is not running on this server",
            "{method} {uri}"
        );
    }
}

#[tokio::test]
async fn malformed_host_bodies_get_json_errors() {
    let (app, _, hosts) = app_with_hosts();
    for (uri, body, expected) in [
        ("/v1/hosts", r#"{"iqns":[]}"#, "missing field `name`"),
        (
            "/v1/hosts",
            r#"{"name":"h","nbd_psk_key":5}"#,
            "invalid type",
        ),
        (
            "/v1/hosts",
            r#"{"name":"h","iqns":"iqn.x:y"}"#,
            "invalid type",
        ),
        (
            "/v1/hosts",
            r#"{"name":"h","iqns":["iqn.x:y"],"chap_password":"x"}"#,
            "unknown field `chap_password`",
        ),
        ("/v1/hosts/h/connect", "{}", "missing field `volume`"),
        (
            "/v1/hosts/h/connect",
            r#"{"volume":"v","lun":-1}"#,
            "invalid value",
        ),
        (
            "/v1/hosts/h/connect",
            r#"{"volume":"v","block_size_bytes":"4K"}"#,
            "invalid type",
        ),
        (
            "/v1/hosts/h/connect",
            r#"{"volume":"v","readonly":true}"#,
            "unknown field `readonly`",
        ),
        (
            "/v1/hosts/h/disconnect",
            r#"{"lun":0}"#,
            "unknown field `lun`",
        ),
    ] {
        let r = send(&app, "POST", uri, bearer(), Some(body)).await;
        let message = error_message(&r, StatusCode::BAD_REQUEST);
        assert!(message.contains(expected), "{uri} {body}: {message}");
    }
    for (body, expected) in [
        ("{}", "missing field `key`"),
        (r#"{"key":"00","psk":1}"#, "unknown field `psk`"),
    ] {
        let r = send(&app, "PUT", "/v1/hosts/h/nbd-psk", bearer(), Some(body)).await;
        let message = error_message(&r, StatusCode::BAD_REQUEST);
        assert!(message.contains(expected), "{body}: {message}");
    }
    let r = send(&app, "GET", "/v1/hosts/%FF", bearer(), None).await;
    error_message(&r, StatusCode::BAD_REQUEST);
    let r = send(&app, "PUT", "/v1/hosts/h", bearer(), None).await;
    error_message(&r, StatusCode::METHOD_NOT_ALLOWED);
    assert!(hosts.calls().is_empty());
}

/// The OpenAPI document is served, every operation it lists is routed, every
/// route is listed, schemas name exactly the fields the API sends, and every
/// `$ref` resolves.
#[tokio::test]
async fn openapi_document_matches_router_and_types() {
    let (app, fake) = app();
    let r = send(&app, "GET", "/v1/openapi.json", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    let doc = r.body;
    assert_eq!(doc, lacuna_api::openapi::document());
    assert_eq!(doc["openapi"], "3.0.3");
    // Something for the operations to find.
    fake.create_volume("v", 512, Provisioning::Thin, None)
        .unwrap();
    fake.create_snapshots(&["v"], Some("s"), None).unwrap();

    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if method == "parameters" {
                continue;
            }
            documented.push((path.clone(), method.clone()));
            assert!(operation["responses"].is_object(), "{method} {path}");
            let secured = operation.get("security") != Some(&json!([]));
            assert_eq!(
                secured,
                operation["responses"].get("401").is_some(),
                "{method} {path}: 401 documented exactly when a token is needed"
            );
            // The operation exists: with a token and a valid body it is neither
            // an unknown route nor a wrong method.
            let body = operation
                .pointer("/requestBody/content/application~1json/example")
                .map(Value::to_string);
            let uri = concrete(path);
            let r = send(
                &app,
                &method.to_uppercase(),
                &uri,
                bearer(),
                body.as_deref(),
            )
            .await;
            // Operations run in document order against one fake, so some find
            // the state another left (a snapshot already there, a volume
            // destroyed): any documented answer but a routing failure will do.
            // The fake array runs no VASA provider: its routes answer 501.
            let vasa_absent = is_vasa_route(path) && r.status == StatusCode::NOT_IMPLEMENTED;
            assert!(
                r.status.is_success()
                    || vasa_absent
                    || (r.status.is_client_error() && r.status != StatusCode::METHOD_NOT_ALLOWED),
                "{method} {path}: {} {}",
                r.status,
                r.body
            );
            assert!(
                !r.body["error"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("no such endpoint"),
                "{method} {path} is documented but not routed"
            );
            let status = r.status.as_u16().to_string();
            assert!(
                operation["responses"].get(&status).is_some(),
                "{method} {path} answered {status}, which is not documented"
            );
            // A path parameter is declared for every {placeholder}.
            for placeholder in ["name", "snapshot", "host", "container"] {
                if path.contains(&format!("{{{placeholder}}}")) {
                    let declared = item["parameters"]
                        .as_array()
                        .is_some_and(|ps| ps.iter().any(|p| p["name"] == placeholder));
                    assert!(declared, "{path}: parameter {placeholder} not declared");
                }
            }
        }
    }
    // The document served lists the routes the router was built from.
    let mut expected: Vec<(String, String)> = lacuna_api::openapi::operations()
        .into_iter()
        .map(|(m, p)| (p, m.as_str().to_ascii_lowercase()))
        .collect();
    expected.sort();
    documented.sort();
    assert_eq!(documented, expected);

    let schemas = &doc["components"]["schemas"];
    // `full` is an example with every field; `required` the fields always sent.
    let check = |schema: &str, full: Value, required: &[&str]| {
        let mut sent: Vec<String> = full.as_object().unwrap().keys().cloned().collect();
        let mut listed: Vec<String> = schemas[schema]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("schema {schema}"))
            .keys()
            .cloned()
            .collect();
        // An object without required fields has no `required` list at all.
        let mut listed_required: Vec<String> = schemas[schema]["required"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        let mut required: Vec<String> = required.iter().map(|r| r.to_string()).collect();
        sent.sort();
        listed.sort();
        listed_required.sort();
        required.sort();
        assert_eq!(listed, sent, "schema {schema}");
        assert_eq!(listed_required, required, "schema {schema}");
    };
    let all_of =
        |example: &Value| -> Vec<String> { example.as_object().unwrap().keys().cloned().collect() };
    for (schema, example) in [
        ("VolumeInfo", serde_json::to_value(info("v", 512)).unwrap()),
        ("SpaceReport", serde_json::to_value(space_report()).unwrap()),
        (
            "ScrubReport",
            serde_json::to_value(scrub_report(Some(5))).unwrap(),
        ),
        (
            "ScrubStart",
            serde_json::to_value(ScrubStart {
                report: scrub_report(None),
                started: true,
            })
            .unwrap(),
        ),
        (
            "ScrubStatus",
            serde_json::to_value(ScrubStatus {
                current: None,
                last: None,
                background_rate_bytes_per_s: Some(1),
            })
            .unwrap(),
        ),
        (
            "BadRecord",
            serde_json::to_value(&scrub_report(None).bad[0]).unwrap(),
        ),
        (
            "AffectedRange",
            serde_json::to_value(&scrub_report(None).affected[0]).unwrap(),
        ),
        (
            "SnapshotInfo",
            serde_json::to_value(snapshot("v", "s", Some("g"))).unwrap(),
        ),
        (
            "GroupSnapshot",
            serde_json::to_value(GroupSnapshot {
                snapshots: vec![],
                prepare_us: 1,
                commit_window_us: 2,
            })
            .unwrap(),
        ),
        (
            "CopyReport",
            serde_json::to_value(CopyReport {
                referenced_bytes: 1,
                data_bytes: 2,
            })
            .unwrap(),
        ),
        (
            "ResizeVolumeRequest",
            serde_json::to_value(lacuna_api::ResizeVolumeRequest { size_bytes: 512 }).unwrap(),
        ),
        (
            "RestoreVolumeRequest",
            serde_json::to_value(lacuna_api::RestoreVolumeRequest {
                snapshot: "s".into(),
            })
            .unwrap(),
        ),
        (
            "CopyRangeRequest",
            serde_json::to_value(lacuna_api::CopyRangeRequest {
                offset_bytes: 0,
                length_bytes: 512,
                destination: "d".into(),
                destination_offset_bytes: 0,
            })
            .unwrap(),
        ),
        (
            "Error",
            serde_json::to_value(lacuna_api::ErrorBody { error: "x".into() }).unwrap(),
        ),
    ] {
        let required = all_of(&example);
        let required: Vec<&str> = required.iter().map(String::as_str).collect();
        check(schema, example.clone(), &required);
    }
    check(
        "CreateVolumeRequest",
        serde_json::to_value(lacuna_api::CreateVolumeRequest {
            name: "v".into(),
            size_bytes: Some(512),
            provisioning: Some(Provisioning::ZeroedThick),
            source: Some("a@b".into()),
            container: Some("c".into()),
        })
        .unwrap(),
        &["name"],
    );
    let policy = ContainerPolicy {
        quota_bytes: Some(1 << 30),
        reclaim: ReclaimPolicy::Low,
        ..ContainerPolicy::default()
    };
    let full = serde_json::to_value(container("c", policy)).unwrap();
    let every_field = all_of(&full);
    let every_field: Vec<&str> = every_field.iter().map(String::as_str).collect();
    check("ContainerInfo", full.clone(), &every_field);
    let policy_fields = all_of(&full["policy"]);
    let policy_fields: Vec<&str> = policy_fields.iter().map(String::as_str).collect();
    check("ContainerPolicy", full["policy"].clone(), &policy_fields);
    let reclaim_fields = all_of(&full["reclaim"]);
    let reclaim_fields: Vec<&str> = reclaim_fields.iter().map(String::as_str).collect();
    check("ContainerReclaim", full["reclaim"].clone(), &reclaim_fields);
    check(
        "CreateContainerRequest",
        serde_json::to_value(lacuna_api::CreateContainerRequest {
            name: "c".into(),
            quota_bytes: Some(1 << 30),
            reclaim: Some(ReclaimPolicy::Low),
            reclaim_burst_bytes: Some(0),
            compression: Some(Compression::Zstd),
            dedup: Some(false),
        })
        .unwrap(),
        &["name"],
    );
    check(
        "UpdateContainerRequest",
        serde_json::to_value(lacuna_api::UpdateContainerRequest {
            quota_bytes: Some(None),
            reclaim: Some(ReclaimPolicy::Off),
            reclaim_burst_bytes: Some(0),
            compression: Some(Compression::Off),
            dedup: Some(true),
        })
        .unwrap(),
        &[],
    );
    assert_eq!(
        schemas["ContainerPolicy"]["properties"]["compression"]["enum"],
        json!(["lz4", "zstd", "off"])
    );
    check(
        "CreateSnapshotsRequest",
        serde_json::to_value(lacuna_api::CreateSnapshotsRequest {
            volumes: vec!["v".into()],
            name: Some("s".into()),
            group: Some("g".into()),
        })
        .unwrap(),
        &["volumes"],
    );
    let lun = LunInfo::new(3, "v@s", 4096, true);
    check(
        "LunInfo",
        serde_json::to_value(&lun).unwrap(),
        &[
            "lun",
            "volume",
            "block_size_bytes",
            "removable",
            "read_only",
        ],
    );
    check(
        "HostInfo",
        serde_json::to_value(HostInfo {
            name: "h".into(),
            iqns: vec!["iqn.2024-01.org.example:h".into()],
            chap_user: Some("u".into()),
            mutual_chap_user: None,
            nbd_psk: true,
            luns: vec![lun],
            protocol_endpoint_lun: None,
        })
        .unwrap(),
        &[
            "name",
            "iqns",
            "chap_user",
            "mutual_chap_user",
            "nbd_psk",
            "luns",
            "protocol_endpoint_lun",
        ],
    );
    check(
        "CreateHostRequest",
        serde_json::to_value(lacuna_api::CreateHostRequest {
            name: "h".into(),
            iqns: vec!["iqn.2024-01.org.example:h".into()],
            chap_user: Some("u".into()),
            chap_secret: Some("s".repeat(12)),
            mutual_chap_user: Some("t".into()),
            mutual_chap_secret: Some("m".repeat(12)),
            nbd_psk_key: Some("00".repeat(16)),
        })
        .unwrap(),
        &["name"],
    );
    check(
        "SetNbdPskRequest",
        serde_json::to_value(lacuna_api::SetNbdPskRequest {
            key: "00".repeat(16),
        })
        .unwrap(),
        &["key"],
    );
    check(
        "ConnectVolumeRequest",
        serde_json::to_value(lacuna_api::ConnectVolumeRequest {
            volume: "v".into(),
            lun: Some(1),
            block_size_bytes: Some(4096),
            removable: Some(true),
        })
        .unwrap(),
        &["volume"],
    );
    check(
        "DisconnectVolumeRequest",
        serde_json::to_value(lacuna_api::DisconnectVolumeRequest { volume: "v".into() }).unwrap(),
        &["volume"],
    );
    // Secrets are write-only: no answer schema mentions one.
    for schema in ["HostInfo", "LunInfo"] {
        let text = schemas[schema].to_string();
        assert!(!text.contains("secret"), "{schema}: {text}");
    }
    // Fields that may be null are marked so.
    for (schema, field) in [
        ("HostInfo", "chap_user"),
        ("HostInfo", "mutual_chap_user"),
        ("VolumeInfo", "destroyed_unix_s"),
        ("VolumeInfo", "eradicate_at_unix_s"),
        ("SnapshotInfo", "group"),
        ("SnapshotInfo", "destroyed_unix_s"),
        ("SnapshotInfo", "eradicate_at_unix_s"),
        ("ContainerPolicy", "quota_bytes"),
        ("ContainerReclaim", "rate_bytes_per_s"),
        ("ContainerReclaim", "eta_s"),
        ("UpdateContainerRequest", "quota_bytes"),
    ] {
        assert_eq!(
            schemas[schema]["properties"][field]["nullable"], true,
            "{schema}.{field}"
        );
    }
    assert_eq!(
        schemas["VolumeInfo"]["properties"]["provisioning"]["enum"],
        json!(["thin", "zeroedthick", "eagerzeroedthick"])
    );

    fn refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.push(r.clone());
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let pointer = r.strip_prefix('#').expect("local reference");
        assert!(doc.pointer(pointer).is_some(), "dangling $ref {r}");
    }
}

/// The engine's typed ids serialise as their integers, and so are their
/// schemas (for fields that inline them rather than name a component).
#[test]
fn engine_ids_have_integer_schemas() {
    use lacuna_engine::ids::{BlockId, SegmentId, VolumeId};
    use utoipa::PartialSchema;
    for (schema, value, format) in [
        (VolumeId::schema(), json!(VolumeId::new(7)), "int64"),
        (BlockId::schema(), json!(BlockId::new(7)), "int64"),
        (SegmentId::schema(), json!(SegmentId::new(7)), "int32"),
    ] {
        let schema = serde_json::to_value(schema).unwrap();
        assert_eq!(value, json!(7));
        assert_eq!(schema["type"], "integer", "{schema}");
        assert_eq!(schema["format"], format, "{schema}");
        assert_eq!(schema["minimum"], 0, "{schema}");
    }
}

/// The real listener: `serve` answers plain HTTP/1.1 on a TCP socket.
#[tokio::test]
async fn serve_answers_on_a_socket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = ApiState::new(Arc::new(FakeArray::default()), TOKEN);
    let server = tokio::spawn(lacuna_api::serve(listener, state));
    for (request, expected) in [
        (
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_string(),
            "HTTP/1.1 200",
        ),
        (
            "GET /v1/volumes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_string(),
            "HTTP/1.1 401",
        ),
        (
            format!("GET /v1/volumes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"),
            "HTTP/1.1 200",
        ),
    ] {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with(expected), "{response}");
        assert!(
            response.to_ascii_lowercase().contains("content-type: application/json"),
            "{response}"
        );
    }
    server.abort();
}

/// `/metrics` answers the space report in Prometheus text format, each sample
/// with its HELP and TYPE lines, and needs the token like everything else.
#[tokio::test]
async fn metrics_are_prometheus_text_behind_the_token() {
    let (app, _fake) = app();
    let r = send(&app, "GET", "/metrics", None, None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = send(&app, "GET", "/metrics", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers[header::CONTENT_TYPE], "text/plain; version=0.0.4");
    let text = r.body.as_str().unwrap();
    let space = space_report();
    let sample = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
            .parse()
            .unwrap()
    };
    assert_eq!(sample("lacuna_capacity_bytes"), space.capacity_bytes as f64);
    assert_eq!(sample("lacuna_free_bytes"), space.free_bytes as f64);
    assert_eq!(
        sample("lacuna_unmap_commands_total"),
        space.unmap_commands as f64
    );
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split([' ', '{']).next().unwrap();
        assert!(text.contains(&format!("# HELP {name} ")), "{name}");
        assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
        let kind_counter = text.contains(&format!("# TYPE {name} counter"));
        assert_eq!(kind_counter, name.ends_with("_total"), "{name}");
    }
}

/// Containers end to end through the router: create with every option and
/// with none, list, show, change (a quota removed with null), reclaim now,
/// delete; volumes and clones join a container; each refusal has its status.
#[tokio::test]
async fn container_routes_pass_their_arguments_and_statuses() {
    let (app, fake) = app();
    let r = send(
        &app,
        "POST",
        "/v1/containers",
        bearer(),
        Some(
            r#"{"name":"cold","quota_bytes":1048576,"reclaim":"off","reclaim_burst_bytes":0,"compression":"zstd","dedup":false}"#,
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(
        r.body["policy"],
        json!({"quota_bytes": 1048576, "reclaim": "off", "reclaim_burst_bytes": 0, "compression": "zstd", "dedup": false})
    );
    let expected = ContainerPolicy {
        quota_bytes: Some(1 << 20),
        reclaim: ReclaimPolicy::Off,
        reclaim_burst_bytes: 0,
        compression: Compression::Zstd,
        dedup: false,
    };
    assert_eq!(
        fake.calls(),
        [format!("create_container cold {expected:?}")]
    );
    // Defaults for whatever is left out.
    let r = send(
        &app,
        "POST",
        "/v1/containers",
        bearer(),
        Some(r#"{"name":"warm","reclaim":"200MB/s"}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(r.body["reclaim"]["rate_bytes_per_s"], 200_000_000);
    let expected = ContainerPolicy {
        reclaim: ReclaimPolicy::Fixed {
            bytes_per_s: 200_000_000,
        },
        ..ContainerPolicy::default()
    };
    assert_eq!(
        fake.calls(),
        [format!("create_container warm {expected:?}")]
    );
    let r = send(
        &app,
        "POST",
        "/v1/containers",
        bearer(),
        Some(r#"{"name":"warm"}"#),
    )
    .await;
    assert_eq!(
        error_message(&r, StatusCode::CONFLICT),
        "container 'warm' already exists"
    );
    let r = send(&app, "GET", "/v1/containers", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    let names: Vec<&str> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "cold", "warm"]);
    let r = send(&app, "GET", "/v1/containers/cold", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["reclaim"]["backlog_bytes"], 7 << 20);
    assert_eq!(r.body["reclaim"]["eta_s"], Value::Null, "off: never");
    let r = send(&app, "GET", "/v1/containers/nope", bearer(), None).await;
    assert_eq!(
        error_message(&r, StatusCode::NOT_FOUND),
        "container 'nope' does not exist"
    );

    fake.calls();
    let r = send(
        &app,
        "PATCH",
        "/v1/containers/cold",
        bearer(),
        Some(r#"{"quota_bytes":null,"reclaim":"low","dedup":true}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["policy"]["quota_bytes"], Value::Null);
    assert_eq!(r.body["policy"]["reclaim"], "low");
    assert_eq!(r.body["policy"]["compression"], "zstd", "kept");
    let update = ContainerUpdate {
        quota_bytes: Some(None),
        reclaim: Some(ReclaimPolicy::Low),
        dedup: Some(true),
        ..ContainerUpdate::default()
    };
    assert_eq!(fake.calls(), [format!("set_container cold {update:?}")]);
    let r = send(
        &app,
        "PATCH",
        "/v1/containers/cold",
        bearer(),
        Some(r#"{"quota_bytes":2097152}"#),
    )
    .await;
    assert_eq!(r.body["policy"]["quota_bytes"], 2097152);
    assert_eq!(r.body["policy"]["reclaim"], "low", "kept");
    let r = send(&app, "PATCH", "/v1/containers/cold", bearer(), Some("{}")).await;
    assert!(error_message(&r, StatusCode::BAD_REQUEST).contains("nothing to change"));
    fake.calls();
    let r = send(&app, "POST", "/v1/containers/cold/reclaim", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["reclaim"]["draining"], true);
    assert_eq!(fake.calls(), ["reclaim_container_now cold"]);

    // Volumes and clones join a container; an unknown one is a 404.
    for (body, status, call) in [
        (
            r#"{"name":"v1","size_bytes":4096,"container":"cold"}"#,
            StatusCode::CREATED,
            "create_volume v1 4096 thin in cold",
        ),
        (
            r#"{"name":"v2","size_bytes":4096}"#,
            StatusCode::CREATED,
            "create_volume v2 4096 thin",
        ),
        (
            r#"{"name":"v3","size_bytes":4096,"container":"nope"}"#,
            StatusCode::NOT_FOUND,
            "create_volume v3 4096 thin in nope",
        ),
        (
            r#"{"name":"c1","source":"v1","container":"warm"}"#,
            StatusCode::CREATED,
            "clone_volume v1 c1 thin in warm",
        ),
        (
            r#"{"name":"c2","source":"v1"}"#,
            StatusCode::CREATED,
            "clone_volume v1 c2 thin",
        ),
    ] {
        let r = send(&app, "POST", "/v1/volumes", bearer(), Some(body)).await;
        assert_eq!(r.status, status, "{body}: {}", r.body);
        assert_eq!(fake.calls(), [call], "{body}");
    }
    let r = send(&app, "GET", "/v1/volumes/v1", bearer(), None).await;
    assert_eq!(r.body["container"], "cold");
    let r = send(&app, "GET", "/v1/volumes/c1", bearer(), None).await;
    assert_eq!(r.body["container"], "warm");

    let r = send(&app, "DELETE", "/v1/containers/default", bearer(), None).await;
    assert!(error_message(&r, StatusCode::BAD_REQUEST).contains("cannot be deleted"));
    let r = send(&app, "DELETE", "/v1/containers/warm", bearer(), None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(r.body, Value::Null);
    let r = send(&app, "DELETE", "/v1/containers/warm", bearer(), None).await;
    error_message(&r, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn malformed_container_bodies_get_json_errors() {
    let (app, fake) = app();
    for (method, uri, body, expected) in [
        ("POST", "/v1/containers", "{}", "missing field `name`"),
        (
            "POST",
            "/v1/containers",
            r#"{"name":"c","reclaim":"fast"}"#,
            "invalid reclaim policy 'fast'",
        ),
        (
            "POST",
            "/v1/containers",
            r#"{"name":"c","reclaim":"0MB/s"}"#,
            "a rate of zero is 'off'",
        ),
        (
            "POST",
            "/v1/containers",
            r#"{"name":"c","compression":"gzip"}"#,
            "unknown variant `gzip`",
        ),
        (
            "POST",
            "/v1/containers",
            r#"{"name":"c","dedup":"on"}"#,
            "invalid type",
        ),
        (
            "POST",
            "/v1/containers",
            r#"{"name":"c","quota":1}"#,
            "unknown field `quota`",
        ),
        (
            "POST",
            "/v1/containers",
            r#"{"name":"c","quota_bytes":-1}"#,
            "invalid value",
        ),
        (
            "PATCH",
            "/v1/containers/c",
            r#"{"name":"d"}"#,
            "unknown field `name`",
        ),
        (
            "PATCH",
            "/v1/containers/c",
            r#"{"quota_bytes":"none"}"#,
            "invalid type",
        ),
        (
            "POST",
            "/v1/volumes",
            r#"{"name":"v","size_bytes":512,"container":7}"#,
            "invalid type",
        ),
    ] {
        let r = send(&app, method, uri, bearer(), Some(body)).await;
        let message = error_message(&r, StatusCode::BAD_REQUEST);
        assert!(
            message.contains(expected),
            "{method} {uri} {body}: {message}"
        );
    }
    assert!(fake.calls().is_empty(), "nothing reached the engine");
}

/// The sample of `name` with exactly these labels.
fn labelled_sample(text: &str, name: &str, labels: &str) -> Option<String> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string)
}

/// `/metrics` carries one labelled series per container and per volume, with
/// the figures the JSON API answers; unknown ETAs and absent quotas have no
/// sample; `off` limits to 0 and `unlimited` to +Inf.
#[tokio::test]
async fn metrics_have_labelled_container_and_volume_series() {
    let (app, fake) = app();
    let off = ContainerPolicy {
        quota_bytes: Some(1 << 30),
        reclaim: ReclaimPolicy::Off,
        ..ContainerPolicy::default()
    };
    fake.create_container("cold", off).unwrap();
    let low = ContainerPolicy {
        reclaim: ReclaimPolicy::Low,
        ..ContainerPolicy::default()
    };
    fake.create_container("warm", low).unwrap();
    fake.create_volume("v1", 4096, Provisioning::Thin, Some("cold"))
        .unwrap();
    fake.volumes.lock().unwrap().get_mut("v1").unwrap().reclaim = ReclaimStats {
        unmap_commands: 3,
        unmapped_bytes: 12288,
        reclaimed_bytes: 4096,
        backlog_bytes: 8192,
    };
    let r = send(&app, "GET", "/metrics", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    let text = r.body.as_str().unwrap();
    let sample = |name: &str, labels: &str| {
        labelled_sample(text, name, labels)
            .unwrap_or_else(|| panic!("{name}{{{labels}}} missing:\n{text}"))
    };
    let cold = r#"container="cold""#;
    let warm = r#"container="warm""#;
    let default = r#"container="default""#;
    let info = fake.container_info("cold").unwrap();
    for (name, value) in [
        (
            "lacuna_container_unmap_commands_total",
            info.reclaim.stats.unmap_commands.to_string(),
        ),
        (
            "lacuna_container_unmapped_bytes_total",
            info.reclaim.stats.unmapped_bytes.to_string(),
        ),
        (
            "lacuna_container_reclaimed_bytes_total",
            info.reclaim.stats.reclaimed_bytes.to_string(),
        ),
        (
            "lacuna_container_reclaim_backlog_bytes",
            info.reclaim.stats.backlog_bytes.to_string(),
        ),
        (
            "lacuna_container_reclaim_bytes_per_second",
            "1500000".to_string(),
        ),
        ("lacuna_container_used_bytes", info.used_bytes.to_string()),
        ("lacuna_container_quota_bytes", (1u64 << 30).to_string()),
        (
            "lacuna_container_reclaim_rate_limit_bytes_per_second",
            "0".to_string(),
        ),
        ("lacuna_container_reclaim_draining", "0".to_string()),
        ("lacuna_container_volumes", "2".to_string()),
    ] {
        assert_eq!(sample(name, cold), value, "{name}");
    }
    assert_eq!(
        sample(
            "lacuna_container_reclaim_policy",
            r#"container="cold",policy="off""#
        ),
        "1"
    );
    assert_eq!(
        sample(
            "lacuna_container_reclaim_policy",
            r#"container="warm",policy="low""#
        ),
        "1"
    );
    assert_eq!(
        sample(
            "lacuna_container_reclaim_policy",
            r#"container="default",policy="unlimited""#
        ),
        "1"
    );
    // Off: no ETA; low: backlog / 25 MB/s.
    assert_eq!(
        labelled_sample(text, "lacuna_container_reclaim_eta_seconds", cold),
        None
    );
    let eta: f64 = sample("lacuna_container_reclaim_eta_seconds", warm)
        .parse()
        .unwrap();
    assert_eq!(eta, (7u64 << 20) as f64 / 25e6);
    assert_eq!(
        sample("lacuna_container_reclaim_rate_limit_bytes_per_second", warm),
        "25000000"
    );
    assert_eq!(
        sample(
            "lacuna_container_reclaim_rate_limit_bytes_per_second",
            default
        ),
        "+Inf"
    );
    assert_eq!(
        labelled_sample(text, "lacuna_container_quota_bytes", warm),
        None
    );
    let v1 = r#"volume="v1",container="cold""#;
    assert_eq!(sample("lacuna_volume_unmap_commands_total", v1), "3");
    assert_eq!(sample("lacuna_volume_unmapped_bytes_total", v1), "12288");
    assert_eq!(sample("lacuna_volume_reclaimed_bytes_total", v1), "4096");
    assert_eq!(sample("lacuna_volume_reclaim_backlog_bytes", v1), "8192");
    // Each family's HELP and TYPE appear once, before its samples.
    for family in [
        "lacuna_container_reclaim_policy",
        "lacuna_volume_reclaim_backlog_bytes",
    ] {
        assert_eq!(
            text.matches(&format!("# TYPE {family} ")).count(),
            1,
            "{family}"
        );
        let typed = text.find(&format!("# TYPE {family} ")).unwrap();
        let first = text.find(&format!("\n{family}{{")).unwrap();
        assert!(typed < first, "{family}");
    }
}

/// `POST /v1/array/scrub` passes its rate to the array and answers 202 with the
/// pass; a misspelt field is refused; `GET` answers the status.
#[tokio::test]
async fn scrub_starts_at_its_rate_and_reports() {
    let (app, fake) = app();
    let r = send(
        &app,
        "POST",
        "/v1/array/scrub",
        bearer(),
        Some(r#"{"rate_bytes_per_s":5000000}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.body);
    assert_eq!(r.body["started"], true);
    assert_eq!(r.body["report"]["rate_bytes_per_s"], 5_000_000);
    assert_eq!(fake.calls(), vec!["begin_scrub Some(5000000)"]);
    let r = send(&app, "POST", "/v1/array/scrub", bearer(), Some("{}")).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    assert_eq!(fake.calls(), vec!["begin_scrub None"]);
    let r = send(
        &app,
        "POST",
        "/v1/array/scrub",
        bearer(),
        Some(r#"{"rate":5}"#),
    )
    .await;
    assert!(error_message(&r, StatusCode::BAD_REQUEST).contains("unknown field `rate`"));
    let r = send(&app, "GET", "/v1/array/scrub", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["last"]["bad_records"], 1);
    assert_eq!(r.body["last"]["affected"][0]["volume"], "v");
    assert!(r.body["current"].is_null());
}

/// `/healthz` tells the truth: 200 with the state and reasons while the array
/// serves I/O, 503 once it is fenced; `/metrics` and the space report carry
/// the same state.
#[tokio::test]
async fn healthz_reports_degraded_read_only_and_fenced_states() {
    use lacuna_engine::{ArrayHealth, ArrayState};
    let (app, fake) = app();
    for (state, name, status) in [
        (ArrayState::Degraded, "degraded", StatusCode::OK),
        (ArrayState::ReadOnly, "read_only", StatusCode::OK),
        (
            ArrayState::Fenced,
            "fenced",
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    ] {
        *fake.health.lock().unwrap() = ArrayHealth {
            state,
            reasons: vec![format!("because {name}")],
        };
        let r = send(&app, "GET", "/healthz", None, None).await;
        assert_eq!(r.status, status, "{name}");
        assert_eq!(
            r.body,
            json!({"status": name, "reasons": [format!("because {name}")]})
        );
        let r = send(&app, "GET", "/v1/array/space", bearer(), None).await;
        assert_eq!(r.body["health"]["state"], name);
        let r = send(&app, "GET", "/metrics", bearer(), None).await;
        let text = r.body.as_str().unwrap();
        assert!(
            text.contains(&format!("lacuna_array_state{{state=\"{name}\"}} 1")),
            "{text}"
        );
        assert!(
            text.contains("lacuna_array_state{state=\"ok\"} 0"),
            "{text}"
        );
    }
}

/// The vVol routes against the real service: a create, query and info round
/// trip, metadata updates, a two-phase snapshot, a bitmap, and the faults
/// with their statuses (a bind to an unknown host, a revert to another vVol's
/// snapshot, a batch over the limit, events lost).
#[tokio::test]
async fn vvol_routes_answer_the_service_and_its_faults() {
    let (app, _, _) = app_with_hosts();
    let vm = format!("vm-{}", std::process::id());
    let create = json!({"container": "default", "vvol_type": "Config", "size_mib": 16,
        "metadata": {"VMW_VmID": vm, "VMW_VVolType": "Config"}})
    .to_string();
    let r = send(&app, "POST", "/v1/vvols", bearer(), Some(&create)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let id = r.body["id"].as_str().unwrap().to_string();
    assert_eq!(r.body["size_bytes"], 16 << 20);
    let other = send(&app, "POST", "/v1/vvols", bearer(), Some(&create))
        .await
        .body["id"]
        .as_str()
        .unwrap()
        .to_string();

    let query = json!({"metadata": {"VMW_VmID": vm}}).to_string();
    let r = send(&app, "POST", "/v1/vvols/query", bearer(), Some(&query)).await;
    let mut found: Vec<String> = serde_json::from_value(r.body["ids"].clone()).unwrap();
    found.sort();
    let mut expected = vec![id.clone(), other.clone()];
    expected.sort();
    assert_eq!(found, expected);

    let info = json!({"ids": [id, "rfc4122.00000000-0000-4000-8000-000000000009"]}).to_string();
    let r = send(&app, "POST", "/v1/vvols/info", bearer(), Some(&info)).await;
    assert_eq!(r.body[0]["result"]["metadata"]["VMW_VVolType"], "Config");
    assert_eq!(r.body[1]["fault"]["kind"], "NotFound");

    let meta = json!({"metadata": {"VMW_VVolName": "vm.vmx"}}).to_string();
    let r = send(
        &app,
        "PATCH",
        &format!("/v1/vvols/{id}/metadata"),
        bearer(),
        Some(&meta),
    )
    .await;
    assert_eq!(r.body["metadata"]["VMW_VVolName"], "vm.vmx", "{}", r.body);

    let r = send(
        &app,
        "POST",
        &format!("/v1/vvols/{id}/prepare-snapshot"),
        bearer(),
        Some("{}"),
    )
    .await;
    let snapshot = r.body["snapshot_id"].as_str().unwrap().to_string();
    let commit = json!({"snapshots": [{"snapshot_id": snapshot}]}).to_string();
    let r = send(&app, "POST", "/v1/vvols/snapshot", bearer(), Some(&commit)).await;
    assert!(r.body["results"][0]["fault"].is_null(), "{}", r.body);
    assert!(r.body["commit_window_us"].is_u64());
    let revert = json!({"snapshot": snapshot}).to_string();
    let r = send(
        &app,
        "POST",
        &format!("/v1/vvols/{other}/revert"),
        bearer(),
        Some(&revert),
    )
    .await;
    assert!(error_message(&r, StatusCode::CONFLICT).contains("incompatible volume"));
    let r = send(
        &app,
        "POST",
        &format!("/v1/vvols/{id}/revert"),
        bearer(),
        Some(&revert),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    let segment =
        json!({"offset_bytes": 0, "length_bytes": 16 << 20, "chunk_bytes": 1 << 20}).to_string();
    // Just after the revert every chunk may be marked (the engine settles a
    // reverted range's bits in the background; marking a chunk of zeros only
    // costs a copy); then nothing is, as nothing was written.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let r = loop {
        let r = send(
            &app,
            "POST",
            &format!("/v1/vvols/{id}/allocated-bitmap"),
            bearer(),
            Some(&segment),
        )
        .await;
        if r.body["bitmap"] == "AAA=" || std::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(r.body["bitmap"], "AAA=", "{}", r.body);
    let past =
        json!({"offset_bytes": 0, "length_bytes": 32 << 20, "chunk_bytes": 1 << 20}).to_string();
    let r = send(
        &app,
        "POST",
        &format!("/v1/vvols/{id}/allocated-bitmap"),
        bearer(),
        Some(&past),
    )
    .await;
    error_message(&r, StatusCode::BAD_REQUEST);

    let bind = json!({"host": "nohost", "ids": [id]}).to_string();
    let r = send(&app, "POST", "/v1/vvols/bind", bearer(), Some(&bind)).await;
    assert!(error_message(&r, StatusCode::NOT_FOUND).contains("host 'nohost'"));
    let many: Vec<&str> = vec![id.as_str(); lacuna_vvol::MAX_BATCH + 1];
    let r = send(
        &app,
        "POST",
        "/v1/vvols/info",
        bearer(),
        Some(&json!({"ids": many}).to_string()),
    )
    .await;
    error_message(&r, StatusCode::INSUFFICIENT_STORAGE);
    // An id not given yet (far ahead: other tests share the service and
    // add events meanwhile) is an event lost.
    let r = send(&app, "GET", "/v1/vvol-events?since=0", bearer(), None).await;
    let newest = r.body.as_array().unwrap().last().unwrap()["id"]
        .as_u64()
        .unwrap();
    let r = send(
        &app,
        "GET",
        &format!("/v1/vvol-events?since={}", newest + (1 << 40)),
        bearer(),
        None,
    )
    .await;
    error_message(&r, StatusCode::GONE);
    let r = send(&app, "GET", "/v1/vvols/not-an-id", bearer(), None).await;
    error_message(&r, StatusCode::BAD_REQUEST);

    let r = send(&app, "GET", "/v1/vvol-provider", bearer(), None).await;
    assert_eq!(r.body["max_batch_size"], lacuna_vvol::MAX_BATCH);
    assert_eq!(r.body["max_concurrent_requests_per_host"], 16);
    let r = send(&app, "GET", "/v1/vvol-tasks?since=0", bearer(), None).await;
    let made = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["result"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(made["operation"], "createVirtualVolume");
    assert_eq!(made["state"], "Success");
    let task = made["id"].as_u64().unwrap();
    let r = send(
        &app,
        "GET",
        &format!("/v1/vvol-tasks/{task}"),
        bearer(),
        None,
    )
    .await;
    assert_eq!(r.body, made);
    let r = send(
        &app,
        "DELETE",
        &format!("/v1/vvol-tasks/{task}"),
        bearer(),
        None,
    )
    .await;
    assert!(error_message(&r, StatusCode::BAD_REQUEST).contains("nothing to cancel"));
    let r = send(&app, "GET", "/v1/vvol-tasks/x", bearer(), None).await;
    error_message(&r, StatusCode::BAD_REQUEST);

    let r = send(&app, "DELETE", &format!("/v1/vvols/{id}"), bearer(), None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = send(
        &app,
        "GET",
        &format!("/v1/vvols/{snapshot}"),
        bearer(),
        None,
    )
    .await;
    error_message(&r, StatusCode::NOT_FOUND);
}

/// The history answers what the monitor recorded, by window and since; events
/// list oldest first, poll by id, acknowledge once, and bad queries are 400s.
#[tokio::test]
async fn history_and_events_routes_answer_what_the_monitor_keeps() {
    use lacuna_monitor::{Direction, EventKind, NewEvent, Observation, Protocol, Severity};
    let dir = tempfile::tempdir().unwrap();
    let monitor = Arc::new(lacuna_monitor::Monitor::open(dir.path()).unwrap());
    let fake = Arc::new(FakeArray::default());
    let app = router(ApiState::new(fake, TOKEN).with_monitor(monitor.clone()));
    for (i, unix_s) in [1000u64, 1005, 1010].into_iter().enumerate() {
        for _ in 0..(10 * i) {
            monitor.io.record(
                Protocol::Nbd,
                Direction::Write,
                4096,
                std::time::Duration::from_micros(200),
            );
        }
        monitor.history.observe(Observation {
            unix_s,
            io: monitor.io.totals(),
            ..Observation::default()
        });
    }
    let r = send(&app, "GET", "/v1/array/history", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        (r.body["window"].clone(), r.body["interval_s"].clone()),
        (json!("hour"), json!(5))
    );
    let samples = r.body["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 2);
    let nbd_write = &samples[1]["io"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["protocol"] == "nbd" && f["direction"] == "write")
        .unwrap()
        .clone();
    assert_eq!(nbd_write["iops"], json!(4.0), "20 writes in 5 s");
    let r = send(
        &app,
        "GET",
        "/v1/array/history?since_unix_s=1005",
        bearer(),
        None,
    )
    .await;
    assert_eq!(r.body["samples"].as_array().unwrap().len(), 1);
    let r = send(&app, "GET", "/v1/array/history?window=day", bearer(), None).await;
    assert_eq!(r.body["samples"], json!([]), "no whole minute yet");
    let r = send(&app, "GET", "/v1/array/history?window=week", bearer(), None).await;
    assert!(error_message(&r, StatusCode::BAD_REQUEST).contains("week"));

    let new = |kind, severity| NewEvent {
        severity,
        kind,
        subject: Some("vol".into()),
        message: format!("{kind:?}"),
    };
    monitor
        .events
        .raise(
            50,
            vec![
                new(EventKind::ChecksumError, Severity::Critical),
                new(EventKind::SoftThresholdCrossed, Severity::Warning),
            ],
        )
        .unwrap();
    let r = send(&app, "GET", "/v1/events", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["events"][0]["kind"], "checksum_error");
    assert_eq!(
        (
            r.body["open_warnings"].clone(),
            r.body["open_critical"].clone()
        ),
        (json!(1), json!(1))
    );
    let r = send(&app, "POST", "/v1/events/1/acknowledge", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body["acknowledged_unix_s"].is_u64());
    let r = send(&app, "GET", "/v1/events?open=true", bearer(), None).await;
    let open: Vec<_> = r.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(open, vec![json!(2)]);
    assert_eq!(r.body["open_critical"], json!(0));
    let r = send(&app, "GET", "/v1/events?after_id=1", bearer(), None).await;
    assert_eq!(r.body["events"].as_array().unwrap().len(), 1);
    let r = send(&app, "POST", "/v1/events/99/acknowledge", bearer(), None).await;
    assert!(error_message(&r, StatusCode::NOT_FOUND).contains("99"));
    let r = send(&app, "POST", "/v1/events/x/acknowledge", bearer(), None).await;
    error_message(&r, StatusCode::BAD_REQUEST);
    let r = send(&app, "GET", "/v1/events?limit=0", bearer(), None).await;
    assert!(error_message(&r, StatusCode::BAD_REQUEST).contains("limit"));
    let r = send(&app, "GET", "/v1/events", None, None).await;
    error_message(&r, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn gateways_route_answers_the_pool_view_500_when_unreadable_and_501_without_a_pool() {
    let (app, _) = app();
    let r = send(&app, "GET", "/v1/gateways", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["shards"][0]["owner"], "gw-a");
    assert_eq!(r.body["gateways"][1]["state"], "standby");
    assert_eq!(r.body["gateways"][0]["portals"][0]["service"], "nbd");
    let unreadable = router(
        ApiState::new(Arc::new(FakeArray::default()), TOKEN)
            .with_gateways(Arc::new(TwoGateways { fail: true })),
    );
    let r = send(&unreadable, "GET", "/v1/gateways", bearer(), None).await;
    let message = error_message(&r, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(message.contains("errno 110"), "{message}");
    let bare = router(ApiState::new(Arc::new(FakeArray::default()), TOKEN));
    let r = send(&bare, "GET", "/v1/gateways", bearer(), None).await;
    let message = error_message(&r, StatusCode::NOT_IMPLEMENTED);
    assert!(message.contains("--store rados"), "{message}");
}

#[tokio::test]
async fn sessions_route_lists_what_the_daemon_sees_and_answers_501_without_it() {
    let (app, _) = app();
    let r = send(&app, "GET", "/v1/sessions", bearer(), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        r.body["sessions"],
        json!([{"protocol": "nbd", "host": "h", "initiator": "127.0.0.1:10809", "export": "v", "since_unix_s": 1}])
    );
    let bare = router(ApiState::new(Arc::new(FakeArray::default()), TOKEN));
    let r = send(&bare, "GET", "/v1/sessions", bearer(), None).await;
    assert_eq!(r.status, StatusCode::NOT_IMPLEMENTED, "{}", r.body);
}
