//! What a virtual volume is: its id, type, container, size, provisioning,
//! key/value metadata and lineage, and the limits on each. The names and
//! types follow VASA 2.0 (`rfc4122.<uuid>` ids, sizes in whole MiB, the
//! `VMW_*` metadata keys are ordinary keys).

use std::collections::BTreeMap;
use std::fmt;

use lacuna_engine::Provisioning;
use serde::{Deserialize, Serialize};

use crate::fault::VvolFault;

/// Prefix of a vVol id, as VASA writes them.
const ID_PREFIX: &str = "rfc4122.";
/// Prefix of the engine volume that holds a vVol's data (`vvol-<uuid>`).
pub const VOLUME_PREFIX: &str = "vvol-";

/// Most metadata pairs one vVol keeps.
pub const MAX_METADATA_PAIRS: usize = 64;
/// Longest metadata key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Longest metadata value, in bytes.
pub const MAX_VALUE_BYTES: usize = 4096;
/// Largest vVol, in MiB (the engine's largest volume).
pub const MAX_SIZE_MIB: u64 = lacuna_engine::MAX_VOLUME_BYTES / MIB;

pub(crate) const MIB: u64 = 1 << 20;

/// Length of a vVol id: the prefix and a UUID's 36 characters.
pub(crate) const ID_LEN: usize = ID_PREFIX.len() + 36;

/// A vVol's id: `rfc4122.` and a lowercase UUID. Parsed case-insensitively.
///
/// Kept inline, not on the heap: the catalog's indexes hold every id several
/// times and a browse walks a thousand of them, so an id is compared, hashed
/// and copied where it lies. Its order is the order of its text.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(value_type = String))]
pub struct VvolId([u8; ID_LEN]);

impl VvolId {
    /// A new random (version 4) id.
    pub fn random() -> VvolId {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).expect("the system has randomness");
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!(
            "{ID_PREFIX}{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        );
        VvolId::parse(&text).expect("a random id is well formed")
    }

    pub fn parse(text: &str) -> Result<VvolId, VvolFault> {
        // 8-4-4-4-12 hex digits: dashes at these places, hex digits elsewhere.
        const DASHES: [usize; 4] = [8, 13, 18, 23];
        let bytes = text.as_bytes();
        let prefixed = bytes.len() == ID_LEN
            && bytes[..ID_PREFIX.len()].eq_ignore_ascii_case(ID_PREFIX.as_bytes());
        let well_formed = prefixed
            && bytes[ID_PREFIX.len()..].iter().enumerate().all(|(at, b)| {
                if DASHES.contains(&at) {
                    *b == b'-'
                } else {
                    b.is_ascii_hexdigit()
                }
            });
        if !well_formed {
            return Err(VvolFault::InvalidArgument(format!(
                "'{}' is not a vVol id (rfc4122.xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)",
                text.escape_debug()
            )));
        }
        let mut id = [0u8; ID_LEN];
        id.copy_from_slice(bytes);
        id.make_ascii_lowercase();
        Ok(VvolId(id))
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("a vVol id is ASCII")
    }

    /// The UUID without the prefix.
    pub fn uuid(&self) -> &str {
        &self.as_str()[ID_PREFIX.len()..]
    }

    /// The engine volume of a vVol with its own data.
    pub fn volume_name(&self) -> String {
        format!("{VOLUME_PREFIX}{}", self.uuid())
    }
}

impl TryFrom<String> for VvolId {
    type Error = VvolFault;
    fn try_from(text: String) -> Result<Self, VvolFault> {
        VvolId::parse(&text)
    }
}

impl From<VvolId> for String {
    fn from(id: VvolId) -> String {
        id.as_str().to_string()
    }
}

impl fmt::Display for VvolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for VvolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VvolId({:?})", self.as_str())
    }
}

impl Serialize for VvolId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for VvolId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        VvolId::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// What a vVol holds for its VM (VASA's `VirtualVolumeTypeEnum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum VvolType {
    /// The VM's home: its configuration files (a small file system).
    Config,
    /// A virtual disk.
    Data,
    /// The VM's swap file: kept across power cycles, emptied at unbind.
    Swap,
    /// A snapshot's memory image.
    Memory,
    Other,
}

impl VvolType {
    pub const ALL: [VvolType; 5] = [
        VvolType::Config,
        VvolType::Data,
        VvolType::Swap,
        VvolType::Memory,
        VvolType::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VvolType::Config => "Config",
            VvolType::Data => "Data",
            VvolType::Swap => "Swap",
            VvolType::Memory => "Memory",
            VvolType::Other => "Other",
        }
    }

    pub fn parse(text: &str) -> Result<VvolType, VvolFault> {
        VvolType::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(text))
            .ok_or_else(|| {
                VvolFault::InvalidArgument(format!(
                    "'{}' is not a vVol type (Config, Data, Swap, Memory, Other)",
                    text.escape_debug()
                ))
            })
    }
}

/// How a snapshot vVol may be used: read-only (an engine snapshot) or
/// writable (a clone of one, taken at the same instant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum SnapshotKind {
    #[default]
    ReadOnly,
    ReadWrite,
}

/// A vVol's key/value metadata, checked against the limits.
pub type Metadata = BTreeMap<String, String>;

