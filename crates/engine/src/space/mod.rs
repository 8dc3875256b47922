//! Space and its policies: provisioning types and their reservations
//! (`provisioning`), storage containers with their quota, reclaim and
//! reduction policy and usage counters (`container`), the data bitmap of each
//! volume (`data_bitmap`), the rate control background work runs under
//! (`rate`), the reports the control plane reads (`report`), and the figures
//! read without the writer mutex (`watch`).
//!
//! Does no I/O and commits no metadata: container changes are committed by
//! `crate::containers`, dead data is freed by `reclaim`.
//!
//! May use: `meta`, `segment`, `names`, `units`.

pub mod container;
pub mod data_bitmap;
pub mod provisioning;
pub mod rate;
pub mod report;
pub(crate) mod watch;
