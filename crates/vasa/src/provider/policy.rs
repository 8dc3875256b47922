//! Storage policy (SPBM): the capabilities a vVol can ask for, what a
//! container offers by default, and whether each vVol complies.
//!
//! Four capabilities, in this provider's namespace: `Provisioning` (thin,
//! zeroedthick, eagerzeroedthick: the vVol's own), and `Deduplication`,
//! `Compression` and `ReclaimPolicy` (its container's policy). A profile a
//! container cannot satisfy is refused (InvalidProfile) when a vVol is made
//! or moved to it; the profile a vVol was made with is kept in its metadata
//! ([`PROFILE_ID_KEY`], [`PROFILE_RULES_KEY`]), so compliance is checked
//! against it later, after a container's policy changed for instance.

use lacuna_engine::{Compression, ContainerPolicy, Provisioning, ReclaimPolicy};
use lacuna_vvol::{Metadata, VvolId, VvolType};

use super::{Call, OpResult, Outcome, Provider};
use crate::codec::{Struct, Value};
use crate::fault::Fault;

/// The namespace of this provider's capabilities.
pub const CAPABILITY_NAMESPACE: &str = "com.lacuna.vasa";
pub const SCHEMA_ID: &str = "com.lacuna.vasa.capabilities";
/// Metadata keys holding the profile a vVol was given and its rules.
pub const PROFILE_ID_KEY: &str = "LACUNA_StorageProfileId";
pub const PROFILE_RULES_KEY: &str = "LACUNA_StorageProfileRules";

/// What a profile asks of a vVol; `None`: anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements {
    pub provisioning: Option<Provisioning>,
    pub deduplication: Option<bool>,
    pub compression: Option<String>,
    pub reclaim: Option<String>,
}

fn provisioning_name(p: Provisioning) -> &'static str {
    match p {
        Provisioning::Thin => "thin",
        Provisioning::ZeroedThick => "zeroedthick",
        Provisioning::EagerZeroedThick => "eagerzeroedthick",
    }
}

fn parse_provisioning(text: &str) -> Option<Provisioning> {
    [
        Provisioning::Thin,
        Provisioning::ZeroedThick,
        Provisioning::EagerZeroedThick,
    ]
    .into_iter()
    .find(|p| provisioning_name(*p).eq_ignore_ascii_case(text))
}

fn compression_name(c: Compression) -> &'static str {
    match c {
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
        Compression::Off => "off",
    }
}

fn reclaim_name(r: ReclaimPolicy) -> &'static str {
    match r {
        ReclaimPolicy::Off => "off",
        ReclaimPolicy::Low => "low",
        ReclaimPolicy::Fixed { .. } => "fixed",
        ReclaimPolicy::Unlimited => "unlimited",
    }
}

const COMPRESSIONS: [&str; 3] = ["lz4", "zstd", "off"];
const RECLAIMS: [&str; 4] = ["off", "low", "fixed", "unlimited"];

impl Requirements {
    /// Reads the capabilities of this namespace from a profile; others are
    /// not this provider's and are left to whoever defined them.
    pub fn of_profile(profile: &Struct) -> Result<Requirements, Fault> {
        let mut out = Requirements::default();
        let Some(constraints) = profile.child("constraints") else {
            return Ok(out);
        };
        for sub in constraints.children("subProfiles") {
            for capability in sub.children("capability") {
                let Some(id) = capability.child("capabilityId") else {
                    continue;
                };
                if id.opt_str("namespace") != Some(CAPABILITY_NAMESPACE) {
                    continue;
                }
                let name = id.str("id")?;
                let value = capability
                    .children("constraint")
                    .iter()
                    .flat_map(|c| c.children("propertyInstance"))
                    .find_map(|p| p.get("value").cloned())
                    .ok_or_else(|| invalid_profile(format!("{name} has no value")))?;
                out.set(name, &value)?;
            }
        }
        Ok(out)
    }

