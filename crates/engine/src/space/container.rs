//! Storage containers: the datastore / vVol storage container of the seeds. Every
//! volume belongs to exactly one; the container holds the policies its volumes
//! share — a space quota, how fast their dead space is reclaimed, and how their
//! data is reduced (compression codec, dedup on or off).
//!
//! Why per container and not per volume or per array: reclaim rate is a promise
//! about what background work may cost a group of workloads (seed 000's
//! per-datastore setting), and data reduction is chosen per kind of data (already
//! compressed media gains nothing from a codec).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use redb::{Durability, ReadableTable};
use serde::{Deserialize, Serialize};

use crate::meta::mapping_cache::ChangedMappings;
use crate::meta::schema::{self, kv_error};
use crate::space::rate::{Rate, TokenBucket, BYTES_PER_MB, LOW_RATE_BYTES_PER_S};
use crate::{EngineError, Result};

/// The container every array has, and that volumes join when none is named.
pub const DEFAULT_CONTAINER: &str = "default";
/// Its id (records written before containers existed belong to it).
pub const DEFAULT_CONTAINER_ID: u64 = 1;
/// Burst allowance when none is given: modest, so a rate means what it says
/// within seconds (seed 000's unexplained 400 GB burst is what we avoid).
pub const DEFAULT_RECLAIM_BURST_BYTES: u64 = 256 * 1024 * 1024;
/// The sliding window over which the current reclaim rate is measured.
pub const RATE_WINDOW: Duration = Duration::from_secs(2);
/// Slots of the sliding window.
const RATE_WINDOW_SLOTS: usize = 20;
/// Most containers an array holds (bounds the scheduler's round).
pub const MAX_CONTAINERS: usize = 1024;

fn default_container_id() -> u64 {
    DEFAULT_CONTAINER_ID
}

pub(crate) fn serde_default_container() -> u64 {
    default_container_id()
}

/// How fast a container's dead space is reclaimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimPolicy {
    /// Nothing is reclaimed: a backlog accrues until `reclaim --now` or a new policy.
    Off,
    /// 25 MB/s (seed 000's `low`).
    Low,
    /// A fixed rate in bytes per second.
    Fixed { bytes_per_s: u64 },
    /// As fast as background work may go (still yielding to host I/O).
    Unlimited,
}

impl ReclaimPolicy {
    /// The token-bucket rate this policy stands for.
    pub fn rate(self) -> Rate {
        match self {
            ReclaimPolicy::Off => Rate::Off,
            ReclaimPolicy::Low => Rate::BytesPerSecond(LOW_RATE_BYTES_PER_S),
            ReclaimPolicy::Fixed { bytes_per_s } => Rate::BytesPerSecond(bytes_per_s),
            ReclaimPolicy::Unlimited => Rate::Unlimited,
        }
    }

    /// The configured rate in bytes per second, if the policy has one.
    pub fn bytes_per_s(self) -> Option<u64> {
        match self.rate() {
            Rate::BytesPerSecond(rate) => Some(rate),
            _ => None,
        }
    }
}

impl fmt::Display for ReclaimPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReclaimPolicy::Off => f.write_str("off"),
            ReclaimPolicy::Low => f.write_str("low"),
            ReclaimPolicy::Unlimited => f.write_str("unlimited"),
            ReclaimPolicy::Fixed { bytes_per_s } => {
                if bytes_per_s % BYTES_PER_MB == 0 {
                    write!(f, "{}MB/s", bytes_per_s / BYTES_PER_MB)
                } else {
                    write!(f, "{bytes_per_s}B/s")
                }
            }
        }
    }
}

impl FromStr for ReclaimPolicy {
    type Err = String;

    /// `off`, `low`, `unlimited`, or a rate: `N`, `NMB/s`, `NGB/s`, `NB/s`
    /// (decimal units, as the seeds count them).
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let lower = text.trim().to_ascii_lowercase();
        match lower.as_str() {
            "off" => return Ok(ReclaimPolicy::Off),
            "low" => return Ok(ReclaimPolicy::Low),
            "unlimited" | "max" => return Ok(ReclaimPolicy::Unlimited),
            _ => {}
        }
        let (digits, unit_bytes) = if let Some(n) = lower.strip_suffix("gb/s") {
            (n, 1000 * BYTES_PER_MB)
        } else if let Some(n) = lower.strip_suffix("mb/s") {
            (n, BYTES_PER_MB)
        } else if let Some(n) = lower.strip_suffix("b/s") {
            (n, 1)
        } else {
            (lower.as_str(), BYTES_PER_MB)
        };
        let invalid = || {
            format!(
                "invalid reclaim policy '{text}': use off, low (25 MB/s), unlimited, or a rate such as 2000MB/s or 5GB/s"
            )
        };
        let n: u64 = digits.trim().parse().map_err(|_| invalid())?;
        let bytes_per_s = n.checked_mul(unit_bytes).ok_or_else(invalid)?;
        if bytes_per_s == 0 {
            return Err(format!(
                "invalid reclaim policy '{text}': a rate of zero is 'off'"
            ));
        }
        Ok(ReclaimPolicy::Fixed { bytes_per_s })
    }
}

