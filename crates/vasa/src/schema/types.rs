//! The complex types: each with its namespace, its base (whose elements come
//! first, in the base's namespace) and its elements in schema order.

use super::Field as F;
use super::Ns;
use super::Ty::{self, Any, Base64, Bool, Complex as C, DateTime, Int, Long, Str};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeDef {
    pub name: &'static str,
    pub ns: Ns,
    pub base: Option<&'static str>,
    pub fields: &'static [F],
}

const fn t(name: &'static str, ns: Ns, fields: &'static [F]) -> TypeDef {
    TypeDef {
        name,
        ns,
        base: None,
        fields,
    }
}

const fn ext(name: &'static str, ns: Ns, base: &'static str, fields: &'static [F]) -> TypeDef {
    TypeDef {
        name,
        ns,
        base: Some(base),
        fields,
    }
}

/// A fault type: `vasa:Exception` and the fault's own elements.
const fn fault(name: &'static str, fields: &'static [F]) -> TypeDef {
    ext(name, Ns::Fault, "Exception", fields)
}

const NVP: Ty = C("NameValuePair");

pub static TYPES: &[TypeDef] = &[
    // ---- vasa
    t("Exception", Ns::Vasa, &[F::opt("Exception", Any)]),
    // ---- data
    t(
        "BaseStorageEntity",
        Ns::Data,
        &[F::opt("uniqueIdentifier", Str)],
    ),
    t(
        "NameValuePair",
        Ns::Data,
        &[F::opt("parameterName", Str), F::opt("parameterValue", Str)],
    ),
    ext(
        "HostInitiatorInfo",
        Ns::Data,
        "BaseStorageEntity",
        &[
            F::opt("iscsiIdentifier", Str),
            F::opt("nodeWwn", Str),
            F::opt("portWwn", Str),
        ],
    ),
    t(
        "MountInfo",
        Ns::Data,
        &[F::opt("filePath", Str), F::opt("serverName", Str)],
    ),
    t(
        "UsageContext",
        Ns::Data,
        &[
            F::any("chapUsername", Str),
            F::opt("hostGuid", Str),
            F::any("hostInitiator", C("HostInitiatorInfo")),
            F::any("hostIoIpAddress", Str),
            F::any("iscsiInitiatorIpAddress", Str),
            F::any("mountPoint", C("MountInfo")),
            F::opt("sessionTimeoutInSeconds", Long),
            F::any("subscribeEvent", Str),
            F::opt("vcGuid", Str),
        ],
    ),
    t(
        "VendorModel",
        Ns::Data,
        &[F::opt("modelId", Str), F::opt("vendorId", Str)],
    ),
    t(
        "VasaProviderInfo",
        Ns::Data,
        &[
            F::opt("defaultNamespace", Str),
            F::opt("defaultSessionTimeoutInSeconds", Long),
            F::opt("maxBatchSize", Long),
            F::opt("maxConcurrentRequestsPerSession", Long),
            F::opt("name", Str),
            F::opt("needsExplicitActivation", Bool),
            F::opt("retainVasaProviderCertificate", Bool),
            F::opt("sessionId", Str),
            F::some("supportedProfile", Str),
            F::any("supportedVendorModel", C("VendorModel")),
            F::one("uid", Str),
            F::opt("vasaApiVersion", Str),
            F::opt("vasaProviderVersion", Str),
        ],
    ),
    ext(
        "StorageArray",
        Ns::Data,
        "BaseStorageEntity",
        &[
            F::any("alternateName", Str),
            F::opt("arrayName", Str),
            F::opt("firmware", Str),
            F::opt("modelId", Str),
            F::one("priority", Int),
            F::any("supportedBlock", Str),
            F::any("supportedFileSystem", Str),
            F::any("supportedProfile", Str),
            F::opt("vendorId", Str),
        ],
    ),
    ext(
        "StorageContainer",
        Ns::Data,
        "BaseStorageEntity",
        &[
            F::one("maxVvolSizeMB", Long),
            F::one("name", Str),
            F::opt("protocolEndPointType", Str),
        ],
    ),
    t(
        "StorageEvent",
        Ns::Data,
        &[
            F::opt("arrayId", Str),
            F::opt("eventConfigType", Str),
            F::opt("eventId", Long),
            F::opt("eventObjType", Str),
            F::opt("eventTimeStamp", DateTime),
            F::opt("eventType", Str),
            F::opt("messageId", Str),
            F::opt("objectId", Str),
            F::any("parameterList", NVP),
        ],
    ),
    t(
        "StorageAlarm",
        Ns::Data,
        &[
            F::opt("alarmId", Long),
            F::opt("alarmTimeStamp", DateTime),
            F::opt("alarmType", Str),
            F::opt("containerId", Str),
            F::opt("messageId", Str),
            F::opt("objectId", Str),
            F::opt("objectType", Str),
            F::any("parameterList", NVP),
            F::opt("status", Str),
        ],
    ),
    t(
        "MessageCatalog",
        Ns::Data,
        &[
            F::opt("catalogName", Str),
            F::opt("catalogUri", Str),
            F::opt("catalogVersion", Str),
            F::opt("lastModified", DateTime),
            F::opt("locale", Str),
            F::opt("moduleName", Str),
        ],
    ),
    // ---- vvol
    t(
        "ProtocolEndpointInbandId",
        Ns::Vvol,
        &[
            F::opt("ipAddress", Str),
            F::opt("lunId", Str),
            F::one("protocolEndpointType", Str),
            F::opt("serverMajor", Str),
            F::opt("serverMinor", Str),
            F::opt("serverMount", Str),
            F::opt("serverScope", Str),
        ],
    ),
    ext(
        "ProtocolEndpoint",
        Ns::Vvol,
        "BaseStorageEntity",
        &[
            F::opt("authType", Str),
            F::one("inBandBindCapability", Str),
            F::one("inBandId", C("ProtocolEndpointInbandId")),
            F::any("transportIpAddress", Str),
        ],
    ),
    t(
        "TaskInfo",
        Ns::Vvol,
        &[
            F::opt("arrayId", Str),
            F::one("cancelable", Bool),
            F::one("cancelled", Bool),
            F::opt("error", Any),
            F::opt("estimatedTimeToComplete", DateTime),
            F::one("name", Str),
            F::one("progress", Int),
            F::one("progressUpdateAvailable", Bool),
            F::opt("result", Any),
            F::one("startTime", DateTime),
            F::one("taskId", Str),
            F::one("taskState", Str),
        ],
    ),
    ext(
        "VirtualVolumeInfo",
        Ns::Vvol,
        "BaseStorageEntity",
        &[F::any("metadata", NVP), F::one("vvolId", Str)],
    ),
    ext(
        "VirtualVolumeHandle",
        Ns::Vvol,
        "BaseStorageEntity",
        &[
            F::one("peInBandId", C("ProtocolEndpointInbandId")),
            F::one("vvolSecondaryId", Str),
        ],
    ),
    t(
        "BatchVirtualVolumeHandleResult",
        Ns::Vvol,
        &[
            F::opt("fault", Any),
            F::opt("vvolHandle", C("VirtualVolumeHandle")),
            F::one("vvolId", Str),
            F::opt("vvolInfo", C("VirtualVolumeInfo")),
            F::opt("vvolLogicalSize", Long),
        ],
    ),
    t("BatchErrorResult", Ns::Vvol, &[F::some("error", Any)]),
    t(
        "BatchReturnStatus",
        Ns::Vvol,
        &[
            F::opt("errorResult", C("BatchErrorResult")),
            F::one("uniqueId", Str),
        ],
    ),
    t(
        "SpaceStats",
        Ns::Vvol,
        &[
            F::one("committed", Long),
            F::one("logical", Long),
            F::one("objectId", Str),
            F::one("unshared", Long),
            F::one("unsharedValid", Bool),
        ],
    ),
    t(
        "ContainerSpaceStats",
        Ns::Vvol,
        &[
            F::one("logicalFree", Long),
            F::one("logicalLimit", Long),
            F::one("logicalUsed", Long),
            F::one("objectId", Str),
            F::one("physicalFree", Long),
            F::one("physicalTotal", Long),
            F::one("physicalUsed", Long),
        ],
    ),
    t(
        "PrepareSnapshotResult",
        Ns::Vvol,
        &[
            F::one("parentInfo", C("VirtualVolumeInfo")),
            F::one("parentStats", C("SpaceStats")),
            F::one("snapshotId", Str),
        ],
    ),
    t(
        "VirtualVolumeBitmapResult",
        Ns::Vvol,
        &[F::one("chunkBitmap", Base64)],
    ),
    t(
        "VirtualVolumeUnsharedChunksResult",
        Ns::Vvol,
        &[
            F::one("chunkSizeBytes", Long),
            F::one("scannedChunks", Long),
            F::one("unsharedChunks", Long),
        ],
    ),
    t(
        "QueryConstraint",
        Ns::Vvol,
        &[F::one("key", Str), F::opt("value", Str)],
    ),
    ext(
        "RebindEvent",
        Ns::Vvol,
        "StorageEvent",
        &[F::some("vvolId", Str)],
    ),
    // ---- policy
    t(
        "KeyAnyValue",
        Ns::Policy,
        &[F::one("key", Str), F::one("value", Any)],
    ),
    t(
        "ExtendedElementDescription",
        Ns::Policy,
        &[
            F::one("key", Str),
            F::one("label", Str),
            F::any("messageArg", C("KeyAnyValue")),
            F::one("messageCatalogKeyPrefix", Str),
            F::one("summary", Str),
        ],
    ),
    // ---- capability
    t(
        "CapabilityId",
        Ns::Capability,
        &[F::one("id", Str), F::one("namespace", Str)],
    ),
    t(
        "PropertyInstance",
        Ns::Capability,
        &[F::one("id", Str), F::one("value", Any)],
    ),
    t(
        "ConstraintInstance",
        Ns::Capability,
        &[F::some("propertyInstance", C("PropertyInstance"))],
    ),
    t(
        "CapabilityInstance",
        Ns::Capability,
        &[
            F::one("capabilityId", C("CapabilityId")),
            F::some("constraint", C("ConstraintInstance")),
        ],
    ),
    t("TypeInfo", Ns::Capability, &[F::one("typeName", Str)]),
    ext(
        "GenericTypeInfo",
        Ns::Capability,
        "TypeInfo",
        &[F::one("genericTypeName", Str)],
    ),
    t(
        "PropertyMetadata",
        Ns::Capability,
        &[
            F::any("allowedValue", Any),
            F::opt("defaultValue", Any),
            F::opt("hint", Bool),
            F::one("id", Str),
            F::one("mandatory", Bool),
            F::opt("requirementsTypeHint", Str),
            F::one("summary", C("ExtendedElementDescription")),
            F::one("type", C("TypeInfo")),
        ],
    ),
    t(
        "CapabilityMetadata",
        Ns::Capability,
        &[
            F::opt("allowMultipleConstraints", Bool),
            F::one("capabilityId", C("CapabilityId")),
            F::opt("hint", Bool),
            F::opt("keyId", Str),
            F::opt("mandatory", Bool),
            F::some("propertyMetadata", C("PropertyMetadata")),
            F::one("summary", C("ExtendedElementDescription")),
        ],
    ),
    // ---- capability types
    t(
        "DiscreteSet",
        Ns::CapabilityTypes,
        &[F::some("values", Any)],
    ),
    t(
        "Range",
        Ns::CapabilityTypes,
        &[F::one("max", Any), F::one("min", Any)],
    ),
    // ---- capability provider
    t(
        "NamespaceInfo",
        Ns::CapabilityProvider,
        &[F::one("namespace", Str), F::one("version", Str)],
    ),
    t(
        "VendorInfo",
        Ns::CapabilityProvider,
        &[
            F::one("info", C("ExtendedElementDescription")),
            F::one("vendorUuid", Str),
        ],
    ),
    t(
        "CapabilityMetadataPerCategory",
        Ns::CapabilityProvider,
        &[
            F::some("capabilityMetadata", C("CapabilityMetadata")),
            F::one("category", Str),
        ],
    ),
    t(
        "CapabilitySchema",
        Ns::CapabilityProvider,
        &[
            F::some(
                "capabilityMetadataPerCategory",
                C("CapabilityMetadataPerCategory"),
            ),
            F::one("namespaceInfo", C("NamespaceInfo")),
            F::one("schemaId", Str),
            F::one("vendorInfo", C("VendorInfo")),
        ],
    ),
    // ---- profile
    t(
        "SubProfile",
        Ns::Profile,
        &[
            F::some("capability", C("CapabilityInstance")),
            F::one("name", Str),
        ],
    ),
    t(
        "CapabilityConstraints",
        Ns::Profile,
        &[F::any("subProfiles", C("SubProfile"))],
    ),
    t(
        "StorageProfile",
        Ns::Profile,
        &[
            F::opt("constraints", C("CapabilityConstraints")),
            F::one("createdBy", Str),
            F::one("creationTime", DateTime),
            F::opt("description", Str),
            F::one("generationId", Long),
            F::opt("lastUpdatedBy", Str),
            F::opt("lastUpdatedTime", DateTime),
            F::one("name", Str),
            F::one("profileId", Str),
        ],
    ),
    ext(
        "DefaultProfile",
        Ns::Profile,
        "StorageProfile",
        &[F::any("entityType", Str)],
    ),
    // ---- compliance
    t(
        "ComplianceSubject",
        Ns::Compliance,
        &[
            F::opt("generationId", Long),
            F::some("objectId", Str),
            F::opt("profileId", Str),
        ],
    ),
    t(
        "OperationalStatus",
        Ns::Compliance,
        &[
            F::opt("healthy", Bool),
            F::opt("operationETA", DateTime),
            F::opt("operationProgress", Long),
            F::opt("transitional", Bool),
        ],
    ),
    t(
        "PolicyStatus",
        Ns::Compliance,
        &[
            F::one("currentValue", C("CapabilityInstance")),
            F::one("expectedValue", C("CapabilityInstance")),
        ],
    ),
    t(
        "ComplianceResult",
        Ns::Compliance,
        &[
            F::one("checkTime", DateTime),
            F::one("complianceStatus", Str),
            F::one("objectId", Str),
            F::opt("operationalStatus", C("OperationalStatus")),
            F::opt("profileId", Str),
            F::one("profileMismatch", Bool),
            F::any("violatedPolicy", C("PolicyStatus")),
        ],
    ),
    // ---- faults
    fault(
        "InactiveProvider",
        &[F::opt("entityId", Str), F::opt("entityType", Str)],
    ),
    fault("IncompatibleVolume", &[]),
    fault("InvalidArgument", &[]),
    fault(
        "InvalidCertificate",
        &[F::any("certificate", Str), F::any("crl", Str)],
    ),
    fault("InvalidLogin", &[]),
    fault("InvalidProfile", &[]),
    fault("InvalidSession", &[]),
    fault("LostAlarm", &[]),
    fault("LostEvent", &[]),
    fault("NotCancellable", &[]),
    fault("NotFound", &[]),
    fault("NotImplemented", &[]),
    fault("NotSupported", &[]),
    fault("OutOfResource", &[]),
    fault("PermissionDenied", &[]),
    fault("ResourceInUse", &[]),
    fault("SnapshotTooMany", &[]),
    fault(
        "StorageFault",
        &[F::opt("faultMessageId", Str), F::any("parameterList", NVP)],
    ),
    fault("Timeout", &[]),
    fault("TooMany", &[F::opt("maxBatchSize", Long)]),
    fault("VasaProviderBusy", &[]),
];

