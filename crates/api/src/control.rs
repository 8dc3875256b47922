//! What the API needs from the array, as a trait: the daemon passes the real
//! [`Engine`]; tests of routing, auth and error mapping pass a double that can also
//! produce failures a real engine rarely does (out of space, I/O errors).

use lacuna_engine::integrity::scrub::{ScrubReport, ScrubStart, ScrubStatus};
use lacuna_engine::versions::snapshot::split_full_name;
use lacuna_engine::{
    ContainerInfo, ContainerPolicy, ContainerUpdate, CopyReport, Engine, EngineError,
    GroupSnapshot, Provisioning, SnapshotInfo, SpaceReport, VolumeInfo,
};

/// The control-plane operations of the array. Calls block (they commit metadata
/// durably); the API runs them on the blocking thread pool.
///
/// Snapshots are named `VOL@NAME` wherever one is meant on its own.
pub trait ControlPlane: Send + Sync + 'static {
    /// Live volumes, or (with `destroyed`) the destroyed ones awaiting
    /// eradication; sorted by name.
    fn list_volumes(&self, destroyed: bool) -> Result<Vec<VolumeInfo>, EngineError>;
    /// A volume, live or destroyed.
    fn volume_info(&self, name: &str) -> Result<VolumeInfo, EngineError>;
    /// A new volume in `container` (the `default` container when `None`).
    fn create_volume(
        &self,
        name: &str,
        size_bytes: u64,
        provisioning: Provisioning,
        container: Option<&str>,
    ) -> Result<VolumeInfo, EngineError>;
    /// A writable clone of `source` (`VOL` or `VOL@SNAP`), with the source's
    /// size, in `container` (the source's container when `None`).
    fn clone_volume(
        &self,
        source: &str,
        name: &str,
        provisioning: Provisioning,
        container: Option<&str>,
    ) -> Result<VolumeInfo, EngineError>;
    fn resize_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo, EngineError>;
    /// Destroys a volume (recoverable for the array's retention period).
    fn delete_volume(&self, name: &str) -> Result<(), EngineError>;
    fn recover_volume(&self, name: &str) -> Result<(), EngineError>;
    /// Eradicates a destroyed volume now.
    fn eradicate_volume(&self, name: &str) -> Result<(), EngineError>;
    /// Reverts `volume` to `snapshot` (`NAME` of that volume, or `VOL@NAME`).
    fn restore_volume(&self, volume: &str, snapshot: &str) -> Result<VolumeInfo, EngineError>;
    fn copy_range(
        &self,
        source: &str,
        source_offset_bytes: u64,
        length_bytes: u64,
        destination: &str,
        destination_offset_bytes: u64,
    ) -> Result<CopyReport, EngineError>;
    /// Snapshots of every volume at one instant (a consistency group when
    /// several or when `group` is given).
    fn create_snapshots(
        &self,
        volumes: &[&str],
        name: Option<&str>,
        group: Option<&str>,
    ) -> Result<GroupSnapshot, EngineError>;
    /// Named snapshots, of one volume or all; destroyed ones only when asked.
    fn list_snapshots(
        &self,
        volume: Option<&str>,
        destroyed: bool,
    ) -> Result<Vec<SnapshotInfo>, EngineError>;
    /// One named snapshot, live or destroyed.
    fn snapshot_info(&self, full_name: &str) -> Result<SnapshotInfo, EngineError>;
    fn delete_snapshot(&self, full_name: &str) -> Result<(), EngineError>;
    fn recover_snapshot(&self, full_name: &str) -> Result<(), EngineError>;
    fn eradicate_snapshot(&self, full_name: &str) -> Result<(), EngineError>;
    fn space(&self) -> Result<SpaceReport, EngineError>;
    /// The array's state and its reasons (fenced, read-only, degraded, ok).
    fn health(&self) -> lacuna_engine::ArrayHealth;
    /// Every container, sorted by id (`default` first).
    fn list_containers(&self) -> Result<Vec<ContainerInfo>, EngineError>;
    fn container_info(&self, name: &str) -> Result<ContainerInfo, EngineError>;
    fn create_container(
        &self,
        name: &str,
        policy: ContainerPolicy,
    ) -> Result<ContainerInfo, EngineError>;
    /// Changes a container's policies; fields of `update` left `None` are kept.
    fn set_container(
        &self,
        name: &str,
        update: &ContainerUpdate,
    ) -> Result<ContainerInfo, EngineError>;
    /// Deletes an empty container (never `default`).
    fn delete_container(&self, name: &str) -> Result<(), EngineError>;
    /// Works the container's reclaim backlog off now, whatever its policy;
    /// answers at once, with `reclaim.draining` set until the backlog is empty.
    fn reclaim_container_now(&self, name: &str) -> Result<ContainerInfo, EngineError>;
    /// Begins a scrub pass at a rate (unlimited when `None`), or answers the
    /// pass running already. The API then runs a begun pass with
    /// [`ControlPlane::run_scrub`] on a thread of its own.
    fn begin_scrub(&self, _rate_bytes_per_s: Option<u64>) -> Result<ScrubStart, EngineError> {
        Err(no_scrub())
    }
    /// Runs a begun pass to its end (blocks for the whole pass).
    fn run_scrub(&self, _pass: u64) -> Result<ScrubReport, EngineError> {
        Err(no_scrub())
    }
    /// The running pass, the last finished one, and the background schedule.
    fn scrub_status(&self) -> Result<ScrubStatus, EngineError> {
        Err(no_scrub())
    }
    /// Stops the running pass; answers its report once it has stopped.
    fn cancel_scrub(&self) -> Result<ScrubReport, EngineError> {
        Err(no_scrub())
    }
}

