//! Target configuration: the target's name, portals, the limits it negotiates and enforces,
//! and timeouts.
//!
//! Why every limit is here with a unit in its name: each bounds memory or time that an
//! initiator could otherwise make the target spend, and the daemon and the tests must be
//! able to see and tighten them.

use std::net::SocketAddr;
use std::time::Duration;

/// Port IANA assigned to iSCSI.
pub const DEFAULT_PORT: u16 = 3260;
/// Default of [`TargetConfig::idle_poll`] (see `lacuna_sockpoll`).
pub use lacuna_sockpoll::DEFAULT_IDLE_POLL;
/// The one target portal group every portal of this target belongs to.
pub const PORTAL_GROUP_TAG: u16 = 1;

#[derive(Clone, Debug)]
pub struct TargetConfig {
    /// iSCSI qualified name of the one target; compared case-insensitively at login.
    pub target_name: String,
    /// Sent as TargetAlias at login of normal sessions when set.
    pub target_alias: Option<String>,
    /// Addresses the daemon binds ([`crate::bind_portals`]). SendTargets advertises the
    /// listeners actually served, which are these once bound.
    pub portals: Vec<SocketAddr>,
    /// Let initiators that the policy does not know log in (quick start). When false they
    /// are refused with login status 02/02.
    pub allow_unknown_initiators: bool,
    pub limits: Limits,
    pub timeouts: Timeouts,
    /// How long a connection polls its socket, once everything it was asked
    /// is answered, before it sleeps until the initiator sends again
    /// (`lacuna_sockpoll`). Zero never polls; at most [`crate::IDLE_POLL_MAX`].
    pub idle_poll: Duration,
    /// This portal's relative target port id (VPD 83h), which is also its ALUA target port
    /// group: 1 on a single array, the gateway's own on each gateway of a pool.
    pub relative_target_port: u16,
}

#[derive(Clone, Debug)]
pub struct Limits {
    /// MaxRecvDataSegmentLength this target declares: the largest data segment it accepts.
    pub max_recv_data_segment_bytes: u32,
    /// Largest MaxBurstLength accepted (numerical minimum with the initiator's offer).
    pub max_burst_bytes: u32,
    /// Largest FirstBurstLength accepted.
    pub first_burst_bytes: u32,
    /// Largest MaxOutstandingR2T accepted.
    pub max_outstanding_r2t: u16,
    /// Largest Data-Out a single command may gather (ExpectedDataTransferLength of a write).
    /// Larger writes end with CHECK CONDITION, ILLEGAL REQUEST, INVALID FIELD IN CDB; the
    /// SCSI layer's Block Limits VPD page should advertise at most this.
    pub max_write_transfer_bytes: u32,
    /// Commands a session may have between ExpCmdSN and MaxCmdSN (the CmdSN window).
    pub command_window: u32,
    /// Immediate (I bit) SCSI commands in flight per session beyond the window.
    pub immediate_commands_max: u32,
    /// Sessions across all portals.
    pub max_sessions: usize,
    /// TCP connections served at once across all portals, logging in or not;
    /// further ones wait in the listen backlog.
    pub max_connections: usize,
    /// Task management functions a connection may have running (waiting for
    /// the commands they abort); further ones are answered FUNCTION REJECTED.
    pub task_management_max: usize,
    /// Bytes of write data held for commands (gathering Data-Out, or waiting
    /// to run) across all sessions, and per session. A write that would go
    /// past either is answered TASK SET FULL (its data received and dropped),
    /// which initiators retry. Why: the CmdSN window and the transfer limit
    /// alone let one session hold 4 GiB.
    pub write_buffers_max_bytes: u64,
    pub session_write_buffers_max_bytes: u64,
    /// Commands of one session running on the blocking pool at once (SCSI
    /// work that may wait for a disk); more wait their turn. Why: the pool's
    /// threads are shared by every session and by NBD.
    pub session_pool_commands_max: usize,
    /// Longest text (login or text request, continuation PDUs included).
    pub text_max_bytes: usize,
    /// Offer ImmediateData=Yes.
    pub immediate_data: bool,
    /// Require InitialR2T=Yes (otherwise accept unsolicited Data-Out).
    pub initial_r2t: bool,
}

#[derive(Clone, Debug)]
pub struct Timeouts {
    /// Whole login phase of one connection.
    pub login: Duration,
    /// Idle time after which the target pings the initiator with a NOP-In.
    pub nop_in_interval: Duration,
    /// Time the initiator has to answer a ping before the connection is dropped.
    pub nop_in_timeout: Duration,
    /// Writing one PDU to the socket.
    pub write: Duration,
    /// After shutdown starts: time initiators get to log out before connections close.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_recv_data_segment_bytes: 256 * 1024,
            max_burst_bytes: 1024 * 1024,
            first_burst_bytes: 256 * 1024,
            max_outstanding_r2t: 8,
            max_write_transfer_bytes: 32 * 1024 * 1024,
            command_window: 128,
            immediate_commands_max: 16,
            max_sessions: 256,
            max_connections: 512,
            task_management_max: 16,
            write_buffers_max_bytes: 1 << 30,
            session_write_buffers_max_bytes: 256 << 20,
            session_pool_commands_max: 32,
            text_max_bytes: 64 * 1024,
            immediate_data: true,
            initial_r2t: false,
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            login: Duration::from_secs(15),
            nop_in_interval: Duration::from_secs(30),
            nop_in_timeout: Duration::from_secs(30),
            write: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(2),
        }
    }
}

impl TargetConfig {
    /// Configuration for an array: IQN derived from its name, portal 127.0.0.1:3260.
    pub fn for_array(array_name: &str) -> TargetConfig {
        TargetConfig {
            target_name: default_target_name(array_name),
            target_alias: Some(array_name.to_string()),
            portals: vec![SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT))],
            allow_unknown_initiators: false,
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            idle_poll: DEFAULT_IDLE_POLL,
            relative_target_port: 1,
        }
    }
}

/// `iqn.2024-01.org.lacuna:<array name>` with the name lowered and reduced to the characters
/// an IQN allows (letters, digits, '-', '.', ':').
pub fn default_target_name(array_name: &str) -> String {
    let suffix: String = array_name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let suffix = if suffix.is_empty() {
        "array".to_string()
    } else {
        suffix
    };
    format!("iqn.2024-01.org.lacuna:{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_name_is_a_valid_lowercase_iqn() {
        assert_eq!(
            default_target_name("Main Array_1"),
            "iqn.2024-01.org.lacuna:main-array-1"
        );
        assert_eq!(default_target_name(""), "iqn.2024-01.org.lacuna:array");
    }
}
