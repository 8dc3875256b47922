//! Hosts and LUN masking as the API sees them: what a host is (initiator names,
//! CHAP users, the volumes it sees at which LUN), the requests that change it,
//! and the [`HostControl`] trait the daemon implements over its host registry.
//!
//! CHAP secrets and NBD pre-shared keys travel one way only: in a create (or
//! set-key) request. No answer, error message or `Debug` rendering of these types
//! contains one.

use lacuna_engine::EngineError;
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
use utoipa::ToSchema;

/// Logical block sizes a LUN may be presented with: 512 (512e) and 4096 (4Kn).
pub const BLOCK_SIZES: [u32; 2] = [512, 4096];
/// Block size of a LUN when the connect request names none.
pub const DEFAULT_BLOCK_SIZE_BYTES: u32 = 512;

/// A host as the API shows it: nothing it could log in with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HostInfo {
    pub name: String,
    /// Initiator names that log in as this host
    pub iqns: Vec<String>,
    /// One-way CHAP user; null without CHAP
    #[schema(required = true)]
    pub chap_user: Option<String>,
    /// Mutual CHAP user; null without mutual CHAP
    #[schema(required = true)]
    pub mutual_chap_user: Option<String>,
    /// The host has an NBD TLS pre-shared key (never shown)
    #[serde(default)]
    #[schema(required = true)]
    pub nbd_psk: bool,
    /// What the host sees, by ascending LUN
    pub luns: Vec<LunInfo>,
    /// The LUN of the host's vVol protocol endpoint; null without one
    #[serde(default)]
    #[schema(required = true)]
    pub protocol_endpoint_lun: Option<u64>,
}

/// One LUN of a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LunInfo {
    #[schema(maximum = 16383)]
    pub lun: u64,
    /// VOL, or VOL@SNAP for a snapshot
    pub volume: String,
    /// Logical block size presented: one of [`BLOCK_SIZES`]
    #[schema(schema_with = presented_block_size)]
    pub block_size_bytes: u32,
    /// Presented as removable medium
    pub removable: bool,
    /// A snapshot LUN: write-protected
    pub read_only: bool,
}

/// One of [`BLOCK_SIZES`], as a schema (`schema_with` leaves doc comments out).
fn block_size(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .enum_values(Some(BLOCK_SIZES))
        .description(Some(description))
}

fn presented_block_size() -> ObjectBuilder {
    block_size("Logical block size presented")
}

fn requested_block_size() -> ObjectBuilder {
    block_size("Logical block size presented: 512 (512e) or 4096 (4Kn)")
        .default(Some(DEFAULT_BLOCK_SIZE_BYTES.into()))
}

impl LunInfo {
    /// A LUN as presented: read-only exactly when `volume` is a snapshot.
    pub fn new(lun: u64, volume: &str, block_size_bytes: u32, removable: bool) -> LunInfo {
        LunInfo {
            lun,
            volume: volume.to_string(),
            block_size_bytes,
            removable,
            read_only: volume.contains('@'),
        }
    }
}

/// CHAP credentials handed to [`HostControl::create_host`]. `Debug` hides the
/// secret, so a logged request or error cannot leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct ChapCredentials {
    pub user: String,
    pub secret: String,
}

impl std::fmt::Debug for ChapCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChapCredentials")
            .field("user", &self.user)
            .field("secret", &"<hidden>")
            .finish()
    }
}

/// A host to create, as checked by the API (each CHAP user comes with its
/// secret). `Debug` hides the NBD key.
#[derive(Clone, PartialEq, Eq)]
pub struct NewHost {
    pub name: String,
    pub iqns: Vec<String>,
    pub chap: Option<ChapCredentials>,
    pub mutual_chap: Option<ChapCredentials>,
    /// The NBD TLS pre-shared key in hex (checked by the host registry).
    pub nbd_psk_key: Option<String>,
}

impl std::fmt::Debug for NewHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewHost")
            .field("name", &self.name)
            .field("iqns", &self.iqns)
            .field("chap", &self.chap)
            .field("mutual_chap", &self.mutual_chap)
            .field(
                "nbd_psk_key",
                &self.nbd_psk_key.as_ref().map(|_| "<hidden>"),
            )
            .finish()
    }
}

/// A volume (or snapshot) to connect to a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLun {
    /// `VOL`, or `VOL@SNAP` (presented read-only).
    pub volume: String,
    /// The LUN to use; the lowest free one when `None`.
    pub lun: Option<u64>,
    /// One of [`BLOCK_SIZES`].
    pub block_size_bytes: u32,
    pub removable: bool,
}

