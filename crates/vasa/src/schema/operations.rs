//! The operations: each one's parameters (children of the request element
//! `vasa:<name>`), its result (the `return` child of `vasa:<name>Response`,
//! none for an operation that answers with an empty body), the faults it
//! declares, and whether it needs a session.

use super::Field as F;
use super::Ty::{self, Bool, Complex as C, Long, Str};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation {
    pub name: &'static str,
    pub input: &'static [F],
    /// The `return` element; `None`: the answer's body is empty.
    pub output: Option<F>,
    pub faults: &'static [&'static str],
    /// Certificate registration authenticates with the provider's credentials
    /// instead; every other operation needs the session `setContext` made.
    pub needs_session: bool,
}

const fn op(
    name: &'static str,
    input: &'static [F],
    output: Option<F>,
    faults: &'static [&'static str],
) -> Operation {
    Operation {
        name,
        input,
        output,
        faults,
        needs_session: true,
    }
}

const fn ret(ty: Ty) -> Option<F> {
    Some(F::one("return", ty))
}
const fn ret_opt(ty: Ty) -> Option<F> {
    Some(F::opt("return", ty))
}
const fn ret_any(ty: Ty) -> Option<F> {
    Some(F::any("return", ty))
}
const fn ret_some(ty: Ty) -> Option<F> {
    Some(F::some("return", ty))
}

const COOKIE: F = F::opt("containerCookie", Str);
const PROFILE: F = F::opt("storageProfile", C("StorageProfile"));
const METADATA: F = F::some("metadata", C("NameValuePair"));
const SEGMENT: [F; 2] = [
    F::one("segmentStartOffsetBytes", Long),
    F::one("segmentLengthBytes", Long),
];

/// The faults of an operation on a vVol (the common set).
const VVOL_FAULTS: &[&str] = &[
    "InactiveProvider",
    "NotFound",
    "InvalidArgument",
    "VasaProviderBusy",
    "InvalidSession",
    "NotImplemented",
    "StorageFault",
];
const VVOL_TASK_FAULTS: &[&str] = &[
    "InactiveProvider",
    "NotFound",
    "InvalidArgument",
    "VasaProviderBusy",
    "NotSupported",
    "InvalidSession",
    "PermissionDenied",
    "NotImplemented",
    "ResourceInUse",
    "OutOfResource",
    "StorageFault",
    "InvalidProfile",
];
const SNAPSHOT_FAULTS: &[&str] = &[
    "InactiveProvider",
    "NotFound",
    "InvalidArgument",
    "VasaProviderBusy",
    "NotSupported",
    "InvalidSession",
    "SnapshotTooMany",
    "PermissionDenied",
    "NotImplemented",
    "ResourceInUse",
    "OutOfResource",
    "StorageFault",
    "InvalidProfile",
];
const BITMAP_FAULTS: &[&str] = &[
    "InactiveProvider",
    "NotFound",
    "InvalidArgument",
    "VasaProviderBusy",
    "NotSupported",
    "InvalidSession",
    "IncompatibleVolume",
    "NotImplemented",
    "StorageFault",
];
const BATCH_FAULTS: &[&str] = &[
    "InactiveProvider",
    "NotFound",
    "InvalidArgument",
    "VasaProviderBusy",
    "InvalidSession",
    "TooMany",
    "NotImplemented",
    "StorageFault",
];
const CERT_FAULTS: &[&str] = &[
    "VasaProviderBusy",
    "InvalidSession",
    "PermissionDenied",
    "InvalidCertificate",
    "StorageFault",
];
const POLICY_FAULTS: &[&str] = &[
    "InactiveProvider",
    "NotFound",
    "InvalidArgument",
    "VasaProviderBusy",
    "InvalidSession",
    "StorageFault",
];