impl Serialize for ReclaimPolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ReclaimPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Its schema, like its serialisation, is written by hand: the text, not the
/// enum's variants.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for ReclaimPolicy {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "How fast dead space is reclaimed: off (nothing until POST .../reclaim or a new \
                 policy), low (25 MB/s), unlimited, or a rate in decimal units: NMB/s, NGB/s, NB/s \
                 (a bare number is MB/s).",
            ))
            .examples(["low"])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for ReclaimPolicy {}

/// The codec new data is stored with: lz4 (cheap), zstd (better ratio, more CPU) or off (stored
/// raw).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// LZ4: cheap enough for the fast path (the default).
    #[default]
    Lz4,
    /// Zstandard at a fast level: better ratio, more CPU.
    Zstd,
    /// Stored raw.
    Off,
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
            Compression::Off => "off",
        })
    }
}

impl FromStr for Compression {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            "off" | "none" => Ok(Compression::Off),
            _ => Err(format!(
                "invalid compression '{text}': use lz4, zstd or off"
            )),
        }
    }
}

/// A storage container's policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContainerPolicy {
    /// Most bytes the volumes may hold (written data plus thick reservations); null: no quota
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub quota_bytes: Option<u64>,
    // Inlined enums are described by their type's doc comment.
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub reclaim: ReclaimPolicy,
    /// Reclaim allowance spent before the rate applies, refilled while idle
    pub reclaim_burst_bytes: u64,
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub compression: Compression,
    /// New data is deduplicated
    pub dedup: bool,
}

impl Default for ContainerPolicy {
    fn default() -> Self {
        ContainerPolicy {
            quota_bytes: None,
            reclaim: ReclaimPolicy::Unlimited,
            reclaim_burst_bytes: DEFAULT_RECLAIM_BURST_BYTES,
            compression: Compression::Lz4,
            dedup: true,
        }
    }
}

/// A change of policy: fields left `None` keep their value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerUpdate {
    /// `Some(None)` removes the quota.
    #[serde(default, with = "double_option")]
    pub quota_bytes: Option<Option<u64>>,
    #[serde(default)]
    pub reclaim: Option<ReclaimPolicy>,
    #[serde(default)]
    pub reclaim_burst_bytes: Option<u64>,
    #[serde(default)]
    pub compression: Option<Compression>,
    #[serde(default)]
    pub dedup: Option<bool>,
}

/// `null` means "remove", absent means "keep".
mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Option<u64>>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            None => s.serialize_none(),
            Some(inner) => inner.serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
        Ok(Some(Option::<u64>::deserialize(d)?))
    }
}

impl ContainerUpdate {
    pub(crate) fn apply(&self, policy: &mut ContainerPolicy) {
        if let Some(quota) = self.quota_bytes {
            policy.quota_bytes = quota;
        }
        if let Some(reclaim) = self.reclaim {
            policy.reclaim = reclaim;
        }
        if let Some(burst) = self.reclaim_burst_bytes {
            policy.reclaim_burst_bytes = burst;
        }
        if let Some(compression) = self.compression {
            policy.compression = compression;
        }
        if let Some(dedup) = self.dedup {
            policy.dedup = dedup;
        }
    }
}

/// A container's persistent record (JSON in the `containers` table).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerRec {
    pub id: u64,
    pub name: String,
    pub created_unix_s: u64,
    pub policy: ContainerPolicy,
}

/// A volume's unmap and reclaim counters since the daemon started, and its backlog.
// A container's too: `ContainerReclaim` flattens them in, and its schema
// takes these fields' descriptions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReclaimStats {
    /// UNMAP / TRIM / unmapping WRITE SAME and WRITE ZEROES requests received since the daemon
    /// started
    pub unmap_commands: u64,
    /// Logical bytes those requests covered
    pub unmapped_bytes: u64,
    /// Bytes of dead data (mappings unmapped, overwritten by a range, or of eradicated volumes)
    /// whose references the reclaimer released since the daemon started
    pub reclaimed_bytes: u64,
    /// Dead bytes not yet reclaimed
    pub backlog_bytes: u64,
}