/// Body of `POST /v1/hosts`.
#[derive(Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateHostRequest {
    /// 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.'); also the host's NBD TLS-PSK identity
    pub name: String,
    /// iSCSI initiator names that log in as this host, none of them another host's; may be
    /// empty (or absent) only with `nbd_psk_key`.
    #[serde(default)]
    #[schema(schema_with = initiator_names)]
    pub iqns: Vec<String>,
    /// One-way CHAP: the user the initiator authenticates as (needs chap_secret)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 255)]
    pub chap_user: Option<String>,
    /// One-way CHAP secret; never returned
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 12, max_length = 255, write_only)]
    pub chap_secret: Option<String>,
    /// Mutual CHAP: the user the target authenticates to the initiator as (needs one-way CHAP
    /// and mutual_chap_secret)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 255)]
    pub mutual_chap_user: Option<String>,
    /// Mutual CHAP secret; never returned
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 12, max_length = 255, write_only)]
    pub mutual_chap_secret: Option<String>,
    /// NBD TLS pre-shared key in hex (16 to 64 bytes); NBD clients that prove it with the host's
    /// name as PSK identity open the volumes connected to the host. Never returned
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^([0-9a-fA-F]{2}){16,64}$", write_only)]
    pub nbd_psk_key: Option<String>,
}

/// The initiator names of a host, as a schema.
fn initiator_names() -> ArrayBuilder {
    const DESCRIPTION: &str = "iSCSI initiator names that log in as this host, none of them \
        another host's; may be empty (or absent) only with nbd_psk_key";
    let name = ObjectBuilder::new()
        .schema_type(Type::String)
        .max_length(Some(223))
        .description(Some("iqn.…, eui.… or naa.…"));
    ArrayBuilder::new()
        .items(name)
        .max_items(Some(64))
        .unique_items(true)
        .description(Some(DESCRIPTION))
}

/// Hides the secrets.
impl std::fmt::Debug for CreateHostRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |secret: &Option<String>| secret.as_ref().map(|_| "<hidden>");
        f.debug_struct("CreateHostRequest")
            .field("name", &self.name)
            .field("iqns", &self.iqns)
            .field("chap_user", &self.chap_user)
            .field("chap_secret", &hidden(&self.chap_secret))
            .field("mutual_chap_user", &self.mutual_chap_user)
            .field("mutual_chap_secret", &hidden(&self.mutual_chap_secret))
            .field("nbd_psk_key", &hidden(&self.nbd_psk_key))
            .finish()
    }
}

impl CreateHostRequest {
    /// Pairs each CHAP user with its secret: one without the other is refused
    /// (the message names the fields, never a secret).
    pub fn into_new_host(self) -> Result<NewHost, HostControlError> {
        let pair = |user: Option<String>,
                    secret: Option<String>,
                    kind: &str|
         -> Result<Option<ChapCredentials>, HostControlError> {
            match (user, secret) {
                (Some(user), Some(secret)) => Ok(Some(ChapCredentials { user, secret })),
                (None, None) => Ok(None),
                (Some(_), None) => Err(HostControlError::Invalid(format!(
                    "{kind}_user needs {kind}_secret"
                ))),
                (None, Some(_)) => Err(HostControlError::Invalid(format!(
                    "{kind}_secret needs {kind}_user"
                ))),
            }
        };
        Ok(NewHost {
            chap: pair(self.chap_user, self.chap_secret, "chap")?,
            mutual_chap: pair(
                self.mutual_chap_user,
                self.mutual_chap_secret,
                "mutual_chap",
            )?,
            name: self.name,
            iqns: self.iqns,
            nbd_psk_key: self.nbd_psk_key,
        })
    }
}

/// Body of `PUT /v1/hosts/{host}/nbd-psk`.
#[derive(Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetNbdPskRequest {
    /// NBD TLS pre-shared key in hex (16 to 64 bytes, as psktool writes it after 'identity:')
    #[schema(pattern = "^([0-9a-fA-F]{2}){16,64}$", write_only)]
    pub key: String,
}

/// Hides the key.
impl std::fmt::Debug for SetNbdPskRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SetNbdPskRequest { key: <hidden> }")
    }
}

/// Body of `POST /v1/hosts/{host}/connect`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectVolumeRequest {
    /// VOL, or VOL@SNAP for a read-only snapshot LUN
    pub volume: String,
    /// The LUN (default: the lowest free one)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(maximum = 16383)]
    pub lun: Option<u64>,
    /// Logical block size presented: 512 (512e) or 4096 (4Kn)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = requested_block_size)]
    pub block_size_bytes: Option<u32>,
    /// Present as removable medium (eject and load with START STOP UNIT)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(default = false)]
    pub removable: Option<bool>,
}

impl ConnectVolumeRequest {
    /// The request with its defaults applied; a block size other than 512 or
    /// 4096 is refused.
    pub fn into_new_lun(self) -> Result<NewLun, HostControlError> {
        let block_size_bytes = self.block_size_bytes.unwrap_or(DEFAULT_BLOCK_SIZE_BYTES);
        if !BLOCK_SIZES.contains(&block_size_bytes) {
            return Err(HostControlError::Invalid(format!(
                "block_size_bytes must be 512 or 4096, not {block_size_bytes}"
            )));
        }
        Ok(NewLun {
            volume: self.volume,
            lun: self.lun,
            block_size_bytes,
            removable: self.removable.unwrap_or(false),
        })
    }
}

