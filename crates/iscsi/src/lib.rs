//! iSCSI target transport (RFC 7143): PDUs, login and CHAP, sessions and connections,
//! turning SCSI Command PDUs into calls on a [`lacuna_scsi::target::ScsiTarget`].