pub static OPERATIONS: &[Operation] = &[
    // ---- session and discovery
    op(
        "setContext",
        &[F::opt("usageContext", C("UsageContext"))],
        ret_opt(C("VasaProviderInfo")),
        &["InvalidSession", "InvalidArgument", "StorageFault"],
    ),
    op(
        "queryArrays",
        &[F::any("arrayUniqueId", Str)],
        ret_any(C("StorageArray")),
        &["InvalidSession", "InvalidArgument", "StorageFault"],
    ),
    op(
        "queryStorageContainer",
        &[F::any("containerId", Str)],
        ret_any(C("StorageContainer")),
        &[
            "InvalidSession",
            "VasaProviderBusy",
            "NotImplemented",
            "StorageFault",
        ],
    ),
    op(
        "queryStorageContainerForArray",
        &[F::one("arrayId", Str)],
        ret_any(Str),
        VVOL_FAULTS,
    ),
    op(
        "queryProtocolEndpoint",
        &[F::any("peId", Str)],
        ret_any(C("ProtocolEndpoint")),
        &[
            "InvalidSession",
            "InactiveProvider",
            "VasaProviderBusy",
            "NotImplemented",
            "StorageFault",
        ],
    ),
    op(
        "queryProtocolEndpointForArray",
        &[F::one("arrayId", Str)],
        ret_any(Str),
        VVOL_FAULTS,
    ),
    op(
        "queryCatalog",
        &[],
        ret_any(C("MessageCatalog")),
        &["InvalidSession", "StorageFault"],
    ),
    op(
        "getEvents",
        &[F::opt("lastEventId", Long)],
        ret_any(C("StorageEvent")),
        &[
            "InvalidSession",
            "InvalidArgument",
            "StorageFault",
            "LostEvent",
        ],
    ),
    op(
        "getAlarms",
        &[F::opt("lastAlarmId", Long)],
        ret_any(C("StorageAlarm")),
        &[
            "InvalidSession",
            "InvalidArgument",
            "StorageFault",
            "LostAlarm",
        ],
    ),
    op(
        "getTaskUpdate",
        &[F::one("taskId", Str)],
        ret(C("TaskInfo")),
        VVOL_FAULTS,
    ),
    op(
        "getCurrentTask",
        &[F::opt("arrayId", Str)],
        ret_any(C("TaskInfo")),
        VVOL_FAULTS,
    ),
    op(
        "cancelTask",
        &[F::one("taskId", Str)],
        None,
        &[
            "NotCancellable",
            "InactiveProvider",
            "NotFound",
            "InvalidArgument",
            "VasaProviderBusy",
            "InvalidSession",
            "NotImplemented",
            "StorageFault",
        ],
    ),
    // ---- virtual volumes
    op(
        "createVirtualVolume",
        &[
            F::one("containerId", Str),
            F::one("vvolType", Str),
            PROFILE,
            F::one("sizeInMB", Long),
            METADATA,
            COOKIE,
        ],
        ret(C("TaskInfo")),
        &[
            "InactiveProvider",
            "NotFound",
            "InvalidArgument",
            "VasaProviderBusy",
            "InvalidSession",
            "PermissionDenied",
            "NotImplemented",
            "OutOfResource",
            "StorageFault",
            "InvalidProfile",
        ],
    ),
    op(
        "deleteVirtualVolume",
        &[F::one("vvolId", Str), COOKIE],
        None,
        &[
            "InactiveProvider",
            "NotFound",
            "InvalidArgument",
            "VasaProviderBusy",
            "InvalidSession",
            "PermissionDenied",
            "NotImplemented",
            "ResourceInUse",
            "StorageFault",
        ],
    ),
    op(
        "bindVirtualVolume",
        &[F::some("vvolId", Str), F::one("bindContext", Str), COOKIE],
        ret_some(C("BatchVirtualVolumeHandleResult")),
        &[
            "InactiveProvider",
            "InvalidArgument",
            "VasaProviderBusy",
            "InvalidSession",
            "TooMany",
            "PermissionDenied",
            "NotImplemented",
            "StorageFault",
        ],
    ),
    op(
        "unbindVirtualVolume",
        &[
            F::some("vvolHandle", C("VirtualVolumeHandle")),
            F::one("unbindContext", Str),
        ],
        ret_some(C("BatchReturnStatus")),
        BATCH_FAULTS,
    ),
    op(
        "unbindAllVirtualVolumesFromHost",
        &[F::opt("hostUuid", Str)],
        None,
        VVOL_FAULTS,
    ),
    op(
        "prepareToSnapshotVirtualVolume",
        &[
            F::one("vvolId", Str),
            PROFILE,
            COOKIE,
            F::one("snapType", Str),
        ],
        ret(C("TaskInfo")),
        SNAPSHOT_FAULTS,
    ),
    op(
        "snapshotVirtualVolume",
        &[
            F::some("snapshotInfo", C("VirtualVolumeInfo")),
            F::one("timeoutMS", Long),
            COOKIE,
        ],
        ret_some(C("BatchReturnStatus")),
        &[
            "InactiveProvider",
            "NotFound",
            "InvalidArgument",
            "VasaProviderBusy",
            "NotSupported",
            "InvalidSession",
            "TooMany",
            "PermissionDenied",
            "Timeout",
            "NotImplemented",
            "ResourceInUse",
            "StorageFault",
        ],
    ),
    op(
        "cloneVirtualVolume",
        &[
            F::one("vvolId", Str),
            F::opt("newContainerId", Str),
            F::opt("newProfile", C("StorageProfile")),
            METADATA,
            COOKIE,
        ],
        ret(C("TaskInfo")),
        VVOL_TASK_FAULTS,
    ),
    op(
        "fastCloneVirtualVolume",
        &[
            F::one("vvolId", Str),
            F::opt("newProfile", C("StorageProfile")),
            METADATA,
            COOKIE,
        ],
        ret(C("TaskInfo")),
        SNAPSHOT_FAULTS,
    ),
    op(
        "revertVirtualVolume",
        &[F::one("vvolId", Str), F::one("snapshotVvolId", Str), COOKIE],
        ret(C("TaskInfo")),
        &[
            "InactiveProvider",
            "NotFound",
            "InvalidArgument",
            "VasaProviderBusy",
            "NotSupported",
            "InvalidSession",
            "IncompatibleVolume",
            "PermissionDenied",
            "NotImplemented",
            "ResourceInUse",
            "StorageFault",
        ],
    ),
    op(
        "resizeVirtualVolume",
        &[F::one("vvolId", Str), F::one("sizeInMB", Long), COOKIE],
        ret(C("TaskInfo")),
        &[
            "InactiveProvider",
            "NotFound",
            "InvalidArgument",
            "VasaProviderBusy",
            "NotSupported",
            "InvalidSession",
            "PermissionDenied",
            "NotImplemented",
            "ResourceInUse",
            "OutOfResource",
            "StorageFault",
        ],
    ),
    op(
        "allocatedBitmapVirtualVolume",
        &[
            F::one("vvolId", Str),
            SEGMENT[0],
            SEGMENT[1],
            F::one("chunkSizeBytes", Long),
        ],
        ret(C("VirtualVolumeBitmapResult")),
        BITMAP_FAULTS,
    ),
    op(
        "unsharedBitmapVirtualVolume",
        &[
            F::one("vvolId", Str),
            F::one("baseVvolId", Str),
            SEGMENT[0],
            SEGMENT[1],
            F::one("chunkSizeBytes", Long),
        ],
        ret(C("VirtualVolumeBitmapResult")),
        BITMAP_FAULTS,
    ),
    op(
        "unsharedChunksVirtualVolume",
        &[
            F::one("vvolId", Str),
            F::opt("baseVvolId", Str),
            SEGMENT[0],
            SEGMENT[1],
        ],
        ret(C("VirtualVolumeUnsharedChunksResult")),
        BITMAP_FAULTS,
    ),
    op(
        "queryVirtualVolume",
        &[F::some("searchConstraint", C("QueryConstraint"))],
        ret_any(Str),
        &[
            "InactiveProvider",
            "InvalidArgument",
            "VasaProviderBusy",
            "InvalidSession",
            "NotImplemented",
            "StorageFault",
        ],
    ),
    op(
        "queryVirtualVolumeInfo",
        &[F::some("vvolId", Str)],
        ret_any(C("VirtualVolumeInfo")),
        &[
            "InactiveProvider",
            "VasaProviderBusy",
            "InvalidSession",
            "TooMany",
            "NotImplemented",
            "StorageFault",
        ],
    ),
    op(
        "updateVirtualVolumeMetaData",
        &[
            F::one("vvolId", Str),
            F::some("keyValuePair", C("NameValuePair")),
            COOKIE,
        ],
        None,
        &[
            "InactiveProvider",
            "NotFound",
            "InvalidArgument",
            "VasaProviderBusy",
            "InvalidSession",
            "PermissionDenied",
            "NotImplemented",
            "StorageFault",
        ],
    ),
    op(
        "spaceStatsForVirtualVolume",
        &[F::some("vvolId", Str)],
        ret_any(C("SpaceStats")),
        &[
            "InactiveProvider",
            "VasaProviderBusy",
            "InvalidSession",
            "TooMany",
            "NotImplemented",
            "StorageFault",
        ],
    ),
    op(
        "spaceStatsForStorageContainer",
        &[
            F::one("containerId", Str),
            F::any("capabilityProfileId", Str),
        ],
        ret_some(C("ContainerSpaceStats")),
        VVOL_FAULTS,
    ),
    // ---- storage policy (SPBM)
    op(
        "queryCapabilityMetadata",
        &[F::any("schemaId", Str)],
        ret_any(C("CapabilitySchema")),
        &[
            "InactiveProvider",
            "NotFound",
            "VasaProviderBusy",
            "InvalidSession",
            "StorageFault",
        ],
    ),
    op(
        "queryDefaultProfileForStorageContainer",
        &[F::one("containerId", Str), F::any("entityType", Str)],
        ret_any(C("DefaultProfile")),
        POLICY_FAULTS,
    ),
    op(
        "queryComplianceResult",
        &[F::some("compliance", C("ComplianceSubject"))],
        ret_any(C("ComplianceResult")),
        POLICY_FAULTS,
    ),
    op(
        "updateStorageProfileForVirtualVolume",
        &[
            F::one("vvolId", Str),
            F::one("newStorageProfile", C("StorageProfile")),
            COOKIE,
        ],
        ret(C("TaskInfo")),
        &[
            "InactiveProvider",
            "NotFound",
            "VasaProviderBusy",
            "NotSupported",
            "InvalidSession",
            "PermissionDenied",
            "ResourceInUse",
            "OutOfResource",
            "StorageFault",
            "InvalidProfile",
        ],
    ),
    // ---- certificates
    Operation {
        name: "registerVASACertificate",
        input: &[
            F::opt("userName", Str),
            F::opt("password", Str),
            F::opt("newCertificate", Str),
        ],
        output: ret_opt(C("VasaProviderInfo")),
        faults: &[
            "InvalidSession",
            "InvalidLogin",
            "InvalidCertificate",
            "StorageFault",
        ],
        needs_session: false,
    },
    op(
        "unregisterVASACertificate",
        &[F::opt("existingCertificate", Str)],
        None,
        &["InvalidSession", "InvalidCertificate", "StorageFault"],
    ),
    op(
        "requestCSR",
        &[],
        ret(Str),
        &[
            "InvalidSession",
            "PermissionDenied",
            "VasaProviderBusy",
            "StorageFault",
        ],
    ),
    op(
        "registerCASignedProviderCertificate",
        &[F::one("providerCert", Str), F::one("forceApply", Bool)],
        None,
        CERT_FAULTS,
    ),
    Operation {
        name: "registerCACertificatesAndCRLs",
        input: &[
            F::one("providerUserName", Str),
            F::one("providerPassword", Str),
            F::some("caRootCert", Str),
            F::any("caCRL", Str),
        ],
        output: ret(C("VasaProviderInfo")),
        faults: &[
            "VasaProviderBusy",
            "InvalidSession",
            "InvalidLogin",
            "InvalidCertificate",
            "StorageFault",
        ],
        needs_session: false,
    },
    op(
        "refreshCACertificatesAndCRLs",
        &[F::some("caRootCert", Str), F::any("caCRL", Str)],
        None,
        CERT_FAULTS,
    ),
    op(
        "queryCACertificates",
        &[],
        ret_any(Str),
        &["InvalidSession", "VasaProviderBusy", "StorageFault"],
    ),
    op(
        "queryCACertificateRevocationLists",
        &[],
        ret_any(Str),
        &["InvalidSession", "VasaProviderBusy", "StorageFault"],
    ),
];

/// The operation named `name`.
pub fn operation(name: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().find(|o| o.name == name)
}
