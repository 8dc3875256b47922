//! The faults vVol operations answer, by VASA's names: each says what the
//! caller did wrong (or what the array lacks) and changed nothing.

use lacuna_engine::EngineError;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VvolFault {
    /// No such vVol, container, host or prepared snapshot.
    #[error("not found: {0}")]
    NotFound(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A revert to a snapshot of another vVol.
    #[error("incompatible volume: {0}")]
    IncompatibleVolume(String),
    /// Out of space, or a batch, a count or a set larger than the array keeps.
    #[error("out of resource: {0}")]
    OutOfResource(String),
    /// The object is in use (a bound vVol cannot be deleted).
    #[error("resource in use: {0}")]
    ResourceInUse(String),
    /// Too many requests in flight for this host: retry later.
    #[error("busy: {0}")]
    Busy(String),
    /// A batch of snapshots could not commit within its time limit.
    #[error("timeout: {0}")]
    Timeout(String),
    /// Events asked for from an id the array no longer keeps: resynchronise.
    #[error("lost events: {0}")]
    LostEvent(String),
    /// The array failed (I/O, metadata).
    #[error("storage fault: {0}")]
    StorageFault(String),
}

/// A fault as it travels in an answer: its kind and message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FaultBody {
    pub kind: String,
    pub message: String,
}

impl VvolFault {
    /// VASA's name for the fault.
    pub fn kind(&self) -> &'static str {
        match self {
            VvolFault::NotFound(_) => "NotFound",
            VvolFault::InvalidArgument(_) => "InvalidArgument",
            VvolFault::IncompatibleVolume(_) => "IncompatibleVolume",
            VvolFault::OutOfResource(_) => "OutOfResource",
            VvolFault::ResourceInUse(_) => "ResourceInUse",
            VvolFault::Busy(_) => "Busy",
            VvolFault::Timeout(_) => "Timeout",
            VvolFault::LostEvent(_) => "LostEvent",
            VvolFault::StorageFault(_) => "StorageFault",
        }
    }

    pub fn body(&self) -> FaultBody {
        FaultBody {
            kind: self.kind().to_string(),
            message: self.to_string(),
        }
    }
}

impl From<EngineError> for VvolFault {
    fn from(error: EngineError) -> VvolFault {
        match error {
            EngineError::VolumeNotFound(_)
            | EngineError::SnapshotNotFound(_)
            | EngineError::ContainerNotFound(_) => VvolFault::NotFound(error.to_string()),
            EngineError::InvalidArgument(_) | EngineError::OutOfRange { .. } => {
                VvolFault::InvalidArgument(error.to_string())
            }
            EngineError::NoSpace(_) => VvolFault::OutOfResource(error.to_string()),
            _ => VvolFault::StorageFault(error.to_string()),
        }
    }
}

impl From<redb::Error> for VvolFault {
    fn from(error: redb::Error) -> VvolFault {
        VvolFault::StorageFault(format!("vVol store: {error}"))
    }
}

macro_rules! redb_fault {
    ($($t:ty),*) => {$(
        impl From<$t> for VvolFault {
            fn from(error: $t) -> VvolFault {
                VvolFault::from(redb::Error::from(error))
            }
        }
    )*};
}
redb_fault!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);