/// A storage container's reclaim policy, counters and backlog.
// What `container show --reclaim` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContainerReclaim {
    // The policy in force (an inlined enum, described by its type's doc comment).
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub policy: ReclaimPolicy,
    /// The policy's rate in bytes per second; null for off and unlimited
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub rate_bytes_per_s: Option<u64>,
    /// Reclaim allowance spent before the rate applies
    pub burst_bytes: u64,
    // Inlined, the schema is an `allOf` of these counters and the other fields,
    // which the API's document renders as one object.
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub stats: ReclaimStats,
    /// Bytes reclaimed per second over the last 2 seconds (sliding window)
    // `RATE_WINDOW`.
    pub current_bytes_per_s: f64,
    /// Seconds until the backlog is empty at the policy's rate (or, unlimited or draining, at the
    /// current rate); 0 when empty; null when it never will be (off) or cannot be told yet
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub eta_s: Option<f64>,
    /// Set by POST .../reclaim until the backlog is empty
    // `reclaim --now`: the backlog is worked off regardless of the policy.
    pub draining: bool,
}

/// A storage container: the quota, reclaim rate and data reduction its volumes share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContainerInfo {
    pub name: String,
    /// Internal container number, never reused; 'default' is 1
    pub id: u64,
    /// Creation time, seconds since the Unix epoch
    pub created_unix_s: u64,
    pub policy: ContainerPolicy,
    /// Volumes in the container, live and destroyed (recoverable)
    pub volume_count: u64,
    /// Sum of those volumes' sizes
    pub provisioned_bytes: u64,
    /// What counts against the quota: written data plus thick reservations
    pub used_bytes: u64,
    pub reclaim: ContainerReclaim,
}

/// Bytes reclaimed in time slots, for the current rate.
#[derive(Debug)]
pub(crate) struct RateWindow {
    /// (slot number, bytes) for the last `RATE_WINDOW_SLOTS` slots.
    slots: [(u64, u64); RATE_WINDOW_SLOTS],
}

impl RateWindow {
    fn new() -> Self {
        RateWindow {
            slots: [(u64::MAX, 0); RATE_WINDOW_SLOTS],
        }
    }

    fn slot_of(now: Duration) -> u64 {
        let slot_nanos = RATE_WINDOW.as_nanos() / RATE_WINDOW_SLOTS as u128;
        (now.as_nanos() / slot_nanos) as u64
    }

    pub fn record(&mut self, now: Duration, bytes: u64) {
        let slot = Self::slot_of(now);
        let entry = &mut self.slots[(slot % RATE_WINDOW_SLOTS as u64) as usize];
        if entry.0 != slot {
            *entry = (slot, 0);
        }
        entry.1 += bytes;
    }

    /// Bytes per second over the window ending now.
    pub fn bytes_per_s(&self, now: Duration) -> f64 {
        let current = Self::slot_of(now);
        let oldest = current.saturating_sub(RATE_WINDOW_SLOTS as u64 - 1);
        let bytes: u64 = self
            .slots
            .iter()
            .filter(|(slot, _)| *slot != u64::MAX && (oldest..=current).contains(slot))
            .map(|(_, bytes)| bytes)
            .sum();
        bytes as f64 / RATE_WINDOW.as_secs_f64()
    }
}

/// Counters kept per container and per volume.
#[derive(Debug, Default)]
pub(crate) struct ReclaimCounters {
    pub unmap_commands: AtomicU64,
    pub unmapped_bytes: AtomicU64,
    pub reclaimed_bytes: AtomicU64,
}

impl ReclaimCounters {
    pub fn count_unmap(&self, length_bytes: u64) {
        self.unmap_commands.fetch_add(1, Ordering::Relaxed);
        self.unmapped_bytes
            .fetch_add(length_bytes, Ordering::Relaxed);
    }

    pub fn snapshot(&self, backlog_bytes: u64) -> ReclaimStats {
        ReclaimStats {
            unmap_commands: self.unmap_commands.load(Ordering::Relaxed),
            unmapped_bytes: self.unmapped_bytes.load(Ordering::Relaxed),
            reclaimed_bytes: self.reclaimed_bytes.load(Ordering::Relaxed),
            backlog_bytes,
        }
    }
}

