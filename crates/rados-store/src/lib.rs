//! Lacuna's stores on Ceph RADOS (docs/SCALE-OUT.md): the metadata database's
//! file striped over objects ([`striped`]); the segment store comes next.
//! The engine knows nothing of them: it takes a `redb::StorageBackend` and a
//! `SegmentStore`, and these are RADOS's.

pub mod striped;

pub use striped::StripedBackend;