    fn set(&mut self, name: &str, value: &Value) -> Result<(), Fault> {
        let text = match value {
            Value::Str(s) => s.trim().to_string(),
            Value::Bool(b) => b.to_string(),
            other => {
                return Err(invalid_profile(format!(
                    "{name}: {other:?} is not a value it takes"
                )))
            }
        };
        match name {
            "Provisioning" => {
                self.provisioning = Some(parse_provisioning(&text).ok_or_else(|| {
                    invalid_profile(format!(
                        "Provisioning '{text}' (thin, zeroedthick, eagerzeroedthick)"
                    ))
                })?)
            }
            "Deduplication" => {
                self.deduplication = Some(match text.as_str() {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => {
                        return Err(invalid_profile(format!(
                            "Deduplication '{text}' (true or false)"
                        )))
                    }
                })
            }
            "Compression" if COMPRESSIONS.contains(&text.to_ascii_lowercase().as_str()) => {
                self.compression = Some(text.to_ascii_lowercase())
            }
            "ReclaimPolicy" if RECLAIMS.contains(&text.to_ascii_lowercase().as_str()) => {
                self.reclaim = Some(text.to_ascii_lowercase())
            }
            "Compression" | "ReclaimPolicy" => {
                return Err(invalid_profile(format!(
                    "{name} '{text}' is not one it takes"
                )))
            }
            other => {
                return Err(invalid_profile(format!(
                    "no capability {other} in {CAPABILITY_NAMESPACE}"
                )))
            }
        }
        Ok(())
    }

    /// As kept in a vVol's metadata: `key=value;…`.
    pub fn to_rules(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = self.provisioning {
            parts.push(format!("Provisioning={}", provisioning_name(p)));
        }
        if let Some(d) = self.deduplication {
            parts.push(format!("Deduplication={d}"));
        }
        if let Some(c) = &self.compression {
            parts.push(format!("Compression={c}"));
        }
        if let Some(r) = &self.reclaim {
            parts.push(format!("ReclaimPolicy={r}"));
        }
        parts.join(";")
    }

    pub fn from_rules(text: &str) -> Result<Requirements, Fault> {
        let mut out = Requirements::default();
        for part in text.split(';').filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| invalid_profile(format!("rule '{part}'")))?;
            out.set(name, &Value::Str(value.to_string()))?;
        }
        Ok(out)
    }

    /// The container-level rules `policy` breaks: (capability, expected, current).
    pub fn container_violations(
        &self,
        policy: &ContainerPolicy,
    ) -> Vec<(&'static str, String, String)> {
        let mut out = Vec::new();
        if let Some(d) = self.deduplication {
            if d != policy.dedup {
                out.push(("Deduplication", d.to_string(), policy.dedup.to_string()));
            }
        }
        if let Some(c) = &self.compression {
            let current = compression_name(policy.compression);
            if c != current {
                out.push(("Compression", c.clone(), current.to_string()));
            }
        }
        if let Some(r) = &self.reclaim {
            let current = reclaim_name(policy.reclaim);
            if r != current {
                out.push(("ReclaimPolicy", r.clone(), current.to_string()));
            }
        }
        out
    }
}

fn invalid_profile(message: String) -> Fault {
    Fault::new("InvalidProfile", message)
}

fn description(key: &str, label: &str, summary: &str) -> Struct {
    Struct::new("ExtendedElementDescription")
        .with("key", key)
        .with("label", label)
        .with(
            "messageCatalogKeyPrefix",
            format!("{CAPABILITY_NAMESPACE}.{key}"),
        )
        .with("summary", summary)
}

fn capability_id(id: &'static str) -> Struct {
    Struct::new("CapabilityId")
        .with("id", id)
        .with("namespace", CAPABILITY_NAMESPACE)
}

/// One capability's metadata: a single property of the given type.
fn capability(
    id: &'static str,
    label: &str,
    summary: &str,
    type_name: &str,
    allowed: &[&str],
) -> Struct {
    let mut property = Struct::new("PropertyMetadata");
    if !allowed.is_empty() {
        property = property.with(
            "allowedValue",
            Struct::new("DiscreteSet")
                .with_all("values", allowed.iter().map(|v| Value::Str(v.to_string()))),
        );
    }
    property = property
        .with("id", id)
        .with("mandatory", false)
        .with("summary", description(id, label, summary))
        .with("type", Struct::new("TypeInfo").with("typeName", type_name));
    Struct::new("CapabilityMetadata")
        .with("allowMultipleConstraints", false)
        .with("capabilityId", capability_id(id))
        .with("mandatory", false)
        .with("propertyMetadata", property)
        .with("summary", description(id, label, summary))
}

