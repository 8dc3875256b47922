//! Hosts and LUN masking: which initiators may log in, with which CHAP secrets,
//! and which volumes each sees at which LUN. A host may also have an NBD
//! pre-shared key: an NBD client that proves it over TLS, with the host's name as
//! its PSK identity, may open the volumes connected to the host (see
//! the daemon's `nbd_export`).
//!
//! Kept by the daemon (not the engine, which knows nothing of initiators) in
//! `<data_dir>/hosts.json`, written atomically (temporary file, fsync, rename) with
//! mode 0600 because it holds CHAP secrets and NBD keys. Every change bumps a generation that
//! the SCSI layer watches to raise REPORTED LUNS DATA HAS CHANGED on live sessions.
//!
//! The API and CLI (`lacuna host …`) reach the registry through [`RegistryHosts`],
//! which also refuses to connect a volume or snapshot that does not exist.
//!
//! A crate of its own so that the daemon and the API's tests (which run the host
//! routes against the real registry) both use it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use lacuna_api::{HostControl, HostControlError, HostInfo, LunInfo, NewHost, NewLun};
use lacuna_engine::{Engine, EngineError};
use serde::{Deserialize, Serialize};

/// File name of the host registry inside the data directory.
pub const HOSTS_FILE_NAME: &str = "hosts.json";
/// Highest LUN number handed out (single-level addressing, SAM-5).
pub const MAX_LUN: u64 = 16383;
/// Most hosts and most connections per host: bounds on what the API can make the
/// daemon keep.
pub const MAX_HOSTS: usize = 1024;
pub const MAX_LUNS_PER_HOST: usize = 1024;
/// Most initiator names per host (a cluster's nodes, each with a few HBAs).
pub const MAX_IQNS_PER_HOST: usize = 64;
/// NBD pre-shared key sizes: at least 128 bits, at most 512 (`psktool -s 64`).
/// The NBD server accepts the same range (checked where the two meet).
pub const NBD_PSK_MIN_BYTES: usize = 16;
pub const NBD_PSK_MAX_BYTES: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("host '{0}' does not exist")]
    NotFound(String),
    #[error("host '{0}' already exists")]
    Exists(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// CHAP credentials (user name and secret).
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Chap {
    pub user: String,
    pub secret: String,
}

impl std::fmt::Debug for Chap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chap")
            .field("user", &self.user)
            .field("secret", &"<hidden>")
            .finish()
    }
}

/// An NBD TLS pre-shared key, kept as the hex text psktool writes (`name:hex`).
/// `Debug` hides it.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct NbdPsk(String);

impl std::fmt::Debug for NbdPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NbdPsk(<hidden>)")
    }
}

impl NbdPsk {
    /// Checks a hex key: an even number of hex digits making
    /// `MIN_PSK_KEY_BYTES..=MAX_PSK_KEY_BYTES` bytes (the message never quotes it).
    pub fn parse(text: &str) -> Result<NbdPsk, HostError> {
        let (min, max) = (NBD_PSK_MIN_BYTES, NBD_PSK_MAX_BYTES);
        let text = text.trim();
        let digits = text.len();
        if hex::decode(text).is_err() {
            return Err(HostError::Invalid(
                "the NBD PSK must be hexadecimal digits, two per byte (as psktool writes it)"
                    .into(),
            ));
        }
        if digits < 2 * min || digits > 2 * max {
            return Err(HostError::Invalid(format!(
                "the NBD PSK must be {min} to {max} bytes ({} to {} hex digits), not {digits} digits",
                2 * min,
                2 * max
            )));
        }
        Ok(NbdPsk(text.to_ascii_lowercase()))
    }

    pub fn bytes(&self) -> Vec<u8> {
        hex::decode(&self.0).expect("checked by parse")
    }
}

/// What a host sees at one LUN: a volume (or a snapshot `VOL@SNAP`, read-only) and
/// how it is presented.
///
/// A grant names an object, not a name: `object_id` is the id the volume or
/// snapshot had when it was connected (ids are never reused). A LUN is
/// presented only while the object of that name still has that id, so a new
/// volume that reuses an eradicated one's name is reachable by nobody until it
/// is granted; grants to eradicated objects are dropped
/// ([`HostRegistry::forget_missing`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LunSpec {
    /// `VOL`, or `VOL@SNAP` for a read-only snapshot.
    pub volume: String,
    /// The id of the volume or snapshot granted. 0 only in a registry written
    /// before grants kept ids, until [`HostRegistry::bind_unbound`] binds it
    /// at start-up.
    #[serde(default)]
    pub object_id: u64,
    /// Logical block size: 512 (512e, the default) or 4096 (4Kn).
    #[serde(default = "default_block_size")]
    pub block_size_bytes: u32,
    /// Presented as removable medium (eject and load with START STOP UNIT).
    #[serde(default)]
    pub removable: bool,
}

fn default_block_size() -> u32 {
    512
}

impl LunSpec {
    pub fn plain(volume: &str, object_id: u64) -> LunSpec {
        LunSpec {
            volume: volume.to_string(),
            object_id,
            block_size_bytes: 512,
            removable: false,
        }
    }
}

