//! Who may write a shard: an exclusive lock with a lease on the shard's
//! `owner` object, and fencing of the previous owner at the OSDs before a new
//! one reads or writes anything (docs/SCALE-OUT.md, "Who may write").
//!
//! The lock alone is not enough: a lease ends on the OSD's clock, and an owner
//! that stalled (a long pause, a partition) may still send writes after it.
//! So the owner also records its RADOS address in the `owner` object's data,
//! and whoever takes the lock next blocklists that address and waits for the
//! OSD map carrying the entry before it touches the shard: every OSD then
//! refuses the old owner's ops from the moment it serves one of the new
//! owner's. The old owner learns it lost when a renewal fails, and stops.

use std::sync::Arc;
use std::time::Duration;

use lacuna_rados::{Cluster, IoCtx, RadosError, Result};

/// The object and lock names in a shard's namespace.
pub const OWNER_OBJECT: &str = "owner";
pub const OWNER_LOCK: &str = "lacuna-owner";
/// How long a blocklist entry lasts: far longer than any process that was
/// fenced can linger.
pub const BLOCKLIST_EXPIRY: Duration = Duration::from_secs(3600);

/// What the `owner` object records of the owner that took it last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRecord {
    pub gateway: String,
    pub address: String,
}

impl OwnerRecord {
    fn encode(&self) -> Vec<u8> {
        format!("gateway={}\naddress={}\n", self.gateway, self.address).into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<OwnerRecord> {
        let text = std::str::from_utf8(bytes).ok()?;
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_string)
        };
        Some(OwnerRecord {
            gateway: field("gateway")?,
            address: field("address")?,
        })
    }
}

/// Reads the record of the shard's last owner, if any.
pub fn last_owner(io: &IoCtx) -> Result<Option<OwnerRecord>> {
    let mut buf = vec![0u8; 4096];
    match io.read(OWNER_OBJECT, 0, &mut buf) {
        Ok(n) => Ok(OwnerRecord::decode(&buf[..n])),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Ownership of one shard, held by renewing its lease.
pub struct Ownership {
    cluster: Arc<Cluster>,
    io: Arc<IoCtx>,
    gateway: String,
    lease: Duration,
    /// The owner this one fenced when it took the shard, if there was one.
    pub fenced: Option<OwnerRecord>,
}

impl Ownership {
    /// Takes the shard in `io`'s namespace for `gateway`, if no other owner's
    /// lease is running (an error that [`RadosError::is_busy`] otherwise).
    /// The previous owner, if another, is blocklisted before this returns.
    pub fn try_take(
        cluster: Arc<Cluster>,
        io: Arc<IoCtx>,
        gateway: &str,
        lease: Duration,
    ) -> Result<Ownership> {
        io.lock_exclusive(
            OWNER_OBJECT,
            OWNER_LOCK,
            gateway,
            "lacuna shard owner",
            lease,
        )?;
        let me = OwnerRecord {
            gateway: gateway.to_string(),
            address: cluster.address()?,
        };
        let previous = last_owner(&io)?;
        let fenced = match previous {
            Some(previous) if previous.address != me.address => {
                cluster.blocklist(&previous.address, BLOCKLIST_EXPIRY)?;
                Some(previous)
            }
            _ => None,
        };
        io.write_full(OWNER_OBJECT, &me.encode())?;
        Ok(Ownership {
            cluster,
            io,
            gateway: gateway.to_string(),
            lease,
            fenced,
        })
    }

    /// Renews the lease. An error means the shard is no longer this
    /// gateway's (another took it, or the cluster fenced this client): stop
    /// all I/O to it at once.
    pub fn renew(&self) -> Result<()> {
        self.io.lock_exclusive(
            OWNER_OBJECT,
            OWNER_LOCK,
            &self.gateway,
            "lacuna shard owner",
            self.lease,
        )
    }

    /// Gives the shard up (a clean stop): another gateway may take it at once,
    /// and need not fence this one.
    pub fn release(&self) -> Result<()> {
        let me = OwnerRecord {
            gateway: self.gateway.clone(),
            address: self.cluster.address()?,
        };
        // Only our own record is cleared; a later owner's stays.
        if last_owner(&self.io)? == Some(me) {
            self.io.write_full(OWNER_OBJECT, b"")?;
        }
        self.io.unlock(OWNER_OBJECT, OWNER_LOCK, &self.gateway)
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }
}

/// Whether `error` says this client lost the shard (as opposed to a passing
/// failure worth a retry within the lease).
pub fn lost_ownership(error: &RadosError) -> bool {
    error.is_blocklisted() || error.is_busy()
}

#[cfg(test)]
mod tests {
    use super::OwnerRecord;

    #[test]
    fn the_owner_record_reads_back_and_garbage_is_no_record() {
        let record = OwnerRecord {
            gateway: "gw-1".into(),
            address: "127.0.0.1:0/42".into(),
        };
        assert_eq!(OwnerRecord::decode(&record.encode()), Some(record));
        assert_eq!(OwnerRecord::decode(b""), None);
        assert_eq!(OwnerRecord::decode(b"gateway=x\n"), None);
        assert_eq!(OwnerRecord::decode(&[0xff, 0xfe]), None);
    }
}