fn capability_instance(id: &'static str, value: Value) -> Struct {
    Struct::new("CapabilityInstance")
        .with("capabilityId", capability_id(id))
        .with(
            "constraint",
            Struct::new("ConstraintInstance").with(
                "propertyInstance",
                Struct::new("PropertyInstance")
                    .with("id", id)
                    .with("value", value),
            ),
        )
}

impl Provider {
    /// Checks `profile` against `container` and notes it in `metadata`;
    /// answers the provisioning it asks for.
    pub(crate) fn apply_profile(
        &self,
        profile: Option<&Struct>,
        container: &str,
        metadata: &mut Metadata,
    ) -> Result<Option<Provisioning>, Fault> {
        let Some(profile) = profile else {
            return Ok(None);
        };
        let requirements = Requirements::of_profile(profile)?;
        let policy = self.vvols.engine().container_info(container)?.policy;
        if let Some((name, expected, current)) = requirements
            .container_violations(&policy)
            .into_iter()
            .next()
        {
            return Err(invalid_profile(format!(
                "container '{container}' has {name} {current}, the profile asks for {expected}"
            )));
        }
        metadata.insert(PROFILE_ID_KEY.into(), profile.str("profileId")?.to_string());
        metadata.insert(PROFILE_RULES_KEY.into(), requirements.to_rules());
        Ok(requirements.provisioning)
    }

    pub(crate) fn query_capability_metadata(&self, call: &Call) -> OpResult {
        let wanted = call.params.strs("schemaId");
        if !wanted.is_empty() && !wanted.contains(&SCHEMA_ID) {
            return Err(Fault::new(
                "NotFound",
                format!("schemas {wanted:?}: this provider has {SCHEMA_ID}"),
            ));
        }
        let capabilities = [
            capability(
                "Provisioning",
                "Provisioning",
                "How the vVol's space is provisioned: thin, zeroedthick (reserved) or eagerzeroedthick (reserved and zeroed, instantly)",
                "XSD_STRING",
                &["thin", "zeroedthick", "eagerzeroedthick"],
            ),
            capability(
                "Deduplication",
                "Deduplication",
                "New data is deduplicated inline (the container's policy)",
                "XSD_BOOLEAN",
                &[],
            ),
            capability(
                "Compression",
                "Compression",
                "How new data is compressed (the container's policy)",
                "XSD_STRING",
                &COMPRESSIONS,
            ),
            capability(
                "ReclaimPolicy",
                "Space reclamation",
                "How fast freed space is reclaimed (the container's policy): off, low (25 MB/s), fixed or unlimited",
                "XSD_STRING",
                &RECLAIMS,
            ),
        ];
        let schema = Struct::new("CapabilitySchema")
            .with(
                "capabilityMetadataPerCategory",
                Struct::new("CapabilityMetadataPerCategory")
                    .with_all("capabilityMetadata", capabilities)
                    .with("category", "Lacuna"),
            )
            .with(
                "namespaceInfo",
                Struct::new("NamespaceInfo")
                    .with("namespace", CAPABILITY_NAMESPACE)
                    .with("version", "1.0"),
            )
            .with("schemaId", SCHEMA_ID)
            .with(
                "vendorInfo",
                Struct::new("VendorInfo")
                    .with(
                        "info",
                        description("vendor", "Lacuna", "Lacuna software storage array"),
                    )
                    .with("vendorUuid", self.config.array_id.clone()),
            );
        Ok(Outcome::one(schema))
    }

    pub(crate) fn query_default_profile(&self, call: &Call) -> OpResult {
        let container = call.params.str("containerId")?;
        let info = self.vvols.engine().container_info(container)?;
        let mut entity_types = call.params.strs("entityType");
        if entity_types.is_empty() {
            entity_types = VvolType::ALL.iter().map(|t| t.as_str()).collect();
        }
        let policy = &info.policy;
        let sub_profile = Struct::new("SubProfile")
            .with_all(
                "capability",
                [
                    capability_instance("Provisioning", Value::Str("thin".into())),
                    capability_instance("Deduplication", Value::Bool(policy.dedup)),
                    capability_instance(
                        "Compression",
                        Value::Str(compression_name(policy.compression).into()),
                    ),
                    capability_instance(
                        "ReclaimPolicy",
                        Value::Str(reclaim_name(policy.reclaim).into()),
                    ),
                ],
            )
            .with("name", format!("{container} defaults"));
        let profile = Struct::new("DefaultProfile")
            .with(
                "constraints",
                Struct::new("CapabilityConstraints").with("subProfiles", sub_profile),
            )
            .with("createdBy", "Lacuna")
            .with("creationTime", Value::DateTime(info.created_unix_s as i64))
            .with(
                "description",
                format!("What container '{container}' gives a vVol without a profile"),
            )
            .with("generationId", 1i64)
            .with("name", format!("Lacuna {container} default"))
            .with("profileId", format!("lacuna-default:{container}"))
            .with_all("entityType", entity_types.iter().map(|t| t.to_string()));
        Ok(Outcome::one(profile))
    }