/// A host: one or more initiator names sharing access.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub iqns: Vec<String>,
    /// The initiator authenticates with these (one-way CHAP).
    pub chap: Option<Chap>,
    /// The target authenticates to the initiator with these (mutual CHAP).
    pub mutual_chap: Option<Chap>,
    /// The NBD TLS key of the host's name (its PSK identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbd_psk: Option<NbdPsk>,
    pub luns: BTreeMap<u64, LunSpec>,
    /// The LUN of the array's vVol protocol endpoint in this host's list, if
    /// it has one (never one of `luns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_endpoint_lun: Option<u64>,
}

impl Host {
    /// Refuses a LUN above the range or taken (by a volume or the protocol endpoint).
    fn check_free(&self, lun: u64) -> Result<(), HostError> {
        if lun > MAX_LUN {
            return Err(HostError::Invalid(format!("LUN {lun} is above {MAX_LUN}")));
        }
        if let Some(spec) = self.luns.get(&lun) {
            return Err(HostError::Invalid(format!(
                "LUN {lun} of host '{}' is taken by '{}'",
                self.name, spec.volume
            )));
        }
        if self.protocol_endpoint_lun == Some(lun) {
            return Err(HostError::Invalid(format!(
                "LUN {lun} of host '{}' is its protocol endpoint",
                self.name
            )));
        }
        Ok(())
    }

    fn lowest_free_lun(&self) -> Result<u64, HostError> {
        (0..=MAX_LUN)
            .find(|&l| self.check_free(l).is_ok())
            .ok_or_else(|| HostError::Invalid(format!("host '{}' has no free LUN", self.name)))
    }
}

/// A host as the API shows it: secrets never leave the daemon.
fn host_info(h: &Host) -> HostInfo {
    HostInfo {
        name: h.name.clone(),
        iqns: h.iqns.clone(),
        chap_user: h.chap.as_ref().map(|c| c.user.clone()),
        mutual_chap_user: h.mutual_chap.as_ref().map(|c| c.user.clone()),
        nbd_psk: h.nbd_psk.is_some(),
        luns: h
            .luns
            .iter()
            .map(|(lun, spec)| lun_info(*lun, spec))
            .collect(),
        protocol_endpoint_lun: h.protocol_endpoint_lun,
    }
}