fn no_scrub() -> EngineError {
    EngineError::InvalidArgument("this array cannot scrub".into())
}

impl ControlPlane for Engine {
    fn list_volumes(&self, destroyed: bool) -> Result<Vec<VolumeInfo>, EngineError> {
        Ok(Engine::list_volumes_in(self, destroyed))
    }

    fn volume_info(&self, name: &str) -> Result<VolumeInfo, EngineError> {
        Engine::volume_info(self, name)
    }

    fn create_volume(
        &self,
        name: &str,
        size_bytes: u64,
        provisioning: Provisioning,
        container: Option<&str>,
    ) -> Result<VolumeInfo, EngineError> {
        let container = container.unwrap_or(lacuna_engine::space::container::DEFAULT_CONTAINER);
        Engine::create_volume_in(self, name, size_bytes, provisioning, container)
    }

    fn clone_volume(
        &self,
        source: &str,
        name: &str,
        provisioning: Provisioning,
        container: Option<&str>,
    ) -> Result<VolumeInfo, EngineError> {
        Engine::clone_volume_in(self, source, name, provisioning, container)
    }

    fn resize_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo, EngineError> {
        Engine::resize_volume(self, name, size_bytes)
    }

    fn delete_volume(&self, name: &str) -> Result<(), EngineError> {
        Engine::delete_volume(self, name)
    }

    fn recover_volume(&self, name: &str) -> Result<(), EngineError> {
        Engine::recover_volume(self, name)
    }

    fn eradicate_volume(&self, name: &str) -> Result<(), EngineError> {
        Engine::eradicate_volume(self, name)
    }

    fn restore_volume(&self, volume: &str, snapshot: &str) -> Result<VolumeInfo, EngineError> {
        Engine::restore_volume(self, volume, snapshot)
    }

    fn copy_range(
        &self,
        source: &str,
        source_offset_bytes: u64,
        length_bytes: u64,
        destination: &str,
        destination_offset_bytes: u64,
    ) -> Result<CopyReport, EngineError> {
        Engine::copy_range(
            self,
            source,
            source_offset_bytes,
            length_bytes,
            destination,
            destination_offset_bytes,
        )
    }

    fn create_snapshots(
        &self,
        volumes: &[&str],
        name: Option<&str>,
        group: Option<&str>,
    ) -> Result<GroupSnapshot, EngineError> {
        Engine::create_snapshots(self, volumes, name, group)
    }

    fn list_snapshots(
        &self,
        volume: Option<&str>,
        destroyed: bool,
    ) -> Result<Vec<SnapshotInfo>, EngineError> {
        Engine::list_snapshots(self, volume, destroyed)
    }

    fn snapshot_info(&self, full_name: &str) -> Result<SnapshotInfo, EngineError> {
        let not_found = || EngineError::SnapshotNotFound(full_name.to_string());
        let (volume, name) = split_full_name(full_name).ok_or_else(not_found)?;
        for destroyed in [false, true] {
            let all =
                Engine::list_snapshots(self, Some(volume), destroyed).map_err(|e| match e {
                    EngineError::VolumeNotFound(_) => not_found(),
                    other => other,
                })?;
            if let Some(found) = all.into_iter().find(|s| s.name == name) {
                return Ok(found);
            }
        }
        Err(not_found())
    }

    fn delete_snapshot(&self, full_name: &str) -> Result<(), EngineError> {
        Engine::delete_snapshot(self, full_name)
    }

    fn recover_snapshot(&self, full_name: &str) -> Result<(), EngineError> {
        Engine::recover_snapshot(self, full_name)
    }

    fn eradicate_snapshot(&self, full_name: &str) -> Result<(), EngineError> {
        Engine::eradicate_snapshot(self, full_name)
    }

    fn space(&self) -> Result<SpaceReport, EngineError> {
        Ok(Engine::space(self))
    }

    fn health(&self) -> lacuna_engine::ArrayHealth {
        Engine::health(self)
    }

    fn list_containers(&self) -> Result<Vec<ContainerInfo>, EngineError> {
        Ok(Engine::list_containers(self))
    }

    fn container_info(&self, name: &str) -> Result<ContainerInfo, EngineError> {
        Engine::container_info(self, name)
    }

    fn create_container(
        &self,
        name: &str,
        policy: ContainerPolicy,
    ) -> Result<ContainerInfo, EngineError> {
        Engine::create_container(self, name, policy)
    }

    fn set_container(
        &self,
        name: &str,
        update: &ContainerUpdate,
    ) -> Result<ContainerInfo, EngineError> {
        Engine::set_container(self, name, update)
    }

    fn delete_container(&self, name: &str) -> Result<(), EngineError> {
        Engine::delete_container(self, name)
    }

    fn reclaim_container_now(&self, name: &str) -> Result<ContainerInfo, EngineError> {
        Engine::reclaim_container_now(self, name)
    }

    fn begin_scrub(&self, rate_bytes_per_s: Option<u64>) -> Result<ScrubStart, EngineError> {
        Engine::begin_scrub(self, rate_bytes_per_s)
    }

    fn run_scrub(&self, pass: u64) -> Result<ScrubReport, EngineError> {
        Engine::run_scrub(self, pass)
    }

    fn scrub_status(&self) -> Result<ScrubStatus, EngineError> {
        Ok(Engine::scrub_status(self))
    }

    fn cancel_scrub(&self) -> Result<ScrubReport, EngineError> {
        Engine::cancel_scrub(self)
    }
}
