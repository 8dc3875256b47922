//! What the volume pages read, kept for a few seconds and shared by every
//! session.
//!
//! Why: a volume's physical figures are one scan of its mappings (and a
//! commit of the writes pending), so a page that lists volumes costs the data
//! path in proportion to what is written. Browsers left open on the volumes
//! page reload it; with this cache the array pays at most one listing per
//! [`MAX_AGE`], however many of them there are. An action done from the
//! dashboard empties it, so its result shows at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lacuna_engine::{ContainerInfo, VolumeInfo};

/// How old a listing the pages may show.
pub const MAX_AGE: Duration = Duration::from_secs(5);
/// Volumes whose page is kept.
const MAX_VOLUMES_KEPT: usize = 64;

/// Live volumes, destroyed volumes, containers.
pub type Listing = (Vec<VolumeInfo>, Vec<VolumeInfo>, Vec<ContainerInfo>);

#[derive(Default)]
struct Kept {
    listing: Option<(Instant, Arc<Listing>)>,
    volumes: HashMap<String, (Instant, Arc<VolumeInfo>)>,
}

/// One at a time: a page that finds nothing fresh reads while the others
/// wait for what it read.
#[derive(Default)]
pub struct PageCache {
    kept: tokio::sync::Mutex<Kept>,
}

impl PageCache {
    /// The listing, read with `read` when none is fresh.
    pub async fn listing<E>(
        &self,
        read: impl std::future::Future<Output = Result<Listing, E>>,
    ) -> Result<Arc<Listing>, E> {
        let mut kept = self.kept.lock().await;
        if let Some((at, listing)) = &kept.listing {
            if at.elapsed() < MAX_AGE {
                return Ok(listing.clone());
            }
        }
        let listing = Arc::new(read.await?);
        kept.listing = Some((Instant::now(), listing.clone()));
        Ok(listing)
    }

    /// One volume, read with `read` when it is not fresh.
    pub async fn volume<E>(
        &self,
        name: &str,
        read: impl std::future::Future<Output = Result<VolumeInfo, E>>,
    ) -> Result<Arc<VolumeInfo>, E> {
        let mut kept = self.kept.lock().await;
        if let Some((at, info)) = kept.volumes.get(name) {
            if at.elapsed() < MAX_AGE {
                return Ok(info.clone());
            }
        }
        let info = Arc::new(read.await?);
        kept.volumes.retain(|_, (at, _)| at.elapsed() < MAX_AGE);
        if kept.volumes.len() < MAX_VOLUMES_KEPT {
            kept.volumes
                .insert(name.to_string(), (Instant::now(), info.clone()));
        }
        Ok(info)
    }

    /// Forgets everything (after an action).
    pub async fn clear(&self) {
        let mut kept = self.kept.lock().await;
        kept.listing = None;
        kept.volumes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fresh_listing_is_read_once_and_an_action_reads_it_again() {
        let cache = PageCache::default();
        let reads = std::sync::atomic::AtomicU64::new(0);
        let read = || async {
            reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<Listing, ()>((Vec::new(), Vec::new(), Vec::new()))
        };
        cache.listing(read()).await.unwrap();
        cache.listing(read()).await.unwrap();
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 1);
        cache.clear().await;
        cache.listing(read()).await.unwrap();
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert!(
            cache
                .listing(async { Err::<Listing, _>("x") })
                .await
                .is_ok(),
            "still fresh"
        );
    }
}
