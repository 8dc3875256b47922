//! The connections open now, for the hosts page: who is connected, over which
//! protocol, to what.
//!
//! The NBD adapter registers each opened export here and the registration
//! ends when the export is dropped (the connection's end). iSCSI sessions are
//! not kept here: the SCSI core knows its I_T nexuses, and the daemon lists
//! those beside these.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::io::Protocol;

/// Most connections listed; the transports' own connection limits are lower.
pub const MAX_LISTED_CONNECTIONS: usize = 65_536;

/// One live session or connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LiveSession {
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub protocol: Protocol,
    /// The host it is known as; null for an anonymous NBD client or an initiator of no host
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub host: Option<String>,
    /// iSCSI: the initiator port (`IQN,i,0xISID`); NBD: the client's address
    pub initiator: String,
    /// NBD: the export opened; null for iSCSI (the session reaches the host's LUNs)
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub export: Option<String>,
    /// When it opened, seconds since the Unix epoch; null when not known
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub since_unix_s: Option<u64>,
}

#[derive(Default)]
struct Table {
    open: Mutex<BTreeMap<u64, LiveSession>>,
    next_id: AtomicU64,
}

/// The registered connections.
#[derive(Default, Clone)]
pub struct Connections {
    table: Arc<Table>,
}

/// A registration; dropping it ends it.
pub struct ConnectionGuard {
    table: Arc<Table>,
    id: Option<u64>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.table.open.lock().remove(&id);
        }
    }
}

impl Connections {
    /// Registers `session` until the guard is dropped (not listed when the
    /// table is full).
    pub fn open(&self, session: LiveSession) -> ConnectionGuard {
        let mut open = self.table.open.lock();
        let id = (open.len() < MAX_LISTED_CONNECTIONS).then(|| {
            let id = self.table.next_id.fetch_add(1, Ordering::Relaxed);
            open.insert(id, session);
            id
        });
        ConnectionGuard {
            table: self.table.clone(),
            id,
        }
    }

    /// Open connections, oldest first.
    pub fn list(&self) -> Vec<LiveSession> {
        self.table.open.lock().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_listed_until_its_guard_is_dropped() {
        let connections = Connections::default();
        let session = |export: &str| LiveSession {
            protocol: Protocol::Nbd,
            host: Some("alpha".into()),
            initiator: "127.0.0.1:5000".into(),
            export: Some(export.into()),
            since_unix_s: Some(1),
        };
        let first = connections.open(session("a"));
        let second = connections.open(session("b"));
        assert_eq!(connections.list().len(), 2);
        drop(first);
        assert_eq!(connections.list(), vec![session("b")]);
        drop(second);
        assert!(connections.list().is_empty());
    }
}