    pub(crate) fn query_compliance_result(&self, call: &Call) -> OpResult {
        let now = crate::now_unix_s() as i64;
        let mut out = Vec::new();
        for subject in call.params.children("compliance") {
            let asked_profile = subject.opt_str("profileId");
            for object in subject.strs("objectId") {
                out.push(self.compliance_of(object, asked_profile, now)?);
            }
        }
        Ok(Outcome::many(out))
    }

    fn compliance_of(
        &self,
        object: &str,
        asked_profile: Option<&str>,
        now: i64,
    ) -> Result<Struct, Fault> {
        let id = VvolId::parse(object)?;
        let info = self.vvols.get(&id)?;
        let kept_profile = info.rec.metadata.get(PROFILE_ID_KEY).cloned();
        let rules = info
            .rec
            .metadata
            .get(PROFILE_RULES_KEY)
            .cloned()
            .unwrap_or_default();
        let requirements = Requirements::from_rules(&rules)?;
        let policy = self
            .vvols
            .engine()
            .container_info(&info.rec.container)?
            .policy;
        let mut violations = requirements.container_violations(&policy);
        if let Some(p) = requirements.provisioning {
            if p != info.rec.provisioning {
                violations.push((
                    "Provisioning",
                    provisioning_name(p).into(),
                    provisioning_name(info.rec.provisioning).into(),
                ));
            }
        }
        let mismatch = asked_profile.is_some() && asked_profile != kept_profile.as_deref();
        let status = if mismatch {
            "unknown"
        } else if violations.is_empty() {
            "compliant"
        } else {
            "nonCompliant"
        };
        Ok(Struct::new("ComplianceResult")
            .with("checkTime", Value::DateTime(now))
            .with("complianceStatus", status)
            .with("objectId", object)
            .with_opt("profileId", kept_profile)
            .with("profileMismatch", mismatch)
            .with_all(
                "violatedPolicy",
                violations.into_iter().map(|(name, expected, current)| {
                    Struct::new("PolicyStatus")
                        .with(
                            "currentValue",
                            capability_instance(name, Value::Str(current)),
                        )
                        .with(
                            "expectedValue",
                            capability_instance(name, Value::Str(expected)),
                        )
                }),
            ))
    }

    /// A new profile for a vVol: its container must satisfy it, and a vVol's
    /// provisioning is fixed at creation (a different one is NotSupported:
    /// clone it with the new profile instead).
    pub(crate) fn update_storage_profile(&self, call: &Call) -> OpResult {
        let id = VvolId::parse(call.params.str("vvolId")?)?;
        let profile = call
            .params
            .child("newStorageProfile")
            .ok_or_else(|| Fault::invalid_argument("no newStorageProfile"))?;
        let info = self.vvols.get(&id)?;
        let mut metadata = Metadata::new();
        let provisioning = self.apply_profile(Some(profile), &info.rec.container, &mut metadata)?;
        if provisioning.is_some_and(|p| p != info.rec.provisioning) {
            return Err(Fault::new(
                "NotSupported",
                format!(
                    "vVol {id} is {}: its provisioning is set when it is made (clone it with the new profile)",
                    provisioning_name(info.rec.provisioning)
                ),
            ));
        }
        let tasked = self.vvols.update_metadata_tasked(
            &id,
            &metadata,
            "updateStorageProfileForVirtualVolume",
        );
        if let Err(fault) = &tasked.result {
            return Err(fault.clone().into());
        }
        Ok(Outcome::one(self.task_info(&tasked.task)))
    }
}