/// A container in memory.
pub(crate) struct ContainerShared {
    pub id: u64,
    pub name: String,
    pub created_unix_s: u64,
    pub policy: RwLock<ContainerPolicy>,
    /// The reclaim token bucket (bytes of dead data released).
    pub bucket: Mutex<TokenBucket>,
    /// Set by `reclaim --now` until the backlog is empty.
    pub draining: AtomicBool,
    /// Set while a delete decides whether the container is empty: a volume
    /// created into it meanwhile is refused (see `delete_container`).
    pub deleting: AtomicBool,
    pub counters: ReclaimCounters,
    pub window: Mutex<RateWindow>,
    /// Grains counted against the quota: thin volumes' data grains plus thick
    /// volumes' whole sizes (kept by [`crate::VolumeShared::sync_usage`]).
    pub used_grains: AtomicU64,
}

impl ContainerShared {
    pub fn new(rec: &ContainerRec, now: Duration) -> Self {
        ContainerShared {
            id: rec.id,
            name: rec.name.clone(),
            created_unix_s: rec.created_unix_s,
            policy: RwLock::new(rec.policy),
            bucket: Mutex::new(TokenBucket::new(
                rec.policy.reclaim.rate(),
                rec.policy.reclaim_burst_bytes,
                now,
            )),
            draining: AtomicBool::new(false),
            deleting: AtomicBool::new(false),
            counters: ReclaimCounters::default(),
            window: Mutex::new(RateWindow::new()),
            used_grains: AtomicU64::new(0),
        }
    }

    /// Moves a volume's contribution to the usage from `before` to `after` grains.
    pub fn add_used_grains(&self, after: u64, before: u64) {
        // Add first: the sum never dips below what other volumes contribute.
        self.used_grains.fetch_add(after, Ordering::SeqCst);
        self.used_grains.fetch_sub(before, Ordering::SeqCst);
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_grains.load(Ordering::SeqCst) * crate::GRAIN_BYTES
    }

    /// Refuses `more_bytes` of new usage the quota cannot take.
    pub fn check_quota(&self, more_bytes: u64) -> Result<()> {
        let Some(quota) = self.policy.read().quota_bytes else {
            return Ok(());
        };
        let used = self.used_bytes();
        if more_bytes > 0 && used.saturating_add(more_bytes) > quota {
            return Err(EngineError::NoSpace(format!(
                "container '{}' quota of {quota} bytes reached ({used} used, {more_bytes} more needed)",
                self.name
            )));
        }
        Ok(())
    }

    pub fn rec(&self) -> ContainerRec {
        ContainerRec {
            id: self.id,
            name: self.name.clone(),
            created_unix_s: self.created_unix_s,
            policy: *self.policy.read(),
        }
    }

    /// Records `bytes` of dead data released by the reclaimer.
    pub fn count_reclaimed(&self, bytes: u64, now: Duration) {
        if bytes == 0 {
            return;
        }
        self.counters
            .reclaimed_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        self.window.lock().record(now, bytes);
    }
}

/// Container names share the volume alphabet.
pub(crate) fn validate_container_name(name: &str) -> Result<()> {
    crate::names::validate_name(crate::names::NameKind::Container, name)
}

pub(crate) fn validate_policy(policy: &ContainerPolicy) -> Result<()> {
    if policy.quota_bytes == Some(0) {
        return Err(EngineError::InvalidArgument(
            "a quota of zero bytes would refuse every write: remove the quota instead".into(),
        ));
    }
    Ok(())
}

/// Loads the containers, creating `default` on first open.
pub(crate) fn load(
    db: &crate::meta::store::Kv,
    now: Duration,
) -> Result<BTreeMap<u64, Arc<ContainerShared>>> {
    let mut containers = BTreeMap::new();
    {
        let txn = db.begin_read()?;
        let table = txn.open_table(schema::CONTAINERS).map_err(kv_error)?;
        for item in table.iter().map_err(kv_error)? {
            let (_, json) = item.map_err(kv_error)?;
            let rec: ContainerRec = serde_json::from_slice(json.value())
                .map_err(|e| EngineError::Corruption(format!("container record: {e}")))?;
            containers.insert(rec.id, Arc::new(ContainerShared::new(&rec, now)));
        }
    }
    if !containers.contains_key(&DEFAULT_CONTAINER_ID) {
        let rec = ContainerRec {
            id: DEFAULT_CONTAINER_ID,
            name: DEFAULT_CONTAINER.to_string(),
            created_unix_s: crate::units::now_unix_s(),
            policy: ContainerPolicy::default(),
        };
        persist_at_open(db, &rec)?;
        containers.insert(rec.id, Arc::new(ContainerShared::new(&rec, now)));
    }
    Ok(containers)
}