/// Checks one key and value. Keys are printable ASCII without spaces; values
/// any text without control characters.
pub fn check_pair(key: &str, value: &str) -> Result<(), VvolFault> {
    let key_ok =
        !key.is_empty() && key.len() <= MAX_KEY_BYTES && key.bytes().all(|b| b.is_ascii_graphic());
    if !key_ok {
        return Err(VvolFault::InvalidArgument(format!(
            "metadata key '{}' is not 1 to {MAX_KEY_BYTES} printable ASCII characters",
            key.escape_debug()
        )));
    }
    if value.len() > MAX_VALUE_BYTES || value.chars().any(char::is_control) {
        return Err(VvolFault::InvalidArgument(format!(
            "the value of metadata key '{key}' is longer than {MAX_VALUE_BYTES} bytes or holds control characters"
        )));
    }
    Ok(())
}

/// Checks a whole metadata set.
pub fn check_metadata(metadata: &Metadata) -> Result<(), VvolFault> {
    if metadata.len() > MAX_METADATA_PAIRS {
        return Err(VvolFault::InvalidArgument(format!(
            "{} metadata pairs: at most {MAX_METADATA_PAIRS}",
            metadata.len()
        )));
    }
    metadata.iter().try_for_each(|(k, v)| check_pair(k, v))
}

/// Checks a size in MiB.
pub fn check_size_mib(size_mib: u64) -> Result<(), VvolFault> {
    if (1..=MAX_SIZE_MIB).contains(&size_mib) {
        Ok(())
    } else {
        Err(VvolFault::InvalidArgument(format!(
            "size {size_mib} MiB: a vVol is 1 to {MAX_SIZE_MIB} MiB"
        )))
    }
}

/// A snapshot vVol's origin: the vVol it is a snapshot of, and its kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotOf {
    pub base: VvolId,
    pub kind: SnapshotKind,
}

/// One vVol as kept (in the store, as JSON) and answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VvolRec {
    pub id: VvolId,
    pub vvol_type: VvolType,
    /// The storage container (engine container name) that holds it.
    pub container: String,
    pub size_mib: u64,
    pub provisioning: Provisioning,
    pub metadata: Metadata,
    /// The vVol it was cloned or snapshotted from, if any.
    pub parent: Option<VvolId>,
    /// Set for a snapshot vVol.
    pub snapshot: Option<SnapshotOf>,
    /// The engine object (volume, or snapshot of the base's volume) holding
    /// its data: what the record binds to, never reused. Also the vVol's
    /// second-level LUN id under a protocol endpoint.
    pub object_id: u64,
    pub created_unix_s: u64,
}

impl VvolRec {
    /// The engine object's name: the vVol's volume, or for a read-only
    /// snapshot vVol the snapshot of its base's volume.
    pub fn engine_name(&self) -> String {
        match &self.snapshot {
            Some(SnapshotOf {
                base,
                kind: SnapshotKind::ReadOnly,
            }) => snapshot_name(base, &self.id),
            _ => self.id.volume_name(),
        }
    }

    /// Whether writes reach it (a read-only snapshot vVol refuses them).
    pub fn read_only(&self) -> bool {
        matches!(
            self.snapshot,
            Some(SnapshotOf {
                kind: SnapshotKind::ReadOnly,
                ..
            })
        )
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_mib * MIB
    }
}

/// The engine snapshot a snapshot vVol `snapshot` of `base` is taken as
/// (`vvol-<base uuid>@<snapshot uuid>`).
pub fn snapshot_name(base: &VvolId, snapshot: &VvolId) -> String {
    format!("{}@{}", base.volume_name(), snapshot.uuid())
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever a host sends as an id, key or value: an answer, never a
        /// panic; an id that parses is one `parse` gives back unchanged.
        #[test]
        fn any_text_is_an_answer(text in ".{0,80}", value in ".{0,80}") {
            if let Ok(id) = VvolId::parse(&text) {
                proptest::prop_assert_eq!(VvolId::parse(id.as_str()).unwrap(), id.clone());
                proptest::prop_assert!(id.as_str().len() == 44);
            }
            let _ = check_pair(&text, &value);
            let _ = VvolType::parse(&text);
        }
    }

    #[test]
    fn ids_parse_case_insensitively_and_refuse_junk() {
        let id = VvolId::random();
        assert_eq!(
            VvolId::parse(&id.as_str().to_uppercase().replace("RFC", "rfc")).unwrap(),
            id
        );
        assert_eq!(id.volume_name().len(), 41);
        for bad in [
            "",
            "rfc4122.",
            "rfc4122.xyz",
            "naa.600",
            "rfc4122.0000000-0000-0000-0000-000000000000",
            "rfc4122.00000000-00000-000-0000-000000000000",
            "rfc4122.00000000-0000-0000-0000-00000000000g",
            "rfc4122.00000000-0000-0000-0000-0000000000000",
            "rfc4122.00000000-0000-0000-0000+000000000000",
        ] {
            assert!(VvolId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn metadata_limits_are_held() {
        assert!(check_pair("VMW_VVolName", "disk 1").is_ok());
        assert!(check_pair("", "x").is_err());
        assert!(check_pair("a b", "x").is_err());
        assert!(check_pair("k", "line\nbreak").is_err());
        assert!(check_pair(&"k".repeat(MAX_KEY_BYTES + 1), "x").is_err());
        assert!(check_pair("k", &"v".repeat(MAX_VALUE_BYTES + 1)).is_err());
        let many: Metadata = (0..=MAX_METADATA_PAIRS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        assert!(check_metadata(&many).is_err());
        assert!(check_size_mib(0).is_err());
        assert!(check_size_mib(MAX_SIZE_MIB + 1).is_err());
    }
}
