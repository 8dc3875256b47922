//! Lacuna's stores on Ceph RADOS (docs/SCALE-OUT.md): the metadata database's
//! file striped over objects ([`striped`]) and the segment log as objects
//! ([`segments`]), both in one shard's namespace ([`shard_store`] joins them
//! into what the engine opens), who may write a shard ([`ownership`]), and
//! which gateways the pool has ([`membership`]), and the array's own small
//! files that must move with the shard ([`array_files`]).
//! The engine knows nothing of them: it takes a `redb::StorageBackend` and a
//! `SegmentStore`, and these are RADOS's.

pub mod array_files;
pub mod membership;
pub mod ownership;
pub mod segments;
pub mod striped;

use std::sync::Arc;

pub use segments::RadosSegmentStore;
pub use striped::StripedBackend;

/// The engine's storage for the shard in `io`'s namespace: segments as
/// objects, the metadata file as `meta.*` stripes.
pub fn shard_store(
    io: Arc<lacuna_rados::IoCtx>,
    description: &str,
) -> lacuna_engine::ExternalStore {
    let meta_io = io.clone();
    let segments = Arc::new(RadosSegmentStore::new(io));
    let drained = Arc::downgrade(&segments);
    // Metadata pages go to the cluster only after the appends sent before
    // them: a page may name any of them.
    let before_send: striped::BeforeSend = Arc::new(move || match drained.upgrade() {
        Some(segments) => segments.drain(),
        None => Ok(()),
    });
    lacuna_engine::ExternalStore {
        segments,
        metadata: Arc::new(move || {
            let backend = StripedBackend::open(meta_io.clone(), "meta")?
                .with_before_send(before_send.clone());
            Ok(Box::new(backend) as Box<dyn redb::StorageBackend>)
        }),
        description: description.to_string(),
    }
}