fn lun_info(lun: u64, spec: &LunSpec) -> LunInfo {
    LunInfo::new(lun, &spec.volume, spec.block_size_bytes, spec.removable)
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct HostFile {
    hosts: BTreeMap<String, Host>,
}

/// The registry. `open_access` is the quick-start mode: initiators that belong to
/// no host see every volume (LUNs in creation order) without CHAP.
pub struct HostRegistry {
    path: PathBuf,
    hosts: Mutex<BTreeMap<String, Host>>,
    generation: AtomicU64,
    pub open_access: bool,
    /// Where every change goes before this file (the cluster, on RADOS): a
    /// change it refuses is refused, and the registry stays as it was.
    mirror: Option<Mirror>,
}

/// Takes the registry file's new bytes; an error refuses the change.
pub type Mirror = Box<dyn Fn(&[u8]) -> std::io::Result<()> + Send + Sync>;

impl HostRegistry {
    /// Loads `<data_dir>/hosts.json` (an absent file is an empty registry).
    pub fn open(data_dir: &Path, open_access: bool) -> Result<HostRegistry, HostError> {
        let path = data_dir.join(HOSTS_FILE_NAME);
        let file = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<HostFile>(&bytes).map_err(|e| {
                HostError::Invalid(format!(
                    "{} is not a valid host registry: {e}",
                    path.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HostFile::default(),
            Err(source) => {
                return Err(HostError::Io {
                    context: format!("reading {}", path.display()),
                    source,
                })
            }
        };
        let mut hosts = file.hosts;
        for host in hosts.values_mut() {
            let mut iqns: Vec<String> = Vec::with_capacity(host.iqns.len());
            for iqn in host.iqns.iter().map(|i| normalize_iscsi_name(i)) {
                if !iqns.contains(&iqn) {
                    iqns.push(iqn);
                }
            }
            host.iqns = iqns;
        }
        Ok(HostRegistry {
            path,
            hosts: Mutex::new(hosts),
            generation: AtomicU64::new(1),
            open_access,
            mirror: None,
        })
    }

    /// Sends every later change to `mirror` before the file.
    pub fn with_mirror(mut self, mirror: Mirror) -> HostRegistry {
        self.mirror = Some(mirror);
        self
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The map, whatever a panicking holder left: every change is made on a copy
    /// and swapped in whole, so the map is never half-changed.
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Host>> {
        self.hosts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn list(&self) -> Vec<HostInfo> {
        self.lock().values().map(host_info).collect()
    }

    pub fn get(&self, name: &str) -> Result<HostInfo, HostError> {
        self.lock()
            .get(name)
            .map(host_info)
            .ok_or_else(|| HostError::NotFound(name.to_string()))
    }

    /// The host an initiator belongs to. iSCSI names compare as RFC 3722
    /// normalises them: `iqn.2024-01.TEST:A` is `iqn.2024-01.test:a`.
    pub fn host_of(&self, iqn: &str) -> Option<Host> {
        let iqn = normalize_iscsi_name(iqn);
        self.lock()
            .values()
            .find(|h| h.iqns.contains(&iqn))
            .cloned()
    }

    /// The NBD key of the host named `identity`, if it has one.
    pub fn nbd_key(&self, identity: &str) -> Option<Vec<u8>> {
        self.lock()
            .get(identity)?
            .nbd_psk
            .as_ref()
            .map(NbdPsk::bytes)
    }

    /// What the NBD client proven to be host `identity` may open: the volumes
    /// and snapshots connected to it (at any LUN), as (name, object id): the
    /// export of that name only while it is still that object. `None` if the
    /// host has gone or lost its key since the client connected.
    pub fn nbd_exports(&self, identity: &str) -> Option<Vec<(String, u64)>> {
        let hosts = self.lock();
        let host = hosts.get(identity).filter(|h| h.nbd_psk.is_some())?;
        Some(
            host.luns
                .values()
                .map(|l| (l.volume.clone(), l.object_id))
                .collect(),
        )
    }

    /// Binds grants from a registry written before grants kept ids to the
    /// object that now has their name (`resolve`), and drops those whose name
    /// names nothing. Run once at start-up, before anything is served.
    pub fn bind_unbound(&self, resolve: impl Fn(&str) -> Option<u64>) -> Result<(), HostError> {
        let unbound = self
            .lock()
            .values()
            .any(|h| h.luns.values().any(|l| l.object_id == 0));
        if !unbound {
            return Ok(());
        }
        self.update(|hosts| {
            for host in hosts.values_mut() {
                for spec in host.luns.values_mut().filter(|l| l.object_id == 0) {
                    spec.object_id = resolve(&spec.volume).unwrap_or(0);
                }
                host.luns.retain(|_, l| l.object_id != 0);
            }
            Ok(())
        })
    }

    /// Drops every grant whose object no longer `exists` (eradicated): its
    /// name may be reused, and the grant must not follow it. Returns how many
    /// were dropped; persists only when there were some.
    pub fn forget_missing(&self, exists: impl Fn(u64) -> bool) -> Result<usize, HostError> {
        let missing = |l: &LunSpec| !exists(l.object_id);
        let count = |hosts: &BTreeMap<String, Host>| -> usize {
            hosts
                .values()
                .map(|h| h.luns.values().filter(|l| missing(l)).count())
                .sum()
        };
        if count(&self.lock()) == 0 {
            return Ok(0);
        }
        self.update(|hosts| {
            let dropped = count(hosts);
            for host in hosts.values_mut() {
                host.luns.retain(|_, l| !missing(l));
            }
            Ok(dropped)
        })
    }

    /// Sets (or with `None` removes) a host's NBD key.
    pub fn set_nbd_psk(&self, name: &str, key: Option<NbdPsk>) -> Result<HostInfo, HostError> {
        self.update(|hosts| {
            let host = hosts
                .get_mut(name)
                .ok_or_else(|| HostError::NotFound(name.to_string()))?;
            host.nbd_psk = key;
            validate_host(host)?;
            Ok(host_info(host))
        })
    }

    pub fn create(&self, mut host: Host) -> Result<HostInfo, HostError> {
        host.iqns = host.iqns.iter().map(|i| normalize_iscsi_name(i)).collect();
        validate_host(&host)?;
        self.update(|hosts| {
            check_chap_secrets_distinct(&host, hosts)?;
            if hosts.contains_key(&host.name) {
                return Err(HostError::Exists(host.name.clone()));
            }
            if hosts.len() >= MAX_HOSTS {
                return Err(HostError::Invalid(format!("at most {MAX_HOSTS} hosts")));
            }
            for iqn in &host.iqns {
                if let Some(other) = hosts.values().find(|h| h.iqns.contains(iqn)) {
                    return Err(HostError::Invalid(format!(
                        "initiator {iqn} already belongs to host '{}'",
                        other.name
                    )));
                }
            }
            hosts.insert(host.name.clone(), host.clone());
            Ok(host_info(&host))
        })
    }

    pub fn delete(&self, name: &str) -> Result<(), HostError> {
        self.update(|hosts| {
            hosts
                .remove(name)
                .map(|_| ())
                .ok_or_else(|| HostError::NotFound(name.to_string()))
        })
    }

    /// Maps a volume (or snapshot) to the host at `lun` (the lowest free one when
    /// `None`).
    pub fn connect(&self, host: &str, spec: LunSpec, lun: Option<u64>) -> Result<u64, HostError> {
        if spec.block_size_bytes != 512 && spec.block_size_bytes != 4096 {
            return Err(HostError::Invalid(format!(
                "block size {} is not 512 or 4096",
                spec.block_size_bytes
            )));
        }
        assert!(spec.object_id != 0, "a grant names an object");
        let volume = spec.volume.clone();
        self.update(|hosts| {
            let host = hosts
                .get_mut(host)
                .ok_or_else(|| HostError::NotFound(host.to_string()))?;
            if let Some((lun, _)) = host.luns.iter().find(|(_, v)| v.volume == volume) {
                return Err(HostError::Invalid(format!(
                    "volume '{volume}' is already connected to host '{}' at LUN {lun}",
                    host.name
                )));
            }
            if host.luns.len() >= MAX_LUNS_PER_HOST {
                return Err(HostError::Invalid(format!(
                    "at most {MAX_LUNS_PER_HOST} LUNs per host"
                )));
            }
            let lun = match lun {
                Some(lun) => {
                    host.check_free(lun)?;
                    lun
                }
                None => host.lowest_free_lun()?,
            };
            host.luns.insert(lun, spec);
            Ok(lun)
        })
    }

    /// Gives `host` the protocol endpoint at `lun` (the lowest free one when
    /// `None`), or moves it there.
    pub fn add_protocol_endpoint(
        &self,
        host: &str,
        lun: Option<u64>,
    ) -> Result<HostInfo, HostError> {
        self.update(|hosts| {
            let host = hosts
                .get_mut(host)
                .ok_or_else(|| HostError::NotFound(host.to_string()))?;
            let previous = host.protocol_endpoint_lun.take();
            let lun = match lun {
                Some(lun) => host.check_free(lun).map(|()| lun),
                None => previous.map_or_else(|| host.lowest_free_lun(), Ok),
            };
            host.protocol_endpoint_lun = Some(lun?);
            Ok(host_info(host))
        })
    }

    pub fn remove_protocol_endpoint(&self, host: &str) -> Result<HostInfo, HostError> {
        self.update(|hosts| {
            let host = hosts
                .get_mut(host)
                .ok_or_else(|| HostError::NotFound(host.to_string()))?;
            if host.protocol_endpoint_lun.take().is_none() {
                return Err(HostError::Invalid(format!(
                    "host '{}' has no protocol endpoint",
                    host.name
                )));
            }
            Ok(host_info(host))
        })
    }

    pub fn disconnect(&self, host: &str, volume: &str) -> Result<(), HostError> {
        self.update(|hosts| {
            let host = hosts
                .get_mut(host)
                .ok_or_else(|| HostError::NotFound(host.to_string()))?;
            let before = host.luns.len();
            host.luns.retain(|_, v| v.volume != volume);
            if host.luns.len() == before {
                return Err(HostError::Invalid(format!(
                    "volume '{volume}' is not connected to host '{}'",
                    host.name
                )));
            }
            Ok(())
        })
    }

    /// Applies a change and persists it before it takes effect.
    fn update<T>(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, Host>) -> Result<T, HostError>,
    ) -> Result<T, HostError> {
        let mut hosts = self.lock();
        let mut next = hosts.clone();
        let value = change(&mut next)?;
        self.persist(&next)?;
        *hosts = next;
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(value)
    }

    fn persist(&self, hosts: &BTreeMap<String, Host>) -> Result<(), HostError> {
        let io = |context: &str, source| HostError::Io {
            context: format!("{context} {}", self.path.display()),
            source,
        };
        let json = serde_json::to_vec_pretty(&HostFile {
            hosts: hosts.clone(),
        })
        .expect("host registry serialises");
        if let Some(mirror) = &self.mirror {
            mirror(&json).map_err(|e| io("sending the change of", e))?;
        }
        let tmp = self.path.with_extension("json.tmp");
        let mut file = open_private(&tmp).map_err(|e| io("creating", e))?;
        file.write_all(&json).map_err(|e| io("writing", e))?;
        file.sync_all().map_err(|e| io("syncing", e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| io("replacing", e))?;
        Ok(())
    }
}

fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// An iSCSI name as RFC 3722 compares it. Its stringprep profile maps case and
/// compatibility forms; the names accepted here are printable ASCII
/// ([`validate_host`]), for which that is ASCII lower case.
pub fn normalize_iscsi_name(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// RFC 7143 §12.1.3: a secret used to authenticate an initiator must never
/// authenticate a target, or one direction of mutual CHAP would prove the
/// other. Checked across every host: any initiator secret against any target
/// secret.
fn check_chap_secrets_distinct(
    host: &Host,
    others: &BTreeMap<String, Host>,
) -> Result<(), HostError> {
    let initiator_secrets = || {
        others
            .values()
            .chain(std::iter::once(host))
            .filter_map(|h| h.chap.as_ref())
    };
    let target_secrets = || {
        others
            .values()
            .chain(std::iter::once(host))
            .filter_map(|h| h.mutual_chap.as_ref())
    };
    let reused = initiator_secrets()
        .any(|i| target_secrets().any(|t| i.secret.as_bytes() == t.secret.as_bytes()));
    if reused {
        return Err(HostError::Invalid(
            "the mutual CHAP secret (the target's) must differ from every initiator's CHAP secret (RFC 7143 §12.1.3)".into(),
        ));
    }
    Ok(())
}

fn validate_host(host: &Host) -> Result<(), HostError> {
    lacuna_engine::names::validate_name(lacuna_engine::names::NameKind::Host, &host.name).map_err(
        |e| match e {
            EngineError::InvalidArgument(message) => HostError::Invalid(message),
            other => HostError::Invalid(other.to_string()),
        },
    )?;
    if host.iqns.is_empty() && host.nbd_psk.is_none() {
        return Err(HostError::Invalid(
            "a host needs at least one initiator name (--iqn) or an NBD key (--nbd-psk-key)".into(),
        ));
    }
    if host.iqns.len() > MAX_IQNS_PER_HOST {
        return Err(HostError::Invalid(format!(
            "at most {MAX_IQNS_PER_HOST} initiator names per host"
        )));
    }
    for (i, iqn) in host.iqns.iter().enumerate() {
        if host.iqns[..i].contains(iqn) {
            return Err(HostError::Invalid(format!(
                "initiator {iqn} is named twice"
            )));
        }
        let ok = iqn.len() <= 223
            && (iqn.starts_with("iqn.") || iqn.starts_with("eui.") || iqn.starts_with("naa."))
            && iqn.bytes().all(|b| b.is_ascii_graphic());
        if !ok {
            return Err(HostError::Invalid(format!(
                "'{iqn}' is not an iSCSI name (iqn.…, eui.… or naa.…, at most 223 characters)"
            )));
        }
    }
    for chap in host.chap.iter().chain(host.mutual_chap.iter()) {
        // RFC 7143 §12.1.3: secrets of at least 12 bytes; iscsiadm allows up to 16 for
        // many initiators, and 255 is the protocol's limit.
        if chap.user.is_empty() || chap.user.len() > 255 {
            return Err(HostError::Invalid(
                "CHAP user must be 1 to 255 characters".into(),
            ));
        }
        if chap.secret.len() < 12 || chap.secret.len() > 255 {
            return Err(HostError::Invalid(
                "CHAP secret must be 12 to 255 characters".into(),
            ));
        }
    }
    if host.mutual_chap.is_some() && host.chap.is_none() {
        return Err(HostError::Invalid(
            "mutual CHAP needs one-way CHAP as well".into(),
        ));
    }
    Ok(())
}

impl From<HostError> for HostControlError {
    fn from(e: HostError) -> Self {
        match e {
            HostError::NotFound(name) => HostControlError::HostNotFound(name),
            HostError::Exists(name) => HostControlError::HostExists(name),
            HostError::Invalid(message) => HostControlError::Invalid(message),
            // The message names the file and the failed step, never a secret.
            e @ HostError::Io { .. } => HostControlError::Internal(e.to_string()),
        }
    }
}

/// The registry as the API's host control. Connecting checks the volume (or
/// snapshot) against the engine first: one that does not exist, or is destroyed,
/// is refused with the engine's not-found error (404), so a typo cannot leave a
/// LUN that never appears; the grant holds the object's id. A volume destroyed
/// later keeps its LUN in the list, unpresented until it is recovered; once it
/// is eradicated the grant is gone.
pub struct RegistryHosts {
    pub registry: Arc<HostRegistry>,
    pub engine: Arc<Engine>,
    /// Called with a host's name once it is deleted: what else the daemon
    /// granted the host (its vVol bindings) ends with it.
    pub on_delete: Option<HostDeleted>,
}

/// See [`RegistryHosts::on_delete`].
pub type HostDeleted = Arc<dyn Fn(&str) + Send + Sync>;

impl RegistryHosts {
    /// The id of the live volume or snapshot `name`.
    fn live_object_id(&self, name: &str) -> Result<u64, EngineError> {
        if name.contains('@') {
            // Fails for a destroyed snapshot, or one of a destroyed volume.
            self.engine.open_snapshot(name).map(|s| s.id())
        } else {
            let info = self.engine.volume_info(name)?;
            match info.destroyed_unix_s {
                None => Ok(info.id),
                Some(_) => Err(EngineError::VolumeNotFound(name.to_string())),
            }
        }
    }

    /// Binds a registry of names (written before grants kept ids) and drops
    /// grants to eradicated objects: at start-up, before anything is served.
    pub fn reconcile(&self) -> Result<(), HostError> {
        self.registry
            .bind_unbound(|name| self.engine.object_id(name))?;
        self.forget_eradicated()
    }

    fn forget_eradicated(&self) -> Result<(), HostError> {
        let dropped = self
            .registry
            .forget_missing(|id| self.engine.object_exists(id))?;
        if dropped > 0 {
            tracing::info!(
                dropped,
                "grants to eradicated volumes and snapshots dropped"
            );
        }
        Ok(())
    }
}

impl HostControl for RegistryHosts {
    fn list_hosts(&self) -> Result<Vec<HostInfo>, HostControlError> {
        self.forget_eradicated()?;
        Ok(self.registry.list())
    }

    fn host_info(&self, name: &str) -> Result<HostInfo, HostControlError> {
        self.forget_eradicated()?;
        Ok(self.registry.get(name)?)
    }

    fn create_host(&self, host: NewHost) -> Result<HostInfo, HostControlError> {
        let chap = |c: lacuna_api::ChapCredentials| Chap {
            user: c.user,
            secret: c.secret,
        };
        Ok(self.registry.create(Host {
            name: host.name,
            iqns: host.iqns,
            chap: host.chap.map(chap),
            mutual_chap: host.mutual_chap.map(chap),
            nbd_psk: host.nbd_psk_key.as_deref().map(NbdPsk::parse).transpose()?,
            luns: BTreeMap::new(),
            protocol_endpoint_lun: None,
        })?)
    }

    fn set_nbd_psk(&self, name: &str, key: Option<String>) -> Result<HostInfo, HostControlError> {
        let key = key.as_deref().map(NbdPsk::parse).transpose()?;
        Ok(self.registry.set_nbd_psk(name, key)?)
    }

    fn delete_host(&self, name: &str) -> Result<(), HostControlError> {
        self.registry.delete(name)?;
        if let Some(deleted) = &self.on_delete {
            deleted(name);
        }
        Ok(())
    }

    fn connect(&self, host: &str, lun: NewLun) -> Result<LunInfo, HostControlError> {
        // An unknown host is the first thing to report, whatever the volume.
        self.registry.get(host)?;
        // A grant to an eradicated namesake must not block this one.
        self.forget_eradicated()?;
        let object_id = self.live_object_id(&lun.volume)?;
        let spec = LunSpec {
            volume: lun.volume,
            object_id,
            block_size_bytes: lun.block_size_bytes,
            removable: lun.removable,
        };
        let number = self.registry.connect(host, spec.clone(), lun.lun)?;
        Ok(lun_info(number, &spec))
    }

    fn disconnect(&self, host: &str, volume: &str) -> Result<(), HostControlError> {
        Ok(self.registry.disconnect(host, volume)?)
    }

    fn add_protocol_endpoint(
        &self,
        host: &str,
        lun: Option<u64>,
    ) -> Result<HostInfo, HostControlError> {
        Ok(self.registry.add_protocol_endpoint(host, lun)?)
    }

    fn remove_protocol_endpoint(&self, host: &str) -> Result<HostInfo, HostControlError> {
        Ok(self.registry.remove_protocol_endpoint(host)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine of 1 GiB in `<dir>/array`.
    fn test_engine(dir: &Path) -> Arc<Engine> {
        Engine::open(lacuna_engine::EngineConfig::new(dir.join("array"), 1 << 30)).unwrap()
    }

    fn host(name: &str, iqn: &str) -> Host {
        Host {
            name: name.into(),
            iqns: vec![iqn.into()],
            chap: None,
            mutual_chap: None,
            nbd_psk: None,
            luns: BTreeMap::new(),
            protocol_endpoint_lun: None,
        }
    }

    #[test]
    fn hosts_persist_with_private_mode_and_luns_are_assigned() {
        let dir = tempfile::tempdir().unwrap();
        let reg = HostRegistry::open(dir.path(), false).unwrap();
        let g0 = reg.generation();
        reg.create(host("esx1", "iqn.1998-01.com.vmware:esx1"))
            .unwrap();
        assert!(reg.create(host("esx1", "iqn.x:y")).is_err());
        assert!(reg
            .create(host("esx2", "iqn.1998-01.com.vmware:esx1"))
            .is_err());
        let plain = |name| LunSpec::plain(name, 1);
        assert_eq!(reg.connect("esx1", plain("vol-a"), None).unwrap(), 0);
        assert_eq!(reg.connect("esx1", plain("vol-b"), Some(7)).unwrap(), 7);
        assert_eq!(reg.connect("esx1", plain("vol-c"), None).unwrap(), 1);
        assert!(reg.connect("esx1", plain("vol-d"), Some(7)).is_err());
        assert!(reg.connect("esx1", plain("vol-a"), None).is_err());
        let odd = LunSpec {
            block_size_bytes: 1024,
            ..plain("vol-e")
        };
        assert!(reg.connect("esx1", odd, None).is_err());
        assert!(reg.generation() > g0);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(HOSTS_FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = HostRegistry::open(dir.path(), false).unwrap();
        assert_eq!(again.get("esx1").unwrap().luns.len(), 3);
        again.disconnect("esx1", "vol-b").unwrap();
        assert!(again.disconnect("esx1", "vol-b").is_err());
        assert_eq!(
            again.host_of("iqn.1998-01.com.vmware:esx1").unwrap().name,
            "esx1"
        );
    }

    #[test]
    fn bad_hosts_are_refused_and_secrets_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let reg = HostRegistry::open(dir.path(), false).unwrap();
        assert!(reg.create(host("h", "not-an-iqn")).is_err());
        let mut twice = host("h", "iqn.2024-01.org:h");
        twice.iqns.push("iqn.2024-01.org:h".into());
        assert!(matches!(reg.create(twice), Err(HostError::Invalid(m)) if m.contains("twice")));
        let mut crowd = host("h", "iqn.2024-01.org:h");
        crowd.iqns = (0..=MAX_IQNS_PER_HOST)
            .map(|i| format!("iqn.2024-01.org:h{i}"))
            .collect();
        assert!(reg.create(crowd.clone()).is_err());
        crowd.iqns.pop();
        reg.create(crowd).unwrap();
        reg.delete("h").unwrap();
        let mut weak = host("h", "iqn.2024-01.org:h");
        weak.chap = Some(Chap {
            user: "u".into(),
            secret: "short".into(),
        });
        assert!(reg.create(weak.clone()).is_err());
        weak.chap = Some(Chap {
            user: "u".into(),
            secret: "a-long-enough-secret".into(),
        });
        let info = reg.create(weak.clone()).unwrap();
        assert_eq!(info.chap_user.as_deref(), Some("u"));
        let text = format!("{:?}", weak.chap.unwrap());
        assert!(!text.contains("long-enough"), "{text}");
    }

    #[test]
    fn nbd_keys_are_checked_hidden_and_give_the_connected_volumes() {
        let dir = tempfile::tempdir().unwrap();
        let reg = HostRegistry::open(dir.path(), false).unwrap();
        let key = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        for bad in ["xyz", "0011", "001", &"ab".repeat(65)] {
            assert!(NbdPsk::parse(bad).is_err(), "{bad}");
        }
        let mut nbd_only = host("alice", "unused");
        nbd_only.iqns.clear();
        assert!(reg.create(nbd_only.clone()).is_err(), "neither IQN nor key");
        nbd_only.nbd_psk = Some(NbdPsk::parse(key).unwrap());
        let info = reg.create(nbd_only).unwrap();
        assert!(info.nbd_psk);
        let text = format!("{:?} {:?}", reg.get("alice").unwrap(), reg.lock()["alice"]);
        assert!(!text.to_ascii_lowercase().contains("aabbccdd"), "{text}");
        assert_eq!(reg.nbd_key("alice").unwrap()[..2], [0x00, 0x11]);
        assert_eq!(reg.nbd_key("alice").unwrap().len(), 32);
        assert!(reg.nbd_exports("alice").unwrap().is_empty());
        reg.connect("alice", LunSpec::plain("vol-a", 3), None)
            .unwrap();
        reg.connect("alice", LunSpec::plain("vol-a@s1", 4), None)
            .unwrap();
        assert_eq!(
            reg.nbd_exports("alice").unwrap(),
            [("vol-a".to_string(), 3), ("vol-a@s1".to_string(), 4)]
        );
        assert!(reg.nbd_exports("nobody").is_none());
        // An iSCSI-only host gets a key later, then loses it; an NBD-only host
        // cannot lose its only way in.
        reg.create(host("esx1", "iqn.1998-01.com.vmware:esx1"))
            .unwrap();
        assert!(reg.nbd_key("esx1").is_none() && reg.nbd_exports("esx1").is_none());
        let info = reg
            .set_nbd_psk("esx1", Some(NbdPsk::parse(key).unwrap()))
            .unwrap();
        assert!(info.nbd_psk);
        assert!(!reg.set_nbd_psk("esx1", None).unwrap().nbd_psk);
        assert!(reg.set_nbd_psk("alice", None).is_err());
        assert!(reg.set_nbd_psk("nobody", None).is_err());
        let again = HostRegistry::open(dir.path(), false).unwrap();
        assert_eq!(again.nbd_key("alice"), reg.nbd_key("alice"));
    }

    /// A grant is for the object: eradicating it ends the grant (also across a
    /// restart), and a new volume that reuses the name is granted to nobody.
    #[test]
    fn grants_end_with_their_object_and_do_not_pass_to_a_namesake() {
        let dir = tempfile::tempdir().unwrap();
        let engine = test_engine(dir.path());
        let first = engine.create_volume("r1", 1 << 20).unwrap();
        engine.create_snapshots(&["r1"], Some("s"), None).unwrap();
        let hosts = RegistryHosts {
            registry: Arc::new(HostRegistry::open(dir.path(), false).unwrap()),
            engine: engine.clone(),
            on_delete: None,
        };
        hosts
            .registry
            .create(host("hostb", "iqn.2024-01.org:b"))
            .unwrap();
        let lun = |volume: &str| NewLun {
            volume: volume.into(),
            lun: None,
            block_size_bytes: 512,
            removable: false,
        };
        hosts.connect("hostb", lun("r1")).unwrap();
        hosts.connect("hostb", lun("r1@s")).unwrap();
        let granted = |hosts: &RegistryHosts| -> Vec<String> {
            let info = hosts.host_info("hostb").unwrap();
            info.luns.into_iter().map(|l| l.volume).collect()
        };
        // Deleting keeps the grants (hidden until a recover).
        engine.delete_volume("r1").unwrap();
        assert_eq!(granted(&hosts), ["r1", "r1@s"]);
        engine.eradicate_volume("r1").unwrap();
        let second = engine.create_volume("r1", 2 << 20).unwrap();
        assert_ne!(first.id, second.id);
        assert!(!engine.object_exists(first.id));
        assert!(granted(&hosts).is_empty(), "the grants ended with r1");
        let spec = &hosts.registry.host_of("iqn.2024-01.org:b").unwrap();
        assert!(spec.luns.is_empty());
        // A grant kept by a registry that missed the eradication (the file
        // written before it) never reaches the new r1, and goes at start-up.
        let mut stale = LunSpec::plain("r1", first.id);
        stale.block_size_bytes = 4096;
        hosts.registry.connect("hostb", stale, Some(9)).unwrap();
        let reopened = RegistryHosts {
            registry: Arc::new(HostRegistry::open(dir.path(), false).unwrap()),
            engine: engine.clone(),
            on_delete: None,
        };
        assert_eq!(
            reopened.registry.nbd_exports("hostb"),
            None,
            "no key, no NBD"
        );
        reopened.reconcile().unwrap();
        assert!(granted(&reopened).is_empty());
        engine.close().unwrap();
    }

    /// A registry written before grants kept ids binds each name to the object
    /// that has it at start-up, and drops names that name nothing.
    #[test]
    fn grants_of_an_older_registry_are_bound_to_their_objects() {
        let dir = tempfile::tempdir().unwrap();
        let engine = test_engine(dir.path());
        let vm1 = engine.create_volume("vm1", 1 << 20).unwrap();
        let taken = engine.create_snapshots(&["vm1"], Some("s1"), None).unwrap();
        let old = r#"{"hosts":{"esx1":{"name":"esx1","iqns":["iqn.1998-01.com.VMware:ESX1"],
            "chap":null,"mutual_chap":null,"luns":{
            "0":{"volume":"vm1","block_size_bytes":512,"removable":false},
            "1":{"volume":"vm1@s1"},
            "2":{"volume":"gone"}}}}}"#;
        std::fs::write(dir.path().join(HOSTS_FILE_NAME), old).unwrap();
        let hosts = RegistryHosts {
            registry: Arc::new(HostRegistry::open(dir.path(), false).unwrap()),
            engine: engine.clone(),
            on_delete: None,
        };
        hosts.reconcile().unwrap();
        let esx1 = hosts
            .registry
            .host_of("IQN.1998-01.com.vmware:esx1")
            .unwrap();
        let ids: Vec<(u64, u64)> = esx1.luns.iter().map(|(n, l)| (*n, l.object_id)).collect();
        assert_eq!(ids, [(0, vm1.id), (1, taken.snapshots[0].id)]);
        assert_eq!(esx1.iqns, ["iqn.1998-01.com.vmware:esx1"]);
        let again = HostRegistry::open(dir.path(), false).unwrap();
        assert_eq!(again.host_of("iqn.1998-01.com.vmware:esx1"), Some(esx1));
        engine.close().unwrap();
    }

    /// RFC 3722: iSCSI names differing only in case are one name.
    #[test]
    fn iscsi_names_compare_normalised() {
        let dir = tempfile::tempdir().unwrap();
        let reg = HostRegistry::open(dir.path(), false).unwrap();
        reg.create(host("a", "iqn.2024-01.TEST:A")).unwrap();
        assert_eq!(reg.get("a").unwrap().iqns, ["iqn.2024-01.test:a"]);
        let clash = reg.create(host("b", "iqn.2024-01.test:a")).unwrap_err();
        assert!(clash.to_string().contains("already belongs"), "{clash}");
        assert_eq!(reg.host_of("iqn.2024-01.Test:a").unwrap().name, "a");
        let mut twice = host("c", "iqn.2024-01.org:c");
        twice.iqns.push("IQN.2024-01.org:C".into());
        assert!(reg.create(twice).is_err());
    }

    /// RFC 7143 §12.1.3: the target's secret is never an initiator's.
    #[test]
    fn one_secret_for_both_directions_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let reg = HostRegistry::open(dir.path(), false).unwrap();
        let chap = |secret: &str| {
            Some(Chap {
                user: "u".into(),
                secret: secret.into(),
            })
        };
        let mut same = host("a", "iqn.2024-01.org:a");
        same.chap = chap("the-same-secret-12");
        same.mutual_chap = chap("the-same-secret-12");
        let e = reg.create(same.clone()).unwrap_err();
        assert!(e.to_string().contains("RFC 7143"), "{e}");
        same.mutual_chap = chap("a-target-secret-12");
        reg.create(same).unwrap();
        // Another host's initiator secret may not be this target secret either.
        let mut other = host("b", "iqn.2024-01.org:b");
        other.chap = chap("a-target-secret-12");
        assert!(reg.create(other.clone()).is_err());
        other.chap = chap("b-initiator-secret");
        reg.create(other).unwrap();
    }

    /// The API's view: volumes and snapshots are checked against the engine,
    /// registry errors keep their kind, answers carry no secret.
    #[test]
    fn registry_hosts_check_volumes_against_the_engine() {
        use lacuna_api::ChapCredentials;
        let dir = tempfile::tempdir().unwrap();
        let engine = test_engine(dir.path());
        engine.create_volume("vm1", 1 << 20).unwrap();
        engine.create_volume("gone", 1 << 20).unwrap();
        engine.create_snapshots(&["vm1"], Some("s1"), None).unwrap();
        engine.delete_volume("gone").unwrap();
        let hosts = RegistryHosts {
            registry: Arc::new(HostRegistry::open(dir.path(), false).unwrap()),
            engine: engine.clone(),
            on_delete: None,
        };
        let new_host = NewHost {
            name: "esx1".into(),
            iqns: vec!["iqn.1998-01.com.vmware:esx1".into()],
            chap: Some(ChapCredentials {
                user: "esx1".into(),
                secret: "a-long-enough-secret".into(),
            }),
            mutual_chap: None,
            nbd_psk_key: None,
        };
        let info = hosts.create_host(new_host.clone()).unwrap();
        assert_eq!(info.chap_user.as_deref(), Some("esx1"));
        assert!(matches!(
            hosts.create_host(new_host),
            Err(HostControlError::HostExists(_))
        ));
        let lun = |volume: &str| NewLun {
            volume: volume.into(),
            lun: None,
            block_size_bytes: 512,
            removable: false,
        };
        let made = hosts.connect("esx1", lun("vm1")).unwrap();
        assert_eq!((made.lun, made.read_only), (0, false));
        let made = hosts
            .connect(
                "esx1",
                NewLun {
                    lun: Some(5),
                    block_size_bytes: 4096,
                    ..lun("vm1@s1")
                },
            )
            .unwrap();
        assert_eq!(made, LunInfo::new(5, "vm1@s1", 4096, false));
        assert!(made.read_only);
        for missing in ["nope", "gone", "vm1@nope", "gone@x"] {
            let e = hosts.connect("esx1", lun(missing)).unwrap_err();
            assert!(
                matches!(
                    e,
                    HostControlError::Engine(
                        EngineError::VolumeNotFound(_) | EngineError::SnapshotNotFound(_)
                    )
                ),
                "{missing}: {e:?}"
            );
        }
        assert!(matches!(
            hosts.connect("nobody", lun("nope")),
            Err(HostControlError::HostNotFound(_))
        ));
        assert!(matches!(
            hosts.connect("esx1", lun("vm1")),
            Err(HostControlError::Invalid(_))
        ));
        let shown = hosts.host_info("esx1").unwrap();
        assert_eq!(shown.luns.iter().map(|l| l.lun).collect::<Vec<_>>(), [0, 5]);
        hosts.disconnect("esx1", "vm1").unwrap();
        assert!(matches!(
            hosts.disconnect("esx1", "vm1"),
            Err(HostControlError::Invalid(_))
        ));
        hosts.delete_host("esx1").unwrap();
        assert!(hosts.list_hosts().unwrap().is_empty());
        let file = std::fs::read_to_string(dir.path().join(HOSTS_FILE_NAME)).unwrap();
        assert!(!file.contains("esx1\""), "{file}");
        engine.close().unwrap();
    }
}
