//! What the API needs from the array, as a trait: the daemon passes the real
//! [`Engine`]; tests of routing, auth and error mapping pass a double that can also
//! produce failures a real engine rarely does (out of space, I/O errors).

use lacuna_engine::snapshot::split_full_name;
use lacuna_engine::{
    CopyReport, Engine, EngineError, GroupSnapshot, Provisioning, SnapshotInfo, SpaceReport,
    VolumeInfo,
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
    fn create_volume(
        &self,
        name: &str,
        size_bytes: u64,
        provisioning: Provisioning,
    ) -> Result<VolumeInfo, EngineError>;
    /// A writable clone of `source` (`VOL` or `VOL@SNAP`), with the source's size.
    fn clone_volume(
        &self,
        source: &str,
        name: &str,
        provisioning: Provisioning,
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
    ) -> Result<VolumeInfo, EngineError> {
        Engine::create_volume_with(self, name, size_bytes, provisioning)
    }

    fn clone_volume(
        &self,
        source: &str,
        name: &str,
        provisioning: Provisioning,
    ) -> Result<VolumeInfo, EngineError> {
        Engine::clone_volume(self, source, name, provisioning)
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
}