/// Body of `POST /v1/hosts/{host}/disconnect`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DisconnectVolumeRequest {
    /// The volume or VOL@SNAP to take away, whatever its LUN
    pub volume: String,
}

/// What a host operation can fail with; each maps to one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum HostControlError {
    /// 404.
    #[error("host '{0}' does not exist")]
    HostNotFound(String),
    /// 409.
    #[error("host '{0}' already exists")]
    HostExists(String),
    /// 400: a bad name, IQN or CHAP credential, a LUN taken or out of range, a
    /// volume already (or not) connected, a limit reached.
    #[error("{0}")]
    Invalid(String),
    /// The volume or snapshot to connect: its status follows the engine's error
    /// (404 when it does not exist).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// 500: the registry could not be persisted or read.
    #[error("{0}")]
    Internal(String),
}

/// Host management, implemented by the daemon over its host registry (and by
/// doubles in tests). Calls block (a change is durable before it returns); the
/// API runs them on the blocking thread pool. A change takes effect on live
/// iSCSI sessions at once.
pub trait HostControl: Send + Sync + 'static {
    /// Every host, sorted by name.
    fn list_hosts(&self) -> Result<Vec<HostInfo>, HostControlError>;
    fn host_info(&self, name: &str) -> Result<HostInfo, HostControlError>;
    fn create_host(&self, host: NewHost) -> Result<HostInfo, HostControlError>;
    /// Deletes a host: its initiators lose every LUN at once.
    fn delete_host(&self, name: &str) -> Result<(), HostControlError>;
    /// Connects a volume or snapshot that exists to a host; answers the LUN made.
    fn connect(&self, host: &str, lun: NewLun) -> Result<LunInfo, HostControlError>;
    /// Takes a volume away from a host.
    fn disconnect(&self, host: &str, volume: &str) -> Result<(), HostControlError>;
    /// Sets (`Some`, hex) or removes (`None`) a host's NBD pre-shared key; NBD
    /// connections already open keep running.
    fn set_nbd_psk(&self, host: &str, key: Option<String>) -> Result<HostInfo, HostControlError>;
    /// Gives the host the array's vVol protocol endpoint at `lun` (the lowest
    /// free one when `None`), or moves it there.
    fn add_protocol_endpoint(
        &self,
        host: &str,
        lun: Option<u64>,
    ) -> Result<HostInfo, HostControlError>;
    /// Takes the protocol endpoint away: vVols bound to the host are out of its
    /// reach until it has one again.
    fn remove_protocol_endpoint(&self, host: &str) -> Result<HostInfo, HostControlError>;
}

/// Body of `PUT /v1/hosts/{host}/protocol-endpoint`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProtocolEndpointRequest {
    /// The LUN (0 to 16383); default the lowest free one
    pub lun: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_stay_out_of_debug_and_pairs_are_checked() {
        let request = CreateHostRequest {
            name: "h".into(),
            iqns: vec!["iqn.2024-01.org:h".into()],
            chap_user: Some("u".into()),
            chap_secret: Some("top-secret-value".into()),
            mutual_chap_user: Some("t".into()),
            mutual_chap_secret: Some("other-secret-value".into()),
            nbd_psk_key: Some("00112233445566778899aabbccddeeff".into()),
        };
        let text = format!("{request:?}");
        assert!(!text.contains("secret-value"), "{text}");
        let host = request.clone().into_new_host().unwrap();
        let text = format!("{host:?}");
        assert!(!text.contains("secret-value"), "{text}");
        assert!(!text.contains("aabbccdd"), "{text}");
        let set = SetNbdPskRequest {
            key: "00112233445566778899aabbccddeeff".into(),
        };
        assert!(!format!("{set:?}").contains("aabbccdd"));
        assert_eq!(host.chap.unwrap().secret, "top-secret-value");
        let lone_user = CreateHostRequest {
            chap_secret: None,
            ..request.clone()
        };
        let e = lone_user.into_new_host().unwrap_err().to_string();
        assert_eq!(e, "chap_user needs chap_secret");
        let lone_secret = CreateHostRequest {
            mutual_chap_user: None,
            ..request
        };
        let e = lone_secret.into_new_host().unwrap_err().to_string();
        assert_eq!(e, "mutual_chap_secret needs mutual_chap_user");
    }

    #[test]
    fn connect_defaults_and_block_sizes() {
        let lun = ConnectVolumeRequest {
            volume: "v".into(),
            ..Default::default()
        }
        .into_new_lun()
        .unwrap();
        assert_eq!(
            (lun.lun, lun.block_size_bytes, lun.removable),
            (None, 512, false)
        );
        let bad = ConnectVolumeRequest {
            volume: "v".into(),
            block_size_bytes: Some(1024),
            ..Default::default()
        };
        assert!(bad.into_new_lun().is_err());
        assert!(LunInfo::new(0, "v@s", 512, false).read_only);
        assert!(!LunInfo::new(0, "v", 512, false).read_only);
    }
}
