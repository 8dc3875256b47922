//! The SCSI layer: SPC-5 / SBC-4 commands, sense data, unit attentions and reservations,
//! on top of a storage [`backend`] and below any transport.
//!
//! It knows nothing of sockets or PDUs: a transport (iSCSI today) turns its wire format into
//! [`target::Command`]s on an [`target::ItNexus`] and hands them to a [`target::ScsiTarget`].
//! It knows nothing of segments or mappings either: storage is reached through the traits in
//! [`backend`], which the daemon implements over the engine. [`ScsiCore`] is the device
//! server; [`memory`] is the reference backend for tests and conformance runs. LUNs cross
//! the boundary as the 8-byte field the transport received ([`lun::Lun`]); the SCSI layer
//! decodes them, two-level LUNs of logical unit conglomerates (vVols bound beneath a
//! protocol endpoint) included.

pub mod backend;
pub mod lun;
pub mod memory;
pub mod port_groups;
pub mod sense;
pub mod target;

mod block;
mod capacity;
mod caw;
mod commands;
mod data_in;
mod data_out;
mod dispatch;
mod inquiry;
mod lun_map;
mod medium;
mod mode;
mod provisioning;
mod range_lock;
mod report;
mod reservation;
mod rw;
mod sanitize;
mod unit_attention;
mod unit_state;
mod xcopy;

pub use block::MAX_TRANSFER_BYTES;
pub use dispatch::{Identity, ScsiCore};