/// Writes the default container's record at the array's first open, durably
/// (nothing else is written yet).
fn persist_at_open(db: &crate::meta::store::Kv, rec: &ContainerRec) -> Result<()> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)
        .map_err(kv_error)?;
    {
        let mut table = txn.open_table(schema::CONTAINERS).map_err(kv_error)?;
        insert_rec(&mut table, rec)?;
    }
    db.commit(txn, ChangedMappings::NONE)
}

pub(crate) fn insert_rec(
    table: &mut redb::Table<&'static str, &'static [u8]>,
    rec: &ContainerRec,
) -> Result<()> {
    let json = serde_json::to_vec(rec).expect("container record serialises");
    table
        .insert(rec.name.as_str(), &json[..])
        .map_err(kv_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::test_data::{data_dir, quiet_engine};
    use crate::Provisioning;

    /// An eradicated volume still listed as destroyed (the moment between the
    /// writer mutex handing its records to the reclaimer and its removal from
    /// the list) adds nothing to its container's backlog but its doomed
    /// records, however many of them the reclaimer has removed already, and
    /// nothing to its usage.
    #[test]
    fn a_volume_being_eradicated_counts_once_as_doomed() {
        let dir = data_dir("container-doomed-backlog");
        let engine = quiet_engine(dir.path(), 1 << 30);
        let grains = 64u64;
        engine
            .create_volume("v", grains * crate::GRAIN_BYTES)
            .unwrap();
        let volume = engine.open_volume("v").unwrap();
        let data =
            crate::testing::test_data::unique_bytes((grains * crate::GRAIN_BYTES) as usize, 9);
        volume.write(0, &data).unwrap();
        volume.flush().unwrap();
        drop(volume);
        engine.delete_volume("v").unwrap();
        let listed = engine.catalog.destroyed.read().get("v").cloned().unwrap();
        let container = listed.container.id;
        assert_eq!(
            engine.container_backlog_grains(container, std::slice::from_ref(&listed)),
            0,
            "destroyed, not yet doomed: nothing dead"
        );
        engine.eradicate_volume("v").unwrap();
        assert_eq!(
            engine.container_backlog_grains(container, std::slice::from_ref(&listed)),
            grains,
            "doomed: every record once"
        );
        // A step settling its data bits, begun before, puts no usage back.
        assert_eq!(listed.container.used_bytes(), 0);
        listed.sync_usage(Some(grains * crate::GRAIN_BYTES));
        assert_eq!(listed.container.used_bytes(), 0);
        // The reclaimer removes some of the doomed records.
        assert!(engine.background_step().unwrap());
        let left = engine.container_backlog_grains(container, &[]);
        assert!(left < grains, "the reclaimer took some ({left} left)");
        assert_eq!(
            engine.container_backlog_grains(container, std::slice::from_ref(&listed)),
            left
        );
        while engine.background_step().unwrap() {}
        assert_eq!(
            engine.container_backlog_grains(container, std::slice::from_ref(&listed)),
            0
        );
    }

    /// While a delete decides whether a container is empty, a volume created
    /// into it is refused; a delete refused for members leaves it usable.
    #[test]
    fn no_volume_is_created_into_a_container_being_deleted() {
        let dir = data_dir("container-delete");
        let engine = quiet_engine(dir.path(), 1 << 30);
        engine
            .create_container("c", ContainerPolicy::default())
            .unwrap();
        let shared = engine.container_named("c").unwrap();

        shared.deleting.store(true, Ordering::SeqCst);
        let refused = engine.create_volume_in("v", 1 << 20, Provisioning::Thin, "c");
        assert!(matches!(refused, Err(EngineError::ContainerNotFound(_))));
        shared.deleting.store(false, Ordering::SeqCst);

        engine
            .create_volume_in("v", 1 << 20, Provisioning::Thin, "c")
            .unwrap();
        assert!(engine.delete_container("c").is_err(), "it holds v");
        assert!(!shared.deleting.load(Ordering::SeqCst));
        engine
            .create_volume_in("w", 1 << 20, Provisioning::Thin, "c")
            .unwrap();
        engine.close().unwrap();
    }
}
