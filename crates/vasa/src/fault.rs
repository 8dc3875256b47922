//! The faults the provider answers, by VASA's names, and how a vVol fault
//! becomes one. An operation answers only the faults it declares; any other
//! becomes a StorageFault that keeps the original kind in its message.

use lacuna_vvol::VvolFault;

use crate::codec::Struct;
use crate::schema::Operation;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The fault type's name (`NotFound`, `InvalidSession`, …).
    pub kind: &'static str,
    pub message: String,
    /// `TooMany`: the largest batch.
    pub max_batch_size: Option<i64>,
}

impl Fault {
    pub fn new(kind: &'static str, message: impl Into<String>) -> Fault {
        debug_assert!(
            crate::schema::type_def(kind).is_some_and(|t| t.derives_from("Exception")),
            "{kind} is not a fault type"
        );
        Fault {
            kind,
            message: message.into(),
            max_batch_size: None,
        }
    }

    pub fn invalid_argument(message: impl Into<String>) -> Fault {
        Fault::new("InvalidArgument", message)
    }

    pub fn invalid_session(message: impl Into<String>) -> Fault {
        Fault::new("InvalidSession", message)
    }

    pub fn busy(message: impl Into<String>) -> Fault {
        Fault::new("VasaProviderBusy", message)
    }

    pub fn storage(message: impl Into<String>) -> Fault {
        Fault::new("StorageFault", message)
    }

    pub fn too_many(max_batch_size: usize) -> Fault {
        Fault {
            max_batch_size: Some(max_batch_size as i64),
            ..Fault::new(
                "TooMany",
                format!("a batch takes at most {max_batch_size} items"),
            )
        }
    }

    /// The fault as `op` may answer it: kinds it does not declare become a
    /// StorageFault.
    pub fn declared_by(self, op: &Operation) -> Fault {
        if op.faults.contains(&self.kind) {
            self
        } else {
            Fault::storage(format!("{}: {}", self.kind, self.message))
        }
    }

    /// The value of the fault type (detail of a SOAP Fault, or an item's fault in a batch).
    pub fn to_struct(&self) -> Struct {
        let s = Struct::new(self.kind);
        match (self.kind, self.max_batch_size) {
            ("TooMany", Some(n)) => s.with("maxBatchSize", n),
            _ => s,
        }
    }
}

/// The VASA fault of a vVol fault kind (as [`VvolFault::kind`] names it);
/// one VASA lacks is a StorageFault.
fn vasa_kind(vvol_kind: &str) -> &'static str {
    match vvol_kind {
        "Busy" => "VasaProviderBusy",
        other => crate::schema::type_def(other)
            .filter(|t| t.derives_from("Exception"))
            .map_or("StorageFault", |t| t.name),
    }
}

impl Fault {
    /// A fault as a batch item or a task carries it.
    pub fn from_body(body: &lacuna_vvol::FaultBody) -> Fault {
        Fault::new(vasa_kind(&body.kind), body.message.clone())
    }
}

impl From<VvolFault> for Fault {
    fn from(fault: VvolFault) -> Fault {
        Fault::new(vasa_kind(fault.kind()), fault.to_string())
    }
}

impl From<lacuna_engine::EngineError> for Fault {
    fn from(error: lacuna_engine::EngineError) -> Fault {
        Fault::from(VvolFault::from(error))
    }
}

impl From<crate::codec::DecodeError> for Fault {
    fn from(error: crate::codec::DecodeError) -> Fault {
        Fault::invalid_argument(error.0)
    }
}
