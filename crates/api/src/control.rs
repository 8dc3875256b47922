//! What the API needs from the array, as a trait: the daemon passes the real
//! [`Engine`]; tests of routing, auth and error mapping pass a double that can also
//! produce failures a real engine rarely does (out of space, I/O errors).

use lacuna_engine::{Engine, EngineError, SpaceReport, VolumeInfo};

/// The control-plane operations of the array. Calls block (they commit metadata
/// durably); the API runs them on the blocking thread pool.
pub trait ControlPlane: Send + Sync + 'static {
    fn list_volumes(&self) -> Result<Vec<VolumeInfo>, EngineError>;
    fn volume_info(&self, name: &str) -> Result<VolumeInfo, EngineError>;
    fn create_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo, EngineError>;
    fn resize_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo, EngineError>;
    fn delete_volume(&self, name: &str) -> Result<(), EngineError>;
    fn space(&self) -> Result<SpaceReport, EngineError>;
}

impl ControlPlane for Engine {
    fn list_volumes(&self) -> Result<Vec<VolumeInfo>, EngineError> {
        Ok(Engine::list_volumes(self))
    }

    fn volume_info(&self, name: &str) -> Result<VolumeInfo, EngineError> {
        Engine::volume_info(self, name)
    }

    fn create_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo, EngineError> {
        Engine::create_volume(self, name, size_bytes)
    }

    fn resize_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo, EngineError> {
        Engine::resize_volume(self, name, size_bytes)
    }

    fn delete_volume(&self, name: &str) -> Result<(), EngineError> {
        Engine::delete_volume(self, name)
    }

    fn space(&self) -> Result<SpaceReport, EngineError> {
        Ok(Engine::space(self))
    }
}
