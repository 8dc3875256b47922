//! Adapts engine volumes to the NBD server's export traits: this is the only
//! place that knows both sides.

use std::sync::Arc;

use lacuna_engine::{Engine, EngineError, Extent, ExtentState, Snapshot, Volume};
use lacuna_nbd::{BlockExport, ExportError, ExportProvider, ExportSummary, ExtentKind};

/// Every volume is an export under its name, and every snapshot a read-only one
/// under `VOL@SNAP`.
pub struct VolumeExports {
    pub engine: Arc<Engine>,
}

impl ExportProvider for VolumeExports {
    fn list(&self) -> Vec<ExportSummary> {
        let volumes = self
            .engine
            .list_volumes()
            .into_iter()
            .map(|v| ExportSummary {
                description: format!("Lacuna volume {} ({} bytes)", v.name, v.size_bytes),
                name: v.name,
            });
        let snapshots = self
            .engine
            .list_snapshots(None, false)
            .unwrap_or_default()
            .into_iter()
            .map(|s| ExportSummary {
                description: format!("Lacuna snapshot {} (read-only)", s.full_name),
                name: s.full_name,
            });
        volumes.chain(snapshots).collect()
    }

    fn open(&self, name: &str) -> Option<Arc<dyn BlockExport>> {
        if name.contains('@') {
            let snapshot = self.engine.open_snapshot(name).ok()?;
            return Some(Arc::new(SnapshotExport { snapshot }));
        }
        let volume = self.engine.open_volume(name).ok()?;
        Some(Arc::new(VolumeExport { volume }))
    }
}

/// A snapshot: reads and block status; every change is refused as read-only.
struct SnapshotExport {
    snapshot: Snapshot,
}

impl BlockExport for SnapshotExport {
    fn size_bytes(&self) -> Result<u64, ExportError> {
        self.snapshot.size_bytes().map_err(export_error)
    }

    fn description(&self) -> String {
        format!("Lacuna snapshot {} (read-only)", self.snapshot.full_name())
    }

    fn read_only(&self) -> bool {
        true
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.snapshot.read(offset, buf).map_err(export_error)
    }

    fn write(&self, _offset: u64, _data: &[u8]) -> Result<(), ExportError> {
        Err(self.read_only_error())
    }

    fn trim(&self, _offset: u64, _length: u64) -> Result<(), ExportError> {
        Err(self.read_only_error())
    }

    fn write_zeroes(&self, _offset: u64, _length: u64, _unmap: bool) -> Result<(), ExportError> {
        Err(self.read_only_error())
    }

    fn flush(&self) -> Result<(), ExportError> {
        Ok(())
    }

    fn extents(&self, offset: u64, length: u64) -> Result<Vec<(u64, ExtentKind)>, ExportError> {
        let extents = self
            .snapshot
            .extents(offset, length)
            .map_err(export_error)?;
        Ok(extents.into_iter().map(extent_kind).collect())
    }
}

impl SnapshotExport {
    fn read_only_error(&self) -> ExportError {
        ExportError::ReadOnly(format!(
            "snapshot {} is read-only",
            self.snapshot.full_name()
        ))
    }
}

fn extent_kind(e: Extent) -> (u64, ExtentKind) {
    let kind = match e.state {
        ExtentState::Data => ExtentKind::Data,
        ExtentState::Zero => ExtentKind::Zero,
        ExtentState::Hole => ExtentKind::Hole,
    };
    (e.length_bytes, kind)
}

struct VolumeExport {
    volume: Volume,
}

fn export_error(error: EngineError) -> ExportError {
    match error {
        EngineError::NoSpace(m) => ExportError::NoSpace(m),
        EngineError::OutOfRange { .. } | EngineError::InvalidArgument(_) => {
            ExportError::Invalid(error.to_string())
        }
        other => {
            tracing::error!("volume I/O failed: {other}");
            ExportError::Io(other.to_string())
        }
    }
}

impl BlockExport for VolumeExport {
    fn size_bytes(&self) -> Result<u64, ExportError> {
        self.volume.size_bytes().map_err(export_error)
    }

    fn description(&self) -> String {
        format!("Lacuna volume {}", self.volume.name())
    }

    fn read_only(&self) -> bool {
        false
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.volume.read(offset, buf).map_err(export_error)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), ExportError> {
        self.volume.write(offset, data).map_err(export_error)
    }

    fn trim(&self, offset: u64, length: u64) -> Result<(), ExportError> {
        self.volume.unmap(offset, length).map_err(export_error)
    }

    fn write_zeroes(&self, offset: u64, length: u64, allow_unmap: bool) -> Result<(), ExportError> {
        self.volume
            .write_zeroes(offset, length, allow_unmap)
            .map_err(export_error)
    }

    fn flush(&self) -> Result<(), ExportError> {
        self.volume.flush().map_err(export_error)
    }

    fn extents(&self, offset: u64, length: u64) -> Result<Vec<(u64, ExtentKind)>, ExportError> {
        let extents = self.volume.extents(offset, length).map_err(export_error)?;
        Ok(extents.into_iter().map(extent_kind).collect())
    }
}
