//! iSCSI target transport (RFC 7143): PDUs, login and CHAP, sessions and connections,
//! turning SCSI Command PDUs into calls on a [`lacuna_scsi::target::ScsiTarget`].
//!
//! Entry point: [`serve`] with the listeners of every portal, the SCSI target, an
//! [`AccessPolicy`] and a [`TargetConfig`]. ErrorRecoveryLevel is 0: any protocol error the
//! RFC cannot answer with a Reject ends the connection, and with it the session.

pub mod chap;
pub mod config;
mod connection;
pub mod discovery;
pub mod login;
mod outbound;
pub mod pdu;
mod placement;
pub mod policy;
mod server;
pub mod session;
pub mod text;

pub use config::{default_target_name, Limits, TargetConfig, Timeouts, DEFAULT_PORT};
pub use lacuna_sockpoll::IDLE_POLL_MAX;
pub use policy::{AccessPolicy, ChapCredentials, ChapRequirement, OpenAccess};
pub use server::{bind_portals, serve};
