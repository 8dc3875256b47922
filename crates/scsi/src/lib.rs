//! The SCSI layer: SPC-5 / SBC-4 commands, sense data, unit attentions and reservations,
//! on top of a storage [`backend`] and below any transport.
//!
//! It knows nothing of sockets or PDUs: a transport (iSCSI today) turns its wire format into
//! [`target::Command`]s on an [`target::ItNexus`] and hands them to a [`target::ScsiTarget`].
//! It knows nothing of segments or mappings either: storage is reached through the traits in
//! [`backend`], which the daemon implements over the engine.

pub mod target;
