//! Which gateways a pool has: each keeps a record of itself, object
//! `gateway.<id>` of the [`NAMESPACE`] namespace, rewritten every third of
//! its lease whether it owns a shard or stands by, and removed when it stops
//! cleanly. A record not rewritten for two leases belongs to a gateway that
//! died or was fenced (the cluster refuses a fenced gateway's rewrites): it is
//! listed as gone until the gateway comes back or an operator removes it.
//!
//! The records are for people and tools (`lacuna gateway list`,
//! `GET /v1/gateways`); who may write a shard is decided by its owner lock
//! alone ([`crate::ownership`]), never by these.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lacuna_rados::{IoCtx, RadosError};
use serde::{Deserialize, Serialize};

/// The namespace of the gateway records, beside the shards' namespaces.
pub const NAMESPACE: &str = "gateways";
const PREFIX: &str = "gateway.";
/// Most gateway records a listing reads.
pub const MAX_GATEWAYS: usize = 256;
/// Largest record read back; a larger object is not a record.
const MAX_RECORD_BYTES: usize = 16 << 10;
/// Longest gateway id.
pub const MAX_GATEWAY_ID_BYTES: usize = 64;

/// What a gateway does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Connected, waiting to own a shard.
    Standby,
    /// Owns and serves its shard.
    Owner,
}

/// One gateway's record of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayRecord {
    pub gateway: String,
    /// Its cluster client's address (what fencing blocklists).
    pub address: String,
    pub role: Role,
    /// The shard it serves or stands by for (one per gateway process).
    #[serde(default = "first_shard")]
    pub shard: String,
    /// Where it serves: `api`, `nbd`, `iscsi` → `host:port`.
    pub portals: Vec<(String, String)>,
    pub pid: u32,
    pub started_unix_ms: u64,
    /// When the gateway last rewrote the record.
    pub seen_unix_ms: u64,
    pub lease_ms: u64,
    /// Its ALUA target port group, if it was given one.
    #[serde(default)]
    pub port_group: Option<u16>,
}

impl GatewayRecord {
    /// Whether the gateway rewrote its record within two leases of `now`.
    pub fn is_alive(&self, now_unix_ms: u64) -> bool {
        now_unix_ms.saturating_sub(self.seen_unix_ms) < 2 * self.lease_ms.max(1)
    }
}

/// The shard of records written before gateways named theirs.
fn first_shard() -> String {
    DEFAULT_SHARD.to_string()
}

/// The shard a gateway serves unless told another (`--shard`).
pub const DEFAULT_SHARD: &str = "shard-0";
/// Longest shard name.
pub const MAX_SHARD_NAME_BYTES: usize = 64;

/// Whether `shard` may name a shard (a RADOS namespace of the pool): 1 to
/// [`MAX_SHARD_NAME_BYTES`] lowercase letters, digits or `-`, starting with a
/// letter, and not the gateway records' [`NAMESPACE`].
pub fn valid_shard_name(shard: &str) -> bool {
    shard.len() <= MAX_SHARD_NAME_BYTES
        && shard.starts_with(|c: char| c.is_ascii_lowercase())
        && shard
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && shard != NAMESPACE
}

pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
}

fn object(gateway: &str) -> String {
    format!("{PREFIX}{gateway}")
}

/// Whether `gateway` may name a gateway: 1 to [`MAX_GATEWAY_ID_BYTES`]
/// letters, digits, `-`, `_` or `.`.
pub fn valid_gateway_id(gateway: &str) -> bool {
    !gateway.is_empty()
        && gateway.len() <= MAX_GATEWAY_ID_BYTES
        && gateway
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Writes `record` (stamped with the time now), replacing the previous one.
pub fn announce(io: &IoCtx, record: &mut GatewayRecord) -> Result<(), RadosError> {
    assert!(valid_gateway_id(&record.gateway), "{:?}", record.gateway);
    record.seen_unix_ms = now_unix_ms();
    let bytes = serde_json::to_vec(record).expect("a record serializes");
    assert!(bytes.len() <= MAX_RECORD_BYTES);
    io.write_full(&object(&record.gateway), &bytes)
}

/// Removes `gateway`'s record (a clean stop, or an operator's clean-up).
pub fn withdraw(io: &IoCtx, gateway: &str) -> Result<(), RadosError> {
    io.remove(&object(gateway))
}

/// Every gateway record of the pool, by id; objects that are not records
/// are skipped.
pub fn members(io: &IoCtx) -> Result<Vec<GatewayRecord>, RadosError> {
    let mut records = Vec::new();
    for name in io.list(MAX_GATEWAYS)? {
        if !name.starts_with(PREFIX) {
            continue;
        }
        let mut buf = vec![0u8; MAX_RECORD_BYTES];
        let read = match io.read(&name, 0, &mut buf) {
            Ok(read) => read,
            // Withdrawn since the listing.
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        if let Ok(record) = serde_json::from_slice::<GatewayRecord>(&buf[..read]) {
            records.push(record);
        }
    }
    records.sort_by(|a, b| a.gateway.cmp(&b.gateway));
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_alive_for_two_leases_and_ids_are_checked() {
        let record = GatewayRecord {
            gateway: "gw-a".into(),
            address: "127.0.0.1:0/1".into(),
            role: Role::Owner,
            shard: "shard-0".into(),
            portals: vec![("nbd".into(), "127.0.0.1:10809".into())],
            pid: 1,
            started_unix_ms: 1_000,
            seen_unix_ms: 10_000,
            lease_ms: 3_000,
            port_group: Some(2),
        };
        assert!(record.is_alive(10_000));
        assert!(record.is_alive(15_999));
        assert!(!record.is_alive(16_000));
        let text = serde_json::to_string(&record).unwrap();
        assert!(text.contains("\"role\":\"owner\""), "{text}");
        assert_eq!(
            serde_json::from_str::<GatewayRecord>(&text).unwrap(),
            record
        );
        assert!(valid_gateway_id("gw-a.1_b"));
        assert!(!valid_gateway_id(""));
        assert!(!valid_gateway_id("a/b"));
        assert!(!valid_gateway_id(&"a".repeat(MAX_GATEWAY_ID_BYTES + 1)));
    }

    #[test]
    fn shard_names_are_namespaces_of_their_own_and_old_records_name_the_first() {
        assert!(valid_shard_name("shard-0"));
        assert!(valid_shard_name("gold-tier-2"));
        for bad in ["", "0shard", "Shard", "a_b", "a.b", "gateways", "-a"] {
            assert!(!valid_shard_name(bad), "{bad}");
        }
        assert!(!valid_shard_name(&"a".repeat(MAX_SHARD_NAME_BYTES + 1)));
        let old = r#"{"gateway":"gw-a","address":"x","role":"standby","shards":[],"portals":[],
            "pid":1,"started_unix_ms":1,"seen_unix_ms":1,"lease_ms":3000}"#;
        let record: GatewayRecord = serde_json::from_str(old).unwrap();
        assert_eq!(record.shard, DEFAULT_SHARD);
    }
}