/// The type named `name`.
pub fn type_def(name: &str) -> Option<&'static TypeDef> {
    index().get(name).map(|&(def, _)| def)
}

/// Each type by name with its elements in order (the base's first): looked up
/// for every element encoded and decoded, so made once.
type Index = std::collections::HashMap<&'static str, (&'static TypeDef, Vec<(Ns, &'static F)>)>;

fn index() -> &'static Index {
    static INDEX: std::sync::OnceLock<Index> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        TYPES
            .iter()
            .map(|t| (t.name, (t, t.fields_in_order())))
            .collect()
    })
}

impl TypeDef {
    /// Every element in order, the base's first, each with the namespace of
    /// the type that declares it.
    pub fn all_fields(&self) -> &'static [(Ns, &'static F)] {
        &index()[self.name].1
    }

    fn fields_in_order(&self) -> Vec<(Ns, &'static F)> {
        let mut chain = vec![self];
        let mut at = self;
        while let Some(base) = at.base {
            at = TYPES
                .iter()
                .find(|t| t.name == base)
                .expect("a base type is in the table");
            chain.push(at);
        }
        chain
            .iter()
            .rev()
            .flat_map(|t| t.fields.iter().map(move |f| (t.ns, f)))
            .collect()
    }

    /// Whether this type is `ancestor` or derives from it.
    pub fn derives_from(&self, ancestor: &str) -> bool {
        let mut at = Some(self);
        while let Some(t) = at {
            if t.name == ancestor {
                return true;
            }
            at = t.base.and_then(type_def);
        }
        false
    }
}
